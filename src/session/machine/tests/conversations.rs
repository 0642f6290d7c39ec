//! Whole conversations: multi-turn runs with parallel groups and calls with
//! effects, retries, the turn limit, prompts that wait or join, stopping.

use std::sync::Arc;

use super::sim::{Sim, calls, spec, text, usage};
use crate::conversation::{AssistantMessage, Message, ToolResult};
use crate::error::{LlmError, SessionError, StreamError};
use crate::journal::Record;
use crate::llm::retry::RetryPolicy;
use crate::protocol::{EventKind, Outcome, SessionId};
use crate::session::SessionSpec;
use crate::session::machine::{Effect, Input, MachineArgs};
use crate::session::queue::PromptQueue;

fn with_limits(spec: SessionSpec, max_parallel_tools: usize, retry: RetryPolicy) -> Sim {
    let registry = spec.tools.clone();
    let args = MachineArgs {
        id: SessionId::new(),
        run: SessionId::new(),
        spec: Arc::new(spec),
        retry,
        max_parallel_tools,
        stopping: false,
        seed: 11,
    };
    Sim::with_args(args, registry, None, PromptQueue::default(), 1)
}

fn record_names(journal: &[Record]) -> Vec<String> {
    journal
        .iter()
        .map(|r| match r {
            Record::Header { .. } => "header".to_owned(),
            Record::RunStarted { prompt, .. } => format!("run_started {prompt}"),
            Record::PromptJoined { prompt, .. } => format!("prompt_joined {prompt}"),
            Record::ToolStarted { call_id } => format!("tool_started {call_id}"),
            Record::Message { message } => match message {
                Message::System { .. } => "system".to_owned(),
                Message::User { content } => format!("user {content}"),
                Message::Assistant(a) if a.tool_calls.is_empty() => format!("assistant {}", a.text),
                Message::Assistant(a) => format!("assistant calls {}", a.tool_calls.len()),
                Message::Tool(r) => format!("result {}", r.tool_call_id),
            },
            Record::Compacted { .. } => "compacted".to_owned(),
            Record::Limits { .. } => "limits".to_owned(),
            Record::Terminal { .. } => "terminal".to_owned(),
            Record::Event { .. } => "event".to_owned(),
            Record::Checked { .. } => "checked".to_owned(),
            Record::Narrowed { by, .. } => format!("narrowed by {by}"),
            Record::Committed { .. }
            | Record::Fetched { .. }
            | Record::Merging { .. }
            | Record::Merged { .. }
            | Record::CheckoutRemoved => "checkout".to_owned(),
        })
        .collect()
}

fn result(id: &str, content: &str) -> Message {
    Message::Tool(ToolResult {
        tool_call_id: id.into(),
        content: content.into(),
        is_error: false,
    })
}

#[test]
fn parallel_reads_then_an_answer_make_one_run_with_results_in_call_order() {
    let mut sim = Sim::new(spec());
    let p = sim.prompt("fix the bug");
    assert_eq!(sim.requests[0].place, "coder/turn 1");
    assert_eq!(
        sim.requests[0].messages,
        [
            Message::system("You write code."),
            Message::user("fix the bug")
        ]
    );
    let offered: Vec<&str> = sim.requests[0]
        .tools
        .iter()
        .map(|t| t.name.as_str())
        .collect();
    assert_eq!(offered, ["Read", "Write", "Task"]);

    sim.answer(calls(&[("r1", "Read"), ("r2", "Read")]));
    assert_eq!(
        sim.running_ids(),
        ["r1", "r2"],
        "a safe group starts at once"
    );
    assert_eq!(sim.durable, 0, "read-only calls wait for no sync");

    sim.finish("r2", "two");
    assert_eq!(sim.requests.len(), 1, "the turn waits for every call");
    sim.finish("r1", "one");
    let synced =
        |message: Message| sim.journal[..sim.behind].contains(&Record::Message { message });
    assert!(
        synced(result("r1", "one")) && synced(result("r2", "two")),
        "a turn boundary's records are synced"
    );
    assert_eq!(
        sim.durable, 0,
        "in the background: the next turn does not wait"
    );
    let second = &sim.requests[1];
    assert_eq!(second.place, "coder/turn 2");
    assert_eq!(
        &second.messages[3..],
        [result("r1", "one"), result("r2", "two")]
    );

    sim.answer(text("fixed"));
    let Some(Outcome::Completed {
        text,
        truncated,
        stats,
    }) = sim.outcome(p)
    else {
        panic!("{:?}", sim.terminals())
    };
    assert_eq!((text.as_str(), truncated), ("fixed", false));
    assert_eq!(
        (stats.turns, stats.tool_calls, stats.usage),
        (2, 2, usage(20))
    );
    assert!(stats.duration_ms > 0);
    assert_eq!(
        sim.event_names(),
        [
            "session_started",
            "turn_started",
            "turn_finished",
            "tool_started",
            "tool_started",
            "tool_finished",
            "tool_finished",
            "turn_started",
            "turn_finished",
            "terminal"
        ]
    );
    assert_eq!(
        record_names(&sim.journal),
        [
            "header",
            "run_started 1",
            "user fix the bug",
            "assistant calls 2",
            "tool_started r1",
            "tool_started r2",
            "result r2",
            "result r1",
            "assistant fixed",
            "terminal"
        ]
    );
    let tail = &sim.effects[sim.effects.len() - 3..];
    assert!(matches!(
        tail[0],
        Effect::Publish(EventKind::Terminal { .. })
    ));
    assert_eq!(
        tail[1..],
        [Effect::PullLater, Effect::TakeOne],
        "then the next prompt"
    );
    assert!(sim.violations.is_empty(), "{:?}", sim.violations);
}

#[test]
fn calls_with_effects_start_after_a_sync_and_on_different_files_together() {
    let mut sim = Sim::new(spec());
    sim.prompt("go");
    sim.answer(calls(&[
        ("w1", "Write"),
        ("w2", "Write"),
        ("r1", "Read"),
        ("r2", "Read"),
        ("w3", "Write"),
    ]));
    let mut seen = Vec::new();
    for next in ["w1", "w2", "r2", "r1", "w3"] {
        seen.push(sim.running_ids());
        sim.finish(next, "ok");
    }
    assert_eq!(
        seen,
        [
            vec!["w1", "w2"],
            vec!["w2"],
            vec!["r1", "r2"],
            vec!["r1"],
            vec!["w3"]
        ]
    );
    // Each start follows a sync (with only other starts between) when its tool has
    // effects, and no sync when it has none: one sync for w1 and w2 together.
    let mut after_sync = false;
    let mut synced_starts = Vec::new();
    for effect in &sim.effects {
        match effect {
            Effect::Sync => after_sync = true,
            Effect::Publish(EventKind::ToolStarted { call_id, .. }) => {
                synced_starts.push((call_id.clone(), after_sync));
            }
            Effect::StartTool { .. } => {}
            _ => after_sync = false,
        }
    }
    let writes = |id: &str| id.starts_with('w');
    assert!(
        synced_starts
            .iter()
            .all(|(id, synced)| writes(id) == *synced),
        "writes after a sync, reads without: {synced_starts:?}"
    );
    let syncs = sim.effects.iter().filter(|e| **e == Effect::Sync).count();
    assert!(syncs >= 2, "one sync for w1 and w2, one for w3");
    assert_eq!(sim.requests.len(), 2);
    assert!(sim.violations.is_empty(), "{:?}", sim.violations);
}

#[test]
fn a_parallel_group_is_capped_and_calls_that_bound_themselves_do_not_count() {
    let mut sim = with_limits(spec(), 2, RetryPolicy::default());
    sim.prompt("go");
    sim.answer(calls(&[
        ("r1", "Read"),
        ("r2", "Read"),
        ("r3", "Read"),
        ("t1", "Task"),
        ("t2", "Task"),
    ]));
    assert_eq!(sim.running_ids(), ["r1", "r2"]);
    sim.finish("r1", "ok");
    assert_eq!(sim.running_ids(), ["r2", "r3", "t1", "t2"]);
    for id in ["t2", "r3", "t1", "r2"] {
        sim.finish(id, "ok");
    }
    assert_eq!(sim.requests.len(), 2);
    assert!(sim.violations.is_empty(), "{:?}", sim.violations);
}

#[test]
fn retryable_failures_back_off_then_exhaust_and_name_the_last_error() {
    let retry = RetryPolicy {
        max_attempts: 3,
        ..RetryPolicy::default()
    };
    let mut sim = with_limits(spec(), 10, retry);
    let p = sim.prompt("go");
    let mut delays = Vec::new();
    for _ in 0..2 {
        sim.fail_stream(LlmError::Stream(StreamError::Empty));
        let (_, delay) = sim.retry.expect("a retry is scheduled");
        delays.push(delay.as_millis());
        sim.retry_due();
    }
    assert!(
        (250..500).contains(&delays[0]) && (500..1000).contains(&delays[1]),
        "{delays:?}"
    );
    assert_eq!(
        sim.requests[1], sim.requests[0],
        "an attempt repeats the request"
    );
    assert_eq!(sim.requests[2], sim.requests[0]);
    let attempts: Vec<(u32, u32)> = sim
        .events
        .iter()
        .filter_map(|e| match e {
            EventKind::TurnStarted { turn, attempt } => Some((*turn, *attempt)),
            _ => None,
        })
        .collect();
    assert_eq!(attempts, [(1, 1), (1, 2), (1, 3)]);
    sim.fail_stream(LlmError::Stream(StreamError::Empty));
    let Some(Outcome::Failed { class, message, .. }) = sim.outcome(p) else {
        panic!("{:?}", sim.terminals())
    };
    assert_eq!(class, "stream");
    assert_eq!(
        message,
        "gave up after 3 attempts: the model returned an empty answer"
    );
    assert_eq!(sim.retry, None);
}

#[test]
fn a_permanent_failure_ends_the_run_at_once() {
    let mut sim = Sim::new(spec());
    let p = sim.prompt("go");
    sim.fail_stream(LlmError::Stream(StreamError::Filtered));
    let Some(Outcome::Failed { class, message, .. }) = sim.outcome(p) else {
        panic!("{:?}", sim.terminals())
    };
    assert_eq!((class.as_str(), sim.retry), ("content_filter", None));
    assert_eq!(message, StreamError::Filtered.to_string());
}

#[test]
fn the_turn_limit_stops_the_run_with_the_last_text_as_partial() {
    let mut spec = spec();
    spec.max_turns = 2;
    let mut sim = Sim::new(spec);
    let p = sim.prompt("go");
    for turn in 1..=2 {
        let mut answer = calls(&[(&format!("r{turn}"), "Read")]);
        answer.message.text = format!("looking, turn {turn}");
        sim.answer(answer);
        sim.finish(&format!("r{turn}"), "ok");
    }
    assert_eq!(sim.requests.len(), 2);
    let Some(Outcome::Partial {
        reason, partial, ..
    }) = sim.outcome(p)
    else {
        panic!("{:?}", sim.terminals())
    };
    assert_eq!(reason, "budget: turns");
    assert_eq!(partial, "looking, turn 2");
}

#[test]
fn prompts_sent_while_busy_wait_then_join_at_the_next_tool_boundary() {
    let mut sim = Sim::new(spec());
    let p1 = sim.prompt("first");
    let p2 = sim.prompt("second");
    let p3 = sim.prompt("third");
    let waiting: Vec<usize> = sim
        .events
        .iter()
        .filter_map(|e| match e {
            EventKind::PromptQueued { waiting } => Some(*waiting),
            _ => None,
        })
        .collect();
    assert_eq!(waiting, [1, 2]);
    sim.answer(calls(&[("r1", "Read")]));
    sim.finish("r1", "ok");
    let joined = &sim.requests[1].messages;
    assert_eq!(
        &joined[joined.len() - 2..],
        [Message::user("second"), Message::user("third")]
    );
    sim.answer(text("all three done"));
    let terminals = sim.terminals();
    assert_eq!(terminals.len(), 1);
    assert_eq!(terminals[0].0, [p1, p2, p3]);
    let names = record_names(&sim.journal);
    assert!(
        names.contains(&"prompt_joined 2".to_owned())
            && names.contains(&"prompt_joined 3".to_owned())
    );
}

#[test]
fn a_prompt_that_waits_through_a_final_answer_starts_the_next_run() {
    let mut sim = Sim::new(spec());
    let p1 = sim.prompt("first");
    let p2 = sim.prompt("second");
    sim.answer(text("one"));
    assert!(matches!(sim.outcome(p1), Some(Outcome::Completed { .. })));
    assert_eq!(sim.requests.len(), 2, "the next run started");
    let second = &sim.requests[1].messages;
    assert_eq!(
        &second[1..],
        [
            Message::user("first"),
            Message::Assistant(AssistantMessage {
                text: "one".into(),
                ..AssistantMessage::default()
            }),
            Message::user("second")
        ]
    );
    assert_eq!(sim.requests[1].place, "coder/turn 1", "turns count per run");
    sim.answer(text("two"));
    assert!(matches!(sim.outcome(p2), Some(Outcome::Completed { .. })));
}

#[test]
fn a_stop_ends_the_session_once_its_run_has_ended() {
    let mut sim = Sim::new(spec());
    sim.prompt("first");
    sim.input(Input::StopWhenIdle);
    assert!(!sim.stopped);
    sim.answer(text("done"));
    assert!(sim.stopped);
    assert_eq!(sim.effects.last(), Some(&Effect::Stop));

    let mut idle = Sim::new(spec());
    idle.input(Input::StopWhenIdle);
    assert!(idle.stopped, "an idle session stops at once");
}

#[test]
fn late_and_duplicate_reports_are_ignored_but_tokens_still_count() {
    let mut sim = Sim::new(spec());
    let p = sim.prompt("go");
    let stream = sim.stream.expect("streaming");
    sim.input(Input::TurnFinished {
        stream: stream + 100,
        result: Ok(text("from nowhere")),
    });
    assert!(
        sim.terminals().is_empty(),
        "another stream's turn is ignored"
    );
    sim.answer(calls(&[("r1", "Read"), ("r2", "Read")]));
    let (turn, index, _) = sim.running[0].clone();
    sim.finish("r1", "ok");
    let mut again = super::sim::tool_done(turn, index, "r1", "again", false);
    if let Input::ToolDone(done) = &mut again {
        done.spent = crate::tools::Spending {
            usage: usage(5),
            cost_usd: None,
        };
    }
    sim.input(again);
    sim.finish("r2", "ok");
    assert_eq!(
        &sim.requests[1].messages[3..],
        [result("r1", "ok"), result("r2", "ok")]
    );
    sim.answer(text("done"));
    let Some(Outcome::Completed { stats, .. }) = sim.outcome(p) else {
        panic!("{:?}", sim.terminals())
    };
    assert_eq!(stats.usage, usage(25), "two turns and a sub-agent's tokens");
}

#[test]
fn a_failed_effect_fails_the_run_and_stops_its_stream() {
    let mut sim = Sim::new(spec());
    let p = sim.prompt("go");
    let stream = sim.stream.expect("streaming");
    sim.input(Input::Failed(SessionError::Journal("disk full".into())));
    assert!(sim.effects.contains(&Effect::CancelStream { stream }));
    let Some(Outcome::Failed { message, .. }) = sim.outcome(p) else {
        panic!("{:?}", sim.terminals())
    };
    assert_eq!(message, "journal: disk full");
}

#[test]
fn a_tool_whose_start_cannot_be_made_durable_is_not_run() {
    let mut sim = Sim::new(spec());
    sim.prompt("go");
    sim.stream.take();
    let answer = calls(&[("w1", "Write")]);
    // Answer by hand so that the sync before the write can fail.
    let stream = sim
        .effects
        .iter()
        .rev()
        .find_map(|e| match e {
            Effect::StartStream { stream, .. } => Some(*stream),
            _ => None,
        })
        .expect("a stream");
    let effects = sim.machine.handle(
        sim.now,
        Input::TurnFinished {
            stream,
            result: Ok(answer),
        },
    );
    assert_eq!(effects.last(), Some(&Effect::Sync));
    let effects = sim
        .machine
        .handle(sim.now, Input::Synced(Err("disk gone".into())));
    assert!(
        !effects
            .iter()
            .any(|e| matches!(e, Effect::StartTool { .. }))
    );
    // The run fails, saying why; the model is not asked again.
    assert!(
        !effects
            .iter()
            .any(|e| matches!(e, Effect::StartStream { .. }))
    );
    let ended = effects.iter().find_map(|e| match e {
        Effect::Journal(records) => records.iter().find_map(|r| match r {
            Record::Terminal { outcome } => Some(outcome.clone()),
            _ => None,
        }),
        _ => None,
    });
    let Some(Outcome::Failed { message, .. }) = ended else {
        panic!("{effects:?}")
    };
    assert_eq!(message, "journal: disk gone");
    // Its end cannot be kept either: it is told as failed all the same.
    let effects = sim
        .machine
        .handle(sim.now, Input::Synced(Err("disk gone".into())));
    assert!(effects.iter().any(|e| matches!(
        e,
        Effect::Publish(EventKind::Terminal {
            outcome: Outcome::Failed { .. },
            ..
        })
    )));
}

#[test]
fn a_finished_run_whose_end_cannot_be_kept_is_told_as_failed() {
    let mut sim = Sim::new(spec());
    sim.prompt("go");
    sim.stream.take();
    let stream = sim
        .effects
        .iter()
        .rev()
        .find_map(|e| match e {
            Effect::StartStream { stream, .. } => Some(*stream),
            _ => None,
        })
        .expect("a stream");
    let effects = sim.machine.handle(
        sim.now,
        Input::TurnFinished {
            stream,
            result: Ok(text("the answer")),
        },
    );
    // No steer waits: the run ends, and its end is synced.
    assert_eq!(effects.last(), Some(&Effect::TakeSteers));
    let steers = Input::Steers {
        prompts: Vec::new(),
        background: 0,
    };
    let effects = sim.machine.handle(sim.now, steers);
    let Some(Effect::StopHooks {
        run: started_by, ..
    }) = effects.last().cloned()
    else {
        panic!("{effects:?}")
    };
    let hooked = Input::StopHooked {
        run: started_by,
        block: None,
    };
    let effects = sim.machine.handle(sim.now, hooked);
    assert_eq!(effects.last(), Some(&Effect::TakeSteers));
    let steers = Input::Steers {
        prompts: Vec::new(),
        background: 0,
    };
    let effects = sim.machine.handle(sim.now, steers);
    assert_eq!(effects.last(), Some(&Effect::Sync));
    let effects = sim.machine.handle(
        sim.now,
        Input::Synced(Err("j.jsonl: No space left on device".into())),
    );
    let told = effects.iter().find_map(|e| match e {
        Effect::Publish(EventKind::Terminal { outcome, .. }) => Some(outcome.clone()),
        _ => None,
    });
    let Some(Outcome::Failed {
        message, partial, ..
    }) = told
    else {
        panic!("{effects:?}")
    };
    assert_eq!(message, "journal: j.jsonl: No space left on device");
    assert_eq!(partial, "the answer");
}

#[test]
fn a_steer_sent_while_the_model_answers_keeps_the_run_going() {
    let mut sim = Sim::new(spec());
    let p = sim.prompt("write the parser");
    let s = sim.steer("and handle empty input");
    let q = sim.prompt("a question for later");
    sim.answer(text("parser written"));
    assert!(
        sim.terminals().is_empty(),
        "the steer joins instead of the run ending"
    );
    let asked = &sim.requests[1].messages;
    assert_eq!(
        &asked[asked.len() - 2..],
        [
            Message::Assistant(AssistantMessage {
                text: "parser written".into(),
                ..AssistantMessage::default()
            }),
            Message::user("and handle empty input")
        ]
    );
    sim.answer(text("empty input handled too"));
    let terminals = sim.terminals();
    assert_eq!(
        terminals[0].0,
        [p, s],
        "one run answers the prompt and its steer"
    );
    assert!(
        matches!(&terminals[0].1, Outcome::Completed { text, .. } if text == "empty input handled too")
    );
    // The plain prompt waited for a run of its own.
    assert_eq!(sim.requests.len(), 3);
    sim.answer(text("later"));
    assert!(matches!(sim.outcome(q), Some(Outcome::Completed { .. })));
}

#[test]
fn a_stop_ends_the_run_at_its_next_turn_boundary_with_its_work_so_far() {
    let mut sim = Sim::new(spec());
    let p = sim.prompt("go");
    let mut first = calls(&[("r1", "Read")]);
    first.message.text = "reading first".into();
    sim.input(Input::StopRun);
    sim.answer(first);
    assert_eq!(
        sim.running_ids(),
        ["r1"],
        "what the turn asked for still runs"
    );
    sim.finish("r1", "ok");
    assert_eq!(sim.requests.len(), 1, "no turn after the boundary");
    let Some(Outcome::Partial {
        reason, partial, ..
    }) = sim.outcome(p)
    else {
        panic!("{:?}", sim.terminals())
    };
    assert_eq!(
        (reason.as_str(), partial.as_str()),
        ("requested", "reading first")
    );
}

#[test]
fn narrowings_are_journaled_once_at_the_start_and_as_a_call_narrows() {
    use crate::tools::narrowing::Narrow;
    let narrow = |by: &str| Narrow::of(by, &["Read".to_owned()]).0;
    let mut spec = spec();
    spec.narrowing = vec![narrow("the command /review")];
    let mut sim = Sim::new(spec.clone());
    sim.prompt("go");
    sim.answer(calls(&[("s1", "Read")]));
    let (turn, index, _) = sim.running[0].clone();
    let mut done = super::sim::tool_done(turn, index, "s1", "loaded", false);
    if let Input::ToolDone(done) = &mut done {
        done.narrowed = Some(narrow("the skill \"tidy\""));
    }
    sim.running.clear();
    sim.input(done);
    let names = record_names(&sim.journal);
    assert_eq!(names[0], "header");
    assert_eq!(names[1], "narrowed by the command /review");
    assert!(
        names.contains(&"narrowed by the skill \"tidy\"".to_owned()),
        "{names:?}"
    );
    // Started again from its journal, it is not journaled twice.
    let resumed = Sim::resume(spec, sim.journal.clone(), PromptQueue::default(), 100);
    let again = record_names(&resumed.journal);
    let narrowed = again.iter().filter(|n| n.starts_with("narrowed")).count();
    assert_eq!(narrowed, 2, "{again:?}");
    assert_eq!(
        crate::session::narrowed::journaled(&sim.journal),
        [narrow("the command /review"), narrow("the skill \"tidy\"")]
    );
}

#[test]
fn a_slash_commands_prompt_narrows_the_session_before_it_joins_the_conversation() {
    let mut sim = Sim::new(spec());
    let (narrow, bad) =
        crate::tools::narrowing::Narrow::of("the command look.md", &["Read".to_owned()]);
    assert!(bad.is_empty());
    sim.prompt_narrowed("look around", Some(narrow.clone()));
    let narrowed = sim
        .journal
        .iter()
        .position(|r| matches!(r, Record::Narrowed { by, .. } if by == "the command look.md"))
        .expect("the narrowing is journaled");
    let started = sim
        .journal
        .iter()
        .position(|r| matches!(r, Record::RunStarted { .. }))
        .unwrap();
    assert!(narrowed < started, "in force before the run it narrows");
    assert!(sim.effects.contains(&Effect::Narrow(narrow)));
    // A plain prompt narrows nothing more.
    sim.answer(text("looked"));
    let before = sim.journal.len();
    sim.prompt("again");
    assert!(
        !sim.journal[before..]
            .iter()
            .any(|r| matches!(r, Record::Narrowed { .. }))
    );
}
