//! Tests of the run machine, without a runtime: whole conversations, a cancel at
//! every point of a run, resuming from every prefix of a journal, and properties
//! that hold for any order of completions, cancels and crashes. A simulated
//! session ([`sim`]) carries out the effects the way the actor does.

mod background;
mod budgets;
mod cancel;
mod cap;
mod compact;
mod conversations;
mod properties;
mod resume;
mod sim;
