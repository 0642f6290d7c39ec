//! One configuration file as written (`orchestrate.toml`, or the user's
//! `~/.config/orchestrate/config.toml`): its TOML shape, parsing with errors that name
//! the line, trust, and merging one file over another. It does not read files from
//! disk nor decide what the declarations mean together (that is
//! `resolve`), nor which workspaces may send requests where (`trust`).

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::error::ConfigError;
use crate::model_info::ModelInfo;

/// One configuration file as written.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// The default provider's name.
    pub provider: Option<String>,
    /// The default model: an alias or an id.
    pub model: Option<String>,
    /// Providers by name.
    #[serde(default)]
    pub providers: BTreeMap<String, ProviderEntry>,
    /// Model aliases.
    #[serde(default)]
    pub models: BTreeMap<String, ModelEntry>,
    /// The workspaces whose own `orchestrate.toml` may send requests elsewhere, by
    /// their full path. Honoured only in the user's own file: a repository cannot
    /// trust itself.
    #[serde(default)]
    pub trust: BTreeMap<String, TrustedWorkspace>,
    /// How Bash commands are confined. Honoured only in the user's own file.
    pub sandbox: Option<SandboxEntry>,
    /// What is known about models (`[model_info."gpt-4o"]`): windows, output
    /// limits and prices over the built-in table's.
    #[serde(default)]
    pub model_info: BTreeMap<String, ModelInfo>,
    /// When a session compacts its conversation (`[compaction]`).
    pub compaction: Option<CompactionEntry>,
    /// Whether a run's first prompt gets a short title, written by the `small`
    /// model (or the run's) in the background. Honoured only in the user's own
    /// file: a repository cannot make runs send requests they did not need.
    pub titles: Option<bool>,
    /// Where permission questions are forwarded (`[approval]`). Honoured
    /// only in the user's own file: a repository must not choose who
    /// answers for the person.
    pub approval: Option<ApprovalEntry>,
    /// The NATS servers whose workers may run sub-agents, as `--nats` names
    /// them. Honoured only in the user's own file: a repository must not
    /// send its tasks (and the person's code) elsewhere.
    pub nats: Option<String>,
    /// The leads' public keys whose tasks `orchestrate worker` runs, beside
    /// its `--trust-lead`. Honoured only in the user's own file.
    #[serde(default)]
    pub trust_leads: Vec<String>,
}

/// The `[approval]` table: a program or an endpoint that answers permission
/// questions instead of the terminal.
#[derive(Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalEntry {
    /// A program and its arguments, given each question on its stdin.
    pub command: Option<Vec<String>>,
    /// An endpoint (https, or http on loopback) each question is posted to.
    pub url: Option<String>,
    /// Sent to the endpoint as `Authorization: Bearer`.
    pub token: Option<String>,
    /// How long an answer may take before it is no (`2m` by default).
    pub timeout: Option<String>,
}

impl std::fmt::Debug for ApprovalEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The token is never shown.
        f.debug_struct("ApprovalEntry")
            .field("command", &self.command)
            .field("url", &self.url)
            .field("token", &self.token.as_ref().map(|_| "…"))
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// The `[compaction]` table.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompactionEntry {
    /// The share of the context window a request may fill before the session
    /// compacts (0.85 by default).
    pub threshold: Option<f64>,
}

/// What the user trusts one workspace's `orchestrate.toml` to do.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrustedWorkspace {
    /// The API roots it may send requests to.
    #[serde(default)]
    pub base_urls: Vec<String>,
    /// Allow rules of its `.claude/settings.local.json` the person approved.
    #[serde(default)]
    pub rules: Vec<String>,
    /// MCP servers of its `.mcp.json` and its roles the person trusted, each as
    /// `name: command` (or `name: http url`) as written.
    #[serde(default)]
    pub mcp_servers: Vec<String>,
}

/// The `[sandbox]` table: how Bash commands are confined.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxEntry {
    /// `workspace-write` (the default) or `off`.
    pub mode: Option<String>,
    /// More paths Bash commands may write under (absolute, or `~/…`).
    #[serde(default)]
    pub writable: Vec<String>,
    /// Whether the table comes from the user's own file (set by [`ConfigFile::trusted`]).
    #[serde(skip)]
    pub trusted: bool,
}

/// A provider as a file declares it.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderEntry {
    /// `openai` or `anthropic`; defaults to the entry's name when that is one.
    pub kind: Option<String>,
    /// Its API root.
    pub base_url: Option<String>,
    /// The environment variable holding its key. Honoured only in the user's own
    /// file: a repository's file must not choose which secret goes to which host.
    pub api_key_env: Option<String>,
    /// Output tokens asked for when a request sets none.
    pub max_tokens: Option<u32>,
    /// Anthropic's extended thinking budget, in tokens.
    pub thinking_budget: Option<u32>,
    /// Whether the entry comes from the user's own file (set by [`ConfigFile::trusted`]).
    #[serde(skip)]
    pub trusted: bool,
}

/// A model alias as a file declares it.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum ModelEntry {
    /// A model id on the default provider.
    Id(String),
    /// A model id on a named provider.
    On {
        /// The provider's name.
        provider: Option<String>,
        /// The model id.
        model: String,
    },
}

impl ConfigFile {
    /// Parses a file's text; errors name the file and line.
    pub fn parse(path: &str, text: &str) -> Result<Self, ConfigError> {
        let file: Self = toml::from_str(text).map_err(|e| {
            let line = e.span().map_or(1, |span| {
                text[..span.start.min(text.len())].matches('\n').count() + 1
            });
            ConfigError::File {
                path: path.to_owned(),
                line,
                message: e.message().to_owned(),
            }
        })?;
        file.check(path, text)?;
        Ok(file)
    }

    /// Values serde takes but the run cannot use, named with their line.
    fn check(&self, path: &str, text: &str) -> Result<(), ConfigError> {
        let line_of = |needle: &str| {
            text.find(needle)
                .map_or(1, |at| text[..at].matches('\n').count() + 1)
        };
        for (id, info) in &self.model_info {
            if let Some(message) = info.problem() {
                return Err(ConfigError::File {
                    path: path.to_owned(),
                    line: line_of(id),
                    message: format!("[model_info.{id:?}]: {message}"),
                });
            }
        }
        if let Some(t) = self.compaction.as_ref().and_then(|c| c.threshold)
            && !(t > 0.0 && t <= 1.0)
        {
            return Err(ConfigError::File {
                path: path.to_owned(),
                line: line_of("threshold"),
                message: format!(
                    "[compaction] threshold must be a share of the window above 0 and at most 1, not {t}"
                ),
            });
        }
        Ok(())
    }

    /// Marks the file as the user's own: its providers may name key variables and
    /// keep the environment's keys when they move a built-in provider elsewhere.
    pub fn trusted(mut self) -> Self {
        for entry in self.providers.values_mut() {
            entry.trusted = true;
        }
        if let Some(sandbox) = &mut self.sandbox {
            sandbox.trusted = true;
        }
        self
    }

    /// The variables its providers name as holding their keys (`api_key_env`).
    pub fn key_variables(&self) -> Vec<String> {
        self.providers
            .values()
            .filter_map(|p| p.api_key_env.clone())
            .collect()
    }

    /// `self` with `over`'s settings on top (the workspace's file over the user's).
    /// Trust comes from `self` alone.
    pub fn merged(mut self, over: Self) -> Self {
        self.provider = over.provider.or(self.provider);
        self.model = over.model.or(self.model);
        self.providers.extend(over.providers);
        self.models.extend(over.models);
        self.sandbox = over.sandbox.or(self.sandbox);
        for (id, info) in over.model_info {
            let merged = match self.model_info.remove(&id) {
                Some(under) => under.overridden_by(&info),
                None => info,
            };
            self.model_info.insert(id, merged);
        }
        self.compaction = over.compaction.or(self.compaction);
        self
    }
}
