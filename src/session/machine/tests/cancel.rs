//! A cancel arriving at every point of a run ends it exactly once, starts
//! nothing more, and leaves the session ready for the next prompt.

use super::sim::{Sim, calls, spec, text};
use crate::conversation::Message;
use crate::error::{LlmError, StreamError};
use crate::journal::Record;
use crate::protocol::{EventKind, Outcome};
use crate::session::machine::{Effect, Input};

type Step = fn(&mut Sim);

/// A run that meets every phase: a retry, a read alone, a write alone, a read,
/// two calls that bound themselves in parallel, a final answer.
fn script() -> Vec<(&'static str, Step)> {
    vec![
        ("the prompt", |s| {
            s.prompt("go");
        }),
        ("a retryable failure", |s| {
            s.fail_stream(LlmError::Stream(StreamError::Empty));
        }),
        ("the retry is due", Sim::retry_due),
        ("a tool turn", |s| {
            let mut turn = calls(&[("r1", "Read"), ("w1", "Write"), ("r2", "Read")]);
            turn.message.text = "looking around".into();
            s.answer(turn);
        }),
        ("r1 done", |s| s.finish("r1", "ok")),
        ("w1 done", |s| s.finish("w1", "ok")),
        ("r2 done", |s| s.finish("r2", "ok")),
        ("a second tool turn", |s| {
            s.answer(calls(&[("t1", "Task"), ("t2", "Task")]));
        }),
        ("t2 done", |s| s.finish("t2", "ok")),
        ("t1 done", |s| s.finish("t1", "ok")),
        ("the answer", |s| s.answer(text("done"))),
    ]
}

/// The last text the model had said.
fn last_text(sim: &Sim) -> String {
    sim.events
        .iter()
        .rev()
        .find_map(|e| match e {
            EventKind::TurnFinished { text, .. } if !text.is_empty() => Some(text.clone()),
            _ => None,
        })
        .unwrap_or_default()
}

#[test]
fn a_cancel_at_every_point_of_a_run_ends_it_exactly_once() {
    let steps = script();
    for k in 1..=steps.len() {
        let mut sim = Sim::new(spec());
        for (_, step) in &steps[..k] {
            step(&mut sim);
        }
        let at = steps[k - 1].0;
        let finished = k == steps.len();
        let said = last_text(&sim);
        let (requests, started) = (sim.requests.len(), sim.started.len());
        let seq = sim.cancel();
        if let Some((stream, _)) = sim.retry.take() {
            sim.input(Input::RetryDue { stream });
        }

        let terminals = sim.terminals();
        assert_eq!(terminals.len(), 1, "after {at}: {terminals:?}");
        let (prompts, outcome) = &terminals[0];
        assert_eq!(prompts, &[1], "after {at}");
        match outcome {
            Outcome::Completed { .. } => assert!(finished, "after {at}: {outcome:?}"),
            Outcome::Cancelled { partial, .. } => {
                assert!(!finished, "after {at}");
                assert_eq!(partial, &said, "after {at}");
            }
            Outcome::Failed { .. } | Outcome::Partial { .. } | Outcome::TimedOut { .. } => {
                panic!("after {at}: {outcome:?}")
            }
        }
        let ends = sim
            .journal
            .iter()
            .filter(|r| matches!(r, Record::Terminal { .. }));
        assert_eq!(ends.count(), 1, "after {at}");
        assert_eq!(
            (sim.requests.len(), sim.started.len()),
            (requests, started),
            "after {at}: nothing starts after a cancel"
        );
        assert!(sim.running.is_empty() && sim.stream.is_none(), "after {at}");
        assert!(
            sim.effects.contains(&Effect::CancelDone { seq }),
            "after {at}"
        );
        assert_eq!(
            sim.queue.take_cancel(),
            None,
            "after {at}: the cancel was answered"
        );
        assert!(
            sim.violations.is_empty(),
            "after {at}: {:?}",
            sim.violations
        );

        let next = sim.prompt("and now?");
        assert_eq!(
            sim.requests.len(),
            requests + 1,
            "after {at}: the session takes the next prompt"
        );
        sim.answer(text("ready"));
        assert!(
            matches!(sim.outcome(next), Some(Outcome::Completed { .. })),
            "after {at}"
        );
    }
}

#[test]
fn a_cancel_stamped_before_a_prompt_never_cancels_its_run() {
    let mut sim = Sim::new(spec());
    let p = sim.prompt("go");
    sim.input(Input::Cancel { seq: p - 1 });
    assert!(sim.terminals().is_empty());
    assert_eq!(sim.effects.last(), Some(&Effect::CancelDone { seq: p - 1 }));
    sim.answer(text("done"));
    assert!(matches!(sim.outcome(p), Some(Outcome::Completed { .. })));
}

#[test]
fn a_turn_that_crosses_a_cancel_is_kept_without_its_calls() {
    let mut sim = Sim::new(spec());
    sim.prompt("go");
    let stream = sim.stream.take().expect("streaming");
    // The cancel reaches the machine; the stream finishes before it hears of it.
    let effects = sim.machine.handle(sim.now, Input::Cancel { seq: 9 });
    assert_eq!(effects, [Effect::CancelStream { stream }]);
    let mut turn = calls(&[("w1", "Write")]);
    turn.message.text = "half a plan".into();
    let effects = sim.machine.handle(
        sim.now,
        Input::TurnFinished {
            stream,
            result: Ok(turn),
        },
    );
    assert!(
        !effects
            .iter()
            .any(|e| matches!(e, Effect::StartTool { .. }))
    );
    let kept = effects.iter().find_map(|e| match e {
        Effect::Journal(records) => records.iter().find_map(|r| match r {
            Record::Message {
                message: Message::Assistant(a),
            } => Some(a.clone()),
            _ => None,
        }),
        _ => None,
    });
    let kept = kept.expect("the turn is journaled");
    assert_eq!(
        (kept.text.as_str(), kept.tool_calls.len()),
        ("half a plan", 0)
    );
    assert_eq!(effects.last(), Some(&Effect::Sync));
    let effects = sim.machine.handle(sim.now, Input::Synced(Ok(())));
    let outcome = effects.iter().find_map(|e| match e {
        Effect::Publish(EventKind::Terminal { outcome, .. }) => Some(outcome.clone()),
        _ => None,
    });
    assert!(
        matches!(&outcome, Some(Outcome::Cancelled { partial, .. }) if partial == "half a plan"),
        "{outcome:?}"
    );
}
