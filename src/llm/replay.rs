//! The replay provider (`--replay FILE`): answers every request from a cassette,
//! with no network. A request is matched by its place in the agent tree and its
//! turn ([`ChatRequest::place`]); recorded attempts at one place (a 529, then the
//! answer) are given in their recorded order. The recorded body goes through the
//! same SSE parser and decoder as a live stream, paced over the recorded duration so
//! progress shows as it did, and a cancel still gets through between events. A
//! request the cassette does not hold fails, naming what it expected instead.
//!
//! A replay is honest: a request whose prompts differ from the recorded one's, or
//! one of whose tool results failed where the recorded one succeeded (or the
//! reverse), is no longer the recorded run, and fails naming its place instead of
//! being answered as if it were ([`check`]); `lenient` lets such requests through,
//! for people editing cassettes.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use eventsource_stream::Eventsource;
use futures::StreamExt;
use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use crate::conversation::{AssistantTurn, Message};
use crate::error::{LlmError, ProviderError, StreamError, excerpt};
use crate::llm::anthropic::decoder::MessagesStreamDecoder;
use crate::llm::anthropic::pause::{Continuation, Next};
use crate::llm::assembler::DEFAULT_MAX_ANSWER_BYTES;
use crate::llm::cassette::{Exchange, Sent};
use crate::llm::openai::decoder::ChatStreamDecoder;
use crate::llm::sse::{Step, TurnDecoder, split_events};
use crate::llm::{ChatRequest, DeltaSink, Provider, anthropic, openai};

/// Events are never paced further apart than this, whatever was recorded.
const MAX_GAP: Duration = Duration::from_millis(250);

/// Answers from a cassette.
#[derive(Debug)]
pub struct ReplayProvider {
    /// Unplayed exchanges by place, in recorded order.
    pending: Mutex<HashMap<String, VecDeque<Exchange>>>,
    /// Every place in recorded order, to say what was expected.
    order: Vec<String>,
    /// Answers requests that differ from the recorded ones (`--replay-lenient`).
    lenient: bool,
}

impl ReplayProvider {
    /// A provider that plays `exchanges`, failing a request that differs from the
    /// recorded one.
    pub fn new(exchanges: Vec<Exchange>) -> Self {
        let order = exchanges.iter().map(|e| e.place.clone()).collect();
        let mut pending: HashMap<String, VecDeque<Exchange>> = HashMap::new();
        for exchange in exchanges {
            pending
                .entry(exchange.place.clone())
                .or_default()
                .push_back(exchange);
        }
        Self {
            pending: Mutex::new(pending),
            order,
            lenient: false,
        }
    }

    /// The same provider, answering requests that differ from the recorded ones too.
    pub fn lenient(mut self) -> Self {
        self.lenient = true;
        self
    }

    fn take(&self, request: &ChatRequest) -> Result<Exchange, ProviderError> {
        let mut pending = self
            .pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(exchange) = pending
            .get_mut(&request.place)
            .and_then(VecDeque::pop_front)
        {
            if let Some(recorded) = exchange.sent.as_ref().filter(|_| !self.lenient) {
                check(recorded, request).map_err(|divergence| {
                    ProviderError::Replay(format!(
                        "the run left the recording at {:?}: {divergence} (--replay-lenient plays on regardless)",
                        request.place
                    ))
                })?;
            }
            return Ok(exchange);
        }
        let unplayed: Vec<&str> = self
            .order
            .iter()
            .filter(|p| pending.get(*p).is_some_and(|q| !q.is_empty()))
            .map(String::as_str)
            .collect();
        let mut expected: Vec<&str> = Vec::new();
        for place in unplayed {
            if !expected.contains(&place) {
                expected.push(place);
            }
        }
        let expected = match expected.as_slice() {
            [] => "nothing more (every recorded request was played)".to_owned(),
            places => places.join(", "),
        };
        Err(ProviderError::Replay(format!(
            "the cassette holds no request at {:?}; sent {}; the cassette expected: {expected}",
            request.place,
            describe(request),
        )))
    }
}

/// How `request` differs from what the recording sent at its place, if it does: a
/// prompt (the task first), or a tool result that failed where the recorded one
/// succeeded (or the reverse). Tool results are compared call by call, so the
/// first request after a diverging call names it.
pub fn check(recorded: &Sent, request: &ChatRequest) -> Result<(), String> {
    let sent = Sent::of(request);
    for (i, (now, then)) in sent.prompts.iter().zip(&recorded.prompts).enumerate() {
        if now != then {
            let which = if i == 0 { "the task" } else { "a prompt" };
            return Err(format!(
                "{which} differs from the recording's: sent {:?}, recorded {:?}",
                head(now),
                head(then)
            ));
        }
    }
    if sent.prompts.len() != recorded.prompts.len() {
        return Err(format!(
            "{} prompts where the recording had {}",
            sent.prompts.len(),
            recorded.prompts.len()
        ));
    }
    for (now, then) in sent.results.iter().zip(&recorded.results) {
        if now.call != then.call {
            return Err(format!(
                "a result for call {:?} where the recording had one for {:?}",
                now.call, then.call
            ));
        }
        if now.error != then.error {
            let content = request
                .messages
                .iter()
                .find_map(|m| match m {
                    Message::Tool(r) if r.tool_call_id == now.call => Some(excerpt(&r.content)),
                    _ => None,
                })
                .unwrap_or_default();
            let (is, was) = if now.error {
                ("an error", "success")
            } else {
                ("a success", "an error")
            };
            return Err(format!(
                "the result of call {:?} is {is} where the recording had {was}: {content:?}",
                now.call
            ));
        }
    }
    if sent.results.len() != recorded.results.len() {
        return Err(format!(
            "{} tool results where the recording had {}",
            sent.results.len(),
            recorded.results.len()
        ));
    }
    Ok(())
}

/// A short account of a request: how many messages and how the last one starts.
fn describe(request: &ChatRequest) -> String {
    let last = match request.messages.last() {
        Some(Message::User { content }) => format!("user {:?}", head(content)),
        Some(Message::Tool(result)) => format!("tool result {:?}", head(&result.content)),
        Some(Message::Assistant(a)) => format!("assistant {:?}", head(&a.text)),
        Some(Message::System { content }) => format!("system {:?}", head(content)),
        None => "nothing".to_owned(),
    };
    format!("{} messages, the last {last}", request.messages.len())
}

fn head(text: &str) -> String {
    let mut head: String = text.chars().take(60).collect();
    if head.len() < text.len() {
        head.push('…');
    }
    head
}

async fn play<D: TurnDecoder>(
    exchange: &Exchange,
    mut decoder: D,
    sink: DeltaSink<'_>,
    cancel: &CancellationToken,
) -> Result<AssistantTurn, LlmError> {
    let body = Bytes::from(exchange.response.clone());
    let stream = futures::stream::iter([Ok::<_, std::convert::Infallible>(body)]);
    let events: Vec<_> = split_events(stream).eventsource().collect().await;
    let gap = u32::try_from(events.len().max(1))
        .map(|n| Duration::from_millis(exchange.duration_ms) / n)
        .unwrap_or_default()
        .min(MAX_GAP);
    for event in events {
        tokio::select! {
            biased;
            () = cancel.cancelled() => {
                return Err(LlmError::Cancelled { partial: Box::new(decoder.snapshot()) });
            }
            () = tokio::time::sleep(gap) => {}
        }
        let event = event.map_err(|e| StreamError::Malformed(e.to_string()))?;
        match decoder.on_event(&event.data, Some(sink))? {
            Step::Continue => {}
            Step::Done => break,
            Step::Error(e) => return Err(e.into()),
        }
    }
    Ok(decoder.into_turn()?)
}

impl ReplayProvider {
    /// One turn. Anthropic's paused turns were asked again, and recorded, at the
    /// same place: they are continued here as the live client did.
    async fn answer(
        &self,
        request: &ChatRequest,
        sink: DeltaSink<'_>,
        cancel: &CancellationToken,
    ) -> Result<AssistantTurn, LlmError> {
        let mut continuation = Continuation::default();
        let mut again = None;
        loop {
            let current = again.as_ref().unwrap_or(request);
            let exchange = self.take(current)?;
            let part = play_exchange(&exchange, current, sink, cancel)
                .await
                .map_err(|e| continuation.failed(e))?;
            if exchange.protocol != "anthropic" {
                return Ok(part);
            }
            match continuation.next(request, part)? {
                Next::Done(turn) => return Ok(turn),
                Next::Again(next) => again = Some(next),
            }
        }
    }
}

/// The recorded answer of `exchange` to `request`.
async fn play_exchange(
    exchange: &Exchange,
    request: &ChatRequest,
    sink: DeltaSink<'_>,
    cancel: &CancellationToken,
) -> Result<AssistantTurn, LlmError> {
    let anthropic = exchange.protocol == "anthropic";
    if !(200..300).contains(&exchange.status) {
        let json = serde_json::from_str(&exchange.response).unwrap_or_default();
        let (code, message) = if anthropic {
            anthropic::wire::error_body(&json)
        } else {
            openai::error_body(&json)
        };
        return Err(ProviderError::Status {
            status: exchange.status,
            message,
            code,
            retry_after: None,
            request_id: None,
        }
        .into());
    }
    // A recorded non-streaming answer is one JSON body.
    if exchange.response.trim_start().starts_with('{') {
        let body = exchange.response.as_bytes();
        return if anthropic {
            anthropic::message_turn(body)
        } else {
            openai::completion_turn(body, &request.call_id_seed())
        };
    }
    if anthropic {
        let decoder = MessagesStreamDecoder::new(DEFAULT_MAX_ANSWER_BYTES);
        play(exchange, decoder, sink, cancel).await
    } else {
        let decoder =
            ChatStreamDecoder::new(DEFAULT_MAX_ANSWER_BYTES).with_place(&request.call_id_seed());
        play(exchange, decoder, sink, cancel).await
    }
}

impl Provider for ReplayProvider {
    fn stream_turn<'a>(
        &'a self,
        request: &'a ChatRequest,
        sink: DeltaSink<'a>,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<AssistantTurn, LlmError>> {
        Box::pin(self.answer(request, sink, cancel))
    }

    fn complete<'a>(
        &'a self,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<AssistantTurn, LlmError>> {
        Box::pin(async move {
            let never = CancellationToken::new();
            self.answer(request, &|_| {}, &never).await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exchange(place: &str, protocol: &str, status: u16, response: &str) -> Exchange {
        Exchange {
            place: place.into(),
            protocol: protocol.into(),
            request: serde_json::Value::Null,
            sent: None,
            status,
            response: response.into(),
            duration_ms: 0,
        }
    }

    fn request(place: &str) -> ChatRequest {
        ChatRequest {
            model: "m".into(),
            messages: vec![Message::user("hi")],
            tools: Default::default(),
            max_tokens: None,
            place: place.into(),
        }
    }

    #[tokio::test]
    async fn recorded_plain_answers_and_errors_replay_in_order_at_their_place() {
        let replay = ReplayProvider::new(vec![
            exchange(
                "a/turn 1",
                "anthropic",
                529,
                r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
            ),
            exchange(
                "a/turn 1",
                "openai",
                200,
                r#"{"choices":[{"message":{"tool_calls":[{"function":{"name":"Ls","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}"#,
            ),
        ]);
        let first = replay.complete(&request("a/turn 1")).await.unwrap_err();
        assert_eq!(first.to_string(), "HTTP 529: Overloaded");
        let turn = replay.complete(&request("a/turn 1")).await.unwrap();
        let again = ReplayProvider::new(vec![exchange(
            "a/turn 1",
            "openai",
            200,
            r#"{"choices":[{"message":{"tool_calls":[{"function":{"name":"Ls","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}"#,
        )]);
        let same = again.complete(&request("a/turn 1")).await.unwrap();
        // A call the server gave no id gets the same made-up one every time.
        assert_eq!(turn.message.tool_calls[0].id, same.message.tool_calls[0].id);
        assert!(turn.message.tool_calls[0].id.starts_with("call_"));
        // A later run of the same session reaches "turn 1" again, with a longer
        // conversation: its made-up ids differ.
        let later = ReplayProvider::new(vec![exchange(
            "a/turn 1",
            "openai",
            200,
            r#"{"choices":[{"message":{"tool_calls":[{"function":{"name":"Ls","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}"#,
        )]);
        let mut longer = request("a/turn 1");
        longer.messages.push(Message::user("and again"));
        let other = later.complete(&longer).await.unwrap();
        assert_ne!(
            other.message.tool_calls[0].id,
            same.message.tool_calls[0].id
        );
        let gone = replay.complete(&request("a/turn 1")).await.unwrap_err();
        assert_eq!(
            gone.to_string(),
            "replay: the cassette holds no request at \"a/turn 1\"; sent 1 messages, the last user \"hi\"; the cassette expected: nothing more (every recorded request was played)"
        );
    }
    fn with_result(place: &str, prompt: &str, result: Option<(&str, bool)>) -> ChatRequest {
        let mut request = request(place);
        request.messages = vec![Message::system("You help."), Message::user(prompt)];
        if let Some((id, is_error)) = result {
            request
                .messages
                .push(Message::Assistant(crate::conversation::AssistantMessage {
                    tool_calls: vec![crate::conversation::ToolCall {
                        id: id.into(),
                        name: "Bash".into(),
                        arguments: "{}".into(),
                    }],
                    ..Default::default()
                }));
            request
                .messages
                .push(Message::Tool(crate::conversation::ToolResult {
                    tool_call_id: id.into(),
                    content: if is_error {
                        "exit 101: tests failed"
                    } else {
                        "ok"
                    }
                    .into(),
                    is_error,
                }));
        }
        request
    }

    const DONE: &str =
        r#"{"choices":[{"message":{"content":"All tests pass."},"finish_reason":"stop"}]}"#;

    #[tokio::test]
    async fn a_request_that_left_the_recording_fails_naming_its_place_unless_lenient() {
        let recorded = with_result("lead/turn 2", "Fix the bug.", Some(("c1", false)));
        let mut line = exchange("lead/turn 2", "openai", 200, DONE);
        line.sent = Some(Sent::of(&recorded));
        // The same run replays.
        let replay = ReplayProvider::new(vec![line.clone()]);
        assert_eq!(
            replay.complete(&recorded).await.unwrap().message.text,
            "All tests pass."
        );
        // Another task.
        let replay = ReplayProvider::new(vec![line.clone()]);
        let other = with_result("lead/turn 2", "Delete the tests.", Some(("c1", false)));
        assert_eq!(
            replay.complete(&other).await.unwrap_err().to_string(),
            "replay: the run left the recording at \"lead/turn 2\": the task differs from the recording's: sent \"Delete the tests.\", recorded \"Fix the bug.\" (--replay-lenient plays on regardless)"
        );
        // The tool call failed this time.
        let replay = ReplayProvider::new(vec![line.clone()]);
        let failed = with_result("lead/turn 2", "Fix the bug.", Some(("c1", true)));
        assert_eq!(
            replay.complete(&failed).await.unwrap_err().to_string(),
            "replay: the run left the recording at \"lead/turn 2\": the result of call \"c1\" is an error where the recording had success: \"exit 101: tests failed\" (--replay-lenient plays on regardless)"
        );
        // Lenient: whatever was sent, the recorded answer.
        let replay = ReplayProvider::new(vec![line]).lenient();
        assert_eq!(
            replay.complete(&failed).await.unwrap().message.text,
            "All tests pass."
        );
    }

    #[test]
    fn every_kind_of_divergence_is_named() {
        let recorded = Sent::of(&with_result("p", "Fix it.", Some(("c1", true))));
        let check = |request: &ChatRequest| check(&recorded, request).unwrap_err();
        assert_eq!(
            check(&with_result("p", "Fix it.", Some(("c1", false)))),
            "the result of call \"c1\" is a success where the recording had an error: \"ok\""
        );
        assert_eq!(
            check(&with_result("p", "Fix it.", Some(("c2", true)))),
            "a result for call \"c2\" where the recording had one for \"c1\""
        );
        assert_eq!(
            check(&with_result("p", "Fix it.", None)),
            "0 tool results where the recording had 1"
        );
        let mut followed = with_result("p", "Fix it.", Some(("c1", true)));
        followed.messages.push(Message::user("And add a test."));
        assert_eq!(check(&followed), "2 prompts where the recording had 1");
        assert!(super::check(&recorded, &with_result("p", "Fix it.", Some(("c1", true)))).is_ok());
    }

    #[tokio::test]
    async fn a_paused_anthropic_turn_replays_as_the_client_continued_it() {
        let stream = |text: &str, stop: &str| {
            [
                r#"{"type":"message_start","message":{"id":"m","model":"claude","content":[],"usage":{"input_tokens":5,"output_tokens":1}}}"#.to_owned(),
                r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#.to_owned(),
                serde_json::json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":text}}).to_string(),
                serde_json::json!({"type":"message_delta","delta":{"stop_reason":stop}}).to_string(),
                r#"{"type":"message_stop"}"#.to_owned(),
            ]
            .iter()
            .map(|data| format!("data: {data}\n\n"))
            .collect::<String>()
        };
        let replay = ReplayProvider::new(vec![
            exchange(
                "a/turn 1",
                "anthropic",
                200,
                &stream("Searching. ", "pause_turn"),
            ),
            exchange(
                "a/turn 1",
                "anthropic",
                200,
                &stream("Found it.", "end_turn"),
            ),
        ]);
        let never = CancellationToken::new();
        let turn = replay
            .stream_turn(&request("a/turn 1"), &|_| {}, &never)
            .await
            .unwrap();
        assert_eq!(turn.message.text, "Searching. Found it.");
        assert_eq!(turn.finish, Some(crate::conversation::FinishReason::Stop));
    }
}
