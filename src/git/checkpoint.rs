//! Checkpoints of a workspace in git: the work tree as it is, as a commit over
//! an index of its own (the person's index, branches and stash untouched),
//! referenced as `refs/orchestrate/checkpoints/<run id>/<n>` so that git's
//! garbage collection keeps it; and putting the work tree back as a
//! checkpoint holds it. `Checkpoints` is a run's: it takes one before the
//! run's first change and before each merge into the workspace.
//!
//! Outside a repository a run's checkpoint is copies of the files its file
//! tools change (`outside`).
//!
//! Blocking, but for [`Checkpoints`]' methods, which take them on the
//! blocking pool.

pub mod outside;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use super::checkout::{self, CheckoutError, PathChange, git};
use crate::protocol::SessionId;

/// One checkpoint of a run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checkpoint {
    /// Its number in the run, from 1.
    pub n: u32,
    /// Its commit.
    pub commit: String,
    /// When it was taken (`before the first change`, …).
    pub label: String,
}

/// What a checkpoint's commit message starts with.
const PREFIX: &str = "orchestrate checkpoint: ";

fn refs(run: SessionId) -> String {
    format!("refs/orchestrate/checkpoints/{run}/")
}

/// The checkpoints run `run` took in the repository at `root`, by number.
pub fn list(root: &Path, run: SessionId) -> Result<Vec<Checkpoint>, CheckoutError> {
    let listed = git(
        root,
        &[
            "for-each-ref",
            "--format=%(refname) %(objectname) %(contents:subject)",
            &refs(run),
        ],
        &[],
    )?;
    let mut found: Vec<Checkpoint> = listed
        .lines()
        .filter_map(|line| {
            let (name, rest) = line.split_once(' ')?;
            let (commit, subject) = rest.split_once(' ').unwrap_or((rest, ""));
            Some(Checkpoint {
                n: name.rsplit('/').next()?.parse().ok()?,
                commit: commit.to_owned(),
                label: subject.strip_prefix(PREFIX).unwrap_or(subject).to_owned(),
            })
        })
        .collect();
    found.sort_by_key(|c| c.n);
    Ok(found)
}

/// Takes a checkpoint of the work tree at `root` for run `run`, labelled
/// `label`, with an index in `scratch`, leaving out `leave_out` (the run's
/// own state); the checkpoint.
pub fn take(
    root: &Path,
    run: SessionId,
    label: &str,
    scratch: &Path,
    leave_out: &[PathBuf],
) -> Result<Checkpoint, CheckoutError> {
    let commit = checkout::snapshot_as(root, scratch, leave_out, &format!("{PREFIX}{label}"))?;
    numbered(root, run, commit, label)
}

/// As [`take`], unless the work tree is as the run's last checkpoint holds
/// it: then none is taken.
pub fn take_if_changed(
    root: &Path,
    run: SessionId,
    label: &str,
    scratch: &Path,
    leave_out: &[PathBuf],
) -> Result<Option<Checkpoint>, CheckoutError> {
    let commit = checkout::snapshot_as(root, scratch, leave_out, &format!("{PREFIX}{label}"))?;
    if let Some(last) = list(root, run)?.last()
        && checkout::same_tree(root, &last.commit, &commit)?
    {
        return Ok(None);
    }
    numbered(root, run, commit, label).map(Some)
}

/// `commit` kept as run `run`'s next checkpoint.
fn numbered(
    root: &Path,
    run: SessionId,
    commit: String,
    label: &str,
) -> Result<Checkpoint, CheckoutError> {
    // Numbered after the last; a number taken meanwhile is not overwritten.
    for _ in 0..8 {
        let n = list(root, run)?.last().map_or(1, |c| c.n + 1);
        let name = format!("{}{n}", refs(run));
        if git(root, &["update-ref", &name, &commit, ""], &[]).is_ok() {
            return Ok(Checkpoint {
                n,
                commit,
                label: label.to_owned(),
            });
        }
    }
    Err(CheckoutError::Git {
        command: "update-ref".into(),
        dir: root.display().to_string(),
        message: "no checkpoint number could be taken".into(),
    })
}

/// Puts `changes` (from the present work tree to `target`,
/// [`checkout::changed`]) into the work
/// tree at `root`: files `target` does not hold removed first, deepest first
/// (with the folders they leave empty), then files written as `target` holds
/// them (through an index of its own in `scratch`: the person's is
/// untouched). A path that is a folder in one and a file in the other is
/// undone in that order.
pub fn restore(
    root: &Path,
    target: &str,
    changes: &[PathChange],
    scratch: &Path,
) -> Result<(), CheckoutError> {
    let mut removed: Vec<&PathChange> = changes.iter().filter(|c| c.after.is_none()).collect();
    removed.sort_by_key(|c| std::cmp::Reverse(c.path.components().count()));
    for change in removed {
        let path = root.join(&change.path);
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            // Gone already, or under a folder that is a file now.
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                ) => {}
            Err(e) => return Err(e.into()),
        }
        let mut folder = path.parent();
        while let Some(dir) = folder.filter(|d| *d != root && d.starts_with(root)) {
            if std::fs::remove_dir(dir).is_err() {
                break;
            }
            folder = dir.parent();
        }
    }
    let written: Vec<String> = changes
        .iter()
        .filter(|c| c.after.is_some())
        .map(|c| c.path.display().to_string())
        .collect();
    if written.is_empty() {
        return Ok(());
    }
    std::fs::create_dir_all(scratch)?;
    let index = scratch.join(format!("index.{}", SessionId::new()));
    let env = [("GIT_INDEX_FILE", index.as_os_str())];
    let done = (|| {
        git(root, &["read-tree", target], &env)?;
        let mut args = vec!["checkout-index", "--force", "--quiet", "--"];
        args.extend(written.iter().map(String::as_str));
        git(root, &args, &env)
    })();
    let _ = std::fs::remove_file(&index);
    done.map(drop)
}

/// Deletes run `run`'s checkpoints in the repository at `root`; how many.
pub fn forget(root: &Path, run: SessionId) -> Result<usize, CheckoutError> {
    let points = list(root, run)?;
    for point in &points {
        git(
            root,
            &["update-ref", "-d", &format!("{}{}", refs(run), point.n)],
            &[],
        )?;
    }
    Ok(points.len())
}

/// A run's checkpoints of its workspace: one before its first change, one
/// before each merge into it, one at its end (when it took any). Outside a
/// git repository (or one without commits) it takes none.
#[derive(Debug)]
pub struct Checkpoints {
    /// The workspace.
    workspace: PathBuf,
    /// Where temporary indexes are made.
    scratch: PathBuf,
    /// What a checkpoint leaves out (the run's own state).
    leave_out: Arc<[PathBuf]>,
    /// Where checkpoints outside a repository are kept (`<run id>/<n>` in it).
    copies: PathBuf,
    /// What the run's checkpoint outside a repository holds, once read.
    held: Arc<std::sync::Mutex<Option<outside::Held>>>,
    /// The run, once its lead has started.
    run: OnceLock<SessionId>,
    /// The top of the workspace's repository (`None`: in none), looked up once.
    top: tokio::sync::OnceCell<Option<PathBuf>>,
    /// The first change's checkpoint is taken (or was tried).
    first: tokio::sync::OnceCell<()>,
    /// Any checkpoint was taken.
    taken: AtomicBool,
}

impl Checkpoints {
    /// The checkpoints of the workspace at `workspace` (canonical); outside a
    /// repository, copies kept in `copies`.
    pub fn new(
        workspace: PathBuf,
        scratch: PathBuf,
        leave_out: Arc<[PathBuf]>,
        copies: PathBuf,
    ) -> Self {
        Self {
            workspace,
            scratch,
            leave_out,
            copies,
            held: Arc::default(),
            run: OnceLock::new(),
            top: tokio::sync::OnceCell::new(),
            first: tokio::sync::OnceCell::new(),
            taken: AtomicBool::new(false),
        }
    }

    /// Names the run (its lead's id), before anything it does can change the
    /// workspace (until then no checkpoint is taken).
    pub fn set_run(&self, run: SessionId) {
        let _ = self.run.set(run);
    }

    /// Takes the checkpoint before the run's first change, once.
    pub async fn before_first_change(&self) {
        if self.run.get().is_none() {
            return;
        }
        self.first
            .get_or_init(|| async {
                self.take("before the first change").await;
            })
            .await;
    }

    /// Takes a checkpoint before merging branch `branch` into `tree` (when it
    /// is the workspace's repository).
    pub async fn before_merge(&self, tree: &Path, branch: &str) {
        let top = self.top().await;
        if top.as_deref() == Some(tree) {
            self.before_first_change().await;
            self.take(&format!("before merging {branch}")).await;
        }
    }

    /// Outside a repository, keeps a copy of the file at `path` (absolute) as
    /// it is before the run's file tools first change it.
    pub async fn before_file_change(&self, path: PathBuf) {
        let Some(run) = self.run.get().copied() else {
            return;
        };
        if self.top().await.is_some() {
            return;
        }
        let held = self.held.clone();
        // A file saved already costs no look at the disk.
        let known = {
            let held = held.lock().unwrap_or_else(|e| e.into_inner());
            let rel = path.strip_prefix(&self.workspace).ok();
            held.as_ref().zip(rel).is_some_and(|(h, rel)| h.holds(rel))
        };
        if known {
            return;
        }
        let dir = outside::folder(&self.copies.join(run.to_string()), 1);
        let workspace = self.workspace.clone();
        let saved = tokio::task::spawn_blocking(move || {
            let mut held = held.lock().unwrap_or_else(|e| e.into_inner());
            let held = held.get_or_insert_with(|| outside::Held::read(&dir));
            outside::save(&dir, &workspace, &path, held)
        })
        .await;
        match saved {
            Ok(Ok(true)) => self.taken.store(true, Ordering::SeqCst),
            Ok(Ok(false)) => tracing::warn!("a file was left out of the checkpoint (it is full)"),
            Ok(Err(e)) => tracing::warn!(error = %e, "a file was left out of the checkpoint"),
            Err(e) => tracing::warn!(error = %e, "a file was left out of the checkpoint"),
        }
    }

    /// Takes the checkpoint of the run's end, when it took any before.
    pub async fn at_end(&self) {
        self.at_rest("the run's end", false).await;
    }

    /// Takes a checkpoint after an interactive session's answer, when it
    /// took any before and the workspace changed since the last: what the
    /// run changed until then is a checkpoint's, so a rewind finds nothing of
    /// the person's to lose in it.
    pub async fn after_answer(&self) {
        self.at_rest("an answer", true).await;
    }

    /// Takes a checkpoint labelled `label` where the run rests (its end, an
    /// answer), when it took any before; `only_if_changed`: unless the
    /// workspace is as the last one holds it.
    async fn at_rest(&self, label: &str, only_if_changed: bool) {
        if !self.taken.load(Ordering::SeqCst) {
            return;
        }
        if self.top().await.is_some() {
            self.take_as(label, only_if_changed).await;
            return;
        }
        let Some(run) = self.run.get().copied() else {
            return;
        };
        let dir = outside::folder(&self.copies.join(run.to_string()), 1);
        let workspace = self.workspace.clone();
        if let Ok(Err(e)) =
            tokio::task::spawn_blocking(move || outside::end(&dir, &workspace)).await
        {
            tracing::warn!(error = %e, "the run's end was not noted in its checkpoint");
        }
    }

    /// Looks up the workspace's repository, so that the run's first change
    /// in a workspace outside git is not held up by the looking.
    pub async fn locate(&self) {
        self.top().await;
    }

    /// The top of the workspace's repository, if it is in one.
    async fn top(&self) -> Option<PathBuf> {
        self.top
            .get_or_init(|| async {
                let workspace = self.workspace.clone();
                tokio::task::spawn_blocking(move || checkout::place(&workspace).ok())
                    .await
                    .ok()
                    .flatten()
                    .and_then(|place| place.root.canonicalize().ok())
            })
            .await
            .clone()
    }

    /// Takes one, labelled `label`; nothing outside a repository with a
    /// commit (a failure is logged: a checkpoint never stops the run).
    async fn take(&self, label: &str) {
        self.take_as(label, false).await;
    }

    /// As [`Checkpoints::take`]; `only_if_changed`: none when the workspace
    /// is as the last checkpoint holds it.
    async fn take_as(&self, label: &str, only_if_changed: bool) {
        let Some(run) = self.run.get().copied() else {
            return;
        };
        let Some(root) = self.top().await else {
            return;
        };
        let (scratch, leave_out, label) = (
            self.scratch.clone(),
            self.leave_out.clone(),
            label.to_owned(),
        );
        let taken = tokio::task::spawn_blocking(move || match only_if_changed {
            true => take_if_changed(&root, run, &label, &scratch, &leave_out),
            false => take(&root, run, &label, &scratch, &leave_out).map(Some),
        })
        .await;
        match taken {
            Ok(Ok(_)) => self.taken.store(true, Ordering::SeqCst),
            Ok(Err(e)) => tracing::warn!(error = %e, "no checkpoint was taken"),
            Err(e) => tracing::warn!(error = %e, "no checkpoint was taken"),
        }
    }
}

#[cfg(test)]
mod tests;
