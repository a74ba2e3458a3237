"""A Durable Task Python SDK worker (PyPI `durabletask`) serving activities
to agenthost's wasm orchestrations over gRPC (tests/durable_task_grpc.rs).
Each call of `py_slow` appends `start N` and `done N` to LOG, `sleep`
seconds apart; with `stall` it never gets to `done` (the test kills it
there).

usage: worker.py ADDRESS LOG [stall]
"""

import sys
import time

from durabletask import worker

address, log = sys.argv[1], sys.argv[2]
stall = sys.argv[3:] == ["stall"]


def note(line):
    with open(log, "a") as f:
        f.write(line + "\n")


def py_greet(ctx, input):
    return f"Hello, {input['name']}!"


def py_fail(ctx, input):
    raise ValueError("no tea today")


def py_slow(ctx, input):
    note(f"start {input['n']} {ctx.orchestration_id}:{ctx.task_id}")
    if stall:
        time.sleep(600)
    time.sleep(input.get("sleep", 0))
    note(f"done {input['n']}")
    return input["n"]


with worker.TaskHubGrpcWorker(host_address=address) as w:
    for activity in (py_greet, py_fail, py_slow):
        w.add_activity(activity)
    w.start()
    print("worker started", flush=True)
    while True:
        time.sleep(1)
