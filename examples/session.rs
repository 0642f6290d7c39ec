//! Run with `cargo run --example session -- http://localhost:11434/v1 qwen2.5-coder "Say hello"`
//!
//! One session against any OpenAI-compatible server (the key, if the server needs
//! one, comes from `OPENAI_API_KEY`), printing the answer as it streams and the
//! run's statistics at the end.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::io::Write;
use std::sync::Arc;

use orchestrate::{
    EventKind, OpenAiClient, OpenAiConfig, Outcome, Runtime, RuntimeConfig, SessionSpec,
};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(base_url), Some(model)) = (args.next(), args.next()) else {
        eprintln!("usage: session BASE_URL MODEL [PROMPT]");
        std::process::exit(2);
    };
    let prompt = args
        .next()
        .unwrap_or_else(|| "Say hello in one sentence.".to_owned());

    let client = OpenAiClient::new(OpenAiConfig::new(
        base_url,
        std::env::var("OPENAI_API_KEY").ok(),
    ))?;
    let workspace = std::env::temp_dir().join("orchestrate-example");
    std::fs::create_dir_all(&workspace)?;
    let runtime = Runtime::start(RuntimeConfig::new(&workspace, Arc::new(client))).await?;
    let session = runtime
        .start_session(SessionSpec::new(
            "example",
            model,
            "You are a concise assistant.",
        ))
        .await?;

    let outcome = runtime
        .run_prompt(session, prompt, |event| {
            if let EventKind::TextDelta { text } = &event.kind {
                print!("{text}");
                let _ = std::io::stdout().flush();
            }
        })
        .await;
    println!();
    match outcome {
        Some(Outcome::Completed { stats, .. }) => eprintln!(
            "{} turn(s), {} tokens in, {} out, {} ms",
            stats.turns, stats.usage.input_tokens, stats.usage.output_tokens, stats.duration_ms
        ),
        Some(Outcome::Failed { class, message, .. }) => eprintln!("failed ({class}): {message}"),
        Some(Outcome::Partial { reason, .. }) => eprintln!("stopped ({reason})"),
        Some(Outcome::TimedOut { .. }) => eprintln!("timed out"),
        Some(Outcome::Cancelled { .. }) | None => eprintln!("cancelled"),
    }
    runtime.shutdown().await;
    Ok(())
}
