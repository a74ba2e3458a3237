#!/usr/bin/env bash
# One pass of the Durable Task Python SDK's own end-to-end suite
# (microsoft/durabletask-python, tests/durabletask-azuremanaged, marker `dts`,
# written for the Durable Task Scheduler emulator), unmodified, against a
# fresh agenthost on STORE.
#
#   scripts/dt-conformance.sh NAME STORE
#
# DT_SUITE: a checkout of that repository. AGENTHOST: the binary (default
# target/release/agenthost). DTC_VENV: the virtualenv with the SDK, its
# azure-managed client and pytest (`make dt-conformance-venv`). DT_SELECT:
# a pytest -k expression, to run a part of the suite while working on it.
# Appends "NAME: <pytest's tally>" to target/dt-conformance/tally.txt; the
# per-test report is target/dt-conformance/NAME.xml, the host's log
# NAME.host.log. Exits with pytest's status.
set -uo pipefail
name=$1 store=$2
root=$(cd "$(dirname "$0")/.." && pwd)
out=$root/target/dt-conformance
venv=${DTC_VENV:-$root/target/dt-conformance-venv}
bin=${AGENTHOST:-$root/target/release/agenthost}
: "${DT_SUITE:?DT_SUITE names a checkout of microsoft/durabletask-python}"
DT_SUITE=$(cd "$DT_SUITE" && pwd)
mkdir -p "$out/$name/components"
log=$out/$name.host.log

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
trap 'kill -TERM $host 2>/dev/null; wait $host 2>/dev/null' EXIT

endpoint=
for _ in $(seq 1 600); do
    endpoint=$(sed -n 's/^agenthost gRPC listening on //p' "$log" | head -1)
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

# Run from outside the checkout: its own durabletask/ sources (a tree that
# may be older than the pinned wheel) must not shadow the installed SDK.
cd "$out"
ENDPOINT=$endpoint TASKHUB=default NO_PROXY=127.0.0.1,localhost no_proxy=127.0.0.1,localhost \
    timeout 1800 "$venv/bin/pytest" "$DT_SUITE/tests/durabletask-azuremanaged" -m dts \
    --import-mode=importlib -p no:cacheprovider --timeout=300 -q -rfE \
    ${DT_SELECT:+-k "$DT_SELECT"} --junitxml="$name.xml" | tee "$name.pytest.txt"
status=${PIPESTATUS[0]}
summary=$(grep -E '[0-9]+ (passed|failed|errors?)|no tests ran' "$name.pytest.txt" | tail -1 | tr -d '=' | sed 's/^ *//')
# pytest's exit status too: a run killed by the timeout, or one that
# collected nothing, must not read as a clean tally.
echo "$name: exit $status, ${summary:-no pytest summary (see $name.pytest.txt)}" >>"$out/tally.txt"
exit "$status"
