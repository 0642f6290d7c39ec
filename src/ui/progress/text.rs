//! Short forms a person reads at a glance, shared by the board and its renderings: a
//! tool call in a few words, a reason or message clipped, tokens as `2.3k`, elapsed
//! time as `mm:ss`, a role's color.

/// A tool call in a few words: the tool and its main argument.
pub fn short_call(name: &str, arguments: &str) -> String {
    let input: serde_json::Value = serde_json::from_str(arguments).unwrap_or_default();
    let key = ["file_path", "command", "pattern", "path", "description"]
        .iter()
        .find_map(|k| input.get(*k).and_then(serde_json::Value::as_str));
    match key {
        Some(arg) => format!("{name} {}", clip(arg.lines().next().unwrap_or(""), 40)),
        None => name.to_owned(),
    }
}

/// The last line of `text` with something on it (a progress bar's `\r`
/// ends a line too), its escape sequences taken out (an unfinished one at
/// the end too) and its other control characters made spaces: what a row
/// shows of a command's output.
pub(super) fn last_line(text: &str) -> Option<String> {
    let line = text
        .split(['\n', '\r'])
        .map(|l| without_escapes(l).trim().to_owned())
        .rfind(|l| !l.is_empty())?;
    Some(
        line.chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect(),
    )
}

/// What follows the last line break of `text`: the start of a line whose
/// rest may come in the next output, its last `max` bytes at most.
pub(super) fn unfinished_line(text: &str, max: usize) -> &str {
    let tail = text.rsplit(['\n', '\r']).next().unwrap_or_default();
    let mut cut = tail.len().saturating_sub(max);
    while !tail.is_char_boundary(cut) {
        cut += 1;
    }
    &tail[cut..]
}

/// `line` without terminal escape sequences: CSI (`ESC [` … a final
/// byte), OSC (`ESC ]` … `BEL` or `ESC \`), and two-character ones.
fn without_escapes(line: &str) -> String {
    let mut kept = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\u{1b}' {
            kept.push(c);
            continue;
        }
        match chars.next() {
            Some('[') => {
                for c in chars.by_ref() {
                    if ('\u{40}'..='\u{7e}').contains(&c) {
                        break;
                    }
                }
            }
            Some(']') => {
                while let Some(c) = chars.next() {
                    if c == '\u{7}' || (c == '\u{1b}' && chars.next_if_eq(&'\\').is_some()) {
                        break;
                    }
                }
            }
            _ => {}
        }
    }
    kept
}

pub(super) fn short_reason(reason: &str) -> String {
    let reason = reason.split(':').next().unwrap_or(reason);
    clip(reason, 30)
}

pub(super) fn clip(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let cut: String = text.chars().take(max - 1).collect();
    format!("{cut}…")
}

/// `text` in a role's color, as an ANSI escape (unknown colors leave it plain).
pub fn paint(text: &str, color: &str) -> String {
    let code = match color {
        "red" => "31",
        "green" => "32",
        "yellow" => "33",
        "blue" => "34",
        "purple" => "35",
        "cyan" => "36",
        "gray" => "90",
        "orange" => "38;5;208",
        "pink" => "38;5;213",
        _ => return text.to_owned(),
    };
    format!("\x1b[{code}m{text}\x1b[0m")
}

/// `n` of `what`, the word in the plural unless `n` is 1: `1 tool`, `3 tools`.
pub fn count(n: impl Into<u64>, what: &str) -> String {
    let n = n.into();
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

/// Dollars as a person reads them: `$1.25`, `$0.04`, `$0.003`, `<$0.001`; `–`
/// when unknown (never `$0.00` for a price nobody knows).
pub fn dollars(cost: Option<f64>) -> String {
    match cost {
        None => "–".to_owned(),
        Some(usd) if usd >= 0.01 => format!("${usd:.2}"),
        Some(usd) if usd > 0.0 && usd < 0.001 => "<$0.001".to_owned(),
        Some(usd) => format!("${usd:.3}"),
    }
}

/// Tokens as a person reads them: `950`, `2.3k`, `1.2M`.
pub fn tokens(n: u64) -> String {
    match n {
        0..=999 => n.to_string(),
        1_000..=999_999 => format!("{:.1}k", n as f64 / 1000.0),
        _ => format!("{:.1}M", n as f64 / 1_000_000.0),
    }
}

/// Elapsed time as `mm:ss`.
pub fn clock(ms: u64) -> String {
    let secs = ms / 1000;
    format!("{:02}:{:02}", secs / 60, secs % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_are_painted_in_their_color() {
        assert_eq!(paint("coder#1", "green"), "\x1b[32mcoder#1\x1b[0m");
        assert_eq!(paint("x", "mauve"), "x");
    }

    #[test]
    fn one_is_singular() {
        assert_eq!(
            [
                count(0u32, "tool"),
                count(1u32, "tool"),
                count(2u32, "turn")
            ],
            ["0 tools", "1 tool", "2 turns"]
        );
    }

    #[test]
    fn dollars_read_naturally_and_unknown_is_a_dash() {
        assert_eq!(
            [0.0, 0.0004, 0.004, 0.042, 1.5, 12.345].map(|c| dollars(Some(c))),
            ["$0.000", "<$0.001", "$0.004", "$0.04", "$1.50", "$12.35"]
        );
        assert_eq!(dollars(None), "–");
    }

    #[test]
    fn tokens_and_clocks_read_naturally() {
        assert_eq!(
            [tokens(950), tokens(2300), tokens(1_250_000)],
            ["950", "2.3k", "1.2M"]
        );
        assert_eq!(clock(125_000), "02:05");
        assert_eq!(
            short_call("Bash", r#"{"command":"cargo test --all\nmore"}"#),
            "Bash cargo test --all"
        );
    }
}
