//! PromptQueue: prompts that arrive for a session, in order, until the session takes
//! them (at once when idle, at a tool-turn boundary, or when its model would
//! otherwise finish). It also remembers a cancel until the session has acted on it.
//! The ordering rules are [`crate::session::queue`]'s; this actor only holds them.
//!
//! Prompts and cancels are routed here by the Orchestrator rather than through the
//! session's mailbox, so a session crash loses neither: the queue lives beside the
//! session, not under it.

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};

use crate::events::Publisher;
use crate::protocol::{EventKind, Outcome, RunStats};
use crate::session::queue::{PromptQueue, QueuedPrompt};

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
    queue: PromptQueue,
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
            queue: PromptQueue::default(),
            publisher,
        })
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let queue = &mut state.queue;
        match msg {
            PromptQueueMsg::Push(prompt) => queue.push(prompt),
            PromptQueueMsg::Waiting(seq, reply) => {
                let _ = reply.send(queue.waiting(seq));
            }
            PromptQueueMsg::TakeOne(reply) => {
                let _ = reply.send(queue.take_one());
            }
            PromptQueueMsg::TakeAll(reply) => {
                let _ = reply.send(queue.take_all());
            }
            PromptQueueMsg::Cancel(seq) => {
                // Every prompt gets exactly one terminal event, a dropped one too.
                for prompt in queue.cancel(seq) {
                    state.publisher.publish(EventKind::Terminal {
                        prompts: vec![prompt.seq],
                        outcome: Outcome::Cancelled {
                            partial: String::new(),
                            stats: RunStats::default(),
                        },
                    });
                }
            }
            PromptQueueMsg::CancelDone(seq) => queue.cancel_done(seq),
            PromptQueueMsg::TakeCancel(reply) => {
                let _ = reply.send(queue.take_cancel());
            }
        }
        Ok(())
    }
}
