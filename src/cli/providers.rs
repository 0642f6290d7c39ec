//! The run's providers: configuration files read, settings resolved, one client per
//! provider built, each recording to the cassette under `--record`, or every one
//! replaced by the cassette under `--replay`. Whether the workspace's file may send
//! requests where it says is `trust`'s to decide, between reading and resolving.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::flags::Cli;
use crate::config::{self, ConfigFile, Flags, ProviderKind, ProviderSettings};
use crate::error::ConfigError;
use crate::llm::Provider;
use crate::llm::anthropic::{AnthropicClient, AnthropicConfig};
use crate::llm::cassette::{self, Recorder};
use crate::llm::openai::{OpenAiClient, OpenAiConfig};
use crate::llm::replay::ReplayProvider;
use crate::models::Models;
use crate::small_file;

/// The configuration files as read.
#[derive(Debug)]
pub(super) struct Files {
    /// The user's own file (empty when there is none).
    pub(super) user: ConfigFile,
    /// Where the user's file is, or would be (`None` without `$HOME`).
    pub(super) user_path: Option<PathBuf>,
    /// The workspace's `orchestrate.toml` (empty when there is none).
    pub(super) workspace: ConfigFile,
    /// Where the workspace's file is.
    pub(super) workspace_path: PathBuf,
}

/// Reads the user's file and the workspace's. A workspace's file that declares
/// trust is refused: only the user's own may.
pub(super) fn read(
    workspace: &Path,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<Files, ConfigError> {
    let user_path =
        env("HOME").map(|home| Path::new(&home).join(".config/orchestrate/config.toml"));
    let user = match &user_path {
        Some(path) => read_one(path)?.trusted(),
        None => ConfigFile::default(),
    };
    let workspace_path = workspace.join("orchestrate.toml");
    let ours = read_one(&workspace_path)?;
    if !ours.trust.is_empty() {
        return Err(ConfigError::Invalid(format!(
            "{}: [trust] is honoured only in ~/.config/orchestrate/config.toml (a repository cannot trust itself)",
            workspace_path.display()
        )));
    }
    Ok(Files {
        user,
        user_path,
        workspace: ours,
        workspace_path,
    })
}

/// One file, or an empty one when it does not exist. Bounded: a repository's file
/// may be a FIFO or a symlink to /dev/zero.
fn read_one(path: &Path) -> Result<ConfigFile, ConfigError> {
    match small_file::read_to_string(path, small_file::MAX_BYTES) {
        Ok(text) => ConfigFile::parse(&path.display().to_string(), &text),
        Err(e) if e.is_not_found() => Ok(ConfigFile::default()),
        Err(e) => Err(ConfigError::Invalid(e.to_string())),
    }
}

/// Resolves the settings (the workspace's file over the user's) and builds every
/// provider they name.
pub(super) fn models(
    cli: &Cli,
    files: Files,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<Models, ConfigError> {
    let file = files.user.merged(files.workspace);
    let replay = match (cli.provider.as_deref(), &cli.replay) {
        (Some("replay"), None) => {
            return Err(ConfigError::Invalid(
                "--provider replay needs --replay FILE".into(),
            ));
        }
        (Some("replay") | None, Some(path)) => Some(path),
        (Some(other), Some(_)) => {
            return Err(ConfigError::Invalid(format!(
                "--replay answers every request itself; it cannot be combined with --provider {other}"
            )));
        }
        (_, None) => None,
    };
    if replay.is_some() && cli.record.is_some() {
        return Err(ConfigError::Invalid(
            "--record and --replay cannot be combined".into(),
        ));
    }
    let mut flags = Flags {
        provider: cli.provider.clone(),
        base_url: cli.base_url.clone(),
        model: cli.model.clone(),
    };
    let Some(path) = replay else {
        let settings = config::resolve(&flags, &file, env)?;
        let recorder = match &cli.record {
            Some(path) => {
                Some(Arc::new(Recorder::create(path).map_err(|e| {
                    ConfigError::Invalid(format!("--record {e}"))
                })?))
            }
            None => None,
        };
        let idle = Duration::from_secs(cli.idle_timeout.max(1));
        // Requests in flight to one endpoint are at most as many as agents may
        // run at once: --max-parallel on each level, and the lead.
        let levels = cli.max_depth.max(1) as usize;
        crate::llm::governor::set_cap(cli.max_parallel.saturating_mul(levels).saturating_add(1));
        return Models::new(settings, |p| client(p, idle, recorder.as_ref()));
    };
    let exchanges =
        cassette::read(path).map_err(|e| ConfigError::Invalid(format!("--replay {e}")))?;
    // Every provider is the cassette; the settings only name models and aliases.
    flags.provider = Some(file.provider.clone().unwrap_or_else(|| "openai".into()));
    let model = flags.model.clone();
    flags.model = model.or_else(|| Some("replay".into()));
    let mut settings = config::resolve(&flags, &file, |_: &str| None)?;
    // The cassette serves every provider: Claude Code's aliases need no key here.
    settings.inherited_aliases.clear();
    let replay = ReplayProvider::new(exchanges);
    let replay = if cli.replay_lenient {
        replay.lenient()
    } else {
        replay
    };
    let cassette: Arc<dyn Provider> = Arc::new(replay);
    Models::new(settings, |_| Ok(cassette.clone()))
}

fn client(
    settings: &ProviderSettings,
    idle: Duration,
    recorder: Option<&Arc<Recorder>>,
) -> Result<Arc<dyn Provider>, ConfigError> {
    let key = settings.api_key.clone();
    Ok(match settings.kind {
        ProviderKind::OpenAi => {
            let mut config = OpenAiConfig::new(settings.base_url.clone(), key);
            config.idle_timeout = idle;
            let mut client = OpenAiClient::new(config)?;
            if let Some(recorder) = recorder {
                client.record_to(recorder.clone());
            }
            Arc::new(client)
        }
        ProviderKind::Anthropic => {
            let mut config = AnthropicConfig::new(settings.base_url.clone(), key);
            config.idle_timeout = idle;
            config.max_tokens = settings.max_tokens.unwrap_or(config.max_tokens);
            config.thinking_budget = settings.thinking_budget;
            let mut client = AnthropicClient::new(config)?;
            if let Some(recorder) = recorder {
                client.record_to(recorder.clone());
            }
            Arc::new(client)
        }
    })
}
