//! The run's providers: settings resolved from the configuration (as the trust
//! rule left it), one client per provider built, each recording to the cassette
//! under `--record`, or every one replaced by the cassette under `--replay`.

use std::sync::Arc;

use super::Options;
use crate::config::{self, ConfigFile, Flags, ProviderKind, ProviderSettings};
use crate::error::ConfigError;
use crate::llm::Provider;
use crate::llm::anthropic::{AnthropicClient, AnthropicConfig};
use crate::llm::cassette::{self, Recorder};
use crate::llm::openai::{OpenAiClient, OpenAiConfig};
use crate::llm::replay::ReplayProvider;
use crate::models::Models;

/// Resolves the settings of `file` (the workspace's over the user's, as the
/// trust rule left them) and builds every provider they name.
pub(super) fn models(
    options: &Options,
    file: &ConfigFile,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<Models, ConfigError> {
    let replay = match (options.provider.as_deref(), &options.replay) {
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
    if replay.is_some() && options.record.is_some() {
        return Err(ConfigError::Invalid(
            "--record and --replay cannot be combined".into(),
        ));
    }
    let mut flags = Flags {
        provider: options.provider.clone(),
        base_url: options.base_url.clone(),
        model: options.model.clone(),
    };
    let Some(path) = replay else {
        let settings = config::resolve(&flags, file, env)?;
        let recorder = match &options.record {
            Some(path) => {
                Some(Arc::new(Recorder::create(path).map_err(|e| {
                    ConfigError::Invalid(format!("--record {e}"))
                })?))
            }
            None => None,
        };
        let idle = options.idle_timeout;
        // Requests in flight to one endpoint are at most as many as agents may
        // run at once: --max-parallel on each level, and the lead.
        let levels = options.max_depth.max(1) as usize;
        crate::llm::governor::set_cap(
            options
                .max_parallel
                .saturating_mul(levels)
                .saturating_add(1),
        );
        return Models::new(settings, |p| client(p, idle, recorder.as_ref()));
    };
    let exchanges =
        cassette::read(path).map_err(|e| ConfigError::Invalid(format!("--replay {e}")))?;
    // Every provider is the cassette; the settings only name models and aliases.
    flags.provider = Some(file.provider.clone().unwrap_or_else(|| "openai".into()));
    let model = flags.model.clone();
    flags.model = model.or_else(|| Some("replay".into()));
    let mut settings = config::resolve(&flags, file, |_: &str| None)?;
    // The cassette serves every provider: Claude Code's aliases need no key here.
    settings.inherited_aliases.clear();
    let replay = ReplayProvider::new(exchanges);
    let replay = if options.replay_lenient {
        replay.lenient()
    } else {
        replay
    };
    let cassette: Arc<dyn Provider> = Arc::new(replay);
    Models::new(settings, |_| Ok(cassette.clone()))
}

fn client(
    settings: &ProviderSettings,
    idle: std::time::Duration,
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
