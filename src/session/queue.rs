//! The order of a session's prompts and cancels. Prompts and cancels share one
//! process-wide sequence of stamps: a cancel applies to what arrived before it and
//! never to what came after. Pure code; the Orchestrator keeps each session's
//! [`PromptQueue`] beside it ([`SharedQueue`]), so that it outlives the session's
//! crashes.

/// A prompt stamped with its arrival order.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct QueuedPrompt {
    /// Process-wide arrival order; cancels carry one too.
    pub(crate) seq: u64,
    /// The prompt.
    pub(crate) text: String,
    /// A message for the run in progress (`steer`): it joins that run even when
    /// the model is about to give its final answer, instead of waiting for a run
    /// of its own.
    pub(crate) steer: bool,
    /// The run this prompt starts fails at once, without asking the model (a
    /// sub-agent's check whose attempts are spent: its last run on record is
    /// that failure).
    pub(crate) fails: Option<Failure>,
    /// The result of this background sub-agent (its task id): it joins the run
    /// in progress, as a steer does, and never starts one.
    pub(crate) background: Option<crate::protocol::SessionId>,
    /// What that background sub-agent spent, rolled into the run it joins.
    pub(crate) spent: Option<crate::tools::Spending>,
    /// What the slash command this prompt came from narrows the session to,
    /// from the run that takes it on (its `allowed-tools`).
    pub(crate) narrow: Option<crate::tools::narrowing::Narrow>,
}

/// How a run started by a failing prompt ends.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Failure {
    /// The error class (`check`).
    pub(crate) class: String,
    /// What failed.
    pub(crate) message: String,
    /// The agent's last answer.
    pub(crate) partial: String,
    /// What its answering took.
    pub(crate) stats: crate::protocol::RunStats,
}

/// Whether a cancel stamped `cancel` applies to a run answering `prompts`: only if
/// it came after all of them (a prompt sent after a cancel is never cancelled by
/// it).
pub(crate) fn cancels(cancel: u64, prompts: &[u64]) -> bool {
    prompts.iter().all(|p| *p < cancel)
}

/// A session's queue, shared by the Orchestrator, which fills it and keeps it
/// across the session's crashes, and the session, which takes from it.
#[derive(Clone, Debug, Default)]
pub(crate) struct SharedQueue(std::sync::Arc<std::sync::Mutex<PromptQueue>>);

impl SharedQueue {
    /// The queue, for one short, synchronous operation.
    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, PromptQueue> {
        // Every operation on the queue completes or changes nothing: a panic
        // cannot leave it half-updated.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The prompts waiting for a session, and the cancel it has not acted on yet.
#[derive(Debug, Default)]
pub(crate) struct PromptQueue {
    prompts: Vec<QueuedPrompt>,
    cancel: Option<u64>,
    /// Someone asked the run in progress to stop, and the session has not taken
    /// the request yet.
    stop: bool,
    /// The session's background sub-agents still running (by task id): its
    /// run does not end before their results have joined it.
    background: std::collections::BTreeSet<crate::protocol::SessionId>,
    /// The session has a run in progress (as it last said).
    running: bool,
}

impl PromptQueue {
    /// Queues a prompt.
    pub(crate) fn push(&mut self, prompt: QueuedPrompt) {
        self.prompts.push(prompt);
    }

    /// How many prompts that arrived up to `seq` still wait.
    pub(crate) fn waiting(&self, seq: u64) -> usize {
        self.prompts.iter().filter(|p| p.seq <= seq).count()
    }

    /// Takes the oldest prompt that may start a run (a background result
    /// only joins one).
    pub(crate) fn take_one(&mut self) -> Option<QueuedPrompt> {
        let first = self.prompts.iter().position(|p| p.background.is_none())?;
        Some(self.prompts.remove(first))
    }

    /// A background sub-agent of the session started.
    pub(crate) fn background_started(&mut self, task: crate::protocol::SessionId) {
        self.background.insert(task);
    }

    /// A background sub-agent ended; `result` is the message that brings its
    /// result to the run (none when a `TaskOutput` call took it).
    pub(crate) fn background_ended(
        &mut self,
        task: crate::protocol::SessionId,
        result: Option<QueuedPrompt>,
    ) {
        self.background.remove(&task);
        self.prompts.extend(result);
    }

    /// How many of the session's background sub-agents still run.
    pub(crate) fn background_running(&self) -> usize {
        self.background.len()
    }

    /// The session says whether it has a run in progress.
    pub(crate) fn set_running(&mut self, running: bool) {
        self.running = running;
    }

    /// Whether the session has work: a run in progress, or a prompt waiting
    /// that will start or join one.
    pub(crate) fn busy(&self) -> bool {
        self.running || self.prompts.iter().any(|p| p.background.is_none())
    }

    /// The prompts waiting (not background results), oldest first.
    pub(crate) fn queued(&self) -> Vec<String> {
        (self.prompts.iter())
            .filter(|p| p.background.is_none())
            .map(|p| p.text.clone())
            .collect()
    }

    /// Drops the waiting prompts (background results stay: they only join a
    /// run); returns them, oldest first, each still owed its terminal event.
    pub(crate) fn clear(&mut self) -> Vec<QueuedPrompt> {
        let (dropped, kept) = std::mem::take(&mut self.prompts)
            .into_iter()
            .partition(|p| p.background.is_none());
        self.prompts = kept;
        dropped
    }

    /// Takes every waiting prompt, oldest first.
    pub(crate) fn take_all(&mut self) -> Vec<QueuedPrompt> {
        std::mem::take(&mut self.prompts)
    }

    /// Takes the prompts that join the run in progress, oldest first: each
    /// up to the first a slash command narrows, which waits for a run of its
    /// own (its narrowing is not the running task's) with the prompts after
    /// it; background results join whatever their place.
    pub(crate) fn take_to_join(&mut self) -> Vec<QueuedPrompt> {
        let cut = (self.prompts.iter())
            .position(|p| p.narrow.is_some())
            .unwrap_or(self.prompts.len());
        let after = self.prompts.split_off(cut);
        let (results, waiting): (Vec<_>, Vec<_>) =
            after.into_iter().partition(|p| p.background.is_some());
        let mut taken = std::mem::replace(&mut self.prompts, waiting);
        taken.extend(results);
        taken
    }

    /// Takes the waiting steers (messages for the run in progress), oldest first;
    /// other prompts keep waiting for runs of their own.
    pub(crate) fn take_steers(&mut self) -> Vec<QueuedPrompt> {
        let (steers, rest) = std::mem::take(&mut self.prompts)
            .into_iter()
            .partition(|p| p.steer);
        self.prompts = rest;
        steers
    }

    /// Records that the run in progress is to stop at its next turn boundary.
    pub(crate) fn stop(&mut self) {
        self.stop = true;
    }

    /// Takes the stop request, if one waits.
    pub(crate) fn take_stop(&mut self) -> bool {
        std::mem::take(&mut self.stop)
    }

    /// A cancel stamped `seq`: drops the prompts that arrived before it (returned,
    /// oldest first: each still needs its terminal event; background results,
    /// which no one waits on, are dropped unreturned) and remembers the cancel
    /// until the session has acted on it.
    pub(crate) fn cancel(&mut self, seq: u64) -> Vec<QueuedPrompt> {
        let (dropped, kept): (Vec<_>, _) = std::mem::take(&mut self.prompts)
            .into_iter()
            .partition(|p| p.seq < seq);
        self.prompts = kept;
        self.cancel = Some(seq);
        dropped
            .into_iter()
            .filter(|p| p.background.is_none())
            .collect()
    }

    /// The session ended a run as cancelled, answering cancels up to `seq`.
    pub(crate) fn cancel_done(&mut self, seq: u64) {
        if self.cancel.is_some_and(|c| c <= seq) {
            self.cancel = None;
        }
    }

    /// Takes the remembered cancel (a session resuming after a crash asks).
    pub(crate) fn take_cancel(&mut self) -> Option<u64> {
        self.cancel.take()
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn prompt(seq: u64) -> QueuedPrompt {
        QueuedPrompt {
            seq,
            text: format!("p{seq}"),
            steer: false,
            fails: None,
            background: None,
            spent: None,
            narrow: None,
        }
    }

    #[test]
    fn steers_are_taken_apart_from_prompts_that_wait_for_runs_of_their_own() {
        let mut queue = PromptQueue::default();
        queue.push(prompt(1));
        queue.push(QueuedPrompt {
            steer: true,
            ..prompt(2)
        });
        assert_eq!(seqs(&queue.take_steers()), [2]);
        assert_eq!(seqs(&queue.take_all()), [1]);
        assert!(!queue.take_stop());
        queue.stop();
        assert!(queue.take_stop() && !queue.take_stop());
    }

    #[test]
    fn a_session_is_busy_while_it_runs_or_a_prompt_waits_and_a_clear_keeps_background_results() {
        let mut queue = PromptQueue::default();
        assert!(!queue.busy());
        queue.set_running(true);
        assert!(queue.busy());
        queue.set_running(false);
        let task = crate::protocol::SessionId::new();
        queue.background_ended(
            task,
            Some(QueuedPrompt {
                background: Some(task),
                ..prompt(1)
            }),
        );
        assert!(!queue.busy(), "a background result alone starts nothing");
        queue.push(prompt(2));
        queue.push(prompt(3));
        assert!(queue.busy());
        assert_eq!(queue.queued(), ["p2", "p3"]);
        assert_eq!(seqs(&queue.clear()), [2, 3]);
        assert!(!queue.busy() && queue.queued().is_empty());
        assert_eq!(seqs(&queue.take_steers()), Vec::<u64>::new());
        assert_eq!(seqs(&queue.take_all()), [1], "the background result stays");
    }

    #[test]
    fn a_narrowed_prompt_waits_for_a_run_of_its_own_with_the_prompts_after_it() {
        let mut queue = PromptQueue::default();
        let (narrow, _) = crate::tools::narrowing::Narrow::of("the command c", &["Read".into()]);
        queue.push(prompt(1));
        queue.push(QueuedPrompt {
            narrow: Some(narrow),
            ..prompt(2)
        });
        queue.push(prompt(3));
        let task = crate::protocol::SessionId::new();
        queue.push(QueuedPrompt {
            background: Some(task),
            ..prompt(4)
        });
        assert_eq!(seqs(&queue.take_to_join()), [1, 4]);
        assert_eq!(seqs(&queue.take_to_join()), Vec::<u64>::new());
        assert_eq!(queue.take_one().map(|p| p.seq), Some(2));
        assert_eq!(seqs(&queue.take_to_join()), [3]);
    }

    fn seqs(prompts: &[QueuedPrompt]) -> Vec<u64> {
        prompts.iter().map(|p| p.seq).collect()
    }

    #[test]
    fn a_background_result_joins_a_run_and_never_starts_one() {
        let mut queue = PromptQueue::default();
        let task = crate::protocol::SessionId::new();
        queue.background_started(task);
        assert_eq!(queue.background_running(), 1);
        let result = QueuedPrompt {
            steer: true,
            background: Some(task),
            ..prompt(3)
        };
        queue.background_ended(task, Some(result));
        assert_eq!(queue.background_running(), 0);
        queue.push(prompt(4));
        assert_eq!(queue.take_one().map(|p| p.seq), Some(4));
        assert_eq!(queue.take_one(), None, "the result waits for a run");
        assert_eq!(seqs(&queue.take_steers()), [3]);
    }

    #[test]
    fn a_cancel_applies_only_to_runs_whose_prompts_came_before_it() {
        assert!(cancels(5, &[3, 4]));
        assert!(!cancels(5, &[3, 6]));
        assert!(!cancels(5, &[5]));
    }

    #[test]
    fn a_cancel_drops_what_came_before_it_and_keeps_what_came_after() {
        let mut queue = PromptQueue::default();
        for seq in [1, 2, 5] {
            queue.push(prompt(seq));
        }
        assert_eq!(seqs(&queue.cancel(3)), [1, 2]);
        assert_eq!(queue.waiting(10), 1);
        assert_eq!(queue.take_cancel(), Some(3));
        assert_eq!(queue.take_cancel(), None);
        assert_eq!(queue.take_one().map(|p| p.seq), Some(5));
        assert_eq!(queue.take_one(), None);
    }

    #[test]
    fn a_cancel_is_remembered_until_a_run_answers_it() {
        let mut queue = PromptQueue::default();
        queue.cancel(4);
        queue.cancel_done(3);
        assert_eq!(queue.take_cancel(), Some(4), "an older answer keeps it");
        queue.cancel(4);
        queue.cancel_done(4);
        assert_eq!(queue.take_cancel(), None);
    }

    #[test]
    fn waiting_counts_only_prompts_up_to_the_stamp() {
        let mut queue = PromptQueue::default();
        for seq in [2, 4, 6] {
            queue.push(prompt(seq));
        }
        assert_eq!(queue.waiting(4), 2);
        assert_eq!(seqs(&queue.take_all()), [2, 4, 6]);
        assert_eq!(queue.waiting(10), 0);
    }

    proptest! {
        /// Whatever the order of pushes and cancels, every prompt is either
        /// dropped by exactly one cancel that came after it or still waits, in
        /// arrival order; no cancel drops a prompt that came after it.
        #[test]
        fn every_prompt_is_kept_or_dropped_once_by_a_later_cancel(
            ops in proptest::collection::vec(any::<bool>(), 0..40),
        ) {
            let mut queue = PromptQueue::default();
            let mut pushed = Vec::new();
            let mut dropped = Vec::new();
            for (seq, is_cancel) in ops.into_iter().enumerate() {
                let seq = seq as u64 + 1;
                if is_cancel {
                    let gone = queue.cancel(seq);
                    prop_assert!(gone.iter().all(|p| p.seq < seq));
                    dropped.extend(seqs(&gone));
                } else {
                    queue.push(prompt(seq));
                    pushed.push(seq);
                }
            }
            let mut kept = seqs(&queue.take_all());
            prop_assert!(kept.windows(2).all(|w| w[0] < w[1]));
            kept.extend(dropped);
            kept.sort_unstable();
            prop_assert_eq!(kept, pushed);
        }
    }
}
