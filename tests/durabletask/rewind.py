"""Rewinding failed orchestrations (the SDK's `rewind_orchestration`), run
by agenthost for the Python SDK's worker (tests/durable_task_rewind.rs).

usage: rewind.py worker ADDRESS LOG
       rewind.py scenario ADDRESS LOG

The worker appends `ran ACTIVITY KEY` to LOG for each activity it runs; a
`flaky` activity fails as long as it has run fewer times than its input
says, so a rewind after that many failures succeeds. The client prints one
JSON line per step.
"""

import json
import sys
import time

import grpc
from durabletask import client as dt
from durabletask import task, worker

mode, address, log = sys.argv[1], sys.argv[2], sys.argv[3]


def say(step, **fields):
    print(json.dumps({"step": step, **fields}), flush=True)


def runs(activity, key):
    try:
        with open(log) as f:
            return sum(1 for line in f if line.strip() == f"ran {activity} {key}")
    except FileNotFoundError:
        return 0


def note(activity, key):
    with open(log, "a") as f:
        f.write(f"ran {activity} {key}\n")


def steady(ctx, key):
    note("steady", key)
    return f"steady:{key}"


def flaky(ctx, args):
    key, failures = args["key"], args["failures"]
    before = runs("flaky", key)
    note("flaky", key)
    if before < failures:
        raise RuntimeError(f"failure {before + 1} of {key}")
    return f"flaky:{key}"


def two_steps(ctx, args):
    first = yield ctx.call_activity(steady, input=args["key"])
    second = yield ctx.call_activity(flaky, input=args)
    return [first, second]


def rw_child(ctx, args):
    return (yield ctx.call_activity(flaky, input=args))


def rw_parent(ctx, args):
    named = args.get("child_id")
    result = yield ctx.call_sub_orchestrator(rw_child, input=args, instance_id=named)
    return f"parent:{result}"


def fails_once(ctx, key):
    """Fails in its own code the first time its code gets past its activity
    (no task failed), goes on after that: a rewind runs it again."""
    first = yield ctx.call_activity(steady, input=key)
    before = runs("own", key)
    note("own", key)
    if before < 1:
        raise ValueError("no task failed")
    return f"own:{first}"


if mode == "worker":
    with worker.TaskHubGrpcWorker(host_address=address) as w:
        for orchestrator in (two_steps, rw_child, rw_parent, fails_once):
            w.add_orchestrator(orchestrator)
        for activity in (steady, flaky):
            w.add_activity(activity)
        w.start()
        print("worker started", flush=True)
        while True:
            time.sleep(1)

c = dt.TaskHubGrpcClient(host_address=address)


def done(id, timeout=60):
    state = c.wait_for_orchestration_completion(id, timeout=timeout)
    return {
        "status": state.runtime_status.name,
        "output": json.loads(state.serialized_output) if state.serialized_output else None,
        "failure": state.failure_details.message if state.failure_details else None,
    }


def refused(call):
    try:
        call()
        return None
    except grpc.RpcError as e:
        return {"code": e.code().name, "details": e.details()}


# A failed second activity runs again; the first's result is kept.
id = c.schedule_new_orchestration(two_steps, input={"key": "a", "failures": 1},
                                  instance_id="rw-steps")
failed = done(id)
c.rewind_orchestration(id, reason="fixed")
say("activity", failed=failed, rewound=done(id),
    steady=runs("steady", "a"), flaky=runs("flaky", "a"))

# Failing twice: rewound twice.
id = c.schedule_new_orchestration(two_steps, input={"key": "b", "failures": 2},
                                  instance_id="rw-twice")
first = done(id)
c.rewind_orchestration(id)
second = done(id)
c.rewind_orchestration(id, reason="again")
say("twice", first=first["status"], second=second["status"], third=done(id),
    flaky=runs("flaky", "b"), steady=runs("steady", "b"))

# A failed sub-orchestration is rewound with its parent.
id = c.schedule_new_orchestration(rw_parent, input={"key": "c", "failures": 1},
                                  instance_id="rw-parent")
failed = done(id)
c.rewind_orchestration(id)
say("child", failed=failed["status"], rewound=done(id), flaky=runs("flaky", "c"))

# One purged meanwhile is created again.
id = c.schedule_new_orchestration(rw_parent, input={"key": "d", "failures": 1,
                                                 "child_id": "rw-purged-child"},
                                  instance_id="rw-purging-parent")
failed = done(id)
purged = c.purge_orchestration("rw-purged-child").deleted_instance_count
c.rewind_orchestration(id)
say("purged child", failed=failed["status"], purged=purged, rewound=done(id),
    flaky=runs("flaky", "d"))

# A wasm orchestration of the host (`call_activity_of`, in the test guest)
# whose activity, the worker's, failed: rewound the same way.
id = c.schedule_new_orchestration("call_activity_of", instance_id="rw-wasm",
                                  input={"activity": "flaky", "strict": True,
                                         "input": {"key": "e", "failures": 1}})
failed = done(id)
c.rewind_orchestration(id)
say("wasm", failed=failed["status"], rewound=done(id), flaky=runs("flaky", "e"))

# One that failed in its own code runs its code again (as the managed
# scheduler rewinds it); its activity's result is kept.
own = c.schedule_new_orchestration(fails_once, input="f", instance_id="rw-own")
failed = done(own)
c.rewind_orchestration(own, reason="fixed")
say("own", failed=failed, rewound=done(own), own=runs("own", "f"), steady=runs("steady", "f"))

# What cannot be rewound says why.
say("refused", completed=refused(lambda: c.rewind_orchestration("rw-steps")),
    unknown=refused(lambda: c.rewind_orchestration("rw-never")))

# The histories, as the SDK's client reads them (`StreamInstanceHistory`):
# the failures a rewind took out are gone, an SDK orchestration's and a
# wasm one's alike.
def kinds(id):
    return [type(e).__name__.removesuffix("Event") for e in c.get_orchestration_history(id)
            if type(e).__name__ != "OrchestratorStartedEvent"]


say("history", steps=kinds("rw-steps"), wasm=kinds("rw-wasm"), own=kinds("rw-own"),
    unknown=refused(lambda: c.get_orchestration_history("rw-never")))
