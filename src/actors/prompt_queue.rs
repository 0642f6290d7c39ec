//! PromptQueue: where the prompts and cancels that the Orchestrator routes to a
//! session arrive. It queues each prompt until the session takes it (at once when
//! idle, at a tool-turn boundary, or when its model would otherwise finish), and on
//! a cancel it drops the prompts that came before it, giving each its terminal
//! event, and remembers the cancel until a run has answered it; then it has the
//! session told. The ordering rules are [`crate::session::queue`]'s.
//!
//! The queue itself is shared state ([`SharedQueue`]): the session takes prompts
//! from it without a round trip, and the Orchestrator keeps it, so neither a
//! session crash nor a crash of this actor (permanent: restarted at once over the
//! same queue) loses a queued prompt or a cancel mark.

use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef};

use crate::events::Publisher;
use crate::protocol::{EventKind, Outcome, RunStats};
use crate::session::queue::{QueuedPrompt, SharedQueue};

/// Messages of the PromptQueue.
#[derive(Debug)]
pub(crate) enum PromptQueueMsg {
    /// Queue a prompt.
    Push(QueuedPrompt),
    /// A cancel stamped `seq`: drop the prompts that arrived before it and remember
    /// it until the session has ended its run.
    Cancel(u64),
    /// Crash, for the tests of its supervision.
    #[cfg(feature = "test-support")]
    Crash,
}

/// What the session must be told once the queue has it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Queued {
    /// A prompt stamped this was queued.
    Prompt(u64),
    /// A cancel stamped this was recorded.
    Cancel(u64),
}

/// A session's inbox: its queue, where dropped prompts' terminal events go, and how
/// the session is told. A PromptQueue is started (and restarted) with it; the
/// Orchestrator keeps it, and uses it directly while the actor is down.
pub(crate) struct Inbox {
    pub(crate) queue: SharedQueue,
    /// Tells waiters about prompts a cancel dropped.
    pub(crate) publisher: Publisher,
    /// Has the session told (through whoever knows its current incarnation).
    pub(crate) tell: Arc<dyn Fn(Queued) + Send + Sync>,
}

impl std::fmt::Debug for Inbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inbox")
            .field("queue", &self.queue)
            .finish_non_exhaustive()
    }
}

impl Inbox {
    /// Applies a prompt or a cancel to the queue, then has the session told: the
    /// session never hears of a prompt before it can take it.
    pub(crate) fn apply(&self, msg: PromptQueueMsg) {
        let queued = match msg {
            PromptQueueMsg::Push(prompt) => {
                let seq = prompt.seq;
                self.queue.lock().push(prompt);
                Queued::Prompt(seq)
            }
            PromptQueueMsg::Cancel(seq) => {
                let dropped = self.queue.lock().cancel(seq);
                // Every prompt gets exactly one terminal event, a dropped one too.
                for prompt in dropped {
                    self.publisher.publish(EventKind::Terminal {
                        prompts: vec![prompt.seq],
                        outcome: Outcome::Cancelled {
                            partial: String::new(),
                            stats: RunStats::default(),
                        },
                    });
                }
                Queued::Cancel(seq)
            }
            #[cfg(feature = "test-support")]
            PromptQueueMsg::Crash => return,
        };
        (self.tell)(queued);
    }
}

/// The queue actor.
#[derive(Debug)]
pub(crate) struct PromptQueueActor;

impl Actor for PromptQueueActor {
    type Msg = PromptQueueMsg;
    type State = Arc<Inbox>;
    type Arguments = Arc<Inbox>;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        inbox: Arc<Inbox>,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(inbox)
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        #[cfg(feature = "test-support")]
        if matches!(msg, PromptQueueMsg::Crash) {
            panic!("injected fault: the prompt queue crashed");
        }
        state.apply(msg);
        Ok(())
    }
}
