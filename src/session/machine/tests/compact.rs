//! Compaction in the machine: a run pushed past its window elides, then asks for
//! a summary and goes on with it, every later request under the threshold; a
//! cancel or a stop during the summary ends the run once; an overflow gets one
//! compaction and a retry, and the next boundary can still compact.

use super::sim::{Sim, calls, spec, text};
use crate::conversation::{AssistantTurn, Message};
use crate::error::{LlmError, ProviderError};
use crate::journal::Record;
use crate::model_info::ModelInfo;
use crate::protocol::Outcome;
use crate::session::SessionSpec;
use crate::session::compaction::estimate;

const WINDOW: u64 = 4_000;

fn windowed() -> SessionSpec {
    let mut spec = spec();
    spec.model_info = ModelInfo {
        context_window: Some(WINDOW),
        ..ModelInfo::default()
    };
    spec
}

/// Reads that each return `size` characters, one a turn, until the stream that
/// is open is a summary request.
fn read_until_summary(sim: &mut Sim, size: usize) -> usize {
    for turn in 0..20 {
        let last = sim.requests.last().unwrap();
        if last.place.ends_with("/compaction") {
            return turn;
        }
        let id = format!("r{turn}");
        sim.answer(calls(&[(&id, "Read")]));
        sim.finish(&id, &"z".repeat(size));
    }
    panic!("no summary was asked for");
}

fn summary(text_: &str) -> AssistantTurn {
    text(text_)
}

#[test]
fn a_summary_request_fits_a_summarizer_with_a_smaller_window() {
    let measure = |summary_window: Option<u64>| {
        let mut spec = windowed();
        spec.summary_model = summary_window.map(|_| "small-model".to_owned());
        spec.summary_window = summary_window;
        let mut sim = Sim::new(spec);
        sim.prompt("read everything");
        read_until_summary(&mut sim, 1_000);
        let request = sim.requests.last().unwrap();
        estimate(&request.messages)
    };
    let own = measure(None);
    let small = measure(Some(WINDOW / 4));
    // Half the summarizer's window, in tokens, and less than for the session's.
    assert!(small <= WINDOW / 8 + 100, "{small}");
    assert!(small < own, "{small} against {own}");
}

#[test]
fn a_run_past_its_window_summarizes_and_every_later_request_fits() {
    let mut sim = Sim::new(windowed());
    let p = sim.prompt("read everything");
    // Results of 1 000 characters (250 tokens) are too small to elide: only a
    // summary can make room.
    read_until_summary(&mut sim, 1_000);
    let summary_request = sim.requests.last().unwrap().clone();
    assert!(summary_request.tools.is_empty());
    sim.answer(summary("SUMMARY: read r0 to r9"));
    assert!(sim.event_names().contains(&"compacted"));
    assert!(
        sim.journal
            .iter()
            .any(|r| matches!(r, Record::Compacted { .. }))
    );
    let after = sim.requests.last().unwrap();
    assert!(!after.place.ends_with("/compaction"));
    assert!(estimate(&after.messages) < (WINDOW as f64 * 0.85) as u64);
    assert_eq!(
        after.messages[1],
        Message::user("read everything"),
        "the task is kept"
    );
    let Message::User { content } = &after.messages[2] else {
        panic!("{:?}", after.messages[2])
    };
    assert!(content.ends_with("SUMMARY: read r0 to r9"));
    // The run goes on and ends once; no request past the threshold.
    sim.answer(text("done"));
    assert!(matches!(sim.outcome(p), Some(Outcome::Completed { .. })));
    for request in &sim.requests {
        assert!(estimate(&request.messages) < WINDOW, "{}", request.place);
    }
    assert!(sim.violations.is_empty(), "{:?}", sim.violations);
}

#[test]
fn large_old_results_are_elided_without_a_summary_when_that_is_enough() {
    let mut sim = Sim::new(windowed());
    let p = sim.prompt("read everything");
    for turn in 0..6 {
        let id = format!("r{turn}");
        sim.answer(calls(&[(&id, "Read")]));
        sim.finish(&id, &"z".repeat(if turn < 2 { 9_000 } else { 100 }));
    }
    assert!(
        sim.requests
            .iter()
            .all(|r| !r.place.ends_with("/compaction")),
        "eliding was enough"
    );
    assert!(sim.event_names().contains(&"compacted"));
    sim.answer(text("done"));
    assert!(matches!(sim.outcome(p), Some(Outcome::Completed { .. })));
}

#[test]
fn a_cancel_or_a_stop_during_the_summary_ends_the_run_once() {
    for stop in [false, true] {
        let mut sim = Sim::new(windowed());
        let p = sim.prompt("read everything");
        read_until_summary(&mut sim, 1_000);
        if stop {
            sim.input(crate::session::machine::Input::StopRun);
            sim.answer(summary("SUMMARY"));
        } else {
            sim.cancel();
        }
        let terminals = sim.terminals();
        assert_eq!(terminals.len(), 1, "{terminals:?}");
        match (stop, sim.outcome(p)) {
            (true, Some(Outcome::Partial { .. })) | (false, Some(Outcome::Cancelled { .. })) => {}
            other => panic!("{other:?}"),
        }
        assert!(sim.stream.is_none());
        assert!(sim.violations.is_empty(), "{:?}", sim.violations);
    }
}

#[test]
fn an_overflow_compacts_once_retries_and_the_next_boundary_still_compacts() {
    // No window known: only the provider can say the context is full.
    let mut sim = Sim::new(spec());
    let p = sim.prompt("read everything");
    for turn in 0..5 {
        let id = format!("r{turn}");
        sim.answer(calls(&[(&id, "Read")]));
        sim.finish(&id, "ok");
    }
    let overflow = || {
        LlmError::Provider(ProviderError::Status {
            status: 400,
            code: Some("context_length_exceeded".into()),
            message: "too long".into(),
            retry_after: None,
            request_id: None,
        })
    };
    sim.fail_stream(overflow());
    assert!(sim.requests.last().unwrap().place.ends_with("/compaction"));
    sim.answer(summary("SUMMARY one"));
    // The retry of the same turn.
    sim.answer(calls(&[("r5", "Read")]));
    sim.finish("r5", "ok");
    sim.answer(calls(&[("r6", "Read")]));
    sim.finish("r6", "ok");
    // A later turn overflows again: it gets its own compaction.
    sim.fail_stream(overflow());
    assert!(sim.requests.last().unwrap().place.ends_with("/compaction"));
    sim.answer(summary("SUMMARY two"));
    sim.answer(text("done"));
    assert!(matches!(sim.outcome(p), Some(Outcome::Completed { .. })));
    // A second overflow in the same turn fails the run.
    let mut sim = Sim::new(spec());
    let q = sim.prompt("x");
    for turn in 0..5 {
        let id = format!("r{turn}");
        sim.answer(calls(&[(&id, "Read")]));
        sim.finish(&id, "ok");
    }
    sim.fail_stream(overflow());
    sim.answer(summary("SUMMARY"));
    sim.fail_stream(overflow());
    assert!(matches!(sim.outcome(q), Some(Outcome::Failed { .. })));
}
