//! `orchestrate mcp list`: every MCP server of the workspace and the user, where
//! it is defined, whether it starts, and its tools (each started, listed and
//! stopped again).

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;

use super::flags::{Cli, McpAction};
use super::{exit, setup, trust};
use crate::mcp::connection;
use crate::setup::{Prepared, Question};
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
        let (workspace, state) = setup::state(cli, env)?;
        crate::setup::prepare(&workspace, state, setup::options(cli), env)
    })();
    let mut prepared: Prepared = match prepared {
        Ok(prepared) => prepared,
        Err(e) => {
            let _ = writeln!(err, "orchestrate: {e}");
            return ExitCode::from(exit::USAGE);
        }
    };
    // Only the servers are asked about: nothing here sends a model request.
    let servers: Vec<Question> = prepared
        .questions()
        .iter()
        .filter(|q| matches!(q, Question::Servers(_)))
        .cloned()
        .collect();
    let answer = trust::ask(&servers, approver.as_ref())
        .await
        .first()
        .copied()
        .flatten();
    let (all, starting) = prepared.servers_answered(answer);
    for note in prepared.notes() {
        let _ = writeln!(err, "orchestrate: warning: {note}");
    }
    if all.is_empty() {
        let _ = writeln!(
            out,
            "No MCP servers: define them in .mcp.json or ~/.config/orchestrate/mcp.json."
        );
        return ExitCode::SUCCESS;
    }
    let limit = Prepared::mcp_limit(env);
    // The user's own file alone names key variables, as for a run.
    let keys = prepared.key_variables();
    let workspace = prepared.workspace().to_owned();
    let starts = starting
        .iter()
        .map(|s| connection::connect(s, &workspace, None, limit, &keys, Default::default()));
    let started = futures::future::join_all(starts).await;
    for server in &all {
        let _ = writeln!(
            out,
            "{}  ({})\n  {}",
            server.name,
            server.origin.path(),
            server.written
        );
        let index = starting.iter().position(|s| s.name == server.name);
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
                    let mark = match (tool.read_only, server.trust_annotations) {
                        (true, true) => "  (read-only)",
                        (true, false) => "  (says it is read-only; gated all the same)",
                        (false, _) => "",
                    };
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
