//! The git steps of a private checkout, each on its own so that each can be
//! journaled: making it, committing what its sub-agent did, fetching that
//! into the parent's repository as a branch, the parent's tree as it is now,
//! the merge plan, and removing the checkout. All blocking: callers run them
//! on the blocking pool.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::git::checkout::{self, CheckoutError, MergePlan};
use crate::protocol::Checkout;

/// Files copied from `.worktreeinclude` at most.
const MAX_INCLUDED: usize = 10_000;

/// A checkout made: where, and what it lacks (one line each).
#[derive(Debug)]
pub struct Made {
    /// The checkout.
    pub checkout: Checkout,
    /// What it lacks (submodules, LFS files), one line each.
    pub lacks: Vec<String>,
}

/// A tree taken as a snapshot, pinned while a checkout of it works.
#[derive(Debug)]
pub struct Taken {
    /// The top of its repository's work tree.
    pub into: PathBuf,
    /// The tree's folder below it (empty at the top).
    pub prefix: PathBuf,
    /// The snapshot.
    pub base: String,
    /// What a checkout of it lacks, one line each.
    pub lacks: Vec<String>,
}

/// The tree `from` is in as it is now, as a snapshot commit (made with an
/// index in `scratch`, the places `leave_out` names not taken), pinned as
/// `name` (a checkout's folder's name) until [`remove`]; its work to be
/// kept on `branch`, which must be a name git takes.
pub fn take(
    from: &Path,
    scratch: &Path,
    branch: &str,
    leave_out: &[PathBuf],
    name: &str,
) -> Result<Taken, CheckoutError> {
    let (place, lacks) = checkout::usable(from)?;
    let into = place.root.canonicalize()?;
    // `sub/` as git says it: the same folder, without its trailing slash.
    let prefix: PathBuf = place.prefix.components().collect();
    if !checkout::valid_branch(&into, branch) {
        return Err(CheckoutError::BranchName(branch.to_owned()));
    }
    let base = checkout::snapshot_without(&into, scratch, leave_out)?;
    checkout::pin(&into, name, &base)?;
    Ok(Taken {
        into,
        prefix,
        base,
        lacks,
    })
}

/// Makes a private checkout of the tree `from` is in, at `dest` (which must
/// not exist), from a snapshot of that tree as it is now ([`take`]), its
/// work to be kept on `branch`. The ignored files that `.worktreeinclude` at
/// the repository's top names are copied in; the places `leave_out` names
/// (the run's own state) are not taken.
pub fn make(
    from: &Path,
    dest: &Path,
    scratch: &Path,
    branch: String,
    leave_out: &[PathBuf],
) -> Result<Made, CheckoutError> {
    let name = pin_name(dest);
    let Taken {
        into,
        prefix,
        base,
        lacks,
    } = take(from, scratch, &branch, leave_out, &name)?;
    let made = checkout::clone(&into, dest, &base).and_then(|()| {
        include_ignored(&into, dest, leave_out)?;
        // A folder the snapshot holds nothing of (empty, or all ignored).
        std::fs::create_dir_all(dest.join(&prefix))?;
        Ok(dest.canonicalize()?)
    });
    let root = match made {
        Ok(root) => root,
        Err(e) => {
            let _ = remove_tree(dest);
            let _ = checkout::unpin(&into, &name);
            return Err(e);
        }
    };
    Ok(Made {
        checkout: Checkout {
            workdir: root.join(&prefix),
            root,
            into,
            prefix,
            base,
            branch,
            lacks: lacks.clone(),
            borrowed: false,
        },
        lacks,
    })
}

/// Copies into the clone at `dest` the files of `root` that git ignores and
/// `.worktreeinclude` (gitignore patterns, at the top of `root`) names:
/// regular files only, their executable bit kept, at most [`MAX_INCLUDED`],
/// none in `leave_out`.
fn include_ignored(root: &Path, dest: &Path, leave_out: &[PathBuf]) -> Result<(), CheckoutError> {
    let Ok(text) = crate::small_file::read_to_string(&root.join(".worktreeinclude"), 1 << 20)
    else {
        return Ok(());
    };
    let mut patterns = ignore::gitignore::GitignoreBuilder::new(root);
    for line in text.lines() {
        // A line that is not a pattern names nothing.
        let _ = patterns.add_line(None, line);
    }
    let Ok(patterns) = patterns.build() else {
        return Ok(());
    };
    let mut copied = 0;
    for path in checkout::ignored_files(root)? {
        // Never the run's own state, wherever a pattern points.
        if leave_out
            .iter()
            .any(|place| root.join(&path).starts_with(place))
        {
            continue;
        }
        if copied == MAX_INCLUDED {
            break;
        }
        if !patterns
            .matched_path_or_any_parents(&path, false)
            .is_ignore()
        {
            continue;
        }
        let source = root.join(&path);
        let Ok(meta) = std::fs::symlink_metadata(&source) else {
            continue;
        };
        if !meta.is_file() {
            continue;
        }
        let target = dest.join(&path);
        if let Some(folder) = target.parent() {
            std::fs::create_dir_all(folder)?;
        }
        std::fs::copy(&source, &target)?;
        let mode = if meta.permissions().mode() & 0o111 != 0 {
            0o755
        } else {
            0o644
        };
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(mode))?;
        copied += 1;
    }
    Ok(())
}

/// The name of the ref that keeps a checkout's base: the checkout's own.
pub fn pin_name(dest: &Path) -> String {
    dest.file_name()
        .map_or_else(|| "checkout".into(), |n| n.to_string_lossy().into_owned())
}

/// Commits the checkout's work tree as it is (what its sub-agent changed,
/// committed or not) in the parent's repository, on top of its base, with an
/// index in `scratch`; the commit. The clone's git directory, which the model
/// wrote, is not used.
pub fn commit(checkout: &Checkout, scratch: &Path) -> Result<String, CheckoutError> {
    checkout::commit_work_tree(&checkout.into, &checkout.root, &checkout.base, scratch)
}

/// Whether `commit` changes nothing of the tree the checkout started from.
pub fn unchanged(checkout: &Checkout, commit: &str) -> Result<bool, CheckoutError> {
    checkout::same_tree(&checkout.into, &checkout.base, commit)
}

/// Keeps `commit` as the checkout's branch in the parent's repository.
pub fn keep(checkout: &Checkout, commit: &str) -> Result<(), CheckoutError> {
    checkout::create_branch(&checkout.into, &checkout.branch, commit)
}

/// The parent's tree as it is now, as a snapshot commit (less `leave_out`).
pub fn ours(
    checkout: &Checkout,
    scratch: &Path,
    leave_out: &[PathBuf],
) -> Result<String, CheckoutError> {
    checkout::snapshot_without(&checkout.into, scratch, leave_out)
}

/// The plan of merging `theirs` (fetched) into `ours` (a snapshot of the
/// parent's tree) against the checkout's base.
pub fn plan(checkout: &Checkout, ours: &str, theirs: &str) -> Result<MergePlan, CheckoutError> {
    checkout::plan_merge(&checkout.into, &checkout.base, ours, theirs)
}

/// Removes the checkout and lets its base go: what the model left there
/// unwritable is made writable first.
pub fn remove(checkout: &Checkout) -> Result<(), CheckoutError> {
    remove_tree(&checkout.root)?;
    let _ = checkout::unpin(&checkout.into, &pin_name(&checkout.root));
    Ok(())
}

/// Removes `dir` and everything in it, links not followed; folders a command
/// made unwritable are made writable first.
pub fn remove_tree(dir: &Path) -> std::io::Result<()> {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(_) => {
            let mut stack: Vec<PathBuf> = vec![dir.to_owned()];
            while let Some(folder) = stack.pop() {
                let _ = std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(0o700));
                for entry in std::fs::read_dir(&folder).into_iter().flatten().flatten() {
                    if entry.file_type().is_ok_and(|t| t.is_dir()) {
                        stack.push(entry.path());
                    }
                }
            }
            std::fs::remove_dir_all(dir)
        }
    }
}
