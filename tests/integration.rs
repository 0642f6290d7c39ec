//! The one integration-test binary, organised by behaviour.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

mod anthropic;
mod approvals;
mod architecture;
mod bounds;
mod budgets;
mod cancel;
mod chaos;
mod checks;
mod claude_code;
mod cli;
mod compaction;
mod confinement;
mod control;
mod conversation;
mod faults;
mod fixtures;
mod hooks;
mod isolation;
mod journals;
mod lifecycle;
mod live;
mod mcp;
mod permissions;
mod prompt_queue;
mod protocol;
mod providers;
mod quickstart;
mod rate_limits;
mod remote;
mod remote_journals;
mod replay;
mod resume;
mod retention;
mod rewind;
mod sandbox;
mod state;
mod subagents;
mod supervision;
mod terminal;
mod tools;
mod trust;
