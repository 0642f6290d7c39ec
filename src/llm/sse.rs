//! Byte-stream preparation for the SSE parser (eventsource-stream).
//!
//! The parser keeps unparsed input in one `String` and, for every line it consumes,
//! moves the rest of that buffer to the front: fed a large chunk (a burst from a fast
//! local server, a proxy that buffers, a replayed body) it goes quadratic. Cutting the
//! byte stream at event boundaries first, with zero-copy `Bytes` slices, keeps every
//! feed to one event and the parse linear.
//!
//! The cut is also where one event's size is bounded: an event is held until its
//! blank line arrives, so a server that never sends one would have it buffered
//! without end. An event that grows past the cap (the answer's, 8 MiB by default)
//! is an error as soon as it does, before any more of it is read.
//!
//! Also here: what a provider's stream decoder looks like to the shared HTTP loop
//! ([`TurnDecoder`]), and decoding a whole body held in memory (conformance, benches).

use bytes::{Bytes, BytesMut};
use eventsource_stream::Eventsource;
use futures::{Stream, StreamExt};

use crate::conversation::AssistantTurn;
use crate::error::{ProviderError, StreamError};
use crate::llm::DeltaSink;
use crate::llm::assembler::DEFAULT_MAX_ANSWER_BYTES;

/// A failure of the byte stream cut into events.
#[derive(Debug, thiserror::Error)]
pub enum SplitError<E> {
    /// The underlying stream failed.
    #[error("{0}")]
    Inner(E),
    /// One event grew past the cap before its end.
    #[error("one stream event exceeded the {limit}-byte cap")]
    TooLarge {
        /// The cap, in bytes.
        limit: usize,
    },
}

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
/// `\n\r\n`) that closes it. `after_newline`: the bytes before these (already
/// passed on) ended a line, so a blank line may start right here.
fn event_end(bytes: &[u8], after_newline: bool) -> Option<usize> {
    if after_newline {
        match bytes {
            [b'\n', ..] => return Some(1),
            [b'\r', b'\n', ..] => return Some(2),
            _ => {}
        }
    }
    memchr::memchr_iter(b'\n', bytes).find_map(|i| match bytes.get(i + 1..) {
        Some([b'\n', ..]) => Some(i + 2),
        Some([b'\r', b'\n', ..]) => Some(i + 3),
        _ => None,
    })
}

/// [`split_events_within`] with the default cap on one event.
pub(crate) fn split_events<S, E>(
    inner: S,
) -> std::pin::Pin<Box<impl Stream<Item = Result<Bytes, SplitError<E>>>>>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
{
    split_events_within(inner, DEFAULT_MAX_ANSWER_BYTES)
}

/// Where a stream being cut into events stands.
struct Cut<S> {
    inner: S,
    /// Bytes received and not looked at yet.
    pending: Bytes,
    /// The event begun and not yet closed by its blank line.
    open: BytesMut,
    /// The last byte taken (into `open`, or passed on) ended a line.
    after_newline: bool,
    /// The stream failed or ended; nothing more comes.
    done: bool,
}

/// Re-chunks `inner` so that every item is one whole event, ending with its blank
/// line: the parser then sees each event once, however it was cut on the wire. An
/// event is held until it is whole, and one that grows past `limit` bytes is an
/// error ([`SplitError::TooLarge`]) then, the stream ending there. A stream whose
/// last event is not closed by a blank line (Anthropic's SDK fixtures end that way)
/// gets the blank line added, so that event still counts.
pub fn split_events_within<S, E>(
    inner: S,
    limit: usize,
) -> std::pin::Pin<Box<impl Stream<Item = Result<Bytes, SplitError<E>>>>>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
{
    let start = Cut {
        inner,
        pending: Bytes::new(),
        open: BytesMut::new(),
        after_newline: false,
        done: false,
    };
    Box::pin(futures::stream::unfold(start, move |mut cut| async move {
        loop {
            if cut.done {
                return None;
            }
            if cut.pending.is_empty() {
                match cut.inner.next().await {
                    Some(Ok(chunk)) => cut.pending = chunk,
                    Some(Err(e)) => {
                        cut.done = true;
                        return Some((Err(SplitError::Inner(e)), cut));
                    }
                    None => {
                        cut.done = true;
                        if cut.open.is_empty() {
                            return None;
                        }
                        cut.open.extend_from_slice(b"\n\n");
                        let last = cut.open.split().freeze();
                        return Some((Ok(last), cut));
                    }
                }
                continue;
            }
            let end = event_end(&cut.pending, cut.after_newline);
            let piece = match end {
                Some(end) => cut.pending.split_to(end),
                None => std::mem::take(&mut cut.pending),
            };
            if cut.open.len() + piece.len() > limit {
                cut.done = true;
                return Some((Err(SplitError::TooLarge { limit }), cut));
            }
            cut.after_newline = piece.ends_with(b"\n");
            match end {
                // Whole in one chunk, as most events arrive: passed on uncopied.
                Some(_) if cut.open.is_empty() => return Some((Ok(piece), cut)),
                Some(_) => {
                    cut.open.extend_from_slice(&piece);
                    let event = cut.open.split().freeze();
                    return Some((Ok(event), cut));
                }
                None => cut.open.extend_from_slice(&piece),
            }
        }
    }))
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
        let expected: Vec<&[u8]> = vec![b"data: a\n\n", b"data: bc\n\n"];
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
        let expected: Vec<&[u8]> = vec![b"data: a\n\n", b"data: b\n\n"];
        assert_eq!(pieces, expected);
    }

    #[test]
    fn an_endless_event_is_an_error_once_it_passes_the_cap() {
        // A server that never ends its event: 1 MiB at a time, forever.
        let chunk = Bytes::from(vec![b'x'; 1 << 20]);
        let mut first = true;
        let endless = futures::stream::repeat_with(move || {
            let piece = if first {
                Bytes::from_static(b"data: ")
            } else {
                chunk.clone()
            };
            first = false;
            Ok::<_, std::convert::Infallible>(piece)
        });
        let items: Vec<Result<Bytes, SplitError<_>>> =
            futures::executor::block_on(split_events_within(endless, 8 << 20).collect());
        // Ends at all: the ninth mebibyte is refused, not held.
        assert!(
            matches!(&items[..], [Err(SplitError::TooLarge { limit })] if *limit == 8 << 20),
            "{:?}",
            items
                .iter()
                .map(|i| i.as_ref().map(Bytes::len))
                .collect::<Vec<_>>()
        );
        assert_eq!(
            SplitError::<std::convert::Infallible>::TooLarge { limit: 8 << 20 }.to_string(),
            "one stream event exceeded the 8388608-byte cap"
        );
    }

    #[test]
    fn the_cap_counts_one_event_not_the_stream() {
        let event = Bytes::from(format!("data: {}\n\n", "y".repeat(90)));
        let many = futures::stream::iter((0..100).map(|_| Ok::<_, ()>(event.clone())));
        let pieces: Vec<Bytes> = futures::executor::block_on(
            split_events_within(many, 100).map(Result::unwrap).collect(),
        );
        assert_eq!(pieces.len(), 100);
        // A blank line split across two chunks closes the event.
        let split = vec![
            Ok::<_, ()>(Bytes::from_static(b"data: a\n")),
            Ok(Bytes::from_static(b"\ndata: b\n\n")),
        ];
        let pieces: Vec<Bytes> = futures::executor::block_on(
            split_events_within(futures::stream::iter(split), 12)
                .map(Result::unwrap)
                .collect(),
        );
        let expected: Vec<&[u8]> = vec![b"data: a\n\n", b"data: b\n\n"];
        assert_eq!(pieces, expected);
    }

    #[test]
    fn events_end_after_a_blank_line_in_either_line_ending() {
        assert_eq!(event_end(b"data: x\n\ndata: y\n\n", false), Some(9));
        assert_eq!(event_end(b"data: x\r\n\r\ndata: y", false), Some(11));
        assert_eq!(event_end(b"event: e\ndata: x\n\n", false), Some(18));
        assert_eq!(event_end(b"data: x\n", false), None);
        // A blank line split across two chunks.
        assert_eq!(event_end(b"\ndata: y", true), Some(1));
        assert_eq!(event_end(b"\r\ndata: y", true), Some(2));
        assert_eq!(event_end(b"data: y", true), None);
    }

    mod properties {
        use proptest::prelude::*;

        use super::*;

        proptest! {
            /// However the wire cuts a stream, the events come out whole and the
            /// same: the bytes of every piece, joined, are the stream's bytes.
            #[test]
            fn any_cutting_of_a_stream_gives_the_same_whole_events(
                events in proptest::collection::vec("[a-z: ]{0,12}", 1..8),
                cuts in proptest::collection::vec(1usize..7, 0..40),
            ) {
                let stream: String = events.iter().map(|e| format!("data: {e}\n\n")).collect();
                let bytes = stream.as_bytes();
                let mut chunks = Vec::new();
                let mut at = 0;
                for cut in cuts.iter().cycle().take(bytes.len()) {
                    if at >= bytes.len() {
                        break;
                    }
                    let end = (at + cut).min(bytes.len());
                    chunks.push(Ok::<_, ()>(Bytes::copy_from_slice(&bytes[at..end])));
                    at = end;
                }
                if at < bytes.len() {
                    chunks.push(Ok(Bytes::copy_from_slice(&bytes[at..])));
                }
                let pieces: Vec<Bytes> = futures::executor::block_on(
                    split_events_within(futures::stream::iter(chunks), 1 << 20)
                        .map(Result::unwrap)
                        .collect(),
                );
                prop_assert_eq!(pieces.len(), events.len());
                prop_assert!(pieces.iter().all(|p| p.ends_with(b"\n\n")));
                prop_assert_eq!(pieces.concat(), bytes);
            }

            /// Whatever bytes arrive, the decoders answer with a turn or an error,
            /// never a panic.
            #[test]
            fn the_decoders_take_any_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
                let body = Bytes::from(bytes);
                let _ = futures::executor::block_on(crate::llm::openai::decoder::decode_sse_body(body.clone(), 1 << 20));
                let _ = futures::executor::block_on(crate::llm::anthropic::decoder::decode_sse_body(body, 1 << 20));
            }
        }
    }
}
