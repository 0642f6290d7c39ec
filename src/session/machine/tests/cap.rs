//! A model turn that asks for more calls than a turn may run: the first
//! [`MAX_CALLS_PER_TURN`] run, every other gets an error result saying why, at
//! once; and a session resumed from any prefix of such a turn's journal never runs
//! one of the others.

use super::sim::{Sim, calls, spec, text};
use crate::conversation::{Message, ToolResult};
use crate::journal::Record;
use crate::protocol::Outcome;
use crate::session::machine::tool_turn::MAX_CALLS_PER_TURN;
use crate::session::queue::PromptQueue;

/// The ids `c0` … `c99`.
fn ids() -> Vec<String> {
    (0..100).map(|i| format!("c{i}")).collect()
}

/// A turn of 100 Read calls.
fn hundred_calls() -> crate::conversation::AssistantTurn {
    let ids = ids();
    let pairs: Vec<(&str, &str)> = ids.iter().map(|id| (id.as_str(), "Read")).collect();
    calls(&pairs)
}

fn refusal(id: &str, number: usize) -> Message {
    Message::Tool(ToolResult {
        tool_call_id: id.into(),
        content: format!(
            "Error: this call was not run: a turn may make at most 64 tool calls, and this \
             was call {number}. Make the calls that were not run in a later turn."
        ),
        is_error: true,
    })
}

/// Finishes every running call, in start order, until none is left.
fn finish_all(sim: &mut Sim) {
    while let Some(id) = sim.running_ids().first().cloned() {
        sim.finish(&id, &format!("{id} output"));
    }
}

#[test]
fn a_turn_of_a_hundred_calls_runs_sixty_four_and_refuses_the_rest() {
    assert_eq!(MAX_CALLS_PER_TURN, 64);
    let mut sim = Sim::new(spec());
    let p = sim.prompt("read everything");
    sim.answer(hundred_calls());
    // The refusals are there before any call finishes.
    let refused: Vec<&str> = sim
        .journal
        .iter()
        .filter_map(|r| match r {
            Record::Message {
                message: Message::Tool(result),
            } => Some(result.tool_call_id.as_str()),
            _ => None,
        })
        .collect();
    let expected: Vec<String> = ids()[64..].to_vec();
    assert_eq!(refused, expected);
    finish_all(&mut sim);

    let started: Vec<&str> = sim.started.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(started, ids()[..64].to_vec());
    let request = sim.requests.last().expect("the model is asked again");
    let results = &request.messages[3..];
    assert_eq!(results.len(), 100);
    for (i, id) in ids().iter().enumerate() {
        let expected = if i < 64 {
            Message::Tool(ToolResult {
                tool_call_id: id.clone(),
                content: format!("{id} output"),
                is_error: false,
            })
        } else {
            refusal(id, i + 1)
        };
        assert_eq!(results[i], expected, "result {i}");
    }
    // Every call is announced and ends, the refused ones as errors.
    let finished = sim
        .event_names()
        .iter()
        .filter(|n| **n == "tool_finished")
        .count();
    assert_eq!(finished, 100);

    sim.answer(text("done"));
    assert!(matches!(sim.outcome(p), Some(Outcome::Completed { .. })));
    assert!(sim.violations.is_empty(), "{:?}", sim.violations);
}

#[test]
fn a_session_resumed_mid_turn_never_runs_a_refused_call() {
    let mut sim = Sim::new(spec());
    sim.prompt("read everything");
    sim.answer(hundred_calls());
    finish_all(&mut sim);
    let full = sim.journal.clone();
    let assistant = full
        .iter()
        .position(|r| {
            matches!(
                r,
                Record::Message {
                    message: Message::Assistant(_)
                }
            )
        })
        .expect("the turn is journaled");
    // Every cut from the turn's record to its last result, and the same cuts with
    // the refusals lost (a crash before they were written).
    for cut in assistant + 1..full.len() {
        for lose_refusals in [false, true] {
            let records: Vec<Record> = full[..cut]
                .iter()
                .filter(|r| {
                    !lose_refusals
                        || !matches!(r, Record::Message { message: Message::Tool(t) } if t.is_error)
                })
                .cloned()
                .collect();
            let mut resumed = Sim::resume(spec(), records, PromptQueue::default(), 100);
            finish_all(&mut resumed);
            for call in &resumed.started {
                let position = ids().iter().position(|id| *id == call.id).unwrap_or(0);
                assert!(position < 64, "cut at {cut}: {} ran", call.id);
            }
            let request = resumed.requests.last().expect("the model is asked again");
            for (i, id) in ids().iter().enumerate().skip(64) {
                assert!(
                    request.messages.contains(&refusal(id, i + 1)),
                    "cut at {cut}: {id} has its refusal"
                );
            }
            assert!(
                resumed.violations.is_empty(),
                "cut at {cut}: {:?}",
                resumed.violations
            );
        }
    }
}

#[test]
fn task_calls_count_apart_so_a_lead_can_fan_out_past_sixty_four() {
    let mut sim = Sim::new(spec());
    let p = sim.prompt("fan out");
    let ids: Vec<String> = (0..170).map(|i| format!("c{i}")).collect();
    // Reads and Task calls alternate until 70 reads, then only Task calls.
    let pairs: Vec<(&str, &str)> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| {
            (
                id.as_str(),
                if i % 2 == 0 && i < 140 {
                    "Read"
                } else {
                    "Task"
                },
            )
        })
        .collect();
    sim.answer(calls(&pairs));
    finish_all(&mut sim);
    let started: Vec<&str> = sim.started.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(started.iter().filter(|n| **n == "Read").count(), 64);
    assert_eq!(started.iter().filter(|n| **n == "Task").count(), 100);
    let request = sim.requests.last().expect("the model is asked again");
    let refused: Vec<&str> = request
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool(r) if r.is_error => Some(r.tool_call_id.as_str()),
            _ => None,
        })
        .collect();
    // The 65th to 70th reads: calls 128, 130, … 138.
    assert_eq!(refused, ["c128", "c130", "c132", "c134", "c136", "c138"]);
    sim.answer(text("done"));
    assert!(matches!(sim.outcome(p), Some(Outcome::Completed { .. })));
}

#[test]
fn the_caps_count_each_kind_of_call_apart() {
    use crate::session::machine::tool_turn::{MAX_DELEGATIONS_PER_TURN, past_cap};
    let mut kinds = vec![false; 65];
    kinds.extend(vec![true; MAX_DELEGATIONS_PER_TURN + 1]);
    let capped = past_cap(&kinds);
    assert_eq!(capped[63], None);
    assert_eq!(capped[64], Some(65));
    assert_eq!(capped[65 + MAX_DELEGATIONS_PER_TURN - 1], None);
    assert_eq!(
        capped[65 + MAX_DELEGATIONS_PER_TURN],
        Some(MAX_DELEGATIONS_PER_TURN + 1)
    );
}
