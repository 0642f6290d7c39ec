//! Role files: any text is a role or an error naming the file, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Err(e) = orchestrate::roles::parse("agents/fuzz.md", text) {
            assert!(e.to_string().starts_with("agents/fuzz.md"), "{e}");
        }
    }
});
