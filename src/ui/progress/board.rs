//! The board's state: one row per agent in the order they started, each with what it
//! is doing and its counters, changed by one event at a time. It renders nothing
//! (`render`).

use std::collections::HashMap;
use std::time::Duration;

use super::text::{last_line, short_call, short_reason, unfinished_line};
use crate::protocol::{Event, EventKind, Outcome, SessionId};

/// The most of a call's unfinished last line a row keeps.
const UNFINISHED: usize = 1024;

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
    /// Answered, and waiting for this many background sub-agents' results.
    Background(usize),
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
    /// Waiting out its provider's rate-limit cooldown.
    RateLimited {
        /// When requests may go again, in milliseconds since the run began.
        at_ms: u64,
    },
    /// Finished with an answer.
    Done,
    /// Failed.
    Failed(String),
    /// Cancelled.
    Cancelled,
    /// Stopped at a turn boundary, for this reason.
    Stopped(String),
}

/// One agent on the board.
#[derive(Clone, Debug, PartialEq)]
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
    /// What they cost in USD: `None` until a turn says, or when a price is unknown.
    pub cost: Option<f64>,
    /// A turn's price was unknown: the cost stays unknown.
    pub cost_unknown: bool,
    /// What its ended runs cost, sub-agents included (a session may answer
    /// several prompts).
    pub cost_ended: f64,
    /// Tool calls made.
    pub tools: u32,
    /// Tokens compaction freed, estimated.
    pub compacted: u64,
    /// Its todo list: items completed, and all items (`None`: it keeps none).
    pub todos: Option<(usize, usize)>,
    /// Sub-agents it asked for that wait for a slot.
    pub queued: u32,
    /// When it started and (once ended) ended, in milliseconds since the run began.
    pub started_ms: u64,
    /// When it ended.
    pub ended_ms: Option<u64>,
    /// Its private checkout and what became of its changes; `None`: it
    /// works in its parent's tree.
    pub checkout: Option<Isolated>,
    /// Its check: `checking 2/3`, `check passed`, `check failed`.
    pub check: Option<String>,
    /// The model it talks to.
    pub model: String,
    /// The model it fell back to, when its own failed.
    pub fallback: Option<String>,
    /// The last line its running tool call printed, made safe to show.
    pub output: Option<String>,
    /// The call that printed last, and what it printed after its last line
    /// break, raw, to be joined with what it prints next (a line or an
    /// escape sequence cut between two events); the last [`UNFINISHED`]
    /// bytes at most.
    unfinished: (String, String),
    /// Tokens its run's title took (the lead's), which its run's counters
    /// do not hold.
    pub titled: u64,
}

/// An isolated agent's checkout, as its row shows it.
#[derive(Clone, Debug, PartialEq)]
pub enum Isolated {
    /// It works in a private checkout.
    Working,
    /// Its changes were merged: the files, lines added and removed.
    Merged(Vec<String>, usize, usize),
    /// Its changes conflict: the files, and the branch that holds them.
    Conflict(Vec<String>, String),
    /// Its changes were not merged (it did not finish): the branch that
    /// holds them.
    Kept(String),
    /// Bringing its changes back failed: the checkout that holds them.
    Unmerged(String),
}

impl Row {
    /// Its cost in USD, when every price was known.
    pub fn cost_usd(&self) -> Option<f64> {
        if self.cost_unknown { None } else { self.cost }
    }
}

/// Every agent of a run, in the order they started, and the files they changed.
#[derive(Debug, Default)]
pub struct Board {
    rows: Vec<Row>,
    /// Each file changed in the run: lines added and removed, summed over its
    /// diffs.
    files: std::collections::BTreeMap<String, (u64, u64)>,
    index: HashMap<SessionId, usize>,
    instances: HashMap<String, u32>,
    /// The labels an earlier board of the same run gave (an interactive
    /// session's earlier prompts'), kept for the agents it showed.
    known: HashMap<SessionId, String>,
    /// Each parent's last child so far, by row.
    last_child: HashMap<SessionId, usize>,
    /// For each row, its parent's last child before it came (whose branch mark
    /// it changes from `└` to `├`).
    previous_sibling: Vec<Option<usize>>,
    /// What each isolated agent changed in its checkout, by row: counted in
    /// `files` only once merged.
    unmerged: HashMap<usize, std::collections::BTreeMap<String, (u64, u64)>>,
    /// What the run's priced turns cost, by the model that served them.
    by_model: std::collections::BTreeMap<String, f64>,
}

impl Board {
    /// An empty board.
    pub fn new() -> Self {
        Self::default()
    }

    /// A board that goes on naming agents where `earlier` left off: an agent
    /// it showed keeps its label, a new one gets the next number of its role.
    pub fn following(earlier: &Board) -> Self {
        let mut known = earlier.known.clone();
        known.extend(earlier.rows.iter().map(|r| (r.session, r.label.clone())));
        Self {
            instances: earlier.instances.clone(),
            known,
            ..Self::default()
        }
    }

    /// The rows, in the order the agents started.
    pub fn rows(&self) -> &[Row] {
        &self.rows
    }

    /// Whether row `index` is its parent's last child so far (a row without a
    /// parent is not).
    pub fn is_last_child(&self, index: usize) -> bool {
        let parent = self.rows[index].parent;
        parent.is_some_and(|p| self.last_child.get(&p) == Some(&index))
    }

    /// The rows to draw again after an event changed row `index`: that row, and
    /// when the event added it, the sibling that was last before it (whose branch
    /// mark turns from `└` to `├`). No other row's text depends on another row.
    pub fn changed_by(&self, index: usize, added: bool) -> impl Iterator<Item = usize> + use<> {
        let sibling = if added {
            self.previous_sibling.get(index).copied().flatten()
        } else {
            None
        };
        std::iter::once(index).chain(sibling)
    }

    /// What the run's turns cost, by model (turns whose price is known).
    pub fn cost_by_model(&self) -> &std::collections::BTreeMap<String, f64> {
        &self.by_model
    }

    /// The files changed in the run, by path: lines added and removed.
    pub fn files(&self) -> &std::collections::BTreeMap<String, (u64, u64)> {
        &self.files
    }

    /// Applies one event that happened `now` after the run began. Returns the index
    /// of the row it changed, if any.
    pub fn apply(&mut self, event: &Event, now: Duration) -> Option<usize> {
        let now_ms = now.as_millis() as u64;
        // A hook's run says nothing of how its agent is doing: it makes no
        // row (a prompt refused while nothing runs shows no agent working).
        if matches!(event.kind, EventKind::HookRan { .. })
            && !self.index.contains_key(&event.session)
        {
            return None;
        }
        let index = match self.index.get(&event.session) {
            Some(&i) => i,
            None => {
                let label = if let Some(label) = self.known.get(&event.session) {
                    label.clone()
                } else if event.parent.is_some() {
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
                    cost: None,
                    cost_unknown: false,
                    cost_ended: 0.0,
                    tools: 0,
                    compacted: 0,
                    todos: None,
                    queued: 0,
                    started_ms: now_ms,
                    ended_ms: None,
                    checkout: None,
                    check: None,
                    model: String::new(),
                    fallback: None,
                    output: None,
                    unfinished: Default::default(),
                    titled: 0,
                });
                let index = self.rows.len() - 1;
                self.index.insert(event.session, index);
                let sibling = event
                    .parent
                    .and_then(|parent| self.last_child.insert(parent, index));
                self.previous_sibling.push(sibling);
                index
            }
        };
        let row = &mut self.rows[index];
        match &event.kind {
            EventKind::SessionStarted { model, .. } => row.model.clone_from(model),
            EventKind::Restarted { .. } | EventKind::PromptQueued { .. } => {}
            EventKind::BackgroundWait { running } => row.state = State::Background(*running),
            // The row says so already (`awaiting_permission`).
            EventKind::HookRan { .. }
            | EventKind::PermissionRequested { .. }
            | EventKind::PermissionAnswered { .. } => {}
            // What the title cost counts as the lead's.
            EventKind::Titled {
                usage, cost_usd, ..
            } => {
                row.tokens += usage.total();
                row.titled += usage.total();
                row.cost_unknown |= cost_usd.is_none();
                // Counted now, and kept past the run's end (whose cost is
                // its turns' and what ended before).
                row.cost_ended += cost_usd.unwrap_or(0.0);
                row.cost = cost_usd.map(|c| c + row.cost.unwrap_or(0.0));
            }
            EventKind::ModelFallback { to, .. } => {
                row.model.clone_from(to);
                row.fallback = Some(to.clone());
            }
            EventKind::TurnStarted { .. } => {
                if !matches!(row.state, State::Waiting(_)) {
                    row.state = State::Thinking;
                }
                row.ended_ms = None;
            }
            EventKind::TextDelta { .. } | EventKind::ReasoningDelta { .. } => {
                row.state = State::Streaming
            }
            EventKind::ToolOutput { call_id, text, .. } => {
                let (last, tail) = std::mem::take(&mut row.unfinished);
                // Another call's unfinished line is not this one's start.
                let joined = if last == *call_id {
                    tail + text
                } else {
                    text.clone()
                };
                if let Some(line) = last_line(&joined) {
                    row.output = Some(line);
                }
                row.unfinished = (
                    call_id.clone(),
                    unfinished_line(&joined, UNFINISHED).to_owned(),
                );
            }
            EventKind::TurnFinished {
                usage, cost_usd, ..
            } => {
                row.turns += 1;
                row.tokens += usage.total();
                row.cost_unknown |= cost_usd.is_none();
                row.cost = cost_usd.map(|c| c + row.cost.unwrap_or(0.0));
                if let Some(cost) = cost_usd {
                    *self.by_model.entry(row.model.clone()).or_default() += cost;
                }
                row.state = State::Thinking;
            }
            EventKind::ToolStarted {
                name, arguments, ..
            } => {
                row.tools += 1;
                row.output = None;
                row.unfinished = Default::default();
                row.state = match (&row.state, name.as_str()) {
                    (State::Waiting(n), "Task") => State::Waiting(n + 1),
                    (_, "Task") => State::Waiting(1),
                    _ => State::Tool(short_call(name, arguments)),
                };
            }
            EventKind::ToolFinished { name, .. } => {
                row.output = None;
                row.unfinished = Default::default();
                row.state = match (&row.state, name.as_str()) {
                    (State::Waiting(n), "Task") if *n > 1 => State::Waiting(n - 1),
                    _ => State::Thinking,
                };
            }
            EventKind::FileChanged {
                path, diff, count, ..
            } => {
                let (added, removed) = diff_stat(diff);
                let files = match row.checkout {
                    Some(_) => self.unmerged.entry(index).or_default(),
                    None => &mut self.files,
                };
                let shown = match count {
                    Some(n) => format!("{path} ({n} files)"),
                    None => path.clone(),
                };
                let counts = files.entry(shown).or_default();
                counts.0 += added;
                counts.1 += removed;
            }
            EventKind::Isolated { .. } => row.checkout = Some(Isolated::Working),
            EventKind::Shared { .. } => {}
            EventKind::Merged {
                files,
                added,
                removed,
            } => {
                row.checkout = Some(Isolated::Merged(files.clone(), *added, *removed));
                let mut changed = self.unmerged.remove(&index).unwrap_or_default();
                for file in files {
                    let (plus, minus) = changed.remove(file).unwrap_or_default();
                    let counts = self.files.entry(file.clone()).or_default();
                    counts.0 += plus;
                    counts.1 += minus;
                }
            }
            EventKind::Conflicted { files, branch } => {
                row.checkout = Some(Isolated::Conflict(files.clone(), branch.clone()));
                self.unmerged.remove(&index);
            }
            EventKind::Checking { attempt, attempts } => {
                row.check = Some(format!("checking {attempt}/{attempts}"));
            }
            EventKind::Checked {
                attempt,
                attempts,
                passed,
                ..
            } => {
                row.check = Some(match passed {
                    true => "check passed".to_owned(),
                    false if attempt == attempts => "check failed".to_owned(),
                    false => format!("check failed {attempt}/{attempts}"),
                });
            }
            EventKind::Unmerged { checkout, .. } => {
                row.checkout = Some(Isolated::Unmerged(checkout.clone()));
                self.unmerged.remove(&index);
            }
            EventKind::Kept { branch } => {
                row.checkout = Some(Isolated::Kept(branch.clone()));
                self.unmerged.remove(&index);
            }
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
            EventKind::Compacted { freed_tokens, .. } => row.compacted += freed_tokens,
            EventKind::Todos { todos } => {
                let done = todos
                    .iter()
                    .filter(|t| t.status == crate::protocol::TodoStatus::Completed)
                    .count();
                row.todos = Some((done, todos.len()));
            }
            EventKind::RateLimited { delay_ms } => {
                row.state = State::RateLimited {
                    at_ms: now_ms + delay_ms,
                };
            }
            EventKind::Terminal { outcome, .. } => {
                row.ended_ms = Some(now_ms);
                // The run's own counters are the authority once it has ended.
                let stats = outcome.stats();
                row.turns = row.turns.max(stats.turns);
                row.tools = row.tools.max(stats.tool_calls);
                row.tokens = row.tokens.max(stats.usage.total() + row.titled);
                // Sub-agents' costs are rolled into it; earlier runs' stay.
                row.cost_unknown |= stats.cost_usd.is_none();
                row.cost = stats.cost_usd.map(|c| c + row.cost_ended);
                row.cost_ended = row.cost.unwrap_or(row.cost_ended);
                row.state = match outcome {
                    Outcome::Completed { .. } => State::Done,
                    Outcome::Failed { class, .. } => State::Failed(class.clone()),
                    Outcome::Cancelled { .. } => State::Cancelled,
                    Outcome::Partial { reason, .. } => State::Stopped(reason.clone()),
                    Outcome::TimedOut { .. } => State::Stopped("timed out".to_owned()),
                };
            }
        }
        Some(index)
    }
}

/// Lines a unified diff adds and removes (its `+++`/`---` headers not counted).
fn diff_stat(diff: &str) -> (u64, u64) {
    let mut in_hunk = false;
    diff.lines().fold((0, 0), |(added, removed), line| {
        // `---`/`+++` are headers only before the first hunk.
        in_hunk |= line.starts_with("@@");
        match line.as_bytes().first() {
            Some(b'+') if in_hunk => (added + 1, removed),
            Some(b'-') if in_hunk => (added, removed + 1),
            _ => (added, removed),
        }
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use proptest::prelude::*;

    use super::*;
    use crate::protocol::{Event, Outcome, RunStats, SessionId};
    use crate::ui::progress::test_events::started;

    proptest! {
        /// Whatever order agents start in (each picking an earlier one as its
        /// parent, or none), a row is its parent's last child exactly when no
        /// later row has the same parent, and adding a row changes the text of
        /// that row and of the sibling that was last before it, no other.
        #[test]
        fn the_last_child_and_the_rows_an_added_row_changes_are_kept_as_rows_come(
            parents in proptest::collection::vec(proptest::option::of(0usize..64), 1..64)
        ) {
            let mut board = Board::new();
            let mut sessions = Vec::new();
            for (i, parent) in parents.iter().enumerate() {
                let parent = parent.filter(|p| *p < i).map(|p| sessions[p]);
                let session = SessionId::new();
                sessions.push(session);
                let before: Vec<bool> =
                    (0..i).map(|r| board.is_last_child(r)).collect();
                let index = board.apply(&started(session, parent, "worker"), Duration::ZERO).unwrap();
                prop_assert_eq!(index, i);
                let changed: Vec<usize> = board.changed_by(index, true).collect();
                for (r, was_last) in before.iter().enumerate() {
                    let flipped = *was_last != board.is_last_child(r);
                    prop_assert_eq!(flipped, changed.contains(&r), "row {}", r);
                }
                prop_assert_eq!(changed[0], index);
                prop_assert_eq!(board.changed_by(index, false).collect::<Vec<_>>(), vec![index]);
                let rows = board.rows();
                for r in 0..rows.len() {
                    let last = rows[r].parent.is_some()
                        && rows.iter().rposition(|x| x.parent == rows[r].parent) == Some(r);
                    prop_assert_eq!(board.is_last_child(r), last, "row {}", r);
                }
            }
        }
    }

    #[test]
    fn a_following_board_keeps_each_agents_label_and_numbers_on() {
        use crate::ui::progress::test_events::started;
        let lead = SessionId::new();
        let (first, second, third) = (SessionId::new(), SessionId::new(), SessionId::new());
        let mut earlier = Board::new();
        for (session, parent) in [(lead, None), (first, Some(lead)), (second, Some(lead))] {
            earlier.apply(&started(session, parent, "maker"), Duration::ZERO);
        }
        let mut next = Board::following(&earlier);
        // A new maker first, then one the earlier board showed.
        next.apply(&started(third, Some(lead), "maker"), Duration::ZERO);
        next.apply(&started(first, Some(lead), "maker"), Duration::ZERO);
        let labels: Vec<&str> = next.rows().iter().map(|r| r.label.as_str()).collect();
        assert_eq!(labels, ["maker#3", "maker#1"]);
        // And a board following that one still knows the first board's.
        let mut last = Board::following(&next);
        last.apply(&started(second, Some(lead), "maker"), Duration::ZERO);
        assert_eq!(last.rows()[0].label, "maker#2");
    }

    /// `kind` happening to lead session `lead`.
    fn of_lead(lead: SessionId, kind: EventKind) -> Event {
        Event {
            seq: 0,
            session: lead,
            parent: None,
            agent: "orchestrator".into(),
            kind,
        }
    }

    #[test]
    fn a_running_call_shows_the_last_line_it_printed_until_it_ends() {
        let lead = SessionId::new();
        let mut board = Board::new();
        let event = |kind| of_lead(lead, kind);
        board.apply(
            &event(EventKind::ToolStarted {
                call_id: "b1".into(),
                name: "Bash".into(),
                arguments: r#"{"command":"make"}"#.into(),
            }),
            Duration::ZERO,
        );
        let output = |text: &str| EventKind::ToolOutput {
            call_id: "b1".into(),
            text: text.into(),
            truncated: false,
        };
        board.apply(&event(output("compiling a\ncompiling b\n")), Duration::ZERO);
        board.apply(&event(output("  40%\r  80%\x1b[2K\r\n\n")), Duration::ZERO);
        assert_eq!(board.rows()[0].output.as_deref(), Some("80%"));
        let shown = super::super::render::render_row(&board, 0, 0);
        assert!(shown.contains("Bash make › 80%"), "{shown}");
        // A line and an escape sequence cut between two events.
        board.apply(&event(output("linking \x1b[1")), Duration::ZERO);
        assert_eq!(board.rows()[0].output.as_deref(), Some("linking"));
        board.apply(&event(output("mdone\x1b[0m now")), Duration::ZERO);
        assert_eq!(
            board.rows()[0].output.as_deref(),
            Some("linking done now"),
            "joined, the sequence taken out"
        );
        board.apply(&event(output("\x1b]0;title\x07\tok\n")), Duration::ZERO);
        assert_eq!(
            board.rows()[0].output.as_deref(),
            Some("linking done now ok")
        );
        // A second call's output starts a line of its own.
        board.apply(&event(output("half a li")), Duration::ZERO);
        let other = EventKind::ToolOutput {
            call_id: "b2".into(),
            text: "ne of b2".into(),
            truncated: false,
        };
        board.apply(&event(other), Duration::ZERO);
        assert_eq!(board.rows()[0].output.as_deref(), Some("ne of b2"));
        board.apply(
            &event(EventKind::ToolFinished {
                call_id: "b1".into(),
                name: "Bash".into(),
                is_error: false,
                preview: String::new(),
            }),
            Duration::ZERO,
        );
        assert_eq!(board.rows()[0].output, None);
    }

    #[test]
    fn a_session_that_answers_two_prompts_shows_what_both_cost() {
        let lead = SessionId::new();
        let mut board = Board::new();
        let ended = |cost: f64, prompt: u64| Event {
            seq: 0,
            session: lead,
            parent: None,
            agent: "orchestrator".into(),
            kind: EventKind::Terminal {
                prompts: vec![prompt],
                outcome: Outcome::Completed {
                    text: String::new(),
                    truncated: false,
                    stats: RunStats {
                        cost_usd: Some(cost),
                        ..RunStats::default()
                    },
                },
            },
        };
        board.apply(&ended(0.25, 1), Duration::ZERO);
        board.apply(&ended(0.5, 2), Duration::ZERO);
        assert_eq!(board.rows()[0].cost_usd(), Some(0.75));
    }

    #[test]
    fn a_fallback_shows_on_its_row_and_each_model_is_charged_its_own_turns() {
        let lead = SessionId::new();
        let mut board = Board::new();
        let event = |kind| of_lead(lead, kind);
        let turn = |cost: f64| EventKind::TurnFinished {
            turn: 1,
            text: String::new(),
            tool_calls: 0,
            usage: Default::default(),
            cost_usd: Some(cost),
        };
        board.apply(
            &event(EventKind::SessionStarted {
                model: "big".into(),
                resumed: false,
                memory: Vec::new(),
            }),
            Duration::ZERO,
        );
        board.apply(&event(turn(0.5)), Duration::ZERO);
        board.apply(
            &event(EventKind::ModelFallback {
                from: "big".into(),
                to: "small".into(),
                reason: "overloaded".into(),
            }),
            Duration::ZERO,
        );
        board.apply(&event(turn(0.25)), Duration::ZERO);
        let spent: Vec<(&str, f64)> = board
            .cost_by_model()
            .iter()
            .map(|(m, c)| (m.as_str(), *c))
            .collect();
        assert_eq!(spent, [("big", 0.5), ("small", 0.25)]);
        assert_eq!(board.rows()[0].fallback.as_deref(), Some("small"));
        let row = super::super::render::render_row(&board, 0, 0);
        assert!(row.contains("fell back to small"), "{row}");
        let summary = super::super::render::summary(&board, 0);
        assert!(
            summary.contains("cost by model: big $0.50, small $0.25"),
            "{summary}"
        );
    }
}
