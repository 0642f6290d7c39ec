//! LlmStream: one model turn. The HTTP read runs in a task the actor owns, never
//! inside one `handle`, so a cancel always gets through; the task ends by sending
//! its session exactly one `TurnFinished`, then stops the actor. If the actor dies
//! first (its session crashed), the task is aborted and the request dropped.

use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures::FutureExt;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio_util::sync::CancellationToken;

use super::SessionMsg;
use crate::actors::AbortOnDrop;
use crate::error::LlmError;
use crate::events::Publisher;
use crate::llm::{ChatRequest, Provider, StreamDelta};
use crate::protocol::EventKind;

/// Messages of an LlmStream.
#[derive(Debug)]
pub(crate) enum LlmStreamMsg {
    /// Stop reading; the session gets `TurnFinished` with a cancelled error.
    Cancel,
}

/// What an LlmStream needs.
#[derive(Debug)]
pub(crate) struct LlmStreamArgs {
    pub(crate) request: ChatRequest,
    pub(crate) provider: Arc<dyn Provider>,
    pub(crate) publisher: Publisher,
    pub(crate) session: ActorRef<SessionMsg>,
    /// Identifies this stream to the session, which ignores stale ones.
    pub(crate) stream_id: u64,
    /// Publish no text or reasoning (a compaction's summary).
    pub(crate) quiet: bool,
}

/// The running stream.
#[derive(Debug)]
pub(crate) struct LlmStreamState {
    cancel: CancellationToken,
    _task: AbortOnDrop,
}

/// The LlmStream actor.
#[derive(Debug)]
pub(crate) struct LlmStreamActor;

impl Actor for LlmStreamActor {
    type Msg = LlmStreamMsg;
    type State = LlmStreamState;
    type Arguments = LlmStreamArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: LlmStreamArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let cancel = CancellationToken::new();
        let token = cancel.clone();
        let task = tokio::spawn(async move {
            let deltas = Coalescer::new(args.publisher, args.quiet);
            let sink = |delta: StreamDelta| deltas.push(delta);
            // A panicking provider must still answer its session, or the session
            // would wait forever: the panic becomes a `Crash`-class turn failure.
            // The call is made inside the guarded future, so a provider that panics
            // before returning its future is caught too.
            let turn = async {
                args.provider
                    .stream_turn(&args.request, &sink, &token)
                    .await
            };
            let result = match AssertUnwindSafe(turn).catch_unwind().await {
                Ok(result) => result,
                Err(panic) => Err(LlmError::Crashed(crate::actors::panic_message(
                    panic.as_ref(),
                ))),
            };
            deltas.flush();
            let _ = args.session.cast(SessionMsg::TurnFinished {
                stream_id: args.stream_id,
                result,
            });
            myself.stop(None);
        });
        Ok(LlmStreamState {
            cancel,
            _task: AbortOnDrop(task),
        })
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            LlmStreamMsg::Cancel => state.cancel.cancel(),
        }
        Ok(())
    }
}

/// Progress deltas are coalesced to at most one event per window: a renderer needs
/// no more, and thousands of parallel streams would otherwise flood the bus. The
/// first delta goes out at once, so a turn shows as streaming without delay.
const DELTA_WINDOW: Duration = Duration::from_millis(50);

#[derive(Debug)]
struct Coalescer {
    publisher: Publisher,
    quiet: bool,
    pending: Mutex<Pending>,
}

#[derive(Debug, Default)]
struct Pending {
    text: String,
    reasoning: String,
    last: Option<Instant>,
}

impl Coalescer {
    fn new(publisher: Publisher, quiet: bool) -> Self {
        Self {
            publisher,
            quiet,
            pending: Mutex::default(),
        }
    }

    fn push(&self, delta: StreamDelta) {
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        match delta {
            StreamDelta::Text(_) | StreamDelta::Reasoning(_) if self.quiet => {}
            StreamDelta::Text(text) => pending.text.push_str(&text),
            StreamDelta::Reasoning(text) => pending.reasoning.push_str(&text),
            StreamDelta::ToolCall { .. } => {}
            StreamDelta::RateLimited { wait } => {
                let delay_ms = wait.as_millis() as u64;
                self.publisher.publish(EventKind::RateLimited { delay_ms });
            }
        }
        if pending.last.is_none_or(|at| at.elapsed() >= DELTA_WINDOW) {
            self.publish(&mut pending);
        }
    }

    fn flush(&self) {
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        self.publish(&mut pending);
    }

    fn publish(&self, pending: &mut Pending) {
        pending.last = Some(Instant::now());
        if !pending.reasoning.is_empty() {
            let text = std::mem::take(&mut pending.reasoning);
            self.publisher.publish(EventKind::ReasoningDelta { text });
        }
        if !pending.text.is_empty() {
            let text = std::mem::take(&mut pending.text);
            self.publisher.publish(EventKind::TextDelta { text });
        }
    }
}
