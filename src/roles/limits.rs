//! A role's budget fields (`maxCost`, `maxTokens`, `timeout`), read from its
//! frontmatter.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::session::budget::{Budget, parse_duration};

/// The budget the fields set; an error names the field and what is wrong.
pub(super) fn budget_fields(
    fields: &BTreeMap<String, serde_saphyr::Spanned<Value>>,
) -> Result<Budget, (&'static str, String)> {
    let get = |key: &str| fields.get(key).map(|v| &v.value).filter(|v| !v.is_null());
    let max_cost_usd = match get("maxCost") {
        None => None,
        Some(Value::Number(n)) if n.as_f64().is_some_and(|c| c > 0.0 && c.is_finite()) => {
            n.as_f64()
        }
        Some(other) => {
            return Err((
                "maxCost",
                format!("maxCost must be a price in USD above 0, not {other}"),
            ));
        }
    };
    let max_tokens = match get("maxTokens") {
        None => None,
        Some(Value::Number(n)) if n.as_u64().is_some_and(|n| n >= 1) => n.as_u64(),
        Some(other) => {
            return Err((
                "maxTokens",
                format!("maxTokens must be a positive whole number, not {other}"),
            ));
        }
    };
    let timeout = match get("timeout") {
        None => None,
        Some(Value::Number(n)) if n.as_u64().is_some_and(|n| n >= 1) => {
            n.as_u64().map(std::time::Duration::from_secs)
        }
        Some(Value::String(s)) => {
            Some(parse_duration(s).map_err(|e| ("timeout", format!("timeout: {e}")))?)
        }
        Some(other) => {
            return Err((
                "timeout",
                format!("timeout must be a duration (90s, 5m, 1h), not {other}"),
            ));
        }
    };
    Ok(Budget {
        max_cost_usd,
        max_tokens,
        timeout,
    })
}
