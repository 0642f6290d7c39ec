//! The model turn of a run: the request (the transcript after protocol
//! enforcement), what the finished turn means, and retries with backoff.

use std::time::Instant;

use super::{Effect, Machine, Phase, Run};
use crate::conversation::{AssistantTurn, Message, ToolResult, Usage, enforce_protocol};
use crate::error::{ErrorClass, LlmError, SessionError};
use crate::llm::ChatRequest;
use crate::llm::retry::AfterFailure;
use crate::protocol::EventKind;
use crate::session::budget;
use crate::session::turn::{self, Decision};

impl Machine {
    /// Starts attempt `attempt` of a model turn (a new turn when 1).
    pub(super) fn begin_turn(&mut self, now: Instant, attempt: u32) {
        let max_turns = self.spec.max_turns;
        let shared = self.spec.meter.as_ref().and_then(|m| m.exhausted(now));
        let Some(run) = self.run.as_mut() else {
            return;
        };
        if attempt == 1 {
            // A turn boundary: where budgets take effect.
            if run.stats.turns >= max_turns {
                run.stop.get_or_insert_with(|| budget::TURNS.to_owned());
            }
            if let Some(reason) = shared {
                run.stop.get_or_insert_with(|| reason.to_owned());
            }
        }
        if run.stop.as_deref() == Some(budget::TIME) {
            // The run's deadline passed between turns.
            run.stop = None;
            run.timed_out = true;
            return self.end_halted(now);
        }
        if run.stop.is_some() {
            // A turn boundary: where a requested stop takes effect.
            return self.end_stopped(now);
        }
        if self.needs_compaction(attempt)
            && self.compact(attempt, false) == super::compact::Compaction::Summarizing
        {
            return;
        }
        let Some(run) = self.run.as_mut() else {
            return;
        };
        if attempt == 1 {
            run.stats.turns += 1;
            #[cfg(feature = "test-support")]
            self.strike(crate::faults::FaultPoint::BeforeTurn(self.turns()));
        }
        let turn = self.turns();
        let request = self.request(turn);
        let stream = self.next_id();
        if let Some(run) = self.run.as_mut() {
            run.phase = Phase::Streaming {
                stream,
                attempt,
                compacting: false,
            };
        }
        // Announced before the stream exists, so no delta can come before it.
        self.publish(EventKind::TurnStarted { turn, attempt });
        self.emit(Effect::StartStream {
            stream,
            request,
            quiet: false,
        });
    }

    /// The request for model turn `turn`: the system prompt, then the transcript
    /// after protocol enforcement, then the tools.
    fn request(&self, turn: u32) -> ChatRequest {
        let (messages, repairs) = enforce_protocol(&self.transcript);
        if repairs.inserted + repairs.dropped > 0 {
            tracing::warn!(session = %self.id, ?repairs, "repaired the transcript before the request");
        }
        let spec = &self.spec;
        let mut all = Vec::with_capacity(messages.len() + 1);
        if !spec.system_prompt.is_empty() {
            all.push(Message::system(spec.system_prompt.to_string()));
        }
        all.extend(messages);
        ChatRequest {
            model: spec.model.clone(),
            messages: all,
            tools: spec.tools.specs(),
            max_tokens: None,
            place: format!("{}/turn {turn}", spec.place),
        }
    }

    pub(super) fn on_turn_finished(
        &mut self,
        now: Instant,
        stream: u64,
        result: Result<AssistantTurn, LlmError>,
    ) {
        let Some(run) = self.run.as_mut() else {
            return;
        };
        let Phase::Streaming {
            stream: current,
            attempt,
            compacting,
        } = run.phase
        else {
            return;
        };
        if current != stream {
            return;
        }
        run.phase = Phase::Starting;
        if compacting {
            return self.on_summary(now, attempt, &result);
        }
        let cancelled = run.halting();
        let error = match result {
            Ok(turn) if cancelled => return self.record_turn_and_cancel(now, turn),
            Ok(turn) => match turn::decide(&turn) {
                Decision::RunTools => {
                    self.account(&turn);
                    if let Some(reason) = self.spent_budget() {
                        // The budget ran out with this turn: its calls would
                        // spend more (a Task call most of all), so none runs.
                        for call in &turn.message.tool_calls {
                            self.record(Message::Tool(ToolResult {
                                tool_call_id: call.id.clone(),
                                content: format!(
                                    "Error: not run: the agent was stopped ({reason})"
                                ),
                                is_error: true,
                            }));
                        }
                        return self.end_stopped(now);
                    }
                    let fresh = vec![false; turn.message.tool_calls.len()];
                    return self.start_tools(now, turn.message.tool_calls, fresh);
                }
                Decision::Finish { truncated } => {
                    // The run ends here unless steers arrived meanwhile.
                    let text = self.account(&turn);
                    let finishing = super::Awaiting::Finishing { text, truncated };
                    return self.ask(finishing, Effect::TakeSteers);
                }
                Decision::Fail(e) => LlmError::Stream(e),
            },
            // Cut because the run's time was up: what it said is its partial work.
            Err(LlmError::Cancelled { partial }) if !cancelled && run_stopping(&self.run) => {
                let mut turn = *partial;
                turn.message.tool_calls.clear();
                self.account(&turn);
                return self.end_stopped(now);
            }
            Err(LlmError::Cancelled { partial }) => {
                return self.record_turn_and_cancel(now, *partial);
            }
            Err(error) => error,
        };
        // A cancel that crossed a failing stream still ends the run as cancelled.
        if cancelled {
            return self.end_halted(now);
        }
        // The window was passed after all: compact once, whatever the estimate
        // said, and try again.
        if error.class() == ErrorClass::ContextOverflow && self.compact_for_overflow(now, attempt) {
            return;
        }
        let policy = self.retry;
        let after = policy.after_failure(error.class(), attempt, self.jitter.sample());
        if !matches!(after, AfterFailure::Retry(_)) && self.fall_back(now, &error) {
            return;
        }
        match after {
            AfterFailure::Retry(delay) => {
                self.publish(EventKind::Retrying {
                    attempt,
                    max_attempts: policy.max_attempts,
                    delay_ms: delay.as_millis() as u64,
                    reason: error.to_string(),
                });
                tracing::info!(session = %self.id, attempt, ?delay, %error, "retrying the model turn");
                let stream = self.next_id();
                if let Some(run) = self.run.as_mut() {
                    run.phase = Phase::Backoff { stream, attempt };
                }
                self.emit(Effect::RetryAfter { stream, delay });
            }
            AfterFailure::Exhausted => {
                let e = SessionError::RetriesExhausted {
                    attempts: attempt,
                    last: Box::new(error),
                };
                self.fail(now, &e);
            }
            AfterFailure::Fatal => self.fail(now, &SessionError::Llm(error)),
        }
    }

    pub(super) fn on_retry_due(&mut self, now: Instant, stream: u64) {
        let Some(Run {
            phase:
                Phase::Backoff {
                    stream: due,
                    attempt,
                },
            ..
        }) = self.run
        else {
            return;
        };
        if due == stream {
            self.begin_turn(now, attempt + 1);
        }
    }

    /// Counts a completed turn: usage, the last text, the event, the journal.
    /// Returns the turn's text.
    pub(super) fn account(&mut self, turn: &AssistantTurn) -> String {
        if self.run.is_none() {
            return String::new();
        }
        let usage = turn.usage.unwrap_or_default();
        let cost = self.spend(usage);
        let Some(run) = self.run.as_mut() else {
            return String::new();
        };
        // A turn the provider took: a later overflow gets its own compaction.
        run.overflow_compacted = false;
        let text = turn.message.answer().to_owned();
        if !text.is_empty() {
            run.last_text = text.clone();
        }
        let finished = EventKind::TurnFinished {
            turn: run.stats.turns,
            text: text.clone(),
            tool_calls: turn.message.tool_calls.len(),
            usage,
            cost_usd: cost,
        };
        self.publish(finished);
        self.check_budget();
        if !turn.is_empty() {
            self.record(Message::Assistant(turn.message.clone()));
        }
        if usage.input_tokens > 0 {
            self.reported = (
                usage.input_tokens + usage.output_tokens,
                self.transcript.len(),
            );
        }
        text
    }

    /// Counts what a model call used against the run (and the whole run's meter,
    /// when there is one); returns its cost, when the model's prices are known.
    pub(super) fn spend(&mut self, usage: Usage) -> Option<f64> {
        let cost = self.spec.model_info.cost(&usage);
        if let Some(run) = self.run.as_mut() {
            run.stats.charge(&usage, cost);
        }
        if self.spec.meter.is_some() {
            self.emit(Effect::Charge { usage, cost });
        }
        cost
    }

    /// The run was cancelled: keep what the model had said (without its tool
    /// calls, which will never run) and end the run.
    pub(super) fn record_turn_and_cancel(&mut self, now: Instant, mut turn: AssistantTurn) {
        turn.message.tool_calls.clear();
        self.account(&turn);
        self.end_halted(now);
    }
}

impl Machine {
    /// The budget the run stops for, when one ran out.
    fn spent_budget(&self) -> Option<String> {
        self.run
            .as_ref()
            .and_then(|r| r.stop.clone())
            .filter(|reason| budget::is_budget(reason))
    }
}

/// True when the run has been asked to stop.
fn run_stopping(run: &Option<Run>) -> bool {
    run.as_ref().is_some_and(|r| r.stop.is_some())
}
