//! The journal reader: any bytes are records and damaged lines, each damaged
//! line named within the input; a torn last line is never damage.
#![no_main]

use libfuzzer_sys::fuzz_target;
use orchestrate::journal::{JournalError, parse_journal};

fuzz_target!(|data: &[u8]| {
    match parse_journal(std::path::Path::new("j.jsonl"), data) {
        Ok(read) => {
            let whole_lines = data.iter().filter(|b| **b == b'\n').count();
            for damaged in &read.damaged {
                assert!(damaged.line >= 1 && damaged.line <= whole_lines);
            }
        }
        Err(JournalError::Newer { .. }) => {}
        Err(e) => panic!("{e}"),
    }
});
