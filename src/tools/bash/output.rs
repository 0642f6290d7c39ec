//! The output's cap: the shell's bytes decoded as UTF-8 and kept within
//! [`OUTPUT_CAP`] characters, the first and the last half of them, with a line saying
//! how many were left out. It does not read the pipe (`command`).

/// Characters of output kept: the first and the last half of it.
pub(super) const OUTPUT_CAP: usize = 30_000;
pub(super) const HEAD_CHARS: usize = OUTPUT_CAP / 2;
pub(super) const TAIL_CHARS: usize = OUTPUT_CAP - HEAD_CHARS;

/// Output decoded as UTF-8 (invalid bytes become U+FFFD) and capped: the first
/// [`HEAD_CHARS`] characters are kept, and of the rest only the last [`TAIL_CHARS`],
/// held in a buffer trimmed whenever it reaches twice that, so memory stays bounded
/// whatever the command writes.
#[derive(Debug, Default)]
pub(super) struct CappedOutput {
    head: String,
    head_chars: usize,
    tail: String,
    tail_chars: usize,
    elided: usize,
    /// The start of a character split across reads (at most 3 bytes).
    partial: Vec<u8>,
}

impl CappedOutput {
    pub(super) fn push(&mut self, bytes: &[u8]) {
        let joined;
        let mut rest = if self.partial.is_empty() {
            bytes
        } else {
            joined = [std::mem::take(&mut self.partial).as_slice(), bytes].concat();
            joined.as_slice()
        };
        loop {
            match std::str::from_utf8(rest) {
                Ok(text) => {
                    self.push_str(text);
                    return;
                }
                Err(e) => {
                    let (valid, after) = rest.split_at(e.valid_up_to());
                    self.push_str(std::str::from_utf8(valid).unwrap_or_default());
                    match e.error_len() {
                        Some(len) => {
                            self.push_str("\u{FFFD}");
                            rest = &after[len..];
                        }
                        None => {
                            self.partial = after.to_vec();
                            return;
                        }
                    }
                }
            }
        }
    }

    fn push_str(&mut self, mut text: &str) {
        if self.head_chars < HEAD_CHARS {
            let room = HEAD_CHARS - self.head_chars;
            let split = text.char_indices().nth(room).map_or(text.len(), |(i, _)| i);
            let (head, rest) = text.split_at(split);
            self.head.push_str(head);
            self.head_chars += head.chars().count();
            text = rest;
        }
        if text.is_empty() {
            return;
        }
        self.tail.push_str(text);
        self.tail_chars += text.chars().count();
        if self.tail_chars >= 2 * TAIL_CHARS {
            self.trim_tail();
        }
    }

    fn trim_tail(&mut self) {
        let extra = self.tail_chars.saturating_sub(TAIL_CHARS);
        if extra == 0 {
            return;
        }
        let split = self
            .tail
            .char_indices()
            .nth(extra)
            .map_or(self.tail.len(), |(i, _)| i);
        self.tail.drain(..split);
        self.tail_chars -= extra;
        self.elided += extra;
    }

    /// The text: all of it, or the head, the elision line and the tail.
    pub(super) fn finish(mut self) -> String {
        if !self.partial.is_empty() {
            self.partial.clear();
            self.push_str("\u{FFFD}");
        }
        self.trim_tail();
        let mut text = self.head;
        if self.elided > 0 {
            if !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str(&format!("... [{} characters elided] ...\n", self.elided));
        }
        text.push_str(&self.tail);
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_under_the_cap_is_whole() {
        let mut out = CappedOutput::default();
        let text = "é".repeat(OUTPUT_CAP);
        for chunk in text.as_bytes().chunks(7) {
            out.push(chunk);
        }
        assert_eq!(out.finish(), text);
    }

    #[test]
    fn characters_split_across_reads_and_invalid_bytes_decode() {
        let mut out = CappedOutput::default();
        let snow = "☃".as_bytes();
        out.push(&snow[..1]);
        out.push(&snow[1..]);
        out.push(b"a\xffb");
        out.push(&snow[..2]);
        assert_eq!(out.finish(), "☃a\u{FFFD}b\u{FFFD}");
    }

    #[test]
    fn output_over_the_cap_counts_characters_not_bytes() {
        let mut out = CappedOutput::default();
        out.push("é".repeat(HEAD_CHARS).as_bytes());
        out.push("ü".repeat(10).as_bytes());
        out.push("ö".repeat(TAIL_CHARS).as_bytes());
        assert_eq!(
            out.finish(),
            format!(
                "{}\n... [10 characters elided] ...\n{}",
                "é".repeat(HEAD_CHARS),
                "ö".repeat(TAIL_CHARS)
            )
        );
    }
}
