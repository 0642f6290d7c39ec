//! The CLI's progress display: the board fed with events and drawn as a live tree
//! (indicatif) on a terminal, or as one plain line per lifecycle event elsewhere,
//! plus role-file reports and the closing summary. What each row says is pure
//! rendering in [`super::progress`]; this owns when and where it is drawn, and that
//! every row and line is shown as a [`Shown::Line`] (a tool's arguments are the
//! model's text).

use std::io::Write;

use super::escape::{Shown, visible};
use super::progress;
use crate::protocol::Event;
use crate::roles::watch::Reload;

/// How progress is shown.
#[derive(Clone, Debug)]
pub enum Progress {
    /// A live tree, one bar per agent, drawn on this (stderr, a terminal); the
    /// permission prompt pauses it while it asks.
    Live(indicatif::MultiProgress),
    /// One plain line per lifecycle event on stderr.
    Plain,
    /// Nothing (`--json`, `--quiet`).
    Off,
}

/// The progress display of one run: the board and its rendering. The CLI feeds
/// it a run's events; the fan-out bench drives the same code.
#[derive(Debug)]
pub struct Display {
    mode: Progress,
    /// Role colors for the live tree; empty when colors are off (NO_COLOR).
    colors: std::collections::HashMap<String, String>,
    board: progress::Board,
    started: std::time::Instant,
    multi: indicatif::MultiProgress,
    /// The bars of the first rows, as many as the terminal shows: indicatif draws
    /// a tree from its top and leaves out what does not fit, so a row below is
    /// never seen while the run lasts (the final tree shows every row), and a
    /// bar for it would cost every frame its drawing all the same.
    bars: Vec<indicatif::ProgressBar>,
    /// Whether each bar is drawn as ended (no spinner).
    ended: Vec<bool>,
    /// How many rows the terminal shows, looked up again at every refresh (none
    /// when the tree is not live).
    fits: usize,
    /// Warnings said already (each is said once a run).
    warned: std::collections::HashSet<String>,
    /// Where its rows' labels go, for the questions that name their agent.
    names: Option<super::names::Names>,
}

impl Display {
    /// A display in `mode`, rows painted in their role's color from `colors`
    /// (empty: no colors).
    pub fn new(mode: Progress, colors: std::collections::HashMap<String, String>) -> Self {
        // Only a live tree has bars, and so a terminal's height to ask for.
        let (multi, fits) = match &mode {
            Progress::Live(multi) => (multi.clone(), terminal_rows()),
            Progress::Plain | Progress::Off => {
                let hidden = indicatif::ProgressDrawTarget::hidden();
                (indicatif::MultiProgress::with_draw_target(hidden), 0)
            }
        };
        Self {
            mode,
            colors,
            board: progress::Board::new(),
            started: std::time::Instant::now(),
            multi,
            bars: Vec::new(),
            ended: Vec::new(),
            fits,
            warned: std::collections::HashSet::new(),
            names: None,
        }
    }

    /// The same, naming agents where `earlier` (the run's board before it)
    /// left off, so an agent keeps its label and numbers go on.
    pub fn following(mut self, earlier: &progress::Board) -> Self {
        self.board = progress::Board::following(earlier);
        self
    }

    /// The same, recording its rows' labels in `names`.
    pub fn naming(mut self, names: Option<super::names::Names>) -> Self {
        if let Some(names) = &names {
            names.followed();
        }
        self.names = names;
        self
    }

    /// The board the events built.
    pub fn board(&self) -> &progress::Board {
        &self.board
    }

    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// Takes `event` into the board and shows what it changed: the rows it
    /// touched on the live tree, or its plain line on `err`. Whether it said
    /// a warning.
    pub fn show(&mut self, event: &Event, err: &mut dyn Write) -> bool {
        use crate::protocol::EventKind;
        let mut said = false;
        let warning = match &event.kind {
            EventKind::Shared { reason } => {
                vec![format!("sub-agents share the workspace: {reason}")]
            }
            EventKind::Isolated { lacks, .. } => lacks
                .iter()
                .map(|lack| format!("a private checkout is partial: {lack}"))
                .collect(),
            // A prompt or message (typed, or sent from another terminal)
            // that a prompt hook kept from its agent: said each time.
            EventKind::HookRan {
                event: hook,
                decision,
                reason,
                ..
            } if hook == "UserPromptSubmit" && matches!(decision.as_str(), "block" | "stop") => {
                let line = format!(
                    "a UserPromptSubmit hook refused a message for {}: {}",
                    event.agent,
                    reason.as_deref().unwrap_or("no reason given")
                );
                self.warn(&line, err);
                said = true;
                vec![]
            }
            // A hook's failure or message is the person's to see, also on
            // the live tree and with --quiet (plain lines say it already).
            EventKind::HookRan {
                notice: Some(notice),
                ..
            } if !matches!(self.mode, Progress::Plain) => vec![notice.clone()],
            _ => Vec::new(),
        };
        for line in warning {
            if self.warned.insert(line.clone()) {
                self.warn(&line, err);
                said = true;
            }
        }
        // With nothing shown, the board is kept only to name the agents
        // that questions come from.
        if matches!(self.mode, Progress::Off) && self.names.is_none() {
            return said;
        }
        let rows = self.board.rows().len();
        let Some(index) = self.board.apply(event, self.started.elapsed()) else {
            return said;
        };
        if let Some(names) = &self.names
            && index >= rows
        {
            let row = &self.board.rows()[index];
            names.record(row.session, &row.label, row.parent);
        }
        let now = self.now_ms();
        match self.mode {
            Progress::Plain => {
                if let Some(line) = progress::plain_line(&self.board, index, event, now) {
                    let _ = writeln!(err, "{}", visible(&line, Shown::Line));
                }
            }
            Progress::Live(_) => {
                // Only the rows the event changed are drawn again: redrawing the
                // whole tree for each event costs a fan-out of n sub-agents n²
                // rows. The spinners turn with the refresh, not on a thread of
                // their own per bar.
                let added = index >= rows;
                self.add_bars(now);
                for i in self.board.changed_by(index, added) {
                    if i < self.bars.len() {
                        self.draw(i, now);
                    }
                }
            }
            Progress::Off => {}
        }
        said
    }

    /// Shows what a reload of the role files found, above the live tree or as
    /// plain lines (also under `--json` and `--quiet`: stdout stays clean).
    pub(crate) fn reloaded(&self, reload: &Reload, err: &mut dyn Write) {
        for line in reload.problems.iter().chain(&reload.warnings) {
            self.warn(line, err);
        }
    }

    /// Says `line` as a warning, above the live tree or as a plain line.
    fn warn(&self, line: &str, err: &mut dyn Write) {
        let said = format!("orchestrate: warning: {line}");
        let line = visible(&said, Shown::Line);
        match &self.mode {
            Progress::Live(multi) => {
                let _ = multi.println(line);
            }
            Progress::Plain | Progress::Off => {
                let _ = writeln!(err, "{line}");
            }
        }
    }

    /// Redraws the rows still running, whose elapsed times and countdowns move
    /// on their own, and turns their spinners; an ended row's text stays as it
    /// was drawn.
    pub fn refresh(&mut self) {
        let now = self.now_ms();
        if matches!(self.mode, Progress::Live(_)) {
            self.fits = terminal_rows();
            self.add_bars(now);
        }
        for i in 0..self.bars.len() {
            if self.board.rows()[i].ended_ms.is_none() {
                self.draw(i, now);
                self.bars[i].tick();
            }
        }
    }

    /// Adds bars for the rows that have none and fit on the terminal, each
    /// drawn at once.
    fn add_bars(&mut self, now: u64) {
        let wanted = self.board.rows().len().min(self.fits);
        while self.bars.len() < wanted {
            let bar = self.multi.add(indicatif::ProgressBar::new_spinner());
            self.bars.push(bar);
            self.ended.push(false);
            self.draw(self.bars.len() - 1, now);
        }
    }

    /// Row `i` as of `now`, the model's text in it made visible.
    fn row_text(&self, i: usize, now: u64) -> String {
        visible(&progress::render_row(&self.board, i, now), Shown::Line).into_owned()
    }

    /// Redraws row `i` as of `now`. An ended row loses its spinner; its bar is
    /// not finished, which would draw the whole tree at once (every ended row of a
    /// fan-out of n: n² rows), but only told its last text, drawn with the next
    /// frame.
    fn draw(&mut self, i: usize, now: u64) {
        // Rows are drawn on the terminal directly, not through the CLI's writers,
        // in their role's color.
        let mut row = self.row_text(i, now);
        if let Some(color) = self.colors.get(&self.board.rows()[i].role) {
            row = progress::paint(&row, color);
        }
        let ended = self.board.rows()[i].ended_ms.is_some();
        if ended != self.ended[i] {
            let style = if ended {
                ended_style()
            } else {
                indicatif::ProgressStyle::default_spinner()
            };
            self.bars[i].set_style(style);
            self.ended[i] = ended;
        }
        self.bars[i].set_message(row);
    }

    /// Says `text` (whole lines) to the person: above the live tree, which
    /// would otherwise draw over it, or as it is.
    pub fn say(&mut self, text: &str, err: &mut dyn Write) {
        match self.mode {
            Progress::Live(_) if !self.bars.is_empty() => {
                for line in text.lines() {
                    let _ = self.multi.println(visible(line, Shown::Line));
                }
            }
            _ => {
                let _ = write!(err, "{text}");
            }
        }
    }

    /// Takes the live tree off the screen, for what comes in its place (an
    /// interactive session's answer); a plain display has nothing on it.
    pub fn clear(&mut self) {
        if matches!(self.mode, Progress::Live(_)) {
            let _ = self.multi.clear();
            self.multi
                .set_draw_target(indicatif::ProgressDrawTarget::hidden());
            for bar in &self.bars {
                bar.finish_and_clear();
            }
        }
    }

    /// Leaves the final tree, then the summary table when there were sub-agents.
    pub fn finish(&mut self, err: &mut dyn Write) {
        if matches!(self.mode, Progress::Off) {
            return;
        }
        if matches!(self.mode, Progress::Live(_)) {
            // Finishing the bars one by one would draw the tree once for each:
            // it is cleared, its bars finished out of sight, and the final tree
            // written once, every row as its bar showed it (through the CLI's
            // writer, which shows every escape sequence as text: without the
            // roles' colors).
            let _ = self.multi.clear();
            self.multi
                .set_draw_target(indicatif::ProgressDrawTarget::hidden());
            for bar in &self.bars {
                bar.finish();
            }
            let now = self.now_ms();
            for i in 0..self.board.rows().len() {
                let _ = writeln!(err, "  {}", self.row_text(i, now));
            }
        }
        // On a terminal the final tree written above says it all: the table
        // would only repeat it.
        if self.board.rows().len() > 1 && matches!(self.mode, Progress::Plain) {
            let _ = write!(err, "\n{}", progress::summary(&self.board, self.now_ms()));
        }
        let files = progress::files_changed(&self.board);
        if !files.is_empty() {
            let _ = write!(err, "\n{files}");
        }
        let checkouts = progress::checkouts(&self.board);
        if !checkouts.is_empty() {
            let _ = write!(err, "\n{checkouts}");
        }
    }
}

/// How many rows the terminal on stderr shows, less one for the line after the
/// tree; 50 when it cannot tell.
fn terminal_rows() -> usize {
    let size = rustix::termios::tcgetwinsize(std::io::stderr()).ok();
    match size.map(|s| usize::from(s.ws_row)) {
        Some(rows) if rows > 1 => rows - 1,
        _ => 50,
    }
}

/// An ended row's style: its text where the spinner was, as a finished spinner
/// shows it.
fn ended_style() -> indicatif::ProgressStyle {
    indicatif::ProgressStyle::with_template("  {msg}")
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner())
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::protocol::{EventKind, SessionId};
    use crate::ui::progress::test_events::started;

    /// Each event draws only the rows it changed, yet every row ends up as a
    /// redraw of the whole tree would show it: the branch marks of two parents'
    /// children, started interleaved, included.
    #[test]
    fn drawing_only_the_changed_rows_leaves_the_tree_as_a_full_redraw_would() {
        let hidden = indicatif::ProgressDrawTarget::hidden;
        let multi = indicatif::MultiProgress::with_draw_target(hidden());
        let mut display = Display::new(Progress::Live(multi), HashMap::new());
        let (lead, helper) = (SessionId::new(), SessionId::new());
        let mut sink = Vec::new();
        display.show(&started(lead, None, "orchestrator"), &mut sink);
        display.show(&started(SessionId::new(), Some(lead), "worker"), &mut sink);
        display.show(&started(helper, Some(lead), "helper"), &mut sink);
        for parent in [lead, helper, lead, helper] {
            display.show(
                &started(SessionId::new(), Some(parent), "worker"),
                &mut sink,
            );
        }
        let rows = display.board.rows();
        assert_eq!(rows.len(), 7);
        let now = display.now_ms();
        let label = |row: &str| row.chars().take(16).collect::<String>();
        for (i, bar) in display.bars.iter().enumerate() {
            let full = progress::render_row(&display.board, i, now);
            assert_eq!(label(&bar.message()), label(&full), "row {i}");
        }
        let marks: String = (display.bars.iter())
            .map(|bar| bar.message().chars().next().unwrap_or(' '))
            .collect();
        assert_eq!(marks, "o├├├├└└");
        assert!(sink.is_empty(), "the rows are drawn, not written");
        // The end writes the final tree once, each row as its bar showed it.
        let shown: Vec<String> = display.bars.iter().map(|b| b.message()).collect();
        display.finish(&mut sink);
        let tree = String::from_utf8(sink).unwrap();
        let lines: Vec<&str> = tree.lines().take(7).collect();
        for (line, shown) in lines.iter().zip(&shown) {
            assert_eq!(label(line.strip_prefix("  ").unwrap()), label(shown));
        }
        assert_eq!(lines.len(), 7);
        assert!(display.bars.iter().all(indicatif::ProgressBar::is_finished));
    }

    /// A role's color is drawn in its live row, but the final tree goes through
    /// the CLI's writer, which would show the color's escape as text: it is
    /// written plain.
    #[test]
    fn the_final_tree_is_written_without_the_roles_colors() {
        let hidden = indicatif::ProgressDrawTarget::hidden;
        let multi = indicatif::MultiProgress::with_draw_target(hidden());
        let colors = HashMap::from([("orchestrator".to_owned(), "purple".to_owned())]);
        let mut display = Display::new(Progress::Live(multi), colors);
        let mut sink = Vec::new();
        display.show(&started(SessionId::new(), None, "orchestrator"), &mut sink);
        assert!(
            display.bars[0]
                .message()
                .starts_with("\x1b[35morchestrator")
        );
        display.finish(&mut sink);
        assert!(
            String::from_utf8(sink)
                .unwrap()
                .starts_with("  orchestrator ")
        );
    }

    /// Only the rows the terminal shows get bars, however many agents start; the
    /// final tree still lists every one of them.
    #[test]
    fn a_fan_out_taller_than_the_terminal_draws_only_the_rows_that_fit() {
        let hidden = indicatif::ProgressDrawTarget::hidden;
        let multi = indicatif::MultiProgress::with_draw_target(hidden());
        let mut display = Display::new(Progress::Live(multi), HashMap::new());
        display.fits = 3;
        let lead = SessionId::new();
        let mut sink = Vec::new();
        display.show(&started(lead, None, "orchestrator"), &mut sink);
        for _ in 0..9 {
            display.show(&started(SessionId::new(), Some(lead), "worker"), &mut sink);
        }
        assert_eq!(display.bars.len(), 3);
        assert!(display.bars[2].message().starts_with("├ worker#2"));
        display.fits = 5;
        display.add_bars(display.now_ms());
        assert_eq!(display.bars.len(), 5);
        assert!(display.bars[4].message().starts_with("├ worker#4"));
        display.finish(&mut sink);
        let tree = String::from_utf8(sink).unwrap();
        assert_eq!(tree.lines().count(), 10, "{tree}");
        assert!(tree.lines().last().unwrap().starts_with("  └ worker#9"));
    }

    /// An ended row is drawn without its spinner and no longer turns; a row that
    /// starts again gets it back.
    #[test]
    fn an_ended_row_loses_its_spinner_until_it_runs_again() {
        let hidden = indicatif::ProgressDrawTarget::hidden;
        let multi = indicatif::MultiProgress::with_draw_target(hidden());
        let mut display = Display::new(Progress::Live(multi), HashMap::new());
        let lead = SessionId::new();
        let mut sink = Vec::new();
        display.show(&started(lead, None, "orchestrator"), &mut sink);
        assert_eq!(display.ended, [false]);
        let ended = Event {
            kind: EventKind::Terminal {
                prompts: vec![1],
                outcome: crate::protocol::Outcome::Cancelled {
                    partial: String::new(),
                    stats: Default::default(),
                },
            },
            ..started(lead, None, "orchestrator")
        };
        display.show(&ended, &mut sink);
        assert_eq!(display.ended, [true]);
        assert!(display.bars[0].message().contains("cancelled"));
        let turn = Event {
            kind: EventKind::TurnStarted {
                turn: 2,
                attempt: 1,
            },
            ..started(lead, None, "orchestrator")
        };
        display.show(&turn, &mut sink);
        assert_eq!(display.ended, [false]);
        assert!(display.bars[0].message().contains("thinking"));
    }
}
