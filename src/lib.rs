//! `orchestrate`: an actor-model orchestrator for LLM coding agents.
//!
//! A [`Runtime`] runs a supervision tree on ractor:
//!
//! ```text
//! Orchestrator                     root supervisor, one per process
//! ├── prompt queue (per session)   plain state, not an actor: prompts and cancels
//! ├── McpServer (per MCP server)   one per configured server                permanent
//! └── Session (per conversation)                                         transient
//!     ├── LlmStream                one per model turn                    transient
//!     └── ToolRunner × n           one per tool call                     temporary
//! ```
//!
//! A session streams each model turn from a [`Provider`] (any OpenAI-compatible server
//! through [`OpenAiClient`]), runs the tool calls (safe ones in parallel, unsafe ones
//! alone, results in call order), loops until the model is done, retries what the
//! [error taxonomy](error) calls retryable, journals every message in the
//! workspace's [state folder](state) (out of the workspace), and comes back from a
//! crash by replaying its journal.
//! What a session decides is a pure state machine ([`session`]); its actor only
//! carries the decisions out. Everything that happens is an [`Event`]; the library
//! never prints. `docs/ARCHITECTURE.md` describes the whole.

#![deny(clippy::print_stdout, clippy::print_stderr)]

pub mod actors;
pub mod cli;
pub mod commands;
pub mod config;
pub mod control;
pub mod conversation;
pub mod error;
pub mod events;
#[cfg(feature = "test-support")]
pub mod faults;
pub mod git;
pub mod hooks;
pub mod isolation;
pub mod journal;
pub mod keys;
pub mod llm;
pub mod mcp;
pub mod memory;
pub mod model_info;
pub mod models;
pub mod procfs;
pub mod protocol;
#[cfg(feature = "nats")]
pub mod remote;
pub mod roles;
pub mod runs;
pub mod runtime;
pub mod session;
pub mod setup;
pub mod skills;
pub mod small_file;
pub mod state;
pub mod task;
pub mod tools;
pub mod ui;

pub use crate::conversation::{
    AssistantMessage, AssistantTurn, FinishReason, Message, ThinkingBlock, ToolCall, ToolResult,
    Usage,
};
pub use crate::error::{ErrorClass, LlmError, ProviderError, SessionError, StreamError, ToolError};
pub use crate::events::{EventBus, EventStream};
#[cfg(feature = "test-support")]
pub use crate::faults::{FaultPlan, FaultPoint};
pub use crate::llm::anthropic::{AnthropicClient, AnthropicConfig};
pub use crate::llm::openai::{OpenAiClient, OpenAiConfig};
pub use crate::llm::retry::RetryPolicy;
pub use crate::llm::{ChatRequest, Provider, ToolSpec};
pub use crate::protocol::{Event, EventKind, Outcome, RunStats, SessionId};
pub use crate::runtime::{Handle, Retained, Runtime, RuntimeConfig};
pub use crate::session::SessionSpec;
pub use crate::tools::{Concurrency, Tool, ToolContext, ToolRegistry};
