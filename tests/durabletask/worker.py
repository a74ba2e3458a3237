"""A Durable Task Python SDK worker (PyPI `durabletask`) serving activities
to agenthost's wasm orchestrations over gRPC (tests/durable_task_grpc.rs).
Each call of `py_slow` appends `start N ...` and `done N` to LOG, `sleep`
seconds apart; with `stall` it never gets to `done` (the test kills it
there). With `only=A,B` it registers those activities alone and says so
with the SDK's work item filters; `py_who` answers with the worker's NAME.

usage: worker.py ADDRESS LOG [stall] [only=A,B] [name=NAME]
"""

import sys
import time

from durabletask import worker

address, log = sys.argv[1], sys.argv[2]
flags = sys.argv[3:]
stall = "stall" in flags
only = next((f[5:].split(",") for f in flags if f.startswith("only=")), None)
name = next((f[5:] for f in flags if f.startswith("name=")), "worker")


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


def py_who(ctx, input):
    return name


activities = [py_greet, py_fail, py_slow, py_who]
if only is not None:
    activities = [a for a in activities if a.__name__ in only]

with worker.TaskHubGrpcWorker(host_address=address) as w:
    for activity in activities:
        w.add_activity(activity)
    if only is not None:
        w.use_work_item_filters()
    w.start()
    print("worker started", flush=True)
    while True:
        time.sleep(1)
