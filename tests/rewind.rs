//! Checkpoints and rewind, through the real binary against real git: a run's
//! changes undone (changed files restored, created ones removed), the rewind
//! itself undone, a change made since refused unless `--force`, and the
//! checkpoints kept by `git gc --prune=now`.

use serde_json::json;

use crate::cli::{run_on, text};
use crate::isolation::{LIB, branches, git, repository};
use crate::support::harness::state;
use crate::support::mock_llm::{MockLlm, Recorded, Reply};

const BYPASS: [&str; 2] = ["--permission-mode", "bypassPermissions"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_is_rewound_refusing_newer_changes_and_the_rewind_undone() {
    let mock = MockLlm::start_with(|request: &Recorded, _| match request.results() {
        0 => Reply::tool_calls(&[
            (
                "w",
                "Write",
                json!({"file_path": "new.rs", "content": "new\n"}),
            ),
            ("r", "Read", json!({"file_path": "lib.rs"})),
        ]),
        2 => Reply::tool_calls(&[(
            "e",
            "Edit",
            json!({"file_path": "lib.rs", "old_string": "    2", "new_string": "    22"}),
        )]),
        _ => Reply::text("changed"),
    })
    .await;
    let dir = repository();
    let root = dir.path().canonicalize().unwrap();
    let mut args = BYPASS.to_vec();
    args.push("change things");
    let out = run_on(&mock, &root, &args, &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let changed = LIB.replace("    2\n", "    22\n");
    assert_eq!(
        std::fs::read_to_string(root.join("lib.rs")).unwrap(),
        changed
    );
    // Checkpoints are kept by git's garbage collection.
    git(&root, &["gc", "--quiet", "--prune=now"]);
    let run = orchestrate::runs::list(&state(&root))[0].id.to_string();
    let show = run_on(&mock, &root, &["sessions", "show", &run[..8]], &[]).await;
    let shown = text(&show.stdout);
    assert!(
        shown.contains("checkpoint 1: before the first change"),
        "{shown}"
    );
    assert!(shown.contains("checkpoint 2: the run's end"), "{shown}");

    let rewound = run_on(&mock, &root, &["rewind"], &[]).await;
    assert_eq!(rewound.status.code(), Some(0), "{}", text(&rewound.stderr));
    assert_eq!(std::fs::read_to_string(root.join("lib.rs")).unwrap(), LIB);
    assert!(
        !root.join("new.rs").exists(),
        "a file the run made is removed"
    );
    let said = text(&rewound.stdout);
    assert!(said.contains("1 files restored, 1 removed"), "{said}");
    let undo = format!("orchestrate rewind {run} --to 3");
    assert!(said.contains(&undo), "{said}");

    // Undone: the run's changes are back.
    let again = run_on(&mock, &root, &["rewind", &run, "--to", "3"], &[]).await;
    assert_eq!(again.status.code(), Some(0), "{}", text(&again.stderr));
    assert_eq!(
        std::fs::read_to_string(root.join("lib.rs")).unwrap(),
        changed
    );
    assert_eq!(
        std::fs::read_to_string(root.join("new.rs")).unwrap(),
        "new\n"
    );

    // A change made since is not overwritten unless asked.
    std::fs::write(root.join("lib.rs"), "the person's\n").unwrap();
    let refused = run_on(&mock, &root, &["rewind", &run], &[]).await;
    assert_eq!(refused.status.code(), Some(1));
    assert_eq!(
        text(&refused.stderr),
        "orchestrate: lib.rs changed after the run's last checkpoint; rewinding would lose that (--force rewinds anyway)\n"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("lib.rs")).unwrap(),
        "the person's\n"
    );
    let forced = run_on(&mock, &root, &["rewind", &run, "--force"], &[]).await;
    assert_eq!(forced.status.code(), Some(0), "{}", text(&forced.stderr));
    assert_eq!(std::fs::read_to_string(root.join("lib.rs")).unwrap(), LIB);
    // The person's index and branches were never touched.
    assert_eq!(git(&root, &["diff", "--cached", "--name-only"]), "");
    assert_eq!(branches(&root), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outside_git_the_files_the_file_tools_changed_are_put_back() {
    let mock = MockLlm::start_with(|request: &Recorded, _| match request.results() {
        0 => Reply::tool_calls(&[
            (
                "w",
                "Write",
                json!({"file_path": "new.txt", "content": "new\n"}),
            ),
            ("r", "Read", json!({"file_path": "notes.txt"})),
        ]),
        2 => Reply::tool_calls(&[(
            "e",
            "Edit",
            json!({"file_path": "notes.txt", "old_string": "mine", "new_string": "the run's"}),
        )]),
        _ => Reply::text("changed"),
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::write(root.join("notes.txt"), "mine\n").unwrap();
    let mut args = BYPASS.to_vec();
    args.push("change things");
    let out = run_on(&mock, &root, &args, &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        std::fs::read_to_string(root.join("notes.txt")).unwrap(),
        "the run's\n"
    );
    let run = orchestrate::runs::list(&state(&root))[0].id.to_string();
    let show = run_on(&mock, &root, &["sessions", "show", &run[..8]], &[]).await;
    assert!(
        text(&show.stdout).contains("checkpoint 1: copies of 2 files"),
        "{}",
        text(&show.stdout)
    );

    let rewound = run_on(&mock, &root, &["rewind"], &[]).await;
    assert_eq!(rewound.status.code(), Some(0), "{}", text(&rewound.stderr));
    assert!(
        text(&rewound.stdout).contains("not what commands did"),
        "{}",
        text(&rewound.stdout)
    );
    assert_eq!(
        std::fs::read_to_string(root.join("notes.txt")).unwrap(),
        "mine\n"
    );
    assert!(!root.join("new.txt").exists());

    // Undone, then a change made since is refused.
    let again = run_on(&mock, &root, &["rewind", &run, "--to", "2"], &[]).await;
    assert_eq!(again.status.code(), Some(0), "{}", text(&again.stderr));
    assert_eq!(
        std::fs::read_to_string(root.join("notes.txt")).unwrap(),
        "the run's\n"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("new.txt")).unwrap(),
        "new\n"
    );
    std::fs::write(root.join("notes.txt"), "later\n").unwrap();
    let refused = run_on(&mock, &root, &["rewind", &run], &[]).await;
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        text(&refused.stderr).contains("notes.txt changed after"),
        "{}",
        text(&refused.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(root.join("notes.txt")).unwrap(),
        "later\n"
    );
}
