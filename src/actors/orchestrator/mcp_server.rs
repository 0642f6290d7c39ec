//! McpServer: one actor per MCP server of the run, a permanent child of the
//! Orchestrator. It starts its server in a task of its own (never inside a
//! `handle` call, so that a stop always gets through), publishes its state in the
//! run's [`McpHub`], and fails when the server dies, so that the Orchestrator
//! restarts it after a backoff (`handle_supervisor_evt`). A server that cannot be
//! started at all is marked failed and the actor stops: the run goes on without it.
//! The Orchestrator's side (starting them, the restart policy on a crash) is here too.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::{OrchestratorMsg, OrchestratorState};
use crate::actors::supervision::{RestartTracker, RestartType};
use crate::mcp::connection::{self, Connection};
use crate::mcp::{McpHub, State};

/// What a server actor is started with.
#[derive(Debug)]
pub(crate) struct McpServerArgs {
    /// The server's name in the hub.
    pub(crate) name: String,
    /// The run's servers.
    pub(crate) hub: Arc<McpHub>,
    /// Where its program runs.
    pub(crate) workspace: PathBuf,
    /// Where its stderr is logged.
    pub(crate) logs: Option<PathBuf>,
    /// How long it may take to answer.
    pub(crate) limit: Duration,
    /// Variables kept out of its program's environment (provider keys).
    pub(crate) key_variables: Arc<[String]>,
    /// It ran before and died: a failure to start now is another crash, not the
    /// end of it.
    pub(crate) restarted: bool,
}

/// Messages of a server actor.
#[derive(Debug)]
pub(crate) enum McpServerMsg {
    /// The server answered, or could not be started.
    Connected(Result<Box<Connection>, String>),
    /// The server died.
    Ended(String),
}

/// A server actor's state.
#[derive(Debug)]
pub(crate) struct McpServerState {
    args: McpServerArgs,
    /// Ends the connection when the actor stops.
    stop: CancellationToken,
    /// The task that starts, then watches, the connection.
    task: Option<JoinHandle<()>>,
}

/// The actor.
#[derive(Debug)]
pub(crate) struct McpServerActor;

impl Actor for McpServerActor {
    type Msg = McpServerMsg;
    type State = McpServerState;
    type Arguments = McpServerArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: McpServerArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let stop = CancellationToken::new();
        let config = args
            .hub
            .configs()
            .find(|c| c.name == args.name)
            .cloned()
            .ok_or_else(|| format!("no MCP server {:?}", args.name))?;
        let (workspace, logs, limit) = (args.workspace.clone(), args.logs.clone(), args.limit);
        let keys = args.key_variables.clone();
        let progress = args.hub.progress();
        let cancelled = stop.clone();
        let task = tokio::spawn(async move {
            let connected = tokio::select! {
                () = cancelled.cancelled() => return,
                connected = connection::connect(&config, &workspace, logs.as_deref(), limit, &keys, progress) => connected,
            };
            if let Err(ractor::MessagingErr::SendErr(McpServerMsg::Connected(Ok(orphan)))) =
                myself.cast(McpServerMsg::Connected(connected.map(Box::new)))
            {
                orphan.close().await;
            }
        });
        Ok(McpServerState {
            args,
            stop,
            task: Some(task),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let name = state.args.name.clone();
        let hub = state.args.hub.clone();
        match msg {
            McpServerMsg::Connected(Ok(connection)) => {
                for line in &connection.left_out {
                    tracing::warn!(server = %name, "{line}");
                }
                tracing::info!(server = %name, tools = connection.tools.len(), "MCP server ready");
                hub.set_group(&name, connection.group());
                hub.set(
                    &name,
                    State::Ready {
                        peer: connection.peer.clone(),
                        tools: connection.tools.clone().into(),
                    },
                );
                let stop = state.stop.clone();
                state.task = Some(tokio::spawn(async move {
                    let relist = |tools| hub.relisted(&name, tools);
                    let ended = connection.watch(&name, stop, relist).await;
                    // Stopped and reaped, whichever way it ended.
                    hub.set_group(&name, None);
                    if let Some(reason) = ended {
                        let _ = myself.cast(McpServerMsg::Ended(reason));
                    }
                }));
                Ok(())
            }
            McpServerMsg::Connected(Err(reason)) if !state.args.restarted => {
                tracing::warn!(server = %name, %reason, "MCP server did not start");
                hub.set(&name, State::Failed { reason });
                myself.stop(None);
                Ok(())
            }
            McpServerMsg::Connected(Err(reason)) | McpServerMsg::Ended(reason) => {
                tracing::warn!(server = %name, %reason, "MCP server died");
                hub.restarting(&name, reason.clone());
                // Failing is how the Orchestrator learns to restart it.
                Err(reason.into())
            }
        }
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        state.stop.cancel();
        if let Some(task) = state.task.take() {
            // The connection closes its program (SIGTERM, then SIGKILL) first.
            let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
        }
        Ok(())
    }
}

/// Starts every MCP server of the run, each a permanent child of the Orchestrator
/// with a restart history of its own.
pub(super) async fn start_all(myself: &ActorRef<OrchestratorMsg>, state: &mut OrchestratorState) {
    let names: Vec<String> = state.mcp.configs().map(|c| c.name.clone()).collect();
    for name in names {
        let tracker = RestartTracker::new(RestartType::Permanent, state.restart);
        state.mcp_restarts.insert(name.clone(), tracker);
        spawn(myself, state, name, false).await;
    }
}

/// Starts the actor of MCP server `name` (again, when `restarted`). A spawn error
/// leaves the server failed; the run goes on without it.
pub(super) async fn spawn(
    myself: &ActorRef<OrchestratorMsg>,
    state: &mut OrchestratorState,
    name: String,
    restarted: bool,
) {
    let args = McpServerArgs {
        name: name.clone(),
        hub: state.mcp.clone(),
        workspace: state.env.workspace.clone(),
        logs: crate::mcp::connection::log_dir(&state.env.state),
        limit: state.mcp_limit,
        key_variables: state.key_variables.clone(),
        restarted,
    };
    match Actor::spawn_linked(None, McpServerActor, args, myself.get_cell()).await {
        Ok((actor, _)) => {
            state.mcp_by_actor.insert(actor.get_id(), (name, actor));
        }
        Err(e) => state.mcp.set(
            &name,
            State::Failed {
                reason: format!("its actor did not start: {e}"),
            },
        ),
    }
}

/// An MCP server died (or could not be started again): restarted after a
/// backoff, or, past the restart intensity, given up on for the rest of the run.
pub(super) fn on_crash(
    myself: &ActorRef<OrchestratorMsg>,
    state: &mut OrchestratorState,
    name: String,
    reason: &str,
) {
    let Some(tracker) = state.mcp_restarts.get_mut(&name) else {
        return;
    };
    match tracker.on_exit(
        crate::actors::supervision::Exit::Abnormal,
        std::time::Instant::now(),
        rand::random::<f64>(),
    ) {
        crate::actors::supervision::Decision::Restart { after, restarts } => {
            tracing::warn!(server = %name, restarts, ?after, reason, "MCP server died; restarting it");
            myself.send_after(after, move || OrchestratorMsg::RestartMcp(name));
        }
        crate::actors::supervision::Decision::Escalate { restarts } => {
            let window = state.restart.window.as_secs();
            state.mcp.set(
                &name,
                State::Failed {
                    reason: format!(
                        "it died {restarts} times within {window} s; giving up on it: {reason}"
                    ),
                },
            );
        }
        crate::actors::supervision::Decision::Stop => {
            state.mcp.set(
                &name,
                State::Failed {
                    reason: reason.to_owned(),
                },
            );
        }
    }
}
