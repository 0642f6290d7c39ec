//! The journal reader: any text is records, or an error naming a line within it;
//! a torn last line is never an error.
#![no_main]

use libfuzzer_sys::fuzz_target;
use orchestrate::journal::{JournalError, parse_journal};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match parse_journal(std::path::Path::new("j.jsonl"), text) {
        Ok(_) => {}
        Err(JournalError::Corrupt { line, .. }) => {
            let lines = text.lines().count();
            assert!(line >= 1 && line <= lines);
            assert!(line < lines || text.ends_with('\n'), "a torn last line was an error");
        }
        Err(e) => panic!("{e}"),
    }
});
