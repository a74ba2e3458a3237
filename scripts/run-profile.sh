#!/usr/bin/env bash
# Where an agent run's time goes: `make run-profile`.
#
# Starts the release host on a fresh SQLite store with the `writer` agent
# and the offline model, loads it with 16 connections of `writer` runs (a
# new session each) for 15 s, and records the host with `perf record -g`
# meanwhile. Writes, under target/profile/:
#   run-path.svg    a flame graph (inferno, from crates.io, installed into
#                   target/inferno on first use);
#   run-path.txt    the top of `perf report` (self time, by symbol, then
#                   by binary: the host, libc, the kernel).
# Needs perf (Debian's linux-perf; installed when missing) and a release
# build with the components (`make release components`).
set -euo pipefail
cd "$(dirname "$0")/.."

out=target/profile
mkdir -p "$out"
command -v perf >/dev/null || { apt-get update -qq && apt-get install -y -qq linux-perf; }
if [ ! -x target/inferno/bin/inferno-flamegraph ]; then
    cargo install --locked --quiet inferno@0.12.3 --root target/inferno
fi
binary=${AGENTHOST_BINARY:-target/release/agenthost}
test -x "$binary" || { echo "build the host first: make release components" >&2; exit 1; }

scratch=$(mktemp -d)
trap 'kill "$host" 2>/dev/null || true; rm -rf "$scratch"' EXIT
mkdir -p "$scratch/components"
cp target/components/writer.wasm "$scratch/components/"
env -u OPENAI_BASE_URL -u OPENAI_API_KEY -u AZURE_OPENAI_ENDPOINT AGENTHOST_LOG=warn \
    "$binary" serve --port 0 --components "$scratch/components" \
    --store "sqlite://$scratch/profile.db" --cache-dir "$scratch/cache" >"$scratch/host.log" 2>&1 &
host=$!
for _ in $(seq 1 200); do
    base=$(sed -n 's/^agenthost listening on //p' "$scratch/host.log" | head -1)
    [ -n "$base" ] && break
    sleep 0.1
done
[ -n "$base" ] || { cat "$scratch/host.log" >&2; exit 1; }

# The load: 16 clients of curl in a loop, each its own keep-alive connection.
load() {
    local until=$(( $(date +%s) + $1 )) clients=()
    for _ in $(seq 1 16); do
        ( while [ "$(date +%s)" -lt "$until" ]; do
              curl -s -o /dev/null -o /dev/null -o /dev/null -o /dev/null -d 'Write a haiku about tea' \
                  "$base/api/agents/writer/run" "$base/api/agents/writer/run" \
                  "$base/api/agents/writer/run" "$base/api/agents/writer/run"
          done ) &
        clients+=($!)
    done
    wait "${clients[@]}"
}
load 2
load 17 &
loader=$!
sleep 1
perf record -F 999 -g -p "$host" -o "$scratch/perf.data" -- sleep 15 2>/dev/null
wait "$loader"
perf script -i "$scratch/perf.data" 2>/dev/null \
    | target/inferno/bin/inferno-collapse-perf \
    | target/inferno/bin/inferno-flamegraph --title "agenthost: writer runs, 16 connections, SQLite" \
    > "$out/run-path.svg"
perf report -i "$scratch/perf.data" --no-children -g none --percent-limit 0.5 --sort dso,symbol --stdio 2>/dev/null \
    | grep -v '^#' | grep -v '^$' | head -60 > "$out/run-path.txt"
{ echo; echo "By binary:"; perf report -i "$scratch/perf.data" --no-children -g none --sort dso --stdio 2>/dev/null \
    | grep -v '^#' | grep -v '^$' | head -12; } >> "$out/run-path.txt"
echo "$out/run-path.svg, $out/run-path.txt"
