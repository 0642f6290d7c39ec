//! Falling back to another model: once, when the session's own model does not
//! exist or stays overloaded after its retries, the run carries on with its
//! fallback model in the same conversation, and never goes back.

use std::sync::Arc;
use std::time::Instant;

use super::{Effect, Machine};
use crate::conversation::Message;
use crate::error::LlmError;
use crate::protocol::EventKind;

impl Machine {
    /// Carries the run on with the session's fallback model after `error`
    /// (whose retries are spent), when the session has one it has not used and
    /// the error is one another model may not meet. Returns whether it did.
    pub(super) fn fall_back(&mut self, now: Instant, error: &LlmError) -> bool {
        let Some(reason) = error.fallback_reason() else {
            return false;
        };
        let Some((from, to)) = self.switch_to_fallback() else {
            return false;
        };
        tracing::warn!(session = %self.id, %from, %to, reason, "falling back to another model");
        self.publish(EventKind::ModelFallback {
            from,
            to,
            reason: reason.to_owned(),
        });
        self.begin_turn(now, 1);
        true
    }

    /// Makes the session's fallback model its model, once: the provider it
    /// streams with, its prices and window; a summary model and thinking
    /// blocks of another provider are dropped. Returns the models from and
    /// to, or `None` when it has no fallback (left).
    pub(super) fn switch_to_fallback(&mut self) -> Option<(String, String)> {
        let fallback = self.spec.fallback.clone()?;
        let spec = Arc::make_mut(&mut self.spec);
        let same_provider = match (&spec.provider, &fallback.provider) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        };
        let from = std::mem::replace(&mut spec.model, fallback.model.clone());
        spec.provider = fallback.provider;
        spec.model_info = fallback.model_info;
        spec.fallback = None;
        if !same_provider {
            // Another provider neither knows the summary model nor accepts the
            // first one's thinking signatures.
            spec.summary_model = None;
            spec.summary_window = None;
            for message in &mut self.transcript {
                if let Message::Assistant(message) = message {
                    message.thinking.clear();
                }
            }
        }
        self.emit(Effect::FallBack);
        Some((from, fallback.model))
    }
}
