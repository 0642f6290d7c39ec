//! The run's MCP servers: read from the user's `~/.config/orchestrate/mcp.json`,
//! the workspace's `.mcp.json` (a later definition of the same name wins, as in
//! Claude Code) and the roles' own `mcpServers`; the workspace's and a repository
//! role's started only in a workspace the person trusts with them (asked once on
//! a terminal, showing each command; remembered in their file).

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::providers::Files;
use crate::config;
use crate::error::ConfigError;
use crate::mcp::connection::DEFAULT_START_TIMEOUT;
use crate::mcp::{Origin, ServerConfig};
use crate::roles::catalog::Catalog;
use crate::tools::permissions::Approver;
use crate::ui;

/// The servers defined for a run, before trust.
#[derive(Debug, Default)]
pub(super) struct Defined {
    /// Every usable server, by name.
    pub(super) servers: Vec<ServerConfig>,
    /// Servers that cannot be used and other oddities, one line each.
    pub(super) warnings: Vec<String>,
}

/// Reads every server definition: the user's file, the workspace's, then the
/// roles' (`trusted` when a role comes from outside `workspace`).
pub(super) fn define(
    workspace: &Path,
    catalog: &Catalog,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<Defined, ConfigError> {
    let mut defined = Defined::default();
    let home = env("HOME").map(PathBuf::from);
    let files = [
        home.map(|h| Origin::User(h.join(".config/orchestrate/mcp.json").display().to_string())),
        Some(Origin::Workspace(
            workspace.join(".mcp.json").display().to_string(),
        )),
    ];
    for origin in files.into_iter().flatten() {
        let path = Path::new(origin.path());
        let text = match crate::small_file::read_to_string(path, crate::small_file::MAX_BYTES) {
            Ok(text) => text,
            Err(e) if e.is_not_found() => continue,
            Err(e) => {
                return Err(ConfigError::File {
                    path: origin.path().to_owned(),
                    line: 0,
                    message: e.problem.to_string(),
                });
            }
        };
        let read = crate::mcp::config::parse(&text, &origin, env).map_err(|(line, message)| {
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

/// What the person said about the servers that need the workspace's trust.
#[derive(Debug)]
pub(super) struct Trusted {
    /// The servers that may start.
    pub(super) servers: Vec<ServerConfig>,
    /// Servers left out (declined, or nobody to ask), and a trust that could not
    /// be remembered, one line each.
    pub(super) warnings: Vec<String>,
    /// Servers that need a trust nobody could give (no terminal, no flag).
    pub(super) unasked: Vec<ServerConfig>,
}

/// Which of `defined` may start in `workspace`: the user's own and those the
/// user's file trusts; the rest when `flag` (`--trust-workspace`) says so or the
/// person says yes on the terminal (remembered). A no leaves them out, with a
/// warning; with nobody to ask they are returned as `unasked`.
pub(super) async fn trust(
    flag: bool,
    workspace: &Path,
    defined: Vec<ServerConfig>,
    files: &Files,
    approver: &dyn Approver,
) -> Trusted {
    let key = workspace.display().to_string();
    let (untrusted, mut servers): (Vec<ServerConfig>, Vec<ServerConfig>) = defined
        .into_iter()
        .partition(|s| s.origin.needs_trust() && !files.user.trusts_mcp(&key, &s.trust_key()));
    let mut trusted = Trusted {
        servers: Vec::new(),
        warnings: Vec::new(),
        unasked: Vec::new(),
    };
    if untrusted.is_empty() {
        trusted.servers = servers;
        return trusted;
    }
    let answer = match flag {
        true => Some(true),
        false => approver.confirm(&ui::trust::mcp_question(&untrusted)).await,
    };
    match answer {
        Some(true) => {
            let keys: Vec<String> = untrusted.iter().map(ServerConfig::trust_key).collect();
            let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
            trusted.warnings.extend(super::trust::remembered(
                files.user_path.as_deref(),
                |text| config::trust_mcp(text, &key, &keys),
            ));
            servers.extend(untrusted);
        }
        Some(false) => {
            let names: Vec<&str> = untrusted.iter().map(|s| s.name.as_str()).collect();
            trusted.warnings.push(format!(
                "MCP servers {} are not started: this workspace is not trusted to start them",
                names.join(", ")
            ));
        }
        None => trusted.unasked = untrusted,
    }
    trusted.servers = servers;
    trusted
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
    use super::super::trust::person::Person;
    use super::*;
    use crate::config::ConfigFile;

    fn files(home: &Path) -> Files {
        let path = home.join(".config/orchestrate/config.toml");
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        Files {
            user: ConfigFile::parse("config.toml", &text).unwrap().trusted(),
            user_path: Some(path),
            workspace: ConfigFile::default(),
            workspace_path: "/w/orchestrate.toml".into(),
        }
    }

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

    #[tokio::test]
    async fn a_repositorys_servers_are_asked_about_once_and_the_users_never() {
        let home = tempfile::tempdir().unwrap();
        let ws = Path::new("/w");
        // Nobody to ask: the user's server starts, the repository's waits for a flag.
        let nobody = Person::new(None);
        let got = trust(false, ws, servers(), &files(home.path()), &nobody).await;
        assert_eq!(names(&got.servers), ["mine"]);
        assert_eq!(names(&got.unasked), ["repo"]);
        assert!(
            refusal(&got.unasked)
                .to_string()
                .contains("--trust-workspace")
        );
        // A no: left out with a warning, not remembered; only the repository's shown.
        let no = Person::new(Some(false));
        let got = trust(false, ws, servers(), &files(home.path()), &no).await;
        assert_eq!(names(&got.servers), ["mine"]);
        assert!(got.unasked.is_empty());
        assert_eq!(
            got.warnings,
            ["MCP servers repo are not started: this workspace is not trusted to start them"]
        );
        assert_eq!(
            *no.shown.lock().unwrap(),
            [ui::trust::mcp_question(&servers()[..1])]
        );
        assert!(!home.path().join(".config/orchestrate/config.toml").exists());
        // A yes: started and remembered; the next run asks nothing.
        let yes = Person::new(Some(true));
        let got = trust(false, ws, servers(), &files(home.path()), &yes).await;
        assert_eq!(names(&got.servers), ["mine", "repo"]);
        let again = Person::new(None);
        let got = trust(false, ws, servers(), &files(home.path()), &again).await;
        assert_eq!(names(&got.servers), ["mine", "repo"]);
        assert!(again.shown.lock().unwrap().is_empty());
        let remembered =
            std::fs::read_to_string(home.path().join(".config/orchestrate/config.toml")).unwrap();
        assert_eq!(
            remembered,
            "[trust.\"/w\"]\nmcp_servers = [\"repo: srv -x\"]\n"
        );
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
        let catalog = Catalog::load(&[ws_path.join("agents")]);
        let home_dir = home.path().display().to_string();
        let env = move |k: &str| (k == "HOME").then(|| home_dir.clone());
        let defined = define(&ws_path, &catalog, &env).unwrap();
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
