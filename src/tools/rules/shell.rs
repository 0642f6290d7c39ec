//! The shell side of Bash rules: a command line cut into its simple commands
//! by a quote-aware scan that refuses to vouch for anything only a shell could
//! tell (substitutions, expansions that run code, grouping, comments, file
//! redirections). What each command runs is `programs`'.

use super::valid_name;

/// Runs of white space folded to one space, ends trimmed.
pub(super) fn fold(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Redirections a rule can vouch for: they merge streams or discard output.
const HARMLESS_REDIRECTIONS: [&str; 10] = [
    "2>&1",
    ">&2",
    "1>&2",
    ">/dev/null",
    "1>/dev/null",
    "2>/dev/null",
    "&>/dev/null",
    ">>/dev/null",
    "2>>/dev/null",
    "</dev/null",
];

/// The simple commands of a shell command line, split at `&&`, `||`, `;`, `|`,
/// `&` and newlines outside quotes; `None` when the line holds anything a rule
/// cannot vouch for without a shell: substitutions and expansions that run code
/// (`$(…)`, backticks, `${…}`, `$[…]`, `$'…'`), grouping, subshells and function
/// bodies (`( ) { }`), comments, redirections other than to `/dev/null` or between
/// streams, an unclosed quote, or a leading variable assignment.
pub fn commands(line: &str) -> Option<Vec<String>> {
    let chars: Vec<char> = line.chars().collect();
    let mut parts = Vec::new();
    let mut current = String::new();
    let (mut single, mut double) = (false, false);
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if single {
            single = c != '\'';
            current.push(c);
            i += 1;
            continue;
        }
        if double {
            match c {
                '"' => double = false,
                '\\' => {
                    current.push(c);
                    current.extend(next);
                    i += 2;
                    continue;
                }
                '`' => return None,
                '$' if matches!(next, Some('(' | '{' | '[')) => return None,
                _ => {}
            }
            current.push(c);
            i += 1;
            continue;
        }
        match c {
            '\'' => single = true,
            '"' => double = true,
            '\\' => {
                current.push(c);
                current.extend(next);
                i += 2;
                continue;
            }
            // `{}` alone is a word (find's placeholder), not a group.
            '{' if next == Some('}')
                && current.ends_with(char::is_whitespace)
                && chars
                    .get(i + 2)
                    .is_none_or(|c| c.is_whitespace() || *c == ';') =>
            {
                current.push_str("{}");
                i += 2;
                continue;
            }
            '`' | '(' | ')' | '{' | '}' => return None,
            '$' if matches!(next, Some('(' | '{' | '[' | '\'' | '"')) => return None,
            '#' if current.is_empty() || current.ends_with(char::is_whitespace) => return None,
            '<' | '>' => {
                i = redirection(&chars, i, &mut current)?;
                continue;
            }
            '&' if next == Some('>') => {
                i = redirection(&chars, i, &mut current)?;
                continue;
            }
            '&' | '|' | ';' | '\n' => {
                if matches!(next, Some('&' | '|')) && c != ';' && c != '\n' {
                    i += 1;
                }
                parts.push(std::mem::take(&mut current));
                i += 1;
                continue;
            }
            _ => {}
        }
        current.push(c);
        i += 1;
    }
    if single || double {
        return None;
    }
    parts.push(current);
    let parts: Vec<String> = parts
        .into_iter()
        .map(|p| fold(&p))
        .filter(|p| !p.is_empty())
        .collect();
    if parts.iter().any(|p| leading_assignment(p)) {
        return None;
    }
    Some(parts)
}

/// Reads the redirection that starts at `chars[at]` (with a file descriptor
/// already in `current`, `2>`), adds it to `current` when it is harmless, and
/// returns where the line goes on; `None` when it is not.
fn redirection(chars: &[char], at: usize, current: &mut String) -> Option<usize> {
    let digits = current.len() - current.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    let word_start =
        current.len() == digits || current[..current.len() - digits].ends_with(char::is_whitespace);
    let fd = if digits > 0 && word_start {
        let fd = current[current.len() - digits..].to_owned();
        current.truncate(current.len() - digits);
        fd
    } else {
        String::new()
    };
    let mut j = at;
    let mut op = String::new();
    while let Some(c) = chars.get(j).filter(|c| matches!(c, '<' | '>' | '&' | '|')) {
        op.push(*c);
        j += 1;
    }
    while chars.get(j) == Some(&' ') {
        j += 1;
    }
    let mut target = String::new();
    while let Some(c) = chars
        .get(j)
        .filter(|c| !c.is_whitespace() && !matches!(c, ';' | '&' | '|' | '<' | '>'))
    {
        target.push(*c);
        j += 1;
    }
    let whole = format!("{fd}{op}{target}");
    if !HARMLESS_REDIRECTIONS.contains(&whole.as_str()) {
        return None;
    }
    current.push(' ');
    current.push_str(&whole);
    current.push(' ');
    Some(j)
}

/// True when the command starts by setting a variable (`PATH=… cmd`), which
/// could make the command that runs another one.
fn leading_assignment(part: &str) -> bool {
    let first = part.split(' ').next().unwrap_or_default();
    first
        .split_once('=')
        .is_some_and(|(name, _)| valid_name(name) && !name.starts_with('-'))
}
