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
use super::subjects;
use super::worker::RemoteResult;
use crate::protocol::SessionId;

/// A run's link to its workers.
pub struct Remote {
    client: async_nats::Client,
    js: jetstream::Context,
    key: KeyPair,
    run: SessionId,
    waiting: Arc<Waiting>,
    _results: crate::actors::AbortOnDrop,
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
}

impl Waiting {
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
    /// Joins `servers` for run `run`, its tasks sealed with `key`; `token`
    /// authenticates (`NATS_TOKEN`).
    pub async fn join(
        servers: &[String],
        token: Option<String>,
        run: SessionId,
        key: KeyPair,
    ) -> Result<Self, String> {
        let mut options = async_nats::ConnectOptions::new();
        if let Some(token) = token {
            options = options.token(token);
        }
        let client = options
            .name(format!("orchestrate lead {run}"))
            .retry_on_initial_connect()
            .connect(subjects::addresses(servers)?)
            .await
            .map_err(|e| format!("cannot join {}: {e}", servers.join(",")))?;
        let js = jetstream::new(client.clone());
        let replicas = subjects::replicas(
            servers
                .len()
                .max(1 + client.server_info().connect_urls.len()),
        );
        subjects::ensure_streams(&js, replicas).await?;
        let consumer = subjects::patiently(|| async {
            let results = (js.get_stream(subjects::RESULTS).await)
                .map_err(|e| format!("cannot find the stream {}: {e}", subjects::RESULTS))?;
            let follow = consumer::pull::Config {
                filter_subject: subjects::results(run),
                ack_policy: consumer::AckPolicy::Explicit,
                inactive_threshold: std::time::Duration::from_secs(3600),
                ..Default::default()
            };
            (results.create_consumer(follow).await)
                .map_err(|e| format!("cannot follow the run's results: {e}"))
        })
        .await?;
        let mut messages = consumer
            .messages()
            .await
            .map_err(|e| format!("cannot follow the run's results: {e}"))?;
        let waiting = Arc::new(Waiting::default());
        let deliver = waiting.clone();
        let task = tokio::spawn(async move {
            while let Some(message) = messages.next().await {
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
        });
        Ok(Self {
            client,
            js,
            key,
            run,
            waiting,
            _results: crate::actors::AbortOnDrop(task),
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

    /// Removes what the run left on the servers: its tasks nobody took and
    /// its results (its consumer goes on its own once idle). What cannot be
    /// removed ends with its time to live.
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
        purge(subjects::TASKS, subjects::tasks_of(self.run)).await;
        purge(subjects::RESULTS, subjects::results(self.run)).await;
    }

    /// Places `task` on a worker (one that has every tag it names) and waits
    /// for its result.
    pub async fn place(&self, task: RemoteTask) -> Result<RemoteResult, String> {
        let session = task.session;
        let (tx, rx) = oneshot::channel();
        (self
            .waiting
            .calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner))
        .insert(session, tx);
        let _forget = Forget {
            waiting: &self.waiting,
            session,
        };
        let sealed = seal(&task, &self.key)?;
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(
            async_nats::header::NATS_MESSAGE_ID,
            session.to_string().as_str(),
        );
        let subject = subjects::task(self.run, &task.tags);
        let ack = self
            .js
            .publish_with_headers(subject, headers, sealed.into())
            .await
            .map_err(|e| format!("cannot place the task: {e}"))?;
        ack.await
            .map_err(|e| format!("the task was not taken by the stream: {e}"))?;
        rx.await
            .map_err(|_| "the run's link to its workers closed".to_owned())
    }
}

/// Forgets a call's wait when it ends (answered, or given up on).
struct Forget<'a> {
    waiting: &'a Waiting,
    session: SessionId,
}

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        (self
            .waiting
            .calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner))
        .remove(&self.session);
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
        };
        assert!(waiting.deliver(result.clone()));
        assert_eq!(rx.try_recv().unwrap(), result);
        assert!(!waiting.deliver(result), "a second copy is dropped");
    }
}
