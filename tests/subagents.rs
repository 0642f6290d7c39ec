//! Sub-agents through the Task tool: parallel children, failures that do not sink the
//! lead, the parallelism cap, the depth limit and the tool intersection.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex, RwLock};

use orchestrate::roles::catalog::Catalog;
use orchestrate::task::{Caller, Task, TaskEnv};
use orchestrate::tools::permissions::PermissionMode;
use orchestrate::{EventKind, Runtime, ToolRegistry};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::support::harness;
use crate::support::mock_llm::{End, Gate, MockLlm, Recorded, Reply};

const WORKER: &str = "You are a worker.";

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

/// A worker's answer to `prompt`: "done: <prompt>".
fn done(prompt: &str) -> Reply {
    Reply::text(format!("done: {prompt}"))
}

/// `reply`, sent only once `gate` opens.
fn held(reply: Reply, gate: &Gate) -> Reply {
    reply.with_end(End::HoldAfter(0, gate.clone()))
}

/// The lead asks for `pieces` Task calls in one turn, then answers "merged"; a
/// worker told "fail" gets a 401, any other gets `worker(prompt)`.
async fn mock(pieces: usize, worker: impl Fn(&str) -> Reply + Send + Sync + 'static) -> MockLlm {
    MockLlm::start_with(move |request, _| {
        if system(request) == WORKER {
            return match last_user(request).as_str() {
                "fail" => Reply::status(401, "worker key revoked"),
                prompt => worker(prompt),
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

/// The next prompt a worker asked with.
async fn next_asked(asked: &mut mpsc::UnboundedReceiver<String>) -> String {
    tokio::time::timeout(harness::DEADLINE, asked.recv())
        .await
        .expect("no worker asked in time")
        .expect("the mock is gone")
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
    // Workers' answers are held as long as a test needs: no idle timeout cuts in
    // before the test's own deadline.
    let runtime = harness::runtime_with(mock, dir.path(), harness::DEADLINE).await;
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
    // Each worker's answer is held until all three workers have asked: had the
    // children run one after another, the first would wait forever and the run would
    // miss its deadline.
    let all_asked = Gate::new();
    let asked = Mutex::new(BTreeSet::new());
    let mock = mock(3, move |prompt| {
        let mut asked = asked.lock().unwrap();
        asked.insert(prompt.to_owned());
        if asked.len() == 3 {
            all_asked.open();
        }
        held(done(prompt), &all_asked)
    })
    .await;
    let team = team(&mock, 8, 2, "Read, Task").await;
    let (outcome, _) = harness::run(&team.runtime, team.lead, "split it three ways").await;
    assert_eq!(harness::finished_text(&outcome), "merged");
    // The lead's two turns and its three children's one turn each, 15 tokens a turn.
    let orchestrate::Outcome::Completed { stats, .. } = &outcome else {
        unreachable!()
    };
    assert_eq!(
        stats.usage.total(),
        5 * 15,
        "children's tokens roll up into the lead's"
    );
    let requests = mock.requests();
    let workers = requests.iter().filter(|r| system(r) == WORKER).count();
    assert_eq!(workers, 3, "one request per child");
    let lead_final = requests.iter().rfind(|r| system(r) != WORKER).unwrap();
    let results: Vec<String> = harness::tool_results(lead_final)
        .into_iter()
        .map(|(id, content)| format!("{id}={}", crate::support::harness::answer(&content)))
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
    let mock = mock(2, done).await;
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
    let failed = failed["content"].as_str().unwrap();
    assert!(
        failed.starts_with(
            "failed (auth)\nthe worker sub-agent failed (auth): HTTP 401: worker key revoked (model mock-model)\n\n[worker: agent_id "
        ),
        "{failed}"
    );
    team.runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_that_fails_after_saying_something_hands_back_its_last_output() {
    use crate::support::mock_llm::{ev_finish, ev_role, ev_text, ev_tool_args, ev_tool_start};
    // The worker says where it got to and reads a file; its next request is refused.
    let answered = MockLlm::start_with(|request, _| {
        match (request.system() == WORKER, request.results() > 0) {
            (true, false) => Reply::stream(vec![
                ev_role(),
                ev_text("Half of piece 1 is done; reading the rest."),
                ev_tool_start(0, "r1", "Read"),
                ev_tool_args(0, r#"{"file_path": "missing.txt"}"#),
                ev_finish("tool_calls"),
            ]),
            (true, true) => Reply::status(401, "worker key revoked"),
            (false, false) => Reply::tool_calls(&[(
                "t1",
                "Task",
                json!({"description": "piece 1", "prompt": "piece 1", "subagent_type": "worker"}),
            )]),
            (false, true) => Reply::text("merged"),
        }
    })
    .await;
    let team = team(&answered, 8, 2, "Read").await;
    let (outcome, _) = harness::run(&team.runtime, team.lead, "one piece").await;
    assert_eq!(harness::finished_text(&outcome), "merged");
    let lead_final = answered
        .requests()
        .into_iter()
        .rfind(|r| system(r) != WORKER)
        .unwrap();
    let results: Vec<&Value> = (lead_final.body["messages"].as_array().unwrap().iter())
        .filter(|m| m["role"] == "tool")
        .collect();
    let failed = results[0]["content"].as_str().unwrap();
    assert!(
        failed.starts_with(
            "failed (auth)\nthe worker sub-agent failed (auth): HTTP 401: worker key revoked (model mock-model)"
        ),
        "{failed}"
    );
    assert!(
        failed.contains(
            "Its last output:\nHalf of piece 1 is done; reading the rest.\n\n[worker: agent_id "
        ),
        "{failed}"
    );
    team.runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_children_with_two_slots_never_run_more_than_two_at_once() {
    // Each worker's answer is held on a gate of its own, which the test opens one at
    // a time; as each worker asks, the mock notes how many answers were held then,
    // its own included.
    let gates: Arc<Mutex<BTreeMap<String, Gate>>> = Arc::default();
    let held_when_asked: Arc<Mutex<Vec<usize>>> = Arc::default();
    let (asked_tx, mut asked) = mpsc::unbounded_channel();
    let mock = mock(5, {
        let (gates, held_when_asked) = (gates.clone(), held_when_asked.clone());
        move |prompt| {
            let gate = Gate::new();
            let mut gates = gates.lock().unwrap();
            gates.insert(prompt.to_owned(), gate.clone());
            let held_now = gates.values().filter(|g| !g.is_open()).count();
            held_when_asked.lock().unwrap().push(held_now);
            asked_tx.send(prompt.to_owned()).unwrap();
            held(done(prompt), &gate)
        }
    })
    .await;
    let team = team(&mock, 2, 2, "Read").await;
    let mut events = team.runtime.subscribe();
    team.runtime.prompt(team.lead, "five pieces");

    // Two children take the slots; the other three are shown waiting for one.
    let mut running = VecDeque::from([next_asked(&mut asked).await, next_asked(&mut asked).await]);
    let queued = tokio::time::timeout(harness::DEADLINE, async {
        let mut queued = Vec::new();
        while queued.len() < 3 {
            let event = events.recv().await.unwrap();
            if matches!(event.kind, EventKind::SubagentQueued { waiting: true, .. }) {
                queued.push(event);
            }
        }
        queued
    })
    .await
    .expect("the children past the cap were not shown as queued");
    assert!(
        queued
            .iter()
            .all(|e| e.session == team.lead && e.agent == "tester"),
        "published as the lead: {queued:?}"
    );
    // Each answer the test lets through frees one slot, and one waiting child takes it.
    let mut waiting = 3;
    while let Some(piece) = running.pop_front() {
        gates.lock().unwrap()[&piece].open();
        if waiting > 0 {
            waiting -= 1;
            running.push_back(next_asked(&mut asked).await);
        }
    }
    let (outcome, events) = harness::until_terminal(&mut events, team.lead).await;
    assert_eq!(harness::finished_text(&outcome), "merged");
    assert!(
        !events
            .iter()
            .any(|e| matches!(e.kind, EventKind::SubagentQueued { waiting: true, .. })),
        "only three children waited: {events:?}"
    );
    // Never more than two children at once: each of the last three asked only after
    // the test had let one running child's answer through.
    assert_eq!(*held_when_asked.lock().unwrap(), [1, 2, 2, 2, 2]);
    team.runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn children_get_their_own_roles_tools_not_their_callers_and_no_task_at_the_depth_limit() {
    let mock = mock(1, done).await;
    // The role asks for Read, Bash and Task; the lead has only Read and Task; depth 1.
    // As in Claude Code, the child's tools are its role's (the permission mode
    // bounds what they do), less Task at the depth limit.
    let team = team(&mock, 8, 1, "Read, Bash, Task").await;
    let (outcome, _) = harness::run(&team.runtime, team.lead, "one piece").await;
    assert_eq!(harness::finished_text(&outcome), "merged");
    let worker = mock
        .requests()
        .into_iter()
        .find(|r| system(r) == WORKER)
        .unwrap();
    assert_eq!(harness::tool_names(&worker), ["Read", "Bash"]);
    team.runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn below_the_depth_limit_a_child_may_delegate_again() {
    let mock = mock(1, done).await;
    let team = team(&mock, 8, 2, "Read, Task").await;
    let (_, _) = harness::run(&team.runtime, team.lead, "one piece").await;
    let worker = mock
        .requests()
        .into_iter()
        .find(|r| system(r) == WORKER)
        .unwrap();
    assert_eq!(
        harness::tool_names(&worker),
        ["Read", "Task", "TaskOutput", "TaskStop"]
    );
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
        orchestrate::roles::watch::watch(std::slice::from_ref(&roles), dir.path(), catalog.clone())
            .unwrap();
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
