//! Tests of `render`.

use std::time::Duration;

use super::*;
use crate::conversation::Usage;
use crate::protocol::{RunStats, SessionId};
use crate::ui::progress::test_events::event;

/// A lead with three sub-agents, each left in a different state.
fn fan_out() -> (Board, Vec<String>) {
    let lead = SessionId::new();
    let (a, b, c, d) = (
        SessionId::new(),
        SessionId::new(),
        SessionId::new(),
        SessionId::new(),
    );
    let usage = Usage {
        input_tokens: 1800,
        output_tokens: 500,
        ..Usage::default()
    };
    let stats = RunStats {
        turns: 3,
        tool_calls: 6,
        duration_ms: 7000,
        usage,
        cost_usd: Some(0.042),
    };
    let mut steps: Vec<(u64, Event)> = vec![
        (
            0,
            event(
                lead,
                None,
                "orchestrator",
                EventKind::SessionStarted {
                    model: "m".into(),
                    resumed: false,
                    memory: Vec::new(),
                },
            ),
        ),
        (
            100,
            event(
                lead,
                None,
                "orchestrator",
                EventKind::TurnStarted {
                    turn: 1,
                    attempt: 1,
                },
            ),
        ),
        (
            900,
            event(
                lead,
                None,
                "orchestrator",
                EventKind::TurnFinished {
                    turn: 1,
                    text: String::new(),
                    tool_calls: 3,
                    usage,
                    cost_usd: Some(0.012),
                },
            ),
        ),
        (
            1000,
            event(
                lead,
                None,
                "orchestrator",
                EventKind::ToolStarted {
                    call_id: "t1".into(),
                    name: "Task".into(),
                    arguments: "{}".into(),
                },
            ),
        ),
        (
            1000,
            event(
                lead,
                None,
                "orchestrator",
                EventKind::ToolStarted {
                    call_id: "t2".into(),
                    name: "Task".into(),
                    arguments: "{}".into(),
                },
            ),
        ),
        (
            1000,
            event(
                lead,
                None,
                "orchestrator",
                EventKind::ToolStarted {
                    call_id: "t3".into(),
                    name: "Task".into(),
                    arguments: "{}".into(),
                },
            ),
        ),
        (
            1100,
            event(
                a,
                Some(lead),
                "explorer",
                EventKind::SessionStarted {
                    model: "m".into(),
                    resumed: false,
                    memory: Vec::new(),
                },
            ),
        ),
        (
            1100,
            event(
                b,
                Some(lead),
                "coder",
                EventKind::SessionStarted {
                    model: "m".into(),
                    resumed: false,
                    memory: Vec::new(),
                },
            ),
        ),
        (
            1100,
            event(
                c,
                Some(lead),
                "tester",
                EventKind::SessionStarted {
                    model: "m".into(),
                    resumed: false,
                    memory: Vec::new(),
                },
            ),
        ),
        (
            2000,
            event(
                b,
                Some(lead),
                "coder",
                EventKind::ToolStarted {
                    call_id: "e".into(),
                    name: "Edit".into(),
                    arguments: r#"{"file_path":"src/http.rs"}"#.into(),
                },
            ),
        ),
        (
            3000,
            event(
                c,
                Some(lead),
                "tester",
                EventKind::Retrying {
                    attempt: 2,
                    max_attempts: 5,
                    delay_ms: 3000,
                    reason: "HTTP 429: rate limited".into(),
                },
            ),
        ),
        (
            1000,
            event(
                lead,
                None,
                "orchestrator",
                EventKind::SubagentQueued {
                    call_id: "t4".into(),
                    role: "tester".into(),
                    waiting: true,
                },
            ),
        ),
        (
            1100,
            event(
                d,
                Some(lead),
                "reviewer",
                EventKind::SessionStarted {
                    model: "m".into(),
                    resumed: false,
                    memory: Vec::new(),
                },
            ),
        ),
        (
            3500,
            event(
                d,
                Some(lead),
                "reviewer",
                EventKind::AwaitingPermission {
                    tool: "Bash".into(),
                },
            ),
        ),
        (
            8100,
            event(
                a,
                Some(lead),
                "explorer",
                EventKind::Terminal {
                    prompts: vec![2],
                    outcome: Outcome::Completed {
                        text: "x".into(),
                        truncated: false,
                        stats,
                    },
                },
            ),
        ),
    ];
    steps.sort_by_key(|(at, _)| *at);
    let mut board = Board::new();
    let mut lines = Vec::new();
    for (at, e) in &steps {
        let i = board.apply(e, Duration::from_millis(*at)).unwrap();
        lines.extend(plain_line(&board, i, e, *at));
    }
    (board, lines)
}

#[test]
fn the_live_tree_shows_every_state() {
    let (board, _) = fan_out();
    let tree: Vec<String> = (0..board.rows().len())
        .map(|i| render_row(&board, i, 4000))
        .collect();
    insta::assert_snapshot!(tree.join("\n"));
}

#[test]
fn without_a_terminal_each_lifecycle_event_is_one_line() {
    let (_, lines) = fan_out();
    insta::assert_snapshot!(lines.join("\n"));
}

#[test]
fn the_summary_table_lists_every_agent() {
    let (board, _) = fan_out();
    insta::assert_snapshot!(summary(&board, 9000));
}

#[test]
fn the_files_a_run_changed_are_listed_with_lines_added_and_removed() {
    let lead = SessionId::new();
    let mut board = Board::new();
    assert_eq!(files_changed(&board), "");
    let change = |path: &str, diff: &str| {
        event(
            lead,
            None,
            "orchestrator",
            EventKind::FileChanged {
                call_id: "c".into(),
                path: path.into(),
                diff: diff.into(),
                created: false,
                held: false,
                calls: Vec::new(),
                count: None,
            },
        )
    };
    let diff = "--- a/src/a.rs\n+++ b/src/a.rs\n@@ -1,2 +1,3 @@\n-old\n+new\n+more\n same\n";
    board.apply(&change("src/a.rs", diff), Duration::ZERO);
    board.apply(&change("src/a.rs", "@@ -1 +1 @@\n-x\n+y\n"), Duration::ZERO);
    board.apply(&change("b.txt", "@@ -0,0 +1 @@\n+hello\n"), Duration::ZERO);
    assert_eq!(
        files_changed(&board),
        "files changed:\n  b.txt  +1 −0\n  src/a.rs  +3 −2\n"
    );
}

#[test]
fn a_todo_list_shows_on_the_row_in_its_line_and_in_the_summary() {
    use crate::protocol::{Todo, TodoStatus};
    let lead = SessionId::new();
    let mut board = Board::new();
    let item = |content: &str, status| Todo {
        content: content.into(),
        status,
        active_form: Some(format!("{content}ing")),
        id: None,
    };
    let todos = event(
        lead,
        None,
        "orchestrator",
        EventKind::Todos {
            todos: vec![
                item("Read", TodoStatus::Completed),
                item("Fix", TodoStatus::InProgress),
                item("Test", TodoStatus::Pending),
            ],
        },
    );
    let i = board.apply(&todos, Duration::ZERO).unwrap();
    assert!(
        render_row(&board, i, 0).contains("thinking · 1/3"),
        "{}",
        render_row(&board, i, 0)
    );
    assert_eq!(
        plain_line(&board, i, &todos, 0).unwrap(),
        "[00:00] orchestrator: todos 1/3: Fixing"
    );
    assert!(summary(&board, 0).ends_with("todos done: orchestrator 1/3\n"));
}

#[test]
fn an_isolated_agents_row_says_what_became_of_its_changes() {
    let lead = SessionId::new();
    let (a, b) = (SessionId::new(), SessionId::new());
    let mut board = Board::new();
    let apply = |board: &mut Board, id, kind| {
        board
            .apply(&event(id, Some(lead), "coder", kind), Duration::ZERO)
            .unwrap()
    };
    let isolated = || EventKind::Isolated {
        path: "/s/checkouts/x".into(),
        base: "b".into(),
        lacks: Vec::new(),
    };
    let i = apply(&mut board, a, isolated());
    assert!(
        render_row(&board, i, 0).contains(" · isolated"),
        "{}",
        render_row(&board, i, 0)
    );
    // What it changed in its checkout counts once merged, and only then.
    let diff = "@@ -1 +1,2 @@\n-x\n+y\n+z\n";
    let changed = EventKind::FileChanged {
        call_id: "c".into(),
        path: "lib.rs".into(),
        diff: diff.into(),
        created: false,
        held: false,
        calls: Vec::new(),
        count: None,
    };
    apply(&mut board, a, changed.clone());
    assert_eq!(files_changed(&board), "");
    let merged = EventKind::Merged {
        files: vec!["lib.rs".into()],
        added: 2,
        removed: 1,
    };
    apply(&mut board, a, merged);
    assert!(render_row(&board, i, 0).contains(" · merged +2 −1"));
    assert_eq!(files_changed(&board), "files changed:\n  lib.rs  +2 −1\n");
    // A conflict changes nothing of the parent's tree.
    let j = apply(&mut board, b, isolated());
    apply(&mut board, b, changed);
    let conflicted = EventKind::Conflicted {
        files: vec!["lib.rs".into()],
        branch: "orchestrate/0193/coder-2".into(),
    };
    apply(&mut board, b, conflicted.clone());
    assert!(render_row(&board, j, 0).contains(" · conflict"));
    assert_eq!(files_changed(&board), "files changed:\n  lib.rs  +2 −1\n");
    assert_eq!(
        checkouts(&board),
        "coder#1 merged: lib.rs\ncoder#2 not merged (conflict in lib.rs): its work is on branch orchestrate/0193/coder-2\n"
    );
    let line = plain_line(&board, j, &event(b, Some(lead), "coder", conflicted), 0).unwrap();
    assert_eq!(
        line,
        "[00:00] coder#2: conflict in lib.rs: nothing merged, its work is on branch orchestrate/0193/coder-2"
    );
}
