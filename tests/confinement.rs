//! Keys no tool can reach and Bash confined to the workspace, each checked with the
//! attack itself through the real binary: a Bash call reading the environment of
//! every process above it (as root and as an ordinary user), a provider redirecting
//! to another origin, `touch` outside the workspace, and `setsid` sleepers left
//! behind by a command that ends or times out.

use std::path::Path;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::cli::{command_on, run_on, text, wrapped};
use crate::support::harness::{DEADLINE, TEST_KEY};
use crate::support::mock_llm::{End, Gate, MockLlm, Reply};

/// Walks from the Bash command's parent up to init, printing each process's id and
/// its environment (or the error reading it), then every memory file the command
/// inherited (the keys' handoff file among them).
const READ_EVERY_ANCESTOR: &str = r#"read -r s < /proc/self/stat; s=${s##*) }; set -- $s; p=$2
while [ "$p" -gt 1 ]; do
  echo "== $p"
  tr '\0' '\n' < /proc/$p/environ
  p=$(sed 's/.*) //' /proc/$p/stat | cut -d' ' -f2)
done
for f in /proc/self/fd/*; do
  case $(readlink "$f") in
    /memfd:*) echo "fd ${f##*/} -> $(readlink "$f")"; cat "$f" ;;
  esac
done
true"#;

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// The tool results the model was sent, in order, from every request.
fn tool_results(mock: &MockLlm) -> Vec<String> {
    let requests = mock.requests();
    let Some(last) = requests.last() else {
        return Vec::new();
    };
    last.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap().to_owned())
        .collect()
}

/// Everything the model was sent, every request body, as one text.
fn sent_to_the_model(mock: &MockLlm) -> String {
    mock.requests()
        .iter()
        .map(|r| r.body.to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

async fn wait_for_requests(mock: &MockLlm, n: usize) {
    let deadline = Instant::now() + DEADLINE;
    while mock.request_count() < n {
        assert!(
            Instant::now() < deadline,
            "only {} requests arrived",
            mock.request_count()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn finish(child: tokio::process::Child) -> Output {
    tokio::time::timeout(DEADLINE, child.wait_with_output())
        .await
        .expect("orchestrate did not exit in time")
        .unwrap()
}

/// A Bash call that reads the environment of every process above it, through the
/// binary started with the key (directly, or by `wrap` as another user). While the
/// run is live, the test itself checks the orchestrator is not dumpable and reads
/// its environment block: the key has been moved out of it (the handoff's variable
/// is there instead).
/// Returns the tool result and the orchestrator's pid.
async fn read_the_key_from_a_bash_call(workspace: &Path, wrap: Option<&[&str]>) -> (String, u32) {
    let gate = Gate::new();
    let mock = MockLlm::start(vec![
        Reply::tool_calls(&[("b1", "Bash", json!({"command": READ_EVERY_ANCESTOR}))]),
        Reply::text("done").with_end(End::HoldAfter(0, gate.clone())),
    ])
    .await;
    let args = ["--permission-mode", "bypassPermissions", "look around"];
    let env = [("OPENAI_API_KEY", TEST_KEY)];
    let mut command = command_on(&mock, workspace, &args, &env);
    if let Some(wrap) = wrap {
        command = wrapped(&command, wrap[0], &wrap[1..]);
    }
    let child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id().unwrap();
    wait_for_requests(&mock, 2).await;
    // The kernel gives a process that is not dumpable's /proc files to root,
    // whoever runs it.
    let owner = std::os::unix::fs::MetadataExt::uid(
        &std::fs::metadata(format!("/proc/{pid}/environ")).unwrap(),
    );
    assert_eq!(owner, 0, "the orchestrator is dumpable");
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    let environ = String::from_utf8_lossy(&environ);
    assert!(environ.contains("ORCHESTRATE_KEYS_FD="), "{environ}");
    assert!(
        !environ.contains(TEST_KEY),
        "the key is in the environment block"
    );
    gate.open();
    let out = finish(child).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "done\n");
    for place in [
        text(&out.stdout),
        text(&out.stderr),
        sent_to_the_model(&mock),
    ] {
        assert!(!place.contains(TEST_KEY), "the key leaked: {place}");
    }
    for journal in std::fs::read_dir(crate::support::harness::state(workspace).sessions()).unwrap()
    {
        let journal = std::fs::read_to_string(journal.unwrap().path()).unwrap();
        assert!(!journal.contains(TEST_KEY), "the key is in a journal");
    }
    let results = tool_results(&mock);
    assert_eq!(results.len(), 1, "{results:?}");
    (results[0].clone(), pid)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bash_call_run_as_root_cannot_read_the_key_from_any_process_above_it() {
    if !is_root() {
        eprintln!("skipped: this test attacks as root, and runs as another user");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (result, pid) = read_the_key_from_a_bash_call(dir.path(), None).await;
    // The walk reached the orchestrator, and was refused there.
    assert!(
        result.contains(&format!("== {pid}\n"))
            && result.contains(&format!("/proc/{pid}/environ: Permission denied")),
        "{result}"
    );
    // The handoff's descriptor reached the command, and holds nothing.
    assert!(
        result.contains("-> /memfd:orchestrate-keys (deleted)\n"),
        "{result}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bash_call_run_as_an_ordinary_user_cannot_read_the_key_either() {
    if !is_root() {
        // Already an ordinary user: the attack runs as this one.
        let dir = tempfile::tempdir().unwrap();
        let (result, pid) = read_the_key_from_a_bash_call(dir.path(), None).await;
        assert!(result.contains(&format!("== {pid}\n")), "{result}");
        return;
    }
    let which = std::process::Command::new("which")
        .arg("setpriv")
        .output()
        .unwrap();
    assert!(
        which.status.success(),
        "setpriv (util-linux) is needed to run the binary as another user"
    );
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::chown(dir.path(), Some(65534), Some(65534)).unwrap();
    let wrap = [
        "setpriv",
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
    ];
    let (result, pid) = read_the_key_from_a_bash_call(dir.path(), Some(&wrap)).await;
    assert!(
        result.contains(&format!("== {pid}\n"))
            && result.contains(&format!("/proc/{pid}/environ: Permission denied")),
        "{result}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirect_to_another_origin_is_not_followed_with_the_key() {
    // Two listeners on 127.0.0.1 with different ports are different origins.
    let elsewhere = MockLlm::start(vec![Reply::text("you should not be here")]).await;
    let root = |mock: &MockLlm| mock.base_url().trim_end_matches("/v1").to_owned();
    let target = format!("{}/v1/messages", root(&elsewhere));
    let redirect = Reply::Status {
        status: 307,
        headers: vec![("location".to_owned(), target)],
        body: String::new(),
    };
    let provider = MockLlm::start(vec![redirect]).await;
    let dir = tempfile::tempdir().unwrap();
    let url = root(&provider);
    let args = [
        "--provider",
        "anthropic",
        "--base-url",
        &url,
        "--model",
        "m",
        "hello",
    ];
    let out = crate::cli::orchestrate(dir.path(), &args, &[("ANTHROPIC_API_KEY", TEST_KEY)]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stderr).lines().last(),
        Some(
            format!(
                "orchestrate: the provider redirected to another origin ({}); not followed, so neither its key nor the conversation goes there",
                root(&elsewhere)
            )
            .as_str()
        )
    );
    assert_eq!(elsewhere.request_count(), 0);
    // Refused for good, not retried.
    assert_eq!(provider.request_count(), 1);
    assert_eq!(provider.requests()[0].api_key.as_deref(), Some(TEST_KEY));
}

/// A directory outside the workspace and outside the temporary directory.
fn outside() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

/// A Bash call touching a file in the workspace and one in `away`, through the
/// binary with `--sandbox` when given and the user's `[sandbox]` table when given;
/// returns the workspace, `away` and the tool result.
async fn touch_both(
    sandbox: Option<&str>,
    users_table: Option<&dyn Fn(&Path) -> String>,
) -> (tempfile::TempDir, tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let away = outside();
    if let Some(table) = users_table {
        // The binary's HOME is the workspace (see `cli::command`).
        let config = dir.path().join(".config/orchestrate");
        std::fs::create_dir_all(&config).unwrap();
        std::fs::write(config.join("config.toml"), table(away.path())).unwrap();
    }
    let escaped = away.path().join("escaped");
    let command = format!("touch inside; touch {}", escaped.display());
    let mock = MockLlm::start(vec![
        Reply::tool_calls(&[("b1", "Bash", json!({"command": command}))]),
        Reply::text("done"),
    ])
    .await;
    let mut args = vec!["--permission-mode", "bypassPermissions"];
    if let Some(mode) = sandbox {
        args.extend(["--sandbox", mode]);
    }
    args.push("touch things");
    let out = run_on(&mock, dir.path(), &args, &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(dir.path().join("inside").exists());
    let result = tool_results(&mock).remove(0);
    (dir, away, result)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn touch_outside_the_workspace_is_refused_by_default_and_allowed_with_the_sandbox_off() {
    let (_dir, away, result) = touch_both(None, None).await;
    let escaped = away.path().join("escaped");
    assert!(!escaped.exists(), "the command wrote outside the workspace");
    assert_eq!(
        result,
        format!(
            "Error: touch: cannot touch '{}': Permission denied\nexit code 1",
            escaped.display()
        )
    );
    let (_dir, away, result) = touch_both(Some("off"), None).await;
    assert!(away.path().join("escaped").exists(), "{result}");
    assert_eq!(result, "(no output)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_users_configuration_adds_writable_paths_or_turns_the_sandbox_off() {
    let adds = |away: &Path| format!("[sandbox]\nwritable = [{:?}]\n", away.display().to_string());
    let (_dir, away, result) = touch_both(None, Some(&adds)).await;
    assert!(away.path().join("escaped").exists(), "{result}");
    let off = |_: &Path| "[sandbox]\nmode = \"off\"\n".to_owned();
    let (_dir, away, result) = touch_both(None, Some(&off)).await;
    assert!(away.path().join("escaped").exists(), "{result}");
    // The flag wins over the file.
    let (_dir, away, result) = touch_both(Some("workspace-write"), Some(&off)).await;
    assert!(!away.path().join("escaped").exists(), "{result}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repository_cannot_loosen_the_sandbox() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("orchestrate.toml"),
        "[sandbox]\nmode = \"off\"\n",
    )
    .unwrap();
    let mock = MockLlm::start(vec![Reply::text("never asked")]).await;
    let out = run_on(&mock, dir.path(), &["hi"], &[]).await;
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr),
        format!(
            "orchestrate: {}: [sandbox] is honoured only in ~/.config/orchestrate/config.toml (a repository's orchestrate.toml must not loosen the sandbox)\n",
            dir.path()
                .canonicalize()
                .unwrap()
                .join("orchestrate.toml")
                .display()
        )
    );
    assert_eq!(mock.request_count(), 0);
}

/// Whether process `pid` is still there (a zombie runs nothing, and counts as gone).
fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, after)| !after.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

async fn assert_gone(pid: i32) {
    let deadline = Instant::now() + DEADLINE;
    while alive(pid) {
        assert!(
            Instant::now() < deadline,
            "process {pid} survived its command"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn read_pid(path: &Path) -> i32 {
    std::fs::read_to_string(path)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setsid_sleepers_die_with_a_command_that_ends_and_with_one_that_times_out() {
    // One leaves its session; the other's parent leaves it and lives on (so the
    // sleeper is no orphan until its parent is killed).
    // Each sleeper writes its pid as the machine sees it (`/proc/self` is the
    // host's view; `$!` would be the command's own process namespace's).
    let escape = "setsid sh -c 'readlink /proc/self > {n}-a; exec sleep 300' & \
                  setsid sh -c 'sh -c \"readlink /proc/self > {n}-b; exec sleep 300\" & wait' & \
                  while [ ! -s {n}-a ] || [ ! -s {n}-b ]; do sleep 0.01; done";
    let ends = escape.replace("{n}", "ends");
    let times_out = format!("{}; sleep 300", escape.replace("{n}", "late"));
    let mock = MockLlm::start(vec![
        Reply::tool_calls(&[("b1", "Bash", json!({"command": ends}))]),
        Reply::tool_calls(&[("b2", "Bash", json!({"command": times_out, "timeout": 5000}))]),
        Reply::text("done"),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "--permission-mode",
        "bypassPermissions",
        "leave things running",
    ];
    let out = run_on(&mock, dir.path(), &args, &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let results = tool_results(&mock);
    assert_eq!(results[0], "(no output)");
    assert_eq!(
        results[1],
        "Error: timed out after 5000 ms; the command and every process it started were killed"
    );
    for name in ["ends-a", "ends-b", "late-a", "late-b"] {
        assert_gone(read_pid(&dir.path().join(name))).await;
    }
}

/// The `sleep` processes whose command line holds `mark`.
fn marked(mark: &str) -> Vec<i32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if comm.trim() == "sleep" && String::from_utf8_lossy(&cmdline).contains(mark) {
            found.push(pid);
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_die_with_orchestrate_when_it_is_killed() {
    let mark = format!("sleeper-{}", orchestrate::SessionId::new());
    // One sleeper in the command's own group, one that left it with setsid.
    let command = format!(
        "setsid bash -c 'exec -a {mark}-detached sleep 300' & exec -a {mark}-own sleep 300"
    );
    let mock = MockLlm::start(vec![
        Reply::tool_calls(&[("b1", "Bash", json!({"command": command}))]),
        Reply::text("never"),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let args = ["--permission-mode", "bypassPermissions", "sleep"];
    let mut child = command_on(&mock, dir.path(), &args, &[])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + DEADLINE;
    let sleepers = loop {
        let found = marked(&mark);
        if found.len() == 2 {
            break found;
        }
        assert!(Instant::now() < deadline, "the sleepers never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    child.start_kill().unwrap();
    child.wait().await.unwrap();
    for pid in sleepers {
        assert_gone(pid).await;
    }
}
