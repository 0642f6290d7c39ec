//! Cuts one turn's tool calls into batches: consecutive concurrency-safe calls form
//! one parallel group; consecutive unsafe calls whose resources are disjoint
//! (Writes to different files) form another; an unsafe call that may touch what
//! one before it touches starts a new batch, so calls on one resource run in
//! call order. Pure code.

use std::path::{Component, Path};

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
    // The resources of the last batch, when it is one of unsafe calls.
    let mut touched: Option<Vec<&str>> = None;
    for (i, c) in calls.iter().enumerate() {
        match c {
            Concurrency::Safe => match batches.last_mut() {
                Some(b) if b.parallel && touched.is_none() => b.calls.push(i),
                _ => {
                    touched = None;
                    batches.push(Batch {
                        calls: vec![i],
                        parallel: true,
                    });
                }
            },
            // A call that names no resource may touch anything.
            Concurrency::Unsafe { resources } if resources.is_empty() => {
                touched = Some(vec!["*"]);
                batches.push(Batch {
                    calls: vec![i],
                    parallel: false,
                });
            }
            Concurrency::Unsafe { resources } => match (batches.last_mut(), touched.as_mut()) {
                (Some(b), Some(touched)) if disjoint(touched, resources) => {
                    b.calls.push(i);
                    b.parallel = true;
                    touched.extend(resources.iter().map(String::as_str));
                }
                _ => {
                    touched = Some(resources.iter().map(String::as_str).collect());
                    batches.push(Batch {
                        calls: vec![i],
                        parallel: false,
                    });
                }
            },
        }
    }
    batches
}

/// Whether no resource of `these` may be one of `those`.
fn disjoint(these: &[&str], those: &[String]) -> bool {
    these
        .iter()
        .all(|a| those.iter().all(|b| !may_overlap(a, b)))
}

/// Whether two resources may be the same thing, or one inside the other: `*`
/// (the whole workspace) overlaps everything; paths, compared as written with
/// `.` and `..` worked out, overlap when one is the other or a folder above
/// it. A path that climbs out (`../x`), or an absolute path against a relative
/// one, may be anything. (Two names of one file through a link are not seen:
/// their calls may run in either order; each write is still whole, under the
/// file's lock.)
pub fn may_overlap(a: &str, b: &str) -> bool {
    let (Some(a), Some(b)) = (normal(a), normal(b)) else {
        return true;
    };
    if a.absolute != b.absolute {
        return true;
    }
    let shorter = a.parts.len().min(b.parts.len());
    a.parts[..shorter] == b.parts[..shorter]
}

/// A resource as a path: absolute or not, and its parts with `.` and `..`
/// worked out; `None` for `*`, an empty path, or one that climbs out.
struct Normal<'a> {
    absolute: bool,
    parts: Vec<&'a str>,
}

fn normal(resource: &str) -> Option<Normal<'_>> {
    if resource == "*" || resource.is_empty() {
        return None;
    }
    let mut normal = Normal {
        absolute: false,
        parts: Vec::new(),
    };
    for component in Path::new(resource).components() {
        match component {
            Component::RootDir => normal.absolute = true,
            Component::CurDir => {}
            Component::ParentDir => {
                normal.parts.pop()?;
            }
            Component::Normal(part) => normal.parts.push(part.to_str()?),
            Component::Prefix(_) => return None,
        }
    }
    Some(normal)
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

    fn on(path: &str) -> Concurrency {
        Concurrency::Unsafe {
            resources: vec![path.into()],
        }
    }

    #[test]
    fn unsafe_calls_on_disjoint_resources_run_together_and_on_one_in_order() {
        let calls = [
            on("a.txt"),
            on("src/b.rs"),
            // a.txt again: after the first.
            on("./a.txt"),
            on("c.txt"),
            Concurrency::Safe,
            on("d.txt"),
            on("e.txt"),
            unsafe_(),
            on("f.txt"),
            Concurrency::Unsafe {
                resources: Vec::new(),
            },
            on("g.txt"),
        ];
        let batches: Vec<(Vec<usize>, bool)> = (plan(&calls).into_iter())
            .map(|b| (b.calls, b.parallel))
            .collect();
        assert_eq!(
            batches,
            [
                (vec![0, 1], true),
                (vec![2, 3], true),
                (vec![4], true),
                (vec![5, 6], true),
                (vec![7], false),
                (vec![8], false),
                (vec![9], false),
                (vec![10], false),
            ]
        );
    }

    #[test]
    fn resources_overlap_when_one_may_be_or_hold_the_other() {
        for (a, b) in [
            ("a.txt", "a.txt"),
            ("a.txt", "./a.txt"),
            ("src/x/../a.rs", "src/a.rs"),
            ("src", "src/a.rs"),
            ("/w/src/a.rs", "/w/src"),
            ("/w/a.rs", "a.rs"),
            ("../a.rs", "b.rs"),
            ("*", "a.rs"),
            ("", "a.rs"),
        ] {
            assert!(may_overlap(a, b) && may_overlap(b, a), "{a} {b}");
        }
        for (a, b) in [
            ("a.txt", "b.txt"),
            ("src/a.rs", "src/b.rs"),
            ("src", "srcs/a.rs"),
            ("/w/a.rs", "/w/b.rs"),
            ("todos", "a.txt"),
        ] {
            assert!(!may_overlap(a, b) && !may_overlap(b, a), "{a} {b}");
        }
    }

    #[test]
    fn no_calls_no_batches() {
        assert!(plan(&[]).is_empty());
    }
}
