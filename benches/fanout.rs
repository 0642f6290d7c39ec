//! Fan-out scaling: N concurrent sessions (N = 100, 1000, 2000), each three turns
//! by default (two tool turns, then the answer; `FANOUT_SESSION_TURNS`) against the
//! mock LLM with 50 ms to first token and then 20 chunks 5 ms apart, so one turn
//! ideally takes 150 ms and a session 450 ms. Prints wall time over that ideal, and
//! the peak RSS and CPU of the process that ran the sessions.
//!
//! Run with `cargo bench --bench fanout` (optionally `-- 100 1000` to pick sizes).
//! `FANOUT_CASES=cli` runs the `orchestrate` binary itself on a pseudo-terminal
//! (`script`), drawing its live tree, for the Task fan-out of `FANOUT_CLI` sizes:
//! once with workers whose tool turn has no effects, once with workers that
//! Write a file of their own and run a command on it (`wc -l`, in the sandbox).
//! `FANOUT_CASES=writers` runs it with 8 such writers in a git repository of 1 000
//! files, sharing its tree (`--isolation none`) or each in a private checkout
//! merged back (`--isolation worktree`).
//! `FANOUT_TOOLS=standard` gives the session fan-out's agents the standard tools
//! besides Probe, so every request carries their specs, as a real agent's does.
//!
//! The mock server runs in a child process of its own and each N runs in a fresh
//! child, so the RSS measured is the orchestrator's alone and never a previous
//! size's high-water mark.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr
)]

// The allocator the orchestrate binary ships with, so the numbers are the product's
// (the system's with `--features heap-profile`, so that heaptrack sees every
// allocation).
#[cfg(not(feature = "heap-profile"))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[path = "../tests/support/mock_llm.rs"]
mod mock_llm;

mod support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use mock_llm::{
    End, MockLlm, Reply, StreamReply, ev_finish, ev_role, ev_text, ev_tool_args, ev_tool_start,
    ev_usage,
};
use orchestrate::{
    Concurrency, EventKind, OpenAiClient, OpenAiConfig, Outcome, Runtime, RuntimeConfig,
    SessionSpec, Tool, ToolContext, ToolError, ToolRegistry,
};
use serde_json::{Value, json};

const TTFT: Duration = Duration::from_millis(50);
const CHUNK_DELAY: Duration = Duration::from_millis(5);
const CHUNKS: usize = 20;
/// Turns of each session of the session fan-out (`FANOUT_SESSION_TURNS`, default
/// 3: two tool turns and the answer; 1 is the answer alone, which tells a model
/// turn's CPU from a tool call's).
fn session_turns() -> u32 {
    std::env::var("FANOUT_SESSION_TURNS")
        .ok()
        .and_then(|t| t.parse().ok())
        .filter(|t| *t >= 1)
        .unwrap_or(3)
}

/// The system prompts of the Task fan-out: one lead, many workers.
const LEAD: &str = "You are a bench lead.";
const WORKER: &str = "You are a bench worker.";
/// The session fan-out's agents' system prompt.
const AGENT: &str = "You are a benchmark agent.";
/// Turns of each worker (a tool turn, then the answer).
const WORKER_TURNS: u32 = 2;
/// Task calls the lead issues in its single turn.
const TASKS: usize = 500;
/// Sub-agents of the rate-limit case.
const LIMITED_TASKS: usize = 200;
/// Idle sessions of the memory case.
const IDLE: usize = 10_000;

fn main() {
    // As the orchestrate binary does at start (src/main.rs), for every row.
    let _ = rustix::thread::disable_transparent_huge_pages(true);
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    match args.first().map(String::as_str) {
        Some("mock") => serve_mock(),
        Some("mock-limited") => serve_limited_mock(),
        Some("run") => run_sessions(&args[1], args[2].parse().unwrap()),
        Some("base") => run_bare(&args[1], args[2].parse().unwrap()),
        Some("base-tasks") => run_bare_tasks(&args[1], args[2].parse().unwrap()),
        Some("tasks") => run_tasks(&args[1], args[2].parse().unwrap()),
        Some("cli") => run_cli(&args[1], args[2].parse().unwrap(), Work::Read),
        Some("cli-write") => run_cli(&args[1], args[2].parse().unwrap(), Work::Write),
        Some("cli-shared") => run_cli(&args[1], args[2].parse().unwrap(), Work::Shared),
        Some("cli-isolated") => run_cli(&args[1], args[2].parse().unwrap(), Work::Isolated),
        Some("idle") => run_idle(args.get(1).map_or(IDLE, |n| n.parse().unwrap())),
        _ => drive(&args),
    }
}

/// The parent: starts the mock, then one child per size and client, and prints a
/// table. The `bare HTTP` rows run the same requests with plain reqwest and no
/// orchestration at all: the floor this machine allows, with the mock sharing its
/// cores.
fn drive(sizes: &[String]) {
    // `FANOUT_CASES=sessions,tasks,idle,rate` picks cases (default: all).
    let cases = std::env::var("FANOUT_CASES").unwrap_or_default();
    let case = |name: &str| cases.is_empty() || cases.split(',').any(|c| c == name);
    let sizes: Vec<usize> = if !case("sessions") {
        Vec::new()
    } else if sizes.is_empty() {
        vec![100, 1000, 2000]
    } else {
        sizes.iter().map(|s| s.parse().unwrap()).collect()
    };
    let me = std::env::current_exe().unwrap();
    // Every child's workspace goes here, deleted when the bench ends (see
    // `workspace`).
    let workdir = tempfile::tempdir().unwrap();
    let children_env = [("FANOUT_WORKDIR", workdir.path().as_os_str().to_owned())];
    let mut mock = Command::new(&me)
        .arg("mock")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut url = String::new();
    BufReader::new(mock.stdout.take().unwrap())
        .read_line(&mut url)
        .unwrap();
    let url = url.trim().to_owned();
    let turns = session_turns();
    let ideal = (TTFT + CHUNK_DELAY * CHUNKS as u32) * turns;
    println!(
        "fanout: {turns} turns/session, ttft {TTFT:?}, {CHUNKS} chunks {CHUNK_DELAY:?} apart; ideal {ideal:?}"
    );
    println!(
        "{:>6} {:<12} {:>10} {:>8} {:>12} {:>9}",
        "N", "client", "wall", "ratio", "peak RSS", "CPU"
    );
    let mut failures = 0;
    // `FANOUT_ROUNDS=3` runs every row three times in this one invocation, so that
    // no run follows the deletion of another's workspaces (see `workspace`).
    let rounds: usize = std::env::var("FANOUT_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(1);
    let child = Child {
        me: &me,
        env: &children_env,
        url: &url,
    };
    for _ in 0..rounds {
        for n in &sizes {
            for (mode, label) in [("run", "orchestrate"), ("base", "bare HTTP")] {
                failures += u32::from(!child.row(mode, label, *n, ideal));
            }
        }
    }
    let ideal = (TTFT + CHUNK_DELAY * CHUNKS as u32) * (2 + WORKER_TURNS);
    let tasks: Vec<usize> = match std::env::var("FANOUT_TASKS") {
        Ok(list) => list.split(',').map(|n| n.parse().unwrap()).collect(),
        Err(_) => vec![TASKS],
    };
    if case("tasks") {
        println!(
            "\ntask fan-out: one lead turn issuing N Task calls, each worker {WORKER_TURNS} turns, then the lead's answer; ideal {ideal:?}"
        );
        for _ in 0..rounds {
            for n in &tasks {
                for (mode, label) in [("tasks", "Task calls"), ("base-tasks", "bare HTTP")] {
                    failures += u32::from(!child.row(mode, label, *n, ideal));
                }
            }
        }
    }
    // The binary's cases: a title, then for each round, each size and each
    // kind of work, a row.
    let mut binary = |title: String, sizes: &[usize], works: &[Work]| {
        println!("\n{title}; ideal {ideal:?}");
        println!(
            "{:>6} {:<12} {:>10} {:>8} {:>12} {:>9}",
            "N", "client", "wall", "ratio", "to terminal", "CPU"
        );
        for _ in 0..rounds {
            for n in sizes {
                for work in works {
                    failures += u32::from(!child.cli_row(*n, ideal, *work));
                }
            }
        }
    };
    if case("cli") {
        // `FANOUT_CLI=500,2000`: the Task fan-out's sizes for the binary.
        let sizes: Vec<usize> = std::env::var("FANOUT_CLI")
            .unwrap_or_else(|_| "500,2000".into())
            .split(',')
            .map(|n| n.parse().unwrap())
            .collect();
        let title = "the orchestrate binary on a terminal (50 rows), the same Task fan-out";
        binary(title.into(), &sizes, &[Work::Read, Work::Write]);
    }
    if case("writers") {
        let title = format!(
            "8 writers in a git repository of {REPOSITORY_FILES} files, sharing its tree or each in a private checkout"
        );
        binary(title, &[8], &[Work::Shared, Work::Isolated]);
    }
    let _ = mock.kill();
    let _ = mock.wait();
    if case("idle") {
        let out = Command::new(&me)
            .envs(children_env.clone())
            .args(["idle"])
            .output()
            .unwrap();
        print!("\n{}", String::from_utf8_lossy(&out.stdout));
        if !out.status.success() {
            eprintln!("idle case failed: {}", String::from_utf8_lossy(&out.stderr));
            failures += 1;
        }
    }
    if case("rate")
        && let Err(e) = rate_limited(&me)
    {
        eprintln!("rate-limit case failed: {e}");
        failures += 1;
    }
    // A size that failed measured nothing: the run as a whole failed.
    if failures > 0 {
        std::process::exit(1);
    }
}

/// How the parent starts a measuring child.
struct Child<'a> {
    me: &'a std::path::Path,
    env: &'a [(&'static str, std::ffi::OsString)],
    url: &'a str,
}

impl Child<'_> {
    /// Runs the child `mode` at size `n` and prints its row; false if it failed.
    fn row(&self, mode: &str, label: &str, n: usize, ideal: Duration) -> bool {
        let out = self.run(mode, n);
        if !out.status.success() {
            eprintln!(
                "N={n} {label} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            return false;
        }
        let line = String::from_utf8_lossy(&out.stdout);
        let mut parts = line.split_whitespace();
        let wall_ms: f64 = parts.next().unwrap().parse().unwrap();
        let rss_kib: u64 = parts.next().unwrap().parse().unwrap();
        let cpu: f64 = parts.next().unwrap().parse().unwrap();
        println!(
            "{n:>6} {label:<12} {wall_ms:>8.0}ms {:>8.3} {:>9.1} MB {:>7.0}ms",
            wall_ms / ideal.as_secs_f64() / 1000.0,
            rss_kib as f64 / 1024.0,
            cpu
        );
        true
    }

    /// Runs the binary's fan-out of `n` under a child and prints its row; false
    /// if it failed.
    fn cli_row(&self, n: usize, ideal: Duration, work: Work) -> bool {
        let out = self.run(work.mode(), n);
        let line = String::from_utf8_lossy(&out.stdout);
        let parts: Vec<f64> = (line.split_whitespace())
            .filter_map(|p| p.parse().ok())
            .collect();
        let [wall_ms, bytes, cpu] = parts[..] else {
            let err = String::from_utf8_lossy(&out.stderr);
            eprintln!("N={n} orchestrate on a terminal failed: {line}{err}");
            return false;
        };
        println!(
            "{n:>6} {:<12} {wall_ms:>8.0}ms {:>8.3} {:>9.1} MB {cpu:>7.0}ms",
            work.label(),
            wall_ms / ideal.as_secs_f64() / 1000.0,
            bytes / 1e6,
        );
        true
    }

    /// The child `mode` at size `n`, run to its end.
    fn run(&self, mode: &str, n: usize) -> std::process::Output {
        Command::new(self.me)
            .envs(self.env.iter().cloned())
            .args([mode, self.url, &n.to_string()])
            .output()
            .unwrap()
    }
}

/// What the workers of the binary's fan-out do in their tool turn.
#[derive(Clone, Copy, Debug)]
enum Work {
    /// Call a tool that has no effects.
    Read,
    /// Write a file of their own (about 2 KB), then run a command on it: each
    /// call waits for its journal's sync, the command runs in the sandbox.
    Write,
    /// As `Write`, in a git repository, sharing its tree (`--isolation none`).
    Shared,
    /// As `Write`, in a git repository, each worker in a private checkout
    /// merged back (`--isolation worktree`).
    Isolated,
}

impl Work {
    fn mode(self) -> &'static str {
        match self {
            Self::Read => "cli",
            Self::Write => "cli-write",
            Self::Shared => "cli-shared",
            Self::Isolated => "cli-isolated",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Self::Read => "read-only",
            Self::Write => "Write+Bash",
            Self::Shared => "shared tree",
            Self::Isolated => "isolated",
        }
    }

    /// The lead's prompt for `n` pieces.
    fn prompt(self, n: usize) -> String {
        match self {
            Self::Read => format!("do {n} pieces"),
            Self::Write | Self::Shared | Self::Isolated => format!("write {n} pieces"),
        }
    }

    /// The `--isolation` it runs with, when it runs in a repository.
    fn isolation(self) -> Option<&'static str> {
        match self {
            Self::Read | Self::Write => None,
            Self::Shared => Some("none"),
            Self::Isolated => Some("worktree"),
        }
    }
}

/// The `orchestrate` binary on a terminal: `script` gives it a pseudo-terminal of
/// 50 rows, so it draws its live tree, and its lead's prompt asks the mock for `n`
/// Task calls whose workers do `work`. Prints the wall ms from the start of the
/// process to its exit, the bytes it wrote to the terminal, and the CPU ms of the
/// binary (and of `script`, which copies those bytes, and of the commands).
fn run_cli(url: &str, n: usize, work: Work) {
    let workspace = workspace();
    write_worker_role(&workspace.path().join("agents"));
    let isolation = match work.isolation() {
        Some(mode) => {
            repository(workspace.path());
            format!(" --isolation {mode}")
        }
        None => String::new(),
    };
    let command = format!(
        "stty rows 50 cols 160; exec {} --base-url {url} --model mock-model --max-parallel {n} --permission-mode bypassPermissions{isolation} '{}'",
        env!("CARGO_BIN_EXE_orchestrate"),
        work.prompt(n),
    );
    let cpu = support::stat_ms(13);
    let start = Instant::now();
    let out = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .current_dir(workspace.path())
        // Its journals go with the workspace, not into the machine's state folder.
        .env("XDG_STATE_HOME", workspace.path().join("state"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let wall = start.elapsed();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && shown.contains("merged0"),
        "the run did not answer: {}",
        shown.chars().rev().take(2000).collect::<String>()
    );
    if let Work::Write | Work::Shared | Work::Isolated = work {
        // Isolated, the workers' files are merged back into the tree.
        let written = std::fs::read_dir(workspace.path().join("work")).map_or(0, |d| d.count());
        assert_eq!(
            written,
            n * (WORKER_TURNS as usize - 1),
            "every worker wrote"
        );
    }
    println!(
        "{:.1} {} {}",
        wall.as_secs_f64() * 1000.0,
        out.stdout.len(),
        support::stat_ms(13) - cpu
    );
}

/// Files of the repository the writers' cases run in.
const REPOSITORY_FILES: usize = 1000;

/// Makes `dir` a git repository of [`REPOSITORY_FILES`] committed files (4 KB
/// each, in 10 folders), its roles and state ignored.
fn repository(dir: &std::path::Path) {
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .current_dir(dir)
            .args(args)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_AUTHOR_NAME", "b")
            .env("GIT_AUTHOR_EMAIL", "b@x")
            .env("GIT_COMMITTER_NAME", "b")
            .env("GIT_COMMITTER_EMAIL", "b@x")
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}");
    };
    git(&["init", "-q", "-b", "main"]);
    for f in 0..REPOSITORY_FILES {
        let folder = dir.join(format!("src/m{}", f % 10));
        std::fs::create_dir_all(&folder).unwrap();
        let body = format!("fn f{f}() -> u32 {{ {f} }}\n").repeat(160);
        std::fs::write(folder.join(format!("f{f}.rs")), body).unwrap();
    }
    std::fs::write(dir.join(".gitignore"), "state/\nagents/\n").unwrap();
    git(&["add", "."]);
    git(&["commit", "-q", "-m", "start"]);
}

/// Writes the Task fan-out's `worker` role into `dir`.
fn write_worker_role(dir: &std::path::Path) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(
        dir.join("worker.md"),
        format!("---\nname: worker\ndescription: Does one piece.\n---\n{WORKER}\n"),
    )
    .unwrap();
}

/// The bare client's request: posts `body` and reads the streamed answer to its
/// end, as a client that does no orchestration at all.
async fn post_and_read(http: &reqwest::Client, endpoint: &str, body: &Value) {
    let response = http.post(endpoint).json(body).send().await.unwrap();
    let mut bytes = response.bytes_stream();
    while let Some(chunk) = futures::StreamExt::next(&mut bytes).await {
        chunk.unwrap();
    }
}

/// A tool's spec as orchestrate sends it.
fn spec_json(name: &str, description: &str, parameters: &Value) -> Value {
    json!({"type": "function", "function": {"name": name, "description": description, "parameters": parameters}})
}

/// Probe's spec as orchestrate sends it.
fn probe_spec() -> Value {
    spec_json(Probe.name(), Probe.description(), &Probe.input_schema())
}

/// The tools of the session fan-out's agents: Probe, and with
/// `FANOUT_TOOLS=standard` the standard tools before it (their specs are about
/// 14 KB of JSON in every request, as a real agent's are).
fn agent_tools() -> ToolRegistry {
    match std::env::var("FANOUT_TOOLS").as_deref() {
        Ok("standard") => ToolRegistry::standard().with(Probe),
        _ => ToolRegistry::new().with(Probe),
    }
}

/// The specs of `tools` as orchestrate sends them.
fn tools_json(tools: &ToolRegistry) -> Value {
    (tools.specs().iter())
        .map(|t| spec_json(&t.name, &t.description, &t.parameters))
        .collect()
}

/// A bare agent's `turns` requests, with the bodies orchestrate sends, built by
/// hand: its system prompt, its prompt and its `tools` (an array of specs), each
/// request after the first with the tool call the mock made and Probe's result.
async fn bare_agent(
    http: &reqwest::Client,
    endpoint: &str,
    tools: &Value,
    (system, prompt): (&str, String),
    turns: u32,
) {
    let mut messages = vec![
        json!({"role": "system", "content": system}),
        json!({"role": "user", "content": prompt}),
    ];
    for turn in 0..turns {
        let body =
            json!({"model": "mock-model", "messages": messages, "stream": true, "tools": tools});
        post_and_read(http, endpoint, &body).await;
        if turn + 1 == turns {
            break;
        }
        let args = json!({"path": format!("src/module_{turn}.rs"), "pattern": "fn main"});
        let call = json!({"id": format!("call_{turn}"), "type": "function", "function": {"name": "probe", "arguments": args.to_string()}});
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [call]}));
        messages.push(json!({"role": "tool", "tool_call_id": format!("call_{turn}"), "content": format!("{} looks fine", args["path"])}));
    }
}

/// A baseline child: N tasks, each making the same streamed requests as a session
/// of the session fan-out (orchestrate's bodies) with plain reqwest and reading the
/// bodies to the end; prints wall ms, peak RSS KiB and CPU ms.
fn run_bare(url: &str, n: usize) {
    let (wall, cpu) = runtime(threads("FANOUT_RUNNER_THREADS")).block_on(async {
        let http = reqwest::Client::new();
        let endpoint = format!("{url}/chat/completions");
        let tools = tools_json(&agent_tools());
        let cpu = cpu_ms();
        let start = Instant::now();
        let tasks: Vec<_> = (0..n)
            .map(|_| {
                let (http, endpoint, tools) = (http.clone(), endpoint.clone(), tools.clone());
                tokio::spawn(async move {
                    let agent = (AGENT, "inspect the modules".to_owned());
                    bare_agent(&http, &endpoint, &tools, agent, session_turns()).await;
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        (start.elapsed(), cpu)
    });
    report(wall, cpu);
}

/// The Task fan-out's baseline child: the requests of the Task fan-out of `n`
/// with plain reqwest and no orchestration: the lead's turn (its `n` calls), then
/// `n` workers of two turns each at once, then the lead's answer; prints wall ms,
/// peak RSS KiB and CPU ms.
fn run_bare_tasks(url: &str, n: usize) {
    let (wall, cpu) = runtime(threads("FANOUT_RUNNER_THREADS")).block_on(async {
        let http = reqwest::Client::new();
        let endpoint = format!("{url}/chat/completions");
        // The bodies orchestrate sends, built by hand: the same tools (Probe's
        // spec, and Task's with its schema; its description, which lists the
        // roles in orchestrate, is a sentence here), each worker's second request
        // with its tool call and result, the lead's last with every Task call and
        // result.
        let probe = probe_spec();
        let task = spec_json(
            "Task",
            "Starts a sub-agent with one of these roles on a task: - worker: Does one piece.",
            &json!(schemars::schema_for!(orchestrate::task::TaskInput)),
        );
        let cpu = cpu_ms();
        let start = Instant::now();
        let lead = |messages: &[Value]| json!({"model": "mock-model", "messages": messages, "stream": true, "tools": [probe.clone(), task.clone()]});
        let mut messages = vec![
            json!({"role": "system", "content": LEAD}),
            json!({"role": "user", "content": format!("do {n} pieces")}),
        ];
        post_and_read(&http, &endpoint, &lead(&messages)).await;
        let workers: Vec<_> = (0..n)
            .map(|i| {
                let (http, endpoint, tools) = (http.clone(), endpoint.clone(), json!([probe]));
                tokio::spawn(async move {
                    let worker = (WORKER, format!("do piece {i}"));
                    bare_agent(&http, &endpoint, &tools, worker, WORKER_TURNS).await;
                })
            })
            .collect();
        for worker in workers {
            worker.await.unwrap();
        }
        let calls: Vec<Value> = (0..n)
            .map(|i| {
                let args = json!({"description": format!("piece {i}"), "prompt": format!("do piece {i}"), "subagent_type": "worker"});
                json!({"id": format!("task_{i}"), "type": "function", "function": {"name": "Task", "arguments": args.to_string()}})
            })
            .collect();
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": calls}));
        for i in 0..n {
            let result = "word0 word1 word2 word3 word4 word5 word6 word7 word8 word9 word10 word11 word12 word13 word14 word15 word16 \n\n[worker: 2 turns, 1 tool call, 240 tokens]";
            messages.push(json!({"role": "tool", "tool_call_id": format!("task_{i}"), "content": result}));
        }
        post_and_read(&http, &endpoint, &lead(&messages)).await;
        (start.elapsed(), cpu)
    });
    report(wall, cpu);
}

fn runtime(threads: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .unwrap()
}

/// The rate-limit case: the Task fan-out of [`LIMITED_TASKS`] sub-agents against a
/// mock that answers 429 with Retry-After 1 to three in ten of the requests it
/// gets (each distinct request at most once, chosen by a hash of its body, so every
/// run rejects the same ones). The minimum is every turn's request once.
fn rate_limited(me: &std::path::Path) -> Result<(), String> {
    let mut mock = Command::new(me)
        .arg("mock-limited")
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    let mut lines = BufReader::new(mock.stdout.take().unwrap()).lines();
    let url = lines.next().ok_or("no url")?.map_err(|e| e.to_string())?;
    let out = Command::new(me)
        .args(["tasks", &url, &LIMITED_TASKS.to_string()])
        .output()
        .map_err(|e| e.to_string())?;
    let _ = mock.kill();
    let _ = mock.wait();
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    let answers: Vec<String> = lines.map_while(Result::ok).collect();
    let limited = answers.iter().filter(|a| *a == "429").count();
    let minimum = 2 + LIMITED_TASKS * WORKER_TURNS as usize;
    let line = String::from_utf8_lossy(&out.stdout);
    let wall_ms: f64 = line
        .split_whitespace()
        .next()
        .ok_or("no time")?
        .parse()
        .map_err(|_| "bad time")?;
    println!(
        "
rate limits: {LIMITED_TASKS} sub-agents, 3 in 10 distinct requests answered 429 once (Retry-After 1)
{:>6} requests ({limited} answered 429) = {:.3} x the minimum {minimum}; wall {wall_ms:.0}ms",
        answers.len(),
        answers.len() as f64 / minimum as f64
    );
    Ok(())
}

/// The rate-limiting mock child: prints its base URL, then one line per request
/// (`429` or `200`), serving until killed.
fn serve_limited_mock() {
    use std::collections::HashSet;
    use std::sync::Mutex;

    let rejected = Mutex::new(HashSet::new());
    runtime(threads("FANOUT_MOCK_THREADS")).block_on(async move {
        let mock = MockLlm::start_with(move |request, _| {
            let text = request.body.to_string();
            let hash = text.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
            });
            if hash % 10 < 3 && rejected.lock().unwrap().insert(hash) {
                println!("429");
                return Reply::rate_limited(1);
            }
            println!("200");
            reply_for(&request.body)
        })
        .await;
        println!("{}", mock.base_url());
        std::future::pending::<()>().await;
    });
}

/// The mock child: prints its base URL, then serves until killed.
fn serve_mock() {
    runtime(threads("FANOUT_MOCK_THREADS")).block_on(async {
        let mock = MockLlm::start_with(|request, _| reply_for(&request.body)).await;
        println!("{}", mock.base_url());
        std::future::pending::<()>().await;
    });
}

/// Turn k of a session is decided by how many assistant messages it already sent.
/// A lead is known by its prompt, `do N pieces` (the `orchestrate` binary's lead,
/// with its own system prompt, is one too).
fn reply_for(body: &Value) -> Reply {
    let system = body["messages"][0]["content"].as_str().unwrap_or("");
    if pieces(body).is_some() {
        return lead_reply(body);
    }
    let prompt = body["messages"][1]["content"].as_str().unwrap_or("");
    let writing = prompt.strip_prefix("write piece ");
    let turns = if system == WORKER || prompt.starts_with("do piece ") || writing.is_some() {
        WORKER_TURNS
    } else {
        session_turns()
    };
    let done = body["messages"]
        .as_array()
        .map_or(0, |m| m.iter().filter(|m| m["role"] == "assistant").count());
    let mut chunks = vec![ev_role()];
    if let Some(piece) = writing.filter(|_| done + 1 < turns as usize) {
        // A file of its own, then a command on it, in one turn.
        let file = format!("work/piece_{piece}_{done}.rs");
        let content = "fn step() -> u32 { 40 + 2 }\n".repeat(70);
        let write = json!({"file_path": file, "content": content}).to_string();
        let bash = json!({"command": format!("wc -l {file}")}).to_string();
        // Role, the Write's start and arguments, the Bash call's start and
        // arguments, finish, usage: CHUNKS in all.
        chunks.push(ev_tool_start(0, format!("call_{done}_0"), "Write"));
        let bytes: Vec<char> = write.chars().collect();
        let step = bytes.len().div_ceil(CHUNKS - 6);
        chunks.extend(
            bytes
                .chunks(step)
                .map(|c| ev_tool_args(0, c.iter().collect::<String>())),
        );
        chunks.push(ev_tool_start(1, format!("call_{done}_1"), "Bash"));
        chunks.push(ev_tool_args(1, bash));
        chunks.push(ev_finish("tool_calls"));
    } else if done + 1 < turns as usize {
        let args =
            json!({"path": format!("src/module_{done}.rs"), "pattern": "fn main"}).to_string();
        chunks.push(ev_tool_start(0, format!("call_{done}"), "probe"));
        // Role, start, the arguments, finish, usage: CHUNKS in all.
        let step = args.len().div_ceil(CHUNKS - 4);
        let bytes: Vec<char> = args.chars().collect();
        chunks.extend(
            bytes
                .chunks(step)
                .map(|c| ev_tool_args(0, c.iter().collect::<String>())),
        );
        chunks.push(ev_finish("tool_calls"));
    } else {
        // Role, the words, finish, usage: CHUNKS in all.
        chunks.extend((0..CHUNKS - 3).map(|i| ev_text(format!("word{i} "))));
        chunks.push(ev_finish("stop"));
    }
    chunks.push(ev_usage(100, 20));
    Reply::Stream(StreamReply {
        chunks,
        ttft: TTFT,
        delay: CHUNK_DELAY,
        end: End::Done,
    })
}

/// A cheap read-only tool, so the measurement is the orchestration, not the tool.
#[derive(Debug)]
struct Probe;

impl Tool for Probe {
    fn name(&self) -> &str {
        "probe"
    }
    fn description(&self) -> &str {
        "Checks a path."
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {"path": {"type": "string"}}})
    }
    fn read_only(&self) -> bool {
        true
    }
    fn concurrency(&self, _input: &Value) -> Concurrency {
        Concurrency::Safe
    }
    fn call<'a>(
        &'a self,
        input: Value,
        _ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(async move { Ok(format!("{} looks fine", input["path"])) })
    }
}

/// The spec of the session fan-out's agent `i`.
fn agent(i: usize) -> SessionSpec {
    let mut spec = SessionSpec::new(format!("agent{i}"), "mock-model", AGENT);
    spec.tools = agent_tools();
    spec
}

/// A runner child: N sessions through one Runtime; prints wall ms, peak RSS KiB and
/// CPU ms.
fn run_sessions(url: &str, n: usize) {
    let workspace = workspace();
    let (wall, cpu) = runtime(threads("FANOUT_RUNNER_THREADS")).block_on(async {
        let client =
            Arc::new(OpenAiClient::new(OpenAiConfig::new(url, Some("sk-bench".into()))).unwrap());
        let orchestrator = Runtime::start(config(workspace.path(), client))
            .await
            .unwrap();
        // Outcomes only, as the bare client waits for its tasks: any other event
        // would wake this thread for nothing.
        let mut events = orchestrator.subscribe_terminal();
        let mut ids = Vec::with_capacity(n);
        for i in 0..n {
            ids.push(orchestrator.start_session(agent(i)).await.unwrap());
        }
        let cpu = cpu_ms();
        let start = Instant::now();
        for id in &ids {
            orchestrator.prompt(*id, "inspect the modules");
        }
        let mut finished = 0;
        while finished < n {
            let event = events.recv().await.unwrap();
            if let EventKind::Terminal { outcome, .. } = event.kind {
                match outcome {
                    Outcome::Completed { stats, .. } => assert_eq!(stats.turns, session_turns()),
                    other => panic!("a session did not finish: {other:?}"),
                }
                finished += 1;
            }
        }
        let wall = start.elapsed();
        orchestrator.shutdown().await;
        (wall, cpu)
    });
    report(wall, cpu);
}

/// The idle case: `n` sessions started (each with its journal, its actor and its
/// queue) and never prompted; prints the resident memory they added, in bytes per
/// session.
fn run_idle(n: usize) {
    let workspace = workspace();
    runtime(threads("FANOUT_RUNNER_THREADS")).block_on(async {
        // Never called: idle sessions send nothing.
        let client = Arc::new(
            OpenAiClient::new(OpenAiConfig::new(
                "http://127.0.0.1:9",
                Some("sk-bench".into()),
            ))
            .unwrap(),
        );
        let orchestrator = Runtime::start(config(workspace.path(), client))
            .await
            .unwrap();
        // One session first, so that what every session shares (the runtime's
        // threads, the journal writer, code pages) is in the baseline.
        let warm = SessionSpec::new("warm", "mock-model", AGENT);
        orchestrator.start_session(warm).await.unwrap();
        let before = rss_kib();
        let start = Instant::now();
        for i in 0..n {
            orchestrator.start_session(agent(i)).await.unwrap();
        }
        let took = start.elapsed();
        let after = rss_kib();
        let added = after.saturating_sub(before);
        let per = added * 1024 / n as u64;
        println!(
            "{n} idle sessions: +{:.1} MB resident, {per} bytes per session; started in {:.0} ms",
            added as f64 / 1024.0,
            took.as_secs_f64() * 1000.0
        );
        orchestrator.shutdown().await;
    });
}

/// The resident set now, in KiB.
fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// A child's workspace. Under the parent's `FANOUT_WORKDIR` it is left for the
/// parent to delete once every child has run: deleting thousands of journals
/// between children made the next child's journal files slow to create (ext4
/// without a journal skips inodes deleted in the last minutes when it allocates),
/// which measured the bench's cleanup, not the orchestrator.
fn workspace() -> tempfile::TempDir {
    let mut builder = tempfile::Builder::new();
    builder.disable_cleanup(std::env::var_os("FANOUT_WORKDIR").is_some());
    match std::env::var_os("FANOUT_WORKDIR") {
        Some(dir) => builder.tempdir_in(dir).unwrap(),
        None => builder.tempdir().unwrap(),
    }
}

/// A child's one line for the parent: wall ms, peak RSS KiB, CPU ms.
/// Prints the child's row: wall time, peak RSS, and the CPU time used since
/// `cpu_at_start` (taken just before the first prompt: the runtime's start and
/// the set-up are not counted; its shutdown, the journals' last writes included,
/// is).
fn report(wall: Duration, cpu_at_start: f64) {
    println!(
        "{:.1} {} {:.0}",
        wall.as_secs_f64() * 1000.0,
        peak_rss_kib(),
        cpu_ms() - cpu_at_start
    );
}

/// The CPU time this process used so far (user and system), in ms.
fn cpu_ms() -> f64 {
    support::stat_ms(11)
}

fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn threads(var: &str) -> usize {
    support::env_or(var, 2)
}

/// How many pieces a lead's prompt asks for: `do 200 pieces`.
fn pieces(body: &Value) -> Option<usize> {
    let prompt = body["messages"][1]["content"].as_str()?;
    match prompt.split_whitespace().collect::<Vec<_>>()[..] {
        ["do" | "write", n, "pieces"] => n.parse().ok(),
        _ => None,
    }
}

/// The lead: first every Task call at once (packed into the usual number of chunks,
/// so its turn takes the usual time), then, once the results are in, the answer.
fn lead_reply(body: &Value) -> Reply {
    let answered = body["messages"]
        .as_array()
        .is_some_and(|m| m.iter().any(|m| m["role"] == "tool"));
    let tasks = pieces(body).unwrap_or(TASKS);
    let prompt = body["messages"][1]["content"].as_str().unwrap_or("");
    let verb = if prompt.starts_with("write ") {
        "write"
    } else {
        "do"
    };
    let mut chunks = vec![ev_role()];
    if answered {
        chunks.extend((0..CHUNKS - 2).map(|i| ev_text(format!("merged{i} "))));
        chunks.push(ev_finish("stop"));
    } else {
        let per_chunk = tasks.div_ceil(CHUNKS - 2);
        for first in (0..tasks).step_by(per_chunk) {
            let calls: Vec<Value> = (first..(first + per_chunk).min(tasks))
                .map(|i| {
                    let args = json!({"description": format!("piece {i}"), "prompt": format!("{verb} piece {i}"), "subagent_type": "worker"});
                    json!({"index": i, "id": format!("task_{i}"), "type": "function", "function": {"name": "Task", "arguments": args.to_string()}})
                })
                .collect();
            chunks.push(json!({"id": "chatcmpl-bench", "object": "chat.completion.chunk", "model": "mock-model", "choices": [{"index": 0, "delta": {"tool_calls": calls}, "finish_reason": null}]}).to_string());
        }
        chunks.push(ev_finish("tool_calls"));
    }
    chunks.push(ev_usage(100, 20));
    Reply::Stream(StreamReply {
        chunks,
        ttft: TTFT,
        delay: CHUNK_DELAY,
        end: End::Done,
    })
}

/// A Task fan-out child: one lead whose single turn issues `n` Task calls (all
/// allowed to run at once), each worker running two turns; every event goes
/// through the CLI's own live display, drawn to a hidden target, a frame at a time
/// with its 200 ms refresh, as the CLI takes its events on a terminal of 50 rows
/// (the display's height when stderr is not a terminal). Prints wall ms, peak RSS
/// KiB and CPU ms.
fn run_tasks(url: &str, n: usize) {
    use std::sync::RwLock;

    use orchestrate::roles::catalog::Catalog;
    use orchestrate::task::{Caller, Task, TaskEnv};
    use orchestrate::tools::permissions::PermissionMode;
    use orchestrate::ui::display::{Display, Progress};

    let workspace = workspace();
    let roles = workspace.path().join("roles");
    write_worker_role(&roles);
    let (wall, cpu) = runtime(threads("FANOUT_RUNNER_THREADS")).block_on(async {
        let client =
            Arc::new(OpenAiClient::new(OpenAiConfig::new(url, Some("sk-bench".into()))).unwrap());
        let orchestrator = Runtime::start(config(workspace.path(), client))
            .await
            .unwrap();
        let env = Arc::new(TaskEnv::new(
            orchestrator.handle(),
            Arc::new(RwLock::new(Catalog::load(&[roles]))),
            n,
            1,
            ToolRegistry::new().with(Probe),
        ));
        let caller = Caller {
            depth: 0,
            model: "mock-model".into(),
            permission_mode: PermissionMode::BypassPermissions,
            place: "lead".into(),
        };
        let mut spec = SessionSpec::new("lead", "mock-model", LEAD);
        spec.tools = ToolRegistry::new().with(Probe).with(Task::new(env, caller));
        spec.permission_mode = PermissionMode::BypassPermissions;
        let lead = orchestrator.start_session(spec).await.unwrap();
        // As the CLI shows progress: a frame at a time, the lead's end as it comes.
        let mut events = orchestrator.subscribe();
        let mut lead_events = orchestrator.subscribe_session_terminal(lead);
        let mut frame = tokio::time::interval(Duration::from_millis(50));
        frame.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut tick = tokio::time::interval(Duration::from_millis(200));
        let hidden =
            indicatif::MultiProgress::with_draw_target(indicatif::ProgressDrawTarget::hidden());
        let mut display = Display::new(Progress::Live(hidden), Default::default());
        let cpu = cpu_ms();
        let start = Instant::now();
        let prompt = orchestrator.prompt(lead, format!("do {n} pieces"));
        let show = |display: &mut Display, events: &mut orchestrate::events::EventStream| {
            while let Some(event) = events.try_recv() {
                display.show(&event, &mut std::io::sink());
            }
        };
        loop {
            tokio::select! {
                _ = frame.tick() => show(&mut display, &mut events),
                _ = tick.tick() => display.refresh(),
                event = lead_events.recv() => {
                    let event = event.unwrap();
                    if let Some(outcome) = event.kind.answer_to(prompt) {
                        match outcome {
                            Outcome::Completed { .. } => break,
                            other => panic!("the lead did not finish: {other:?}"),
                        }
                    }
                }
            }
        }
        show(&mut display, &mut events);
        let wall = start.elapsed();
        assert_eq!(display.board().rows().len(), n + 1, "every worker ran");
        orchestrator.shutdown().await;
        display.finish(&mut std::io::sink());
        (wall, cpu)
    });
    report(wall, cpu);
}

/// The runtime's configuration for a bench in `workspace`: its state kept in the
/// workspace's temporary folder, not the machine's XDG folders.
fn config(workspace: &std::path::Path, client: Arc<OpenAiClient>) -> RuntimeConfig {
    let mut config = RuntimeConfig::new(workspace, client);
    config.state = Some(orchestrate::state::StateDir::at(
        &workspace.join("state"),
        workspace,
    ));
    config
}
