//! What the benches share: this process's CPU from `/proc`, a setting read
//! from the environment, plain git for a repository's set-up, and for the
//! remote benches `nats-server` (installed as the tests install it), a task
//! and a worker's configuration.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used)]

use std::path::Path;

/// The CPU ms of two adjacent fields of `/proc/self/stat` (clock ticks of
/// 10 ms), counted after the name: 11 this process's own (`utime` and
/// `stime`), 13 its waited-for children's (`cutime` and `cstime`).
pub fn stat_ms(first: usize) -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(first) + ticks(first + 1)) * 10.0
}

/// The number the variable `var` holds, else `default`.
pub fn env_or(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Plain git for the set-up, with no configuration of the machine's.
pub fn git(dir: &Path, args: &[&str]) {
    let out = std::process::Command::new("git")
        .current_dir(dir)
        .args(["-c", "user.name=b", "-c", "user.email=b@b"])
        // No collection started behind the measurements.
        .args(["-c", "gc.auto=0", "-c", "maintenance.auto=false"])
        .args(args)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `nats-server`, installed under the target folder by the tests' script.
pub fn nats_server() -> std::path::PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let cache = root.join("target/tmp/nats-server");
    let status = std::process::Command::new(root.join("tests/support/nats-server.sh"))
        .arg(&cache)
        .status()
        .unwrap();
    assert!(status.success(), "installing nats-server failed");
    cache.join("bin/nats-server")
}

/// A task of run `run` that a coder would be given: a 680-byte system
/// prompt, six tools, a deny rule.
pub fn task(
    run: orchestrate::SessionId,
    prompt: String,
) -> orchestrate::remote::envelope::RemoteTask {
    orchestrate::remote::envelope::RemoteTask {
        run,
        session: orchestrate::SessionId::new(),
        parent: run,
        role: "coder".into(),
        system_prompt: "You are a coder. ".repeat(40),
        tools: Some(
            ["Read", "Write", "Edit", "Bash", "Glob", "Grep"]
                .map(str::to_owned)
                .to_vec(),
        ),
        max_turns: 50,
        prompt,
        permission_mode: orchestrate::tools::permissions::PermissionMode::AcceptEdits,
        deny: vec!["Bash(rm:*)".into()],
        ask: Vec::new(),
        tags: Vec::new(),
        bash: Vec::new(),
        expires: orchestrate::remote::envelope::now() + 600,
        workspace: None,
        hooks: Vec::new(),
        check: None,
    }
}

/// A worker's configuration: joined to `servers`, `slots` at once, trusting
/// `key`.
pub fn worker_config(
    servers: Vec<String>,
    slots: usize,
    key: &nkeys::KeyPair,
) -> orchestrate::remote::worker::WorkerConfig {
    use std::time::Duration;
    orchestrate::remote::worker::WorkerConfig {
        servers,
        slots,
        tags: Vec::new(),
        trusted: vec![key.public_key()],
        max_mode: orchestrate::tools::permissions::PermissionMode::AcceptEdits,
        drain: Duration::from_secs(5),
        name: "bench".into(),
        auth: Default::default(),
        ack_wait: Duration::from_secs(30),
    }
}
