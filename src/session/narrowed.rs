//! The narrowings of a session as its journal keeps them: each one is
//! journaled when it comes into force (`Record::Narrowed`: a slash command's
//! at the session's start, a skill's when it is loaded) and found again when
//! the session is started from its journal, so a crash or a resume never
//! widens what it may do, whatever became of the files that narrowed it.

use crate::journal::Record;
use crate::tools::narrowing::Narrow;

/// The record that journals `narrow`.
pub(crate) fn record(narrow: &Narrow) -> Record {
    Record::Narrowed {
        by: narrow.by.clone(),
        only: narrow.only.iter().map(ToString::to_string).collect(),
    }
}

/// The narrowings `records` journaled, in order.
pub(crate) fn journaled(records: &[Record]) -> Vec<Narrow> {
    let mut found = Vec::new();
    for record in records {
        if let Record::Narrowed { by, only } = record {
            found.push(Narrow::of(by.clone(), only).0);
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_narrowing_reads_back_as_it_was_journaled() {
        let list: Vec<String> = [
            "Read",
            "Bash(git diff:*)",
            "Bash(git * main)",
            "mcp__git",
            "WebFetch(domain:example.com)",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        let (narrow, bad) = Narrow::of("the skill \"tidy\"", &list);
        assert!(bad.is_empty());
        let line = serde_json::to_string(&record(&narrow)).unwrap();
        let back: Record = serde_json::from_str(&line).unwrap();
        assert_eq!(journaled(&[back]), [narrow]);
    }
}
