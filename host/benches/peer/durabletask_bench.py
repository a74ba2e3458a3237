"""`make bench` (host/benches/sdk.rs): the activity-sequence workload through
the Durable Task Python SDK (PyPI `durabletask`, target/durabletask-venv),
against agenthost's gRPC endpoint or against the SDK's own in-memory backend
(the emulator's stand-in: `durabletask.testing.InMemoryOrchestrationBackend`).

usage: durabletask_bench.py worker ADDRESS
       durabletask_bench.py emulator PORT
       durabletask_bench.py drive ADDRESS ORCHESTRATION STEPS CONCURRENT ALONE

`drive` runs ORCHESTRATION (the SDK's `sdk_steps`, or a wasm orchestration
by name, `sequence`, with the same number of activity steps) ALONE times one
after the other, then CONCURRENT at once, and prints one JSON line. Times are
the instances' own (created → last updated, as the backend reports them), so
the client's polling does not count.
"""

import json
import statistics
import sys
import time

mode = sys.argv[1]


def step(ctx, n):
    return n + 1


def sdk_steps(ctx, steps):
    total = 0
    for i in range(steps):
        total += yield ctx.call_activity(step, input=i)
    return total


if mode == "worker":
    from durabletask import worker

    with worker.TaskHubGrpcWorker(host_address=sys.argv[2]) as w:
        w.add_orchestrator(sdk_steps)
        w.add_activity(step)
        w.start()
        print("worker started", flush=True)
        while True:
            time.sleep(60)

if mode == "emulator":
    from durabletask.testing import InMemoryOrchestrationBackend

    backend = InMemoryOrchestrationBackend(port=int(sys.argv[2]))
    backend.start()
    print("emulator started", flush=True)
    while True:
        time.sleep(60)

from durabletask import client as dt  # noqa: E402

address, name = sys.argv[2], sys.argv[3]
steps, concurrent, alone = int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
c = dt.TaskHubGrpcClient(host_address=address)
payload = steps if name == "sdk_steps" else {"n": steps}


def finished(ids):
    states = [c.wait_for_orchestration_completion(i, timeout=600) for i in ids]
    bad = [s.runtime_status.name for s in states if s.runtime_status.name != "COMPLETED"]
    if bad:
        raise SystemExit(f"not completed: {bad}")
    return states


# Warm-up: the worker connected, code loaded, caches filled.
finished([c.schedule_new_orchestration(name, input=payload) for _ in range(3)])

latencies = []
for _ in range(alone):
    (state,) = finished([c.schedule_new_orchestration(name, input=payload)])
    latencies.append((state.last_updated_at - state.created_at).total_seconds() * 1e3)

ids = [c.schedule_new_orchestration(name, input=payload) for _ in range(concurrent)]
states = finished(ids)
first = min(s.created_at for s in states)
last = max(s.last_updated_at for s in states)
span = (last - first).total_seconds()
print(json.dumps({
    "orchestration": name,
    "steps": steps,
    "alone_median_ms": statistics.median(latencies),
    "concurrent": concurrent,
    "steps_per_s": concurrent * steps / span if span > 0 else None,
}), flush=True)
