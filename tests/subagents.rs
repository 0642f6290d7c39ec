//! Sub-agents through the Task tool: parallel children, failures that do not sink the
//! lead, the parallelism cap, the depth limit and the tool intersection.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use orchestrate::roles::catalog::Catalog;
use orchestrate::task::{Caller, Task, TaskEnv};
use orchestrate::tools::permissions::PermissionMode;
use orchestrate::{Runtime, ToolRegistry};
use serde_json::{Value, json};

use crate::support::harness;
use crate::support::mock_llm::{MockLlm, Recorded, Reply};

const WORKER: &str = "You are a worker.";
const WORK: Duration = Duration::from_millis(600);

fn system(request: &Recorded) -> String {
    request.body["messages"][0]["content"]
        .as_str()
        .unwrap_or("")
        .to_owned()
}

fn last_user(request: &Recorded) -> String {
    let messages = request.body["messages"].as_array().unwrap();
    messages.iter().rev().find(|m| m["role"] == "user").unwrap()["content"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn tool_names(request: &Recorded) -> Vec<String> {
    request.body["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// The lead asks for `pieces` Task calls in one turn, then answers "merged";
/// workers answer "done: <prompt>" after WORK, or fail with a 401 when told "fail".
async fn mock(pieces: usize) -> MockLlm {
    MockLlm::start_with(move |request, _| {
        if system(request) == WORKER {
            return match last_user(request).as_str() {
                "fail" => Reply::status(401, "worker key revoked"),
                prompt => Reply::text(format!("done: {prompt}")).with_timing(WORK, Duration::ZERO),
            };
        }
        let answered = request.body["messages"].as_array().unwrap().iter().any(|m| m["role"] == "tool");
        if answered {
            return Reply::text("merged");
        }
        let calls: Vec<(String, Value)> = (1..=pieces)
            .map(|i| {
                let prompt = if i == 2 && pieces == 2 { "fail".to_owned() } else { format!("piece {i}") };
                (format!("t{i}"), json!({"description": format!("piece {i}"), "prompt": prompt, "subagent_type": "worker"}))
            })
            .collect();
        let calls: Vec<(&str, &str, Value)> = calls.iter().map(|(id, args)| (id.as_str(), "Task", args.clone())).collect();
        Reply::tool_calls(&calls)
    })
    .await
}

struct Team {
    _dir: tempfile::TempDir,
    runtime: Runtime,
    lead: orchestrate::SessionId,
}

/// A lead with Read and Task, a `worker` role (tools: Read, Bash; Task if allowed).
async fn team(mock: &MockLlm, max_parallel: usize, max_depth: u32, worker_tools: &str) -> Team {
    let dir = tempfile::tempdir().unwrap();
    let roles = dir.path().join("roles");
    std::fs::create_dir_all(&roles).unwrap();
    std::fs::write(
        roles.join("worker.md"),
        format!("---\nname: worker\ndescription: Does one piece.\ntools: {worker_tools}\n---\n{WORKER}\n"),
    )
    .unwrap();
    let runtime = harness::runtime(mock, dir.path()).await;
    let env = Arc::new(TaskEnv::new(
        runtime.handle(),
        Arc::new(RwLock::new(Catalog::load(&[roles]))),
        max_parallel,
        max_depth,
        ToolRegistry::standard(),
    ));
    let caller = Caller {
        depth: 0,
        model: "mock-model".into(),
        permission_mode: PermissionMode::BypassPermissions,
        tools: vec!["Read".into(), "Task".into()],
        place: "lead".into(),
    };
    let tools = ToolRegistry::standard()
        .only(&["Read"])
        .with(Task::new(env, caller));
    let lead = runtime.start_session(harness::spec(tools)).await.unwrap();
    Team {
        _dir: dir,
        runtime,
        lead,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_task_calls_run_in_parallel_and_come_back_in_call_order() {
    let mock = mock(3).await;
    let team = team(&mock, 8, 2, "Read, Task").await;
    let (outcome, _) = harness::run(&team.runtime, team.lead, "split it three ways").await;
    assert_eq!(harness::finished_text(&outcome), "merged");
    // The lead's two turns and its three children's one turn each, 15 tokens a turn.
    let orchestrate::Outcome::Finished { stats, .. } = &outcome else {
        unreachable!()
    };
    assert_eq!(
        stats.usage.total(),
        5 * 15,
        "children's tokens roll up into the lead's"
    );
    let requests = mock.requests();
    let workers: Vec<&Recorded> = requests.iter().filter(|r| system(r) == WORKER).collect();
    assert_eq!(workers.len(), 3);
    let first = workers.iter().map(|r| r.at).min().unwrap();
    let last = workers.iter().map(|r| r.at).max().unwrap();
    assert!(
        last - first < WORK,
        "the children did not overlap: {:?}",
        last - first
    );
    let lead_final = requests.iter().rfind(|r| system(r) != WORKER).unwrap();
    let results: Vec<String> = harness::tool_results(lead_final)
        .into_iter()
        .map(|(id, content)| format!("{id}={}", content.lines().next().unwrap()))
        .collect();
    assert_eq!(
        results,
        ["t1=done: piece 1", "t2=done: piece 2", "t3=done: piece 3"]
    );
    let stats = lead_final.body["messages"][3]["content"].as_str().unwrap();
    assert!(
        stats.contains("[worker: 1 turns, 0 tool calls, 15 tokens"),
        "{stats}"
    );
    team.runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_child_is_an_error_result_and_the_lead_still_answers() {
    let mock = mock(2).await;
    let team = team(&mock, 8, 2, "Read").await;
    let (outcome, _) = harness::run(&team.runtime, team.lead, "two pieces").await;
    assert_eq!(harness::finished_text(&outcome), "merged");
    let lead_final = mock
        .requests()
        .into_iter()
        .rfind(|r| system(r) != WORKER)
        .unwrap();
    let failed = &lead_final.body["messages"][4];
    assert_eq!(failed["tool_call_id"], "t2");
    assert_eq!(
        failed["content"],
        "Error: the worker sub-agent failed (permanent): HTTP 401: worker key revoked"
    );
    team.runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_children_with_two_slots_never_run_more_than_two_at_once() {
    let mock = mock(5).await;
    let team = team(&mock, 2, 2, "Read").await;
    let (outcome, events) = harness::run(&team.runtime, team.lead, "five pieces").await;
    let queued: Vec<_> = events
        .iter()
        .filter(|e| {
            matches!(
                e.kind,
                orchestrate::EventKind::SubagentQueued { waiting: true, .. }
            )
        })
        .collect();
    assert_eq!(
        queued.len(),
        3,
        "the three children past the cap were shown as queued"
    );
    assert!(
        queued.iter().all(|e| e.agent == "tester"),
        "published as the lead: {queued:?}"
    );
    assert_eq!(harness::finished_text(&outcome), "merged");
    let mut starts: Vec<_> = mock
        .requests()
        .iter()
        .filter(|r| system(r) == WORKER)
        .map(|r| r.at)
        .collect();
    starts.sort();
    assert_eq!(starts.len(), 5);
    // A third child can only start once one of the first two has finished.
    for i in 2..5 {
        assert!(
            starts[i] - starts[i - 2] >= WORK - Duration::from_millis(50),
            "child {i} started too early"
        );
    }
    team.runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn children_get_no_more_tools_than_their_caller_and_no_task_at_the_depth_limit() {
    let mock = mock(1).await;
    // The role asks for Read, Bash and Task; the lead has only Read and Task; depth 1.
    let team = team(&mock, 8, 1, "Read, Bash, Task").await;
    let (outcome, _) = harness::run(&team.runtime, team.lead, "one piece").await;
    assert_eq!(harness::finished_text(&outcome), "merged");
    let worker = mock
        .requests()
        .into_iter()
        .find(|r| system(r) == WORKER)
        .unwrap();
    assert_eq!(tool_names(&worker), ["Read"]);
    team.runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn below_the_depth_limit_a_child_may_delegate_again() {
    let mock = mock(1).await;
    let team = team(&mock, 8, 2, "Read, Task").await;
    let (_, _) = harness::run(&team.runtime, team.lead, "one piece").await;
    let worker = mock
        .requests()
        .into_iter()
        .find(|r| system(r) == WORKER)
        .unwrap();
    assert_eq!(tool_names(&worker), ["Read", "Task"]);
    team.runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_edited_on_disk_is_used_by_the_next_spawn() {
    let mock = MockLlm::start_with(|request, _| {
        if system(request).contains("worker") {
            return Reply::text("worked");
        }
        if request.body["messages"].as_array().unwrap().last().unwrap()["role"] == "tool" {
            return Reply::text("merged");
        }
        let args = json!({"description": "one piece", "prompt": "go", "subagent_type": "worker"});
        Reply::tool_calls(&[("t1", "Task", args)])
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let roles = dir.path().join("roles");
    std::fs::create_dir_all(&roles).unwrap();
    let write_role = |prompt: &str| {
        std::fs::write(
            roles.join("worker.md"),
            format!("---\nname: worker\ndescription: d\ntools: Read\n---\n{prompt}\n"),
        )
        .unwrap();
    };
    write_role("You are a worker, first edition.");
    let runtime = harness::runtime(&mock, dir.path()).await;
    let catalog = Arc::new(RwLock::new(Catalog::load(std::slice::from_ref(&roles))));
    let _watcher =
        orchestrate::roles::watch::watch(std::slice::from_ref(&roles), catalog.clone()).unwrap();
    let env = Arc::new(TaskEnv::new(
        runtime.handle(),
        catalog.clone(),
        4,
        2,
        ToolRegistry::standard(),
    ));
    let caller = Caller {
        depth: 0,
        model: "mock-model".into(),
        permission_mode: PermissionMode::BypassPermissions,
        tools: vec!["Read".into(), "Task".into()],
        place: "lead".into(),
    };
    let lead = runtime
        .start_session(harness::spec(
            ToolRegistry::standard()
                .only(&["Read"])
                .with(Task::new(env, caller)),
        ))
        .await
        .unwrap();

    harness::run(&runtime, lead, "first").await;
    write_role("You are a worker, second edition.");
    harness::wait_until("the edit was picked up", || {
        catalog
            .read()
            .unwrap()
            .get("worker")
            .is_some_and(|r| r.prompt.contains("second"))
    })
    .await;
    harness::run(&runtime, lead, "second").await;

    let prompts: Vec<String> = mock
        .requests()
        .iter()
        .map(system)
        .filter(|s| s.contains("worker"))
        .collect();
    assert_eq!(
        prompts,
        [
            "You are a worker, first edition.",
            "You are a worker, second edition."
        ]
    );
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_prompt_is_refused_without_starting_a_child() {
    let mock = MockLlm::start_with(|request, _| {
        let answered = request.body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["role"] == "tool");
        if answered {
            return Reply::text("gave up");
        }
        let args = json!({"description": "nothing", "prompt": "  ", "subagent_type": "worker"});
        Reply::tool_calls(&[("t1", "Task", args)])
    })
    .await;
    let team = team(&mock, 8, 2, "Read").await;
    let (outcome, _) = harness::run(&team.runtime, team.lead, "delegate nothing").await;
    assert_eq!(harness::finished_text(&outcome), "gave up");
    let requests = mock.requests();
    assert_eq!(requests.len(), 2, "no child was started");
    let result = &requests[1].body["messages"][3];
    assert_eq!(result["tool_call_id"], "t1");
    let content = result["content"].as_str().unwrap();
    assert!(content.contains("prompt is empty"), "{content}");
    team.runtime.shutdown().await;
}
