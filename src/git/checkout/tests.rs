use std::path::Path;

use super::*;
use crate::git::plain;

/// A repository with one commit: `lib.rs` of three functions, and `*.log` ignored.
fn repository() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    plain(root, &["init", "-q", "-b", "main"]);
    std::fs::write(root.join(".gitignore"), "*.log\n").unwrap();
    std::fs::write(
        root.join("lib.rs"),
        "fn one() -> u32 {\n    1\n}\n\nfn two() -> u32 {\n    2\n}\n\nfn three() -> u32 {\n    3\n}\n",
    )
    .unwrap();
    plain(root, &["add", "."]);
    plain(root, &["commit", "-q", "-m", "first"]);
    dir
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap()
}

/// The repository's index, branches, stash and status, as bytes and text.
fn untouched_state(root: &Path) -> (Vec<u8>, String, String) {
    (
        std::fs::read(root.join(".git/index")).unwrap(),
        plain(root, &["for-each-ref"]),
        plain(root, &["status", "--porcelain", "--untracked-files=all"]),
    )
}

#[test]
fn a_snapshot_holds_the_work_tree_as_it_is_and_touches_nothing() {
    let repo = repository();
    let root = repo.path();
    std::fs::write(root.join("lib.rs"), "changed\n").unwrap();
    std::fs::write(root.join("new.rs"), "untracked\n").unwrap();
    std::fs::write(root.join("build.log"), "ignored\n").unwrap();
    std::fs::write(root.join("staged.rs"), "staged\n").unwrap();
    plain(root, &["add", "staged.rs"]);
    // Staged, then changed again: the file as it is on disk counts.
    std::fs::write(root.join(".gitignore"), "*.log\n# staged\n").unwrap();
    plain(root, &["add", ".gitignore"]);
    std::fs::write(root.join(".gitignore"), "*.log\n# on disk\n").unwrap();
    let before = untouched_state(root);
    let scratch = tempfile::tempdir().unwrap();
    let snap = snapshot(root, scratch.path()).unwrap();
    assert_eq!(untouched_state(root), before);
    assert_eq!(plain(root, &["stash", "list"]), "");
    let files = plain(root, &["ls-tree", "-r", "--name-only", &snap]);
    assert_eq!(
        files.lines().collect::<Vec<_>>(),
        [".gitignore", "lib.rs", "new.rs", "staged.rs"]
    );
    assert_eq!(plain(root, &["show", &format!("{snap}:lib.rs")]), "changed");
    let ignore = plain(root, &["show", &format!("{snap}:.gitignore")]);
    assert_eq!(ignore, "*.log\n# on disk");
    // A repository whose index is gone snapshots from HEAD all the same.
    std::fs::remove_file(root.join(".git/index")).unwrap();
    let again = snapshot(root, scratch.path()).unwrap();
    assert_eq!(
        plain(root, &["rev-parse", &format!("{again}^{{tree}}")]),
        plain(root, &["rev-parse", &format!("{snap}^{{tree}}")])
    );
    assert_eq!(
        plain(root, &["rev-parse", &format!("{snap}^")]),
        plain(root, &["rev-parse", "HEAD"])
    );
    // Nothing is left in the scratch folder.
    assert_eq!(std::fs::read_dir(scratch.path()).unwrap().count(), 0);
}

#[test]
fn where_a_checkout_cannot_be_made_or_will_lack_something_is_said() {
    for (found, ok) in [
        ("2.47.1", true),
        ("2.38.0", true),
        ("2.39.2.windows.1", true),
        ("2.37.9", false),
        ("1.9", false),
    ] {
        assert_eq!(at_least(found, MIN_GIT), ok, "{found}");
    }
    let outside = tempfile::tempdir().unwrap();
    assert!(matches!(
        usable(outside.path()),
        Err(CheckoutError::NoRepository(_))
    ));
    plain(outside.path(), &["init", "-q"]);
    assert!(matches!(
        usable(outside.path()),
        Err(CheckoutError::NoCommits(_))
    ));
    let repo = repository();
    let (place, lacks) = usable(repo.path()).unwrap();
    assert_eq!(
        (place.prefix.as_os_str().is_empty(), lacks.len()),
        (true, 0)
    );
    std::fs::write(repo.path().join(".gitmodules"), "[submodule \"x\"]\n").unwrap();
    std::fs::write(
        repo.path().join(".gitattributes"),
        "*.bin filter=lfs diff=lfs merge=lfs -text\n",
    )
    .unwrap();
    let (_, lacks) = usable(repo.path()).unwrap();
    assert_eq!(lacks.len(), 2, "{lacks:?}");
}

#[test]
fn a_pinned_snapshot_outlives_a_gc_and_an_unpinned_one_goes() {
    let repo = repository();
    let root = repo.path();
    std::fs::write(root.join("new.rs"), "untracked\n").unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let snap = snapshot(root, scratch.path()).unwrap();
    pin(root, "c1", &snap).unwrap();
    let gc = |root: &Path| plain(root, &["gc", "--quiet", "--prune=now"]);
    gc(root);
    assert_eq!(plain(root, &["cat-file", "-t", &snap]), "commit");
    assert_eq!(
        plain(root, &["branch", "--list"]),
        "* main",
        "no branch shows it"
    );
    unpin(root, "c1").unwrap();
    plain(root, &["reflog", "expire", "--expire=now", "--all"]);
    gc(root);
    let gone = std::process::Command::new("git")
        .current_dir(root)
        .args(["cat-file", "-e", &snap])
        .status()
        .unwrap();
    assert!(!gone.success(), "the unpinned snapshot was kept");
}

#[test]
fn a_folder_outside_git_or_a_repository_without_commits_is_named() {
    let outside = tempfile::tempdir().unwrap();
    let err = place(outside.path()).unwrap_err();
    assert!(matches!(err, CheckoutError::NoRepository(_)), "{err}");
    plain(outside.path(), &["init", "-q"]);
    let err = snapshot(outside.path(), &outside.path().join(".scratch")).unwrap_err();
    assert!(err.to_string().ends_with("has no commits yet"), "{err}");
    let repo = repository();
    std::fs::create_dir(repo.path().join("sub")).unwrap();
    let found = place(&repo.path().join("sub")).unwrap();
    assert_eq!(found.prefix, Path::new("sub/"));
    assert_eq!(found.root, repo.path().canonicalize().unwrap());
}

#[test]
fn a_clone_starts_from_the_snapshot_shares_objects_and_has_no_way_back() {
    let repo = repository();
    let root = repo.path();
    std::fs::write(root.join("new.rs"), "untracked\n").unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let snap = snapshot(root, scratch.path()).unwrap();
    let dest = scratch.path().join("clone");
    clone(root, &dest, &snap).unwrap();
    assert_eq!(read(&dest.join("new.rs")), "untracked\n");
    assert!(dest.join(".git/objects/info/alternates").is_file());
    assert_eq!(plain(&dest, &["remote"]), "");
    assert_eq!(plain(&dest, &["rev-parse", "HEAD"]), snap);
}

/// Replaces `from` with `to` in the clone's `lib.rs`.
fn edit(clone: &Path, from: &str, to: &str) {
    let text = read(&clone.join("lib.rs"));
    assert!(text.contains(from));
    std::fs::write(clone.join("lib.rs"), text.replacen(from, to, 1)).unwrap();
}

/// Writes a clean plan's changes into the work tree at `root`, as the caller
/// does (checking each file is still what the plan was made against).
fn apply(root: &Path, plan: &MergePlan) {
    let MergePlan::Clean(changes) = plan else {
        panic!("not clean: {plan:?}")
    };
    for change in changes {
        let path = root.join(&change.path);
        let now = std::fs::read(&path).ok();
        let before = change
            .before
            .as_ref()
            .map(|b| read_blob(root, &b.oid).unwrap());
        assert_eq!(
            now,
            before,
            "{} changed under the merge",
            change.path.display()
        );
        match &change.after {
            Some(blob) => std::fs::write(&path, read_blob(root, &blob.oid).unwrap()).unwrap(),
            None => std::fs::remove_file(&path).unwrap(),
        }
    }
}

/// Merges the clone at `clone` (started from `base`) back into `root` as
/// branch `branch`: its plan.
fn merge_back(root: &Path, scratch: &Path, clone: &Path, base: &str, branch: &str) -> MergePlan {
    let theirs = commit_work_tree(root, clone, base, &scratch.join("theirs")).unwrap();
    create_branch(root, branch, &theirs).unwrap();
    let ours = snapshot(root, &scratch.join("ours")).unwrap();
    plan_merge(root, base, &ours, &theirs).unwrap()
}

#[test]
fn three_writers_of_three_functions_of_one_file_all_merge() {
    let repo = repository();
    let root = repo.path();
    let scratch = tempfile::tempdir().unwrap();
    let base = snapshot(root, scratch.path()).unwrap();
    let clones: Vec<PathBuf> = ["a", "b", "c"]
        .iter()
        .map(|name| {
            let dest = scratch.path().join(name);
            clone(root, &dest, &base).unwrap();
            dest
        })
        .collect();
    edit(&clones[0], "    1\n", "    10\n");
    edit(&clones[1], "    2\n", "    20\n");
    edit(&clones[2], "    3\n", "    30\n");
    std::fs::write(clones[2].join("added.rs"), "new file\n").unwrap();
    for (clone, name) in clones.iter().zip(["a", "b", "c"]) {
        let plan = merge_back(
            root,
            scratch.path(),
            clone,
            &base,
            &format!("orchestrate/run/{name}"),
        );
        apply(root, &plan);
    }
    let merged = read(&root.join("lib.rs"));
    assert!(
        merged.contains("    10\n") && merged.contains("    20\n") && merged.contains("    30\n"),
        "{merged}"
    );
    assert_eq!(read(&root.join("added.rs")), "new file\n");
    // Uncommitted in the person's tree; the branches are theirs to keep.
    assert_eq!(plain(root, &["log", "--oneline"]).lines().count(), 1);
    assert!(
        plain(root, &["branch", "--list", "orchestrate/run/*"])
            .lines()
            .count()
            == 3
    );
    // A clone with nothing changed has nothing to merge.
    let idle = scratch.path().join("idle");
    clone(root, &idle, &base).unwrap();
    assert_eq!(
        merge_back(root, scratch.path(), &idle, &base, "orchestrate/run/idle"),
        MergePlan::Nothing
    );
}

#[test]
fn two_writers_of_one_line_merge_once_and_the_other_is_a_conflict_left_on_its_branch() {
    let repo = repository();
    let root = repo.path();
    let scratch = tempfile::tempdir().unwrap();
    let base = snapshot(root, scratch.path()).unwrap();
    let (first, second) = (scratch.path().join("first"), scratch.path().join("second"));
    clone(root, &first, &base).unwrap();
    clone(root, &second, &base).unwrap();
    edit(&first, "    2\n", "    22\n");
    edit(&second, "    2\n", "    222\n");
    apply(
        root,
        &merge_back(root, scratch.path(), &first, &base, "orchestrate/run/first"),
    );
    let merged = read(&root.join("lib.rs"));
    let plan = merge_back(
        root,
        scratch.path(),
        &second,
        &base,
        "orchestrate/run/second",
    );
    assert_eq!(plan, MergePlan::Conflict(vec![PathBuf::from("lib.rs")]));
    assert_eq!(
        read(&root.join("lib.rs")),
        merged,
        "the parent's file is untouched"
    );
    assert!(!merged.contains("<<<<<<<"));
    let kept = plain(root, &["show", "orchestrate/run/second:lib.rs"]);
    assert!(kept.contains("    222"), "{kept}");
    // A branch of that name holding other work is refused, not moved.
    let other = commit_work_tree(root, &first, &base, &scratch.path().join("again")).unwrap();
    assert!(create_branch(root, "orchestrate/run/second", &other).is_err());
    let still = plain(root, &["show", "orchestrate/run/second:lib.rs"]);
    assert_eq!(still, kept);
}

#[test]
fn a_clones_planted_monitor_and_hooks_never_run_and_a_bad_branch_name_is_refused() {
    let repo = repository();
    let root = repo.path();
    let scratch = tempfile::tempdir().unwrap();
    let base = snapshot(root, scratch.path()).unwrap();
    let dest = scratch.path().join("clone");
    clone(root, &dest, &base).unwrap();
    let marker = scratch.path().join("ran");
    let run = format!("touch {}", marker.display());
    plain(&dest, &["config", "core.fsmonitor", &run]);
    plain(&dest, &["config", "core.hooksPath", ".git/hooks"]);
    for hook in [
        "reference-transaction",
        "pre-commit",
        "post-checkout",
        "pre-auto-gc",
    ] {
        let path = dest.join(".git/hooks").join(hook);
        std::fs::write(&path, format!("#!/bin/sh\n{run}\n")).unwrap();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
    }
    edit(&dest, "    1\n", "    11\n");
    let plan = merge_back(
        root,
        scratch.path(),
        &dest,
        &base,
        "orchestrate/run/planted",
    );
    apply(root, &plan);
    assert!(!marker.exists(), "a program the clone named ran");
    for bad in ["-x", "a..b", "orchestrate/run/bad name", "x.lock"] {
        let err = create_branch(root, bad, &base).unwrap_err();
        assert!(matches!(err, CheckoutError::BranchName(_)), "{bad}: {err}");
    }
}

#[test]
fn a_merge_driver_the_repository_names_never_runs() {
    let repo = repository();
    let root = repo.path();
    let scratch = tempfile::tempdir().unwrap();
    let marker = scratch.path().join("ran");
    std::fs::write(root.join(".gitattributes"), "*.rs merge=evil\n").unwrap();
    plain(root, &["add", ".gitattributes"]);
    plain(root, &["commit", "-q", "-m", "attributes"]);
    let driver = format!("touch {}; exit 0", marker.display());
    plain(root, &["config", "merge.evil.driver", &driver]);
    let base = snapshot(root, scratch.path()).unwrap();
    let dest = scratch.path().join("clone");
    clone(root, &dest, &base).unwrap();
    edit(&dest, "    2\n", "    22\n");
    edit(root, "    2\n", "    222\n");
    let plan = merge_back(root, scratch.path(), &dest, &base, "orchestrate/run/d");
    assert_eq!(plan, MergePlan::Conflict(vec![PathBuf::from("lib.rs")]));
    assert!(!marker.exists(), "the repository's merge driver ran");
}
