//! Provider faults: each retryable one is retried and the run succeeds; permanent
//! ones fail at once; exhausted retries fail cleanly and name the last error.

use std::time::Duration;

use orchestrate::{EventKind, Outcome, ToolRegistry};

use crate::support::harness::{self, TEST_KEY};
use crate::support::mock_llm::{End, Gate, MockLlm, Reply, ev_error};

async fn run_script(
    script: Vec<Reply>,
    idle: Duration,
) -> (Outcome, Vec<orchestrate::Event>, MockLlm) {
    let mock = MockLlm::start(script).await;
    let dir = tempfile::tempdir().unwrap();
    let runtime = harness::runtime_with(&mock, dir.path(), idle).await;
    let session = runtime
        .start_session(harness::spec(ToolRegistry::new()))
        .await
        .unwrap();
    let (outcome, events) = harness::run(&runtime, session, "hello").await;
    runtime.shutdown().await;
    (outcome, events, mock)
}

fn retries(events: &[orchestrate::Event]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Retrying { reason, .. } => Some(reason.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limited_with_retry_after_waits_then_succeeds() {
    let (outcome, events, mock) = run_script(
        vec![Reply::rate_limited(1), Reply::text("ok after waiting")],
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(harness::finished_text(&outcome), "ok after waiting");
    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    let waited = requests[1].at.duration_since(requests[0].at);
    assert!(
        waited >= Duration::from_secs(1),
        "retried after only {waited:?}"
    );
    let delays: Vec<u64> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Retrying { delay_ms, .. } => Some(*delay_ms),
            _ => None,
        })
        .collect();
    assert_eq!(delays, [1000]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_server_errors_then_success_takes_exactly_three_requests() {
    let script = vec![
        Reply::status(500, "boom"),
        Reply::status(500, "boom again"),
        Reply::text("third time lucky"),
    ];
    let (outcome, events, mock) = run_script(script, Duration::from_secs(5)).await;
    assert_eq!(harness::finished_text(&outcome), "third time lucky");
    assert_eq!(mock.request_count(), 3);
    assert_eq!(retries(&events), ["HTTP 500: boom", "HTTP 500: boom again"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overloaded_and_unavailable_are_retried() {
    let script = vec![
        Reply::status(529, "Overloaded"),
        Reply::status(503, "down"),
        Reply::text("fine"),
    ];
    let (outcome, _, mock) = run_script(script, Duration::from_secs(5)).await;
    assert_eq!(harness::finished_text(&outcome), "fine");
    assert_eq!(mock.request_count(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_dropped_mid_stream_is_retried() {
    let script = vec![
        Reply::text("this answer gets cut off").with_end(End::DropAfter(2)),
        Reply::text("complete answer"),
    ];
    let (outcome, events, mock) = run_script(script, Duration::from_secs(5)).await;
    assert_eq!(harness::finished_text(&outcome), "complete answer");
    assert_eq!(mock.request_count(), 2);
    let reasons = retries(&events);
    assert_eq!(reasons.len(), 1);
    assert!(
        reasons[0].starts_with("connection lost mid-stream"),
        "{reasons:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stall_past_the_idle_timeout_is_retried() {
    // Silent after its first chunk until the client gives up on it.
    let stalled = Reply::text("slow answer").with_end(End::HoldAfter(1, Gate::new()));
    let (outcome, events, mock) = run_script(
        vec![stalled, Reply::text("fast answer")],
        Duration::from_millis(300),
    )
    .await;
    assert_eq!(harness::finished_text(&outcome), "fast answer");
    assert_eq!(mock.request_count(), 2);
    assert_eq!(retries(&events), ["stream stalled: no event for 300ms"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_chunk_is_retried() {
    let script = vec![
        Reply::text("garbled").with_malformed_chunk(1),
        Reply::text("clean"),
    ];
    let (outcome, events, mock) = run_script(script, Duration::from_secs(5)).await;
    assert_eq!(harness::finished_text(&outcome), "clean");
    assert_eq!(mock.request_count(), 2);
    assert!(retries(&events)[0].starts_with("malformed stream chunk"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_that_ends_without_finishing_is_an_error_not_a_short_answer() {
    let script = vec![
        Reply::text("truncated answer").without_finish(),
        Reply::text("whole answer"),
    ];
    let (outcome, events, mock) = run_script(script, Duration::from_secs(5)).await;
    assert_eq!(harness::finished_text(&outcome), "whole answer");
    assert_eq!(mock.request_count(), 2);
    assert_eq!(retries(&events), ["stream ended before its finish event"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_in_band_error_chunk_is_classified_and_retried() {
    let script = vec![
        Reply::stream(vec![ev_error("server_error", "The server had an error")]),
        Reply::text("recovered"),
    ];
    let (outcome, events, mock) = run_script(script, Duration::from_secs(5)).await;
    assert_eq!(harness::finished_text(&outcome), "recovered");
    assert_eq!(mock.request_count(), 2);
    assert_eq!(
        retries(&events),
        ["provider error (server_error): The server had an error"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_answer_is_retried() {
    let empty = Reply::stream(vec![
        crate::support::mock_llm::ev_role(),
        crate::support::mock_llm::ev_finish("stop"),
    ]);
    let (outcome, events, mock) = run_script(
        vec![empty, Reply::text("something")],
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(harness::finished_text(&outcome), "something");
    assert_eq!(mock.request_count(), 2);
    assert_eq!(retries(&events), ["the model returned an empty answer"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unauthorized_fails_at_once_after_one_request() {
    let (outcome, events, mock) = run_script(
        vec![
            Reply::status(401, "Incorrect API key provided"),
            Reply::text("never"),
        ],
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(mock.request_count(), 1);
    assert!(retries(&events).is_empty());
    let Outcome::Failed { class, message, .. } = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(class, "auth");
    assert_eq!(message, "HTTP 401: Incorrect API key provided");
    assert!(!message.contains(TEST_KEY));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exhausted_retries_fail_cleanly_and_name_the_last_error() {
    let script = (0..5)
        .map(|i| Reply::status(503, format!("unavailable #{i}")))
        .chain([Reply::text("too late")])
        .collect();
    let (outcome, events, mock) = run_script(script, Duration::from_secs(5)).await;
    assert_eq!(mock.request_count(), 5);
    assert_eq!(retries(&events).len(), 4);
    let Outcome::Failed { class, message, .. } = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(class, "overloaded");
    assert_eq!(
        message,
        "gave up after 5 attempts: HTTP 503: unavailable #4"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_context_overflow_is_reported_as_such() {
    let overflow = Reply::Status {
        status: 400,
        headers: vec![],
        body: r#"{"error":{"message":"This model's maximum context length is 8192 tokens.","type":"invalid_request_error","code":"context_length_exceeded"}}"#.into(),
    };
    let (outcome, _, mock) = run_script(vec![overflow], Duration::from_secs(5)).await;
    assert_eq!(mock.request_count(), 1);
    let Outcome::Failed { class, .. } = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(class, "context_overflow");
}
