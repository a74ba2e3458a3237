"""The benchmark peer: the durable engine workloads of `benches/durable.rs`,
run on DBOS (Python) in this process, its system database SQLite (WAL) in
DIR, or PostgreSQL when DATABASE_URL is given.

Prints one JSON object on stdout; `benches/durable.rs` (SQLite) and
`benches/shared_hub.rs` (PostgreSQL) run this script in the same `make bench`
run and report both side by side. Installed by `make bench-peer` into
target/bench-venv (DBOS brings psycopg, its PostgreSQL driver); nothing here
asserts a speed.

Usage: python dbos_peer.py DIR WAITING [DATABASE_URL]
  DATABASE_URL: postgresql://user@host:port/database (postgres:// is taken
  too), a database of its own: DBOS creates its tables there.
"""

import asyncio
import json
import os
import statistics
import sys
import time
import uuid

from concurrent.futures import ThreadPoolExecutor

from dbos import DBOS, DBOSConfig, SetWorkflowID


def rss_mib() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


@DBOS.step()
async def instant(i: int) -> int:
    return i


@DBOS.workflow()
async def sequence(n: int) -> int:
    total = 0
    for i in range(n):
        total += await instant(i)
    return total


@DBOS.workflow()
async def fanout(n: int) -> int:
    results = await asyncio.gather(*(instant(i) for i in range(n)))
    return sum(results)


@DBOS.step()
def instant_sync(i: int) -> int:
    return i


@DBOS.workflow()
def sequence_sync(n: int) -> int:
    total = 0
    for i in range(n):
        total += instant_sync(i)
    return total


# Runs of one sequence alone; the median is quoted (as in durable.rs).
ALONE = 21
FANOUT_QUEUE = None  # registered after launch: it is persisted


@DBOS.workflow()
def instant_workflow(i: int) -> int:
    return instant_sync(i)


@DBOS.workflow()
def fanout_sync(n: int) -> int:
    handles = [FANOUT_QUEUE.enqueue(instant_workflow, i) for i in range(n)]
    return sum(h.get_result() for h in handles)


def run_sync(workflow, *args) -> float:
    started = time.perf_counter()
    DBOS.start_workflow(workflow, *args).get_result()
    return time.perf_counter() - started


def sync_workloads() -> dict:
    """DBOS's synchronous style: workflows on threads, a queue for fan-out."""
    global FANOUT_QUEUE
    # Polled every 10 ms (DBOS's default is 1 s), so the queue is no handicap.
    FANOUT_QUEUE = DBOS.register_queue("fanout", polling_interval_sec=0.01)
    run_sync(sequence_sync, 10)
    alone = [run_sync(sequence_sync, 10) for _ in range(ALONE)]
    started = time.perf_counter()
    with ThreadPoolExecutor(20) as pool:
        list(pool.map(lambda _: run_sync(sequence_sync, 10), range(20)))
    steps = 200 / (time.perf_counter() - started)
    fan = [run_sync(fanout_sync, 100) for _ in range(5)]
    return {
        "sequence_alone_ms": statistics.median(alone) * 1e3,
        "sequence_steps_per_s": steps,
        "fanout_ms": statistics.median(fan) * 1e3,
    }


@DBOS.workflow()
async def wait_event() -> object:
    return await DBOS.recv_async("go", timeout_seconds=3600)


async def run_to_completion(workflow, *args) -> float:
    started = time.perf_counter()
    handle = await DBOS.start_workflow_async(workflow, *args)
    await handle.get_result()
    return time.perf_counter() - started


async def main(waiting: int) -> dict:
    out = {"peer": "DBOS", "version": DBOS_VERSION}
    # Both of DBOS's styles are measured; the report takes the better of each.
    sync = await asyncio.to_thread(sync_workloads)
    # One 10-step sequence alone (median of ALONE, after a warm-up).
    await run_to_completion(sequence, 10)
    alone = [await run_to_completion(sequence, 10) for _ in range(ALONE)]
    out["sequence_alone_ms"] = statistics.median(alone) * 1e3
    # 20 sequences of 10 steps at once.
    started = time.perf_counter()
    await asyncio.gather(*(run_to_completion(sequence, 10) for _ in range(20)))
    out["sequence_steps_per_s"] = 200 / (time.perf_counter() - started)
    # 100-way fan-out (median of 5).
    fan = [await run_to_completion(fanout, 100) for _ in range(5)]
    out["fanout_ms"] = statistics.median(fan) * 1e3
    out["async"] = {k: out[k] for k in ("sequence_alone_ms", "sequence_steps_per_s", "fanout_ms")}
    out["sync"] = sync
    out["sequence_alone_ms"] = min(out["sequence_alone_ms"], sync["sequence_alone_ms"])
    out["sequence_steps_per_s"] = max(out["sequence_steps_per_s"], sync["sequence_steps_per_s"])
    out["fanout_ms"] = min(out["fanout_ms"], sync["fanout_ms"])
    # `waiting` workflows blocked on a message, then one message each.
    idle = rss_mib()
    ids = [f"wait-{uuid.uuid4().hex}" for _ in range(waiting)]
    started = time.perf_counter()
    handles = []
    for wid in ids:
        with SetWorkflowID(wid):
            handles.append(await DBOS.start_workflow_async(wait_event))
    start_s = time.perf_counter() - started
    await asyncio.sleep(2.0)  # let every workflow reach its recv
    out["waiting"] = waiting
    out["starts_per_s"] = waiting / start_s
    out["waiting_rss_mib"] = rss_mib()
    out["waiting_kib_each"] = (out["waiting_rss_mib"] - idle) * 1024 / waiting
    started = time.perf_counter()
    sem = asyncio.Semaphore(16)

    async def send(wid: str) -> None:
        async with sem:
            await DBOS.send_async(wid, {"go": True}, "go")

    await asyncio.gather(*(send(wid) for wid in ids))
    await asyncio.gather(*(h.get_result() for h in handles))
    out["raise_to_done_s"] = time.perf_counter() - started
    out["raise_to_done_per_s"] = waiting / out["raise_to_done_s"]
    return out


if __name__ == "__main__":
    from importlib.metadata import version

    DBOS_VERSION = version("dbos")
    directory, waiting = sys.argv[1], int(sys.argv[2])
    database_url = sys.argv[3] if len(sys.argv) > 3 else ""
    os.makedirs(directory, exist_ok=True)
    if database_url.startswith(("postgres://", "postgresql://")):
        # SQLAlchemy's spelling; DBOS picks its driver (psycopg) itself.
        system_database_url = "postgresql://" + database_url.split("://", 1)[1]
    else:
        database = os.path.join(directory, "dbos.sqlite")
        # WAL, as our store uses: the journal mode is kept in the file itself.
        import sqlite3

        with sqlite3.connect(database) as connection:
            connection.execute("PRAGMA journal_mode=WAL")
        system_database_url = f"sqlite:///{database}"
    config: DBOSConfig = {
        "name": "agenthost-bench-peer",
        "system_database_url": system_database_url,
    }
    DBOS(config=config)
    DBOS.launch()
    result = asyncio.run(main(waiting))
    print(json.dumps(result))
    DBOS.destroy()
