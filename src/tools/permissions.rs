//! Permission modes (Claude Code's): which tool calls run at once, which need a
//! person's yes, and which are refused. The decision is pure; asking is done by an
//! [`Approver`] the caller provides (a terminal prompt, or a refusal when there is
//! no terminal).

use std::fmt;
use std::path::Path;
use std::str::FromStr;
use std::sync::Mutex;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};

use crate::protocol::SessionId;

/// How much a session may do without asking.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "camelCase")]
pub enum PermissionMode {
    /// Read-only tools only; edits and commands are refused.
    Plan,
    /// Edits and commands need a yes.
    #[default]
    Default,
    /// Edits run; commands need a yes.
    AcceptEdits,
    /// Everything runs.
    BypassPermissions,
}

impl PermissionMode {
    /// The mode a child runs with: its own, but never more than its parent's.
    pub fn narrowed_by(self, parent: PermissionMode) -> PermissionMode {
        self.min(parent)
    }

    /// The name as written in flags and role files.
    pub fn name(self) -> &'static str {
        match self {
            Self::Plan => "plan",
            Self::Default => "default",
            Self::AcceptEdits => "acceptEdits",
            Self::BypassPermissions => "bypassPermissions",
        }
    }
}

impl fmt::Display for PermissionMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for PermissionMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "plan" => Ok(Self::Plan),
            "default" => Ok(Self::Default),
            "acceptEdits" => Ok(Self::AcceptEdits),
            "bypassPermissions" => Ok(Self::BypassPermissions),
            other => Err(format!(
                "unknown permission mode {other:?} (expected default, acceptEdits, plan or bypassPermissions)"
            )),
        }
    }
}

/// What a call is, for permission purposes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Reads only (Read, Ls, Glob, Grep).
    Read,
    /// Changes files (Write, Edit).
    Edit,
    /// Runs commands or anything else with effects (Bash, custom tools).
    Execute,
}

impl Action {
    /// Classifies a tool by its name and whether it is read-only.
    pub fn of(name: &str, read_only: bool) -> Self {
        match (read_only, name) {
            // Delegating has no effect of its own: the sub-agent's tools are gated
            // in the sub-agent; stopping one the agent started neither.
            (true, _) | (false, "Task" | "TaskStop") => Self::Read,
            (false, "Write" | "Edit" | "MultiEdit") => Self::Edit,
            (false, _) => Self::Execute,
        }
    }
}

/// The verdict on one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Run it.
    Allow,
    /// Ask a person first.
    Ask,
    /// Refuse it.
    Deny,
}

/// Decides a call under a mode.
pub fn verdict(mode: PermissionMode, action: Action) -> Verdict {
    match (mode, action) {
        (_, Action::Read) | (PermissionMode::BypassPermissions, _) => Verdict::Allow,
        (PermissionMode::AcceptEdits, Action::Edit) => Verdict::Allow,
        (PermissionMode::Plan, Action::Edit | Action::Execute) => Verdict::Deny,
        (PermissionMode::Default, Action::Edit | Action::Execute)
        | (PermissionMode::AcceptEdits, Action::Execute) => Verdict::Ask,
    }
}

/// What a person is asked about.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PermissionRequest {
    /// The session asking.
    pub session: SessionId,
    /// Its parent, for a sub-agent.
    pub parent: Option<SessionId>,
    /// Its role.
    pub agent: String,
    /// The question's id (`q-` and 12 hex digits): an answer names it.
    pub question_id: String,
    /// The call's id.
    pub call_id: String,
    /// The tool.
    pub tool: String,
    /// The call's input, as the model gave it.
    pub input: serde_json::Value,
    /// What it would do: the command, or the file and its change.
    pub summary: String,
    /// How many other questions wait for an answer.
    pub waiting: usize,
}

/// A person's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Run this call.
    Yes,
    /// Refuse this call.
    No,
    /// Run this call, and from now on what [`always_rules`] makes of it:
    /// each command of that Bash line, that WebFetch domain or that MCP tool
    /// for every agent of the run (and saved), any other tool for this
    /// session.
    Always,
}

impl Answer {
    /// An answer as a person writes it: `y`/`yes`, `n`/`no`, `a`/`always`, in
    /// any case; `None` for anything else.
    pub fn from_word(word: &str) -> Option<Self> {
        match word.trim().to_ascii_lowercase().as_str() {
            "y" | "yes" => Some(Self::Yes),
            "n" | "no" => Some(Self::No),
            "a" | "always" => Some(Self::Always),
            _ => None,
        }
    }
}

/// Asks a person whether a call may run.
pub trait Approver: Send + Sync + fmt::Debug + 'static {
    /// The answer for `request`. With no one to ask, implementations answer `No`.
    fn ask(&self, request: PermissionRequest) -> BoxFuture<'_, Answer>;

    /// A person's yes or no to `question`, asked outside any tool call (whether to
    /// trust a workspace, before a run starts). `None`: nobody can be asked.
    fn confirm<'a>(&'a self, question: &'a str) -> BoxFuture<'a, Option<bool>> {
        let _ = question;
        Box::pin(async { None })
    }

    /// Whether a no from it is a person's: one ends the turn (the turn's
    /// calls not started yet are neither asked about nor run). A refusal
    /// for want of anyone to ask is not.
    fn asks_a_person(&self) -> bool {
        true
    }

    /// Whether the no it gave to `request` was a person's (one that ends the
    /// turn), rather than a failure to get an answer.
    fn refused_by_a_person(&self, request: &PermissionRequest) -> bool {
        let _ = request;
        self.asks_a_person()
    }

    /// Whether its questions are put one at a time (a terminal has one
    /// screen), each waiting for the one before to be answered.
    fn one_at_a_time(&self) -> bool {
        true
    }

    /// Who answers, as the `permission_answered` event names it
    /// (`terminal`, `program`, `http`, `nobody`).
    fn name(&self) -> &'static str {
        "approver"
    }

    /// Why a call is refused when the answer was no, naming what would allow it.
    fn refusal(&self, request: &PermissionRequest, mode: PermissionMode) -> String {
        let needed = mode_allowing(&request.tool);
        format!(
            "permission denied: {} was not approved (permission mode {mode}); run with --permission-mode {needed} to allow it",
            request.tool
        )
    }
}

/// The permission mode that lets `tool` run without asking.
fn mode_allowing(tool: &str) -> PermissionMode {
    match Action::of(tool, false) {
        Action::Edit => PermissionMode::AcceptEdits,
        Action::Read | Action::Execute => PermissionMode::BypassPermissions,
    }
}

/// The approver when no person can be asked (no terminal): every ask is a no.
#[derive(Debug, Default)]
pub struct DenyAll;

impl Approver for DenyAll {
    fn ask(&self, _request: PermissionRequest) -> BoxFuture<'_, Answer> {
        Box::pin(async { Answer::No })
    }

    fn asks_a_person(&self) -> bool {
        false
    }

    fn name(&self) -> &'static str {
        "nobody"
    }

    fn refusal(&self, request: &PermissionRequest, mode: PermissionMode) -> String {
        let needed = mode_allowing(&request.tool);
        format!(
            "permission denied: {} needs approval under permission mode {mode}, and there is no terminal to ask; run with --permission-mode {needed} to allow it",
            request.tool
        )
    }
}

/// Saves an allow rule where the next run finds it (the CLI's: the workspace's
/// `.claude/settings.local.json`), when a person answers "always".
#[derive(Clone)]
pub struct RuleSaver(pub std::sync::Arc<SaveRule>);

/// Saves one allow rule (its text); the error says why it could not.
pub type SaveRule = dyn Fn(&str) -> Result<(), String> + Send + Sync;

impl fmt::Debug for RuleSaver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RuleSaver")
    }
}

/// What an "always" answer allows from then on, each rule with whether it is kept
/// beyond the session: for a Bash line, each of its commands exactly (kept: a line
/// is allowed when every command of it is; a line the shell scanner cannot split
/// gets no rule, since no exact rule could ever cover it), a WebFetch domain
/// (kept), an MCP tool whole (kept), any other tool whole for this session only.
pub fn always_rules(
    tool: &str,
    input: &serde_json::Value,
) -> Vec<(crate::tools::rules::Rule, bool)> {
    use crate::tools::rules::{Pattern, Rule};
    let exact = |pattern: String| Rule {
        tool: tool.to_owned(),
        pattern: Some(Pattern::Exact(pattern)),
    };
    let whole = |kept: bool| {
        vec![(
            Rule {
                tool: tool.to_owned(),
                pattern: None,
            },
            kept,
        )]
    };
    match tool {
        "Bash" => {
            let line = input["command"].as_str().unwrap_or_default();
            crate::tools::rules::commands(line)
                .unwrap_or_default()
                .into_iter()
                .map(|command| {
                    let folded = command.split_whitespace().collect::<Vec<_>>().join(" ");
                    let rule = exact(folded);
                    // Kept only when its text reads back as the same rule (`git :*`
                    // would read back as every git command).
                    let kept = Rule::parse(&rule.to_string()).as_ref() == Some(&rule);
                    (rule, kept)
                })
                .collect()
        }
        "WebFetch" => {
            let host = input["url"]
                .as_str()
                .and_then(|u| reqwest::Url::parse(u).ok())
                .and_then(|u| u.host_str().map(str::to_ascii_lowercase));
            match host {
                Some(host) => vec![(exact(format!("domain:{host}")), true)],
                None => whole(false),
            }
        }
        // An MCP tool is approved whole, as Claude Code saves it.
        _ => whole(tool.starts_with("mcp__")),
    }
}

/// Remembers "always" answers as the rules they allow: for one session, or
/// (a rule kept beyond the session) for every session of the run.
#[derive(Debug, Default)]
pub struct Remembered {
    always: Mutex<Vec<(Option<SessionId>, crate::tools::rules::Rule)>>,
}

impl Remembered {
    /// Whether a person already said "always", in this session or for the
    /// whole run, to what allows this call.
    pub fn allows(&self, session: SessionId, tool: &str, input: &serde_json::Value) -> bool {
        let always = self
            .always
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let rules = crate::tools::rules::Rules {
            allow: always
                .iter()
                .filter(|(s, _)| s.is_none_or(|s| s == session))
                .map(|(_, r)| r.clone())
                .collect(),
            ..crate::tools::rules::Rules::default()
        };
        !rules.allow.is_empty()
            && rules.verdict(tool, input) == Some(crate::tools::rules::RuleVerdict::Allow)
    }

    /// Forgets `session`'s "always" answers: it has stopped.
    pub fn forget(&self, session: SessionId) {
        self.always
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .retain(|(s, _)| *s != Some(session));
    }

    /// Sessions with an "always" on record.
    pub fn retained(&self) -> usize {
        let always = self
            .always
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut sessions: Vec<SessionId> = always.iter().filter_map(|(s, _)| *s).collect();
        sessions.sort();
        sessions.dedup();
        sessions.len()
    }

    /// Records an "always": what it allows in `session` (`None`: in every
    /// session of the run).
    pub fn remember(&self, session: Option<SessionId>, rule: crate::tools::rules::Rule) {
        self.always
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push((session, rule));
    }
}

/// What a call of a turn gets once the person has refused an earlier one.
pub const REFUSED_EARLIER: &str = "not run: the person refused an earlier call of this turn, so its other calls were neither asked about nor run; ask the person what they want, or do something else";

/// One session's permission checkpoint: its mode, who to ask, and what was
/// already allowed "always".
#[derive(Clone, Debug)]
pub struct Gate {
    /// The session's mode.
    pub mode: PermissionMode,
    /// The session's role, named in questions.
    pub agent: String,
    /// Who answers questions.
    pub approver: std::sync::Arc<dyn Approver>,
    /// "Always" answers, shared by every session of the process.
    pub remembered: std::sync::Arc<Remembered>,
    /// The questions waiting for an answer, shared by every session of the
    /// process.
    pub questions: std::sync::Arc<Questions>,
    /// How long a question nobody can be asked at once waits for
    /// `orchestrate approve` before it is refused (zero: refused at once).
    pub approval_timeout: std::time::Duration,
    /// Where the session's events go: a question shows as `awaiting_permission`.
    pub events: Option<crate::events::Publisher>,
    /// When the session's role allows Bash only through rules: the commands it
    /// may run.
    pub bash_rules: std::sync::Arc<[crate::tools::rules::Rule]>,
    /// The calls the session's role refuses (its `disallowedTools:` rules with a
    /// pattern), whatever the mode.
    pub role_deny: std::sync::Arc<[crate::tools::rules::Rule]>,
    /// The run's permission rules (settings files, `--allowedTools`,
    /// `--disallowedTools`), applied before the mode.
    pub rules: std::sync::Arc<crate::tools::rules::Rules>,
    /// Where an "always" answer is saved as a rule.
    pub saver: Option<RuleSaver>,
    /// The run's hooks, run around each call.
    pub hooks: Option<std::sync::Arc<crate::hooks::Hooks>>,
    /// The session's journal, the hooks' `transcript_path`.
    pub transcript: Option<std::path::PathBuf>,
}

impl Gate {
    /// Whether `tool` may run with `input` in `session`: allowed, asked and
    /// answered yes, or refused with a message the model (and person) can act on.
    pub async fn check(
        &self,
        ctx: &crate::tools::ToolContext,
        tool: &str,
        read_only: bool,
        input: &serde_json::Value,
        hooked: Option<crate::hooks::Permission>,
    ) -> Result<(), crate::error::ToolError> {
        let session = ctx.session;
        let denied = crate::error::ToolError::Failed;
        ctx.refused_earlier()?;
        if let Some(why) = ctx.narrowing.refusal(&self.rules, tool, input) {
            return Err(denied(why));
        }
        if tool == "Bash" && !self.bash_rules.is_empty() {
            let command = input["command"].as_str().unwrap_or_default();
            if !crate::tools::rules::covered(&self.bash_rules, command) {
                let allowed: Vec<String> =
                    self.bash_rules.iter().map(ToString::to_string).collect();
                return Err(denied(format!(
                    "permission denied: the {} role may run only {} (every command of a line must match; substitutions and redirections into files never do), and this command is not one of them",
                    self.agent,
                    allowed.join(", ")
                )));
            }
        }
        use crate::tools::rules::RuleVerdict;
        if !self.role_deny.is_empty() {
            let refused = || -> String {
                let rules: Vec<String> = self.role_deny.iter().map(ToString::to_string).collect();
                rules.join(", ")
            };
            match self.rules.refusal(&self.role_deny, tool, input) {
                Some(RuleVerdict::Deny) => {
                    return Err(denied(format!(
                        "permission denied: the {} role's disallowedTools ({}) forbid this {tool} call",
                        self.agent,
                        refused()
                    )));
                }
                // A Bash line the scanner cannot read may hold a refused command:
                // the run's deny rules would ask a person; the role's refuse it.
                Some(RuleVerdict::Ask | RuleVerdict::Unreadable) => {
                    return Err(denied(format!(
                        "permission denied: the {} role's disallowedTools ({}) refuse commands, and this line cannot be split into its commands to check them; write it as plain commands",
                        self.agent,
                        refused()
                    )));
                }
                Some(RuleVerdict::Allow) | None => {}
            }
        }
        let ruled = self.rules.verdict(tool, input);
        if ruled == Some(RuleVerdict::Deny) {
            return Err(denied(format!(
                "permission denied: a deny rule (permissions.deny, or --disallowedTools) forbids this {tool} call"
            )));
        }
        // Deny and ask rules for Bash are set, and this line cannot be read to
        // tell whether they match: never run unasked.
        if ruled == Some(RuleVerdict::Unreadable) && self.mode == PermissionMode::BypassPermissions
        {
            return Err(denied(
                "permission denied: deny or ask rules for Bash are set, and this command line cannot be read well enough to check them (a word the shell would expand, or something only a shell can split); in bypassPermissions it is refused: write it as plain commands".into(),
            ));
        }

        // Rules come before the mode, except that plan mode never runs effects.
        let by_mode = verdict(self.mode, Action::of(tool, read_only));
        let decided = match (ruled, by_mode) {
            (_, Verdict::Deny) => Verdict::Deny,
            (Some(RuleVerdict::Ask | RuleVerdict::Unreadable), _) => Verdict::Ask,
            (Some(RuleVerdict::Allow), _) => Verdict::Allow,
            (Some(RuleVerdict::Deny) | None, by_mode) => by_mode,
        };
        // A PreToolUse hook's decision comes after the rules that refuse or
        // ask (an allow does not pass an ask rule, as in Claude Code) and
        // before the mode (plan mode still never runs effects).
        use crate::hooks::Permission;
        let rule_asks = matches!(ruled, Some(RuleVerdict::Ask | RuleVerdict::Unreadable));
        let decided = match (decided, hooked) {
            (Verdict::Deny, _) | (_, None) => decided,
            (_, Some(Permission::Allow)) if !rule_asks => Verdict::Allow,
            (_, Some(Permission::Allow)) => decided,
            (_, Some(Permission::Ask)) => Verdict::Ask,
            (_, Some(Permission::Deny)) => Verdict::Deny,
        };
        // A protected path (git's, the agents', editors' and shells' files) is
        // changed only with a person's yes, whatever an allow rule or
        // acceptEdits says (bypassPermissions is the person's own say-so).
        let protected = self.mode != PermissionMode::BypassPermissions
            && changes_protected_path(tool, input, &ctx.workspace);
        let decided = match decided {
            Verdict::Allow if protected => Verdict::Ask,
            decided => decided,
        };
        // Asked by a rule or a hook: an earlier "always" does not answer it.
        let asked_by_rule = protected || rule_asks || hooked == Some(Permission::Ask);
        match decided {
            Verdict::Allow => Ok(()),
            Verdict::Deny => Err(denied(format!(
                "permission denied: {tool} is not allowed in {} mode, which allows read-only tools only",
                self.mode
            ))),
            Verdict::Ask if !asked_by_rule && self.remembered.allows(session, tool, input) => {
                Ok(())
            }
            Verdict::Ask => {
                let mut summary = summarize(tool, input, &ctx.workspace);
                if protected {
                    summary.insert_str(
                        0,
                        "(a protected path: it configures git, agents, editors or shells)\n",
                    );
                }
                let request = PermissionRequest {
                    session,
                    parent: self.events.as_ref().and_then(|e| e.parent()),
                    agent: self.agent.clone(),
                    question_id: String::new(),
                    call_id: ctx.call_id.clone(),
                    tool: tool.to_owned(),
                    input: input.clone(),
                    summary,
                    waiting: 0,
                };
                self.ask(ctx, request, !asked_by_rule).await
            }
        }
    }
}

/// What a call would do, for a person deciding on it: the whole command, or the
/// file (where it leads, when that is not the path the model gave: a symlink in
/// `workspace`) and the change (saying when every occurrence is replaced).
pub fn summarize(tool: &str, input: &serde_json::Value, workspace: &Path) -> String {
    let text = |key: &str| {
        input
            .get(key)
            .and_then(serde_json::Value::as_str)
            .unwrap_or("")
    };
    match tool {
        "Bash" => text("command").to_owned(),
        "WebFetch" => format!("GET {}", text("url")),
        "Edit" => {
            let diff = super::full_diff(text("old_string"), text("new_string"), 2);
            let every = match input
                .get("replace_all")
                .and_then(serde_json::Value::as_bool)
            {
                Some(true) => "\nreplace_all: every occurrence of the old text is replaced",
                Some(false) | None => "",
            };
            format!("{}{every}\n{diff}", target(text("file_path"), workspace))
        }
        "MultiEdit" => {
            let edits = input["edits"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or_default();
            let mut shown = format!(
                "{} ({} edits)",
                target(text("file_path"), workspace),
                edits.len()
            );
            for (i, edit) in edits.iter().enumerate() {
                let part = |key: &str| edit[key].as_str().unwrap_or_default();
                let every = if edit["replace_all"].as_bool() == Some(true) {
                    " (every occurrence)"
                } else {
                    ""
                };
                let diff = super::full_diff(part("old_string"), part("new_string"), 2);
                shown.push_str(&format!("\nedit {}{every}:\n{diff}", i + 1));
            }
            shown
        }
        "Write" => {
            let diff = super::full_diff("", text("content"), 3);
            format!(
                "{} ({} lines)\n{diff}",
                target(text("file_path"), workspace),
                text("content").lines().count()
            )
        }
        _ => input.to_string(),
    }
}

/// Whether `tool` changes files and `input` names a protected path of
/// `workspace` (as the path resolves).
fn changes_protected_path(tool: &str, input: &serde_json::Value, workspace: &Path) -> bool {
    if !matches!(tool, "Write" | "Edit" | "MultiEdit" | "NotebookEdit") {
        return false;
    }
    ["file_path", "notebook_path"]
        .iter()
        .filter_map(|key| input[*key].as_str())
        .filter_map(|given| super::sandbox::resolve(workspace, given).ok())
        .any(|path| super::protected::is_protected(workspace, &path))
}

/// The path a call gives and, when it leads elsewhere (through a symlink, or
/// written another way), the file it resolves to; or why it resolves to none.
fn target(given: &str, workspace: &Path) -> String {
    match super::sandbox::resolve(workspace, given) {
        Ok(path) => match super::sandbox::display(workspace, &path) {
            shown if shown == given => shown,
            shown => format!("{given} (resolves to {shown})"),
        },
        Err(e) => format!("{given} ({e})"),
    }
}

mod ask;
pub mod forward;
mod hooked;
pub mod questions;

pub use self::questions::{By, Decision, PendingQuestion, Questions};

#[cfg(test)]
mod tests;
