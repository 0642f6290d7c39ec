//! A whole multi-turn conversation through the public API, checked down to the
//! exact requests the agent sent.

use orchestrate::{EventKind, Outcome, ToolRegistry};
use serde_json::{Value, json};

use crate::support::harness::{self, Lookup, TEST_KEY};
use crate::support::mock_llm::{MockLlm, Reply};

fn system() -> Value {
    json!({"role": "system", "content": "You are a test agent."})
}

fn tools() -> Value {
    json!([{
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Looks up the weather in a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }])
}

fn body(messages: &[Value]) -> Value {
    json!({
        "model": "mock-model",
        "messages": messages,
        "stream": true,
        "stream_options": {"include_usage": true},
        "tools": tools(),
    })
}

fn call(id: &str, city: &str) -> Value {
    json!({"id": id, "type": "function", "function": {"name": "lookup", "arguments": json!({"city": city, "units": "celsius"}).to_string()}})
}

fn result(id: &str, city: &str) -> Value {
    json!({"role": "tool", "tool_call_id": id, "content": format!("{city}: 12°C")})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_turns_with_parallel_tool_calls_split_mid_json() {
    let args = |city: &str| json!({"city": city, "units": "celsius"});
    let mock = MockLlm::start(vec![
        Reply::tool_calls(&[
            ("call_a", "lookup", args("Edinburgh")),
            ("call_b", "lookup", args("Paris")),
        ]),
        Reply::tool_calls(&[("call_c", "lookup", args("Rome"))]),
        Reply::text("Edinburgh, Paris and Rome are all at 12°C."),
    ])
    .await;
    // The first turn's two calls meet at a barrier: they answer only if they run at
    // the same time.
    let lookup = Lookup::meeting(2);
    let (_dir, runtime, session) = harness::start(
        &mock,
        harness::spec(ToolRegistry::new().with(lookup.clone())),
    )
    .await;

    let prompt = "Weather in Edinburgh and Paris, then Rome?";
    let (outcome, events) = harness::run(&runtime, session, prompt).await;

    assert_eq!(
        harness::finished_text(&outcome),
        "Edinburgh, Paris and Rome are all at 12°C."
    );
    let Outcome::Completed { stats, .. } = &outcome else {
        unreachable!()
    };
    assert_eq!((stats.turns, stats.tool_calls), (3, 3));
    assert_eq!(
        (stats.usage.input_tokens, stats.usage.output_tokens),
        (30, 15)
    );

    let user = json!({"role": "user", "content": prompt});
    let turn1 = json!({"role": "assistant", "content": null, "tool_calls": [call("call_a", "Edinburgh"), call("call_b", "Paris")]});
    let turn2 =
        json!({"role": "assistant", "content": null, "tool_calls": [call("call_c", "Rome")]});
    let sent: Vec<Value> = mock.requests().into_iter().map(|r| r.body).collect();
    assert_eq!(
        sent,
        vec![
            body(&[system(), user.clone()]),
            body(&[
                system(),
                user.clone(),
                turn1.clone(),
                result("call_a", "Edinburgh"),
                result("call_b", "Paris")
            ]),
            body(&[
                system(),
                user,
                turn1,
                result("call_a", "Edinburgh"),
                result("call_b", "Paris"),
                turn2,
                result("call_c", "Rome"),
            ]),
        ]
    );
    for request in mock.requests() {
        assert_eq!(
            request.authorization.as_deref(),
            Some(format!("Bearer {TEST_KEY}").as_str())
        );
    }

    // The two calls of the first turn ran at the same time; the third ran alone.
    let running: Vec<usize> = lookup.invocations().iter().map(|c| c.running).collect();
    assert_eq!(running, [1, 2, 1], "calls running as each one started");

    let tool_events: Vec<(String, bool)> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolFinished {
                call_id, is_error, ..
            } => Some((call_id.clone(), *is_error)),
            _ => None,
        })
        .collect();
    assert_eq!(tool_events.len(), 3);
    assert!(tool_events.iter().all(|(_, is_error)| !is_error));
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsafe_calls_run_one_at_a_time_and_results_keep_call_order() {
    let args = |city: &str| json!({"city": city});
    let mock = MockLlm::start(vec![
        Reply::tool_calls(&[
            ("u1", "lookup", args("A")),
            ("u2", "lookup", args("B")),
            ("u3", "lookup", args("C")),
        ]),
        Reply::text("done"),
    ])
    .await;
    let lookup = Lookup::new(false);
    let (_dir, runtime, session) = harness::start(
        &mock,
        harness::spec(ToolRegistry::new().with(lookup.clone())),
    )
    .await;
    let (outcome, _) = harness::run(&runtime, session, "go").await;
    assert_eq!(harness::finished_text(&outcome), "done");

    let calls = lookup.invocations();
    let cities: Vec<&str> = calls
        .iter()
        .map(|c| c.input["city"].as_str().unwrap())
        .collect();
    assert_eq!(cities, ["A", "B", "C"]);
    assert_eq!(
        lookup.most_at_once(),
        1,
        "unsafe calls overlapped: {calls:?}"
    );
    let second = &mock.requests()[1].body["messages"];
    let ids: Vec<&str> = second
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["tool_call_id"].as_str())
        .collect();
    assert_eq!(ids, ["u1", "u2", "u3"]);
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_tool_call_becomes_an_error_result_and_the_session_goes_on() {
    let mock = MockLlm::start(vec![
        Reply::tool_calls(&[
            ("x1", "no_such_tool", json!({})),
            ("x2", "lookup", json!({"town": "?"})),
        ]),
        Reply::text("sorry"),
    ])
    .await;
    let lookup = Lookup::new(true);
    let (_dir, runtime, session) =
        harness::start(&mock, harness::spec(ToolRegistry::new().with(lookup))).await;
    let (outcome, _) = harness::run(&runtime, session, "go").await;
    assert_eq!(harness::finished_text(&outcome), "sorry");
    let results = harness::tool_results(&mock.requests()[1]);
    assert_eq!(results[0].1, "Error: unknown tool \"no_such_tool\"");
    assert_eq!(results[1].1, "Error: invalid input: `city` is required");
    runtime.shutdown().await;
}

#[derive(Debug)]
struct Explodes;

impl orchestrate::Tool for Explodes {
    fn name(&self) -> &str {
        "explode"
    }
    fn description(&self) -> &str {
        "Panics."
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object"})
    }
    fn read_only(&self) -> bool {
        true
    }
    fn concurrency(&self, _input: &Value) -> orchestrate::Concurrency {
        orchestrate::Concurrency::Safe
    }
    fn call<'a>(
        &'a self,
        _input: Value,
        _ctx: &'a orchestrate::ToolContext,
    ) -> futures::future::BoxFuture<'a, Result<String, orchestrate::ToolError>> {
        Box::pin(async { panic!("boom") })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_tool_becomes_an_error_result_and_is_not_replayed() {
    let mock = MockLlm::start(vec![
        Reply::tool_calls(&[("p1", "explode", json!({}))]),
        Reply::text("that tool is broken"),
    ])
    .await;
    let (_dir, runtime, session) =
        harness::start(&mock, harness::spec(ToolRegistry::new().with(Explodes))).await;
    let (outcome, events) = harness::run(&runtime, session, "try it").await;
    assert_eq!(harness::finished_text(&outcome), "that tool is broken");
    let result = &mock.requests()[1].body["messages"][3];
    assert_eq!(
        *result,
        json!({"role": "tool", "tool_call_id": "p1", "content": "Error: the tool crashed: boom"})
    );
    assert!(
        !events
            .iter()
            .any(|e| matches!(e.kind, EventKind::Restarted { .. })),
        "a tool crash must not crash the session"
    );
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_stops_at_max_turns_with_its_partial_work() {
    let call = |id: &str| Reply::tool_calls(&[(id, "lookup", json!({"city": "Quito"}))]);
    let mock = MockLlm::start(vec![
        call("m1"),
        call("m2"),
        call("m3"),
        Reply::text("never"),
    ])
    .await;
    let mut spec = harness::spec(ToolRegistry::new().with(Lookup::new(true)));
    spec.max_turns = 2;
    let (_dir, runtime, session) = harness::start(&mock, spec).await;
    let (outcome, _) = harness::run(&runtime, session, "loop forever").await;
    let Outcome::Partial { reason, stats, .. } = &outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(reason, "budget: turns");
    assert_eq!((stats.turns, stats.tool_calls), (2, 2));
    assert_eq!(mock.request_count(), 2);
    runtime.shutdown().await;
}
