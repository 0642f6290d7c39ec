//! The directory walk `Glob` and `Grep` share: which files a search sees, and in what
//! order they are shown. The walk is the `ignore` crate's, but the ignore files
//! (`.ignore`, `.gitignore`, `.git/info/exclude`) are read here, not by the crate:
//! the crate would open a `.gitignore` that is a FIFO and wait forever, or read one
//! that is a symlink to `/dev/zero` until memory runs out. Here each is read through
//! [`small_file`] (a regular file of at most 1 MiB); one that is not is skipped, and
//! the search says so. The rules mean what they mean to ripgrep: in each directory
//! from the file's own up to the walk's root, the deepest rule decides, and `.ignore`
//! outranks `.gitignore`, which outranks the exclude file.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use ignore::gitignore::{Gitignore, GitignoreBuilder};
use ignore::overrides::Override;
use ignore::types::Types;
use ignore::{Match, WalkBuilder};
use tokio_util::sync::CancellationToken;

use crate::error::ToolError;
use crate::small_file::{self, ReadError};
use crate::tools::ToolContext;

/// Names no search descends into (unless asked to search inside one):
/// version-control internals (`.git` may also be a file, in a worktree).
const SKIPPED_DIRS: [&str; 1] = [".git"];

/// Skipped ignore files named one by one at most; the rest are counted.
const MAX_WARNINGS: usize = 10;

/// A walk of one directory: honours ignore files (also outside a git repository, but
/// not those of the directories above the root: a dotfiles repository in `$HOME`
/// must not hide the workspace's files), includes hidden files, never follows
/// symlinks (their targets may lie outside the workspace), and skips
/// [`SKIPPED_DIRS`] and the run's private places (its state, in a workspace that
/// holds it). The user's global git excludes are not read: what a search sees
/// depends on the workspace alone.
#[derive(Debug)]
pub(crate) struct Walk {
    builder: WalkBuilder,
    root: PathBuf,
    overrides: Option<Override>,
    private: Arc<[PathBuf]>,
    read_deny: crate::tools::ReadDeny,
}

/// What a walk found.
#[derive(Debug)]
pub(crate) struct Walked {
    /// The regular files kept, in walk order.
    pub(crate) files: Vec<PathBuf>,
    /// Ignore files that were not read, so their rules did not apply.
    pub(crate) skipped: Vec<ReadError>,
}

/// The ignore rules met so far, by directory, and the ignore files not read.
#[derive(Debug)]
struct Rules {
    root: PathBuf,
    /// The search's own globs, which outrank every ignore file (as `rg --glob`).
    overrides: Option<Override>,
    dirs: Mutex<HashMap<PathBuf, Arc<DirRules>>>,
    skipped: Mutex<Vec<ReadError>>,
}

/// One directory's ignore files, in rank order: `.ignore`, `.gitignore`, the
/// repository's `info/exclude`.
#[derive(Debug)]
struct DirRules([Gitignore; 3]);

impl Walk {
    /// A walk of `root` that never enters `private` ([`ToolContext::private`])
    /// nor yields what `read_deny` refuses ([`ToolContext::read_deny`]).
    pub(crate) fn new(
        root: &Path,
        private: Arc<[PathBuf]>,
        read_deny: crate::tools::ReadDeny,
    ) -> Self {
        let mut builder = WalkBuilder::new(root);
        builder
            .hidden(false)
            .parents(false)
            .follow_links(false)
            // The crate reads no ignore file: see the module's doc.
            .ignore(false)
            .git_ignore(false)
            .git_exclude(false)
            .git_global(false);
        Self {
            builder,
            root: root.to_owned(),
            overrides: None,
            private,
            read_deny,
        }
    }

    /// Keeps only what the globs select; they outrank the ignore files.
    pub(crate) fn overrides(&mut self, overrides: Override) {
        self.builder.overrides(overrides.clone());
        self.overrides = Some(overrides);
    }

    /// Keeps only files of these types.
    pub(crate) fn types(&mut self, types: Types) {
        self.builder.types(types);
    }

    /// Walks, keeping the regular files for which `keep` (given the path) says yes.
    pub(crate) fn files(
        mut self,
        cancel: &CancellationToken,
        mut keep: impl FnMut(&Path) -> bool,
    ) -> Result<Walked, ToolError> {
        let rules = Arc::new(Rules {
            root: self.root,
            overrides: self.overrides,
            dirs: Mutex::new(HashMap::new()),
            skipped: Mutex::new(Vec::new()),
        });
        let filter = rules.clone();
        let (private, read_deny) = (self.private, self.read_deny);
        self.builder.filter_entry(move |entry| {
            let skipped_dir = SKIPPED_DIRS.iter().any(|d| entry.file_name() == *d)
                || private.iter().any(|place| entry.path() == place)
                || read_deny.denies(entry.path());
            let is_dir = entry.file_type().is_some_and(|t| t.is_dir());
            !skipped_dir && !filter.ignored(entry.path(), is_dir)
        });
        let mut files = Vec::new();
        for entry in self.builder.build() {
            if cancel.is_cancelled() {
                return Err(ToolError::Cancelled);
            }
            let Ok(entry) = entry else { continue };
            if entry.file_type().is_some_and(|t| t.is_file()) && keep(entry.path()) {
                files.push(entry.into_path());
            }
        }
        let mut skipped =
            std::mem::take(&mut *rules.skipped.lock().unwrap_or_else(PoisonError::into_inner));
        skipped.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(Walked { files, skipped })
    }
}

impl Rules {
    /// Whether the ignore files from `path`'s directory up to the root ignore it.
    fn ignored(&self, path: &Path, is_dir: bool) -> bool {
        if let Some(overrides) = &self.overrides
            && overrides.matched(path, is_dir).is_whitelist()
        {
            return false;
        }
        let mut verdicts: [Option<bool>; 3] = [None; 3];
        let dirs = path.ancestors().skip(1);
        for dir in dirs.take_while(|d| d.starts_with(&self.root)) {
            let rules = self.of(dir);
            for (verdict, rules) in verdicts.iter_mut().zip(&rules.0) {
                if verdict.is_none() {
                    *verdict = match rules.matched(path, is_dir) {
                        Match::Ignore(_) => Some(true),
                        Match::Whitelist(_) => Some(false),
                        Match::None => None,
                    };
                }
            }
        }
        verdicts.into_iter().flatten().next().unwrap_or(false)
    }

    /// The rules of `dir`, read the first time they are needed.
    fn of(&self, dir: &Path) -> Arc<DirRules> {
        let mut dirs = self.dirs.lock().unwrap_or_else(PoisonError::into_inner);
        dirs.entry(dir.to_owned())
            .or_insert_with(|| Arc::new(self.read(dir)))
            .clone()
    }

    fn read(&self, dir: &Path) -> DirRules {
        let exclude = git_dir(dir).map(|git| git.join("info/exclude"));
        DirRules([
            self.rules(dir, Some(&dir.join(".ignore"))),
            self.rules(dir, Some(&dir.join(".gitignore"))),
            self.rules(dir, exclude.as_deref()),
        ])
    }

    /// The rules of one ignore file of `dir`; none when it does not exist or is not
    /// read (then it is remembered as skipped).
    fn rules(&self, dir: &Path, file: Option<&Path>) -> Gitignore {
        let Some(file) = file else {
            return Gitignore::empty();
        };
        let bytes = match small_file::read(file, small_file::MAX_BYTES) {
            Ok(bytes) => bytes,
            Err(e) if e.is_not_found() => return Gitignore::empty(),
            Err(e) => {
                tracing::warn!(error = %e, "an ignore file was not read");
                self.skipped
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(e);
                return Gitignore::empty();
            }
        };
        let text = String::from_utf8_lossy(&bytes);
        let mut builder = GitignoreBuilder::new(dir);
        for line in text.trim_start_matches('\u{feff}').lines() {
            // A line that is not a valid glob is left out, as ripgrep leaves it.
            let _ = builder.add_line(Some(file.to_owned()), line);
        }
        builder.build().unwrap_or_else(|_| Gitignore::empty())
    }
}

/// The repository directory holding `dir`'s `info/exclude`, when `dir` is the top of
/// a git work tree: its `.git` directory, or for a linked worktree (`.git` is a file
/// naming the worktree's git directory) the common directory that one points to.
fn git_dir(dir: &Path) -> Option<PathBuf> {
    let dot_git = dir.join(".git");
    let meta = std::fs::metadata(&dot_git).ok()?;
    if meta.is_dir() {
        return Some(dot_git);
    }
    // Anything else the bounded reader refuses, and then there is no exclude file.
    let first_line = |path: &Path| -> Option<String> {
        let text = small_file::read_to_string(path, 4096).ok()?;
        text.lines().next().map(str::to_owned)
    };
    let gitdir = PathBuf::from(first_line(&dot_git)?.strip_prefix("gitdir: ")?);
    let gitdir = dir.join(gitdir);
    let common = first_line(&gitdir.join("commondir"))?;
    Some(gitdir.join(common))
}

/// The notes a search adds for the ignore files it could not read.
pub(crate) fn warnings(skipped: &[ReadError], ctx: &ToolContext) -> Vec<String> {
    let mut notes: Vec<String> = skipped
        .iter()
        .take(MAX_WARNINGS)
        .map(|e| {
            format!(
                "[warning: {}: {}; its ignore rules were not applied]",
                ctx.display(&e.path),
                e.problem
            )
        })
        .collect();
    if skipped.len() > MAX_WARNINGS {
        let more = skipped.len() - MAX_WARNINGS;
        notes.push(format!("[warning: {more} more ignore files were not read]"));
    }
    notes
}

/// Sorts files by modification time, newest first, ties by path; a file whose time
/// cannot be read counts as oldest.
pub(crate) fn newest_first(files: Vec<PathBuf>) -> Vec<PathBuf> {
    let mut timed: Vec<(SystemTime, PathBuf)> = files
        .into_iter()
        .map(|path| {
            let modified = std::fs::metadata(&path)
                .and_then(|m| m.modified())
                .unwrap_or(SystemTime::UNIX_EPOCH);
            (modified, path)
        })
        .collect();
    timed.sort_by(|(ta, pa), (tb, pb)| tb.cmp(ta).then_with(|| pa.cmp(pb)));
    timed.into_iter().map(|(_, path)| path).collect()
}
