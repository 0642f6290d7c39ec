//! Edit's ladder on any file bytes: a refusal, or an edit that replaced what it
//! says it did. The input is `old`, `new` and the file, split at its first two
//! `\x01` bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use orchestrate::tools::edit::{Refusal, replace};

fuzz_target!(|data: &[u8]| {
    let mut parts = data.splitn(3, |b| *b == 1);
    let (Some(old), Some(new), Some(file)) = (parts.next(), parts.next(), parts.next()) else {
        return;
    };
    let (Ok(old), Ok(new)) = (std::str::from_utf8(old), std::str::from_utf8(new)) else {
        return;
    };
    for replace_all in [false, true] {
        match replace(file, old, new, replace_all, usize::MAX) {
            Ok(edited) => {
                assert!(edited.count >= 1);
                assert!(std::str::from_utf8(&edited.bytes).is_ok(), "an edit made text that is not UTF-8");
            }
            Err(Refusal::Ambiguous(n)) => assert!(!replace_all && n > 1),
            Err(Refusal::Binary | Refusal::NotText | Refusal::NotFound { .. } | Refusal::TooLarge { .. }) => {}
        }
    }
});
