#!/usr/bin/env bash
# Installs the MCP servers the tests run (the real ones from npm, pinned) into a
# cache directory, once: `tests/support/mcp-servers.sh DIR`. The tests call it
# themselves (tests/mcp.rs), so `cargo test` needs nothing else; it is idempotent
# and holds a lock, so test binaries running at once install only once.
set -euo pipefail
dir="${1:?usage: mcp-servers.sh DIR}"
mkdir -p "$dir"
exec 9>"$dir/.lock"
flock 9
everything="@modelcontextprotocol/server-everything@2026.8.31"
filesystem="@modelcontextprotocol/server-filesystem@2026.8.31"
stamp="$dir/.installed"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$everything $filesystem" \
      && -x "$dir/node_modules/.bin/mcp-server-everything" \
      && -x "$dir/node_modules/.bin/mcp-server-filesystem" ]]; then
    exit 0
fi
npm install --prefix "$dir" --no-audit --no-fund --save-exact --loglevel=error \
    "$everything" "$filesystem" >&2
echo "$everything $filesystem" >"$stamp"
