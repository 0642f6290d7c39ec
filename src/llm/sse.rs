//! Byte-stream preparation for the SSE parser (eventsource-stream).
//!
//! The parser keeps unparsed input in one `String` and, for every line it consumes,
//! moves the rest of that buffer to the front: fed a large chunk (a burst from a fast
//! local server, a proxy that buffers, a replayed body) it goes quadratic. Cutting the
//! byte stream at event boundaries first, with zero-copy `Bytes` slices, keeps every
//! feed to one event and the parse linear.
//!
//! Also here: what a provider's stream decoder looks like to the shared HTTP loop
//! ([`TurnDecoder`]), and decoding a whole body held in memory (conformance, benches).

use bytes::Bytes;
use eventsource_stream::Eventsource;
use futures::{Stream, StreamExt};

use crate::conversation::AssistantTurn;
use crate::error::{ProviderError, StreamError};
use crate::llm::DeltaSink;

/// What the caller does after an event.
#[derive(Debug)]
pub enum Step {
    /// Keep reading.
    Continue,
    /// The stream said it is complete (`[DONE]`, `message_stop`).
    Done,
    /// The server sent an in-band error.
    Error(ProviderError),
}

/// Decodes one provider's SSE stream into one assistant turn.
pub trait TurnDecoder {
    /// Feeds one event's `data`; deltas worth showing go to `sink`.
    fn on_event(&mut self, data: &str, sink: Option<DeltaSink<'_>>) -> Result<Step, StreamError>;
    /// What has arrived so far (for a cancelled turn).
    fn snapshot(&self) -> AssistantTurn;
    /// The assembled turn once the stream ended.
    fn into_turn(self) -> Result<AssistantTurn, StreamError>;
}

/// Feeds a whole SSE body held in memory through the same SSE parser the clients
/// use, without stopping at in-band errors.
pub(crate) async fn decode_body<D: TurnDecoder>(
    body: Bytes,
    mut decoder: D,
) -> Result<D, StreamError> {
    let stream = futures::stream::iter([Ok::<_, std::convert::Infallible>(body)]);
    let mut events = split_events(stream).eventsource();
    while let Some(event) = events.next().await {
        let event = event.map_err(|e| StreamError::Malformed(e.to_string()))?;
        decoder.on_event(&event.data, None)?;
    }
    Ok(decoder)
}

/// Where the first event of `bytes` ends: just past the blank line (`\n\n` or
/// `\n\r\n`) that closes it.
fn event_end(bytes: &[u8]) -> Option<usize> {
    memchr::memchr_iter(b'\n', bytes).find_map(|i| match bytes.get(i + 1..) {
        Some([b'\n', ..]) => Some(i + 2),
        Some([b'\r', b'\n', ..]) => Some(i + 3),
        _ => None,
    })
}

/// Re-chunks `inner` so that every item ends at an event boundary: one event per
/// item. A stream whose last event is not closed by a blank line (Anthropic's SDK
/// fixtures end that way) gets the blank line added, so that event still counts.
pub(crate) fn split_events<S, E>(
    inner: S,
) -> std::pin::Pin<Box<impl Stream<Item = Result<Bytes, E>>>>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
{
    // `open`: bytes of an event not yet closed by a blank line have gone out.
    Box::pin(futures::stream::unfold(
        (inner, Bytes::new(), false),
        |(mut inner, mut pending, mut open)| async move {
            if pending.is_empty() {
                match inner.next().await {
                    Some(Ok(chunk)) => pending = chunk,
                    Some(Err(e)) => return Some((Err(e), (inner, pending, open))),
                    None if open => {
                        return Some((Ok(Bytes::from_static(b"\n\n")), (inner, pending, false)));
                    }
                    None => return None,
                }
            }
            let piece = match event_end(&pending) {
                Some(end) => {
                    open = false;
                    pending.split_to(end)
                }
                None => {
                    open = open || !pending.is_empty();
                    std::mem::take(&mut pending)
                }
            };
            Some((Ok(piece), (inner, pending, open)))
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_are_cut_at_event_ends_and_nothing_is_lost() {
        let input = vec![
            Ok::<_, ()>(Bytes::from_static(b"data: a\n\ndata: b")),
            Ok(Bytes::from_static(b"c\n\n")),
        ];
        let pieces: Vec<Bytes> = futures::executor::block_on(
            split_events(futures::stream::iter(input))
                .map(Result::unwrap)
                .collect(),
        );
        let expected: Vec<&[u8]> = vec![b"data: a\n\n", b"data: b", b"c\n\n"];
        assert_eq!(pieces, expected);
    }

    #[test]
    fn an_unterminated_last_event_is_closed() {
        let input = vec![Ok::<_, ()>(Bytes::from_static(b"data: a\n\ndata: b"))];
        let pieces: Vec<Bytes> = futures::executor::block_on(
            split_events(futures::stream::iter(input))
                .map(Result::unwrap)
                .collect(),
        );
        let expected: Vec<&[u8]> = vec![b"data: a\n\n", b"data: b", b"\n\n"];
        assert_eq!(pieces, expected);
    }

    #[test]
    fn events_end_after_a_blank_line_in_either_line_ending() {
        assert_eq!(event_end(b"data: x\n\ndata: y\n\n"), Some(9));
        assert_eq!(event_end(b"data: x\r\n\r\ndata: y"), Some(11));
        assert_eq!(event_end(b"event: e\ndata: x\n\n"), Some(18));
        assert_eq!(event_end(b"data: x\n"), None);
    }
}
