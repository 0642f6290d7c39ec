//! The rungs of Edit's ladder that need no file system: what an edit does to a
//! file's bytes, or why it cannot be made. Pure code, with its properties.

use crate::tools::files::{self, Text};

/// A file's text after an edit.
#[derive(Debug, PartialEq, Eq)]
pub struct Edited {
    /// The file's new bytes, with its BOM and line endings kept.
    pub bytes: Vec<u8>,
    /// Its text before, with `\n` line endings (for the diff).
    pub before: String,
    /// Its text after, likewise.
    pub after: String,
    /// How many occurrences were replaced.
    pub count: usize,
}

/// Why an edit of a file's bytes cannot be made.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The file is binary.
    Binary,
    /// The file is not UTF-8.
    NotText,
    /// `old` does not occur in `body` (both with `\n` line endings).
    NotFound {
        /// The file's text.
        body: String,
        /// What was looked for.
        old: String,
    },
    /// `old` occurs this many times and `replace_all` was not set.
    Ambiguous(usize),
    /// The result would be larger than the limit.
    TooLarge {
        /// Its size in bytes.
        size: usize,
        /// The limit.
        limit: usize,
    },
}

/// The least an edit's result may always grow to: 64 MiB.
const MIN_LIMIT: usize = 64 * 1024 * 1024;

/// The largest result an edit of a file of `original` bytes may make: 64 MiB,
/// or 16 times the file, whichever is larger.
pub fn size_limit(original: usize) -> usize {
    original.saturating_mul(16).max(MIN_LIMIT)
}

/// The rungs of Edit's ladder that need no file system: the bytes must be UTF-8
/// text; `old` (a non-empty string, its `\r\n` read as `\n`) must occur exactly
/// once, or at least once with `replace_all`; the result may not pass `limit`
/// bytes (its size is worked out before any of it is made). Everything outside
/// the replaced text is kept byte for byte, BOM and line endings included. Pure
/// code.
pub fn replace(
    bytes: &[u8],
    old: &str,
    new: &str,
    replace_all: bool,
    limit: usize,
) -> Result<Edited, Refusal> {
    if files::is_binary(bytes) {
        return Err(Refusal::Binary);
    }
    let text = Text::decode(bytes).ok_or(Refusal::NotText)?;
    // The model writes `\n`; the file may use `\r\n`: match on normalized text.
    let old = old.replace("\r\n", "\n");
    let new = new.replace("\r\n", "\n");
    let count = if old.is_empty() {
        0
    } else {
        text.body.matches(&old).count()
    };
    match count {
        0 => {
            return Err(Refusal::NotFound {
                body: text.body,
                old,
            });
        }
        1 => {}
        n if !replace_all => return Err(Refusal::Ambiguous(n)),
        _ => {}
    }
    let replaced = if replace_all { count } else { 1 };
    // Line endings put back may add a byte a line: counted too.
    let lines = new.matches('\n').count().saturating_mul(replaced);
    let size = text
        .body
        .len()
        .saturating_add(new.len().saturating_sub(old.len()).saturating_mul(replaced))
        .saturating_add(lines)
        .saturating_add(3);
    if size > limit {
        return Err(Refusal::TooLarge { size, limit });
    }
    let after = if replace_all {
        text.body.replace(&old, &new)
    } else {
        text.body.replacen(&old, &new, 1)
    };
    Ok(Edited {
        bytes: text.encode(&after),
        before: text.body,
        after,
        count,
    })
}

#[cfg(test)]
mod tests {
    mod properties {
        use proptest::prelude::*;

        use super::super::{Refusal, replace};
        use crate::tools::files::Text;

        /// Text with the characters an edit trips over: line ends of every kind, a
        /// BOM's code point, multi-byte characters.
        fn text() -> impl Strategy<Value = String> {
            proptest::collection::vec(
                prop_oneof![
                    Just("\n".to_owned()),
                    Just("\r\n".to_owned()),
                    Just("\r".to_owned()),
                    Just("\u{feff}".to_owned()),
                    Just("é".to_owned()),
                    "[a-c ]{1,3}",
                ],
                0..20,
            )
            .prop_map(|parts| parts.concat())
        }

        proptest! {
            #[test]
            fn a_file_taken_apart_is_put_back_byte_for_byte(s in text()) {
                let decoded = Text::decode(s.as_bytes()).unwrap();
                prop_assert_eq!(decoded.encode(&decoded.body), s.as_bytes());
            }

            #[test]
            fn a_unique_edit_changes_that_text_and_nothing_else(
                before in "[a-c\n]{0,30}",
                after in "[a-c\n]{0,30}",
                new in "[a-z\n]{0,10}",
                crlf in any::<bool>(),
                bom in any::<bool>(),
            ) {
                let marker = "<<X>>";
                let lines = |t: &str| if crlf { t.replace('\n', "\r\n") } else { t.to_owned() };
                let mark = if bom { "\u{feff}" } else { "" };
                let file = format!("{mark}{}", lines(&format!("{before}{marker}{after}")));
                let edited = replace(file.as_bytes(), marker, &new, false, usize::MAX).unwrap();
                let expected = format!("{mark}{}", lines(&format!("{before}{new}{after}")));
                // A file is CRLF only when it has a line end at all.
                let has_line_end = before.contains('\n') || after.contains('\n');
                if !crlf || has_line_end {
                    prop_assert_eq!(String::from_utf8(edited.bytes).unwrap(), expected);
                }
                prop_assert_eq!(edited.count, 1);
            }

            /// An edit that is made is never larger than its limit: the size is
            /// worked out before the result, and never below it.
            #[test]
            fn a_result_never_passes_its_limit(
                body in "[ab\r\n]{0,40}",
                old in "[ab]{1,2}",
                new in "[ab\r\n]{0,6}",
                all in any::<bool>(),
                limit in 0usize..200,
            ) {
                if let Ok(edited) = replace(body.as_bytes(), &old, &new, all, limit) {
                    prop_assert!(edited.bytes.len() <= limit, "{} > {limit}", edited.bytes.len());
                }
            }

            #[test]
            fn an_edit_of_any_bytes_refuses_or_keeps_what_it_did_not_replace(
                bytes in proptest::collection::vec(any::<u8>(), 0..64),
                old in "[a-c]{1,2}",
            ) {
                match replace(&bytes, &old, "Z", true, usize::MAX) {
                    Ok(edited) => {
                        prop_assert!(edited.count >= 1);
                        let text = String::from_utf8(edited.bytes).unwrap();
                        prop_assert_eq!(text.matches('Z').count(), edited.count);
                    }
                    Err(Refusal::Binary | Refusal::NotText | Refusal::NotFound { .. }) => {}
                    Err(Refusal::TooLarge { .. }) => prop_assert!(false, "no limit was set"),
                    Err(Refusal::Ambiguous(_)) => prop_assert!(false, "replace_all is never ambiguous"),
                }
            }
        }
    }
}
