//! Claude Code's permission-rule syntax, matched (pure code): `Bash(npm test:*)`
//! (a command and anything after it), `Bash(git log)` (that command exactly), a
//! bare tool name (every call of it). A shell command matches only when every
//! command in it does: `npm test && rm -rf x` is two commands, and the second
//! does not match `Bash(npm test:*)`. A command whose parts cannot be told apart
//! without running a shell (a `$(…)` or backtick substitution, a process
//! substitution, a redirection into a file, an unclosed quote) matches nothing.

use std::fmt;

mod programs;
mod shell;

use self::programs::Program;
pub use self::shell::commands;
use self::shell::fold;

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
    /// The command matching a pattern where `*` stands for any text (Claude Code's
    /// newer `Bash(git * main)` form).
    Wildcard(String),
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
            // `git push *`: the command and anything after it, as `git push:*`.
            None if inner.ends_with(" *") && inner.matches('*').count() == 1 => {
                Some(Pattern::Prefix(fold(&inner[..inner.len() - 2])))
            }
            None if inner.contains('*') && tool == "Bash" => Some(Pattern::Wildcard(fold(inner))),
            None => Some(Pattern::Exact(fold(inner))),
        };
        Some(Rule {
            tool: tool.to_owned(),
            pattern,
        })
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.pattern {
            None => write!(f, "{}", self.tool),
            Some(Pattern::Prefix(p)) => write!(f, "{}({p}:*)", self.tool),
            Some(Pattern::Exact(p) | Pattern::Wildcard(p)) => write!(f, "{}({p})", self.tool),
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
            Self::Wildcard(pattern) => wildcard(pattern.as_bytes(), command.as_bytes()),
        }
    }
}

/// Whether `text` matches `pattern`, `*` standing for any run of bytes, in time
/// linear in their lengths whatever the stars: the text between stars must
/// start the text, end it, and appear in order between, and taking each middle
/// piece at its first place leaves the most room for the rest.
fn wildcard(pattern: &[u8], text: &[u8]) -> bool {
    let pieces: Vec<&[u8]> = pattern.split(|b| *b == b'*').collect();
    let [first, middle @ .., last] = pieces.as_slice() else {
        // No star: the whole text.
        return pattern == text;
    };
    if text.len() < first.len() + last.len() || !text.starts_with(first) || !text.ends_with(last) {
        return false;
    }
    let mut rest = &text[first.len()..text.len() - last.len()];
    for piece in middle {
        match memchr::memmem::find(rest, piece) {
            Some(at) => rest = &rest[at + piece.len()..],
            None => return false,
        }
    }
    true
}

/// Whether every command in `command` is covered by one of `rules` (Bash rules).
pub fn covered(rules: &[Rule], command: &str) -> bool {
    commands(command).is_some_and(|parts| covers_parts(rules, &parts))
}

/// Whether each of a line's simple commands `parts` is covered by one of `rules`.
fn covers_parts(rules: &[Rule], parts: &[String]) -> bool {
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

/// What the rules say about one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuleVerdict {
    /// A deny rule matched: refused, whatever the mode.
    Deny,
    /// An ask rule matched: a person is asked, whatever the mode.
    Ask,
    /// An allow rule matched: it runs without asking (unless the mode forbids it).
    Allow,
    /// A Bash line whose commands cannot be read well enough to tell whether a
    /// deny or ask rule matches it (a word the shell would expand where a rule
    /// looks, something only a shell can split): refused in
    /// `bypassPermissions`, asked about otherwise.
    Unreadable,
}

/// The permission rules of a run: Claude Code's `permissions.allow`, `deny` and
/// `ask`, from its settings files and `--allowedTools` / `--disallowedTools`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Rules {
    /// Rules that let a call run without asking.
    pub allow: Vec<Rule>,
    /// Rules that refuse a call.
    pub deny: Vec<Rule>,
    /// Rules that make a person decide.
    pub ask: Vec<Rule>,
    /// The workspace, for relative path rules.
    pub workspace: std::path::PathBuf,
    /// The home folder, for `~/` path rules.
    pub home: Option<std::path::PathBuf>,
}

impl Rules {
    /// What the rules say about `tool` called with `input`: deny wins over ask,
    /// ask over allow; `None` when no rule matches (the mode decides).
    pub fn verdict(&self, tool: &str, input: &serde_json::Value) -> Option<RuleVerdict> {
        self.verdict_of([&self.allow, &self.deny, &self.ask], tool, input)
    }

    /// What `deny` rules alone say about a call, matched as this run's rules are
    /// (paths from its workspace and home): a role's refusals. `Unreadable` is a
    /// Bash line that cannot be read to tell.
    pub fn refusal(
        &self,
        deny: &[Rule],
        tool: &str,
        input: &serde_json::Value,
    ) -> Option<RuleVerdict> {
        self.verdict_of([&[], deny, &[]], tool, input)
    }

    /// Whether `only` (a narrowing's allow list, matched as this run's rules
    /// are) allows a call of `tool` with `input`: a Bash line only when each of
    /// its commands is covered.
    pub fn permits(&self, only: &[Rule], tool: &str, input: &serde_json::Value) -> bool {
        self.verdict_of([only, &[], &[]], tool, input) == Some(RuleVerdict::Allow)
    }

    fn verdict_of(
        &self,
        [allow, deny, ask]: [&[Rule]; 3],
        tool: &str,
        input: &serde_json::Value,
    ) -> Option<RuleVerdict> {
        if tool == "Bash" {
            let line = input["command"].as_str().unwrap_or_default();
            return bash_verdict([allow, deny, ask], line);
        }
        let matches = |rules: &[Rule]| rules.iter().any(|r| self.matches(r, tool, input));
        if matches(deny) {
            Some(RuleVerdict::Deny)
        } else if matches(ask) {
            Some(RuleVerdict::Ask)
        } else if matches(allow) {
            Some(RuleVerdict::Allow)
        } else {
            None
        }
    }

    /// Whether one rule matches one call of a tool other than Bash (whose lines
    /// `bash_verdict` reads).
    fn matches(&self, rule: &Rule, tool: &str, input: &serde_json::Value) -> bool {
        if !applies_to(&rule.tool, tool) {
            return false;
        }
        let Some(pattern) = &rule.pattern else {
            return true;
        };
        match (rule.tool.as_str(), pattern) {
            ("WebFetch", Pattern::Exact(p) | Pattern::Prefix(p) | Pattern::Wildcard(p)) => {
                let Some(domain) = p.strip_prefix("domain:") else {
                    return false;
                };
                let host = input["url"]
                    .as_str()
                    .and_then(|u| reqwest::Url::parse(u).ok())
                    .and_then(|u| u.host_str().map(str::to_owned));
                let domain = domain.trim_end_matches('.').to_ascii_lowercase();
                host.map(|h| h.trim_end_matches('.').to_ascii_lowercase())
                    .is_some_and(|h| h == domain || h.ends_with(&format!(".{domain}")))
            }
            (_, Pattern::Exact(p) | Pattern::Prefix(p) | Pattern::Wildcard(p)) => {
                self.path_matches(p, input)
            }
        }
    }

    /// Whether a Read deny rule of the run's, or one of `extra` (a role's),
    /// refuses reading `path`: what a listing (Glob, Grep, Ls) leaves out.
    pub fn denies_read(&self, extra: &[Rule], path: &std::path::Path) -> bool {
        let input = serde_json::json!({ "file_path": path });
        self.deny
            .iter()
            .chain(extra)
            .any(|rule| rule.tool == "Read" && self.matches(rule, "Read", &input))
    }

    /// A path rule (`src/**`, `./.env`, `/docs/**`, `//etc/**`, `~/x`) against
    /// the path a file tool names, gitignore-style: as written, and as it
    /// resolves (a link `notes.txt` to `.env` is `.env` to a rule).
    fn path_matches(&self, pattern: &str, input: &serde_json::Value) -> bool {
        let Some(path) = ["file_path", "path", "notebook_path"]
            .iter()
            .find_map(|k| input[*k].as_str())
        else {
            return false;
        };
        let path = std::path::Path::new(path);
        let absolute = normalized(&if path.is_absolute() {
            path.to_path_buf()
        } else {
            self.workspace.join(path)
        });
        let resolved = resolved(&absolute);
        let escape = |p: &std::path::Path| globset::escape(&p.display().to_string());
        let pattern = pattern.trim_end_matches('/');
        let glob = if let Some(abs) = pattern.strip_prefix("//") {
            format!("/{abs}")
        } else if let Some(rest) = pattern.strip_prefix("~/") {
            match &self.home {
                Some(home) => format!("{}/{rest}", escape(home)),
                None => return false,
            }
        } else {
            // `./x` and `/x` are at the workspace's root; a bare name is at any
            // depth, as in a .gitignore.
            let anchored = pattern.starts_with("./") || pattern.starts_with('/');
            let rest = pattern.trim_start_matches("./").trim_start_matches('/');
            if anchored || rest.contains('/') {
                format!("{}/{rest}", escape(&self.workspace))
            } else {
                format!("{}/**/{rest}", escape(&self.workspace))
            }
        };
        let Ok(glob) = globset::GlobBuilder::new(&glob)
            .literal_separator(true)
            .build()
        else {
            return false;
        };
        let matcher = glob.compile_matcher();
        // A rule naming a folder covers what is in it.
        let covers = |path: &std::path::Path| path.ancestors().any(|p| matcher.is_match(p));
        covers(&absolute) || resolved.is_some_and(|real| covers(&real))
    }
}

/// Where `path` leads once its links are followed: the canonical path of the
/// longest part of it that exists, with the rest as written; `None` when it is
/// the same as written.
fn resolved(path: &std::path::Path) -> Option<std::path::PathBuf> {
    let (mut base, mut rest) = (path.to_path_buf(), Vec::new());
    let real = loop {
        if let Ok(real) = std::fs::canonicalize(&base) {
            break real;
        }
        rest.push(base.file_name()?.to_owned());
        if !base.pop() {
            return None;
        }
    };
    let real = rest.iter().rev().fold(real, |path, part| path.join(part));
    (real != path).then_some(real)
}

/// Bash lines: a deny or ask rule matches when any program the line runs does
/// (as written, as the shell would find it, or handed to another program:
/// `xargs rm`, `sh -c 'rm …'`, `find -delete`); an allow rule set covers a line
/// when each of its commands matches one of them, or a bare `Bash` allows
/// everything. A line that cannot be read well enough to tell whether a deny or
/// ask rule matches is `Unreadable` (denied outright when a deny rule's program
/// is named in it), and allowed only by a bare `Bash` when no such rule exists.
fn bash_verdict([allow, deny, ask]: [&[Rule]; 3], line: &str) -> Option<RuleVerdict> {
    let bash = |rules: &[Rule]| -> Vec<Rule> {
        rules.iter().filter(|r| r.tool == "Bash").cloned().collect()
    };
    let (allow, deny, ask) = (bash(allow), bash(deny), bash(ask));
    let bare = |rules: &[Rule]| rules.iter().any(|r| r.pattern.is_none());
    let read = commands(line).and_then(|parts| {
        let mut runs = Vec::new();
        for part in &parts {
            runs.extend(programs::programs(part)?);
        }
        Some((parts, runs))
    });
    let Some((parts, runs)) = read else {
        return unreadable(&allow, &deny, &ask, line);
    };
    let reach = |rules: &[Rule]| {
        runs.iter()
            .map(|run| rules.iter().map(|r| reaches(r, run)).max())
            .max()
            .flatten()
            .unwrap_or(Reach::No)
    };
    match (reach(&deny), reach(&ask)) {
        (Reach::Yes, _) => Some(RuleVerdict::Deny),
        (_, Reach::Yes) => Some(RuleVerdict::Ask),
        (Reach::Maybe, _) | (_, Reach::Maybe) => Some(RuleVerdict::Unreadable),
        _ if bare(&allow) || covers_parts(&allow, &parts) => Some(RuleVerdict::Allow),
        _ => None,
    }
}

/// The verdict on a line no rule can read: denied when a deny rule's program is
/// named in it, `Unreadable` under any deny or ask rule, allowed only by a bare
/// `Bash`.
fn unreadable(allow: &[Rule], deny: &[Rule], ask: &[Rule], line: &str) -> Option<RuleVerdict> {
    let words: Vec<String> = line
        .split(|c: char| c.is_whitespace() || "()[]{};&|`$'\"\\".contains(c))
        .filter(|w| !w.is_empty())
        .map(|w| w.rsplit('/').next().unwrap_or(w).to_owned())
        .collect();
    let named = deny.iter().any(|r| match &r.pattern {
        None => true,
        Some(Pattern::Prefix(p) | Pattern::Exact(p) | Pattern::Wildcard(p)) => p
            .split(' ')
            .next()
            .is_some_and(|first| words.iter().any(|w| w == first)),
    });
    if named {
        Some(RuleVerdict::Deny)
    } else if !deny.is_empty() || !ask.is_empty() {
        Some(RuleVerdict::Unreadable)
    } else if allow.iter().any(|r| r.pattern.is_none()) {
        Some(RuleVerdict::Allow)
    } else {
        None
    }
}

/// Whether a rule reaches a program: surely, maybe (a word it looks at is one
/// the shell would expand), or not.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Reach {
    No,
    Maybe,
    Yes,
}

/// Whether `rule` (a Bash rule) reaches `run`: the rule's words are matched
/// against the program's as far as they are literal; past them it may.
fn reaches(rule: &Rule, run: &Program) -> Reach {
    let Some(pattern) = &rule.pattern else {
        return Reach::Yes;
    };
    let literal = run.literal_words();
    if literal == run.0.len() {
        return if pattern.matches(&run.text()) {
            Reach::Yes
        } else {
            Reach::No
        };
    }
    let known: Vec<&str> = run.0[..literal].iter().map(|w| w.text.as_str()).collect();
    match pattern {
        Pattern::Prefix(p) | Pattern::Exact(p) => {
            let wanted: Vec<&str> = p.split(' ').collect();
            let compared = wanted.len().min(literal);
            if wanted[..compared] != known[..compared] {
                Reach::No
            } else if matches!(pattern, Pattern::Prefix(_)) && wanted.len() <= literal {
                Reach::Yes
            } else {
                Reach::Maybe
            }
        }
        // A wildcard may match anything past its first word.
        Pattern::Wildcard(p) => {
            let first = p.split(' ').next().unwrap_or_default();
            match known.first() {
                Some(name) if !first.contains('*') && first != *name => Reach::No,
                _ => Reach::Maybe,
            }
        }
    }
}

/// `path` with its `.` and `..` taken out, without touching the file system
/// (`/ws/src/../.env` is `/ws/.env`).
pub(crate) fn normalized(path: &std::path::Path) -> std::path::PathBuf {
    use std::path::Component;
    let mut out = std::path::PathBuf::new();
    for part in path.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// Whether a rule written for `rule_tool` applies to a call of `tool`: `Edit`
/// rules cover every tool that edits files, `Read` rules every tool that reads
/// them; `mcp__server` covers that server's tools.
/// Whether a rule's pattern can match a call of `tool`: Bash's by its command
/// line, WebFetch's by domain, the file tools' by the path they name (the inputs
/// `path_matches` reads).
pub fn takes_a_pattern(tool: &str) -> bool {
    matches!(
        tool,
        "Bash"
            | "WebFetch"
            | "Read"
            | "Edit"
            | "Write"
            | "MultiEdit"
            | "NotebookEdit"
            | "Glob"
            | "Grep"
            | "Ls"
    )
}

pub(crate) fn applies_to(rule_tool: &str, tool: &str) -> bool {
    rule_tool == tool
        || (rule_tool == "Edit" && matches!(tool, "Write" | "MultiEdit" | "NotebookEdit"))
        || (rule_tool == "Read" && matches!(tool, "Glob" | "Grep" | "Ls"))
        || (rule_tool.starts_with("mcp__")
            && !rule_tool["mcp__".len()..].contains("__")
            && tool.starts_with(&format!("{rule_tool}__")))
}

/// Reads a list of rules as `--allowedTools` takes them: each argument may hold
/// several, separated by commas or spaces outside parentheses. Returns the rules
/// and the texts that are not rules.
pub fn parse_list(items: &[String]) -> (Vec<Rule>, Vec<String>) {
    let mut rules = Vec::new();
    let mut bad = Vec::new();
    for text in items
        .iter()
        .flat_map(|i| split_outside_parentheses(i, &[',', ' ']))
    {
        match Rule::parse(&text) {
            Some(rule) => rules.push(rule),
            None => bad.push(text),
        }
    }
    (rules, bad)
}

/// `text` split at any of `separators` outside parentheses (a rule's pattern
/// keeps its commas and spaces), each piece trimmed, empty ones left out.
pub fn split_outside_parentheses(text: &str, separators: &[char]) -> Vec<String> {
    let mut pieces = Vec::new();
    let mut depth = 0usize;
    let mut current = String::new();
    for c in text.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            c if depth == 0 && separators.contains(&c) => {
                pieces.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    pieces.push(current);
    pieces
        .into_iter()
        .map(|p| p.trim().to_owned())
        .filter(|p| !p.is_empty())
        .collect()
}

#[cfg(test)]
mod tests;
