//! How flags, the environment and the files become [`Settings`]: flags over the
//! environment over the files, which provider a key picks, which keys may go where,
//! and the default models. Pure: the environment and the files are passed in.

use std::collections::BTreeMap;

use super::file::{ConfigFile, ModelEntry};
use super::settings::{ModelRef, ProviderKind, ProviderSettings, Settings};
use crate::error::ConfigError;
use crate::llm::{anthropic, openai};
use crate::model_info::ModelTable;

/// The model used with api.openai.com when none is named.
pub const DEFAULT_OPENAI_MODEL: &str = "gpt-4.1";
/// The model used with api.anthropic.com when none is named.
pub const DEFAULT_ANTHROPIC_MODEL: &str = "claude-sonnet-4-5";
/// The share of a model's context window a request may fill before its session
/// compacts, unless `[compaction] threshold` says otherwise.
pub const DEFAULT_COMPACT_AT: f64 = 0.85;

/// Claude Code's aliases, on the `anthropic` provider, unless a file redefines them.
const BUILT_IN_ALIASES: [(&str, &str); 3] = [
    ("haiku", "claude-haiku-4-5"),
    ("sonnet", "claude-sonnet-4-5"),
    ("opus", "claude-opus-4-5"),
];

/// What the command line says.
#[derive(Clone, Debug, Default)]
pub struct Flags {
    /// `--provider`.
    pub provider: Option<String>,
    /// `--base-url`: the default provider's API root.
    pub base_url: Option<String>,
    /// `--model`.
    pub model: Option<String>,
}
/// Resolves flags over the environment (`ANTHROPIC_API_KEY`, `ANTHROPIC_BASE_URL`,
/// `OPENAI_API_KEY`, `OPENAI_BASE_URL`, `ORCHESTRATE_MODEL`) over `file`. Empty
/// values count as unset. Without `--provider` or a file's `provider`, an Anthropic
/// key picks Anthropic, else an OpenAI key or base URL (or `--base-url`) picks
/// OpenAI, else an Anthropic base URL picks Anthropic.
pub fn resolve(
    flags: &Flags,
    file: &ConfigFile,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Settings, ConfigError> {
    let non_empty = |v: Option<String>| v.filter(|s| !s.trim().is_empty());
    let var = |name: &str| non_empty(env(name));
    let flag = |v: &Option<String>| non_empty(v.clone());
    let mut providers = BTreeMap::new();
    providers.insert(
        "openai".to_owned(),
        ProviderSettings {
            kind: ProviderKind::OpenAi,
            base_url: var("OPENAI_BASE_URL").unwrap_or_else(|| openai::DEFAULT_BASE_URL.to_owned()),
            api_key: var("OPENAI_API_KEY"),
            max_tokens: None,
            thinking_budget: None,
        },
    );
    providers.insert(
        "anthropic".to_owned(),
        ProviderSettings {
            kind: ProviderKind::Anthropic,
            base_url: var("ANTHROPIC_BASE_URL")
                .unwrap_or_else(|| anthropic::DEFAULT_BASE_URL.to_owned()),
            api_key: var("ANTHROPIC_API_KEY"),
            max_tokens: None,
            thinking_budget: None,
        },
    );
    for (name, entry) in &file.providers {
        let kind_name = entry.kind.as_deref().unwrap_or(name);
        let Some(kind) = ProviderKind::parse(kind_name) else {
            return Err(ConfigError::Invalid(format!(
                "provider {name:?}: unknown kind {kind_name:?} (expected openai or anthropic)"
            )));
        };
        let inherited = providers.get(name).filter(|p| p.kind == kind).cloned();
        let base_url = match (&entry.base_url, &inherited) {
            (Some(url), _) => url.clone(),
            (None, Some(p)) => p.base_url.clone(),
            (None, None) => {
                return Err(ConfigError::Invalid(format!(
                    "provider {name:?} needs a base_url"
                )));
            }
        };
        if entry.api_key_env.is_some() && !entry.trusted {
            return Err(ConfigError::Invalid(format!(
                "provider {name:?}: api_key_env is honoured only in ~/.config/orchestrate/config.toml (a repository's orchestrate.toml must not choose which secret is sent where)"
            )));
        }
        let moved = inherited.as_ref().is_some_and(|p| p.base_url != base_url);
        let api_key = match &entry.api_key_env {
            Some(var_name) => var(var_name),
            // The environment's key goes only where the environment says, unless
            // the user's own file moved the provider.
            None if moved && !entry.trusted => None,
            None => inherited.and_then(|p| p.api_key),
        };
        if entry.max_tokens == Some(0) {
            return Err(ConfigError::Invalid(format!(
                "provider {name:?}: max_tokens must be at least 1"
            )));
        }
        if entry.thinking_budget.is_some() && kind != ProviderKind::Anthropic {
            return Err(ConfigError::Invalid(format!(
                "provider {name:?}: thinking_budget is an Anthropic setting"
            )));
        }
        let max = entry.max_tokens.unwrap_or(anthropic::DEFAULT_MAX_TOKENS);
        if let Some(budget) = entry.thinking_budget
            && (budget < 1024 || budget >= max)
        {
            return Err(ConfigError::Invalid(format!(
                "provider {name:?}: thinking_budget must be at least 1024 and below max_tokens ({max})"
            )));
        }
        providers.insert(
            name.clone(),
            ProviderSettings {
                kind,
                base_url,
                api_key,
                max_tokens: entry.max_tokens,
                thinking_budget: entry.thinking_budget,
            },
        );
    }
    let base_url_flag = flag(&flags.base_url);
    // `--base-url` without `--provider` names an OpenAI-compatible server (a local
    // Ollama, say), whatever the keys or a repository's file say: neither may send
    // another provider's key to the address typed on the command line.
    let chosen_by_file = if base_url_flag.is_some() {
        None
    } else {
        file.provider.clone()
    };
    let default_provider = match flag(&flags.provider).or(chosen_by_file) {
        Some(name) => name,
        None if base_url_flag.is_some() => "openai".to_owned(),
        None if var("ANTHROPIC_API_KEY").is_some() => "anthropic".to_owned(),
        None if var("OPENAI_API_KEY").is_some() || var("OPENAI_BASE_URL").is_some() => {
            "openai".to_owned()
        }
        None if var("ANTHROPIC_BASE_URL").is_some() => "anthropic".to_owned(),
        None => return Err(ConfigError::NoProvider),
    };
    let Some(chosen) = providers.get_mut(&default_provider) else {
        let known: Vec<&str> = providers.keys().map(String::as_str).collect();
        return Err(ConfigError::Invalid(format!(
            "unknown provider {default_provider:?} (known: {})",
            known.join(", ")
        )));
    };
    if let Some(url) = base_url_flag {
        chosen.base_url = url.trim().to_owned();
    }
    let mut aliases: BTreeMap<String, ModelRef> = BUILT_IN_ALIASES
        .iter()
        .map(|(alias, id)| {
            let target = ModelRef {
                provider: Some("anthropic".to_owned()),
                model: (*id).to_owned(),
            };
            ((*alias).to_owned(), target)
        })
        .collect();
    for (alias, entry) in &file.models {
        let target = match entry {
            ModelEntry::Id(model) => ModelRef {
                provider: Some(default_provider.clone()),
                model: model.clone(),
            },
            ModelEntry::On { provider, model } => ModelRef {
                provider: Some(provider.clone().unwrap_or_else(|| default_provider.clone())),
                model: model.clone(),
            },
        };
        if let Some(p) = &target.provider
            && !providers.contains_key(p)
        {
            return Err(ConfigError::Invalid(format!(
                "model alias {alias:?} names an unknown provider {p:?}"
            )));
        }
        aliases.insert(alias.clone(), target);
    }
    let chosen = &providers[&default_provider];
    let default_model = match chosen.kind {
        _ if !chosen.is_vendors_own() => None,
        ProviderKind::OpenAi => Some(DEFAULT_OPENAI_MODEL),
        ProviderKind::Anthropic => Some(DEFAULT_ANTHROPIC_MODEL),
    };
    let name = flag(&flags.model)
        .or_else(|| var("ORCHESTRATE_MODEL"))
        .or_else(|| file.model.clone())
        .or_else(|| default_model.map(str::to_owned))
        .ok_or(ConfigError::NoModel)?;
    let anthropic = &providers["anthropic"];
    let anthropic_unset = anthropic.api_key.is_none() && anthropic.is_vendors_own();
    let inherited_aliases = BUILT_IN_ALIASES
        .iter()
        .map(|(alias, _)| (*alias).to_owned())
        .filter(|alias| anthropic_unset && !file.models.contains_key(alias))
        .collect();
    let mut settings = Settings {
        default_provider,
        providers,
        aliases,
        inherited_aliases,
        model: ModelRef {
            provider: None,
            model: name.clone(),
        },
        model_table: ModelTable::new(file.model_info.clone()),
        compact_at: file
            .compaction
            .as_ref()
            .and_then(|c| c.threshold)
            .unwrap_or(DEFAULT_COMPACT_AT),
    };
    // The lead's model may be an alias too; an unknown bare word passes as an id
    // here (an Ollama `mistral`), unlike in a role file.
    if let Some(target) = settings.aliases.get(&name) {
        settings.model = target.clone();
    }
    Ok(settings)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |k| map.get(k).cloned()
    }

    fn flags(provider: Option<&str>, base_url: Option<&str>, model: Option<&str>) -> Flags {
        Flags {
            provider: provider.map(str::to_owned),
            base_url: base_url.map(str::to_owned),
            model: model.map(str::to_owned),
        }
    }

    fn none() -> Flags {
        Flags::default()
    }

    #[test]
    fn nothing_configured_names_what_to_set() {
        let err = resolve(&none(), &ConfigFile::default(), env(&[])).unwrap_err();
        assert!(matches!(err, ConfigError::NoProvider));
        let text = err.to_string();
        assert!(
            text.contains("OPENAI_API_KEY")
                && text.contains("ANTHROPIC_API_KEY")
                && text.contains("--base-url")
                && text.contains("OPENAI_BASE_URL")
        );
    }

    #[test]
    fn a_key_alone_picks_its_provider_with_its_default_model() {
        let s = resolve(
            &none(),
            &ConfigFile::default(),
            env(&[("OPENAI_API_KEY", "sk-x")]),
        )
        .unwrap();
        assert_eq!(s.default_provider, "openai");
        assert_eq!(s.model.model, DEFAULT_OPENAI_MODEL);
        let both = env(&[("OPENAI_API_KEY", "sk-x"), ("ANTHROPIC_API_KEY", "sk-ant")]);
        let s = resolve(&none(), &ConfigFile::default(), both).unwrap();
        assert_eq!(s.default_provider, "anthropic");
        assert_eq!(s.model.model, DEFAULT_ANTHROPIC_MODEL);
        assert_eq!(s.providers["anthropic"].api_key.as_deref(), Some("sk-ant"));
    }

    #[test]
    fn flags_win_over_the_environment_and_a_local_server_needs_no_key() {
        let e = env(&[
            ("OPENAI_BASE_URL", "http://env/v1"),
            ("ORCHESTRATE_MODEL", "env-model"),
        ]);
        let f = flags(None, Some("http://flag/v1"), Some("flag-model"));
        let s = resolve(&f, &ConfigFile::default(), &e).unwrap();
        let openai = &s.providers["openai"];
        assert_eq!(
            (
                openai.base_url.as_str(),
                s.model.model.as_str(),
                &openai.api_key
            ),
            ("http://flag/v1", "flag-model", &None)
        );
        let s = resolve(&none(), &ConfigFile::default(), &e).unwrap();
        assert_eq!(
            (
                s.providers["openai"].base_url.as_str(),
                s.model.model.as_str()
            ),
            ("http://env/v1", "env-model")
        );
    }

    #[test]
    fn the_provider_flag_and_its_base_url() {
        let f = flags(
            Some("anthropic"),
            Some("http://127.0.0.1:9"),
            Some("claude-x"),
        );
        let s = resolve(&f, &ConfigFile::default(), env(&[("OPENAI_API_KEY", "k")])).unwrap();
        assert_eq!(s.default_provider, "anthropic");
        assert_eq!(s.providers["anthropic"].base_url, "http://127.0.0.1:9");
        assert_eq!(s.providers["openai"].base_url, openai::DEFAULT_BASE_URL);
        let f = flags(Some("gemini"), None, Some("m"));
        let err = resolve(&f, &ConfigFile::default(), env(&[])).unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"unknown provider "gemini" (known: anthropic, openai)"#
        );
    }

    #[test]
    fn a_custom_server_without_a_model_is_a_configuration_error() {
        let f = flags(None, Some("http://localhost:11434/v1"), None);
        let err = resolve(&f, &ConfigFile::default(), env(&[])).unwrap_err();
        assert!(err.to_string().contains("--model"));
    }

    #[test]
    fn the_key_never_shows_in_debug_output() {
        let s = resolve(
            &none(),
            &ConfigFile::default(),
            env(&[("OPENAI_API_KEY", "sk-secret")]),
        )
        .unwrap();
        assert!(!format!("{s:?}").contains("sk-secret"));
    }

    #[test]
    fn files_declare_providers_and_aliases_and_the_workspace_wins() {
        let user = ConfigFile::parse(
            "config.toml",
            "model = \"fast\"\n[providers.local]\nkind = \"openai\"\nbase_url = \"http://localhost:11434/v1\"\napi_key_env = \"LOCAL_KEY\"\n[models]\nfast = \"gpt-4.1-mini\"\n",
        )
        .unwrap()
        .trusted();
        let workspace = ConfigFile::parse(
            "orchestrate.toml",
            "provider = \"local\"\n[models]\nsmart = { provider = \"anthropic\", model = \"claude-opus-4-5\" }\n",
        )
        .unwrap();
        let file = user.merged(workspace);
        let s = resolve(&none(), &file, env(&[("LOCAL_KEY", "k1")])).unwrap();
        assert_eq!(s.default_provider, "local");
        assert_eq!(
            s.providers["local"],
            ProviderSettings {
                kind: ProviderKind::OpenAi,
                base_url: "http://localhost:11434/v1".into(),
                api_key: Some("k1".into()),
                max_tokens: None,
                thinking_budget: None,
            }
        );
        // An alias that names no provider is an id on the default provider.
        assert_eq!(
            s.model,
            ModelRef {
                provider: Some("local".into()),
                model: "gpt-4.1-mini".into()
            }
        );
        assert_eq!(
            s.resolve_model("smart")
                .unwrap()
                .unwrap()
                .provider
                .as_deref(),
            Some("anthropic")
        );
        // Anthropic is not configured here: Claude Code's aliases inherit.
        assert_eq!(s.resolve_model("sonnet"), Ok(None));
        assert_eq!(
            s.resolve_model("llama3.1:8b").unwrap().unwrap().model,
            "llama3.1:8b"
        );
        let known = s.resolve_model("fastest").unwrap_err();
        assert_eq!(known, "fast, haiku, opus, smart, sonnet");
    }

    #[test]
    fn a_repository_file_cannot_send_keys_elsewhere() {
        let e = env(&[("ANTHROPIC_API_KEY", "sk-ant"), ("SECRET", "s")]);
        let moved = ConfigFile::parse(
            "orchestrate.toml",
            "[providers.anthropic]\nbase_url = \"https://elsewhere.example\"\n",
        )
        .unwrap();
        let m = flags(None, None, Some("m"));
        let s = resolve(&m, &moved, &e).unwrap();
        assert_eq!(s.providers["anthropic"].api_key, None);
        let s = resolve(&m, &moved.clone().trusted(), &e).unwrap();
        assert_eq!(s.providers["anthropic"].api_key.as_deref(), Some("sk-ant"));
        let named = ConfigFile::parse(
            "orchestrate.toml",
            "[providers.x]\nkind = \"openai\"\nbase_url = \"https://elsewhere.example/v1\"\napi_key_env = \"SECRET\"\n",
        )
        .unwrap();
        let err = resolve(&m, &named, &e).unwrap_err();
        assert!(
            err.to_string().starts_with(
                "provider \"x\": api_key_env is honoured only in ~/.config/orchestrate/config.toml"
            ),
            "{err}"
        );
    }

    #[test]
    fn a_base_url_flag_alone_means_an_openai_compatible_server() {
        let f = flags(None, Some("http://localhost:11434/v1"), Some("qwen"));
        // Neither the keys nor a repository's choice of provider change that.
        let file = ConfigFile::parse("orchestrate.toml", "provider = \"anthropic\"\n").unwrap();
        let s = resolve(&f, &file, env(&[("ANTHROPIC_API_KEY", "sk-ant")])).unwrap();
        assert_eq!(
            s.providers["anthropic"].base_url,
            anthropic::DEFAULT_BASE_URL
        );
        assert_eq!(s.default_provider, "openai");
        assert_eq!(s.providers["openai"].base_url, "http://localhost:11434/v1");
    }

    #[test]
    fn a_thinking_budget_must_fit_the_output() {
        let file = ConfigFile::parse(
            "orchestrate.toml",
            "[providers.anthropic]\nmax_tokens = 8000\nthinking_budget = 9000\n",
        )
        .unwrap();
        let err = resolve(&none(), &file, env(&[("ANTHROPIC_API_KEY", "k")])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "provider \"anthropic\": thinking_budget must be at least 1024 and below max_tokens (8000)"
        );
    }

    #[test]
    fn a_broken_file_names_its_line() {
        let err = ConfigFile::parse(
            "orchestrate.toml",
            "model = \"x\"\n[providers.a]\nkinds = 1\n",
        )
        .unwrap_err();
        assert_eq!(
            err.to_string().split(": ").take(1).collect::<Vec<_>>(),
            ["orchestrate.toml:3"]
        );
        let err = resolve(
            &none(),
            &ConfigFile::parse(
                "f",
                "[models]\nx = { provider = \"nope\", model = \"m\" }\n",
            )
            .unwrap(),
            env(&[("OPENAI_API_KEY", "k")]),
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"model alias "x" names an unknown provider "nope""#
        );
    }
}
