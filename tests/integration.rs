//! The one integration-test binary, organised by behaviour.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

mod conversation;
mod faults;
