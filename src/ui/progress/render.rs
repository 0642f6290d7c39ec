//! The board rendered as text, by pure functions: the live tree's rows, the plain
//! line for each lifecycle event (no terminal), and the summary table at the end.
//! It does not change the board (`board`) nor draw anything.

use super::board::{Board, State};
use super::text::{clip, clock, count, dollars, short_call, tokens};
use crate::protocol::{Event, EventKind, Outcome};

/// The state as words, with its mark.
pub fn state_text(state: &State, now_ms: u64, tools: u32) -> String {
    match state {
        State::Thinking => "thinking".to_owned(),
        State::Streaming => "streaming".to_owned(),
        State::Tool(call) => call.clone(),
        State::Waiting(1) => "waiting on 1 sub-agent".to_owned(),
        State::Waiting(n) => format!("waiting on {n} sub-agents"),
        State::AwaitingPermission(tool) => format!("awaiting permission for {tool}"),
        State::Retrying {
            attempt,
            max,
            reason,
            at_ms,
        } => {
            let left = at_ms.saturating_sub(now_ms).div_ceil(1000);
            format!("retrying {attempt}/{max} · {reason} ({left}s)")
        }
        State::RateLimited { at_ms } => {
            let left = at_ms.saturating_sub(now_ms).div_ceil(1000);
            format!("rate limited · {left}s")
        }
        State::Done => format!("✔ done · {}", count(tools, "tool")),
        State::Failed(class) => format!("✘ failed · {class}"),
        State::Cancelled => "cancelled".to_owned(),
        State::Stopped(reason) => format!("■ stopped · {reason}"),
    }
}

/// One row of the live tree (without the spinner, which the terminal draws).
pub fn render_row(board: &Board, index: usize, now_ms: u64) -> String {
    let rows = board.rows();
    let row = &rows[index];
    let prefix = match row.parent {
        None => "",
        Some(parent) => {
            let last = rows.iter().rposition(|r| r.parent == Some(parent)) == Some(index);
            if last { "└ " } else { "├ " }
        }
    };
    let elapsed = row
        .ended_ms
        .unwrap_or(now_ms)
        .saturating_sub(row.started_ms);
    let mut state = state_text(&row.state, now_ms, row.tools);
    if row.queued > 0 {
        state.push_str(&format!(" · {} queued", row.queued));
    }
    if let Some((done, all)) = row.todos {
        state.push_str(&format!(" · {done}/{all}"));
    }
    if row.compacted > 0 {
        state.push_str(&format!(" · compacted −{}", tokens(row.compacted)));
    }
    format!(
        "{:<16} {:<44} {:>8} {:>7}   {}",
        format!("{prefix}{}", row.label),
        state,
        format!("{} tok", tokens(row.tokens)),
        dollars(row.cost_usd()),
        clock(elapsed)
    )
}

/// The plain line for one lifecycle event (no terminal), or none for progress and
/// bookkeeping events.
pub fn plain_line(board: &Board, index: usize, event: &Event, now_ms: u64) -> Option<String> {
    let row = &board.rows()[index];
    let what = match &event.kind {
        EventKind::SessionStarted { resumed: false, .. } => "started".to_owned(),
        EventKind::SessionStarted { resumed: true, .. } => "resumed from its journal".to_owned(),
        EventKind::SubagentQueued {
            role,
            waiting: true,
            ..
        } => format!("{role} queued for a free slot"),
        EventKind::SubagentQueued { waiting: false, .. } => return None,
        EventKind::AwaitingPermission { tool } => format!("awaiting permission for {tool}"),
        EventKind::Restarted { reason, .. } => {
            format!("crashed and restarted ({})", clip(reason, 60))
        }
        EventKind::ToolStarted {
            name, arguments, ..
        } => short_call(name, arguments),
        EventKind::ToolFinished {
            name,
            is_error: true,
            ..
        } => format!("{name} failed"),
        EventKind::Retrying {
            attempt,
            max_attempts,
            delay_ms,
            reason,
        } => format!(
            "retrying {attempt}/{max_attempts} in {:.1}s: {}",
            *delay_ms as f64 / 1000.0,
            clip(reason, 80)
        ),
        EventKind::Compacted {
            freed_tokens,
            elided,
            summarized,
        } => format!(
            "compacted its conversation: {} tokens freed ({elided} old results elided{})",
            tokens(*freed_tokens),
            if *summarized {
                ", older turns summarized"
            } else {
                ""
            }
        ),
        EventKind::Todos { todos } => {
            let done = todos
                .iter()
                .filter(|t| t.status == crate::protocol::TodoStatus::Completed)
                .count();
            let now = todos
                .iter()
                .find(|t| t.status == crate::protocol::TodoStatus::InProgress)
                .map(|t| {
                    format!(
                        ": {}",
                        clip(t.active_form.as_deref().unwrap_or(&t.content), 60)
                    )
                })
                .unwrap_or_default();
            format!("todos {done}/{}{now}", todos.len())
        }
        EventKind::RateLimited { delay_ms } => format!(
            "rate limited: waiting {:.1}s with every agent on this provider",
            *delay_ms as f64 / 1000.0
        ),
        EventKind::Terminal { outcome, .. } => match outcome {
            Outcome::Finished { stats, .. } => format!(
                "done · {} · {} · {} tok · {}",
                count(stats.turns, "turn"),
                count(stats.tool_calls, "tool"),
                tokens(stats.usage.total()),
                dollars(stats.cost_usd)
            ),
            // The lead's reason is the run's last line (`orchestrate: …`): once.
            Outcome::Failed { .. } if event.parent.is_none() => "failed".to_owned(),
            Outcome::Failed { message, .. } => format!("failed: {}", clip(message, 100)),
            Outcome::Cancelled { .. } => "cancelled".to_owned(),
            Outcome::Stopped { reason, .. } => format!("stopped ({reason})"),
        },
        EventKind::PromptQueued { .. }
        | EventKind::TurnStarted { .. }
        | EventKind::TextDelta { .. }
        | EventKind::ReasoningDelta { .. }
        | EventKind::TurnFinished { .. }
        | EventKind::ToolFinished { .. }
        | EventKind::FileChanged { .. } => return None,
    };
    Some(format!("[{}] {}: {what}", clock(now_ms), row.label))
}

/// The files a run changed, one a line with the lines added and removed; empty
/// when it changed none.
pub fn files_changed(board: &Board) -> String {
    if board.files().is_empty() {
        return String::new();
    }
    let mut out = String::from("files changed:\n");
    for (path, (added, removed)) in board.files() {
        out.push_str(&format!("  {path}  +{added} −{removed}\n"));
    }
    out
}

/// The summary table printed at the end of a run.
pub fn summary(board: &Board, now_ms: u64) -> String {
    let mut out = format!(
        "{:<16} {:<10} {:>5} {:>6} {:>8} {:>8} {:>6}\n",
        "agent", "status", "turns", "tools", "tokens", "cost", "time"
    );
    for row in board.rows() {
        let status = match &row.state {
            State::Done => "done",
            State::Failed(_) => "failed",
            State::Cancelled => "cancelled",
            State::Stopped(_) => "stopped",
            State::Thinking
            | State::Streaming
            | State::Tool(_)
            | State::Waiting(_)
            | State::AwaitingPermission(_)
            | State::Retrying { .. }
            | State::RateLimited { .. } => "unfinished",
        };
        let elapsed = row
            .ended_ms
            .unwrap_or(now_ms)
            .saturating_sub(row.started_ms);
        out.push_str(&format!(
            "{:<16} {:<10} {:>5} {:>6} {:>8} {:>8} {:>6}\n",
            row.label,
            status,
            row.turns,
            row.tools,
            tokens(row.tokens),
            dollars(row.cost_usd()),
            clock(elapsed)
        ));
    }
    let todos: Vec<String> = board
        .rows()
        .iter()
        .filter_map(|r| {
            r.todos
                .map(|(done, all)| format!("{} {done}/{all}", r.label))
        })
        .collect();
    if !todos.is_empty() {
        out.push_str(&format!("todos done: {}\n", todos.join(", ")));
    }
    out
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::conversation::Usage;
    use crate::protocol::{RunStats, SessionId};

    fn event(session: SessionId, parent: Option<SessionId>, agent: &str, kind: EventKind) -> Event {
        Event {
            seq: 0,
            session,
            parent,
            agent: agent.into(),
            kind,
        }
    }

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
                        outcome: Outcome::Finished {
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
}
