//! The narrowings a session's own history set: each call that succeeded of a
//! tool that narrows its session (`Skill`), found again when the session is
//! rebuilt from its journal or carried on with its history, so a crash or a
//! resume never widens what it may do.

use std::collections::HashMap;

use crate::conversation::Message;
use crate::tools::ToolRegistry;
use crate::tools::narrowing::Narrow;

/// The narrowings `messages` set, in order, by the calls of `tools` that
/// narrow and that have a result which is not an error.
pub(crate) fn narrowed<'a>(
    messages: impl IntoIterator<Item = &'a Message>,
    tools: &ToolRegistry,
) -> Vec<Narrow> {
    let mut pending = HashMap::new();
    let mut found = Vec::new();
    for message in messages {
        match message {
            Message::Assistant(turn) => {
                for call in &turn.tool_calls {
                    let narrow = tools
                        .get(&call.name)
                        .zip(call.parsed_arguments().ok())
                        .and_then(|(tool, input)| tool.narrows(&input));
                    if let Some(narrow) = narrow {
                        pending.insert(call.id.clone(), narrow);
                    }
                }
            }
            Message::Tool(result) if !result.is_error => {
                if let Some(narrow) = pending.remove(&result.tool_call_id) {
                    found.push(narrow);
                }
            }
            _ => {}
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::conversation::{AssistantMessage, ToolCall, ToolResult};
    use crate::skills::Skills;

    fn call(id: &str, skill: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: "Skill".into(),
            arguments: json!({ "skill": skill }).to_string(),
        }
    }

    fn result(id: &str, is_error: bool) -> Message {
        Message::Tool(ToolResult {
            tool_call_id: id.into(),
            content: "loaded".into(),
            is_error,
        })
    }

    #[test]
    fn a_skill_loaded_in_the_history_narrows_again_and_a_failed_load_does_not() {
        let dir = tempfile::tempdir().unwrap();
        for (name, allowed) in [("tidy", "\nallowed-tools: Read, Bash(ls:*)"), ("free", "")] {
            let folder = dir.path().join(".claude/skills").join(name);
            std::fs::create_dir_all(&folder).unwrap();
            let text = format!("---\nname: {name}\ndescription: d{allowed}\n---\nbody\n");
            std::fs::write(folder.join("SKILL.md"), text).unwrap();
        }
        let (skills, _) = Skills::load(dir.path(), None);
        let tools = ToolRegistry::new().with(crate::tools::skill::Skill::new(Arc::new(skills)));
        let turn = |calls: Vec<ToolCall>| {
            Message::Assistant(AssistantMessage {
                tool_calls: calls,
                ..AssistantMessage::default()
            })
        };
        let history = [
            turn(vec![call("a", "tidy"), call("b", "free")]),
            result("a", true),
            result("b", false),
            turn(vec![call("c", "tidy")]),
            result("c", false),
        ];
        let found = narrowed(&history, &tools);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].by, "the skill \"tidy\"");
        let rules: Vec<String> = found[0].only.iter().map(ToString::to_string).collect();
        assert_eq!(rules, ["Read", "Bash(ls:*)"]);
    }
}
