//! The lead's side: its connection to NATS, the tasks it places (sealed with
//! its key, published once: the message id is the sub-agent's session id)
//! and the results that come back, each handed to the call that waits for it
//! exactly once, however many times a worker publishes it.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};

use async_nats::jetstream::{self, consumer};
use futures::StreamExt;
use nkeys::KeyPair;
use tokio::sync::oneshot;

use super::envelope::{RemoteTask, seal};
use super::store::Store;
use super::subjects;
use super::worker::RemoteResult;
use crate::events::Publisher;
use crate::protocol::SessionId;

/// How long a worker seen to follow a subject is taken to still follow
/// it, and how often a waiting call looks again.
const FOLLOWED_FOR: std::time::Duration = std::time::Duration::from_secs(60);

/// A run's link to its workers.
pub struct Remote {
    client: async_nats::Client,
    js: jetstream::Context,
    key: KeyPair,
    run: SessionId,
    /// The files its tasks' workspaces and their work travel in.
    store: Store,
    waiting: Arc<Waiting>,
    /// The consumer following the run's results.
    follower: String,
    /// The tasks' stream, whose consumers tell which workers follow what.
    tasks: jetstream::stream::Stream,
    /// Task subjects some worker was seen to follow, and when.
    followed: Mutex<HashMap<String, std::time::Instant>>,
    /// The remote sub-agents whose hooks this machine runs now.
    asking: super::hooks::Asking,
    _results: crate::actors::AbortOnDrop,
    /// Answers the hook requests of its workers, when it has hooks for them.
    _hooks: Option<crate::actors::AbortOnDrop>,
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remote")
            .field("run", &self.run)
            .field("lead", &self.key.public_key())
            .finish_non_exhaustive()
    }
}

/// The calls waiting for their sub-agents' results, and the results already
/// handed over (a second copy of one is dropped).
#[derive(Default)]
struct Waiting {
    calls: Mutex<HashMap<SessionId, oneshot::Sender<RemoteResult>>>,
    delivered: Mutex<HashSet<SessionId>>,
    /// Each waiting task's place in the tasks' stream, for the server's word
    /// that no worker will run it.
    placed: Mutex<HashMap<u64, SessionId>>,
    /// The results can no longer come: no call waits for one.
    closed: std::sync::atomic::AtomicBool,
}

impl Waiting {
    /// Every call waiting is told the link is gone (its result cannot come).
    fn close(&self) {
        let mut calls = self.calls.lock().unwrap_or_else(PoisonError::into_inner);
        self.closed.store(true, std::sync::atomic::Ordering::SeqCst);
        calls.clear();
    }

    /// Waits for `session`'s result; `None` once the link has closed.
    fn wait(&self, session: SessionId) -> Option<oneshot::Receiver<RemoteResult>> {
        let mut calls = self.calls.lock().unwrap_or_else(PoisonError::into_inner);
        if self.closed.load(std::sync::atomic::Ordering::SeqCst) {
            return None;
        }
        let (tx, rx) = oneshot::channel();
        calls.insert(session, tx);
        Some(rx)
    }

    /// The session of the task at `sequence` of the tasks' stream.
    fn placed_at(&self, sequence: u64) -> Option<SessionId> {
        (self.placed.lock().unwrap_or_else(PoisonError::into_inner))
            .get(&sequence)
            .copied()
    }

    /// Hands `result` to its call, once; whether it was the first copy.
    fn deliver(&self, result: RemoteResult) -> bool {
        let first = (self
            .delivered
            .lock()
            .unwrap_or_else(PoisonError::into_inner))
        .insert(result.session);
        if !first {
            return false;
        }
        let call =
            (self.calls.lock().unwrap_or_else(PoisonError::into_inner)).remove(&result.session);
        if let Some(call) = call {
            let _ = call.send(result);
        }
        true
    }
}

impl Remote {
    /// Joins `servers` for run `run`, its tasks sealed with `key`, proving
    /// itself with `auth`; runs `hooks` for its sub-agents on workers (none:
    /// none fire for them).
    pub async fn join(
        servers: &[String],
        auth: &super::auth::Auth,
        run: SessionId,
        key: KeyPair,
        hooks: Option<Arc<crate::hooks::Hooks>>,
    ) -> Result<Self, String> {
        // A server that cannot be reached ends the run before it starts.
        let name = format!("orchestrate lead {run}");
        let (client, js, tasks) = subjects::join(servers, auth, name).await?;
        let consumer = subjects::patiently(|| async {
            let results = (js.get_stream(subjects::RESULTS).await)
                .map_err(|e| format!("cannot find the stream {}: {e}", subjects::RESULTS))?;
            // Named, so it is kept on as many servers as the stream: an
            // unnamed consumer lives on one, and dies with it.
            let follow = consumer::pull::Config {
                durable_name: Some(format!("lead-{run}")),
                filter_subject: subjects::results(&key.public_key(), run),
                ack_policy: consumer::AckPolicy::Explicit,
                inactive_threshold: std::time::Duration::from_secs(3600),
                ..Default::default()
            };
            (results.create_consumer(follow).await)
                .map_err(|e| format!("cannot follow the run's results: {e}"))
        })
        .await?;
        let follower = consumer.cached_info().name.clone();
        let store = Store::open(&js).await?;
        let mut messages = consumer
            .messages()
            .await
            .map_err(|e| format!("cannot follow the run's results: {e}"))?;
        // The server's word that no worker will run a task: handed out too
        // often, or ended for good by a worker.
        let advisories = ["MAX_DELIVERIES", "MSG_TERMINATED"]
            .map(|kind| format!("$JS.EVENT.ADVISORY.CONSUMER.{kind}.{}.>", subjects::TASKS));
        let mut given_up = Vec::new();
        for subject in advisories {
            given_up.push(
                (client.subscribe(subject).await)
                    .map_err(|e| format!("cannot follow the run's tasks: {e}"))?,
            );
        }
        let mut given_up = futures::stream::select_all(given_up);
        let asking = super::hooks::Asking::default();
        let hooks = match hooks {
            Some(hooks) => {
                let lead = key.public_key();
                Some(super::hooks::serve(&client, &lead, run, hooks, asking.clone()).await?)
            }
            None => None,
        };
        let waiting = Arc::new(Waiting::default());
        let deliver = waiting.clone();
        let looked_up = js.clone();
        let lead = key.public_key();
        let task = tokio::spawn(async move {
            loop {
                let message = tokio::select! {
                    message = messages.next() => match message {
                        Some(message) => message,
                        None => break,
                    },
                    Some(advisory) = given_up.next() => {
                        let told: serde_json::Value =
                            serde_json::from_slice(&advisory.payload).unwrap_or_default();
                        let session = told["stream_seq"].as_u64().and_then(|s| deliver.placed_at(s));
                        if let Some(session) = session {
                            // A worker that refused it told why first: that
                            // is its result.
                            if let Some(result) = published(&looked_up, &lead, run, session).await {
                                deliver.deliver(result);
                                continue;
                            }
                            deliver.deliver(RemoteResult {
                                run,
                                session,
                                outcome: "failed (remote)".into(),
                                text: "no worker ran it: the workers refused it, or died with it, as often as it may be handed out".into(),
                                worker: String::new(),
                                work: None,
                                check: None,
                            });
                        }
                        continue;
                    }
                };
                let Ok(message) = message else { continue };
                match serde_json::from_slice::<RemoteResult>(&message.payload) {
                    Ok(result) if result.run == run => {
                        deliver.deliver(result);
                    }
                    Ok(_) | Err(_) => {
                        tracing::warn!(subject = %message.subject, "a result that is not this run's");
                    }
                }
                let _ = message.ack().await;
            }
            // The results can no longer come: every call waiting is told.
            deliver.close();
        });
        Ok(Self {
            client,
            js,
            key,
            run,
            store,
            waiting,
            follower,
            tasks,
            followed: Mutex::default(),
            asking,
            _results: crate::actors::AbortOnDrop(task),
            _hooks: hooks,
        })
    }

    /// The payload bytes this link has sent and received (without the
    /// protocol's own).
    pub fn traffic(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        let stats = self.client.statistics();
        (stats.out_bytes.load(Relaxed), stats.in_bytes.load(Relaxed))
    }

    /// The run.
    pub fn run(&self) -> SessionId {
        self.run
    }

    /// The files its tasks' workspaces and their work travel in.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Its lead's public key, which signs its tasks.
    pub fn lead(&self) -> String {
        self.key.public_key()
    }

    /// Runs the run's hooks for remote sub-agent `session` while the guard
    /// is held, telling each run to `events`.
    pub fn hooks_for(&self, session: SessionId, events: Publisher) -> super::hooks::Open {
        self.asking.open(session, events)
    }

    /// Gives up on sub-agent `session`: a worker running it is told to stop
    /// (one that takes it later sees this too), and its task, if no worker
    /// has it yet, goes when its call's wait ends.
    pub async fn cancel(&self, session: SessionId) {
        let subject = subjects::cancel(&self.lead(), self.run, session);
        let sent = async {
            self.js
                .publish(subject, bytes::Bytes::new())
                .await
                .map_err(|e| e.to_string())?
                .await
                .map_err(|e| e.to_string())
        };
        if let Err(e) = sent.await {
            tracing::warn!(%session, error = %e, "cannot tell the workers a sub-agent was cancelled");
        }
    }

    /// Whether some worker takes this run's tasks tagged `tags`; why not.
    pub async fn taken(&self, tags: &[String]) -> Result<(), String> {
        self.followed(&subjects::task(&self.lead(), self.run, tags))
            .await
    }

    /// Whether some worker follows `subject` (a consumer of the tasks'
    /// stream takes it, made by a worker that trusts this lead, of this
    /// protocol, with the task's tags); why not, at once, rather than a task
    /// waiting in the queue for a worker that will never come.
    async fn followed(&self, subject: &str) -> Result<(), String> {
        let seen = |s: &Self| {
            (s.followed.lock().unwrap_or_else(PoisonError::into_inner))
                .get(subject)
                .is_some_and(|at| at.elapsed() < FOLLOWED_FOR)
        };
        if seen(self) || self.follows_now(subject).await? {
            (self.followed.lock().unwrap_or_else(PoisonError::into_inner))
                .insert(subject.to_owned(), std::time::Instant::now());
            return Ok(());
        }
        Err(format!(
            "no worker takes it: none has joined that trusts this lead (start one with `orchestrate worker --join … --trust-lead {}`){}",
            self.lead(),
            match subject.rsplit_once(".tag.") {
                Some((_, set)) => format!(", with the tags {}", set.replace('+', ", ")),
                None => String::new(),
            }
        ))
    }

    /// Whether a consumer of the tasks' stream follows `subject` now.
    async fn follows_now(&self, subject: &str) -> Result<bool, String> {
        let mut consumers = self.tasks.consumers();
        while let Some(info) = consumers.next().await {
            let info = info.map_err(|e| format!("cannot ask which workers follow the run: {e}"))?;
            let config = &info.config;
            let mut filters =
                std::iter::once(&config.filter_subject).chain(&config.filter_subjects);
            if filters.any(|f| subjects::follows(f, subject)) {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Stops the sub-agents still running for the run on workers, and
    /// removes what the run left on the servers: its tasks nobody took, its
    /// results, its files and its consumer. What cannot be removed ends with
    /// its time to live.
    pub async fn finish(&self) {
        let purge = |stream: &'static str, subject: String| async move {
            match self.js.get_stream(stream).await {
                Ok(stream) => {
                    if let Err(e) = stream.purge().filter(subject).await {
                        tracing::warn!(error = %e, "cannot remove the run's messages");
                    }
                }
                Err(e) => tracing::warn!(error = %e, "cannot find the stream"),
            }
        };
        // No worker takes another; those still running somewhere (a run cut
        // short) are stopped, all at once.
        purge(subjects::TASKS, subjects::tasks_of(&self.lead(), self.run)).await;
        let waiting: Vec<SessionId> = (self
            .waiting
            .calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner))
        .keys()
        .copied()
        .collect();
        futures::future::join_all(waiting.into_iter().map(|s| self.cancel(s))).await;
        purge(
            subjects::RESULTS,
            subjects::run_results(&self.lead(), self.run),
        )
        .await;
        purge(
            subjects::JOURNALS,
            subjects::run_journals(&self.lead(), self.run),
        )
        .await;
        if let Ok(results) = self.js.get_stream(subjects::RESULTS).await {
            let _ = results.delete_consumer(&self.follower).await;
        }
        self.store.remove_run(self.run).await;
    }

    /// Places `task` on a worker (one that has every tag it names) and waits
    /// for its result.
    pub async fn place(&self, task: RemoteTask) -> Result<RemoteResult, String> {
        let session = task.session;
        let Some(rx) = self.waiting.wait(session) else {
            return Err("the run's link to its workers closed".into());
        };
        let mut forget = Forget {
            waiting: &self.waiting,
            session,
            queued: None,
        };
        let sealed = seal(&task, &self.key)?;
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(
            async_nats::header::NATS_MESSAGE_ID,
            session.to_string().as_str(),
        );
        let subject = subjects::task(&self.lead(), self.run, &task.tags);
        self.followed(&subject).await?;
        let sealed = bytes::Bytes::from(sealed);
        // Sent again while a cluster elects: the message id keeps one copy.
        let ack = subjects::patiently(|| async {
            let ack = (self.js)
                .publish_with_headers(subject.clone(), headers.clone(), sealed.clone())
                .await
                .map_err(|e| format!("cannot place the task: {e}"))?;
            ack.await
                .map_err(|e| format!("the task was not taken by the stream: {e}"))
        })
        .await?;
        (self
            .waiting
            .placed
            .lock()
            .unwrap_or_else(PoisonError::into_inner))
        .insert(ack.sequence, session);
        forget.queued = Some((self.js.clone(), ack.sequence));
        self.wait(rx, Some(&subject)).await
    }

    /// What the workers of sub-agent `session` wrote of its journal.
    pub async fn journal_of(&self, session: SessionId) -> Result<Vec<u8>, String> {
        super::journals::lines_of(&self.js, &self.lead(), self.run, session).await
    }

    /// Follows sub-agent `session`, placed by an earlier process of this run
    /// (its lead died and was resumed): its result, kept in the stream while
    /// no process waited for it, or still to come.
    pub async fn follow(&self, session: SessionId) -> Result<RemoteResult, String> {
        let Some(rx) = self.waiting.wait(session) else {
            return Err("the run's link to its workers closed".into());
        };
        let _forget = Forget {
            waiting: &self.waiting,
            session,
            queued: None,
        };
        if let Some(result) = published(&self.js, &self.lead(), self.run, session).await {
            return Ok(result);
        }
        self.wait(rx, None).await
    }

    /// Waits for the result `rx` brings. While it waits, some worker must
    /// still follow its task's `subject`: a pool gone for good (its
    /// consumers removed when idle) fails the call.
    async fn wait(
        &self,
        mut rx: oneshot::Receiver<RemoteResult>,
        subject: Option<&str>,
    ) -> Result<RemoteResult, String> {
        let mut watch = tokio::time::interval(FOLLOWED_FOR);
        watch.tick().await;
        loop {
            tokio::select! {
                result = &mut rx => {
                    return result.map_err(|_| "the run's link to its workers closed".to_owned());
                }
                _ = watch.tick(), if subject.is_some() => {
                    if let Some(subject) = subject
                        && let Ok(false) = self.follows_now(subject).await
                    {
                        return Err("no worker takes it any more: every worker that followed this run's tasks has left".into());
                    }
                }
            }
        }
    }
}

/// The result of `run`'s sub-agent `session` already in the results'
/// stream, if there is one.
async fn published(
    js: &jetstream::Context,
    lead: &str,
    run: SessionId,
    session: SessionId,
) -> Option<RemoteResult> {
    let results = js.get_stream(subjects::RESULTS).await.ok()?;
    let subject = subjects::result(lead, run, session);
    let message = results
        .get_last_raw_message_by_subject(&subject)
        .await
        .ok()?;
    serde_json::from_slice(&message.payload).ok()
}

/// Forgets a call's wait when it ends (answered, or given up on: a task
/// no worker has taken yet is then taken out of the queue).
struct Forget<'a> {
    waiting: &'a Waiting,
    session: SessionId,
    /// Where its task is in the tasks' stream.
    queued: Option<(jetstream::Context, u64)>,
}

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        let answered = (self
            .waiting
            .calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner))
        .remove(&self.session)
        .is_none();
        let Some((js, sequence)) = self.queued.take() else {
            return;
        };
        (self
            .waiting
            .placed
            .lock()
            .unwrap_or_else(PoisonError::into_inner))
        .remove(&sequence);
        if !answered && let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Ok(tasks) = js.get_stream(subjects::TASKS).await {
                    let _ = tasks.delete_message(sequence).await;
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_result_reaches_its_call_once() {
        let waiting = Waiting::default();
        let session = SessionId::new();
        let (tx, mut rx) = oneshot::channel();
        waiting.calls.lock().unwrap().insert(session, tx);
        let result = RemoteResult {
            run: SessionId::new(),
            session,
            outcome: "completed".into(),
            text: "done".into(),
            worker: "w".into(),
            work: None,
            check: None,
        };
        assert!(waiting.deliver(result.clone()));
        assert_eq!(rx.try_recv().unwrap(), result);
        assert!(!waiting.deliver(result), "a second copy is dropped");
    }
}
