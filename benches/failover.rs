//! How long a run stands still when a server dies: a three-server JetStream
//! cluster on loopback, one worker and one lead joined to all three, tasks
//! placed one at a time (each sealed, published, pulled, run by a runner that
//! answers at once, its result read back); then the server leading the
//! tasks' stream is killed as a crash would, and placing goes on. The stall
//! is the longest placement across the kill: the servers electing new
//! leaders, the clients reconnecting, and what the lead and the worker try
//! again meanwhile.
//!
//! Run with `cargo bench --bench failover` (`FAILOVER_RUNS`, default 3, each
//! on a new cluster; `FAILOVER_TASKS`, default 100, before and after the
//! kill). Needs `nats-server`: the script the tests use installs it under the
//! target folder. Prints, for each run, the stall and the median placement
//! before and after.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

mod support;

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use orchestrate::SessionId;
use orchestrate::remote::envelope::RemoteTask;
use orchestrate::remote::lead::Remote;
use orchestrate::remote::worker::{Link, Ran, Runner, work};

/// Answers every task at once with its prompt.
struct Answer;

impl Runner for Answer {
    fn run(&self, task: RemoteTask, _link: Link) -> BoxFuture<'_, Ran> {
        Box::pin(async move { Ran::said("completed", task.prompt) })
    }
}

/// A free loopback port.
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// Three routed servers `s0`, `s1`, `s2` with JetStream; their URLs.
fn cluster(dir: &std::path::Path) -> (Vec<Child>, Vec<String>) {
    let binary = support::nats_server();
    let clients: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let routes: Vec<String> = (0..3)
        .map(|_| format!("nats://127.0.0.1:{}", free_port()))
        .collect();
    let servers = (0..3)
        .map(|i| {
            Command::new(&binary)
                .args(["-js", "-a", "127.0.0.1", "-p", &clients[i].to_string()])
                .args(["--server_name", &format!("s{i}"), "--cluster_name", "bench"])
                .args(["--cluster", &routes[i], "--routes", &routes.join(",")])
                .arg("--store_dir")
                .arg(dir.join(format!("s{i}")))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for port in &clients {
        while std::net::TcpStream::connect(("127.0.0.1", *port)).is_err() {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let urls = clients
        .iter()
        .map(|p| format!("nats://127.0.0.1:{p}"))
        .collect();
    (servers, urls)
}

fn median(mut ms: Vec<f64>) -> f64 {
    ms.sort_by(f64::total_cmp);
    ms[ms.len() / 2]
}

/// One run on a new cluster: the stall across the kill, and the medians
/// before and after, in ms; the server killed.
async fn one(tasks: usize) -> (f64, f64, f64, String) {
    let dir = tempfile::tempdir().unwrap();
    let (mut servers, urls) = cluster(dir.path());
    let key = nkeys::KeyPair::new_user();
    let stopping = orchestrate::remote::worker::Stopping::default();
    let config = support::worker_config(urls.clone(), 8, &key);
    let worker = tokio::spawn(work(
        config,
        Arc::new(Answer),
        stopping.clone(),
        Arc::new(|_| {}),
    ));
    let run = SessionId::new();
    let remote = Remote::join(&urls, &Default::default(), run, key, None)
        .await
        .unwrap();
    while remote.taken(&[]).await.is_err() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for i in 0..20 {
        remote
            .place(support::task(run, format!("warm {i}")))
            .await
            .unwrap();
    }
    let mut before = Vec::with_capacity(tasks);
    for i in 0..tasks {
        let start = Instant::now();
        remote
            .place(support::task(run, format!("before {i}")))
            .await
            .unwrap();
        before.push(start.elapsed().as_secs_f64() * 1000.0);
    }
    // The server leading the tasks' stream dies.
    let client = async_nats::connect(urls[0].as_str()).await.unwrap();
    let js = async_nats::jetstream::new(client);
    let mut stream = js
        .get_stream(orchestrate::remote::subjects::TASKS)
        .await
        .unwrap();
    let info = stream.info().await.unwrap();
    let leader = info
        .cluster
        .as_ref()
        .and_then(|c| c.leader.clone())
        .unwrap();
    let index: usize = leader.trim_start_matches('s').parse().unwrap();
    servers[index].kill().unwrap();
    servers[index].wait().unwrap();
    let mut after = Vec::with_capacity(tasks);
    for i in 0..tasks {
        let start = Instant::now();
        let result = remote
            .place(support::task(run, format!("after {i}")))
            .await
            .unwrap();
        assert_eq!(result.text, format!("after {i}"));
        after.push(start.elapsed().as_secs_f64() * 1000.0);
    }
    let stall = after.iter().copied().fold(0.0, f64::max);
    remote.finish().await;
    stopping.stop.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(10), worker).await;
    for server in &mut servers {
        let _ = server.kill();
        let _ = server.wait();
    }
    // The first placements after the kill wait out the election: they are
    // the stall, not the steady state.
    let settled = after.split_off(after.len() / 2);
    (stall, median(before), median(settled), leader)
}

fn main() {
    let runs = support::env_or("FAILOVER_RUNS", 3);
    let tasks = support::env_or("FAILOVER_TASKS", 100);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    for n in 1..=runs {
        let (stall, before, after, killed) = runtime.block_on(one(tasks));
        println!(
            "run {n}: killed {killed} (the tasks' stream leader); stall {stall:.0} ms; placement median {before:.2} ms before, {after:.2} ms after"
        );
    }
}
