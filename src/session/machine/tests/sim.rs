//! A simulated Session around the machine: it carries out every effect the way
//! the actor does (answers first, a mailbox for what comes back later), keeps the
//! journal and what of it is durable, and plays the children: a cancelled stream
//! ends with a cancelled turn, cancelled tool calls end with a cancelled result.
//! The test decides everything else (what the model says, which call finishes
//! next). Invariants the machine must never break are collected as violations.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use serde_json::{Value, json};

use super::super::{Effect, Input, Machine, MachineArgs, ToolDone};
use crate::conversation::{
    AssistantMessage, AssistantTurn, FinishReason, Message, ToolCall, ToolResult, Usage,
};
use crate::error::{LlmError, ToolError};
use crate::journal::Record;
use crate::llm::ChatRequest;
use crate::llm::retry::RetryPolicy;
use crate::protocol::{EventKind, Outcome, SessionId};
use crate::session::SessionSpec;
use crate::session::queue::{PromptQueue, QueuedPrompt};
use crate::tools::{Concurrency, Tool, ToolContext, ToolRegistry};

/// A tool as the machine sees it: a name, whether it is read-only, how it may run
/// beside others. The machine never calls a tool.
#[derive(Debug)]
pub(super) struct FakeTool {
    name: &'static str,
    read_only: bool,
    safe: bool,
    bounds_itself: bool,
}

impl FakeTool {
    /// Task is the tool that bounds itself and resumes by call id.
    fn resumes(&self) -> bool {
        self.bounds_itself
    }
}

impl Tool for FakeTool {
    fn name(&self) -> &str {
        self.name
    }
    fn description(&self) -> &str {
        "a tool of the machine's tests"
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object"})
    }
    fn read_only(&self) -> bool {
        self.read_only
    }
    fn concurrency(&self, input: &Value) -> Concurrency {
        if self.safe {
            Concurrency::Safe
        } else {
            crate::tools::unsafe_on_path(input)
        }
    }
    fn bounds_itself(&self) -> bool {
        self.bounds_itself
    }
    fn resumable(&self) -> bool {
        self.resumes()
    }
    fn call<'a>(
        &'a self,
        _: Value,
        _: &'a ToolContext,
    ) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(async { Err(ToolError::Failed("machine tests run no tool".into())) })
    }
}

/// `Read` (read-only, parallel), `Write` (has effects, alone) and `Task` (has
/// effects, parallel, bounds itself, resumes by call id).
pub(super) fn tools() -> ToolRegistry {
    let tool = |name, read_only, safe, bounds_itself| FakeTool {
        name,
        read_only,
        safe,
        bounds_itself,
    };
    ToolRegistry::new()
        .with(tool("Read", true, true, false))
        .with(tool("Write", false, false, false))
        .with(tool("Task", false, true, true))
}

pub(super) fn spec() -> SessionSpec {
    let mut spec = SessionSpec::new("coder", "m1", "You write code.");
    spec.tools = tools();
    spec
}

/// A call of `name` with id `id`.
pub(super) fn call(id: &str, name: &str) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: name.into(),
        arguments: json!({"file_path": format!("{id}.txt")}).to_string(),
    }
}

/// A turn that calls tools.
pub(super) fn calls(calls: &[(&str, &str)]) -> AssistantTurn {
    AssistantTurn {
        message: AssistantMessage {
            tool_calls: calls.iter().map(|(id, name)| call(id, name)).collect(),
            ..AssistantMessage::default()
        },
        finish: Some(FinishReason::ToolCalls),
        usage: Some(usage(10)),
        model: None,
    }
}

/// A final answer.
pub(super) fn text(text: &str) -> AssistantTurn {
    AssistantTurn {
        message: AssistantMessage {
            text: text.into(),
            ..AssistantMessage::default()
        },
        finish: Some(FinishReason::Stop),
        usage: Some(usage(10)),
        model: None,
    }
}

pub(super) fn usage(tokens: u64) -> Usage {
    Usage {
        input_tokens: tokens,
        output_tokens: tokens,
        ..Usage::default()
    }
}

/// The protocol every request must keep: each assistant tool call is followed by
/// exactly one result, in call order; no result stands anywhere else; the last
/// message is the person's or a tool's.
pub(super) fn protocol_ok(messages: &[Message]) -> Result<(), String> {
    let mut i = 0;
    while i < messages.len() {
        match &messages[i] {
            Message::Assistant(a) if !a.tool_calls.is_empty() => {
                for (k, call) in a.tool_calls.iter().enumerate() {
                    match messages.get(i + 1 + k) {
                        Some(Message::Tool(r)) if r.tool_call_id == call.id => {}
                        other => return Err(format!("call {} answered by {other:?}", call.id)),
                    }
                }
                i += 1 + a.tool_calls.len();
            }
            Message::Tool(r) => return Err(format!("stray result for {}", r.tool_call_id)),
            Message::System { .. } | Message::User { .. } | Message::Assistant(_) => i += 1,
        }
    }
    match messages.last() {
        Some(Message::User { .. } | Message::Tool(_)) => Ok(()),
        other => Err(format!("the request ends with {other:?}")),
    }
}

pub(super) struct Sim {
    pub(super) machine: Machine,
    pub(super) registry: ToolRegistry,
    pub(super) now: Instant,
    pub(super) queue: PromptQueue,
    pub(super) seq: u64,
    pub(super) journal: Vec<Record>,
    /// How much of the journal is durable.
    pub(super) durable: usize,
    /// How much of it the last sync in the background was asked for: durable
    /// some time later, so a crash may still lose it.
    pub(super) behind: usize,
    pub(super) events: Vec<EventKind>,
    pub(super) requests: Vec<ChatRequest>,
    /// The stream open now.
    pub(super) stream: Option<u64>,
    /// Tool calls started and not finished: tool turn, position, call.
    pub(super) running: Vec<(u64, usize, ToolCall)>,
    /// Every call started, in order.
    pub(super) started: Vec<ToolCall>,
    /// A retry the machine scheduled.
    pub(super) retry: Option<(u64, Duration)>,
    /// Alarms the machine set: the run, after how long.
    pub(super) alarms: Vec<(u64, Duration)>,
    /// What the machine charged the run's meter.
    pub(super) charged: Vec<(crate::conversation::Usage, Option<f64>)>,
    pub(super) stopped: bool,
    /// Every effect, in order.
    pub(super) effects: Vec<Effect>,
    /// What the Stop hooks answer, in turn (none: they let the run end).
    pub(super) stop_hook_blocks: VecDeque<String>,
    /// The `stop_hook_active` of each run of them.
    pub(super) stop_hooks_active: Vec<bool>,
    /// The Stop hooks answer later, when the test says (their runs, in turn).
    pub(super) defer_stop_hooks: bool,
    pub(super) deferred_stop_hooks: Vec<u64>,
    mailbox: VecDeque<Input>,
    /// Broken invariants.
    pub(super) violations: Vec<String>,
    /// The run's shared meter, as the spec has it.
    machine_meter: Option<std::sync::Arc<crate::session::budget::RunMeter>>,
}

impl Sim {
    pub(super) fn new(spec: SessionSpec) -> Self {
        Self::start(spec, None, PromptQueue::default(), 1)
    }

    /// The same session restarted from `journal`, with the queue that outlived it.
    pub(super) fn resume(
        spec: SessionSpec,
        journal: Vec<Record>,
        queue: PromptQueue,
        seq: u64,
    ) -> Self {
        Self::start(spec, Some(journal), queue, seq)
    }

    fn start(
        spec: SessionSpec,
        journal: Option<Vec<Record>>,
        queue: PromptQueue,
        seq: u64,
    ) -> Self {
        let registry = spec.tools.clone();
        let args = MachineArgs {
            id: SessionId::new(),
            run: SessionId::new(),
            spec: Arc::new(spec),
            retry: RetryPolicy::default(),
            max_parallel_tools: 10,
            stopping: false,
            seed: 7,
        };
        Self::with_args(args, registry, journal, queue, seq)
    }

    pub(super) fn with_args(
        args: MachineArgs,
        registry: ToolRegistry,
        journal: Option<Vec<Record>>,
        queue: PromptQueue,
        seq: u64,
    ) -> Self {
        let machine_meter = args.spec.meter.clone();
        let (machine, effects) = Machine::start(args, journal.as_deref());
        let durable = journal.as_ref().map_or(0, Vec::len);
        let mut sim = Self {
            machine,
            registry,
            now: Instant::now(),
            queue,
            seq,
            journal: journal.unwrap_or_default(),
            durable,
            behind: 0,
            events: Vec::new(),
            requests: Vec::new(),
            stream: None,
            running: Vec::new(),
            started: Vec::new(),
            retry: None,
            alarms: Vec::new(),
            charged: Vec::new(),
            stopped: false,
            effects: Vec::new(),
            stop_hook_blocks: VecDeque::new(),
            stop_hooks_active: Vec::new(),
            defer_stop_hooks: false,
            deferred_stop_hooks: Vec::new(),
            mailbox: VecDeque::new(),
            violations: Vec::new(),
            machine_meter,
        };
        for effect in effects {
            if let Some(input) = sim.carry_out(effect) {
                sim.violations
                    .push(format!("starting asked a question: {input:?}"));
            }
        }
        let (cancel, stop) = if sim.machine.resuming() {
            (sim.queue.take_cancel(), sim.queue.take_stop())
        } else {
            (None, false)
        };
        sim.input(Input::Started { cancel, stop });
        sim
    }

    /// Hands `input` to the machine as the actor would, then delivers what came
    /// back meanwhile (self-casts, cancelled children).
    pub(super) fn input(&mut self, input: Input) {
        self.drive(input);
        while let Some(next) = self.mailbox.pop_front() {
            self.drive(next);
        }
    }

    fn drive(&mut self, input: Input) {
        let mut inputs = VecDeque::from([input]);
        while let Some(input) = inputs.pop_front() {
            self.now += Duration::from_millis(1);
            for effect in self.machine.handle(self.now, input) {
                match self.carry_out(effect) {
                    Some(answer) if answer.is_answer() => inputs.push_front(answer),
                    Some(other) => inputs.push_back(other),
                    None => {}
                }
            }
        }
    }

    fn carry_out(&mut self, effect: Effect) -> Option<Input> {
        self.effects.push(effect.clone());
        match effect {
            Effect::Journal(records) => self.journal.extend(records),
            Effect::Sync => {
                self.durable = self.journal.len();
                return Some(Input::Synced(Ok(())));
            }
            Effect::SyncInBackground => self.behind = self.journal.len(),
            Effect::FallBack | Effect::PreCompact | Effect::Narrow(_) => {}
            // The hooks a test sets block with these reasons, one per run of
            // them; none set: they let the run end.
            Effect::StopHooks { run, active } => {
                self.stop_hooks_active.push(active);
                if self.defer_stop_hooks {
                    self.deferred_stop_hooks.push(run);
                    return None;
                }
                return Some(Input::StopHooked {
                    run,
                    block: self.stop_hook_blocks.pop_front(),
                });
            }
            Effect::Publish(kind) => {
                if let EventKind::Terminal { .. } = &kind {
                    let terminal = self.journal[..self.durable]
                        .iter()
                        .any(|r| matches!(r, Record::Terminal { .. }));
                    if !terminal {
                        self.violations
                            .push("a terminal event before its durable record".into());
                    }
                }
                self.events.push(kind);
            }
            Effect::StartStream {
                stream, request, ..
            } => {
                if let Err(e) = protocol_ok(&request.messages) {
                    self.violations
                        .push(format!("request {}: {e}", request.place));
                }
                if self.stream.is_some() || !self.running.is_empty() {
                    self.violations
                        .push("a stream started while work was in flight".into());
                }
                self.requests.push(request);
                self.stream = Some(stream);
            }
            Effect::CancelStream { stream } => {
                if self.stream == Some(stream) {
                    self.stream = None;
                    self.mailbox.push_back(Input::TurnFinished {
                        stream,
                        result: Err(LlmError::Cancelled {
                            partial: Box::default(),
                        }),
                    });
                }
            }
            Effect::RetryAfter { stream, delay } => self.retry = Some((stream, delay)),
            Effect::Charge { usage, cost } => {
                if let Some(meter) = &self.machine_meter {
                    meter.charge(&usage, cost);
                }
                self.charged.push((usage, cost));
            }
            Effect::Alarm { run, after } => self.alarms.push((run, after)),
            Effect::StartTool {
                turn, index, call, ..
            } => {
                let has_effects = self
                    .registry
                    .get(&call.name)
                    .is_some_and(|t| !t.read_only());
                let recorded = self.journal[..self.durable]
                    .iter()
                    .any(|r| matches!(r, Record::ToolStarted { call_id } if *call_id == call.id));
                if has_effects && !recorded {
                    self.violations
                        .push(format!("{} started before its record was durable", call.id));
                }
                self.started.push(call.clone());
                self.running.push((turn, index, call));
            }
            Effect::CancelTools { turn } => {
                let (cancelled, kept) = std::mem::take(&mut self.running)
                    .into_iter()
                    .partition(|(t, _, _)| *t == turn);
                self.running = kept;
                for (turn, index, call) in cancelled {
                    self.mailbox.push_back(tool_done(
                        turn,
                        index,
                        &call.id,
                        "Error: cancelled",
                        true,
                    ));
                }
            }
            Effect::TakeOne => {
                return Some(Input::Taken(self.queue.take_one().into_iter().collect()));
            }
            Effect::TakeAll => return Some(Input::Taken(self.queue.take_to_join())),
            Effect::TakeSteers => {
                return Some(Input::Steers {
                    prompts: self.queue.take_steers(),
                    background: self.queue.background_running(),
                });
            }
            // A resumed run follows its background sub-agents again: the
            // runtime counts each in the session's queue.
            Effect::Reattach { task, .. } => self.queue.background_started(task),
            Effect::CountWaiting { seq } => return Some(Input::Waiting(self.queue.waiting(seq))),
            Effect::CancelDone { seq } => self.queue.cancel_done(seq),
            Effect::PullLater => self.mailbox.push_back(Input::PullQueue),
            Effect::Stop => self.stopped = true,
            Effect::Crash(point) => self.violations.push(format!("crashed at {point:?}")),
        }
        None
    }

    /// Sends a prompt; returns its stamp.
    pub(super) fn prompt(&mut self, text: &str) -> u64 {
        self.prompt_narrowed(text, None)
    }

    /// Sends a slash command's prompt, narrowing the session to `narrow`;
    /// returns its stamp.
    pub(super) fn prompt_narrowed(
        &mut self,
        text: &str,
        narrow: Option<crate::tools::narrowing::Narrow>,
    ) -> u64 {
        let seq = self.stamp();
        self.queue.push(QueuedPrompt {
            seq,
            text: text.into(),
            steer: false,
            fails: None,
            background: None,
            spent: None,
            narrow,
        });
        self.input(Input::Prompt { seq });
        seq
    }

    /// Steers the run in progress; returns the message's stamp.
    pub(super) fn steer(&mut self, text: &str) -> u64 {
        let seq = self.stamp();
        self.queue.push(QueuedPrompt {
            seq,
            text: text.into(),
            steer: true,
            fails: None,
            background: None,
            spent: None,
            narrow: None,
        });
        self.input(Input::Prompt { seq });
        seq
    }

    /// Background sub-agent `task` ends with `result`, as the Orchestrator
    /// routes it: the message into the queue, then the session told.
    pub(super) fn background_ended(&mut self, task: SessionId, result: &str) -> u64 {
        let seq = self.stamp();
        let message = QueuedPrompt {
            seq,
            text: result.into(),
            steer: true,
            fails: None,
            background: Some(task),
            spent: None,
            narrow: None,
        };
        self.queue.background_ended(task, Some(message));
        self.input(Input::Prompt { seq });
        seq
    }

    /// Cancels, as the Orchestrator routes it: the queue first, then the session.
    pub(super) fn cancel(&mut self) -> u64 {
        let seq = self.stamp();
        for dropped in self.queue.cancel(seq) {
            self.events.push(EventKind::Terminal {
                prompts: vec![dropped.seq],
                outcome: Outcome::Cancelled {
                    partial: String::new(),
                    stats: Default::default(),
                },
            });
        }
        self.input(Input::Cancel { seq });
        seq
    }

    fn stamp(&mut self) -> u64 {
        let seq = self.seq;
        self.seq += 1;
        seq
    }

    /// The open stream ends with `turn`.
    pub(super) fn answer(&mut self, turn: AssistantTurn) {
        let stream = self.stream.take().expect("a stream is open");
        self.input(Input::TurnFinished {
            stream,
            result: Ok(turn),
        });
    }

    /// The open stream fails with `error`.
    pub(super) fn fail_stream(&mut self, error: LlmError) {
        let stream = self.stream.take().expect("a stream is open");
        self.input(Input::TurnFinished {
            stream,
            result: Err(error),
        });
    }

    /// The scheduled retry is due.
    pub(super) fn retry_due(&mut self) {
        let (stream, _) = self.retry.take().expect("a retry is scheduled");
        self.input(Input::RetryDue { stream });
    }

    /// The running call with id `id` finishes with `content`.
    pub(super) fn finish(&mut self, id: &str, content: &str) {
        let at = self
            .running
            .iter()
            .position(|(_, _, c)| c.id == id)
            .unwrap_or_else(|| panic!("{id} is not running: {:?}", self.running));
        let (turn, index, call) = self.running.remove(at);
        self.input(tool_done(turn, index, &call.id, content, false));
    }

    /// The ids of the calls running now, in start order.
    pub(super) fn running_ids(&self) -> Vec<String> {
        self.running.iter().map(|(_, _, c)| c.id.clone()).collect()
    }

    /// Every terminal event: the prompts it answers and the outcome.
    pub(super) fn terminals(&self) -> Vec<(Vec<u64>, Outcome)> {
        self.events
            .iter()
            .filter_map(|e| match e {
                EventKind::Terminal { prompts, outcome } => {
                    Some((prompts.clone(), outcome.clone()))
                }
                _ => None,
            })
            .collect()
    }

    /// The outcome of the run that answered `prompt`, if it ended.
    pub(super) fn outcome(&self, prompt: u64) -> Option<Outcome> {
        let mut answers = self
            .terminals()
            .into_iter()
            .filter(|(p, _)| p.contains(&prompt));
        answers.next().map(|(_, outcome)| outcome)
    }

    /// The events the machine published, by kind name.
    pub(super) fn event_names(&self) -> Vec<&'static str> {
        self.events.iter().map(event_name).collect()
    }
}

pub(super) fn tool_done(turn: u64, index: usize, id: &str, content: &str, is_error: bool) -> Input {
    Input::ToolDone(ToolDone {
        turn,
        index,
        result: ToolResult {
            tool_call_id: id.into(),
            content: content.into(),
            is_error,
        },
        changes: Vec::new(),
        spent: Default::default(),
        stop: None,
        narrowed: None,
    })
}

pub(super) fn event_name(event: &EventKind) -> &'static str {
    match event {
        EventKind::SessionStarted { .. } => "session_started",
        EventKind::PromptQueued { .. } => "prompt_queued",
        EventKind::TurnStarted { .. } => "turn_started",
        EventKind::TextDelta { .. } => "text_delta",
        EventKind::ReasoningDelta { .. } => "reasoning_delta",
        EventKind::TurnFinished { .. } => "turn_finished",
        EventKind::ToolStarted { .. } => "tool_started",
        EventKind::SubagentQueued { .. } => "subagent_queued",
        EventKind::AwaitingPermission { .. } => "awaiting_permission",
        EventKind::PermissionRequested { .. } => "permission_requested",
        EventKind::PermissionAnswered { .. } => "permission_answered",
        EventKind::FileChanged { .. } => "file_changed",
        EventKind::ToolFinished { .. } => "tool_finished",
        EventKind::Retrying { .. } => "retrying",
        EventKind::Restarted { .. } => "restarted",
        EventKind::ModelFallback { .. } => "model_fallback",
        EventKind::BackgroundWait { .. } => "background_wait",
        EventKind::HookRan { .. } => "hook_ran",
        EventKind::ToolOutput { .. } => "tool_output",
        EventKind::Titled { .. } => "titled",
        EventKind::RateLimited { .. } => "rate_limited",
        EventKind::Compacted { .. } => "compacted",
        EventKind::Todos { .. } => "todos",
        EventKind::Isolated { .. } => "isolated",
        EventKind::Shared { .. } => "shared",
        EventKind::Merged { .. } => "merged",
        EventKind::Conflicted { .. } => "conflicted",
        EventKind::Kept { .. } => "kept",
        EventKind::Unmerged { .. } => "unmerged",
        EventKind::Checking { .. } => "checking",
        EventKind::Checked { .. } => "checked",
        EventKind::Terminal { .. } => "terminal",
    }
}
