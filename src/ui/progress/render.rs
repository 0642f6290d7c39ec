//! The board rendered as text, by pure functions: the live tree's rows, the plain
//! line for each lifecycle event (no terminal), and the summary table at the end.
//! It does not change the board (`board`) nor draw anything.

use super::board::{Board, Isolated, State};
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
        State::Background(1) => "waiting on 1 background sub-agent".to_owned(),
        State::Background(n) => format!("waiting on {n} background sub-agents"),
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
        State::Done => format!("✔ completed · {}", count(tools, "tool")),
        State::Failed(class) => format!("✘ failed · {class}"),
        State::Cancelled => "cancelled".to_owned(),
        State::Stopped(reason) if reason == "timed out" => "■ timed_out".to_owned(),
        State::Stopped(reason) => format!("■ partial · {reason}"),
    }
}

/// One row of the live tree (without the spinner, which the terminal draws).
pub fn render_row(board: &Board, index: usize, now_ms: u64) -> String {
    let rows = board.rows();
    let row = &rows[index];
    let prefix = match row.parent {
        None => "",
        Some(_) if board.is_last_child(index) => "└ ",
        Some(_) => "├ ",
    };
    let elapsed = row
        .ended_ms
        .unwrap_or(now_ms)
        .saturating_sub(row.started_ms);
    let mut state = state_text(&row.state, now_ms, row.tools);
    if let (State::Tool(_), Some(line)) = (&row.state, &row.output) {
        state.push_str(&format!(" › {}", clip(line, 50)));
    }
    if row.queued > 0 {
        state.push_str(&format!(" · {} queued", row.queued));
    }
    if let Some((done, all)) = row.todos {
        state.push_str(&format!(" · {done}/{all}"));
    }
    if row.compacted > 0 {
        state.push_str(&format!(" · compacted −{}", tokens(row.compacted)));
    }
    if let Some(check) = &row.check {
        state.push_str(&format!(" · {check}"));
    }
    if let Some(model) = &row.fallback {
        state.push_str(&format!(" · fell back to {model}"));
    }
    match &row.checkout {
        None => {}
        Some(Isolated::Working) => state.push_str(" · isolated"),
        Some(Isolated::Merged(_, added, removed)) => {
            state.push_str(&format!(" · merged +{added} −{removed}"))
        }
        Some(Isolated::Conflict(..)) => state.push_str(" · conflict"),
        Some(Isolated::Kept(_) | Isolated::Unmerged(_)) => state.push_str(" · not merged"),
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
        // The question itself is on the terminal.
        EventKind::PermissionRequested { .. } | EventKind::PermissionAnswered { .. } => {
            return None;
        }
        EventKind::Restarted { reason, .. } => {
            format!("crashed and restarted ({})", clip(reason, 60))
        }
        EventKind::Titled { title, .. } => format!("titled {}", clip(title, 60)),
        EventKind::HookRan {
            event,
            command,
            decision,
            notice,
            ..
        } => {
            let said = notice.as_deref().map(|n| format!(": {}", clip(n, 80)));
            format!(
                "{event} hook {} {decision}{}",
                clip(command, 40),
                said.unwrap_or_default()
            )
        }
        EventKind::BackgroundWait { running } => format!(
            "answered; waiting for {} before it ends",
            count(*running as u32, "background sub-agent")
        ),
        EventKind::ModelFallback { from, to, reason } => format!(
            "model {} failed ({reason}): carrying on with {}",
            clip(from, 60),
            clip(to, 60)
        ),
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
            // The board counted them when it applied this event.
            let (done, _) = row.todos.unwrap_or_default();
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
        EventKind::Isolated { path, .. } => format!("isolated in {path}"),
        // Said once for the run, as a warning (`Display`).
        EventKind::Shared { .. } => return None,
        EventKind::Merged {
            files,
            added,
            removed,
        } => format!(
            "merged +{added} −{removed} ({})",
            clip(&files.join(", "), 80)
        ),
        EventKind::Conflicted { files, branch } => format!(
            "conflict in {}: nothing merged, its work is on branch {branch}",
            clip(&files.join(", "), 80)
        ),
        EventKind::Checking { attempt, attempts } => format!("checking {attempt}/{attempts}"),
        EventKind::Checked {
            attempt,
            attempts,
            exit_code,
            passed,
        } => match (passed, exit_code) {
            (true, _) => format!("check passed (attempt {attempt} of {attempts})"),
            (false, Some(code)) => {
                format!("check failed (exit {code}, attempt {attempt} of {attempts})")
            }
            (false, None) => format!("check failed (attempt {attempt} of {attempts})"),
        },
        EventKind::Unmerged { reason, checkout } => format!(
            "not merged: {}; its checkout is kept at {checkout}",
            clip(reason, 100)
        ),
        EventKind::Kept { branch } => {
            format!("not merged (it did not finish): its work is on branch {branch}")
        }
        EventKind::Terminal { outcome, .. } => match outcome {
            Outcome::Completed { stats, .. } => format!(
                "completed · {} · {} · {} tok · {}",
                count(stats.turns, "turn"),
                count(stats.tool_calls, "tool"),
                tokens(stats.usage.total()),
                dollars(stats.cost_usd)
            ),
            // The lead's reason is the run's last line (`orchestrate: …`): once.
            Outcome::Failed { .. } if event.parent.is_none() => "failed".to_owned(),
            Outcome::Failed { message, .. } => format!("failed: {}", clip(message, 100)),
            Outcome::Cancelled { .. } => "cancelled".to_owned(),
            Outcome::Partial { reason, .. } => format!("partial ({reason})"),
            Outcome::TimedOut { .. } => "timed_out".to_owned(),
        },
        EventKind::PromptQueued { .. }
        | EventKind::TurnStarted { .. }
        | EventKind::TextDelta { .. }
        | EventKind::ReasoningDelta { .. }
        | EventKind::ToolOutput { .. }
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
            State::Done => "completed",
            State::Failed(_) => "failed",
            State::Cancelled => "cancelled",
            State::Stopped(reason) if reason == "timed out" => "timed_out",
            State::Stopped(_) => "partial",
            State::Thinking
            | State::Streaming
            | State::Tool(_)
            | State::Waiting(_)
            | State::Background(_)
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
    let by_model = board.cost_by_model();
    if by_model.len() > 1 {
        let costs: Vec<String> = by_model
            .iter()
            .map(|(model, cost)| format!("{} {}", clip(model, 60), dollars(Some(*cost))))
            .collect();
        out.push_str(&format!("cost by model: {}\n", costs.join(", ")));
    }
    out
}

/// What became of the isolated agents' changes: the files each merged, and
/// every branch left for the person; empty when no agent was isolated.
pub fn checkouts(board: &Board) -> String {
    let mut out = String::new();
    for row in board.rows() {
        match &row.checkout {
            Some(Isolated::Merged(files, ..)) if !files.is_empty() => {
                out.push_str(&format!("{} merged: {}\n", row.label, files.join(", ")));
            }
            Some(Isolated::Conflict(files, branch)) => out.push_str(&format!(
                "{} not merged (conflict in {}): its work is on branch {branch}\n",
                row.label,
                files.join(", ")
            )),
            Some(Isolated::Unmerged(checkout)) => out.push_str(&format!(
                "{} not merged: its work is in its checkout, kept at {checkout}\n",
                row.label
            )),
            Some(Isolated::Kept(branch)) => out.push_str(&format!(
                "{} not merged (it did not finish): its work is on branch {branch}\n",
                row.label
            )),
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests;
