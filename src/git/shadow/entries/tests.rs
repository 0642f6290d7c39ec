use std::path::Path;

use proptest::prelude::*;

use super::*;
use crate::git::plain;

/// A repository of `format` holding a file, a file in a folder, an
/// executable, a link, and a file only intended to be added.
fn repository(format: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    plain(root, &["init", "-q", &format!("--object-format={format}")]);
    std::fs::write(root.join("a.txt"), "one\n").unwrap();
    std::fs::create_dir_all(root.join("deep/er")).unwrap();
    std::fs::write(root.join("deep/er/b.txt"), "two\n").unwrap();
    std::fs::write(root.join("deep/c.txt"), "three\n").unwrap();
    std::fs::write(root.join("run.sh"), "#!/bin/sh\n").unwrap();
    let mut perms = std::fs::metadata(root.join("run.sh"))
        .unwrap()
        .permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(root.join("run.sh"), perms).unwrap();
    std::os::unix::fs::symlink("a.txt", root.join("link")).unwrap();
    plain(root, &["add", "."]);
    dir
}

/// `root`'s index made in `version`: what it was written as, and its bytes.
fn written(root: &Path, version: &str) -> (u8, Vec<u8>) {
    plain(root, &["update-index", "--index-version", version]);
    let bytes = std::fs::read(root.join(".git/index")).unwrap();
    (bytes[7], bytes)
}

/// What git lists of the index: `mode oid path`, our side of conflicts, no
/// path only intended to be added.
fn listed_by_git(root: &Path) -> Vec<String> {
    let intended = plain(root, &["diff", "--name-only", "--diff-filter=A"]);
    plain(root, &["ls-files", "--stage"])
        .lines()
        .filter_map(|line| {
            let (meta, path) = line.split_once('\t')?;
            let words: Vec<&str> = meta.split(' ').collect();
            let keep = matches!(words[2], "0" | "2") && !intended.lines().any(|i| i == path);
            keep.then(|| format!("{} {} {path}", words[0], words[1]))
        })
        .collect()
}

fn listed(entries: &[Entry]) -> Vec<String> {
    entries
        .iter()
        .map(|e| {
            let path = String::from_utf8_lossy(&e.path);
            format!("{:06o} {} {path}", e.mode, e.oid)
        })
        .collect()
}

#[test]
fn every_version_reads_as_git_lists_it() {
    for (format, oid_len) in [("sha1", 20), ("sha256", 32)] {
        let repo = repository(format);
        let root = repo.path();
        for version in ["2", "3", "4"] {
            let (made, bytes) = written(root, version);
            // git writes 3 only when an entry needs its second word of flags.
            let expected = if version == "3" {
                2
            } else {
                version.parse().unwrap()
            };
            assert_eq!(made, expected, "{format}, version {version}");
            let entries = read(&bytes, oid_len, |_| true).unwrap();
            assert_eq!(
                listed(&entries),
                listed_by_git(root),
                "{format}, version {version}"
            );
            assert_eq!(entries.len(), 5);
            let deep = read(&bytes, oid_len, |p| p.starts_with(b"deep/")).unwrap();
            assert_eq!(deep.len(), 2, "{format}, version {version}");
        }
        // A file only intended to be added needs the second word: version 3.
        std::fs::write(root.join("later.txt"), "four\n").unwrap();
        plain(root, &["add", "-N", "later.txt"]);
        for version in ["3", "4"] {
            let (made, bytes) = written(root, version);
            assert_eq!(made.to_string(), version);
            let entries = read(&bytes, oid_len, |_| true).unwrap();
            assert_eq!(listed(&entries), listed_by_git(root), "{format}, {version}");
            assert_eq!(entries.len(), 5, "the intended file is left out");
        }
    }
}

#[test]
fn a_sparse_index_is_refused() {
    let repo = repository("sha1");
    let root = repo.path();
    plain(root, &["commit", "-q", "-m", "files"]);
    plain(
        root,
        &[
            "sparse-checkout",
            "set",
            "--cone",
            "--sparse-index",
            "deep/er",
        ],
    );
    let bytes = std::fs::read(root.join(".git/index")).unwrap();
    assert_eq!(
        read(&bytes, 20, |_| true),
        Err(BadIndex("an extension this reader does not know"))
    );
}

#[test]
fn our_side_of_a_conflict_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    plain(root, &["init", "-q", "-b", "main"]);
    std::fs::write(root.join("f.txt"), "base\n").unwrap();
    plain(root, &["add", "."]);
    plain(root, &["commit", "-q", "-m", "base"]);
    plain(root, &["checkout", "-q", "-b", "theirs"]);
    std::fs::write(root.join("f.txt"), "theirs\n").unwrap();
    plain(root, &["commit", "-q", "-am", "theirs"]);
    plain(root, &["checkout", "-q", "main"]);
    std::fs::write(root.join("f.txt"), "ours\n").unwrap();
    plain(root, &["commit", "-q", "-am", "ours"]);
    let merge = std::process::Command::new("git")
        .current_dir(root)
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "merge",
            "-q",
            "theirs",
        ])
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap();
    assert!(!merge.status.success(), "a conflict");
    let bytes = std::fs::read(root.join(".git/index")).unwrap();
    let entries = read(&bytes, 20, |_| true).unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].oid, plain(root, &["rev-parse", "main:f.txt"]));
}

#[test]
fn a_split_index_is_refused() {
    let repo = repository("sha1");
    let root = repo.path();
    plain(root, &["update-index", "--split-index"]);
    let bytes = std::fs::read(root.join(".git/index")).unwrap();
    assert_eq!(read(&bytes, 20, |_| true), Err(BadIndex("split index")));
}

#[test]
fn malformed_files_are_refused() {
    assert_eq!(read(b"", 20, |_| true), Err(BadIndex("truncated")));
    assert_eq!(
        read(b"DIRX\0\0\0\x02\0\0\0\0", 20, |_| true),
        Err(BadIndex("not an index file"))
    );
    assert_eq!(
        read(b"DIRC\0\0\0\x09\0\0\0\0", 20, |_| true),
        Err(BadIndex("unknown version"))
    );
    let repo = repository("sha1");
    let bytes = std::fs::read(repo.path().join(".git/index")).unwrap();
    // Cut inside the entries.
    assert_eq!(
        read(&bytes[..100], 20, |_| true),
        Err(BadIndex("truncated"))
    );
}

proptest! {
    #[test]
    fn any_bytes_are_read_or_refused(
        bytes in proptest::collection::vec(any::<u8>(), 0..600),
        version in 2u8..=4,
    ) {
        let mut file = b"DIRC\0\0\0".to_vec();
        file.push(version);
        file.extend_from_slice(&bytes);
        let _ = read(&file, 20, |_| true);
    }

}

#[test]
fn every_cut_of_a_real_index_is_read_or_refused() {
    let repo = repository("sha1");
    let root = repo.path();
    for version in ["2", "3", "4"] {
        let (_, bytes) = written(root, version);
        for cut in 0..bytes.len() {
            let _ = read(&bytes[..cut], 20, |_| true);
        }
    }
}
