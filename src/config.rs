//! Which provider and model to use, from flags and the environment. Pure: the
//! environment is passed in, so every rule has a unit test.

use crate::error::ConfigError;
use crate::llm::openai::DEFAULT_BASE_URL;

/// The model used with api.openai.com when none is named.
pub const DEFAULT_OPENAI_MODEL: &str = "gpt-4.1";

/// A resolved provider configuration.
#[derive(Clone, PartialEq, Eq)]
pub struct ProviderSettings {
    /// The API root including `/v1`.
    pub base_url: String,
    /// The key, if any (local servers often need none).
    pub api_key: Option<String>,
    /// The model id.
    pub model: String,
}

impl std::fmt::Debug for ProviderSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderSettings")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("model", &self.model)
            .finish()
    }
}

/// Resolves flags (`--base-url`, `--model`) over the environment (`OPENAI_API_KEY`,
/// `OPENAI_BASE_URL`, `ORCHESTRATE_MODEL`). Empty values count as unset.
pub fn resolve(
    base_url_flag: Option<&str>,
    model_flag: Option<&str>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<ProviderSettings, ConfigError> {
    let non_empty = |v: Option<String>| v.filter(|s| !s.trim().is_empty());
    let api_key = non_empty(env("OPENAI_API_KEY"));
    let base_url =
        non_empty(base_url_flag.map(str::to_owned)).or_else(|| non_empty(env("OPENAI_BASE_URL")));
    let base_url = match (base_url, &api_key) {
        (Some(url), _) => url.trim().to_owned(),
        (None, Some(_)) => DEFAULT_BASE_URL.to_owned(),
        (None, None) => return Err(ConfigError::NoProvider),
    };
    let model =
        non_empty(model_flag.map(str::to_owned)).or_else(|| non_empty(env("ORCHESTRATE_MODEL")));
    let model = match model {
        Some(model) => model,
        None if base_url.trim_end_matches('/') == DEFAULT_BASE_URL => {
            DEFAULT_OPENAI_MODEL.to_owned()
        }
        None => return Err(ConfigError::NoModel),
    };
    Ok(ProviderSettings {
        base_url,
        api_key,
        model,
    })
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

    #[test]
    fn nothing_configured_names_what_to_set() {
        let err = resolve(None, None, env(&[])).unwrap_err();
        assert!(matches!(err, ConfigError::NoProvider));
        let text = err.to_string();
        assert!(
            text.contains("OPENAI_API_KEY")
                && text.contains("--base-url")
                && text.contains("OPENAI_BASE_URL")
        );
    }

    #[test]
    fn a_key_alone_means_openai_with_its_default_model() {
        let s = resolve(None, None, env(&[("OPENAI_API_KEY", "sk-x")])).unwrap();
        assert_eq!(
            (s.base_url.as_str(), s.model.as_str()),
            (DEFAULT_BASE_URL, DEFAULT_OPENAI_MODEL)
        );
    }

    #[test]
    fn flags_win_over_the_environment_and_a_local_server_needs_no_key() {
        let e = env(&[
            ("OPENAI_BASE_URL", "http://env/v1"),
            ("ORCHESTRATE_MODEL", "env-model"),
        ]);
        let s = resolve(Some("http://flag/v1"), Some("flag-model"), &e).unwrap();
        assert_eq!(
            (s.base_url.as_str(), s.model.as_str(), s.api_key),
            ("http://flag/v1", "flag-model", None)
        );
        let s = resolve(None, None, &e).unwrap();
        assert_eq!(
            (s.base_url.as_str(), s.model.as_str()),
            ("http://env/v1", "env-model")
        );
    }

    #[test]
    fn a_custom_server_without_a_model_is_a_configuration_error() {
        let err = resolve(Some("http://localhost:11434/v1"), None, env(&[])).unwrap_err();
        assert!(err.to_string().contains("--model"));
    }

    #[test]
    fn the_key_never_shows_in_debug_output() {
        let s = resolve(None, None, env(&[("OPENAI_API_KEY", "sk-secret")])).unwrap();
        assert!(!format!("{s:?}").contains("sk-secret"));
    }
}
