//! LlmStream: one model turn. The HTTP read runs in a task the actor owns, never
//! inside one `handle`, so a cancel always gets through; the task ends by sending
//! its session exactly one `TurnFinished`, then stops the actor. If the actor dies
//! first (its session crashed), the task is aborted and the request dropped.

use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio_util::sync::CancellationToken;

use super::SessionMsg;
use crate::actors::AbortOnDrop;
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
            let publisher = args.publisher;
            let sink = |delta: StreamDelta| match delta {
                StreamDelta::Text(text) => publisher.publish(EventKind::TextDelta { text }),
                StreamDelta::Reasoning(text) => {
                    publisher.publish(EventKind::ReasoningDelta { text })
                }
                StreamDelta::ToolCall { .. } => {}
            };
            let result = args
                .provider
                .stream_turn(&args.request, &sink, &token)
                .await;
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
