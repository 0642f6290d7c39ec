//! The run's MCP servers: from the user's `~/.config/orchestrate/mcp.json`, the
//! workspace's `.mcp.json` (a later definition of the same name wins, as in
//! Claude Code) and the roles' own `mcpServers`. As the trust rule says, the
//! workspace's and a repository role's start only in a workspace the person
//! trusts with them (asked once, showing each command; remembered in their
//! file).

use std::path::Path;
use std::time::Duration;

use super::rule::{self as trust_rule, Setting, Verdict};
use super::sources::Sources;
use crate::config::ConfigFile;
use crate::error::ConfigError;
use crate::mcp::connection::DEFAULT_START_TIMEOUT;
use crate::mcp::{Origin, ServerConfig};

/// The servers defined for a run, before trust.
#[derive(Debug, Default)]
pub(super) struct Defined {
    /// Every usable server, by name.
    pub(super) servers: Vec<ServerConfig>,
    /// Servers that cannot be used and other oddities, one line each.
    pub(super) warnings: Vec<String>,
}

/// Every server definition of `sources`: the user's file, the workspace's, then
/// the roles' (`trusted` when a role comes from outside the workspace).
pub(super) fn define(
    sources: &Sources,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<Defined, ConfigError> {
    let mut defined = Defined::default();
    let (workspace, catalog) = (&sources.workspace, &sources.catalog);
    for file in &sources.mcp {
        let shown = file.path.display().to_string();
        let origin = match file.origin {
            trust_rule::Origin::Workspace => Origin::Workspace(shown),
            _ => Origin::User(shown),
        };
        let read =
            crate::mcp::config::parse(&file.text, &origin, env).map_err(|(line, message)| {
                ConfigError::File {
                    path: origin.path().to_owned(),
                    line,
                    message,
                }
            })?;
        defined.warnings.extend(read.warnings);
        for server in read.servers {
            defined.servers.retain(|s| s.name != server.name);
            defined.servers.push(server);
        }
    }
    for role in catalog.roles() {
        let own = Path::new(&role.source);
        let trusted = role.source.starts_with("built-in:") || !own.starts_with(workspace);
        let origin = Origin::Role {
            path: role.source.clone(),
            role: role.name.clone(),
            trusted,
        };
        let line = role.mcp.line;
        let read = crate::mcp::config::servers_of(&role.mcp.defined, &|_| line, &origin, env)
            .map_err(|(line, message)| ConfigError::File {
                path: role.source.clone(),
                line,
                message,
            })?;
        defined.warnings.extend(read.warnings);
        for server in read.servers {
            if let Some(first) = defined.servers.iter().find(|s| s.name == server.name) {
                defined.warnings.push(format!(
                    "{}:{line}: role {:?} defines MCP server {:?}, which {} defines already; this definition is ignored",
                    role.source,
                    role.name,
                    server.name,
                    first.origin.path()
                ));
                continue;
            }
            defined.servers.push(server);
        }
        for name in &role.mcp.named {
            if !defined.servers.iter().any(|s| &s.name == name) {
                defined.warnings.push(format!(
                    "{}:{line}: role {:?} names MCP server {name:?}, which is not defined (in .mcp.json or ~/.config/orchestrate/mcp.json)",
                    role.source, role.name
                ));
            }
        }
    }
    Ok(defined)
}

/// Splits `defined` into the servers that may start in `workspace` (the user's
/// own, and those the user's file trusts, or all of them when `flag`:
/// `--trust-workspace`) and those that need the person's yes.
pub(super) fn partition(
    flag: bool,
    workspace: &Path,
    defined: Vec<ServerConfig>,
    user: &ConfigFile,
) -> (Vec<ServerConfig>, Vec<ServerConfig>) {
    let key = workspace.display().to_string();
    defined.into_iter().partition(|s| {
        let origin = match s.origin.needs_trust() {
            true => trust_rule::Origin::Workspace,
            false => trust_rule::Origin::User,
        };
        let trusted = flag || user.trusts_mcp(&key, &s.trust_key());
        trust_rule::verdict(Setting::McpServer, origin, trusted) == Verdict::Use
    })
}

/// The warning for servers the person declined.
pub(super) fn declined(servers: &[ServerConfig]) -> String {
    let names: Vec<&str> = servers.iter().map(|s| s.name.as_str()).collect();
    format!(
        "MCP servers {} are not started: this workspace is not trusted to start them",
        names.join(", ")
    )
}

/// The refusal of a run whose workspace starts servers nobody could trust.
pub(super) fn refusal(unasked: &[ServerConfig]) -> ConfigError {
    let shown: Vec<String> = unasked
        .iter()
        .map(|s| format!("{} ({}: {})", s.name, s.origin.path(), s.written))
        .collect();
    ConfigError::Invalid(format!(
        "this workspace starts MCP servers it is not trusted to start: {}; run on a terminal to be asked, or pass --trust-workspace",
        shown.join(", ")
    ))
}

/// How long a server may take to start: Claude Code's `MCP_TIMEOUT`
/// (milliseconds), or 30 s.
pub(super) fn start_limit(env: &impl Fn(&str) -> Option<String>) -> Duration {
    env("MCP_TIMEOUT")
        .and_then(|ms| ms.trim().parse::<u64>().ok())
        .filter(|ms| *ms > 0)
        .map_or(DEFAULT_START_TIMEOUT, Duration::from_millis)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn servers() -> Vec<ServerConfig> {
        let text = r#"{"mcpServers": {"repo": {"command": "srv", "args": ["-x"]}}}"#;
        let mut servers =
            crate::mcp::config::parse(text, &Origin::Workspace("/w/.mcp.json".into()), &|_| None)
                .unwrap()
                .servers;
        let mine = r#"{"mcpServers": {"mine": {"command": "own"}}}"#;
        servers.extend(
            crate::mcp::config::parse(mine, &Origin::User("/h/mcp.json".into()), &|_| None)
                .unwrap()
                .servers,
        );
        servers
    }

    fn names(servers: &[ServerConfig]) -> Vec<&str> {
        let mut names: Vec<&str> = servers.iter().map(|s| s.name.as_str()).collect();
        names.sort_unstable();
        names
    }

    #[test]
    fn a_repositorys_servers_need_trust_and_the_users_never() {
        let ws = Path::new("/w");
        let nobody = ConfigFile::default();
        let (ready, asked) = partition(false, ws, servers(), &nobody);
        assert_eq!((names(&ready), names(&asked)), (vec!["mine"], vec!["repo"]));
        assert!(refusal(&asked).to_string().contains("--trust-workspace"));
        assert_eq!(
            declined(&asked),
            "MCP servers repo are not started: this workspace is not trusted to start them"
        );
        let (ready, asked) = partition(true, ws, servers(), &nobody);
        assert_eq!((names(&ready), asked.len()), (vec!["mine", "repo"], 0));
        let trusting = ConfigFile::parse(
            "config.toml",
            "[trust.\"/w\"]\nmcp_servers = [\"repo: srv -x\"]\n",
        )
        .unwrap();
        let (ready, asked) = partition(false, ws, servers(), &trusting);
        assert_eq!((names(&ready), asked.len()), (vec!["mine", "repo"], 0));
        // Trusting one command is not trusting another under the same name.
        let other = ConfigFile::parse(
            "config.toml",
            "[trust.\"/w\"]\nmcp_servers = [\"repo: srv -y\"]\n",
        )
        .unwrap();
        assert_eq!(partition(false, ws, servers(), &other).1.len(), 1);
    }

    #[test]
    fn definitions_come_from_both_files_and_the_roles_and_clashes_are_named() {
        let home = tempfile::tempdir().unwrap();
        let ws = tempfile::tempdir().unwrap();
        let ws_path = ws.path().canonicalize().unwrap();
        let write = |path: &Path, text: &str| {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        };
        write(
            &home.path().join(".config/orchestrate/mcp.json"),
            r#"{"mcpServers": {"docs": {"command": "mine"}, "shared": {"command": "user"}}}"#,
        );
        write(
            &ws_path.join(".mcp.json"),
            r#"{"mcpServers": {"shared": {"command": "repo"}}}"#,
        );
        write(
            &ws_path.join("agents/helper.md"),
            "---\nname: helper\ndescription: d\nmcpServers:\n  - nowhere\n  - docs:\n      command: again\n  - own:\n      command: own\n---\n",
        );
        let home_dir = home.path().display().to_string();
        let env = move |k: &str| (k == "HOME").then(|| home_dir.clone());
        let sources = Sources::read(&ws_path, None, &env).unwrap();
        let defined = define(&sources, &env).unwrap();
        let shown: Vec<String> = defined
            .servers
            .iter()
            .map(|s| format!("{}={} {}", s.name, s.written, s.origin.needs_trust()))
            .collect();
        // The workspace's definition of a name wins; a repository role's own server
        // needs trust like the workspace's file.
        assert_eq!(
            shown,
            ["docs=mine false", "shared=repo true", "own=own true"]
        );
        let role = ws_path.join("agents/helper.md").display().to_string();
        let user = home
            .path()
            .join(".config/orchestrate/mcp.json")
            .display()
            .to_string();
        assert_eq!(
            defined.warnings,
            [
                format!(
                    "{role}:5: role \"helper\" defines MCP server \"docs\", which {user} defines already; this definition is ignored"
                ),
                format!(
                    "{role}:5: role \"helper\" names MCP server \"nowhere\", which is not defined (in .mcp.json or ~/.config/orchestrate/mcp.json)"
                ),
            ]
        );
    }

    #[test]
    fn the_start_limit_is_claude_codes_mcp_timeout_in_milliseconds() {
        assert_eq!(start_limit(&|_| None), DEFAULT_START_TIMEOUT);
        let env = |v: &'static str| move |k: &str| (k == "MCP_TIMEOUT").then(|| v.to_owned());
        assert_eq!(start_limit(&env("1500")), Duration::from_millis(1500));
        assert_eq!(start_limit(&env("soon")), DEFAULT_START_TIMEOUT);
        assert_eq!(start_limit(&env("0")), DEFAULT_START_TIMEOUT);
    }
}
