//! Run with `cargo run --example supervision`
//!
//! A crash and the supervisor's restart, made visible, with no network: the model is
//! a replay of two recorded turns (a tool call, then the answer). The session is set
//! to panic as it is about to start its second turn; the Orchestrator restarts it
//! from its journal, the finished tool result is kept (the tool does not run twice),
//! and the run ends with the answer. Every event is printed as it happens.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use futures::future::BoxFuture;
use orchestrate::llm::cassette::Exchange;
use orchestrate::llm::replay::ReplayProvider;
use orchestrate::{
    Concurrency, EventKind, FaultPlan, Outcome, Runtime, RuntimeConfig, SessionSpec, Tool,
    ToolContext, ToolError, ToolRegistry,
};
use serde_json::{Value, json};

/// A tool that counts its calls, to show it runs once despite the crash.
#[derive(Debug, Default)]
struct Weather {
    calls: Arc<AtomicU32>,
}

impl Tool for Weather {
    fn name(&self) -> &str {
        "weather"
    }
    fn description(&self) -> &str {
        "Today's weather in a city."
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
    }
    fn concurrency(&self, _input: &Value) -> Concurrency {
        Concurrency::Safe
    }
    fn read_only(&self) -> bool {
        true
    }
    fn call<'a>(
        &'a self,
        input: Value,
        _ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(async move {
            let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
            println!("  [tool] weather called (call #{n})");
            Ok(format!(
                "{}: 12°C, light rain",
                input["city"].as_str().unwrap_or("?")
            ))
        })
    }
}

/// One recorded streamed turn in OpenAI's format.
fn turn(place: &str, delta: &Value, finish: &str) -> Exchange {
    let chunk = |delta: &Value, finish: Value| json!({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
    Exchange {
        place: place.to_owned(),
        protocol: "openai".to_owned(),
        request: Value::Null,
        // Written by hand: nothing recorded to check the replay against.
        sent: None,
        status: 200,
        response: format!(
            "data: {}\n\ndata: {}\n\ndata: [DONE]\n\n",
            chunk(delta, Value::Null),
            chunk(&json!({}), json!(finish))
        ),
        duration_ms: 300,
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The injected panic is the point of the drill: one line, not a backtrace.
    std::panic::set_hook(Box::new(|info| {
        eprintln!("PANIC in the session actor: {info}")
    }));
    let call = json!({"tool_calls": [{"index": 0, "id": "c1", "type": "function",
        "function": {"name": "weather", "arguments": "{\"city\":\"Oslo\"}"}}]});
    let replay = ReplayProvider::new(vec![
        turn("forecaster/turn 1", &call, "tool_calls"),
        turn(
            "forecaster/turn 2",
            &json!({"content": "Oslo: 12°C with light rain. Take an umbrella."}),
            "stop",
        ),
    ]);
    let workspace = std::env::temp_dir().join("orchestrate-supervision-example");
    std::fs::create_dir_all(&workspace)?;
    let runtime = Runtime::start(RuntimeConfig::new(&workspace, Arc::new(replay))).await?;

    let calls = Arc::new(AtomicU32::new(0));
    let mut spec = SessionSpec::new("forecaster", "replay", "You answer weather questions.");
    spec.tools = ToolRegistry::new().with(Weather {
        calls: calls.clone(),
    });
    // The drill: panic once, just before the second model turn.
    spec.faults = Some(FaultPlan::panic_at(2, 1));
    let session = runtime.start_session(spec).await?;
    let mut events = runtime.subscribe_session(session);
    let prompt = runtime.prompt(session, "What's the weather in Oslo?");
    loop {
        let Some(event) = events.recv().await else {
            break;
        };
        match &event.kind {
            EventKind::TextDelta { .. } | EventKind::ReasoningDelta { .. } => {}
            EventKind::Restarted { restarts, reason } => {
                println!("RESTARTED (restart {restarts}): {reason}");
            }
            other => println!("{}: {}", event.agent, serde_json::to_string(other)?),
        }
        if let Some(outcome) = event.kind.answer_to(prompt) {
            if let Outcome::Completed { text, .. } = outcome {
                println!("\nanswer: {text}");
            }
            break;
        }
    }
    println!(
        "the tool ran {} time(s); the journal is in {}",
        calls.load(Ordering::SeqCst),
        runtime.state().sessions().display()
    );
    runtime.shutdown().await;
    Ok(())
}
