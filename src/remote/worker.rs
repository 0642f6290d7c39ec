//! A worker: joins NATS, pulls sub-agent tasks from the work-queue stream
//! through durable pull consumers (for each lead it trusts, one for untagged
//! tasks and one per set of its tags; each pulled only with a free slot in
//! hand), at most `slots` in flight, opens each ([`super::envelope`]):
//! one it must refuse is ended for good (`Term`) with a line on why; one it
//! takes is run by its [`Runner`] while its message's ack wait is extended
//! every 10 s, its result published once (the message id is the sub-agent's
//! session id, so a redelivered task's second result is dropped) before the
//! message is acked. Asked to stop, it pulls no more and waits for what it
//! runs up to the drain deadline, handing back (`Nak`) what is left.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, AckKind, consumer};
use futures::StreamExt;
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use super::envelope::{self, RemoteTask};
use super::store::{Store, Stored};
use super::subjects;
use crate::protocol::SessionId;
use crate::task::Checked;
use crate::tools::permissions::PermissionMode;

/// How long the server waits for a task's ack before it delivers it again.
pub const ACK_WAIT: Duration = Duration::from_secs(30);

/// How often a task is delivered at most.
pub const MAX_DELIVER: i64 = 5;

/// How long a consumer no worker pulls from is kept.
pub const IDLE_CONSUMER: Duration = Duration::from_secs(600);

/// How long one pull waits for tasks before it looks for a stop again.
const PULL_FOR: Duration = Duration::from_millis(250);

/// How long past its expiry a pull is waited for before it is given up.
const PULL_GRACE: Duration = Duration::from_secs(2);

/// A task's outcome, as the lead reads it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteResult {
    /// The run.
    pub run: SessionId,
    /// The sub-agent's session.
    pub session: SessionId,
    /// `completed`, `partial`, `failed`, `cancelled`, `timed_out`, or
    /// `refused` (the worker would not run it).
    pub outcome: String,
    /// Its answer, or why it did not give one.
    pub text: String,
    /// The worker that ran it.
    pub worker: String,
    /// Its work, a bundle of one commit on the snapshot of its workspace
    /// (none when it changed nothing, or had no workspace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub work: Option<Stored>,
    /// How its check went, when it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<Checked>,
}

/// What running a task came to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ran {
    /// `completed`, `partial (…)`, `failed (…)`, `cancelled`, `timed_out`.
    pub outcome: String,
    /// Its answer, or why it did not give one.
    pub text: String,
    /// Its work, sent back.
    pub work: Option<Stored>,
    /// How its check went.
    pub check: Option<Checked>,
}

impl Ran {
    /// A local outcome as its lead reads it back
    /// ([`super::launcher::outcome_of`]).
    pub fn of(outcome: crate::protocol::Outcome) -> Self {
        use crate::protocol::Outcome;
        match outcome {
            Outcome::Completed { text, .. } => Self::said("completed", text),
            Outcome::Partial {
                reason, partial, ..
            } => Self::said(format!("partial ({reason})"), partial),
            Outcome::Failed { class, message, .. } => {
                Self::said(format!("failed ({class})"), message)
            }
            Outcome::Cancelled { partial, .. } => Self::said("cancelled", partial),
            Outcome::TimedOut { partial, .. } => Self::said("timed_out", partial),
        }
    }

    /// A task that came to `outcome`, with `text` and no work sent back.
    pub fn said(outcome: impl Into<String>, text: impl Into<String>) -> Self {
        Self {
            outcome: outcome.into(),
            text: text.into(),
            work: None,
            check: None,
        }
    }
}

/// Runs the tasks a worker takes: the same session code as a local run.
pub trait Runner: Send + Sync + 'static {
    /// Runs `task` to its result, reaching its lead through `link`.
    fn run(&self, task: RemoteTask, link: Link) -> BoxFuture<'_, Ran>;
}

/// What a running task reaches its lead through.
pub struct Link {
    /// The files its workspace comes in and its work goes back in.
    pub store: Store,
    /// Its lead, asked to run the run's hooks when they fire for it (none:
    /// the run has no such hooks).
    pub hooks: Option<Arc<dyn crate::hooks::forward::Asker>>,
    /// Its journal in the run's stream, claimed by this worker, with what
    /// earlier workers wrote of it.
    pub journal: super::journals::Taken,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("hooks", &self.hooks)
            .field("journal", &self.journal)
            .finish_non_exhaustive()
    }
}

/// How a worker works.
#[derive(Clone)]
pub struct WorkerConfig {
    /// The servers to join.
    pub servers: Vec<String>,
    /// Tasks run at once, at most.
    pub slots: usize,
    /// Its tags: it takes untagged tasks and those tagged with one of these.
    pub tags: Vec<String>,
    /// The lead keys whose tasks it runs.
    pub trusted: Vec<String>,
    /// The most a task may ask of it.
    pub max_mode: PermissionMode,
    /// How long it waits for the tasks it runs once asked to stop.
    pub drain: Duration,
    /// Its name, in the results it publishes.
    pub name: String,
    /// How long the server waits for a task's ack before delivering it
    /// again (set by the worker that makes the consumers; [`ACK_WAIT`]). A
    /// running task's wait is extended every third of it.
    pub ack_wait: Duration,
    /// What it proves itself with, needed by a server not on this machine.
    pub auth: super::auth::Auth,
}

impl std::fmt::Debug for WorkerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The token is never shown.
        f.debug_struct("WorkerConfig")
            .field("servers", &self.servers)
            .field("slots", &self.slots)
            .field("tags", &self.tags)
            .field("max_mode", &self.max_mode)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// What a worker tells its person, a line at a time (the library never
/// prints: the CLI writes these to stderr).
pub type Say = Arc<dyn Fn(String) + Send + Sync>;

/// When a worker stops: `stop`, it takes no more tasks and drains; `now`
/// (asked again), it hands back what it runs at once.
#[derive(Clone, Debug, Default)]
pub struct Stopping {
    /// Take no more tasks.
    pub stop: CancellationToken,
    /// Hand back what runs, now.
    pub now: CancellationToken,
}

/// Works until `stopping.stop` is cancelled (and what it runs is drained),
/// or the connection cannot be made.
pub async fn work(
    config: WorkerConfig,
    runner: Arc<dyn Runner>,
    stopping: Stopping,
    say: Say,
) -> Result<(), String> {
    let stop = stopping.stop.clone();
    // Joining waits for nothing once asked to stop.
    let joining = async {
        let name = format!("orchestrate worker {}", config.name);
        let (client, js, tasks) = subjects::join(&config.servers, &config.auth, name).await?;
        let mut consumers = Vec::new();
        let mut ack_wait = config.ack_wait;
        for (name, filter) in subjects::consumers(&config.trusted, &config.tags) {
            let config = consumer::pull::Config {
                durable_name: Some(name.clone()),
                filter_subject: filter,
                ack_policy: consumer::AckPolicy::Explicit,
                ack_wait: config.ack_wait,
                max_deliver: MAX_DELIVER,
                // Gone when no worker has pulled from it for a while: a
                // lead then knows nobody takes its tasks.
                inactive_threshold: IDLE_CONSUMER,
                ..Default::default()
            };
            let mut made: consumer::PullConsumer = subjects::patiently(|| async {
                (tasks.get_or_create_consumer(&name, config.clone()).await)
                    .map_err(|e| format!("cannot make the consumer {name}: {e}"))
            })
            .await?;
            // A consumer another worker made keeps its own settings: a task's
            // ack wait is extended by the consumer's, and one that follows
            // other subjects is not this worker's to use.
            let info = made.info().await.map_err(|e| e.to_string())?.clone();
            if info.config.max_deliver != config.max_deliver {
                return Err(format!(
                    "the consumer {name} hands a task out {} times, not {MAX_DELIVER}: remove it (`nats consumer rm`)",
                    info.config.max_deliver
                ));
            }
            if info.config.filter_subject != config.filter_subject {
                return Err(format!(
                    "the consumer {name} follows {:?}, not {:?}: remove it (`nats consumer rm`) or rename the tag",
                    info.config.filter_subject, config.filter_subject
                ));
            }
            ack_wait = ack_wait.min(info.config.ack_wait);
            consumers.push(made);
        }
        let extend = ack_wait / 3;
        // Looked up once: each task asks them whether it was answered.
        let records = subjects::patiently(|| async {
            let results = (js.get_stream(subjects::RESULTS).await).map_err(|e| e.to_string())?;
            let done = (js.get_key_value(subjects::DONE).await).map_err(|e| e.to_string())?;
            let store = Store::open(&js).await?;
            Ok(Records {
                results,
                done,
                store,
            })
        })
        .await?;
        Ok::<_, String>((client, js, consumers, extend, records))
    };
    let (client, js, consumers, extend, records) = tokio::select! {
        joined = joining => joined?,
        () = stop.cancelled() => return Ok(()),
    };
    say(format!(
        "joined {} as {} ({} slots{})",
        config.servers.join(","),
        config.name,
        config.slots,
        match config.tags.as_slice() {
            [] => String::new(),
            tags => format!(", tags {}", tags.join(", ")),
        }
    ));
    let slots = Arc::new(tokio::sync::Semaphore::new(config.slots.max(1)));
    let mut running = tokio::task::JoinSet::new();
    let here: Arc<std::sync::Mutex<std::collections::HashSet<SessionId>>> = Arc::default();
    let drained = CancellationToken::new();
    let config = Arc::new(config);
    // One puller per consumer, each taking a task only with a free slot in
    // hand: no task is pulled that this worker has no room for, and no
    // consumer waits behind another's pull.
    let (taken, mut tasks) = tokio::sync::mpsc::channel(config.slots.max(1));
    let mut pullers = tokio::task::JoinSet::new();
    // Each takes at most its share of the slots at once.
    let share = (config.slots / consumers.len().max(1)).max(1);
    for consumer in consumers {
        let pulling = Pulling {
            consumer,
            share,
            slots: slots.clone(),
            stop: stop.clone(),
            taken: taken.clone(),
            say: say.clone(),
        };
        pullers.spawn(pulling.pull());
    }
    drop(taken);
    loop {
        let (message, permit) = tokio::select! {
            () = stop.cancelled() => break,
            next = tasks.recv() => match next {
                Some(next) => next,
                None => break,
            },
        };
        // What has ended is let go of.
        while running.try_join_next().is_some() {}
        let job = Job {
            js: js.clone(),
            records: records.clone(),
            running: here.clone(),
            extend,
            config: config.clone(),
            runner: runner.clone(),
            say: say.clone(),
            drained: drained.clone(),
        };
        running.spawn(async move {
            job.take(message).await;
            drop(permit);
        });
    }
    // A task pulled as the stop came goes back for another worker; the
    // pullers end on the stop.
    tasks.close();
    while let Some((message, _permit)) = tasks.recv().await {
        let _ = message.ack_with(AckKind::Nak(None)).await;
    }
    while pullers.join_next().await.is_some() {}
    while running.try_join_next().is_some() {}
    if !running.is_empty() {
        say(format!(
            "stopping: waiting up to {}s for {} running task(s)",
            config.drain.as_secs(),
            running.len()
        ));
    }
    let all = async { while running.join_next().await.is_some() {} };
    let drained_in_time = tokio::select! {
        ended = tokio::time::timeout(config.drain, all) => ended.is_ok(),
        () = stopping.now.cancelled() => false,
    };
    if !drained_in_time {
        // What still runs is handed back for another worker.
        drained.cancel();
        while running.join_next().await.is_some() {}
    }
    // What was handed back reaches the server before the worker goes.
    let _ = client.flush().await;
    client.drain().await.map_err(|e| e.to_string())
}

/// One consumer's puller: a free slot first, then a task.
struct Pulling {
    consumer: consumer::PullConsumer,
    /// The most slots it takes for one pull.
    share: usize,
    slots: Arc<tokio::sync::Semaphore>,
    stop: CancellationToken,
    taken: tokio::sync::mpsc::Sender<(jetstream::Message, tokio::sync::OwnedSemaphorePermit)>,
    say: Say,
}

impl Pulling {
    async fn pull(self) {
        while !self.stop.is_cancelled() {
            let first = tokio::select! {
                () = self.stop.cancelled() => return,
                permit = self.slots.clone().acquire_owned() => match permit {
                    Ok(permit) => permit,
                    Err(_) => return,
                },
            };
            // As many more as are free, up to its share: a burst of tasks is
            // pulled in one request.
            let mut permits = vec![first];
            while permits.len() < self.share {
                match self.slots.clone().try_acquire_owned() {
                    Ok(permit) => permits.push(permit),
                    Err(_) => break,
                }
            }
            let batch = self
                .consumer
                .fetch()
                .max_messages(permits.len())
                .expires(PULL_FOR)
                .messages();
            let mut batch = tokio::select! {
                () = self.stop.cancelled() => return,
                batch = batch => match batch {
                    Ok(batch) => batch,
                    Err(e) => {
                        (self.say)(format!("cannot pull tasks: {e}"));
                        drop(permits);
                        tokio::time::sleep(PULL_FOR).await;
                        continue;
                    }
                },
            };
            // Each task that came takes one of the slots; the rest are let go.
            // A pull whose server died never ends on its own: it is given up
            // (what it would still bring is handed out again).
            let given_up = tokio::time::Instant::now() + PULL_FOR + PULL_GRACE;
            while let Ok(Some(message)) = tokio::time::timeout_at(given_up, batch.next()).await {
                let Ok(message) = message else { continue };
                let Some(permit) = permits.pop() else {
                    // More came than asked for: back for another.
                    let _ = message.ack_with(AckKind::Nak(None)).await;
                    continue;
                };
                if let Err(refused) = self.taken.send((message, permit)).await {
                    // The worker stopped taking tasks: back for another.
                    let (message, _permit) = refused.0;
                    let _ = message.ack_with(AckKind::Nak(None)).await;
                    return;
                }
            }
        }
    }
}

/// Takes a session off the ones running here when dropped.
struct Running(
    Arc<std::sync::Mutex<std::collections::HashSet<SessionId>>>,
    SessionId,
);

impl Drop for Running {
    fn drop(&mut self) {
        (self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner))
        .remove(&self.1);
    }
}

/// What a worker does with a task it was handed.
#[derive(Debug, PartialEq)]
enum Admission {
    /// Run it: its task, and the lead it came from.
    Run(Box<RemoteTask>, String),
    /// Refuse it without a word to its lead (its lead cannot be told: it is
    /// not a task, not signed, or not where its lead sent it); `for_good`:
    /// no worker runs it, else another may.
    Refuse { why: String, for_good: bool },
    /// Refuse it and tell its lead why (it asks more than this worker allows).
    TellLead {
        task: Box<RemoteTask>,
        lead: String,
        why: String,
    },
}

/// Whether a worker trusting `trusted` leads, with `max_mode` as its cap,
/// runs the task `payload` that came on `subject`, `now` seconds after the
/// epoch.
fn admit(
    payload: &[u8],
    subject: &str,
    trusted: &[String],
    now: u64,
    max_mode: PermissionMode,
) -> Admission {
    // Sent as a lead this worker follows: signed by that lead, or by nobody
    // this worker runs tasks for (every worker following the subject
    // trusts its lead, so none will run it).
    let sent_as = match subjects::lead_of(subject) {
        Some(lead) if trusted.iter().any(|t| t == lead) => lead,
        _ => {
            return Admission::Refuse {
                why: format!("it came on {subject}, not a lead's this worker follows"),
                for_good: false,
            };
        }
    };
    let task = match envelope::open(payload, &[sent_as.to_owned()], now) {
        Ok((task, _lead)) => task,
        Err(refused) => {
            return Admission::Refuse {
                why: refused.why,
                for_good: true,
            };
        }
    };
    // Published on another run's subject, or for workers with other tags:
    // not where its lead sent it.
    let sent_to = subjects::task(sent_as, task.run, &task.tags);
    if subject != sent_to {
        return Admission::Refuse {
            why: format!("it was sent to {sent_to}"),
            for_good: true,
        };
    }
    if task.permission_mode > max_mode {
        let why = format!(
            "this worker runs tasks up to permission mode {max_mode} (--max-permission-mode), and the task asks for {}",
            task.permission_mode
        );
        return Admission::TellLead {
            task: Box::new(task),
            lead: sent_as.to_owned(),
            why,
        };
    }
    Admission::Run(Box::new(task), sent_as.to_owned())
}

/// Where a worker tells whether a task was answered: the results' stream,
/// and the record of those done.
#[derive(Clone)]
struct Records {
    results: jetstream::stream::Stream,
    done: jetstream::kv::Store,
    /// The files tasks and their work travel in.
    store: Store,
}

/// One task taken from the stream.
struct Job {
    js: jetstream::Context,
    records: Records,
    /// The sessions this worker runs now: a task handed to it again while it
    /// runs it (its ack wait passed in a reconnection) is not run twice.
    running: Arc<std::sync::Mutex<std::collections::HashSet<SessionId>>>,
    /// How often a running task's ack wait is extended.
    extend: Duration,
    config: Arc<WorkerConfig>,
    runner: Arc<dyn Runner>,
    say: Say,
    drained: CancellationToken,
}

impl Job {
    async fn take(self, message: jetstream::Message) {
        let admitted = admit(
            &message.payload,
            message.subject.as_str(),
            &self.config.trusted,
            envelope::now(),
            self.config.max_mode,
        );
        let (task, lead) = match admitted {
            Admission::Run(task, lead) => (*task, lead),
            Admission::Refuse { why, for_good } => {
                (self.say)(format!("refused a task on {}: {why}", message.subject));
                // One another worker may run goes back for it, a little
                // later; the rest no worker runs.
                let end = match for_good {
                    true => AckKind::Term,
                    false => AckKind::Nak(Some(self.extend)),
                };
                let _ = message.ack_with(end).await;
                return;
            }
            Admission::TellLead { task, lead, why } => {
                (self.say)(format!("refused task {}: {why}", task.session));
                let refused = RemoteResult {
                    run: task.run,
                    session: task.session,
                    outcome: "refused".into(),
                    text: why,
                    worker: self.config.name.clone(),
                    work: None,
                    check: None,
                };
                if self.publish(&lead, &refused).await.is_ok() {
                    let _ = message.ack_with(AckKind::Term).await;
                }
                return;
            }
        };
        let session = task.session;
        let first = (self
            .running
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner))
        .insert(session);
        if !first {
            // Running here already: its ack wait is extended, not run twice.
            let _ = message.ack_with(AckKind::Progress).await;
            return;
        }
        let _running = Running(self.running.clone(), session);
        // Handed again after a worker published its result and died before
        // its ack: answered already, it is never run again.
        if self.answered(&lead, &task).await {
            (self.say)(format!("task {session} was answered already"));
            let _ = message.double_ack().await;
            return;
        }
        // Given up on by its lead: told before it runs, or while it does.
        let cancel = subjects::cancel(&lead, task.run, session);
        let mut cancelled = match self.js.client().subscribe(cancel.clone()).await {
            Ok(told) => told,
            Err(e) => {
                (self.say)(format!("cannot follow task {session}'s cancel: {e}"));
                let _ = message.ack_with(AckKind::Nak(None)).await;
                return;
            }
        };
        let given_up = (self.records.results)
            .get_last_raw_message_by_subject(&cancel)
            .await
            .is_ok();
        if given_up {
            (self.say)(format!("task {session} was cancelled by its lead"));
            let _ = message.ack_with(AckKind::Term).await;
            return;
        }
        // Its journal: what a worker that ran it before wrote, and from now
        // on this worker's alone to write.
        // A long journal takes a while to read: the task stays this worker's
        // meanwhile.
        let mut progress = tokio::time::interval(self.extend);
        progress.tick().await;
        let taken = super::journals::take(&self.js, &lead, task.run, session, &self.config.name);
        tokio::pin!(taken);
        let taken = loop {
            tokio::select! {
                taken = &mut taken => break taken,
                _ = progress.tick() => {
                    let _ = message.ack_with(AckKind::Progress).await;
                }
            }
        };
        let taken = match taken {
            Ok(taken) => taken,
            Err(why) => {
                (self.say)(format!("cannot take task {session}'s journal: {why}"));
                let _ = message.ack_with(AckKind::Nak(Some(self.extend))).await;
                return;
            }
        };
        let journal = taken.journal.clone();
        let fenced = journal.fenced();
        let again = match taken.lines.is_empty() {
            true => "",
            false => ", from its journal",
        };
        (self.say)(format!("running task {session} ({}){again}", task.role));
        let hooks = (!task.hooks.is_empty()).then(|| {
            let ask = super::hooks::AskLead::new(self.js.client(), &lead, task.run, session);
            Arc::new(ask) as Arc<dyn crate::hooks::forward::Asker>
        });
        let link = Link {
            store: self.records.store.clone(),
            hooks,
            journal: taken,
        };
        let run = self.runner.run(task.clone(), link);
        tokio::pin!(run);
        let ran = loop {
            tokio::select! {
                ran = &mut run => break ran,
                _ = progress.tick() => {
                    let _ = message.ack_with(AckKind::Progress).await;
                }
                () = self.drained.cancelled() => {
                    (self.say)(format!("handing task {session} back: stopping"));
                    let _ = message.ack_with(AckKind::Nak(None)).await;
                    return;
                }
                Some(_) = cancelled.next() => {
                    // Its session is stopped as the run is dropped.
                    (self.say)(format!("task {session} was cancelled by its lead"));
                    let _ = message.ack_with(AckKind::Term).await;
                    return;
                }
                () = fenced.cancelled() => {
                    // Another worker has it now: this one neither answers
                    // nor acks (the delivery is not its own any more).
                    (self.say)(format!("task {session} moved to another worker: giving it up"));
                    return;
                }
            }
        };
        // Answered only by the worker that still holds its journal.
        if let Err(why) = journal.kept().await {
            (self.say)(format!(
                "task {session} is not this worker's to answer: {why}"
            ));
            return;
        }
        // Published once; tried again while a cluster elects, so a worker
        // that did the work does not hand it back for another to do again.
        let answer = RemoteResult {
            run: task.run,
            session: task.session,
            outcome: ran.outcome,
            text: ran.text,
            worker: self.config.name.clone(),
            work: ran.work,
            check: ran.check,
        };
        let published = subjects::patiently(|| self.publish(&lead, &answer)).await;
        match published {
            Ok(()) => {
                self.done(&task).await;
                let _ = message.double_ack().await;
            }
            Err(why) => {
                (self.say)(format!("cannot publish task {session}'s result: {why}"));
                let _ = message.ack_with(AckKind::Nak(None)).await;
            }
        }
    }

    /// Whether `task`'s result (to lead `lead`) was published already: it is in the results'
    /// stream, or (its run over, the stream emptied) on the record of those
    /// done.
    async fn answered(&self, lead: &str, task: &RemoteTask) -> bool {
        let Records { results, done, .. } = &self.records;
        if let Ok(Some(_)) = done.get(task.session.to_string()).await {
            return true;
        }
        let subject = subjects::result(lead, task.run, task.session);
        results
            .get_last_raw_message_by_subject(&subject)
            .await
            .is_ok()
    }

    /// Records `task` as done, on the record that outlives its run.
    async fn done(&self, task: &RemoteTask) {
        let recorded = (self.records.done)
            .put(task.session.to_string(), bytes::Bytes::from_static(b"1"))
            .await;
        if let Err(e) = recorded {
            tracing::warn!(session = %task.session, error = %e, "not recorded as done");
        }
    }

    /// Publishes `result` to lead `lead` once: its message id is its session's.
    async fn publish(&self, lead: &str, result: &RemoteResult) -> Result<(), String> {
        let body = serde_json::to_vec(result).map_err(|e| e.to_string())?;
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(
            async_nats::header::NATS_MESSAGE_ID,
            result.session.to_string().as_str(),
        );
        let subject = subjects::result(lead, result.run, result.session);
        let ack = self
            .js
            .publish_with_headers(subject, headers, body.into())
            .await
            .map_err(|e| e.to_string())?;
        ack.await.map(|_| ()).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(run: SessionId, mode: PermissionMode) -> RemoteTask {
        RemoteTask {
            run,
            session: SessionId::new(),
            parent: run,
            role: "coder".into(),
            system_prompt: "You are a coder.".into(),
            tools: None,
            max_turns: 5,
            prompt: "go".into(),
            permission_mode: mode,
            deny: Vec::new(),
            ask: Vec::new(),
            tags: Vec::new(),
            bash: Vec::new(),
            expires: 2_000,
            workspace: None,
            hooks: Vec::new(),
            check: None,
        }
    }

    #[test]
    fn a_task_runs_only_where_its_lead_sent_it_and_within_the_workers_cap() {
        let lead = nkeys::KeyPair::new_user();
        let trusted = [lead.public_key()];
        let run = SessionId::new();
        let here = subjects::task(&lead.public_key(), run, &[]);
        let cap = PermissionMode::AcceptEdits;
        let fine = task(run, PermissionMode::Default);
        let sealed = envelope::seal(&fine, &lead).unwrap();
        assert_eq!(
            admit(&sealed, &here, &trusted, 1_000, cap),
            Admission::Run(Box::new(fine), lead.public_key())
        );
        let elsewhere = subjects::task(&lead.public_key(), SessionId::new(), &[]);
        let moved = admit(&sealed, &elsewhere, &trusted, 1_000, cap);
        assert!(
            matches!(moved, Admission::Refuse { for_good: true, .. }),
            "{moved:?}"
        );
        let greedy = envelope::seal(&task(run, PermissionMode::BypassPermissions), &lead).unwrap();
        let told = admit(&greedy, &here, &trusted, 1_000, cap);
        assert!(
            matches!(&told, Admission::TellLead { why, .. } if why.contains("up to permission mode acceptEdits")),
            "{told:?}"
        );
        // A lead this worker does not follow: another worker may run it.
        let other = admit(&sealed, &here, &[], 1_000, cap);
        assert!(
            matches!(
                other,
                Admission::Refuse {
                    for_good: false,
                    ..
                }
            ),
            "{other:?}"
        );
        // Sent as a lead it follows, signed by another: no worker runs it.
        let stranger = nkeys::KeyPair::new_user();
        let forged = envelope::seal(&task(run, PermissionMode::Default), &stranger).unwrap();
        let refused = admit(&forged, &here, &trusted, 1_000, cap);
        assert!(
            matches!(&refused, Admission::Refuse { for_good: true, why } if why.contains("does not trust")),
            "{refused:?}"
        );
    }
}
