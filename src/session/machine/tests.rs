//! Tests of the run machine, without a runtime.
