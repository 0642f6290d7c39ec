//! Properties of the machine over any script the model follows, any order in
//! which tool calls complete, a cancel at any point and a crash at any point
//! (the session's, which keeps everything journaled, or the process's, which
//! keeps only a durable prefix and maybe more).

use proptest::prelude::*;

use super::sim::{Sim, calls, spec, text};
use crate::error::{LlmError, StreamError};
use crate::journal::Record;
use crate::protocol::Outcome;

/// What the model does at one request.
#[derive(Clone, Debug)]
enum Say {
    /// Calls these tools (`Read`, `Write`, `Task`).
    Tools(Vec<&'static str>),
    /// Fails with a retryable error.
    Fail,
    /// Gives its final answer.
    Answer,
}

fn say() -> impl Strategy<Value = Say> {
    let tool = prop_oneof![Just("Read"), Just("Write"), Just("Task")];
    prop_oneof![
        3 => proptest::collection::vec(tool, 1..5).prop_map(Say::Tools),
        1 => Just(Say::Fail),
        1 => Just(Say::Answer),
    ]
}

/// A crash after `step` steps. `keep` says how much of what was journaled but
/// not yet durable survives it: all of it when the session crashed, a part
/// when the process did.
#[derive(Clone, Debug)]
struct Crash {
    step: usize,
    process: bool,
    keep: u8,
}

#[derive(Clone, Debug)]
struct Case {
    script: Vec<Say>,
    choices: Vec<u8>,
    cancel_at: Option<usize>,
    crash: Option<Crash>,
}

fn case() -> impl Strategy<Value = Case> {
    let crash = (0usize..40, any::<bool>(), any::<u8>()).prop_map(|(step, process, keep)| Crash {
        step,
        process,
        keep,
    });
    (
        proptest::collection::vec(say(), 0..8),
        proptest::collection::vec(any::<u8>(), 64),
        proptest::option::of(0usize..40),
        proptest::option::of(crash),
    )
        .prop_map(|(script, choices, cancel_at, crash)| Case {
            script,
            choices,
            cancel_at,
            crash,
        })
}

/// What one whole case did.
struct Played {
    /// Terminal events for the prompt, over every life of the session.
    terminals: Vec<Outcome>,
    /// Every call started that has effects and cannot be replayed (Write), over
    /// every life. (Task resumes by call id: running it again is how it resumes.)
    started_with_effects: Vec<String>,
    /// Whether the run's start (its marker and its prompt) was still in the
    /// journal at the end; a process crash can lose it before it was durable.
    run_survived: bool,
    violations: Vec<String>,
    cancelled: bool,
    crashed: bool,
}

fn play(case: &Case) -> Played {
    let mut sim = Sim::new(spec());
    let prompt = sim.prompt("go");
    let mut said = 0;
    let mut step = 0;
    let mut choices = case.choices.iter().cycle();
    let mut terminals = Vec::new();
    let mut started_with_effects = Vec::new();
    let mut violations = Vec::new();
    let (mut cancelled, mut crashed) = (false, false);
    let mut collect = |sim: &mut Sim, terminals: &mut Vec<Outcome>| {
        terminals.extend(
            sim.terminals()
                .into_iter()
                .filter(|(p, _)| p.contains(&prompt))
                .map(|(_, o)| o),
        );
        started_with_effects.extend(
            sim.started
                .iter()
                .filter(|c| c.name == "Write")
                .map(|c| c.id.clone()),
        );
        violations.append(&mut sim.violations);
    };
    while step < 200 && sim.terminals().is_empty() {
        if case.cancel_at == Some(step) && !cancelled {
            cancelled = true;
            sim.cancel();
        }
        if let Some(crash) = case.crash.as_ref().filter(|c| c.step == step && !crashed) {
            crashed = true;
            collect(&mut sim, &mut terminals);
            let mut journal = std::mem::take(&mut sim.journal);
            if crash.process {
                let extra = journal.len() - sim.durable;
                journal.truncate(sim.durable + extra * usize::from(crash.keep) / 255);
            }
            let queue = std::mem::take(&mut sim.queue);
            sim = Sim::resume(spec(), journal, queue, sim.seq);
        }
        step += 1;
        if sim.stream.is_some() {
            let id = |i: usize| format!("{said}-{i}");
            match case.script.get(said).cloned().unwrap_or(Say::Answer) {
                Say::Tools(names) => {
                    let ids: Vec<String> = (0..names.len()).map(id).collect();
                    let pairs: Vec<(&str, &str)> =
                        ids.iter().map(String::as_str).zip(names).collect();
                    sim.answer(calls(&pairs));
                }
                Say::Fail => sim.fail_stream(LlmError::Stream(StreamError::Empty)),
                Say::Answer => sim.answer(text("done")),
            }
            said += 1;
        } else if sim.retry.is_some() {
            sim.retry_due();
        } else if !sim.running.is_empty() {
            let pick = usize::from(*choices.next().unwrap_or(&0)) % sim.running.len();
            let id = sim.running[pick].2.id.clone();
            sim.finish(&id, "ok");
        } else {
            break;
        }
    }
    let run_survived = sim
        .journal
        .windows(2)
        .any(|w| matches!(w, [Record::RunStarted { .. }, Record::Message { .. }]));
    collect(&mut sim, &mut terminals);
    Played {
        terminals,
        started_with_effects,
        run_survived,
        violations,
        cancelled,
        crashed,
    }
}

/// How a run of `script` ends with nothing in its way: five failed attempts in a
/// row exhaust the retries.
fn expected_finish(script: &[Say]) -> bool {
    let mut failures = 0;
    for say in script {
        match say {
            Say::Fail => {
                failures += 1;
                if failures == 5 {
                    return false;
                }
            }
            Say::Tools(_) => failures = 0,
            Say::Answer => return true,
        }
    }
    true
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn every_run_ends_once_in_call_order_and_nothing_with_effects_runs_twice(case in case()) {
        let played = play(&case);
        prop_assert!(played.violations.is_empty(), "{:?}", played.violations);
        let expected = usize::from(played.run_survived || !played.crashed);
        prop_assert_eq!(played.terminals.len(), expected, "{:?}", played.terminals);
        let mut ids = played.started_with_effects.clone();
        ids.sort();
        ids.dedup();
        prop_assert_eq!(ids.len(), played.started_with_effects.len(), "a call with effects ran twice");
        if !played.cancelled && !played.crashed {
            let finished = matches!(played.terminals[0], Outcome::Completed { .. });
            prop_assert_eq!(finished, expected_finish(&case.script), "{:?}", played.terminals);
        }
    }
}
