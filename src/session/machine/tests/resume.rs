//! A session restarted from any prefix of its journal, a torn last line included
//! (cut at any byte, inside a character too), carries on from where the journal
//! leaves off: it asks the model nothing it already answered, never runs a call
//! with effects twice, and ends its run once; and the journal takes the next
//! record whole after the cut.

use std::path::Path;

use super::sim::{Sim, calls, spec, text};
use crate::conversation::{Message, ToolResult};
use crate::journal::{Record, parse_journal};
use crate::protocol::Outcome;
use crate::session::machine::Input;
use crate::session::queue::PromptQueue;

/// What the model says at each turn of the recorded run.
fn model(turn: u32) -> crate::conversation::AssistantTurn {
    match turn {
        1 => calls(&[("r1", "Read"), ("w1", "Write"), ("r2", "Read")]),
        2 => calls(&[("t1", "Task"), ("t2", "Task")]),
        _ => text("all done"),
    }
}

/// The turn a request is for, from its place (`coder/turn N`).
fn turn_of(place: &str) -> u32 {
    place
        .rsplit(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Drives a session to the end of its run, the model answering by turn and every
/// call finishing in start order. Returns whether the run ended.
fn drive_to_end(sim: &mut Sim) -> bool {
    for _ in 0..100 {
        if !sim.terminals().is_empty() {
            return true;
        }
        if let Some(id) = sim.running_ids().first() {
            let id = id.clone();
            sim.finish(&id, &format!("{id} output: é ✓ 日本 🦀"));
        } else if sim.stream.is_some() {
            let turn = turn_of(&sim.requests.last().expect("a request").place);
            sim.answer(model(turn));
        } else {
            return false;
        }
    }
    false
}

/// The journal of one whole run, as the file holds it.
fn recorded_run() -> (Vec<u8>, Vec<Record>) {
    let mut sim = Sim::new(spec());
    sim.prompt("go ✓");
    assert!(drive_to_end(&mut sim));
    let text: String = sim
        .journal
        .iter()
        .map(|r| serde_json::to_string(r).expect("a record serializes") + "\n")
        .collect();
    assert!(
        text.len() > text.chars().count(),
        "characters of several bytes"
    );
    (text.into_bytes(), sim.journal)
}

/// A call of this tool that was cut off must not run again: it has effects and
/// cannot carry on the first call (Read is read-only, Task resumes by call id).
fn not_replayable(name: &str) -> bool {
    name == "Write"
}

#[test]
fn a_session_resumes_from_every_prefix_of_its_journal() {
    let (text, full) = recorded_run();
    for cut in 0..=text.len() {
        let read = parse_journal(Path::new("j.jsonl"), &text[..cut])
            .unwrap_or_else(|e| panic!("cut at {cut}: {e}"));
        assert!(read.damaged.is_empty(), "cut at {cut}: {:?}", read.damaged);
        let records = read.records;
        let complete = full.starts_with(&records);
        assert!(
            complete,
            "cut at {cut}: the records are a prefix of the journal"
        );
        // A run started when its prompt is journaled after its marker.
        let ran = records
            .windows(2)
            .any(|w| matches!(w, [Record::RunStarted { .. }, Record::Message { .. }]));
        let ended = records.iter().any(|r| matches!(r, Record::Terminal { .. }));
        let answered_turns = records
            .iter()
            .filter(|r| {
                matches!(
                    r,
                    Record::Message {
                        message: Message::Assistant(_)
                    }
                )
            })
            .count() as u32;
        // Calls that had started, have no result and cannot be replayed: never again.
        let lost: Vec<String> = records
            .iter()
            .filter_map(|r| match r {
                Record::ToolStarted { call_id } => Some(call_id.clone()),
                _ => None,
            })
            .filter(|id| {
                let name = full_call_name(&full, id);
                not_replayable(&name)
                    && !records.iter().any(|r| {
                        matches!(r, Record::Message { message: Message::Tool(ToolResult { tool_call_id, .. }) } if tool_call_id == id)
                    })
            })
            .collect();
        let done: Vec<String> = records
            .iter()
            .filter_map(|r| match r {
                Record::Message {
                    message: Message::Tool(result),
                } => Some(result.tool_call_id.clone()),
                _ => None,
            })
            .collect();

        let mut sim = Sim::resume(spec(), records, PromptQueue::default(), 100);
        if !ran || ended {
            assert!(
                sim.requests.is_empty() && sim.started.is_empty(),
                "cut at {cut}: no run to resume"
            );
            assert!(sim.terminals().is_empty(), "cut at {cut}");
            continue;
        }
        assert!(drive_to_end(&mut sim), "cut at {cut}: the run ends");
        let terminals = sim.terminals();
        assert_eq!(terminals.len(), 1, "cut at {cut}");
        assert_eq!(terminals[0].0, [1], "cut at {cut}");
        assert!(
            matches!(&terminals[0].1, Outcome::Completed { text, .. } if text == "all done"),
            "cut at {cut}: {terminals:?}"
        );
        if let Some(first) = sim.requests.first() {
            assert_eq!(
                turn_of(&first.place),
                answered_turns + 1,
                "cut at {cut}: nothing the model answered is asked again"
            );
        }
        for call in &sim.started {
            assert!(
                !lost.contains(&call.id),
                "cut at {cut}: {} ran twice",
                call.id
            );
            assert!(
                !done.contains(&call.id),
                "cut at {cut}: {} had its result",
                call.id
            );
        }
        for id in &lost {
            let told = sim.requests.iter().any(|r| {
                r.messages
                    .contains(&Message::Tool(ToolResult::interrupted(id.as_str())))
            });
            assert!(
                told,
                "cut at {cut}: the model hears that {id} was interrupted"
            );
        }
        assert!(
            sim.violations.is_empty(),
            "cut at {cut}: {:?}",
            sim.violations
        );
    }
}

/// Every prefix of the journal, written as a file, takes the next append whole:
/// the writer cuts the torn tail before it appends, and the file then reads as
/// the prefix's records and the new one.
#[tokio::test]
async fn a_journal_cut_at_any_byte_takes_the_next_record_whole() {
    let (text, _) = recorded_run();
    let dir = tempfile::tempdir().expect("a folder");
    let path = |cut: usize| dir.path().join(format!("{cut}.jsonl"));
    for cut in 0..=text.len() {
        std::fs::write(path(cut), &text[..cut]).expect("written");
    }
    let journal = crate::journal::Journal::start().expect("a writer");
    let next = Record::Message {
        message: Message::user("après ✓"),
    };
    for cut in 0..=text.len() {
        journal.append(&path(cut), &next).expect("queued");
    }
    journal.sync().await.expect("synced");
    for cut in 0..=text.len() {
        let before = parse_journal(Path::new("j.jsonl"), &text[..cut]).expect("read");
        let after = crate::journal::read_journal(&path(cut)).expect("read again");
        assert!(
            after.damaged.is_empty(),
            "cut at {cut}: {:?}",
            after.damaged
        );
        let mut expected = before.records;
        expected.push(next.clone());
        assert_eq!(after.records, expected, "cut at {cut}");
    }
}

fn full_call_name(journal: &[Record], id: &str) -> String {
    journal
        .iter()
        .find_map(|r| match r {
            Record::Message {
                message: Message::Assistant(a),
            } => a
                .tool_calls
                .iter()
                .find(|c| c.id == id)
                .map(|c| c.name.clone()),
            _ => None,
        })
        .unwrap_or_default()
}

#[test]
fn a_cancel_remembered_across_a_crash_ends_the_resumed_run() {
    let mut sim = Sim::new(spec());
    sim.prompt("go");
    sim.answer(model(1));
    let mut queue = PromptQueue::default();
    queue.cancel(50);
    let sim = Sim::resume(spec(), sim.journal, queue, 60);
    assert!(sim.requests.is_empty() && sim.started.is_empty());
    let terminals = sim.terminals();
    assert_eq!(terminals.len(), 1);
    assert!(
        matches!(terminals[0].1, Outcome::Cancelled { .. }),
        "{terminals:?}"
    );
    assert!(
        sim.effects
            .contains(&crate::session::machine::Effect::CancelDone { seq: 50 })
    );
}

#[test]
fn a_stop_that_arrived_while_down_ends_the_session_after_the_resumed_run() {
    let mut sim = Sim::new(spec());
    sim.prompt("go");
    let journal = sim.journal.clone();
    let mut resumed = Sim::resume(spec(), journal, PromptQueue::default(), 60);
    resumed.input(Input::StopWhenIdle);
    assert!(!resumed.stopped);
    assert!(drive_to_end(&mut resumed));
    assert!(resumed.stopped);
}

#[test]
fn a_stop_asked_for_while_down_ends_the_resumed_run_before_any_request() {
    let mut sim = Sim::new(spec());
    let p = sim.prompt("go");
    let mut queue = PromptQueue::default();
    queue.stop();
    let resumed = Sim::resume(spec(), sim.journal.clone(), queue, 60);
    assert!(resumed.requests.is_empty());
    assert!(
        matches!(resumed.outcome(p), Some(Outcome::Partial { .. })),
        "{:?}",
        resumed.terminals()
    );
}
