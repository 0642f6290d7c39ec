//! Delegation: running a Task call's prompt in its sub-agent. A call that an
//! earlier incarnation of its caller already started (the caller crashed and was
//! restarted, or its run was resumed by a new process) finds that sub-agent by
//! (parent, call id) and carries on with it: a finished one gives its recorded result with no model
//! request, a running one is waited for, one cut off mid-run resumes from its
//! journal. Only a call never started before starts a new sub-agent.
//!
//! A sub-agent is cancelled only when its call is: a parent that crashes leaves
//! its sub-agents running, for its next incarnation to find.

mod checked;
mod isolated;

pub(crate) use self::isolated::Checkouts;

use tokio_util::sync::CancellationToken;

use self::isolated::Work;
use super::Handle;
use crate::actors::orchestrator::{OrchestratorMsg, Whereabouts};
use crate::conversation::Message;
use crate::error::SessionError;
use crate::events::EventStream;
use crate::events::Publisher;
use crate::isolation::Isolate;
use crate::journal::{Record, read_journal};
use crate::protocol::{EventKind, Outcome, SessionId};
use crate::session::SessionSpec;
use crate::session::queue::QueuedPrompt;
use crate::task::{Continue, Delegated, Delegation};

/// What a sub-agent's journal says about a delegation of `prompt`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Recorded {
    /// Its run ended: this is the call's result.
    Ended(Outcome),
    /// Its run started and has not ended.
    Running,
    /// It was never sent its prompt.
    Unprompted,
    /// It answers another prompt: the same call id in another conversation.
    Other,
}

/// Reads a sub-agent's journal for the delegation of `prompt`.
pub(crate) fn recorded(records: &[Record], prompt: &str) -> Recorded {
    let mut records = records.iter();
    let started = records
        .by_ref()
        .position(|r| matches!(r, Record::RunStarted { .. }));
    if started.is_none() {
        return Recorded::Unprompted;
    }
    match records.next() {
        Some(Record::Message {
            message: Message::User { content },
        }) if content == prompt => {}
        _ => return Recorded::Other,
    }
    // The last run's end; a run started after it (a failed check's prompt)
    // is still to end.
    for record in records.rev() {
        match record {
            Record::Terminal { outcome } => return Recorded::Ended(outcome.clone()),
            Record::RunStarted { .. } => return Recorded::Running,
            _ => {}
        }
    }
    Recorded::Running
}

/// What a continued sub-agent's journal says about the follow-up `prompt`:
/// the last run it started, ended or not; `Unprompted` when none did.
pub(crate) fn follow_up(records: &[Record], prompt: &str) -> Recorded {
    let started = records.windows(2).rposition(|pair| {
        matches!(
            pair,
            [Record::RunStarted { .. }, Record::Message { message: Message::User { content } }]
                if content == prompt
        )
    });
    let Some(start) = started else {
        return Recorded::Unprompted;
    };
    match records[start..].iter().find_map(|r| match r {
        Record::Terminal { outcome } => Some(outcome.clone()),
        _ => None,
    }) {
        Some(outcome) => Recorded::Ended(outcome),
        None => Recorded::Running,
    }
}

/// Cancels a sub-agent whose delegation is dropped because its call was
/// cancelled, at whatever point (finding, resuming or waiting for it); one dropped
/// for any other reason (its parent crashed) keeps running.
/// A cancelled sub-agent's private checkout is brought back once it has
/// ended: its work kept on its branch, not merged.
struct CancelWithCall {
    handle: Handle,
    /// The sub-agent, once known.
    child: Option<SessionId>,
    cancel: CancellationToken,
    /// Its own checkout's work, with what bringing it back needs.
    keep: Option<Keep>,
}

/// What bringing a cancelled sub-agent's checkout back needs.
struct Keep {
    work: Work,
    isolate: Isolate,
    agent: String,
    parent: Option<SessionId>,
}

/// How long a cancelled sub-agent is waited for before its checkout's work is
/// kept anyway.
const CANCELLED_END: std::time::Duration = std::time::Duration::from_secs(30);

impl Drop for CancelWithCall {
    fn drop(&mut self) {
        let Some(child) = self.child.filter(|_| self.cancel.is_cancelled()) else {
            return;
        };
        // Subscribed before the cancel: its end is not missed.
        let mut ended = self.handle.bus.subscribe_session_terminal(child);
        // The sub-agent ends its run as cancelled, then stops.
        self.handle.cancel(child);
        self.handle.stop_session(child);
        if let (Some(keep), Ok(runtime)) = (self.keep.take(), tokio::runtime::Handle::try_current())
        {
            let handle = self.handle.clone();
            let task = runtime.spawn(async move {
                let _ = tokio::time::timeout(CANCELLED_END, ended.recv()).await;
                let Keep {
                    work,
                    isolate,
                    agent,
                    parent,
                } = keep;
                handle
                    .bring_back(child, &agent, parent, work, None, &isolate)
                    .await;
            });
            self.handle.checkouts.pending(task);
        }
    }
}

/// What starting a Task call's sub-agent takes.
struct Start<'a> {
    spec: SessionSpec,
    prompt: &'a str,
    isolate: Option<&'a Isolate>,
    /// The id a new sub-agent gets; `None`: a fresh one.
    id: Option<SessionId>,
}

/// Where a Task call's sub-agent is once found or started.
enum Reached {
    /// Running: its events, and where the call's prompt is.
    Running(SessionId, EventStream, Prompt),
    /// Its run for this prompt ended already.
    Ended(SessionId, Outcome),
}

/// Where a found or started sub-agent's prompt is.
enum Prompt {
    /// Still to be sent.
    Unsent,
    /// Sent with its start, stamped so.
    Sent(u64),
    /// It has it already (a run in progress or resumed): wait for its end.
    Taken,
}

impl Handle {
    /// Runs `prompt` in the sub-agent of the Task call `spec` names (its `parent`
    /// and `tool_call_id`); see the module's documentation. `cancel` is the call's
    /// cancellation; `resumed` says an earlier incarnation of the caller started
    /// the call (only then is there a sub-agent to find). Returns the sub-agent's
    /// outcome, `None` if it went away without one.
    pub(crate) async fn delegate(&self, delegation: Delegation) -> Result<Delegated, SessionError> {
        let Delegation {
            spec,
            prompt,
            cancel,
            resumed,
            isolate,
            check,
            id,
            continues,
            slot,
            // Where it runs was decided before: here.
            placement: _,
            placement_tags: _,
        } = delegation;
        // Kept to start the sub-agent again for a check, when it had ended.
        let again = check.as_ref().map(|_| spec.clone());
        let mut guard = CancelWithCall {
            handle: self.clone(),
            child: None,
            cancel,
            keep: None,
        };
        let (agent, parent) = (spec.agent.clone(), spec.parent);
        let mut work = Work::default();
        // Boxed: the finding and starting (with the spec) are over once the
        // sub-agent runs, and the wait, which lasts its whole run, keeps only the
        // little it needs.
        let start = Start {
            spec,
            prompt: &prompt,
            isolate: isolate.as_ref(),
            id,
        };
        let reached = match continues {
            Some(continues) => {
                Box::pin(self.continue_child(start.spec, &prompt, continues, resumed, &mut guard))
                    .await?
            }
            None => Box::pin(self.reach(start, resumed, &mut work, &mut guard)).await?,
        };
        let own = work.checkout.as_ref().is_some_and(|c| !c.borrowed);
        // A cancel from here on keeps its checkout's work on its branch.
        if let (Some(isolate), true) = (&isolate, own) {
            guard.keep = Some(Keep {
                work: work.clone(),
                isolate: isolate.clone(),
                agent: agent.clone(),
                parent,
            });
        }
        let (child, outcome, again) = match reached {
            // Started again where it worked: its journal's checkout.
            Reached::Ended(child, outcome) => {
                let again = again.map(|mut spec| {
                    spec.checkout = work.checkout.clone();
                    spec
                });
                (child, Some(outcome), again)
            }
            Reached::Running(child, mut events, sent) => {
                // `reach` has told the guard of `child`.
                if guard.cancel.is_cancelled() {
                    // Cancelled while it was being found or started: the guard
                    // ends it, then keeps its checkout's work.
                    return Ok(Delegated::default());
                }
                let prompt_id = match sent {
                    Prompt::Unsent => Some(self.prompt(child, prompt)),
                    Prompt::Sent(seq) => Some(seq),
                    Prompt::Taken => None,
                };
                let outcome = wait_for_outcome(&mut events, prompt_id).await;
                (child, outcome, None)
            }
        };
        let publisher = Publisher::new(self.bus.clone(), child, parent, &agent);
        let (outcome, checked) = match (&check, outcome) {
            (Some(check), Some(outcome)) => {
                self.checked(child, &mut guard, check, outcome, &work, again, &publisher)
                    .await
            }
            (_, outcome) => (outcome, None),
        };
        // Its outcome is reached: its slot is free before its work merges.
        drop(slot);
        if guard.child.take().is_some() {
            self.stop_session(child);
        }
        guard.keep = None;
        // With a check, only work that passed it merges.
        let gated = check.is_some() && !checked.is_some_and(|c| c.passed);
        let merges = if gated { None } else { outcome.as_ref() };
        let changes = match &isolate {
            Some(isolate) if own => {
                self.bring_back(child, &agent, parent, work, merges, isolate)
                    .await
            }
            _ => None,
        };
        Ok(Delegated {
            outcome,
            changes,
            check: checked,
            session: Some(child),
        })
    }

    /// Continues earlier sub-agent `continues.agent` with `prompt` as a
    /// follow-up: started again from its journal (or, live, told at once).
    /// A call made again by a resumed caller finds the follow-up it had sent:
    /// ended, running, or still to send.
    async fn continue_child(
        &self,
        spec: SessionSpec,
        prompt: &str,
        continues: Continue,
        resumed: bool,
        guard: &mut CancelWithCall,
    ) -> Result<Reached, SessionError> {
        let child = continues.agent;
        let events = self.bus.subscribe_session_terminal(child);
        let records = self.records_of(child).await?;
        let refuse = |why: String| Err(SessionError::Spawn(format!("resume {child}: {why}")));
        match records.first() {
            Some(Record::Header {
                run, parent, agent, ..
            }) if parent.is_some() && *run == Some(continues.run) => {
                if *agent != spec.agent {
                    return refuse(format!(
                        "that sub-agent is a {agent}, not a {}; give subagent_type {agent:?}",
                        spec.agent
                    ));
                }
            }
            _ => return refuse("no sub-agent of this run has that agent_id".into()),
        }
        let sent = match (resumed, follow_up(&records, prompt)) {
            (true, Recorded::Ended(outcome)) => return Ok(Reached::Ended(child, outcome)),
            (true, Recorded::Running) => Prompt::Taken,
            _ => Prompt::Unsent,
        };
        guard.child = Some(child);
        self.resume_session(child, spec).await?;
        Ok(Reached::Running(child, events, sent))
    }

    /// Finds the sub-agent of a resumed call, or starts it: running (with its
    /// events, and whether it still needs the prompt), or already ended.
    /// A sub-agent's checkout, made or found in its journal, goes in `work`.
    async fn reach(
        &self,
        start: Start<'_>,
        resumed: bool,
        work: &mut Work,
        guard: &mut CancelWithCall,
    ) -> Result<Reached, SessionError> {
        let Start {
            mut spec,
            prompt,
            isolate,
            id,
        } = start;
        let found = match (resumed, spec.parent, &spec.tool_call_id, id) {
            (true, Some(parent), Some(call), _) => self.find_child(parent, call).await,
            // One that names its sub-agent (a worker's task taken up again)
            // finds it in its journal.
            (true, None, _, Some(id)) if self.state.journal(id).exists() => {
                Some((id, Whereabouts::Journaled))
            }
            _ => None,
        };
        let (child, events, sent) = match found {
            Some((child, whereabouts)) => {
                guard.child = Some(child);
                // Subscribed before the journal is read: a run that ends after the
                // read is seen as an event, one that ended before is in the journal.
                let events = self.bus.subscribe_session_terminal(child);
                let records = self.records_of(child).await?;
                // A sub-agent named by its caller (a worker's task) works
                // where its caller put it, whatever its journal, written
                // on another machine, says.
                if id.is_none() {
                    *work = isolated::work(&records);
                    spec.checkout = work.checkout.clone();
                }
                match (recorded(&records, prompt), whereabouts) {
                    (Recorded::Ended(outcome), whereabouts) => {
                        guard.child = None;
                        drop(events);
                        if whereabouts != Whereabouts::Journaled {
                            self.stop_session(child);
                        }
                        return Ok(Reached::Ended(child, outcome));
                    }
                    (Recorded::Other, _) => {
                        *work = Work::default();
                        spec.checkout = None;
                        let start = Start {
                            spec,
                            prompt,
                            isolate,
                            id: None,
                        };
                        self.start_child(start, work, guard).await?
                    }
                    (Recorded::Running, Whereabouts::Journaled) => {
                        self.resume_session(child, spec).await?;
                        (child, events, Prompt::Taken)
                    }
                    (Recorded::Unprompted, Whereabouts::Journaled) => {
                        self.resume_session(child, spec).await?;
                        (child, events, Prompt::Unsent)
                    }
                    // A prompt routed to a live sub-agent may not be in its journal
                    // yet: it must not be sent twice.
                    (Recorded::Running, _) | (Recorded::Unprompted, Whereabouts::Prompted) => {
                        (child, events, Prompt::Taken)
                    }
                    (Recorded::Unprompted, Whereabouts::Unprompted) => {
                        (child, events, Prompt::Unsent)
                    }
                }
            }
            None => {
                let start = Start {
                    spec,
                    prompt,
                    isolate,
                    id,
                };
                self.start_child(start, work, guard).await?
            }
        };
        Ok(Reached::Running(child, events, sent))
    }

    /// Starts a new sub-agent with the call's prompt queued, subscribed to its
    /// events before it can publish any, and known to `guard` before it is asked
    /// for: a call cancelled while it starts cancels and stops it (the
    /// Orchestrator takes the start before the cancel), never one it replaced.
    /// With `isolate`, it works in a private checkout made for it first
    /// (which goes in `work`).
    async fn start_child(
        &self,
        start: Start<'_>,
        work: &mut Work,
        guard: &mut CancelWithCall,
    ) -> Result<(SessionId, EventStream, Prompt), SessionError> {
        let Start {
            mut spec,
            prompt,
            isolate,
            id,
        } = start;
        let child = id.unwrap_or_default();
        if let Some(isolate) = isolate.filter(|i| i.wanted != crate::isolation::Wanted::No) {
            self.isolate(child, &mut spec, isolate).await;
            work.checkout = spec.checkout.clone();
        }
        guard.child = Some(child);
        let events = self.bus.subscribe_session_terminal(child);
        let seq = self.stamp();
        let queued = QueuedPrompt {
            seq,
            text: prompt.to_owned(),
            steer: false,
            fails: None,
            background: None,
            spent: None,
            narrow: None,
        };
        let checkout = spec.checkout.clone();
        if let Err(e) = self.start_with(child, spec, Some(queued)).await {
            // Nothing started: a cancel has nobody to stop, and its checkout
            // holds nothing.
            if let Some(checkout) = checkout {
                let _ =
                    tokio::task::spawn_blocking(move || crate::isolation::steps::remove(&checkout))
                        .await;
                work.checkout = None;
            }
            guard.child = None;
            return Err(e);
        }
        Ok((child, events, Prompt::Sent(seq)))
    }

    /// The session that session `parent`'s call `call` started, and where it is.
    /// The sub-agent that call `call` of `parent` placed on a worker, with
    /// this machine's journal of it; `None` when it placed none there.
    pub(crate) async fn remote_child(
        &self,
        parent: SessionId,
        call: &str,
    ) -> Option<(SessionId, Vec<Record>)> {
        let (child, _) = self.find_child(parent, call).await?;
        let records = self.records_of(child).await.ok()?;
        matches!(records.first(), Some(Record::Header { remote: true, .. }))
            .then_some((child, records))
    }

    /// Sub-agent `child`'s journal, everything appended so far written
    /// first; none when it cannot be read.
    async fn records_of(&self, child: SessionId) -> Result<Vec<Record>, SessionError> {
        self.journal.sync().await.map_err(SessionError::Journal)?;
        let path = self.state.journal(child);
        let read = tokio::task::spawn_blocking(move || read_journal(&path)).await;
        Ok(match read {
            Ok(Ok(read)) => read.records,
            _ => Vec::new(),
        })
    }

    pub(super) async fn find_child(
        &self,
        parent: SessionId,
        call: &str,
    ) -> Option<(SessionId, Whereabouts)> {
        ractor::call!(self.orchestrator, |reply| OrchestratorMsg::FindChild {
            parent,
            call: call.to_owned(),
            reply,
        })
        .ok()
        .flatten()
    }
}

/// The outcome of the sub-agent's run: the terminal event naming `prompt` when
/// one was sent, else the first terminal event (a resumed or running run).
async fn wait_for_outcome(events: &mut EventStream, prompt: Option<u64>) -> Option<Outcome> {
    while let Some(event) = events.recv().await {
        let answer = match (&event.kind, prompt) {
            (kind, Some(prompt)) => kind.answer_to(prompt),
            (EventKind::Terminal { outcome, .. }, None) => Some(outcome),
            (_, None) => None,
        };
        if let Some(outcome) = answer {
            return Some(outcome.clone());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::RunStats;

    fn run(prompt: &str) -> Vec<Record> {
        vec![
            Record::RunStarted {
                prompt: 3,
                limits: None,
            },
            Record::Message {
                message: Message::user(prompt),
            },
        ]
    }

    #[test]
    fn a_sub_agent_journal_says_whether_the_call_ended_runs_or_never_began() {
        assert_eq!(recorded(&[], "p"), Recorded::Unprompted);
        assert_eq!(recorded(&run("p"), "p"), Recorded::Running);
        assert_eq!(recorded(&run("q"), "p"), Recorded::Other);
        let finished = Outcome::Completed {
            text: "done".into(),
            truncated: false,
            stats: RunStats::default(),
        };
        let mut ended = run("p");
        ended.push(Record::Terminal {
            outcome: finished.clone(),
        });
        assert_eq!(recorded(&ended, "p"), Recorded::Ended(finished.clone()));
        // A failed check's prompt started another run, not ended yet.
        let mut again = ended.clone();
        again.extend(run("Check `make` failed (exit 2, attempt 1 of 3):\nno"));
        assert_eq!(recorded(&again, "p"), Recorded::Running);
        again.push(Record::Terminal {
            outcome: finished.clone(),
        });
        assert_eq!(recorded(&again, "p"), Recorded::Ended(finished));
    }
}
