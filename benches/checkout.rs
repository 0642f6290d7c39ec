//! What a private checkout costs: on a repository of 10 000 files (40 MB), the
//! time to snapshot the work tree (a changed file and an untracked one in it),
//! to clone it sharing the objects with its work tree at the snapshot, and to
//! remove the clone, and the disk the clone takes; beside `git worktree add
//! --detach` and `git worktree remove` of the same commit, the bare way to get a
//! second work tree.
//!
//! `cargo bench --bench checkout` (`CHECKOUT_ROUNDS`, default 3).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr
)]

mod support;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use orchestrate::git::checkout;

const DIRS: usize = 100;
const FILES: usize = 100;

fn main() {
    let rounds = support::env_or("CHECKOUT_ROUNDS", 3);
    let repo = tempfile::tempdir().unwrap();
    let root = repo.path().canonicalize().unwrap();
    let bytes = repository(&root);
    println!(
        "a repository of {} files, {:.1} MB",
        DIRS * FILES,
        bytes as f64 / 1e6
    );
    println!(
        "{:<26} {:>10} {:>10} {:>10} {:>12} {:>12}",
        "case", "snapshot", "create", "remove", "work tree", "git dir"
    );
    for _ in 0..rounds {
        let scratch = tempfile::tempdir().unwrap();
        // Each case starts with nothing waiting to go to disk: the last one's
        // 40 MB being written back would slow the next one's writes.
        settle();
        let started = Instant::now();
        let snap = checkout::snapshot(&root, scratch.path()).unwrap();
        let snapshot = started.elapsed();
        let dest = scratch.path().join("clone");
        let started = Instant::now();
        checkout::clone(&root, &dest, &snap).unwrap();
        let create = started.elapsed();
        let (tree, git_dir) = (size(&dest, Some(".git")), size(&dest.join(".git"), None));
        let started = Instant::now();
        std::fs::remove_dir_all(&dest).unwrap();
        let remove = started.elapsed();
        row(
            "clone --shared (orchestrate)",
            Some(snapshot),
            create,
            remove,
            tree,
            git_dir,
        );

        settle();
        let wt = scratch.path().join("worktree");
        let wt_text = wt.to_str().unwrap();
        let started = Instant::now();
        support::git(
            &root,
            &["worktree", "add", "--quiet", "--detach", wt_text, "HEAD"],
        );
        let create = started.elapsed();
        let (tree, own) = (size(&wt, Some(".git")), worktree_git_size(&root));
        let started = Instant::now();
        support::git(&root, &["worktree", "remove", "--force", wt_text]);
        let remove = started.elapsed();
        row("git worktree add", None, create, remove, tree, own);
    }
}

fn row(
    label: &str,
    snapshot: Option<Duration>,
    create: Duration,
    remove: Duration,
    tree: u64,
    git: u64,
) {
    let ms = |d: Duration| format!("{:.0} ms", d.as_secs_f64() * 1000.0);
    println!(
        "{label:<26} {:>10} {:>10} {:>10} {:>9.1} MB {:>9.2} MB",
        snapshot.map_or("–".to_owned(), ms),
        ms(create),
        ms(remove),
        tree as f64 / 1e6,
        git as f64 / 1e6
    );
}

/// Writes everything waiting back to disk.
fn settle() {
    let done = Command::new("sync").status().unwrap();
    assert!(done.success());
}

/// A repository of DIRS × FILES source files of about 4 KB, committed, then a
/// file changed and one added: its files' bytes.
fn repository(root: &Path) -> u64 {
    support::git(root, &["init", "-q", "-b", "main"]);
    let mut bytes = 0;
    for d in 0..DIRS {
        let dir = root.join(format!("src/d{d}"));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..FILES {
            let text = format!("fn f{f}() -> u32 {{\n    {f}\n}}\n{}\n", "0".repeat(4000));
            bytes += text.len() as u64;
            std::fs::write(dir.join(format!("f{f}.rs")), text).unwrap();
        }
    }
    support::git(root, &["add", "."]);
    support::git(root, &["commit", "-q", "-m", "init"]);
    std::fs::write(root.join("src/d1/f1.rs"), "changed\n").unwrap();
    std::fs::write(root.join("new.rs"), "new\n").unwrap();
    bytes
}

/// Bytes of the files under `dir` (blocks on disk), leaving out `skip`.
fn size(dir: &Path, skip: Option<&str>) -> u64 {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        if skip.is_some_and(|s| entry.file_name() == s) {
            continue;
        }
        let meta = entry.metadata().unwrap();
        total += if meta.is_dir() {
            size(&entry.path(), None)
        } else {
            std::os::unix::fs::MetadataExt::blocks(&meta) * 512
        };
    }
    total
}

/// What a linked work tree adds to the main repository's git directory.
fn worktree_git_size(root: &Path) -> u64 {
    let worktrees = root.join(".git/worktrees");
    if worktrees.is_dir() {
        size(&worktrees, None)
    } else {
        0
    }
}
