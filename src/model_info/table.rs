//! The built-in model table: one cohesive list, kept in one file.
//!
//! Context windows and output limits in tokens; prices in USD per million tokens
//! (input, cached input, cache write, output). Sources: each provider's pricing and
//! model pages (openai.com/api/pricing, docs.anthropic.com/en/docs/about-claude/
//! pricing and /models, api-docs.deepseek.com/quick_start/pricing, docs.x.ai/docs/
//! models, groq.com/pricing, mistral.ai/pricing), as they stood on 2025-11-01.
//! Prices change: a configuration's `[model_info."id"]` entry overrides any field.

use super::ModelInfo;

/// An entry with every field known.
const fn m(window: u64, out: u64, input: f64, cached: f64, write: f64, output: f64) -> ModelInfo {
    ModelInfo {
        context_window: Some(window),
        max_output: Some(out),
        input_price: Some(input),
        cached_input_price: Some(cached),
        cache_write_price: Some(write),
        output_price: Some(output),
    }
}

/// Model ids and what is known about them. A dated or pinned id finds its entry
/// by prefix (see [`super::builtin`]).
pub(super) const MODELS: &[(&str, ModelInfo)] = &[
    // OpenAI (cache writes are free: priced as input).
    ("gpt-5", m(400_000, 128_000, 1.25, 0.125, 1.25, 10.0)),
    ("gpt-5-mini", m(400_000, 128_000, 0.25, 0.025, 0.25, 2.0)),
    ("gpt-5-nano", m(400_000, 128_000, 0.05, 0.005, 0.05, 0.40)),
    ("gpt-5-codex", m(400_000, 128_000, 1.25, 0.125, 1.25, 10.0)),
    ("gpt-4.1", m(1_047_576, 32_768, 2.0, 0.50, 2.0, 8.0)),
    ("gpt-4.1-mini", m(1_047_576, 32_768, 0.40, 0.10, 0.40, 1.60)),
    (
        "gpt-4.1-nano",
        m(1_047_576, 32_768, 0.10, 0.025, 0.10, 0.40),
    ),
    ("gpt-4o", m(128_000, 16_384, 2.50, 1.25, 2.50, 10.0)),
    ("gpt-4o-mini", m(128_000, 16_384, 0.15, 0.075, 0.15, 0.60)),
    ("o3", m(200_000, 100_000, 2.0, 0.50, 2.0, 8.0)),
    ("o3-mini", m(200_000, 100_000, 1.10, 0.55, 1.10, 4.40)),
    ("o4-mini", m(200_000, 100_000, 1.10, 0.275, 1.10, 4.40)),
    // Anthropic (cache reads 0.1 x input, 5-minute cache writes 1.25 x input).
    ("claude-opus-4-5", m(200_000, 64_000, 5.0, 0.50, 6.25, 25.0)),
    (
        "claude-opus-4-1",
        m(200_000, 32_000, 15.0, 1.50, 18.75, 75.0),
    ),
    ("claude-opus-4", m(200_000, 32_000, 15.0, 1.50, 18.75, 75.0)),
    (
        "claude-sonnet-4-5",
        m(200_000, 64_000, 3.0, 0.30, 3.75, 15.0),
    ),
    ("claude-sonnet-4", m(200_000, 64_000, 3.0, 0.30, 3.75, 15.0)),
    (
        "claude-3-7-sonnet",
        m(200_000, 64_000, 3.0, 0.30, 3.75, 15.0),
    ),
    ("claude-haiku-4-5", m(200_000, 64_000, 1.0, 0.10, 1.25, 5.0)),
    ("claude-3-5-haiku", m(200_000, 8_192, 0.80, 0.08, 1.0, 4.0)),
    // DeepSeek (V3.2: one price for both modes; cache hits are the cached price).
    ("deepseek-chat", m(128_000, 8_192, 0.28, 0.028, 0.28, 0.42)),
    (
        "deepseek-reasoner",
        m(128_000, 64_000, 0.28, 0.028, 0.28, 0.42),
    ),
    // xAI.
    ("grok-4", m(256_000, 256_000, 3.0, 0.75, 3.0, 15.0)),
    ("grok-4-fast", m(2_000_000, 30_000, 0.20, 0.05, 0.20, 0.50)),
    ("grok-3", m(131_072, 131_072, 3.0, 0.75, 3.0, 15.0)),
    ("grok-3-mini", m(131_072, 131_072, 0.30, 0.075, 0.30, 0.50)),
    (
        "grok-code-fast-1",
        m(256_000, 10_000, 0.20, 0.02, 0.20, 1.50),
    ),
    // Groq (no prompt cache discount listed: cached tokens at the input price).
    (
        "llama-3.3-70b-versatile",
        m(131_072, 32_768, 0.59, 0.59, 0.59, 0.79),
    ),
    (
        "llama-3.1-8b-instant",
        m(131_072, 131_072, 0.05, 0.05, 0.05, 0.08),
    ),
    (
        "openai/gpt-oss-120b",
        m(131_072, 65_536, 0.15, 0.15, 0.15, 0.75),
    ),
    (
        "openai/gpt-oss-20b",
        m(131_072, 65_536, 0.10, 0.10, 0.10, 0.50),
    ),
    (
        "moonshotai/kimi-k2-instruct",
        m(131_072, 16_384, 1.0, 0.50, 1.0, 3.0),
    ),
    ("qwen/qwen3-32b", m(131_072, 40_960, 0.29, 0.29, 0.29, 0.59)),
    // Mistral (no cache pricing: cached tokens at the input price).
    (
        "mistral-large-latest",
        m(131_072, 131_072, 2.0, 2.0, 2.0, 6.0),
    ),
    (
        "mistral-medium-latest",
        m(131_072, 131_072, 0.40, 0.40, 0.40, 2.0),
    ),
    (
        "mistral-small-latest",
        m(131_072, 131_072, 0.10, 0.10, 0.10, 0.30),
    ),
    (
        "codestral-latest",
        m(256_000, 256_000, 0.30, 0.30, 0.30, 0.90),
    ),
    (
        "devstral-medium-latest",
        m(131_072, 131_072, 0.40, 0.40, 0.40, 2.0),
    ),
    (
        "devstral-small-latest",
        m(131_072, 131_072, 0.10, 0.10, 0.10, 0.30),
    ),
    (
        "magistral-medium-latest",
        m(40_000, 40_000, 2.0, 2.0, 2.0, 5.0),
    ),
];
