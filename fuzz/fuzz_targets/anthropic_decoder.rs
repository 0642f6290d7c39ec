//! The Anthropic Messages decoder behind the clients' SSE parser: any bytes give a
//! turn or an error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use orchestrate::llm::anthropic::decoder::decode_sse_body;

fuzz_target!(|data: &[u8]| {
    let body = bytes::Bytes::copy_from_slice(data);
    if let Ok(decoder) = futures::executor::block_on(decode_sse_body(body, 1 << 16)) {
        let _ = decoder.into_turn();
    }
});
