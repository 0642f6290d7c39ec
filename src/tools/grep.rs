//! The `Grep` tool (being written).
