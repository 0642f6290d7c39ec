//! The progress board: what every agent of a run is doing, built from events, and
//! rendered as text by pure functions (a live tree on a terminal, one plain line per
//! lifecycle event elsewhere, and a summary table at the end).
//!
//! The board's state is in `board`, its renderings in `render`, and the short forms
//! both use (a tool call in a few words, tokens, elapsed time, colors) in `text`.
//! When and where it is drawn is [`super::display`]'s business.

mod board;
mod render;
#[cfg(test)]
pub(crate) mod test_events;
mod text;

pub use self::board::Isolated;
pub use self::board::{Board, Row, State};
pub use self::render::{checkouts, files_changed, plain_line, render_row, state_text, summary};
pub use self::text::{clock, count, dollars, paint, short_call, tokens};
