//! The run's hooks for its sub-agents on workers, run on the lead's
//! machine: a worker asks on `orchestrate.hooks.<lead>.<run>.<session>`
//! ([`AskLead`]), and the lead runs them for a sub-agent it is waiting for
//! now, and for nobody else (`serve`), telling each run on that
//! sub-agent's row as it would a local one's, and answers with what they
//! answered.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;

use super::subjects;
use crate::events::Publisher;
use crate::hooks::Hooks;
use crate::hooks::forward::{Asker, Reply, Request};
use crate::protocol::SessionId;

/// Hook requests a lead runs at once, at most; one past them is refused.
const AT_ONCE: usize = 64;

/// The remote sub-agents a lead runs hooks for now: each one's events.
#[derive(Clone, Debug, Default)]
pub(super) struct Asking(Arc<Mutex<HashMap<SessionId, Publisher>>>);

impl Asking {
    /// Runs hooks for `session` until the guard is dropped, telling their
    /// runs to `events`.
    pub(super) fn open(&self, session: SessionId, events: Publisher) -> Open {
        self.lock().insert(session, events);
        Open(self.clone(), session)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SessionId, Publisher>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn events(&self, session: SessionId) -> Option<Publisher> {
        self.lock().get(&session).cloned()
    }
}

/// A remote sub-agent's hooks, run while it is held.
#[derive(Debug)]
pub struct Open(Asking, SessionId);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.lock().remove(&self.1);
    }
}

/// Answers the hook requests of run `run` of lead `lead` with `hooks`, for
/// the sub-agents `asking` names, until the task is dropped.
pub(super) async fn serve(
    client: &async_nats::Client,
    lead: &str,
    run: SessionId,
    hooks: Arc<Hooks>,
    asking: Asking,
) -> Result<crate::actors::AbortOnDrop, String> {
    let mut requests = (client.subscribe(subjects::run_hooks(lead, run)).await)
        .map_err(|e| format!("cannot answer the run's hook requests: {e}"))?;
    let client = client.clone();
    let at_once = Arc::new(tokio::sync::Semaphore::new(AT_ONCE));
    let task = tokio::spawn(async move {
        // The hooks still running go with the link.
        let mut running = tokio::task::JoinSet::new();
        while let Some(message) = requests.next().await {
            while running.try_join_next().is_some() {}
            let Some(reply) = message.reply.clone() else {
                continue;
            };
            let (client, hooks, asking) = (client.clone(), hooks.clone(), asking.clone());
            let permit = at_once.clone().try_acquire_owned();
            running.spawn(async move {
                let answer = match permit {
                    Ok(_permit) => answer(&hooks, &asking, &message).await,
                    Err(_) => Reply::Refused(format!(
                        "the lead runs {AT_ONCE} hook requests at once, at most"
                    )),
                };
                let body = serde_json::to_vec(&answer).unwrap_or_default();
                if let Err(e) = client.publish(reply, body.into()).await {
                    tracing::warn!(error = %e, "cannot answer a hook request");
                }
            });
        }
    });
    Ok(crate::actors::AbortOnDrop(task))
}

/// What the lead answers one hook request.
async fn answer(hooks: &Arc<Hooks>, asking: &Asking, message: &async_nats::Message) -> Reply {
    let session = subjects::hooks_session(message.subject.as_str());
    let Some((session, events)) = session.and_then(|s| Some((s, asking.events(s)?))) else {
        return Reply::Refused("no sub-agent of this run waits for that one".into());
    };
    let mut request: Request = match serde_json::from_slice(&message.payload) {
        Ok(request) => request,
        Err(e) => return Reply::Refused(format!("the request does not read: {e}")),
    };
    // Only a mode there is goes into the hooks' input.
    match request
        .permission_mode
        .parse::<crate::tools::permissions::PermissionMode>()
    {
        Ok(mode) => request.permission_mode = mode.name().to_owned(),
        Err(_) => {
            let why = format!("no permission mode is named {:?}", request.permission_mode);
            return Reply::Refused(why);
        }
    }
    let tell = |kind| events.publish(kind);
    match hooks.answer(&session.to_string(), request, tell).await {
        Ok(fired) => Reply::Fired(fired),
        Err(why) => Reply::Refused(why),
    }
}

/// Asks a run's lead to run its hooks for one of its sub-agents.
#[derive(Debug)]
pub struct AskLead {
    client: async_nats::Client,
    subject: String,
}

impl AskLead {
    /// Asks lead `lead` through `client`, for sub-agent `session` of run `run`.
    pub fn new(client: async_nats::Client, lead: &str, run: SessionId, session: SessionId) -> Self {
        Self {
            client,
            subject: subjects::hooks(lead, run, session),
        }
    }
}

impl Asker for AskLead {
    fn ask(
        &self,
        request: Request,
        within: Duration,
    ) -> BoxFuture<'_, Result<Vec<crate::hooks::Fired>, String>> {
        Box::pin(async move {
            let body = serde_json::to_vec(&request).map_err(|e| e.to_string())?;
            let asked = async_nats::Request::new()
                .payload(body.into())
                .timeout(Some(within));
            let reply = (self.client)
                .send_request(self.subject.clone(), asked)
                .await
                .map_err(|e| match e.kind() {
                    async_nats::RequestErrorKind::TimedOut => {
                        format!("its lead did not answer within {}s", within.as_secs())
                    }
                    async_nats::RequestErrorKind::NoResponders => {
                        "its lead does not answer (it is gone)".to_owned()
                    }
                    _ => format!("cannot ask its lead: {e}"),
                })?;
            match serde_json::from_slice(&reply.payload) {
                Ok(Reply::Fired(fired)) => Ok(fired),
                Ok(Reply::Refused(why)) => Err(format!("its lead refused: {why}")),
                Err(e) => Err(format!("its lead's answer does not read: {e}")),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::EventBus;
    use crate::protocol::EventKind;

    fn request(subject: String, payload: &serde_json::Value) -> async_nats::Message {
        async_nats::Message {
            subject: subject.into(),
            reply: Some("_INBOX.x".into()),
            payload: serde_json::to_vec(payload).unwrap().into(),
            headers: None,
            status: None,
            description: None,
            length: 0,
        }
    }

    #[tokio::test]
    async fn the_lead_runs_hooks_only_for_a_sub_agent_it_waits_for_and_tells_them_on_its_row() {
        let dir = tempfile::tempdir().unwrap();
        let settings = serde_json::json!({"hooks": {"SubagentStop": [{"hooks": [
            {"type": "command", "command": "cat >> ends.jsonl"}]}]}});
        let (groups, _) = crate::hooks::config::parse(dir.path(), &settings).unwrap();
        let hooks = Arc::new(Hooks::new(groups, dir.path()));
        let (run, waited, other) = (SessionId::new(), SessionId::new(), SessionId::new());
        let asked = serde_json::json!({"event": "SubagentStop", "fields": {"stop_hook_active": false},
            "cwd": "/far", "permission_mode": "default"});
        let asking = Asking::default();
        let bus = EventBus::new();
        let mut seen = bus.subscribe_session(waited);
        let open = asking.open(
            waited,
            Publisher::new(bus.clone(), waited, Some(run), "far"),
        );
        // Another sub-agent's, a forged subject's: nothing runs.
        for subject in [
            subjects::hooks("L", run, other),
            "orchestrate.hooks.L.x.y".into(),
        ] {
            let refused = answer(&hooks, &asking, &request(subject, &asked)).await;
            assert!(matches!(&refused, Reply::Refused(why) if why.contains("no sub-agent")));
        }
        assert!(!dir.path().join("ends.jsonl").exists());
        let ran = answer(
            &hooks,
            &asking,
            &request(subjects::hooks("L", run, waited), &asked),
        )
        .await;
        let Reply::Fired(fired) = ran else {
            panic!("{ran:?}")
        };
        assert_eq!((fired.len(), fired[0].exit_code), (1, Some(0)));
        let ends = std::fs::read_to_string(dir.path().join("ends.jsonl")).unwrap();
        assert!(
            ends.contains(&format!("\"session_id\":\"{waited}\"")),
            "{ends}"
        );
        let told = seen.recv().await.unwrap();
        assert!(matches!(&told.kind, EventKind::HookRan { event, .. } if event == "SubagentStop"));
        // A mode there is not is refused.
        let mut godly = asked.clone();
        godly["permission_mode"] = "godMode".into();
        let refused = answer(
            &hooks,
            &asking,
            &request(subjects::hooks("L", run, waited), &godly),
        )
        .await;
        assert!(matches!(&refused, Reply::Refused(why) if why.contains("godMode")));
        // Once its call has its result, it is nobody's.
        drop(open);
        let late = answer(
            &hooks,
            &asking,
            &request(subjects::hooks("L", run, waited), &asked),
        )
        .await;
        assert!(matches!(late, Reply::Refused(_)));
    }
}
