//! What a session does with one completed model turn, decided by its finish reason
//! alone (never by another model call). Pure code.

use crate::conversation::{AssistantTurn, FinishReason};
use crate::error::StreamError;

/// The next step after a model turn.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Run the turn's tool calls, then ask the model again.
    RunTools,
    /// The run is done; the answer is the turn's text (or refusal).
    Finish {
        /// The answer was cut by the output-token limit.
        truncated: bool,
    },
    /// The turn is unusable.
    Fail(StreamError),
}

/// Decides what a turn means.
pub(crate) fn decide(turn: &AssistantTurn) -> Decision {
    let m = &turn.message;
    let answered = !m.answer().is_empty();
    match &turn.finish {
        Some(FinishReason::ContentFilter) => Decision::Fail(StreamError::Filtered),
        _ if !m.tool_calls.is_empty() => Decision::RunTools,
        Some(FinishReason::Length) if answered => Decision::Finish { truncated: true },
        Some(FinishReason::Length) => Decision::Fail(StreamError::LimitBeforeOutput),
        Some(FinishReason::Stop | FinishReason::ToolCalls | FinishReason::Other(_)) | None
            if answered =>
        {
            Decision::Finish { truncated: false }
        }
        Some(FinishReason::Stop | FinishReason::ToolCalls | FinishReason::Other(_)) | None => {
            Decision::Fail(StreamError::Empty)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conversation::{AssistantMessage, ToolCall};

    fn turn(text: &str, calls: usize, finish: Option<FinishReason>) -> AssistantTurn {
        AssistantTurn {
            message: AssistantMessage {
                text: text.into(),
                tool_calls: (0..calls)
                    .map(|i| ToolCall {
                        id: format!("c{i}"),
                        name: "t".into(),
                        arguments: "{}".into(),
                    })
                    .collect(),
                ..AssistantMessage::default()
            },
            finish,
            ..AssistantTurn::default()
        }
    }

    #[test]
    fn tool_calls_run_whatever_the_finish_reason_says() {
        assert_eq!(
            decide(&turn("", 1, Some(FinishReason::ToolCalls))),
            Decision::RunTools
        );
        assert_eq!(
            decide(&turn("", 1, Some(FinishReason::Stop))),
            Decision::RunTools
        );
        assert_eq!(
            decide(&turn("", 1, Some(FinishReason::Length))),
            Decision::RunTools
        );
    }

    #[test]
    fn a_final_answer_finishes_and_a_cut_one_is_flagged() {
        assert_eq!(
            decide(&turn("hi", 0, Some(FinishReason::Stop))),
            Decision::Finish { truncated: false }
        );
        assert_eq!(
            decide(&turn("hi", 0, None)),
            Decision::Finish { truncated: false }
        );
        assert_eq!(
            decide(&turn("hi", 0, Some(FinishReason::Length))),
            Decision::Finish { truncated: true }
        );
    }

    #[test]
    fn unusable_turns_fail_with_their_reason() {
        assert_eq!(
            decide(&turn("", 0, Some(FinishReason::Stop))),
            Decision::Fail(StreamError::Empty)
        );
        assert_eq!(
            decide(&turn("", 0, Some(FinishReason::Length))),
            Decision::Fail(StreamError::LimitBeforeOutput)
        );
        assert_eq!(
            decide(&turn("text", 0, Some(FinishReason::ContentFilter))),
            Decision::Fail(StreamError::Filtered)
        );
    }

    #[test]
    fn a_refusal_is_an_answer() {
        let mut t = turn("", 0, Some(FinishReason::Stop));
        t.message.refusal = Some("I can't help with that.".into());
        assert_eq!(decide(&t), Decision::Finish { truncated: false });
    }
}
