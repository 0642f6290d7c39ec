//! Talking to models: the [`Provider`] trait, the provider-neutral request, and the
//! pure pieces every provider shares (assembly, retry timing). No actors live here.

pub mod anthropic;
pub mod assembler;
pub mod cassette;
pub mod governor;
pub(crate) mod http;
pub mod openai;
pub mod replay;
pub mod retry;
pub mod sse;

use std::fmt::Debug;
use std::sync::Arc;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::conversation::{AssistantTurn, Message};
use crate::error::LlmError;

/// One model request, provider-neutral.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChatRequest {
    /// The model id to ask.
    pub model: String,
    /// The transcript, system prompt first.
    pub messages: Vec<Message>,
    /// The tools the model may call: shared, since each request of a session, and
    /// each session offering the same tools, carries the same list.
    pub tools: Arc<[ToolSpec]>,
    /// An upper bound on generated tokens, when the caller wants one.
    pub max_tokens: Option<u32>,
    /// Where the request comes from: the session's place in the agent tree and the
    /// turn (`orchestrator/explorer#toolu_02/turn 3`). Record and replay match
    /// requests by it, so parallel scheduling cannot mix them up. Empty if unknown.
    #[serde(default)]
    pub place: String,
}

impl ChatRequest {
    /// What ids made up for calls the provider sent without one derive from: the
    /// place and how long the conversation is, unique within a transcript (a
    /// session's later runs restart their turn numbers) and the same in a replay.
    pub(crate) fn call_id_seed(&self) -> String {
        if self.place.is_empty() {
            return String::new();
        }
        format!("{}@{}", self.place, self.messages.len())
    }
}

/// A tool as offered to a model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// The name the model calls it by.
    pub name: String,
    /// What it does, written for the model.
    pub description: String,
    /// JSON schema of its input.
    pub parameters: serde_json::Value,
}

/// A piece of a turn as it streams in, for progress display.
#[derive(Clone, Debug, PartialEq)]
pub enum StreamDelta {
    /// Visible text.
    Text(String),
    /// Reasoning text.
    Reasoning(String),
    /// A tool call began (its name is known).
    ToolCall {
        /// The tool's name.
        name: String,
    },
    /// The request waits out its endpoint's rate-limit cooldown first.
    RateLimited {
        /// For how long.
        wait: std::time::Duration,
    },
}

/// Receives deltas while a turn streams. Must not block.
pub type DeltaSink<'a> = &'a (dyn Fn(StreamDelta) + Send + Sync);

/// A model provider: turns a [`ChatRequest`] into one assembled [`AssistantTurn`].
///
/// Implementations make exactly one request per call: retrying is the session's
/// decision, made from the error's class.
pub trait Provider: Send + Sync + Debug + 'static {
    /// Streams one turn, reporting deltas to `sink`. Cancelling `cancel` drops the
    /// request and returns [`LlmError::Cancelled`] with what had arrived.
    fn stream_turn<'a>(
        &'a self,
        request: &'a ChatRequest,
        sink: DeltaSink<'a>,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<AssistantTurn, LlmError>>;

    /// One non-streaming request with a fixed timeout.
    fn complete<'a>(
        &'a self,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<AssistantTurn, LlmError>>;
}
