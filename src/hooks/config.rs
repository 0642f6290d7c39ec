//! Hooks as Claude Code's settings files declare them:
//!
//! ```json
//! {"hooks": {"PreToolUse": [{"matcher": "Bash|Write",
//!   "hooks": [{"type": "command", "command": "…", "timeout": 30}]}]}}
//! ```
//!
//! A matcher (tool events only) is a tool's name, `A|B`, or a regular
//! expression matched against the whole name with a linear-time engine
//! (`regex`); empty, `*` or absent matches every tool. `onFailure: "block"` is
//! orchestrate's own field: a hook that crashes or times out then blocks.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

/// How long a hook may run, by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// A point of an agent's life that hooks may run at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HookEvent {
    /// Before a tool call runs (after its arguments are made).
    PreToolUse,
    /// After a tool call ran.
    PostToolUse,
    /// When the person's prompt is submitted.
    UserPromptSubmit,
    /// When the lead would end its answer.
    Stop,
    /// When a sub-agent would end its answer.
    SubagentStop,
    /// When a run's lead session starts.
    SessionStart,
    /// When a run's lead session ends.
    SessionEnd,
    /// Before a conversation is compacted.
    PreCompact,
    /// When a person is asked something.
    Notification,
}

impl HookEvent {
    /// Every event, by its name in the settings.
    pub const ALL: [HookEvent; 9] = [
        Self::PreToolUse,
        Self::PostToolUse,
        Self::UserPromptSubmit,
        Self::Stop,
        Self::SubagentStop,
        Self::SessionStart,
        Self::SessionEnd,
        Self::PreCompact,
        Self::Notification,
    ];

    /// Its name, as the settings and the hook's input name it.
    pub fn name(self) -> &'static str {
        match self {
            Self::PreToolUse => "PreToolUse",
            Self::PostToolUse => "PostToolUse",
            Self::UserPromptSubmit => "UserPromptSubmit",
            Self::Stop => "Stop",
            Self::SubagentStop => "SubagentStop",
            Self::SessionStart => "SessionStart",
            Self::SessionEnd => "SessionEnd",
            Self::PreCompact => "PreCompact",
            Self::Notification => "Notification",
        }
    }

    /// Whether its matcher is matched against a tool's name.
    pub fn is_tool_event(self) -> bool {
        matches!(self, Self::PreToolUse | Self::PostToolUse)
    }

    /// The event named `name` in the settings.
    pub fn named(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|e| e.name() == name)
    }

    /// Whether it has a matcher: a tool's name, `SessionStart`'s source
    /// (`startup`, `resume`), `PreCompact`'s trigger (`manual`, `auto`).
    pub fn has_matcher(self) -> bool {
        self.is_tool_event() || matches!(self, Self::SessionStart | Self::PreCompact)
    }
}

/// A matcher and the hooks it runs.
#[derive(Clone, Debug)]
pub struct Group {
    /// The matcher; `None`: everything.
    matcher: Option<regex::Regex>,
    /// The hooks.
    pub hooks: Vec<CommandHook>,
}

impl Group {
    /// Whether this group runs for `tool` (events that concern no tool run
    /// every group).
    pub fn matches(&self, tool: Option<&str>) -> bool {
        matched(self.matcher.as_ref(), tool)
    }

    /// Its matcher as a pattern (anchored), when it has one.
    pub fn matcher(&self) -> Option<&str> {
        self.matcher.as_ref().map(regex::Regex::as_str)
    }
}

/// Whether `matcher` lets a group run for `tool` (events that concern no
/// tool, and groups without a matcher, run for everything).
pub fn matched(matcher: Option<&regex::Regex>, tool: Option<&str>) -> bool {
    match (matcher, tool) {
        (Some(matcher), Some(tool)) => matcher.is_match(tool),
        (None, _) | (_, None) => true,
    }
}

/// A `type: "command"` hook.
#[derive(Clone, Debug, PartialEq)]
pub struct CommandHook {
    /// The command, run by `sh -c`.
    pub command: String,
    /// How long it may run.
    pub timeout: Duration,
    /// A crash or a timeout blocks (`onFailure: "block"`); otherwise it is
    /// reported and what it guards goes on.
    pub block_on_failure: bool,
}

/// Every event's groups, in the order a file declares them.
pub type Groups = Vec<(HookEvent, Group)>;

/// The hooks a settings file at `path` declares in `settings` (its whole
/// JSON); an error names the file and what is wrong. Warnings for what is
/// left out (an unknown event, a hook type other than `command`).
pub fn parse(path: &Path, settings: &Value) -> Result<(Groups, Vec<String>), String> {
    let file = path.display();
    let mut groups = Vec::new();
    let mut warnings = Vec::new();
    let events = match &settings["hooks"] {
        Value::Null => return Ok((groups, warnings)),
        Value::Object(events) => events,
        other => return Err(format!("{file}: hooks must be an object, not {other}")),
    };
    for (name, list) in events {
        let Some(event) = HookEvent::named(name) else {
            warnings.push(format!(
                "{file}: hooks.{name} is not an event orchestrate runs hooks at; it is ignored"
            ));
            continue;
        };
        let Value::Array(list) = list else {
            return Err(format!("{file}: hooks.{name} must be a list of matchers"));
        };
        for (i, entry) in list.iter().enumerate() {
            let at = format!("{file}: hooks.{name}[{i}]");
            let matcher = match &entry["matcher"] {
                Value::Null => None,
                Value::String(m) if m.is_empty() || m == "*" => None,
                Value::String(m) if event.has_matcher() => Some(
                    regex::Regex::new(&format!("^(?:{m})$"))
                        .map_err(|e| format!("{at}.matcher: not a pattern: {e}"))?,
                ),
                Value::String(_) => None,
                other => return Err(format!("{at}.matcher must be text, not {other}")),
            };
            let Value::Array(hooks) = &entry["hooks"] else {
                return Err(format!("{at}.hooks must be a list of hooks"));
            };
            let mut commands = Vec::new();
            for (j, hook) in hooks.iter().enumerate() {
                match command_hook(hook) {
                    Ok(Some(hook)) => commands.push(hook),
                    Ok(None) => warnings.push(format!(
                        "{at}.hooks[{j}]: only hooks of type \"command\" are run; it is ignored"
                    )),
                    Err(e) => return Err(format!("{at}.hooks[{j}]: {e}")),
                }
            }
            groups.push((
                event,
                Group {
                    matcher,
                    hooks: commands,
                },
            ));
        }
    }
    Ok((groups, warnings))
}

/// One hook: `Some` for a command hook, `None` for a type not run here.
fn command_hook(hook: &Value) -> Result<Option<CommandHook>, String> {
    match &hook["type"] {
        Value::String(t) if t == "command" => {}
        Value::String(_) => return Ok(None),
        _ => return Err("type is missing (\"command\")".into()),
    }
    let command = match &hook["command"] {
        Value::String(c) if !c.trim().is_empty() => c.clone(),
        _ => return Err("command must be a non-empty text".into()),
    };
    let timeout = match &hook["timeout"] {
        Value::Null => DEFAULT_TIMEOUT,
        Value::Number(n) => match n.as_f64() {
            Some(secs) if secs > 0.0 && secs <= 86_400.0 => Duration::from_secs_f64(secs),
            _ => return Err(format!("timeout must be seconds from 1 to 86400, not {n}")),
        },
        other => return Err(format!("timeout must be a number of seconds, not {other}")),
    };
    let block_on_failure = match &hook["onFailure"] {
        Value::Null => false,
        Value::String(s) if s == "block" => true,
        Value::String(s) if s == "continue" || s == "ignore" => false,
        other => {
            return Err(format!(
                "onFailure must be \"block\" or \"continue\", not {other}"
            ));
        }
    };
    Ok(Some(CommandHook {
        command,
        timeout,
        block_on_failure,
    }))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn groups(settings: &Value) -> Groups {
        parse(Path::new("s.json"), settings).unwrap().0
    }

    #[test]
    fn matchers_name_a_tool_several_or_a_pattern_and_empty_matches_all() {
        let hook = json!([{ "type": "command", "command": "true" }]);
        let parsed = groups(&json!({ "hooks": { "PreToolUse": [
            { "matcher": "Bash", "hooks": hook },
            { "matcher": "Edit|Write", "hooks": hook },
            { "matcher": "mcp__github__.*", "hooks": hook },
            { "matcher": "", "hooks": hook },
            { "hooks": hook },
        ] } }));
        let matches = |i: usize, tool: &str| parsed[i].1.matches(Some(tool));
        assert!(matches(0, "Bash") && !matches(0, "BashOutput") && !matches(0, "bash"));
        assert!(matches(1, "Write") && matches(1, "Edit") && !matches(1, "MultiEdit"));
        assert!(matches(2, "mcp__github__create_issue") && !matches(2, "mcp__gitlab__x"));
        assert!(matches(3, "Anything") && matches(4, "Anything"));
    }

    #[test]
    fn session_start_and_pre_compact_match_their_source_and_trigger() {
        let hook = json!([{ "type": "command", "command": "true" }]);
        let parsed = groups(&json!({ "hooks": {
            "SessionStart": [{ "matcher": "resume", "hooks": hook }],
            "PreCompact": [{ "matcher": "manual", "hooks": hook }],
            "Stop": [{ "matcher": "ignored", "hooks": hook }],
        } }));
        let matches = |event: HookEvent, on: Option<&str>| {
            parsed.iter().any(|(e, g)| *e == event && g.matches(on))
        };
        assert!(matches(HookEvent::SessionStart, Some("resume")));
        assert!(!matches(HookEvent::SessionStart, Some("startup")));
        assert!(!matches(HookEvent::PreCompact, Some("auto")));
        assert!(
            matches(HookEvent::Stop, None),
            "a Stop matcher means nothing"
        );
    }

    #[test]
    fn a_hook_has_a_timeout_in_seconds_and_may_block_when_it_fails() {
        let parsed = groups(&json!({ "hooks": { "Stop": [{ "hooks": [
            { "type": "command", "command": "a" },
            { "type": "command", "command": "b", "timeout": 5, "onFailure": "block" },
        ] }] } }));
        let hooks = &parsed[0].1.hooks;
        assert_eq!(hooks[0].timeout, DEFAULT_TIMEOUT);
        assert!(!hooks[0].block_on_failure);
        assert_eq!(hooks[1].timeout, Duration::from_secs(5));
        assert!(hooks[1].block_on_failure);
    }

    #[test]
    fn what_is_wrong_is_named_and_what_is_not_run_is_told() {
        let bad = |settings: Value| parse(Path::new("s.json"), &settings).unwrap_err();
        assert!(bad(json!({ "hooks": [] })).contains("hooks must be an object"));
        let e = bad(json!({ "hooks": { "PreToolUse": [{ "matcher": "(", "hooks": [] }] } }));
        assert!(
            e.starts_with("s.json: hooks.PreToolUse[0].matcher: not a pattern"),
            "{e}"
        );
        let e = bad(
            json!({ "hooks": { "Stop": [{ "hooks": [{ "type": "command", "command": "x", "timeout": -1 }] }] } }),
        );
        assert!(e.contains("timeout must be seconds"), "{e}");
        let (_, warnings) = parse(
            Path::new("s.json"),
            &json!({ "hooks": {
                "Teleport": [],
                "Stop": [{ "hooks": [{ "type": "prompt", "prompt": "?" }] }],
            } }),
        )
        .unwrap();
        assert_eq!(warnings.len(), 2, "{warnings:?}");
    }
}
