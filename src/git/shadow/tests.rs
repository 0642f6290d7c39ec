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

/// How many loose objects the repository at `root` holds.
fn loose_objects(root: &Path) -> usize {
    walkdir(&root.join(".git/objects"))
}

fn walkdir(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| match e.file_type().unwrap().is_dir() {
            true => walkdir(&e.path()),
            false => 1,
        })
        .sum()
}

fn canonical(dir: &Path) -> PathBuf {
    dir.canonicalize().unwrap()
}

#[test]
fn the_paths_given_are_compared_and_the_persons_index_is_untouched() {
    let repo = repository();
    let root = canonical(repo.path());
    let index = std::fs::read(root.join(".git/index")).unwrap();
    let objects = loose_objects(&root);
    let scratch = tempfile::tempdir().unwrap();
    let shadow = Shadow::open(&root, scratch.path(), &[]).unwrap();

    std::fs::write(root.join("a.txt"), "one\nmore\n").unwrap();
    std::fs::write(root.join("new.txt"), "new\n").unwrap();
    std::fs::write(root.join("noise.log"), "ignored\n").unwrap();
    std::fs::remove_dir_all(root.join("sub")).unwrap();
    let paths: Vec<PathBuf> = ["a.txt", "new.txt", "noise.log", "sub", "never-was.txt"]
        .iter()
        .map(PathBuf::from)
        .collect();
    let changes = shadow.update(Some(&paths)).unwrap();
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

    assert!(shadow.update(Some(&paths)).unwrap().is_empty(), "told once");
    assert_eq!(std::fs::read(root.join(".git/index")).unwrap(), index);
    assert!(!root.join(".git/index.lock").exists());
    assert_eq!(
        loose_objects(&root),
        objects,
        "the objects it wrote are its own"
    );
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
    std::fs::write(root.join("a.txt"), "changed\n").unwrap();
    let sub = shadow.update(Some(&[PathBuf::from("sub")])).unwrap();
    assert!(sub.is_empty(), "a.txt was not named");
    assert_eq!(
        listed(&shadow.update(None).unwrap()),
        vec![("a.txt".into(), true, true)]
    );
}

#[test]
fn a_folder_below_the_top_is_its_own_tree() {
    let repo = repository();
    let root = canonical(repo.path());
    let sub = root.join("sub");
    let scratch = tempfile::tempdir().unwrap();
    let shadow = Shadow::open(&sub, scratch.path(), &[]).unwrap();
    std::fs::write(sub.join("c.txt"), "three\n").unwrap();
    std::fs::write(root.join("a.txt"), "outside the folder\n").unwrap();
    let changes = shadow.update(Some(&[PathBuf::from("c.txt")])).unwrap();
    assert_eq!(listed(&changes), vec![("c.txt".into(), false, true)]);
    assert!(
        shadow.update(None).unwrap().is_empty(),
        "what is above the folder is not its own"
    );

    // A folder with nothing in it yet.
    let empty = root.join("empty");
    std::fs::create_dir(&empty).unwrap();
    let shadow = Shadow::open(&empty, scratch.path(), &[]).unwrap();
    std::fs::write(empty.join("d.txt"), "four\n").unwrap();
    let changes = shadow.update(Some(&[PathBuf::from("d.txt")])).unwrap();
    assert_eq!(listed(&changes), vec![("d.txt".into(), false, true)]);
}

#[test]
fn outside_a_repository_the_shadow_is_a_repository_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let folder = canonical(dir.path());
    std::fs::write(folder.join("notes.txt"), "one\n").unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let shadow = Shadow::open(&folder, scratch.path(), &[]).unwrap();
    std::fs::write(folder.join("notes.txt"), "two\n").unwrap();
    let changes = shadow.update(Some(&[PathBuf::from("notes.txt")])).unwrap();
    assert_eq!(
        listed(&changes),
        vec![("notes.txt".into(), true, true)],
        "what was there is in it"
    );
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
    let name = PathBuf::from(std::ffi::OsStr::from_bytes(b"caf\xe9.txt"));
    std::fs::write(root.join(&name), "latin-1\n").unwrap();
    let changes = shadow.update(Some(std::slice::from_ref(&name))).unwrap();
    assert_eq!(changes.len(), 1);
    assert_eq!(changes[0].path, name);
}

#[test]
fn a_name_git_will_not_take_compares_the_whole_folder() {
    let repo = repository();
    let root = canonical(repo.path());
    let scratch = tempfile::tempdir().unwrap();
    let shadow = Shadow::open(&root, scratch.path(), &[]).unwrap();
    std::fs::write(root.join("a.txt"), "changed\n").unwrap();
    // Beyond a link: `add` refuses it.
    std::os::unix::fs::symlink("sub", root.join("link")).unwrap();
    let changes = shadow.update(Some(&[PathBuf::from("link/b.txt")])).unwrap();
    assert_eq!(
        listed(&changes),
        vec![("a.txt".into(), true, true), ("link".into(), false, true)]
    );
}

#[test]
fn a_repository_of_longer_ids_is_compared() {
    let dir = tempfile::tempdir().unwrap();
    let root = canonical(dir.path());
    plain(&root, &["init", "-q", "--object-format=sha256"]);
    std::fs::write(root.join("a.txt"), "one\n").unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let shadow = Shadow::open(&root, scratch.path(), &[]).unwrap();
    std::fs::write(root.join("a.txt"), "two\n").unwrap();
    let changes = shadow.update(Some(&[PathBuf::from("a.txt")])).unwrap();
    assert_eq!(listed(&changes), vec![("a.txt".into(), true, true)]);
    let after = changes[0].after.as_ref().unwrap().oid.clone();
    assert_eq!(after.len(), 64);
    let blobs = shadow.blobs(&[&after], 1024).unwrap();
    assert_eq!(blobs[&after].as_deref(), Some(&b"two\n"[..]));
}

#[test]
fn files_it_holds_changed_or_gone_are_brought_in_alone() {
    use std::os::unix::fs::PermissionsExt;
    let repo = repository();
    let root = canonical(repo.path());
    let scratch = tempfile::tempdir().unwrap();
    let shadow = Shadow::open(&root, scratch.path(), &[]).unwrap();
    std::fs::write(root.join("a.txt"), "one\ntwo\n").unwrap();
    std::fs::set_permissions(root.join("a.txt"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::remove_file(root.join("sub/b.txt")).unwrap();
    let named = [PathBuf::from("a.txt"), PathBuf::from("sub/b.txt")];
    let changes = shadow.update(Some(&named)).unwrap();
    assert_eq!(
        listed(&changes),
        vec![
            ("a.txt".into(), true, true),
            ("sub/b.txt".into(), true, false)
        ]
    );
    assert_eq!(changes[0].after.as_ref().unwrap().mode, "100755");

    // A file become a folder: what is in it is looked for.
    std::fs::remove_file(root.join("a.txt")).unwrap();
    std::fs::create_dir(root.join("a.txt")).unwrap();
    std::fs::write(root.join("a.txt/inner"), "in\n").unwrap();
    let changes = shadow.update(Some(&[PathBuf::from("a.txt")])).unwrap();
    assert_eq!(
        listed(&changes),
        vec![
            ("a.txt".into(), true, false),
            ("a.txt/inner".into(), false, true)
        ]
    );
}

#[test]
fn what_a_shadow_no_longer_open_left_is_swept() {
    let scratch = tempfile::tempdir().unwrap();
    let at = |name: &str| scratch.path().join(name);
    // A killed run's: its lock went with it.
    std::fs::write(at("shadow.gone.held"), "").unwrap();
    std::fs::write(at("shadow.gone.index"), "").unwrap();
    std::fs::create_dir(at("shadow.gone.objects")).unwrap();
    // An open one's, locked.
    let open = std::fs::File::create(at("shadow.open.held")).unwrap();
    rustix::fs::flock(&open, rustix::fs::FlockOperation::LockExclusive).unwrap();
    std::fs::write(at("shadow.open.index"), "").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let folder = canonical(dir.path());
    let shadow = Shadow::open(&folder, scratch.path(), &[]).unwrap();
    for gone in [
        "shadow.gone.held",
        "shadow.gone.index",
        "shadow.gone.objects",
    ] {
        assert!(!at(gone).exists(), "{gone}");
    }
    assert!(at("shadow.open.held").exists() && at("shadow.open.index").exists());
    // A second shadow made now leaves the first's alone.
    let second = Shadow::open(&folder, scratch.path(), &[]).unwrap();
    drop(second);
    assert_eq!(
        std::fs::read_dir(scratch.path()).unwrap().count(),
        2 + 2,
        "the open one's two files, and the first shadow's index and lock"
    );

    // The folder was empty: nothing was in the shadow's index.
    std::fs::write(folder.join("first.txt"), "one\n").unwrap();
    let changes = shadow.update(Some(&[PathBuf::from("first.txt")])).unwrap();
    assert_eq!(listed(&changes), vec![("first.txt".into(), false, true)]);
}

#[test]
fn a_path_inside_a_submodule_is_the_submodules_commit() {
    let repo = repository();
    let root = canonical(repo.path());
    let inner = root.join("lib");
    std::fs::create_dir(&inner).unwrap();
    plain(&inner, &["init", "-q", "-b", "main"]);
    std::fs::write(inner.join("x.txt"), "one\n").unwrap();
    plain(&inner, &["add", "."]);
    plain(&inner, &["commit", "-q", "-m", "inner"]);
    plain(&root, &["add", "lib"]);
    let scratch = tempfile::tempdir().unwrap();
    let shadow = Shadow::open(&root, scratch.path(), &[]).unwrap();
    // Not named: seen only if the whole folder were brought in.
    std::fs::write(root.join("a.txt"), "not named\n").unwrap();
    std::fs::write(inner.join("x.txt"), "two\n").unwrap();
    let named = [PathBuf::from("lib/x.txt")];
    assert!(
        shadow.update(Some(&named)).unwrap().is_empty(),
        "a change not committed in it leaves its commit as it was"
    );
    plain(&inner, &["commit", "-q", "-am", "second"]);
    let changes = shadow.update(Some(&named)).unwrap();
    assert_eq!(listed(&changes), vec![("lib".into(), true, true)]);
    let after = changes[0].after.as_ref().unwrap();
    assert_eq!(after.mode, "160000");
    assert_eq!(after.oid, plain(&inner, &["rev-parse", "HEAD"]));
}

#[test]
fn a_file_the_person_marked_skip_worktree_is_left_as_git_leaves_it() {
    let repo = repository();
    let root = canonical(repo.path());
    plain(&root, &["update-index", "--skip-worktree", "a.txt"]);
    let scratch = tempfile::tempdir().unwrap();
    let shadow = Shadow::open(&root, scratch.path(), &[]).unwrap();
    std::fs::write(root.join("a.txt"), "edited\n").unwrap();
    let named = [PathBuf::from("a.txt")];
    assert!(shadow.update(Some(&named)).unwrap().is_empty(), "not gone");
    std::fs::remove_file(root.join("a.txt")).unwrap();
    assert!(
        shadow.update(Some(&named)).unwrap().is_empty(),
        "not gone either"
    );
}
