#!/usr/bin/env bash
# What a durable step, an agent run and a streamed run cost on PostgreSQL.
#
# Usage: scripts/cost-model.sh
#   AGENTHOST_BINARY   the host binary (default target/release/agenthost)
#   COST_DB            the scratch database, dropped and created again, and
#                      dropped at exit (default agenthost_cost)
#   COST_SEQUENCES     `sequence` instances of 10 steps each, run 20 at a time
#                      (default 100: 1,000 steps)
#   COST_RUNS          synchronous agent runs, 16 at a time (default 500)
#   COST_STREAMS       streamed agent runs (SSE), 16 at a time (default 200)
#
# Needs PostgreSQL on 127.0.0.1:5432 (user postgres, trust auth; started by
# scripts/test-postgres.sh if it is down), curl, psql, python3, and the
# components target/components/writer.wasm and
# target/test-components/orchestration-tests.wasm (`make components
# test-components`).
#
# What it does: one `agenthost serve` on a fresh database, task hub `cost`.
# A warm-up (20 sequences, 64 runs), then ANALYZE, unmeasured. Then six
# windows: idle; 200 status polls; the sequences (started in waves of 20,
# each wave polled every 10 ms until done); the agent runs; the streamed
# runs; idle again. Requests go from one curl process, 16 at a time on
# kept-alive connections (as a client's pool would), polls from one python3
# process on one connection. Each window ends 11 s after its workload
# (PostgreSQL 15 backends flush their statistics up to 10 s after they go
# idle) with a reading of:
#   - pg_stat_database of the database: transactions, rows inserted,
#     updated, deleted, rows scanned (tup_returned);
#   - pg_stat_wal: WAL records, bytes, fsyncs (the whole server);
#   - pg_stat_user_tables of the hub's schema: rows by table;
#   - the host's /metrics: the store writer's commits, writes per commit and
#     time inside its transactions ("writer busy": that time over the
#     workload's wall time; the writer runs one transaction at a time);
#   - CPU time from /proc: the host process (utime+stime) and every
#     `postgres` process (utime+stime+cutime+cstime: the postmaster reaps
#     the backends that exit).
# The background (lease heartbeats, the once-a-second store pass: the quieter
# of the two idle windows, key by key, per second) is subtracted from each
# window in proportion to its length, and so are the status polls. Machine
# CPU is /proc/stat's busy time during the workload alone, not netted: an
# upper bound (it includes curl and anything else running). Last, 1,000
# stream entries are inserted into the hub's table as the host writes them,
# for the WAL bytes of one streamed chunk. Prints Markdown: the cost per unit,
# then rows per unit by table.
#
# Takes about 100 s. Run it with nothing else on the machine or on the
# PostgreSQL server: WAL and PostgreSQL CPU are counted server-wide (it warns
# when another database committed transactions meanwhile, or other
# processes used more than a tenth of the machine's CPU during a workload).
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${AGENTHOST_BINARY:-target/release/agenthost}
DB=${COST_DB:-agenthost_cost}
SEQUENCES=${COST_SEQUENCES:-100}
RUNS=${COST_RUNS:-500}
STREAMS=${COST_STREAMS:-200}
HUB=cost
WAVE=20
STEPS=10
CLIENTS=16
# PostgreSQL 15 backends flush their statistics at most once a second, and
# one that goes idle with statistics pending flushes them 10 s later.
SETTLE=11
PSQL=(psql -X -q -h 127.0.0.1 -p 5432 -U postgres -v ON_ERROR_STOP=1)

[ $((SEQUENCES % WAVE)) = 0 ] || { echo "COST_SEQUENCES must be a multiple of $WAVE" >&2; exit 1; }
for f in "$BIN" target/components/writer.wasm target/test-components/orchestration-tests.wasm; do
    [ -e "$f" ] || { echo "missing $f" >&2; exit 1; }
done
for tool in curl psql python3; do
    command -v "$tool" >/dev/null || { echo "missing $tool" >&2; exit 1; }
done

WORK=$(mktemp -d)
HOST_PID=
cleanup() {
    set +e
    if [ -n "$HOST_PID" ] && kill -0 "$HOST_PID" 2>/dev/null; then
        kill -TERM "$HOST_PID"
        for _ in $(seq 1 50); do kill -0 "$HOST_PID" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$HOST_PID" 2>/dev/null
        wait "$HOST_PID" 2>/dev/null
    fi
    "${PSQL[@]}" -d postgres -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" >/dev/null 2>&1
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

URL=$(scripts/test-postgres.sh "$DB" 2>"$WORK/postgres.log") || { cat "$WORK/postgres.log" >&2; exit 1; }
others=$("${PSQL[@]}" -d postgres -Atc "SELECT count(*) FROM pg_stat_activity \
    WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()")
[ "$others" = 0 ] || echo "warning: $others other sessions on this PostgreSQL server; WAL and CPU figures include their work" >&2

mkdir -p "$WORK/components"
cp target/components/writer.wasm target/test-components/orchestration-tests.wasm "$WORK/components/"
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
BASE=http://127.0.0.1:$PORT
"$BIN" serve --components "$WORK/components" --store "$URL" --taskhub "$HUB" --port "$PORT" \
    --cache-dir "$WORK/cache" --watch false >"$WORK/host.log" 2>&1 &
HOST_PID=$!
for _ in $(seq 1 120); do
    curl -sf -o /dev/null "$BASE/api/health" && break
    kill -0 "$HOST_PID" 2>/dev/null || { cat "$WORK/host.log" >&2; exit 1; }
    sleep 0.5
done
curl -sf -o /dev/null "$BASE/api/health" || { echo "the host did not become healthy" >&2; exit 1; }

# A process's CPU ticks: utime + stime (+ cutime + cstime with `children`).
ticks() {
    awk -v children="${2:-}" '{ sub(/^.*\) /, ""); t = $12 + $13; if (children) t += $14 + $15; print t }' \
        "/proc/$1/stat" 2>/dev/null || echo 0
}

# pg_ticks: CPU ticks of every `postgres` process, with the backends reaped.
pg_ticks() {
    local pg=0 pid
    for pid in $(pgrep -x postgres); do
        pg=$((pg + $(ticks "$pid" children)))
    done
    echo "$pg"
}

# snap NAME: the counters, one `key value` a line, in $WORK/NAME.
snap() {
    local out=$WORK/$1
    {
        echo "host_ticks $(ticks "$HOST_PID")"
        echo "pg_ticks $(pg_ticks)"
        curl -sf "$BASE/metrics" | awk '
            /^agenthost_journal_commit_batch_size_count / { print "commits", $2 }
            /^agenthost_journal_commit_batch_size_sum / { print "writes", $2 }
            /^agenthost_journal_commit_seconds_sum / { print "writer_s", $2 }'
        "${PSQL[@]}" -d "$DB" -AtF ' ' -c "
            SELECT k, v FROM pg_stat_database d, pg_stat_wal w, LATERAL (VALUES
                ('xacts', d.xact_commit + d.xact_rollback), ('ins', d.tup_inserted),
                ('upd', d.tup_updated), ('del', d.tup_deleted),
                ('scanned', d.tup_returned),
                ('wal_records', w.wal_records), ('wal_fpi', w.wal_fpi),
                ('wal_bytes', w.wal_bytes::bigint), ('wal_fsyncs', w.wal_sync),
                ('other_xacts', (SELECT sum(xact_commit + xact_rollback) FROM pg_stat_database
                    WHERE datname IS NOT NULL AND datname <> current_database())::bigint),
                ('databases', (SELECT count(*) FROM pg_database)),
                ('databases_made', (SELECT max(oid::text::bigint) FROM pg_database)),
                ('checkpoints', (SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter))) AS x(k, v)
            WHERE d.datname = current_database()
            UNION ALL
            SELECT 'table:' || relname || ':' || c, v FROM pg_stat_user_tables, LATERAL (VALUES
                ('ins', n_tup_ins), ('upd', n_tup_upd), ('del', n_tup_del),
                ('seq', seq_tup_read)) AS y(c, v)
            WHERE schemaname = 'taskhub_$HUB'"
        echo "t $(date +%s.%N)"
    } >"$out"
}

# machine: the whole machine's busy CPU ticks, from /proc/stat.
machine() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9 }' /proc/stat; }

# ours: CPU ticks of the host, PostgreSQL, and this script with the clients
# it waited for (curl, python3).
ours() { echo $(($(ticks "$HOST_PID") + $(pg_ticks) + $(ticks $$ children))); }

# measure NAME COMMAND...: COMMAND (timed, and the machine's CPU around it),
# then a pause for PostgreSQL's backends to flush their statistics, then the
# counters in $WORK/NAME.after; the window is from the counters before it
# ($WORK/PREVIOUS.after) to those.
PREVIOUS=start
measure() {
    local name=$1 start end m0 m1 o0 o1
    shift
    o0=$(ours)
    m0=$(machine)
    start=$(date +%s.%N)
    "$@"
    end=$(date +%s.%N)
    m1=$(machine)
    o1=$(ours)
    echo "$start $end $((m1 - m0)) $((o1 - o0))" >"$WORK/$name.wall"
    sleep "$SETTLE"
    snap "$name.after"
    cp "$WORK/$PREVIOUS.after" "$WORK/$name.before"
    PREVIOUS=$name
}

POLLS=0

idle() { sleep 3; }

# poll N: N status polls; poll: polls until no instance is pending or
# running. One keep-alive connection from one process, 10 ms apart; prints
# how many polls it made.
poll() {
    python3 - "$PORT" "${1:-0}" <<'PY'
import http.client, sys, time

connection = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]))
count, polls = int(sys.argv[2]), 0
while True:
    connection.request("GET", "/runtime/webhooks/durabletask/instances?runtimeStatus=Pending,Running&top=1")
    answer = connection.getresponse()
    body = answer.read()
    assert answer.status == 200, (answer.status, body)
    polls += 1
    if (count and polls == count) or (not count and body.strip() == b"[]"):
        break
    if not count:
        time.sleep(0.01)
print(polls)
PY
}

calibrate_polls() {
    poll 200 >"$WORK/calibrate.polls"
}

# requests FILE COUNT URL OUT [OPTION…]: a curl config file of COUNT POSTs to
# URL, each with the options given (`name = "value"` lines), its answer to
# OUT/N (OUT `-`: discarded) and its status code to stdout.
requests() {
    local file=$1 count=$2 url=$3 out=$4 i
    shift 4
    for i in $(seq 1 "$count"); do
        [ "$i" = 1 ] || echo next
        echo "url = \"$url\""
        printf '%s\n' "$@"
        if [ "$out" = - ]; then echo 'output = "/dev/null"'; else echo "output = \"$out/$i\""; fi
        echo 'write-out = "%{http_code}\n"'
    done >"$file"
}

# run FILE CODE: the requests of FILE, CLIENTS at a time from one curl process
# (connections kept alive, as a client's pool would); each must answer CODE.
run() {
    local file=$1 expected=$2
    curl -s --no-progress-meter -Z --parallel-max "$CLIENTS" -K "$file" >"$file.codes" 2>"$file.err"
    if grep -vqx "$expected" "$file.codes"; then
        echo "$file: answers other than $expected: $(sort "$file.codes" | uniq -c | tr '\n' ' ')" >&2
        exit 1
    fi
}

sequences() {
    local wave
    POLLS=0
    requests "$WORK/starts" "$WAVE" "$BASE/api/orchestrators/sequence" - \
        "data = \"{\\\"n\\\":$STEPS}\"" 'header = "content-type: application/json"'
    for wave in $(seq 1 $((SEQUENCES / WAVE))); do
        CLIENTS=$WAVE run "$WORK/starts" 202
        POLLS=$((POLLS + $(poll)))
    done
    echo "$POLLS" >"$WORK/sequences.polls"
}

runs() {
    requests "$WORK/runs" "$RUNS" "$BASE/api/agents/writer/run" - 'data = "Write a haiku about tea"'
    run "$WORK/runs" 200
}

streams() {
    rm -rf "$WORK/streamed" && mkdir "$WORK/streamed"
    requests "$WORK/streams" "$STREAMS" "$BASE/api/agents/writer/run" "$WORK/streamed" \
        'data = "Write a haiku about tea"' 'header = "Accept: text/event-stream"'
    run "$WORK/streams" 200
    cat "$WORK/streamed"/* | grep -c '^event: chunk' >"$WORK/streams.chunks"
}

echo "measuring on $URL with $BIN ($(nproc) cores)" >&2
# Warm-up, not measured: the tables get some rows, the pool its connections,
# then ANALYZE, so that plans are made on statistics (autovacuum would do it;
# a server with autovacuum off keeps the plans made on empty tables).
SEQUENCES=$WAVE sequences
RUNS=48 runs
STREAMS=16 streams
"${PSQL[@]}" -d "$DB" -c "ANALYZE" >/dev/null
sleep "$SETTLE"
snap start.after
measure idle idle
measure calibrate calibrate_polls
measure sequences sequences
measure runs runs
measure streams streams
measure idle2 idle

"${PSQL[@]}" -d "$DB" -At >"$WORK/connections" -c "SELECT count(*) FROM pg_stat_activity
    WHERE datname = current_database() AND pid <> pg_backend_pid()"
unfinished=$("${PSQL[@]}" -d "$DB" -Atc "SELECT count(*) FROM \"taskhub_$HUB\".instances WHERE status <> 'Completed'")
[ "$unfinished" = 0 ] || { echo "$unfinished sequences did not complete" >&2; exit 1; }

# One stream entry as the host writes one (a 31-byte chunk, the offline
# model's size), 1,000 of them in one statement into the hub's table: WAL
# bytes each, read as the WAL insert position before and after.
"${PSQL[@]}" -d "$DB" -At >"$WORK/chunk.wal" <<SQL
SET search_path TO "taskhub_$HUB";
SELECT pg_current_wal_insert_lsn() AS before \gset
INSERT INTO stream_entries (correlation_id, kind, data, created_at, expires_at, attempt)
SELECT 'cost-model-' || lpad((g / 5)::text, 25, '0'), 'chunk', repeat('x', 31),
       1800000000000 + g, 1800003600000 + g, 1800000000000 FROM generate_series(1, 1000) AS g;
SELECT round(pg_wal_lsn_diff(pg_current_wal_insert_lsn(), :'before') / 1000);
SQL

python3 - "$WORK" "$SEQUENCES" "$STEPS" "$RUNS" "$STREAMS" "$(getconf CLK_TCK)" "$(nproc)" <<'PY'
import sys

work, sequences, steps, runs, streams, hz, cores = sys.argv[1], *map(int, sys.argv[2:8])
ms = 1000.0 / hz
others = {}
busy = {}
checkpoints = []


def load(name):
    values = {}
    for line in open(f"{work}/{name}"):
        key, value = line.split()
        values[key] = float(value)
    return values


def window(name):
    """Counter deltas, the window's length (s), the workload's wall time (s)
    and the machine's busy ticks during the workload."""
    before, after = load(f"{name}.before"), load(f"{name}.after")
    delta = {k: after[k] - before.get(k, 0.0) for k in after if k != "t"}
    if delta.pop("other_xacts", 0) > 0:
        others[name] = f"{after['other_xacts'] - before['other_xacts']:.0f} transactions"
    made = delta.pop("databases", 0), delta.pop("databases_made", 0)
    if any(made):
        others[name] = "a database created or dropped"
    if delta.pop("checkpoints", 0) > 0:
        checkpoints.append(name)
    start, end, machine, ours = map(float, open(f"{work}/{name}.wall").read().split())
    # The machine's CPU that neither the host, PostgreSQL nor this script
    # and its clients used, as a share of all cores during the workload.
    if end - start > 0.2 and (machine - ours) / (hz * cores * (end - start)) > 0.1:
        busy[name] = (machine - ours) / (hz * cores * (end - start))
    return delta, after["t"] - before["t"], end - start, machine


def minus(delta, other, times):
    return {k: v - times * other.get(k, 0.0) for k, v in delta.items()}


def number(name):
    return int(open(f"{work}/{name}").read())


def fmt(x, digits=2):
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.{digits}f}"


# The background: the quieter of two idle windows (first and last), key by key.
idles = []
for name in ("idle", "idle2"):
    delta, span, _, _ = window(name)
    idles.append({k: v / span for k, v in delta.items()})
per_second = {k: min(i.get(k, 0.0) for i in idles) for k in set().union(*idles)}
calibrate, span, _, _ = window("calibrate")
per_poll = {k: v / number("calibrate.polls") for k, v in minus(calibrate, per_second, span).items()}

chunks = int(open(f"{work}/streams.chunks").read())
rows = []
for name, unit, count in [
    ("sequences", "durable step", sequences * steps),
    ("runs", "agent run", runs),
    ("streams", f"streamed run ({chunks / streams:g} chunks)", streams),
]:
    delta, span, wall, machine = window(name)
    net = minus(delta, per_second, span)
    if name == "sequences":
        net = minus(net, per_poll, number("sequences.polls"))
    per = {k: v / count for k, v in net.items()}
    per["batch"] = net["writes"] / net["commits"] if net.get("commits", 0) > 0 else float("nan")
    per["machine_ms"] = machine * ms / count
    per["writer_busy"] = net.get("writer_s", 0.0) / wall
    rows.append((unit, count, wall, per))

print("| per | n | wall s | per s | PG xacts | writer commits | writes/commit | writer busy "
      "| rows ins | rows upd | rows del | rows scanned | WAL records | WAL bytes | WAL fsyncs "
      "| host CPU ms | PG CPU ms | machine CPU ms (bound) |")
print("|---" * 18 + "|")
for unit, count, wall, u in rows:
    print(f"| {unit} | {count} | {wall:.2f} | {fmt(count / wall)} | {fmt(u['xacts'])} "
          f"| {fmt(u['commits'])} | {fmt(u['batch'], 1)} | {u['writer_busy']:.0%} "
          f"| {fmt(u['ins'])} | {fmt(u['upd'])} "
          f"| {fmt(u['del'])} | {fmt(u['scanned'], 1)} | {fmt(u['wal_records'], 1)} "
          f"| {fmt(u['wal_bytes'])} | {fmt(u['wal_fsyncs'])} | {fmt(u['host_ticks'] * ms)} "
          f"| {fmt(u['pg_ticks'] * ms)} | {fmt(u['machine_ms'])} |")
print()
print(f"Subtracted: idle, per second, {fmt(per_second['xacts'], 1)} xacts, "
      f"{fmt(per_second['wal_bytes'])} WAL bytes, {fmt(per_second['host_ticks'] * ms, 1)} host "
      f"and {fmt(per_second['pg_ticks'] * ms, 1)} PG CPU ms; a status poll "
      f"{fmt(per_poll['xacts'])} xacts, {fmt(per_poll['pg_ticks'] * ms)} PG CPU ms "
      f"({number('sequences.polls')} polls in the sequence workload).")
if busy:
    print("WARNING: other processes used the machine meanwhile ("
          + ", ".join(f"{n}: {v:.0%} of its CPU" for n, v in busy.items())
          + "): throughput and the writer's times suffer.")
if others:
    print("WARNING: other databases of this server were busy meanwhile ("
          + ", ".join(f"{n}: {v}" for n, v in others.items())
          + "): WAL and PostgreSQL CPU include their work.")
if checkpoints:
    print(f"A checkpoint ran during: {', '.join(checkpoints)} (its WAL includes the "
          "full-page images that follow a checkpoint).")
print(f"Connections the host held on the database after the workloads: "
      f"{open(f'{work}/connections').read().strip()}.")
print(f"A stream entry (one chunk of 31 bytes) as the host writes it, 1,000 in one "
      f"statement: {open(f'{work}/chunk.wal').read().strip()} WAL bytes each.")
print()

tables = sorted({k.split(":")[1] for _, _, _, u in rows for k in u if k.startswith("table:")})
print("| rows per unit, by table: ins / upd / del (seq-scanned) | "
      + " | ".join(r[0] for r in rows) + " |")
print("|---" * (len(rows) + 1) + "|")
for table in tables:
    cells = []
    for _, _, _, u in rows:
        i, up, d, seq = (u.get(f"table:{table}:{c}", 0.0) for c in ("ins", "upd", "del", "seq"))
        if max(abs(i), abs(up), abs(d), abs(seq)) < 0.005:
            cells.append("—")
        else:
            cells.append(f"{i:.2f} / {up:.2f} / {d:.2f}" + (f" ({seq:.1f})" if abs(seq) >= 0.05 else ""))
    if any(c != "—" for c in cells):
        print(f"| {table} | " + " | ".join(cells) + " |")
PY
