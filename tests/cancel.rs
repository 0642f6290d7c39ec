//! Cancelling a run mid-stream drops the HTTP request, ends the run with a
//! `Cancelled` terminal event carrying the partial text, and leaves the journal
//! holding everything up to it.

use orchestrate::journal::{Record, read_journal};
use orchestrate::{AssistantMessage, EventKind, Message, Outcome, ToolRegistry};

use crate::support::harness;
use crate::support::mock_llm::{End, Gate, MockLlm, Reply, ev_role, ev_text};

/// A stream of `words` that stops after the first one and sends nothing more until
/// the client goes away: a cancel always lands mid-stream. (The first word is the
/// one a session publishes at once; later ones it may hold back a moment, to
/// coalesce them.)
fn stuck_after_one(words: &[&str]) -> Reply {
    let mut chunks = vec![ev_role()];
    chunks.extend(words.iter().map(|w| ev_text(format!("{w} "))));
    Reply::stream(chunks).with_end(End::HoldAfter(2, Gate::new()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_mid_stream_drops_the_request_and_keeps_the_partial_text() {
    let words = [
        "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    ];
    let mock = MockLlm::start(vec![stuck_after_one(&words)]).await;
    let (dir, runtime, session) = harness::start(&mock, harness::spec(ToolRegistry::new())).await;
    let mut events = runtime.subscribe();
    let prompt = runtime.prompt(session, "count to ten slowly");
    let mut seen = String::new();
    harness::wait_for(&mut events, session, |k| {
        if let EventKind::TextDelta { text } = k {
            seen.push_str(text);
        }
        seen.contains("one ")
    })
    .await;
    runtime.cancel(session);
    let (outcome, _) = harness::until_terminal(&mut events, session).await;

    let Outcome::Cancelled { partial, stats } = &outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(partial, "one ");
    assert_eq!(stats.turns, 1);
    assert!(
        mock.wait_for_disconnects(1, harness::DEADLINE).await,
        "the HTTP request was not dropped"
    );
    assert_eq!(mock.request_count(), 1);
    runtime.shutdown().await;

    let records = read_journal(&crate::support::harness::state(dir.path()).journal(session))
        .unwrap()
        .records;
    // The transcript records, without the lifecycle events recorded beside them.
    let tail: Vec<Record> = records
        .into_iter()
        .skip(1)
        .filter(|r| !matches!(r, Record::Event { .. }))
        .collect();
    assert_eq!(
        tail,
        vec![
            Record::RunStarted {
                prompt,
                limits: None
            },
            Record::Message {
                message: Message::user("count to ten slowly")
            },
            Record::Message {
                message: Message::Assistant(AssistantMessage {
                    text: partial.clone(),
                    ..AssistantMessage::default()
                })
            },
            Record::Terminal {
                outcome: outcome.clone()
            },
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_cancel_the_session_takes_new_prompts() {
    let mock = MockLlm::start(vec![
        stuck_after_one(&["a", "b", "c", "d", "e", "f"]),
        Reply::text("fresh answer"),
    ])
    .await;
    let (_dir, runtime, session) = harness::start(&mock, harness::spec(ToolRegistry::new())).await;
    let mut events = runtime.subscribe();
    runtime.prompt(session, "first");
    harness::wait_for(&mut events, session, |k| {
        matches!(k, EventKind::TextDelta { .. })
    })
    .await;
    runtime.cancel(session);
    let (outcome, _) = harness::until_terminal(&mut events, session).await;
    assert!(matches!(outcome, Outcome::Cancelled { .. }), "{outcome:?}");
    let (outcome, _) = harness::run(&runtime, session, "second").await;
    assert_eq!(harness::finished_text(&outcome), "fresh answer");
    // The model saw what it had said before the cancel.
    let messages = mock.requests()[1].body["messages"].clone();
    assert_eq!(messages[2]["role"], "assistant");
    assert_eq!(messages[3]["content"], "second");
    runtime.shutdown().await;
}
