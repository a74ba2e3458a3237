#!/usr/bin/env bash
# One pass of the Durable Task JavaScript SDK's own end-to-end suite
# (microsoft/durabletask-js, test/e2e-azuremanaged, written for the Durable
# Task Scheduler emulator), unmodified, against a fresh agenthost on STORE.
#
#   scripts/dtjs-conformance.sh NAME STORE
#
# DTJS_SUITE: a checkout of that repository whose node_modules is installed
# (`make dtjs-suite-deps`). AGENTHOST: the binary (default
# target/release/agenthost). DTJS_SELECT: a jest -t pattern (test names), to
# run a part of the suite while working on it. DTJS_AZURITE: Azurite's
# azurite-blob (an npm package, `make dtjs-azurite`): when set, the pass
# starts it and runs export-history.spec.ts against it, which otherwise
# skips itself (it needs Azure Blob storage). DTJS_OUT: where the pass
# writes (default target/dtjs-conformance), so passes run at once by
# several people do not share files.
# Appends "NAME: exit S, P passed, F failed, K skipped" and one line per
# failed test to DTJS_OUT/tally.txt; jest's per-test report is
# DTJS_OUT/NAME.json, its output NAME.jest.txt, the host's log
# NAME.host.log. Exits with jest's status.
set -uo pipefail
name=$1 store=$2
root=$(cd "$(dirname "$0")/.." && pwd)
out=${DTJS_OUT:-$root/target/dtjs-conformance}
mkdir -p "$out"
out=$(cd "$out" && pwd)
bin=${AGENTHOST:-$root/target/release/agenthost}
: "${DTJS_SUITE:?DTJS_SUITE names a checkout of microsoft/durabletask-js}"
DTJS_SUITE=$(cd "$DTJS_SUITE" && pwd)
mkdir -p "$out/$name/components"
log=$out/$name.host.log

# The export-history spec writes its exports to Azure Blob storage: a local
# Azurite, on a port of its own, with Azurite's published development
# account (its well-known key is no secret).
storage=()
if [ -n "${DTJS_AZURITE:-}" ]; then
    mkdir -p "$out/$name/azurite"
    "$DTJS_AZURITE" --blobHost 127.0.0.1 --blobPort 0 --location "$out/$name/azurite" \
        --skipApiVersionCheck --loose >"$out/$name.azurite.log" 2>&1 &
    azurite=$!
    blob=
    for _ in $(seq 1 300); do
        blob=$(sed -n 's|^Azurite Blob service successfully listens on ||p' "$out/$name.azurite.log" | head -1)
        [ -n "$blob" ] && break
        kill -0 $azurite 2>/dev/null || break
        sleep 0.1
    done
    if [ -z "$blob" ]; then
        echo "$name: Azurite did not start; its log:" >&2
        cat "$out/$name.azurite.log" >&2
        echo "$name: Azurite did not start" >>"$out/tally.txt"
        kill $azurite 2>/dev/null
        exit 1
    fi
    storage=(EXPORT_HISTORY_E2E=1 "AZURE_STORAGE_CONNECTION_STRING=DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==;BlobEndpoint=$blob/devstoreaccount1;")
fi

# The suite's variables are also ours (ENDPOINT turns gRPC on, TASKHUB names
# the hub): the host gets its settings from its flags alone. No endpoint
# keys: the suite's clients send no credentials.
env -u ENDPOINT -u TASKHUB -u TASKHUB_NAME -u AGENTHOST_STORE \
    -u DURABLE_TASK_SCHEDULER_CONNECTION_STRING -u AGENTHOST_API_KEYS \
    -u AGENTHOST_API_KEY_FILE -u AGENTHOST_REQUIRE_KEYS \
    AGENTHOST_LOG=info,sqlx=warn \
    "$bin" serve --components "$out/$name/components" --watch false --store "$store" \
    --taskhub default --port 0 --grpc --grpc-port 0 --cache-dir "$out/cache" >"$log" 2>&1 &
host=$!
trap 'kill -TERM $host ${azurite:-} 2>/dev/null; wait $host ${azurite:-} 2>/dev/null' EXIT

endpoint=
for _ in $(seq 1 600); do
    endpoint=$(sed -n 's|^agenthost gRPC listening on http://||p' "$log" | head -1)
    [ -n "$endpoint" ] && break
    kill -0 $host 2>/dev/null || break
    sleep 0.1
done
if [ -z "$endpoint" ]; then
    echo "$name: agenthost did not start; its log:" >&2
    cat "$log" >&2
    echo "$name: the host did not start" >>"$out/tally.txt"
    exit 1
fi

# As the suite's CI runs it (ENDPOINT host:port, TASKHUB default, one jest
# process, --runInBand: the spec files share the one hub), from the
# checkout, whose jest.config.js maps the SDK packages to their sources.
# The connection-string variables some spec files read would point them
# elsewhere. DOCKER_HOST names no daemon: worker-stream-recovery.spec.ts
# stops and starts an emulator container when `docker info` answers, and
# returns at once (a pass) when it does not; there is no emulator here to
# restart. EXPORT_HISTORY_E2E is set only with Azurite (above): without Azure
# Blob storage that spec skips itself. Each test is bounded by its own timeout (jest's
# 5 s where it names none, as in the suite's CI), the whole pass by
# `timeout`; --forceExit so a client left open cannot keep
# jest alive after its tally.
cd "$DTJS_SUITE"
env -u DTS_CONNECTION_STRING -u DURABLE_TASK_SCHEDULER_CONNECTION_STRING \
    -u AZURE_DTS_CONNECTION_STRING -u EXPORT_HISTORY_E2E \
    -u AZURE_STORAGE_CONNECTION_STRING -u EXPORT_CONTAINER_NAME "${storage[@]}" \
    ENDPOINT=$endpoint TASKHUB=default DOCKER_HOST=unix:///nonexistent/docker.sock \
    NO_PROXY=127.0.0.1,localhost no_proxy=127.0.0.1,localhost CI=true \
    timeout -k 30 2400 node_modules/.bin/jest test/e2e-azuremanaged --runInBand \
    --forceExit --cacheDirectory="$root/target/dtjs-jest-cache" \
    ${DTJS_SELECT:+-t "$DTJS_SELECT"} --json --outputFile="$out/$name.json" \
    >"$out/$name.jest.txt" 2>&1
status=$?

# The deliberate differences docs/stores-and-hubs.md lists ("Measured
# against the JavaScript SDK's suite"), each with its reason there: a
# failure of one of these is tallied as such and does not fail the pass.
differences='export-history.spec.ts › Export History E2E Tests (DTS) › Export Job Entity Lifecycle › should delete an export job'

# The tally, from jest's JSON report: counts, then each failed test as
# "file › describe › test: first line of its failure", and each spec file
# that could not run at all. The pass's status: jest's, or 0 when every
# failure is a listed difference.
if [ -s "$out/$name.json" ]; then
    DIFFERENCES=$differences node - "$out/$name.json" "$name" "$status" >>"$out/tally.txt" <<'EOF'
const [file, name, status] = process.argv.slice(2);
const r = JSON.parse(require("fs").readFileSync(file, "utf8"));
const listed = new Set(process.env.DIFFERENCES.split("\n").filter(Boolean));
let unlisted = 0, differences = 0, broken = 0;
const lines = [];
for (const s of r.testResults) {
  const spec = require("path").basename(s.name);
  if (s.testExecError || (s.status === "failed" && s.assertionResults.length === 0)) {
    const msg = (s.message || (s.testExecError && s.testExecError.message) || "").replace(/\x1b\[[0-9;]*m/g, "");
    lines.push(`  suite error: ${spec}: ${msg.split("\n").map((l) => l.trim()).filter(Boolean)[0] || "?"}`);
    broken++;
  }
  for (const t of s.assertionResults) {
    if (t.status !== "failed") continue;
    const why = (t.failureMessages[0] || "").replace(/\x1b\[[0-9;]*m/g, "").split("\n").map((l) => l.trim()).filter(Boolean);
    const test = `${spec} › ${[...t.ancestorTitles, t.title].join(" › ")}`;
    const kind = listed.has(test) ? "listed difference" : "failed";
    if (listed.has(test)) differences++; else unlisted++;
    lines.push(`  ${kind}: ${test}: ${(why.slice(0, 2).join(" ") || "?").slice(0, 240)}`);
  }
}
const skipped = r.numPendingTests + r.numTodoTests;
// jest failed for no failed test (a timeout, a crash): that stands.
const only = Number(status) !== 0 && unlisted === 0 && broken === 0 && differences > 0;
const effective = only ? 0 : Number(status);
console.log(`${name}: exit ${effective}, ${r.numPassedTests} passed, ${r.numFailedTests} failed` +
  (differences ? ` (${differences} a listed difference)` : "") + `, ${skipped} skipped` +
  (r.numRuntimeErrorTestSuites ? `, ${r.numRuntimeErrorTestSuites} spec files did not run` : ""));
for (const l of lines) console.log(l);
process.exit(effective);
EOF
    status=$?
else
    echo "$name: exit $status, jest wrote no report (see $name.jest.txt)" >>"$out/tally.txt"
fi
tail -5 "$out/$name.jest.txt"
exit "$status"
