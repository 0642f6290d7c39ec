//! The resolved settings: which providers exist and how to reach each, the model
//! aliases, and the lead's model. It does not say how they are worked out (that is
//! `resolve`) nor what a file may declare (`file`).

use std::collections::{BTreeMap, BTreeSet};

use crate::llm::{anthropic, openai};
use crate::model_info::ModelTable;

/// The wire protocol a provider speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProviderKind {
    /// OpenAI Chat Completions and compatible servers.
    OpenAi,
    /// Anthropic Messages.
    Anthropic,
}

impl ProviderKind {
    pub(super) fn parse(name: &str) -> Option<Self> {
        match name {
            "openai" => Some(Self::OpenAi),
            "anthropic" => Some(Self::Anthropic),
            _ => None,
        }
    }
}

/// How to reach one provider.
#[derive(Clone, PartialEq, Eq)]
pub struct ProviderSettings {
    /// Its protocol.
    pub kind: ProviderKind,
    /// The API root (`…/v1` for OpenAI-compatible servers, the host for Anthropic).
    pub base_url: String,
    /// The key, if any (local servers often need none).
    pub api_key: Option<String>,
    /// Output tokens asked for when a request sets none (Anthropic requires a
    /// number; default 32 000).
    pub max_tokens: Option<u32>,
    /// Anthropic's extended thinking, with this budget of tokens (at least 1024,
    /// below `max_tokens`).
    pub thinking_budget: Option<u32>,
}

impl ProviderSettings {
    /// Whether it points at the vendor's own API (not a proxy or a local server).
    pub(super) fn is_vendors_own(&self) -> bool {
        let vendors = match self.kind {
            ProviderKind::OpenAi => openai::DEFAULT_BASE_URL,
            ProviderKind::Anthropic => anthropic::DEFAULT_BASE_URL,
        };
        self.base_url.trim_end_matches('/') == vendors
    }
}

impl std::fmt::Debug for ProviderSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderSettings")
            .field("kind", &self.kind)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("max_tokens", &self.max_tokens)
            .field("thinking_budget", &self.thinking_budget)
            .finish()
    }
}

/// A model: which provider, which id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelRef {
    /// The provider's name; `None` means whichever provider the caller uses.
    pub provider: Option<String>,
    /// The model id.
    pub model: String,
}

/// Everything resolved: the providers by name, the aliases, and the lead's model.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// The provider sessions use unless a model says otherwise.
    pub default_provider: String,
    /// Every provider by name (`openai` and `anthropic` always exist).
    pub providers: BTreeMap<String, ProviderSettings>,
    /// Model aliases.
    pub aliases: BTreeMap<String, ModelRef>,
    /// Claude Code's built-in aliases while Anthropic is not configured (no key,
    /// its default address): a role naming one inherits its caller's model, so
    /// role files written for Claude Code work with any provider.
    pub inherited_aliases: BTreeSet<String>,
    /// The lead's model.
    pub model: ModelRef,
    /// Context windows, output limits and prices.
    pub model_table: ModelTable,
    /// The share of a model's window a request may fill before its session
    /// compacts.
    pub compact_at: f64,
}

impl Settings {
    /// What a role's `model:` names: an alias, or else a model id. A bare word
    /// (letters only) that is no alias is refused: it is a misspelt or undeclared
    /// alias far more often than a real model id.
    /// `Ok(None)`: a built-in alias while Anthropic is not configured, which
    /// inherits the caller's model (see [`Settings::inherited_aliases`]).
    pub fn resolve_model(&self, name: &str) -> Result<Option<ModelRef>, String> {
        if self.inherited_aliases.contains(name) {
            return Ok(None);
        }
        if let Some(target) = self.aliases.get(name) {
            return Ok(Some(target.clone()));
        }
        if !name.is_empty() && name.chars().all(|c| c.is_ascii_alphabetic()) {
            return Err(self.aliases.keys().cloned().collect::<Vec<_>>().join(", "));
        }
        Ok(Some(ModelRef {
            provider: None,
            model: name.to_owned(),
        }))
    }
}
