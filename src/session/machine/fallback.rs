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
        let (Some(reason), Some(fallback)) = (error.fallback_reason(), self.spec.fallback.clone())
        else {
            return false;
        };
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
        tracing::warn!(session = %self.id, %from, to = %fallback.model, reason, "falling back to another model");
        self.emit(Effect::FallBack);
        self.publish(EventKind::ModelFallback {
            from,
            to: fallback.model,
            reason: reason.to_owned(),
        });
        self.begin_turn(now, 1);
        true
    }
}
