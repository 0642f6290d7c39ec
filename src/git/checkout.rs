//! Private checkouts, in git: a work tree as it is now as a snapshot commit (the
//! person's index, branches and stash untouched), a clone that shares the
//! repository's objects with its work tree at a snapshot, a clone's work tree
//! committed and kept as a branch by the repository's own git directory, and
//! the three-way merge of what a clone changed back onto the repository's work
//! tree, worked out whole before anything is written. Every git here is
//! [`super::command`]'s (no program of a repository's runs), with explicit
//! directories; a clone's git directory is written by the model, so once made
//! it is never used again.
//!
//! Blocking: callers run these on the blocking pool.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Why a checkout could not be made or merged.
#[derive(Debug, thiserror::Error)]
pub enum CheckoutError {
    /// The folder is in no git repository.
    #[error("{0} is not in a git repository")]
    NoRepository(String),
    /// The repository has no commit to start from.
    #[error("the repository at {0} has no commits yet")]
    NoCommits(String),
    /// The git installed is older than checkouts need.
    #[error("git {found} is older than {MIN_GIT} (private checkouts need it)")]
    OldGit {
        /// The version found.
        found: String,
    },
    /// A branch name git would not take.
    #[error("{0:?} is not a valid branch name")]
    BranchName(String),
    /// A git command failed.
    #[error("git {command} in {dir}: {message}")]
    Git {
        /// The command, without its configuration.
        command: String,
        /// Where it ran.
        dir: String,
        /// Its error output's last line.
        message: String,
    },
    /// A folder outside any repository too large to shadow.
    #[error("{0} holds more than {files} files or {mib} MiB", files = super::shadow::MAX_FILES, mib = super::shadow::MAX_BYTES >> 20)]
    TooLarge(String),
    /// A file could not be read or written.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// The oldest git checkouts work with (`merge-tree --write-tree`).
pub const MIN_GIT: &str = "2.38";

/// Where a checkout of `dir`'s repository can be made, and what it will lack
/// (one line each); why not, when it cannot: no repository, no commit, a git
/// older than [`MIN_GIT`].
pub fn usable(dir: &Path) -> Result<(Place, Vec<String>), CheckoutError> {
    // The git on the path, asked once.
    static VERSION: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let found = match VERSION.get() {
        Some(found) => found.clone(),
        None => {
            let version = git(dir, &["--version"], &[])?;
            let found = version.trim_start_matches("git version ").to_owned();
            VERSION.get_or_init(|| found).clone()
        }
    };
    if !at_least(&found, MIN_GIT) {
        return Err(CheckoutError::OldGit { found });
    }
    let place = place(dir)?;
    git(
        &place.root,
        &["rev-parse", "--verify", "--quiet", "HEAD^{commit}"],
        &[],
    )
    .map_err(|_| CheckoutError::NoCommits(place.root.display().to_string()))?;
    let mut lacks = Vec::new();
    if place.root.join(".gitmodules").is_file() {
        lacks.push("its submodules are not initialised in a checkout".to_owned());
    }
    let attributes = crate::small_file::read_to_string(&place.root.join(".gitattributes"), 1 << 20)
        .unwrap_or_default();
    if attributes.contains("filter=lfs") {
        lacks.push(
            "its Git LFS files are not fetched into a checkout (their pointers are)".to_owned(),
        );
    }
    Ok((place, lacks))
}

/// Whether version `found` (`2.47.1`, `2.39.2.windows.1`) is at least `least`.
fn at_least(found: &str, least: &str) -> bool {
    let numbers =
        |v: &str| -> Vec<u32> { v.split('.').map_while(|part| part.parse().ok()).collect() };
    numbers(found) >= numbers(least)
}

/// Who the commits orchestrate makes are by, whatever the configuration says.
const IDENTITY: [(&str, &str); 4] = [
    ("GIT_AUTHOR_NAME", "orchestrate"),
    ("GIT_AUTHOR_EMAIL", "orchestrate@localhost"),
    ("GIT_COMMITTER_NAME", "orchestrate"),
    ("GIT_COMMITTER_EMAIL", "orchestrate@localhost"),
];

/// Runs git `args` in `dir` with `env`; its output, or the error of a failure.
fn git_bytes(dir: &Path, args: &[&str], env: &[(&str, &OsStr)]) -> Result<Vec<u8>, CheckoutError> {
    let out = git_run(dir, args, env, Vec::new())?;
    if out.status.success() {
        return Ok(out.stdout);
    }
    Err(failed(dir, args, &out.stderr))
}

/// Runs git `args` in `dir` with `env` and `input` on its standard input
/// (none when empty): how it ended, whatever its exit code.
pub(super) fn git_run(
    dir: &Path,
    args: &[&str],
    env: &[(&str, &OsStr)],
    input: Vec<u8>,
) -> Result<std::process::Output, CheckoutError> {
    let mut command = super::command(dir);
    command.args(args).envs(env.iter().copied());
    Ok(super::output_fed(command, input)?)
}

pub(super) fn failed(dir: &Path, args: &[&str], stderr: &[u8]) -> CheckoutError {
    let said = String::from_utf8_lossy(stderr);
    CheckoutError::Git {
        command: args.join(" "),
        dir: dir.display().to_string(),
        message: said.trim().lines().last().unwrap_or("failed").to_owned(),
    }
}

/// As [`git_bytes`], its output as trimmed text.
pub(super) fn git(
    dir: &Path,
    args: &[&str],
    env: &[(&str, &OsStr)],
) -> Result<String, CheckoutError> {
    let out = git_bytes(dir, args, env)?;
    Ok(String::from_utf8_lossy(&out).trim().to_owned())
}

/// Where a folder is in its repository.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Place {
    /// The top of the work tree.
    pub root: PathBuf,
    /// The folder's path below it (empty at the top).
    pub prefix: PathBuf,
}

/// The repository `dir` is in, and where in it.
pub fn place(dir: &Path) -> Result<Place, CheckoutError> {
    let found = git(dir, &["rev-parse", "--show-toplevel", "--show-prefix"], &[])
        .map_err(|_| CheckoutError::NoRepository(dir.display().to_string()))?;
    let mut lines = found.lines();
    let root = PathBuf::from(lines.next().unwrap_or_default());
    let prefix = PathBuf::from(lines.next().unwrap_or_default());
    Ok(Place { root, prefix })
}

/// The work tree at `root` as it is now, as a commit on top of its `HEAD`:
/// tracked files as they are on disk, untracked files that are not ignored
/// included, ignored ones not. It is made with an index of its own in
/// `scratch` (a folder of the caller's), so the repository's index, branches and
/// stash are untouched; the commit is referenced by nothing. That index starts
/// as a copy of the repository's, whose record of each file's size and time
/// spares reading the files that did not change (without one, from `HEAD`).
pub fn snapshot(root: &Path, scratch: &Path) -> Result<String, CheckoutError> {
    snapshot_without(root, scratch, &[])
}

/// As [`snapshot`], leaving out the places `leave_out` names (absolute; the
/// run's own state, when the work tree holds it).
pub fn snapshot_without(
    root: &Path,
    scratch: &Path,
    leave_out: &[PathBuf],
) -> Result<String, CheckoutError> {
    snapshot_as(root, scratch, leave_out, "orchestrate: snapshot")
}

/// As [`snapshot_without`], the commit's message `message`.
pub(super) fn snapshot_as(
    root: &Path,
    scratch: &Path,
    leave_out: &[PathBuf],
    message: &str,
) -> Result<String, CheckoutError> {
    let head = git(
        root,
        &["rev-parse", "--verify", "--quiet", "HEAD^{commit}"],
        &[],
    )
    .map_err(|_| CheckoutError::NoCommits(root.display().to_string()))?;
    std::fs::create_dir_all(scratch)?;
    let index = scratch.join(format!("index.{}", crate::protocol::SessionId::new()));
    let env = [("GIT_INDEX_FILE", index.as_os_str())];
    let made = (|| {
        seed_index(root, &index, &head)?;
        add_all(root, &env, leave_out)?;
        commit_index(root, &env, &head, message)
    })();
    let _ = std::fs::remove_file(&index);
    made
}

/// Adds everything in the work tree below `dir` to the index `env` names, but
/// `leave_out` (absolute places).
pub(super) fn add_all(
    dir: &Path,
    env: &[(&str, &OsStr)],
    leave_out: &[PathBuf],
) -> Result<(), CheckoutError> {
    git(dir, &["add", "--all", "--", "."], env)?;
    // Taken out again after (an exclude pathspec naming an ignored place
    // makes `add` fail); forced, as what was just added may have changed on
    // disk since (a journal being written).
    for place in leave_out {
        let Ok(rel) = place.strip_prefix(dir) else {
            continue;
        };
        if rel.as_os_str().is_empty() {
            continue;
        }
        let literal = format!(":(literal){}", rel.display());
        let args = [
            "rm",
            "-r",
            "-q",
            "-f",
            "--cached",
            "--ignore-unmatch",
            "--",
            &literal,
        ];
        git(dir, &args, env)?;
    }
    Ok(())
}

/// Starts `index` (a file of orchestrate's) as the repository at `root`
/// sees its work tree: a copy of the repository's own index, whose record of
/// each file's size and time spares reading the files that did not change, or
/// where that cannot be trusted, `head`'s tree (empty when `head` is: no
/// commit yet).
pub(super) fn seed_index(root: &Path, index: &Path, head: &str) -> Result<(), CheckoutError> {
    let env = [("GIT_INDEX_FILE", index.as_os_str())];
    let own = root.join(git(root, &["rev-parse", "--git-path", "index"], &[])?);
    // A regular file only: a clone's index is the model's to make (a FIFO
    // would hold the copy forever). Not where filters are configured: the
    // index holds their stored form (an LFS pointer), and every file is
    // read as it is on disk instead (filters are off for this git).
    let regular = std::fs::symlink_metadata(&own).is_ok_and(|m| m.is_file());
    let raw = super::filters_configured(root);
    if !regular || raw || std::fs::copy(own, index).is_err() {
        let _ = std::fs::remove_file(index);
        match head {
            "" => git(root, &["read-tree", "--empty"], &env)?,
            head => git(root, &["read-tree", head], &env)?,
        };
    }
    Ok(())
}

/// The index `env` names, as a commit on `parent` with `message`, by
/// orchestrate whatever the configuration says.
fn commit_index(
    root: &Path,
    env: &[(&str, &OsStr)],
    parent: &str,
    message: &str,
) -> Result<String, CheckoutError> {
    let tree = git(root, &["write-tree"], env)?;
    let mut with_identity: Vec<(&str, &OsStr)> =
        IDENTITY.iter().map(|(k, v)| (*k, OsStr::new(*v))).collect();
    with_identity.extend(env);
    git(
        root,
        &["commit-tree", &tree, "-p", parent, "-m", message],
        &with_identity,
    )
}

/// Keeps `commit` (a snapshot) in the repository at `root` while a clone may
/// need it: a ref under `refs/orchestrate/snapshots/` named `name` (the
/// clone's, so that two clones of one snapshot keep it each), which no branch, tag or
/// stash listing shows, so that `git gc` there cannot prune what a clone
/// sharing its objects stands on. [`unpin`] lets it go.
pub fn pin(root: &Path, name: &str, commit: &str) -> Result<(), CheckoutError> {
    git(root, &["update-ref", &pinned(name), commit], &[])?;
    Ok(())
}

/// Lets go the snapshot [`pin`] kept as `name`.
pub fn unpin(root: &Path, name: &str) -> Result<(), CheckoutError> {
    git(root, &["update-ref", "-d", &pinned(name)], &[])?;
    Ok(())
}

fn pinned(name: &str) -> String {
    format!("refs/orchestrate/snapshots/{name}")
}

/// A clone of the repository at `root` in `dest` (which must not exist yet)
/// that shares its objects, with its work tree at `commit` (detached) and no
/// remote: a clone's git cannot reach the repository it came from.
pub fn clone(root: &Path, dest: &Path, commit: &str) -> Result<(), CheckoutError> {
    let dest_text = dest.to_string_lossy();
    let root_text = root.to_string_lossy();
    git(
        root,
        &[
            "clone",
            "--quiet",
            "--shared",
            "--no-checkout",
            "--",
            &root_text,
            &dest_text,
        ],
        &[],
    )?;
    git(dest, &["remote", "remove", "origin"], &[])?;
    git(dest, &["checkout", "--quiet", "--detach", commit], &[])?;
    Ok(())
}

/// Whether `name` is a branch name git takes.
pub fn valid_branch(root: &Path, name: &str) -> bool {
    !name.starts_with('-') && git(root, &["check-ref-format", "--branch", name], &[]).is_ok()
}

/// The work tree at `work_tree` (a clone's, which the model wrote) as a commit
/// on top of `base` in the repository at `root`, made with the repository's
/// own git directory and an index of its own in `scratch`: nothing of the
/// clone's git directory (its config, hooks, refs, index or objects) is read
/// or written. Ignored files (by the work tree's ignore files and the
/// repository's exclude file) are left out.
pub fn commit_work_tree(
    root: &Path,
    work_tree: &Path,
    base: &str,
    scratch: &Path,
) -> Result<String, CheckoutError> {
    let git_dir = PathBuf::from(git(root, &["rev-parse", "--absolute-git-dir"], &[])?);
    std::fs::create_dir_all(scratch)?;
    let index = scratch.join(format!("index.{}", crate::protocol::SessionId::new()));
    let env = [
        ("GIT_DIR", git_dir.as_os_str()),
        ("GIT_WORK_TREE", work_tree.as_os_str()),
        ("GIT_INDEX_FILE", index.as_os_str()),
    ];
    let in_tree = work_tree.to_string_lossy();
    let made = (|| {
        git(root, &["read-tree", base], &env)?;
        git(root, &["-C", &in_tree, "add", "--all", "--", "."], &env)?;
        commit_index(root, &env, base, "orchestrate: work")
    })();
    let _ = std::fs::remove_file(&index);
    made
}

/// Makes branch `branch` of the repository at `root` point at `commit`
/// (the name checked first): never moved when it exists and holds other
/// work, and left as it is when it holds this commit already.
pub fn create_branch(root: &Path, branch: &str, commit: &str) -> Result<(), CheckoutError> {
    if !valid_branch(root, branch) {
        return Err(CheckoutError::BranchName(branch.to_owned()));
    }
    let name = format!("refs/heads/{branch}");
    let held = git(root, &["rev-parse", "--verify", "--quiet", &name], &[]);
    if held.is_ok_and(|held| held == commit) {
        return Ok(());
    }
    // The empty old value: only when no branch of that name exists.
    git(root, &["update-ref", &name, commit, ""], &[])?;
    Ok(())
}

/// One path a merge changes in the work tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathChange {
    /// The path, from the top of the work tree, as git names it (any bytes).
    pub path: PathBuf,
    /// Its content after the merge; `None`: removed.
    pub after: Option<Blob>,
    /// Its content in the snapshot the merge was made against; `None`: absent.
    /// The file must still be this when the change is written.
    pub before: Option<Blob>,
}

/// A file's content in a tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Blob {
    /// The object.
    pub oid: String,
    /// Its mode (`100644`, `100755`, `120000` for a link).
    pub mode: String,
}

/// What merging a clone's work back would do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MergePlan {
    /// Nothing changed.
    Nothing,
    /// These paths change; no conflict.
    Clean(Vec<PathChange>),
    /// These paths conflict: nothing may be written.
    Conflict(Vec<PathBuf>),
}

/// Works out the three-way merge of `theirs` (a commit of the repository at
/// `root`) into `ours` (a snapshot of its work tree) against `base` (the
/// snapshot the clone started from), without touching the work tree: the
/// paths it changes, or the paths in conflict.
pub fn plan_merge(
    root: &Path,
    base: &str,
    ours: &str,
    theirs: &str,
) -> Result<MergePlan, CheckoutError> {
    let merge_base = format!("--merge-base={base}");
    let args = [
        "merge-tree",
        "--write-tree",
        "-z",
        "--name-only",
        "--no-messages",
        &merge_base,
        ours,
        theirs,
    ];
    let mut command = super::command(root);
    command.args(args);
    let out = super::output_within(command)?;
    // "<tree>\0" (or "<tree>\n" when clean), then each conflicted path and
    // "\0"; paths are bytes, taken as they are.
    let mut parts = out.stdout.split(|b| *b == 0);
    let tree = String::from_utf8_lossy(parts.next().unwrap_or_default())
        .trim()
        .to_owned();
    match out.status.code() {
        Some(0) => {}
        Some(1) => {
            let paths: Vec<PathBuf> = parts
                .filter(|p| !p.is_empty())
                .map(|p| PathBuf::from(std::ffi::OsStr::from_bytes(p)))
                .collect();
            return Ok(MergePlan::Conflict(paths));
        }
        _ => return Err(failed(root, &args, &out.stderr)),
    }
    let changes = changed(root, ours, &tree)?;
    Ok(if changes.is_empty() {
        MergePlan::Nothing
    } else {
        MergePlan::Clean(changes)
    })
}

fn tree_of(root: &Path, commit: &str) -> Result<String, CheckoutError> {
    git(
        root,
        &["rev-parse", "--verify", &format!("{commit}^{{tree}}")],
        &[],
    )
}

/// The paths whose content differs between trees `from` and `to`, each with
/// its content in both.
pub fn changed(root: &Path, from: &str, to: &str) -> Result<Vec<PathChange>, CheckoutError> {
    let out = git_bytes(
        root,
        &[
            "diff-tree",
            "-r",
            "-z",
            "--no-renames",
            "--no-ext-diff",
            from,
            to,
        ],
        &[],
    )?;
    // Records: ":<old mode> <new mode> <old oid> <new oid> <status>\0<path>\0".
    let mut fields = out.split(|b| *b == 0).filter(|f| !f.is_empty());
    let mut changes = Vec::new();
    while let (Some(meta), Some(path)) = (fields.next(), fields.next()) {
        let meta = String::from_utf8_lossy(meta);
        let words: Vec<&str> = meta.trim_start_matches(':').split(' ').collect();
        let [old_mode, new_mode, old_oid, new_oid, _status] = words[..] else {
            continue;
        };
        let blob = |mode: &str, oid: &str| {
            (mode != "000000").then(|| Blob {
                oid: oid.to_owned(),
                mode: mode.to_owned(),
            })
        };
        changes.push(PathChange {
            path: PathBuf::from(std::ffi::OsStr::from_bytes(path)),
            before: blob(old_mode, old_oid),
            after: blob(new_mode, new_oid),
        });
    }
    Ok(changes)
}

/// Whether the repository at `root` has branch `branch`.
pub fn branch_exists(root: &Path, branch: &str) -> bool {
    let name = format!("refs/heads/{branch}");
    git(root, &["rev-parse", "--verify", "--quiet", &name], &[]).is_ok()
}

/// Deletes branch `branch` of the repository at `root` unless it is the one
/// checked out (git refuses that).
pub fn delete_branch(root: &Path, branch: &str) -> Result<(), CheckoutError> {
    git(root, &["branch", "-D", "--quiet", "--", branch], &[])?;
    Ok(())
}

/// Whether commits `a` and `b` of the repository at `root` hold the same tree.
pub fn same_tree(root: &Path, a: &str, b: &str) -> Result<bool, CheckoutError> {
    Ok(tree_of(root, a)? == tree_of(root, b)?)
}

/// The files of the work tree at `root` that git ignores and does not track,
/// from its top.
pub fn ignored_files(root: &Path) -> Result<Vec<PathBuf>, CheckoutError> {
    let out = git_bytes(
        root,
        &[
            "ls-files",
            "-z",
            "--others",
            "--ignored",
            "--exclude-standard",
        ],
        &[],
    )?;
    Ok(out
        .split(|b| *b == 0)
        .filter(|p| !p.is_empty())
        .map(|p| PathBuf::from(OsStr::from_bytes(p)))
        .collect())
}

/// The bytes of blob `oid`.
pub fn read_blob(root: &Path, oid: &str) -> Result<Vec<u8>, CheckoutError> {
    git_bytes(root, &["cat-file", "blob", oid], &[])
}

#[cfg(test)]
mod tests;
