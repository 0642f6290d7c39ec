//! What the run knows about a model: its context window, its output limit and its
//! prices. The built-in table (`model_info/table.rs`) covers the common models of the providers
//! orchestrate talks to; a configuration file overrides or adds entries
//! (`[model_info."gpt-4o"]`). Pure: lookups and arithmetic.

mod table;

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::conversation::Usage;

/// What is known about one model. Every field may be unknown.
#[derive(Clone, Copy, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelInfo {
    /// Tokens the model reads at most (prompt plus output).
    pub context_window: Option<u64>,
    /// Tokens it writes at most in one answer.
    pub max_output: Option<u64>,
    /// USD per million prompt tokens.
    pub input_price: Option<f64>,
    /// USD per million prompt tokens read from the provider's cache (the input
    /// price when unknown).
    pub cached_input_price: Option<f64>,
    /// USD per million prompt tokens written to the provider's cache (Anthropic;
    /// the input price when unknown).
    pub cache_write_price: Option<f64>,
    /// USD per million generated tokens.
    pub output_price: Option<f64>,
}

impl ModelInfo {
    /// `self` with the fields `over` knows replaced.
    pub fn overridden_by(self, over: &ModelInfo) -> ModelInfo {
        ModelInfo {
            context_window: over.context_window.or(self.context_window),
            max_output: over.max_output.or(self.max_output),
            input_price: over.input_price.or(self.input_price),
            cached_input_price: over.cached_input_price.or(self.cached_input_price),
            cache_write_price: over.cache_write_price.or(self.cache_write_price),
            output_price: over.output_price.or(self.output_price),
        }
    }

    /// What `usage` cost in USD; `None` when a price it needs is unknown.
    /// Cached and cache-written prompt tokens are priced at their own rates; the
    /// rest of the prompt at the input price.
    pub fn cost(&self, usage: &Usage) -> Option<f64> {
        let input = self.input_price?;
        let output = self.output_price?;
        let cached = self.cached_input_price.unwrap_or(input);
        let write = self.cache_write_price.unwrap_or(input);
        let plain = usage
            .input_tokens
            .saturating_sub(usage.cached_tokens)
            .saturating_sub(usage.cache_write_tokens);
        let dollars = plain as f64 * input
            + usage.cached_tokens as f64 * cached
            + usage.cache_write_tokens as f64 * write
            + usage.output_tokens as f64 * output;
        Some(dollars / 1e6)
    }

    /// The first problem with the entry's values, if any: a price below zero, or
    /// a window or output limit of zero.
    pub fn problem(&self) -> Option<String> {
        let prices = [
            ("input_price", self.input_price),
            ("cached_input_price", self.cached_input_price),
            ("cache_write_price", self.cache_write_price),
            ("output_price", self.output_price),
        ];
        for (key, price) in prices {
            if let Some(p) = price.filter(|p| !p.is_finite() || *p < 0.0) {
                return Some(format!(
                    "{key} must be a price in USD of 0 or more, not {p}"
                ));
            }
        }
        for (key, n) in [
            ("context_window", self.context_window),
            ("max_output", self.max_output),
        ] {
            if n == Some(0) {
                return Some(format!("{key} must be at least 1"));
            }
        }
        None
    }
}

/// The built-in table with a configuration's entries over it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ModelTable {
    /// Entries from configuration files, by model id.
    overrides: BTreeMap<String, ModelInfo>,
}

impl ModelTable {
    /// The built-in table with `overrides` over it.
    pub fn new(overrides: BTreeMap<String, ModelInfo>) -> Self {
        Self { overrides }
    }

    /// What is known about model `id`: its built-in entry (see [`builtin`]) with
    /// the configuration's entry for the same id over it. A configuration entry
    /// matches only its exact id.
    pub fn get(&self, id: &str) -> ModelInfo {
        let known = builtin(id).unwrap_or_default();
        match self.overrides.get(id) {
            Some(over) => known.overridden_by(over),
            None => known,
        }
    }
}

/// The built-in entry for model `id`: the entry of that exact id, else of the
/// longest table id that `id` extends with a version (a date, `-latest`, or a
/// pin after `@`: `gpt-4o-2024-08-06` is `gpt-4o`), else the same for the part
/// after a provider prefix (`openai/gpt-4o`). Another model whose id merely
/// starts with a known one (`o3-pro`, `gpt-5-pro`) is not that one: its prices
/// are unknown.
pub fn builtin(id: &str) -> Option<ModelInfo> {
    let lookup = |id: &str| {
        table::MODELS
            .iter()
            .filter(|(name, _)| id == *name || id.strip_prefix(name).is_some_and(version_suffix))
            .max_by_key(|(name, _)| name.len())
            .map(|(_, info)| *info)
    };
    lookup(id).or_else(|| id.rsplit_once('/').and_then(|(_, tail)| lookup(tail)))
}

/// Whether `rest` (what follows a known id) names a version of that model:
/// `-YYYY-MM-DD`, `-YYYYMMDD`, `-latest`, or `@` and a pin.
fn version_suffix(rest: &str) -> bool {
    let digits = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_digit());
    if rest.starts_with('@') {
        return rest.len() > 1;
    }
    let Some(version) = rest.strip_prefix('-') else {
        return false;
    };
    let date = match version.split('-').collect::<Vec<_>>().as_slice() {
        [y, m, d] => digits(y, 4) && digits(m, 2) && digits(d, 2),
        [ymd] => digits(ymd, 8),
        _ => false,
    };
    date || version == "latest"
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(input: u64, cached: u64, write: u64, output: u64) -> Usage {
        Usage {
            input_tokens: input,
            output_tokens: output,
            cached_tokens: cached,
            cache_write_tokens: write,
            reasoning_tokens: 0,
        }
    }

    #[test]
    fn dated_versions_and_provider_prefixes_find_their_model() {
        let base = builtin("gpt-4o").unwrap();
        assert_eq!(builtin("gpt-4o-2024-08-06"), Some(base));
        assert_eq!(builtin("openai/gpt-4o"), Some(base));
        // The longest name wins: gpt-4o-mini is not gpt-4o.
        assert_ne!(builtin("gpt-4o-mini-2024-07-18"), Some(base));
        assert_eq!(builtin("gpt-4o-mini-2024-07-18"), builtin("gpt-4o-mini"));
        assert_eq!(builtin("gpt-4oxyz"), None);
        assert_eq!(builtin("no-such-model"), None);
        // Dated and pinned Anthropic ids; other models that only start alike.
        let sonnet = builtin("claude-sonnet-4-5").unwrap();
        assert_eq!(builtin("claude-sonnet-4-5-20250929"), Some(sonnet));
        assert_eq!(builtin("claude-sonnet-4-5@20250929"), Some(sonnet));
        assert_eq!(
            builtin("claude-3-5-haiku-latest"),
            builtin("claude-3-5-haiku")
        );
        for other in [
            "o3-pro",
            "gpt-5-pro",
            "openai/o3-deep-research",
            "gpt-4o-2024",
        ] {
            assert_eq!(builtin(other), None, "{other}");
        }
    }

    #[test]
    fn every_provider_the_issue_names_has_entries_with_all_prices() {
        for id in [
            "gpt-4o",
            "claude-sonnet-4-5",
            "deepseek-chat",
            "grok-4",
            "llama-3.3-70b-versatile",
            "mistral-large-latest",
        ] {
            let info = builtin(id).unwrap_or_else(|| panic!("{id} is not in the table"));
            assert!(
                info.context_window.is_some() && info.max_output.is_some(),
                "{id}"
            );
            assert!(
                info.input_price.is_some() && info.output_price.is_some(),
                "{id}"
            );
            assert!(info.cost(&usage(1, 0, 0, 1)).is_some());
        }
        for (name, info) in table::MODELS {
            assert_eq!(info.problem(), None, "{name}");
        }
    }

    #[test]
    fn cached_and_cache_written_tokens_cost_their_own_price() {
        let info = ModelInfo {
            input_price: Some(3.0),
            cached_input_price: Some(0.3),
            cache_write_price: Some(3.75),
            output_price: Some(15.0),
            ..ModelInfo::default()
        };
        // 1M prompt tokens: 200k read from the cache, 100k written to it.
        let cost = info
            .cost(&usage(1_000_000, 200_000, 100_000, 1_000_000))
            .unwrap();
        let expected = 0.7 * 3.0 + 0.2 * 0.3 + 0.1 * 3.75 + 15.0;
        assert!((cost - expected).abs() < 1e-9, "{cost} != {expected}");
        // Without a cache price, cached tokens cost the input price.
        let plain = ModelInfo {
            cached_input_price: None,
            cache_write_price: None,
            ..info
        };
        let cost = plain.cost(&usage(1_000_000, 500_000, 0, 0)).unwrap();
        assert!((cost - 3.0).abs() < 1e-9);
    }

    #[test]
    fn an_unknown_price_is_no_cost_rather_than_zero() {
        let info = ModelInfo {
            input_price: Some(1.0),
            ..ModelInfo::default()
        };
        assert_eq!(info.cost(&usage(10, 0, 0, 10)), None);
        assert_eq!(
            ModelTable::default()
                .get("my-local-model")
                .cost(&Usage::default()),
            None
        );
    }

    #[test]
    fn a_configured_entry_overrides_field_by_field_or_adds_a_model() {
        let over = ModelInfo {
            input_price: Some(9.0),
            ..ModelInfo::default()
        };
        let added = ModelInfo {
            context_window: Some(8000),
            ..ModelInfo::default()
        };
        let table = ModelTable::new(BTreeMap::from([
            ("gpt-4o".to_owned(), over),
            ("local".to_owned(), added),
        ]));
        let got = table.get("gpt-4o");
        assert_eq!(got.input_price, Some(9.0));
        assert_eq!(got.output_price, builtin("gpt-4o").unwrap().output_price);
        assert_eq!(table.get("local").context_window, Some(8000));
        // An override names one exact id.
        assert_eq!(table.get("gpt-4o-2024-08-06").input_price, Some(2.5));
    }

    #[test]
    fn bad_values_are_named() {
        let negative = ModelInfo {
            output_price: Some(-1.0),
            ..ModelInfo::default()
        };
        assert!(negative.problem().unwrap().starts_with("output_price"));
        let zero = ModelInfo {
            context_window: Some(0),
            ..ModelInfo::default()
        };
        assert!(zero.problem().unwrap().starts_with("context_window"));
    }
}
