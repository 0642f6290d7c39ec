//! The `Glob` tool (being written).
