//! The journal files the writer holds open, at most a bound of them: past it, the
//! files already synced are closed first, each kind the ones written longest ago
//! first (a fan-out's journals are written in bursts at turn ends, so the longest
//! unwritten are those mid-stream or ended), never all of them at once, which made
//! every live journal be reopened at its next write.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::path::{Path, PathBuf};

pub(super) struct OpenFiles {
    /// Each open file.
    files: HashMap<PathBuf, Open>,
    /// More than this many open files closes the oldest down to three quarters.
    max_open: usize,
}

/// One open journal.
struct Open {
    file: File,
    /// The batch that last wrote it.
    written: u64,
    /// Written since its last sync: it stays open until it is synced, through this
    /// descriptor, whose write-back errors it reports.
    dirty: bool,
}

impl OpenFiles {
    pub(super) fn new(max_open: usize) -> Self {
        Self {
            files: HashMap::new(),
            max_open,
        }
    }

    /// The file at `path` to write to, opened for appending (created if missing)
    /// when it is not open yet, stamped as written by `batch` and marked as due for
    /// a sync; and whether it was empty when opened (a new file, whose directory
    /// entry needs a sync: an old empty one costs a spare directory sync at most).
    /// Reading the length from the open file spares a path lookup per open.
    pub(super) fn open(&mut self, path: &Path, batch: u64) -> std::io::Result<(&mut File, bool)> {
        let mut created = false;
        if !self.files.contains_key(path) {
            // Journals hold whole conversations: readable by their owner only, and
            // never written through a link or into a FIFO or a device.
            let file = crate::small_file::open(path, crate::small_file::Access::Append)?;
            created = file.metadata()?.len() == 0;
            let open = Open {
                file,
                written: batch,
                dirty: false,
            };
            self.files.insert(path.to_owned(), open);
        }
        let Some(open) = self.files.get_mut(path) else {
            unreachable!("inserted above")
        };
        open.written = batch;
        open.dirty = true;
        Ok((&mut open.file, created))
    }

    /// The open file at `path`, if it is open.
    pub(super) fn get(&self, path: &Path) -> Option<&File> {
        self.files.get(path).map(|open| &open.file)
    }

    /// Whether the file at `path` was written since its last sync.
    pub(super) fn is_dirty(&self, path: &Path) -> bool {
        self.files.get(path).is_some_and(|open| open.dirty)
    }

    /// Marks the files written since their last sync (all of them, or those of
    /// `wanted`) as synced; returns them, to be synced.
    pub(super) fn take_dirty(&mut self, wanted: Option<&HashSet<PathBuf>>) -> Vec<PathBuf> {
        match wanted {
            None => (self.files.iter_mut())
                .filter_map(|(path, open)| std::mem::take(&mut open.dirty).then(|| path.clone()))
                .collect(),
            // A batch asks for a few files among thousands open: looked up, not
            // scanned.
            Some(wanted) => (wanted.iter())
                .filter(|path| {
                    (self.files.get_mut(path.as_path()))
                        .is_some_and(|open| std::mem::take(&mut open.dirty))
                })
                .cloned()
                .collect(),
        }
    }

    /// Marks the file at `path` as still due for a sync (its sync failed).
    pub(super) fn mark_dirty(&mut self, path: &Path) {
        if let Some(open) = self.files.get_mut(path) {
            open.dirty = true;
        }
    }

    /// Closes the file at `path` if it is open.
    pub(super) fn close(&mut self, path: &Path) {
        self.files.remove(path);
    }

    /// Past the bound, the files to close to come down to three quarters of it:
    /// those already synced first, each kind the ones written longest ago first.
    pub(super) fn overflow(&self) -> Vec<PathBuf> {
        if self.files.len() <= self.max_open {
            return Vec::new();
        }
        let keep = self.max_open * 3 / 4;
        let ranked = (self.files.iter())
            .map(|(path, open)| (path, (open.dirty, open.written)))
            .collect();
        oldest(ranked, keep)
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.files.len()
    }
}

/// The paths to close so that `keep` remain: those ranked lowest (clean before
/// dirty, then oldest first).
fn oldest(mut files: Vec<(&PathBuf, (bool, u64))>, keep: usize) -> Vec<PathBuf> {
    let excess = files.len().saturating_sub(keep);
    files.sort_unstable_by_key(|(_, rank)| *rank);
    files[..excess]
        .iter()
        .map(|(path, _)| (*path).clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn past_the_bound_the_synced_files_written_longest_ago_are_closed_first() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = OpenFiles::new(8);
        let path = |i: u64| dir.path().join(format!("{i}.jsonl"));
        for i in 0..9 {
            let (_, created) = files.open(&path(i), i).unwrap();
            assert!(created);
        }
        // File 0 is written again, so it is the newest; all but file 1 are synced.
        files.open(&path(0), 9).unwrap();
        let synced = (0..9).filter(|i| *i != 1).map(path).collect();
        files.take_dirty(Some(&synced));
        assert!(files.is_dirty(&path(1)) && !files.is_dirty(&path(2)));
        let mut closing = files.overflow();
        closing.sort();
        assert_eq!(closing, [path(2), path(3), path(4)]);
        for path in &closing {
            files.close(path);
        }
        assert_eq!(files.len(), 6);
        assert!(files.overflow().is_empty());
    }

    #[test]
    fn ties_at_the_cut_close_just_enough_of_the_oldest() {
        let paths: Vec<PathBuf> = (0..6).map(|i| PathBuf::from(i.to_string())).collect();
        let ranks = [
            (false, 1),
            (false, 1),
            (false, 1),
            (false, 1),
            (false, 2),
            (true, 0),
        ];
        let closed = oldest(paths.iter().zip(ranks).collect(), 3);
        assert_eq!(closed.len(), 3);
        assert!(closed.iter().all(|p| paths[..4].contains(p)));
    }

    #[test]
    fn a_file_reopened_with_records_in_it_is_not_new() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.jsonl");
        let mut files = OpenFiles::new(8);
        std::io::Write::write_all(files.open(&path, 0).unwrap().0, b"{}\n").unwrap();
        files.close(&path);
        assert!(files.get(&path).is_none());
        assert!(!files.open(&path, 1).unwrap().1);
    }
}
