//! MCP server definitions as Claude Code writes them, in `.mcp.json`, in the
//! user's `~/.config/orchestrate/mcp.json` and in a role's `mcpServers`:
//!
//! ```json
//! {"mcpServers": {
//!   "files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "."],
//!             "env": {"LOG": "${LOG_LEVEL:-info}"}},
//!   "docs":  {"type": "http", "url": "https://example.com/mcp",
//!             "headers": {"Authorization": "Bearer ${DOCS_TOKEN}"}}
//! }}
//! ```
//!
//! Pure: the text becomes [`ServerConfig`]s, `${VAR}` and `${VAR:-default}` are
//! expanded from the environment given, and every problem is named with its file
//! and line. Starting servers is [`super::connection`]'s.

use serde_json::{Map, Value};

/// Where a server was defined, which decides whether it needs the workspace's trust.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// The user's own file: trusted.
    User(String),
    /// The workspace's `.mcp.json`: a repository starting programs on the person's
    /// machine, so it needs their trust.
    Workspace(String),
    /// A role file's `mcpServers`; `trusted` when the role is the user's own or
    /// built in, not the repository's.
    Role {
        /// The role file.
        path: String,
        /// The role.
        role: String,
        /// Whether it comes from outside the repository.
        trusted: bool,
    },
}

impl Origin {
    /// The file it came from.
    pub fn path(&self) -> &str {
        match self {
            Self::User(path) | Self::Workspace(path) | Self::Role { path, .. } => path,
        }
    }

    /// Whether starting it needs the workspace's trust.
    pub fn needs_trust(&self) -> bool {
        match self {
            Self::User(_) => false,
            Self::Workspace(_) => true,
            Self::Role { trusted, .. } => !trusted,
        }
    }
}

/// How to reach a server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Transport {
    /// A program speaking MCP on its stdin and stdout.
    Stdio {
        /// The program.
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Variables added to its environment.
        env: Vec<(String, String)>,
    },
    /// A streamable-HTTP endpoint.
    Http {
        /// The endpoint.
        url: String,
        /// Headers sent with every request.
        headers: Vec<(String, String)>,
    },
}

/// One server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerConfig {
    /// Its name: tools are offered as `mcp__<name>__<tool>`.
    pub name: String,
    /// How to reach it, variables expanded.
    pub transport: Transport,
    /// How its file writes it, variables not expanded: what a person trusts, and
    /// what is remembered when they do.
    pub written: String,
    /// Where it was defined.
    pub origin: Origin,
    /// Its tools' annotations (`readOnlyHint`) are believed: only the person's
    /// own file can say so (`"trustAnnotations": true`). Otherwise every tool of
    /// it is gated as one that changes things, whatever it claims.
    pub trust_annotations: bool,
}

impl ServerConfig {
    /// What trusting this server means, as remembered in the user's file: its name
    /// and everything it runs or reaches, as written.
    pub fn trust_key(&self) -> String {
        format!("{}: {}", self.name, self.written)
    }
}

/// A file's servers, and the servers it defines that cannot be used here, as
/// warnings (a variable that is not set, the legacy SSE transport).
#[derive(Debug, Default, PartialEq)]
pub struct Servers {
    /// The usable servers, in the file's order of names (sorted).
    pub servers: Vec<ServerConfig>,
    /// One line each.
    pub warnings: Vec<String>,
}

/// A problem with a file, located.
pub type Problem = (usize, String);

/// Reads an `mcp.json`-format `text` (the file `origin` names), expanding
/// variables with `env`. A file that does not parse, or a server written wrong,
/// is an error with its line.
pub fn parse(
    text: &str,
    origin: &Origin,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Servers, Problem> {
    let value: Value = serde_json::from_str(text).map_err(|e| (e.line(), e.to_string()))?;
    let Some(root) = value.as_object() else {
        return Err((1, "the file must hold a JSON object".into()));
    };
    let servers = match root.get("mcpServers") {
        None => return Ok(Servers::default()),
        Some(Value::Object(servers)) => servers,
        Some(_) => {
            return Err((
                line_of(text, "mcpServers"),
                "mcpServers must be an object of servers by name".into(),
            ));
        }
    };
    servers_of(servers, &|name| line_of(text, name), origin, env)
}

/// Reads the servers of an `mcpServers` object; `line` says where a server's
/// name is written.
pub fn servers_of(
    servers: &Map<String, Value>,
    line: &dyn Fn(&str) -> usize,
    origin: &Origin,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Servers, Problem> {
    let mut out = Servers::default();
    for (name, entry) in servers {
        let line = line(name);
        let located = |message: String| (line, format!("MCP server {name:?}: {message}"));
        check_name(name).map_err(located)?;
        let Some(entry) = entry.as_object() else {
            return Err(located("must be an object".into()));
        };
        match server(name, entry, origin, env).map_err(located)? {
            Ok(config) => {
                if entry.contains_key(TRUST_ANNOTATIONS) && !config.trust_annotations {
                    out.warnings.push(format!(
                        "{}:{line}: MCP server {name:?}: {TRUST_ANNOTATIONS} is honoured only in ~/.config/orchestrate/mcp.json; its tools are gated as tools that change things",
                        origin.path()
                    ));
                }
                out.servers.push(config);
            }
            Err(warning) => out.warnings.push(format!(
                "{}:{line}: MCP server {name:?} {warning}; it is not started",
                origin.path()
            )),
        }
    }
    Ok(out)
}

/// A server name as Claude Code allows it: letters, digits, `-` and `_`.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty()
        || name.len() > 64
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err("a server name may use only letters, digits, - and _ (at most 64)".into());
    }
    Ok(())
}

/// One server's entry: `Ok(Ok)` a server, `Ok(Err)` a server that cannot be used
/// here (why, as a warning), `Err` an entry written wrong.
fn server(
    name: &str,
    entry: &Map<String, Value>,
    origin: &Origin,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Result<ServerConfig, String>, String> {
    let http = match entry.get("type") {
        None => false,
        Some(Value::String(kind)) => match kind.as_str() {
            "stdio" => false,
            "http" | "streamable-http" => true,
            "sse" => {
                string(entry, "url")?.ok_or("url is required")?;
                return Ok(Err(
                    "uses the legacy SSE transport, which orchestrate does not speak (use its streamable-HTTP endpoint, type \"http\")"
                        .into(),
                ));
            }
            other => {
                return Err(format!(
                    "unknown type {other:?} (known: stdio, http, streamable-http, sse)"
                ));
            }
        },
        Some(other) => return Err(format!("type must be a string, not {other}")),
    };
    let known: &[&str] = if http {
        &["type", "url", "headers", TRUST_ANNOTATIONS]
    } else {
        &["type", "command", "args", "env", TRUST_ANNOTATIONS]
    };
    let trust_annotations = match entry.get(TRUST_ANNOTATIONS) {
        None | Some(Value::Null) => false,
        Some(Value::Bool(trusted)) => *trusted && matches!(origin, Origin::User(_)),
        Some(other) => {
            return Err(format!(
                "{TRUST_ANNOTATIONS} must be true or false, not {other}"
            ));
        }
    };
    if let Some(key) = entry.keys().find(|k| !known.contains(&k.as_str())) {
        return Err(format!(
            "unknown field {key:?} (expected: {})",
            known.join(", ")
        ));
    }
    let expanded = |text: &str| expand(text, env);
    let pairs_expanded = |pairs: &[(String, String)]| -> Result<Vec<(String, String)>, String> {
        pairs
            .iter()
            .map(|(k, v)| Ok((k.clone(), expanded(v)?)))
            .collect()
    };
    let (written, transport) = if http {
        let url = string(entry, "url")?.ok_or("url is required")?;
        let headers = pairs(entry, "headers")?;
        let mut written = format!("http {url}");
        for (key, value) in &headers {
            written.push_str(&format!(" -H {}", quote(&format!("{key}: {value}"))));
        }
        let transport = expanded(&url).and_then(|url| {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(format!("has the url {url:?}, which is not http(s)"));
            }
            Ok(Transport::Http {
                url,
                headers: pairs_expanded(&headers)?,
            })
        });
        (written, transport)
    } else {
        let command = string(entry, "command")?.ok_or("command is required")?;
        let args = strings(entry, "args")?;
        let vars = pairs(entry, "env")?;
        let mut written = String::new();
        for (key, value) in &vars {
            written.push_str(&format!("{key}={} ", quote(value)));
        }
        written.push_str(&quote(&command));
        for arg in &args {
            written.push(' ');
            written.push_str(&quote(arg));
        }
        let transport = (|| {
            Ok(Transport::Stdio {
                command: expanded(&command)?,
                args: args.iter().map(|a| expanded(a)).collect::<Result<_, _>>()?,
                env: pairs_expanded(&vars)?,
            })
        })();
        (written, transport)
    };
    Ok(transport.map(|transport| ServerConfig {
        name: name.to_owned(),
        transport,
        written,
        origin: origin.clone(),
        trust_annotations,
    }))
}

/// The field by which the person's own file says a server's annotations may be
/// believed.
const TRUST_ANNOTATIONS: &str = "trustAnnotations";

fn string(entry: &Map<String, Value>, key: &str) -> Result<Option<String>, String> {
    match entry.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(Some(s.clone())),
        Some(other) => Err(format!("{key} must be a non-empty string, not {other}")),
    }
}

fn strings(entry: &Map<String, Value>, key: &str) -> Result<Vec<String>, String> {
    match entry.get(key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| match item {
                Value::String(s) => Ok(s.clone()),
                other => Err(format!("{key} must list strings, not {other}")),
            })
            .collect(),
        Some(other) => Err(format!("{key} must be a list of strings, not {other}")),
    }
}

fn pairs(entry: &Map<String, Value>, key: &str) -> Result<Vec<(String, String)>, String> {
    match entry.get(key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Object(map)) => map
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => Ok((k.clone(), s.clone())),
                other => Err(format!("{key}.{k} must be a string, not {other}")),
            })
            .collect(),
        Some(other) => Err(format!("{key} must be an object of strings, not {other}")),
    }
}

/// Expands `${VAR}` and `${VAR:-default}` in `text`. A variable that is not set
/// and has no default is an error naming it; a `${` with no `}` is kept as it is.
pub fn expand(text: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            out.push_str(&rest[start..]);
            return Ok(out);
        };
        let inner = &after[..end];
        let (name, default) = match inner.split_once(":-") {
            Some((name, default)) => (name, Some(default)),
            None => (inner, None),
        };
        match (env(name).filter(|v| !v.is_empty()), default) {
            (Some(value), _) => out.push_str(&value),
            (None, Some(default)) => out.push_str(default),
            (None, None) => {
                return Err(format!("needs ${{{name}}}, which is not set"));
            }
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// A word as a shell would need it written, for showing a command to a person.
fn quote(word: &str) -> String {
    if !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:@=+,%${}".contains(c))
    {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

/// The line where `"key":` is first written in `text` (1 when it cannot be found).
fn line_of(text: &str, key: &str) -> usize {
    let needle = format!("{}:", Value::String(key.to_owned()));
    let compact: Vec<(usize, String)> = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.replace(' ', "")))
        .collect();
    compact
        .iter()
        .find(|(_, l)| l.contains(&needle))
        .map_or(1, |(n, _)| *n)
}

#[cfg(test)]
mod tests;
