//! The journal files the writer holds open, at most a bound of them: past it, the
//! files already synced are closed first, each kind the ones written longest ago
//! first (a fan-out's journals are written in bursts at turn ends, so the longest
//! unwritten are those mid-stream or ended), never all of them at once, which made
//! every live journal be reopened at its next write.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
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
    /// Its length: what was in it once cut to whole lines, and what was
    /// written since.
    len: u64,
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

    /// Appends `bytes` to the file at `path`, opened for appending (created if
    /// missing) when it is not open yet, stamped as written by `batch` and marked
    /// as due for a sync; returns whether the file was empty when opened (a new
    /// file, whose directory entry needs a sync: an old empty one costs a spare
    /// directory sync at most).
    ///
    /// A file opened that does not end with a whole line (a write torn by a
    /// crash or a full disk, in this process or an earlier one) is first cut back
    /// to the end of its last whole line, so nothing is glued onto the fragment;
    /// a write that fails is cut back to the last whole line it wrote, and the
    /// file closed if even that fails (its next opening cuts it).
    pub(super) fn append(
        &mut self,
        path: &Path,
        batch: u64,
        bytes: &[u8],
    ) -> std::io::Result<bool> {
        let mut created = false;
        if !self.files.contains_key(path) {
            // Journals hold whole conversations: readable by their owner only, and
            // never written through a link or into a FIFO or a device.
            let file = crate::small_file::open(path, crate::small_file::Access::Append)?;
            let len = file.metadata()?.len();
            created = len == 0;
            let len = cut_to_whole_lines(&file, len)?;
            let open = Open {
                file,
                len,
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
        let mut written = 0;
        while written < bytes.len() {
            match open.file.write(&bytes[written..]) {
                Ok(0) => {
                    return Err(self.cut(
                        path,
                        bytes,
                        written,
                        std::io::ErrorKind::WriteZero.into(),
                    ));
                }
                Ok(n) => written += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.cut(path, bytes, written, e)),
            }
        }
        open.len += bytes.len() as u64;
        Ok(created)
    }

    /// After a write of `bytes` to `path` failed with `error` once `written` of
    /// them were in: cuts the file back to the end of the last whole line that
    /// made it (the lines before the failure stay); closes it if even that
    /// fails. Returns the error.
    fn cut(
        &mut self,
        path: &Path,
        bytes: &[u8],
        written: usize,
        error: std::io::Error,
    ) -> std::io::Error {
        let Some(open) = self.files.get_mut(path) else {
            return error;
        };
        let whole = bytes[..written]
            .iter()
            .rposition(|b| *b == b'\n')
            .map_or(0, |i| i + 1);
        open.len += whole as u64;
        if open.file.set_len(open.len).is_err() {
            self.files.remove(path);
        }
        error
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

/// Cuts `file`, `len` bytes long, to the end of its last whole line (to
/// nothing without one); returns its length then. Only the tail is read,
/// backwards, a block at a time.
fn cut_to_whole_lines(file: &File, len: u64) -> std::io::Result<u64> {
    const BLOCK: u64 = 64 << 10;
    let mut end = len;
    let mut block = Vec::new();
    while end > 0 {
        let start = end.saturating_sub(BLOCK);
        block.resize((end - start) as usize, 0);
        file.read_exact_at(&mut block, start)?;
        if end == len && block.last() == Some(&b'\n') {
            return Ok(len);
        }
        if let Some(i) = block.iter().rposition(|b| *b == b'\n') {
            end = start + i as u64 + 1;
            break;
        }
        end = start;
    }
    if end < len {
        file.set_len(end)?;
    }
    Ok(end)
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
            assert!(files.append(&path(i), i, b"{}\n").unwrap());
        }
        // File 0 is written again, so it is the newest; all but file 1 are synced.
        files.append(&path(0), 9, b"{}\n").unwrap();
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
        assert!(files.append(&path, 0, b"{}\n").unwrap());
        files.close(&path);
        assert!(files.get(&path).is_none());
        assert!(!files.append(&path, 1, b"{}\n").unwrap());
    }

    #[test]
    fn a_torn_tail_is_cut_before_the_first_append_and_a_whole_one_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.jsonl");
        let mut files = OpenFiles::new(8);
        let long = "x".repeat(200_000);
        for (before, after) in [
            ("{}\n{\"tor".to_owned(), "{}\n{}\n".to_owned()),
            ("{}\n".to_owned(), "{}\n{}\n".to_owned()),
            ("{\"torn".to_owned(), "{}\n".to_owned()),
            (format!("{{}}\n{long}"), "{}\n{}\n".to_owned()),
            (format!("{long}\n{long}"), format!("{long}\n{{}}\n")),
        ] {
            std::fs::write(&path, &before).unwrap();
            assert!(!files.append(&path, 0, b"{}\n").unwrap());
            files.close(&path);
            assert!(
                std::fs::read_to_string(&path).unwrap() == after,
                "{}",
                &before[..before.len().min(20)]
            );
        }
    }
}
