//! The hooks of the lead's session that the command line runs: `SessionStart`
//! before the first prompt (what they say joins it as context),
//! `UserPromptSubmit` for the person's prompt (a block refuses it; context
//! joins it), and `SessionEnd` once the run is over. Their runs are told as
//! the lead's `hook_ran` events and held until they can join its journal
//! ([`LeadHooks::journal`]): the first ones run before it has one.

use std::sync::{Arc, Mutex, PoisonError};

use crate::events::{Keeper, Publisher};
use crate::hooks::{Answer, HookEvent, Hooks, Place};
use crate::protocol::{Event, SessionId};
use crate::runtime::Handle;

/// The lead's hooks, where it runs.
pub(super) struct LeadHooks {
    hooks: Arc<Hooks>,
    place: Place,
    handle: Handle,
    lead: SessionId,
    /// Tells each run as the lead's event, and holds it.
    publisher: Publisher,
    /// The runs told and not journaled yet.
    held: Arc<Held>,
}

/// Events told, held for a journal.
#[derive(Debug, Default)]
struct Held(Mutex<Vec<Event>>);

impl Keeper for Held {
    fn keep(&self, event: &Event) {
        let mut held = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        held.push(event.clone());
    }
}

impl LeadHooks {
    /// The hooks of lead `lead` (role `agent`) at `place`.
    pub(super) fn new(
        hooks: Arc<Hooks>,
        place: Place,
        handle: Handle,
        lead: SessionId,
        agent: &str,
    ) -> Self {
        let held = Arc::new(Held::default());
        let publisher = handle.publisher(lead, None, agent).keeping(held.clone());
        Self {
            hooks,
            place,
            handle,
            lead,
            publisher,
            held,
        }
    }

    /// Runs `event`'s hooks with `fields`, telling each run as the lead's
    /// event; their answers together.
    async fn fire(&self, event: HookEvent, on: Option<&str>, fields: serde_json::Value) -> Answer {
        let tell = |kind| self.publisher.publish(kind);
        self.hooks.fire(event, on, &self.place, fields, tell).await
    }

    /// Appends the runs told so far to the lead's journal, once it has one.
    pub(super) fn journal(&self) {
        let held = std::mem::take(&mut *self.held.0.lock().unwrap_or_else(PoisonError::into_inner));
        if !held.is_empty() {
            self.handle.journal_events(self.lead, &held);
        }
    }

    /// The person's `prompt` as the lead is given it: refused (why) by a
    /// `UserPromptSubmit` hook, else with the context the `SessionStart`
    /// (when `starting`, from `source`) and `UserPromptSubmit` hooks add.
    pub(super) async fn prompt(
        &self,
        prompt: String,
        starting: Option<&str>,
    ) -> Result<String, String> {
        let mut context = Vec::new();
        if let Some(source) = starting {
            let started = self
                .fire(
                    HookEvent::SessionStart,
                    Some(source),
                    serde_json::json!({ "source": source }),
                )
                .await;
            context.extend(started.context);
        }
        let tell = |kind| self.publisher.publish(kind);
        let submitted = self.hooks.submit(&self.place, &prompt, tell).await;
        let added = submitted
            .map_err(|reason| format!("a UserPromptSubmit hook refused the prompt: {reason}"))?;
        context.extend(added);
        Ok(crate::hooks::with_context(prompt, &context))
    }

    /// Runs the `SessionEnd` hooks.
    pub(super) async fn end(&self, reason: &str) {
        let fields = serde_json::json!({ "reason": reason });
        self.fire(HookEvent::SessionEnd, None, fields).await;
    }
}
