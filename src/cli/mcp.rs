//! `orchestrate mcp list`: every MCP server of the workspace and the user, where
//! it is defined, whether it starts, and its tools (each started, listed and
//! stopped again).

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;

use super::flags::{Cli, McpAction};
use super::mcp_servers::{define, start_limit, trust};
use super::{exit, providers, setup};
use crate::error::ConfigError;
use crate::mcp::connection;
use crate::tools::permissions::Approver;
use crate::ui;

/// `orchestrate mcp list`: every server, where it is defined, whether it starts,
/// and its tools.
pub(super) async fn run(
    cli: &Cli,
    action: &McpAction,
    env: &impl Fn(&str) -> Option<String>,
    approver: Arc<dyn Approver>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> ExitCode {
    let McpAction::List = action;
    let prepared = (|| {
        let workspace = setup::workspace(cli)?;
        let files = providers::read(&workspace, env)?;
        let (_, catalog) = setup::roles(cli, &workspace, env);
        let defined = define(&workspace, &catalog, env)?;
        Ok::<_, ConfigError>((workspace, files, defined))
    })();
    let (workspace, files, defined) = match prepared {
        Ok(prepared) => prepared,
        Err(e) => {
            let _ = writeln!(err, "orchestrate: {e}");
            return ExitCode::from(exit::USAGE);
        }
    };
    for warning in &defined.warnings {
        let _ = writeln!(err, "orchestrate: warning: {warning}");
    }
    if defined.servers.is_empty() {
        let _ = writeln!(
            out,
            "No MCP servers: define them in .mcp.json or ~/.config/orchestrate/mcp.json."
        );
        return ExitCode::SUCCESS;
    }
    let all = defined.servers.clone();
    let trusted = trust(
        cli.trust_workspace,
        &workspace,
        defined.servers,
        &files,
        approver.as_ref(),
    )
    .await;
    for warning in &trusted.warnings {
        let _ = writeln!(err, "orchestrate: warning: {warning}");
    }
    let limit = start_limit(env);
    // The user's own file alone names key variables, as for a run.
    let keys = files.user.key_variables();
    let starts = trusted
        .servers
        .iter()
        .map(|s| connection::connect(s, &workspace, None, limit, &keys));
    let started = futures::future::join_all(starts).await;
    for server in &all {
        let _ = writeln!(
            out,
            "{}  ({})\n  {}",
            server.name,
            server.origin.path(),
            server.written
        );
        let index = trusted.servers.iter().position(|s| s.name == server.name);
        match index.map(|i| &started[i]) {
            None => {
                let _ = writeln!(
                    out,
                    "  not started: this workspace is not trusted to start it (answer on a terminal, or pass --trust-workspace)"
                );
            }
            Some(Err(why)) => {
                let _ = writeln!(out, "  did not start: {why}");
            }
            Some(Ok(connection)) => {
                let _ = writeln!(
                    out,
                    "  started: {}",
                    ui::progress::count(connection.tools.len() as u64, "tool")
                );
                for tool in &connection.tools {
                    let first = tool.description.lines().next().unwrap_or_default();
                    let short: String = first.chars().take(80).collect();
                    let mark = if tool.read_only { "  (read-only)" } else { "" };
                    let _ = writeln!(out, "    {}{mark}  {short}", tool.full_name);
                }
                for line in &connection.left_out {
                    let _ = writeln!(out, "    {line}");
                }
            }
        }
    }
    for connection in started.into_iter().flatten() {
        connection.close().await;
    }
    ExitCode::SUCCESS
}
