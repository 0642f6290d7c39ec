//! Run with `cargo run --example custom_tool -- http://localhost:11434/v1 qwen2.5-coder`
//!
//! Registers a tool of your own: the model may call `word_count` on a piece of text,
//! the session runs it (in parallel with other safe calls) and sends the result back.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::sync::Arc;

use futures::future::BoxFuture;
use orchestrate::{
    Concurrency, EventKind, OpenAiClient, OpenAiConfig, Outcome, Runtime, RuntimeConfig,
    SessionSpec, Tool, ToolContext, ToolError, ToolRegistry,
};
use serde_json::{Value, json};

/// Counts the words of a text. Read-only and safe to run beside other calls.
#[derive(Debug)]
struct WordCount;

impl Tool for WordCount {
    fn name(&self) -> &str {
        "word_count"
    }

    fn description(&self) -> &str {
        "Counts the words in `text` and returns the number."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {"text": {"type": "string", "description": "The text to count."}},
            "required": ["text"],
        })
    }

    fn read_only(&self) -> bool {
        true
    }

    fn concurrency(&self, _input: &Value) -> Concurrency {
        Concurrency::Safe
    }

    fn call<'a>(
        &'a self,
        input: Value,
        _ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(async move {
            let text = input["text"]
                .as_str()
                .ok_or_else(|| ToolError::InvalidInput("`text` must be a string".into()))?;
            Ok(text.split_whitespace().count().to_string())
        })
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(base_url), Some(model)) = (args.next(), args.next()) else {
        eprintln!("usage: custom_tool BASE_URL MODEL");
        std::process::exit(2);
    };
    let client = OpenAiClient::new(OpenAiConfig::new(
        base_url,
        std::env::var("OPENAI_API_KEY").ok(),
    ))?;
    let workspace = std::env::temp_dir().join("orchestrate-example");
    std::fs::create_dir_all(&workspace)?;
    let runtime = Runtime::start(RuntimeConfig::new(&workspace, Arc::new(client))).await?;
    let mut spec = SessionSpec::new(
        "counter",
        model,
        "Use the word_count tool whenever you need a count.",
    );
    spec.tools = ToolRegistry::new().with(WordCount);
    let session = runtime.start_session(spec).await?;
    let prompt = "How many words are in 'the quick brown fox jumps over the lazy dog'?";
    let outcome = runtime
        .run_prompt(session, prompt, |event| match &event.kind {
            EventKind::ToolStarted {
                name, arguments, ..
            } => eprintln!("→ {name} {arguments}"),
            EventKind::ToolFinished { preview, .. } => eprintln!("← {preview}"),
            _ => {}
        })
        .await;
    match outcome {
        Some(Outcome::Completed { text, .. }) => println!("{text}"),
        other => eprintln!("{other:?}"),
    }
    runtime.shutdown().await;
    Ok(())
}
