//! Byte-stream preparation for the SSE parser (eventsource-stream).
//!
//! The parser keeps unparsed input in one `String` and, for every line it consumes,
//! moves the rest of that buffer to the front: fed a large chunk (a burst from a fast
//! local server, a proxy that buffers, a replayed body) it goes quadratic. Cutting the
//! byte stream at event boundaries first, with zero-copy `Bytes` slices, keeps every
//! feed to one event and the parse linear.

use bytes::Bytes;
use futures::{Stream, StreamExt};

/// Where the first event of `bytes` ends: just past the blank line (`\n\n` or
/// `\n\r\n`) that closes it.
fn event_end(bytes: &[u8]) -> Option<usize> {
    memchr::memchr_iter(b'\n', bytes).find_map(|i| match bytes.get(i + 1..) {
        Some([b'\n', ..]) => Some(i + 2),
        Some([b'\r', b'\n', ..]) => Some(i + 3),
        _ => None,
    })
}

/// Re-chunks `inner` so that every item ends at an event boundary (or is the
/// stream's tail): one event per item.
pub(crate) fn split_events<S, E>(
    inner: S,
) -> std::pin::Pin<Box<impl Stream<Item = Result<Bytes, E>>>>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
{
    Box::pin(futures::stream::unfold(
        (inner, Bytes::new()),
        |(mut inner, mut pending)| async move {
            if pending.is_empty() {
                match inner.next().await? {
                    Ok(chunk) => pending = chunk,
                    Err(e) => return Some((Err(e), (inner, pending))),
                }
            }
            let piece = match event_end(&pending) {
                Some(end) => pending.split_to(end),
                None => std::mem::take(&mut pending),
            };
            Some((Ok(piece), (inner, pending)))
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
    fn events_end_after_a_blank_line_in_either_line_ending() {
        assert_eq!(event_end(b"data: x\n\ndata: y\n\n"), Some(9));
        assert_eq!(event_end(b"data: x\r\n\r\ndata: y"), Some(11));
        assert_eq!(event_end(b"event: e\ndata: x\n\n"), Some(18));
        assert_eq!(event_end(b"data: x\n"), None);
    }
}
