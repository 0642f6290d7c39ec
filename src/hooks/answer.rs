//! What a hook answered, read from how it ran (pure). By exit code: 0 goes on
//! (its standard output, as JSON, may say more), 2 blocks with its standard
//! error as the reason, any other code is an error shown to the person and
//! what it guards goes on. By JSON, in both of Claude Code's shapes: the
//! current `hookSpecificOutput` (`permissionDecision` allow/deny/ask with its
//! `permissionDecisionReason`, `additionalContext`) and the older top-level
//! `decision` (`block`, `approve`) with `reason`; `continue: false` with
//! `stopReason` ends the agent.

use serde_json::Value;

use super::{CommandHook, HookEvent, Ran};

/// What a `PreToolUse` hook decided about a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Permission {
    /// Run it without asking (rules that deny it still do).
    Allow,
    /// Ask the person first.
    Ask,
    /// Refuse it.
    Deny,
}

/// What one hook, or every hook of an event together, answered.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Answer {
    /// It blocks what it guards, for this reason (told to the model).
    pub block: Option<String>,
    /// Its decision on a tool call.
    pub permission: Option<Permission>,
    /// Context for the model.
    pub context: Vec<String>,
    /// The agent is to stop, for this reason (`continue: false`).
    pub stop: Option<String>,
    /// A failure or a message for the person; what it guards goes on.
    pub notice: Option<String>,
}

impl Answer {
    /// The word an event journals for it.
    pub fn decision(&self) -> &'static str {
        match (&self.stop, &self.block, self.permission) {
            (Some(_), _, _) => "stop",
            (_, Some(_), _) | (_, _, Some(Permission::Deny)) => "block",
            (_, _, Some(Permission::Ask)) => "ask",
            (_, _, Some(Permission::Allow)) => "allow",
            (None, None, None) if self.notice.is_some() => "error",
            (None, None, None) => "continue",
        }
    }

    /// The answer of a hook that did not run to an answer of its own (it
    /// crashed, timed out, or could not be asked), for `why`: it blocks what
    /// it guards when `blocks`, else it is told to the person.
    pub fn failed(why: String, blocks: bool) -> Self {
        match blocks {
            true => Answer {
                block: Some(why),
                ..Answer::default()
            },
            false => Answer {
                notice: Some(why),
                ..Answer::default()
            },
        }
    }

    /// The answers of every hook of one event together: any block blocks
    /// (every reason told), a deny beats an ask beats an allow, every context
    /// is kept, the first stop stops.
    pub fn combine(answers: impl IntoIterator<Item = Answer>) -> Answer {
        let mut all = Answer::default();
        let mut reasons = Vec::new();
        let mut notices = Vec::new();
        for answer in answers {
            reasons.extend(answer.block);
            notices.extend(answer.notice);
            all.context.extend(answer.context);
            all.stop = all.stop.or(answer.stop);
            all.permission = match (all.permission, answer.permission) {
                (Some(Permission::Deny), _) | (_, Some(Permission::Deny)) => Some(Permission::Deny),
                (Some(Permission::Ask), _) | (_, Some(Permission::Ask)) => Some(Permission::Ask),
                (a, b) => a.or(b),
            };
        }
        all.block = (!reasons.is_empty()).then(|| reasons.join("\n"));
        all.notice = (!notices.is_empty()).then(|| notices.join("\n"));
        all
    }
}

/// What `hook`, run for `event`, answered by how it `ran`.
pub fn read(event: HookEvent, hook: &CommandHook, ran: &Ran) -> Answer {
    let name = || format!("the {} hook `{}`", event.name(), short(&hook.command));
    if let Some(failure) = &ran.failure {
        let why = format!("{} failed: {failure}", name());
        return Answer::failed(why, hook.block_on_failure);
    }
    match ran.exit_code {
        Some(0) => from_output(event, &ran.stdout),
        Some(2) => {
            let reason = ran.stderr.trim();
            Answer {
                block: Some(match reason.is_empty() {
                    true => format!("blocked by {}", name()),
                    false => reason.to_owned(),
                }),
                ..Answer::default()
            }
        }
        code => {
            let why = format!(
                "{} exited {}: {}",
                name(),
                code.map_or("by a signal".to_owned(), |c| c.to_string()),
                short(ran.stderr.trim())
            );
            // A guard that crashes (exit 1, 127) blocks when it says so.
            Answer::failed(why, hook.block_on_failure)
        }
    }
}

/// What a hook that exited 0 said on its standard output.
fn from_output(event: HookEvent, stdout: &str) -> Answer {
    let text = stdout.trim();
    let json = text
        .starts_with('{')
        .then(|| serde_json::from_str::<Value>(text).ok())
        .flatten();
    let Some(json) = json else {
        // Plain text is context where the event takes some.
        let context = matches!(event, HookEvent::UserPromptSubmit | HookEvent::SessionStart)
            && !text.is_empty();
        return Answer {
            context: context.then(|| text.to_owned()).into_iter().collect(),
            ..Answer::default()
        };
    };
    let text_of = |v: &Value| v.as_str().map(str::to_owned);
    let mut answer = Answer::default();
    if json["continue"] == Value::Bool(false) {
        answer.stop = Some(
            text_of(&json["stopReason"]).unwrap_or_else(|| format!("a {} hook", event.name())),
        );
    }
    let reason = text_of(&json["reason"]);
    match json["decision"].as_str() {
        Some("block") => {
            answer.block = Some(reason.unwrap_or_else(|| format!("a {} hook", event.name())))
        }
        Some("approve") if event == HookEvent::PreToolUse => {
            answer.permission = Some(Permission::Allow)
        }
        _ => {}
    }
    let specific = &json["hookSpecificOutput"];
    if event == HookEvent::PreToolUse {
        let why = text_of(&specific["permissionDecisionReason"]);
        match specific["permissionDecision"].as_str() {
            Some("allow") => answer.permission = Some(Permission::Allow),
            Some("ask") => answer.permission = Some(Permission::Ask),
            Some("deny") => {
                answer.permission = Some(Permission::Deny);
                answer.block = Some(why.unwrap_or_else(|| "a PreToolUse hook".into()));
            }
            _ => {}
        }
    }
    answer
        .context
        .extend(text_of(&specific["additionalContext"]));
    if let Some(message) = text_of(&json["systemMessage"]) {
        answer.notice = Some(message);
    }
    answer
}

/// A command or a message shortened to one line.
fn short(text: &str) -> String {
    let line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match line.char_indices().nth(120) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None => line,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn hook(block_on_failure: bool) -> CommandHook {
        CommandHook {
            command: "./guard.sh".into(),
            timeout: Duration::from_secs(1),
            block_on_failure,
        }
    }

    fn ran(code: i32, stdout: &str, stderr: &str) -> Ran {
        Ran {
            exit_code: Some(code),
            stdout: stdout.into(),
            stderr: stderr.into(),
            failure: None,
        }
    }

    #[test]
    fn exit_codes_go_on_block_with_the_reason_or_tell_the_person() {
        let pre = HookEvent::PreToolUse;
        assert_eq!(read(pre, &hook(false), &ran(0, "", "")), Answer::default());
        let blocked = read(pre, &hook(false), &ran(2, "", "no rm here\n"));
        assert_eq!(blocked.block.as_deref(), Some("no rm here"));
        let error = read(pre, &hook(false), &ran(1, "", "boom"));
        assert_eq!((error.decision(), error.block.is_none()), ("error", true));
        assert!(error.notice.unwrap().contains("exited 1: boom"));
    }

    #[test]
    fn both_json_shapes_are_read() {
        let pre = HookEvent::PreToolUse;
        let current = r#"{"hookSpecificOutput": {"hookEventName": "PreToolUse",
            "permissionDecision": "deny", "permissionDecisionReason": "not on main"}}"#;
        let denied = read(pre, &hook(false), &ran(0, current, ""));
        assert_eq!(denied.permission, Some(Permission::Deny));
        assert_eq!(denied.block.as_deref(), Some("not on main"));
        let ask = r#"{"hookSpecificOutput": {"permissionDecision": "ask"}}"#;
        assert_eq!(read(pre, &hook(false), &ran(0, ask, "")).decision(), "ask");
        let older = r#"{"decision": "block", "reason": "use rg"}"#;
        let post = read(HookEvent::PostToolUse, &hook(false), &ran(0, older, ""));
        assert_eq!(post.block.as_deref(), Some("use rg"));
        let approve = read(pre, &hook(false), &ran(0, r#"{"decision": "approve"}"#, ""));
        assert_eq!(approve.permission, Some(Permission::Allow));
        let stop = r#"{"continue": false, "stopReason": "tests are red",
            "hookSpecificOutput": {"additionalContext": "see ci.log"}}"#;
        let stopped = read(HookEvent::Stop, &hook(false), &ran(0, stop, ""));
        assert_eq!(stopped.stop.as_deref(), Some("tests are red"));
        assert_eq!(stopped.context, ["see ci.log"]);
        let plain = read(
            HookEvent::UserPromptSubmit,
            &hook(false),
            &ran(0, "the date is today\n", ""),
        );
        assert_eq!(plain.context, ["the date is today"]);
    }

    #[test]
    fn a_crashed_or_failed_guard_blocks_only_when_it_says_so() {
        let crashed = ran(127, "", "jq: not found");
        let failed = Ran {
            failure: Some("it timed out after 1s".into()),
            ..Ran::default()
        };
        let pre = HookEvent::PreToolUse;
        for (how, said) in [
            (&crashed, "exited 127: jq: not found"),
            (&failed, "timed out"),
        ] {
            assert!(read(pre, &hook(false), how).block.is_none());
            assert!(
                read(pre, &hook(true), how).block.unwrap().contains(said),
                "{said}"
            );
        }
    }

    #[test]
    fn together_any_block_blocks_and_a_deny_beats_an_ask_beats_an_allow() {
        let allow = Answer {
            permission: Some(Permission::Allow),
            ..Answer::default()
        };
        let ask = Answer {
            permission: Some(Permission::Ask),
            context: vec!["c".into()],
            ..Answer::default()
        };
        let both = Answer::combine([allow.clone(), ask]);
        assert_eq!(
            (both.permission, both.context),
            (Some(Permission::Ask), vec!["c".to_owned()])
        );
        let block = Answer {
            block: Some("no".into()),
            ..Answer::default()
        };
        let all = Answer::combine([allow, block.clone(), block]);
        assert_eq!(all.block.as_deref(), Some("no\nno"));
    }
}
