"""Critical sections on durable entities, written with the Durable Task
Python SDK and run by agenthost over gRPC (tests/durable_task_locks.rs).

usage: entity_locks.py worker ADDRESS LOG
       entity_locks.py scenario ADDRESS
       entity_locks.py transfers ADDRESS COUNT       (start two of them)
       entity_locks.py settled ADDRESS COUNT         (wait for them, read the accounts)

Two `transfers` orchestrations move one unit at a time between the same two
accounts in opposite directions, each move inside a lock on both: inside
the lock the two balances always sum to zero (a move half seen would not),
and once both are done each balance is zero again (a move applied twice or
lost would leave it off). The worker appends `moved KEY` to LOG for each
move an orchestration made, when not replaying it.
"""

import json
import sys
import time

import grpc
from durabletask import client as dt
from durabletask import entities, task, worker

mode, address = sys.argv[1], sys.argv[2]
log = sys.argv[3] if mode == "worker" else None

# Moves one execution makes before it continues as new: the history the
# worker replays stays short however many moves are asked for.
PER_EXECUTION = 20


def say(step, **fields):
    print(json.dumps({"step": step, **fields}), flush=True)


def note(line):
    with open(log, "a") as f:
        f.write(line + "\n")


class Account(entities.DurableEntity):
    def add(self, amount):
        self.set_state(self.get_state(int, 0) + amount)
        return self.get_state(int)

    def get(self):
        return self.get_state(int, 0)


def account(key):
    return entities.EntityInstanceId("account", key)


def transfers(ctx, state):
    """Moves `left` units from `source` to `target`, one per lock on both."""
    source, target = account(state["source"]), account(state["target"])
    left, seen_off = state["left"], state.get("seen_off", 0)
    for _ in range(min(left, PER_EXECUTION)):
        with (yield ctx.lock_entities([source, target])):
            balances = yield task.when_all([ctx.call_entity(source, "get"),
                                            ctx.call_entity(target, "get")])
            if sum(balances) != 0:
                seen_off += 1
            # One after the other: between the two, the move is half done.
            yield ctx.call_entity(source, "add", input=-1)
            yield ctx.call_entity(target, "add", input=1)
        left -= 1
        if not ctx.is_replaying:
            note(f"moved {ctx.instance_id} {left}")
    if left > 0:
        ctx.continue_as_new({**state, "left": left, "seen_off": seen_off})
        return None
    return {"seen_off": seen_off}


def forgets_to_release(ctx, key):
    # The lock is taken and never released by the code: the SDK releases it
    # as the orchestration completes.
    yield ctx.lock_entities([account(key)])
    return (yield ctx.call_entity(account(key), "add", input=1))


def throws_inside(ctx, key):
    with (yield ctx.lock_entities([account(key)])):
        yield ctx.call_entity(account(key), "add", input=1)
        raise ValueError("broke inside the lock")


def holds_until_told(ctx, key):
    # Locks, says so, and waits for an event it is never sent.
    with (yield ctx.lock_entities([account(key)])):
        ctx.set_custom_status("holding")
        yield ctx.wait_for_external_event("release")
    return "released"


def locks_then_calls(ctx, key):
    # The custom status is committed with the lock request: once it reads
    # "asking", the request is in the account's inbox.
    ctx.set_custom_status("asking")
    with (yield ctx.lock_entities([account(key)])):
        return (yield ctx.call_entity(account(key), "add", input=100))


def locks_pair(ctx, keys):
    with (yield ctx.lock_entities([account(k) for k in keys])):
        return (yield task.when_all([ctx.call_entity(account(k), "add", input=1) for k in keys]))


if mode == "worker":
    with worker.TaskHubGrpcWorker(host_address=address) as w:
        for orchestrator in (transfers, forgets_to_release, throws_inside, holds_until_told,
                             locks_then_calls, locks_pair):
            w.add_orchestrator(orchestrator)
        w.add_entity(Account)
        w.start()
        print("worker started", flush=True)
        while True:
            time.sleep(1)

c = dt.TaskHubGrpcClient(host_address=address)


def done(id, timeout=120):
    state = c.wait_for_orchestration_completion(id, timeout=timeout)
    return {
        "status": state.runtime_status.name,
        "output": json.loads(state.serialized_output) if state.serialized_output else None,
        "failure": state.failure_details.message if state.failure_details else None,
    }


def balance(key):
    metadata = c.get_entity(account(key))
    return metadata.get_state(int) if metadata is not None else None


def reaches(key, wanted, timeout=60):
    deadline = time.time() + timeout
    while balance(key) != wanted and time.time() < deadline:
        time.sleep(0.05)
    return balance(key)


def holder(key):
    # The SDK's `get_locked_by()` parses the holder as an entity id; the
    # protocol's field names an orchestration.
    metadata = c.get_entity(account(key), include_state=False)
    return getattr(metadata, "_locked_by", None) or None if metadata is not None else None


def released(key, timeout=60):
    # An orchestration's locks are let go by messages sent as it completes:
    # the account takes them a moment after the client hears of the
    # completion. A lock never let go still reads as held after `timeout`.
    deadline = time.time() + timeout
    while holder(key) is not None and time.time() < deadline:
        time.sleep(0.05)
    return holder(key)


def start_transfers(count, tag):
    pair = [("a", "b"), ("b", "a")]
    for i, (source, target) in enumerate(pair):
        c.schedule_new_orchestration(
            transfers, instance_id=f"{tag}-{i}",
            input={"source": f"{tag}-{source}", "target": f"{tag}-{target}", "left": count})


def settled(count, tag):
    return {
        "done": [done(f"{tag}-{i}", timeout=240) for i in range(2)],
        "balances": [balance(f"{tag}-a"), balance(f"{tag}-b")],
        "holders": [released(f"{tag}-a"), released(f"{tag}-b")],
    }


if mode == "transfers":
    start_transfers(int(sys.argv[3]), "kill")
    say("transfers", started=2)
    sys.exit(0)

if mode == "settled":
    say("settled", **settled(int(sys.argv[3]), "kill"))
    sys.exit(0)

# ---- the scenario ------------------------------------------------------------

# Two orchestrations move units between the same two accounts at once.
start_transfers(30, "pair")
say("transfers", **settled(30, "pair"))

# A lock the code never releases, and a lock held when the code throws: the
# account is free after each (a second lock on it is granted).
say("forgotten", **done(c.schedule_new_orchestration(forgets_to_release, input="f",
                                                         instance_id="forgets")),
    after=done(c.schedule_new_orchestration(locks_then_calls, input="f",
                                            instance_id="after-forgets")))
say("thrown", **done(c.schedule_new_orchestration(throws_inside, input="t",
                                                      instance_id="throws")),
    after=done(c.schedule_new_orchestration(locks_then_calls, input="t",
                                            instance_id="after-throws")))

# While held, what others send the account waits, in order: two signals
# and a call from another orchestration's lock; a terminate of the holder
# releases it, and they run in the order they came.
c.signal_entity(account("h"), "add", input=0)
reaches("h", 0)
holding = c.schedule_new_orchestration(holds_until_told, input="h", instance_id="holding")
deadline = time.time() + 60
while c.get_orchestration_state(holding).serialized_custom_status is None \
        and time.time() < deadline:
    time.sleep(0.05)
held_by = holder("h")
c.signal_entity(account("h"), "add", input=1)
waiter = c.schedule_new_orchestration(locks_then_calls, input="h", instance_id="waits-for-h")
while c.get_orchestration_state(waiter).serialized_custom_status is None \
        and time.time() < deadline:
    time.sleep(0.05)
c.signal_entity(account("h"), "add", input=10)
time.sleep(1.5)
while_held = {"balance": balance("h"), "waiter": c.get_orchestration_state(waiter)
              .runtime_status.name}
c.terminate_orchestration(holding, output="enough")
waited = done(waiter)
say("held", holder=held_by, while_held=while_held, waiter=waited,
    balance=reaches("h", 111), after=holder("h"))

# An orchestration terminated while its request waits at the second account
# (another holds it): the first is released at once; the second, granted
# to it once the holder lets go, is released too rather than kept by an
# orchestration that will never release it.
for key in ("p1", "p2"):
    c.signal_entity(account(key), "add", input=0)
    reaches(key, 0)
holder_of_p2 = c.schedule_new_orchestration(holds_until_told, input="p2", instance_id="holds-p2")
deadline = time.time() + 60
while holder("p2") is None and time.time() < deadline:
    time.sleep(0.05)
pair = c.schedule_new_orchestration(locks_pair, input=["p1", "p2"], instance_id="pair-waits")
deadline = time.time() + 60
while holder("p1") is None and time.time() < deadline:
    time.sleep(0.05)
waiting_at = {"p1": holder("p1"), "p2": holder("p2")}
c.terminate_orchestration(pair, output="gave up")
p1_next = done(c.schedule_new_orchestration(locks_then_calls, input="p1", instance_id="p1-next"))
c.terminate_orchestration(holder_of_p2, output="enough")
p2_next = done(c.schedule_new_orchestration(locks_then_calls, input="p2", instance_id="p2-next"))
say("abandoned", waiting_at=waiting_at, p1_next=p1_next, p2_next=p2_next,
    after=[released("p1"), released("p2")], balances=[reaches("p1", 100), reaches("p2", 100)])

# An entity whose state is deleted removes itself, its instance with it; an
# operation after creates it afresh.
gone = account("gone")
c.signal_entity(gone, "add", input=1)
reaches("gone", 1)
c.signal_entity(gone, "delete")
deadline = time.time() + 60
while c.get_orchestration_state(str(gone)) is not None and time.time() < deadline:
    time.sleep(0.05)
removed = c.get_orchestration_state(str(gone)) is None
c.signal_entity(gone, "add", input=5)
say("removed", removed=removed, again=reaches("gone", 5))

# Nothing is left to clean: no orphaned lock, no empty entity.
cleaned = c.clean_entity_storage(remove_empty_entities=True, release_orphaned_locks=True)
say("cleaned", removed=cleaned.empty_entities_removed, released=cleaned.orphaned_locks_released)

# The host's own messages to an entity cannot be forged by a raise.
def raise_refused(name):
    try:
        c.raise_orchestration_event(str(account("h")), name, data={"section": "x", "owner": "y"})
        return None
    except grpc.RpcError as e:
        return e.code().name


say("forged", codes=[raise_refused(n) for n in
                     ("entity-lock", "entity-unlock", "entity-wake", "entity-operation")],
    holder=holder("h"), balance=balance("h"))
