//! Cuts one turn's tool calls into batches: consecutive concurrency-safe calls form
//! one parallel group; each unsafe call runs alone, in order. Pure code.

use crate::tools::Concurrency;

/// Calls run in parallel by default, at most.
pub const DEFAULT_MAX_PARALLEL: usize = 10;

/// Calls that run together.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Batch {
    /// Indices into the turn's calls, ascending.
    pub calls: Vec<usize>,
    /// True for a group of safe calls.
    pub parallel: bool,
}

/// Plans the batches for calls with these concurrency classes.
pub fn plan(calls: &[Concurrency]) -> Vec<Batch> {
    let mut batches: Vec<Batch> = Vec::new();
    for (i, c) in calls.iter().enumerate() {
        match c {
            Concurrency::Safe => match batches.last_mut() {
                Some(b) if b.parallel => b.calls.push(i),
                _ => batches.push(Batch {
                    calls: vec![i],
                    parallel: true,
                }),
            },
            Concurrency::Unsafe { .. } => batches.push(Batch {
                calls: vec![i],
                parallel: false,
            }),
        }
    }
    batches
}

/// Whether a call counts against its batch's cap: every call of a batch of one
/// unsafe call does, and in a parallel group every call whose tool does not bound
/// its own parallelism (Task).
pub fn counts_against_cap(parallel: bool, bounds_itself: bool) -> bool {
    !(parallel && bounds_itself)
}

/// The calls of a batch that are running, kept as they start and finish, and how
/// many of them count against the cap: a turn of ten thousand Task calls is not
/// counted again each time one finishes.
#[derive(Clone, Debug)]
pub struct Running {
    /// By call position: running, and whether it counts against the cap.
    calls: Vec<Option<bool>>,
    len: usize,
    counted: usize,
}

impl Running {
    /// None of a turn's `calls` calls running.
    pub fn new(calls: usize) -> Self {
        Self {
            calls: vec![None; calls],
            len: 0,
            counted: 0,
        }
    }

    /// The call at `index` started.
    pub fn start(&mut self, index: usize, counts: bool) {
        if let Some(slot @ None) = self.calls.get_mut(index) {
            *slot = Some(counts);
            self.len += 1;
            self.counted += usize::from(counts);
        }
    }

    /// The call at `index` finished (nothing, if it was not running).
    pub fn finish(&mut self, index: usize) {
        if let Some(slot) = self.calls.get_mut(index)
            && let Some(counts) = slot.take()
        {
            self.len -= 1;
            self.counted -= usize::from(counts);
        }
    }

    /// No call is running.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Running calls that count against the cap.
    pub fn counted(&self) -> usize {
        self.counted
    }
}

/// Takes from the front of the current batch's `waiting` calls those that may
/// start now, in order. A parallel group runs at most `limit` calls at once, a
/// batch of one unsafe call one; calls whose tool bounds its own parallelism
/// (`bounds_itself[i]`, Task) are not counted in a parallel group. `counted` are
/// the batch's running calls that count ([`Running::counted`]).
pub fn admit(
    waiting: &mut std::collections::VecDeque<usize>,
    counted: usize,
    bounds_itself: &[bool],
    parallel: bool,
    limit: usize,
) -> Vec<usize> {
    let cap = if parallel { limit.max(1) } else { 1 };
    let mut counted = counted;
    let mut starting = Vec::new();
    while let Some(&index) = waiting.front() {
        let counts = counts_against_cap(parallel, bounds_itself[index]);
        if counts && counted >= cap {
            break;
        }
        waiting.pop_front();
        counted += usize::from(counts);
        starting.push(index);
    }
    starting
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    #[test]
    fn a_parallel_group_fills_its_cap_and_self_bounded_calls_do_not_count() {
        // Calls 0-4: 1 and 3 are Task calls; 0 is already running; cap 2.
        let bounds = [false, true, false, true, false];
        let mut waiting: VecDeque<usize> = [1, 2, 3, 4].into();
        let mut running = Running::new(bounds.len());
        running.start(0, counts_against_cap(true, bounds[0]));
        let started = super::admit(&mut waiting, running.counted(), &bounds, true, 2);
        assert_eq!(started, [1, 2, 3]);
        assert_eq!(waiting, [4]);
        for i in started {
            running.start(i, counts_against_cap(true, bounds[i]));
        }
        // Nothing more until one that counts finishes: a Task call's end frees nothing.
        assert!(super::admit(&mut waiting, running.counted(), &bounds, true, 2).is_empty());
        running.finish(1);
        assert!(super::admit(&mut waiting, running.counted(), &bounds, true, 2).is_empty());
        running.finish(0);
        assert_eq!(
            super::admit(&mut waiting, running.counted(), &bounds, true, 2),
            [4]
        );
    }

    #[test]
    fn running_calls_are_counted_once_and_a_call_not_running_finishes_nothing() {
        let mut running = Running::new(3);
        assert!(running.is_empty());
        running.start(0, true);
        running.start(0, true);
        running.start(1, false);
        assert_eq!(running.counted(), 1);
        running.finish(2);
        running.finish(5);
        assert_eq!(running.counted(), 1);
        running.finish(0);
        running.finish(0);
        assert_eq!(running.counted(), 0);
        assert!(!running.is_empty());
        running.finish(1);
        assert!(running.is_empty());
    }

    #[test]
    fn an_unsafe_batch_runs_one_call_even_a_self_bounded_one() {
        let bounds = [true];
        let mut waiting: VecDeque<usize> = [0].into();
        assert!(super::admit(&mut waiting, 1, &bounds, false, 10).is_empty());
        let mut waiting: VecDeque<usize> = [0].into();
        assert_eq!(super::admit(&mut waiting, 0, &bounds, false, 10), [0]);
    }

    use super::*;

    fn unsafe_() -> Concurrency {
        Concurrency::Unsafe {
            resources: vec!["*".into()],
        }
    }

    #[test]
    fn safe_runs_group_and_unsafe_calls_stand_alone() {
        let calls = [
            Concurrency::Safe,
            Concurrency::Safe,
            unsafe_(),
            unsafe_(),
            Concurrency::Safe,
        ];
        assert_eq!(
            plan(&calls),
            vec![
                Batch {
                    calls: vec![0, 1],
                    parallel: true
                },
                Batch {
                    calls: vec![2],
                    parallel: false
                },
                Batch {
                    calls: vec![3],
                    parallel: false
                },
                Batch {
                    calls: vec![4],
                    parallel: true
                },
            ]
        );
    }

    #[test]
    fn no_calls_no_batches() {
        assert!(plan(&[]).is_empty());
    }
}
