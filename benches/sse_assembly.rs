//! SSE assembly throughput over the largest OpenAI-family fixtures and the largest
//! Anthropic one: the same SSE parser and decoders the clients run, on bytes
//! already in memory.
//!
//! Run with `cargo bench --bench sse_assembly`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

// The allocator the orchestrate binary ships with, so the numbers are the product's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use orchestrate::llm::anthropic::decoder::decode_sse_body as decode_anthropic;
use orchestrate::llm::openai::decoder::decode_sse_body;

const FIXTURES: [&str; 3] = [
    "groq-reasoning-field",
    "openai-text-obfuscation-usage",
    "deepseek-reasoning-content",
];

fn capture(name: &str) -> bytes::Bytes {
    let path = format!(
        "{}/tests/fixtures/sse/{name}.sse",
        env!("CARGO_MANIFEST_DIR")
    );
    bytes::Bytes::from(std::fs::read(path).unwrap())
}

fn assembly(c: &mut Criterion) {
    let mut group = c.benchmark_group("sse_assembly");
    for name in FIXTURES {
        let body = capture(name);
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_function(name, |b| {
            b.iter(|| {
                let decoder =
                    futures::executor::block_on(decode_sse_body(body.clone(), 8 << 20)).unwrap();
                decoder.into_turn().unwrap()
            });
        });
    }
    let name = "anthropic-server-tool-citations";
    let body = capture(name);
    group.throughput(Throughput::Bytes(body.len() as u64));
    group.bench_function(name, |b| {
        b.iter(|| {
            let decoder =
                futures::executor::block_on(decode_anthropic(body.clone(), 8 << 20)).unwrap();
            decoder.into_turn().unwrap()
        });
    });
    group.finish();
}

criterion_group!(benches, assembly);
criterion_main!(benches);
