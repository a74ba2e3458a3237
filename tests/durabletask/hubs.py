"""One task hub's SDK worker and client, both naming the hub in their
`taskhub` metadata as the managed scheduler's SDKs do (tests/task_hubs.rs).

usage: hubs.py ADDRESS HUB COUNT      worker + client on HUB: COUNT instances
       hubs.py ADDRESS HUB refused    a client only: one start, its refusal

The worker's activity answers with the worker's own hub, so an activity of
one hub run by another hub's worker shows in the output; every instance
signals one entity, whose count shows signals that crossed hubs; the query
lists every instance the client can see. The instance ids are the same in
every hub. Prints one JSON line a step.
"""

import json
import sys
import time

import grpc
from durabletask import client as dt
from durabletask import entities, task, worker

address, hub, what = sys.argv[1], sys.argv[2], sys.argv[3]
metadata = [("taskhub", hub)]


def say(step, **fields):
    print(json.dumps({"step": step, **fields}), flush=True)


class Counter(entities.DurableEntity):
    def add(self, amount):
        self.set_state(self.get_state(int, 0) + amount)


COUNTER = entities.EntityInstanceId("counter", "shared")


def hello(ctx, name):
    return f"{hub}:{name}"


def greet(ctx, name):
    answer = yield ctx.call_activity(hello, input=name)
    ctx.signal_entity(COUNTER, "add", input=1)
    return answer


c = dt.TaskHubGrpcClient(host_address=address, metadata=metadata)

if what == "refused":
    try:
        c.schedule_new_orchestration("greet", input="x", instance_id="i-refused")
        say("refused", code=None)
    except grpc.RpcError as e:
        say("refused", code=e.code().name, message=e.details())
    sys.exit(0)

count = int(what)
with worker.TaskHubGrpcWorker(host_address=address, metadata=metadata) as w:
    w.add_orchestrator(greet)
    w.add_activity(hello)
    w.add_entity(Counter)
    w.start()
    ids = [f"i-{k}" for k in range(count)]
    for id in ids:
        c.schedule_new_orchestration(greet, input=id, instance_id=id)
    outputs = []
    for id in ids:
        state = c.wait_for_orchestration_completion(id, timeout=120)
        outputs.append(json.loads(state.serialized_output) if state.serialized_output else None)
    say("outputs", outputs=outputs)
    # Signals are one-way: the count settles once every one is taken.
    deadline, value = time.time() + 60, None
    while time.time() < deadline:
        found = c.get_entity(COUNTER)
        value = found.get_state(int) if found is not None else None
        if value == count:
            break
        time.sleep(0.1)
    say("entity", value=value)
    seen = sorted(s.instance_id for s in c.get_all_orchestration_states()
                  if not s.instance_id.startswith("@"))
    say("instances", ids=seen)
