//! Lines appended but not yet written to their files. A file's lines wait until
//! the file is synced or they are a while old, so a burst of records (a turn's
//! end: its events, its message, its tool call's start and result, spread over a
//! few of the writer's batches) reaches the file in one write, not one a batch: at
//! ten thousand sub-agents that was seven writes a journal, and a reopen for each
//! write to a journal closed past the bound.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::Scope;

/// Past this many bytes waiting, every file's lines are written: the wait is
/// for a burst's lines to go out together, not for memory to fill (at ten
/// thousand sub-agents this is about a twentieth of a second of journal).
const MAX_BYTES: usize = 256 << 10;

#[derive(Debug, Default)]
pub(super) struct Unwritten {
    /// Each file's lines, in the order they came, and when the first came.
    files: HashMap<PathBuf, Lines>,
    /// The files by when their first unwritten line came, oldest first; an entry
    /// whose lines were taken since (by a sync) is skipped.
    order: VecDeque<(Instant, PathBuf)>,
    /// The bytes waiting, in all.
    bytes: usize,
}

#[derive(Debug)]
struct Lines {
    since: Instant,
    bytes: Vec<u8>,
}

impl Unwritten {
    /// Adds a batch's appends, in the order they came, the first at `since`.
    pub(super) fn add(&mut self, appends: Vec<(PathBuf, Vec<u8>)>, since: Instant) {
        for (path, line) in appends {
            self.bytes += line.len();
            match self.files.get_mut(&path) {
                Some(lines) => lines.bytes.extend_from_slice(&line),
                None => {
                    self.order.push_back((since, path.clone()));
                    let lines = Lines { since, bytes: line };
                    self.files.insert(path, lines);
                }
            }
        }
    }

    /// When the oldest lines have waited their while.
    pub(super) fn next_due(&self, within: Duration) -> Option<Instant> {
        self.order.front().map(|(since, _)| *since + within)
    }

    /// Takes out the lines to write now: those of the files `scope` syncs (all of
    /// them, for everything, or past [`MAX_BYTES`]), and those that have waited
    /// `within` by `now`.
    pub(super) fn take(
        &mut self,
        scope: &Scope,
        now: Instant,
        within: Duration,
    ) -> Vec<(PathBuf, Vec<u8>)> {
        let mut due = Vec::new();
        let all = self.bytes > MAX_BYTES;
        match scope {
            Scope::Nothing if !all => {}
            Scope::Files(paths) if !all => {
                for path in paths {
                    if let Some(lines) = self.files.remove(path) {
                        due.push((path.clone(), lines.bytes));
                    }
                }
            }
            Scope::Nothing | Scope::Files(_) | Scope::Everything => {
                self.order.clear();
                due.extend(self.files.drain().map(|(path, lines)| (path, lines.bytes)));
            }
        }
        while let Some((since, path)) = self.order.front() {
            let current = self.files.get(path).is_some_and(|l| l.since == *since);
            if current && *since + within > now {
                break;
            }
            if let Some((_, path)) = self.order.pop_front()
                && current
                && let Some(lines) = self.files.remove(&path)
            {
                due.push((path, lines.bytes));
            }
        }
        self.bytes -= due.iter().map(|(_, bytes)| bytes.len()).sum::<usize>();
        due
    }

    /// Whether any lines wait.
    pub(super) fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// Whether lines wait for the file at `path`.
    pub(super) fn holds(&self, path: &Path) -> bool {
        self.files.contains_key(path)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    const WITHIN: Duration = Duration::from_millis(100);

    fn lines(path: &str, text: &str) -> (PathBuf, Vec<u8>) {
        (PathBuf::from(path), text.as_bytes().to_vec())
    }

    fn sorted(mut taken: Vec<(PathBuf, Vec<u8>)>) -> Vec<(String, String)> {
        taken.sort();
        (taken.into_iter())
            .map(|(p, b)| (p.display().to_string(), String::from_utf8(b).unwrap()))
            .collect()
    }

    fn pair(path: &str, text: &str) -> (String, String) {
        (path.to_owned(), text.to_owned())
    }

    #[test]
    fn a_files_lines_wait_for_its_sync_or_their_while_and_go_out_together() {
        let start = Instant::now();
        let mut unwritten = Unwritten::default();
        unwritten.add(vec![lines("a", "1"), lines("b", "1")], start);
        let later = start + WITHIN / 2;
        unwritten.add(vec![lines("a", "2"), lines("c", "1")], later);
        assert!(unwritten.take(&Scope::Nothing, later, WITHIN).is_empty());
        assert_eq!(unwritten.next_due(WITHIN), Some(start + WITHIN));
        // A sync of "b" takes its lines at once; "a" waits on.
        let b = Scope::Files(HashSet::from([PathBuf::from("b")]));
        assert_eq!(sorted(unwritten.take(&b, later, WITHIN)), [pair("b", "1")]);
        // "a", whose first line came first, in the order its lines came.
        let taken = unwritten.take(&Scope::Nothing, start + WITHIN, WITHIN);
        assert_eq!(sorted(taken), [pair("a", "12")]);
        assert_eq!(unwritten.next_due(WITHIN), Some(later + WITHIN));
        unwritten.add(vec![lines("b", "2")], later + WITHIN);
        let taken = unwritten.take(&Scope::Everything, later, WITHIN);
        assert_eq!(sorted(taken), [pair("b", "2"), pair("c", "1")]);
        assert!(unwritten.is_empty() && unwritten.next_due(WITHIN).is_none());
    }

    #[test]
    fn past_the_bound_every_files_lines_go_out() {
        let start = Instant::now();
        let mut unwritten = Unwritten::default();
        let big = "x".repeat(MAX_BYTES / 2 + 1);
        unwritten.add(vec![lines("a", &big)], start);
        assert!(unwritten.take(&Scope::Nothing, start, WITHIN).is_empty());
        unwritten.add(vec![lines("b", &big)], start);
        let taken = unwritten.take(&Scope::Nothing, start, WITHIN);
        assert_eq!(sorted(taken), [pair("a", &big), pair("b", &big)]);
        assert!(unwritten.is_empty() && !unwritten.holds(Path::new("a")));
    }

    #[test]
    fn lines_that_came_after_a_sync_wait_from_when_they_came() {
        let start = Instant::now();
        let mut unwritten = Unwritten::default();
        unwritten.add(vec![lines("a", "1")], start);
        let a = Scope::Files(HashSet::from([PathBuf::from("a")]));
        assert_eq!(sorted(unwritten.take(&a, start, WITHIN)), [pair("a", "1")]);
        let later = start + WITHIN / 2;
        unwritten.add(vec![lines("a", "2")], later);
        // The first entry's while is up, but the lines it named were taken.
        assert!(
            unwritten
                .take(&Scope::Nothing, start + WITHIN, WITHIN)
                .is_empty()
        );
        let taken = unwritten.take(&Scope::Nothing, later + WITHIN, WITHIN);
        assert_eq!(sorted(taken), [pair("a", "2")]);
    }
}
