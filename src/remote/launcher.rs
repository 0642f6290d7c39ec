//! A run's Task calls placed on this machine or on a worker: the
//! [`Launcher`] of a run started with `--nats`. Where a sub-agent runs is
//! decided by [`placed`] (pure); one placed remotely is sealed into a
//! [`RemoteTask`], shown on the tree as it starts and ends, holds its
//! `--max-parallel` slot like a local one, and its result comes back as a
//! local sub-agent's would.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::future::BoxFuture;

use super::envelope::{RemoteCheck, RemoteTask};
use super::lead::Remote;
use super::store::Stored;
use super::worker::RemoteResult;
use super::workspace::{Bases, Sending, Sent, fetch_work, fetched_ref};
use crate::error::{SessionError, ToolError};
use crate::events::Publisher;
use crate::isolation::Isolate;
use crate::journal::Record;
use crate::protocol::{Changes, EventKind, Outcome, RunStats, SessionId};
use crate::roles::Placement;
use crate::runtime::Handle;
use crate::task::{Delegated, Delegation, Job, Launcher};

/// The most of a remote sub-agent's journal its lead keeps.
const MAX_KEPT: usize = 64 << 20;

/// Where a sub-agent runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// On this machine.
    Here,
    /// On a worker.
    Worker,
}

/// Where a sub-agent whose role says `placement` runs: `remote_only` (the
/// run's `--remote-only`) sends every one it may to a worker; `any` runs here
/// while this machine has room (`room`), else on a worker; `local_only`
/// says what keeps it on this machine, as a clause ("a resumed sub-agent
/// runs": a resumed or continued sub-agent, one of an isolated one),
/// refusing a sub-agent that must run remotely.
pub fn placed(
    placement: Placement,
    remote_only: bool,
    room: bool,
    local_only: Option<&str>,
) -> Result<Place, String> {
    let wanted = match (placement, remote_only) {
        (Placement::Local, _) => Place::Here,
        (Placement::Remote, _) | (Placement::Any, true) => Place::Worker,
        (Placement::Any, false) if room => Place::Here,
        (Placement::Any, false) => Place::Worker,
    };
    match (wanted, local_only) {
        (Place::Worker, Some(why)) if placement == Placement::Remote || remote_only => Err(
            format!("it must run on a worker, and {why} only on this machine"),
        ),
        (Place::Worker, Some(_)) => Ok(Place::Here),
        (wanted, _) => Ok(wanted),
    }
}

/// What a remote result means to the caller, as a local outcome.
pub fn outcome_of(result: Result<RemoteResult, String>) -> Outcome {
    let stats = RunStats::default();
    let failed = |class: &str, message: String| Outcome::Failed {
        class: class.to_owned(),
        message,
        model: None,
        partial: String::new(),
        stats,
    };
    let result = match result {
        Ok(result) => result,
        Err(why) => return failed("remote", why),
    };
    let text = result.text;
    let outcome = result.outcome.as_str();
    let inner = |prefix: &str| {
        outcome
            .strip_prefix(prefix)
            .and_then(|rest| rest.strip_prefix(" ("))
            .and_then(|rest| rest.strip_suffix(')'))
            .map(str::to_owned)
    };
    match outcome {
        "completed" => Outcome::Completed {
            text,
            truncated: false,
            stats,
        },
        "cancelled" => Outcome::Cancelled {
            partial: text,
            stats,
        },
        "timed_out" => Outcome::TimedOut {
            partial: text,
            stats,
        },
        "refused" => failed(
            "refused",
            format!("worker {} refused it: {text}", result.worker),
        ),
        _ if outcome.starts_with("partial") => Outcome::Partial {
            reason: inner("partial").unwrap_or_else(|| "stopped".into()),
            partial: text,
            stats,
        },
        _ if outcome.starts_with("failed") => {
            failed(&inner("failed").unwrap_or_else(|| "remote".into()), text)
        }
        other => failed("remote", format!("a worker answered {other:?}: {text}")),
    }
}

/// How a run places its sub-agents.
#[derive(Clone, Debug, Default)]
pub struct Placing {
    /// Every sub-agent that may run elsewhere runs on a worker
    /// (`--remote-only`).
    pub remote_only: bool,
    /// Sub-agents this machine runs at once before `any` ones go to workers.
    pub room: usize,
    /// The person's deny rules, which every remote task carries.
    pub deny: Vec<String>,
    /// The person's ask rules, which every remote task carries.
    pub ask: Vec<String>,
    /// When the run's hooks fire for a sub-agent (its tools, its end, its
    /// compactions, its questions): a remote one's worker asks this machine
    /// to run them then.
    pub hooks: Vec<crate::hooks::forward::Shape>,
}

/// Task calls on this machine or on workers.
#[derive(Debug)]
pub struct RemoteLauncher {
    local: Handle,
    remote: Arc<Remote>,
    placing: Placing,
    /// Sub-agents running on this machine now.
    running_here: Arc<AtomicUsize>,
    /// The bases of workspaces the run has sent.
    bases: Bases,
}

impl RemoteLauncher {
    /// Places `local`'s Task calls through `remote`, as `placing` says.
    pub fn new(local: Handle, remote: Arc<Remote>, placing: Placing) -> Self {
        Self {
            local,
            remote,
            placing,
            running_here: Arc::default(),
            bases: Bases::default(),
        }
    }

    async fn on_worker(&self, delegation: Delegation) -> Delegated {
        let Delegation {
            spec,
            prompt,
            cancel,
            slot,
            placement_tags,
            isolate,
            check,
            ..
        } = delegation;
        let session = SessionId::new();
        let run = self.remote.run();
        // A call given up on in any way (not only cancelled: its caller
        // stopped, the run cut short) stops its sub-agent on its worker and
        // lets its snapshot go.
        let mut pending = Pending {
            remote: Some(self.remote.clone()),
            session,
            snapshot: None,
        };
        // Sent nowhere, nothing is sent: no worker would take it.
        if let Err(why) = self.remote.taken(&placement_tags).await {
            pending.remote = None;
            drop(slot);
            let events = self.local.publisher(session, spec.parent, &spec.agent);
            events.publish(EventKind::SessionStarted {
                model: spec.model.clone(),
                resumed: false,
                memory: Vec::new(),
            });
            let outcome = outcome_of(Err(why));
            events.publish(EventKind::Terminal {
                prompts: Vec::new(),
                outcome: outcome.clone(),
            });
            return Delegated {
                outcome: Some(outcome),
                session: Some(session),
                ..Delegated::default()
            };
        }
        // Its parent's tree goes with it.
        let (sent, unsent) = match &isolate {
            Some(isolate) => match self.send(isolate, session, &spec.agent).await {
                Ok(sent) => (Some(sent), None),
                Err(why) => (None, Some(why)),
            },
            None => (None, None),
        };
        pending.snapshot = sent.as_ref().map(|sent| sent.checkout.clone());
        // This machine's record of it: a lead resumed after it died follows
        // it again, and never starts it twice.
        let checkout = sent.as_ref().map(|sent| sent.checkout.clone());
        let events = match self
            .local
            .remote_journal(session, run, &spec, checkout)
            .await
        {
            Ok(events) => events,
            Err(e) => {
                tracing::warn!(%session, error = %e, "a remote sub-agent is not journaled here");
                self.local.publisher(session, spec.parent, &spec.agent)
            }
        };
        events.publish(EventKind::SessionStarted {
            model: spec.model.clone(),
            resumed: false,
            memory: Vec::new(),
        });
        if let Some(why) = unsent {
            events.publish(EventKind::Shared {
                reason: format!(
                    "no workspace sent to its worker ({why}): it starts in an empty folder"
                ),
            });
        }
        // Delegation does not cross machines: a remote sub-agent has no Task.
        let tools = (spec.tools.names().into_iter())
            .filter(|t| !matches!(*t, "Task" | "TaskOutput" | "TaskStop"))
            .map(str::to_owned)
            .collect();
        let mut deny = self.placing.deny.clone();
        deny.extend(spec.deny_rules.iter().map(ToString::to_string));
        let task = RemoteTask {
            run,
            session,
            parent: spec.parent.unwrap_or(run),
            role: spec.agent.clone(),
            system_prompt: spec.system_prompt.to_string(),
            tools: Some(tools),
            max_turns: spec.max_turns,
            prompt,
            permission_mode: spec.permission_mode,
            deny,
            ask: self.placing.ask.clone(),
            tags: placement_tags,
            bash: spec.bash_rules.iter().map(ToString::to_string).collect(),
            expires: super::envelope::now() + super::subjects::TIME_TO_LIVE.as_secs(),
            check: check.as_ref().map(|check| RemoteCheck {
                command: check.command.clone(),
                attempts: check.attempts,
            }),
            workspace: sent.as_ref().map(|sent| sent.workspace.clone()),
            hooks: self.placing.hooks.clone(),
        };
        let placed = self
            .waited(session, &events, &cancel, self.remote.place(task))
            .await;
        // From here its result is in hand: nothing is left to give up.
        pending.remote = None;
        pending.snapshot = None;
        drop(slot);
        let call = Call {
            session,
            agent: &spec.agent,
            parent: spec.parent,
            isolate: isolate.as_ref(),
            checked: check.is_some(),
            checkout: sent.map(|sent| sent.checkout),
            events: &events,
        };
        self.ended(call, placed).await
    }

    /// Follows again sub-agent `child`, placed on a worker by this run
    /// before its lead died, as `records` (this machine's journal of it)
    /// say: its recorded outcome when it ended, else its result when it
    /// comes (waiting in the stream, or still running), brought back as
    /// any remote sub-agent's is.
    async fn reattach(
        &self,
        delegation: Delegation,
        child: SessionId,
        records: &[Record],
    ) -> Delegated {
        let Delegation {
            spec,
            cancel,
            slot,
            isolate,
            check,
            ..
        } = delegation;
        let ended = records.iter().rev().find_map(|r| match r {
            Record::Terminal { outcome } => Some(outcome.clone()),
            _ => None,
        });
        if let Some(outcome) = ended {
            return Delegated {
                outcome: Some(outcome),
                session: Some(child),
                ..Delegated::default()
            };
        }
        let checkout = match records.first() {
            Some(Record::Header { checkout, .. }) => checkout.clone(),
            _ => None,
        };
        let mut pending = Pending {
            remote: Some(self.remote.clone()),
            session: child,
            snapshot: checkout.clone(),
        };
        let events = (self.local).journaling_publisher(child, spec.parent, &spec.agent);
        events.publish(EventKind::SessionStarted {
            model: spec.model.clone(),
            resumed: true,
            memory: Vec::new(),
        });
        let placed = self
            .waited(child, &events, &cancel, self.remote.follow(child))
            .await;
        pending.remote = None;
        pending.snapshot = None;
        drop(slot);
        let call = Call {
            session: child,
            agent: &spec.agent,
            parent: spec.parent,
            isolate: isolate.as_ref(),
            checked: check.is_some(),
            checkout,
            events: &events,
        };
        self.ended(call, placed).await
    }

    /// Sub-agent `session`'s `result` (its placement, or following it
    /// again), the run's hooks run here for it meanwhile (told to
    /// `events`); `None` when its call was cancelled first, and its worker
    /// told to stop it.
    async fn waited(
        &self,
        session: SessionId,
        events: &Publisher,
        cancel: &tokio_util::sync::CancellationToken,
        result: impl std::future::Future<Output = Result<RemoteResult, String>>,
    ) -> Option<Result<RemoteResult, String>> {
        let hooks_here = (!self.placing.hooks.is_empty())
            .then(|| self.remote.hooks_for(session, events.clone()));
        let placed = tokio::select! {
            result = result => Some(result),
            () = cancel.cancelled() => None,
        };
        drop(hooks_here);
        if placed.is_none() {
            self.remote.cancel(session).await;
        }
        placed
    }

    /// What a remote sub-agent's call comes to once its result is in
    /// (`None`: it was cancelled): its outcome told and journaled here, and
    /// its work brought back when it passed its check.
    async fn ended(
        &self,
        call: Call<'_>,
        placed: Option<Result<RemoteResult, String>>,
    ) -> Delegated {
        let (outcome, work, checked) = match placed {
            Some(Ok(mut result)) => {
                let (work, checked) = (result.work.take(), result.check.take());
                (outcome_of(Ok(result)), work, checked)
            }
            Some(Err(why)) => (outcome_of(Err(why)), None, None),
            None => (
                Outcome::Cancelled {
                    partial: String::new(),
                    stats: RunStats::default(),
                },
                None,
                None,
            ),
        };
        // With a check, only work that passed it merges.
        let gated = call.checked && !checked.as_ref().is_some_and(|c| c.passed);
        call.events.publish(EventKind::Terminal {
            prompts: Vec::new(),
            outcome: outcome.clone(),
        });
        // Its conversation, as its workers journaled it, is kept here with
        // its end, together: a lead that dies between them keeps neither.
        let mut records = self.conversation(call.session).await;
        records.push(Record::Terminal {
            outcome: outcome.clone(),
        });
        if let Err(e) = self.local.journal_records(call.session, &records).await {
            tracing::warn!(session = %call.session, error = %e, "a remote sub-agent's end is not journaled here");
        }
        let changes = match (call.checkout, call.isolate) {
            (Some(checkout), Some(isolate)) => {
                let back = Back {
                    session: call.session,
                    agent: call.agent,
                    parent: call.parent,
                    isolate,
                };
                let merges = (!gated).then_some(&outcome);
                self.bring_back(back, checkout, work, merges, call.events)
                    .await
            }
            _ => None,
        };
        Delegated {
            outcome: Some(outcome),
            changes,
            check: checked,
            session: Some(call.session),
        }
    }

    /// Sub-agent `session`'s conversation, as its workers journaled it in
    /// the run's stream: what this machine's journal of it keeps.
    async fn conversation(&self, session: SessionId) -> Vec<Record> {
        let kept = async {
            let lines = self.remote.journal_of(session).await?;
            if lines.len() > MAX_KEPT {
                return Err(format!("its journal is over {MAX_KEPT} bytes"));
            }
            let path = self.local.journal_path(session);
            let read = crate::journal::parse_journal(&path, &lines).map_err(|e| e.to_string())?;
            Ok(super::journals::kept_here(read.records))
        };
        kept.await.unwrap_or_else(|e: String| {
            tracing::warn!(%session, error = %e, "a remote sub-agent's conversation is not kept here");
            Vec::new()
        })
    }

    /// Sends the tree `isolate` names for sub-agent `session`; why it
    /// cannot be sent (no repository, no commit).
    async fn send(
        &self,
        isolate: &Isolate,
        session: SessionId,
        agent: &str,
    ) -> Result<Sent, String> {
        let sending = Sending {
            store: self.remote.store(),
            bases: &self.bases,
            scratch: self.local.state().scratch(),
            leave_out: isolate.private.clone(),
            run: self.remote.run(),
        };
        let branch = crate::isolation::branch_name(isolate.run, agent, session);
        let dest = self.local.state().checkout(session);
        sending.send(&isolate.from, session, dest, branch).await
    }

    /// Brings a remote sub-agent's work back: fetched from its worker's
    /// bundle, then kept on its branch and merged as a private checkout's
    /// work is. Work that cannot be fetched is said, and stays on the
    /// servers until the run ends.
    async fn bring_back(
        &self,
        back: Back<'_>,
        checkout: crate::protocol::Checkout,
        work: Option<Stored>,
        outcome: Option<&Outcome>,
        events: &Publisher,
    ) -> Option<Changes> {
        let Back {
            session,
            agent,
            parent,
            isolate,
        } = back;
        let scratch = self.local.state().scratch();
        let commit = match &work {
            Some(work) => {
                let store = self.remote.store();
                let run = self.remote.run();
                match fetch_work(store, &scratch, run, session, work, &checkout).await {
                    Ok(commit) => Some(commit),
                    Err(reason) => {
                        let kept = format!("{} on the servers until the run ends", work.object);
                        events.publish(EventKind::Unmerged {
                            reason: reason.clone(),
                            checkout: kept.clone(),
                        });
                        // Its snapshot is let go all the same.
                        let _ = tokio::task::spawn_blocking(move || {
                            crate::isolation::steps::remove(&checkout)
                        })
                        .await;
                        return Some(Changes::Unmerged {
                            reason,
                            checkout: kept,
                        });
                    }
                }
            }
            None => None,
        };
        let into = checkout.into.clone();
        let changes = self
            .local
            .bring_back_fetched(
                session,
                agent,
                parent,
                checkout,
                (
                    commit,
                    format!("{} in {}", fetched_ref(session), into.display()),
                ),
                outcome,
                isolate,
            )
            .await;
        // On its branch now (or merged, or nothing): the fetched ref goes,
        // unless bringing it back failed before it was kept.
        if !matches!(changes, Some(Changes::Unmerged { .. })) {
            let name = fetched_ref(session);
            let _ = tokio::task::spawn_blocking(move || {
                crate::git::bundle::delete_ref(&into, &name);
            })
            .await;
        }
        changes
    }
}

/// A remote sub-agent's call not yet answered: dropped so, it tells the
/// sub-agent's worker to stop and lets its snapshot go.
struct Pending {
    /// The link, while the call waits.
    remote: Option<Arc<Remote>>,
    session: SessionId,
    /// Its snapshot, pinned while its work may come back.
    snapshot: Option<crate::protocol::Checkout>,
}

impl Drop for Pending {
    fn drop(&mut self) {
        let (remote, snapshot) = (self.remote.take(), self.snapshot.take());
        if remote.is_none() && snapshot.is_none() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let session = self.session;
        runtime.spawn(async move {
            if let Some(remote) = remote {
                remote.cancel(session).await;
            }
            if let Some(snapshot) = snapshot {
                let _ =
                    tokio::task::spawn_blocking(move || crate::isolation::steps::remove(&snapshot))
                        .await;
            }
        });
    }
}

/// A remote sub-agent's call, as its end needs it.
struct Call<'a> {
    session: SessionId,
    agent: &'a str,
    parent: Option<SessionId>,
    isolate: Option<&'a Isolate>,
    /// It has a check: only work that passed it merges.
    checked: bool,
    /// Its snapshot, when its tree was sent.
    checkout: Option<crate::protocol::Checkout>,
    events: &'a Publisher,
}

/// Whose work is brought back.
struct Back<'a> {
    session: SessionId,
    agent: &'a str,
    parent: Option<SessionId>,
    isolate: &'a Isolate,
}

/// Counts a sub-agent running on this machine while it lives.
struct Here(Arc<AtomicUsize>);

impl Drop for Here {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Launcher for RemoteLauncher {
    fn delegate(&self, delegation: Delegation) -> BoxFuture<'_, Result<Delegated, SessionError>> {
        Box::pin(async move {
            // A call made again by a resumed lead follows the sub-agent it
            // had placed on a worker.
            if delegation.resumed
                && let (Some(parent), Some(call)) =
                    (delegation.spec.parent, delegation.spec.tool_call_id.clone())
                && let Some((child, records)) = self.local.remote_child(parent, &call).await
            {
                return Ok(self.reattach(delegation, child, &records).await);
            }
            let local_only = match &delegation {
                d if d.continues.is_some() => Some("continuing a sub-agent happens"),
                d if d.resumed => Some("a resumed sub-agent runs"),
                d if d.isolate.is_none() => Some("a sub-agent of one in a private checkout runs"),
                _ => None,
            };
            let room = self.running_here.load(Ordering::SeqCst) < self.placing.room;
            let mut place = placed(
                delegation.placement,
                self.placing.remote_only,
                room,
                local_only,
            );
            // One that may run anywhere runs here when no worker would take it.
            if place == Ok(Place::Worker)
                && delegation.placement == Placement::Any
                && !self.placing.remote_only
                && self.remote.taken(&delegation.placement_tags).await.is_err()
            {
                place = Ok(Place::Here);
            }
            match place {
                Ok(Place::Worker) => Ok(self.on_worker(delegation).await),
                Ok(Place::Here) => {
                    self.running_here.fetch_add(1, Ordering::SeqCst);
                    let _here = Here(self.running_here.clone());
                    self.local.delegate(delegation).await
                }
                Err(why) => Ok(Delegated {
                    outcome: Some(Outcome::Failed {
                        class: "placement".into(),
                        message: format!(
                            "the {} sub-agent was not started: {why}",
                            delegation.spec.agent
                        ),
                        model: None,
                        partial: String::new(),
                        stats: RunStats::default(),
                    }),
                    ..Delegated::default()
                }),
            }
        })
    }

    fn background(&self, job: Job) -> BoxFuture<'_, Result<SessionId, SessionError>> {
        // Background sub-agents run on this machine.
        Launcher::background(&self.local, job)
    }

    fn output(
        &self,
        caller: SessionId,
        task: SessionId,
        wait: Option<std::time::Duration>,
        spent: crate::tools::Spent,
    ) -> BoxFuture<'_, Result<String, ToolError>> {
        Launcher::output(&self.local, caller, task, wait, spent)
    }

    fn stop(&self, caller: SessionId, task: SessionId) -> Result<String, ToolError> {
        Launcher::stop(&self.local, caller, task)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sub_agent_is_placed_as_its_role_and_the_run_say() {
        use Placement::{Any, Local, Remote};
        assert_eq!(placed(Local, true, false, None), Ok(Place::Here));
        assert_eq!(placed(Remote, false, true, None), Ok(Place::Worker));
        assert_eq!(placed(Any, false, true, None), Ok(Place::Here));
        assert_eq!(placed(Any, false, false, None), Ok(Place::Worker));
        assert_eq!(placed(Any, true, true, None), Ok(Place::Worker));
        // What only this machine can do keeps `any` here, and refuses `remote`.
        assert_eq!(
            placed(Any, false, false, Some("a resumed sub-agent runs")),
            Ok(Place::Here)
        );
        let why = placed(Remote, false, true, Some("a resumed sub-agent runs")).unwrap_err();
        assert_eq!(
            why,
            "it must run on a worker, and a resumed sub-agent runs only on this machine"
        );
    }

    #[test]
    fn an_outcome_sent_by_a_worker_reads_back_as_itself() {
        let stats = RunStats::default();
        let outcomes = [
            Outcome::Completed {
                text: "done".into(),
                truncated: false,
                stats,
            },
            Outcome::Partial {
                reason: "budget: turns".into(),
                partial: "so far".into(),
                stats,
            },
            Outcome::Failed {
                class: "auth".into(),
                message: "HTTP 401".into(),
                model: None,
                partial: String::new(),
                stats,
            },
            Outcome::Cancelled {
                partial: "half".into(),
                stats,
            },
            Outcome::TimedOut {
                partial: "late".into(),
                stats,
            },
        ];
        for outcome in outcomes {
            let ran = super::super::worker::Ran::of(outcome.clone());
            let back = outcome_of(Ok(RemoteResult {
                run: SessionId::new(),
                session: SessionId::new(),
                outcome: ran.outcome,
                text: ran.text,
                worker: "w".into(),
                work: None,
                check: None,
            }));
            assert_eq!(back, outcome);
        }
    }

    #[test]
    fn a_remote_result_reads_as_the_outcome_a_local_one_would_be() {
        let result = |outcome: &str, text: &str| {
            Ok(RemoteResult {
                run: SessionId::new(),
                session: SessionId::new(),
                outcome: outcome.into(),
                text: text.into(),
                worker: "box:7".into(),
                work: None,
                check: None,
            })
        };
        assert!(matches!(
            outcome_of(result("completed", "done")),
            Outcome::Completed { text, .. } if text == "done"
        ));
        assert!(matches!(
            outcome_of(result("partial (budget: turns)", "so far")),
            Outcome::Partial { reason, partial, .. } if reason == "budget: turns" && partial == "so far"
        ));
        assert!(matches!(
            outcome_of(result("failed (auth)", "HTTP 401")),
            Outcome::Failed { class, message, .. } if class == "auth" && message == "HTTP 401"
        ));
        assert!(matches!(
            outcome_of(result("refused", "too much")),
            Outcome::Failed { class, message, .. } if class == "refused" && message == "worker box:7 refused it: too much"
        ));
        assert!(matches!(
            outcome_of(Err("no link".into())),
            Outcome::Failed { class, .. } if class == "remote"
        ));
        assert!(matches!(
            outcome_of(result("exploded", "?")),
            Outcome::Failed { class, message, .. } if class == "remote" && message.contains("\"exploded\"")
        ));
    }
}
