use super::*;
use crate::git::plain;

/// A repository with `a.txt` committed, its folder canonical, and a scratch folder.
fn repository() -> (tempfile::TempDir, PathBuf, Trees) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("repo");
    std::fs::create_dir(&root).unwrap();
    let root = root.canonicalize().unwrap();
    plain(&root, &["init", "-q", "-b", "main"]);
    std::fs::write(root.join("a.txt"), "one\n").unwrap();
    plain(&root, &["add", "."]);
    plain(&root, &["commit", "-q", "-m", "first"]);
    let trees = Trees::new(dir.path().join("scratch"));
    (dir, root, trees)
}

fn call(agent: &str, id: &str) -> CallRef {
    CallRef {
        session: crate::protocol::SessionId::new(),
        agent: agent.into(),
        call_id: id.into(),
    }
}

fn paths(changes: &[FileChange]) -> Vec<&str> {
    changes.iter().map(|c| c.path.as_str()).collect()
}

#[test]
fn what_a_call_changed_is_its_own_and_what_was_changed_between_calls_is_nobodys() {
    let (_dir, root, trees) = repository();
    let tree = trees.tree(&root, &[]).unwrap();
    // Dirty before any call: not the call's.
    std::fs::write(root.join("a.txt"), "one\ndirty\n").unwrap();
    let n = tree.begin(call("lead", "b1"));
    std::fs::write(root.join("a.txt"), "one\ndirty\nmore\n").unwrap();
    std::fs::write(root.join("made.txt"), "made\n").unwrap();
    let changes = tree.end(n);
    assert_eq!(paths(&changes), ["a.txt", "made.txt"]);
    assert_eq!(
        changes[0].diff,
        "--- a/a.txt\n+++ b/a.txt\n@@ -1,2 +1,3 @@\n one\n dirty\n+more\n"
    );
    assert!(changes[1].created && changes.iter().all(|c| c.calls.is_empty()));

    // A file tool's write between calls, then a call that changes nothing.
    std::fs::write(root.join("made.txt"), "edited\n").unwrap();
    let n = tree.begin(call("lead", "b2"));
    assert!(tree.end(n).is_empty());
    assert!(!root.join(".git/index.lock").exists());
}

#[test]
fn calls_of_different_agents_overlapping_in_one_folder_are_all_named() {
    let (_dir, root, trees) = repository();
    let tree = trees.tree(&root, &[]).unwrap();
    let (a, b) = (call("writer", "a1"), call("tester", "b1"));
    let na = tree.begin(a.clone());
    std::fs::write(root.join("by-a.txt"), "a\n").unwrap();
    // b starts while a runs: what a did so far is a's alone.
    let nb = tree.begin(b.clone());
    std::fs::write(root.join("by-b.txt"), "b\n").unwrap();
    let of_a = tree.end(na);
    assert_eq!(paths(&of_a), ["by-a.txt", "by-b.txt"]);
    assert!(of_a[0].calls.is_empty(), "only a ran when it was made");
    assert_eq!(of_a[1].calls, [a, b], "both ran when it was made");
    assert!(tree.end(nb).is_empty(), "each change is told once");
}

#[test]
fn a_call_dropped_before_its_end_is_forgotten_and_what_was_found_for_it_is_kept() {
    let (_dir, root, trees) = repository();
    let tree = trees.tree(&root, &[]).unwrap();
    let first = tree.begin(call("writer", "a1"));
    std::fs::write(root.join("early.txt"), "x\n").unwrap();
    // Found as the second starts: the first's, which is then dropped.
    let second = tree.begin(call("tester", "b1"));
    tree.forget(first);
    std::fs::write(root.join("late.txt"), "x\n").unwrap();
    let changes = tree.end(second);
    assert_eq!(paths(&changes), ["early.txt", "late.txt"]);
    assert!(
        changes[1].calls.is_empty(),
        "the forgotten call is not named"
    );
    assert!(tree.state().running.is_empty());
}

#[tokio::test]
async fn a_call_dropped_before_its_end_is_never_left_running() {
    let (_dir, root, trees) = repository();
    let mut ctx = ToolContext::new(root.clone(), crate::protocol::SessionId::new());
    ctx.trees = Arc::new(trees);
    let seeing = begin(&ctx).await.unwrap();
    drop(seeing);
    let tree = ctx.trees.tree(&root, &[]).unwrap();
    let n = tree.begin(call("lead", "b9"));
    assert_eq!(tree.state().running.len(), 1, "only the call that runs");
    tree.end(n);
}

#[test]
fn a_plain_folder_is_compared_and_nothing_is_without_a_scratch_folder() {
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("plain");
    std::fs::create_dir(&folder).unwrap();
    let folder = folder.canonicalize().unwrap();
    std::fs::write(folder.join("big.bin"), vec![0u8; 1024]).unwrap();
    let trees = Trees::new(dir.path().join("scratch"));
    let tree = trees.tree(&folder, &[]).unwrap();
    let n = tree.begin(call("lead", "b1"));
    std::fs::write(folder.join("note.txt"), "x\n").unwrap();
    assert_eq!(paths(&tree.end(n)), ["note.txt"], "small: compared");
    assert!(
        Trees::default().tree(&folder, &[]).is_none(),
        "no scratch: never"
    );
}

#[test]
fn what_was_found_for_a_forgotten_call_goes_to_the_first_still_running() {
    let change = |path: &str| FileChange {
        path: path.into(),
        diff: String::new(),
        created: false,
        compared: true,
        calls: Vec::new(),
        count: None,
    };
    let mut state = State {
        running: vec![
            (1, call("a", "a1")),
            (2, call("b", "b1")),
            (3, call("c", "c1")),
        ],
        found: vec![(1, change("x")), (2, change("y"))],
        ..State::default()
    };
    state.forget(&[1]);
    assert_eq!(state.running.len(), 2);
    assert_eq!(paths(&state.finish(2)), ["x", "y"]);
    assert!(state.finish(3).is_empty());
    state.found = vec![(4, change("z"))];
    state.forget(&[4]);
    assert!(state.found.is_empty(), "nobody left to take it");
}
