//! One live connection to an MCP server, through `rmcp`: started (a program in a
//! process group of its own, or a streamable-HTTP endpoint), initialized within a
//! time limit, its tools listed, then watched until it ends (the program exits,
//! the transport closes, or it is told to stop), relisting its tools whenever it
//! says they changed. A program's stderr goes to `mcp/NAME.log` in the
//! workspace's state folder and the trace, never to the terminal; its last lines
//! explain a failure.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{ClientCapabilities, ClientConfig, Implementation};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use rustix::process::{Pid, Signal, kill_process_group};
use tokio::io::AsyncBufReadExt;
use tokio::process::{Child, Command};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::config::{ServerConfig, Transport};
use super::listing::{self, ToolInfo};

/// The peer a call is sent through.
pub type Peer = rmcp::Peer<RoleClient>;

/// How long a server may take to start and answer `initialize` and `tools/list`
/// (Claude Code's `MCP_TIMEOUT` sets it, in milliseconds).
pub const DEFAULT_START_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a stopped program gets between SIGTERM and SIGKILL.
const GRACE: Duration = Duration::from_secs(2);

/// The stderr lines kept to explain a failure.
const TAIL_LINES: usize = 5;

/// The most stderr one server writes to its log file in a run.
const MAX_LOG_BYTES: u64 = 4 * 1024 * 1024;

/// A server that answered.
pub struct Connection {
    /// Where calls go.
    pub peer: Peer,
    /// Its tools, as offered.
    pub tools: Vec<ToolInfo>,
    /// Tools left out of the listing, one line each.
    pub left_out: Vec<String>,
    /// How long listing its tools may take (`MCP_TIMEOUT`), again when it relists.
    limit: Duration,
    service: RunningService<RoleClient, Listener>,
    process: Option<Process>,
    changed: mpsc::UnboundedReceiver<()>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("tools", &self.tools.len())
            .finish_non_exhaustive()
    }
}

/// A server's program.
struct Process {
    child: Child,
    group: Option<Pid>,
    tail: Tail,
}

impl Drop for Process {
    /// However the connection ends (a start abandoned midway by a shutdown, say),
    /// nothing the program started outlives it: `kill_on_drop` reaches only the
    /// program itself, not what it spawned (`npx` runs `node`).
    fn drop(&mut self) {
        kill_group(self.group, Signal::KILL);
    }
}

/// The last lines of a program's stderr.
#[derive(Clone, Default)]
struct Tail(Arc<Mutex<VecDeque<String>>>);

impl Tail {
    fn push(&self, line: &str) {
        let mut lines = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if lines.len() == TAIL_LINES {
            lines.pop_front();
        }
        lines.push_back(line.chars().take(300).collect());
    }

    /// `: last line` (the last one that says something), or nothing.
    fn last(&self) -> String {
        let lines = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        lines
            .iter()
            .rev()
            .find(|l| !l.trim().is_empty())
            .map(|l| format!(": {}", l.trim()))
            .unwrap_or_default()
    }
}

/// Hears the server's notifications: a changed tool list is passed on, and
/// how far a call has come is told as its output.
struct Listener {
    changed: mpsc::UnboundedSender<()>,
    /// The server's name, which its progress notifications are told under.
    server: String,
    progress: std::sync::Arc<super::progress::Progress>,
}

impl ClientHandler for Listener {
    fn on_progress(
        &self,
        params: rmcp::model::ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        let token = super::progress::token_text(&params.progress_token);
        let said = super::progress::Said {
            progress: params.progress,
            total: params.total,
            message: params.message,
        };
        self.progress.tell(&self.server, &token, &said);
        std::future::ready(())
    }

    fn on_tool_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        let _ = self.changed.send(());
        std::future::ready(())
    }

    fn get_info(&self) -> ClientConfig {
        // No roots: a server that asks for them (the filesystem server) keeps the
        // directories its command line gave it.
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("orchestrate", env!("CARGO_PKG_VERSION")),
        )
    }
}

/// Starts `config`'s server (a program runs in `workspace`; its stderr is logged
/// under `logs` when given) and waits, at most `limit`, for it to answer and list
/// its tools. The error says why, in words, with the program's last stderr line.
pub async fn connect(
    config: &ServerConfig,
    workspace: &Path,
    logs: Option<&Path>,
    limit: Duration,
    key_variables: &[String],
    progress: std::sync::Arc<super::progress::Progress>,
) -> Result<Connection, String> {
    let (tx, changed) = mpsc::unbounded_channel();
    progress.forget(&config.name);
    let listener = Listener {
        changed: tx,
        server: config.name.clone(),
        progress,
    };
    let (service, process) = match &config.transport {
        Transport::Stdio { command, args, env } => {
            let mut process = spawn(command, args, env, workspace, key_variables)?;
            if let Some(stderr) = process.child.stderr.take() {
                let log = logs.map(|dir| dir.join(format!("{}.log", config.name)));
                tokio::spawn(read_stderr(
                    stderr,
                    process.tail.clone(),
                    config.name.clone(),
                    log,
                ));
            }
            let (Some(stdout), Some(stdin)) =
                (process.child.stdout.take(), process.child.stdin.take())
            else {
                return Err("its pipes could not be opened".into());
            };
            let served = tokio::time::timeout(limit, listener.serve((stdout, stdin))).await;
            match served {
                Ok(Ok(service)) => (service, Some(process)),
                failed => {
                    let why = match failed {
                        Ok(Err(e)) => format!("did not initialize ({e})"),
                        _ => format!("did not answer within {} s", limit.as_secs()),
                    };
                    let status = stop_process(&mut process).await;
                    return Err(match status {
                        Some(status) => {
                            format!(
                                "{} before it answered{}",
                                exited(status),
                                process.tail.last()
                            )
                        }
                        None => format!("{why}{}", process.tail.last()),
                    });
                }
            }
        }
        Transport::Http { url, headers } => {
            let transport = http_transport(url, headers)?;
            let service = tokio::time::timeout(limit, listener.serve(transport))
                .await
                .map_err(|_| format!("did not answer within {} s", limit.as_secs()))?
                .map_err(|e| format!("did not initialize at {url} ({e})"))?;
            (service, None)
        }
    };
    listed(&config.name, service, process, changed, limit).await
}

/// A connection once `initialize` is done: its tools listed within `limit`.
async fn listed(
    server: &str,
    service: RunningService<RoleClient, Listener>,
    process: Option<Process>,
    changed: mpsc::UnboundedReceiver<()>,
    limit: Duration,
) -> Result<Connection, String> {
    let peer = service.peer().clone();
    let listed = tokio::time::timeout(limit, peer.list_all_tools()).await;
    let mut connection = Connection {
        peer,
        tools: Vec::new(),
        left_out: Vec::new(),
        limit,
        service,
        process,
        changed,
    };
    match listed {
        Ok(Ok(tools)) => {
            (connection.tools, connection.left_out) = listing::offered(server, tools);
            Ok(connection)
        }
        failed => {
            let why = match failed {
                Ok(Err(e)) => format!("could not list its tools ({e})"),
                _ => format!("did not list its tools within {} s", limit.as_secs()),
            };
            connection.close().await;
            Err(why)
        }
    }
}

impl Connection {
    /// Watches the connection until it ends, calling `relisted` with the tools
    /// each time the server says they changed; returns why it ended (`None`: it
    /// was told to stop).
    pub async fn watch(
        self,
        server: &str,
        stop: CancellationToken,
        relisted: impl Fn(Vec<ToolInfo>),
    ) -> Option<String> {
        let Connection {
            peer,
            service,
            mut process,
            mut changed,
            limit,
            ..
        } = self;
        // The service's loop ends when its transport closes; waiting for it takes
        // the service, so it is closed through its token instead.
        let closing = service.cancellation_token();
        let serving = service.waiting();
        tokio::pin!(serving);
        let mut served = false;
        let why = loop {
            let ended = async {
                match process.as_mut() {
                    Some(process) => process.child.wait().await.ok(),
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = stop.cancelled() => break None,
                status = ended => break Some(died(process.as_ref(), status)),
                _ = &mut serving => {
                    served = true;
                    // A program's end closes its pipes first: its exit status, a
                    // moment later, says why.
                    let status = match process.as_mut() {
                        Some(p) => tokio::time::timeout(GRACE, p.child.wait()).await.ok(),
                        None => None,
                    };
                    break Some(match status {
                        Some(status) => died(process.as_ref(), status.ok()),
                        None => {
                            let tail = process.as_ref().map(|p| p.tail.last()).unwrap_or_default();
                            format!("closed the connection{tail}")
                        }
                    });
                }
                Some(()) = changed.recv() => {
                    let relisting = peer.list_all_tools();
                    let relisted_tools = tokio::time::timeout(limit, relisting)
                        .await
                        .unwrap_or(Err(rmcp::ServiceError::Timeout { timeout: limit }));
                    match relisted_tools {
                        Ok(tools) => {
                            let (tools, left_out) = listing::offered(server, tools);
                            for line in left_out {
                                tracing::warn!(server, "{line}");
                            }
                            relisted(tools);
                        }
                        Err(e) => tracing::warn!(server, error = %e, "relisting tools failed"),
                    }
                }
            }
        };
        closing.cancel();
        if !served {
            let _ = tokio::time::timeout(GRACE, &mut serving).await;
        }
        if let Some(process) = process.as_mut() {
            stop_process(process).await;
        }
        why
    }

    /// Ends the connection: the session cancelled, the program's group sent
    /// SIGTERM, then SIGKILL after a grace period, and reaped.
    pub async fn close(mut self) {
        let _ = self.service.close_with_timeout(GRACE).await;
        if let Some(process) = self.process.as_mut() {
            stop_process(process).await;
        }
    }

    /// The process group of its program, so that whoever outlives the connection
    /// can still kill it.
    pub fn group(&self) -> Option<Pid> {
        self.process.as_ref().and_then(|p| p.group)
    }
}

/// Starts the program in a process group of its own, its environment the
/// orchestrator's without provider keys (the built-in names and
/// `key_variables`), plus the server's variables.
fn spawn(
    command: &str,
    args: &[String],
    env: &[(String, String)],
    workspace: &Path,
    key_variables: &[String],
) -> Result<Process, String> {
    let parent = crate::tools::bash::group::child_env(std::env::vars_os(), key_variables);
    let mut cmd = Command::new(command);
    cmd.args(args)
        .env_clear()
        .envs(parent)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .current_dir(workspace)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let child = cmd.spawn().map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => format!("cannot run {command:?}: no such program"),
        _ => format!("cannot run {command:?}: {e}"),
    })?;
    let group = child
        .id()
        .and_then(|id| Pid::from_raw(i32::try_from(id).ok()?));
    Ok(Process {
        child,
        group,
        tail: Tail::default(),
    })
}

/// Stops a program and its group: SIGTERM, SIGKILL after [`GRACE`]; its exit
/// status when it had one.
async fn stop_process(process: &mut Process) -> Option<std::process::ExitStatus> {
    if let Ok(Some(status)) = process.child.try_wait() {
        kill_group(process.group.take(), Signal::KILL);
        return Some(status);
    }
    kill_group(process.group, Signal::TERM);
    let status = match tokio::time::timeout(GRACE, process.child.wait()).await {
        Ok(Ok(status)) => Some(status),
        _ => {
            kill_group(process.group, Signal::KILL);
            process.child.wait().await.ok()
        }
    };
    // What the program started and left behind goes with it; the group is not
    // killed again (its id may be another's by then).
    kill_group(process.group.take(), Signal::KILL);
    status
}

/// Sends `signal` to a process group, if there is one.
pub fn kill_group(group: Option<Pid>, signal: Signal) {
    if let Some(group) = group {
        let _ = kill_process_group(group, signal);
    }
}

/// Why a program's connection ended, from its exit status (`None`: it could not
/// be waited for) and the last thing it wrote on stderr; a program killed by a
/// signal said nothing about it.
fn died(process: Option<&Process>, status: Option<std::process::ExitStatus>) -> String {
    let tail = process.map(|p| p.tail.last()).unwrap_or_default();
    match status {
        Some(status) if status.code().is_none() => exited(status),
        Some(status) => format!("{}{tail}", exited(status)),
        None => format!("its process could not be waited for{tail}"),
    }
}

/// `exited with status 1`, or `was killed by signal 9`.
fn exited(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(signal)) => format!("was killed by signal {signal}"),
        (None, None) => "exited".to_owned(),
    }
}

/// Reads a program's stderr line by line into its tail, the trace and its log
/// file (bounded).
async fn read_stderr(
    stderr: tokio::process::ChildStderr,
    tail: Tail,
    server: String,
    log: Option<PathBuf>,
) {
    let mut file = log.and_then(|path| open_log(&path));
    let mut written = 0u64;
    let mut lines = tokio::io::BufReader::new(stderr).lines();
    loop {
        match lines.next_line().await {
            Ok(Some(line)) => {
                tracing::debug!(server = %server, "{line}");
                if let Some(f) = file.as_mut()
                    && written < MAX_LOG_BYTES
                {
                    use std::io::Write;
                    written += line.len() as u64 + 1;
                    let _ = writeln!(f, "{line}");
                }
                tail.push(&line);
            }
            // A line that is not UTF-8 is skipped, not the rest of the stream.
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {}
            Ok(None) | Err(_) => return,
        }
    }
}

/// Opens a server's log for appending; never through a symlink, into a FIFO or
/// a device.
fn open_log(path: &Path) -> Option<std::fs::File> {
    crate::small_file::open(path, crate::small_file::Access::Append).ok()
}

/// The streamable-HTTP transport to `url`, with `headers`; redirects are not
/// followed (a server that moved says so).
fn http_transport(
    url: &str,
    headers: &[(String, String)],
) -> Result<rmcp::transport::StreamableHttpClientTransport<reqwest::Client>, String> {
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    let mut map = std::collections::HashMap::new();
    for (name, value) in headers {
        let name = reqwest::header::HeaderName::try_from(name.as_str())
            .map_err(|_| format!("has the header name {name:?}, which HTTP does not allow"))?;
        let value = reqwest::header::HeaderValue::try_from(value.as_str())
            .map_err(|_| format!("has a value of header {name} that HTTP does not allow"))?;
        map.insert(name, value);
    }
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| format!("cannot build an HTTP client: {e}"))?;
    let config = StreamableHttpClientTransportConfig::with_uri(url).custom_headers(map);
    Ok(rmcp::transport::StreamableHttpClientTransport::with_client(
        client, config,
    ))
}

/// The folder the servers' logs go to (made with the run's state folder);
/// `None` when it is not a real folder: the stderr then goes to the trace only.
pub fn log_dir(state: &crate::state::StateDir) -> Option<PathBuf> {
    let dir = state.mcp_logs();
    std::fs::symlink_metadata(&dir)
        .is_ok_and(|meta| meta.is_dir())
        .then_some(dir)
}

#[cfg(test)]
mod tests;
