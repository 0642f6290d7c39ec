#!/usr/bin/env bash
# Runs every fuzz target for SECONDS (default 600) each, two at a time, seeded from
# the project's own inputs: the real SSE captures, the built-in roles, and the small
# seeds here. Needs a nightly toolchain and cargo-fuzz (`cargo install cargo-fuzz`).
# Findings go to artifacts/<target>/; a target that finds a crash makes this fail.
set -euo pipefail
cd "$(dirname "$0")"
seconds="${1:-600}"
cargo +nightly fuzz build
seeds() {
    case "$1" in
        sse_split | openai_decoder | anthropic_decoder) echo ../tests/fixtures/sse ;;
        role_frontmatter) echo ../agents ;;
        *) echo "seeds/$1" ;;
    esac
}
run() {
    local target="$1"
    mkdir -p "corpus/$target"
    cargo +nightly fuzz run "$target" "corpus/$target" "$(seeds "$target")" -- \
        -max_total_time="$seconds" -rss_limit_mb=2048 -max_len=262144 \
        > "corpus/$target.log" 2>&1
    tail -n 3 "corpus/$target.log"
}
status=0
targets=(sse_split openai_decoder anthropic_decoder role_frontmatter edit_ladder journal_reader)
for ((i = 0; i < ${#targets[@]}; i += 2)); do
    run "${targets[i]}" & first=$!
    run "${targets[i + 1]}" & second=$!
    wait "$first" || status=1
    wait "$second" || status=1
done
exit "$status"
