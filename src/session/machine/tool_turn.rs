//! The tool phase of a model turn: the calls cut into batches (consecutive safe
//! calls together, each unsafe call alone), started as the scheduler admits them,
//! results journaled as they come and handed back to the model in call order.
//!
//! A call whose tool has effects starts only once the records of its turn are
//! durable: a tool's effects must never precede the record of the turn that asked
//! for them, or a resumed session could run it again.
//!
//! A turn's first [`MAX_CALLS_PER_TURN`] calls run; each call after them gets an
//! error result saying why, at once, so a model that asks for thousands of calls in
//! one answer costs nothing but those results. Calls of a tool that bounds itself
//! (Task: its sub-agents wait for the run's slots, and budgets bound what they
//! spend) count apart, up to [`MAX_DELEGATIONS_PER_TURN`], so a lead can fan out
//! to thousands of sub-agents in one turn.

use std::collections::VecDeque;
use std::time::Instant;

use super::{Awaiting, Effect, Machine, Phase, ToolDone};
use crate::conversation::{Message, ToolCall, ToolResult};
use crate::journal::Record;
use crate::protocol::EventKind;
use crate::session::repeats;
use crate::tools::Concurrency;
use crate::tools::scheduler::{self, Batch, Running, plan};

/// Calls of one model turn that run, at most.
pub(crate) const MAX_CALLS_PER_TURN: usize = 64;
/// Calls of tools that bound themselves (Task) in one model turn that run, at most.
pub(crate) const MAX_DELEGATIONS_PER_TURN: usize = 10_000;

/// Which of a turn's calls are of a tool that bounds its own parallelism (Task),
/// and so count apart from the turn's cap.
pub(super) fn bounds_itself(
    tools: &crate::tools::ToolRegistry,
    calls: &[crate::conversation::ToolCall],
) -> Vec<bool> {
    calls
        .iter()
        .map(|c| tools.get(&c.name).is_some_and(|t| t.bounds_itself()))
        .collect()
}

/// For each call of a turn (`bounds_itself[i]`: call `i`'s tool bounds itself),
/// its number among the calls of its kind (from 1) when it is past its cap.
pub(crate) fn past_cap(bounds_itself: &[bool]) -> Vec<Option<usize>> {
    let (mut plain, mut delegations) = (0, 0);
    bounds_itself
        .iter()
        .map(|own| {
            let (count, cap) = if *own {
                (&mut delegations, MAX_DELEGATIONS_PER_TURN)
            } else {
                (&mut plain, MAX_CALLS_PER_TURN)
            };
            *count += 1;
            (*count > cap).then_some(*count)
        })
        .collect()
}

/// The result of a call past its cap, the `number`th of its kind in its turn: not
/// run, and why.
pub(super) fn refused(call: &ToolCall, number: usize, delegation: bool) -> ToolResult {
    let limit = if delegation {
        format!("at most {MAX_DELEGATIONS_PER_TURN} {} calls", call.name)
    } else {
        format!("at most {MAX_CALLS_PER_TURN} tool calls")
    };
    ToolResult {
        tool_call_id: call.id.clone(),
        content: format!(
            "Error: this call was not run: a turn may make {limit}, and this was call \
             {number}. Make the calls that were not run in a later turn."
        ),
        is_error: true,
    }
}

/// A hook's reason to stop as a run's stop reason names it: its first line,
/// at most 200 characters.
fn one_line(reason: &str) -> String {
    let line = reason.lines().next().unwrap_or_default().trim();
    match line.char_indices().nth(200) {
        Some((end, _)) => format!("{}…", &line[..end]),
        None => line.to_owned(),
    }
}

/// One turn's tool calls in flight.
#[derive(Debug)]
pub(super) struct ToolTurn {
    /// Identifies this tool turn; results from an older one are ignored.
    pub(super) seq: u64,
    /// The calls, in the order the model made them.
    calls: Vec<ToolCall>,
    /// Batches not started yet.
    batches: VecDeque<Batch>,
    /// Calls of the current batch not started yet.
    waiting: VecDeque<usize>,
    /// Whether the current batch is a parallel group.
    parallel: bool,
    /// Calls started and not finished, by position.
    pub(super) running: Running,
    /// Results by call position.
    results: Vec<Option<ToolResult>>,
    /// Calls whose tool bounds its own parallelism (Task): not counted against
    /// the turn's cap.
    bounds_itself: Vec<bool>,
    /// Calls an earlier incarnation of the session had started.
    resumed: Vec<bool>,
    /// How many times in a row each call has been made (see [`repeats`]).
    repeats: Vec<u32>,
}

impl Machine {
    /// Runs a turn's calls; `resumed[i]` when call `i` was started by an earlier
    /// incarnation of the session.
    pub(super) fn start_tools(&mut self, now: Instant, calls: Vec<ToolCall>, resumed: Vec<bool>) {
        let tools = &self.spec.tools;
        let classes: Vec<Concurrency> = calls
            .iter()
            .map(|c| match (tools.get(&c.name), c.parsed_arguments()) {
                (Some(tool), Ok(input)) => tool.concurrency(&input),
                // An unknown tool or bad JSON fails at once without touching anything.
                _ => Concurrency::Safe,
            })
            .collect();
        let bounds_itself = bounds_itself(tools, &calls);
        let seq = self.next_id();
        let Some(run) = self.run.as_mut() else {
            return;
        };
        run.stats.tool_calls += calls.len() as u32;
        let model_turn = run.stats.turns;
        let repeats: Vec<u32> = calls
            .iter()
            .map(|c| run.repeats.see(model_turn, c))
            .collect();
        let capped = past_cap(&bounds_itself);
        // What is not run, and why: past its cap, or made too many times in a
        // row (which also stops the run).
        let refusals: Vec<Option<ToolResult>> = calls
            .iter()
            .enumerate()
            .map(|(i, call)| match capped[i] {
                Some(number) => Some(refused(call, number, bounds_itself[i])),
                None if repeats[i] >= repeats::STOP_AT => Some(repeats::refused(call)),
                None => None,
            })
            .collect();
        if (0..calls.len()).any(|i| capped[i].is_none() && repeats[i] >= repeats::STOP_AT) {
            run.stop.get_or_insert_with(|| repeats::LOOP.to_owned());
        }
        let mut batches = plan(&classes);
        for batch in &mut batches {
            batch.calls.retain(|i| refusals[*i].is_none());
        }
        batches.retain(|b| !b.calls.is_empty());
        run.phase = Phase::Tools(Box::new(ToolTurn {
            seq,
            results: vec![None; calls.len()],
            calls,
            batches: batches.into(),
            waiting: VecDeque::new(),
            parallel: false,
            running: Running::new(bounds_itself.len()),
            bounds_itself,
            resumed,
            repeats,
        }));
        for (index, refusal) in refusals.into_iter().enumerate() {
            if let Some(result) = refusal {
                self.refuse_call(index, result);
            }
        }
        self.advance_tools(now);
    }

    /// Gives the call at `index` a result without running it, announced as any
    /// call that could not be run is.
    fn refuse_call(&mut self, index: usize, result: ToolResult) {
        let Some(turn) = self.tool_turn() else {
            return;
        };
        let call = turn.calls[index].clone();
        self.publish(EventKind::ToolStarted {
            call_id: call.id,
            name: call.name,
            arguments: call.arguments,
        });
        self.store_result(index, result);
    }

    fn tool_turn(&mut self) -> Option<&mut ToolTurn> {
        match self.run.as_mut().map(|r| &mut r.phase) {
            Some(Phase::Tools(turn)) => Some(turn),
            Some(
                Phase::Starting
                | Phase::Streaming { .. }
                | Phase::Backoff { .. }
                | Phase::Background { .. }
                | Phase::StopHooks { .. },
            )
            | None => None,
        }
    }

    /// Starts whatever may start now; when the last batch is done, finishes the
    /// tool turn. Stops early when a start waits for a sync.
    pub(super) fn advance_tools(&mut self, now: Instant) {
        loop {
            let limit = self.max_parallel_tools.max(1);
            let cancelled = self.run.as_ref().is_some_and(super::Run::halting);
            let Some(turn) = self.tool_turn() else {
                return;
            };
            if cancelled {
                turn.waiting.clear();
                turn.batches.clear();
            }
            let starting = scheduler::admit(
                &mut turn.waiting,
                turn.running.counted(),
                &turn.bounds_itself,
                turn.parallel,
                limit,
            );
            if !starting.is_empty() {
                if self.start_calls(starting) {
                    return;
                }
                continue;
            }
            if !turn.running.is_empty() || !turn.waiting.is_empty() {
                return;
            }
            match turn.batches.pop_front() {
                Some(batch) => {
                    turn.parallel = batch.parallel;
                    turn.waiting = batch.calls.into();
                }
                None => return self.finish_tools(now),
            }
        }
    }

    /// Journals the start of the calls at `indices`, together. When one of their
    /// tools has effects, the journal is made durable first, once for the group,
    /// and the calls start with the answer (true: waiting for it).
    fn start_calls(&mut self, indices: Vec<usize>) -> bool {
        let Some(Phase::Tools(turn)) = self.run.as_ref().map(|r| &r.phase) else {
            return false;
        };
        let calls: Vec<&ToolCall> = indices.iter().map(|i| &turn.calls[*i]).collect();
        let records = calls
            .iter()
            .map(|c| Record::ToolStarted {
                call_id: c.id.clone(),
            })
            .collect();
        let tools = &self.spec.tools;
        let durable = calls
            .iter()
            .any(|c| tools.get(&c.name).is_some_and(|t| !t.read_only()));
        self.emit(Effect::Journal(records));
        if durable {
            self.ask(Awaiting::Calls(indices), Effect::Sync);
            return true;
        }
        self.launch(indices);
        false
    }

    /// Starts the calls at `indices`, each announced before it runs (so that its
    /// effects, a sub-agent's events say, never come before it).
    pub(super) fn launch(&mut self, indices: Vec<usize>) {
        for index in indices {
            let Some(turn) = self.tool_turn() else {
                return;
            };
            let call = turn.calls[index].clone();
            let seq = turn.seq;
            let resumed = turn.resumed[index];
            let counts = scheduler::counts_against_cap(turn.parallel, turn.bounds_itself[index]);
            turn.running.start(index, counts);
            self.publish(EventKind::ToolStarted {
                call_id: call.id.clone(),
                name: call.name.clone(),
                arguments: call.arguments.clone(),
            });
            self.emit(Effect::StartTool {
                turn: seq,
                index,
                call,
                resumed,
            });
            #[cfg(feature = "test-support")]
            self.strike(crate::faults::FaultPoint::AfterToolStarted(self.turns()));
        }
    }

    /// Records one call's result: in the turn, as an event, and in the journal (as
    /// it finishes: a tool's work must not be forgotten; it joins the transcript in
    /// call order once the whole turn is done).
    fn store_result(&mut self, index: usize, mut result: ToolResult) {
        let Some(turn) = self.tool_turn() else {
            return;
        };
        turn.running.finish(index);
        let repeated = turn.repeats[index];
        if (repeats::NOTE_AT..repeats::STOP_AT).contains(&repeated) {
            result.content.push_str(&repeats::note(repeated));
        }
        let name = turn.calls[index].name.clone();
        turn.results[index] = Some(result.clone());
        let preview: String = result.content.chars().take(200).collect();
        self.publish(EventKind::ToolFinished {
            call_id: result.tool_call_id.clone(),
            name,
            is_error: result.is_error,
            preview,
        });
        self.emit(Effect::Journal(vec![Record::Message {
            message: Message::Tool(result),
        }]));
    }

    /// A call ended. Its file changes and the tokens its sub-agents spent count
    /// whether or not its turn is still current; its result only if it is.
    pub(super) fn on_tool_done(&mut self, now: Instant, done: ToolDone) {
        let ToolDone {
            turn: turn_seq,
            index,
            result,
            changes,
            spent,
            stop,
            narrowed,
        } = done;
        if let Some(run) = self.run.as_mut() {
            run.stats.charge(&spent.usage, spent.cost_usd);
        }
        // The session is narrowed now, whatever became of the call's turn.
        if let Some(narrow) = narrowed {
            self.emit(Effect::Journal(vec![crate::session::narrowed::record(
                &narrow,
            )]));
        }
        self.check_budget();
        for change in changes {
            // A call cut off after its write has an error for a result: then
            // only the event holds the diff of a file that was there.
            let held = !change.compared
                && (change.created || (!result.is_error && result.content.contains(&change.diff)));
            self.publish(EventKind::FileChanged {
                call_id: result.tool_call_id.clone(),
                path: change.path,
                diff: change.diff,
                created: change.created,
                held,
                calls: change.calls,
                count: change.count,
            });
        }
        let Some(turn) = self.tool_turn() else {
            return;
        };
        if turn.seq != turn_seq || turn.results.get(index).is_none_or(Option::is_some) {
            return;
        }
        self.store_result(index, result);
        // A hook that ends the agent ends this run, not a later one.
        if let Some(reason) = stop {
            self.stop_run(now, &format!("hook: {}", one_line(&reason)));
        }
        #[cfg(feature = "test-support")]
        self.strike(crate::faults::FaultPoint::AfterToolResult(self.turns()));
        self.advance_tools(now);
    }

    /// Every call has its result: they join the transcript in call order (a call
    /// that never ran as interrupted); then the run ends if it was cancelled, or
    /// takes the prompts that arrived meanwhile and goes on.
    fn finish_tools(&mut self, now: Instant) {
        let Some(run) = self.run.as_mut() else {
            return;
        };
        let Phase::Tools(turn) = std::mem::replace(&mut run.phase, Phase::Starting) else {
            return;
        };
        let cancelled = run.halting();
        for (call, result) in turn.calls.iter().zip(turn.results) {
            match result {
                Some(result) => self.transcript.push(Message::Tool(result)),
                None => self.record(Message::Tool(ToolResult::interrupted(&call.id))),
            }
        }
        if cancelled {
            // No sync before the terminal record: a crash in between must not
            // leave a cancelled run looking resumable. The end syncs both together.
            return self.end_halted(now);
        }
        self.ask(Awaiting::Joining, Effect::TakeAll);
    }
}
