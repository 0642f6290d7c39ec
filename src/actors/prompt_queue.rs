//! PromptQueue: prompts that arrive while their session is busy. They wait here, in
//! order, until the session takes them at a tool-turn boundary or when its model
//! would otherwise finish. A cancel drops exactly the prompts queued before it.

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};

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
    /// Queue a prompt; replies with how many now wait.
    Push(QueuedPrompt, RpcReplyPort<usize>),
    /// Take the oldest prompt.
    TakeOne(RpcReplyPort<Option<QueuedPrompt>>),
    /// Take every waiting prompt, oldest first.
    TakeAll(RpcReplyPort<Vec<QueuedPrompt>>),
    /// Drop the prompts that arrived before a cancel stamped `seq`.
    DropBefore(u64),
}

/// The queue actor.
#[derive(Debug)]
pub(crate) struct PromptQueueActor;

impl Actor for PromptQueueActor {
    type Msg = PromptQueueMsg;
    type State = Vec<QueuedPrompt>;
    type Arguments = ();

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        (): (),
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(Vec::new())
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        queue: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            PromptQueueMsg::Push(prompt, reply) => {
                queue.push(prompt);
                let _ = reply.send(queue.len());
            }
            PromptQueueMsg::TakeOne(reply) => {
                let first = (!queue.is_empty()).then(|| queue.remove(0));
                let _ = reply.send(first);
            }
            PromptQueueMsg::TakeAll(reply) => {
                let _ = reply.send(std::mem::take(queue));
            }
            PromptQueueMsg::DropBefore(seq) => queue.retain(|p| p.seq > seq),
        }
        Ok(())
    }
}
