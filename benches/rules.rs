//! Permission rules against long command lines: a `*` pattern (the form a
//! repository's own deny rule may take, honoured without trust) with 1, 4 and
//! 12 stars that almost matches commands of 1 KB and 100 KB, and the Bash
//! verdict of a line with wrappers to look into.
//!
//! Run with `cargo bench --bench rules`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use orchestrate::tools::rules::{Rule, Rules};

fn stars(c: &mut Criterion) {
    let mut group = c.benchmark_group("rule_stars");
    for len in [1_000usize, 100_000] {
        let command = format!("echo {}", "a".repeat(len));
        for count in [1usize, 4, 12] {
            // Almost a match: every star has text to take, the end never comes.
            let rule = Rule::parse(&format!("Bash(echo {}b)", "a*".repeat(count))).unwrap();
            let pattern = rule.pattern.unwrap();
            group.throughput(Throughput::Bytes(command.len() as u64));
            group.bench_with_input(
                BenchmarkId::new(format!("{count}_stars"), len),
                &command,
                |b, command| b.iter(|| pattern.matches(command)),
            );
        }
    }
    group.finish();
}

fn verdict(c: &mut Criterion) {
    let rules = Rules {
        allow: vec![Rule::parse("Bash(cargo test:*)").unwrap()],
        deny: vec![
            Rule::parse("Bash(rm:*)").unwrap(),
            Rule::parse("Bash(git push:*)").unwrap(),
        ],
        ..Rules::default()
    };
    let line = serde_json::json!({
        "command": "cargo test 2>&1 | tee log && find . -name '*.o' -exec timeout 5 nice -n 3 rm -f {} + ; bash -c 'cargo test -q'"
    });
    c.bench_function("bash_verdict", |b| b.iter(|| rules.verdict("Bash", &line)));
}

criterion_group!(benches, stars, verdict);
criterion_main!(benches);
