//! The public handle on a running actor tree: start and resume sessions, send
//! prompts, cancel, watch events, shut down, and run Task calls in their
//! sub-agents (`delegate`). Everything behind it is actors.

mod background;
mod delegate;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures::future::BoxFuture;
use ractor::{Actor, ActorRef};
use tokio_util::sync::CancellationToken;

pub use crate::actors::Retained;
use crate::actors::SessionEnv;
use crate::actors::orchestrator::{OrchestratorActor, OrchestratorArgs, OrchestratorMsg};
use crate::actors::supervision::Intensity;
use crate::error::SessionError;
use crate::events::Publisher;
use crate::events::{EventBus, EventStream};
use crate::journal::Journal;
use crate::llm::Provider;
use crate::llm::retry::RetryPolicy;
use crate::protocol::{EventKind, Outcome, RunStats, SessionId};
use crate::session::SessionSpec;
use crate::session::queue::QueuedPrompt;
use crate::state::StateDir;
use crate::task::Launcher;
use crate::tools::permissions::{Approver, DenyAll, PendingQuestion, Questions, Remembered};
use crate::tools::scheduler::DEFAULT_MAX_PARALLEL;

/// Process-wide settings.
#[derive(Debug)]
pub struct RuntimeConfig {
    /// The workspace: the tools work here.
    pub workspace: PathBuf,
    /// Where the run's journals, locks and sockets go; `None`: the workspace's
    /// folder under the XDG folders of this process's environment
    /// ([`crate::state`]).
    pub state: Option<StateDir>,
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
    /// How long a question waits for `orchestrate approve` when the approver
    /// cannot ask anyone (default zero: refused at once).
    pub approval_timeout: std::time::Duration,
    /// Permission rules, applied before each session's mode.
    pub rules: Arc<crate::tools::rules::Rules>,
    /// The hooks every session runs (Claude Code's).
    pub hooks: Arc<crate::hooks::Hooks>,
    /// Folders outside the workspace Read may read in (the person's skills').
    pub read_roots: Vec<PathBuf>,
    /// Where an "always" answer is saved as a rule; `None`: only remembered in
    /// this process.
    pub saver: Option<crate::tools::permissions::RuleSaver>,
    /// The run's MCP servers, each started once and kept running by an actor.
    pub mcp: Vec<crate::mcp::ServerConfig>,
    /// How long an MCP server may take to start and list its tools.
    pub mcp_limit: std::time::Duration,
    /// Variables that hold provider keys besides the built-in names (the
    /// providers' `api_key_env`): kept, with those, out of the environment of the
    /// MCP servers the runtime starts.
    pub key_variables: Vec<String>,
    /// Each read of a journal to start a session from waits for a permit of
    /// this semaphore: a slow disk, for the tests.
    #[cfg(feature = "test-support")]
    pub journal_reads: Option<Arc<tokio::sync::Semaphore>>,
}

impl RuntimeConfig {
    /// Defaults for everything but the workspace and the provider.
    pub fn new(workspace: impl Into<PathBuf>, provider: Arc<dyn Provider>) -> Self {
        Self {
            workspace: workspace.into(),
            state: None,
            provider,
            retry: RetryPolicy::default(),
            restart: Intensity::default(),
            max_parallel_tools: DEFAULT_MAX_PARALLEL,
            approver: Arc::new(DenyAll),
            approval_timeout: std::time::Duration::ZERO,
            rules: Arc::default(),
            hooks: Arc::default(),
            read_roots: Vec::new(),
            saver: None,
            mcp: Vec::new(),
            mcp_limit: crate::mcp::connection::DEFAULT_START_TIMEOUT,
            key_variables: Vec::new(),
            #[cfg(feature = "test-support")]
            journal_reads: None,
        }
    }
}

/// A running actor tree. It derefs to its [`Handle`], and owns the tree's lifetime:
/// [`Runtime::shutdown`] stops it.
#[derive(Debug)]
pub struct Runtime {
    handle: Handle,
    join: tokio::task::JoinHandle<()>,
}

/// A cheap, cloneable handle on a running tree: start sessions, send prompts,
/// cancel, watch events. It is the [`Launcher`] of Task tools.
#[derive(Clone, Debug)]
pub struct Handle {
    orchestrator: ActorRef<OrchestratorMsg>,
    bus: EventBus,
    journal: Journal,
    seq: Arc<AtomicU64>,
    /// Where the run's journals are.
    state: Arc<StateDir>,
    /// Cancelled once the runtime has shut down: nothing waits on it after that.
    closed: CancellationToken,
    /// The run's MCP servers.
    mcp: Arc<crate::mcp::McpHub>,
    /// What the runtime's private checkouts share.
    checkouts: Arc<delegate::Checkouts>,
    /// The background sub-agents, by task id.
    backgrounds: Arc<background::Backgrounds>,
    /// The permission questions waiting for an answer.
    questions: Arc<Questions>,
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
        // Tools resolve paths against a canonical root: a workspace reached through
        // a symlink must not make every path look outside it.
        let workspace = config.workspace.canonicalize().unwrap_or(config.workspace);
        // Made now so that state that cannot be kept is refused here, before any
        // session is started.
        let state = match config.state {
            Some(state) => state,
            None => StateDir::for_workspace(&workspace)
                .map_err(|e| SessionError::Journal(e.to_string()))?,
        };
        state
            .prepare()
            .map_err(|e| SessionError::Journal(e.to_string()))?;
        let stamps = Arc::new(AtomicU64::new(1));
        let questions = Arc::new(Questions::default());
        let env = Arc::new(SessionEnv {
            provider: config.provider,
            workspace,
            private: state
                .private()
                .into_iter()
                .map(|place| place.canonicalize().unwrap_or(place))
                .collect(),
            state: state.clone(),
            bus: bus.clone(),
            journal: journal.clone(),
            retry: config.retry,
            max_parallel_tools: config.max_parallel_tools,
            approver: config.approver,
            remembered: Arc::new(Remembered::default()),
            questions: questions.clone(),
            approval_timeout: config.approval_timeout,
            rules: config.rules,
            hooks: config.hooks,
            read_roots: config.read_roots.into(),
            saver: config.saver,
            stamps: stamps.clone(),
            files: Arc::default(),
            trees: Arc::new(crate::tools::bash::Trees::new(
                state.scratch().join("shadows"),
            )),
            #[cfg(feature = "test-support")]
            journal_reads: config.journal_reads,
        });
        let mcp = Arc::new(crate::mcp::McpHub::new(config.mcp));
        let args = OrchestratorArgs {
            env,
            restart: config.restart,
            mcp: mcp.clone(),
            mcp_limit: config.mcp_limit,
            key_variables: config.key_variables,
        };
        let (orchestrator, join) = Actor::spawn(None, OrchestratorActor, args)
            .await
            .map_err(|e| SessionError::Spawn(e.to_string()))?;
        let handle = Handle {
            checkouts: Arc::default(),
            backgrounds: Arc::default(),
            orchestrator,
            bus,
            journal,
            seq: stamps,
            state: Arc::new(state),
            closed: CancellationToken::new(),
            mcp,
            questions,
        };
        Ok(Self { handle, join })
    }

    /// A handle that outlives borrows of the runtime.
    pub fn handle(&self) -> Handle {
        self.handle.clone()
    }

    /// Stops every session and the Orchestrator, and flushes the journals.
    pub async fn shutdown(self) {
        // Cancelled sub-agents' work still going to their branches first.
        self.handle.checkouts.settle().await;
        self.handle.orchestrator.stop(Some("shutdown".into()));
        let _ = self.join.await;
        // Whatever an MCP server's actor did not get to stop is killed now.
        self.handle.mcp.shutdown();
        self.handle.closed.cancel();
        let _ = self.handle.journal.sync().await;
    }
}

impl Handle {
    /// Where the run's journals, locks and sockets are.
    pub fn state(&self) -> &StateDir {
        &self.state
    }

    /// The run's MCP servers: their state, and the tools a role may use.
    pub fn mcp(&self) -> Arc<crate::mcp::McpHub> {
        self.mcp.clone()
    }

    /// The permission questions waiting for an answer, in the order asked.
    pub fn pending_questions(&self) -> Vec<PendingQuestion> {
        self.questions.pending()
    }

    /// Answers `session`'s question `id` (its only one when `None`) as
    /// `orchestrate approve` does: the id answered, or why none was.
    pub fn answer_question(
        &self,
        session: SessionId,
        id: Option<&str>,
        answer: crate::tools::permissions::Answer,
    ) -> Result<String, String> {
        let by = crate::tools::permissions::By::Approve;
        (self.questions).answer(
            session,
            id,
            crate::tools::permissions::Decision { answer, by },
        )
    }

    /// Subscribes to every event from now on.
    pub fn subscribe(&self) -> EventStream {
        self.bus.subscribe()
    }

    /// Subscribes to every session's lifecycle events from now on (runs, turns,
    /// tool calls, outcomes), none of their progress (text as it streams): for a
    /// caller that follows what sessions do without being woken for every delta
    /// (one that only waits for outcomes: [`Handle::subscribe_terminal`]).
    pub fn subscribe_lifecycle(&self) -> EventStream {
        self.bus.subscribe_lifecycle()
    }

    /// Subscribes to every session's terminal events from now on: the outcomes
    /// of runs, with nothing in between to wake the caller.
    pub fn subscribe_terminal(&self) -> EventStream {
        self.bus.subscribe_terminal()
    }

    /// Subscribes to one session's events from now on.
    pub fn subscribe_session(&self, session: SessionId) -> EventStream {
        self.bus.subscribe_session(session)
    }

    /// Subscribes to one session's lifecycle events from now on, none of its
    /// progress.
    pub fn subscribe_session_lifecycle(&self, session: SessionId) -> EventStream {
        self.bus.subscribe_session_lifecycle(session)
    }

    /// Subscribes to one session's terminal events from now on: the ends of its
    /// runs, and nothing else to wake the caller (a lead's fan-out of ten
    /// thousand Task calls is twenty thousand lifecycle events of its own).
    pub fn subscribe_session_terminal(&self, session: SessionId) -> EventStream {
        self.bus.subscribe_session_terminal(session)
    }

    /// Starts a session; it waits for prompts.
    pub async fn start_session(&self, spec: SessionSpec) -> Result<SessionId, SessionError> {
        self.start_with(SessionId::new(), spec, None).await
    }

    /// Starts a session whose id, `id`, was chosen first (fresh, unused).
    pub async fn start_session_as(
        &self,
        id: SessionId,
        spec: SessionSpec,
    ) -> Result<SessionId, SessionError> {
        self.start_with(id, spec, None).await
    }

    /// Starts session `id` with `prompt` already queued.
    async fn start_with(
        &self,
        id: SessionId,
        spec: SessionSpec,
        prompt: Option<QueuedPrompt>,
    ) -> Result<SessionId, SessionError> {
        ractor::call!(self.orchestrator, |reply| OrchestratorMsg::Start {
            id,
            spec: Box::new(spec),
            prompt,
            reply,
        })
        .map_err(|e| SessionError::Spawn(e.to_string()))?
    }

    /// Starts session `id` again from its journal (written by an earlier process):
    /// its conversation is restored and a run that the journal shows unfinished
    /// carries on. A session already live is left as it is. Returns its id.
    pub async fn resume_session(
        &self,
        id: SessionId,
        spec: SessionSpec,
    ) -> Result<SessionId, SessionError> {
        ractor::call!(self.orchestrator, |reply| OrchestratorMsg::Resume(
            id,
            Box::new(spec),
            reply
        ))
        .map_err(|e| SessionError::Spawn(e.to_string()))?
    }

    /// A publisher of events as session `session` (child of `parent`, role `agent`):
    /// what happened to it outside its actor (a hook the command line ran).
    pub fn publisher(
        &self,
        session: SessionId,
        parent: Option<SessionId>,
        agent: &str,
    ) -> Publisher {
        Publisher::new(self.bus.clone(), session, parent, agent)
    }

    /// A publisher of events as session `session` (child of `parent`, role
    /// `agent`) that also keeps them in its journal: a session that has
    /// started (its journal's header is written, or queued to be, before
    /// these).
    pub(crate) fn journaling_publisher(
        &self,
        session: SessionId,
        parent: Option<SessionId>,
        agent: &str,
    ) -> Publisher {
        let publisher = Publisher::new(self.bus.clone(), session, parent, agent);
        let path = self.state.journal(session);
        let recorder = crate::journal::recorder::Recorder::of_started(self.journal.clone(), path);
        publisher.keeping(Arc::new(recorder))
    }

    /// Where session `session`'s journal is.
    pub(crate) fn journal_path(&self, session: SessionId) -> std::path::PathBuf {
        self.state.journal(session)
    }

    /// Starts the lead's journal of sub-agent `session` of run `run`, which
    /// `spec` describes and which runs on a worker on the tree `checkout`
    /// holds: its header (`remote`), made durable; a publisher that keeps
    /// its events there.
    pub async fn remote_journal(
        &self,
        session: SessionId,
        run: SessionId,
        spec: &SessionSpec,
        checkout: Option<crate::protocol::Checkout>,
    ) -> Result<Publisher, String> {
        let header = crate::journal::Record::Header {
            session,
            agent: spec.agent.clone(),
            model: spec.model.clone(),
            parent: spec.parent,
            tool_call_id: spec.tool_call_id.clone(),
            run: Some(run),
            format: crate::journal::FORMAT,
            checkout,
            remote: true,
        };
        self.journal_records(session, &[header]).await?;
        Ok(self.journaling_publisher(session, spec.parent, &spec.agent))
    }

    /// Appends `records` to session `session`'s journal, together, and
    /// makes them durable.
    pub async fn journal_records(
        &self,
        session: SessionId,
        records: &[crate::journal::Record],
    ) -> Result<(), String> {
        let path = self.state.journal(session);
        self.journal.append_all(&path, records)?;
        self.journal.sync_file(&path).await
    }

    /// Keeps session `session`'s journal in `mirror` too, from now on and
    /// while the guard is held: its syncs then wait for the mirror as well.
    pub fn mirror_journal(
        &self,
        session: SessionId,
        mirror: Arc<dyn crate::journal::Mirror>,
    ) -> crate::journal::Mirrored {
        self.journal.mirror(&self.state.journal(session), mirror)
    }

    /// Appends `events`, told as session `session`'s before or after it ran
    /// (the command line's hooks of the lead), to its journal, which must
    /// exist.
    pub fn journal_events(&self, session: SessionId, events: &[crate::protocol::Event]) {
        use crate::events::Keeper;
        let path = self.state.journal(session);
        let recorder = crate::journal::recorder::Recorder::of_started(self.journal.clone(), path);
        for event in events {
            recorder.keep(event);
        }
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
        self.send(session, text.into(), false)
    }

    /// As [`Handle::prompt`], a slash command's: from the run that takes it
    /// on, the session's calls are narrowed to what `narrow` allows (it only
    /// narrows, and it stays, journaled, as a loaded skill's does).
    pub fn prompt_narrowed(
        &self,
        session: SessionId,
        text: impl Into<String>,
        narrow: crate::tools::narrowing::Narrow,
    ) -> u64 {
        self.send_prompt(session, text.into(), false, None, Some(narrow))
    }

    /// Sends a message to the session's run in progress (`orchestrate steer`): it
    /// joins the conversation at the run's next turn boundary, even when the
    /// model is about to give its final answer; an idle session starts a run with
    /// it. Returns its id, as [`Handle::prompt`] does.
    pub fn steer(&self, session: SessionId, text: impl Into<String>) -> u64 {
        self.send(session, text.into(), true)
    }

    /// The next prompt's stamp: arrival order, shared with cancels.
    fn stamp(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::SeqCst)
    }

    fn send(&self, session: SessionId, text: String, steer: bool) -> u64 {
        self.send_prompt(session, text, steer, None, None)
    }

    /// Sends `text` to `session` as the prompt of a run that fails at once as
    /// `failure` says (its check's attempts are spent); the prompt's id.
    pub(crate) fn fail_run(
        &self,
        session: SessionId,
        text: String,
        failure: crate::session::queue::Failure,
    ) -> u64 {
        self.send_prompt(session, text, false, Some(failure), None)
    }

    fn send_prompt(
        &self,
        session: SessionId,
        text: String,
        steer: bool,
        fails: Option<crate::session::queue::Failure>,
        narrow: Option<crate::tools::narrowing::Narrow>,
    ) -> u64 {
        let seq = self.stamp();
        let sent = self.orchestrator.cast(OrchestratorMsg::Prompt {
            session,
            seq,
            text,
            steer,
            fails,
            narrow,
        });
        if sent.is_err() {
            // The runtime has shut down: whoever waits for this prompt's run must
            // not wait forever.
            let error = SessionError::Shutdown;
            let publisher = Publisher::new(self.bus.clone(), session, None, "orchestrate");
            publisher.publish(EventKind::Terminal {
                prompts: vec![seq],
                outcome: Outcome::failed(&error, String::new(), RunStats::default()),
            });
        }
        seq
    }

    /// Ends the session's current run at its next turn boundary (after what is
    /// streaming or running now), as `stopped`, its partial work kept: a
    /// sub-agent's caller gets that work as its result and goes on.
    pub fn stop_run(&self, session: SessionId) {
        let _ = self.orchestrator.cast(OrchestratorMsg::StopRun(session));
    }

    /// Runs `command` with `bash` as live session `session` would run a Bash
    /// call (its workspace, its permission gate), within `timeout`; `None`
    /// when the session is not running.
    pub(crate) async fn run_check(
        &self,
        session: SessionId,
        command: String,
        bash: Arc<dyn crate::tools::Tool>,
        timeout: std::time::Duration,
        cancel: CancellationToken,
    ) -> Option<crate::actors::session::check::CheckRun> {
        ractor::call!(self.orchestrator, |reply| OrchestratorMsg::Check {
            session,
            command,
            bash,
            timeout,
            cancel,
            reply,
        })
        .ok()
        .flatten()
    }

    /// Cancels the session's current run and drops the prompts queued before now.
    pub fn cancel(&self, session: SessionId) {
        let seq = self.stamp();
        let _ = self
            .orchestrator
            .cast(OrchestratorMsg::Cancel { session, seq });
    }

    /// Whether `session` is busy: a run in progress, or a prompt waiting to
    /// start or join one. A session that ended, or never was, is not.
    pub async fn is_busy(&self, session: SessionId) -> bool {
        ractor::call!(self.orchestrator, OrchestratorMsg::Busy, session).unwrap_or(false)
    }

    /// The prompts waiting for `session`, oldest first (steers for its run
    /// in progress among them).
    pub async fn queued_prompts(&self, session: SessionId) -> Vec<String> {
        ractor::call!(self.orchestrator, OrchestratorMsg::Queued, session).unwrap_or_default()
    }

    /// Drops the prompts waiting for `session`; each one's run ends
    /// `cancelled` (its terminal event names it). The run in progress goes
    /// on. How many were dropped.
    pub async fn clear_queue(&self, session: SessionId) -> usize {
        ractor::call!(self.orchestrator, OrchestratorMsg::ClearQueue, session).unwrap_or(0)
    }

    /// Cancels every session's run in progress, and the prompts waiting, as
    /// [`Handle::cancel`] does for one.
    pub fn cancel_all(&self) {
        let seq = self.stamp();
        let _ = self.orchestrator.cast(OrchestratorMsg::CancelAll { seq });
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
        loop {
            let event = tokio::select! {
                biased;
                event = stream.recv() => event,
                // Shut down: what was published before still counts, then nothing
                // more will come.
                () = self.closed.cancelled() => match stream.try_recv() {
                    Some(event) => Some(event),
                    None => {
                        let error = SessionError::Shutdown;
                        return Some(Outcome::failed(&error, String::new(), RunStats::default()));
                    }
                },
            };
            let event = event?;
            events(&event);
            if let Some(outcome) = event.kind.answer_to(prompt) {
                return Some(outcome.clone());
            }
        }
    }

    /// Crashes the session, for the tests of supervision.
    #[cfg(feature = "test-support")]
    pub fn crash_session(&self, session: SessionId) {
        let _ = self
            .orchestrator
            .cast(OrchestratorMsg::CrashSession(session));
    }

    /// Waits until every journal record appended so far is on disk.
    pub async fn sync_journals(&self) -> Result<(), SessionError> {
        self.journal.sync().await.map_err(SessionError::Journal)
    }

    /// What the runtime holds for its sessions now ([`Retained`]); `None` once
    /// it has shut down.
    pub async fn retained(&self) -> Option<Retained> {
        ractor::call!(self.orchestrator, OrchestratorMsg::Retained).ok()
    }
}

impl Launcher for Handle {
    fn delegate(
        &self,
        delegation: crate::task::Delegation,
    ) -> BoxFuture<'_, Result<crate::task::Delegated, SessionError>> {
        Box::pin(Handle::delegate(self, delegation))
    }

    fn background(&self, job: crate::task::Job) -> BoxFuture<'_, Result<SessionId, SessionError>> {
        Box::pin(self.run_in_background(job))
    }

    fn output(
        &self,
        caller: SessionId,
        task: SessionId,
        wait: Option<std::time::Duration>,
        spent: crate::tools::Spent,
    ) -> BoxFuture<'_, Result<String, crate::error::ToolError>> {
        Box::pin(self.background_output(caller, task, wait, spent))
    }

    fn stop(&self, caller: SessionId, task: SessionId) -> Result<String, crate::error::ToolError> {
        self.stop_background(caller, task)
    }
}
