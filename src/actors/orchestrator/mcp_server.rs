//! McpServer: one actor per MCP server of the run, a permanent child of the
//! Orchestrator. It starts its server in a task of its own (never inside a
//! `handle` call, so that a stop always gets through), publishes its state in the
//! run's [`McpHub`], and fails when the server dies, so that the Orchestrator
//! restarts it after a backoff (`handle_supervisor_evt`). A server that cannot be
//! started at all is marked failed and the actor stops: the run goes on without it.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

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
        let cancelled = stop.clone();
        let task = tokio::spawn(async move {
            let connected = tokio::select! {
                () = cancelled.cancelled() => return,
                connected = connection::connect(&config, &workspace, logs.as_deref(), limit) => connected,
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
                    if let Some(reason) = connection.watch(&name, stop, relist).await {
                        hub.set_group(&name, None);
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
                let tools = hub
                    .state(&name)
                    .map(|s| s.tools().to_vec())
                    .unwrap_or_default();
                hub.set(
                    &name,
                    State::Restarting {
                        reason: reason.clone(),
                        tools: tools.into(),
                    },
                );
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
