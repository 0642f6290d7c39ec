//! State that does not grow: a runtime that has run a thousand sub-agents
//! (each writing a file through the Write tool) holds nothing for them once
//! they and their lead have stopped, and its peak memory is as high on the fifth
//! of five fan-outs as on the second.
//!
//! The measurement runs in a process of its own (this test binary again, asked
//! for this test alone): peak memory is the whole process's, and the other
//! tests would move it.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use orchestrate::roles::catalog::Catalog;
use orchestrate::task::{Caller, Task, TaskEnv};
use orchestrate::tools::permissions::PermissionMode;
use orchestrate::{Outcome, Retained, ToolRegistry};
use serde_json::{Value, json};

use crate::support::harness;
use crate::support::mock_llm::{MockLlm, Reply};

const WORKER: &str = "You are a worker.";
const CHILD: &str = "ORCHESTRATE_RETENTION_CHILD";
const FAN_OUTS: usize = 5;
const PIECES: usize = 200;

/// Workers write `out/<their task>.txt`, then say done; the lead fans out
/// [`PIECES`] Task calls, then says merged.
async fn mock() -> MockLlm {
    MockLlm::start_with(|request, _| {
        let worker = request.system() == WORKER;
        match (worker, request.results() > 0) {
            (_, true) => Reply::text(if worker { "done" } else { "merged" }),
            (true, false) => {
                let task = request.body["messages"][1]["content"].as_str().unwrap_or("x").replace(' ', "-");
                let path = format!("out/{task}.txt");
                Reply::tool_calls(&[("w", "Write", json!({"file_path": path, "content": "x\n"}))])
            }
            (false, false) => {
                let calls: Vec<(String, Value)> = (0..PIECES)
                    .map(|i| {
                        let args = json!({"description": "piece", "prompt": format!("piece {i}"), "subagent_type": "worker"});
                        (format!("t{i}"), args)
                    })
                    .collect();
                let calls: Vec<(&str, &str, Value)> = (calls.iter())
                    .map(|(id, args)| (id.as_str(), "Task", args.clone()))
                    .collect();
                Reply::tool_calls(&calls)
            }
        }
    })
    .await
}

/// This process's peak resident memory since it was last reset, in KiB.
fn peak_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Resets the peak to what is resident now.
fn reset_peak() {
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_holds_nothing_for_sessions_that_stopped_and_its_peak_memory_stays_flat() {
    if std::env::var_os(CHILD).is_none() {
        let me = std::env::current_exe().unwrap();
        let out = std::process::Command::new(me)
            .args([
                "retention::a_runtime_holds_nothing_for_sessions_that_stopped_and_its_peak_memory_stays_flat",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD, "1")
            .output()
            .unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "{said}");
        assert!(said.contains("1 passed"), "{said}");
        return;
    }
    let mock = mock().await;
    let dir = tempfile::tempdir().unwrap();
    let roles = dir.path().join("roles");
    std::fs::create_dir_all(&roles).unwrap();
    std::fs::write(
        roles.join("worker.md"),
        format!("---\nname: worker\ndescription: Does one piece.\ntools: Write\n---\n{WORKER}\n"),
    )
    .unwrap();
    let runtime = harness::runtime_with(&mock, dir.path(), harness::DEADLINE).await;
    let env = Arc::new(TaskEnv::new(
        runtime.handle(),
        Arc::new(RwLock::new(Catalog::load(&[roles]))),
        16,
        1,
        ToolRegistry::standard(),
    ));
    let mut peaks = Vec::new();
    for round in 0..FAN_OUTS {
        // The mock's record of requests is the test's memory, not the runtime's.
        mock.forget_requests();
        reset_peak();
        let caller = Caller {
            depth: 0,
            model: "mock-model".into(),
            permission_mode: PermissionMode::BypassPermissions,
            place: "lead".into(),
        };
        let tools = ToolRegistry::standard()
            .only(&[])
            .with(Task::new(env.clone(), caller));
        let lead = runtime.start_session(harness::spec(tools)).await.unwrap();
        let outcome = runtime.run_prompt(lead, "split it", |_| {}).await;
        assert!(
            matches!(&outcome, Some(Outcome::Completed { text, .. }) if text == "merged"),
            "round {round}: {outcome:?}"
        );
        // While the lead lives, it may look its sub-agents up again; the rest
        // has gone with them.
        let mut held = runtime.retained().await.unwrap();
        assert_eq!((held.sessions, held.children), (1, 1), "round {round}");
        runtime.stop_session(lead);
        let emptied = tokio::time::timeout(harness::DEADLINE, async {
            while held != Retained::default() {
                tokio::time::sleep(Duration::from_millis(10)).await;
                held = runtime.retained().await.unwrap();
            }
        });
        if emptied.await.is_err() {
            panic!("round {round}: still held: {:?}", runtime.retained().await);
        }
        peaks.push(peak_kib());
    }
    let files = std::fs::read_dir(dir.path().join("out")).unwrap().count();
    assert_eq!(files, PIECES, "each piece wrote its file");
    assert!(
        peaks[4] * 100 <= peaks[1] * 105,
        "peak memory grew from {} KiB to {} KiB ({peaks:?})",
        peaks[1],
        peaks[4]
    );
    runtime.shutdown().await;
}
