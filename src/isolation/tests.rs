use std::path::Path;

use super::*;
use crate::git::checkout::{clone, commit_work_tree, create_branch, plan_merge, snapshot};
use crate::git::plain;

/// A repository (canonical path) with `lib.rs`, `gone.rs` and `agents/a.md`
/// committed, and a clone of its work tree: (repository, scratch, clone, base).
fn set_up() -> (tempfile::TempDir, tempfile::TempDir, PathBuf, String) {
    let repo = tempfile::tempdir().unwrap();
    let root = repo.path();
    plain(root, &["init", "-q", "-b", "main"]);
    std::fs::create_dir(root.join("agents")).unwrap();
    std::fs::write(root.join("agents/a.md"), "a role\n").unwrap();
    std::fs::write(root.join("lib.rs"), "one\ntwo\nthree\n").unwrap();
    std::fs::write(root.join("gone.rs"), "to remove\n").unwrap();
    plain(root, &["add", "."]);
    plain(root, &["commit", "-q", "-m", "first"]);
    let scratch = tempfile::tempdir().unwrap();
    let base = snapshot(root, &scratch.path().join("s")).unwrap();
    let dest = scratch.path().join("clone");
    clone(root, &dest, &base).unwrap();
    (repo, scratch, dest, base)
}

/// The plan of merging `clone`'s work back into `root`.
fn plan(root: &Path, scratch: &Path, clone: &Path, base: &str) -> MergePlan {
    let theirs = commit_work_tree(root, clone, base, &scratch.join("t")).unwrap();
    create_branch(root, "orchestrate/run/a", &theirs).unwrap();
    let ours = snapshot(root, &scratch.join("o")).unwrap();
    plan_merge(root, base, &ours, &theirs).unwrap()
}

fn read(root: &Path, name: &str) -> String {
    std::fs::read_to_string(root.join(name)).unwrap()
}

/// `plan` written into `root`, only under `prefix`.
async fn merge(files: &Arc<FileState>, root: &Path, prefix: &str, plan: MergePlan) -> Merged {
    let private: Arc<[PathBuf]> = Arc::from(Vec::new());
    apply(files, root, Path::new(prefix), private, plan)
        .await
        .unwrap()
}

/// A merge that conflicts in `files`.
fn conflict(files: &[&str]) -> Merged {
    Merged::Conflict {
        files: files.iter().map(PathBuf::from).collect(),
    }
}

#[tokio::test]
async fn a_clean_plan_is_written_whole_with_modes_and_removals() {
    let (repo, scratch, dest, base) = set_up();
    let root = repo.path().canonicalize().unwrap();
    std::fs::write(dest.join("lib.rs"), "one\n2\nthree\nfour\n").unwrap();
    std::fs::remove_file(dest.join("gone.rs")).unwrap();
    std::fs::create_dir(dest.join("bin")).unwrap();
    std::fs::write(dest.join("bin/run.sh"), "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(
        dest.join("bin/run.sh"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let plan = plan(&root, scratch.path(), &dest, &base);
    let files = Arc::new(FileState::default());
    let merged = merge(&files, &root, "", plan).await;
    let Merged::Merged {
        files: written,
        added,
        removed,
    } = merged
    else {
        panic!("{merged:?}")
    };
    let mut written = written;
    written.sort();
    assert_eq!(
        written,
        [
            PathBuf::from("bin/run.sh"),
            "gone.rs".into(),
            "lib.rs".into()
        ]
    );
    assert_eq!((added, removed), (3, 2));
    assert_eq!(read(&root, "lib.rs"), "one\n2\nthree\nfour\n");
    assert!(!root.join("gone.rs").exists());
    let mode = std::fs::metadata(root.join("bin/run.sh"))
        .unwrap()
        .permissions();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode) & 0o111,
        0o111
    );
    // Uncommitted: the person's index and history are theirs.
    assert_eq!(plain(&root, &["log", "--oneline"]).lines().count(), 1);
    assert_eq!(files.retained().0, 0, "no lock is left behind");
}

#[tokio::test]
async fn a_file_changed_since_the_plan_or_a_protected_one_stops_the_whole_merge() {
    let (repo, scratch, dest, base) = set_up();
    let root = repo.path().canonicalize().unwrap();
    std::fs::write(dest.join("lib.rs"), "one\n2\nthree\n").unwrap();
    std::fs::write(dest.join("new.rs"), "new\n").unwrap();
    let planned = plan(&root, scratch.path(), &dest, &base);
    // The person edits lib.rs after the plan was worked out.
    std::fs::write(root.join("lib.rs"), "mine\n").unwrap();
    let files = Arc::new(FileState::default());
    let merged = merge(&files, &root, "", planned).await;
    assert_eq!(merged, conflict(&["lib.rs"]));
    assert_eq!(read(&root, "lib.rs"), "mine\n");
    assert!(
        !root.join("new.rs").exists(),
        "nothing of the merge was written"
    );

    // A role file changed in the clone is not brought into the person's tree.
    let (repo, scratch, dest, base) = set_up();
    let root = repo.path().canonicalize().unwrap();
    std::fs::write(dest.join("agents/a.md"), "a role, rewritten\n").unwrap();
    std::fs::write(dest.join("lib.rs"), "one\n2\nthree\n").unwrap();
    let planned = plan(&root, scratch.path(), &dest, &base);
    let merged = merge(&files, &root, "", planned).await;
    assert_eq!(merged, conflict(&["agents/a.md"]));
    assert_eq!(read(&root, "agents/a.md"), "a role\n");
    assert_eq!(read(&root, "lib.rs"), "one\ntwo\nthree\n");
}

#[tokio::test]
async fn a_merge_done_again_writes_nothing_twice_and_says_the_same() {
    let (repo, scratch, dest, base) = set_up();
    let root = repo.path().canonicalize().unwrap();
    std::fs::write(dest.join("lib.rs"), "one\n2\nthree\n").unwrap();
    std::fs::write(dest.join("new.rs"), "new\n").unwrap();
    let planned = plan(&root, scratch.path(), &dest, &base);
    let files = Arc::new(FileState::default());
    let first = merge(&files, &root, "", planned.clone()).await;
    // Cut off after one of its files: the person's tree has lib.rs merged.
    std::fs::remove_file(root.join("new.rs")).unwrap();
    let again = merge(&files, &root, "", planned).await;
    assert_eq!(again, first);
    assert_eq!(read(&root, "new.rs"), "new\n");
    assert_eq!(read(&root, "lib.rs"), "one\n2\nthree\n");
}

#[tokio::test]
async fn only_the_parents_place_in_the_tree_is_merged() {
    let (repo, scratch, dest, base) = set_up();
    let root = repo.path().canonicalize().unwrap();
    std::fs::write(dest.join("lib.rs"), "one\n2\nthree\n").unwrap();
    std::fs::create_dir(dest.join("src")).unwrap();
    std::fs::write(dest.join("src/x.rs"), "x\n").unwrap();
    let planned = plan(&root, scratch.path(), &dest, &base);
    let files = Arc::new(FileState::default());
    let merged = merge(&files, &root, "src", planned).await;
    assert_eq!(merged, conflict(&["lib.rs"]));
    assert!(!root.join("src/x.rs").exists());
}
