//! The run machine: every decision a session makes, with no IO, no
//! actors and no clock. [`Input`]s go in (a prompt arrived, a turn finished, a tool
//! call finished, a retry is due, a cancel, a stop, the records of a journal to
//! resume from); [`Effect`]s come out (journal these records, make them durable,
//! publish this event, start a stream with this request, start this tool call,
//! retry after this long, stop). The Session actor turns its messages into inputs
//! and carries the effects out, in order; nothing else.
//!
//! Some effects ask a question ([`Effect::Sync`], [`Effect::TakeOne`],
//! [`Effect::TakeAll`], [`Effect::CountWaiting`]). Such an effect is always the last
//! of its batch, and its answer ([`Input::Synced`], [`Input::Taken`],
//! [`Input::Waiting`]) must be the next input: the machine waits for it.
//! [`Effect::SyncInBackground`] asks nothing: its failure is the answer of the
//! session's next [`Effect::Sync`]. The time
//! comes in with every input, so runs can be replayed without a runtime.
//!
//! The inputs and effects are defined in [`input`] and [`effect`]; a run's model
//! turns are decided in [`model_turn`], its tool phases in [`tool_turn`], how it
//! ends in [`ending`]; this file holds the machine, its answers to questions, and
//! how runs begin.

mod compact;
mod effect;
mod ending;
mod fallback;
mod input;
mod jitter;
mod model_turn;
mod tool_turn;

use std::sync::Arc;
use std::time::Instant;

pub(crate) use self::effect::Effect;
pub(crate) use self::input::{Input, ToolDone};
use self::jitter::Jitter;
use self::tool_turn::ToolTurn;
use super::SessionSpec;
use super::narrowed;
use super::queue::{QueuedPrompt, cancels};
use super::repeats::Repeats;
use super::resume::{self, ActiveRun, Next};
use crate::conversation::{Message, ToolResult};
use crate::error::SessionError;
use crate::journal::Record;
use crate::llm::retry::RetryPolicy;
use crate::protocol::{EventKind, Outcome, RunStats, SessionId};

/// How many times a run's Stop hooks may keep it going; past that it ends
/// (a hook that ignores `stop_hook_active` cannot loop forever).
pub(crate) const MAX_STOP_HOOK_BLOCKS: u32 = 8;

/// What a machine is built from.
#[derive(Debug)]
pub(crate) struct MachineArgs {
    /// The session.
    pub(crate) id: SessionId,
    /// Its run: the lead session's id.
    pub(crate) run: SessionId,
    /// What it is.
    pub(crate) spec: Arc<SessionSpec>,
    /// How failed model turns are retried.
    pub(crate) retry: RetryPolicy,
    /// Concurrency-safe calls of one turn running at once, at most.
    pub(crate) max_parallel_tools: usize,
    /// A Stop arrived while the session was down: end with the run it resumes.
    pub(crate) stopping: bool,
    /// Seeds the retry jitter.
    pub(crate) seed: u64,
}

/// One session's decisions.
#[derive(Debug)]
pub(crate) struct Machine {
    id: SessionId,
    spec: Arc<SessionSpec>,
    retry: RetryPolicy,
    max_parallel_tools: usize,
    transcript: Vec<Message>,
    run: Option<Run>,
    /// The last stream or tool-turn id handed out.
    next_id: u64,
    /// The run a resumed journal left unfinished, until the session is up.
    resume: Option<ActiveRun>,
    /// Set by a Stop: the session ends with its current run.
    stopping: bool,
    /// The answer the machine waits for.
    awaiting: Option<Awaiting>,
    jitter: Jitter,
    /// Effects of the input being handled.
    out: Vec<Effect>,
    /// The prompt tokens the provider last reported (with that turn's output),
    /// and the transcript's length then: how full the context is, with an
    /// estimate of what was appended since.
    reported: (u64, usize),
    /// A summary is streaming: the tokens before compaction and the results
    /// elided, for its event.
    pending_compaction: Option<(u64, usize)>,
}

/// One prompt and everything it caused, until its terminal event.
#[derive(Debug)]
struct Run {
    /// The prompts it answers: the one that started it, then any that joined.
    prompts: Vec<u64>,
    started: Instant,
    stats: RunStats,
    /// The last text the model produced: the partial answer if the run stops early.
    last_text: String,
    /// The stamp of the cancel that ended this run, once one arrived.
    cancelled: Option<u64>,
    /// Why the run is to stop at its next turn boundary, once someone asked.
    stop: Option<String>,
    /// Its time ran out: what streams or runs is cut off, and it ends
    /// `timed_out` as soon as that is done.
    timed_out: bool,
    /// How many times its Stop hooks kept it going.
    stop_hook_blocks: u32,
    /// Its Stop hooks let its answer stand: it ends with it unless steers
    /// that came meanwhile keep it going.
    stop_hooks_passed: bool,
    /// The same tool call made again and again.
    repeats: Repeats,
    /// The turn count at which the conversation was last compacted: once per
    /// boundary.
    compacted_at: Option<u32>,
    /// A context overflow has had its one compaction and retry.
    overflow_compacted: bool,
    phase: Phase,
}

/// Where a run is.
#[derive(Debug)]
enum Phase {
    /// Between steps.
    Starting,
    /// A model turn is streaming (or, `compacting`, the summary that compacts
    /// the conversation before attempt `attempt` of the next turn).
    Streaming {
        stream: u64,
        attempt: u32,
        compacting: bool,
    },
    /// Waiting before another attempt.
    Backoff { stream: u64, attempt: u32 },
    /// The turn's tool calls are running.
    Tools(Box<ToolTurn>),
    /// The model gave its final answer; the run waits for its background
    /// sub-agents' results before it ends with it.
    Background { text: String, truncated: bool },
    /// The model gave its final answer; the run waits for its Stop hooks,
    /// which may keep it going.
    StopHooks { text: String, truncated: bool },
}

/// What the machine waits for, and what it does with the answer.
#[derive(Debug)]
enum Awaiting {
    /// The oldest queued prompt, to start a run with.
    Prompt,
    /// The prompts that join the run at a tool-turn boundary.
    Joining,
    /// The sync before these calls (one of them has effects) start.
    Calls(Vec<usize>),
    /// The sync of a terminal record, before its event.
    End { prompts: Vec<u64>, outcome: Outcome },
    /// The steers that keep a run going past what would be its final answer.
    Finishing { text: String, truncated: bool },
}

impl Run {
    /// Whether what streams or runs is being cut off for the run to end: a
    /// cancel, or its time ran out.
    fn halting(&self) -> bool {
        self.cancelled.is_some() || self.timed_out
    }

    /// A run of `prompts`, `turns` model turns in; `priced`: its cost is known
    /// (its model's prices are).
    fn new(prompts: Vec<u64>, turns: u32, started: Instant, priced: bool) -> Self {
        Self {
            prompts,
            started,
            stats: RunStats {
                turns,
                cost_usd: priced.then_some(0.0),
                ..RunStats::default()
            },
            last_text: String::new(),
            cancelled: None,
            stop: None,
            timed_out: false,
            stop_hook_blocks: 0,
            stop_hooks_passed: false,
            repeats: Repeats::default(),
            compacted_at: None,
            overflow_compacted: false,
            phase: Phase::Starting,
        }
    }
}

impl Machine {
    /// A machine for a new session (`journal: None`: its header and history are
    /// journaled) or for one restarted from its journal's records. The effects
    /// start the session; the first input after them is [`Input::Started`].
    pub(crate) fn start(args: MachineArgs, journal: Option<&[Record]>) -> (Self, Vec<Effect>) {
        let mut machine = Self {
            id: args.id,
            spec: args.spec,
            retry: args.retry,
            max_parallel_tools: args.max_parallel_tools,
            transcript: Vec::new(),
            run: None,
            next_id: 0,
            resume: None,
            stopping: args.stopping,
            awaiting: None,
            jitter: Jitter(args.seed),
            out: Vec::new(),
            reported: (0, 0),
            pending_compaction: None,
        };
        match journal {
            Some(records) => {
                let resumed = resume::resume(records);
                machine.transcript = resumed.transcript;
                // A fallback is for the session's life: it goes on with the
                // model it fell back to.
                let fell_back = records.iter().any(|r| {
                    matches!(r, Record::Event { event, .. } if matches!(event.kind, EventKind::ModelFallback { .. }))
                });
                if fell_back {
                    machine.switch_to_fallback();
                }
                machine.resume = resumed.active;
                // A run carried on under limits other than its journal's keeps
                // them for the next time it is carried on.
                let journaled = records.iter().rev().find_map(|r| match r {
                    Record::Limits { limits } => Some(Some(*limits)),
                    Record::RunStarted { limits, .. } => Some(*limits),
                    _ => None,
                });
                if let (Some(_), Some(limits)) = (&machine.resume, machine.run_limits())
                    && journaled != Some(Some(limits))
                {
                    machine.emit(Effect::Journal(vec![Record::Limits { limits }]));
                }
            }
            None => {
                let spec = &machine.spec;
                let mut records = vec![Record::Header {
                    session: machine.id,
                    agent: spec.agent.clone(),
                    model: spec.model.clone(),
                    parent: spec.parent,
                    tool_call_id: spec.tool_call_id.clone(),
                    run: Some(args.run),
                    format: crate::journal::FORMAT,
                    checkout: spec.checkout.clone(),
                    remote: false,
                }];
                for message in &spec.history {
                    records.push(Record::Message {
                        message: message.clone(),
                    });
                }
                machine.transcript = spec.history.clone();
                machine.emit(Effect::Journal(records));
            }
        }
        // What narrows it from its start is journaled once.
        let journaled = narrowed::journaled(journal.unwrap_or_default());
        let narrowing: Vec<Record> = (machine.spec.narrowing.iter())
            .filter(|n| !journaled.contains(n))
            .map(narrowed::record)
            .collect();
        if !narrowing.is_empty() {
            machine.emit(Effect::Journal(narrowing));
        }
        machine.publish(EventKind::SessionStarted {
            model: machine.spec.model.clone(),
            resumed: journal.is_some(),
            memory: machine.spec.memory.clone(),
        });
        if let (Some(checkout), None) = (&machine.spec.checkout, journal)
            && !checkout.borrowed
        {
            let isolated = EventKind::Isolated {
                path: checkout.workdir.display().to_string(),
                base: checkout.base.clone(),
                lacks: checkout.lacks.clone(),
            };
            machine.publish(isolated);
        }
        let effects = std::mem::take(&mut machine.out);
        (machine, effects)
    }

    /// Whether a run is in progress.
    pub(crate) fn running(&self) -> bool {
        self.run.is_some()
    }

    /// True while a run from the journal waits to resume: the driver asks the
    /// queue for a remembered cancel before [`Input::Started`].
    pub(crate) fn resuming(&self) -> bool {
        self.resume.is_some()
    }

    /// Handles one input at `now`; returns what to do, in order.
    pub(crate) fn handle(&mut self, now: Instant, input: Input) -> Vec<Effect> {
        if self.awaiting.is_some() && !input.is_answer() {
            tracing::error!(session = %self.id, ?input, "an input arrived before the answer the session waits for");
        }
        match input {
            Input::Started { cancel, stop } => self.on_started(now, cancel, stop),
            Input::Prompt { .. } if self.waits_for_background() => self.finish_again(),
            Input::Prompt { seq } if self.run.is_some() => self.emit(Effect::CountWaiting { seq }),
            Input::Prompt { .. } | Input::PullQueue => self.pull(),
            Input::Cancel { seq } => self.on_cancel(now, seq),
            Input::StopWhenIdle => {
                self.stopping = true;
                if self.run.is_none() && self.awaiting.is_none() {
                    self.emit(Effect::Stop);
                }
            }
            Input::StopRun => self.stop_run(now, "requested"),
            Input::TimeUp { run } => self.on_time_up(now, run),
            Input::BudgetSpent { reason } => self.on_budget_spent(now, reason),
            Input::TurnFinished { stream, result } => self.on_turn_finished(now, stream, result),
            Input::RetryDue { stream } => self.on_retry_due(now, stream),
            Input::StopHooked { run, block } => self.on_stop_hooked(now, run, block),
            Input::ToolDone(done) => self.on_tool_done(now, done),
            Input::Synced(result) => self.on_synced(now, result),
            Input::Taken(prompts) => self.on_taken(now, prompts),
            Input::Steers {
                prompts,
                background,
            } => self.on_steers(now, prompts, background),
            Input::Waiting(waiting) => {
                // Nothing waits when the prompt was already taken (it started or
                // joined the current run).
                if waiting > 0 {
                    self.publish(EventKind::PromptQueued { waiting });
                }
            }
            Input::Failed(error) if self.run.is_some() => self.fail(now, &error),
            Input::Failed(error) => {
                tracing::error!(session = %self.id, %error, "a journal record or stream was lost between runs");
            }
        }
        std::mem::take(&mut self.out)
    }

    fn emit(&mut self, effect: Effect) {
        self.out.push(effect);
    }

    fn publish(&mut self, kind: EventKind) {
        self.emit(Effect::Publish(kind));
    }

    /// Asks a question; its answer is the next input.
    fn ask(&mut self, awaiting: Awaiting, question: Effect) {
        self.awaiting = Some(awaiting);
        self.emit(question);
    }

    /// Journals `message` and adds it to the transcript.
    fn record(&mut self, message: Message) {
        self.emit(Effect::Journal(vec![Record::Message {
            message: message.clone(),
        }]));
        self.transcript.push(message);
    }

    /// Journals `markers` and `message` together, in one write, then adds
    /// the message.
    fn records_after(&mut self, mut markers: Vec<Record>, message: Message) {
        markers.push(Record::Message {
            message: message.clone(),
        });
        self.emit(Effect::Journal(markers));
        self.transcript.push(message);
    }

    fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// The model turns of the current run so far.
    fn turns(&self) -> u32 {
        self.run.as_ref().map_or(0, |r| r.stats.turns)
    }

    /// Emits a crash where the session's fault plan says to.
    #[cfg(feature = "test-support")]
    fn strike(&mut self, point: crate::faults::FaultPoint) {
        if self.spec.faults.as_ref().is_some_and(|f| f.fire(point)) {
            self.emit(Effect::Crash(point));
        }
    }

    fn on_started(&mut self, now: Instant, cancel: Option<u64>, stop: bool) {
        let Some(active) = self.resume.take() else {
            // A new session's header is journaled, not synced: its first turn
            // boundary (or its first side-effecting tool) syncs it with the
            // turn's records, so a sub-agent's first request never waits on its
            // journal file being created.
            if self.stopping {
                self.emit(Effect::Stop);
            } else {
                self.emit(Effect::PullLater);
            }
            return;
        };
        match cancel {
            // A cancel that arrived just before the crash still cancels the run.
            Some(seq) if cancels(seq, &active.prompts) => {
                let mut run = self.new_run(active.prompts, active.turns, now);
                run.cancelled = Some(seq);
                self.run = Some(run);
                self.end_run(now, |stats| Outcome::Cancelled {
                    partial: String::new(),
                    stats,
                });
            }
            Some(_) | None => self.resume_run(now, active, stop),
        }
    }

    fn resume_run(&mut self, now: Instant, active: ActiveRun, stop: bool) {
        // Its background sub-agents whose results it has not had are followed
        // again before it goes on, so that it waits for them before it ends.
        for (call, task) in active.background {
            self.emit(Effect::Reattach { call, task });
        }
        let mut run = self.new_run(active.prompts, active.turns, now);
        if stop {
            run.stop = Some("requested".to_owned());
        }
        self.arm(now, run.prompts[0]);
        match active.next {
            Next::Request => {
                self.run = Some(run);
                self.begin_turn(now, 1);
            }
            Next::Finish(text) => {
                run.last_text = text.clone();
                self.run = Some(run);
                // Its background sub-agents (followed again above) may still
                // have results for it.
                let finishing = Awaiting::Finishing {
                    text,
                    truncated: false,
                };
                self.ask(finishing, Effect::TakeSteers);
            }
            Next::Tools(pending) => {
                self.run = Some(run);
                // Calls past the cap were never to run; their refusals may not have
                // reached the journal before the crash.
                let own: Vec<bool> = self
                    .transcript
                    .iter()
                    .rev()
                    .find_map(|m| match m {
                        Message::Assistant(a) => Some(&a.tool_calls),
                        _ => None,
                    })
                    .map(|calls| tool_turn::bounds_itself(&self.spec.tools, calls))
                    .unwrap_or_default();
                let capped = tool_turn::past_cap(&own);
                let (pending, past): (Vec<_>, Vec<_>) = pending
                    .into_iter()
                    .partition(|p| capped.get(p.position).is_none_or(Option::is_none));
                for p in past {
                    let number = capped[p.position].unwrap_or(p.position + 1);
                    let result = tool_turn::refused(&p.call, number, own[p.position]);
                    self.record(Message::Tool(result));
                }
                let tools = &self.spec.tools;
                let (replay, lost) = resume::replay_or_lost(pending, |name| {
                    tools
                        .get(name)
                        .is_some_and(|t| t.rerun_on_resume() || t.resumable())
                });
                for call in lost {
                    self.record(Message::Tool(ToolResult::interrupted(&call.id)));
                }
                if replay.is_empty() {
                    self.begin_turn(now, 1);
                } else {
                    // A replayed call that had started is resumed: a tool that
                    // resumes by call id picks up what it began.
                    let resumed = replay.iter().map(|p| p.started).collect();
                    let calls = replay.into_iter().map(|p| p.call).collect();
                    self.start_tools(now, calls, resumed);
                }
            }
        }
    }

    fn pull(&mut self) {
        if self.run.is_none() && self.awaiting.is_none() {
            self.ask(Awaiting::Prompt, Effect::TakeOne);
        }
    }

    fn on_taken(&mut self, now: Instant, prompts: Vec<QueuedPrompt>) {
        match self.awaiting.take() {
            Some(Awaiting::Prompt) => {
                if let Some(prompt) = prompts.into_iter().next() {
                    self.start_run(now, prompt);
                }
            }
            Some(Awaiting::Joining) => self.join(now, prompts),
            other => self.unexpected("prompts", other),
        }
    }

    /// The run would end with its final answer: steers sent meanwhile (and
    /// background results) keep it going; while background sub-agents run,
    /// it waits for them.
    fn on_steers(&mut self, now: Instant, prompts: Vec<QueuedPrompt>, background: usize) {
        match self.awaiting.take() {
            Some(Awaiting::Finishing { .. }) if !prompts.is_empty() => self.join(now, prompts),
            // Asked to stop while it answered: it does not wait.
            Some(Awaiting::Finishing { .. })
                if background > 0 && self.run.as_ref().is_some_and(|r| r.stop.is_some()) =>
            {
                self.end_stopped(now)
            }
            Some(Awaiting::Finishing { text, truncated }) if background > 0 => {
                if let Some(run) = self.run.as_mut() {
                    run.phase = Phase::Background { text, truncated };
                }
                self.publish(EventKind::BackgroundWait {
                    running: background,
                });
            }
            Some(Awaiting::Finishing { text, truncated }) => self.stop_hooks(now, text, truncated),
            other => self.unexpected("steers", other),
        }
    }

    /// The run is about to end with its final answer: its Stop hooks run
    /// first (at most [`MAX_STOP_HOOK_BLOCKS`] times keeping it going).
    fn stop_hooks(&mut self, now: Instant, text: String, truncated: bool) {
        let Some(run) = self.run.as_mut() else {
            return;
        };
        if run.stop_hooks_passed || run.stop_hook_blocks >= MAX_STOP_HOOK_BLOCKS {
            return self.complete(now, text, truncated);
        }
        let active = run.stop_hook_blocks > 0;
        let started_by = run.prompts[0];
        run.phase = Phase::StopHooks { text, truncated };
        self.emit(Effect::StopHooks {
            run: started_by,
            active,
        });
    }

    /// The Stop hooks answered: a block keeps the run going with their reason.
    fn on_stop_hooked(&mut self, now: Instant, started_by: u64, block: Option<String>) {
        // An answer for a run that has ended, or that is past them, is late.
        let Some(run) = self
            .run
            .as_mut()
            .filter(|r| r.prompts[0] == started_by && matches!(r.phase, Phase::StopHooks { .. }))
        else {
            return;
        };
        let Phase::StopHooks { text, truncated } =
            std::mem::replace(&mut run.phase, Phase::Starting)
        else {
            return;
        };
        match block {
            // Steers that came while they ran still join the run.
            None => {
                run.stop_hooks_passed = true;
                self.ask(Awaiting::Finishing { text, truncated }, Effect::TakeSteers);
            }
            Some(reason) => {
                run.stop_hook_blocks += 1;
                self.record(Message::user(format!(
                    "A Stop hook kept you going before you end: {reason}"
                )));
                self.emit(Effect::SyncInBackground);
                self.begin_turn(now, 1);
            }
        }
    }

    /// Ends the run with its final answer.
    fn complete(&mut self, now: Instant, text: String, truncated: bool) {
        // Durable with the terminal record's sync.
        self.end_run(now, |stats| Outcome::Completed {
            text,
            truncated,
            stats,
        });
    }

    /// Whether the run waits for its background sub-agents.
    fn waits_for_background(&self) -> bool {
        self.awaiting.is_none()
            && self
                .run
                .as_ref()
                .is_some_and(|r| matches!(r.phase, Phase::Background { .. }))
    }

    /// Something arrived for a run that waits for its background sub-agents
    /// (one of their results, or a steer): it looks again.
    fn finish_again(&mut self) {
        let Some(run) = self.run.as_mut() else {
            return;
        };
        if let Phase::Background { text, truncated } =
            std::mem::replace(&mut run.phase, Phase::Starting)
        {
            self.ask(Awaiting::Finishing { text, truncated }, Effect::TakeSteers);
        }
    }

    /// A turn boundary: prompts that arrived meanwhile join the conversation and
    /// the run asks the model again. The boundary's records are made durable while
    /// that turn streams, not before it: nothing outside the session acts on them
    /// until a sync that is waited for (a tool with effects starting, the run's
    /// end), and that sync covers them, a sync being of the whole file.
    fn join(&mut self, now: Instant, prompts: Vec<QueuedPrompt>) {
        if let Some(run) = self.run.as_mut() {
            // Its next answer is asked of the Stop hooks again.
            run.stop_hooks_passed = false;
        }
        // None narrows: a narrowed prompt waits for a run of its own
        // (`PromptQueue::take_to_join`).
        for prompt in prompts {
            if let Some(run) = self.run.as_mut() {
                run.prompts.push(prompt.seq);
                // A background sub-agent's spending is its caller's too.
                if let Some(spent) = &prompt.spent {
                    run.stats.charge(&spent.usage, spent.cost_usd);
                }
            }
            let joined = Record::PromptJoined {
                prompt: prompt.seq,
                background: prompt.background,
            };
            self.records_after(vec![joined], Message::user(prompt.text));
        }
        self.emit(Effect::SyncInBackground);
        self.begin_turn(now, 1);
    }

    /// What `prompt`'s slash command narrows the session to, in force
    /// before the prompt joins the conversation; its record, to be written
    /// with the prompt's.
    fn narrow(&mut self, prompt: &mut QueuedPrompt) -> Option<Record> {
        let narrow = prompt.narrow.take()?;
        let record = crate::session::narrowed::record(&narrow);
        self.emit(Effect::Narrow(narrow));
        Some(record)
    }

    fn on_synced(&mut self, now: Instant, result: Result<(), String>) {
        match self.awaiting.take() {
            // A call whose start cannot be made durable is not run: the journal
            // could no longer tell whether it had effects. The run fails.
            Some(Awaiting::Calls(indices)) => match result {
                Ok(()) => {
                    self.launch(indices);
                    self.advance_tools(now);
                }
                Err(e) => self.fail(now, &SessionError::Journal(e)),
            },
            Some(Awaiting::End { prompts, outcome }) => {
                // A run whose end cannot be kept ends failed, saying why: the
                // journal no longer holds what it did.
                let outcome = match result {
                    Ok(()) => outcome,
                    Err(e) => outcome.unkept(&SessionError::Journal(e)),
                };
                self.publish(EventKind::Terminal { prompts, outcome });
                if self.stopping {
                    self.emit(Effect::Stop);
                } else {
                    self.emit(Effect::PullLater);
                }
            }
            other => self.unexpected("a sync", other),
        }
    }

    fn unexpected(&mut self, answer: &str, awaiting: Option<Awaiting>) {
        tracing::error!(session = %self.id, ?awaiting, "{answer} arrived that nothing asked for");
        self.awaiting = awaiting;
    }

    /// A new run's state.
    fn new_run(&self, prompts: Vec<u64>, turns: u32, now: Instant) -> Run {
        let priced = self.spec.model_info.cost(&Default::default()).is_some();
        Run::new(prompts, turns, now, priced)
    }

    /// The run's limits, for a lead's journal: the shared meter's budget, when
    /// it has one (sub-agents share their lead's).
    fn run_limits(&self) -> Option<crate::journal::Limits> {
        let budget = self.spec.meter.as_ref()?.budget();
        (self.spec.parent.is_none() && !budget.is_unlimited()).then(|| crate::journal::Limits {
            max_cost_usd: budget.max_cost_usd,
            max_tokens: budget.max_tokens,
            timeout_ms: budget.timeout.map(|t| t.as_millis() as u64),
        })
    }

    fn start_run(&mut self, now: Instant, mut prompt: QueuedPrompt) {
        let narrowed = self.narrow(&mut prompt);
        self.run = Some(self.new_run(vec![prompt.seq], 0, now));
        self.arm(now, prompt.seq);
        // Not synced here: the prompt is durable with the first turn boundary's
        // group, and a crashed session still finds it, since the writer outlives
        // sessions.
        let started = Record::RunStarted {
            prompt: prompt.seq,
            limits: self.run_limits(),
        };
        let records = narrowed.into_iter().chain([started]).collect();
        self.records_after(records, Message::user(prompt.text));
        match prompt.fails {
            None => self.begin_turn(now, 1),
            // Decided before it began: no model is asked.
            Some(failure) => self.end_run(now, |_| Outcome::Failed {
                class: failure.class,
                message: failure.message,
                model: None,
                partial: failure.partial,
                stats: failure.stats,
            }),
        }
    }
}

#[cfg(test)]
mod tests;
