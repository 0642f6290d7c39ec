//! The prompt queue: prompts that arrive while the session is busy wait, and are
//! answered in order; a cancel drops only the prompts queued before it.

use orchestrate::{EventKind, Outcome, ToolRegistry};
use serde_json::{Value, json};

use crate::support::harness::{self, Lookup};
use crate::support::mock_llm::{End, Gate, MockLlm, Reply};

/// `reply`, sent only once `gate` opens.
fn held(reply: Reply, gate: &Gate) -> Reply {
    reply.with_end(End::HoldAfter(0, gate.clone()))
}

fn last_user(body: &Value) -> String {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().unwrap().to_owned())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_prompts_sent_while_busy_are_both_answered_in_order() {
    // The first answer waits until the test has seen both later prompts queued.
    let both_queued = Gate::new();
    let mock = MockLlm::start(vec![
        held(Reply::text("answer one"), &both_queued),
        Reply::text("answer two"),
        Reply::text("answer three"),
    ])
    .await;
    let (_dir, runtime, session) = harness::start(&mock, harness::spec(ToolRegistry::new())).await;
    let mut events = runtime.subscribe();
    runtime.prompt(session, "one");
    harness::wait_for(&mut events, session, |k| {
        matches!(k, EventKind::TurnStarted { .. })
    })
    .await;
    runtime.prompt(session, "two");
    runtime.prompt(session, "three");
    let mut queued = Vec::new();
    harness::wait_for(&mut events, session, |k| {
        if let EventKind::PromptQueued { waiting } = k {
            queued.push(*waiting);
        }
        queued.len() == 2
    })
    .await;
    both_queued.open();

    let mut answers = Vec::new();
    while answers.len() < 3 {
        let (outcome, seen) = harness::until_terminal(&mut events, session).await;
        queued.extend(seen.iter().filter_map(|e| match e.kind {
            EventKind::PromptQueued { waiting } => Some(waiting),
            _ => None,
        }));
        answers.push(harness::finished_text(&outcome).to_owned());
    }
    assert_eq!(answers, ["answer one", "answer two", "answer three"]);
    assert_eq!(
        queued,
        [1, 2],
        "how many waited when each prompt was queued"
    );
    let asked: Vec<String> = mock.requests().iter().map(|r| last_user(&r.body)).collect();
    assert_eq!(asked, ["one", "two", "three"]);
    // Each answer saw the whole conversation before it.
    let third = &mock.requests()[2].body["messages"];
    let roles: Vec<&str> = third
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        ["system", "user", "assistant", "user", "assistant", "user"]
    );
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_queued_during_tools_joins_at_the_tool_turn_boundary() {
    let mock = MockLlm::start(vec![
        Reply::tool_calls(&[("t1", "lookup", json!({"city": "Lima"}))]),
        Reply::text("Lima, and noted."),
    ])
    .await;
    // The lookup answers only once the second prompt is queued.
    let queued = Gate::new();
    let lookup = Lookup::held(true, queued.clone());
    let (_dir, runtime, session) =
        harness::start(&mock, harness::spec(ToolRegistry::new().with(lookup))).await;
    let mut events = runtime.subscribe();
    runtime.prompt(session, "weather in Lima");
    harness::wait_for(&mut events, session, |k| {
        matches!(k, EventKind::ToolStarted { .. })
    })
    .await;
    runtime.prompt(session, "also, use metric");
    harness::wait_for(&mut events, session, |k| {
        matches!(k, EventKind::PromptQueued { waiting: 1 })
    })
    .await;
    queued.open();
    let (outcome, _) = harness::until_terminal(&mut events, session).await;
    assert_eq!(harness::finished_text(&outcome), "Lima, and noted.");
    let second = mock.requests()[1].body["messages"].clone();
    let tail: Vec<Value> = second.as_array().unwrap()[3..].to_vec();
    assert_eq!(
        tail,
        vec![
            json!({"role": "tool", "tool_call_id": "t1", "content": "Lima: 12°C"}),
            json!({"role": "user", "content": "also, use metric"}),
        ]
    );
    assert_eq!(mock.request_count(), 2);
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_drops_only_the_prompts_queued_before_it() {
    // The first answer is held until the client gives up on it.
    let mock = MockLlm::start(vec![
        held(Reply::text("never finished"), &Gate::new()),
        Reply::text("answer to after"),
    ])
    .await;
    let (_dir, runtime, session) = harness::start(&mock, harness::spec(ToolRegistry::new())).await;
    let mut events = runtime.subscribe();
    let first = runtime.prompt(session, "first");
    harness::wait_until("the first request arrived", || mock.request_count() == 1).await;
    let before = runtime.prompt(session, "before the cancel");
    runtime.cancel(session);
    let after = runtime.prompt(session, "after the cancel");

    // Every prompt gets exactly one terminal event, naming it.
    let mut outcomes = std::collections::BTreeMap::new();
    while outcomes.len() < 3 {
        let event = harness::wait_for(&mut events, session, |k| {
            matches!(k, EventKind::Terminal { .. })
        })
        .await;
        let EventKind::Terminal { prompts, outcome } = event.kind else {
            unreachable!()
        };
        for prompt in prompts {
            assert!(
                outcomes.insert(prompt, outcome.clone()).is_none(),
                "prompt {prompt} ended twice"
            );
        }
    }
    assert!(
        matches!(outcomes[&first], Outcome::Cancelled { .. }),
        "{outcomes:?}"
    );
    assert!(
        matches!(outcomes[&before], Outcome::Cancelled { .. }),
        "{outcomes:?}"
    );
    assert_eq!(harness::finished_text(&outcomes[&after]), "answer to after");
    let asked: Vec<String> = mock.requests().iter().map(|r| last_user(&r.body)).collect();
    assert_eq!(asked, ["first", "after the cancel"]);
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_never_cancels_a_prompt_sent_after_it() {
    // The earlier prompt's answer is held until the client gives up on it.
    let never = Gate::new();
    let mock = MockLlm::start_with(move |request, _| {
        if last_user(&request.body) == "later" {
            Reply::text("answer to later")
        } else {
            held(Reply::text("answer to earlier"), &never)
        }
    })
    .await;
    let (_dir, runtime, session) = harness::start(&mock, harness::spec(ToolRegistry::new())).await;
    let mut events = runtime.subscribe();
    let earlier = runtime.prompt(session, "earlier");
    runtime.cancel(session);
    let later = runtime.prompt(session, "later");
    let mut outcomes = std::collections::BTreeMap::new();
    while outcomes.len() < 2 {
        let event = harness::wait_for(&mut events, session, |k| {
            matches!(k, EventKind::Terminal { .. })
        })
        .await;
        let EventKind::Terminal { prompts, outcome } = event.kind else {
            unreachable!()
        };
        for prompt in prompts {
            outcomes.insert(prompt, outcome.clone());
        }
    }
    assert!(
        matches!(outcomes[&earlier], Outcome::Cancelled { .. }),
        "{outcomes:?}"
    );
    assert_eq!(harness::finished_text(&outcomes[&later]), "answer to later");
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_for_an_unknown_session_fails_instead_of_waiting_forever() {
    let mock = MockLlm::start(vec![]).await;
    let (_dir, runtime, _session) = harness::start(&mock, harness::spec(ToolRegistry::new())).await;
    let stranger = orchestrate::SessionId::new();
    let outcome = tokio::time::timeout(
        harness::DEADLINE,
        runtime.run_prompt(stranger, "anyone?", |_| {}),
    )
    .await
    .expect("run_prompt hung");
    let Some(Outcome::Failed { message, .. }) = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(
        message,
        format!("no session {stranger} (it ended or never existed)")
    );
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_to_a_session_that_is_gone_fails_at_once() {
    let mock = MockLlm::start(vec![Reply::text("hi")]).await;
    let (_dir, runtime, session) = harness::start(&mock, harness::spec(ToolRegistry::new())).await;
    runtime.stop_session(session);
    // While it stops, a prompt is queued and cancelled with the session; once it
    // is gone, one fails at once. Neither waits.
    let gone = tokio::time::timeout(harness::DEADLINE, async {
        loop {
            match runtime.run_prompt(session, "anyone there?", |_| {}).await {
                Some(Outcome::Failed { message, .. }) => return message,
                Some(Outcome::Cancelled { .. }) => tokio::task::yield_now().await,
                other => panic!("{other:?}"),
            }
        }
    })
    .await
    .expect("a prompt to a stopped session is answered");
    assert!(gone.contains("it ended or never existed"), "{gone}");

    let handle = runtime.handle();
    runtime.shutdown().await;
    let after = tokio::time::timeout(
        harness::DEADLINE,
        handle.run_prompt(session, "still?", |_| {}),
    )
    .await
    .expect("a prompt after shutdown is answered at once");
    let Some(Outcome::Failed { message, .. }) = after else {
        panic!("{after:?}")
    };
    assert_eq!(message, "the runtime has shut down");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_handle_tells_busy_and_queued_clears_the_queue_and_cancels_everything() {
    let (first, second) = (Gate::new(), Gate::new());
    let mock = MockLlm::start(vec![
        held(Reply::text("answer one"), &first),
        held(Reply::text("never"), &second),
    ])
    .await;
    let (_dir, runtime, session) = harness::start(&mock, harness::spec(ToolRegistry::new())).await;
    assert!(!runtime.is_busy(session).await, "an idle session");
    let mut events = runtime.subscribe();
    let one = runtime.prompt(session, "one");
    // Asked after the prompt, the answer counts it.
    assert!(runtime.is_busy(session).await);
    harness::wait_for(&mut events, session, |k| {
        matches!(k, EventKind::TurnStarted { .. })
    })
    .await;
    let (two, three) = (
        runtime.prompt(session, "two"),
        runtime.prompt(session, "three"),
    );
    assert_eq!(runtime.queued_prompts(session).await, ["two", "three"]);
    assert_eq!(runtime.clear_queue(session).await, 2);
    assert!(runtime.queued_prompts(session).await.is_empty());
    assert!(
        runtime.is_busy(session).await,
        "the run in progress goes on"
    );
    // Each cleared prompt ends cancelled; the first is answered.
    let mut ended = std::collections::BTreeMap::new();
    while ended.len() < 3 {
        let event = tokio::time::timeout(harness::DEADLINE, events.recv())
            .await
            .expect("every prompt ends")
            .unwrap();
        if let EventKind::Terminal { prompts, outcome } = &event.kind {
            let answer = match outcome {
                Outcome::Completed { text, .. } => text.clone(),
                Outcome::Cancelled { .. } => "cancelled".to_owned(),
                other => format!("{other:?}"),
            };
            ended.insert(prompts[0], answer);
            if prompts[0] == two {
                first.open();
            }
        }
    }
    assert_eq!(ended[&one], "answer one");
    assert_eq!(
        (ended[&two].as_str(), ended[&three].as_str()),
        ("cancelled", "cancelled")
    );
    assert!(
        !runtime.is_busy(session).await,
        "its terminal event came after it was done"
    );
    // cancel_all ends a run in progress.
    runtime.prompt(session, "four");
    harness::wait_for(&mut events, session, |k| {
        matches!(k, EventKind::TurnStarted { .. })
    })
    .await;
    runtime.cancel_all();
    let (outcome, _) = harness::until_terminal(&mut events, session).await;
    assert!(matches!(outcome, Outcome::Cancelled { .. }), "{outcome:?}");
    assert!(!runtime.is_busy(session).await);
}
