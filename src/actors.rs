//! The actor tree, on ractor:
//!
//! ```text
//! Orchestrator                     root supervisor, one per process
//! ├── prompt queue (per session)   plain state, not an actor: prompts and cancels
//! └── Session (per conversation)                                         transient
//!     ├── LlmStream                one per model turn                    transient
//!     └── ToolRunner × n           one per tool call                     temporary
//! ```
//!
//! A session's prompt queue is plain state the Orchestrator keeps beside the
//! session, not an actor under it: a crashing ractor actor takes its linked
//! children with it, and a crashing actor loses its mailbox; the queue must outlive
//! a session crash and cannot lose a prompt of its own.
//!
//! Actors are plumbing: the decisions are plain code (a session's are its run
//! machine's, `session::machine`; the restart policy is [`supervision`]),
//! and the actors carry them out. Every parent overrides ractor's default
//! `handle_supervisor_evt`, which would stop the parent whenever any child exits.

pub(crate) mod orchestrator;
pub(crate) mod session;
pub mod supervision;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use crate::events::EventBus;
use crate::journal::Journal;
use crate::llm::Provider;
use crate::llm::retry::RetryPolicy;
use crate::tools::permissions::{Approver, Remembered};

/// What a runtime holds for its sessions: each kind of entry, counted. A
/// session's entries go when it stops; after every session of a run has
/// stopped, all are zero.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Retained {
    /// Live sessions the Orchestrator supervises.
    pub sessions: usize,
    /// Parents whose Task calls' sub-agents are on record.
    pub children: usize,
    /// Paths whose write lock is held or waited for.
    pub file_locks: usize,
    /// Sessions whose reads are on record.
    pub file_reads: usize,
    /// Sessions with an "always" answer on record.
    pub remembered: usize,
    /// Sessions whose events someone subscribed to.
    pub watched: usize,
}

/// What every session of a runtime shares.
#[derive(Debug)]
pub(crate) struct SessionEnv {
    pub(crate) provider: Arc<dyn Provider>,
    pub(crate) workspace: PathBuf,
    /// Where the journals are.
    pub(crate) state: crate::state::StateDir,
    /// The places no tool may reach (the state root, the runtime folder),
    /// canonical.
    pub(crate) private: Arc<[PathBuf]>,
    pub(crate) bus: EventBus,
    pub(crate) journal: Journal,
    pub(crate) retry: RetryPolicy,
    pub(crate) max_parallel_tools: usize,
    pub(crate) approver: Arc<dyn Approver>,
    pub(crate) remembered: Arc<Remembered>,
    /// The questions waiting for an answer.
    pub(crate) questions: Arc<crate::tools::permissions::Questions>,
    /// How long a question nobody can be asked waits for another answer.
    pub(crate) approval_timeout: std::time::Duration,
    pub(crate) rules: Arc<crate::tools::rules::Rules>,
    /// The run's hooks.
    pub(crate) hooks: Arc<crate::hooks::Hooks>,
    /// Folders outside the workspace Read may read in.
    pub(crate) read_roots: Arc<[std::path::PathBuf]>,
    pub(crate) saver: Option<crate::tools::permissions::RuleSaver>,
    /// The process-wide order of prompts and cancels: the next stamp.
    pub(crate) stamps: Arc<AtomicU64>,
    /// What the runtime's file tools share.
    pub(crate) files: Arc<crate::tools::files::FileState>,
    /// The folders its Bash commands ran in, compared before and after each.
    pub(crate) trees: Arc<crate::tools::bash::Trees>,
    /// Each read of a journal to start a session from waits for a permit, for
    /// the tests of an Orchestrator that never waits on the disk.
    #[cfg(feature = "test-support")]
    pub(crate) journal_reads: Option<Arc<tokio::sync::Semaphore>>,
}

/// A spawned task that is aborted when this handle is dropped, so work never
/// outlives the actor that owns it.
#[derive(Debug)]
pub(crate) struct AbortOnDrop(pub(crate) tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The message of a caught panic.
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(ToString::to_string)
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "panic".to_owned())
}
