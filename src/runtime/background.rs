//! Background sub-agents. A Task call with `run_in_background` returns at
//! once with a task id (the sub-agent's session id); the sub-agent waits for
//! a slot, runs, and its result goes to its caller: to a `TaskOutput` call
//! waiting for it, or else as a message that joins the caller's run
//! (`Background sub-agent <label> (task_id <id>) ended:`). The caller's queue
//! counts its running background sub-agents, and its run does not end while
//! any runs; a caller whose run ends anyway (cancelled, stopped, timed out,
//! failed) has them cancelled, their work kept as a cancelled sub-agent's is.

use std::collections::HashMap;
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
    /// Its result (the Task result it came to), once it has ended.
    result: watch::Sender<Option<String>>,
}

impl Backgrounds {
    fn insert(&self, task: SessionId, entry: Entry) {
        self.lock().insert(task, Arc::new(entry));
    }

    /// Background sub-agent `task`, if `caller` started it.
    fn of(&self, caller: SessionId, task: SessionId) -> Result<Arc<Entry>, ToolError> {
        match self.lock().get(&task) {
            Some(entry) if entry.caller == caller => Ok(entry.clone()),
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

impl Handle {
    /// Starts `job` in the background (see the module's documentation);
    /// returns its task id once its caller's queue counts it.
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
        let delegation = &job.delegation;
        let label = delegation.spec.agent.clone();
        // Subscribed before it counts: a caller's run that ends from here on
        // cancels it.
        let mut caller_ended = self.bus.subscribe_session_terminal(caller);
        ractor::call!(self.orchestrator, |reply| {
            OrchestratorMsg::BackgroundStarted {
                caller,
                task,
                reply,
            }
        })
        .map_err(|e| SessionError::Spawn(e.to_string()))?;
        let (result, _) = watch::channel(None);
        self.backgrounds.insert(
            task,
            Entry {
                caller,
                label: label.clone(),
                result,
            },
        );
        let handle = self.clone();
        tokio::spawn(async move {
            let cancel = job.delegation.cancel.clone();
            let work = handle.work_in_background(job, &label);
            let text = tokio::select! {
                text = work => text,
                _ = caller_ended.recv() => {
                    // Dropping the work cancels the sub-agent (its call's
                    // guard), as a cancelled Task call's.
                    cancel.cancel();
                    "cancelled\n[its caller's run ended before it did]".to_owned()
                }
            };
            handle.background_ended(caller, task, &label, text);
        });
        Ok(task)
    }

    /// Runs a background job: a slot, the sub-agent, its result as a Task
    /// call's.
    async fn work_in_background(&self, job: Job, label: &str) -> String {
        let Job {
            delegation,
            slots,
            events,
        } = job;
        let call = delegation.spec.tool_call_id.clone().unwrap_or_default();
        let slot = crate::task::wait_for_slot(&slots, events.as_ref(), &call, label).await;
        let delegated = match slot {
            Ok(_slot) => self.delegate(delegation).await,
            Err(e) => return e.result_text(),
        };
        match delegated {
            Ok(delegated) => match crate::task::report(label, delegated) {
                Ok(text) => text,
                Err(e) => e.result_text(),
            },
            Err(e) => format!("failed (spawn)\nthe {label} sub-agent could not start: {e}"),
        }
    }

    /// Background sub-agent `task` of `caller` ended with `text`: to a
    /// `TaskOutput` call waiting for it, or else as a message for its caller's
    /// run; either way its caller's queue stops counting it.
    fn background_ended(&self, caller: SessionId, task: SessionId, label: &str, text: String) {
        let message = ended_message(label, task, &text);
        let claimed = match self.backgrounds.lock().get(&task) {
            Some(entry) => {
                entry.result.send_replace(Some(text));
                // Set before the count is read: a waiter that gives up after
                // this still finds it.
                entry.result.receiver_count() > 0
            }
            None => false,
        };
        let result = (!claimed).then(|| QueuedPrompt {
            seq: self.stamp(),
            text: message,
            steer: true,
            fails: None,
            background: Some(task),
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
    ) -> Result<String, ToolError> {
        let entry = self.backgrounds.of(caller, task)?;
        let mut result = entry.result.subscribe();
        if let Some(wait) = wait {
            let _ = tokio::time::timeout(wait, result.wait_for(Option::is_some)).await;
        }
        if let Some(text) = result.borrow().clone() {
            return Ok(text);
        }
        drop(result);
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
    /// boundary, as `stop` does.
    pub(crate) fn stop_background(
        &self,
        caller: SessionId,
        task: SessionId,
    ) -> Result<String, ToolError> {
        let entry = self.backgrounds.of(caller, task)?;
        if entry.result.borrow().is_some() {
            return Ok(format!(
                "the {} sub-agent (task_id {task}) has ended already; TaskOutput gives its result",
                entry.label
            ));
        }
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
