//! The replay provider (`--replay FILE`): answers every request from a cassette,
//! with no network. A request is matched by its place in the agent tree and its
//! turn ([`ChatRequest::place`]); recorded attempts at one place (a 529, then the
//! answer) are given in their recorded order. The recorded body goes through the
//! same SSE parser and decoder as a live stream, paced over the recorded duration so
//! progress shows as it did, and a cancel still gets through between events. A
//! request the cassette does not hold fails, naming what it expected instead.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use eventsource_stream::Eventsource;
use futures::StreamExt;
use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use crate::conversation::{AssistantTurn, Message};
use crate::error::{LlmError, ProviderError, StreamError};
use crate::llm::anthropic::decoder::MessagesStreamDecoder;
use crate::llm::assembler::DEFAULT_MAX_ANSWER_BYTES;
use crate::llm::cassette::Exchange;
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
}

impl ReplayProvider {
    /// A provider that plays `exchanges`.
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
        }
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
    async fn answer(
        &self,
        request: &ChatRequest,
        sink: DeltaSink<'_>,
        cancel: &CancellationToken,
    ) -> Result<AssistantTurn, LlmError> {
        let exchange = self.take(request)?;
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
            play(&exchange, decoder, sink, cancel).await
        } else {
            let decoder = ChatStreamDecoder::new(DEFAULT_MAX_ANSWER_BYTES)
                .with_place(&request.call_id_seed());
            play(&exchange, decoder, sink, cancel).await
        }
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
            status,
            response: response.into(),
            duration_ms: 0,
        }
    }

    fn request(place: &str) -> ChatRequest {
        ChatRequest {
            model: "m".into(),
            messages: vec![Message::user("hi")],
            tools: vec![],
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
}
