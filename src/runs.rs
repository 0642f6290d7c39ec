//! The runs of a workspace, read from its journals: a run is named by its lead
//! session's id, and every session's journal header names its run. Listing them,
//! finding one by a prefix of its id, and the tree of one run's agents. Whether a
//! run is live is [`lock`]'s: the process running it holds its lock.

mod index;
pub mod lock;
pub mod spent;

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, SystemTime};

use crate::conversation::Message;
use crate::journal::{Contents, Damaged, JournalError, Limits, Record, read_journal};
use crate::protocol::{EventKind, Outcome, RunStats, SessionId, add_costs};
use crate::state::StateDir;

/// How a run stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// A live process is running it.
    Running,
    /// Its lead gave its final answer.
    Finished,
    /// Its lead failed.
    Failed,
    /// It was cancelled.
    Cancelled,
    /// Its lead was stopped.
    Stopped,
    /// Its time ran out.
    TimedOut,
    /// Its process died mid-run: `orchestrate resume` carries on.
    Interrupted,
}

impl RunStatus {
    /// The word `orchestrate sessions` shows.
    pub fn name(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Finished => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
            Self::Stopped => "partial",
            Self::TimedOut => "timed_out",
            Self::Interrupted => "interrupted",
        }
    }
}

/// One session of a run, as its journal tells it.
#[derive(Clone, Debug, PartialEq)]
pub struct Agent {
    /// Its session.
    pub session: SessionId,
    /// Its parent, for sub-agents.
    pub parent: Option<SessionId>,
    /// The parent's Task call that started it, for sub-agents.
    pub call: Option<String>,
    /// Its role.
    pub role: String,
    /// Its model.
    pub model: String,
    /// The outcome of its last run; `None` while a run is unfinished.
    pub outcome: Option<Outcome>,
    /// Its runs' counters, summed (for an unfinished run, what its events tell).
    pub stats: RunStats,
    /// Tokens its own model turns used (not its sub-agents').
    pub tokens: u64,
    /// What its own model turns cost in USD; `None` when a price was unknown (or
    /// its journal predates costs).
    pub cost: Option<f64>,
    /// The prompt of its first run.
    pub task: String,
    /// The title its first prompt got, when it has one.
    pub title: Option<String>,
    /// Its journal shows a run to carry on (started, its prompt saved, not ended).
    pub unfinished: bool,
    /// The limits its last run was given, as journaled (a lead's, when it had any).
    pub limits: Option<Limits>,
    /// Its private checkout, when it was isolated.
    pub checkout: Option<crate::protocol::Checkout>,
    /// What became of its checkout's changes, once its caller brought them back.
    pub changes: Option<crate::protocol::Changes>,
    /// Its checkout was removed.
    pub checkout_removed: bool,
}

/// One run of a workspace.
#[derive(Clone, Debug, PartialEq)]
pub struct Run {
    /// The run's id: its lead session's.
    pub id: SessionId,
    /// How it stands.
    pub status: RunStatus,
    /// When it started.
    pub started: SystemTime,
    /// Every agent, the lead first, then in the order they started.
    pub agents: Vec<Agent>,
    /// Lines of its journals that are damaged, skipped in reading it.
    pub damaged: Vec<Damaged>,
}

impl Run {
    /// Its lead.
    pub fn lead(&self) -> &Agent {
        &self.agents[0]
    }

    /// Tokens used by every agent of the run.
    pub fn tokens(&self) -> u64 {
        self.agents.iter().map(|a| a.tokens).sum()
    }

    /// What every agent of the run cost in USD; `None` when a price was unknown.
    pub fn cost(&self) -> Option<f64> {
        self.agents
            .iter()
            .try_fold(0.0, |sum, a| Some(sum + a.cost?))
    }

    /// The first line of the lead's task.
    pub fn task_line(&self) -> &str {
        self.lead().task.lines().next().unwrap_or_default()
    }
}

/// Why a run could not be found.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The workspace has no runs.
    #[error("no runs in this workspace yet")]
    None,
    /// No run's id starts with the prefix.
    #[error("no run {0:?} here (see `orchestrate sessions`)")]
    Unknown(String),
    /// Several runs' ids start with the prefix.
    #[error("{prefix:?} names {count} runs; give more of the id (see `orchestrate sessions`)")]
    Ambiguous {
        /// The prefix.
        prefix: String,
        /// How many it names.
        count: usize,
    },
    /// The run's journal cannot be read.
    #[error("{0}")]
    Unreadable(JournalError),
}

/// Every run of the workspace whose state is `state`, newest first. Journals
/// that cannot be read are skipped ([`read`] names them).
pub fn list(state: &StateDir) -> Vec<Run> {
    read(state).runs
}

/// The runs of a workspace, and the journals that could not be read.
#[derive(Debug, Default)]
pub struct Listing {
    /// Every run, newest first.
    pub runs: Vec<Run>,
    /// The journals left out, each with why.
    pub unreadable: Vec<JournalError>,
}

/// Every run of the workspace whose state is `state`, newest first, and the
/// journals that could not be read (not a regular file of this user's, without
/// a header, of a later format), which are left out. A journal's damaged lines
/// are skipped, and named in its run's [`Run::damaged`]. Every journal is read
/// whole; [`summaries`] lists the runs from the index instead.
pub fn read(state: &StateDir) -> Listing {
    let mut listing = Listing::default();
    let mut sessions = Vec::new();
    if let Ok(entries) = std::fs::read_dir(state.sessions()) {
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_none_or(|e| e != "jsonl") {
                continue;
            }
            match read_journal(&path) {
                Ok(read) => sessions.push((path, read)),
                Err(e) => listing.unreadable.push(e),
            }
        }
    }
    let (runs, headless) = runs_of(state, sessions);
    listing.runs = runs;
    listing.unreadable.extend(headless);
    listing
}

/// The runs the journals read make, with their damaged lines and whether a
/// live process holds them, and the journals without a header.
fn runs_of(
    state: &StateDir,
    journals: Vec<(std::path::PathBuf, Contents)>,
) -> (Vec<Run>, Vec<JournalError>) {
    let mut headless = Vec::new();
    let mut sessions: Vec<(SessionId, Vec<Record>)> = Vec::new();
    let mut damage: HashMap<SessionId, Vec<Damaged>> = HashMap::new();
    for (path, read) in journals {
        match read.records.first() {
            Some(Record::Header { session, .. }) => {
                let session = *session;
                if !read.damaged.is_empty() {
                    damage.insert(session, read.damaged);
                }
                sessions.push((session, read.records));
            }
            // Nothing written whole: a session that never started.
            None if read.damaged.is_empty() => {}
            _ => headless.push(JournalError::Headless { path }),
        }
    }
    let mut runs = assemble(&sessions);
    for run in &mut runs {
        for agent in &run.agents {
            run.damaged
                .extend(damage.remove(&agent.session).unwrap_or_default());
        }
        if lock::holder(state, run.id).is_some() {
            run.status = RunStatus::Running;
        }
    }
    (runs, headless)
}

/// One run as a listing shows it, from the runs' index: its journals are read
/// only where they changed since the index was written.
#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    /// The run's id: its lead session's.
    pub id: SessionId,
    /// How it stands.
    pub status: RunStatus,
    /// When it started.
    pub started: SystemTime,
    /// Its lead's role.
    pub lead_role: String,
    /// How many agents it has, its lead included.
    pub agents: usize,
    /// Tokens used by every agent of the run.
    pub tokens: u64,
    /// What every agent cost in USD; `None` when a price was unknown.
    pub cost: Option<f64>,
    /// The first line of the lead's task (clipped).
    pub task_line: String,
    /// The title its first prompt got (`titles = true`), when it has one.
    pub title: Option<String>,
    /// Lines of its journals that are damaged, skipped in reading it.
    pub damaged: Vec<Damaged>,
}

/// The runs of a workspace as a listing shows them, and the journals that
/// could not be read.
#[derive(Debug, Default)]
pub struct Summaries {
    /// Every run, newest first.
    pub runs: Vec<Summary>,
    /// The journals left out, each with why.
    pub unreadable: Vec<JournalError>,
}

/// Every run of the workspace whose state is `state`, newest first, as the
/// runs' index has them (brought up to date first: a journal that changed
/// since is read again). What [`read`] tells, without reading every journal.
pub fn summaries(state: &StateDir) -> Summaries {
    let sessions = index::sessions(state);
    let mut runs: Vec<Summary> = by_run(&sessions.entries)
        .into_iter()
        .map(|(id, entries)| {
            let lead = entries[0];
            let mut status = lead.ended.unwrap_or(RunStatus::Interrupted);
            if lock::holder(state, id).is_some() {
                status = RunStatus::Running;
            }
            Summary {
                id,
                status,
                started: started(id),
                lead_role: lead.role.clone(),
                agents: entries.len(),
                tokens: entries.iter().map(|e| e.tokens).sum(),
                cost: entries.iter().try_fold(0.0, |sum, e| Some(sum + e.cost?)),
                task_line: lead.task_line.clone(),
                title: lead.title.clone(),
                damaged: entries.iter().flat_map(|e| e.damaged.clone()).collect(),
            }
        })
        .collect();
    runs.sort_by_key(|r| std::cmp::Reverse(r.id));
    Summaries {
        runs,
        unreadable: sessions.unreadable,
    }
}

/// The index's sessions by run, each run's lead first; runs whose lead's
/// journal is gone are left out.
fn by_run(entries: &[index::Entry]) -> HashMap<SessionId, Vec<&index::Entry>> {
    let parents: HashMap<SessionId, Option<SessionId>> =
        entries.iter().map(|e| (e.session, e.parent)).collect();
    let mut runs: HashMap<SessionId, Vec<&index::Entry>> = HashMap::new();
    for entry in entries {
        runs.entry(index::run_of(entry, &parents))
            .or_default()
            .push(entry);
    }
    runs.retain(|id, entries| {
        entries.sort_by_key(|e| (e.session != *id, e.session));
        entries[0].session == *id
    });
    runs
}

/// The run named by `prefix` (a unique prefix of its id), or the newest run:
/// found in the runs' index, then its journals read whole.
pub fn find(state: &StateDir, prefix: Option<&str>) -> Result<Run, RunError> {
    find_with_spent(state, prefix).map(|(run, _)| run)
}

/// [`find`], and what the run in progress had spent when its process ended
/// (from the same reading of its journals): what `resume` holds it to.
pub fn find_with_spent(
    state: &StateDir,
    prefix: Option<&str>,
) -> Result<(Run, spent::Spent), RunError> {
    let sessions = index::sessions(state);
    let runs = by_run(&sessions.entries);
    let mut ids: Vec<SessionId> = runs.keys().copied().collect();
    ids.sort_by_key(|id| std::cmp::Reverse(*id));
    let id = match prefix {
        None => *ids.first().ok_or(RunError::None)?,
        Some(prefix) => {
            let matching: Vec<SessionId> = (ids.iter().copied())
                .filter(|id| id.to_string().starts_with(prefix))
                .collect();
            match matching.as_slice() {
                // A journal of that name that could not be read says why.
                [] => {
                    let named = |e: &JournalError| {
                        (e.path().file_name().and_then(|n| n.to_str()))
                            .is_some_and(|name| !prefix.is_empty() && name.starts_with(prefix))
                    };
                    let mut unreadable = sessions.unreadable;
                    return Err(match unreadable.iter().position(named) {
                        Some(at) => RunError::Unreadable(unreadable.swap_remove(at)),
                        None => RunError::Unknown(prefix.to_owned()),
                    });
                }
                [id] => *id,
                _ => {
                    return Err(RunError::Ambiguous {
                        prefix: prefix.to_owned(),
                        count: matching.len(),
                    });
                }
            }
        }
    };
    let mut journals = Vec::new();
    for entry in &runs[&id] {
        let path = state.sessions().join(&entry.file);
        match read_journal(&path) {
            Ok(read) => journals.push((path, read)),
            // The lead's is the run: without it there is nothing to show.
            Err(e) if entry.session == id => return Err(RunError::Unreadable(e)),
            Err(_) => {}
        }
    }
    let is_lead = |c: &Contents| matches!(c.records.first(), Some(Record::Header { session, .. }) if *session == id);
    let lead: &[Record] = (journals.iter())
        .find(|(_, c)| is_lead(c))
        .map_or(&[], |(_, c)| &c.records);
    let others: Vec<&[Record]> = (journals.iter())
        .filter(|(_, c)| !is_lead(c))
        .map(|(_, c)| c.records.as_slice())
        .collect();
    let spent = spent::spent(lead, &others);
    let (found, _) = runs_of(state, journals);
    let run = (found.into_iter())
        .find(|run| run.id == id)
        .ok_or_else(|| RunError::Unknown(id.to_string()))?;
    Ok((run, spent))
}

/// Groups sessions into runs (a session's run is its header's, or for journals
/// written before runs were named, its root ancestor's) and reads each.
fn assemble(sessions: &[(SessionId, Vec<Record>)]) -> Vec<Run> {
    let parents: HashMap<SessionId, Option<SessionId>> = sessions
        .iter()
        .map(|(id, records)| (*id, header(records).1))
        .collect();
    let mut by_run: BTreeMap<SessionId, Vec<Agent>> = BTreeMap::new();
    for (id, records) in sessions {
        let run = header(records).2.unwrap_or_else(|| root(*id, &parents));
        by_run.entry(run).or_default().push(agent(*id, records));
    }
    let mut runs: Vec<Run> = by_run
        .into_iter()
        .filter_map(|(id, mut agents)| {
            // The lead first, the rest in the order they started (ids are in time order).
            agents.sort_by_key(|a| (a.session != id, a.session));
            let lead = agents.first().filter(|a| a.session == id)?;
            let status = status_of(lead.outcome.as_ref());
            Some(Run {
                id,
                status,
                started: started(id),
                agents,
                damaged: Vec::new(),
            })
        })
        .collect();
    runs.sort_by_key(|r| std::cmp::Reverse(r.id));
    runs
}

/// How a run stands by how its lead's last run ended (`None`: unfinished), as
/// its journals tell it.
fn status_of(outcome: Option<&Outcome>) -> RunStatus {
    match outcome {
        None => RunStatus::Interrupted,
        Some(Outcome::Completed { .. }) => RunStatus::Finished,
        Some(Outcome::Failed { .. }) => RunStatus::Failed,
        Some(Outcome::Cancelled { .. }) => RunStatus::Cancelled,
        Some(Outcome::Partial { .. }) => RunStatus::Stopped,
        Some(Outcome::TimedOut { .. }) => RunStatus::TimedOut,
    }
}

/// A header's agent, parent and run.
fn header(records: &[Record]) -> (&str, Option<SessionId>, Option<SessionId>) {
    match records.first() {
        Some(Record::Header {
            agent, parent, run, ..
        }) => (agent, *parent, *run),
        _ => ("", None, None),
    }
}

fn root(mut id: SessionId, parents: &HashMap<SessionId, Option<SessionId>>) -> SessionId {
    // Bounded by the number of sessions, so a cycle in damaged headers ends.
    for _ in 0..parents.len() {
        match parents.get(&id) {
            Some(Some(parent)) if parents.contains_key(parent) => id = *parent,
            _ => break,
        }
    }
    id
}

/// What one session's journal says about it.
fn agent(session: SessionId, records: &[Record]) -> Agent {
    let (role, parent, _) = header(records);
    let (model, call) = match records.first() {
        Some(Record::Header {
            model,
            tool_call_id,
            ..
        }) => (model.clone(), tool_call_id.clone()),
        _ => (String::new(), None),
    };
    let mut outcome = None;
    let mut stats = RunStats {
        cost_usd: Some(0.0),
        ..RunStats::default()
    };
    let mut running = RunStats::default();
    let mut tokens = 0;
    let mut cost = Some(0.0);
    // The current run's own turns: an unfinished run's cost.
    let mut running_cost = Some(0.0);
    let mut task = None;
    let mut title = None;
    let mut after_start = false;
    let mut limits = None;
    let (mut checkout, mut changes, mut checkout_removed) = (None, None, false);
    for record in records {
        match record {
            Record::RunStarted { limits: given, .. } => {
                limits = *given;
                outcome = None;
                running = RunStats::default();
                running_cost = Some(0.0);
                after_start = true;
                continue;
            }
            Record::Limits { limits: given } => limits = Some(*given),
            Record::Message {
                message: Message::User { content },
            } if after_start && task.is_none() => task = Some(content.clone()),
            Record::Terminal { outcome: ended } => {
                let counted = ended.stats();
                stats.turns += counted.turns;
                stats.tool_calls += counted.tool_calls;
                stats.duration_ms += counted.duration_ms;
                stats.charge(&counted.usage, counted.cost_usd);
                outcome = Some(ended.clone());
            }
            Record::Event { event, .. } => match &event.kind {
                EventKind::TurnFinished {
                    usage, cost_usd, ..
                } => {
                    tokens += usage.total();
                    cost = add_costs(cost, *cost_usd);
                    running_cost = add_costs(running_cost, *cost_usd);
                    running.turns += 1;
                }
                EventKind::ToolStarted { .. } => running.tool_calls += 1,
                EventKind::Titled {
                    title: given,
                    usage,
                    cost_usd,
                } => {
                    tokens += usage.total();
                    cost = add_costs(cost, *cost_usd);
                    title = Some(given.clone());
                }
                _ => {}
            },
            Record::Header {
                checkout: given, ..
            } => checkout = given.clone(),
            Record::Merged { result } => changes = Some(result.clone()),
            Record::CheckoutRemoved => checkout_removed = true,
            Record::Committed { .. }
            | Record::Checked { .. }
            | Record::Fetched { .. }
            | Record::Merging { .. }
            | Record::Compacted { .. }
            | Record::PromptJoined { .. }
            | Record::ToolStarted { .. }
            | Record::Narrowed { .. }
            | Record::Message { .. } => {}
        }
        after_start = false;
    }
    if outcome.is_none() {
        stats.turns += running.turns;
        stats.tool_calls += running.tool_calls;
        stats.cost_usd = add_costs(stats.cost_usd, running_cost);
    }
    Agent {
        unfinished: crate::session::resume::resume(records).active.is_some(),
        session,
        parent,
        call,
        role: role.to_owned(),
        model,
        outcome,
        stats,
        tokens,
        cost,
        task: task.unwrap_or_default(),
        title,
        limits,
        checkout,
        changes,
        checkout_removed,
    }
}

/// When a session started: its id is a UUIDv7, which begins with the time.
fn started(id: SessionId) -> SystemTime {
    let millis = id.timestamp_millis();
    SystemTime::UNIX_EPOCH + Duration::from_millis(millis)
}
