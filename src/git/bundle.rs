//! Git bundles: a commit, and what it needs beyond a commit the receiver
//! holds already, as one file; and such a file fetched with every object it
//! brings checked (`transfer.fsckObjects`), its tip checked to be the commit
//! it was said to be. What travels between a lead and its workers.
//!
//! Blocking: callers run these on the blocking pool.

use std::path::Path;

use super::checkout::{CheckoutError, git};

/// The ref a bundle named `name` carries its tip under.
fn carried(name: &str) -> String {
    format!("refs/orchestrate/bundles/{name}")
}

/// Whether `name` may name a bundle: letters, digits, `.`, `-` and `_`,
/// not starting with `.` or `-`, at most 128.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && !name.starts_with(['.', '-'])
        && !name.contains("..")
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
}

/// Whether `oid` is written as git writes an object's full name: 40 or 64
/// lower-case hex digits (nothing git could read as an option or a revision
/// expression).
pub fn valid_oid(oid: &str) -> bool {
    matches!(oid.len(), 40 | 64) && oid.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

fn checked(name: &str, oids: &[&str]) -> Result<(), CheckoutError> {
    if !valid_name(name) {
        return Err(CheckoutError::BranchName(name.to_owned()));
    }
    if let Some(bad) = oids.iter().find(|oid| !valid_oid(oid)) {
        return Err(CheckoutError::Io(std::io::Error::other(format!(
            "{bad:?} is not an object name"
        ))));
    }
    Ok(())
}

/// Writes to `file` a bundle named `name` of commit `tip` of the repository
/// at `root`: with its whole history, or, given `known` (a commit the
/// receiver holds), only what `tip` has beyond it.
pub fn create(
    root: &Path,
    file: &Path,
    name: &str,
    tip: &str,
    known: Option<&str>,
) -> Result<(), CheckoutError> {
    checked(name, &[tip])?;
    if let Some(known) = known {
        checked(name, &[known])?;
    }
    let carried = carried(name);
    git(root, &["update-ref", &carried, tip], &[])?;
    let file_text = file.to_string_lossy();
    let without = known.map(|k| format!("^{k}"));
    let mut args = vec!["bundle", "create", "--quiet", &file_text, &carried];
    args.extend(without.as_deref());
    let made = git(root, &args, &[]);
    let _ = git(root, &["update-ref", "-d", &carried], &[]);
    made.map(|_| ())
}

/// Fetches bundle `file` (named `name`) into the repository at `root` as
/// ref `into`, every object it brings checked as `transfer.fsckObjects`
/// checks them (whatever the repository's config says), and refused unless
/// its tip is commit `tip`. A bundle that needs a commit the repository
/// lacks is refused by git.
pub fn fetch(
    root: &Path,
    file: &Path,
    name: &str,
    tip: &str,
    into: &str,
) -> Result<(), CheckoutError> {
    checked(name, &[tip])?;
    let file_text = file.to_string_lossy();
    let refspec = format!("+{}:{into}", carried(name));
    git(
        root,
        &[
            "-c",
            "transfer.fsckObjects=true",
            "-c",
            "fetch.fsckObjects=true",
            "fetch",
            "--quiet",
            "--no-tags",
            "--no-write-fetch-head",
            "--no-recurse-submodules",
            "--",
            &file_text,
            &refspec,
        ],
        &[],
    )?;
    let got = git(root, &["rev-parse", "--verify", "--quiet", into], &[]);
    if got.as_deref().ok() != Some(tip) {
        let _ = git(root, &["update-ref", "-d", into], &[]);
        return Err(CheckoutError::Io(std::io::Error::other(format!(
            "the bundle {name} holds another commit than {tip}"
        ))));
    }
    Ok(())
}

/// The only parent of commit `commit` of the repository at `root`; `None`
/// when it has none or several.
pub fn only_parent(root: &Path, commit: &str) -> Result<Option<String>, CheckoutError> {
    checked("parent", &[commit])?;
    let line = git(root, &["rev-list", "--parents", "-n", "1", commit], &[])?;
    let mut words = line.split_whitespace().skip(1);
    Ok(match (words.next(), words.next()) {
        (Some(parent), None) => Some(parent.to_owned()),
        _ => None,
    })
}

/// The size of the largest file commit `to` of the repository at `root`
/// adds or changes against commit `from`.
pub fn largest_change(root: &Path, from: &str, to: &str) -> Result<u64, CheckoutError> {
    checked("change", &[from, to])?;
    let oids: Vec<String> = super::checkout::changed(root, from, to)?
        .into_iter()
        .filter_map(|change| change.after)
        // A submodule's entry names a commit, not a file.
        .filter(|blob| blob.mode != "160000")
        .map(|blob| blob.oid)
        .collect();
    if oids.is_empty() {
        return Ok(0);
    }
    let args = ["cat-file", "--batch-check=%(objectsize)"];
    let input = format!("{}\n", oids.join("\n")).into_bytes();
    let out = super::checkout::git_run(root, &args, &[], input)?;
    if !out.status.success() {
        return Err(super::checkout::failed(root, &args, &out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| line.trim().parse::<u64>().ok())
        .max()
        .unwrap_or(0))
}

/// Whether the repository at `root` holds commit `oid`.
pub fn has_commit(root: &Path, oid: &str) -> bool {
    valid_oid(oid) && git(root, &["cat-file", "-e", &format!("{oid}^{{commit}}")], &[]).is_ok()
}

/// Makes an empty bare repository at `dir` (a folder that may exist, empty).
pub fn init_bare(dir: &Path) -> Result<(), CheckoutError> {
    std::fs::create_dir_all(dir)?;
    git(dir, &["init", "--quiet", "--bare", "."], &[])?;
    Ok(())
}

/// The refs of the repository at `root` below each of `prefixes`
/// (`refs/orchestrate/remote/`), by full name.
pub fn refs_below(root: &Path, prefixes: &[&str]) -> Result<Vec<String>, CheckoutError> {
    let mut args = vec!["for-each-ref", "--format=%(refname)"];
    args.extend(prefixes);
    Ok(git(root, &args, &[])?
        .lines()
        .map(str::to_owned)
        .filter(|name| !name.is_empty())
        .collect())
}

/// Deletes ref `name` of the repository at `root`, if it is there.
pub fn delete_ref(root: &Path, name: &str) {
    let _ = git(root, &["update-ref", "-d", name], &[]);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        git(root, &["init", "--quiet", "."], &[]).unwrap();
        std::fs::write(root.join("a.txt"), "one\n").unwrap();
        git(root, &["add", "a.txt"], &[]).unwrap();
        commit(root, "first");
        dir
    }

    fn commit(root: &Path, message: &str) -> String {
        git(
            root,
            &[
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "commit",
                "--quiet",
                "--allow-empty",
                "-am",
                message,
            ],
            &[],
        )
        .unwrap();
        git(root, &["rev-parse", "HEAD"], &[]).unwrap()
    }

    #[test]
    fn names_and_object_names_that_could_be_read_as_more_are_refused() {
        assert!(valid_name("0193abc.work"));
        for bad in ["", "-x", ".x", "a/b", "a..b", "a b", "refs/heads/x"] {
            assert!(!valid_name(bad), "{bad:?}");
        }
        assert!(valid_oid(&"a".repeat(40)));
        assert!(!valid_oid("HEAD"));
        assert!(!valid_oid(&"A".repeat(40)));
        assert!(!valid_oid(&format!("--{}", "a".repeat(38))));
    }

    #[test]
    fn a_history_and_a_commit_beyond_it_travel_as_two_bundles() {
        let from = repo();
        let base = git(from.path(), &["rev-parse", "HEAD"], &[]).unwrap();
        std::fs::write(from.path().join("a.txt"), "two\n").unwrap();
        let next = commit(from.path(), "second");
        let files = tempfile::tempdir().unwrap();
        let (whole, thin) = (files.path().join("base"), files.path().join("next"));
        create(from.path(), &whole, "b", &base, None).unwrap();
        create(from.path(), &thin, "n", &next, Some(&base)).unwrap();
        // The carried refs are gone from the sender.
        assert!(
            git(from.path(), &["show-ref"], &[])
                .unwrap()
                .lines()
                .all(|l| !l.contains("bundles"))
        );

        let to = tempfile::tempdir().unwrap();
        init_bare(to.path()).unwrap();
        // The thin one needs what the receiver lacks yet.
        assert!(fetch(to.path(), &thin, "n", &next, "refs/x/next").is_err());
        fetch(to.path(), &whole, "b", &base, "refs/x/base").unwrap();
        fetch(to.path(), &thin, "n", &next, "refs/x/next").unwrap();
        assert!(has_commit(to.path(), &next));
        assert_eq!(only_parent(to.path(), &next).unwrap(), Some(base.clone()));
        // `a.txt` became "two\n": four bytes, the largest (and only) change.
        assert_eq!(largest_change(to.path(), &base, &next).unwrap(), 4);
        assert_eq!(largest_change(to.path(), &next, &next).unwrap(), 0);
        assert_eq!(only_parent(to.path(), &base).unwrap(), None);
        // A bundle is refused for a tip it does not hold.
        let other = tempfile::tempdir().unwrap();
        init_bare(other.path()).unwrap();
        let err = fetch(other.path(), &whole, "b", &next, "refs/x/base").unwrap_err();
        assert!(err.to_string().contains("another commit"), "{err}");
        assert!(
            git(other.path(), &["show-ref"], &[])
                .unwrap_or_default()
                .is_empty()
        );
    }

    #[test]
    fn a_bundle_with_a_broken_object_is_refused() {
        let from = repo();
        let base = git(from.path(), &["rev-parse", "HEAD"], &[]).unwrap();
        let tree = git(from.path(), &["rev-parse", "HEAD^{tree}"], &[]).unwrap();
        // A commit without an author, which fsck refuses.
        let body = format!("tree {tree}\nparent {base}\ncommitter x <x> 0 +0000\n\nbroken\n");
        let bad = super::super::checkout::git_run(
            from.path(),
            &[
                "hash-object",
                "-t",
                "commit",
                "-w",
                "--literally",
                "--stdin",
            ],
            &[],
            body.into_bytes(),
        )
        .unwrap();
        let bad = String::from_utf8_lossy(&bad.stdout).trim().to_owned();
        let files = tempfile::tempdir().unwrap();
        let (whole, thin) = (files.path().join("base"), files.path().join("bad"));
        create(from.path(), &whole, "b", &base, None).unwrap();
        create(from.path(), &thin, "bad", &bad, Some(&base)).unwrap();
        let to = tempfile::tempdir().unwrap();
        init_bare(to.path()).unwrap();
        // The receiver's own config cannot turn the check off.
        git(to.path(), &["config", "fetch.fsckObjects", "false"], &[]).unwrap();
        fetch(to.path(), &whole, "b", &base, "refs/x/base").unwrap();
        let err = fetch(to.path(), &thin, "bad", &bad, "refs/x/bad").unwrap_err();
        assert!(
            err.to_string().contains("fsck") || err.to_string().contains("index-pack"),
            "{err}"
        );
        assert!(!has_commit(to.path(), &bad));
    }
}
