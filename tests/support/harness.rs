//! Helpers that start a [`Runtime`] against a [`MockLlm`] and drive runs to their
//! end, never waiting forever.
#![allow(dead_code, unreachable_pub)]

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use orchestrate::{
    Concurrency, Event, EventKind, EventStream, OpenAiClient, OpenAiConfig, Outcome, Runtime,
    RuntimeConfig, SessionId, SessionSpec, Tool, ToolContext, ToolError, ToolRegistry,
};
use serde_json::{Value, json};
use tokio::sync::Barrier;

use super::mock_llm::{Gate, MockLlm};

/// No test waits longer than this for anything.
pub const DEADLINE: Duration = Duration::from_secs(30);

/// The key tests send; it must never show up anywhere but the Authorization header.
pub const TEST_KEY: &str = "sk-test-0123456789-secret";

/// The lines a child's standard output gives.
pub type Lines = tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>;

/// Starts `command` (the binary with `--json`): the child and its event lines.
pub fn spawn_json(command: &mut tokio::process::Command) -> (tokio::process::Child, Lines) {
    use tokio::io::AsyncBufReadExt;
    let mut child = command
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    (child, lines)
}

/// Sends `op` to the live run of the state folder `state`: its reply.
pub async fn control(
    state: &orchestrate::state::StateDir,
    op: &orchestrate::control::Op,
) -> orchestrate::control::Reply {
    let (_, socket) = orchestrate::control::live_sockets(state).await.remove(0);
    orchestrate::control::request(&socket, op).await.unwrap()
}

/// The state folder of `workspace` when it is also `$HOME` (as the tests that run
/// the binary make it) with no XDG variable set: the runtimes the tests start
/// keep their journals there too.
pub fn state(workspace: &Path) -> orchestrate::state::StateDir {
    let workspace = workspace.canonicalize().unwrap();
    orchestrate::state::StateDir::at(&workspace.join(".local/state/orchestrate"), &workspace)
}

/// Makes a FIFO at `path`: opening it to read waits for a writer that never comes.
pub fn fifo(path: &Path) {
    rustix::fs::mknodat(
        rustix::fs::CWD,
        path,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
}

/// A client for the mock with a short idle timeout.
pub fn client(mock: &MockLlm, idle: Duration) -> Arc<OpenAiClient> {
    let mut config = OpenAiConfig::new(mock.base_url(), Some(TEST_KEY.to_owned()));
    config.idle_timeout = idle;
    Arc::new(OpenAiClient::new(config).unwrap())
}

/// An Anthropic client for the mock (whose API root is its host) with a short idle
/// timeout.
pub fn anthropic_client(mock: &MockLlm, idle: Duration) -> Arc<orchestrate::AnthropicClient> {
    let root = mock.base_url().trim_end_matches("/v1").to_owned();
    let mut config = orchestrate::AnthropicConfig::new(root, Some(TEST_KEY.to_owned()));
    config.idle_timeout = idle;
    Arc::new(orchestrate::AnthropicClient::new(config).unwrap())
}

/// A runtime on the mock with fast retries (10 ms base backoff).
pub async fn runtime(mock: &MockLlm, workspace: &Path) -> Runtime {
    runtime_with(mock, workspace, Duration::from_secs(5)).await
}

/// A runtime on the mock with the given idle timeout.
pub async fn runtime_with(mock: &MockLlm, workspace: &Path, idle: Duration) -> Runtime {
    let mut config = RuntimeConfig::new(workspace, client(mock, idle));
    config.state = Some(state(workspace));
    config.retry.base_delay = Duration::from_millis(10);
    config.restart.backoff_base = Duration::from_millis(10);
    Runtime::start(config).await.unwrap()
}

/// A spec offering `tools`, with every tool allowed to run.
pub fn spec(tools: ToolRegistry) -> SessionSpec {
    let mut spec = SessionSpec::new("tester", "mock-model", "You are a test agent.");
    spec.tools = tools;
    // Tests of other behaviours run their tools unasked; tests/permissions.rs sets
    // the modes it checks.
    spec.permission_mode = orchestrate::tools::permissions::PermissionMode::BypassPermissions;
    spec
}

/// Prompts a session and collects its events up to the run's terminal event.
pub async fn run(runtime: &Runtime, session: SessionId, prompt: &str) -> (Outcome, Vec<Event>) {
    let mut stream = runtime.subscribe();
    runtime.prompt(session, prompt);
    until_terminal(&mut stream, session).await
}

/// Collects a session's events up to its next terminal event.
pub async fn until_terminal(stream: &mut EventStream, session: SessionId) -> (Outcome, Vec<Event>) {
    let mut events = Vec::new();
    let collect = async {
        while let Some(event) = stream.recv().await {
            if event.session != session {
                continue;
            }
            let terminal = match &event.kind {
                EventKind::Terminal { outcome, .. } => Some(outcome.clone()),
                _ => None,
            };
            events.push(event);
            if let Some(outcome) = terminal {
                return outcome;
            }
        }
        panic!("the event bus closed before the run ended");
    };
    let outcome = tokio::time::timeout(DEADLINE, collect)
        .await
        .expect("the run did not end in time");
    (outcome, events)
}

/// Waits for the first event of `session` that `pred` accepts.
pub async fn wait_for(
    stream: &mut EventStream,
    session: SessionId,
    mut pred: impl FnMut(&EventKind) -> bool,
) -> Event {
    let find = async {
        while let Some(event) = stream.recv().await {
            if event.session == session && pred(&event.kind) {
                return event;
            }
        }
        panic!("the event bus closed");
    };
    tokio::time::timeout(DEADLINE, find)
        .await
        .expect("the event never came")
}

/// The names of the tools a recorded request offered, in order.
pub fn tool_names(request: &super::mock_llm::Recorded) -> Vec<String> {
    request.body["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// The tool results a recorded request carried, in order: `(call id, content)`.
pub fn tool_results(request: &super::mock_llm::Recorded) -> Vec<(String, String)> {
    request.body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            let text = |key: &str| m[key].as_str().unwrap_or_default().to_owned();
            (text("tool_call_id"), text("content"))
        })
        .collect()
}

/// The final text of a finished run, or a panic naming what happened instead.
pub fn finished_text(outcome: &Outcome) -> &str {
    match outcome {
        Outcome::Completed { text, .. } => text,
        other => panic!("expected a finished run, got {other:?}"),
    }
}

/// One recorded tool invocation.
#[derive(Clone, Debug)]
pub struct Invocation {
    pub input: Value,
    /// How many calls of the tool were running when this one started, itself
    /// included.
    pub running: usize,
}

/// A test tool: `lookup {city}` answers `"<city>: 12°C"`. It records each call as it
/// starts, with how many calls were running then, and may make calls wait first (see
/// [`Lookup::held`] and [`Lookup::meeting`]); nothing in it depends on time.
#[derive(Clone, Debug)]
pub struct Lookup {
    safe: bool,
    wait: Wait,
    calls: Arc<Mutex<Vec<Invocation>>>,
    running: Arc<AtomicUsize>,
}

/// What a [`Lookup`] call waits for before it answers.
#[derive(Clone, Debug)]
enum Wait {
    /// Nothing; it only yields once, so that calls running beside it get to start.
    Nothing,
    /// Until the test opens the gate.
    Gate(Gate),
    /// The first `calls` calls wait here until all of them have arrived, which they
    /// only can if they run at the same time; later calls pass.
    Barrier { barrier: Arc<Barrier>, calls: usize },
}

/// Counts a call as running until it is dropped (answered, or cut off).
struct Running(Arc<AtomicUsize>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Lookup {
    /// A lookup that answers at once; `safe` lets its calls run in parallel.
    pub fn new(safe: bool) -> Self {
        Self::waiting(safe, Wait::Nothing)
    }

    /// A lookup whose every call waits until `gate` opens.
    pub fn held(safe: bool, gate: Gate) -> Self {
        Self::waiting(safe, Wait::Gate(gate))
    }

    /// A safe lookup whose first `calls` calls answer only once all of them are
    /// running at the same time: if they ran one by one, the first would wait forever.
    pub fn meeting(calls: usize) -> Self {
        let barrier = Arc::new(Barrier::new(calls));
        Self::waiting(true, Wait::Barrier { barrier, calls })
    }

    fn waiting(safe: bool, wait: Wait) -> Self {
        Self {
            safe,
            wait,
            calls: Arc::default(),
            running: Arc::default(),
        }
    }

    /// Every call so far, in the order they started.
    pub fn invocations(&self) -> Vec<Invocation> {
        self.calls.lock().unwrap().clone()
    }

    /// The most calls that were ever running at once.
    pub fn most_at_once(&self) -> usize {
        self.invocations()
            .iter()
            .map(|c| c.running)
            .max()
            .unwrap_or(0)
    }
}

impl Tool for Lookup {
    fn name(&self) -> &str {
        "lookup"
    }

    fn description(&self) -> &str {
        "Looks up the weather in a city."
    }

    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
    }

    fn read_only(&self) -> bool {
        self.safe
    }

    fn concurrency(&self, _input: &Value) -> Concurrency {
        if self.safe {
            Concurrency::Safe
        } else {
            Concurrency::Unsafe {
                resources: vec!["*".into()],
            }
        }
    }

    fn call<'a>(
        &'a self,
        input: Value,
        _ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(async move {
            let city = input
                .get("city")
                .and_then(Value::as_str)
                .ok_or_else(|| ToolError::InvalidInput("`city` is required".into()))?
                .to_owned();
            let (index, _running) = {
                let mut calls = self.calls.lock().unwrap();
                let running = self.running.fetch_add(1, Ordering::SeqCst) + 1;
                calls.push(Invocation { input, running });
                (calls.len() - 1, Running(self.running.clone()))
            };
            match &self.wait {
                Wait::Nothing => tokio::task::yield_now().await,
                Wait::Gate(gate) => gate.opened().await,
                Wait::Barrier { barrier, calls } if index < *calls => {
                    barrier.wait().await;
                }
                Wait::Barrier { .. } => {}
            }
            Ok(format!("{city}: 12°C"))
        })
    }
}

/// Polls `cond` every 10 ms until it holds; panics past the deadline.
pub async fn wait_until(what: &str, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + DEADLINE;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A test tool with a side effect: `write {city}` counts its calls and is unsafe.
#[derive(Clone, Debug, Default)]
pub struct Write {
    calls: Arc<Mutex<u32>>,
}

impl Write {
    pub fn count(&self) -> u32 {
        *self.calls.lock().unwrap()
    }
}

impl Tool for Write {
    fn name(&self) -> &str {
        "write"
    }

    fn description(&self) -> &str {
        "Writes a city down."
    }

    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {"city": {"type": "string"}}})
    }

    fn read_only(&self) -> bool {
        false
    }

    fn concurrency(&self, _input: &Value) -> Concurrency {
        Concurrency::Unsafe {
            resources: vec!["cities.txt".into()],
        }
    }

    fn call<'a>(
        &'a self,
        input: Value,
        _ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(async move {
            *self.calls.lock().unwrap() += 1;
            Ok(format!("wrote {}", input["city"].as_str().unwrap_or("?")))
        })
    }
}

/// `lookup` that sends `"Fast"` to `fast` and every other city to `slow` (which a
/// test makes wait, see [`Lookup::held`]), each half counted apart.
#[derive(Clone, Debug)]
pub struct Routed {
    pub fast: Lookup,
    pub slow: Lookup,
}

impl Tool for Routed {
    fn name(&self) -> &str {
        "lookup"
    }

    fn description(&self) -> &str {
        self.fast.description()
    }

    fn input_schema(&self) -> Value {
        self.fast.input_schema()
    }

    fn read_only(&self) -> bool {
        true
    }

    fn concurrency(&self, _input: &Value) -> Concurrency {
        Concurrency::Safe
    }

    fn call<'a>(
        &'a self,
        input: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<String, ToolError>> {
        if input["city"] == "Fast" {
            self.fast.call(input, ctx)
        } else {
            self.slow.call(input, ctx)
        }
    }
}

/// A workspace, a runtime on `mock` and one session of `spec`: the start of most tests.
pub async fn start(mock: &MockLlm, spec: SessionSpec) -> (tempfile::TempDir, Runtime, SessionId) {
    let dir = tempfile::tempdir().unwrap();
    let runtime = runtime(mock, dir.path()).await;
    let session = runtime.start_session(spec).await.unwrap();
    (dir, runtime, session)
}

/// The first line of what a sub-agent said in its Task result: after the
/// outcome line (`completed`, `partial (…)`, `failed (…)`, `timed_out`) and
/// the `changes:` and `check:` lines.
pub fn answer(result: &str) -> &str {
    let mut lines = result.lines().peekable();
    if let Some(first) = lines.peek()
        && (*first == "completed"
            || *first == "timed_out"
            || first.starts_with("partial (")
            || first.starts_with("failed ("))
    {
        lines.next();
    }
    lines
        .find(|l| !l.starts_with("changes: ") && !l.starts_with("check: "))
        .unwrap_or("")
}
