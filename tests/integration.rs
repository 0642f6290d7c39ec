//! The one integration-test binary, organised by behaviour.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

mod anthropic;
mod architecture;
mod cancel;
mod cli;
mod confinement;
mod control;
mod conversation;
mod faults;
mod fixtures;
mod permissions;
mod prompt_queue;
mod protocol;
mod providers;
mod quickstart;
mod resume;
mod subagents;
mod supervision;
mod tools;
