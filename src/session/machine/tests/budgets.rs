//! Budgets, costs and loops: a run stops gracefully at a turn boundary when its
//! own budget or the whole run's is spent, when its time is up (its stream cut,
//! what it said kept), or when the model repeats one call; costs follow the
//! model's prices, sub-agents' included.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use super::sim::{Sim, calls, spec, text, usage};
use crate::conversation::{AssistantTurn, ToolCall};
use crate::error::LlmError;
use crate::journal::Record;
use crate::model_info::ModelInfo;
use crate::protocol::{Outcome, RunStats, SessionId};
use crate::session::budget::{Budget, RunMeter};
use crate::session::machine::Input;
use crate::session::queue::PromptQueue;
use crate::tools::Spending;

fn priced() -> ModelInfo {
    ModelInfo {
        input_price: Some(1.0),
        output_price: Some(2.0),
        ..ModelInfo::default()
    }
}

fn stopped(sim: &Sim, prompt: u64) -> (String, String, RunStats) {
    match sim.outcome(prompt) {
        Some(Outcome::Partial {
            reason,
            partial,
            stats,
        }) => (reason, partial, stats),
        other => panic!("not stopped: {other:?}"),
    }
}

/// A turn that reads `id` and says `says`.
fn reading(id: &str, says: &str) -> AssistantTurn {
    let mut turn = calls(&[(id, "Read")]);
    turn.message.text = says.into();
    turn
}

#[test]
fn cost_follows_the_prices_and_sub_agents_roll_up_into_it() {
    let mut spec = spec();
    spec.model_info = priced();
    let mut sim = Sim::new(spec);
    let p = sim.prompt("go");
    // 10 in and 10 out: 10 x $1 + 10 x $2 per million.
    sim.answer(calls(&[("t1", "Task")]));
    let (turn, index, _) = sim.running[0].clone();
    let mut done = super::sim::tool_done(turn, index, "t1", "report", false);
    if let Input::ToolDone(done) = &mut done {
        done.spent = Spending {
            usage: usage(1000),
            cost_usd: Some(0.5),
        };
    }
    sim.running.clear();
    sim.input(done);
    sim.answer(text("done"));
    let Some(Outcome::Completed { stats, .. }) = sim.outcome(p) else {
        panic!("{:?}", sim.terminals())
    };
    let expected = 2.0 * (10.0 + 20.0) / 1e6 + 0.5;
    assert!(
        (stats.cost_usd.unwrap() - expected).abs() < 1e-12,
        "{stats:?}"
    );
    assert_eq!(stats.usage.total(), 2040);
}

#[test]
fn an_unknown_price_anywhere_makes_the_cost_unknown() {
    let mut sim = Sim::new(spec());
    let p = sim.prompt("go");
    sim.answer(text("done"));
    let Some(Outcome::Completed { stats, .. }) = sim.outcome(p) else {
        panic!()
    };
    assert_eq!(stats.cost_usd, None);
    assert!(sim.charged.is_empty(), "no meter, no charges");
}

#[test]
fn a_role_token_budget_stops_the_run_at_the_next_boundary_with_its_work() {
    let mut spec = spec();
    spec.budget = Budget {
        max_tokens: Some(30),
        ..Budget::default()
    };
    let mut sim = Sim::new(spec);
    let p = sim.prompt("go");
    sim.answer(reading("r1", "first look"));
    sim.finish("r1", "ok");
    // 20 tokens so far: under the budget, so a second turn.
    sim.answer(reading("r2", "second look"));
    // That turn spent the budget: its call would spend more, so it is not run,
    // and its result says why (a follow-up keeps the protocol).
    assert!(sim.running.is_empty(), "{:?}", sim.running_ids());
    assert!(sim.journal.iter().any(|r| matches!(r,
        crate::journal::Record::Message { message: crate::conversation::Message::Tool(t) }
            if t.tool_call_id == "r2" && t.content.contains("stopped (budget: tokens)"))));
    assert_eq!(sim.requests.len(), 2, "no turn past the budget");
    let (reason, partial, stats) = stopped(&sim, p);
    assert_eq!(
        (reason.as_str(), partial.as_str()),
        ("budget: tokens", "second look")
    );
    assert_eq!(stats.usage.total(), 40);
}

#[test]
fn a_role_cost_budget_counts_what_sub_agents_spent() {
    let mut spec = spec();
    spec.model_info = priced();
    spec.budget = Budget {
        max_cost_usd: Some(0.25),
        ..Budget::default()
    };
    let mut sim = Sim::new(spec);
    let p = sim.prompt("go");
    sim.answer(calls(&[("t1", "Task")]));
    let (turn, index, _) = sim.running.remove(0);
    let mut done = super::sim::tool_done(turn, index, "t1", "report", false);
    if let Input::ToolDone(done) = &mut done {
        done.spent.cost_usd = Some(0.3);
    }
    sim.input(done);
    assert_eq!(sim.requests.len(), 1);
    assert_eq!(stopped(&sim, p).0, "budget: cost");
}

#[test]
fn the_shared_meter_stops_every_session_of_the_run_at_its_next_boundary() {
    let meter = Arc::new(RunMeter::new(
        Budget {
            max_tokens: Some(50),
            ..Budget::default()
        },
        Instant::now(),
    ));
    let mut spec = spec();
    spec.meter = Some(meter.clone());
    let mut sim = Sim::new(spec);
    let p = sim.prompt("go");
    sim.answer(reading("r1", "looking"));
    assert_eq!(sim.charged.len(), 1, "each turn charges the meter");
    // Another session of the run spends the rest meanwhile.
    meter.charge(&usage(20), None);
    sim.finish("r1", "ok");
    assert_eq!(sim.requests.len(), 1);
    assert_eq!(stopped(&sim, p).0, "budget: tokens");
}

#[test]
fn a_leads_run_journals_its_limits_and_a_sub_agents_does_not() {
    let budget = Budget {
        max_tokens: Some(50),
        timeout: Some(Duration::from_secs(90)),
        ..Budget::default()
    };
    let meter = Arc::new(RunMeter::new(budget, Instant::now()));
    let started = |parent: Option<SessionId>| {
        let mut spec = spec();
        spec.meter = Some(meter.clone());
        spec.parent = parent;
        let mut sim = Sim::new(spec);
        sim.prompt("go");
        sim.journal.iter().find_map(|r| match r {
            Record::RunStarted { limits, .. } => Some(*limits),
            _ => None,
        })
    };
    let lead = started(None).unwrap().unwrap();
    assert_eq!(
        (lead.max_cost_usd, lead.max_tokens, lead.timeout_ms),
        (None, Some(50), Some(90_000))
    );
    assert_eq!(started(Some(SessionId::new())), Some(None));
}

#[test]
fn a_lead_carried_on_under_limits_of_its_own_journals_them() {
    let meter = |tokens| {
        Arc::new(RunMeter::new(
            Budget {
                max_tokens: Some(tokens),
                ..Budget::default()
            },
            Instant::now(),
        ))
    };
    let mut spec = spec();
    spec.meter = Some(meter(50));
    let mut first = Sim::new(spec.clone());
    first.prompt("go");
    let journal = first.journal.clone();
    // Carried on with other limits: they are journaled after what was there.
    spec.meter = Some(meter(500));
    let resumed = Sim::resume(spec.clone(), journal.clone(), PromptQueue::default(), 2);
    let added = &resumed.journal[journal.len()..];
    assert!(
        matches!(added.first(), Some(Record::Limits { limits }) if limits.max_tokens == Some(500)),
        "{added:?}"
    );
    // The same limits again, or none: nothing is added.
    let mut again = resumed.journal.clone();
    again.truncate(journal.len() + 1);
    let same = Sim::resume(spec.clone(), again.clone(), PromptQueue::default(), 2);
    assert_eq!(
        same.journal.len(),
        again.len(),
        "{:?}",
        &same.journal[again.len()..]
    );
    spec.meter = None;
    let plain = Sim::resume(spec, journal, PromptQueue::default(), 2);
    assert!(
        !plain
            .journal
            .iter()
            .any(|r| matches!(r, Record::Limits { .. }))
    );
}

#[test]
fn time_up_cuts_the_stream_and_keeps_what_it_said() {
    let mut spec = spec();
    spec.budget.timeout = Some(Duration::from_secs(60));
    let mut sim = Sim::new(spec);
    let p = sim.prompt("go");
    assert_eq!(sim.alarms, [(p, Duration::from_secs(60))]);
    sim.answer(reading("r1", "read one"));
    sim.finish("r1", "ok");
    // Mid-stream: the stream is cancelled; its partial text is the work so far.
    let stream = sim.stream.take().unwrap();
    sim.input(Input::TimeUp { run: p });
    let mut partial = AssistantTurn::default();
    partial.message.text = "half a tho".into();
    sim.input(Input::TurnFinished {
        stream,
        result: Err(LlmError::Cancelled {
            partial: Box::new(partial),
        }),
    });
    let Some(Outcome::TimedOut { partial, .. }) = sim.outcome(p) else {
        panic!("{:?}", sim.terminals())
    };
    assert_eq!(partial, "half a tho");
    // An alarm for a run that already ended does nothing.
    let q = sim.prompt("again");
    sim.input(Input::TimeUp { run: p });
    sim.answer(text("fine"));
    assert!(matches!(sim.outcome(q), Some(Outcome::Completed { .. })));
}

#[test]
fn time_up_cancels_the_running_calls_and_ends_the_run_with_what_they_gave() {
    let mut spec = spec();
    spec.budget.timeout = Some(Duration::from_secs(60));
    let mut sim = Sim::new(spec);
    let p = sim.prompt("go");
    sim.answer(calls(&[("w1", "Write"), ("w2", "Write")]));
    let running = sim.running_ids();
    assert!(!running.is_empty());
    sim.input(Input::TimeUp { run: p });
    assert!(
        sim.effects
            .iter()
            .any(|e| matches!(e, crate::session::machine::Effect::CancelTools { .. })),
        "the running calls are cancelled"
    );
    // They came back (as cancelled); none starts after.
    assert!(sim.running_ids().is_empty());
    let Some(Outcome::TimedOut { stats, .. }) = sim.outcome(p) else {
        panic!("{:?}", sim.terminals())
    };
    assert_eq!(stats.turns, 1);
    assert_eq!(sim.requests.len(), 1, "the model is not asked again");
    let kept = sim.journal.iter().any(|r| {
        matches!(r, crate::journal::Record::Message { message: crate::conversation::Message::Tool(t) } if t.content == "Error: cancelled")
    });
    assert!(kept, "what the calls gave back is journaled");
}

#[test]
fn the_alarm_is_the_sooner_of_the_role_timeout_and_the_run_deadline() {
    let now = Instant::now();
    let meter = RunMeter::new(
        Budget {
            timeout: Some(Duration::from_secs(3600)),
            ..Budget::default()
        },
        now,
    );
    let mut spec = spec();
    spec.meter = Some(Arc::new(meter));
    let mut sim = Sim::new(spec.clone());
    sim.prompt("go");
    let (_, after) = sim.alarms[0];
    assert!(after <= Duration::from_secs(3600) && after > Duration::from_secs(3500));
    spec.budget.timeout = Some(Duration::from_secs(5));
    let mut sim = Sim::new(spec);
    sim.prompt("go");
    assert_eq!(sim.alarms[0].1, Duration::from_secs(5));
}

fn same_read(id: &str) -> AssistantTurn {
    let mut turn = calls(&[]);
    turn.message.tool_calls = vec![ToolCall {
        id: id.into(),
        name: "Read".into(),
        arguments: json!({"file_path": "same.txt"}).to_string(),
    }];
    turn
}

#[test]
fn a_repeated_call_gets_a_note_at_three_and_stops_the_agent_at_five() {
    let mut sim = Sim::new(spec());
    let p = sim.prompt("go");
    for n in 1..=4 {
        let id = format!("r{n}");
        sim.answer(same_read(&id));
        sim.finish(&id, "contents");
    }
    // The fifth request shows the results: notes on the third and fourth.
    let last = sim.requests.last().unwrap();
    let results: Vec<String> = last
        .messages
        .iter()
        .filter_map(|m| match m {
            crate::conversation::Message::Tool(r) => Some(r.content.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 4);
    assert_eq!(results[0], "contents");
    assert_eq!(results[1], "contents");
    assert!(results[2].contains("3 times in a row"), "{}", results[2]);
    assert!(results[3].contains("4 times in a row"), "{}", results[3]);
    sim.answer(same_read("r5"));
    assert!(sim.running.is_empty(), "the fifth is not run");
    let (reason, _, _) = stopped(&sim, p);
    assert_eq!(reason, "loop");
    assert_eq!(sim.requests.len(), 5);
    assert!(sim.violations.is_empty(), "{:?}", sim.violations);
}

#[test]
fn a_budget_spent_elsewhere_cuts_the_stream_now_and_stops_the_run() {
    let mut sim = Sim::new(spec());
    let p = sim.prompt("go");
    let stream = sim.stream.take().expect("streaming");
    sim.input(Input::BudgetSpent {
        reason: crate::session::budget::COST,
    });
    assert!(
        sim.effects
            .contains(&crate::session::machine::Effect::CancelStream { stream })
    );
    let mut partial = AssistantTurn::default();
    partial.message.text = "so far".into();
    sim.input(Input::TurnFinished {
        stream,
        result: Err(LlmError::Cancelled {
            partial: Box::new(partial),
        }),
    });
    let (reason, said, _) = stopped(&sim, p);
    assert_eq!((reason.as_str(), said.as_str()), ("budget: cost", "so far"));
    assert_eq!(sim.requests.len(), 1);
}

#[test]
fn a_hook_that_ends_the_agent_stops_the_run_once_its_turns_calls_are_done() {
    let mut sim = Sim::new(spec());
    let p = sim.prompt("go");
    let mut turn = calls(&[("r1", "Read"), ("r2", "Read")]);
    turn.message.text = "looking".into();
    sim.answer(turn);
    let (t, index, _) = sim.running[0].clone();
    let mut done = super::sim::tool_done(t, index, "r1", "read", false);
    if let Input::ToolDone(done) = &mut done {
        done.stop = Some("the build is broken\nsee ci.log".into());
    }
    sim.running.remove(0);
    sim.input(done);
    assert!(sim.outcome(p).is_none(), "the turn's other call still runs");
    sim.finish("r2", "read too");
    let (reason, partial, _) = stopped(&sim, p);
    assert_eq!(
        (reason.as_str(), partial.as_str()),
        ("hook: the build is broken", "looking")
    );
    assert_eq!(sim.requests.len(), 1, "the model is not asked again");
}
