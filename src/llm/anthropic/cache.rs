//! Anthropic prompt caching: `cache_control` breakpoints in a request body, so
//! that what repeats is read from the provider's cache at a tenth of the price.
//!
//! The API caches the prefix up to each breakpoint, in the order tools, system,
//! messages, and allows four. We set three: the system prompt (after the tools,
//! so the sub-agents of one role, which share both, share one cached prefix; the
//! last tool when there is no system prompt), the conversation's tail (the next
//! turn reads this turn's prefix), and the tail of the turn before (so a turn
//! that added more blocks than the API looks back over still finds the last
//! write). Thinking blocks cannot carry a breakpoint; the tails are always the
//! person's or tool results, which can.

use serde_json::{Value, json};

/// Marks the breakpoints in `body`, built by `wire::request_body`.
pub(super) fn mark(body: &mut Value) {
    let ephemeral = || json!({"type": "ephemeral"});
    if let Some(system) = body.get("system").and_then(Value::as_str) {
        body["system"] = json!([{"type": "text", "text": system, "cache_control": ephemeral()}]);
    } else if let Some(last) = body
        .get_mut("tools")
        .and_then(Value::as_array_mut)
        .and_then(|tools| tools.last_mut())
    {
        last["cache_control"] = ephemeral();
    }
    let Some(messages) = body.get_mut("messages").and_then(Value::as_array_mut) else {
        return;
    };
    let user_turns = messages
        .iter_mut()
        .rev()
        .filter(|m| m["role"] == "user")
        .take(2);
    for message in user_turns {
        if let Some(block) = message
            .get_mut("content")
            .and_then(Value::as_array_mut)
            .and_then(|blocks| blocks.last_mut())
        {
            block["cache_control"] = ephemeral();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_system_prompt_and_the_last_two_user_turns_are_breakpoints() {
        let mut body = json!({
            "system": "Be brief.",
            "tools": [{"name": "a"}, {"name": "b"}],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "one"}]},
                {"role": "assistant", "content": [{"type": "text", "text": "two"}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "x"}, {"type": "text", "text": "three"}]},
                {"role": "assistant", "content": [{"type": "text", "text": "four"}]},
                {"role": "user", "content": [{"type": "text", "text": "five"}]},
            ],
        });
        mark(&mut body);
        let e = json!({"type": "ephemeral"});
        assert_eq!(
            body["system"],
            json!([{"type": "text", "text": "Be brief.", "cache_control": e}])
        );
        assert_eq!(
            body["tools"][1].get("cache_control"),
            None,
            "the system's covers the tools"
        );
        let marked: Vec<(usize, usize)> = body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .enumerate()
            .flat_map(|(i, m)| {
                m["content"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .enumerate()
                    .filter(|(_, b)| b.get("cache_control").is_some())
                    .map(move |(j, _)| (i, j))
                    .collect::<Vec<_>>()
            })
            .collect();
        assert_eq!(marked, [(2, 1), (4, 0)]);
    }

    #[test]
    fn without_a_system_prompt_the_last_tool_is_the_breakpoint() {
        let mut body = json!({
            "tools": [{"name": "a"}, {"name": "b"}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": "go"}]}],
        });
        mark(&mut body);
        assert_eq!(
            body["tools"][1]["cache_control"],
            json!({"type": "ephemeral"})
        );
        assert_eq!(body["tools"][0].get("cache_control"), None);
        assert_eq!(body.get("system"), None);
        assert_eq!(
            body["messages"][0]["content"][0]["cache_control"],
            json!({"type": "ephemeral"})
        );
    }
}
