//! Hostile input is bounded, each case the attack itself against the real binary:
//! ignore files that never end, oversize or never-ending configuration and role
//! files, a file of one 50 MB line, a turn of a hundred tool calls, an SSE event past
//! the cap, and a recording of a response that goes on and on.

use serde_json::json;

use crate::cli::{orchestrate, run_on, text};
use crate::support::harness::{self, DEADLINE, fifo};
use crate::support::mock_llm::{End, Gate, MockLlm, Reply, ev_finish, ev_role, ev_text, ev_usage};

/// The workspace as the binary names it (`-C` resolves symlinks such as /tmp's).
fn canonical(dir: &tempfile::TempDir) -> std::path::PathBuf {
    dir.path().canonicalize().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn glob_and_grep_answer_past_a_gitignore_to_dev_zero_and_a_fifo_ignore() {
    let mock = MockLlm::start(vec![
        Reply::tool_calls(&[
            ("g1", "Glob", json!({"pattern": "**/*.rs"})),
            (
                "g2",
                "Grep",
                json!({"pattern": "needle", "output_mode": "content"}),
            ),
        ]),
        Reply::text("searched"),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("src")).unwrap();
    std::fs::write(dir.path().join("src/lib.rs"), "// a needle\n").unwrap();
    std::os::unix::fs::symlink("/dev/zero", dir.path().join(".gitignore")).unwrap();
    fifo(&dir.path().join(".ignore"));

    // Before, the walk read /dev/zero until memory ran out, or waited on the FIFO.
    let out = run_on(&mock, dir.path(), &["find the needle"], &[]).await;

    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "searched\n");
    let warnings = "[warning: .gitignore: a symbolic link, which is not followed; its ignore \
                    rules were not applied]\n[warning: .ignore: not a regular file; its ignore rules were not \
                    applied]";
    assert_eq!(
        harness::tool_results(&mock.requests()[1]),
        [
            ("g1".to_owned(), format!("src/lib.rs\n{warnings}")),
            (
                "g2".to_owned(),
                format!("src/lib.rs:1:// a needle\n{warnings}")
            ),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversize_orchestrate_toml_is_refused_and_an_endless_one_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("orchestrate.toml");
    let huge = "# padding\n".repeat(200_000);
    std::fs::write(&config, &huge).unwrap();
    let args = ["--base-url", "http://127.0.0.1:9/v1", "--model", "m", "hi"];
    let out = orchestrate(dir.path(), &args, &[]).await;
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr),
        format!(
            "orchestrate: {}: too large ({} bytes; the limit is 1048576)\n",
            canonical(&dir).join("orchestrate.toml").display(),
            huge.len()
        )
    );

    // A FIFO would block the read forever; /dev/zero would never end: neither is
    // read, each is skipped with a line naming it, and the run goes on.
    let mock = MockLlm::start(vec![Reply::text("one"), Reply::text("two")]).await;
    std::fs::remove_file(&config).unwrap();
    fifo(&config);
    let out = run_on(&mock, dir.path(), &["--quiet", "hi"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stderr),
        format!(
            "orchestrate: warning: {}: not a regular file; it is skipped\n",
            canonical(&dir).join("orchestrate.toml").display()
        )
    );
    std::fs::remove_file(&config).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &config).unwrap();
    let out = run_on(&mock, dir.path(), &["--quiet", "hi"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stderr),
        format!(
            "orchestrate: warning: {}: leads outside {} (to /dev/zero); it is skipped\n",
            canonical(&dir).join("orchestrate.toml").display(),
            canonical(&dir).display()
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversize_role_file_and_one_that_never_ends_are_problems() {
    let dir = tempfile::tempdir().unwrap();
    let agents = dir.path().join("agents");
    std::fs::create_dir_all(&agents).unwrap();
    let mut huge = "---\nname: huge\ndescription: too much\n---\n".to_owned();
    huge.push_str(&"You are thorough.\n".repeat(100_000));
    std::fs::write(agents.join("huge.md"), &huge).unwrap();
    std::os::unix::fs::symlink("/dev/zero", agents.join("zero.md")).unwrap();

    let home = dir.path().to_str().unwrap();
    let out = orchestrate(dir.path(), &["agents", "check"], &[("HOME", home)]).await;

    assert_eq!(out.status.code(), Some(1));
    let ws = canonical(&dir);
    assert_eq!(
        text(&out.stdout),
        format!(
            "{}: too large ({} bytes; the limit is 1048576)\n{}: leads outside {} (to /dev/zero)\n\
             2 problems in the role files\n",
            ws.join("agents/huge.md").display(),
            huge.len(),
            ws.join("agents/zero.md").display(),
            ws.display()
        )
    );
}

/// The most memory the process `pid` has held so far, in KiB (`VmHWM`).
fn peak_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// Has the binary Read a file of one line of `len` bytes; returns what the model
/// got back and the most memory the process held by then, in KiB.
async fn read_one_line(len: usize) -> (Vec<(String, String)>, u64) {
    let gate = Gate::new();
    let mock = MockLlm::start(vec![
        Reply::tool_calls(&[("r1", "Read", json!({"file_path": "bundle.min.js"}))]),
        Reply::text("read it").with_end(End::HoldAfter(0, gate.clone())),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("bundle.min.js"), vec![b'a'; len]).unwrap();

    let child = crate::cli::command_on(&mock, dir.path(), &["read the bundle"], &[])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id().unwrap();
    // The second request carries the Read's result; the answer to it is held, so
    // the process is still there to be measured.
    harness::wait_until("the Read's result reaches the model", || {
        mock.request_count() == 2
    })
    .await;
    let peak = peak_kib(pid);
    gate.open();
    let out = tokio::time::timeout(DEADLINE, child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    (harness::tool_results(&mock.requests()[1]), peak)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_of_one_50_mb_line_is_read_in_bounded_memory() {
    let (_, baseline) = read_one_line(3000).await;
    let (results, peak) = read_one_line(50 << 20).await;

    assert_eq!(
        results,
        [(
            "r1".to_owned(),
            format!(
                "     1\t{}… [line cut at 2000 characters]\n",
                "a".repeat(2000)
            )
        )]
    );
    // Holding the line would take 50 MiB more than reading a short one.
    assert!(
        peak < baseline + 16 * 1024,
        "the process peaked at {peak} KiB, {baseline} KiB for a short line"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_of_a_hundred_calls_runs_sixty_four_and_tells_the_model_why_not_the_rest() {
    let ids: Vec<String> = (0..100).map(|i| format!("r{i}")).collect();
    let calls: Vec<(&str, &str, serde_json::Value)> = ids
        .iter()
        .map(|id| (id.as_str(), "Read", json!({"file_path": "a.txt"})))
        .collect();
    let mock = MockLlm::start(vec![Reply::tool_calls(&calls), Reply::text("read")]).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "alpha\n").unwrap();

    let out = run_on(&mock, dir.path(), &["read it a hundred times"], &[]).await;

    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let results = harness::tool_results(&mock.requests()[1]);
    let expected: Vec<(String, String)> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| {
            let content = if i < 64 {
                "     1\talpha\n".to_owned()
            } else {
                format!(
                    "Error: this call was not run: a turn may make at most 64 tool calls, and \
                     this was call {}. Make the calls that were not run in a later turn.",
                    i + 1
                )
            };
            (id.clone(), content)
        })
        .collect();
    assert_eq!(results, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sse_event_past_the_cap_fails_the_turn_with_one_clear_line() {
    let huge = "x".repeat(9 << 20);
    let mock = MockLlm::start(vec![Reply::stream(vec![
        ev_role(),
        ev_text(&huge),
        ev_finish("stop"),
        ev_usage(10, 5),
    ])])
    .await;
    let dir = tempfile::tempdir().unwrap();

    let out = run_on(&mock, dir.path(), &["say a lot"], &[]).await;

    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert_eq!(
        err.lines().last(),
        Some("orchestrate: answer exceeded the 8388608-byte cap"),
        "{err}"
    );
    // Permanent: not asked again.
    assert_eq!(mock.request_count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recording_of_an_endless_response_is_bounded_per_exchange() {
    // 20 MiB of events that add nothing to the answer, then the answer.
    let role = ev_role();
    let filler = (20 << 20) / (role.len() + 8) + 1;
    let mut chunks = vec![role; filler];
    chunks.extend([ev_text("done"), ev_finish("stop"), ev_usage(10, 5)]);
    let mock = MockLlm::start(vec![Reply::stream(chunks)]).await;
    let dir = tempfile::tempdir().unwrap();
    let cassette = dir.path().join("cassette.jsonl");

    let args = ["--record", cassette.to_str().unwrap(), "go on and on"];
    let out = run_on(&mock, dir.path(), &args, &[]).await;

    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "done\n");
    let recorded = std::fs::read_to_string(&cassette).unwrap();
    let lines: Vec<&str> = recorded.lines().collect();
    assert_eq!(lines.len(), 1);
    let exchange: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
    let response = exchange["response"].as_str().unwrap();
    let limit = orchestrate::llm::cassette::MAX_RECORDED_BYTES;
    assert!(response.len() <= limit + 200, "{}", response.len());
    assert!(response.starts_with("data: {"), "{}", &response[..40]);
    let note = response.lines().rev().find(|l| !l.is_empty()).unwrap();
    assert!(
        note.starts_with(": orchestrate: the response was cut here; it went on for ")
            && note.ends_with(&format!("bytes, and a recording keeps at most {limit}")),
        "{note}"
    );
}
