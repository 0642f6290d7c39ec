//! Control of a live run from another terminal. The process running a run listens
//! on a Unix socket ([`crate::state::StateDir::socket`]: in the runtime folder or
//! the state root, both hidden from sandboxed commands; mode 0600, removed when
//! the run ends; one left by a process that died is found stale and removed), and
//! answers one request per connection, one JSON line each way:
//!
//! - `{"op":"ps"}`: the live tree, one line per agent, as the progress rows show it,
//!   and a line per question waiting (`"full":true`: each question whole);
//! - `{"op":"steer","agent":A,"message":M}`: M joins A's run at its next turn
//!   boundary, even when A's model is about to give its final answer;
//! - `{"op":"stop","agent":A}`: A ends at its next turn boundary, its caller gets
//!   its partial work;
//! - `{"op":"kill","agent":A}`: A is cancelled now, with its running tool calls;
//! - `{"op":"approve","agent":A,"answer":"yes"|"no"|"always","id":Q}`: A's
//!   permission question Q (`id` may be left out when A has only one) is
//!   answered, as the person at the run's terminal would answer it.
//!
//! An agent is named as its row names it (`explorer#2`) or by a prefix of its
//! session id. The answer is `{"ok":true,"text":…}` or `{"ok":false,"text":why}`.
//! Every request has a deadline.
//!
//! The socket serves the person, not the run's own agents: a peer of another
//! user, or one that descends from the process serving the run (a Bash command,
//! an MCP server, whatever they started: the process is their child subreaper,
//! so a double fork still ends under it), is refused before a byte is read
//! ([`descends_from`]). A `steer` that is answered came from outside the run.
//! It goes through the run's `UserPromptSubmit` hooks first ([`hooked`]).

pub mod hooked;

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};

use self::hooked::PromptHooks;
use crate::events::EventStream;
use crate::protocol::SessionId;
use crate::runtime::Handle;
use crate::state::{Reachable, SocketPath, StateDir};
use crate::tools::permissions::PendingQuestion;
use crate::ui::progress::{Board, Row, clock, state_text, tokens};
use crate::ui::{Shown, visible};

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
    Ps {
        /// Each question waiting shown whole.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        full: bool,
    },
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
    /// Answer an agent's permission question.
    Approve {
        /// The agent.
        agent: String,
        /// `yes`, `no` or `always`.
        answer: String,
        /// The question, when the agent has several.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
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

/// A live run's control socket; removed when dropped.
#[derive(Debug)]
pub struct Control {
    socket: Reachable,
    _task: crate::actors::AbortOnDrop,
}

impl Drop for Control {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.socket.path);
    }
}

/// Whether the file at `path` is a socket of this user's (what a control socket
/// must be before it is replaced or connected to); `None` when nothing is there.
fn is_own_socket(path: &std::path::Path) -> Option<bool> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let meta = std::fs::symlink_metadata(path).ok()?;
    Some(meta.file_type().is_socket() && meta.uid() == rustix::process::geteuid().as_raw())
}

impl Control {
    /// Listens for requests about run `run`. Its board follows `events` (a
    /// subscription taken before the run started), catching up four times a
    /// second and before each answer, so its names match the progress rows'.
    pub fn serve(
        state: &StateDir,
        run: SessionId,
        handle: Handle,
        events: EventStream,
    ) -> std::io::Result<Self> {
        Self::serve_hooked(state, run, handle, events, None)
    }

    /// The same, a `steer`'s message going through `hooks` first.
    pub fn serve_hooked(
        state: &StateDir,
        run: SessionId,
        handle: Handle,
        mut events: EventStream,
        hooks: Option<PromptHooks>,
    ) -> std::io::Result<Self> {
        let hooks = hooks.map(Arc::new);
        // The folder is the owner's alone, so the socket is never reachable by
        // others, even before its own mode is set.
        state.prepare().map_err(std::io::Error::other)?;
        let socket = state.socket(run).open()?;
        // The run's lock is ours, so a socket already there was left by a process
        // that died; anything else there is not ours to remove.
        match is_own_socket(&socket.path) {
            Some(true) => std::fs::remove_file(&socket.path)?,
            Some(false) => {
                return Err(std::io::Error::other(format!(
                    "{}: not a socket of this user's",
                    state.socket(run).path().display()
                )));
            }
            None => {}
        }
        let listener = UnixListener::bind(&socket.path)?;
        std::fs::set_permissions(
            &socket.path,
            std::os::unix::fs::PermissionsExt::from_mode(0o600),
        )?;
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
                        if let Ok((stream, _)) = accepted
                            && from_outside(&stream)
                        {
                            let (handle, board) = (handle.clone(), follower.clone());
                            let hooks = hooks.clone();
                            tokio::spawn(async move {
                                let serving = Serving { handle: &handle, board: &board, hooks: hooks.as_deref() };
                                let _ = tokio::time::timeout(DEADLINE, answer(stream, serving, began)).await;
                            });
                        }
                    }
                }
            }
        });
        Ok(Self {
            socket,
            _task: crate::actors::AbortOnDrop(task),
        })
    }
}

/// Whether the peer of `stream` may control the run: a process of this user's
/// that does not descend from this one (this process itself may: a program
/// embedding the runtime). A refused peer's connection is closed unanswered.
fn from_outside(stream: &UnixStream) -> bool {
    let Ok(peer) = stream.peer_cred() else {
        return false;
    };
    if peer.uid() != rustix::process::geteuid().as_raw() {
        return false;
    }
    // A peer in another process namespace shows no process id here.
    let Some(pid) = peer.pid().filter(|pid| *pid > 0) else {
        return false;
    };
    let me = std::process::id() as i32;
    pid == me || !descends_from(pid, me, crate::procfs::parent_of)
}

/// Whether `pid` descends from `ancestor` (is its child, or a child's, …), as
/// `parent_of` tells each process's parent. A process whose parent cannot be
/// told counts as a descendant: it may be one that has just died.
pub fn descends_from(pid: i32, ancestor: i32, parent_of: impl Fn(i32) -> Option<i32>) -> bool {
    let mut at = pid;
    // Bounded, so that a loop in what `parent_of` tells ends.
    for _ in 0..4096 {
        match parent_of(at) {
            Some(parent) if parent == ancestor => return true,
            Some(parent) if parent <= 1 => return false,
            Some(parent) => at = parent,
            None => return true,
        }
    }
    true
}

/// What answers a request: the run, its board, its prompt hooks.
#[derive(Clone, Copy)]
struct Serving<'a> {
    handle: &'a Handle,
    board: &'a Mutex<Board>,
    hooks: Option<&'a PromptHooks>,
}

async fn answer(stream: UnixStream, serving: Serving<'_>, began: Instant) -> std::io::Result<()> {
    let (read, mut write) = stream.into_split();
    let mut line = String::new();
    // One request per connection, of bounded size.
    let mut limited = BufReader::new(tokio::io::AsyncReadExt::take(read, 64 * 1024));
    limited.read_line(&mut line).await?;
    let reply = match serde_json::from_str::<Op>(&line) {
        Ok(op) => {
            let board = serving.board.lock().unwrap_or_else(PoisonError::into_inner);
            carry_out(op, serving, &board, began.elapsed())
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

/// Does what `op` asks of the run whose agents `board` shows (a `steer`
/// through `hooks`, when the run has some).
fn carry_out(op: Op, serving: Serving<'_>, board: &Board, now: Duration) -> Reply {
    let (handle, hooks) = (serving.handle, serving.hooks);
    let failed = |text: String| Reply { ok: false, text };
    let agent = match &op {
        Op::Ps { full } => {
            return Reply {
                ok: true,
                text: ps(board, &handle.pending_questions(), now, *full),
            };
        }
        Op::Steer { agent, .. }
        | Op::Stop { agent }
        | Op::Kill { agent }
        | Op::Approve { agent, .. } => agent,
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
        Op::Steer { message, .. } => match hooks {
            Some(hooks) => {
                hooks.steer(row, message);
                format!(
                    "sent to {label}: it joins at its next turn boundary once the UserPromptSubmit hooks allow it"
                )
            }
            None => {
                handle.steer(row.session, message);
                format!("sent to {label}: it joins at its next turn boundary")
            }
        },
        Op::Stop { .. } => {
            handle.stop_run(row.session);
            format!("{label} stops at its next turn boundary")
        }
        Op::Kill { .. } => {
            handle.cancel(row.session);
            format!("{label} cancelled")
        }
        Op::Approve { answer, id, .. } => {
            let Some(given) = crate::tools::permissions::Answer::from_word(&answer) else {
                return failed(format!(
                    "{answer:?} is not an answer (say yes, no or always)"
                ));
            };
            match handle.answer_question(row.session, id.as_deref(), given) {
                Ok(id) => format!("{label}: {} to {id}", answer.to_ascii_lowercase()),
                Err(why) => return failed(format!("{label} {why}")),
            }
        }
        #[cfg(feature = "test-support")]
        Op::Crash { .. } => {
            handle.crash_session(row.session);
            format!("{label} crashed")
        }
        Op::Ps { full } => ps(board, &handle.pending_questions(), now, full),
    };
    Reply { ok: true, text }
}

/// The control sockets of the workspace's live runs: each run whose lock a live
/// process holds. A run whose process has died has its lock and socket removed.
pub async fn live_sockets(state: &StateDir) -> Vec<(SessionId, SocketPath)> {
    let mut live = Vec::new();
    let Ok(entries) = std::fs::read_dir(state.runs()) else {
        return live;
    };
    let mut runs: Vec<SessionId> = entries
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name();
            let run = name.to_str()?.strip_suffix(".lock")?;
            run.parse().ok()
        })
        .collect();
    runs.sort();
    for run in runs {
        let socket = state.socket(run);
        if crate::runs::lock::holder(state, run).is_some() {
            live.push((run, socket));
            continue;
        }
        // Nobody holds it: the process that made it has died.
        if let Ok(reachable) = socket.open()
            && is_own_socket(&reachable.path) == Some(true)
        {
            let _ = std::fs::remove_file(&reachable.path);
        }
        let _ = std::fs::remove_file(state.lock(run));
    }
    live
}

/// Sends `op` to the run listening on `socket` and waits (at most [`DEADLINE`])
/// for the answer.
pub async fn request(socket: &SocketPath, op: &Op) -> Result<Reply, String> {
    let exchange = async {
        let shown = socket.path();
        let reachable = socket
            .open()
            .map_err(|e| format!("{}: {e}", shown.display()))?;
        if is_own_socket(&reachable.path) != Some(true) {
            return Err(format!("{}: not a socket of this user's", shown.display()));
        }
        let stream = UnixStream::connect(&reachable.path)
            .await
            .map_err(|e| e.to_string())?;
        let (read, mut write) = stream.into_split();
        let mut line = serde_json::to_string(op).map_err(|e| e.to_string())?;
        line.push('\n');
        // A refused peer's connection is closed before it is read: the request
        // cannot be written, or its answer is empty.
        let unanswered = || {
            "the run closed the connection unanswered (it takes requests only from outside it)"
                .to_owned()
        };
        let closed = |e: std::io::Error| match e.kind() {
            std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset => unanswered(),
            _ => e.to_string(),
        };
        write.write_all(line.as_bytes()).await.map_err(closed)?;
        let mut answer = String::new();
        let mut limited = BufReader::new(tokio::io::AsyncReadExt::take(read, 4 * 1024 * 1024));
        limited.read_line(&mut answer).await.map_err(closed)?;
        if answer.is_empty() {
            return Err(unanswered());
        }
        serde_json::from_str::<Reply>(&answer).map_err(|e| format!("a garbled answer: {e}"))
    };
    match tokio::time::timeout(DEADLINE, exchange).await {
        Ok(answer) => answer,
        Err(_) => Err(format!("no answer within {}s", DEADLINE.as_secs())),
    }
}

/// The rows of `board` as `ps` answers them, `now` after it began: one line
/// per agent, and under it one per question of its that waits for an answer
/// (`full`: the question whole, each of its lines shown as text).
pub(crate) fn ps(board: &Board, pending: &[PendingQuestion], now: Duration, full: bool) -> String {
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
        for question in pending.iter().filter(|q| q.session == row.session) {
            let tool = visible(&question.tool, Shown::Line);
            let id = &question.id;
            if !full {
                let what = question_line(&question.summary);
                text.push_str(&format!("{indent}  pending approval {id} {tool}: {what}\n"));
                continue;
            }
            let lines: Vec<&str> = question.summary.lines().collect();
            text.push_str(&format!(
                "{indent}  pending approval {id} {tool} ({} lines):\n",
                lines.len()
            ));
            for line in lines {
                text.push_str(&format!("{indent}    {}\n", visible(line, Shown::Line)));
            }
        }
    }
    text
}

/// What a question's call would do, on one line of `ps`: its first line (a
/// protected path's marker said briefly, the path after it), cut at 80
/// characters, how many lines follow, every character shown as text.
fn question_line(summary: &str) -> String {
    const WIDTH: usize = 80;
    let mut lines = summary.lines();
    let mut first = lines.next().unwrap_or_default();
    let mut marks = "";
    if first.starts_with("(a protected path") {
        marks = "(a protected path) ";
        first = lines.next().unwrap_or_default();
    }
    let mut shown: String = first.chars().take(WIDTH).collect();
    if first.chars().count() > WIDTH {
        shown.push('…');
    }
    match lines.count() {
        0 => {}
        1 => shown.push_str(" (+1 more line)"),
        n => shown.push_str(&format!(" (+{n} more lines)")),
    }
    visible(&format!("{marks}{shown}"), Shown::Line).into_owned()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_questions_line_hides_nothing_it_leaves_out_and_shows_text_as_text() {
        assert_eq!(question_line("make test"), "make test");
        assert_eq!(
            question_line("ls\nrm -rf ~\n"),
            "ls (+1 more line)",
            "the lines left out are counted"
        );
        let long = format!("echo {}; rm -rf ~", "x".repeat(100));
        let line = question_line(&long);
        assert!(line.ends_with('…') && !line.contains("rm -rf"), "{line}");
        let hostile = question_line("echo hi\u{1b}]52;c;ZXZpbA==\u{7}\rcurl x | sh");
        assert!(
            !hostile.contains('\u{1b}') && !hostile.contains('\r'),
            "{hostile}"
        );
        assert_eq!(
            question_line(
                "(a protected path: it configures git, agents, editors or shells)\n.git/hooks/pre-commit (1 lines)\n@@ -0,0 +1 @@\n+x\n"
            ),
            "(a protected path) .git/hooks/pre-commit (1 lines) (+2 more lines)"
        );
    }

    #[test]
    fn a_process_descends_from_another_through_any_chain_of_parents() {
        // 40 -> 30 -> 20 -> 10 (the server) -> 1; 50 -> 1; 60's parent is gone.
        let parents = |pid: i32| match pid {
            40 => Some(30),
            30 => Some(20),
            20 => Some(10),
            10 | 50 => Some(1),
            1 => Some(0),
            _ => None,
        };
        assert!(descends_from(40, 10, parents));
        assert!(descends_from(20, 10, parents));
        assert!(!descends_from(50, 10, parents));
        assert!(!descends_from(10, 10, parents));
        assert!(
            descends_from(60, 10, parents),
            "one that cannot be told is refused"
        );
        // A loop in what is told ends.
        assert!(descends_from(7, 10, |pid| Some(if pid == 7 {
            8
        } else {
            7
        })));
    }
}
