//! Compaction through the real binary against the mock: a lead pushed past a
//! small configured window (`[model_info."m"] context_window`) compacts (old
//! results elided, older turns summarized by a model call) and finishes with the
//! right answer, every request after the compaction fitting the window; a
//! context-overflow answer leads to one compaction and a successful retry.

use serde_json::{Value, json};

use crate::cli::{run_on, text};
use crate::support::mock_llm::{MockLlm, Recorded, Reply};

const SUMMARIZER: &str = "You compress the history";
const WINDOW: u64 = 7_000;

fn is_summary(request: &Recorded) -> bool {
    request.body["messages"][0]["content"]
        .as_str()
        .is_some_and(|s| s.starts_with(SUMMARIZER))
}

fn results(request: &Recorded) -> usize {
    request.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .count()
}

fn summarized(request: &Recorded) -> bool {
    request
        .body
        .to_string()
        .contains("was compacted to fit the context window")
}

/// Roughly the tokens of a request's messages: four characters a token.
fn tokens(request: &Recorded) -> u64 {
    (request.body["messages"].to_string().len() as u64).div_ceil(4)
}

/// A workspace with eight files of 6 000 characters and a window of 7 000 tokens
/// (three turns of results and the lead's system prompt fit it).
fn workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for i in 0..8 {
        let line = format!("file {i}: {}\n", "data ".repeat(20));
        std::fs::write(
            dir.path().join(format!("f{i}.txt")),
            line.repeat(6_000 / line.len()),
        )
        .unwrap();
    }
    std::fs::write(
        dir.path().join("orchestrate.toml"),
        format!("[model_info.\"m\"]\ncontext_window = {WINDOW}\nmax_output = 1000\n"),
    )
    .unwrap();
    dir
}

fn read(i: usize) -> Reply {
    Reply::tool_calls(&[(
        &format!("r{i}"),
        "Read",
        json!({"file_path": format!("f{i}.txt")}),
    )])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lead_past_its_window_compacts_and_finishes_with_every_request_fitting() {
    let reads = std::sync::atomic::AtomicUsize::new(0);
    let mock = MockLlm::start_with(move |request, _| {
        if is_summary(request) {
            return Reply::text("SUMMARY: read f0 to f4; each holds data lines.");
        }
        // Eight reads, one a turn, then the answer.
        match reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst) {
            n if n < 8 => read(n),
            _ => Reply::text("all files read"),
        }
    })
    .await;
    let dir = workspace();
    let out = run_on(&mock, dir.path(), &["--json", "read every file"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("all files read"));
    let requests = mock.requests();
    assert!(requests.iter().any(is_summary), "a summary was asked for");
    let compacted: Vec<Value> = text(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["type"] == "compacted")
        .collect();
    assert!(!compacted.is_empty(), "no compacted event");
    assert!(compacted[0]["freed_tokens"].as_u64().unwrap() > 0);
    // Every request after the first compaction fits the window.
    let first = requests
        .iter()
        .position(|r| is_summary(r) || r.body.to_string().contains("were elided"))
        .unwrap();
    for request in &requests[first..] {
        assert!(
            tokens(request) < WINDOW,
            "a request of {} tokens",
            tokens(request)
        );
    }
    // The conversation it goes on with keeps the task and the summary.
    let last = requests.last().unwrap().body.to_string();
    assert!(last.contains("read every file") && last.contains("SUMMARY: read f0"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_context_overflow_leads_to_one_compaction_and_a_successful_retry() {
    let mock = MockLlm::start_with(|request, index| {
        if is_summary(request) {
            return Reply::text("SUMMARY: read f0 to f3.");
        }
        match results(request) {
            n if n < 4 && !summarized(request) => read(n),
            // The provider refuses the fifth request as too long (the window was
            // not configured, so nothing compacted before it).
            4 if !summarized(request) && index < 6 => Reply::status(
                400,
                "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.",
            ),
            _ => Reply::text("read them all"),
        }
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    for i in 0..4 {
        std::fs::write(dir.path().join(format!("f{i}.txt")), "x".repeat(5_000)).unwrap();
    }
    let out = run_on(&mock, dir.path(), &["read the files"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "read them all\n");
    let requests = mock.requests();
    let summary = requests
        .iter()
        .position(is_summary)
        .expect("a summary was asked for");
    assert_eq!(summary, 5, "right after the refused request");
    assert!(
        summarized(&requests[6]),
        "the retry carries the compacted conversation"
    );
    assert_eq!(requests.len(), 7);
}
