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

#[cfg(test)]
mod tests {
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
