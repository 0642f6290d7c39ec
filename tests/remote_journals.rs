//! Remote sub-agents that outlive what ran them: a worker stopped past its
//! ack wait loses its task to another, which takes it up from the journal in
//! the run's stream (its finished turns not asked again), and the first, let
//! go on, can no longer write it and gives the task up; a lead killed mid
//! fan-out is resumed and follows its sub-agents again, none run twice.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use orchestrate::remote::subjects;
use rustix::process::{Pid, Signal, kill_process};

use crate::cli::command_on;
use crate::remote::{fan_out, far_workspace, said, worker_with};
use crate::support::harness::{DEADLINE, tool_results, wait_until};
use crate::support::mock_llm::{End, Gate, MockLlm, Reply};
use crate::support::nats::NatsServer;

/// Every journal line the stream holds, in order, with the workers' claims.
async fn journals(url: &str) -> String {
    let client = async_nats::connect(url).await.unwrap();
    let js = async_nats::jetstream::new(client);
    let Ok(stream) = js.get_stream(subjects::JOURNALS).await else {
        return String::new();
    };
    let mut all = String::new();
    let mut at = 0;
    while let Ok(message) = (stream.raw_message_builder())
        .sequence(at + 1)
        .next_by_subject(format!("{}.>", subjects::JOURNALS_PREFIX))
        .send()
        .await
    {
        at = message.sequence;
        if let Some(worker) = message.headers.get("Orchestrate-Claim") {
            all.push_str(&format!("claim {worker}\n"));
        }
        all.push_str(&String::from_utf8_lossy(&message.payload));
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_stopped_past_its_ack_wait_loses_its_task_to_one_that_resumes_from_the_journal() {
    let server = NatsServer::start();
    let (first_turn, second_turn) = (Gate::new(), Gate::new());
    let answers = Arc::new(AtomicUsize::new(0));
    let (gates, count) = ((first_turn.clone(), second_turn.clone()), answers.clone());
    // The far sub-agent reads a file, then answers: each worker's answer
    // waits for its gate.
    let mock = MockLlm::start_with(move |request, _| {
        let results = tool_results(request);
        match (request.system(), results.is_empty()) {
            ("You are far.", true) => Reply::tool_calls(&[(
                "r1",
                "Read",
                serde_json::json!({"file_path": "notes.txt"}),
            )]),
            ("You are far.", false) => match count.fetch_add(1, Ordering::SeqCst) {
                0 => Reply::text("held answer").with_end(End::HoldAfter(0, gates.0.clone())),
                _ => Reply::text("far answer").with_end(End::HoldAfter(0, gates.1.clone())),
            },
            (_, true) => Reply::tool_calls(&[(
                "t1",
                "Task",
                serde_json::json!({"description": "far", "prompt": "go far", "subagent_type": "far"}),
            )]),
            (_, false) => Reply::text(results[0].1.clone()),
        }
    })
    .await;
    let ws = far_workspace();
    let flags = ["--slots", "1", "--ack-wait-ms", "2000"];
    let (mut first, mut first_said) = worker_with(&mock, ws.path(), &server.url, &flags).await;
    let lead = command_on(&mock, ws.path(), &["--nats", &server.url, "go"], &[])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The first worker read the file, the result is in the journal, and its
    // next model turn is held.
    let turns = || answers.load(Ordering::SeqCst);
    wait_until("the first worker's second turn", || turns() == 1).await;
    let url = server.url.clone();
    let journaled = async |text: &str| {
        let deadline = std::time::Instant::now() + DEADLINE;
        loop {
            let journal = journals(&url).await;
            if journal.contains(text) {
                return journal;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "never journaled: {text}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    };
    journaled("\"role\":\"tool\"").await;
    // It stops; past its ack wait, the task goes to a second worker, which
    // takes it up from the journal: its turns so far are not asked again.
    let stopped = Pid::from_raw(first.id().unwrap() as i32).unwrap();
    kill_process(stopped, Signal::STOP).unwrap();
    let (mut second, mut second_said) = worker_with(&mock, ws.path(), &server.url, &flags).await;
    said(&mut second_said, "from its journal").await;
    wait_until("the second worker's turn", || turns() == 2).await;
    let journal = journaled("claim ").await;
    let claims = journal.lines().filter(|l| l.starts_with("claim ")).count();
    assert_eq!(claims, 2, "{journal}");
    assert_eq!(
        journal.matches("\"record\":\"tool_started\"").count(),
        1,
        "{journal}"
    );
    // The first goes on: its turn ends, it cannot write the journal, and it
    // gives the task up.
    kill_process(stopped, Signal::CONT).unwrap();
    first_turn.open();
    said(&mut first_said, "moved to another worker").await;
    assert!(!journals(&server.url).await.contains("held answer"));
    second_turn.open();
    let out = tokio::time::timeout(DEADLINE, lead.wait_with_output())
        .await
        .expect("the run did not end")
        .unwrap();
    let answer = String::from_utf8_lossy(&out.stdout);
    assert!(answer.starts_with("completed\nfar answer\n"), "{answer}");
    let far: Vec<_> = (mock.requests().into_iter())
        .filter(|r| r.system() == "You are far.")
        .collect();
    let fresh = far.iter().filter(|r| tool_results(r).is_empty()).count();
    assert_eq!(
        (fresh, far.len()),
        (1, 3),
        "one first turn, two second ones"
    );
    // The lead kept its conversation: one read, one result, nothing lost
    // or twice.
    let sessions = crate::support::harness::state(ws.path()).sessions();
    let record = (std::fs::read_dir(sessions).unwrap())
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .find(|j| j.contains("\"remote\":true"))
        .unwrap();
    assert_eq!(
        record.matches("\"record\":\"tool_started\"").count(),
        1,
        "{record}"
    );
    assert_eq!(record.matches("\"role\":\"tool\"").count(), 1, "{record}");
    assert!(record.contains("far answer") && !record.contains("held answer"));
    let _ = (first.kill().await, second.kill().await);
}

/// A lead of a fan-out to four remote sub-agents, killed (SIGKILL) while
/// they run; then `orchestrate resume`, with their answers let go before it
/// starts (`early`: waiting in the stream) or once it follows them again.
async fn a_lead_killed_mid_fan_out(early: bool) {
    let server = NatsServer::start();
    let held = Gate::new();
    let mock = fan_out(4, &held).await;
    let ws = far_workspace();
    let (mut worker, _said) = worker_with(&mock, ws.path(), &server.url, &["--slots", "4"]).await;
    let mut lead = command_on(&mock, ws.path(), &["--nats", &server.url, "fan out"], &[])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let far = || {
        (mock.requests().iter())
            .filter(|r| r.system() == "You are far.")
            .count()
    };
    wait_until("all four run on the worker", || far() == 4).await;
    lead.start_kill().unwrap();
    let _ = lead.wait().await;
    if early {
        held.open();
    }
    let resumed = command_on(&mock, ws.path(), &["--nats", &server.url, "resume"], &[])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    if !early {
        // Each is followed again (its record here says so) before it ends.
        let sessions = crate::support::harness::state(ws.path()).sessions();
        let followed = || {
            let journals = std::fs::read_dir(&sessions).unwrap();
            (journals.filter_map(|e| std::fs::read_to_string(e.unwrap().path()).ok()))
                .filter(|j| j.contains("\"remote\":true") && j.contains("\"resumed\":true"))
                .count()
        };
        wait_until("the four followed again", || followed() == 4).await;
        held.open();
    }
    let out = tokio::time::timeout(DEADLINE, resumed.wait_with_output())
        .await
        .expect("the resumed run did not end")
        .unwrap();
    let answer = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for i in 1..=4 {
        assert_eq!(
            answer.matches(&format!("<n{i}>")).count(),
            1,
            "n{i}: {answer}"
        );
    }
    assert_eq!(far(), 4, "no sub-agent ran twice");
    let fan_outs = (mock.requests().iter())
        .filter(|r| r.system() != "You are far." && tool_results(r).is_empty())
        .count();
    assert_eq!(fan_outs, 1, "the lead's finished turn was not asked again");
    let _ = worker.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lead_killed_mid_fan_out_collects_the_results_that_came_meanwhile() {
    a_lead_killed_mid_fan_out(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lead_killed_mid_fan_out_follows_its_sub_agents_still_running() {
    a_lead_killed_mid_fan_out(false).await;
}
