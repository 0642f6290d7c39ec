//! What a running command prints reaches `--json` as `tool_output` events
//! before the call ends; the model still gets the whole output at the end.

use serde_json::{Value, json};

use crate::support::harness::tool_results;
use crate::support::mock_llm::{MockLlm, Reply};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commands_output_is_told_while_it_runs() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    // It prints, waits for the test to have seen that, and prints again.
    let command = "echo first; while [ ! -f go ]; do sleep 0.02; done; echo second";
    let mock = MockLlm::start_with(move |request, _| match request.results() {
        0 => Reply::tool_calls(&[("b1", "Bash", json!({ "command": command }))]),
        _ => Reply::text("done"),
    })
    .await;
    let args = ["--permission-mode", "bypassPermissions", "--json", "run it"];
    let mut command = crate::cli::command_on(&mock, ws, &args, &[]);
    let (mut child, mut lines) = crate::support::harness::spawn_json(&mut command);
    let mut told = Vec::new();
    let mut finished = false;
    let read = async {
        while let Some(line) = lines.next_line().await.unwrap() {
            let event: Value = serde_json::from_str(&line).unwrap();
            match event["type"].as_str().unwrap_or_default() {
                "tool_output" => {
                    assert_eq!(event["call_id"], "b1");
                    assert!(!finished, "output after the call ended: {event}");
                    assert_eq!(event["truncated"], false);
                    let text = event["text"].as_str().unwrap().to_owned();
                    if text.contains("first") {
                        std::fs::write(ws.join("go"), "").unwrap();
                    }
                    told.push(text);
                }
                "tool_finished" => finished = true,
                _ => {}
            }
        }
    };
    tokio::time::timeout(crate::support::harness::DEADLINE, read)
        .await
        .expect("the run did not end in time");
    assert_eq!(child.wait().await.unwrap().code(), Some(0));
    assert!(finished);
    assert_eq!(
        told.concat(),
        "first\nsecond\n",
        "every byte, once, in order"
    );
    assert_eq!(told[0], "first\n", "the first output went out at once");
    let result = tool_results(&mock.requests()[1]).pop().unwrap().1;
    assert_eq!(result, "first\nsecond\n");
}
