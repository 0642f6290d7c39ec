//! Roles: markdown files with YAML frontmatter, in Claude Code's `.claude/agents/*.md`
//! format, so people can bring the files they have. The frontmatter says who the
//! agent is and what it may use; the body is its system prompt.
//!
//! Parsing is pure and reports every problem as `path:line: what is wrong`; a file
//! with a problem is never silently skipped. Where roles are found, and which wins,
//! is [`catalog`].

pub mod catalog;
pub mod foreign;
mod limits;
mod tools;
pub mod watch;

use std::collections::BTreeMap;
use std::fmt;

use serde_json::Value;

use self::tools::List;
use crate::session::budget::Budget;
use crate::tools::permissions::PermissionMode;

/// The model a role asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ModelChoice {
    /// The caller's model (`inherit`, or no `model` field).
    Inherit,
    /// An alias (`fast`, `sonnet`, …) or a model id, resolved by the configuration.
    Named(String),
}

/// One role.
#[derive(Clone, Debug, PartialEq)]
pub struct Role {
    /// Its name, unique in the catalog; `subagent_type` in Task calls.
    pub name: String,
    /// When to use it, written for the agent that delegates.
    pub description: String,
    /// The tools it may use; `None` means every tool.
    pub tools: Option<Vec<String>>,
    /// When its `tools` name Bash only through rules (`Bash(git:*)`): the commands
    /// it may run.
    pub bash_rules: Vec<crate::tools::rules::Rule>,
    /// Tools it may never use.
    pub disallowed_tools: Vec<String>,
    /// Calls it may never make (`disallowedTools:` entries with a pattern, such as
    /// `Bash(rm:*)`): refused as a deny rule refuses them; the tool stays.
    pub deny_rules: Vec<crate::tools::rules::Rule>,
    /// Its model.
    pub model: ModelChoice,
    /// The skills it sees, by name (`skills`); `None`: every skill.
    pub skills: Option<Vec<String>>,
    /// The model it carries on with when its own does not exist or stays
    /// overloaded (`fallbackModel`); `None`: the run's `--fallback-model`.
    pub fallback_model: Option<String>,
    /// Its turn limit, if it sets one.
    pub max_turns: Option<u32>,
    /// Its budget per run (`maxCost`, `maxTokens`, `timeout`).
    pub budget: Budget,
    /// Its permission mode, which can only narrow its caller's.
    pub permission_mode: Option<PermissionMode>,
    /// Its color in the progress display.
    pub color: Option<String>,
    /// Whether an agent of this role, started by a Task call, works in a
    /// private checkout (`isolation: worktree`) or in its caller's tree
    /// (`none`); `None`: the run's default decides.
    pub isolation: Option<Isolation>,
    /// The shell command that must pass before an agent of this role is done
    /// (`check`), and how many times it may run (`checkAttempts`).
    pub check: Option<String>,
    /// Attempts at the check, when the role says.
    pub check_attempts: Option<u32>,
    /// Where an agent of this role may run when the run has workers on other
    /// machines (`placement`).
    pub placement: Placement,
    /// The worker tags it must run on when placed remotely (`placementTags`).
    pub placement_tags: Vec<String>,
    /// The system prompt.
    pub prompt: String,
    /// Where it came from (a path, or `built-in:NAME.md`).
    pub source: String,
    /// Its `mcpServers`: the run's servers it names, and the servers it defines
    /// for its own sessions.
    pub mcp: RoleServers,
    /// Fields accepted but not acted on, one line each.
    pub warnings: Vec<String>,
}

/// A role's `mcpServers` field, as Claude Code writes it: a list of server names
/// (servers the run has) and `{name: definition}` entries (servers of its own).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RoleServers {
    /// Servers of the run it names.
    pub named: Vec<String>,
    /// Its own servers' definitions, in `.mcp.json`'s format.
    pub defined: serde_json::Map<String, Value>,
    /// The field's line.
    pub line: usize,
}

/// A problem with a role file, located.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoleError {
    /// The file.
    pub path: String,
    /// The 1-based line; 0 for a problem with the whole file (it could not be
    /// read), shown without a line.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for RoleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            0 => write!(f, "{}: {}", self.path, self.message),
            line => write!(f, "{}:{line}: {}", self.path, self.message),
        }
    }
}

impl std::error::Error for RoleError {}

/// The tools a role file may name (Claude Code's names, plus Claude Code's older
/// spelling `LS`).
pub use crate::tools::KNOWN_TOOLS;

/// Claude Code fields this version accepts without acting on them yet.
const ACCEPTED_FIELDS: [&str; 5] = ["hooks", "memory", "background", "effort", "initialPrompt"];

/// Where a sub-agent works: Claude Code's `isolation` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isolation {
    /// A private checkout of its parent's repository (`worktree`).
    Worktree,
    /// Its parent's tree (`none`).
    None,
}

impl std::str::FromStr for Isolation {
    type Err = String;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        match value {
            "worktree" => Ok(Self::Worktree),
            "none" => Ok(Self::None),
            other => Err(format!(
                "unknown isolation {other:?} (expected worktree or none)"
            )),
        }
    }
}

/// Where a sub-agent may run when the run has workers on other machines.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Placement {
    /// On this machine only.
    Local,
    /// On a worker only.
    Remote,
    /// On this machine while it has room, else on a worker.
    #[default]
    Any,
}

impl std::str::FromStr for Placement {
    type Err = String;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        match value {
            "local" => Ok(Self::Local),
            "remote" => Ok(Self::Remote),
            "any" => Ok(Self::Any),
            other => Err(format!(
                "unknown placement {other:?} (expected local, remote or any)"
            )),
        }
    }
}

/// The most tags a worker may have, or a role may need: a worker follows a
/// consumer for each set of its tags (2⁴ − 1 at most).
pub const MAX_TAGS: usize = 4;

/// Whether `tag` may name a worker's tag: letters, digits, `-` and `_`, at
/// most 64 of them.
pub fn valid_tag(tag: &str) -> bool {
    !tag.is_empty()
        && tag.len() <= 64
        && tag
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// Colors the progress display can show.
pub const COLORS: [&str; 9] = [
    "red", "blue", "green", "yellow", "purple", "orange", "pink", "cyan", "gray",
];

/// Parses one role file. `path` is how the file is named in messages.
pub fn parse(path: &str, text: &str) -> Result<Role, RoleError> {
    let err = |line: usize, message: String| RoleError {
        path: path.to_owned(),
        line,
        message,
    };
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.split_inclusive('\n');
    if lines.next().map(str::trim_end) != Some("---") {
        return Err(err(
            1,
            "no YAML frontmatter: a role file starts with a line `---`".into(),
        ));
    }
    let mut yaml = String::new();
    let mut closed = None;
    for (i, line) in lines.by_ref().enumerate() {
        if line.trim_end() == "---" {
            closed = Some(i + 2);
            break;
        }
        yaml.push_str(line);
    }
    let Some(_close_line) = closed else {
        return Err(err(
            1,
            "the frontmatter is never closed by a line `---`".into(),
        ));
    };
    let body: String = lines.collect();
    // Frontmatter line N is file line N + 1.
    let fields: BTreeMap<String, serde_saphyr::Spanned<Value>> = if yaml.trim().is_empty() {
        BTreeMap::new()
    } else {
        // YAML 1.2's booleans (`true`, `false`), as Claude Code reads role files:
        // `name: no` is the name "no", not false.
        let options = serde_saphyr::options! { strict_booleans: true };
        serde_saphyr::from_str_with_options(&yaml, options).map_err(|e| {
            let line = e.location().map_or(1, |l| l.line() as usize + 1);
            let text = e.to_string();
            let first = text.lines().next().unwrap_or("invalid YAML");
            // The parser's own prefix counts lines within the frontmatter; ours are
            // the file's, so drop it.
            let first = first.strip_prefix("error: ").unwrap_or(first);
            let first = match first.strip_prefix("line ") {
                Some(rest) => rest.split_once(": ").map_or(rest, |(_, message)| message),
                None => first,
            };
            err(line, format!("invalid frontmatter: {first}"))
        })?
    };
    let line_of = |key: &str| {
        fields
            .get(key)
            .map_or(1, |v| v.referenced.line() as usize + 1)
    };
    let string = |key: &str| -> Result<Option<String>, RoleError> {
        match fields.get(key).map(|v| &v.value) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.trim().to_owned())),
            Some(other) => Err(err(
                line_of(key),
                format!("{key} must be a string, not {other}"),
            )),
        }
    };
    let tool_list = |key: &str| -> Result<Option<Vec<String>>, RoleError> {
        let names: Vec<String> = match fields.get(key).map(|v| &v.value) {
            None | Some(Value::Null) => return Ok(None),
            // Commas inside a rule's parentheses are the rule's.
            Some(Value::String(s)) => crate::tools::rules::split_outside_parentheses(s, &[',']),
            Some(Value::Array(items)) => items
                .iter()
                .map(|item| match item {
                    Value::String(s) => Ok(s.trim().to_owned()),
                    other => Err(err(
                        line_of(key),
                        format!("{key} must list tool names, not {other}"),
                    )),
                })
                .collect::<Result<_, _>>()?,
            Some(other) => {
                return Err(err(
                    line_of(key),
                    format!("{key} must be a list or a comma-separated string, not {other}"),
                ));
            }
        };
        Ok(Some(names))
    };

    let name = string("name")?
        .filter(|n| !n.is_empty())
        .ok_or_else(|| err(1, "name is required".into()))?;
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(err(
            line_of("name"),
            format!("name {name:?} may use only letters, digits, - and _"),
        ));
    }
    let description = string("description")?
        .filter(|d| !d.is_empty())
        .ok_or_else(|| err(1, "description is required".into()))?;
    // Kode writes `model_name`.
    let model_field = match string("model")? {
        Some(model) => Some(model),
        None => string("model_name")?,
    };
    let model = match model_field.as_deref() {
        None | Some("inherit") => ModelChoice::Inherit,
        Some(named) => ModelChoice::Named(named.to_owned()),
    };
    let max_turns = match fields.get("maxTurns").map(|v| &v.value) {
        None | Some(Value::Null) => None,
        Some(Value::Number(n))
            if n.as_u64()
                .is_some_and(|n| n >= 1 && n <= u64::from(u32::MAX)) =>
        {
            n.as_u64().map(|n| n as u32)
        }
        Some(other) => {
            return Err(err(
                line_of("maxTurns"),
                format!("maxTurns must be a positive whole number, not {other}"),
            ));
        }
    };
    let budget =
        limits::budget_fields(&fields).map_err(|(key, message)| err(line_of(key), message))?;
    let permission_mode = match string("permissionMode")? {
        None => None,
        Some(mode) => Some(mode.parse::<PermissionMode>().map_err(|_| {
            err(
                line_of("permissionMode"),
                format!("unknown permissionMode {mode:?}"),
            )
        })?),
    };
    let color = match string("color")? {
        Some(color) if !COLORS.contains(&color.as_str()) => {
            return Err(err(
                line_of("color"),
                format!("unknown color {color:?} (known: {})", COLORS.join(", ")),
            ));
        }
        other => other,
    };
    let check = string("check")?.filter(|c| !c.trim().is_empty());
    let fallback_model = string("fallbackModel")?
        .map(|m| m.trim().to_owned())
        .filter(|m| !m.is_empty());
    let skills = tool_list("skills")?;
    let check_attempts = match fields.get("checkAttempts").map(|v| &v.value) {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) if n.as_u64().is_some_and(|n| (1..=100).contains(&n)) => {
            n.as_u64().map(|n| n as u32)
        }
        Some(other) => {
            return Err(err(
                line_of("checkAttempts"),
                format!("checkAttempts must be a whole number from 1 to 100, not {other}"),
            ));
        }
    };
    let isolation = match string("isolation")? {
        None => None,
        Some(value) => Some(
            value
                .parse::<Isolation>()
                .map_err(|message| err(line_of("isolation"), message))?,
        ),
    };
    let placement = match string("placement")? {
        None => Placement::default(),
        Some(value) => value
            .parse::<Placement>()
            .map_err(|message| err(line_of("placement"), message))?,
    };
    let placement_tags = tool_list("placementTags")?.unwrap_or_default();
    if let Some(bad) = placement_tags.iter().find(|t| !valid_tag(t)) {
        return Err(err(
            line_of("placementTags"),
            format!("placementTags: {bad:?} is not a tag (letters, digits, - and _, at most 64)"),
        ));
    }
    if placement_tags.len() > MAX_TAGS {
        return Err(err(
            line_of("placementTags"),
            format!("placementTags: at most {MAX_TAGS} tags, as a worker has"),
        ));
    }
    let mut warnings = Vec::new();
    for (key, value) in &fields {
        let known = [
            "placement",
            "placementTags",
            "isolation",
            "fallbackModel",
            "skills",
            "check",
            "checkAttempts",
            "name",
            "description",
            "tools",
            "disallowedTools",
            "model",
            "model_name",
            "maxTurns",
            "maxCost",
            "maxTokens",
            "timeout",
            "permissionMode",
            "color",
            "mcpServers",
        ];
        if known.contains(&key.as_str()) {
            continue;
        }
        let line = value.referenced.line() as usize + 1;
        let what = if ACCEPTED_FIELDS.contains(&key.as_str()) {
            "is not supported yet and is ignored".to_owned()
        } else {
            let all = known.iter().chain(ACCEPTED_FIELDS.iter());
            match closest(key, all.copied()) {
                Some(near) => format!("is not a role field and is ignored (did you mean {near}?)"),
                None => "is not a role field and is ignored".to_owned(),
            }
        };
        warnings.push(format!("{path}:{line}: {key} {what}"));
    }
    let mcp = match fields.get("mcpServers") {
        None => RoleServers::default(),
        Some(field) => {
            let line = field.referenced.line() as usize + 1;
            role_servers(&field.value, line).map_err(|message| err(line, message))?
        }
    };
    // Its servers run where the run started: so does it.
    if placement == Placement::Remote && (!mcp.named.is_empty() || !mcp.defined.is_empty()) {
        return Err(err(
            line_of("placement"),
            "placement remote: a role with mcpServers runs on this machine, where its servers are"
                .to_owned(),
        ));
    }
    let own = match tool_list("tools")? {
        Some(names) => tools::entries(&names, List::Allow, "tools", path, line_of("tools")),
        None => tools::Entries::default(),
    };
    warnings.extend(own.warnings);
    let (disallowed, deny_rules) = match tool_list("disallowedTools")? {
        Some(names) => {
            let key = "disallowedTools";
            let read = tools::entries(&names, List::Deny, key, path, line_of(key));
            warnings.extend(read.warnings);
            let whole = read
                .tools
                .unwrap_or_else(|| KNOWN_TOOLS.map(str::to_owned).to_vec());
            (whole, read.deny_rules)
        }
        None => (Vec::new(), Vec::new()),
    };
    Ok(Role {
        name,
        description,
        tools: own.tools,
        bash_rules: own.bash_rules,
        disallowed_tools: disallowed,
        deny_rules,
        model,
        skills,
        fallback_model,
        max_turns,
        budget,
        permission_mode,
        color,
        isolation,
        check,
        check_attempts,
        placement,
        placement_tags,
        prompt: body.trim().to_owned(),
        source: path.to_owned(),
        mcp,
        warnings,
    })
}

/// The name of `names` closest to `word` (a misspelling of it: the same but
/// for case, or at most two edits away, one for a short word).
fn closest<'a>(word: &str, names: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let limit = if word.chars().count() <= 4 { 1 } else { 2 };
    names
        .map(|name| (edits(&word.to_lowercase(), &name.to_lowercase()), name))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, name)| name)
}

/// How many single-character edits turn `a` into `b` (Levenshtein).
fn edits(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

/// Reads a role's `mcpServers` (at `line`): names and definitions, each
/// definition checked as `.mcp.json` would be (its variables are expanded only
/// when the run starts it).
fn role_servers(value: &Value, line: usize) -> Result<RoleServers, String> {
    let mut out = RoleServers {
        line,
        ..RoleServers::default()
    };
    let mut add = |map: &serde_json::Map<String, Value>| {
        for (name, definition) in map {
            out.defined.insert(name.clone(), definition.clone());
        }
    };
    match value {
        Value::Null => {}
        Value::Object(map) => add(map),
        Value::Array(items) => {
            for item in items {
                match item {
                    Value::String(name) => {
                        crate::mcp::config::check_name(name)
                            .map_err(|e| format!("mcpServers entry {name:?}: {e}"))?;
                        out.named.push(name.clone());
                    }
                    Value::Object(map) => add(map),
                    other => {
                        return Err(format!(
                            "mcpServers must list server names or {{name: definition}} entries, not {other}"
                        ));
                    }
                }
            }
        }
        other => {
            return Err(format!(
                "mcpServers must be a list or an object of servers, not {other}"
            ));
        }
    }
    let origin = crate::mcp::Origin::Role {
        path: String::new(),
        role: String::new(),
        trusted: true,
    };
    // Only the shape is checked here: any variable counts as set.
    crate::mcp::config::servers_of(&out.defined, &|_| line, &origin, &|_| Some("x".into()))
        .map_err(|(_, message)| message)?;
    Ok(out)
}

impl Role {
    /// Where the run may place it: its `placement`, but on this machine when
    /// it has MCP servers (they run here).
    pub fn runs_where(&self) -> Placement {
        match self.mcp.named.is_empty() && self.mcp.defined.is_empty() {
            true => self.placement,
            false => Placement::Local,
        }
    }

    /// The tools this role gets of `offered` (every tool of the run): its own list
    /// (all of them when it names none), less its disallowed ones. As in Claude
    /// Code, a sub-agent's tools are not narrowed by its caller's list; the
    /// permission mode and rules bound what they may do.
    pub fn allowed_tools<'a>(&self, offered: &[&'a str]) -> Vec<&'a str> {
        offered
            .iter()
            .copied()
            .filter(|t| {
                self.tools
                    .as_ref()
                    .is_none_or(|own| own.iter().any(|o| o == t))
            })
            .filter(|t| !self.disallowed_tools.iter().any(|d| d == t))
            .collect()
    }
}

#[cfg(test)]
mod tests;
