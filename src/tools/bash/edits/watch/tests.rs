use super::*;

fn folder() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    (dir, root)
}

fn paths(dirty: Dirty) -> Vec<String> {
    match dirty {
        Dirty::Paths(paths) => paths.iter().map(|p| p.display().to_string()).collect(),
        Dirty::All => vec!["*".into()],
    }
}

#[test]
fn a_look_names_what_changed_since_the_last_and_nothing_else() {
    let (_dir, root) = folder();
    std::fs::write(root.join("kept.txt"), "1").unwrap();
    std::fs::write(root.join("gone.txt"), "1").unwrap();
    std::fs::create_dir(root.join("src")).unwrap();
    std::fs::write(root.join("src/lib.rs"), "1").unwrap();
    let mut watch = Watch::new(&root, &[]).unwrap();
    assert_eq!(paths(watch.take().unwrap()), Vec::<String>::new());

    std::fs::write(root.join("src/lib.rs"), "2").unwrap();
    std::fs::remove_file(root.join("gone.txt")).unwrap();
    std::fs::write(root.join("new.txt"), "1").unwrap();
    assert_eq!(
        paths(watch.take().unwrap()),
        ["gone.txt", "new.txt", "src/lib.rs"]
    );
    assert_eq!(
        paths(watch.take().unwrap()),
        Vec::<String>::new(),
        "each change is told once"
    );

    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        root.join("kept.txt"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    assert_eq!(
        paths(watch.take().unwrap()),
        ["kept.txt"],
        "a mode is a change"
    );
}

#[test]
fn a_new_folder_is_named_and_watched_from_then_on() {
    let (_dir, root) = folder();
    let mut watch = Watch::new(&root, &[]).unwrap();
    std::fs::create_dir_all(root.join("a/b")).unwrap();
    std::fs::write(root.join("a/b/c.txt"), "1").unwrap();
    let seen = paths(watch.take().unwrap());
    assert_eq!(
        seen[0], "a",
        "the folder covers what was made in it: {seen:?}"
    );
    std::fs::write(root.join("a/b/c.txt"), "2").unwrap();
    assert_eq!(paths(watch.take().unwrap()), ["a/b/c.txt"]);
}

#[test]
fn git_and_the_places_left_out_are_not_watched() {
    let (_dir, root) = folder();
    for dir in [".git", "state"] {
        std::fs::create_dir(root.join(dir)).unwrap();
    }
    let mut watch = Watch::new(&root, &[root.join("state")]).unwrap();
    std::fs::write(root.join(".git/index"), "x").unwrap();
    std::fs::write(root.join("state/journal"), "x").unwrap();
    std::fs::write(root.join("state.txt"), "x").unwrap();
    assert_eq!(paths(watch.take().unwrap()), ["state.txt"]);
}

#[test]
fn an_ignore_file_that_never_ends_is_never_read() {
    let (_dir, root) = folder();
    rustix::fs::mkfifoat(
        rustix::fs::CWD,
        root.join(".gitignore"),
        rustix::fs::Mode::RUSR | rustix::fs::Mode::WUSR,
    )
    .unwrap();
    std::fs::create_dir(root.join("src")).unwrap();
    let mut watch = Watch::new(&root, &[]).unwrap();
    std::fs::write(root.join("src/lib.rs"), "x").unwrap();
    assert_eq!(paths(watch.take().unwrap()), ["src/lib.rs"]);
}

#[test]
fn a_folder_moved_away_makes_everything_changed_once_and_the_watch_goes_on() {
    let (_dir, root) = folder();
    std::fs::create_dir_all(root.join("a/b")).unwrap();
    let mut watch = Watch::new(&root, &[]).unwrap();
    std::fs::rename(root.join("a"), root.join("z")).unwrap();
    assert_eq!(watch.take().unwrap(), Dirty::All);
    std::fs::write(root.join("z/b/c.txt"), "1").unwrap();
    assert_eq!(paths(watch.take().unwrap()), ["z/b/c.txt"]);
}

#[test]
fn too_many_folders_are_refused() {
    let (_dir, root) = folder();
    for n in 0..=MAX_WATCHES {
        std::fs::create_dir(root.join(n.to_string())).unwrap();
    }
    assert!(Watch::new(&root, &[]).is_err());
}
