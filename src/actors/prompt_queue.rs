//! PromptQueue: prompts that arrive for a session, in order, until the session takes
//! them (at once when idle, at a tool-turn boundary, or when its model would
//! otherwise finish). It also remembers a cancel until the session has acted on it.
//!
//! Prompts and cancels are routed here by the Orchestrator rather than through the
//! session's mailbox, so a session crash loses neither: the queue lives beside the
//! session, not under it.

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};

use crate::events::Publisher;
use crate::protocol::{EventKind, Outcome, RunStats};

/// A prompt stamped with its arrival order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct QueuedPrompt {
    /// Process-wide arrival order; cancels carry one too.
    pub(crate) seq: u64,
    /// The prompt.
    pub(crate) text: String,
}

/// Messages of the PromptQueue.
#[derive(Debug)]
pub(crate) enum PromptQueueMsg {
    /// Queue a prompt.
    Push(QueuedPrompt),
    /// How many prompts that arrived up to `seq` still wait.
    Waiting(u64, RpcReplyPort<usize>),
    /// Take the oldest prompt.
    TakeOne(RpcReplyPort<Option<QueuedPrompt>>),
    /// Take every waiting prompt, oldest first.
    TakeAll(RpcReplyPort<Vec<QueuedPrompt>>),
    /// A cancel stamped `seq`: drop the prompts that arrived before it and remember
    /// it until the session has ended its run.
    Cancel(u64),
    /// The session ended its run as cancelled, answering cancels up to `seq`.
    CancelDone(u64),
    /// Take the remembered cancel, if any (a session resuming after a crash asks).
    TakeCancel(RpcReplyPort<Option<u64>>),
}

/// What the queue holds.
#[derive(Debug)]
pub(crate) struct PromptQueueState {
    prompts: Vec<QueuedPrompt>,
    cancel: Option<u64>,
    /// Tells waiters about prompts a cancel dropped.
    publisher: Publisher,
}

/// The queue actor.
#[derive(Debug)]
pub(crate) struct PromptQueueActor;

impl Actor for PromptQueueActor {
    type Msg = PromptQueueMsg;
    type State = PromptQueueState;
    type Arguments = Publisher;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        publisher: Publisher,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(PromptQueueState {
            prompts: Vec::new(),
            cancel: None,
            publisher,
        })
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            PromptQueueMsg::Push(prompt) => state.prompts.push(prompt),
            PromptQueueMsg::Waiting(seq, reply) => {
                let _ = reply.send(state.prompts.iter().filter(|p| p.seq <= seq).count());
            }
            PromptQueueMsg::TakeOne(reply) => {
                let first = (!state.prompts.is_empty()).then(|| state.prompts.remove(0));
                let _ = reply.send(first);
            }
            PromptQueueMsg::TakeAll(reply) => {
                let _ = reply.send(std::mem::take(&mut state.prompts));
            }
            PromptQueueMsg::Cancel(seq) => {
                let (dropped, kept): (Vec<QueuedPrompt>, Vec<QueuedPrompt>) =
                    std::mem::take(&mut state.prompts)
                        .into_iter()
                        .partition(|p| p.seq < seq);
                state.prompts = kept;
                state.cancel = Some(seq);
                // Every prompt gets exactly one terminal event, a dropped one too.
                for prompt in dropped {
                    state.publisher.publish(EventKind::Terminal {
                        prompts: vec![prompt.seq],
                        outcome: Outcome::Cancelled {
                            partial: String::new(),
                            stats: RunStats::default(),
                        },
                    });
                }
            }
            PromptQueueMsg::CancelDone(seq) => {
                if state.cancel.is_some_and(|c| c <= seq) {
                    state.cancel = None;
                }
            }
            PromptQueueMsg::TakeCancel(reply) => {
                let _ = reply.send(state.cancel.take());
            }
        }
        Ok(())
    }
}
