//! Claude Code's permission-rule syntax, matched (pure code): `Bash(npm test:*)`
//! (a command and anything after it), `Bash(git log)` (that command exactly), a
//! bare tool name (every call of it). A shell command matches only when every
//! command in it does: `npm test && rm -rf x` is two commands, and the second
//! does not match `Bash(npm test:*)`. A command whose parts cannot be told apart
//! without running a shell (a `$(…)` or backtick substitution, a process
//! substitution, a redirection into a file, an unclosed quote) matches nothing.

use std::fmt;

/// One rule: a tool, and for Bash, which commands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// The tool's name.
    pub tool: String,
    /// What the rule covers of it; `None`: every call.
    pub pattern: Option<Pattern>,
}

/// The commands a Bash rule covers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pattern {
    /// `prefix:*`: the command `prefix`, alone or followed by arguments.
    Prefix(String),
    /// The command exactly, spaces folded.
    Exact(String),
}

impl Rule {
    /// Reads `Tool` or `Tool(pattern)`; `None` when the text is not a rule.
    pub fn parse(text: &str) -> Option<Rule> {
        let text = text.trim();
        let Some((tool, rest)) = text.split_once('(') else {
            return valid_name(text).then(|| Rule {
                tool: text.to_owned(),
                pattern: None,
            });
        };
        let inner = rest.strip_suffix(')')?.trim();
        if !valid_name(tool) {
            return None;
        }
        let pattern = match inner.strip_suffix(":*") {
            _ if inner.is_empty() || inner == "*" => None,
            Some(prefix) => Some(Pattern::Prefix(fold(prefix))),
            None => Some(Pattern::Exact(fold(inner))),
        };
        Some(Rule {
            tool: tool.to_owned(),
            pattern,
        })
    }

    /// Whether the rule covers a Bash `command` (for a rule with no pattern:
    /// every command).
    pub fn covers_command(&self, command: &str) -> bool {
        self.pattern.as_ref().is_none_or(|p| {
            commands(command).is_some_and(|parts| parts.iter().all(|c| p.matches(c)))
        })
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.pattern {
            None => write!(f, "{}", self.tool),
            Some(Pattern::Prefix(p)) => write!(f, "{}({p}:*)", self.tool),
            Some(Pattern::Exact(p)) => write!(f, "{}({p})", self.tool),
        }
    }
}

impl Pattern {
    /// Whether one simple command (no operators) matches.
    pub fn matches(&self, command: &str) -> bool {
        let command = fold(command);
        match self {
            Self::Exact(exact) => command == *exact,
            Self::Prefix(prefix) => {
                command == *prefix
                    || command
                        .strip_prefix(prefix.as_str())
                        .is_some_and(|rest| rest.starts_with(' '))
            }
        }
    }
}

/// Whether every command in `command` is covered by one of `rules` (Bash rules).
pub fn covered(rules: &[Rule], command: &str) -> bool {
    let Some(parts) = commands(command) else {
        return false;
    };
    !parts.is_empty()
        && parts.iter().all(|part| {
            rules
                .iter()
                .any(|r| r.pattern.as_ref().is_none_or(|p| p.matches(part)))
        })
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Runs of white space folded to one space, ends trimmed.
fn fold(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The simple commands of a shell command line, split at `&&`, `||`, `;`, `|`,
/// `&` and newlines outside quotes; `None` when something in it could run or
/// write what no rule sees (substitutions, redirections into files other than
/// `/dev/null`, an unclosed quote, a leading variable assignment).
pub fn commands(line: &str) -> Option<Vec<String>> {
    let mut parts = Vec::new();
    let mut current = String::new();
    let mut chars = line.chars().peekable();
    let (mut single, mut double) = (false, false);
    while let Some(c) = chars.next() {
        match c {
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            '\\' if !single => {
                current.push(c);
                if let Some(next) = chars.next() {
                    current.push(next);
                }
                continue;
            }
            '`' if !single => return None,
            '$' if !single && chars.peek() == Some(&'(') => return None,
            '<' | '>' if !single && !double && chars.peek() == Some(&'(') => return None,
            '&' | '|' | ';' | '\n' if !single && !double => {
                // `2>&1` and `>&2` are a redirection, not an operator.
                if c == '&' && current.ends_with('>') {
                    current.push(c);
                    continue;
                }
                if matches!(chars.peek(), Some('&' | '|')) && c != ';' && c != '\n' {
                    chars.next();
                }
                parts.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(c);
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
    for part in &parts {
        if !redirections_harmless(part) || leading_assignment(part) {
            return None;
        }
    }
    Some(parts)
}

/// True when every redirection in `part` only merges streams or discards output.
fn redirections_harmless(part: &str) -> bool {
    let words: Vec<&str> = part.split(' ').collect();
    for (i, word) in words.iter().enumerate() {
        let unquoted = !word.starts_with(['\'', '"']);
        if !unquoted || !word.contains(['<', '>']) {
            continue;
        }
        let ok = matches!(
            *word,
            "2>&1" | ">&2" | "1>&2" | ">/dev/null" | "2>/dev/null" | "&>/dev/null"
        ) || (matches!(*word, ">" | "2>" | "&>")
            && words.get(i + 1) == Some(&"/dev/null"));
        if !ok {
            return false;
        }
    }
    true
}

/// True when the command starts by setting a variable (`PATH=… cmd`), which
/// could make the command that runs another one.
fn leading_assignment(part: &str) -> bool {
    let first = part.split(' ').next().unwrap_or_default();
    first
        .split_once('=')
        .is_some_and(|(name, _)| valid_name(name) && !name.starts_with('-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(text: &str) -> Rule {
        Rule::parse(text).unwrap_or_else(|| panic!("{text} is not a rule"))
    }

    #[test]
    fn rules_read_as_claude_code_writes_them() {
        assert_eq!(rule("Read").pattern, None);
        assert_eq!(rule("Bash(*)").pattern, None);
        assert_eq!(
            rule("Bash(npm  test:*)").pattern,
            Some(Pattern::Prefix("npm test".into()))
        );
        assert_eq!(
            rule("Bash(git log)").pattern,
            Some(Pattern::Exact("git log".into()))
        );
        assert_eq!(rule("Bash(git:*)").to_string(), "Bash(git:*)");
        assert_eq!(
            rule("mcp__github__create_issue").tool,
            "mcp__github__create_issue"
        );
        for bad in ["", "Bash(git", "(x)", "Two words"] {
            assert_eq!(Rule::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_prefix_covers_the_command_and_its_arguments_only() {
        let r = rule("Bash(npm test:*)");
        assert!(r.covers_command("npm test"));
        assert!(r.covers_command("npm  test -- --watch"));
        assert!(!r.covers_command("npm tester"));
        assert!(!r.covers_command("npm run test"));
        let exact = rule("Bash(git log)");
        assert!(exact.covers_command("git log"));
        assert!(!exact.covers_command("git log -p"));
    }

    #[test]
    fn a_compound_command_is_covered_only_when_every_part_is() {
        let rules = [rule("Bash(npm test:*)"), rule("Bash(git status)")];
        assert!(covered(&rules, "npm test && git status"));
        assert!(covered(&rules, "npm test 2>&1 | npm test"));
        for cmd in [
            "npm test && rm -rf x",
            "npm test; rm -rf x",
            "npm test || rm -rf x",
            "npm test | sh",
            "npm test & rm -rf x",
            "npm test\nrm -rf x",
            "npm test $(rm -rf x)",
            "npm test `rm -rf x`",
            "npm test > ~/.bashrc",
            "npm test <(cat /etc/passwd)",
            "PATH=/tmp npm test",
            "npm test 'unclosed",
            "",
        ] {
            assert!(!covered(&rules, cmd), "{cmd:?} was covered");
        }
        // Operators inside quotes are arguments.
        assert!(covered(&rules, "npm test -- --grep 'a && b; c | d'"));
        assert!(covered(&rules, "npm test > /dev/null"));
    }
}
