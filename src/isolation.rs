//! Isolated sub-agents' work brought back: a clean merge plan of a private
//! checkout ([`crate::git::checkout::plan_merge`]) written into its parent's
//! work tree as uncommitted changes, all or nothing. Every path is locked as the
//! file tools lock it; every file is first checked to be what the plan was made
//! against, so a file the person or another agent changed since is never
//! overwritten; links, submodules and protected paths are not merged. Then the
//! files are written through the same descriptors beneath the work tree as the
//! file tools' writes.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::ToolError;
use crate::git::checkout::{self, Blob, MergePlan, PathChange};
use crate::tools::beneath::Beneath;
use crate::tools::files::FileState;
use crate::tools::protected::is_protected;

/// How bringing a checkout's work back went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Merged {
    /// It changed nothing.
    Nothing,
    /// Its changes are in the parent's tree.
    Merged {
        /// The files written or removed, from the top of the work tree.
        files: Vec<PathBuf>,
        /// Lines added.
        added: usize,
        /// Lines removed.
        removed: usize,
    },
    /// Nothing was written: these paths conflict, changed since the merge was
    /// worked out, or are not merged (links, submodules, protected paths).
    Conflict {
        /// The paths.
        files: Vec<PathBuf>,
    },
}

/// Writes `plan` (worked out in the repository whose work tree is `root`,
/// canonical) into that work tree, all or nothing; `private`: the places no
/// write may land (the run's own state).
pub async fn apply(
    files: &Arc<FileState>,
    root: &Path,
    private: Arc<[PathBuf]>,
    plan: MergePlan,
) -> Result<Merged, ToolError> {
    let changes = match plan {
        MergePlan::Nothing => return Ok(Merged::Nothing),
        MergePlan::Conflict(files) => return Ok(Merged::Conflict { files }),
        MergePlan::Clean(changes) => changes,
    };
    let locks: Vec<PathBuf> = changes.iter().map(|c| root.join(&c.path)).collect();
    let root = root.to_owned();
    files
        .locked_all(&locks, "merge", &Default::default(), move || {
            let beneath = Beneath::new(root.clone(), private);
            write_all(&root, &beneath, &changes)
        })
        .await
}

/// Checks every change against the work tree, then writes them all, or none.
fn write_all(root: &Path, beneath: &Beneath, changes: &[PathChange]) -> Result<Merged, ToolError> {
    let failed = |e: &dyn std::fmt::Display| ToolError::Failed(format!("merge: {e}"));
    let blob = |b: &Blob| checkout::read_blob(root, &b.oid).map_err(|e| failed(&e));
    let mut refused = Vec::new();
    let mut planned = Vec::new();
    for change in changes {
        let path = root.join(&change.path);
        let plain = |b: &Option<Blob>| {
            b.as_ref()
                .is_none_or(|b| matches!(b.mode.as_str(), "100644" | "100755"))
        };
        if is_protected(root, &path) || !plain(&change.before) || !plain(&change.after) {
            refused.push(change.path.clone());
            continue;
        }
        let now = match beneath.read_bytes(&path) {
            Ok(bytes) => Some(bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(failed(&format!("{}: {e}", change.path.display()))),
        };
        let before = change.before.as_ref().map(&blob).transpose()?;
        if now != before {
            refused.push(change.path.clone());
            continue;
        }
        let after = change.after.as_ref().map(&blob).transpose()?;
        planned.push((path, change, before, after));
    }
    if !refused.is_empty() {
        return Ok(Merged::Conflict { files: refused });
    }
    let (mut added, mut removed) = (0, 0);
    for (path, change, before, after) in &planned {
        let (plus, minus) = counted(before.as_deref(), after.as_deref());
        added += plus;
        removed += minus;
        let written = match (after, &change.after) {
            (Some(bytes), Some(blob)) => beneath
                .write_atomic(path, bytes)
                .and_then(|()| beneath.set_executable(path, blob.mode == "100755")),
            _ => beneath.remove(path),
        };
        written.map_err(|e| failed(&format!("{}: {e}", change.path.display())))?;
    }
    Ok(Merged::Merged {
        files: planned.iter().map(|(_, c, _, _)| c.path.clone()).collect(),
        added,
        removed,
    })
}

/// Lines added and removed going from `before` to `after`.
fn counted(before: Option<&[u8]>, after: Option<&[u8]>) -> (usize, usize) {
    let text = |b: Option<&[u8]>| String::from_utf8_lossy(b.unwrap_or_default()).into_owned();
    let (old, new) = (text(before), text(after));
    let (diff, _) = crate::tools::line_diff(&old, &new);
    diff.iter_all_changes()
        .fold((0, 0), |(plus, minus), change| match change.tag() {
            similar::ChangeTag::Insert => (plus + 1, minus),
            similar::ChangeTag::Delete => (plus, minus + 1),
            similar::ChangeTag::Equal => (plus, minus),
        })
}

#[cfg(test)]
mod tests;
