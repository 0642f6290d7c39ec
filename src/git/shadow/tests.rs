use std::path::Path;

use super::*;
use crate::git::plain;

/// A repository with one commit: `a.txt`, `sub/b.txt`, and `*.log` ignored.
fn repository() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    plain(root, &["init", "-q", "-b", "main"]);
    std::fs::write(root.join(".gitignore"), "*.log\n").unwrap();
    std::fs::write(root.join("a.txt"), "one\n").unwrap();
    std::fs::create_dir(root.join("sub")).unwrap();
    std::fs::write(root.join("sub/b.txt"), "two\n").unwrap();
    plain(root, &["add", "."]);
    plain(root, &["commit", "-q", "-m", "first"]);
    dir
}

/// Each change as `path before-oid? after-oid?`, by path.
fn listed(changes: &[PathChange]) -> Vec<(String, bool, bool)> {
    let mut listed: Vec<(String, bool, bool)> = changes
        .iter()
        .map(|c| {
            let path = c.path.to_string_lossy().into_owned();
            (path, c.before.is_some(), c.after.is_some())
        })
        .collect();
    listed.sort();
    listed
}

fn canonical(dir: &Path) -> PathBuf {
    dir.canonicalize().unwrap()
}

#[test]
fn the_paths_given_are_compared_and_the_persons_index_is_untouched() {
    let repo = repository();
    let root = canonical(repo.path());
    let index = std::fs::read(root.join(".git/index")).unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let shadow = Shadow::open(&root, scratch.path(), &[]).unwrap();
    let before = shadow.tree().unwrap();

    std::fs::write(root.join("a.txt"), "one\nmore\n").unwrap();
    std::fs::write(root.join("new.txt"), "new\n").unwrap();
    std::fs::write(root.join("noise.log"), "ignored\n").unwrap();
    std::fs::remove_dir_all(root.join("sub")).unwrap();
    let paths: Vec<PathBuf> = ["a.txt", "new.txt", "noise.log", "sub", "never-was.txt"]
        .iter()
        .map(PathBuf::from)
        .collect();
    shadow.refresh(&paths).unwrap();
    let after = shadow.tree().unwrap();

    let changes = shadow.changed(&before, &after).unwrap();
    assert_eq!(
        listed(&changes),
        vec![
            ("a.txt".into(), true, true),
            ("new.txt".into(), false, true),
            ("sub/b.txt".into(), true, false),
        ]
    );
    let a = changes
        .iter()
        .find(|c| c.path == Path::new("a.txt"))
        .unwrap();
    let (old, new) = (
        &a.before.as_ref().unwrap().oid,
        &a.after.as_ref().unwrap().oid,
    );
    let blobs = shadow.blobs(&[old, new], 1024).unwrap();
    assert_eq!(blobs[old.as_str()].as_deref(), Some(&b"one\n"[..]));
    assert_eq!(blobs[new.as_str()].as_deref(), Some(&b"one\nmore\n"[..]));
    assert_eq!(
        shadow.blobs(&[new], 4).unwrap()[new.as_str()],
        None,
        "over the limit: not read"
    );

    assert_eq!(std::fs::read(root.join(".git/index")).unwrap(), index);
    assert!(!root.join(".git/index.lock").exists());
    drop(shadow);
    assert_eq!(
        std::fs::read_dir(scratch.path()).unwrap().count(),
        0,
        "its index goes with it"
    );
}

#[test]
fn only_the_paths_given_are_looked_at() {
    let repo = repository();
    let root = canonical(repo.path());
    let scratch = tempfile::tempdir().unwrap();
    let shadow = Shadow::open(&root, scratch.path(), &[]).unwrap();
    let before = shadow.tree().unwrap();
    std::fs::write(root.join("a.txt"), "changed\n").unwrap();
    shadow.refresh(&[PathBuf::from("sub")]).unwrap();
    assert_eq!(shadow.tree().unwrap(), before, "a.txt was not named");
    shadow.refresh_all().unwrap();
    assert_eq!(
        listed(&shadow.changed(&before, &shadow.tree().unwrap()).unwrap()).len(),
        1
    );
}

#[test]
fn a_folder_below_the_top_is_its_own_tree() {
    let repo = repository();
    let root = canonical(repo.path());
    let sub = root.join("sub");
    let scratch = tempfile::tempdir().unwrap();
    let shadow = Shadow::open(&sub, scratch.path(), &[]).unwrap();
    let before = shadow.tree().unwrap();
    std::fs::write(sub.join("c.txt"), "three\n").unwrap();
    shadow.refresh(&[PathBuf::from("c.txt")]).unwrap();
    let changes = shadow.changed(&before, &shadow.tree().unwrap()).unwrap();
    assert_eq!(listed(&changes), vec![("c.txt".into(), false, true)]);

    // A folder with nothing in it yet.
    let empty = root.join("empty");
    std::fs::create_dir(&empty).unwrap();
    let shadow = Shadow::open(&empty, scratch.path(), &[]).unwrap();
    assert_eq!(shadow.tree().unwrap(), EMPTY_TREE);
    std::fs::write(empty.join("d.txt"), "four\n").unwrap();
    shadow.refresh(&[PathBuf::from("d.txt")]).unwrap();
    let changes = shadow.changed(EMPTY_TREE, &shadow.tree().unwrap()).unwrap();
    assert_eq!(listed(&changes), vec![("d.txt".into(), false, true)]);
}

#[test]
fn outside_a_repository_the_shadow_is_a_repository_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let folder = canonical(dir.path());
    std::fs::write(folder.join("notes.txt"), "one\n").unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let shadow = Shadow::open(&folder, scratch.path(), &[]).unwrap();
    let before = shadow.tree().unwrap();
    assert_ne!(before, EMPTY_TREE, "what was there is in it");
    std::fs::write(folder.join("notes.txt"), "two\n").unwrap();
    shadow.refresh(&[PathBuf::from("notes.txt")]).unwrap();
    let changes = shadow.changed(&before, &shadow.tree().unwrap()).unwrap();
    assert_eq!(listed(&changes), vec![("notes.txt".into(), true, true)]);
    assert!(
        !folder.join(".git").exists(),
        "nothing is made in the folder"
    );
    drop(shadow);
    assert_eq!(std::fs::read_dir(scratch.path()).unwrap().count(), 0);
}

#[test]
fn a_walk_outside_a_repository_stops_past_its_bounds() {
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path();
    for n in 0..5 {
        std::fs::write(folder.join(format!("{n}.txt")), "12345").unwrap();
    }
    std::fs::create_dir(folder.join("state")).unwrap();
    std::fs::write(folder.join("state/journal"), "x".repeat(100)).unwrap();
    let state = [folder.join("state")];
    assert!(small_enough(folder, &state, 5, 25).is_ok());
    assert!(matches!(
        small_enough(folder, &state, 4, 1000),
        Err(CheckoutError::TooLarge(_))
    ));
    assert!(matches!(
        small_enough(folder, &state, 10, 24),
        Err(CheckoutError::TooLarge(_))
    ));
    assert!(
        small_enough(folder, &[], 10, 100).is_err(),
        "the state counts when not left out"
    );
}

#[test]
fn a_name_that_is_not_utf8_is_brought_in_as_it_is() {
    use std::os::unix::ffi::OsStrExt;
    let repo = repository();
    let root = canonical(repo.path());
    let scratch = tempfile::tempdir().unwrap();
    let shadow = Shadow::open(&root, scratch.path(), &[]).unwrap();
    let before = shadow.tree().unwrap();
    let name = PathBuf::from(std::ffi::OsStr::from_bytes(b"caf\xe9.txt"));
    std::fs::write(root.join(&name), "latin-1\n").unwrap();
    shadow.refresh(std::slice::from_ref(&name)).unwrap();
    let changes = shadow.changed(&before, &shadow.tree().unwrap()).unwrap();
    assert_eq!(changes.len(), 1);
    assert_eq!(changes[0].path, name);
}
