//! The MCP client: servers defined as Claude Code defines them ([`config`]),
//! reached through `rmcp` over stdio or streamable HTTP ([`connection`]), their
//! tools offered to the sessions whose roles may use them as
//! `mcp__<server>__<tool>` ([`hub`], [`listing`]). Each server is kept running by
//! an actor under the Orchestrator (`actors::orchestrator::mcp_server`).

pub mod config;
pub mod connection;
pub mod hub;
pub mod listing;
pub mod progress;

use std::sync::Arc;

pub use config::{Origin, ServerConfig, Transport};
pub use hub::{McpHub, McpTools, State};

/// The servers a session of role `role` uses: every server of the run but those
/// another role defined for itself.
pub fn servers_for(hub: &McpHub, role: &str) -> Vec<String> {
    hub.configs()
        .filter(|c| match &c.origin {
            Origin::Role { role: owner, .. } => owner == role,
            Origin::User(_) | Origin::Workspace(_) => true,
        })
        .map(|c| c.name.clone())
        .collect()
}

/// The MCP tools of role `role`, whose `tools:` list is `tools` (`None`: every
/// tool) and whose `disallowedTools:` is `disallowed`: of the servers it uses,
/// those its `mcp__server` and `mcp__server__tool` entries name (all of them
/// with no list) and every tool of the servers it defines itself; less those its
/// disallowed entries name.
pub fn tools_for(
    hub: &Arc<McpHub>,
    role: &str,
    tools: Option<&[String]>,
    disallowed: &[String],
) -> McpTools {
    let servers = servers_for(hub, role);
    let allowed = tools.map(|list| {
        let mut named: Vec<String> = list
            .iter()
            .filter(|t| t.starts_with("mcp__"))
            .cloned()
            .collect();
        named.extend(
            hub.configs()
                .filter(|c| matches!(&c.origin, Origin::Role { role: owner, .. } if owner == role))
                .map(|c| format!("mcp__{}", c.name)),
        );
        named
    });
    let denied = disallowed
        .iter()
        .filter(|t| t.starts_with("mcp__"))
        .cloned()
        .collect();
    McpTools::new(hub.clone(), servers, allowed, denied)
}
