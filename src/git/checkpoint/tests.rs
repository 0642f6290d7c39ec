use super::*;
use crate::git::plain;

/// A repository with `a.rs` and `b.rs` committed.
fn repository() -> tempfile::TempDir {
    let repo = tempfile::tempdir().unwrap();
    let root = repo.path();
    plain(root, &["init", "-q", "-b", "main"]);
    std::fs::write(root.join("a.rs"), "a\n").unwrap();
    std::fs::write(root.join("b.rs"), "b\n").unwrap();
    plain(root, &["add", "."]);
    plain(root, &["commit", "-q", "-m", "first"]);
    repo
}

fn read(root: &Path, name: &str) -> Option<String> {
    std::fs::read_to_string(root.join(name)).ok()
}

#[test]
fn checkpoints_are_numbered_listed_and_outlive_a_gc() {
    let repo = repository();
    let root = repo.path();
    let scratch = tempfile::tempdir().unwrap();
    let run = SessionId::new();
    std::fs::write(root.join("a.rs"), "a, changed\n").unwrap();
    let first = take(root, run, "before the first change", scratch.path(), &[]).unwrap();
    let second = take(root, run, "the run's end", scratch.path(), &[]).unwrap();
    assert_eq!((first.n, second.n), (1, 2));
    assert_eq!(list(root, run).unwrap(), [first.clone(), second]);
    assert!(list(root, SessionId::new()).unwrap().is_empty());
    plain(root, &["gc", "--quiet", "--prune=now"]);
    assert_eq!(plain(root, &["cat-file", "-t", &first.commit]), "commit");
    assert_eq!(
        plain(root, &["show", &format!("{}:a.rs", first.commit)]),
        "a, changed"
    );
    // The person's branches, index and stash are untouched.
    assert_eq!(plain(root, &["branch", "--list"]), "* main");
    assert_eq!(plain(root, &["diff", "--cached", "--name-only"]), "");
    assert_eq!(plain(root, &["stash", "list"]), "");
}

#[test]
fn a_tree_is_put_back_as_a_checkpoint_holds_it() {
    let repo = repository();
    let root = repo.path();
    let scratch = tempfile::tempdir().unwrap();
    let run = SessionId::new();
    std::fs::write(root.join("untracked.txt"), "mine\n").unwrap();
    let before = take(root, run, "before", scratch.path(), &[]).unwrap();
    // The run changes a file, deletes one, makes one in a new folder.
    std::fs::write(root.join("a.rs"), "a, by the run\n").unwrap();
    std::fs::remove_file(root.join("b.rs")).unwrap();
    std::fs::create_dir(root.join("new")).unwrap();
    std::fs::write(root.join("new/c.rs"), "c\n").unwrap();
    let present = checkout::snapshot(root, scratch.path()).unwrap();
    let changes = checkout::changed(root, &present, &before.commit).unwrap();
    assert_eq!(changes.len(), 3, "{changes:?}");
    restore(root, &before.commit, &changes, scratch.path()).unwrap();
    assert_eq!(read(root, "a.rs").as_deref(), Some("a\n"));
    assert_eq!(read(root, "b.rs").as_deref(), Some("b\n"));
    assert_eq!(read(root, "new/c.rs"), None);
    assert!(!root.join("new").exists(), "a folder left empty goes");
    assert_eq!(read(root, "untracked.txt").as_deref(), Some("mine\n"));
    assert_eq!(plain(root, &["diff", "--cached", "--name-only"]), "");
}

#[test]
fn a_file_that_became_a_folder_and_back_is_undone() {
    let repo = repository();
    let root = repo.path();
    let scratch = tempfile::tempdir().unwrap();
    let run = SessionId::new();
    std::fs::create_dir(root.join("dir")).unwrap();
    std::fs::write(root.join("dir/inner.rs"), "inner\n").unwrap();
    let before = take(root, run, "before", scratch.path(), &[]).unwrap();
    // `a.rs` becomes a folder, `dir` a file.
    std::fs::remove_file(root.join("a.rs")).unwrap();
    std::fs::create_dir(root.join("a.rs")).unwrap();
    std::fs::write(root.join("a.rs/x"), "x\n").unwrap();
    std::fs::remove_dir_all(root.join("dir")).unwrap();
    std::fs::write(root.join("dir"), "a file now\n").unwrap();
    let present = checkout::snapshot(root, scratch.path()).unwrap();
    let changes = checkout::changed(root, &present, &before.commit).unwrap();
    restore(root, &before.commit, &changes, scratch.path()).unwrap();
    assert_eq!(read(root, "a.rs").as_deref(), Some("a\n"));
    assert_eq!(read(root, "dir/inner.rs").as_deref(), Some("inner\n"));
}

#[test]
fn a_filtered_file_is_kept_and_put_back_as_it_is_on_disk() {
    let repo = repository();
    let root = repo.path();
    // A clean filter that stores something else than the file (as Git LFS
    // stores a pointer).
    std::fs::write(root.join(".gitattributes"), "*.bin filter=pointer\n").unwrap();
    plain(root, &["config", "filter.pointer.clean", "echo pointer"]);
    plain(root, &["config", "filter.pointer.smudge", "cat"]);
    std::fs::write(root.join("big.bin"), "the real content\n").unwrap();
    plain(root, &["add", "."]);
    plain(root, &["commit", "-q", "-m", "filtered"]);
    let scratch = tempfile::tempdir().unwrap();
    let run = SessionId::new();
    let before = take(root, run, "before", scratch.path(), &[]).unwrap();
    std::fs::write(root.join("big.bin"), "changed by the run\n").unwrap();
    let present = checkout::snapshot(root, scratch.path()).unwrap();
    let changes = checkout::changed(root, &present, &before.commit).unwrap();
    restore(root, &before.commit, &changes, scratch.path()).unwrap();
    assert_eq!(read(root, "big.bin").as_deref(), Some("the real content\n"));
}

#[test]
fn a_checkpoint_after_an_answer_is_taken_only_when_something_changed() {
    let repo = repository();
    let root = repo.path();
    let scratch = tempfile::tempdir().unwrap();
    let run = SessionId::new();
    let first = take(root, run, "before the first change", scratch.path(), &[]).unwrap();
    let same = take_if_changed(root, run, "an answer", scratch.path(), &[]).unwrap();
    assert_eq!(same, None, "nothing changed");
    std::fs::write(root.join("b.rs"), "b, changed\n").unwrap();
    let changed = take_if_changed(root, run, "an answer", scratch.path(), &[]).unwrap();
    assert_eq!(
        changed.map(|c| (c.n, c.label)),
        Some((2, "an answer".into()))
    );
    assert_eq!(list(root, run).unwrap().len(), 2);
    assert_eq!(list(root, run).unwrap()[0], first);
}
