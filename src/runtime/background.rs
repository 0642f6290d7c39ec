//! Background sub-agents. A Task call with `run_in_background` returns at
//! once with a task id (the sub-agent's session id); the sub-agent waits for
//! a slot, runs, and its result goes to its caller: to a `TaskOutput` call
//! waiting for it, or else as a message that joins the caller's run
//! (`Background sub-agent <label> (task_id <id>) ended:`). The caller's queue
//! counts its running background sub-agents, and its run does not end while
//! any runs; a caller whose run ends anyway (cancelled, stopped, timed out,
//! failed) has them cancelled, their work kept as a cancelled sub-agent's is.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use super::Handle;
use crate::actors::orchestrator::OrchestratorMsg;
use crate::conversation::Message;
use crate::error::{SessionError, ToolError};
use crate::journal::{Record, read_journal};
use crate::protocol::SessionId;
use crate::session::queue::QueuedPrompt;
use crate::task::Job;

/// The runtime's background sub-agents, by task id.
#[derive(Debug, Default)]
pub(crate) struct Backgrounds(Mutex<HashMap<SessionId, Arc<Entry>>>);

/// One background sub-agent.
#[derive(Debug)]
struct Entry {
    /// The session whose Task call started it.
    caller: SessionId,
    /// Its role, as its messages name it.
    label: String,
    /// Where it is; changed only under this lock, so that a result goes to
    /// exactly one place.
    state: Mutex<State>,
    /// Bumped at every change of `state`: `TaskOutput` calls wait on it.
    changed: watch::Sender<u64>,
    /// `TaskStop` came: it does not start if it has not yet.
    stopped: AtomicBool,
}

/// Where a background sub-agent is.
#[derive(Debug)]
enum State {
    /// Running, with this many `TaskOutput` calls waiting for its end.
    Running { waiting: usize },
    /// Ended while a `TaskOutput` call waited: its result went there, and
    /// what it spent with the first such call that reads it.
    Taken {
        text: String,
        spent: Option<crate::protocol::RunStats>,
    },
    /// Ended with this outcome line; its result went to its caller's run as
    /// a message (or nowhere: its caller's run had ended).
    Delivered { outcome: String },
}

impl Entry {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Its result, when `TaskOutput` may have it now.
    fn result(&self, task: SessionId) -> Option<String> {
        match &*self.state() {
            State::Running { .. } => None,
            State::Taken { text, .. } => Some(text.clone()),
            State::Delivered { outcome } => Some(format!(
                "{outcome}\n[its whole result is the message in this conversation that begins \
                 `Background sub-agent {} (task_id {task}) ended:`]",
                self.label
            )),
        }
    }
}

impl Backgrounds {
    fn get(&self, task: SessionId) -> Option<Arc<Entry>> {
        self.lock().get(&task).cloned()
    }

    /// Background sub-agent `task`, if `caller` started it.
    fn of(&self, caller: SessionId, task: SessionId) -> Result<Arc<Entry>, ToolError> {
        match self.get(task) {
            Some(entry) if entry.caller == caller => Ok(entry),
            _ => Err(ToolError::InvalidInput(format!(
                "no background sub-agent with task_id {task} was started by this agent"
            ))),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SessionId, Arc<Entry>>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The message that brings background sub-agent `task`'s `result` to its
/// caller's run.
pub(crate) fn ended_message(label: &str, task: SessionId, result: &str) -> String {
    format!("Background sub-agent {label} (task_id {task}) ended:\n{result}")
}

/// How far a running sub-agent has got, from its journal: model turns,
/// tool calls, and its last words.
fn progress(records: &[Record]) -> (usize, usize, String) {
    let (mut turns, mut calls, mut last) = (0, 0, String::new());
    for record in records {
        if let Record::Message {
            message: Message::Assistant(a),
        } = record
        {
            turns += 1;
            calls += a.tool_calls.len();
            if !a.answer().is_empty() {
                last = a.answer().to_owned();
            }
        }
    }
    (turns, calls, last)
}

/// What a panic carried, as text.
fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    (panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".to_owned())
}

impl Handle {
    /// Starts `job` in the background (see the module's documentation);
    /// returns its task id once its caller's queue counts it. A call made
    /// again for a sub-agent already followed (its caller crashed and came
    /// back) starts nothing new.
    pub(crate) async fn run_in_background(&self, mut job: Job) -> Result<SessionId, SessionError> {
        let delegation = &job.delegation;
        let (Some(caller), Some(mut task)) = (delegation.spec.parent, delegation.id) else {
            return Err(SessionError::Spawn(
                "a background sub-agent needs its caller and its task id".into(),
            ));
        };
        // A call made again by a resumed caller follows the sub-agent it had
        // started, under that one's id.
        if let (true, Some(call)) = (delegation.resumed, &delegation.spec.tool_call_id)
            && let Some((child, _)) = self.find_child(caller, call).await
        {
            task = child;
        }
        job.delegation.id = Some(task);
        let label = job.delegation.spec.agent.clone();
        let followed = self.backgrounds.get(task).filter(|e| e.caller == caller);
        if let Some(entry) = followed {
            // Its job goes on; counted again, should the count have been
            // lost (the count is a set).
            let running = matches!(*entry.state(), State::Running { .. });
            if running {
                self.count(caller, task).await?;
            }
            return Ok(task);
        }
        let entry = {
            let entry = Arc::new(Entry {
                caller,
                label,
                state: Mutex::new(State::Running { waiting: 0 }),
                changed: watch::channel(0).0,
                stopped: AtomicBool::new(false),
            });
            self.backgrounds.lock().insert(task, entry.clone());
            entry
        };
        // The job is a task of its own from here: a Task call dropped while it
        // starts leaves no count without a job behind it.
        let (counted_tx, counted) = tokio::sync::oneshot::channel();
        let handle = self.clone();
        tokio::spawn(async move {
            // Subscribed before it counts: a caller's run that ends from here
            // on cancels it.
            let mut caller_ended = handle.bus.subscribe_session_terminal(caller);
            let count = handle.count(caller, task).await;
            let ok = count.is_ok();
            let _ = counted_tx.send(count);
            if !ok {
                handle.backgrounds.lock().remove(&task);
                return;
            }
            let cancel = job.delegation.cancel.clone();
            let work = std::panic::AssertUnwindSafe(handle.work_in_background(job, &entry));
            let mut work = Box::pin(futures::FutureExt::catch_unwind(work));
            let ended = tokio::select! {
                ended = &mut work => Some(ended),
                _ = caller_ended.recv() => None,
            };
            let (text, spent) = match ended {
                Some(Ok(ended)) => ended,
                Some(Err(panic)) => (
                    format!(
                        "failed (crash)\nthe {} sub-agent's job crashed: {}",
                        entry.label,
                        panic_text(&*panic)
                    ),
                    None,
                ),
                None => {
                    // Cancelled before the work is dropped: its guard then ends
                    // the sub-agent and keeps its checkout's work.
                    cancel.cancel();
                    drop(work);
                    let text = "cancelled\n[its caller's run ended before it did]".to_owned();
                    handle.background_ended(caller, task, &entry, (text, None), false);
                    return;
                }
            };
            handle.background_ended(caller, task, &entry, (text, spent), true);
        });
        match counted.await {
            Ok(count) => count.map(|()| task),
            Err(_) => Err(SessionError::Shutdown),
        }
    }

    /// Counts background sub-agent `task` in `caller`'s queue.
    async fn count(&self, caller: SessionId, task: SessionId) -> Result<(), SessionError> {
        let counted = ractor::call!(self.orchestrator, |reply| {
            OrchestratorMsg::BackgroundStarted {
                caller,
                task,
                reply,
            }
        })
        .map_err(|e| SessionError::Spawn(e.to_string()))?;
        match counted {
            true => Ok(()),
            false => Err(SessionError::Gone(caller.to_string())),
        }
    }

    /// Runs a background job: a slot, the sub-agent, its result as a Task
    /// call's, and what it spent.
    async fn work_in_background(
        &self,
        job: Job,
        entry: &Entry,
    ) -> (String, Option<crate::protocol::RunStats>) {
        let Job {
            delegation,
            slots,
            events,
        } = job;
        let label = &entry.label;
        let call = delegation.spec.tool_call_id.clone().unwrap_or_default();
        let slot = crate::task::wait_for_slot(&slots, events.as_ref(), &call, label).await;
        if entry.stopped.load(Ordering::SeqCst) {
            let text = format!(
                "partial (requested)\n[the {label} sub-agent was stopped before it started]"
            );
            return (text, None);
        }
        let delegated = match slot {
            Ok(slot) => {
                let delegation = crate::task::Delegation {
                    slot: Some(slot),
                    ..delegation
                };
                self.delegate(delegation).await
            }
            Err(e) => return (e.result_text(), None),
        };
        match delegated {
            Ok(delegated) => {
                let spent = delegated.outcome.as_ref().map(|o| *o.stats());
                let text = match crate::task::report(label, delegated) {
                    Ok(text) => text,
                    Err(e) => e.result_text(),
                };
                (text, spent)
            }
            Err(e) => {
                let text = format!("failed (spawn)\nthe {label} sub-agent could not start: {e}");
                (text, None)
            }
        }
    }

    /// Background sub-agent `task` of `caller` ended with `text`: to a
    /// `TaskOutput` call waiting for it, or else (when `deliver`) as a
    /// message for its caller's run; either way its caller's queue stops
    /// counting it.
    fn background_ended(
        &self,
        caller: SessionId,
        task: SessionId,
        entry: &Entry,
        (text, spent): (String, Option<crate::protocol::RunStats>),
        deliver: bool,
    ) {
        let message = ended_message(&entry.label, task, &text);
        let spending = spent.as_ref().map(|stats| crate::tools::Spending {
            usage: stats.usage,
            cost_usd: stats.cost_usd,
        });
        let taken = {
            let mut state = entry.state();
            let waiting = matches!(*state, State::Running { waiting } if waiting > 0);
            *state = match waiting {
                true => State::Taken { text, spent },
                false => State::Delivered {
                    outcome: text.lines().next().unwrap_or_default().to_owned(),
                },
            };
            waiting
        };
        entry.changed.send_modify(|v| *v += 1);
        let result = (deliver && !taken).then(|| QueuedPrompt {
            seq: self.stamp(),
            text: message,
            steer: true,
            fails: None,
            background: Some(task),
            spent: spending,
            narrow: None,
        });
        let _ = self.orchestrator.cast(OrchestratorMsg::BackgroundEnded {
            caller,
            task,
            result,
        });
    }

    /// What background sub-agent `task` of `caller` came to, waiting up to
    /// `wait` for its end; its state and progress while it runs.
    pub(crate) async fn background_output(
        &self,
        caller: SessionId,
        task: SessionId,
        wait: Option<Duration>,
        spent: crate::tools::Spent,
    ) -> Result<String, ToolError> {
        let entry = self.backgrounds.of(caller, task)?;
        let mut changed = entry.changed.subscribe();
        if let Some(wait) = wait {
            let waits = match &mut *entry.state() {
                State::Running { waiting } => {
                    *waiting += 1;
                    true
                }
                State::Taken { .. } | State::Delivered { .. } => false,
            };
            if waits {
                let _ = tokio::time::timeout(wait, changed.changed()).await;
                // Under the lock: an end from now on finds it gone, one
                // before it left the result here.
                if let State::Running { waiting } = &mut *entry.state() {
                    *waiting -= 1;
                }
            }
        }
        if let Some(result) = entry.result(task) {
            // What it spent is its caller's, once.
            if let State::Taken { spent: stats, .. } = &mut *entry.state()
                && let Some(stats) = stats.take()
            {
                spent.add(&stats);
            }
            return Ok(result);
        }
        let path = self.state.journal(task);
        let read = tokio::task::spawn_blocking(move || read_journal(&path)).await;
        let records = match read {
            Ok(Ok(read)) => read.records,
            _ => Vec::new(),
        };
        let (turns, calls, last) = progress(&records);
        let last = if last.is_empty() {
            String::new()
        } else {
            format!("\nIts last output so far:\n{last}")
        };
        Ok(format!(
            "running\nthe {} sub-agent (task_id {task}) has not ended: {turns} model turns and {calls} tool calls so far{last}",
            entry.label
        ))
    }

    /// Stops background sub-agent `task` of `caller` at its next turn
    /// boundary, as `stop` does (before it starts, when it waits for a slot).
    pub(crate) fn stop_background(
        &self,
        caller: SessionId,
        task: SessionId,
    ) -> Result<String, ToolError> {
        let entry = self.backgrounds.of(caller, task)?;
        if !matches!(*entry.state(), State::Running { .. }) {
            return Ok(format!(
                "the {} sub-agent (task_id {task}) has ended already; TaskOutput gives its result",
                entry.label
            ));
        }
        entry.stopped.store(true, Ordering::SeqCst);
        self.stop_run(task);
        Ok(format!(
            "stopping the {} sub-agent (task_id {task}): it ends partial at its next turn boundary, and its result comes as usual",
            entry.label
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conversation::{AssistantMessage, ToolCall};

    #[test]
    fn progress_counts_turns_and_calls_and_keeps_the_last_words() {
        let turn = |text: &str, calls: usize| Record::Message {
            message: Message::Assistant(AssistantMessage {
                text: text.into(),
                tool_calls: (0..calls)
                    .map(|i| ToolCall {
                        id: format!("c{i}"),
                        name: "Read".into(),
                        arguments: "{}".into(),
                    })
                    .collect(),
                ..AssistantMessage::default()
            }),
        };
        let records = [turn("looking", 2), turn("", 1), turn("found it", 0)];
        assert_eq!(progress(&records), (3, 3, "found it".to_owned()));
        let task = SessionId::new();
        assert!(
            ended_message("explorer", task, "completed\nok").starts_with(&format!(
                "Background sub-agent explorer (task_id {task}) ended:\ncompleted"
            ))
        );
    }
}
