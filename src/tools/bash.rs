//! The `Bash` tool (being written).
