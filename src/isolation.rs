//! Isolated sub-agents: who gets a private checkout ([`wanted`]), its making
//! and bringing back in git (`steps`), and its work brought back: a clean
//! merge plan of a private checkout ([`crate::git::checkout::plan_merge`])
//! written into its parent's work tree as uncommitted changes, all or nothing. Every path is locked as the
//! file tools lock it; every file is first checked to be what the plan was made
//! against, so a file the person or another agent changed since is never
//! overwritten; links, submodules and protected paths are not merged. Then the
//! files are written through the same descriptors beneath the work tree as the
//! file tools' writes.

pub mod steps;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::ToolError;
use crate::git::checkout::{self, Blob, MergePlan, PathChange};
use crate::protocol::SessionId;
use crate::roles::Isolation;
use crate::tools::beneath::Beneath;
use crate::tools::files::FileState;
use crate::tools::protected::is_protected;

/// Which sub-agents work in a private checkout when their role does not say
/// (`--isolation`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Policy {
    /// Those whose role may change files with Write, Edit or MultiEdit, when
    /// the workspace is in a git repository.
    #[default]
    Auto,
    /// Every sub-agent.
    Worktree,
    /// None: every sub-agent shares its parent's tree.
    None,
}

impl std::str::FromStr for Policy {
    type Err = String;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        match value {
            "auto" => Ok(Self::Auto),
            "worktree" => Ok(Self::Worktree),
            "none" => Ok(Self::None),
            other => Err(format!(
                "unknown isolation {other:?} (expected auto, worktree or none)"
            )),
        }
    }
}

/// The tools that change files themselves: a role with one of them writes.
pub const WRITING_TOOLS: [&str; 3] = ["Write", "Edit", "MultiEdit"];

/// Whether a sub-agent works in a private checkout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wanted {
    /// No: it shares its parent's tree.
    No,
    /// Yes, where its parent's tree is in a git repository (`auto`).
    InRepository,
    /// Yes, asked for (`worktree`): where none can be made, a warning says
    /// why.
    Asked,
}

/// Whether a sub-agent whose role says `role` (its `isolation`) and whose
/// tools are `tools` works in a private checkout under `policy`. A role's
/// own word wins.
pub fn wanted(policy: Policy, role: Option<Isolation>, tools: &[&str]) -> Wanted {
    match (role, policy) {
        (Some(Isolation::Worktree), _) | (None, Policy::Worktree) => Wanted::Asked,
        (Some(Isolation::None), _) | (None, Policy::None) => Wanted::No,
        (None, Policy::Auto) if tools.iter().any(|t| WRITING_TOOLS.contains(t)) => {
            Wanted::InRepository
        }
        (None, Policy::Auto) => Wanted::No,
    }
}

/// A Task call's wish for a private checkout, with what bringing its work
/// back needs.
#[derive(Clone, Debug)]
pub struct Isolate {
    /// The parent's workspace: the tree the checkout is made from and merged
    /// back into.
    pub from: PathBuf,
    /// The run's id (its branches are named after it).
    pub run: SessionId,
    /// The runtime's file locks, which a merge takes as Edit does.
    pub files: Arc<FileState>,
    /// The places no write may land.
    pub private: Arc<[PathBuf]>,
    /// Whether the sub-agent wants a checkout of its own; one its journal
    /// records is brought back whatever this says.
    pub wanted: Wanted,
    /// The run's checkpoints, one taken before each merge into the workspace.
    pub checkpoints: Option<Arc<crate::git::checkpoint::Checkpoints>>,
}

/// The branch that keeps sub-agent `session`'s work (of role `role`, in run
/// `run`): `orchestrate/<run's first 8 hex digits>/<role>-<session's last 8>`,
/// the role's name cut to letters, digits, `-`, `_` and `.`.
pub fn branch_name(run: SessionId, role: &str, session: SessionId) -> String {
    let run = run.to_string();
    let session = session.to_string();
    let mut label: String = role
        .chars()
        .map(|c| match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '-' | '_' => c,
            _ => '-',
        })
        .take(40)
        .collect();
    label = label.trim_matches('-').to_owned();
    if label.is_empty() {
        label = "agent".to_owned();
    }
    format!(
        "orchestrate/{}/{label}-{}",
        &run[..8],
        &session[session.len() - 8..]
    )
}

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
/// canonical) into that work tree, all or nothing; only paths under `prefix`
/// (from the top of the work tree; empty: all) are merged; `private`: the
/// places no write may land (the run's own state). A file that is already
/// what the plan makes it counts as merged: a merge cut off and done again
/// writes nothing twice.
pub async fn apply(
    files: &Arc<FileState>,
    root: &Path,
    prefix: &Path,
    private: Arc<[PathBuf]>,
    plan: MergePlan,
) -> Result<Merged, ToolError> {
    let changes = match plan {
        MergePlan::Nothing => return Ok(Merged::Nothing),
        MergePlan::Conflict(files) => return Ok(Merged::Conflict { files }),
        MergePlan::Clean(changes) => changes,
    };
    let locks: Vec<PathBuf> = changes.iter().map(|c| root.join(&c.path)).collect();
    let (root, prefix) = (root.to_owned(), prefix.to_owned());
    files
        .locked_all(&locks, "merge", &Default::default(), move || {
            let beneath = Beneath::new(root.clone(), private);
            write_all(&root, &prefix, &beneath, &changes)
        })
        .await
}

/// Checks every change against the work tree, then writes them all, or none.
fn write_all(
    root: &Path,
    prefix: &Path,
    beneath: &Beneath,
    changes: &[PathChange],
) -> Result<Merged, ToolError> {
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
        // Protected where the file tools would ask: at the top of the work
        // tree and at the parent's place in it.
        if !change.path.starts_with(prefix)
            || is_protected(root, &path)
            || is_protected(&root.join(prefix), &path)
            || !plain(&change.before)
            || !plain(&change.after)
        {
            refused.push(change.path.clone());
            continue;
        }
        let now = match beneath.read_bytes(&path) {
            Ok(bytes) => Some(bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            // Not a regular file, or in a private place: not merged.
            Err(_) => {
                refused.push(change.path.clone());
                continue;
            }
        };
        let before = change.before.as_ref().map(&blob).transpose()?;
        let after = change.after.as_ref().map(&blob).transpose()?;
        let done = now == after;
        if now != before && !done {
            refused.push(change.path.clone());
            continue;
        }
        planned.push((path, change, before, after, done));
    }
    if !refused.is_empty() {
        return Ok(Merged::Conflict { files: refused });
    }
    let (mut added, mut removed) = (0, 0);
    for (path, change, before, after, done) in &planned {
        let (plus, minus) = counted(before.as_deref(), after.as_deref());
        added += plus;
        removed += minus;
        if *done {
            // Its content is there already; its mode may not be.
            if let Some(blob) = &change.after {
                beneath
                    .set_executable(path, blob.mode == "100755")
                    .map_err(|e| failed(&format!("{}: {e}", change.path.display())))?;
            }
            continue;
        }
        let written = match (after, &change.after) {
            (Some(bytes), Some(blob)) => beneath
                .write_atomic(path, bytes)
                .and_then(|()| beneath.set_executable(path, blob.mode == "100755")),
            _ => beneath.remove(path),
        };
        written.map_err(|e| failed(&format!("{}: {e}", change.path.display())))?;
    }
    Ok(Merged::Merged {
        files: planned.iter().map(|(_, c, ..)| c.path.clone()).collect(),
        added,
        removed,
    })
}

/// Files larger than this are not diffed to count their lines.
const MAX_COUNTED: usize = 4 << 20;

/// Lines added and removed going from `before` to `after` (none counted for
/// a file past [`MAX_COUNTED`]).
fn counted(before: Option<&[u8]>, after: Option<&[u8]>) -> (usize, usize) {
    let size = |b: Option<&[u8]>| b.map_or(0, <[u8]>::len);
    if size(before).max(size(after)) > MAX_COUNTED {
        return (0, 0);
    }
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

#[cfg(test)]
mod wanted_tests {
    use super::*;

    #[test]
    fn a_roles_word_wins_then_the_policy_then_its_tools() {
        let writer = ["Read", "Edit", "Bash"];
        let tester = ["Read", "Bash"];
        let worktree = Some(Isolation::Worktree);
        assert_eq!(wanted(Policy::None, worktree, &tester), Wanted::Asked);
        assert_eq!(
            wanted(Policy::Worktree, Some(Isolation::None), &writer),
            Wanted::No
        );
        assert_eq!(wanted(Policy::Worktree, None, &tester), Wanted::Asked);
        assert_eq!(wanted(Policy::None, None, &writer), Wanted::No);
        assert_eq!(wanted(Policy::Auto, None, &writer), Wanted::InRepository);
        assert_eq!(wanted(Policy::Auto, None, &tester), Wanted::No);
        assert_eq!(
            wanted(Policy::Auto, None, &["MultiEdit"]),
            Wanted::InRepository
        );
        assert_eq!("auto".parse(), Ok(Policy::Auto));
        assert!("sometimes".parse::<Policy>().is_err());
    }
}
