//! Tokenisation helpers.

/// Splits `text` into normalised words.
///
/// Words are separated by whitespace, stripped of leading and trailing
/// ASCII punctuation, and lower-cased. Tokens that are pure punctuation
/// are dropped.
pub fn words(text: &str) -> Vec<String> {
    text.split_whitespace()
        .map(|w| w.trim_matches(|c: char| c.is_ascii_punctuation()))
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}
