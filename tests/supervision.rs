//! Supervision: a session that panics mid-conversation is restarted from its journal
//! and finishes; one that keeps panicking escalates instead of hanging.

use std::sync::Arc;
use std::time::Duration;

use orchestrate::journal::{Record, read_journal};
use orchestrate::{
    EventKind, FaultPlan, FaultPoint, Message, Outcome, Runtime, RuntimeConfig, ToolRegistry,
};
use serde_json::json;

use crate::support::harness::{self, DEADLINE, Lookup};
use crate::support::mock_llm::{End, Gate, MockLlm, Reply, ev_role, ev_text};

/// A session's journal without the lifecycle events recorded beside its transcript.
fn transcript_records(workspace: &std::path::Path, session: orchestrate::SessionId) -> Vec<Record> {
    read_journal(&harness::state(workspace).journal(session))
        .unwrap()
        .records
        .into_iter()
        .filter(|r| !matches!(r, Record::Event { .. }))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_session_is_restarted_from_its_journal_and_finishes() {
    let mock = MockLlm::start(vec![
        Reply::tool_calls(&[("c1", "lookup", json!({"city": "Oslo"}))]),
        Reply::text("Oslo is at 12°C."),
    ])
    .await;
    let lookup = Lookup::new(false);
    let mut spec = harness::spec(ToolRegistry::new().with(lookup.clone()));
    spec.faults = Some(FaultPlan::panic_at(2, 1));
    let (dir, runtime, session) = harness::start(&mock, spec).await;

    let (outcome, events) = harness::run(&runtime, session, "Weather in Oslo?").await;

    assert_eq!(harness::finished_text(&outcome), "Oslo is at 12°C.");
    let Outcome::Completed { stats, .. } = &outcome else {
        unreachable!()
    };
    assert_eq!(stats.turns, 2, "the resumed run kept its turn count");
    let restarts: Vec<u32> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Restarted { restarts, reason } => {
                assert!(
                    reason.contains("injected fault: session panicked at turn 2"),
                    "{reason}"
                );
                Some(*restarts)
            }
            _ => None,
        })
        .collect();
    assert_eq!(restarts, [1]);
    assert!(
        events
            .iter()
            .any(|e| matches!(e.kind, EventKind::SessionStarted { resumed: true, .. }))
    );
    // Nothing was done twice: one request per turn, one tool call.
    assert_eq!(mock.request_count(), 2);
    assert_eq!(lookup.invocations().len(), 1);
    let second = &mock.requests()[1].body["messages"];
    assert_eq!(
        second[3],
        json!({"role": "tool", "tool_call_id": "c1", "content": "Oslo: 12°C"})
    );
    runtime.shutdown().await;

    let records = transcript_records(dir.path(), session);
    let messages: Vec<&Message> = records
        .iter()
        .filter_map(|r| match r {
            Record::Message { message } => Some(message),
            _ => None,
        })
        .collect();
    assert_eq!(
        messages.len(),
        4,
        "user, assistant call, tool result, answer: {messages:?}"
    );
    assert!(matches!(
        records.last(),
        Some(Record::Terminal {
            outcome: Outcome::Completed { .. }
        })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_panics_than_the_intensity_allows_escalate_with_a_clear_failure() {
    let mock = MockLlm::start(vec![Reply::text("never reached")]).await;
    let mut spec = harness::spec(ToolRegistry::new());
    spec.faults = Some(FaultPlan::panic_at(1, 100));
    let (dir, runtime, session) = harness::start(&mock, spec).await;

    let (outcome, events) = harness::run(&runtime, session, "hello").await;

    let Outcome::Failed { class, message, .. } = &outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(class, "crash");
    assert_eq!(
        message,
        "session crashed 3 times within 60s; giving up: injected fault: session panicked at turn 1"
    );
    let restarts = events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::Restarted { .. }))
        .count();
    assert_eq!(restarts, 3);
    assert_eq!(mock.request_count(), 0);
    runtime.shutdown().await;
    let records = transcript_records(dir.path(), session);
    assert!(matches!(
        records.last(),
        Some(Record::Terminal {
            outcome: Outcome::Failed { .. }
        })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_mid_tool_batch_keeps_finished_results_and_runs_only_what_is_safe() {
    // Turn 1 asks for three calls: two safe lookups (a parallel group) and one
    // unsafe write after them. The session panics right after the first result is
    // journaled; the other lookup is still running (it waits for a gate the test
    // opens only once the crash has happened) and the write never started.
    let mock = MockLlm::start(vec![
        Reply::tool_calls(&[
            ("fast", "lookup", json!({"city": "Fast"})),
            ("slow", "lookup", json!({"city": "Slow"})),
            ("write", "write", json!({"city": "Written"})),
        ]),
        Reply::text("all three done"),
    ])
    .await;
    let lookups = Lookup::new(true);
    let writes = harness::Write::default();
    let crashed = Gate::new();
    let slow = Lookup::held(true, crashed.clone());
    let tools = ToolRegistry::new()
        .with(harness::Routed {
            fast: lookups.clone(),
            slow: slow.clone(),
        })
        .with(writes.clone());
    let mut spec = harness::spec(tools);
    spec.faults = Some(FaultPlan::new(FaultPoint::AfterToolResult(1), 1));
    let (_dir, runtime, session) = harness::start(&mock, spec).await;

    let mut events = runtime.subscribe();
    runtime.prompt(session, "do all three");
    harness::wait_for(&mut events, session, |k| {
        matches!(k, EventKind::Restarted { .. })
    })
    .await;
    assert_eq!(writes.count(), 0, "the write had not started at the crash");
    crashed.open();
    let (outcome, events) = harness::until_terminal(&mut events, session).await;

    assert_eq!(harness::finished_text(&outcome), "all three done");
    assert!(
        !events
            .iter()
            .any(|e| matches!(e.kind, EventKind::Restarted { .. })),
        "the session restarted more than once"
    );
    let results = harness::tool_results(&mock.requests()[1]);
    assert_eq!(
        results,
        [
            ("fast".to_owned(), "Fast: 12°C".to_owned()),
            ("slow".to_owned(), "Slow: 12°C".to_owned()),
            ("write".to_owned(), "wrote Written".to_owned()),
        ]
    );
    // The finished lookup was not repeated; the write ran exactly once.
    assert_eq!(lookups.invocations().len(), 1);
    assert_eq!(writes.count(), 1);
    assert_eq!(mock.request_count(), 2);
    runtime.shutdown().await;
}

/// Two writes in one turn, the session crashing once at `point`: the run's
/// outcome and events, the tool results the next request carried, and how many
/// writes ran.
async fn write_both_crashing_at(
    point: FaultPoint,
) -> (Outcome, Vec<orchestrate::Event>, Vec<(String, String)>, u32) {
    let mock = MockLlm::start(vec![
        Reply::tool_calls(&[
            ("w1", "write", json!({"city": "A"})),
            ("w2", "write", json!({"city": "B"})),
        ]),
        Reply::text("noted"),
    ])
    .await;
    let writes = harness::Write::default();
    let mut spec = harness::spec(ToolRegistry::new().with(writes.clone()));
    spec.faults = Some(FaultPlan::new(point, 1));
    let (_dir, runtime, session) = harness::start(&mock, spec).await;
    let (outcome, events) = harness::run(&runtime, session, "write both").await;
    runtime.shutdown().await;
    let results = harness::tool_results(&mock.requests()[1]);
    (outcome, events, results, writes.count())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_crash_a_finished_unsafe_call_is_not_repeated_and_an_unstarted_one_runs() {
    // The crash comes after w1's result: w2 has not started and is run after the
    // restart; w1 is not run again.
    let (outcome, events, results, writes) =
        write_both_crashing_at(FaultPoint::AfterToolResult(1)).await;
    assert_eq!(harness::finished_text(&outcome), "noted");
    let restarts = events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::Restarted { .. }))
        .count();
    assert_eq!(restarts, 1, "the crash happened and was survived");
    // Each call ran exactly once: two runs in all, one result per call.
    assert_eq!(writes, 2);
    assert_eq!(
        results,
        [
            ("w1".to_owned(), "wrote A".to_owned()),
            ("w2".to_owned(), "wrote B".to_owned()),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsafe_call_cut_off_by_a_crash_is_reported_interrupted_not_repeated() {
    // The session dies right after starting w1: w1 may or may not have written,
    // so it must not run again; w2 never started and runs after the restart.
    let (outcome, _, results, writes) =
        write_both_crashing_at(FaultPoint::AfterToolStarted(1)).await;
    assert_eq!(harness::finished_text(&outcome), "noted");
    let results: Vec<(&str, &str)> = results
        .iter()
        .map(|(id, content)| (id.as_str(), content.as_str()))
        .collect();
    assert_eq!(
        results,
        [
            (
                "w1",
                "interrupted: this tool call did not complete and its result was lost"
            ),
            ("w2", "wrote B"),
        ]
    );
    assert!(
        (1..=2).contains(&writes),
        "w1 ran at most once, w2 once: {writes}"
    );
}

#[derive(Debug)]
struct PanickingProvider;

impl orchestrate::Provider for PanickingProvider {
    fn stream_turn<'a>(
        &'a self,
        _request: &'a orchestrate::ChatRequest,
        _sink: orchestrate::llm::DeltaSink<'a>,
        _cancel: &'a tokio_util::sync::CancellationToken,
    ) -> futures::future::BoxFuture<'a, Result<orchestrate::AssistantTurn, orchestrate::LlmError>>
    {
        panic!("provider bug before any future exists")
    }

    fn complete<'a>(
        &'a self,
        _request: &'a orchestrate::ChatRequest,
    ) -> futures::future::BoxFuture<'a, Result<orchestrate::AssistantTurn, orchestrate::LlmError>>
    {
        panic!("provider bug")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_provider_fails_the_run_instead_of_hanging_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut config =
        orchestrate::RuntimeConfig::new(dir.path(), std::sync::Arc::new(PanickingProvider));
    config.state = Some(harness::state(dir.path()));
    config.retry.base_delay = Duration::from_millis(1);
    config.retry.max_attempts = 3;
    let runtime = orchestrate::Runtime::start(config).await.unwrap();
    let session = runtime
        .start_session(harness::spec(ToolRegistry::new()))
        .await
        .unwrap();
    let (outcome, events) = harness::run(&runtime, session, "hello").await;
    let Outcome::Failed { class, message, .. } = &outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(class, "crash");
    assert_eq!(
        message,
        "gave up after 3 attempts: the stream task crashed: provider bug before any future exists"
    );
    assert_eq!(
        events
            .iter()
            .filter(|e| matches!(e.kind, EventKind::Retrying { .. }))
            .count(),
        2
    );
    runtime.shutdown().await;
}

#[tokio::test]
async fn a_state_folder_that_cannot_hold_journals_is_refused_at_start() {
    let mock = MockLlm::start(Vec::new()).await;
    let dir = tempfile::tempdir().unwrap();
    let state = harness::state(dir.path());
    // The workspace's folder is a file, so the journal folder cannot be made in it.
    std::fs::create_dir_all(state.root()).unwrap();
    std::fs::write(state.dir(), "not a directory").unwrap();
    let mut config =
        orchestrate::RuntimeConfig::new(dir.path(), harness::client(&mock, harness::DEADLINE));
    config.state = Some(state.clone());
    let error = orchestrate::Runtime::start(config).await.err().unwrap();
    let message = error.to_string();
    assert!(
        message.contains(&state.dir().display().to_string()),
        "the error names the folder: {message}"
    );
}

// One thread, so that the paused clock below is this test's whole world.
#[tokio::test(flavor = "current_thread")]
async fn a_stop_while_waiting_to_restart_ends_the_session_after_its_resumed_run() {
    let mock = MockLlm::start(vec![Reply::text("resumed answer")]).await;
    let mut spec = harness::spec(ToolRegistry::new());
    spec.faults = Some(FaultPlan::panic_at(1, 1));
    let (_dir, runtime, session) = harness::start(&mock, spec).await;
    let mut events = runtime.subscribe_session(session);
    // The clock stands still from the prompt until the Stop is sent, so the restart
    // backoff cannot run out before the Stop lands: it lands while the session is
    // down. (Between the prompt and the crash nothing waits on anything outside this
    // thread, so the paused clock never skips ahead; no request is made before the
    // clock runs again.)
    tokio::time::pause();
    let paused_at = tokio::time::Instant::now();
    let first = runtime.prompt(session, "hello");
    harness::wait_for(&mut events, session, |k| {
        matches!(k, EventKind::Restarted { .. })
    })
    .await;
    runtime.stop_session(session);
    assert_eq!(
        tokio::time::Instant::now(),
        paused_at,
        "the clock moved, so the restart may have come before the Stop"
    );
    tokio::time::resume();

    let (outcome, _) = harness::until_terminal(&mut events, session).await;
    assert_eq!(harness::finished_text(&outcome), "resumed answer");
    // The session stops: a later prompt never runs, and still gets its terminal
    // event, whether it reached the session while it was stopping (cancelled with
    // the queue) or after it had gone (no such session).
    let later = runtime.prompt(session, "again");
    let ended = harness::wait_for(&mut events, session, |k| k.answer_to(later).is_some()).await;
    match ended.kind.answer_to(later) {
        Some(Outcome::Cancelled { .. }) => {}
        Some(Outcome::Failed { message, .. }) => {
            assert!(message.contains("it ended or never existed"), "{message}");
        }
        other => panic!("the later prompt ran: {other:?}"),
    }
    assert_ne!(first, later);
    assert_eq!(mock.request_count(), 1);
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_journal_records_each_lifecycle_event_a_restart_included() {
    let mock = MockLlm::start(vec![
        Reply::tool_calls(&[("c1", "lookup", json!({"city": "Oslo"}))]),
        Reply::text("Oslo is at 12°C."),
    ])
    .await;
    let mut spec = harness::spec(ToolRegistry::new().with(Lookup::new(false)));
    spec.faults = Some(FaultPlan::panic_at(2, 1));
    let (dir, runtime, session) = harness::start(&mock, spec).await;
    let (outcome, events) = harness::run(&runtime, session, "Weather in Oslo?").await;
    assert_eq!(harness::finished_text(&outcome), "Oslo is at 12°C.");
    runtime.shutdown().await;

    let journaled: Vec<orchestrate::Event> =
        read_journal(&harness::state(dir.path()).journal(session))
            .unwrap()
            .records
            .into_iter()
            .filter_map(|r| match r {
                Record::Event { event, .. } => Some(event),
                _ => None,
            })
            .collect();
    // Every lifecycle event the bus carried, in order, except the terminal one
    // (the journal's own terminal record holds it), without what the messages
    // hold: a call's arguments, a turn's text.
    let published: Vec<orchestrate::Event> = events
        .into_iter()
        .filter(|e| !e.kind.is_progress() && !matches!(e.kind, EventKind::Terminal { .. }))
        .map(|mut e| {
            match &mut e.kind {
                EventKind::ToolStarted { arguments, .. } => arguments.clear(),
                EventKind::TurnFinished { text, .. } => text.clear(),
                _ => {}
            }
            e
        })
        .collect();
    let kinds: Vec<&str> = journaled.iter().map(|e| kind_name(&e.kind)).collect();
    assert_eq!(
        kinds,
        [
            "session_started",
            "turn_started",
            "turn_finished",
            "tool_started",
            "tool_finished",
            "restarted",
            "session_started",
            "turn_started",
            "turn_finished",
        ]
    );
    // `harness::run` subscribed after the session had started.
    assert_eq!(journaled[1..], published);
}

fn kind_name(kind: &EventKind) -> &'static str {
    match kind {
        EventKind::SessionStarted { .. } => "session_started",
        EventKind::TurnStarted { .. } => "turn_started",
        EventKind::TurnFinished { .. } => "turn_finished",
        EventKind::ToolStarted { .. } => "tool_started",
        EventKind::ToolFinished { .. } => "tool_finished",
        EventKind::Restarted { .. } => "restarted",
        _ => "other",
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_whose_journal_cannot_be_read_does_not_start_and_is_forgotten() {
    let mock = MockLlm::start(vec![]).await;
    let dir = tempfile::tempdir().unwrap();
    let runtime = harness::runtime(&mock, dir.path()).await;
    let session = orchestrate::SessionId::new();
    let path = harness::state(dir.path()).journal(session);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    // A journal of a later format than this build reads is refused.
    let header = json!({"record": "header", "session": session.to_string(), "agent": "a", "model": "m", "format": 99});
    std::fs::write(&path, format!("{header}\n")).unwrap();
    let spec = harness::spec(ToolRegistry::new());
    let error = runtime.resume_session(session, spec.clone()).await;
    assert!(error.is_err(), "{error:?}");
    // Forgotten, not left half-started: a prompt to it ends at once, and resuming
    // it again tries again.
    let (outcome, _) = harness::run(&runtime, session, "hello").await;
    assert!(matches!(outcome, Outcome::Failed { .. }), "{outcome:?}");
    assert!(runtime.resume_session(session, spec).await.is_err());
    assert!(mock.requests().is_empty());
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_journal_read_in_progress_holds_up_no_other_session() {
    let stuck =
        Reply::stream(vec![ev_role(), ev_text("one ")]).with_end(End::HoldAfter(2, Gate::new()));
    let mock = MockLlm::start(vec![stuck, Reply::text("resumed")]).await;
    let dir = tempfile::tempdir().unwrap();
    let reads = Arc::new(tokio::sync::Semaphore::new(0));
    let mut config = RuntimeConfig::new(dir.path(), harness::client(&mock, DEADLINE));
    config.state = Some(harness::state(dir.path()));
    config.journal_reads = Some(reads.clone());
    let runtime = Runtime::start(config).await.unwrap();
    let spec = harness::spec(ToolRegistry::new());

    // One session streams.
    let busy = runtime.start_session(spec.clone()).await.unwrap();
    let mut events = runtime.subscribe();
    runtime.prompt(busy, "go");
    harness::wait_for(&mut events, busy, |k| {
        matches!(k, EventKind::TextDelta { .. })
    })
    .await;

    // Another is resumed from a journal whose read does not end (a slow disk).
    let slow = orchestrate::SessionId::new();
    let path = harness::state(dir.path()).journal(slow);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let header =
        json!({"record": "header", "session": slow.to_string(), "agent": "a", "model": "m"});
    std::fs::write(&path, format!("{header}\n")).unwrap();
    let handle = runtime.handle();
    let resuming = tokio::spawn(async move { handle.resume_session(slow, spec).await });
    // The Orchestrator has taken the resume once it answers what came after it.
    let other = runtime
        .start_session(harness::spec(ToolRegistry::new()))
        .await
        .unwrap();
    assert_ne!(other, slow);

    // A cancel of the streaming session takes effect while the read waits.
    runtime.cancel(busy);
    let (outcome, _) = harness::until_terminal(&mut events, busy).await;
    assert!(matches!(outcome, Outcome::Cancelled { .. }), "{outcome:?}");
    assert!(!resuming.is_finished(), "the read was still waiting");

    reads.add_permits(1);
    let resumed = tokio::time::timeout(DEADLINE, resuming)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(resumed.unwrap(), slow);
    let (outcome, _) = harness::run(&runtime, slow, "and now?").await;
    assert_eq!(harness::finished_text(&outcome), "resumed");
    runtime.shutdown().await;
}
