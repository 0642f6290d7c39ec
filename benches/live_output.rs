//! What telling a command's output as it comes (`tool_output` events) costs:
//! one Bash call printing 10 MB, run as the Bash tool runs it, with a
//! subscriber reading every event, beside the same call with no one to tell
//! (no events made at all). Both read the same pipe into the same capped
//! result; the difference is the live output's. Two commands: 10 MB at once,
//! and 10 MB in 20 pieces 50 ms apart (an event every 100 ms).
//!
//! Run with `cargo bench --bench live_output` (`LIVE_ROUNDS`, default 10,
//! calls of each kind, interleaved). Prints, for each kind: the wall time and
//! this process's CPU (user and system) per call, and the events told.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

mod support;

use std::time::Instant;

use orchestrate::events::Publisher;
use orchestrate::tools::bash::Bash;
use orchestrate::{EventBus, SessionId, Tool, ToolContext};

/// One call printing 10 MB, told live when `live`; its wall and CPU ms, and
/// the events told.
async fn call(ws: &std::path::Path, command: &str, live: bool) -> (f64, f64, usize) {
    let session = SessionId::new();
    let mut ctx = ToolContext::new(ws.to_owned(), session);
    let bus = EventBus::new();
    let mut events = bus.subscribe();
    let counted = tokio::spawn(async move {
        let mut told = 0;
        while events.recv().await.is_some() {
            told += 1;
        }
        told
    });
    if live {
        ctx.events = Some(Publisher::new(bus.clone(), session, None, "bench"));
    }
    let input = serde_json::json!({ "command": command });
    let (cpu, start) = (support::stat_ms(11), Instant::now());
    let result = Bash::default().call(input, &ctx).await.unwrap();
    let wall = start.elapsed().as_secs_f64() * 1000.0;
    let cpu = support::stat_ms(11) - cpu;
    assert!(result.len() > 30_000, "the capped result");
    drop((ctx, bus));
    (wall, cpu, counted.await.unwrap())
}

fn main() {
    let rounds: usize = std::env::var("LIVE_ROUNDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(10);
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().canonicalize().unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let commands = [
        ("at once", "head -c 10000000 /dev/zero | tr '\\0' a"),
        (
            "in pieces",
            "for i in $(seq 20); do head -c 500000 /dev/zero | tr '\\0' a; sleep 0.05; done",
        ),
    ];
    for (what, command) in commands {
        let mut totals = [(0.0, 0.0, 0); 2];
        runtime.block_on(async {
            for _ in 0..rounds {
                for (i, live) in [false, true].into_iter().enumerate() {
                    let (wall, cpu, told) = call(&ws, command, live).await;
                    totals[i].0 += wall;
                    totals[i].1 += cpu;
                    totals[i].2 += told;
                }
            }
        });
        for (name, (wall, cpu, told)) in ["no one told", "told live"].iter().zip(totals) {
            let n = rounds as f64;
            println!(
                "{what:<9} {name:<12} {rounds:>3} calls  {:>8.2} ms wall/call  {:>7.2} ms CPU/call  {:>6.1} events/call",
                wall / n,
                cpu / n,
                told as f64 / n
            );
        }
    }
}
