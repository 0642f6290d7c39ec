//! The exit codes: what the end of a command means to a script. Which
//! end gets which code is decided where the command runs (`run`, `agents`).

/// The task finished.
pub const DONE: u8 = 0;
/// The task failed.
pub const FAILED: u8 = 1;
/// Bad usage or configuration.
pub const USAGE: u8 = 2;
/// Cancelled by the user.
pub const CANCELLED: u8 = 130;
