//! An isolated sub-agent's private checkout and what became of its changes, as
//! its journal keeps them and its Task result says them.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// A sub-agent's private checkout: a clone of its parent's repository.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkout {
    /// The clone's work tree (canonical): what the sub-agent's commands may
    /// write, its own git directory included.
    pub root: PathBuf,
    /// Where the sub-agent works in it: the same place its parent works in its
    /// repository.
    pub workdir: PathBuf,
    /// The work tree of the parent's repository, which the work merges into.
    pub into: PathBuf,
    /// The parent's place in that work tree, from its top (empty at the top):
    /// only changes there are merged.
    pub prefix: PathBuf,
    /// The snapshot commit of the parent's tree the clone started from.
    pub base: String,
    /// The branch its work is kept on in the parent's repository.
    pub branch: String,
    /// What the checkout lacks (submodules, LFS files), one line each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lacks: Vec<String>,
    /// Its parent's, worked in by a sub-agent of an isolated sub-agent: never
    /// brought back or removed by it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub borrowed: bool,
}

/// What became of an isolated sub-agent's changes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "changes", rename_all = "snake_case")]
pub enum Changes {
    /// It changed nothing.
    None,
    /// Its changes are in the parent's tree, uncommitted.
    Merged {
        /// The files written or removed, from the top of the work tree.
        files: Vec<String>,
        /// Lines added.
        added: usize,
        /// Lines removed.
        removed: usize,
        /// The branch that holds them as a commit.
        branch: String,
    },
    /// Nothing was merged: these files conflict with the parent's tree (or
    /// changed there since, or are not merged: links, submodules, protected
    /// paths, files outside the parent's place); the work is on `branch`.
    Conflict {
        /// The files.
        files: Vec<String>,
        /// The branch that holds the work.
        branch: String,
    },
    /// Not merged because the sub-agent did not finish its work (it failed or
    /// was cancelled); the work is on `branch`.
    Kept {
        /// The branch that holds the work.
        branch: String,
    },
    /// Not merged because a step of bringing it back failed; the work is in
    /// the checkout, which is kept.
    Unmerged {
        /// What failed.
        reason: String,
        /// The checkout, kept.
        checkout: String,
    },
}

impl Changes {
    /// The Task result's line: `changes: merged (2 files, +12 −3)`,
    /// `changes: conflict in a.rs, b.rs (branch orchestrate/…)`, `changes: none`.
    pub fn line(&self) -> String {
        match self {
            Self::None => "changes: none".to_owned(),
            Self::Merged {
                files,
                added,
                removed,
                ..
            } => {
                let n = files.len();
                let files = if n == 1 { "file" } else { "files" };
                format!("changes: merged ({n} {files}, +{added} \u{2212}{removed})")
            }
            Self::Conflict { files, branch } => {
                format!(
                    "changes: conflict in {} (branch {branch})",
                    files.join(", ")
                )
            }
            Self::Kept { branch } => format!("changes: not merged (branch {branch})"),
            Self::Unmerged { reason, checkout } => {
                format!("changes: not merged: {reason} (its checkout is kept at {checkout})")
            }
        }
    }

    /// The branch left for the person, when the changes were not merged.
    pub fn left_on(&self) -> Option<&str> {
        match self {
            Self::Conflict { branch, .. } | Self::Kept { branch } => Some(branch),
            Self::None | Self::Merged { .. } | Self::Unmerged { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_fate_of_the_changes_is_one_line_of_one_grammar() {
        assert_eq!(Changes::None.line(), "changes: none");
        let merged = Changes::Merged {
            files: vec!["a.rs".into(), "b.rs".into()],
            added: 12,
            removed: 3,
            branch: "orchestrate/0193/coder-1".into(),
        };
        assert_eq!(merged.line(), "changes: merged (2 files, +12 \u{2212}3)");
        assert_eq!(merged.left_on(), None);
        let conflict = Changes::Conflict {
            files: vec!["a.rs".into(), "b.rs".into()],
            branch: "orchestrate/0193/coder-1".into(),
        };
        assert_eq!(
            conflict.line(),
            "changes: conflict in a.rs, b.rs (branch orchestrate/0193/coder-1)"
        );
        assert_eq!(conflict.left_on(), Some("orchestrate/0193/coder-1"));
        let json = serde_json::to_value(&conflict).unwrap();
        assert_eq!(json["changes"], "conflict");
        assert_eq!(serde_json::from_value::<Changes>(json).unwrap(), conflict);
    }
}
