//! Models at run time: the providers built from the [`Settings`], and where a role's
//! `model:` leads (a provider and a model id). A role that names no provider keeps
//! its caller's, so `inherit` and plain ids never switch protocols under a team.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::config::{ProviderSettings, Settings};
use crate::error::ConfigError;
use crate::llm::Provider;
use crate::roles::{ModelChoice, Role};

/// A model to talk to.
#[derive(Clone, Debug)]
pub struct Model {
    /// Who serves it; `None`: the runtime's default provider.
    pub provider: Option<Arc<dyn Provider>>,
    /// Its id.
    pub id: String,
}

impl From<&str> for Model {
    /// A model id on the runtime's default provider.
    fn from(id: &str) -> Self {
        Self {
            provider: None,
            id: id.to_owned(),
        }
    }
}

/// The providers of a run and the aliases that lead to them.
#[derive(Debug)]
pub struct Models {
    settings: Settings,
    providers: BTreeMap<String, Arc<dyn Provider>>,
}

impl Models {
    /// Builds every provider the settings name with `build`.
    pub fn new(
        settings: Settings,
        build: impl Fn(&ProviderSettings) -> Result<Arc<dyn Provider>, ConfigError>,
    ) -> Result<Self, ConfigError> {
        let providers = settings
            .providers
            .iter()
            .map(|(name, p)| Ok((name.clone(), build(p)?)))
            .collect::<Result<_, ConfigError>>()?;
        Ok(Self {
            settings,
            providers,
        })
    }

    /// The provider sessions use unless a model names another.
    pub fn default_provider(&self) -> Arc<dyn Provider> {
        self.providers[&self.settings.default_provider].clone()
    }

    /// Gives `spec` (a session of `spec.model` on `spec.provider`) what is known
    /// of its model (window, prices), when it compacts and who writes its
    /// summaries.
    pub fn describe(&self, spec: &mut crate::session::SessionSpec) {
        spec.model_info = self.info(&spec.model);
        spec.compact_at = self.compact_at();
        spec.summary_model = self.summary_model(&Model {
            provider: spec.provider.clone(),
            id: spec.model.clone(),
        });
        spec.summary_window = (spec.summary_model.as_deref())
            .and_then(|summarizer| self.info(summarizer).context_window);
    }

    /// What is known about model `id`: window, output limit, prices.
    pub fn info(&self, id: &str) -> crate::model_info::ModelInfo {
        self.settings.model_table.get(id)
    }

    /// The share of a model's window a request may fill before compaction.
    pub fn compact_at(&self) -> f64 {
        self.settings.compact_at
    }

    /// The model that writes `model`'s compaction summaries: the `small` alias,
    /// when one is configured on the same provider; else `None` (the session's
    /// own model).
    pub fn summary_model(&self, model: &Model) -> Option<String> {
        let target = self.settings.resolve_model("small").ok().flatten()?;
        let provider = target.provider.as_ref().map(|p| &self.providers[p]);
        let same = match (provider, &model.provider) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (Some(a), None) => Arc::ptr_eq(a, &self.default_provider()),
            (None, Some(b)) => Arc::ptr_eq(&self.default_provider(), b),
        };
        same.then(|| target.model.clone())
    }

    /// The `small` alias's model, when one is configured.
    pub fn small(&self) -> Option<Model> {
        let target = self.settings.resolve_model("small").ok().flatten()?;
        Some(Model {
            provider: target.provider.as_ref().map(|p| self.providers[p].clone()),
            id: target.model.clone(),
        })
    }

    /// The lead's model.
    pub fn lead(&self) -> Model {
        let target = &self.settings.model;
        Model {
            provider: target.provider.as_ref().map(|p| self.providers[p].clone()),
            id: target.model.clone(),
        }
    }

    /// Why `role`'s `model:` is not used, when it names one of Claude Code's
    /// aliases while Anthropic is not configured.
    pub fn inherit_note(&self, role: &Role) -> Option<String> {
        let ModelChoice::Named(name) = &role.model else {
            return None;
        };
        self.settings.inherited_aliases.contains(name).then(|| {
            format!(
                "{}: model {name:?} is an Anthropic model and Anthropic is not configured (no ANTHROPIC_API_KEY); the role inherits its caller's model",
                role.source
            )
        })
    }

    /// The model of a session of `role` started by a caller using `caller`.
    pub fn for_role(&self, role: &Role, caller: &Model) -> Result<Model, ConfigError> {
        let ModelChoice::Named(name) = &role.model else {
            return Ok(caller.clone());
        };
        self.resolve(name, caller, &role.source)
    }

    /// The fallback of a session of `model`: `name` (from `source`), an
    /// alias or an id on `model`'s provider.
    pub fn fallback(
        &self,
        name: &str,
        model: &Model,
        source: &str,
    ) -> Result<crate::session::Fallback, ConfigError> {
        let target = self.resolve(name, model, source)?;
        Ok(crate::session::Fallback {
            model_info: self.info(&target.id),
            model: target.id,
            provider: target.provider,
        })
    }

    /// Model `name` (from `source`): an alias, or an id on `base`'s provider
    /// (`base` itself for an alias that inherits).
    pub fn resolve(&self, name: &str, base: &Model, source: &str) -> Result<Model, ConfigError> {
        let target =
            self.settings
                .resolve_model(name)
                .map_err(|known| ConfigError::UnknownAlias {
                    source_file: source.to_owned(),
                    alias: name.to_owned(),
                    known,
                })?;
        let Some(target) = target else {
            return Ok(base.clone());
        };
        Ok(Model {
            provider: match &target.provider {
                Some(p) => Some(self.providers[p].clone()),
                None => base.provider.clone(),
            },
            id: target.model,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ConfigFile, Flags, ProviderKind, resolve};
    use crate::llm::anthropic::{AnthropicClient, AnthropicConfig};
    use crate::llm::openai::{OpenAiClient, OpenAiConfig};

    /// The models of a run whose user file is `toml`, with both providers' keys.
    fn from_file(toml: &str) -> Models {
        let file = ConfigFile::parse("config.toml", toml).unwrap().trusted();
        let env = |name: &str| match name {
            "OPENAI_API_KEY" | "ANTHROPIC_API_KEY" => Some("k".to_owned()),
            _ => None,
        };
        let settings = resolve(&Flags::default(), &file, env).unwrap();
        Models::new(settings, |p| -> Result<Arc<dyn Provider>, ConfigError> {
            Ok(match p.kind {
                ProviderKind::OpenAi => Arc::new(OpenAiClient::new(OpenAiConfig::new(
                    &p.base_url,
                    p.api_key.clone(),
                ))?),
                ProviderKind::Anthropic => Arc::new(AnthropicClient::new(AnthropicConfig::new(
                    &p.base_url,
                    p.api_key.clone(),
                ))?),
            })
        })
        .unwrap()
    }

    #[test]
    fn the_small_alias_writes_summaries_for_models_of_its_own_provider() {
        let models = from_file(
            "provider = \"openai\"\nmodel = \"gpt-4.1\"\n[models]\nsmall = \"gpt-4.1-mini\"\n",
        );
        // A session on the default provider: the small model summarizes.
        assert_eq!(
            models.summary_model(&Model::from("gpt-4.1")).as_deref(),
            Some("gpt-4.1-mini")
        );
        // One on another provider keeps its own model.
        let anthropic = Model {
            provider: Some(models.providers["anthropic"].clone()),
            id: "claude-sonnet-4-5".into(),
        };
        assert_eq!(models.summary_model(&anthropic), None);
        // Without the alias, every session summarizes with its own model.
        let plain = from_file("provider = \"openai\"\nmodel = \"gpt-4.1\"\n");
        assert_eq!(plain.summary_model(&Model::from("gpt-4.1")), None);
    }
}
