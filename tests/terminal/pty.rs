//! The real binary on a real terminal (its stdin and stderr a pseudo-terminal,
//! where the test reads the screen and types): the permission question, and the
//! live progress tree.

use std::os::fd::OwnedFd;
use std::process::{Output, Stdio};

use serde_json::json;

use crate::cli::{command_on, text};
use crate::support::harness::{DEADLINE, tool_results};
use crate::support::mock_llm::{End, Gate, MockLlm, Reply};

/// A terminal of `rows` rows: the keyboard and screen end (the master) for the
/// test, and what the binary gets as its stdin and stderr (the slave).
struct Terminal {
    keys: OwnedFd,
    screen: tokio::sync::watch::Receiver<String>,
}

impl Terminal {
    fn open(rows: u16) -> (Terminal, OwnedFd) {
        use rustix::pty::{OpenptFlags, grantpt, ioctl_tiocgptpeer, openpt, unlockpt};
        let flags = OpenptFlags::RDWR | OpenptFlags::NOCTTY;
        let master = openpt(flags).unwrap();
        grantpt(&master).unwrap();
        unlockpt(&master).unwrap();
        let slave = ioctl_tiocgptpeer(&master, flags).unwrap();
        let size = rustix::termios::Winsize {
            ws_row: rows,
            ws_col: 160,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        rustix::termios::tcsetwinsize(&slave, size).unwrap();
        let (tx, screen) = tokio::sync::watch::channel(String::new());
        let reader = master.try_clone().unwrap();
        // Everything the binary draws, until every end of the slave is closed.
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = rustix::io::read(&reader, &mut buf) {
                tx.send_modify(|s| s.push_str(&String::from_utf8_lossy(&buf[..n])));
            }
        });
        (
            Terminal {
                keys: master,
                screen,
            },
            slave,
        )
    }

    /// Waits until the screen shows `text` after `from` (a byte offset), and
    /// returns the screen.
    async fn shows_after(&self, from: usize, text: &str) -> String {
        let mut screen = self.screen.clone();
        let wait = screen.wait_for(|s| s.get(from..).is_some_and(|s| s.contains(text)));
        match tokio::time::timeout(DEADLINE, wait).await {
            Ok(Ok(screen)) => screen.clone(),
            _ => panic!(
                "the screen never showed {text:?}:\n{}",
                *self.screen.borrow()
            ),
        }
    }

    async fn shows(&self, text: &str) -> String {
        self.shows_after(0, text).await
    }

    /// Waits until the screen has shown the prompt line `n` times.
    async fn marks(&self, n: usize) {
        let mut screen = self.screen.clone();
        let wait = screen.wait_for(|s| s.matches("› ").count() >= n);
        if tokio::time::timeout(DEADLINE, wait).await.is_err() {
            panic!(
                "the prompt line never showed {n} times:\n{}",
                *self.screen.borrow()
            );
        }
    }

    fn type_keys(&self, keys: &str) {
        let mut left = keys.as_bytes();
        while !left.is_empty() {
            let n = rustix::io::write(&self.keys, left).unwrap();
            left = &left[n..];
        }
    }
}

/// Starts the binary on `mock` in `workspace` with its stdin and stderr on a
/// terminal of `rows` rows.
fn start(
    mock: &MockLlm,
    workspace: &std::path::Path,
    args: &[&str],
    rows: u16,
) -> (Terminal, tokio::process::Child) {
    let (terminal, slave) = Terminal::open(rows);
    let mut command = command_on(mock, workspace, args, &[]);
    command
        .stdin(Stdio::from(slave.try_clone().unwrap()))
        .stderr(Stdio::from(slave))
        .stdout(Stdio::piped());
    let child = command.spawn().unwrap();
    (terminal, child)
}

async fn exited(child: tokio::process::Child) -> Output {
    tokio::time::timeout(DEADLINE, child.wait_with_output())
        .await
        .expect("orchestrate did not exit in time")
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_41st_line_of_a_command_is_on_screen_before_it_can_run() {
    let mut command: Vec<String> = (1..=40).map(|i| format!("echo step {i}")).collect();
    command.push("touch pwned".into());
    let mock = MockLlm::start(vec![
        Reply::tool_calls(&[("b1", "Bash", json!({ "command": command.join("\n") }))]),
        Reply::text("done"),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    // The live progress tree is drawn too: the question pauses it.
    let (terminal, child) = start(&mock, dir.path(), &["tidy up"], 30);
    // 30 rows leave 26 for the command: two pages.
    let first = terminal.shows("Enter for the next page").await;
    assert!(first.contains("Bash (41 lines, page 1 of 2):"), "{first}");
    assert!(!first.contains("touch pwned"), "{first}");
    terminal.type_keys("\n");
    let last = terminal.shows_after(first.len(), "Allow?").await;
    let line_41 = last.rfind("  touch pwned\r\n").expect(&last);
    assert!(line_41 < last.rfind("Allow?").unwrap(), "{last}");
    assert!(!dir.path().join("pwned").exists());
    terminal.type_keys("y\n");
    let out = exited(child).await;
    assert_eq!(
        (text(&out.stdout).as_str(), out.status.code()),
        ("done\n", Some(0))
    );
    assert!(dir.path().join("pwned").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_typed_before_the_question_is_shown_answer_nothing() {
    let gate = Gate::new();
    let mock = MockLlm::start(vec![
        Reply::tool_calls(&[("b1", "Bash", json!({ "command": "touch pwned" }))])
            .with_end(End::HoldAfter(1, gate.clone())),
        Reply::text("done"),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let (terminal, child) = start(&mock, dir.path(), &["--quiet", "tidy up"], 30);
    // While the model is still writing its call: a whole "y" line, and a "y" not
    // yet finished with Enter; the terminal echoes them once it holds them.
    terminal.type_keys("y\ny");
    terminal.shows("y\r\ny").await;
    gate.open();
    let shown = terminal.shows("Allow?").await;
    assert!(shown.contains("  touch pwned\r\nAllow?"), "{shown}");
    // The Enter that would have finished the early "y".
    terminal.type_keys("\n");
    let out = exited(child).await;
    assert_eq!(out.status.code(), Some(0), "{}", *terminal.screen.borrow());
    assert!(!dir.path().join("pwned").exists());
    let results = tool_results(&mock.requests()[1]);
    assert!(
        results[0]
            .1
            .contains("permission denied: Bash was not approved"),
        "{results:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_through_a_symlink_shows_where_it_leads_and_that_it_replaces_every_occurrence() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("src")).unwrap();
    std::fs::write(dir.path().join("src/config.rs"), "checks = true\n").unwrap();
    std::os::unix::fs::symlink("src/config.rs", dir.path().join("notes.md")).unwrap();
    let edit = json!({
        "file_path": "notes.md",
        "old_string": "true",
        "new_string": "false",
        "replace_all": true,
    });
    let mock = MockLlm::start(vec![
        Reply::tool_calls(&[("e1", "Edit", edit)]),
        Reply::text("done"),
    ])
    .await;
    let (terminal, child) = start(&mock, dir.path(), &["--quiet", "tidy up"], 30);
    let shown = terminal.shows("Allow?").await;
    assert!(
        shown.contains(
            "wants to run Edit (7 lines):\r\n  notes.md (resolves to src/config.rs)\r\n  replace_all: every occurrence of the old text is replaced\r\n"
        ),
        "{shown}"
    );
    terminal.type_keys("n\n");
    let out = exited(child).await;
    assert_eq!(out.status.code(), Some(0), "{}", *terminal.screen.borrow());
    assert_eq!(
        std::fs::read_to_string(dir.path().join("src/config.rs")).unwrap(),
        "checks = true\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_live_tree_shows_a_command_as_text() {
    // Retitle the window and clear the screen, then wait for the test's go.
    let command = "true \x1b]0;pwned\x07 \x1b[2J; until [ -e go ]; do sleep 0.05; done";
    let mock = MockLlm::start(vec![
        Reply::tool_calls(&[("b1", "Bash", json!({ "command": command }))]),
        Reply::text("done"),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let args = ["--permission-mode", "bypassPermissions", "tidy up"];
    let (terminal, child) = start(&mock, dir.path(), &args, 30);
    terminal
        .shows(r"Bash true \u{1b}]0;pwned\u{7} \u{1b}[2J; until")
        .await;
    std::fs::write(dir.path().join("go"), "").unwrap();
    let out = exited(child).await;
    assert_eq!(out.status.code(), Some(0));
    let screen = terminal.screen.borrow().clone();
    assert!(
        !screen.contains("\x1b]0;") && !screen.contains("\x1b[2J"),
        "{screen}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn always_saves_an_allow_rule_that_the_next_run_honours_without_asking() {
    let mock = MockLlm::start(vec![
        Reply::tool_calls(&[("b1", "Bash", json!({ "command": "touch  made" }))]),
        Reply::text("done"),
        Reply::tool_calls(&[("b2", "Bash", json!({ "command": "touch made" }))]),
        Reply::text("again"),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let (terminal, child) = start(&mock, dir.path(), &["--quiet", "make it"], 30);
    terminal.shows("Allow?").await;
    terminal.type_keys("a\n");
    let out = exited(child).await;
    assert_eq!(out.status.code(), Some(0), "{}", *terminal.screen.borrow());
    let settings = std::fs::read_to_string(dir.path().join(".claude/settings.local.json")).unwrap();
    let settings: serde_json::Value = serde_json::from_str(&settings).unwrap();
    assert_eq!(
        settings["permissions"]["allow"],
        json!(["Bash(touch made)"])
    );
    // The workspace is trusted in the user's file ($HOME is the workspace here), so
    // its allow rules count: the same command runs with no terminal to ask.
    let user = std::fs::read_to_string(dir.path().join(".config/orchestrate/config.toml")).unwrap();
    assert!(user.contains("[trust."), "{user}");
    std::fs::remove_file(dir.path().join("made")).unwrap();
    let out = crate::cli::run_on(&mock, dir.path(), &["--quiet", "make it again"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        dir.path().join("made").exists(),
        "the saved rule allowed it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workspaces_mcp_servers_are_asked_about_once_showing_their_commands() {
    let mock = MockLlm::start(vec![Reply::text("one"), Reply::text("two")]).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join(".mcp.json"),
        r#"{"mcpServers": {"tools": {"command": "/nonexistent/mcp-tools", "args": ["--port", "${PORT:-7}"]}}}"#,
    )
    .unwrap();
    let (terminal, child) = start(&mock, dir.path(), &["--quiet", "go"], 30);
    let screen = terminal.shows("Trust this workspace to start them").await;
    assert!(
        screen.contains("/.mcp.json): /nonexistent/mcp-tools --port ${PORT:-7}"),
        "{screen}"
    );
    terminal.type_keys("y\n");
    let out = exited(child).await;
    assert_eq!(out.status.code(), Some(0), "{}", *terminal.screen.borrow());
    assert!(
        terminal
            .screen
            .borrow()
            .contains("MCP server \"tools\" did not start: cannot run \"/nonexistent/mcp-tools\": no such program"),
        "{}",
        *terminal.screen.borrow()
    );
    // Remembered: the next run, with nobody to ask, starts it without asking.
    let out = crate::cli::run_on(&mock, dir.path(), &["--quiet", "again"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "two\n");
}

/// A lead fanning out to more sub-agents than the terminal has rows: the run ends
/// (the live tree drew every row for every event, and the whole tree for every
/// ended row: minutes at a few hundred), and its final tree lists every one of
/// them, those that never fit on the screen too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fan_out_taller_than_the_terminal_ends_with_every_sub_agent_in_its_final_tree() {
    const PIECES: usize = 300;
    let mock = MockLlm::start_with(|request, _| {
        let messages = request.body["messages"].as_array().unwrap();
        let prompt = (messages.iter())
            .find(|m| m["role"] == "user")
            .and_then(|m| m["content"].as_str())
            .unwrap_or("");
        if prompt.starts_with("piece ") {
            return Reply::text(format!("{prompt} done"));
        }
        if messages.iter().any(|m| m["role"] == "tool") {
            return Reply::text("merged");
        }
        let ids: Vec<String> = (1..=PIECES).map(|i| format!("t{i}")).collect();
        let calls: Vec<(&str, &str, serde_json::Value)> = (ids.iter().zip(1..))
            .map(|(id, i)| {
                let piece = format!("piece {i}");
                let args =
                    json!({"description": piece, "prompt": piece, "subagent_type": "worker"});
                (id.as_str(), "Task", args)
            })
            .collect();
        Reply::tool_calls(&calls)
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let agents = dir.path().join("agents");
    std::fs::create_dir_all(&agents).unwrap();
    std::fs::write(
        agents.join("worker.md"),
        "---\nname: worker\ndescription: Does one piece.\n---\nDo the piece.\n",
    )
    .unwrap();
    let max = PIECES.to_string();
    let args = [
        "--permission-mode",
        "bypassPermissions",
        "--max-parallel",
        &max,
        "fan out",
    ];
    let (terminal, child) = start(&mock, dir.path(), &args, 20);
    let out = exited(child).await;
    let screen = terminal.screen.borrow().clone();
    assert_eq!(out.status.code(), Some(0), "{screen}");
    assert_eq!(text(&out.stdout), "merged\n");
    // The lead's row is written plain, its live color not shown as text.
    assert!(screen.contains("  orchestrator "), "{screen}");
    assert!(!screen.contains(r"\u{1b}"), "{screen}");
    for i in 1..=PIECES {
        let row = if i == PIECES { "└" } else { "├" };
        assert!(
            screen.contains(&format!("  {row} worker#{i} ")),
            "worker#{i} is not in the final tree:\n{screen}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_abandoned_by_a_cancel_gives_the_live_tree_back() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("agents")).unwrap();
    std::fs::write(
        dir.path().join("agents/worker.md"),
        "---\nname: worker\ndescription: works\ntools: Bash\n---\nYou are a worker.\n",
    )
    .unwrap();
    let finish = Gate::new();
    let mock = MockLlm::start_with({
        let finish = finish.clone();
        move |request, _| match (
            request.system().starts_with("You are a worker."),
            request.results() > 0,
        ) {
            (true, _) => Reply::tool_calls(&[("b1", "Bash", json!({ "command": "touch pwned" }))]),
            (false, false) => Reply::tool_calls(&[(
                "t1",
                "Task",
                json!({"description": "work", "prompt": "work", "subagent_type": "worker"}),
            )]),
            (false, true) => Reply::text("done").with_end(End::HoldAfter(0, finish.clone())),
        }
    })
    .await;
    let (terminal, child) = start(&mock, dir.path(), &["delegate"], 30);
    let asked = terminal.shows("Allow?").await;
    // The worker is cancelled from another terminal while its question is on
    // screen: the question is abandoned, and the tree must be drawn again.
    let kill = crate::cli::orchestrate(dir.path(), &["kill", "worker#1"], &[]).await;
    assert_eq!(kill.status.code(), Some(0), "{}", text(&kill.stderr));
    terminal.shows_after(asked.len(), "worker#1").await;
    finish.open();
    let out = exited(child).await;
    assert_eq!(out.status.code(), Some(0), "{}", *terminal.screen.borrow());
    assert!(!dir.path().join("pwned").exists());
}

/// Types `keys`, then waits until the screen shows `then` after `at`; where
/// the screen ends then.
async fn ask(terminal: &Terminal, at: usize, keys: &str, then: &str) -> usize {
    terminal.type_keys(keys);
    terminal.shows_after(at, then).await.len()
}

/// The last user message of `request`.
fn last_user(request: &crate::support::mock_llm::Recorded) -> String {
    let messages = request.body["messages"].as_array().unwrap();
    let user = messages.iter().rev().find(|m| m["role"] == "user").unwrap();
    user["content"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interactive_session_takes_tasks_follow_ups_a_queue_a_paste_and_a_cancel() {
    let (slow, never) = (Gate::new(), Gate::new());
    let mock = MockLlm::start_with({
        let (slow, never) = (slow.clone(), never.clone());
        move |request, _| {
            let asked = last_user(request);
            match asked.as_str() {
                "slow one" => Reply::text("slow answer").with_end(End::HoldAfter(0, slow.clone())),
                "never ends" => Reply::text("half").with_end(End::HoldAfter(1, never.clone())),
                _ if asked.starts_with("line 1\n") => {
                    Reply::text(format!("pasted {} lines", asked.lines().count()))
                }
                other => Reply::text(format!("answer to {other}")),
            }
        }
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let (terminal, child) = start(&mock, dir.path(), &[], 30);
    let mut seen = terminal.shows("› ").await.len();
    seen = ask(&terminal, seen, "first task\n", "› ").await;
    seen = ask(&terminal, seen, "follow up\n", "› ").await;
    // A prompt typed while the lead works waits in its queue.
    terminal.type_keys("slow one\n");
    crate::support::harness::wait_until("the slow prompt is asked", || {
        mock.requests().iter().any(|r| last_user(r) == "slow one")
    })
    .await;
    seen = ask(&terminal, seen, "queued one\n", "queued: queued one").await;
    slow.open();
    crate::support::harness::wait_until("the queued prompt is asked", || {
        mock.requests().iter().any(|r| last_user(r) == "queued one")
    })
    .await;
    seen = terminal.shows_after(seen, "› ").await.len();
    // A paste of 20 lines is one prompt.
    let lines: Vec<String> = (1..=20).map(|i| format!("line {i}")).collect();
    let pasted = format!("\x1b[200~{}\n\x1b[201~\n", lines.join("\n"));
    seen = ask(&terminal, seen, &pasted, "› ").await;
    // A cancel in the middle of a stream ends that turn, not the session.
    terminal.type_keys("never ends\n");
    crate::support::harness::wait_until("the endless prompt is asked", || {
        mock.requests().iter().any(|r| last_user(r) == "never ends")
    })
    .await;
    let pid = rustix::process::Pid::from_raw(child.id().unwrap() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::INT).unwrap();
    // Cancelled, and the prompt line is back.
    let _ = terminal
        .shows_after(seen, "orchestrate: cancelled\r\n› ")
        .await;
    terminal.type_keys("/exit\n");
    let out = exited(child).await;
    assert_eq!(out.status.code(), Some(0), "{}", *terminal.screen.borrow());
    let answers = text(&out.stdout);
    for expected in [
        "answer to first task",
        "answer to follow up",
        "slow answer",
        "answer to queued one",
        "pasted 20 lines",
    ] {
        assert!(answers.contains(expected), "{expected}: {answers}");
    }
    let asked: Vec<String> = mock.requests().iter().map(last_user).collect();
    assert_eq!(asked.len(), 6, "{asked:?}");
    assert_eq!(
        asked.iter().filter(|a| a.starts_with("line 1\n")).count(),
        1
    );
    // The follow-up saw the first answer: one conversation.
    let follow = &mock.requests()[1];
    assert!(
        follow.body["messages"]
            .to_string()
            .contains("answer to first task"),
        "{}",
        follow.body["messages"]
    );
    // Every prompt is in the workspace's history, for its owner alone.
    let state = crate::support::harness::state(dir.path());
    let history = state.dir().join("history");
    let kept = std::fs::read_to_string(&history).unwrap();
    assert!(
        kept.contains("\"first task\"") && kept.contains("\"/exit\""),
        "{kept}"
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&history).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    drop(never);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_d_at_an_empty_prompt_ends_an_interactive_session() {
    let mock = MockLlm::start_with(|_, _| Reply::text("hello")).await;
    let dir = tempfile::tempdir().unwrap();
    let commands = dir.path().join(".claude/commands");
    std::fs::create_dir_all(&commands).unwrap();
    std::fs::write(commands.join("help.md"), "Help me.\n").unwrap();
    std::fs::write(
        commands.join("review.md"),
        "---\ndescription: Reviews a file\n---\nReview $1.\n",
    )
    .unwrap();
    std::fs::write(
        commands.join("broken.md"),
        "---\nallowed-tools: [Read\n---\nNever.\n",
    )
    .unwrap();
    let (terminal, child) = start(&mock, dir.path(), &[], 30);
    let screen = terminal.shows("› ").await;
    assert!(
        screen.contains("help.md: the built-in /help comes first"),
        "{screen}"
    );
    // The built-ins, then the person's commands; the prompt line after each.
    ask(
        &terminal,
        screen.len(),
        "/help\n",
        "/review    Reviews a file",
    )
    .await;
    terminal.marks(2).await;
    // A first line naming a command that cannot be read is said; the
    // session goes on.
    terminal.type_keys("/broken\n");
    terminal.marks(3).await;
    assert!(
        terminal.screen.borrow().contains("broken.md"),
        "{}",
        *terminal.screen.borrow()
    );
    terminal.type_keys("say hi\n");
    terminal.marks(4).await;
    terminal.type_keys("\x04");
    let out = exited(child).await;
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(text(&out.stdout), "hello\n");
    assert_eq!(mock.request_count(), 1);
    // What was typed before the first task is in the history too, once each.
    let state = crate::support::harness::state(dir.path());
    let kept = std::fs::read_to_string(state.dir().join("history")).unwrap();
    assert_eq!(kept, "\"/help\"\n\"/broken\"\n\"say hi\"\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_up_that_joins_the_run_in_progress_is_answered_with_it() {
    let mock = MockLlm::start_with(|request, _| match request.results() {
        0 => Reply::tool_calls(&[(
            "b1",
            "Bash",
            json!({ "command": "while [ ! -f go ]; do sleep 0.02; done" }),
        )]),
        _ => Reply::text(format!("heard {}", last_user(request))),
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let args = ["--permission-mode", "bypassPermissions"];
    let (terminal, child) = start(&mock, dir.path(), &args, 30);
    let seen = terminal.shows("› ").await.len();
    terminal.type_keys("wait for it\n");
    crate::support::harness::wait_until("the command runs", || mock.request_count() == 1).await;
    // Typed while the call runs: it joins the run at its next turn boundary.
    let seen = ask(&terminal, seen, "and this too\n", "queued: and this too").await;
    std::fs::write(dir.path().join("go"), "").unwrap();
    // One answer for both, and the prompt line is back.
    terminal.shows_after(seen, "› ").await;
    terminal.type_keys("/exit\n");
    let out = exited(child).await;
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(text(&out.stdout), "heard and this too\n");
    assert_eq!(mock.request_count(), 2, "the follow-up joined the run");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewind_in_an_interactive_session_puts_back_what_its_answers_changed() {
    let write = |id: &str, file: &str| {
        Reply::tool_calls(&[(
            id,
            "Write",
            json!({ "file_path": file, "content": format!("{file}\n") }),
        )])
    };
    let mock = MockLlm::start_with(move |_, n| match n {
        0 => write("w1", "a.txt"),
        2 => write("w2", "b.txt"),
        _ => Reply::text("written"),
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::write(root.join("kept.txt"), "kept\n").unwrap();
    crate::isolation::git(root, &["init", "-q"]);
    crate::isolation::git(root, &["add", "."]);
    crate::isolation::git(root, &["commit", "-q", "-m", "first"]);
    let args = ["--trust-workspace", "--permission-mode", "acceptEdits"];
    let (terminal, child) = start(&mock, root, &args, 30);
    let mut seen = terminal.shows("› ").await.len();
    seen = ask(&terminal, seen, "write a\n", "› ").await;
    seen = ask(&terminal, seen, "write b\n", "› ").await;
    assert!(root.join("a.txt").exists() && root.join("b.txt").exists());
    // Both answers' changes are the run's own: nothing of the person's to lose.
    ask(&terminal, seen, "/rewind\n", "› ").await;
    assert!(
        !root.join("a.txt").exists(),
        "{}",
        *terminal.screen.borrow()
    );
    assert!(!root.join("b.txt").exists());
    assert_eq!(
        std::fs::read_to_string(root.join("kept.txt")).unwrap(),
        "kept\n"
    );
    terminal.type_keys("/exit\n");
    let out = exited(child).await;
    assert_eq!(out.status.code(), Some(0), "{}", *terminal.screen.borrow());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_up_slash_command_narrows_what_the_session_may_do_from_then_on() {
    let touch = |id: &str, file: &str| {
        Reply::tool_calls(&[(id, "Bash", json!({ "command": format!("touch {file}") }))])
    };
    let mock = MockLlm::start_with(move |_, n| match n {
        0 => touch("free", "free.txt"),
        2 => touch("looked", "looked.txt"),
        4 => touch("later", "later.txt"),
        _ => Reply::text("done"),
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let commands = dir.path().join(".claude/commands");
    std::fs::create_dir_all(&commands).unwrap();
    std::fs::write(
        commands.join("look.md"),
        "---\nallowed-tools: Read\n---\nLook at $ARGUMENTS.\n",
    )
    .unwrap();
    let args = ["--permission-mode", "bypassPermissions"];
    let (terminal, child) = start(&mock, dir.path(), &args, 30);
    let mut seen = terminal.shows("› ").await.len();
    seen = ask(&terminal, seen, "make a file\n", "› ").await;
    seen = ask(&terminal, seen, "/look the tree\n", "› ").await;
    ask(&terminal, seen, "make another\n", "› ").await;
    terminal.type_keys("/exit\n");
    let out = exited(child).await;
    assert_eq!(out.status.code(), Some(0), "{}", *terminal.screen.borrow());
    assert!(
        dir.path().join("free.txt").exists(),
        "before the command, free"
    );
    let result = |n: usize, id: &str| {
        tool_results(&mock.requests()[n])
            .into_iter()
            .find(|(call, _)| call == id)
            .unwrap()
            .1
    };
    for (n, id, file) in [(3, "looked", "looked.txt"), (5, "later", "later.txt")] {
        let refused = result(n, id);
        assert!(
            refused.contains("allows only Read") && refused.contains("look.md"),
            "{refused}"
        );
        assert!(!dir.path().join(file).exists(), "{file}: never ran");
    }
    assert!(
        mock.requests()[2].body["messages"]
            .to_string()
            .contains("Look at the tree."),
        "the command's body was asked"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_up_a_prompt_hook_refuses_is_said_once_each_time() {
    let mock = MockLlm::start_with(|_, _| Reply::text("fine")).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join(".claude")).unwrap();
    let refuse = "grep -q secret && { echo 'no secrets' >&2; exit 2; } || exit 0";
    let hooks = json!({ "hooks": { "UserPromptSubmit": [
        { "hooks": [{ "type": "command", "command": refuse }] }
    ] } });
    std::fs::write(dir.path().join(".claude/settings.json"), hooks.to_string()).unwrap();
    let (terminal, child) = start(&mock, dir.path(), &["--trust-workspace"], 30);
    terminal.marks(1).await;
    terminal.type_keys("hello\n");
    terminal.marks(2).await;
    // Said each time, the prompt line shown again after it (as the line is
    // taken, and after the warning).
    for marks in [4, 6] {
        terminal.type_keys("the secret\n");
        terminal.marks(marks).await;
    }
    terminal.type_keys("/exit\n");
    let out = exited(child).await;
    assert_eq!(out.status.code(), Some(0), "{}", *terminal.screen.borrow());
    let screen = terminal.screen.borrow().clone();
    assert_eq!(screen.matches("no secrets").count(), 2, "{screen}");
    assert_eq!(
        mock.request_count(),
        1,
        "the refused prompts reached no model"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_no_at_the_terminal_ends_the_turn_and_the_model_is_asked_again() {
    let touch = |id: &str, file: &str| (id.to_owned(), file.to_owned());
    let calls = [touch("t1", "one"), touch("t2", "two"), touch("t3", "three")];
    let mock = MockLlm::start(vec![
        Reply::tool_calls(
            &calls
                .iter()
                .map(|(id, file)| {
                    (
                        id.as_str(),
                        "Bash",
                        json!({ "command": format!("touch {file}") }),
                    )
                })
                .collect::<Vec<_>>(),
        ),
        Reply::text("understood"),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let (terminal, child) = start(&mock, dir.path(), &["--quiet", "make them"], 30);
    terminal.shows("Allow?").await;
    terminal.type_keys("n\n");
    let out = exited(child).await;
    assert_eq!(out.status.code(), Some(0), "{}", *terminal.screen.borrow());
    let screen = terminal.screen.borrow().clone();
    assert_eq!(screen.matches("Allow?").count(), 1, "asked once: {screen}");
    let results = tool_results(&mock.requests()[1]);
    assert_eq!(results.len(), 3, "every call has its result");
    assert!(
        results[0].1.contains("was not approved"),
        "{}",
        results[0].1
    );
    for (_, result) in &results[1..] {
        assert!(
            result.contains("the person refused an earlier call of this turn"),
            "{result}"
        );
    }
    for file in ["one", "two", "three"] {
        assert!(!dir.path().join(file).exists(), "{file} never made");
    }
    assert_eq!(
        text(&out.stdout),
        "understood\n",
        "the model was asked again"
    );
    // The one question put is kept with the run.
    let sessions = crate::support::harness::state(dir.path()).sessions();
    let kept: String = std::fs::read_dir(sessions)
        .unwrap()
        .flatten()
        .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
        .collect();
    assert_eq!(
        kept.matches("\"permission_requested\"").count(),
        1,
        "{kept}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seven_sub_agents_asking_at_once_are_asked_in_turn_each_named_and_each_call_runs_once() {
    let mock = crate::approvals::makers(7).await;
    let dir = crate::approvals::workspace();
    let (terminal, child) = start(&mock, dir.path(), &["make seven files"], 40);
    terminal.shows("Allow?").await;
    // Every maker has asked before the first answer: the six behind wait.
    let asked = || crate::approvals::journaled(dir.path(), "permission_requested").len();
    crate::support::harness::wait_until("the seven makers ask", || asked() == 7).await;
    let mut headers = Vec::new();
    for n in 1..=7 {
        let mut screen = terminal.screen.clone();
        let wait = screen.wait_for(|s| s.matches("Allow?").count() >= n);
        let shown = match tokio::time::timeout(DEADLINE, wait).await {
            Ok(Ok(screen)) => screen.clone(),
            _ => panic!("question {n} never showed:\n{}", *terminal.screen.borrow()),
        };
        let header = shown
            .split('\n')
            .rfind(|line| line.contains("wants to run Bash"))
            .unwrap()
            .trim()
            .to_owned();
        headers.push(header);
        // Nothing else is asked before this one is answered.
        assert_eq!(shown.matches("Allow?").count(), n, "{shown}");
        terminal.type_keys("y\n");
    }
    let out = exited(child).await;
    assert_eq!(out.status.code(), Some(0), "{}", *terminal.screen.borrow());
    // Each question names its own maker, where it sits, and (after the
    // first, asked while the others arrived) how many wait behind it.
    let mut named: Vec<String> = headers
        .iter()
        .map(|h| {
            let (who, _) = h.split_once(" wants").unwrap();
            who.to_owned()
        })
        .collect();
    named.sort();
    named.dedup();
    let expected: Vec<String> = (1..=7)
        .map(|i| format!("orchestrator › maker#{i} (maker)"))
        .collect();
    assert_eq!(named, expected, "{headers:#?}");
    for (i, header) in headers.iter().enumerate().skip(1) {
        let behind = match 6 - i {
            0 => "Bash:".to_owned(),
            1 => "Bash; 1 more question waits:".to_owned(),
            n => format!("Bash; {n} more questions wait:"),
        };
        assert!(header.ends_with(&behind), "question {}: {header}", i + 1);
    }
    // Each call ran exactly once.
    for i in 1..=7 {
        let made = std::fs::read_to_string(dir.path().join(format!("made-{i}")));
        assert_eq!(made.unwrap(), "ran\n", "made-{i}");
    }
    let answered = crate::approvals::journaled(dir.path(), "permission_answered");
    assert_eq!(answered.len(), 7);
    assert!(
        answered
            .iter()
            .all(|e| e["by"] == "terminal" && e["answer"] == "yes")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_on_the_terminal_answered_from_another_terminal_says_so() {
    let mock = MockLlm::start(vec![
        Reply::tool_calls(&[("b1", "Bash", json!({"command": "echo ran >> made"}))]),
        Reply::text("done"),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let (terminal, child) = start(&mock, dir.path(), &["make it"], 30);
    let asked = terminal.shows("Allow?").await;
    let approve = crate::cli::run_on(&mock, dir.path(), &["approve", "orchestrator"], &[]).await;
    assert_eq!(approve.status.code(), Some(0), "{}", text(&approve.stderr));
    assert!(text(&approve.stdout).starts_with("orchestrator: yes to q-"));
    terminal
        .shows_after(asked.len(), "(no longer asked: answered elsewhere")
        .await;
    let out = exited(child).await;
    assert_eq!(out.status.code(), Some(0), "{}", *terminal.screen.borrow());
    assert_eq!(text(&out.stdout), "done\n");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("made")).unwrap(),
        "ran\n"
    );
    let answered = crate::approvals::journaled(dir.path(), "permission_answered");
    assert_eq!(answered.len(), 1);
    assert_eq!(answered[0]["by"], "approve");
}
