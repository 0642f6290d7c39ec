//! A run with background sub-agents: it does not end while they run, their
//! results join it as they come, a cancel or a stop still ends it, and a run
//! resumed from its journal follows again the ones whose results it had not
//! had.

use super::sim::{Sim, calls, spec, text};
use crate::conversation::{Message, ToolResult};
use crate::journal::Record;
use crate::protocol::{Outcome, STARTED_IN_BACKGROUND, SessionId};
use crate::session::machine::Effect;
use crate::session::queue::PromptQueue;

/// The last user message of the last request.
fn last_prompt(sim: &Sim) -> String {
    let request = sim.requests.last().expect("a request");
    request
        .messages
        .iter()
        .rev()
        .find_map(|m| match m {
            Message::User { content } => Some(content.clone()),
            _ => None,
        })
        .unwrap_or_default()
}

#[test]
fn a_run_answered_while_a_background_sub_agent_runs_waits_for_its_result() {
    let mut sim = Sim::new(spec());
    let p = sim.prompt("go");
    let task = SessionId::new();
    sim.queue.background_started(task);
    sim.answer(text("I will wait for the explorer"));
    assert!(sim.terminals().is_empty(), "the run waits");
    assert!(sim.event_names().contains(&"background_wait"));
    // Another prompt meanwhile neither ends the wait nor joins it.
    let q = sim.prompt("a question for later");
    assert!(sim.terminals().is_empty());
    let requests = sim.requests.len();
    let message =
        format!("Background sub-agent explorer (task_id {task}) ended:\ncompleted\nfound it");
    sim.background_ended(task, &message);
    assert_eq!(sim.requests.len(), requests + 1, "the result starts a turn");
    assert_eq!(last_prompt(&sim), message);
    assert!(sim.journal.iter().any(|r| matches!(
        r,
        Record::PromptJoined { background: Some(t), .. } if *t == task
    )));
    sim.answer(text("the explorer found it"));
    match sim.outcome(p) {
        Some(Outcome::Completed { text, .. }) => assert_eq!(text, "the explorer found it"),
        other => panic!("{other:?}"),
    }
    // The waiting prompt starts its own run afterwards.
    sim.answer(text("answered"));
    assert!(matches!(sim.outcome(q), Some(Outcome::Completed { .. })));
}

#[test]
fn a_cancel_or_a_stop_ends_a_run_that_waits_for_background_sub_agents() {
    let mut sim = Sim::new(spec());
    let p = sim.prompt("go");
    sim.queue.background_started(SessionId::new());
    sim.answer(text("waiting"));
    sim.cancel();
    assert!(matches!(sim.outcome(p), Some(Outcome::Cancelled { .. })));

    let mut sim = Sim::new(spec());
    let p = sim.prompt("go");
    sim.queue.background_started(SessionId::new());
    sim.answer(text("waiting"));
    sim.input(crate::session::machine::Input::StopRun);
    match sim.outcome(p) {
        Some(Outcome::Partial {
            reason, partial, ..
        }) => assert_eq!(
            (reason.as_str(), partial.as_str()),
            ("requested", "waiting")
        ),
        other => panic!("{other:?}"),
    }
}

/// The journal of a run whose Task call `t1` started background sub-agent
/// `task` and whose model then answered, cut before its end.
fn journal_with_background(task: SessionId) -> Vec<Record> {
    let mut sim = Sim::new(spec());
    sim.prompt("go");
    sim.answer(calls(&[("t1", "Task")]));
    sim.finish("t1", &format!("{STARTED_IN_BACKGROUND}{task}\nit works"));
    sim.queue.background_started(task);
    sim.answer(text("waiting for it"));
    assert!(sim.terminals().is_empty());
    sim.journal.clone()
}

#[test]
fn a_resumed_run_follows_again_the_background_sub_agents_whose_results_it_lacks() {
    let task = SessionId::new();
    let journal = journal_with_background(task);
    let mut sim = Sim::resume(spec(), journal.clone(), PromptQueue::default(), 100);
    let reattached: Vec<SessionId> = sim
        .effects
        .iter()
        .filter_map(|e| match e {
            Effect::Reattach { call, task } if call.id == "t1" => Some(*task),
            _ => None,
        })
        .collect();
    assert_eq!(reattached, [task]);
    assert!(sim.terminals().is_empty(), "it waits for the result again");
    sim.background_ended(task, "Background sub-agent x ended:\ncompleted");
    sim.answer(text("done"));
    assert!(matches!(
        sim.terminals().last(),
        Some((_, Outcome::Completed { .. }))
    ));

    // A result that had joined the run is not waited for again.
    let mut delivered = journal;
    delivered.push(Record::PromptJoined {
        prompt: 50,
        background: Some(task),
    });
    delivered.push(Record::Message {
        message: Message::user("Background sub-agent x ended:\ncompleted"),
    });
    let sim = Sim::resume(spec(), delivered, PromptQueue::default(), 100);
    assert!(
        !sim.effects
            .iter()
            .any(|e| matches!(e, Effect::Reattach { .. }))
    );
    // A failed Task call started nothing.
    let mut sim = Sim::new(spec());
    sim.prompt("go");
    sim.answer(calls(&[("t1", "Task")]));
    let (turn, index, call) = sim.running.remove(0);
    let failed = ToolResult {
        tool_call_id: call.id,
        content: format!("{STARTED_IN_BACKGROUND}{task}"),
        is_error: true,
    };
    sim.input(super::sim::tool_done(
        turn,
        index,
        &failed.tool_call_id,
        &failed.content,
        true,
    ));
    sim.answer(text("waiting"));
    // Cut before its end: the run is to be resumed.
    let mut cut = sim.journal.clone();
    cut.retain(|r| !matches!(r, Record::Terminal { .. }));
    let sim = Sim::resume(spec(), cut, PromptQueue::default(), 100);
    assert!(
        !sim.effects
            .iter()
            .any(|e| matches!(e, Effect::Reattach { .. }))
    );
    assert!(
        matches!(sim.terminals().last(), Some((_, Outcome::Completed { .. }))),
        "nothing to wait for: it ends"
    );
}

#[test]
fn a_result_task_output_took_is_not_waited_for_again_after_a_resume() {
    let task = SessionId::new();
    let mut journal = journal_with_background(task);
    // Cut back to before the final answer: the run then read it itself.
    let answered = journal
        .iter()
        .rposition(|r| {
            matches!(
                r,
                Record::Message {
                    message: Message::Assistant(_)
                }
            )
        })
        .unwrap();
    journal.truncate(answered);
    let mut sim = Sim::resume(spec(), journal, PromptQueue::default(), 100);
    sim.queue.background_started(task);
    let input = format!("{{\"task_id\": \"{task}\"}}");
    let mut read = calls(&[("out", "TaskOutput")]);
    read.message.tool_calls[0].arguments = input;
    sim.answer(read);
    sim.finish("out", "completed\nfound it");
    let journal = sim.journal.clone();
    let sim = Sim::resume(spec(), journal, PromptQueue::default(), 200);
    assert!(
        !sim.effects
            .iter()
            .any(|e| matches!(e, Effect::Reattach { .. }))
    );
}

#[test]
fn a_run_asked_to_stop_while_it_answers_does_not_wait_for_background_sub_agents() {
    let mut sim = Sim::new(spec());
    let p = sim.prompt("go");
    sim.queue.background_started(SessionId::new());
    sim.input(crate::session::machine::Input::StopRun);
    sim.answer(text("my answer"));
    match sim.outcome(p) {
        Some(Outcome::Partial { partial, .. }) => assert_eq!(partial, "my answer"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_session_that_fell_back_goes_on_with_its_fallback_when_resumed() {
    let mut with_fallback = spec();
    with_fallback.fallback = Some(crate::session::Fallback {
        model: "m2".into(),
        provider: None,
        model_info: Default::default(),
    });
    let mut sim = Sim::new(with_fallback.clone());
    sim.prompt("go");
    let missing = crate::error::ProviderError::Status {
        status: 404,
        message: "no such model".into(),
        code: Some("model_not_found".into()),
        retry_after: None,
        request_id: None,
    };
    sim.fail_stream(crate::error::LlmError::Provider(missing));
    assert_eq!(sim.requests.last().unwrap().model, "m2");
    assert!(sim.effects.contains(&Effect::FallBack));
    // The journal keeps the event; a restart goes on with m2 at once.
    let mut journal = sim.journal.clone();
    journal.push(Record::Event {
        event: crate::protocol::Event {
            seq: 1,
            session: SessionId::new(),
            parent: None,
            agent: "coder".into(),
            kind: crate::protocol::EventKind::ModelFallback {
                from: "m1".into(),
                to: "m2".into(),
                reason: "model_not_found".into(),
            },
        },
        at: None,
        elided: None,
    });
    let sim = Sim::resume(with_fallback, journal, PromptQueue::default(), 100);
    assert!(sim.effects.contains(&Effect::FallBack));
    assert_eq!(sim.requests.last().unwrap().model, "m2");
}

#[test]
fn a_stop_hook_that_blocks_keeps_the_run_going_and_is_told_so_the_next_time() {
    let mut sim = Sim::new(spec());
    let p = sim.prompt("go");
    sim.stop_hook_blocks.push_back("run the tests first".into());
    sim.answer(text("done, I think"));
    assert!(sim.terminals().is_empty(), "kept going");
    let prompt = last_prompt(&sim);
    assert!(prompt.ends_with("run the tests first"), "{prompt}");
    sim.answer(text("tests pass; done"));
    match sim.outcome(p) {
        Some(Outcome::Completed { text, .. }) => assert_eq!(text, "tests pass; done"),
        other => panic!("{other:?}"),
    }
    assert_eq!(sim.stop_hooks_active, [false, true]);
}

#[test]
fn a_stop_hook_that_always_blocks_cannot_keep_a_run_going_forever() {
    let mut sim = Sim::new(spec());
    let p = sim.prompt("go");
    let max = crate::session::machine::MAX_STOP_HOOK_BLOCKS as usize;
    sim.stop_hook_blocks = std::iter::repeat_n("never done".to_owned(), max + 5).collect();
    for _ in 0..=max {
        sim.answer(text("done"));
    }
    assert!(matches!(sim.outcome(p), Some(Outcome::Completed { .. })));
    assert_eq!(sim.stop_hooks_active.len(), max);
}

#[test]
fn a_stop_hooks_answer_that_comes_after_its_run_ended_changes_nothing() {
    let mut sim = Sim::new(spec());
    sim.defer_stop_hooks = true;
    let p = sim.prompt("first");
    sim.answer(text("first answer"));
    let late = sim.deferred_stop_hooks.pop().expect("the hooks were asked");
    sim.cancel();
    assert!(matches!(sim.outcome(p), Some(Outcome::Cancelled { .. })));
    let q = sim.prompt("second");
    assert!(sim.stream.is_some(), "the second run streams");
    // The first run's hooks answer now, blocking: the second run goes on.
    sim.input(crate::session::machine::Input::StopHooked {
        run: late,
        block: Some("too late".into()),
    });
    assert!(sim.stream.is_some(), "still streaming");
    sim.defer_stop_hooks = false;
    sim.answer(text("second answer"));
    match sim.outcome(q) {
        Some(Outcome::Completed { text, .. }) => assert_eq!(text, "second answer"),
        other => panic!("{other:?}"),
    }
    assert!(!last_prompt(&sim).contains("too late"));
}
