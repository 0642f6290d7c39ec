//! Byte-stream preparation for the SSE parser (eventsource-stream).
//!
//! The parser keeps unparsed input in one `String` and, for every line it consumes,
//! moves the rest of that buffer to the front: fed a large chunk (a burst from a fast
//! local server, a proxy that buffers, a replayed body) it goes quadratic. Cutting the
//! byte stream at line ends first, with zero-copy `Bytes` slices, keeps every feed to
//! one line and the parse linear.

use bytes::Bytes;
use futures::{Stream, StreamExt};

/// Re-chunks `inner` so that every item ends at a `\n` (or is the stream's tail).
pub(crate) fn split_lines<S, E>(
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
            let piece = match memchr::memchr(b'\n', &pending) {
                Some(end) => pending.split_to(end + 1),
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
    fn chunks_are_cut_at_line_ends_and_nothing_is_lost() {
        let input = vec![
            Ok::<_, ()>(Bytes::from_static(b"data: a\n\ndata: b")),
            Ok(Bytes::from_static(b"c\n\n")),
        ];
        let pieces: Vec<Bytes> = futures::executor::block_on(
            split_lines(futures::stream::iter(input))
                .map(Result::unwrap)
                .collect(),
        );
        let expected: Vec<&[u8]> = vec![b"data: a\n", b"\n", b"data: b", b"c\n", b"\n"];
        assert_eq!(pieces, expected);
    }
}
