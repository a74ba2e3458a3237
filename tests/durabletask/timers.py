"""Short durable timers and retry backoff, written with the Durable Task
Python SDK (PyPI `durabletask`) and run by agenthost over gRPC
(tests/timers_on_time.rs).

usage: timers.py worker ADDRESS
       timers.py timers ADDRESS ROUNDS MS [MS ...]
       timers.py retry ADDRESS MS
       timers.py signal ADDRESS MS
       timers.py later ADDRESS MS

Each orchestration reports its own times (the SDK's
`current_utc_datetime`, the host's time of each episode), so how late a
timer fired is read on the host's clock, not this client's. The client
starts one instance at a time and prints one JSON line per step.
"""

import json
import sys
import time
from datetime import datetime, timedelta, timezone

from durabletask import client as dt
from durabletask import entities, task, worker

mode, address = sys.argv[1], sys.argv[2]


def say(step, **fields):
    print(json.dumps({"step": step, **fields}), flush=True)


def millis(later, earlier):
    return round((later - earlier).total_seconds() * 1000)


def sdk_timer(ctx, ms):
    armed = ctx.current_utc_datetime
    yield ctx.create_timer(timedelta(milliseconds=ms))
    return {"waited": millis(ctx.current_utc_datetime, armed)}


def sdk_started(ctx, _):
    # Its first episode's time, in ms since the epoch.
    return round(ctx.current_utc_datetime.replace(tzinfo=timezone.utc).timestamp() * 1000)


def py_fail(ctx, _):
    raise ValueError("this activity always fails")


def sdk_retry(ctx, ms):
    # Three attempts, `ms` apart: the SDK waits on a durable timer between
    # two attempts.
    policy = task.RetryPolicy(first_retry_interval=timedelta(milliseconds=ms),
                              max_number_of_attempts=3)
    started = ctx.current_utc_datetime
    try:
        yield ctx.call_activity(py_fail, retry_policy=policy)
        failed = False
    except task.TaskFailedError:
        failed = True
    return {"took": millis(ctx.current_utc_datetime, started), "failed": failed}


class Stamp(entities.DurableEntity):
    """Keeps the wall-clock time (ms) of its last `stamp`."""

    def stamp(self, _):
        self.set_state(round(time.time() * 1000))


if mode == "worker":
    with worker.TaskHubGrpcWorker(host_address=address) as w:
        w.add_orchestrator(sdk_timer)
        w.add_orchestrator(sdk_retry)
        w.add_orchestrator(sdk_started)
        w.add_activity(py_fail)
        w.add_entity(Stamp)
        w.start()
        print("worker started", flush=True)
        while True:
            time.sleep(1)

c = dt.TaskHubGrpcClient(host_address=address)


def run(orchestrator, ms):
    id = c.schedule_new_orchestration(orchestrator, input=ms)
    state = c.wait_for_orchestration_completion(id, timeout=60)
    if state.runtime_status.name != "COMPLETED":
        raise SystemExit(f"{id}: {state.runtime_status.name} {state.failure_details}")
    return json.loads(state.serialized_output)


if mode == "timers":
    rounds = int(sys.argv[3])
    for ms in map(int, sys.argv[4:]):
        say(f"timer {ms}", waited=[run(sdk_timer, ms)["waited"] for _ in range(rounds)])
    sys.exit(0)

if mode == "retry":
    ms = int(sys.argv[3])
    say("retry", **run(sdk_retry, ms))
    sys.exit(0)

# An instance started for `ms` later: when its code began, against when it
# was asked for (this client and the host share the machine's clock).
if mode == "later":
    ms = int(sys.argv[3])
    sent = round(time.time() * 1000)
    id = c.schedule_new_orchestration(sdk_started, start_at=datetime.now(timezone.utc) + timedelta(milliseconds=ms))
    state = c.wait_for_orchestration_completion(id, timeout=60)
    say("later", waited=json.loads(state.serialized_output) - sent)
    sys.exit(0)

# An operation signalled for `ms` later (the host that stores it may not
# be the one that runs the entity): when it ran, against when it was due.
# This client and the worker share the machine's clock.
if mode == "signal":
    ms = int(sys.argv[3])
    # An entity of its own for each run.
    stamp = entities.EntityInstanceId("stamp", f"later-{time.time_ns()}")

    def stamped():
        entity = c.get_entity(stamp)
        return entity.get_state(int) if entity is not None else None

    def stamped_after(before):
        deadline = time.time() + 60
        while time.time() < deadline:
            now = stamped()
            if now is not None and now != before:
                return now
            time.sleep(0.02)
        raise SystemExit("the entity never ran the operation")

    # Created first, so the late signal meets an entity at rest.
    c.signal_entity(stamp, "stamp")
    first = stamped_after(None)
    sent = round(time.time() * 1000)
    c.signal_entity(stamp, "stamp", signal_time=datetime.now(timezone.utc) + timedelta(milliseconds=ms))
    say("signal", waited=stamped_after(first) - sent)
    sys.exit(0)
