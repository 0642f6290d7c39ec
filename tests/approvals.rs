//! Permission questions answered from another terminal, through the real
//! binary: a run with no terminal waits `--approval-timeout` for
//! `orchestrate approve`, `orchestrate ps` lists what waits, and every
//! answer is journaled with who gave it.

use std::path::Path;

use serde_json::json;

use crate::cli::{command_on, run_on, text};
use crate::support::harness::{DEADLINE, tool_results, wait_until};
use crate::support::mock_llm::{MockLlm, Recorded, Reply};

fn system(request: &Recorded) -> &str {
    request.body["messages"][0]["content"]
        .as_str()
        .unwrap_or("")
}

fn first_prompt(request: &Recorded) -> &str {
    request.body["messages"][1]["content"]
        .as_str()
        .unwrap_or("")
}

/// Every line of every journal of the workspace's runs.
fn journal_lines(dir: &Path) -> Vec<serde_json::Value> {
    let state = crate::support::harness::state(dir);
    let Ok(entries) = std::fs::read_dir(state.sessions()) else {
        return Vec::new();
    };
    entries
        .flatten()
        .flat_map(|e| {
            let text = std::fs::read_to_string(e.path()).unwrap_or_default();
            text.lines()
                .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The journaled events of `kind` (`permission_requested`, …), wherever they
/// sit in a journal's record.
pub(crate) fn journaled(dir: &Path, kind: &str) -> Vec<serde_json::Value> {
    fn find(value: &serde_json::Value, kind: &str, found: &mut Vec<serde_json::Value>) {
        match value {
            serde_json::Value::Object(map) => {
                if map.get("type").and_then(|t| t.as_str()) == Some(kind) {
                    found.push(value.clone());
                }
                map.values().for_each(|v| find(v, kind, found));
            }
            serde_json::Value::Array(items) => items.iter().for_each(|v| find(v, kind, found)),
            _ => {}
        }
    }
    let mut found = Vec::new();
    for line in journal_lines(dir) {
        find(&line, kind, &mut found);
    }
    found
}

/// A workspace whose `maker` role may run Bash.
pub(crate) fn workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("agents")).unwrap();
    std::fs::write(
        dir.path().join("agents/maker.md"),
        "---\nname: maker\ndescription: makes files\ntools: Bash\n---\nYou are maker.\n",
    )
    .unwrap();
    dir
}

/// The lead fans out to `n` makers; maker `i` runs `echo ran >> made-i` and
/// answers with what its call returned; the lead joins their answers.
pub(crate) async fn makers(n: usize) -> MockLlm {
    MockLlm::start_with(move |request, _| {
        let results = tool_results(request);
        match system(request) {
            "You are maker." if results.is_empty() => {
                let which = first_prompt(request).trim_start_matches("make ");
                let command = format!("echo ran >> made-{which}");
                Reply::tool_calls(&[("b1", "Bash", json!({ "command": command }))])
            }
            "You are maker." => Reply::text(results[0].1.clone()),
            _ if results.is_empty() => {
                let calls: Vec<(String, serde_json::Value)> = (1..=n)
                    .map(|i| {
                        let input = json!({"description": format!("make {i}"), "prompt": format!("make {i}"), "subagent_type": "maker"});
                        (format!("t{i}"), input)
                    })
                    .collect();
                let calls: Vec<(&str, &str, serde_json::Value)> = calls
                    .iter()
                    .map(|(id, input)| (id.as_str(), "Task", input.clone()))
                    .collect();
                Reply::tool_calls(&calls)
            }
            _ => {
                let answers: Vec<String> = results
                    .iter()
                    .map(|(_, r)| crate::support::harness::answer(r).to_owned())
                    .collect();
                Reply::text(answers.join(" | "))
            }
        }
    })
    .await
}

/// `ps`'s questions: (the agent's label, the question's id, its line).
fn pending(ps: &str) -> Vec<(String, String, String)> {
    let mut label = String::new();
    let mut found = Vec::new();
    for line in ps.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["pending", "approval", id, ..] => {
                found.push((label.clone(), (*id).to_owned(), line.to_owned()))
            }
            [first, ..] => label = (*first).to_owned(),
            [] => {}
        }
    }
    found
}

/// `task` run with no terminal and `--approval-timeout 5m` in `dir`, once
/// `asked` questions have been put.
async fn waiting(mock: &MockLlm, dir: &Path, task: &str, asked: usize) -> tokio::process::Child {
    let child = command_on(mock, dir, &["--approval-timeout", "5m", task], &[])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_until("the questions are put", || {
        journaled(dir, "permission_requested").len() == asked
    })
    .await;
    child
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn questions_are_listed_and_answered_from_another_terminal_by_name_and_by_id() {
    let mock = makers(2).await;
    let dir = workspace();
    let child = waiting(&mock, dir.path(), "make two files", 2).await;

    let ps = run_on(&mock, dir.path(), &["ps"], &[]).await;
    assert_eq!(ps.status.code(), Some(0), "{}", text(&ps.stderr));
    let shown = text(&ps.stdout);
    let questions = pending(&shown);
    assert_eq!(questions.len(), 2, "{shown}");
    let mut labels: Vec<&str> = questions.iter().map(|(l, _, _)| l.as_str()).collect();
    labels.sort_unstable();
    assert_eq!(labels, ["maker#1", "maker#2"], "{shown}");
    for (_, id, line) in &questions {
        assert!(id.starts_with("q-") && id.len() == 14, "{line}");
        assert!(line.contains("Bash: echo ran >> made-"), "{line}");
    }
    let requested = journaled(dir.path(), "permission_requested");
    for (_, id, _) in &questions {
        assert!(
            requested.iter().any(|e| e["question_id"] == id.as_str()),
            "{id} is the id the event gave"
        );
    }

    // Whole, each question shows every line of what its call would do.
    let full = run_on(&mock, dir.path(), &["ps", "--full"], &[]).await;
    let whole = text(&full.stdout);
    for (_, id, _) in &questions {
        assert!(
            whole.contains(&format!("pending approval {id} Bash (1 lines):")),
            "{whole}"
        );
    }
    assert!(whole.contains("      echo ran >> made-1\n"), "{whole}");

    // A word that is no answer is refused before anything is sent.
    let bad = run_on(&mock, dir.path(), &["approve", "maker#1", "maybe"], &[]).await;
    assert_eq!(bad.status.code(), Some(2), "{}", text(&bad.stderr));
    assert!(text(&bad.stderr).contains("is not an answer"));
    // The id must be the agent's own.
    let (first, second) = (&questions[0], &questions[1]);
    let wrong = run_on(
        &mock,
        dir.path(),
        &["approve", &first.0, "--id", &second.1],
        &[],
    )
    .await;
    assert_eq!(wrong.status.code(), Some(1));
    assert!(
        text(&wrong.stderr).contains(&format!("has no question {} waiting", second.1)),
        "{}",
        text(&wrong.stderr)
    );

    // By name: its only question.
    let yes = run_on(&mock, dir.path(), &["approve", &first.0], &[]).await;
    assert_eq!(yes.status.code(), Some(0), "{}", text(&yes.stderr));
    assert_eq!(
        text(&yes.stdout),
        format!("{}: yes to {}\n", first.0, first.1)
    );
    // Answered, it waits no more: nothing to approve.
    let again = run_on(&mock, dir.path(), &["approve", &first.0], &[]).await;
    assert_eq!(again.status.code(), Some(1));
    let said = text(&again.stderr);
    assert!(
        said.contains("has no question waiting") || said.contains("has ended"),
        "{said}"
    );
    // By id, refused.
    let no = run_on(
        &mock,
        dir.path(),
        &["approve", &second.0, "no", "--id", &second.1],
        &[],
    )
    .await;
    assert_eq!(no.status.code(), Some(0), "{}", text(&no.stderr));

    let out = tokio::time::timeout(DEADLINE, child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let answer = text(&out.stdout);
    assert!(
        answer.contains("refused from another terminal (orchestrate approve)"),
        "{answer}"
    );
    let made: Vec<bool> = (1..=2)
        .map(|i| dir.path().join(format!("made-{i}")).exists())
        .collect();
    assert_eq!(made.iter().filter(|m| **m).count(), 1, "{made:?}");

    let answered = journaled(dir.path(), "permission_answered");
    let mut told: Vec<(String, String, String)> = answered
        .iter()
        .map(|e| {
            let field = |k: &str| e[k].as_str().unwrap_or_default().to_owned();
            (field("question_id"), field("answer"), field("by"))
        })
        .collect();
    told.sort();
    let mut expected = vec![
        (first.1.clone(), "yes".to_owned(), "approve".to_owned()),
        (second.1.clone(), "no".to_owned(), "approve".to_owned()),
    ];
    expected.sort();
    assert_eq!(told, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_nobody_answers_is_refused_when_its_timeout_ends() {
    let mock = makers(1).await;
    let dir = workspace();
    let out = run_on(
        &mock,
        dir.path(),
        &["--approval-timeout", "1s", "make a file"],
        &[],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let answer = text(&out.stdout);
    assert!(
        answer.contains("nobody approved it within 1s (orchestrate approve)"),
        "{answer}"
    );
    assert!(!dir.path().join("made-1").exists());
    let answered = journaled(dir.path(), "permission_answered");
    assert_eq!(answered.len(), 1, "{answered:?}");
    assert_eq!(answered[0]["by"], "timeout");

    // Without the flag, a run with no terminal refuses at once, as it always did.
    let dir = workspace();
    let out = run_on(&mock, dir.path(), &["make a file"], &[]).await;
    let answer = text(&out.stdout);
    assert!(answer.contains("there is no terminal to ask"), "{answer}");
    let answered = journaled(dir.path(), "permission_answered");
    assert_eq!(answered[0]["by"], "nobody");
}

/// Writes the person's own `config.toml` (the tests' HOME is the workspace).
fn user_config(home: &Path, text: &str) {
    let dir = home.join(".config/orchestrate");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config.toml"), text).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_in_the_users_config_answers_each_question_by_its_id() {
    use std::os::unix::fs::PermissionsExt;
    let mock = makers(1).await;
    let dir = workspace();
    let script = dir.path().join("approve.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\nread -r line\nprintf '%s\\n' \"$line\" >> \"$(dirname \"$0\")/asked.jsonl\"\n\
         id=$(printf '%s' \"$line\" | sed -n 's/.*\"question_id\":\"\\([^\"]*\\)\".*/\\1/p')\n\
         printf '{\"question_id\":\"%s\",\"answer\":\"yes\"}\\n' \"$id\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    user_config(
        dir.path(),
        &format!(
            "[approval]\ncommand = [{:?}]\n",
            script.display().to_string()
        ),
    );
    let out = run_on(&mock, dir.path(), &["make a file"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("made-1")).unwrap(),
        "ran\n"
    );
    let asked = std::fs::read_to_string(dir.path().join("asked.jsonl")).unwrap();
    let question: serde_json::Value = serde_json::from_str(asked.trim()).unwrap();
    assert_eq!(question["tool"], "Bash");
    assert_eq!(question["summary"], "echo ran >> made-1");
    assert_eq!(question["input"]["command"], "echo ran >> made-1");
    assert_eq!(question["agent"], "maker");
    let answered = journaled(dir.path(), "permission_answered");
    assert_eq!(answered.len(), 1);
    assert_eq!(answered[0]["by"], "program");
    assert_eq!(answered[0]["question_id"], question["question_id"]);

    // A repository cannot name who answers for the person.
    let other = workspace();
    std::fs::write(
        other.path().join("orchestrate.toml"),
        "[approval]\ncommand = [\"true\"]\n",
    )
    .unwrap();
    let out = run_on(&mock, other.path(), &["make a file"], &[]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr)
            .contains("[approval] is honoured only in ~/.config/orchestrate/config.toml"),
        "{}",
        text(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_that_refuses_or_answers_another_question_refuses_the_call() {
    use std::sync::{Arc, Mutex};
    // The endpoint: the first question refused, the next answered with an id
    // that is not its own.
    let seen: Arc<Mutex<Vec<(String, serde_json::Value)>>> = Arc::default();
    let app = axum::Router::new().route(
        "/ask",
        axum::routing::post({
            let seen = seen.clone();
            move |headers: axum::http::HeaderMap, body: axum::Json<serde_json::Value>| {
                let seen = seen.clone();
                async move {
                    let token = headers
                        .get("authorization")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                        .to_owned();
                    let mut seen = seen.lock().unwrap();
                    seen.push((token, body.0.clone()));
                    let id = body.0["question_id"].as_str().unwrap_or_default();
                    let reply = match seen.len() {
                        1 => json!({"question_id": id, "answer": "no"}),
                        _ => json!({"question_id": "q-000000000000", "answer": "yes"}),
                    };
                    axum::Json(reply)
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/ask", listener.local_addr().unwrap());
    let server = tokio::spawn(async move { axum::serve(listener, app).await });

    let mock = makers(2).await;
    let dir = workspace();
    user_config(
        dir.path(),
        &format!("[approval]\nurl = {url:?}\ntoken = \"s3cret\"\ntimeout = \"30s\"\n"),
    );
    let out = run_on(&mock, dir.path(), &["make two files"], &[]).await;
    server.abort();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let answer = text(&out.stdout);
    // The endpoint is named by its origin: its path may hold a secret.
    let origin = url.trim_end_matches("/ask");
    let said = format!("was not approved by the approver of your configuration ({origin})");
    assert_eq!(answer.matches(&said).count(), 2, "{answer}");
    assert!(answer.contains(": it answered no"), "{answer}");
    assert!(
        answer.contains("its answer was for question \"q-000000000000\", not q-"),
        "{answer}"
    );
    for i in 1..=2 {
        assert!(!dir.path().join(format!("made-{i}")).exists());
    }
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 2);
    assert!(seen.iter().all(|(token, _)| token == "Bearer s3cret"));
    let answered = journaled(dir.path(), "permission_answered");
    assert_eq!(answered.len(), 2);
    assert!(
        answered
            .iter()
            .all(|e| e["by"] == "http" && e["answer"] == "no")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_no_from_another_terminal_ends_the_turn() {
    let mock = MockLlm::start_with(|request, _| {
        let results = tool_results(request);
        if results.is_empty() {
            let calls: Vec<(String, serde_json::Value)> = ["one", "two", "three"]
                .iter()
                .map(|f| (format!("b-{f}"), json!({"command": format!("touch {f}")})))
                .collect();
            let calls: Vec<(&str, &str, serde_json::Value)> = calls
                .iter()
                .map(|(id, input)| (id.as_str(), "Bash", input.clone()))
                .collect();
            return Reply::tool_calls(&calls);
        }
        let said: Vec<&str> = results.iter().map(|(_, r)| r.as_str()).collect();
        Reply::text(said.join("\n"))
    })
    .await;
    let dir = workspace();
    let child = waiting(&mock, dir.path(), "make three", 1).await;
    let ps = run_on(&mock, dir.path(), &["ps"], &[]).await;
    let questions = pending(&text(&ps.stdout));
    assert_eq!(questions.len(), 1, "{}", text(&ps.stdout));
    assert_eq!(questions[0].0, "orchestrator");
    assert!(
        questions[0].2.contains("Bash: touch one"),
        "{}",
        questions[0].2
    );
    let no = run_on(&mock, dir.path(), &["approve", "orchestrator", "no"], &[]).await;
    assert_eq!(no.status.code(), Some(0), "{}", text(&no.stderr));
    let out = tokio::time::timeout(DEADLINE, child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let said = text(&out.stdout);
    let lines: Vec<&str> = said.lines().collect();
    assert_eq!(lines.len(), 3, "{said}");
    assert!(lines[0].contains("refused from another terminal"), "{said}");
    for line in &lines[1..] {
        assert!(
            line.contains("the person refused an earlier call of this turn"),
            "{line}"
        );
    }
    // The other two were never asked about, nor run.
    assert_eq!(journaled(dir.path(), "permission_requested").len(), 1);
    for f in ["one", "two", "three"] {
        assert!(!dir.path().join(f).exists(), "{f}");
    }
}
