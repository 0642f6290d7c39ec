//! The `Ls` tool (being written).
