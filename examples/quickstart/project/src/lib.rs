//! Simple statistics over the words of a piece of text.

use std::collections::HashMap;

pub mod parse;

pub use parse::words;

/// Returns the number of words in `text`.
pub fn word_count(text: &str) -> usize {
    words(text).len()
}

/// Returns the mean length of the words in `text`, in characters.
///
/// Returns `None` if the text contains no words.
pub fn average_word_length(text: &str) -> Option<f64> {
    let words = words(text);
    if words.is_empty() {
        return None;
    }
    let total: usize = words.iter().map(|w| w.chars().count()).sum();
    Some(total as f64 / words.len() as f64)
}

/// Returns the median length of the words in `text`, in characters.
///
/// For an even number of words this is the mean of the two middle lengths.
/// Returns `None` if the text contains no words.
pub fn median_word_length(text: &str) -> Option<f64> {
    let mut lengths: Vec<usize> = words(text).iter().map(|w| w.chars().count()).collect();
    if lengths.is_empty() {
        return None;
    }
    lengths.sort_unstable();
    let mid = lengths.len() / 2;
    Some(lengths[mid] as f64)
}

/// Returns the most frequent word in `text` together with its count.
///
/// Ties are broken by choosing the word that sorts first alphabetically.
/// Returns `None` if the text contains no words.
pub fn most_common_word(text: &str) -> Option<(String, usize)> {
    let mut counts: HashMap<String, usize> = HashMap::new();
    for word in words(text) {
        *counts.entry(word).or_insert(0) += 1;
    }
    counts
        .into_iter()
        .max_by(|(a, ca), (b, cb)| ca.cmp(cb).then_with(|| b.cmp(a)))
}
