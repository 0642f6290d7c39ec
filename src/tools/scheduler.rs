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

/// Takes from the front of the current batch's `waiting` calls those that may
/// start now, in order. A parallel group runs at most `limit` calls at once, a
/// batch of one unsafe call one; calls whose tool bounds its own parallelism
/// (`bounds_itself[i]`, Task) are not counted in a parallel group. `running` are
/// the batch's calls already running.
pub fn admit(
    waiting: &mut std::collections::VecDeque<usize>,
    running: impl IntoIterator<Item = usize>,
    bounds_itself: &[bool],
    parallel: bool,
    limit: usize,
) -> Vec<usize> {
    let cap = if parallel { limit.max(1) } else { 1 };
    let free = |i: usize| parallel && bounds_itself[i];
    let mut counted = running.into_iter().filter(|&i| !free(i)).count();
    let mut starting = Vec::new();
    while let Some(&index) = waiting.front() {
        if !free(index) && counted >= cap {
            break;
        }
        waiting.pop_front();
        counted += usize::from(!free(index));
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
        let started = super::admit(&mut waiting, [0], &bounds, true, 2);
        assert_eq!(started, [1, 2, 3]);
        assert_eq!(waiting, [4]);
        // Nothing more until one finishes.
        assert!(super::admit(&mut waiting, [0, 1, 2, 3], &bounds, true, 2).is_empty());
        assert_eq!(super::admit(&mut waiting, [1, 2, 3], &bounds, true, 2), [4]);
    }

    #[test]
    fn an_unsafe_batch_runs_one_call_even_a_self_bounded_one() {
        let bounds = [true];
        let mut waiting: VecDeque<usize> = [0].into();
        assert!(super::admit(&mut waiting, [0], &bounds, false, 10).is_empty());
        let mut waiting: VecDeque<usize> = [0].into();
        assert_eq!(super::admit(&mut waiting, [], &bounds, false, 10), [0]);
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
