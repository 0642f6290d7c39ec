//! Anthropic's `pause_turn`: the API stopped a long turn part-way (its server-side
//! tool loop reached its limit) and the turn is not over. As Anthropic documents it,
//! the client sends the request again with the assistant content so far appended,
//! and the model carries on where it paused. This is the bookkeeping of that loop,
//! without IO: the client (or the replay) makes each request and hands the turn
//! here, which says whether to ask again and with what, and joins the parts into
//! the one turn the session sees. A paused turn never reaches the session.

use crate::conversation::{AssistantTurn, FinishReason, Message};
use crate::error::{LlmError, StreamError};
use crate::llm::ChatRequest;

/// How many times one turn is continued before it fails: each continuation is a
/// whole request, and a server that pauses forever must not hold a session forever.
pub(crate) const MAX_CONTINUATIONS: u32 = 10;

/// The stop reason that asks for a continuation.
const PAUSE_TURN: &str = "pause_turn";

/// What to do after one request of a turn.
#[derive(Debug)]
pub(crate) enum Next {
    /// The turn is over: this is all of it.
    Done(AssistantTurn),
    /// The turn was paused: send this request (the original one, with the turn so
    /// far appended as the assistant's message).
    Again(ChatRequest),
}

/// One turn's parts so far.
#[derive(Debug, Default)]
pub(crate) struct Continuation {
    so_far: Option<AssistantTurn>,
    continued: u32,
}

impl Continuation {
    /// Takes the answer to the latest request of `original`'s turn.
    pub(crate) fn next(
        &mut self,
        original: &ChatRequest,
        part: AssistantTurn,
    ) -> Result<Next, StreamError> {
        let turn = join(self.so_far.take(), part);
        if turn.finish.as_ref() != Some(&FinishReason::Other(PAUSE_TURN.to_owned())) {
            return Ok(Next::Done(turn));
        }
        if self.continued == MAX_CONTINUATIONS {
            return Err(StreamError::Paused(self.continued + 1));
        }
        self.continued += 1;
        let mut again = original.clone();
        again
            .messages
            .push(Message::Assistant(turn.message.clone()));
        self.so_far = Some(turn);
        Ok(Next::Again(again))
    }

    /// An error of the latest request; a cancel keeps everything the turn had said.
    pub(crate) fn failed(&mut self, error: LlmError) -> LlmError {
        match (self.so_far.take(), error) {
            (Some(so_far), LlmError::Cancelled { partial }) => LlmError::Cancelled {
                partial: Box::new(join(Some(so_far), *partial)),
            },
            (_, error) => error,
        }
    }
}

/// One turn of two parts: what the later part adds to the earlier one, its reason
/// to stop, and the usage of both requests.
fn join(earlier: Option<AssistantTurn>, later: AssistantTurn) -> AssistantTurn {
    let Some(mut turn) = earlier else {
        return later;
    };
    let (m, more) = (&mut turn.message, later.message);
    m.text.push_str(&more.text);
    m.reasoning.push_str(&more.reasoning);
    m.refusal = more.refusal.or(m.refusal.take());
    m.tool_calls.extend(more.tool_calls);
    m.thinking.extend(more.thinking);
    turn.finish = later.finish;
    turn.usage = match (turn.usage, later.usage) {
        (Some(mut a), Some(b)) => {
            a.add(&b);
            Some(a)
        }
        (a, b) => a.or(b),
    };
    turn.model = later.model.or(turn.model);
    turn
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conversation::{AssistantMessage, Usage};

    fn part(text: &str, finish: &str, output: u64) -> AssistantTurn {
        AssistantTurn {
            message: AssistantMessage {
                text: text.into(),
                ..AssistantMessage::default()
            },
            finish: FinishReason::from_wire(finish),
            usage: Some(Usage {
                input_tokens: 10,
                output_tokens: output,
                ..Usage::default()
            }),
            model: Some("claude".into()),
        }
    }

    fn request() -> ChatRequest {
        ChatRequest {
            model: "claude".into(),
            messages: vec![Message::user("Search the web.")],
            tools: Default::default(),
            max_tokens: None,
            place: "lead/turn 1".into(),
        }
    }

    #[test]
    fn a_paused_turn_is_asked_again_with_the_turn_so_far_and_joined() {
        let original = request();
        let mut continuation = Continuation::default();
        let Next::Again(again) = continuation
            .next(&original, part("Searching… ", "pause_turn", 3))
            .unwrap()
        else {
            panic!("a paused turn goes on");
        };
        assert_eq!(
            again.messages,
            [
                Message::user("Search the web."),
                Message::Assistant(AssistantMessage {
                    text: "Searching… ".into(),
                    ..AssistantMessage::default()
                }),
            ]
        );
        assert_eq!(again.place, original.place);
        let Next::Done(turn) = continuation
            .next(&original, part("found it.", "end_turn", 4))
            .unwrap()
        else {
            panic!("an ended turn is done");
        };
        assert_eq!(turn.message.text, "Searching… found it.");
        assert_eq!(turn.finish, Some(FinishReason::Stop));
        assert_eq!(
            turn.usage,
            Some(Usage {
                input_tokens: 20,
                output_tokens: 7,
                ..Usage::default()
            })
        );
    }

    #[test]
    fn a_turn_that_never_ends_pausing_fails() {
        let original = request();
        let mut continuation = Continuation::default();
        for _ in 0..MAX_CONTINUATIONS {
            let next = continuation.next(&original, part(".", "pause_turn", 1));
            assert!(matches!(next, Ok(Next::Again(_))), "{next:?}");
        }
        let last = continuation.next(&original, part(".", "pause_turn", 1));
        assert_eq!(
            last.unwrap_err(),
            StreamError::Paused(MAX_CONTINUATIONS + 1)
        );
    }

    #[test]
    fn a_cancel_during_a_continuation_keeps_the_earlier_part() {
        let original = request();
        let mut continuation = Continuation::default();
        let _ = continuation.next(&original, part("first ", "pause_turn", 1));
        let cancelled = continuation.failed(LlmError::Cancelled {
            partial: Box::new(part("second", "", 0)),
        });
        let LlmError::Cancelled { partial } = cancelled else {
            panic!("{cancelled:?}")
        };
        assert_eq!(partial.message.text, "first second");
    }
}
