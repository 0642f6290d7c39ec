//! What is known of models (`[model_info]`) and when sessions compact
//! (`[compaction]`), from the person's file with the workspace's over it as the
//! trust rule allows: a workspace's file may only make a limit stricter (a
//! smaller window or output limit, an earlier compaction) and never lower a
//! price, so that it cannot make `--max-cost` count less than was spent. A value
//! it may not set is left out, with a warning naming it.

use std::collections::BTreeMap;
use std::path::Path;

use super::rule::{Origin, Setting, Verdict, verdict};
use crate::config::{ConfigFile, DEFAULT_COMPACT_AT};
use crate::model_info::{ModelInfo, builtin};

/// The limits the run uses, and what was left out.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct Limits {
    /// `[model_info]` entries over the built-in table, by model id.
    pub(super) model_info: BTreeMap<String, ModelInfo>,
    /// The compaction threshold, when a file sets one.
    pub(super) compact_at: Option<f64>,
    /// The workspace's values left out, one line each.
    pub(super) warnings: Vec<String>,
}

/// Which way a value may move to be stricter.
#[derive(Clone, Copy, Debug)]
enum Stricter {
    /// Down: a window, an output limit, a threshold.
    Lower,
    /// Up: a price.
    Higher,
}

/// The person's limits with the workspace file's (`workspace`, read from `path`)
/// over them where the rule allows.
pub(super) fn merge(user: &ConfigFile, workspace: &ConfigFile, path: &Path) -> Limits {
    let mut limits = Limits {
        model_info: user.model_info.clone(),
        compact_at: user.compaction.as_ref().and_then(|c| c.threshold),
        warnings: Vec::new(),
    };
    let file = path.display();
    for (id, theirs) in &workspace.model_info {
        // What the run would know without the workspace's file.
        let known = match user.model_info.get(id) {
            Some(mine) => builtin(id).unwrap_or_default().overridden_by(mine),
            None => builtin(id).unwrap_or_default(),
        };
        let warnings = &mut limits.warnings;
        let mut field = |key: &str, setting, way, known: Option<f64>, value: Option<f64>| {
            let value = value?;
            match admit(setting, way, known, value) {
                Ok(()) => Some(value),
                Err(why) => {
                    warnings.push(format!(
                        "{file}: [model_info.{id:?}] {key} = {value} is ignored: {why}"
                    ));
                    None
                }
            }
        };
        let count = |n: Option<u64>| n.map(|n| n as f64);
        let (limit, price) = (Setting::ModelLimit, Setting::Price);
        let (lower, higher) = (Stricter::Lower, Stricter::Higher);
        let kept = ModelInfo {
            context_window: field(
                "context_window",
                limit,
                lower,
                count(known.context_window),
                count(theirs.context_window),
            )
            .map(|n| n as u64),
            max_output: field(
                "max_output",
                limit,
                lower,
                count(known.max_output),
                count(theirs.max_output),
            )
            .map(|n| n as u64),
            input_price: field(
                "input_price",
                price,
                higher,
                known.input_price,
                theirs.input_price,
            ),
            cached_input_price: field(
                "cached_input_price",
                price,
                higher,
                known.cached_input_price.or(known.input_price),
                theirs.cached_input_price,
            ),
            cache_write_price: field(
                "cache_write_price",
                price,
                higher,
                known.cache_write_price.or(known.input_price),
                theirs.cache_write_price,
            ),
            output_price: field(
                "output_price",
                price,
                higher,
                known.output_price,
                theirs.output_price,
            ),
        };
        let merged = match limits.model_info.remove(id) {
            Some(mine) => mine.overridden_by(&kept),
            None => kept,
        };
        limits.model_info.insert(id.clone(), merged);
    }
    if let Some(theirs) = workspace.compaction.as_ref().and_then(|c| c.threshold) {
        let known = limits.compact_at.unwrap_or(DEFAULT_COMPACT_AT);
        match admit(
            Setting::CompactionThreshold,
            Stricter::Lower,
            Some(known),
            theirs,
        ) {
            Ok(()) => limits.compact_at = Some(theirs),
            Err(why) => limits.warnings.push(format!(
                "{file}: [compaction] threshold = {theirs} is ignored: {why}"
            )),
        }
    }
    limits
}

/// Whether a workspace's `value` of `setting` may stand where the run would
/// otherwise use `known`; else why not.
fn admit(setting: Setting, way: Stricter, known: Option<f64>, value: f64) -> Result<(), String> {
    match verdict(setting, Origin::Workspace, false) {
        Verdict::Use => return Ok(()),
        Verdict::IfStricter => {}
        Verdict::Ask | Verdict::Refuse => {
            return Err("a workspace's file may not set it".into());
        }
    }
    match (way, known) {
        (Stricter::Lower, Some(known)) if value > known => Err(format!(
            "a workspace's file may only lower it (it is {known})"
        )),
        (Stricter::Higher, Some(known)) if value < known => Err(format!(
            "a workspace's file may only raise a price (it is {known})"
        )),
        // Where no price is known the cost is not counted, and the run says so:
        // a repository's price (however low) would silence that.
        (Stricter::Higher, None) => Err(
            "a workspace's file may not price a model that has no price (give it one in ~/.config/orchestrate/config.toml)"
                .into(),
        ),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &str) -> ConfigFile {
        ConfigFile::parse("f.toml", text).unwrap()
    }

    #[test]
    fn a_workspace_may_only_raise_prices_and_lower_limits() {
        // gpt-4o's built-in entry: 128k window, 2.5 / 10 USD per million.
        let workspace = file(
            "[model_info.\"gpt-4o\"]\ninput_price = 0.0\noutput_price = 20.0\ncontext_window = 2000000\nmax_output = 1000\n\
             [compaction]\nthreshold = 0.99\n",
        );
        let limits = merge(
            &ConfigFile::default(),
            &workspace,
            Path::new("/w/orchestrate.toml"),
        );
        let info = limits.model_info["gpt-4o"];
        assert_eq!(
            (
                info.input_price,
                info.output_price,
                info.context_window,
                info.max_output
            ),
            (None, Some(20.0), None, Some(1000))
        );
        assert_eq!(limits.compact_at, None);
        assert_eq!(
            limits.warnings,
            [
                "/w/orchestrate.toml: [model_info.\"gpt-4o\"] context_window = 2000000 is ignored: a workspace's file may only lower it (it is 128000)",
                "/w/orchestrate.toml: [model_info.\"gpt-4o\"] input_price = 0 is ignored: a workspace's file may only raise a price (it is 2.5)",
                "/w/orchestrate.toml: [compaction] threshold = 0.99 is ignored: a workspace's file may only lower it (it is 0.85)",
            ]
        );
        let tighter = file("[compaction]\nthreshold = 0.5\n");
        assert_eq!(
            merge(&ConfigFile::default(), &tighter, Path::new("f")).compact_at,
            Some(0.5)
        );
    }

    #[test]
    fn the_persons_own_values_stand_and_a_workspace_never_prices_an_unpriced_model() {
        let user = file("[model_info.local]\ninput_price = 0.0\noutput_price = 0.0\n[compaction]\nthreshold = 0.9\n").trusted();
        let workspace = file(
            "[model_info.local]\ninput_price = 1.0\n[model_info.other]\ninput_price = 0.0\noutput_price = 3.0\n",
        );
        let limits = merge(&user, &workspace, Path::new("f"));
        assert_eq!(limits.model_info["local"].input_price, Some(1.0));
        assert_eq!(limits.model_info["local"].output_price, Some(0.0));
        assert_eq!(limits.model_info["other"].input_price, None);
        assert_eq!(limits.model_info["other"].output_price, None);
        assert_eq!(limits.compact_at, Some(0.9));
        assert_eq!(limits.warnings.len(), 2, "{:?}", limits.warnings);
        assert!(limits.warnings[0].contains("may not price a model that has no price"));
    }
}
