#!/usr/bin/env bash
# The container image built and run by a real container runtime, the way
# deploy/kubernetes/agenthost.yaml runs it (`make image-test`, which builds
# the host and the components and installs podman, runc and debootstrap
# first; docs/deploy.md, "The image, built and run").
#
# 1. A Debian bookworm root made by `debootstrap --variant=minbase` stands in
#    for debian:bookworm-slim (public images cannot be pulled here). It is
#    cached by the hash of its recipe: target/image/base-HASH.tar and the
#    local image localhost/agenthost-base:HASH.
# 2. The repository's Dockerfile, built with `--build-arg BUILDER=prebuilt`:
#    the host and the sample components `make release components` built, in
#    place of the Rust image's build stage; the rest of the file as users
#    build it.
# 3. The image run as the manifest runs it: user 10001, a read-only root
#    filesystem, every capability dropped, no privilege escalation, empty
#    folders open to every user (an emptyDir's mode, 0777) for
#    /var/lib/agenthost and /tmp, keys required, SIGTERM to stop. Checked:
#    the components are served from the compiled code the build put beside
#    them (the cache is empty, and stays so: a folder others may write holds
#    no compiled code); a run of `writer` and of the `chaining` orchestration
#    are answered; after the container is stopped and a new one started on
#    the same volume, the session and the instance are there; each stop is
#    a drain that exits 0 within the grace.
#
# podman always runs with runc (crun fails on this machine's cgroups), the
# host's network, and the limits this machine lets a process have.
set -euo pipefail
cd "$(dirname "$0")/.."

PODMAN=(podman --runtime runc)
RUN_FLAGS=(--network host --ulimit nofile=1024:20000 --ulimit nproc=4096:4096)
WORK=target/image
IMAGE=localhost/agenthost:image-test
MIRROR=${IMAGE_TEST_MIRROR:-http://deb.debian.org/debian}
# The manifest's pod: terminationGracePeriodSeconds 45, --shutdown-grace 30s.
GRACE=45
# What the manifest's front adds to the image's command
# (tests/deploy/kubernetes.rs holds it to the Dockerfile's CMD), less
# --no-worker: here one container on SQLite serves and runs the work, as the
# image does by itself.
MANIFEST_ARGS=(--require-keys --shutdown-grace 30s)
KEY=image-test-admin-key-0123456789
NAME=agenthost-image-test-$$

say() { echo "image-test: $*" >&2; }
fail() {
    echo "image-test: FAILED: $*" >&2
    if "${PODMAN[@]}" container exists "$NAME" 2>/dev/null; then
        echo "--- container log ---" >&2
        "${PODMAN[@]}" logs "$NAME" >&2 || true
    fi
    exit 1
}
# json EXPR: evaluates the Python expression EXPR over the JSON on stdin (`j`).
json() { python3 -c "import json, sys; j = json.load(sys.stdin); print($1)"; }

RUN_DIR=""
cleanup() {
    "${PODMAN[@]}" rm -f -t 0 "$NAME" >/dev/null 2>&1 || true
    rm -rf "$WORK/prebuilt"
    [ -z "$RUN_DIR" ] || rm -rf "$RUN_DIR"
}
trap cleanup EXIT

for tool in podman runc debootstrap python3 curl; do
    command -v "$tool" >/dev/null || fail "$tool is missing (make image-test installs podman, runc and debootstrap)"
done
for built in target/release/agenthost target/components/writer.wasm; do
    [ -f "$built" ] || fail "$built is missing: run make release components (make image-test does)"
done
mkdir -p "$WORK"
started=$SECONDS

# --- 1. The base root -------------------------------------------------------
RECIPE="debootstrap --variant=minbase bookworm $MIRROR"
HASH=$(printf '%s\n' "$RECIPE" | sha256sum | cut -c1-16)
BASE=localhost/agenthost-base:$HASH
if "${PODMAN[@]}" image exists "$BASE"; then
    say "base root $BASE (cached)"
else
    if [ ! -f "$WORK/base-$HASH.tar" ]; then
        say "making the base root: $RECIPE"
        root=$(mktemp -d "$WORK/root.XXXXXX")
        debootstrap --variant=minbase bookworm "$root" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 \
            || { tail -20 "$WORK/debootstrap.log" >&2; rm -rf "$root"; fail "debootstrap"; }
        tar --numeric-owner -C "$root" -cf "$WORK/base-$HASH.tar.part" .
        rm -rf "$root"
        mv "$WORK/base-$HASH.tar.part" "$WORK/base-$HASH.tar"
    fi
    say "importing $WORK/base-$HASH.tar as $BASE"
    "${PODMAN[@]}" import --quiet "$WORK/base-$HASH.tar" "$BASE" >/dev/null
fi
say "base root ready after $((SECONDS - started)) s"

# --- 2. The image -------------------------------------------------------------
# What the prebuilt build stage copies (.dockerignore lets only this folder
# of target/ into the build context); removed on exit.
rm -rf "$WORK/prebuilt"
mkdir -p "$WORK/prebuilt/components"
cp target/release/agenthost "$WORK/prebuilt/agenthost"
cp target/components/*.wasm "$WORK/prebuilt/components/"
say "building the Dockerfile (BUILDER=prebuilt, BASE=$BASE)"
previous=$("${PODMAN[@]}" image inspect --format '{{.Id}}' "$IMAGE" 2>/dev/null || true)
build_start=$(date -u +%Y-%m-%dT%H:%M:%SZ)
"${PODMAN[@]}" build "${RUN_FLAGS[@]}" --label agenthost-image-test=1 --build-arg BUILDER=prebuilt --build-arg "BASE=$BASE" \
    -f Dockerfile -t "$IMAGE" . >"$WORK/build.log" 2>&1 \
    || { tail -30 "$WORK/build.log" >&2; fail "podman build (log: $WORK/build.log)"; }
rm -rf "$WORK/prebuilt"
# The last run's image, unless nothing changed: one image-test image kept.
if [ -n "$previous" ] && [ "$previous" != "$("${PODMAN[@]}" image inspect --format '{{.Id}}' "$IMAGE")" ]; then
    "${PODMAN[@]}" rmi "$previous" >/dev/null 2>&1 || true
fi
# ...and the build stages' images of earlier runs (each holds a host binary):
# this build's stay, the next build's cache. The label marks what this
# script built (podman build puts it on every stage's image).
"${PODMAN[@]}" image prune -f --filter label=agenthost-image-test=1 --filter "until=$build_start" >/dev/null
say "image built after $((SECONDS - started)) s"

user=$("${PODMAN[@]}" image inspect --format '{{.Config.User}}' "$IMAGE")
[ "$user" = "10001:10001" ] || fail "the image's user is '$user', not 10001:10001"
# The image's own command, on a free port of the host's network for 7071.
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
mapfile -t ARGS < <("${PODMAN[@]}" image inspect --format '{{json .Config.Cmd}}' "$IMAGE" \
    | json "'\n'.join('$PORT' if a == '7071' else a for a in j)")
ARGS+=("${MANIFEST_ARGS[@]}")
say "the image's command: ${ARGS[*]}"

# --- 3. Run as the manifest runs it --------------------------------------------
RUN_DIR=$(mktemp -d "$(pwd)/$WORK/run.XXXXXX")
mkdir "$RUN_DIR/data" "$RUN_DIR/tmp"
chmod 0777 "$RUN_DIR/data" "$RUN_DIR/tmp"
URL=http://127.0.0.1:$PORT
AUTH=(-H "authorization: Bearer $KEY")

start() {
    "${PODMAN[@]}" rm -f -t 0 "$NAME" >/dev/null 2>&1 || true
    "${PODMAN[@]}" run -d --name "$NAME" "${RUN_FLAGS[@]}" \
        --user 10001:10001 --read-only --read-only-tmpfs=false \
        --cap-drop ALL --security-opt no-new-privileges \
        -v "$RUN_DIR/data:/var/lib/agenthost" -v "$RUN_DIR/tmp:/tmp" \
        -e "AGENTHOST_API_KEYS=admin:$KEY" \
        "$IMAGE" "${ARGS[@]}" >/dev/null || fail "podman run"
    local deadline=$((SECONDS + 60))
    until curl -fs -o /dev/null "$URL/api/health/ready"; do
        [ "$("${PODMAN[@]}" inspect --format '{{.State.Running}}' "$NAME")" = true ] || fail "the container stopped before it was ready"
        [ $SECONDS -lt $deadline ] || fail "not ready within 60 s"
        sleep 0.5
    done
}

# Every component served from the compiled code beside it.
assert_precompiled() {
    local listed
    listed=$(curl -fsS "${AUTH[@]}" "$URL/api/components") || fail "GET /api/components"
    echo "$listed" | json "all(c['artifact'] == 'precompiled' for c in j['components']) and len(j['components']) > 0" \
        | grep -qx True || fail "not every component was served precompiled ($1): $listed"
}

# A drain on SIGTERM that ends within the grace, exit code 0.
stop() {
    local before=$SECONDS
    "${PODMAN[@]}" stop -t "$GRACE" "$NAME" >/dev/null || fail "podman stop"
    local code
    code=$("${PODMAN[@]}" inspect --format '{{.State.ExitCode}}' "$NAME")
    [ "$code" = 0 ] || fail "exit code $code after SIGTERM (137: killed at the end of the ${GRACE} s grace)"
    say "SIGTERM: exited 0 after $((SECONDS - before)) s"
}

say "run 1: user 10001, read-only root, empty volumes, port $PORT"
start
# Not root, and the root filesystem is read-only even to root.
pid=$("${PODMAN[@]}" inspect --format '{{.State.Pid}}' "$NAME")
uid=$(awk '/^Uid:/ {print $2}' "/proc/$pid/status")
[ "$uid" = 10001 ] || fail "the host runs as uid $uid"
[ "$("${PODMAN[@]}" inspect --format '{{.HostConfig.ReadonlyRootfs}}' "$NAME")" = true ] || fail "root filesystem not read-only"
refused=$("${PODMAN[@]}" exec --user 0 "$NAME" touch /usr/local/bin/probe 2>&1) \
    && fail "the root filesystem took a write"
grep -q 'Read-only file system' <<<"$refused" || fail "a write to the root filesystem: $refused"
[ -z "$(ls -A "$RUN_DIR/data/cache" 2>/dev/null)" ] || fail "the cache is not empty"
assert_precompiled "empty cache"
# Keys are required.
code=$(curl -s -o /dev/null -w '%{http_code}' -d hello "$URL/api/agents/writer/run")
[ "$code" = 401 ] || fail "a run without a key answered $code"

# A run of `writer` (the offline model), which starts a session.
answer=$(curl -fsS -D "$RUN_DIR/headers" "${AUTH[@]}" -H 'content-type: text/plain' -d 'Write a haiku about tea' \
    "$URL/api/agents/writer/run") || fail "POST /api/agents/writer/run"
session=$(awk 'tolower($1) == "x-ms-session-id:" {print $2}' "$RUN_DIR/headers" | tr -d '\r')
[ -n "$session" ] || fail "no session id: $(cat "$RUN_DIR/headers")"
grep -q 'turn 1 ' <<<"$answer" || fail "writer answered: $answer"
# An orchestration (the `chaining` sample's route), to its end.
started_json=$(curl -fsS "${AUTH[@]}" -X POST "$URL/api/writer/run") || fail "POST /api/writer/run"
instance=$(echo "$started_json" | json "j['id']")
deadline=$((SECONDS + 60))
until [ "$(curl -fsS "${AUTH[@]}" "$URL/runtime/webhooks/durabletask/instances/$instance" | json "j['runtimeStatus']")" = Completed ]; do
    [ $SECONDS -lt $deadline ] || fail "instance $instance not completed within 60 s"
    sleep 0.5
done
output=$(curl -fsS "${AUTH[@]}" "$URL/runtime/webhooks/durabletask/instances/$instance" | json "json.dumps(j['output'])")
[ -f "$RUN_DIR/data/agenthost.db" ] || fail "no store on the data volume"
[ "$(stat -c %u "$RUN_DIR/data/agenthost.db")" = 10001 ] || fail "the store is not user 10001's"
[ -z "$(ls -A "$RUN_DIR/data/cache" 2>/dev/null)" ] || fail "compiled code was kept in a folder others may write"
stop

say "run 2: a new container on the same volume"
start
assert_precompiled "a new container"
after=$(curl -fsS "${AUTH[@]}" "$URL/runtime/webhooks/durabletask/instances/$instance") \
    || fail "instance $instance is gone after the restart"
[ "$(echo "$after" | json "j['runtimeStatus']")" = Completed ] || fail "instance after the restart: $after"
[ "$(echo "$after" | json "json.dumps(j['output'])")" = "$output" ] || fail "instance output changed: $after"
again=$(curl -fsS "${AUTH[@]}" -H 'content-type: application/json' \
    -d "{\"message\": \"Make it shorter\", \"sessionId\": \"$session\"}" "$URL/api/agents/writer/run") \
    || fail "continuing session $session"
grep -q 'turn 2 ' <<<"$again" || fail "session $session lost its first turn: $again"
stop

say "passed in $((SECONDS - started)) s (image $IMAGE)"
