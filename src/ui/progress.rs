//! The progress board: what every agent of a run is doing, built from events, and
//! rendered as text by pure functions (a live tree on a terminal, one plain line per
//! lifecycle event elsewhere, and a summary table at the end).

use std::collections::HashMap;
use std::time::Duration;

use crate::protocol::{Event, EventKind, Outcome, SessionId};

/// What an agent is doing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum State {
    /// Waiting for the model's first token.
    Thinking,
    /// The model is writing.
    Streaming,
    /// A tool runs (its short form, e.g. `Edit src/http.rs`).
    Tool(String),
    /// Waiting on this many sub-agents.
    Waiting(u32),
    /// Waiting for a person's yes to run this tool.
    AwaitingPermission(String),
    /// A model turn failed and will be tried again.
    Retrying {
        /// The attempt that failed.
        attempt: u32,
        /// Attempts allowed.
        max: u32,
        /// Why, shortened.
        reason: String,
        /// When the next attempt starts, in milliseconds since the run began.
        at_ms: u64,
    },
    /// Finished with an answer.
    Done,
    /// Failed.
    Failed(String),
    /// Cancelled.
    Cancelled,
}

/// One agent on the board.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    /// Its session.
    pub session: SessionId,
    /// Its parent, for sub-agents.
    pub parent: Option<SessionId>,
    /// Its role.
    pub role: String,
    /// Its label: the role, with an instance number for sub-agents (`explorer#2`).
    pub label: String,
    /// What it is doing.
    pub state: State,
    /// Model turns made.
    pub turns: u32,
    /// Tokens used.
    pub tokens: u64,
    /// Tool calls made.
    pub tools: u32,
    /// Sub-agents it asked for that wait for a slot.
    pub queued: u32,
    /// When it started and (once ended) ended, in milliseconds since the run began.
    pub started_ms: u64,
    /// When it ended.
    pub ended_ms: Option<u64>,
}

/// Every agent of a run, in the order they started.
#[derive(Debug, Default)]
pub struct Board {
    rows: Vec<Row>,
    index: HashMap<SessionId, usize>,
    instances: HashMap<String, u32>,
}

impl Board {
    /// An empty board.
    pub fn new() -> Self {
        Self::default()
    }

    /// The rows, in the order the agents started.
    pub fn rows(&self) -> &[Row] {
        &self.rows
    }

    /// Applies one event that happened `now` after the run began. Returns the index
    /// of the row it changed, if any.
    pub fn apply(&mut self, event: &Event, now: Duration) -> Option<usize> {
        let now_ms = now.as_millis() as u64;
        let index = match self.index.get(&event.session) {
            Some(&i) => i,
            None => {
                let label = if event.parent.is_some() {
                    let n = self.instances.entry(event.agent.clone()).or_insert(0);
                    *n += 1;
                    format!("{}#{n}", event.agent)
                } else {
                    event.agent.clone()
                };
                self.rows.push(Row {
                    session: event.session,
                    parent: event.parent,
                    role: event.agent.clone(),
                    label,
                    state: State::Thinking,
                    turns: 0,
                    tokens: 0,
                    tools: 0,
                    queued: 0,
                    started_ms: now_ms,
                    ended_ms: None,
                });
                self.index.insert(event.session, self.rows.len() - 1);
                self.rows.len() - 1
            }
        };
        let row = &mut self.rows[index];
        match &event.kind {
            EventKind::SessionStarted { .. }
            | EventKind::Restarted { .. }
            | EventKind::PromptQueued { .. } => {}
            EventKind::TurnStarted { .. } => {
                if !matches!(row.state, State::Waiting(_)) {
                    row.state = State::Thinking;
                }
                row.ended_ms = None;
            }
            EventKind::TextDelta { .. } | EventKind::ReasoningDelta { .. } => {
                row.state = State::Streaming
            }
            EventKind::TurnFinished { usage, .. } => {
                row.turns += 1;
                row.tokens += usage.total();
                row.state = State::Thinking;
            }
            EventKind::ToolStarted {
                name, arguments, ..
            } => {
                row.tools += 1;
                row.state = match (&row.state, name.as_str()) {
                    (State::Waiting(n), "Task") => State::Waiting(n + 1),
                    (_, "Task") => State::Waiting(1),
                    _ => State::Tool(short_call(name, arguments)),
                };
            }
            EventKind::ToolFinished { name, .. } => {
                row.state = match (&row.state, name.as_str()) {
                    (State::Waiting(n), "Task") if *n > 1 => State::Waiting(n - 1),
                    _ => State::Thinking,
                };
            }
            EventKind::FileChanged { .. } => {}
            EventKind::SubagentQueued { waiting: true, .. } => row.queued += 1,
            EventKind::SubagentQueued { waiting: false, .. } => {
                row.queued = row.queued.saturating_sub(1)
            }
            EventKind::AwaitingPermission { tool } => {
                row.state = State::AwaitingPermission(tool.clone())
            }
            EventKind::Retrying {
                attempt,
                max_attempts,
                delay_ms,
                reason,
            } => {
                row.state = State::Retrying {
                    attempt: *attempt,
                    max: *max_attempts,
                    reason: short_reason(reason),
                    at_ms: now_ms + delay_ms,
                };
            }
            EventKind::Terminal { outcome, .. } => {
                row.ended_ms = Some(now_ms);
                // The run's own counters are the authority once it has ended.
                let stats = match outcome {
                    Outcome::Finished { stats, .. }
                    | Outcome::Failed { stats, .. }
                    | Outcome::Cancelled { stats, .. } => stats,
                };
                row.turns = row.turns.max(stats.turns);
                row.tools = row.tools.max(stats.tool_calls);
                row.tokens = row.tokens.max(stats.usage.total());
                row.state = match outcome {
                    Outcome::Finished { .. } => State::Done,
                    Outcome::Failed { class, .. } => State::Failed(class.clone()),
                    Outcome::Cancelled { .. } => State::Cancelled,
                };
            }
        }
        Some(index)
    }
}

/// A tool call in a few words: the tool and its main argument.
pub fn short_call(name: &str, arguments: &str) -> String {
    let input: serde_json::Value = serde_json::from_str(arguments).unwrap_or_default();
    let key = ["file_path", "command", "pattern", "path", "description"]
        .iter()
        .find_map(|k| input.get(*k).and_then(serde_json::Value::as_str));
    match key {
        Some(arg) => format!("{name} {}", clip(arg.lines().next().unwrap_or(""), 40)),
        None => name.to_owned(),
    }
}

fn short_reason(reason: &str) -> String {
    let reason = reason.split(':').next().unwrap_or(reason);
    clip(reason, 30)
}

fn clip(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let cut: String = text.chars().take(max - 1).collect();
    format!("{cut}…")
}

/// `text` in a role's color, as an ANSI escape (unknown colors leave it plain).
pub fn paint(text: &str, color: &str) -> String {
    let code = match color {
        "red" => "31",
        "green" => "32",
        "yellow" => "33",
        "blue" => "34",
        "purple" => "35",
        "cyan" => "36",
        "gray" => "90",
        "orange" => "38;5;208",
        "pink" => "38;5;213",
        _ => return text.to_owned(),
    };
    format!("\x1b[{code}m{text}\x1b[0m")
}

/// Tokens as a person reads them: `950`, `2.3k`, `1.2M`.
pub fn tokens(n: u64) -> String {
    match n {
        0..=999 => n.to_string(),
        1_000..=999_999 => format!("{:.1}k", n as f64 / 1000.0),
        _ => format!("{:.1}M", n as f64 / 1_000_000.0),
    }
}

/// Elapsed time as `mm:ss`.
pub fn clock(ms: u64) -> String {
    let secs = ms / 1000;
    format!("{:02}:{:02}", secs / 60, secs % 60)
}

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
        State::Done => format!("✔ done · {tools} tools"),
        State::Failed(class) => format!("✘ failed · {class}"),
        State::Cancelled => "cancelled".to_owned(),
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
    format!(
        "{:<16} {:<44} {:>8}   {}",
        format!("{prefix}{}", row.label),
        if row.queued > 0 {
            format!(
                "{} · {} queued",
                state_text(&row.state, now_ms, row.tools),
                row.queued
            )
        } else {
            state_text(&row.state, now_ms, row.tools)
        },
        format!("{} tok", tokens(row.tokens)),
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
        EventKind::Terminal { outcome, .. } => match outcome {
            Outcome::Finished { stats, .. } => format!(
                "done · {} turns · {} tools · {} tok",
                stats.turns,
                stats.tool_calls,
                tokens(stats.usage.total())
            ),
            Outcome::Failed { message, .. } => format!("failed: {}", clip(message, 100)),
            Outcome::Cancelled { .. } => "cancelled".to_owned(),
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

/// The summary table printed at the end of a run.
pub fn summary(board: &Board, now_ms: u64) -> String {
    let mut out = format!(
        "{:<16} {:<10} {:>5} {:>6} {:>8} {:>6}\n",
        "agent", "status", "turns", "tools", "tokens", "time"
    );
    for row in board.rows() {
        let status = match &row.state {
            State::Done => "done",
            State::Failed(_) => "failed",
            State::Cancelled => "cancelled",
            State::Thinking
            | State::Streaming
            | State::Tool(_)
            | State::Waiting(_)
            | State::AwaitingPermission(_)
            | State::Retrying { .. } => "unfinished",
        };
        let elapsed = row
            .ended_ms
            .unwrap_or(now_ms)
            .saturating_sub(row.started_ms);
        out.push_str(&format!(
            "{:<16} {:<10} {:>5} {:>6} {:>8} {:>6}\n",
            row.label,
            status,
            row.turns,
            row.tools,
            tokens(row.tokens),
            clock(elapsed)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conversation::Usage;
    use crate::protocol::RunStats;

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
    fn roles_are_painted_in_their_color() {
        assert_eq!(paint("coder#1", "green"), "\x1b[32mcoder#1\x1b[0m");
        assert_eq!(paint("x", "mauve"), "x");
    }

    #[test]
    fn tokens_and_clocks_read_naturally() {
        assert_eq!(
            [tokens(950), tokens(2300), tokens(1_250_000)],
            ["950", "2.3k", "1.2M"]
        );
        assert_eq!(clock(125_000), "02:05");
        assert_eq!(
            short_call("Bash", r#"{"command":"cargo test --all\nmore"}"#),
            "Bash cargo test --all"
        );
    }
}
