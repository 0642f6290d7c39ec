//! The SSE splitter, fed the input cut into chunks at the places its first bytes
//! say: it must never panic, every piece it gives is a whole event (or the last,
//! closed for it), and joined they are the input.
#![no_main]

use bytes::Bytes;
use futures::StreamExt;
use libfuzzer_sys::fuzz_target;
use orchestrate::llm::sse::split_events_within;

fuzz_target!(|data: &[u8]| {
    let (cuts, body) = data.split_at(data.len().min(8));
    let mut chunks = Vec::new();
    let mut at = 0;
    for cut in cuts.iter().cycle().take(body.len()) {
        if at >= body.len() {
            break;
        }
        let end = (at + usize::from(*cut).max(1)).min(body.len());
        chunks.push(Ok::<_, ()>(Bytes::copy_from_slice(&body[at..end])));
        at = end;
    }
    if at < body.len() {
        chunks.push(Ok(Bytes::copy_from_slice(&body[at..])));
    }
    let pieces: Vec<Result<Bytes, _>> = futures::executor::block_on(
        split_events_within(futures::stream::iter(chunks), 1 << 16).collect(),
    );
    if pieces.iter().all(Result::is_ok) {
        let joined: Vec<u8> = pieces.into_iter().flat_map(|p| p.unwrap().to_vec()).collect();
        assert!(joined.starts_with(body), "the splitter lost or changed bytes");
        assert!(joined.len() <= body.len() + 2, "the splitter added more than a closing blank line");
    }
});
