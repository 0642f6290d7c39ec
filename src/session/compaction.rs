//! Compaction: what a session does when its next request would fill
//! too much of the model's window. First, old large tool results are elided (a
//! note says what was there); if that is not enough, the older turns are replaced
//! by a summary a model call writes, keeping the original task, the last few
//! turns whole and the tool-call protocol intact. Pure code: sizes are estimated
//! (four characters a token), the summary request built, the new transcript cut.

use crate::conversation::{Message, ToolResult};
use crate::llm::ChatRequest;

/// Model turns at the end of the transcript kept whole.
pub(crate) const KEEP_TURNS: usize = 3;
/// Tool results longer than this (in characters), before the kept turns, are
/// elided.
pub(crate) const ELIDE_OVER: usize = 2_000;
/// What an elided result keeps of its start.
const KEEP_CHARS: usize = 300;

/// Roughly how many tokens `text` is: four characters a token, rounded up.
pub(crate) fn tokens_of(text: &str) -> u64 {
    (text.len() as u64).div_ceil(4)
}

/// Roughly how many tokens `messages` are.
pub(crate) fn estimate(messages: &[Message]) -> u64 {
    messages
        .iter()
        .map(|m| match m {
            Message::System { content } | Message::User { content } => tokens_of(content) + 4,
            Message::Tool(r) => tokens_of(&r.content) + tokens_of(&r.tool_call_id) + 4,
            Message::Assistant(a) => {
                let calls: u64 = a
                    .tool_calls
                    .iter()
                    .map(|c| tokens_of(&c.name) + tokens_of(&c.arguments) + 8)
                    .sum();
                tokens_of(&a.text) + calls + 4
            }
        })
        .sum()
}

/// Where the last `keep` model turns begin (0 when there are fewer).
fn tail_start_keeping(transcript: &[Message], keep: usize) -> usize {
    transcript
        .iter()
        .enumerate()
        .rev()
        .filter(|(_, m)| matches!(m, Message::Assistant(_)))
        .nth(keep.saturating_sub(1))
        .map_or(0, |(i, _)| i)
}

/// Where the kept tail begins: at the [`KEEP_TURNS`]-th model turn from the end.
fn tail_start(transcript: &[Message]) -> usize {
    tail_start_keeping(transcript, KEEP_TURNS)
}

/// Elides every tool result longer than [`ELIDE_OVER`] before the last `keep`
/// model turns ([`KEEP_TURNS`] as a rule; 1 when the tail alone is too big);
/// returns how many, and the tokens freed.
pub(crate) fn elide(transcript: &mut [Message], keep: usize) -> (usize, u64) {
    let end = tail_start_keeping(transcript, keep);
    let mut count = 0;
    let mut freed = 0;
    for message in &mut transcript[..end] {
        let Message::Tool(ToolResult { content, .. }) = message else {
            continue;
        };
        if content.len() <= ELIDE_OVER {
            continue;
        }
        let mut keep = KEEP_CHARS;
        while !content.is_char_boundary(keep) {
            keep -= 1;
        }
        let elided = format!(
            "{}\n[… {} more characters of this result were elided to fit the context window; run the call again if they are needed]",
            &content[..keep],
            content.len() - keep
        );
        freed += tokens_of(content).saturating_sub(tokens_of(&elided));
        *content = elided;
        count += 1;
    }
    (count, freed)
}

/// The request that asks `model` for a summary of the conversation before the
/// kept tail, its text cut to `max_chars` (the start and the end kept), or `None`
/// when there is nothing before the tail but the task and an earlier summary.
pub(crate) fn summary_request(
    model: &str,
    transcript: &[Message],
    place: &str,
    max_chars: usize,
) -> Option<ChatRequest> {
    let end = tail_start(transcript);
    if transcript[..end]
        .iter()
        .all(|m| matches!(m, Message::User { .. } | Message::System { .. }))
    {
        return None;
    }
    let mut text = String::new();
    for message in &transcript[..end] {
        let line = match message {
            Message::System { .. } => continue,
            Message::User { content } => format!("PERSON: {content}"),
            Message::Tool(r) => format!("TOOL RESULT ({}): {}", r.tool_call_id, r.content),
            Message::Assistant(a) => {
                let calls: Vec<String> = a
                    .tool_calls
                    .iter()
                    .map(|c| format!("{}({})", c.name, c.arguments))
                    .collect();
                format!("ASSISTANT: {} {}", a.text, calls.join(" "))
            }
        };
        text.push_str(&line);
        text.push_str("\n\n");
    }
    let text = cut_middle(&text, max_chars);
    Some(ChatRequest {
        model: model.to_owned(),
        messages: vec![
            Message::system(
                "You compress the history of a coding agent's conversation so that it can go on \
                 with less context. Write a dense summary: the task, what was found (files, \
                 functions, facts, errors, with exact names and paths), what was changed, what \
                 was decided and why, and what is left to do. No preamble.",
            ),
            Message::user(format!("The conversation so far:\n\n{text}")),
        ],
        tools: std::sync::Arc::default(),
        max_tokens: None,
        place: format!("{place}/compaction"),
    })
}

/// `text` cut to about `max` bytes: its first quarter and its last three, with a
/// note where the middle was.
fn cut_middle(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut head = max / 4;
    while !text.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = text.len() - (max - head);
    while !text.is_char_boundary(tail) {
        tail += 1;
    }
    format!(
        "{}\n[… {} characters left out …]\n{}",
        &text[..head],
        tail - head,
        &text[tail..]
    )
}

/// The transcript after a summary: the original task, the summary, then the kept
/// tail, which starts at a model turn, so every tool call in it keeps its result.
pub(crate) fn compacted(transcript: &[Message], summary: &str) -> Vec<Message> {
    let end = tail_start(transcript);
    let mut out = Vec::new();
    if let Some(task) = transcript[..end]
        .iter()
        .find(|m| matches!(m, Message::User { .. }))
    {
        out.push(task.clone());
    }
    out.push(Message::user(format!(
        "[The earlier part of this conversation was compacted to fit the context window. Summary:]\n{summary}"
    )));
    out.extend_from_slice(&transcript[end..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conversation::enforce_protocol;
    use crate::conversation::{AssistantMessage, ToolCall};

    fn turn(i: usize, result: &str) -> Vec<Message> {
        vec![
            Message::Assistant(AssistantMessage {
                text: format!("step {i}"),
                tool_calls: vec![ToolCall {
                    id: format!("c{i}"),
                    name: "Read".into(),
                    arguments: "{}".into(),
                }],
                ..AssistantMessage::default()
            }),
            Message::Tool(ToolResult {
                tool_call_id: format!("c{i}"),
                content: result.to_owned(),
                is_error: false,
            }),
        ]
    }

    fn conversation(turns: usize, result: &str) -> Vec<Message> {
        let mut t = vec![Message::user("fix the bug")];
        for i in 0..turns {
            t.extend(turn(i, result));
        }
        t
    }

    #[test]
    fn old_large_results_are_elided_and_the_kept_turns_are_not() {
        let big = "x".repeat(10_000);
        let mut t = conversation(5, &big);
        let before = estimate(&t);
        let (count, freed) = elide(&mut t, KEEP_TURNS);
        assert_eq!(count, 2, "five turns, three kept whole");
        assert!(freed > 4_000, "{freed}");
        assert_eq!(estimate(&t), before - freed);
        let Message::Tool(r) = &t[2] else { panic!() };
        assert!(
            r.content
                .contains("9700 more characters of this result were elided")
        );
        let Message::Tool(r) = &t[10] else { panic!() };
        assert_eq!(r.content, big);
        // Nothing more to elide.
        assert_eq!(elide(&mut t, KEEP_TURNS), (0, 0));
        // Keeping one turn, the two before it go too.
        assert_eq!(elide(&mut t, 1).0, 2);
    }

    #[test]
    fn a_summary_keeps_the_task_and_the_last_turns_and_the_protocol() {
        let t = conversation(6, "ok");
        let request = summary_request("m", &t, "lead/turn 7", 1_000_000).unwrap();
        assert_eq!(request.place, "lead/turn 7/compaction");
        assert!(request.tools.is_empty());
        let Message::User { content } = &request.messages[1] else {
            panic!()
        };
        assert!(content.contains("PERSON: fix the bug") && content.contains("Read({})"));
        assert!(
            !content.contains("step 5"),
            "the kept tail is not summarized"
        );
        let after = compacted(&t, "we read files");
        assert_eq!(after.len(), 2 + 2 * KEEP_TURNS);
        assert_eq!(after[0], Message::user("fix the bug"));
        let Message::User { content } = &after[1] else {
            panic!()
        };
        assert!(content.ends_with("we read files"));
        assert_eq!(&after[2..], &t[t.len() - 2 * KEEP_TURNS..]);
        let (_, repairs) = enforce_protocol(&after);
        assert_eq!(repairs.inserted + repairs.dropped, 0, "{repairs:?}");
        assert!(estimate(&after) < estimate(&t));
    }

    #[test]
    fn too_short_a_conversation_has_nothing_to_summarize() {
        assert!(summary_request("m", &conversation(2, "ok"), "p", 1000).is_none());
        // A compacted conversation whose tail is all there is has nothing new.
        let again = compacted(&conversation(6, "ok"), "before");
        assert!(summary_request("m", &again, "p", 1000).is_none());
    }

    #[test]
    fn the_summary_input_is_cut_to_its_bound_keeping_both_ends() {
        let t = conversation(40, &"y".repeat(500));
        let request = summary_request("m", &t, "p", 4_000).unwrap();
        let Message::User { content } = &request.messages[1] else {
            panic!()
        };
        assert!(content.len() < 4_200, "{}", content.len());
        assert!(content.contains("fix the bug") && content.contains("characters left out"));
        assert!(content.contains("step 36"), "the end is kept");
    }
}
