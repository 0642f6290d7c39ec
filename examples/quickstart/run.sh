#!/usr/bin/env bash
# The no-network Quick start. Copies the sample project (a small crate with a real
# bug and a failing test) to a scratch git repository, runs `orchestrate "task"` there
# replaying cassette.jsonl instead of calling a model, then runs the project's tests
# in the scratch copy. The repository's own files are never touched.
#
# cassette.jsonl was written by hand; tools run for real: the agents read the files, run `cargo test`, and
# edit the scratch copy. The replay is honest: each line holds what its request
# sent (the prompts, which tool results failed), and a run that leaves the
# recording (a tool call failing that succeeded when it was written) fails.
# ORCHESTRATE_BIN names a built binary to use instead of building one (the test
# suite runs this script that way).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
scratch="$(mktemp -d "${TMPDIR:-/tmp}/orchestrate-quickstart.XXXXXX")"
cp -R "$here/project/." "$scratch/"
# A git repository, as a project is: the coder works in a private checkout of
# it, and its fix is merged back once `cargo test` passes there.
printf 'target/\n' > "$scratch/.gitignore"
git -C "$scratch" init -q -b main
git -C "$scratch" add -A
git -C "$scratch" -c user.name=quickstart -c user.email=quickstart@localhost \
    -c commit.gpgsign=false -c core.hooksPath=/dev/null commit -q -m "the sample project"
echo "scratch copy of examples/quickstart/project: $scratch"
if [[ -n "${ORCHESTRATE_BIN:-}" ]]; then
    orchestrate="$ORCHESTRATE_BIN"
else
    # Built where this checkout builds, with the `quick` profile (optimized, without
    # the shipped build's whole-program pass: a few minutes the first time on a
    # cold machine; cargo shows its progress).
    target="${CARGO_TARGET_DIR:-$here/../../target}"
    echo "building orchestrate (quick profile) in $target ..."
    cargo build --profile quick --manifest-path "$here/../../Cargo.toml" --target-dir "$target" --bin orchestrate --bin orchestrate-sandbox
    orchestrate="$target/quick/orchestrate"
fi
# The agents' `cargo test` runs in Bash's sandbox, which writes only inside the
# workspace and the temporary directory: the scratch copy builds in its own target.
export CARGO_TARGET_DIR="$scratch/target"

"$orchestrate" -C "$scratch" \
    --replay "$here/cassette.jsonl" \
    --permission-mode bypassPermissions \
    "The test suite of this crate fails. Find out why and fix it."

echo
echo "cargo test in $scratch:"
cd "$scratch"
RUST_BACKTRACE=0 cargo test --quiet 2>&1 | grep -E '^test result|FAILED|panicked'
