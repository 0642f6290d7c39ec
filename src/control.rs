//! Control of a live run from another terminal. The process running a run listens
//! on a Unix socket, `.orchestrate/runs/<run id>.sock` (mode 0600, removed when the
//! run ends; one left by a process that died is found stale and removed), and
//! answers one request per connection, one JSON line each way:
//!
//! - `{"op":"ps"}`: the live tree, one line per agent, as the progress rows show it;
//! - `{"op":"steer","agent":A,"message":M}`: M joins A's run at its next turn
//!   boundary, even when A's model is about to give its final answer;
//! - `{"op":"stop","agent":A}`: A ends at its next turn boundary, its caller gets
//!   its partial work;
//! - `{"op":"kill","agent":A}`: A is cancelled now, with its running tool calls.
//!
//! An agent is named as its row names it (`explorer#2`) or by a prefix of its
//! session id. The answer is `{"ok":true,"text":…}` or `{"ok":false,"text":why}`.
//! Every request has a deadline.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};

use crate::events::EventStream;
use crate::protocol::SessionId;
use crate::runs::lock::runs_dir;
use crate::runtime::Handle;
use crate::ui::progress::{Board, Row, clock, state_text, tokens};

/// How long a request may take, end to end.
pub const DEADLINE: Duration = Duration::from_secs(2);

/// How often the board that `ps` answers from catches up with the run's events
/// (it also does before every answer). A quarter of a second: the times `ps`
/// shows are the board's, stamped when it catches up, and a subscriber that lets
/// 4 096 events wait loses progress events.
const CATCH_UP: Duration = Duration::from_millis(250);

/// A request to a live run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    /// The live tree.
    Ps,
    /// A message for an agent.
    Steer {
        /// The agent.
        agent: String,
        /// The message.
        message: String,
    },
    /// Stop an agent at its next turn boundary.
    Stop {
        /// The agent.
        agent: String,
    },
    /// Cancel an agent now.
    Kill {
        /// The agent.
        agent: String,
    },
    /// Crash an agent's session, for the tests of supervision.
    #[cfg(feature = "test-support")]
    Crash {
        /// The agent.
        agent: String,
    },
}

/// The answer to a request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reply {
    /// Whether it was done.
    pub ok: bool,
    /// What was done, the rows for `ps`, or why it was not done.
    pub text: String,
}

/// The control socket of run `run`.
pub fn socket_path(workspace: &Path, run: SessionId) -> PathBuf {
    runs_dir(workspace).join(format!("{run}.sock"))
}

/// A live run's control socket; removed when dropped.
#[derive(Debug)]
pub struct Control {
    path: PathBuf,
    _task: crate::actors::AbortOnDrop,
}

impl Drop for Control {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Control {
    /// Listens for requests about run `run`. Its board follows `events` (a
    /// subscription taken before the run started), catching up four times a
    /// second and before each answer, so its names match the progress rows'.
    pub fn serve(
        workspace: &Path,
        run: SessionId,
        handle: Handle,
        mut events: EventStream,
    ) -> std::io::Result<Self> {
        // The directory is the owner's alone, so the socket is never reachable by
        // others, even before its own mode is set.
        crate::runs::lock::make_runs_dir(workspace)?;
        let path = socket_path(workspace, run);
        // The run's lock is ours, so a socket already there was left by a process
        // that died.
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path)?;
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
        let board = Arc::new(Mutex::new(Board::new()));
        let began = Instant::now();
        let follower = board.clone();
        // The board catches up four times a second and before every answer, not
        // at every event: a fan-out's events would each wake this task.
        let mut catch_up = tokio::time::interval(CATCH_UP);
        catch_up.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let task = tokio::spawn(async move {
            let follow = |events: &mut EventStream| {
                let mut board = follower.lock().unwrap_or_else(PoisonError::into_inner);
                while let Some(event) = events.try_recv() {
                    board.apply(&event, began.elapsed());
                }
            };
            loop {
                tokio::select! {
                    _ = catch_up.tick() => follow(&mut events),
                    accepted = listener.accept() => {
                        follow(&mut events);
                        if let Ok((stream, _)) = accepted {
                            let (handle, board) = (handle.clone(), follower.clone());
                            tokio::spawn(async move {
                                let _ = tokio::time::timeout(DEADLINE, answer(stream, &handle, &board, began)).await;
                            });
                        }
                    }
                }
            }
        });
        Ok(Self {
            path,
            _task: crate::actors::AbortOnDrop(task),
        })
    }
}

async fn answer(
    stream: UnixStream,
    handle: &Handle,
    board: &Mutex<Board>,
    began: Instant,
) -> std::io::Result<()> {
    let (read, mut write) = stream.into_split();
    let mut line = String::new();
    // One request per connection, of bounded size.
    let mut limited = BufReader::new(tokio::io::AsyncReadExt::take(read, 64 * 1024));
    limited.read_line(&mut line).await?;
    let reply = match serde_json::from_str::<Op>(&line) {
        Ok(op) => {
            let board = board.lock().unwrap_or_else(PoisonError::into_inner);
            carry_out(op, handle, &board, began.elapsed())
        }
        Err(e) => Reply {
            ok: false,
            text: format!("not a request: {e}"),
        },
    };
    let mut text = serde_json::to_string(&reply).unwrap_or_default();
    text.push('\n');
    write.write_all(text.as_bytes()).await?;
    write.shutdown().await
}

/// Does what `op` asks of the run whose agents `board` shows.
fn carry_out(op: Op, handle: &Handle, board: &Board, now: Duration) -> Reply {
    let failed = |text: String| Reply { ok: false, text };
    let agent = match &op {
        Op::Ps => {
            return Reply {
                ok: true,
                text: ps(board, now),
            };
        }
        Op::Steer { agent, .. } | Op::Stop { agent } | Op::Kill { agent } => agent,
        #[cfg(feature = "test-support")]
        Op::Crash { agent } => agent,
    };
    let row = match find(board, agent) {
        Ok(row) => row,
        Err(why) => return failed(why),
    };
    let label = &row.label;
    if row.ended_ms.is_some() {
        return failed(format!("{label} has ended"));
    }
    let text = match op {
        Op::Steer { message, .. } if message.trim().is_empty() => {
            return failed("the message is empty".into());
        }
        Op::Steer { message, .. } => {
            handle.steer(row.session, message);
            format!("sent to {label}: it joins at its next turn boundary")
        }
        Op::Stop { .. } => {
            handle.stop_run(row.session);
            format!("{label} stops at its next turn boundary")
        }
        Op::Kill { .. } => {
            handle.cancel(row.session);
            format!("{label} cancelled")
        }
        #[cfg(feature = "test-support")]
        Op::Crash { .. } => {
            handle.crash_session(row.session);
            format!("{label} crashed")
        }
        Op::Ps => ps(board, now),
    };
    Reply { ok: true, text }
}

/// The control sockets of the workspace's live runs. A socket whose process has
/// died is removed.
pub async fn live_sockets(workspace: &Path) -> Vec<PathBuf> {
    let mut live = Vec::new();
    let Ok(entries) = std::fs::read_dir(runs_dir(workspace)) else {
        return live;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "sock") {
            continue;
        }
        match tokio::time::timeout(DEADLINE, UnixStream::connect(&path)).await {
            Ok(Ok(_)) => live.push(path),
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                // Nobody listens: the process that made it has died.
                let _ = std::fs::remove_file(&path);
            }
            Ok(Err(_)) | Err(_) => {}
        }
    }
    live.sort();
    live
}

/// Sends `op` to the run listening on `path` and waits (at most [`DEADLINE`]) for
/// the answer.
pub async fn request(path: &Path, op: &Op) -> Result<Reply, String> {
    let exchange = async {
        let stream = UnixStream::connect(path).await.map_err(|e| e.to_string())?;
        let (read, mut write) = stream.into_split();
        let mut line = serde_json::to_string(op).map_err(|e| e.to_string())?;
        line.push('\n');
        write
            .write_all(line.as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let mut answer = String::new();
        let mut limited = BufReader::new(tokio::io::AsyncReadExt::take(read, 4 * 1024 * 1024));
        limited
            .read_line(&mut answer)
            .await
            .map_err(|e| e.to_string())?;
        serde_json::from_str::<Reply>(&answer).map_err(|e| format!("a garbled answer: {e}"))
    };
    match tokio::time::timeout(DEADLINE, exchange).await {
        Ok(answer) => answer,
        Err(_) => Err(format!("no answer within {}s", DEADLINE.as_secs())),
    }
}

/// The live tree: one line per agent.
fn ps(board: &Board, now: Duration) -> String {
    let now_ms = now.as_millis() as u64;
    let mut text = String::new();
    for row in board.rows() {
        let indent = if row.parent.is_some() { "  " } else { "" };
        let elapsed = row
            .ended_ms
            .unwrap_or(now_ms)
            .saturating_sub(row.started_ms);
        text.push_str(&format!(
            "{:<18} {:<44} turn {:>3} {:>8} {:>6}\n",
            format!("{indent}{}", row.label),
            state_text(&row.state, now_ms, row.tools),
            row.turns,
            format!("{} tok", tokens(row.tokens)),
            clock(elapsed)
        ));
    }
    text
}

/// The row an agent's name or session id prefix names.
fn find<'a>(board: &'a Board, agent: &str) -> Result<&'a Row, String> {
    let rows = board.rows();
    if let Some(row) = rows.iter().find(|r| r.label == agent) {
        return Ok(row);
    }
    let by_id: Vec<&Row> = rows
        .iter()
        .filter(|r| !agent.is_empty() && r.session.to_string().starts_with(agent))
        .collect();
    match by_id.as_slice() {
        [row] => Ok(row),
        [] => {
            let names: Vec<&str> = rows.iter().map(|r| r.label.as_str()).collect();
            Err(format!(
                "no agent {agent:?} in this run (agents: {})",
                names.join(", ")
            ))
        }
        several => Err(format!(
            "{agent:?} names {} agents; give more of the id",
            several.len()
        )),
    }
}
