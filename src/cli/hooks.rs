//! The hooks of the lead's session that the command line runs: `SessionStart`
//! before the first prompt (what they say joins it as context),
//! `UserPromptSubmit` for the person's prompt (a block refuses it; context
//! joins it), and `SessionEnd` once the run is over.

use std::sync::Arc;

use crate::hooks::{Answer, HookEvent, Hooks, Place};
use crate::protocol::SessionId;
use crate::runtime::Handle;

/// The lead's hooks, where it runs.
pub(super) struct LeadHooks {
    hooks: Arc<Hooks>,
    place: Place,
    handle: Handle,
    lead: SessionId,
    agent: String,
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
        Self {
            hooks,
            place,
            handle,
            lead,
            agent: agent.to_owned(),
        }
    }

    /// Runs `event`'s hooks with `fields`, telling each run as the lead's
    /// event; their answers together.
    async fn fire(&self, event: HookEvent, on: Option<&str>, fields: serde_json::Value) -> Answer {
        let tell = |kind| self.handle.publish(self.lead, &self.agent, kind);
        self.hooks.fire(event, on, &self.place, fields, tell).await
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
        let submitted = self
            .fire(
                HookEvent::UserPromptSubmit,
                None,
                serde_json::json!({ "prompt": prompt }),
            )
            .await;
        if let Some(reason) = submitted.block.or(submitted.stop) {
            return Err(format!(
                "a UserPromptSubmit hook refused the prompt: {reason}"
            ));
        }
        context.extend(submitted.context);
        Ok(match context.is_empty() {
            true => prompt,
            false => format!("{prompt}\n\n{}", context.join("\n\n")),
        })
    }

    /// Runs the `SessionEnd` hooks.
    pub(super) async fn end(&self, reason: &str) {
        let fields = serde_json::json!({ "reason": reason });
        self.fire(HookEvent::SessionEnd, None, fields).await;
    }
}
