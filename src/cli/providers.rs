//! The run's providers: configuration files read, settings resolved, one client per
//! provider built, each recording to the cassette under `--record`, or every one
//! replaced by the cassette under `--replay`.

use std::path::Path;
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

/// The user's file, then the workspace's on top.
pub(super) fn config_file(
    workspace: &Path,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<ConfigFile, ConfigError> {
    let mut paths = Vec::new();
    if let Some(home) = env("HOME") {
        paths.push((
            Path::new(&home).join(".config/orchestrate/config.toml"),
            true,
        ));
    }
    paths.push((workspace.join("orchestrate.toml"), false));
    let mut merged = ConfigFile::default();
    for (path, users_own) in paths {
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                return Err(ConfigError::File {
                    path: path.display().to_string(),
                    line: 1,
                    message: e.to_string(),
                });
            }
        };
        let file = ConfigFile::parse(&path.display().to_string(), &text)?;
        merged = merged.merged(if users_own { file.trusted() } else { file });
    }
    Ok(merged)
}

/// Resolves the settings and builds every provider they name.
pub(super) fn models(
    cli: &Cli,
    workspace: &Path,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<Models, ConfigError> {
    let file = config_file(workspace, env)?;
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
    let cassette: Arc<dyn Provider> = Arc::new(ReplayProvider::new(exchanges));
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
