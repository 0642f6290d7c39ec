//! The run's MCP servers as the sessions see them: each server's state (starting,
//! ready with its tools, restarting, failed), kept by its actor and read by every
//! session that uses it; the tools of the servers a role may use, offered as
//! `mcp__<server>__<tool>` ([`McpTools`]); and the call itself ([`McpTool`]).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::Value;
use tokio::sync::watch;

use super::config::ServerConfig;
use super::connection::Peer;
use super::listing::{self, ToolInfo};
use crate::error::ToolError;
use crate::llm::ToolSpec;
use crate::tools::{Concurrency, Tool, ToolContext, ToolSource};

/// Where a server is.
#[derive(Clone, Debug)]
pub enum State {
    /// Being started.
    Starting,
    /// Answering calls.
    Ready {
        /// Where calls go.
        peer: Peer,
        /// Its tools.
        tools: Arc<[ToolInfo]>,
    },
    /// It died and is being started again; its tools stay offered meanwhile.
    Restarting {
        /// Why it died.
        reason: String,
        /// The tools it had.
        tools: Arc<[ToolInfo]>,
    },
    /// It could not be started, or died too often: the run goes on without it.
    Failed {
        /// Why.
        reason: String,
    },
    /// The run is over.
    Stopped,
}

impl State {
    /// The tools it offers in this state.
    pub fn tools(&self) -> &[ToolInfo] {
        match self {
            Self::Ready { tools, .. } | Self::Restarting { tools, .. } => tools,
            _ => &[],
        }
    }
}

/// One server of the run.
#[derive(Debug)]
struct Slot {
    config: ServerConfig,
    state: watch::Sender<State>,
    /// Its program's process group while it runs, killed by [`McpHub::shutdown`]
    /// should its actor not get to it.
    group: Mutex<Option<rustix::process::Pid>>,
}

/// Every MCP server of a run.
#[derive(Debug, Default)]
pub struct McpHub {
    servers: BTreeMap<String, Slot>,
    /// The calls whose progress notifications are told.
    progress: Arc<super::progress::Progress>,
}

impl McpHub {
    /// The run's servers, all starting.
    pub fn new(configs: Vec<ServerConfig>) -> Self {
        let servers = configs
            .into_iter()
            .map(|config| {
                let slot = Slot {
                    state: watch::Sender::new(State::Starting),
                    group: Mutex::new(None),
                    config,
                };
                (slot.config.name.clone(), slot)
            })
            .collect();
        Self {
            servers,
            progress: Arc::default(),
        }
    }

    /// Whether `server`'s tool annotations are believed (the person's own file
    /// says so).
    pub fn trusts_annotations(&self, server: &str) -> bool {
        self.servers
            .get(server)
            .is_some_and(|slot| slot.config.trust_annotations)
    }

    /// The servers' definitions.
    pub fn configs(&self) -> impl Iterator<Item = &ServerConfig> {
        self.servers.values().map(|s| &s.config)
    }

    /// A server's state now.
    pub fn state(&self, server: &str) -> Option<State> {
        self.servers.get(server).map(|s| s.state.borrow().clone())
    }

    /// Sets a server's state (its actor does).
    pub fn set(&self, server: &str, state: State) {
        if let Some(slot) = self.servers.get(server) {
            slot.state.send_replace(state);
        }
    }

    /// Replaces a ready server's tools (it said they changed).
    pub fn relisted(&self, server: &str, tools: Vec<ToolInfo>) {
        if let Some(slot) = self.servers.get(server) {
            slot.state.send_if_modified(|state| match state {
                State::Ready { tools: old, .. } => {
                    *old = tools.into();
                    true
                }
                _ => false,
            });
        }
    }

    /// Marks a server as restarting after it died for `reason`, keeping the tools
    /// it offered (they stay offered while it comes back).
    pub fn restarting(&self, server: &str, reason: String) {
        if let Some(slot) = self.servers.get(server) {
            slot.state.send_modify(|state| {
                let tools = match state {
                    State::Ready { tools, .. } | State::Restarting { tools, .. } => tools.clone(),
                    _ => Arc::from([]),
                };
                *state = State::Restarting { reason, tools };
            });
        }
    }

    /// Records the process group of a server's program (`None` once it is gone).
    pub fn set_group(&self, server: &str, group: Option<rustix::process::Pid>) {
        if let Some(slot) = self.servers.get(server) {
            *slot
                .group
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = group;
        }
    }

    /// Waits until no server is starting any more (each has its own time limit).
    pub async fn settled(&self) {
        for slot in self.servers.values() {
            let mut rx = slot.state.subscribe();
            let _ = rx.wait_for(|s| !matches!(s, State::Starting)).await;
        }
    }

    /// Kills what is left of every server's program: the backstop for a runtime
    /// that ends without its actors getting to stop them.
    pub fn shutdown(&self) {
        for slot in self.servers.values() {
            let group = slot
                .group
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take();
            super::connection::kill_group(group, rustix::process::Signal::KILL);
            slot.state.send_replace(State::Stopped);
        }
    }

    /// The calls whose progress notifications are told (what each server's
    /// connection tells them to).
    pub fn progress(&self) -> Arc<super::progress::Progress> {
        self.progress.clone()
    }

    /// Sends a call to `tool` (its server's own name) of `server`, waiting for a
    /// server that is starting or restarting, and gives back its result as text
    /// (an `isError` result is an error result).
    async fn call(
        &self,
        server: &str,
        tool: &str,
        input: Value,
        ctx: &ToolContext,
    ) -> Result<String, ToolError> {
        let Some(slot) = self.servers.get(server) else {
            return Err(ToolError::Failed(format!("no MCP server {server:?}")));
        };
        let mut rx = slot.state.subscribe();
        let ready = tokio::select! {
            () = ctx.cancel.cancelled() => return Err(ToolError::Cancelled),
            state = rx.wait_for(|s| !matches!(s, State::Starting | State::Restarting { .. })) => {
                state.map(|s| s.clone()).unwrap_or(State::Stopped)
            }
        };
        let peer = match ready {
            State::Ready { peer, .. } => peer,
            State::Failed { reason } => {
                return Err(ToolError::Failed(format!(
                    "MCP server {server:?} is not running: {reason}"
                )));
            }
            _ => {
                return Err(ToolError::Failed(format!(
                    "MCP server {server:?} has stopped"
                )));
            }
        };
        let arguments = match input {
            Value::Object(map) => Some(map),
            Value::Null => None,
            other => {
                return Err(ToolError::InvalidInput(format!(
                    "the input must be an object, not {other}"
                )));
            }
        };
        let mut params = rmcp::model::CallToolRequestParams::new(tool.to_owned());
        params.arguments = arguments;
        let request =
            rmcp::model::ClientRequest::CallToolRequest(rmcp::model::Request::new(params));
        let options = rmcp::service::PeerRequestOptions::no_options();
        let handle = match peer.send_request_with_option(request, options).await {
            Ok(handle) => handle,
            Err(e) => return Err(ToolError::Failed(self.failure(server, &e).await)),
        };
        // What the server says of the call's progress is its output, for
        // whoever watches.
        let token = super::progress::token_text(&handle.progress_token);
        let _watched = (ctx.events.clone())
            .map(|events| self.progress.watch(server, &token, events, &ctx.call_id));
        // A call given up on before its answer (cancelled, timed out, its
        // session gone) is cancelled at the server too.
        let mut given_up = GivenUp(Some((handle.peer.clone(), handle.id.clone())));
        // The server's death ends the call, whatever the transport makes of it.
        let mut gone = slot.state.subscribe();
        let result = tokio::select! {
            () = ctx.cancel.cancelled() => return Err(ToolError::Cancelled),
            result = handle.await_response() => result,
            state = gone.wait_for(|s| !matches!(s, State::Ready { .. })) => {
                let state = state.map(|s| s.clone()).unwrap_or(State::Stopped);
                return Err(ToolError::Failed(crashed(server, &state)));
            }
        };
        given_up.0 = None;
        match result {
            Ok(rmcp::model::ServerResult::CallToolResult(result)) => {
                match listing::result_text(&result) {
                    (text, false) => Ok(text),
                    (text, true) => Err(ToolError::Failed(text)),
                }
            }
            // An answer with no content is an empty result.
            Ok(
                rmcp::model::ServerResult::EmptyResult(_)
                | rmcp::model::ServerResult::TaskAckResult(_),
            ) => Ok(String::new()),
            Ok(_) => Err(ToolError::Failed(format!(
                "MCP server {server:?} answered the call with something that is not a tool's result"
            ))),
            Err(e) => Err(ToolError::Failed(self.failure(server, &e).await)),
        }
    }

    /// Why a call failed, in words: a server that died under it is named as
    /// crashed, with its reason once its actor knows it.
    async fn failure(&self, server: &str, error: &rmcp::ServiceError) -> String {
        let closed = matches!(
            error,
            rmcp::ServiceError::TransportClosed | rmcp::ServiceError::TransportSend(_)
        );
        if !closed {
            return format!("MCP server {server:?} answered with an error: {error}");
        }
        let Some(slot) = self.servers.get(server) else {
            return format!("MCP server {server:?} closed the connection");
        };
        // Its actor learns why (the exit status) a moment after the call does.
        let mut rx = slot.state.subscribe();
        let known = tokio::time::timeout(
            Duration::from_secs(2),
            rx.wait_for(|s| !matches!(s, State::Ready { .. })),
        )
        .await;
        let state = known
            .ok()
            .and_then(Result::ok)
            .map_or(State::Stopped, |s| s.clone());
        crashed(server, &state)
    }
}

/// What a call whose server died under it tells the model.
fn crashed(server: &str, state: &State) -> String {
    match state {
        State::Restarting { reason, .. } => format!(
            "MCP server {server:?} crashed during this call ({reason}); it is being restarted, and the call was not completed"
        ),
        State::Failed { reason } => {
            format!("MCP server {server:?} crashed during this call and is not running: {reason}")
        }
        _ => format!("MCP server {server:?} stopped during this call"),
    }
}

/// A call's request, cancelled at its server when this is dropped before the
/// answer came (then it holds nothing).
struct GivenUp(Option<(rmcp::Peer<rmcp::RoleClient>, rmcp::model::RequestId)>);

impl Drop for GivenUp {
    fn drop(&mut self) {
        let Some((peer, id)) = self.0.take() else {
            return;
        };
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let cancelled = rmcp::model::CancelledNotificationParam::new(
                    Some(id),
                    Some("cancelled".into()),
                );
                let _ = peer.notify_cancelled(cancelled).await;
            });
        }
    }
}

/// The MCP tools one session may use: those of `servers` that its role's list
/// allows.
#[derive(Clone, Debug)]
pub struct McpTools {
    hub: Arc<McpHub>,
    /// The servers it uses.
    servers: Vec<String>,
    /// Its role's `mcp__…` entries (`None`: every tool of those servers).
    allowed: Option<Vec<String>>,
    /// Its role's disallowed `mcp__…` entries.
    denied: Vec<String>,
    /// The `mcp__…` entries of each narrowing in force (a slash command's
    /// or a caller's `allowed-tools`): a tool must be named by every one.
    only: Vec<Vec<String>>,
}

impl McpTools {
    /// The tools of `servers` of `hub`, as `allowed` and `denied` (`mcp__server`
    /// or `mcp__server__tool` entries) say.
    pub fn new(
        hub: Arc<McpHub>,
        servers: Vec<String>,
        allowed: Option<Vec<String>>,
        denied: Vec<String>,
    ) -> Self {
        Self {
            hub,
            servers,
            allowed,
            denied,
            only: Vec::new(),
        }
    }

    /// The same, offering only what each of `narrowings` (the `mcp__…`
    /// entries of each narrowing's `allowed-tools`) names too.
    pub fn narrowed(mut self, narrowings: Vec<Vec<String>>) -> Self {
        self.only.extend(narrowings);
        self
    }

    fn admits(&self, server: &str, full_name: &str) -> bool {
        let whole = format!("mcp__{server}");
        let names = |list: &[String]| list.iter().any(|e| *e == whole || e == full_name);
        self.allowed.as_deref().is_none_or(names)
            && self.only.iter().all(|list| names(list))
            && !names(&self.denied)
    }

    /// Every tool offered now, with its server.
    fn offered(&self) -> Vec<(String, ToolInfo)> {
        let mut out = Vec::new();
        for server in &self.servers {
            let Some(state) = self.hub.state(server) else {
                continue;
            };
            for tool in state.tools() {
                if self.admits(server, &tool.full_name) {
                    out.push((server.clone(), tool.clone()));
                }
            }
        }
        out
    }
}

impl ToolSource for McpTools {
    fn specs(&self) -> Vec<ToolSpec> {
        self.offered()
            .into_iter()
            .map(|(_, tool)| ToolSpec {
                name: tool.full_name,
                description: tool.description,
                parameters: (*tool.schema).clone(),
            })
            .collect()
    }

    fn get(&self, name: &str) -> Option<Arc<dyn Tool>> {
        self.offered()
            .into_iter()
            .find(|(_, tool)| tool.full_name == name)
            .map(|(server, mut info)| {
                // A server's word that a tool changes nothing is believed only
                // where the person's own file says so.
                info.read_only &= self.hub.trusts_annotations(&server);
                Arc::new(McpTool {
                    hub: self.hub.clone(),
                    server,
                    info,
                }) as Arc<dyn Tool>
            })
    }

    fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }
}

/// One MCP tool, as a session calls it.
#[derive(Debug)]
pub struct McpTool {
    hub: Arc<McpHub>,
    server: String,
    info: ToolInfo,
}

impl Tool for McpTool {
    // The name the model knows, not the server's own.
    #[allow(clippy::misnamed_getters)]
    fn name(&self) -> &str {
        &self.info.full_name
    }

    fn description(&self) -> &str {
        &self.info.description
    }

    fn input_schema(&self) -> Value {
        (*self.info.schema).clone()
    }

    fn read_only(&self) -> bool {
        self.info.read_only
    }

    /// A server's call may have had effects nobody here can see: a started call
    /// is reported as interrupted on resume, never made again.
    fn rerun_on_resume(&self) -> bool {
        false
    }

    fn concurrency(&self, _input: &Value) -> Concurrency {
        if self.info.read_only {
            Concurrency::Safe
        } else {
            // Whatever the server touches, nobody here can tell: it runs alone.
            Concurrency::Unsafe {
                resources: vec!["*".to_owned()],
            }
        }
    }

    fn call<'a>(
        &'a self,
        input: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(self.hub.call(&self.server, &self.info.name, input, ctx))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::config::{Origin, Transport};

    /// A hub of servers `names`; the first's annotations are trusted.
    fn hub(names: &[&str]) -> Arc<McpHub> {
        let configs = names
            .iter()
            .enumerate()
            .map(|(i, name)| ServerConfig {
                name: (*name).to_owned(),
                transport: Transport::Stdio {
                    command: "srv".into(),
                    args: Vec::new(),
                    env: Vec::new(),
                },
                written: "srv".into(),
                origin: Origin::User("mcp.json".into()),
                trust_annotations: i == 0,
            })
            .collect();
        Arc::new(McpHub::new(configs))
    }

    fn tool(server: &str, name: &str, read_only: bool) -> ToolInfo {
        ToolInfo {
            full_name: listing::full_name(server, name),
            name: name.to_owned(),
            description: String::new(),
            schema: Arc::new(serde_json::json!({"type": "object"})),
            read_only,
        }
    }

    #[test]
    fn a_restarting_server_keeps_offering_its_tools_and_a_role_sees_what_it_names() {
        let hub = hub(&["a", "b"]);
        let tools: Arc<[ToolInfo]> =
            vec![tool("a", "look", true), tool("a", "write", false)].into();
        hub.set(
            "a",
            State::Restarting {
                reason: "first".into(),
                tools,
            },
        );
        hub.restarting("a", "again".into());
        let Some(State::Restarting { reason, tools }) = hub.state("a") else {
            panic!("{:?}", hub.state("a"))
        };
        assert_eq!((reason.as_str(), tools.len()), ("again", 2));
        // A server that never answered offers nothing while it restarts.
        hub.restarting("b", "down".into());
        assert!(hub.state("b").unwrap().tools().is_empty());
        let names =
            |mcp: &McpTools| -> Vec<String> { mcp.specs().into_iter().map(|s| s.name).collect() };
        let servers = vec!["a".to_owned(), "b".to_owned()];
        let every = McpTools::new(hub.clone(), servers.clone(), None, Vec::new());
        assert_eq!(names(&every), ["mcp__a__look", "mcp__a__write"]);
        let one = McpTools::new(
            hub.clone(),
            servers.clone(),
            Some(vec!["mcp__a__look".into()]),
            Vec::new(),
        );
        assert_eq!(names(&one), ["mcp__a__look"]);
        assert!(one.get("mcp__a__write").is_none());
        // A narrowing keeps what it names too; its other entries say nothing.
        let narrowed = McpTools::new(hub.clone(), servers.clone(), None, Vec::new())
            .narrowed(vec![vec!["mcp__a__write".into()]]);
        assert_eq!(names(&narrowed), ["mcp__a__write"]);
        let closed = McpTools::new(hub.clone(), servers.clone(), None, Vec::new())
            .narrowed(vec![Vec::new()]);
        assert!(names(&closed).is_empty());
        let denied = McpTools::new(
            hub,
            servers,
            Some(vec!["mcp__a".into()]),
            vec!["mcp__a__write".into()],
        );
        assert_eq!(names(&denied), ["mcp__a__look"]);
        let look = denied.get("mcp__a__look").unwrap();
        assert!(look.read_only() && look.concurrency(&Value::Null) == Concurrency::Safe);
        assert!(!look.rerun_on_resume(), "an MCP call is never made twice");
    }

    #[test]
    fn a_read_only_hint_is_believed_only_for_a_server_the_person_trusts_with_it() {
        let hub = hub(&["trusted", "other"]);
        for server in ["trusted", "other"] {
            let tools: Arc<[ToolInfo]> = vec![tool(server, "look", true)].into();
            // A restarting server still offers the tools it listed.
            hub.set(
                server,
                State::Restarting {
                    reason: "down".into(),
                    tools,
                },
            );
        }
        let servers = vec!["trusted".to_owned(), "other".to_owned()];
        let mcp = McpTools::new(hub, servers, None, Vec::new());
        assert!(mcp.get("mcp__trusted__look").unwrap().read_only());
        let claimed = mcp.get("mcp__other__look").unwrap();
        assert!(!claimed.read_only());
        assert!(claimed.concurrency(&Value::Null) != Concurrency::Safe);
    }
}
