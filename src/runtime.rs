//! The public handle on a running actor tree: start sessions, send prompts, cancel,
//! watch events, shut down. Everything behind it is actors.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use ractor::{Actor, ActorRef};
use tokio::sync::oneshot;

use crate::actors::orchestrator::{OrchestratorActor, OrchestratorArgs, OrchestratorMsg};
use crate::actors::supervision::Intensity;
use crate::conversation::Message;
use crate::error::SessionError;
use crate::events::{EventBus, EventStream};
use crate::journal::recorder::record_events;
use crate::journal::{Journal, sessions_dir};
use crate::llm::Provider;
use crate::llm::retry::RetryPolicy;
use crate::protocol::{Outcome, SessionId};
use crate::tools::ToolRegistry;
use crate::tools::permissions::{Approver, DenyAll, PermissionMode, Remembered};
use crate::tools::scheduler::DEFAULT_MAX_PARALLEL;

/// The default limit on model turns per run.
pub const DEFAULT_MAX_TURNS: u32 = 50;

/// Process-wide settings.
#[derive(Debug)]
pub struct RuntimeConfig {
    /// The workspace: journals go under `.orchestrate/` here and tools work here.
    pub workspace: PathBuf,
    /// The model provider every session talks to.
    pub provider: Arc<dyn Provider>,
    /// How failed model turns are retried.
    pub retry: RetryPolicy,
    /// How often a crashed session is restarted before its failure escalates.
    pub restart: Intensity,
    /// Concurrency-safe tool calls run at once within one turn, at most.
    pub max_parallel_tools: usize,
    /// Who is asked when a permission mode wants a person's yes (default: nobody,
    /// so those calls are refused).
    pub approver: Arc<dyn Approver>,
}

impl RuntimeConfig {
    /// Defaults for everything but the workspace and the provider.
    pub fn new(workspace: impl Into<PathBuf>, provider: Arc<dyn Provider>) -> Self {
        Self {
            workspace: workspace.into(),
            provider,
            retry: RetryPolicy::default(),
            restart: Intensity::default(),
            max_parallel_tools: DEFAULT_MAX_PARALLEL,
            approver: Arc::new(DenyAll),
        }
    }
}

/// Where a [`FaultPlan`] strikes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultPoint {
    /// When the session is about to start this turn (from 1).
    BeforeTurn(u32),
    /// Right after the session journaled a tool result of this turn.
    AfterToolResult(u32),
    /// Right after the session started a tool call of this turn.
    AfterToolStarted(u32),
}

/// A deliberate fault, for exercising supervision: the session panics at `point`,
/// the first `remaining` times it gets there (restarts included).
#[derive(Debug)]
pub struct FaultPlan {
    /// Where to panic.
    pub point: FaultPoint,
    /// Panics left.
    pub remaining: AtomicU32,
}

impl FaultPlan {
    /// Panic before turn `turn`, `times` times.
    pub fn panic_at(turn: u32, times: u32) -> Arc<Self> {
        Self::new(FaultPoint::BeforeTurn(turn), times)
    }

    /// Panic at `point`, `times` times.
    pub fn new(point: FaultPoint, times: u32) -> Arc<Self> {
        Arc::new(Self {
            point,
            remaining: AtomicU32::new(times),
        })
    }

    /// True (and one fewer left) when the session, now at `here`, must panic.
    /// Panics, as planned, if `here` is the planned point and shots remain.
    pub(crate) fn strike(&self, here: FaultPoint) {
        if self.fire(here) {
            match here {
                FaultPoint::BeforeTurn(turn) => {
                    panic!("injected fault: session panicked at turn {turn}")
                }
                FaultPoint::AfterToolStarted(turn) => {
                    panic!("injected fault: session panicked after starting a tool in turn {turn}")
                }
                FaultPoint::AfterToolResult(turn) => {
                    panic!("injected fault: session panicked after a tool result in turn {turn}")
                }
            }
        }
    }

    fn fire(&self, here: FaultPoint) -> bool {
        here == self.point
            && self
                .remaining
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
    }
}

/// What a session is: its role, model, prompt and tools.
#[derive(Clone, Debug)]
pub struct SessionSpec {
    /// The role's name, shown in events.
    pub agent: String,
    /// The model id.
    pub model: String,
    /// The system prompt.
    pub system_prompt: String,
    /// The tools offered.
    pub tools: ToolRegistry,
    /// Model turns allowed per run.
    pub max_turns: u32,
    /// Messages the conversation starts with (after the system prompt).
    pub history: Vec<Message>,
    /// The parent session, for sub-agents.
    pub parent: Option<SessionId>,
    /// The parent's tool call that spawned this session.
    pub tool_call_id: Option<String>,
    /// Injected faults, for supervision tests.
    pub faults: Option<Arc<FaultPlan>>,
    /// What the session's tools may do without asking.
    pub permission_mode: PermissionMode,
    /// Who serves its model; `None`: the runtime's provider.
    pub provider: Option<Arc<dyn Provider>>,
    /// Its place in the agent tree (`orchestrator/explorer#toolu_02`): the role's
    /// name for a top-level session; a sub-agent's adds its role and the call that
    /// spawned it to its parent's.
    pub place: String,
}

impl SessionSpec {
    /// A session with no tools and default limits.
    pub fn new(
        agent: impl Into<String>,
        model: impl Into<String>,
        system_prompt: impl Into<String>,
    ) -> Self {
        let agent = agent.into();
        Self {
            place: agent.clone(),
            agent,
            model: model.into(),
            system_prompt: system_prompt.into(),
            tools: ToolRegistry::new(),
            max_turns: DEFAULT_MAX_TURNS,
            history: Vec::new(),
            parent: None,
            tool_call_id: None,
            faults: None,
            permission_mode: PermissionMode::Default,
            provider: None,
        }
    }
}

/// What every session of a runtime shares.
#[derive(Debug)]
pub(crate) struct SessionEnv {
    pub(crate) provider: Arc<dyn Provider>,
    pub(crate) workspace: PathBuf,
    pub(crate) bus: EventBus,
    pub(crate) journal: Journal,
    pub(crate) retry: RetryPolicy,
    pub(crate) max_parallel_tools: usize,
    pub(crate) approver: Arc<dyn Approver>,
    pub(crate) remembered: Arc<Remembered>,
}

/// A running actor tree. It derefs to its [`Handle`], and owns the tree's lifetime:
/// [`Runtime::shutdown`] stops it.
#[derive(Debug)]
pub struct Runtime {
    handle: Handle,
    join: tokio::task::JoinHandle<()>,
    /// The journal's recorder of lifecycle events, and what tells it to finish.
    recorder: tokio::task::JoinHandle<()>,
    stop_recorder: oneshot::Sender<()>,
}

/// A cheap, cloneable handle on a running tree: start sessions, send prompts,
/// cancel, watch events. Tools that start sessions (Task) hold one.
#[derive(Clone, Debug)]
pub struct Handle {
    orchestrator: ActorRef<OrchestratorMsg>,
    bus: EventBus,
    journal: Journal,
    seq: Arc<AtomicU64>,
}

impl std::ops::Deref for Runtime {
    type Target = Handle;

    fn deref(&self) -> &Handle {
        &self.handle
    }
}

impl Runtime {
    /// Starts the Orchestrator and the journal writer.
    pub async fn start(config: RuntimeConfig) -> Result<Self, SessionError> {
        let bus = EventBus::new();
        let journal = Journal::start().map_err(|e| SessionError::Journal(e.to_string()))?;
        let lifecycle = bus.subscribe_lifecycle();
        // Tools resolve paths against a canonical root: a workspace reached through
        // a symlink must not make every path look outside it.
        let workspace = config.workspace.canonicalize().unwrap_or(config.workspace);
        // Made now so that a workspace that cannot hold journals is refused here,
        // before any session is started.
        let journals = sessions_dir(&workspace);
        std::fs::create_dir_all(&journals)
            .map_err(|e| SessionError::Journal(format!("{}: {e}", journals.display())))?;
        let env = Arc::new(SessionEnv {
            provider: config.provider,
            workspace,
            bus: bus.clone(),
            journal: journal.clone(),
            retry: config.retry,
            max_parallel_tools: config.max_parallel_tools,
            approver: config.approver,
            remembered: Arc::new(Remembered::default()),
        });
        let args = OrchestratorArgs {
            env,
            restart: config.restart,
        };
        let (stop_recorder, stop) = oneshot::channel();
        let recorder = tokio::spawn(record_events(
            lifecycle,
            journal.clone(),
            args.env.workspace.clone(),
            stop,
        ));
        let (orchestrator, join) = Actor::spawn(None, OrchestratorActor, args)
            .await
            .map_err(|e| SessionError::Spawn(e.to_string()))?;
        let handle = Handle {
            orchestrator,
            bus,
            journal,
            seq: Arc::new(AtomicU64::new(1)),
        };
        Ok(Self {
            handle,
            join,
            recorder,
            stop_recorder,
        })
    }

    /// A handle that outlives borrows of the runtime.
    pub fn handle(&self) -> Handle {
        self.handle.clone()
    }

    /// Stops every session and the Orchestrator, and flushes the journals.
    pub async fn shutdown(self) {
        self.handle.orchestrator.stop(Some("shutdown".into()));
        let _ = self.join.await;
        // Nothing publishes any more: the recorder takes what is queued and ends.
        let _ = self.stop_recorder.send(());
        let _ = self.recorder.await;
        let _ = self.handle.journal.sync().await;
    }
}

impl Handle {
    /// Subscribes to every event from now on.
    pub fn subscribe(&self) -> EventStream {
        self.bus.subscribe()
    }

    /// Subscribes to one session's events from now on.
    pub fn subscribe_session(&self, session: SessionId) -> EventStream {
        self.bus.subscribe_session(session)
    }

    /// Starts a session; it waits for prompts.
    pub async fn start_session(&self, spec: SessionSpec) -> Result<SessionId, SessionError> {
        ractor::call!(self.orchestrator, OrchestratorMsg::Start, Box::new(spec))
            .map_err(|e| SessionError::Spawn(e.to_string()))?
    }

    /// Stops a session once its current run (if any) has ended; it takes no more
    /// prompts. Cancel first to end a run in progress sooner.
    pub fn stop_session(&self, session: SessionId) {
        let _ = self.orchestrator.cast(OrchestratorMsg::Stop(session));
    }

    /// Sends a prompt: it starts a run, or waits in the session's queue while busy.
    ///
    /// Returns the prompt's id: the terminal event of the run that answers it names
    /// it in its `prompts`.
    pub fn prompt(&self, session: SessionId, text: impl Into<String>) -> u64 {
        let seq = self.seq.fetch_add(1, Ordering::SeqCst);
        let _ = self.orchestrator.cast(OrchestratorMsg::Prompt {
            session,
            seq,
            text: text.into(),
        });
        seq
    }

    /// Cancels the session's current run and drops the prompts queued before now.
    pub fn cancel(&self, session: SessionId) {
        let seq = self.seq.fetch_add(1, Ordering::SeqCst);
        let _ = self
            .orchestrator
            .cast(OrchestratorMsg::Cancel { session, seq });
    }

    /// Runs one prompt to its end: subscribes, prompts, and waits for the run's
    /// terminal event (the one that names this prompt, or one that ends the whole
    /// session). `events` sees every event of the session on the way.
    pub async fn run_prompt(
        &self,
        session: SessionId,
        text: impl Into<String>,
        mut events: impl FnMut(&crate::protocol::Event),
    ) -> Option<Outcome> {
        let mut stream = self.bus.subscribe_session(session);
        let prompt = self.prompt(session, text);
        while let Some(event) = stream.recv().await {
            events(&event);
            if let Some(outcome) = event.kind.answer_to(prompt) {
                return Some(outcome.clone());
            }
        }
        None
    }

    /// Waits until every journal record appended so far is on disk.
    pub async fn sync_journals(&self) -> Result<(), SessionError> {
        self.journal.sync().await.map_err(SessionError::Journal)
    }
}
