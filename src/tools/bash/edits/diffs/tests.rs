use super::*;
use crate::git::checkout::Blob;

fn blob(oid: &str, mode: &str) -> Option<Blob> {
    Some(Blob {
        oid: oid.into(),
        mode: mode.into(),
    })
}

fn change(path: &str, before: Option<Blob>, after: Option<Blob>) -> PathChange {
    PathChange {
        path: path.into(),
        before,
        after,
    }
}

fn blobs(pairs: &[(&str, Option<&[u8]>)]) -> HashMap<String, Option<Vec<u8>>> {
    pairs
        .iter()
        .map(|(oid, bytes)| ((*oid).to_owned(), bytes.map(<[u8]>::to_vec)))
        .collect()
}

fn call(id: &str) -> CallRef {
    CallRef {
        session: crate::protocol::SessionId::new(),
        agent: "writer".into(),
        call_id: id.into(),
    }
}

#[test]
fn each_change_is_a_diff_as_the_file_tools_tell_theirs() {
    let changes = [
        change("a.txt", blob("1", "100644"), blob("2", "100644")),
        change("new.txt", None, blob("3", "100644")),
        change("gone.txt", blob("1", "100644"), None),
    ];
    let read = blobs(&[
        ("1", Some(b"one\n")),
        ("2", Some(b"one\ntwo\n")),
        ("3", Some(b"new\n")),
    ]);
    let told = told(&changes, &read, &[call("b1")]);
    let diffs: Vec<(&str, &str, bool)> = told
        .iter()
        .map(|c| (c.path.as_str(), c.diff.as_str(), c.created))
        .collect();
    assert_eq!(
        diffs,
        [
            (
                "a.txt",
                "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1,2 @@\n one\n+two\n",
                false
            ),
            (
                "new.txt",
                "--- a/new.txt\n+++ b/new.txt\n@@ -0,0 +1 @@\n+new\n",
                true
            ),
            (
                "gone.txt",
                "--- a/gone.txt\n+++ b/gone.txt\n@@ -1 +0,0 @@\n-one\n",
                false
            ),
        ]
    );
    assert!(
        told.iter()
            .all(|c| c.compared && c.calls.is_empty() && c.count.is_none())
    );
}

#[test]
fn binaries_modes_submodules_and_large_files_are_told_in_a_line() {
    let changes = [
        change("img.png", None, blob("b", "100644")),
        change("run.sh", blob("s", "100644"), blob("s", "100755")),
        change(
            "vendor/lib",
            blob("aaaaaaaaaaaaaaaa", "160000"),
            blob("bbbbbbbbbbbbbbbb", "160000"),
        ),
        change("big.txt", blob("1", "100644"), blob("L", "100644")),
        change("latin.txt", None, blob("l", "100644")),
    ];
    let read = blobs(&[
        ("b", Some(b"\x89PNG\0\x01")),
        ("1", Some(b"one\n")),
        ("L", None),
        ("l", Some(b"caf\xe9\n")),
    ]);
    let told = told(&changes, &read, &[]);
    let diffs: Vec<&str> = told.iter().map(|c| c.diff.as_str()).collect();
    assert_eq!(
        diffs,
        [
            "Binary files /dev/null and b/img.png differ\n",
            "old mode 100644\nnew mode 100755\n",
            "[submodule vendor/lib: aaaaaaaaaaaa -> bbbbbbbbbbbb]\n",
            "[diff of big.txt not shown: it is larger than 256 KiB]\n",
            "Binary files /dev/null and b/latin.txt differ\n",
        ]
    );
    assert_eq!(
        wanted(&changes),
        ["b", "s", "s", "1", "L", "l"],
        "no submodule is read"
    );
}

#[test]
fn past_the_cap_one_change_says_how_many_and_where() {
    let changes: Vec<PathChange> = (0..=MAX_TOLD)
        .map(|n| {
            change(
                &format!("target/debug/{n}/out.o"),
                None,
                blob("x", "100644"),
            )
        })
        .collect();
    assert!(wanted(&changes).is_empty(), "nothing is read");
    let calls = [call("a1"), call("b1")];
    let told = told(&changes, &HashMap::new(), &calls);
    assert_eq!(told.len(), 1);
    assert_eq!(told[0].path, "target/debug");
    assert_eq!(told[0].count, Some(MAX_TOLD + 1));
    assert_eq!(told[0].diff, "");
    assert_eq!(told[0].calls, calls, "several calls ran: all are named");

    let mut spread = changes;
    spread.push(change("README.md", None, blob("x", "100644")));
    assert_eq!(told_path(&spread), ".");
}

fn told_path(changes: &[PathChange]) -> String {
    told(changes, &HashMap::new(), &[]).remove(0).path
}
