//! Sub-agent tasks run by `orchestrate worker` on a real NATS server with
//! JetStream (on loopback): a task its lead signed runs and its result comes
//! back once; an unsigned task, one signed by a lead it does not trust, and
//! one asking more than its permission cap are refused; an idle worker stops
//! at once on SIGTERM.

use std::path::Path;
use std::time::{Duration, Instant};

use futures::StreamExt;
use orchestrate::protocol::SessionId;
use orchestrate::remote::envelope::{RemoteTask, seal};
use orchestrate::remote::subjects;
use orchestrate::remote::worker::RemoteResult;
use orchestrate::tools::permissions::PermissionMode;
use tokio::io::AsyncBufReadExt;

use crate::cli::command_on;
use crate::support::harness::DEADLINE;
use crate::support::mock_llm::{End, Gate, MockLlm, Reply};
use crate::support::nats::{NatsCluster, NatsServer};

/// A task of run `run` for the `echo` role.
fn task(run: SessionId, prompt: &str, mode: PermissionMode) -> RemoteTask {
    RemoteTask {
        run,
        session: SessionId::new(),
        parent: run,
        role: "echo".into(),
        system_prompt: "You are echo.".into(),
        tools: Some(vec!["Read".into()]),
        max_turns: 5,
        prompt: prompt.into(),
        permission_mode: mode,
        deny: Vec::new(),
        ask: Vec::new(),
        tags: Vec::new(),
        bash: Vec::new(),
        expires: orchestrate::remote::envelope::now() + 600,
        workspace: None,
        hooks: Vec::new(),
        check: None,
    }
}

/// The state root of a binary whose HOME is `home`.
fn state_root(home: &Path) -> std::path::PathBuf {
    home.join(".local/state/orchestrate")
}

/// A worker joined to `server`, and its stderr's lines as they come.
async fn worker(
    mock: &MockLlm,
    home: &Path,
    server: &NatsServer,
) -> (
    tokio::process::Child,
    tokio::sync::mpsc::UnboundedReceiver<String>,
) {
    worker_with(mock, home, &server.url, &["--slots", "2"]).await
}

/// The same, with `flags`.
pub(crate) async fn worker_with(
    mock: &MockLlm,
    home: &Path,
    urls: &str,
    flags: &[&str],
) -> (
    tokio::process::Child,
    tokio::sync::mpsc::UnboundedReceiver<String>,
) {
    worker_env(mock, home, urls, flags, &[]).await
}

/// The same, with `env` set.
pub(crate) async fn worker_env(
    mock: &MockLlm,
    home: &Path,
    urls: &str,
    flags: &[&str],
    env: &[(&str, &str)],
) -> (
    tokio::process::Child,
    tokio::sync::mpsc::UnboundedReceiver<String>,
) {
    let mut args = vec!["worker", "--join", urls];
    args.extend_from_slice(flags);
    let mut child = command_on(mock, home, &args, env)
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let (tx, mut lines) = tokio::sync::mpsc::unbounded_channel();
    let stderr = child.stderr.take().unwrap();
    tokio::spawn(async move {
        let mut read = tokio::io::BufReader::new(stderr).lines();
        while let Ok(Some(line)) = read.next_line().await {
            let _ = tx.send(line);
        }
    });
    said(&mut lines, "joined").await;
    (child, lines)
}

/// Waits for a line of `lines` holding `text`; the line.
pub(crate) async fn said(
    lines: &mut tokio::sync::mpsc::UnboundedReceiver<String>,
    text: &str,
) -> String {
    let wait = async {
        while let Some(line) = lines.recv().await {
            if line.contains(text) {
                return line;
            }
        }
        panic!("the worker ended without saying {text:?}");
    };
    tokio::time::timeout(DEADLINE, wait)
        .await
        .unwrap_or_else(|_| panic!("the worker never said {text:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_runs_its_leads_tasks_once_and_refuses_the_others() {
    let server = NatsServer::start();
    let mock = MockLlm::start_with(|request, _| {
        let prompt = request.body["messages"][1]["content"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        Reply::text(format!("echo: {prompt}"))
    })
    .await;
    let home = tempfile::tempdir().unwrap();
    // The same user's lead key on this machine: trusted without a flag.
    let lead = orchestrate::remote::lead_key(&state_root(home.path())).unwrap();
    let (mut child, mut lines) = worker(&mock, home.path(), &server).await;

    let client = async_nats::connect(&server.url).await.unwrap();
    let js = async_nats::jetstream::new(client.clone());
    let run = SessionId::new();
    let mut results = client
        .subscribe(subjects::results(&lead.public_key(), run))
        .await
        .unwrap();
    let subject = subjects::task(&lead.public_key(), run, &[]);
    let publish = |bytes: Vec<u8>| {
        let (js, subject) = (js.clone(), subject.clone());
        async move {
            let ack = js.publish(subject, bytes.into()).await.unwrap();
            ack.await.unwrap();
        }
    };

    // Unsigned, and signed by a lead it does not trust: refused, never run.
    let unsigned = serde_json::json!({
        "protocol": orchestrate::remote::envelope::PROTOCOL,
        "task": serde_json::to_string(&task(run, "unsigned", PermissionMode::Default)).unwrap(),
    });
    publish(unsigned.to_string().into_bytes()).await;
    assert!(
        said(&mut lines, "refused a task")
            .await
            .ends_with("the task is not signed")
    );
    let stranger = nkeys::KeyPair::new_user();
    publish(seal(&task(run, "stranger", PermissionMode::Default), &stranger).unwrap()).await;
    let line = said(&mut lines, "refused a task").await;
    assert!(line.contains("a lead this worker does not trust"), "{line}");

    // Handed again after its result was published (its worker died before
    // acking it): never run again.
    let answered = task(run, "answered before", PermissionMode::Default);
    let before = RemoteResult {
        run,
        session: answered.session,
        outcome: "completed".into(),
        text: "from a worker that died".into(),
        worker: "gone:1".into(),
        work: None,
        check: None,
    };
    let subject = subjects::result(&lead.public_key(), run, answered.session);
    let ack = js
        .publish(subject, serde_json::to_vec(&before).unwrap().into())
        .await
        .unwrap();
    ack.await.unwrap();
    let _ = tokio::time::timeout(DEADLINE, results.next())
        .await
        .unwrap();
    publish(seal(&answered, &lead).unwrap()).await;
    let line = said(&mut lines, "was answered already").await;
    assert!(line.contains(&answered.session.to_string()), "{line}");

    // Sealed for one run, published on another's subject: refused.
    let elsewhere = task(SessionId::new(), "elsewhere", PermissionMode::Default);
    publish(seal(&elsewhere, &lead).unwrap()).await;
    let line = said(&mut lines, "refused a task").await;
    assert!(line.contains("it was sent to orchestrate.tasks."), "{line}");

    // Above its cap (acceptEdits by default): refused, and the lead told.
    let greedy = task(run, "greedy", PermissionMode::BypassPermissions);
    publish(seal(&greedy, &lead).unwrap()).await;
    // Its own: run, its result back.
    let own = task(run, "hello from the lead", PermissionMode::Default);
    publish(seal(&own, &lead).unwrap()).await;

    let mut got: Vec<RemoteResult> = Vec::new();
    while got.len() < 2 {
        let message = tokio::time::timeout(DEADLINE, results.next())
            .await
            .expect("no result came")
            .unwrap();
        got.push(serde_json::from_slice(&message.payload).unwrap());
    }
    got.sort_by_key(|r| r.outcome.clone());
    assert_eq!(got[0].session, own.session);
    assert_eq!(got[0].outcome, "completed");
    assert_eq!(got[0].text, "echo: hello from the lead");
    assert_eq!(got[1].session, greedy.session);
    assert_eq!(got[1].outcome, "refused");
    assert!(
        got[1].text.contains("up to permission mode acceptEdits"),
        "{}",
        got[1].text
    );
    // The refused ones never reached the model.
    let prompts: Vec<String> = mock
        .requests()
        .iter()
        .map(|r| {
            r.body["messages"][1]["content"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    assert_eq!(prompts, ["hello from the lead"]);

    // Its run over and its results removed, the same task sent again (a
    // replay, within the day it may live): never run twice.
    let stream = js.get_stream(subjects::RESULTS).await.unwrap();
    stream.purge().await.unwrap();
    publish(seal(&own, &lead).unwrap()).await;
    let line = said(&mut lines, "was answered already").await;
    assert!(line.contains(&own.session.to_string()), "{line}");
    assert_eq!(mock.requests().len(), 1, "the model was not asked again");

    // Idle, it stops at once on SIGTERM.
    let pid = rustix::process::Pid::from_raw(child.id().unwrap() as i32).unwrap();
    let asked = Instant::now();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let status = tokio::time::timeout(DEADLINE, child.wait())
        .await
        .unwrap()
        .unwrap();
    let took = asked.elapsed();
    assert!(status.success(), "{status}");
    assert!(
        took < Duration::from_secs(1),
        "an idle worker took {took:?} to stop"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_with_nats_places_a_remote_role_on_a_worker_and_hears_its_result() {
    let server = NatsServer::start();
    let mock = going_far(|| Reply::text("far answer"), false).await;
    let ws = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(ws.path().join("agents")).unwrap();
    std::fs::write(
        ws.path().join("agents/far.md"),
        "---\nname: far\ndescription: works far away\ntools: Read\nplacement: remote\n---\nYou are far.\n",
    )
    .unwrap();
    let (mut worker, _lines) = worker(&mock, ws.path(), &server).await;
    assert_eq!(
        lead_answer(&mock, ws.path(), &["--nats", &server.url, "go"]).await,
        "far answer\n"
    );
    // It ran on the worker: the lead keeps its record of it (who it was,
    // its conversation as its worker journaled it, how it ended).
    let sessions = crate::support::harness::state(ws.path()).sessions();
    let journals: Vec<String> = std::fs::read_dir(sessions)
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .collect();
    assert_eq!(journals.len(), 2);
    let far = journals
        .iter()
        .find(|j| j.contains("\"remote\":true"))
        .unwrap();
    assert_eq!(far.matches("\"record\":\"header\"").count(), 1, "{far}");
    assert!(far.contains("\"content\":\"go far\""), "{far}");
    let last = far.trim_end().lines().last().unwrap();
    assert!(last.contains("\"record\":\"terminal\""), "{far}");
    // The run took away what it left on the server.
    let client = async_nats::connect(&server.url).await.unwrap();
    let js = async_nats::jetstream::new(client);
    for name in [subjects::TASKS, subjects::RESULTS, subjects::JOURNALS] {
        let mut stream = js.get_stream(name).await.unwrap();
        let info = stream.info().await.unwrap();
        assert_eq!(
            info.state.messages, 0,
            "{name} still holds the run's messages"
        );
    }
    let _ = worker.kill().await;
}

/// A model whose lead sends `far` the task "go far", and answers with the
/// Task's whole result (`whole`) or the sub-agent's answer alone; `far`
/// says what the sub-agent answers.
async fn going_far(far: impl Fn() -> Reply + Send + Sync + 'static, whole: bool) -> MockLlm {
    MockLlm::start_with(move |request, _| {
        let results = crate::support::harness::tool_results(request);
        match request.system() {
            "You are far." => far(),
            _ if results.is_empty() => Reply::tool_calls(&[(
                "t1",
                "Task",
                serde_json::json!({"description": "far", "prompt": "go far", "subagent_type": "far"}),
            )]),
            _ if whole => Reply::text(results[0].1.clone()),
            _ => Reply::text(crate::support::harness::answer(&results[0].1)),
        }
    })
    .await
}

/// The lead's answer to a run with `args` in `ws`, once it exited 0.
async fn lead_answer(mock: &MockLlm, ws: &Path, args: &[&str]) -> String {
    let out = tokio::time::timeout(DEADLINE, command_on(mock, ws, args, &[]).output())
        .await
        .expect("the run did not end")
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{said}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A model for a lead that fans out to `n` `far` sub-agents (`n1`…), each
/// answering `<nI>` once `held` opens; the lead answers with theirs.
pub(crate) async fn fan_out(n: usize, held: &Gate) -> MockLlm {
    let held = held.clone();
    MockLlm::start_with(move |request, _| {
        let messages = request.body["messages"].as_array().cloned().unwrap_or_default();
        let system = messages[0]["content"].as_str().unwrap_or_default();
        let results = crate::support::harness::tool_results(request);
        match system {
            // Every sub-agent's answer waits until the test lets it go.
            "You are far." => {
                let prompt = messages[1]["content"].as_str().unwrap_or_default();
                Reply::text(format!("<{prompt}>")).with_end(End::HoldAfter(1, held.clone()))
            }
            _ if results.is_empty() => {
                let call = |i: usize| {
                    let input = serde_json::json!({"description": format!("n{i}"), "prompt": format!("n{i}"), "subagent_type": "far"});
                    (format!("t{i}"), input)
                };
                let calls: Vec<(String, serde_json::Value)> = (1..=n).map(call).collect();
                let calls: Vec<(&str, &str, serde_json::Value)> = calls
                    .iter()
                    .map(|(id, input)| (id.as_str(), "Task", input.clone()))
                    .collect();
                Reply::tool_calls(&calls)
            }
            _ => {
                let answers: Vec<&str> = results
                    .iter()
                    .map(|(_, r)| crate::support::harness::answer(r))
                    .collect();
                Reply::text(answers.join(" "))
            }
        }
    })
    .await
}

/// A workspace whose `far` role runs on workers.
pub(crate) fn far_workspace() -> tempfile::TempDir {
    let ws = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(ws.path().join("agents")).unwrap();
    std::fs::write(
        ws.path().join("agents/far.md"),
        "---\nname: far\ndescription: works far away\ntools: Read\nplacement: remote\n---\nYou are far.\n",
    )
    .unwrap();
    ws
}

/// A run of `n` remote sub-agents on two workers of `slots` each joined to
/// `urls`, one killed while both are full: checks that each sub-agent's
/// answer reached the lead once, and says how many times the sub-agents'
/// model was asked.
async fn one_worker_killed_mid_run(urls: &str, n: usize, slots: usize) -> usize {
    one_worker_killed_and(urls, n, slots, async {}).await
}

/// The same, with `also` done as the worker is killed.
async fn one_worker_killed_and(
    urls: &str,
    n: usize,
    slots: usize,
    also: impl std::future::Future<Output = ()>,
) -> usize {
    let held = Gate::new();
    let mock = fan_out(n, &held).await;
    let ws = far_workspace();
    let slots_flag = slots.to_string();
    let flags = ["--slots", slots_flag.as_str(), "--ack-wait-ms", "2000"];
    let (mut doomed, _a) = worker_with(&mock, ws.path(), urls, &flags).await;
    let (mut survivor, mut survivor_said) = worker_with(&mock, ws.path(), urls, &flags).await;
    let parallel = (2 * slots).to_string();
    let lead = command_on(
        &mock,
        ws.path(),
        &["--nats", urls, "--max-parallel", &parallel, "fan out"],
        &[],
    )
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped())
    .spawn()
    .unwrap();
    let far = || {
        mock.requests()
            .iter()
            .filter(|r| r.body["messages"][0]["content"] == "You are far.")
            .count()
    };
    // Both workers are full: one dies with what it runs.
    crate::support::harness::wait_until("both workers are full", || far() == 2 * slots).await;
    doomed.start_kill().unwrap();
    let _ = doomed.wait().await;
    also.await;
    held.open();
    let lead_pid = lead.id().unwrap();
    let Ok(out) = tokio::time::timeout(Duration::from_secs(90), lead.wait_with_output()).await
    else {
        let mut told = Vec::new();
        while let Ok(line) = survivor_said.try_recv() {
            told.push(line);
        }
        let _ = std::process::Command::new("kill")
            .arg(lead_pid.to_string())
            .status();
        panic!("the run did not end; the survivor said {told:#?}");
    };
    let out = out.unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answer = String::from_utf8_lossy(&out.stdout).into_owned();
    for i in 1..=n {
        assert_eq!(
            answer.matches(&format!("<n{i}>")).count(),
            1,
            "n{i}: {answer}"
        );
    }
    let _ = survivor.kill().await;
    far()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_remote_sub_agents_each_answer_once_though_a_worker_is_killed() {
    let server = NatsServer::start();
    let asked = one_worker_killed_mid_run(&server.url, 30, 4).await;
    assert_eq!(
        asked, 34,
        "each ran once, but the four the dead worker held"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tagged_role_runs_only_on_a_worker_with_its_tags() {
    let server = NatsServer::start();
    let mock = MockLlm::start_with(|request, _| {
        let messages = request.body["messages"].as_array().cloned().unwrap_or_default();
        let system = messages[0]["content"].as_str().unwrap_or_default();
        let results = crate::support::harness::tool_results(request);
        match system {
            "You are gpuer." => Reply::text("on a gpu"),
            _ if results.is_empty() => {
                let call = |i: usize| {
                    let input = serde_json::json!({"description": "g", "prompt": format!("g{i}"), "subagent_type": "gpuer"});
                    (format!("t{i}"), input)
                };
                let calls: Vec<(String, serde_json::Value)> = (1..=4).map(call).collect();
                let calls: Vec<(&str, &str, serde_json::Value)> = calls
                    .iter()
                    .map(|(id, input)| (id.as_str(), "Task", input.clone()))
                    .collect();
                Reply::tool_calls(&calls)
            }
            _ => Reply::text(format!("{} answers", results.len())),
        }
    })
    .await;
    let ws = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(ws.path().join("agents")).unwrap();
    std::fs::write(
        ws.path().join("agents/gpuer.md"),
        "---\nname: gpuer\ndescription: needs a gpu\ntools: Read\nplacement: remote\nplacementTags: [gpu]\n---\nYou are gpuer.\n",
    )
    .unwrap();
    let (mut plain, mut plain_lines) =
        worker_with(&mock, ws.path(), &server.url, &["--slots", "4"]).await;
    let (mut tagged, mut tagged_lines) = worker_with(
        &mock,
        ws.path(),
        &server.url,
        &["--slots", "1", "--tag", "gpu"],
    )
    .await;
    assert_eq!(
        lead_answer(&mock, ws.path(), &["--nats", &server.url, "go"]).await,
        "4 answers\n"
    );
    let _ = (plain.kill().await, tagged.kill().await);
    // Every line each said, up to its end.
    async fn ran(lines: &mut tokio::sync::mpsc::UnboundedReceiver<String>) -> usize {
        let mut ran = 0;
        while let Ok(Some(line)) = tokio::time::timeout(DEADLINE, lines.recv()).await {
            ran += usize::from(line.contains("running task"));
        }
        ran
    }
    assert_eq!(
        ran(&mut tagged_lines).await,
        4,
        "the tagged worker ran all four"
    );
    assert_eq!(
        ran(&mut plain_lines).await,
        0,
        "the untagged one none, though it had room"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_three_server_cluster_twelve_remote_sub_agents_answer_once_though_a_worker_dies() {
    let cluster = NatsCluster::start(3);
    let asked = one_worker_killed_mid_run(&cluster.urls, 12, 2).await;
    assert_eq!(asked, 14, "each ran once, but the two the dead worker held");
    // Three servers: each stream is kept on all three.
    let urls: Vec<&str> = cluster.urls.split(',').collect();
    let client = async_nats::connect(urls[0]).await.unwrap();
    let js = async_nats::jetstream::new(client);
    let mut tasks = js.get_stream(subjects::TASKS).await.unwrap();
    assert_eq!(tasks.info().await.unwrap().config.num_replicas, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_and_the_server_leading_the_streams_die_in_one_run_and_each_result_comes_once() {
    let cluster = std::sync::Arc::new(std::sync::Mutex::new(NatsCluster::start(3)));
    let urls = cluster.lock().unwrap().urls.clone();
    let first = urls.split(',').next().unwrap().to_owned();
    let doomed = cluster.clone();
    let kill_leader = async move {
        // The server that leads the tasks' stream (and so its consumers'
        // elections) dies with the worker.
        let client = async_nats::connect(first.as_str()).await.unwrap();
        let js = async_nats::jetstream::new(client);
        let mut tasks = js.get_stream(subjects::TASKS).await.unwrap();
        let info = tasks.info().await.unwrap();
        let leader = info
            .cluster
            .as_ref()
            .and_then(|c| c.leader.clone())
            .unwrap();
        doomed.lock().unwrap().kill(&leader);
    };
    let asked = one_worker_killed_and(&urls, 12, 2, kill_leader).await;
    assert_eq!(asked, 14, "each ran once, but the two the dead worker held");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_no_worker_will_run_fails_its_call_instead_of_waiting_forever() {
    let server = NatsServer::start();
    let mock = going_far(|| Reply::text("far answer"), true).await;
    let ws = far_workspace();
    // A worker of another user: it does not trust this lead, so it never
    // follows its tasks, and the lead is told at once that none will.
    let stranger = tempfile::tempdir().unwrap();
    let (mut worker, mut lines) = worker_with(
        &mock,
        stranger.path(),
        &server.url,
        &["--slots", "1", "--ack-wait-ms", "600"],
    )
    .await;
    let answer = lead_answer(&mock, ws.path(), &["--nats", &server.url, "go"]).await;
    assert!(answer.starts_with("failed (remote)"), "{answer}");
    assert!(answer.contains("no worker takes it"), "{answer}");
    assert!(answer.contains("--trust-lead U"), "{answer}");
    // Beside a worker that trusts it, the stranger still never touches it.
    let (mut trusting, _said) = worker_with(&mock, ws.path(), &server.url, &["--slots", "1"]).await;
    let answer = lead_answer(&mock, ws.path(), &["--nats", &server.url, "go"]).await;
    assert!(answer.starts_with("completed"), "{answer}");
    assert!(answer.contains("far answer"), "{answer}");
    let _ = trusting.kill().await;
    let _ = worker.kill().await;
    let mut told = Vec::new();
    while let Ok(line) = lines.try_recv() {
        told.push(line);
    }
    assert!(!told.iter().any(|l| l.contains("refused")), "{told:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_worker_asked_to_stop_finishes_its_task_then_exits() {
    let server = NatsServer::start();
    let held = Gate::new();
    let mock = going_far(
        {
            let held = held.clone();
            move || Reply::text("finished anyway").with_end(End::HoldAfter(1, held.clone()))
        },
        false,
    )
    .await;
    let ws = far_workspace();
    let (mut worker, mut lines) =
        worker_with(&mock, ws.path(), &server.url, &["--slots", "1"]).await;
    let lead = command_on(&mock, ws.path(), &["--nats", &server.url, "go"], &[])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    crate::support::harness::wait_until("the worker runs the task", || {
        mock.requests()
            .iter()
            .any(|r| r.body["messages"][0]["content"] == "You are far.")
    })
    .await;
    let pid = rustix::process::Pid::from_raw(worker.id().unwrap() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let line = said(&mut lines, "stopping").await;
    assert!(line.contains("for 1 running task"), "{line}");
    held.open();
    let out = tokio::time::timeout(DEADLINE, lead.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "finished anyway\n");
    let status = tokio::time::timeout(DEADLINE, worker.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "{status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_users_config_may_name_the_servers_and_a_repository_may_not() {
    let server = NatsServer::start();
    let mock = MockLlm::start_with(|request, _| {
        let system = request.body["messages"][0]["content"]
            .as_str()
            .unwrap_or_default();
        let results = crate::support::harness::tool_results(request);
        match system {
            "You are far." => Reply::text("far from config"),
            _ if results.is_empty() => Reply::tool_calls(&[(
                "t1",
                "Task",
                serde_json::json!({"description": "far", "prompt": "go", "subagent_type": "far"}),
            )]),
            _ => Reply::text(crate::support::harness::answer(&results[0].1)),
        }
    })
    .await;
    let ws = far_workspace();
    let config = ws.path().join(".config/orchestrate");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(
        config.join("config.toml"),
        format!("nats = {:?}\n", server.url),
    )
    .unwrap();
    let (mut worker, _lines) = worker(&mock, ws.path(), &server).await;
    assert_eq!(
        lead_answer(&mock, ws.path(), &["go"]).await,
        "far from config\n"
    );
    let _ = worker.kill().await;

    // A repository's orchestrate.toml cannot send its tasks elsewhere.
    let repo = far_workspace();
    std::fs::write(
        repo.path().join("orchestrate.toml"),
        format!("nats = {:?}\n", server.url),
    )
    .unwrap();
    let out = command_on(&mock, repo.path(), &["go"], &[])
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("nats is honoured only in ~/.config/orchestrate/config.toml"),
        "{said}"
    );
    // --remote-only with nowhere to go.
    std::fs::remove_file(config.join("config.toml")).unwrap();
    let out = command_on(&mock, ws.path(), &["--remote-only", "go"], &[])
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--remote-only needs workers"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asked_twice_to_stop_a_busy_worker_hands_its_task_back_at_once() {
    let server = NatsServer::start();
    let held = Gate::new();
    let mock = fan_out(1, &held).await;
    let ws = far_workspace();
    let flags = ["--slots", "1", "--ack-wait-ms", "2000", "--drain", "10m"];
    let (mut first, mut lines) = worker_with(&mock, ws.path(), &server.url, &flags).await;
    let lead = command_on(&mock, ws.path(), &["--nats", &server.url, "go"], &[])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let far = || {
        mock.requests()
            .iter()
            .filter(|r| r.body["messages"][0]["content"] == "You are far.")
            .count()
    };
    crate::support::harness::wait_until("the first worker runs it", || far() == 1).await;
    let pid = rustix::process::Pid::from_raw(first.id().unwrap() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    said(&mut lines, "stopping").await;
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    said(&mut lines, "handing task").await;
    // Gone long before its ten-minute drain, its task still held.
    let status = tokio::time::timeout(DEADLINE, first.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "{status}");
    // Another worker takes the task it handed back.
    let (mut second, _) = worker_with(&mock, ws.path(), &server.url, &flags).await;
    crate::support::harness::wait_until("the second worker runs it", || far() == 2).await;
    held.open();
    let out = tokio::time::timeout(DEADLINE, lead.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "<n1>\n");
    let _ = second.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_runs_the_tasks_of_the_leads_its_users_config_trusts() {
    let server = NatsServer::start();
    let mock = MockLlm::start_with(|_, _| Reply::text("trusted by config")).await;
    let home = tempfile::tempdir().unwrap();
    // The lead is another user's (another state folder): trusted by key.
    let elsewhere = tempfile::tempdir().unwrap();
    let lead = orchestrate::remote::lead_key(&state_root(elsewhere.path())).unwrap();
    let config = home.path().join(".config/orchestrate");
    std::fs::create_dir_all(&config).unwrap();
    let trusted = format!("trust_leads = [{:?}]\n", lead.public_key());
    std::fs::write(config.join("config.toml"), trusted).unwrap();
    let (mut child, _lines) = worker(&mock, home.path(), &server).await;
    let client = async_nats::connect(&server.url).await.unwrap();
    let js = async_nats::jetstream::new(client.clone());
    let run = SessionId::new();
    let mut results = client
        .subscribe(subjects::results(&lead.public_key(), run))
        .await
        .unwrap();
    let own = task(run, "trust me", PermissionMode::Default);
    let ack = js
        .publish(
            subjects::task(&lead.public_key(), run, &[]),
            seal(&own, &lead).unwrap().into(),
        )
        .await
        .unwrap();
    ack.await.unwrap();
    let message = tokio::time::timeout(DEADLINE, results.next())
        .await
        .expect("no result came")
        .unwrap();
    let result: RemoteResult = serde_json::from_slice(&message.payload).unwrap();
    assert_eq!(
        (result.outcome.as_str(), result.text.as_str()),
        ("completed", "trusted by config")
    );
    let _ = child.kill().await;

    // A key that is not one is said at start.
    std::fs::write(config.join("config.toml"), "trust_leads = [\"nobody\"]\n").unwrap();
    let out = command_on(&mock, home.path(), &["worker", "--join", &server.url], &[])
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("trust_leads: \"nobody\" is not a public key"),
        "{said}"
    );
}

/// Run `run`'s files left in the store.
async fn files_left(url: &str) -> Vec<String> {
    let client = async_nats::connect(url).await.unwrap();
    let js = async_nats::jetstream::new(client);
    let store = js.get_object_store(subjects::FILES).await.unwrap();
    let mut listed = store.list().await.unwrap();
    let mut names = Vec::new();
    while let Some(info) = listed.next().await {
        names.push(info.unwrap().name);
    }
    names
}

/// A lead that gives `far` the task "change c", and answers with its result.
fn far_lead(request: &crate::support::mock_llm::Recorded) -> Reply {
    let results = crate::support::harness::tool_results(request);
    match results.first() {
        None => Reply::tool_calls(&[(
            "t1",
            "Task",
            serde_json::json!({"description": "far", "prompt": "change c", "subagent_type": "far"}),
        )]),
        Some((_, result)) => Reply::text(result.clone()),
    }
}

/// A repository with `lib.rs` committed and the remote role `far`, whose
/// other fields are `fields`.
fn far_repository(fields: &str) -> tempfile::TempDir {
    let dir = crate::isolation::repository();
    std::fs::create_dir_all(dir.path().join("agents")).unwrap();
    std::fs::write(
        dir.path().join("agents/far.md"),
        format!("---\nname: far\ndescription: works far away\n{fields}\nplacement: remote\n---\nYou are far.\n"),
    )
    .unwrap();
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_writer_works_on_the_persons_tree_and_its_changes_merge_like_a_local_ones() {
    use crate::isolation::{LIB, git};
    use crate::support::mock_llm::Recorded;
    use serde_json::json;
    let server = NatsServer::start();
    let mock = MockLlm::start_with(|request: &Recorded, _| {
        if request.system() == "You are far." {
            return match request.results() {
                0 => Reply::tool_calls(&[
                    ("r", "Read", json!({"file_path": "notes.txt"})),
                    ("r2", "Read", json!({"file_path": "lib.rs"})),
                ]),
                2 => Reply::tool_calls(&[
                    (
                        "e",
                        "Edit",
                        json!({"file_path": "lib.rs", "old_string": "    3", "new_string": "    30"}),
                    ),
                    (
                        "w",
                        "Write",
                        json!({"file_path": "d.rs", "content": "fn d() {}\n"}),
                    ),
                ]),
                _ => Reply::text("changed far away"),
            };
        }
        far_lead(request)
    })
    .await;
    let dir = far_repository("tools: Read, Edit, Write");
    let root = dir.path();
    // The person's work in progress: untracked notes, an uncommitted change.
    std::fs::write(root.join("notes.txt"), "the person's notes\n").unwrap();
    std::fs::write(root.join("lib.rs"), LIB.replace("    1\n", "    mine\n")).unwrap();
    let head = git(root, &["rev-parse", "HEAD"]);
    let (mut worker, _lines) = worker(&mock, root, &server).await;
    let args = [
        "--nats",
        &server.url,
        "--permission-mode",
        "acceptEdits",
        "go",
    ];
    let answer = lead_answer(&mock, root, &args).await;
    assert!(answer.contains("changed far away"), "{answer}");
    assert!(answer.contains("changes: merged (2 files"), "{answer}");
    // It saw the person's tree as it is, not as committed.
    let far: Vec<_> = mock
        .requests()
        .into_iter()
        .filter(|r| r.system() == "You are far." && r.results() == 2)
        .collect();
    let seen = crate::support::harness::tool_results(&far[0]);
    assert!(seen[0].1.contains("the person's notes"), "{seen:?}");
    // Its changes merged into the person's tree, their own work kept.
    assert_eq!(
        std::fs::read_to_string(root.join("lib.rs")).unwrap(),
        LIB.replace("    1\n", "    mine\n")
            .replace("    3\n", "    30\n")
    );
    assert_eq!(
        std::fs::read_to_string(root.join("d.rs")).unwrap(),
        "fn d() {}\n"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("notes.txt")).unwrap(),
        "the person's notes\n"
    );
    assert_eq!(git(root, &["rev-parse", "HEAD"]), head);
    assert_eq!(git(root, &["rev-parse", "--abbrev-ref", "HEAD"]), "main\n");
    // Its work is on its branch, as a local writer's is; nothing else is
    // left in the repository or on the servers.
    let branches = git(root, &["branch", "--list", "orchestrate/*"]);
    assert!(branches.contains("/far-"), "{branches:?}");
    let work = branches.trim().trim_start_matches("* ");
    assert_eq!(
        git(root, &["diff", "--name-only", &format!("{work}^"), work]),
        "d.rs\nlib.rs\n"
    );
    let left = git(
        root,
        &[
            "for-each-ref",
            "refs/orchestrate/remote",
            "refs/orchestrate/snapshots",
        ],
    );
    assert_eq!(left, "");
    assert_eq!(files_left(&server.url).await, Vec::<String>::new());
    let _ = worker.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_writers_check_runs_on_its_worker_and_gates_its_merge() {
    use crate::isolation::{LIB, git};
    use crate::support::mock_llm::Recorded;
    use serde_json::json;
    let server = NatsServer::start();
    let mock = MockLlm::start_with(|request: &Recorded, _| {
        if request.system() == "You are far." {
            let last = request.body["messages"].as_array().and_then(|m| m.last().cloned());
            let told = last.as_ref().and_then(|m| m["content"].as_str()).unwrap_or_default();
            return match request.results() {
                0 => Reply::tool_calls(&[("r", "Read", json!({"file_path": "lib.rs"}))]),
                1 => Reply::tool_calls(&[(
                    "w",
                    "Write",
                    json!({"file_path": "d.rs", "content": "fn d() {}\n"}),
                )]),
                // The check's failure, sent as a prompt: it mends its work.
                2 if told.starts_with("Check `grep -q 30 lib.rs` failed") => Reply::tool_calls(&[(
                    "e",
                    "Edit",
                    json!({"file_path": "lib.rs", "old_string": "    3", "new_string": "    30"}),
                )]),
                2 => Reply::text("done"),
                _ => Reply::text("mended"),
            };
        }
        far_lead(request)
    })
    .await;
    let dir = far_repository(
        "tools: Read, Edit, Write, Bash\ncheck: grep -q 30 lib.rs\ncheckAttempts: 2",
    );
    let root = dir.path();
    let flags = ["--slots", "1", "--max-permission-mode", "bypassPermissions"];
    let (mut worker, _lines) = worker_with(&mock, root, &server.url, &flags).await;
    let args = [
        "--nats",
        &server.url,
        "--permission-mode",
        "bypassPermissions",
        "go",
    ];
    let answer = lead_answer(&mock, root, &args).await;
    assert!(
        answer.contains("check: passed (attempt 2 of 2)"),
        "{answer}"
    );
    assert!(answer.contains("changes: merged (2 files"), "{answer}");
    assert_eq!(
        std::fs::read_to_string(root.join("lib.rs")).unwrap(),
        LIB.replace("    3\n", "    30\n")
    );
    // The check ran where the work was: its first failure went back to it.
    let asked = mock
        .requests()
        .iter()
        .filter(|r| r.system() == "You are far.")
        .count();
    assert_eq!(asked, 5);
    assert_eq!(
        git(root, &["status", "--porcelain", "--", "lib.rs", "d.rs"]),
        " M lib.rs\n?? d.rs\n"
    );
    let _ = worker.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_sent_back_is_refused_unless_it_is_one_commit_on_its_snapshot_and_the_bytes_named() {
    use crate::isolation::{git, repository};
    use orchestrate::remote::store::{Store, object};
    use orchestrate::remote::workspace::{Bases, Sending, fetch_work};
    let server = NatsServer::start();
    let client = async_nats::connect(&server.url).await.unwrap();
    let js = async_nats::jetstream::new(client);
    js.create_object_store(async_nats::jetstream::object_store::Config {
        bucket: subjects::FILES.into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let store = Store::open(&js).await.unwrap();
    let dir = repository();
    let root = dir.path();
    std::fs::write(root.join("lib.rs"), "changed, not committed\n").unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let (run, session) = (SessionId::new(), SessionId::new());
    let bases = Bases::default();
    let sending = Sending {
        store: &store,
        bases: &bases,
        scratch: scratch.path().to_owned(),
        leave_out: std::sync::Arc::from([]),
        run,
    };
    let sent = sending
        .send(
            root,
            session,
            scratch.path().join(session.to_string()),
            "orchestrate/t/far-1".into(),
        )
        .await
        .unwrap();
    let checkout = &sent.checkout;
    // A commit on the person's HEAD, not on the snapshot the worker was sent.
    let other = tempfile::tempdir().unwrap();
    git(other.path(), &["clone", "-q", &root.to_string_lossy(), "."]);
    std::fs::write(other.path().join("evil.rs"), "planted\n").unwrap();
    git(other.path(), &["add", "evil.rs"]);
    git(other.path(), &["commit", "-q", "-m", "planted"]);
    let tip = git(other.path(), &["rev-parse", "HEAD"]).trim().to_owned();
    let head = git(root, &["rev-parse", "HEAD"]).trim().to_owned();
    let name = object(run, &format!("work.{session}.forged"));
    let file = scratch.path().join("forged.bundle");
    orchestrate::git::bundle::create(other.path(), &file, &name, &tip, Some(&head)).unwrap();
    let forged = store.put(&name, &file, &tip).await.unwrap();
    let refused = fetch_work(&store, scratch.path(), run, session, &forged, checkout).await;
    let why = refused.unwrap_err();
    assert!(why.contains("is not one commit on the snapshot"), "{why}");
    // Bytes other than those named.
    let mut altered = forged.clone();
    altered.digest = "0".repeat(64);
    let why = fetch_work(&store, scratch.path(), run, session, &altered, checkout)
        .await
        .unwrap_err();
    assert!(why.contains("its bytes differ"), "{why}");
    // Another sub-agent's file.
    let mut elsewhere = forged.clone();
    elsewhere.object = object(run, &format!("work.{}.forged", SessionId::new()));
    let why = fetch_work(&store, scratch.path(), run, session, &elsewhere, checkout)
        .await
        .unwrap_err();
    assert!(why.contains("the worker named"), "{why}");
    // Nothing of it is left in the person's repository.
    assert_eq!(git(root, &["for-each-ref", "refs/orchestrate/remote"]), "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_sub_agent_stops_on_its_worker_when_its_lead_gives_up_on_it() {
    let server = NatsServer::start();
    let held = Gate::new();
    let mock = going_far(
        {
            let held = held.clone();
            move || Reply::text("never heard").with_end(End::HoldAfter(1, held.clone()))
        },
        false,
    )
    .await;
    let ws = far_workspace();
    let (mut worker, mut lines) =
        worker_with(&mock, ws.path(), &server.url, &["--slots", "1"]).await;
    let mut lead = command_on(&mock, ws.path(), &["--nats", &server.url, "go"], &[])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    said(&mut lines, "running task").await;
    crate::support::harness::wait_until("the worker's sub-agent asks its model", || {
        mock.requests().iter().any(|r| r.system() == "You are far.")
    })
    .await;
    // Ctrl-C on the lead: its Task call is cancelled, and the worker told.
    let pid = rustix::process::Pid::from_raw(lead.id().unwrap() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::INT).unwrap();
    let line = said(&mut lines, "was cancelled by its lead").await;
    assert!(!line.contains("refused"), "{line}");
    let _ = tokio::time::timeout(DEADLINE, lead.wait()).await.unwrap();
    // It ran once, and was not handed to a worker again.
    assert_eq!(
        mock.requests()
            .iter()
            .filter(|r| r.system() == "You are far.")
            .count(),
        1
    );
    held.open();
    let _ = worker.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_the_documented_server_each_client_proves_itself_and_a_lead_gives_only_its_own_tasks() {
    // The configuration docs/NATS.md shows, as it is written there.
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/NATS.md")).unwrap();
    let config = doc
        .split("```conf\n")
        .nth(1)
        .unwrap()
        .split("```")
        .next()
        .unwrap();
    let ws = far_workspace();
    // A repository whose history is a few MiB that do not compress: its
    // bundle goes through the store past the server's first flow-control
    // window.
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let noise: Vec<u8> = (0..3 << 20)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect();
    std::fs::write(ws.path().join("noise.bin"), noise).unwrap();
    std::fs::write(
        ws.path().join(".gitignore"),
        ".local/\n.config/\nends.jsonl\n",
    )
    .unwrap();
    // A hook for sub-agents' ends: the worker asks the lead to run it.
    std::fs::create_dir_all(ws.path().join(".claude")).unwrap();
    let end_hook = r#"{"hooks": {"SubagentStop": [{"hooks": [{"type": "command", "command": "cat >> \"$CLAUDE_PROJECT_DIR/ends.jsonl\""}]}]}}"#;
    std::fs::write(ws.path().join(".claude/settings.json"), end_hook).unwrap();
    crate::isolation::git(ws.path(), &["init", "-q", "-b", "main"]);
    crate::isolation::git(ws.path(), &["add", "."]);
    crate::isolation::git(ws.path(), &["commit", "-q", "-m", "noise"]);
    let signing = orchestrate::remote::lead_key(&state_root(ws.path())).unwrap();
    let (lead_user, worker_user) = (nkeys::KeyPair::new_user(), nkeys::KeyPair::new_user());
    let config = config
        .replace("LEAD_USER", &lead_user.public_key())
        .replace("WORKER_USER", &worker_user.public_key())
        .replace("LEAD_KEY", &signing.public_key());
    let server = NatsServer::start_with(&config);
    let mock = going_far(|| Reply::text("far answer"), false).await;
    // Nothing to prove itself with: refused by the server, in one line.
    let out = tokio::time::timeout(
        DEADLINE,
        command_on(&mock, ws.path(), &["worker", "--join", &server.url], &[]).output(),
    )
    .await
    .unwrap()
    .unwrap();
    let said_then = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{said_then}");
    assert!(said_then.contains("cannot join"), "{said_then}");
    // Each with its own nkey: the work is done.
    let worker_seed = worker_user.seed().unwrap();
    let (mut worker, _lines) = worker_env(
        &mock,
        ws.path(),
        &server.url,
        &["--slots", "1"],
        &[("NATS_NKEY", &worker_seed)],
    )
    .await;
    let lead_seed = lead_user.seed().unwrap();
    let run = tokio::time::timeout(
        DEADLINE,
        command_on(
            &mock,
            ws.path(),
            &["--nats", &server.url, "go"],
            &[("NATS_NKEY", &lead_seed)],
        )
        .output(),
    )
    .await
    .unwrap()
    .unwrap();
    let answered = String::from_utf8_lossy(&run.stdout);
    assert_eq!(
        answered,
        "far answer\n",
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let _ = worker.kill().await;
    // The lead ran its hook for the sub-agent's end (the worker, whose home
    // this is too, ran its own copy in its own folder).
    let ends = std::fs::read_to_string(ws.path().join("ends.jsonl")).unwrap();
    assert_eq!(ends.lines().count(), 1, "{ends}");
    assert!(ends.contains("\"SubagentStop\""), "{ends}");
    // Neither the worker nor the lead may publish a task under the lead key
    // or any other but the lead's own: the server drops it, and no stream
    // takes it.
    let url = server.url.clone();
    let as_user = |seed: String| {
        let url = url.clone();
        async move {
            let client = async_nats::ConnectOptions::new()
                .nkey(seed)
                .connect(url.as_str())
                .await
                .unwrap();
            async_nats::jetstream::ContextBuilder::new()
                .timeout(Duration::from_millis(500))
                .build(client)
        }
    };
    let stored = |js: async_nats::jetstream::Context, subject: String, bytes: Vec<u8>| async move {
        match js.publish(subject, bytes.into()).await {
            Ok(ack) => ack.await.is_ok(),
            Err(_) => false,
        }
    };
    let forged = task(SessionId::new(), "forged", PermissionMode::Default);
    let stranger = nkeys::KeyPair::new_user();
    let as_lead = subjects::task(&signing.public_key(), forged.run, &[]);
    let as_other = subjects::task(&stranger.public_key(), forged.run, &[]);
    let worker_js = as_user(worker_seed).await;
    let lead_js = as_user(lead_seed).await;
    let sealed = seal(&forged, &stranger).unwrap();
    assert!(!stored(worker_js, as_lead.clone(), sealed.clone()).await);
    assert!(!stored(lead_js.clone(), as_other, sealed).await);
    // Its own, it may.
    let own = seal(&forged, &signing).unwrap();
    assert!(stored(lead_js, as_lead, own).await);
}

/// Writes a certificate authority, a certificate for a server on loopback
/// and one for a client, with their keys, into `dir`.
fn certificates(dir: &Path) {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    let mut authority = CertificateParams::new(Vec::<String>::new()).unwrap();
    authority.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    authority
        .distinguished_name
        .push(DnType::CommonName, "orchestrate test authority");
    let authority_key = KeyPair::generate().unwrap();
    let authority_cert = authority.self_signed(&authority_key).unwrap();
    std::fs::write(dir.join("ca.pem"), authority_cert.pem()).unwrap();
    let issuer = Issuer::new(authority, authority_key);
    for (name, names) in [
        (
            "server",
            vec!["localhost".to_owned(), "127.0.0.1".to_owned()],
        ),
        ("client", vec!["worker".to_owned()]),
    ] {
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(names)
            .unwrap()
            .signed_by(&key, &issuer)
            .unwrap();
        std::fs::write(dir.join(format!("{name}.pem")), cert.pem()).unwrap();
        std::fs::write(dir.join(format!("{name}-key.pem")), key.serialize_pem()).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_asks_for_a_client_certificate_is_joined_with_one() {
    let certs = tempfile::tempdir().unwrap();
    certificates(certs.path());
    let file = |name: &str| certs.path().join(name).display().to_string();
    let server = NatsServer::start_with(&format!(
        "tls {{\n  cert_file: {:?}\n  key_file: {:?}\n  ca_file: {:?}\n  verify: true\n}}\n",
        file("server.pem"),
        file("server-key.pem"),
        file("ca.pem")
    ));
    let mock = MockLlm::start_with(|_, _| Reply::text("unused")).await;
    let home = tempfile::tempdir().unwrap();
    let (ca, cert, key) = (file("ca.pem"), file("client.pem"), file("client-key.pem"));
    // The authority alone: the server is checked, but the worker proves
    // nothing, and is refused.
    let out = tokio::time::timeout(
        DEADLINE,
        command_on(
            &mock,
            home.path(),
            &["worker", "--join", &server.url],
            &[("NATS_TLS_CA", &ca)],
        )
        .output(),
    )
    .await
    .unwrap()
    .unwrap();
    let refused = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{refused}");
    assert!(refused.contains("cannot join"), "{refused}");
    // With its certificate, it joins.
    let env = [
        ("NATS_TLS_CA", ca.as_str()),
        ("NATS_TLS_CERT", cert.as_str()),
        ("NATS_TLS_KEY", key.as_str()),
    ];
    let (mut worker, _lines) = worker_env(&mock, home.path(), &server.url, &[], &env).await;
    let _ = worker.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runs_hooks_run_on_the_lead_for_a_remote_sub_agents_tools_and_end() {
    let server = NatsServer::start();
    // The far sub-agent reads two files in one turn, then answers with what
    // its reads gave it.
    let mock = MockLlm::start_with(|request, _| {
        let results = crate::support::harness::tool_results(request);
        match (request.system(), results.is_empty()) {
            ("You are far.", true) => Reply::tool_calls(&[
                ("r1", "Read", serde_json::json!({"file_path": "secret.txt"})),
                ("r2", "Read", serde_json::json!({"file_path": "plain.txt"})),
            ]),
            ("You are far.", false) => Reply::text(
                results
                    .iter()
                    .map(|(_, r)| r.as_str())
                    .collect::<Vec<_>>()
                    .join("\n"),
            ),
            (_, _) => far_lead(request),
        }
    })
    .await;
    let ws = far_workspace();
    // The person's hooks, on this machine only: a guard of reads that keeps
    // what it was given, and one that notes each sub-agent's end.
    std::fs::create_dir_all(ws.path().join(".claude")).unwrap();
    let guard = r#"input=$(cat); echo "$input" >> "$CLAUDE_PROJECT_DIR/reads.jsonl"; case "$input" in *secret*) echo "no secrets here" >&2; exit 2;; esac"#;
    let settings = serde_json::json!({"hooks": {
        "PreToolUse": [{"matcher": "Read", "hooks": [{"type": "command", "command": guard}]}],
        "PostToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "echo never >> never.txt"}]}],
        "SubagentStop": [{"hooks": [{"type": "command", "command": "cat >> ends.jsonl"}]}]
    }});
    std::fs::write(
        ws.path().join(".claude/settings.json"),
        settings.to_string(),
    )
    .unwrap();
    // The worker has a home of its own: none of the person's hooks is there.
    let home = tempfile::tempdir().unwrap();
    let lead = orchestrate::remote::lead_key(&state_root(ws.path())).unwrap();
    let trust = ["--trust-lead", &lead.public_key()].map(str::to_owned);
    let trust = [trust[0].as_str(), trust[1].as_str()];
    let (mut worker, _lines) = worker_with(&mock, home.path(), &server.url, &trust).await;
    let answer = lead_answer(&mock, ws.path(), &["--nats", &server.url, "go"]).await;
    assert!(
        answer.contains("blocked by a PreToolUse hook: no secrets here"),
        "{answer}"
    );
    assert!(!answer.contains("plain.txt: blocked"), "{answer}");
    // Both reads were put to the guard here, with the sub-agent's own ids.
    let reads = std::fs::read_to_string(ws.path().join("reads.jsonl")).unwrap();
    let reads: Vec<serde_json::Value> = reads
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(reads.len(), 2, "{reads:?}");
    let mut files: Vec<&str> = (reads.iter())
        .map(|r| r["tool_input"]["file_path"].as_str().unwrap())
        .collect();
    files.sort_unstable();
    assert_eq!(files, ["plain.txt", "secret.txt"]);
    for read in &reads {
        assert_eq!(read["hook_event_name"], "PreToolUse");
        assert_eq!(read["tool_name"], "Read");
        assert!(
            read["worker_cwd"]
                .as_str()
                .unwrap()
                .contains("orchestrate-worker-"),
            "{read}"
        );
        assert!(read.get("transcript_path").is_none(), "{read}");
    }
    assert_eq!(reads[0]["session_id"], reads[1]["session_id"]);
    // Its end too, as a sub-agent's; the Bash hook never fired.
    let ends = std::fs::read_to_string(ws.path().join("ends.jsonl")).unwrap();
    let end: serde_json::Value = serde_json::from_str(ends.trim()).unwrap();
    assert_eq!(end["hook_event_name"], "SubagentStop");
    assert_eq!(end["session_id"], reads[0]["session_id"]);
    assert!(!ws.path().join("never.txt").exists());
    let _ = worker.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_prune_deletes_what_remote_sub_agents_left_once_old() {
    use crate::isolation::{git, repository};
    let mock = MockLlm::start_with(|_, _| Reply::text("unused")).await;
    let dir = repository();
    let root = dir.path();
    // Left by a remote sub-agent whose work could not be brought back: one
    // long ago (its id's time is the epoch's), one now.
    let (old, new) = (
        "00000000-0000-7000-8000-000000000001",
        SessionId::new().to_string(),
    );
    for id in [old, new.as_str()] {
        for kind in ["remote", "snapshots"] {
            git(
                root,
                &[
                    "update-ref",
                    &format!("refs/orchestrate/{kind}/{id}"),
                    "HEAD",
                ],
            );
        }
    }
    let out = crate::cli::run_on(
        &mock,
        root,
        &["sessions", "prune", "--older-than", "1h"],
        &[],
    )
    .await;
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(
        said.contains(&format!("deleted ref refs/orchestrate/remote/{old}")),
        "{said}"
    );
    assert!(
        said.contains(&format!("deleted ref refs/orchestrate/snapshots/{old}")),
        "{said}"
    );
    let left = git(
        root,
        &["for-each-ref", "--format=%(refname)", "refs/orchestrate/"],
    );
    assert_eq!(
        left,
        format!("refs/orchestrate/remote/{new}\nrefs/orchestrate/snapshots/{new}\n")
    );
}
