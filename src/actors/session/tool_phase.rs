//! The tool phase of a turn: the calls cut into batches (consecutive safe calls
//! together, each unsafe call alone), one ToolRunner per call, results recorded as
//! they come and handed back to the model in call order.

use std::collections::{HashMap, VecDeque};

use ractor::{Actor, ActorId, ActorRef};
use tokio_util::sync::CancellationToken;

use super::tool_runner::{ToolRunnerActor, ToolRunnerArgs};
use super::{Phase, SessionMsg, SessionState, begin_turn, end_cancelled, fail};
use crate::actors::prompt_queue::PromptQueueMsg;
use crate::conversation::{Message, ToolCall, ToolResult, Usage};
use crate::error::SessionError;
use crate::journal::Record;
use crate::protocol::EventKind;
use crate::runtime::FaultPoint;
use crate::tools::permissions::Gate;
use crate::tools::scheduler::{self, Batch, plan};
use crate::tools::{Changes, Concurrency, FileChange, Spent, ToolContext};

/// One turn's tool calls in flight.
#[derive(Debug)]
pub(super) struct ToolTurn {
    /// Identifies this tool turn; results from an older one are ignored.
    pub(super) seq: u64,
    /// The calls, in the order the model made them.
    pub(super) calls: Vec<ToolCall>,
    /// Batches not started yet.
    pub(super) batches: VecDeque<Batch>,
    /// Calls of the current batch not started yet.
    pub(super) waiting: VecDeque<usize>,
    /// Whether the current batch is a parallel group.
    pub(super) parallel: bool,
    /// Running calls by their ToolRunner's id.
    pub(super) running: HashMap<ActorId, usize>,
    /// Results by call position.
    pub(super) results: Vec<Option<ToolResult>>,
    /// Cancels every call of the turn.
    pub(super) cancel: CancellationToken,
    /// Calls whose tool bounds its own parallelism (Task): not counted against
    /// the turn's cap.
    pub(super) bounds_itself: Vec<bool>,
}

pub(super) async fn start_tools(
    myself: &ActorRef<SessionMsg>,
    state: &mut SessionState,
    calls: Vec<ToolCall>,
) {
    let classes: Vec<Concurrency> = calls
        .iter()
        .map(
            |c| match (state.spec.tools.get(&c.name), c.parsed_arguments()) {
                (Some(tool), Ok(input)) => tool.concurrency(&input),
                // An unknown tool or bad JSON fails at once without touching anything.
                _ => Concurrency::Safe,
            },
        )
        .collect();
    let bounds_itself: Vec<bool> = calls
        .iter()
        .map(|c| {
            state
                .spec
                .tools
                .get(&c.name)
                .is_some_and(|t| t.bounds_itself())
        })
        .collect();
    let seq = state.next_id();
    let Some(run) = state.run.as_mut() else {
        return;
    };
    run.stats.tool_calls += calls.len() as u32;
    run.phase = Phase::Tools(ToolTurn {
        seq,
        results: vec![None; calls.len()],
        calls,
        batches: plan(&classes).into(),
        waiting: VecDeque::new(),
        parallel: false,
        running: HashMap::new(),
        cancel: CancellationToken::new(),
        bounds_itself,
    });
    advance_tools(myself, state).await;
}

fn tool_turn(state: &mut SessionState) -> Option<&mut ToolTurn> {
    match state.run.as_mut().map(|r| &mut r.phase) {
        Some(Phase::Tools(turn)) => Some(turn),
        Some(Phase::Starting | Phase::Streaming { .. } | Phase::Backoff { .. }) | None => None,
    }
}

/// Starts whatever may start now; when the last batch is done, finishes the tool turn.
async fn advance_tools(myself: &ActorRef<SessionMsg>, state: &mut SessionState) {
    loop {
        let limit = state.env.max_parallel_tools.max(1);
        let Some(turn) = tool_turn(state) else {
            return;
        };
        if turn.cancel.is_cancelled() {
            turn.waiting.clear();
            turn.batches.clear();
        }
        let starting = scheduler::admit(
            &mut turn.waiting,
            turn.running.values().copied(),
            &turn.bounds_itself,
            turn.parallel,
            limit,
        );
        if !starting.is_empty() {
            start_calls(myself, state, &starting).await;
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
            None => return finish_tools(myself, state).await,
        }
    }
}

/// Spawns a ToolRunner for each call of `indices`. Their start records are
/// journaled together, and if any of their tools is not read-only the journal is
/// made durable first, once for the group: a tool's effects must never precede the
/// record of the turn that asked for them, or a resumed session could run it again.
async fn start_calls(myself: &ActorRef<SessionMsg>, state: &mut SessionState, indices: &[usize]) {
    let Some(turn) = tool_turn(state) else {
        return;
    };
    let calls: Vec<ToolCall> = indices.iter().map(|i| turn.calls[*i].clone()).collect();
    let (turn_seq, cancel) = (turn.seq, turn.cancel.clone());
    let records: Vec<Record> = calls
        .iter()
        .map(|c| Record::ToolStarted {
            call_id: c.id.clone(),
        })
        .collect();
    let tools: Vec<_> = calls
        .iter()
        .map(|c| state.spec.tools.get(&c.name))
        .collect();
    let mut ready = state
        .env
        .journal
        .append_all(&state.journal_path, &records)
        .map_err(SessionError::Journal);
    if ready.is_ok() && tools.iter().flatten().any(|t| !t.read_only()) {
        ready = state.sync().await;
    }
    for ((&index, call), tool) in indices.iter().zip(calls).zip(tools) {
        let args = ToolRunnerArgs {
            turn_seq,
            index,
            tool,
            ctx: ToolContext {
                workspace: state.env.workspace.clone(),
                session: state.id,
                call_id: call.id.clone(),
                cancel: cancel.clone(),
                changes: Changes::default(),
                spent: Spent::default(),
                events: Some(state.publisher.clone()),
            },
            timeout: state.spec.tools.timeout(),
            gate: Gate {
                mode: state.spec.permission_mode,
                agent: state.spec.agent.clone(),
                approver: state.env.approver.clone(),
                remembered: state.env.remembered.clone(),
                events: Some(state.publisher.clone()),
            },
            session: myself.clone(),
            call: call.clone(),
        };
        // Announced before it runs, so that its effects (a sub-agent's events, say)
        // never come before it.
        state.publisher.publish(EventKind::ToolStarted {
            call_id: call.id.clone(),
            name: call.name.clone(),
            arguments: call.arguments.clone(),
        });
        let spawned = match &ready {
            Ok(()) => Actor::spawn_linked(None, ToolRunnerActor, args, myself.get_cell())
                .await
                .map_err(|e| format!("the tool could not be started: {e}")),
            Err(e) => Err(format!("the tool was not run: {e}")),
        };
        match spawned {
            Ok((runner, _)) => {
                if let Some(turn) = tool_turn(state) {
                    turn.running.insert(runner.get_id(), index);
                }
                let turn_number = state.run.as_ref().map_or(0, |r| r.stats.turns);
                if let Some(fault) = &state.spec.faults {
                    fault.strike(FaultPoint::AfterToolStarted(turn_number));
                }
            }
            Err(e) => {
                let result = ToolResult {
                    tool_call_id: call.id,
                    content: format!("Error: {e}"),
                    is_error: true,
                };
                store_result(state, index, result);
            }
        }
    }
}

/// Records one call's result: in the turn, as an event, and in the journal (as it
/// finishes: a tool's work must not be forgotten; it joins the transcript in call
/// order once the whole turn is done).
fn store_result(state: &mut SessionState, index: usize, result: ToolResult) {
    let Some(turn) = tool_turn(state) else {
        return;
    };
    turn.running.retain(|_, i| *i != index);
    let name = turn.calls[index].name.clone();
    turn.results[index] = Some(result.clone());
    let preview: String = result.content.chars().take(200).collect();
    state.publisher.publish(EventKind::ToolFinished {
        call_id: result.tool_call_id.clone(),
        name,
        is_error: result.is_error,
        preview,
    });
    let record = Record::Message {
        message: Message::Tool(result),
    };
    if let Err(e) = state.journal(&record) {
        tracing::error!(session = %state.id, error = %e, "cannot journal a tool result");
    }
}

/// Reports a call's file changes and adds the tokens its sub-agents spent to
/// the run's totals, whether or not its turn is still current.
pub(super) fn record_effects(
    state: &mut SessionState,
    call_id: &str,
    changes: Vec<FileChange>,
    spent: &Usage,
) {
    if let Some(run) = state.run.as_mut() {
        run.stats.usage.add(spent);
    }
    for change in changes {
        state.publisher.publish(EventKind::FileChanged {
            call_id: call_id.to_owned(),
            path: change.path,
            diff: change.diff,
        });
    }
}

pub(super) async fn on_tool_done(
    myself: &ActorRef<SessionMsg>,
    state: &mut SessionState,
    turn_seq: u64,
    index: usize,
    result: ToolResult,
) {
    let Some(turn) = tool_turn(state) else {
        return;
    };
    if turn.seq != turn_seq || turn.results.get(index).is_none_or(Option::is_some) {
        return;
    }
    store_result(state, index, result);
    let turn_number = state.run.as_ref().map_or(0, |r| r.stats.turns);
    if let Some(fault) = &state.spec.faults {
        fault.strike(FaultPoint::AfterToolResult(turn_number));
    }
    advance_tools(myself, state).await;
}

async fn finish_tools(myself: &ActorRef<SessionMsg>, state: &mut SessionState) {
    let Some(run) = state.run.as_mut() else {
        return;
    };
    let Phase::Tools(turn) = std::mem::replace(&mut run.phase, Phase::Starting) else {
        return;
    };
    let cancelled = run.cancelled.is_some();
    for (call, result) in turn.calls.iter().zip(turn.results) {
        match result {
            Some(result) => state.transcript.push(Message::Tool(result)),
            None => {
                if let Err(e) = state.record(Message::Tool(ToolResult::interrupted(&call.id))) {
                    return fail(myself, state, e).await;
                }
            }
        }
    }
    if cancelled {
        // No sync before the terminal record: a crash in between must not leave a
        // cancelled run looking resumable. end_run syncs both together.
        return end_cancelled(myself, state).await;
    }
    // A tool-turn boundary: prompts that arrived meanwhile join the conversation.
    if let Ok(queued) = ractor::call!(state.queue, PromptQueueMsg::TakeAll) {
        for prompt in queued {
            if let Some(run) = state.run.as_mut() {
                run.prompts.push(prompt.seq);
            }
            let joined = Record::PromptJoined { prompt: prompt.seq };
            if let Err(e) = state.record_after(joined, Message::user(prompt.text)) {
                return fail(myself, state, e).await;
            }
        }
    }
    if let Err(e) = state.sync().await {
        return fail(myself, state, e).await;
    }
    begin_turn(myself, state, 1).await;
}
