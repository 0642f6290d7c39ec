//! What placing a sub-agent on a worker costs over running it here: the
//! round trip of one task through NATS JetStream on loopback (sealed,
//! published, pulled, its signature checked, run, its result published,
//! read back by the lead), with a runner that answers at once, so the
//! figure is the placement's alone; beside the bare baseline, a core NATS
//! request and reply of the same payload between the same two clients.
//! A local sub-agent pays none of this.
//!
//! Then the same with a workspace (`REMOTE_FILES` files, default 200, in a
//! repository with uncommitted changes): the tree sent as bundles, checked
//! out on the worker, one file written there and the work sent back and
//! fetched; beside it, what a local private checkout's git steps take (made,
//! the file written, committed).
//!
//! Run with `cargo bench --bench remote` (`REMOTE_TASKS`, default 200, one at
//! a time; then as many at once). Needs `nats-server`: the script the tests
//! use installs it under the target folder. Prints the latency per task
//! (median, p90, max), the bare round trip's median, the payload bytes per
//! task each way, the throughput of the burst, and the workspace's figures.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

mod support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::future::BoxFuture;
use orchestrate::SessionId;
use orchestrate::remote::envelope::RemoteTask;
use orchestrate::remote::lead::Remote;
use orchestrate::remote::worker::{Link, Ran, Runner, work};
use orchestrate::remote::workspace::{Bases, Cache, Sending, fetch_work, fetched_ref};

/// Answers every task at once; one with a workspace has it checked out,
/// writes a file there and sends its work back.
struct Echo {
    cache: Cache,
    scratch: PathBuf,
}

impl Runner for Echo {
    fn run(&self, task: RemoteTask, link: Link) -> BoxFuture<'_, Ran> {
        Box::pin(async move {
            let folder = self.scratch.join(task.session.to_string());
            let indexes = self.scratch.join(".scratch");
            let tree = task.tree(&link.store, &indexes, &folder);
            let Some(tree) = tree else {
                return Ran::said("completed", task.prompt);
            };
            std::fs::create_dir_all(&folder).unwrap();
            let workdir = self.cache.check_out(&tree).await.unwrap();
            std::fs::write(workdir.join("echo.txt"), &task.prompt).unwrap();
            let work = self.cache.send_back(&tree).await.unwrap();
            std::fs::remove_dir_all(&folder).unwrap();
            Ran {
                work,
                ..Ran::said("completed", task.prompt)
            }
        })
    }
}

/// A JetStream server on a free loopback port; its URL. The caller kills and
/// waits for it.
#[allow(clippy::zombie_processes)]
fn server(dir: &Path) -> (std::process::Child, String) {
    let ports = dir.join("ports");
    std::fs::create_dir_all(&ports).unwrap();
    let child = std::process::Command::new(support::nats_server())
        .args(["-js", "-a", "127.0.0.1", "-p", "-1", "--store_dir"])
        .arg(dir.join("js"))
        .arg("--ports_file_dir")
        .arg(&ports)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let file = ports.join(format!("nats-server_{}.ports", child.id()));
    loop {
        if let Some(url) = std::fs::read_to_string(&file)
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .and_then(|v| v["nats"][0].as_str().map(str::to_owned))
        {
            return (child, url);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    let tasks = support::env_or("REMOTE_TASKS", 200);
    let dir = tempfile::tempdir().unwrap();
    let (mut nats, url) = server(dir.path());
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let key = nkeys::KeyPair::new_user();
        let stopping = orchestrate::remote::worker::Stopping::default();
        let config = support::worker_config(vec![url.clone()], 64, &key);
        let echo = Echo {
            cache: Cache::new(dir.path().join("worker/cache.git")),
            scratch: dir.path().join("worker"),
        };
        let worker = tokio::spawn(work(
            config,
            Arc::new(echo),
            stopping.clone(),
            Arc::new(|_| {}),
        ));
        let run = SessionId::new();
        let remote = Remote::join(
            std::slice::from_ref(&url),
            &Default::default(),
            run,
            key,
            None,
        )
        .await
        .unwrap();
        // The worker's consumer made: a task has somewhere to go.
        while remote.taken(&[]).await.is_err() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Warm up: the consumers made, the connections settled.
        for i in 0..10 {
            remote
                .place(support::task(run, format!("warm {i}")))
                .await
                .unwrap();
        }
        let (sent, received) = remote.traffic();
        let mut latencies = Vec::with_capacity(tasks);
        for i in 0..tasks {
            let start = Instant::now();
            let result = remote
                .place(support::task(run, format!("task {i}")))
                .await
                .unwrap();
            latencies.push(start.elapsed().as_secs_f64() * 1000.0);
            assert_eq!(result.text, format!("task {i}"));
        }
        let (sent_after, received_after) = remote.traffic();
        latencies.sort_by(f64::total_cmp);
        let per = |bytes: u64| bytes as f64 / tasks as f64;

        // The bare baseline: a core request and reply of the sealed task's size.
        let client = async_nats::connect(&url).await.unwrap();
        let mut replies = client.subscribe("bench.echo").await.unwrap();
        let responder = client.clone();
        tokio::spawn(async move {
            while let Some(message) = replies.next().await {
                if let Some(reply) = message.reply {
                    let _ = responder.publish(reply, message.payload).await;
                }
            }
        });
        let asker = async_nats::connect(&url).await.unwrap();
        let payload = vec![b'x'; per(sent_after - sent) as usize];
        let mut bare = Vec::with_capacity(tasks);
        for _ in 0..tasks {
            let start = Instant::now();
            asker
                .request("bench.echo", payload.clone().into())
                .await
                .unwrap();
            bare.push(start.elapsed().as_secs_f64() * 1000.0);
        }
        bare.sort_by(f64::total_cmp);

        // A burst: every task at once.
        let start = Instant::now();
        let all = (0..tasks).map(|i| remote.place(support::task(run, format!("burst {i}"))));
        let results = futures::future::join_all(all).await;
        let burst = start.elapsed().as_secs_f64();
        assert!(results.iter().all(Result::is_ok));

        println!("tasks {tasks}, one at a time");
        println!(
            "remote placement: median {:.2} ms, p90 {:.2} ms, max {:.2} ms",
            percentile(&latencies, 0.5),
            percentile(&latencies, 0.9),
            percentile(&latencies, 1.0)
        );
        println!(
            "bare request and reply: median {:.2} ms",
            percentile(&bare, 0.5)
        );
        println!(
            "payload bytes per task: lead sent {:.0}, received {:.0}",
            per(sent_after - sent),
            per(received_after - received)
        );
        println!(
            "burst of {tasks}: {:.2} s, {:.0} tasks/s",
            burst,
            tasks as f64 / burst
        );
        workspaces(&remote, dir.path(), tasks).await;
        remote.finish().await;
        stopping.stop.cancel();
        worker.await.unwrap().unwrap();
    });
    let _ = nats.kill();
    let _ = nats.wait();
}

/// A repository of `files` files of about 2 KB over three commits, with an
/// uncommitted change and an untracked file.
fn repository(dir: &Path, files: usize) -> PathBuf {
    let root = dir.join("repository");
    std::fs::create_dir_all(root.join("src")).unwrap();
    support::git(&root, &["init", "-q", "-b", "main"]);
    for round in 0..3 {
        for i in 0..files {
            let text = format!("// file {i}, round {round}\n{}", "let x = 1;\n".repeat(180));
            std::fs::write(root.join(format!("src/f{i}.rs")), text).unwrap();
        }
        support::git(&root, &["add", "."]);
        support::git(&root, &["commit", "-q", "-m", &format!("round {round}")]);
    }
    std::fs::write(root.join("src/f0.rs"), "// changed, not committed\n").unwrap();
    std::fs::write(root.join("notes.txt"), "untracked\n").unwrap();
    root
}

/// The workspace's figures: each task's tree sent, checked out on the
/// worker, a file written and the work fetched back, one task at a time;
/// beside a local private checkout's git steps.
async fn workspaces(remote: &Remote, dir: &Path, tasks: usize) {
    use orchestrate::isolation::steps;
    let files = support::env_or("REMOTE_FILES", 200);
    let root = repository(dir, files);
    let scratch = dir.join("lead-scratch");
    let bases = Bases::default();
    let run = remote.run();
    let sending = Sending {
        store: remote.store(),
        bases: &bases,
        scratch: scratch.clone(),
        leave_out: Arc::from([]),
        run,
    };
    let mut first = None;
    let mut latencies = Vec::with_capacity(tasks);
    let mut sizes = (0u64, 0u64);
    for i in 0..tasks {
        let start = Instant::now();
        let mut placed = support::task(run, format!("task {i}"));
        let session = placed.session;
        let dest = scratch.join(session.to_string());
        let branch = format!("orchestrate/bench/echo-{i}");
        let sent = sending.send(&root, session, dest, branch).await.unwrap();
        sizes.0 = sent.workspace.base.size;
        sizes.1 = sent.workspace.snapshot.size;
        placed.workspace = Some(sent.workspace.clone());
        let result = remote.place(placed).await.unwrap();
        let work = result.work.expect("the work came back");
        let store = remote.store();
        fetch_work(store, &scratch, run, session, &work, &sent.checkout)
            .await
            .unwrap();
        let elapsed = start.elapsed().as_secs_f64() * 1000.0;
        match first {
            None => first = Some((elapsed, work.size)),
            Some(_) => latencies.push(elapsed),
        }
        steps::remove(&sent.checkout).unwrap();
        support::git(&root, &["update-ref", "-d", &fetched_ref(session)]);
    }
    latencies.sort_by(f64::total_cmp);
    // The baseline: a local private checkout made, a file written, committed.
    let mut local = Vec::with_capacity(tasks);
    for i in 0..tasks {
        let start = Instant::now();
        let dest = scratch.join(format!("local-{i}"));
        let made = steps::make(
            &root,
            &dest,
            &scratch,
            format!("orchestrate/bench/local-{i}"),
            &[],
        )
        .unwrap();
        std::fs::write(made.checkout.workdir.join("echo.txt"), "local").unwrap();
        steps::commit(&made.checkout, &scratch).unwrap();
        local.push(start.elapsed().as_secs_f64() * 1000.0);
        steps::remove(&made.checkout).unwrap();
    }
    local.sort_by(f64::total_cmp);
    let (first_ms, work_size) = first.unwrap();
    println!("with a workspace of {files} files, one at a time");
    println!(
        "remote placement with its tree and work: first {first_ms:.1} ms (the base sent and fetched), then median {:.1} ms, p90 {:.1} ms",
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.9)
    );
    println!(
        "a local private checkout made and committed: median {:.1} ms, p90 {:.1} ms",
        percentile(&local, 0.5),
        percentile(&local, 0.9)
    );
    println!(
        "bundle bytes: base {} (once a run), snapshot {}, work {}",
        sizes.0, sizes.1, work_size
    );
}
