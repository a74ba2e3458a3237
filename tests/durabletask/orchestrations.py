"""Orchestrations written with the Durable Task Python SDK (PyPI
`durabletask`, pinned in the Makefile), run by agenthost over gRPC
(tests/durable_task_grpc.rs): a worker that serves them, and a client that
starts, raises, suspends, resumes, terminates, queries and purges them.

usage: orchestrations.py worker ADDRESS LOG
       orchestrations.py scenario ADDRESS
       orchestrations.py chains ADDRESS COUNT LENGTH     (start them)
       orchestrations.py finish ADDRESS COUNT            (wait for them)

The worker appends `start KEY` and `done KEY` to LOG for each activity it
runs, KEY naming the instance and the step. The client prints one JSON line
per step; the Rust test checks them.
"""

import json
import os
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone

from durabletask import client as dt
from durabletask import entities, task, worker

mode, address = sys.argv[1], sys.argv[2]


def say(step, **fields):
    print(json.dumps({"step": step, **fields}), flush=True)


# ---- the worker's side -----------------------------------------------------

log = sys.argv[3] if mode in ("worker", "narrow") else None


def note(line):
    with open(log, "a") as f:
        f.write(line + "\n")


def py_step(ctx, n):
    note(f"start {ctx.orchestration_id}/{n}")
    note(f"done {ctx.orchestration_id}/{n}")
    return n + 1


def py_square(ctx, n):
    return n * n


def py_fail(ctx, _):
    raise ValueError("no tea today")


def py_slow(ctx, key):
    note(f"start {key}")
    time.sleep(0.3)
    note(f"done {key}")
    return key


def sdk_sequence(ctx, n):
    for _ in range(3):
        n = yield ctx.call_activity(py_step, input=n)
    return n


def sdk_fan(ctx, n):
    results = yield task.when_all([ctx.call_activity(py_square, input=i) for i in range(n)])
    return sum(results)


def sdk_approval(ctx, seconds):
    approval = ctx.wait_for_external_event("approve")
    timeout = ctx.create_timer(timedelta(seconds=seconds))
    winner = yield task.when_any([approval, timeout])
    if winner == approval:
        return {"approved": approval.get_result()}
    return "timed out"


def sdk_parent(ctx, n):
    # An SDK child, a wasm child and a wasm activity, by name.
    child = yield ctx.call_sub_orchestrator(sdk_sequence, input=n)
    wasm = yield ctx.call_sub_orchestrator("sequence", input={"n": 3})
    instant = yield ctx.call_activity("instant", input=7)
    return {"sdk child": child, "wasm child": wasm, "wasm activity": instant}


def sdk_failing(ctx, _):
    yield ctx.call_activity(py_fail)
    return "unreachable"


def py_nap(ctx, key):
    note(f"start {key}")
    time.sleep(2)
    note(f"done {key}")
    return 1


def sdk_naps(ctx, n):
    naps = yield task.when_all([ctx.call_activity(py_nap, input=f"nap-{i}") for i in range(n)])
    return sum(naps)


def sdk_catching(ctx, _):
    try:
        yield ctx.call_activity(py_fail)
    except task.TaskFailedError as e:
        return {"type": e.details.error_type, "message": e.details.message,
                "stack": bool(e.details.stack_trace)}
    return "unreachable"


def sdk_empty(ctx, _):
    return None


def sdk_version(ctx, _):
    return ctx.version


def sdk_versioned_parent(ctx, _):
    # A child runs on the version its call names, not on its parent's.
    named = yield ctx.call_sub_orchestrator(sdk_version, version="1.0.0")
    unnamed = yield ctx.call_sub_orchestrator(sdk_version)
    return {"own": ctx.version, "named": named, "unnamed": unnamed}


def sdk_continue(ctx, n):
    square = yield ctx.call_activity(py_square, input=n)
    if n < 3:
        ctx.continue_as_new(n + 1)
        return None
    return {"n": n, "square": square, "started": ctx.current_utc_datetime.year > 2000}


def sdk_bump(ctx, inp):
    # Continues as new on version 2.0.
    if inp is None:
        ctx.continue_as_new("to-v2", new_version="2.0")
        return None
    return {"input": inp, "version": ctx.version}


def sdk_when(ctx, _):
    # When its first episode ran, on the clock the host hands the code.
    return ctx.current_utc_datetime.timestamp()


def sdk_continue_with_child(ctx, n):
    # Each execution calls a child under the id the SDK derives from the
    # parent's id and the task's number: the same id every execution.
    child = yield ctx.call_sub_orchestrator(sdk_sequence, input=n)
    if n < 3:
        ctx.continue_as_new(n + 1)
        return None
    return {"n": n, "child": child}


def sdk_waiter(ctx, _):
    ctx.set_custom_status("waiting")
    value = yield ctx.wait_for_external_event("go")
    return value


class Counter(entities.DurableEntity):
    """A counter entity: `add` an amount, `get` the count."""

    def add(self, amount):
        self.set_state(self.get_state(int, 0) + amount)
        return self.get_state(int)

    def get(self):
        return self.get_state(int, 0)


def sdk_counting(ctx, key):
    # Signals (not awaited), then a call that sees them, in order.
    counter = entities.EntityInstanceId("counter", key)
    ctx.signal_entity(counter, "add", input=2)
    ctx.signal_entity(counter, "add", input=3)
    after = yield ctx.call_entity(counter, "add", input=10)
    return after


def sdk_signals_later(ctx, key):
    # A signal scheduled three seconds after the episode's time.
    counter = entities.EntityInstanceId("counter", key)
    ctx.signal_entity(counter, "add", input=7,
                      signal_time=ctx.current_utc_datetime + timedelta(seconds=3))
    return "sent"


class Relay(entities.DurableEntity):
    """Passes an amount on: a signal to a counter, and an SDK and a wasm
    orchestration started, with the batch."""

    def forward(self, amount):
        self.signal_entity(entities.EntityInstanceId("counter", "relayed"), "add", input=amount)
        self.schedule_new_orchestration("sdk_sequence", input=amount,
                                        instance_id="sdk-from-entity")
        self.schedule_new_orchestration("sequence", input={"n": amount},
                                        instance_id="wasm-from-entity")
        return amount


class Sleepy(entities.DurableEntity):
    """An entity whose `nap` keeps its batch busy until the file it names
    exists (the client writes it once it has terminated the entity)."""

    def nap(self, marker):
        deadline = time.time() + 120
        while not os.path.exists(marker) and time.time() < deadline:
            time.sleep(0.05)
        return "woke"

    def get(self):
        return "awake"


def sdk_calls_sleepy(ctx, key):
    # The custom status is committed with the call: once it reads
    # "calling", the call waits in the entity's inbox.
    ctx.set_custom_status("calling")
    try:
        answer = yield ctx.call_entity(entities.EntityInstanceId("sleepy", key), "get")
        return f"answered {answer}"
    except task.TaskFailedError as e:
        return f"failed: {e.details.message}"


def sdk_nest(ctx, _):
    # Two children that wait for good: an SDK one and a wasm one.
    yield task.when_all([ctx.call_sub_orchestrator(sdk_waiter),
                         ctx.call_sub_orchestrator("wait_event", input=None)])
    return "unreachable"


def sdk_tree(ctx, _):
    # A child whose id the code chose; its own children get the SDK's.
    yield ctx.call_sub_orchestrator(sdk_nest, instance_id=f"{ctx.instance_id}-nest")
    return "unreachable"


def sdk_calls_odd_entity(ctx, _):
    # A key with '@': the protocol's ids allow it (the .NET SDK makes them),
    # this SDK's worker cannot parse it and gives every batch back.
    odd = object.__new__(entities.EntityInstanceId)
    odd.entity, odd.key = "counter", "x@y"
    try:
        yield ctx.call_entity(odd, "add", input=1)
        return "answered"
    except task.TaskFailedError as e:
        return f"failed: {e.details.message}"


def py_big(ctx, size):
    return "x" * size


def sdk_big(ctx, size):
    result = yield ctx.call_activity(py_big, input=size)
    return len(result)


def sdk_chain(ctx, length):
    for i in range(length):
        yield ctx.call_activity(py_slow, input=f"{ctx.instance_id}/{i}")
    return length


# A worker that runs two activities at once (it says so to the host) and
# naps in each: `narrow`.
if mode == "narrow":
    narrow = worker.ConcurrencyOptions(maximum_concurrent_activity_work_items=2)
    with worker.TaskHubGrpcWorker(host_address=address, concurrency_options=narrow) as w:
        w.add_orchestrator(sdk_naps)
        w.add_activity(py_nap)
        w.start()
        print("worker started", flush=True)
        while True:
            time.sleep(1)

if mode == "worker":
    with worker.TaskHubGrpcWorker(host_address=address) as w:
        for orchestrator in (sdk_sequence, sdk_fan, sdk_approval, sdk_parent, sdk_failing,
                             sdk_empty, sdk_version, sdk_versioned_parent, sdk_continue_with_child, sdk_signals_later, sdk_catching, sdk_continue, sdk_waiter, sdk_chain, sdk_counting,
                             sdk_calls_sleepy, sdk_big, sdk_tree, sdk_nest, sdk_bump, sdk_when,
                             sdk_calls_odd_entity):
            w.add_orchestrator(orchestrator)
        for entity in (Counter, Relay, Sleepy):
            w.add_entity(entity)
        # A class entity under a name of its own, in mixed case.
        w.add_entity(Counter, name="TallyCustom")
        for activity in (py_step, py_square, py_fail, py_slow, py_big):
            w.add_activity(activity)
        w.start()
        print("worker started", flush=True)
        while True:
            time.sleep(1)

# ---- the client's side -----------------------------------------------------

c = dt.TaskHubGrpcClient(host_address=address)


def done(id, timeout=90):
    state = c.wait_for_orchestration_completion(id, timeout=timeout)
    return {
        "status": state.runtime_status.name,
        "output": json.loads(state.serialized_output) if state.serialized_output else None,
        "failure": state.failure_details.message if state.failure_details else None,
        "error_type": state.failure_details.error_type if state.failure_details else None,
        "name": state.name,
    }


if mode == "chains":
    count, length = int(sys.argv[3]), int(sys.argv[4])
    for i in range(count):
        c.schedule_new_orchestration(sdk_chain, input=length, instance_id=f"chain-{i}")
    say("chains", started=count)
    sys.exit(0)

if mode == "naps":
    count = int(sys.argv[3])
    say("naps", **done(c.schedule_new_orchestration(sdk_naps, input=count, instance_id="sdk-naps"),
                       timeout=240))
    sys.exit(0)

if mode == "finish":
    count = int(sys.argv[3])
    say("finish", done={f"chain-{i}": done(f"chain-{i}", timeout=180) for i in range(count)})
    sys.exit(0)

# An instance of an orchestration no worker registers.
if mode == "unserved":
    say("unserved", id=c.schedule_new_orchestration("nobody_runs_this", instance_id=sys.argv[3]))
    sys.exit(0)

# The scenario: every kind of step, then the management calls.
say("sequence", **done(c.schedule_new_orchestration(sdk_sequence, input=1, instance_id="sdk-seq")))
say("fan", **done(c.schedule_new_orchestration(sdk_fan, input=5, instance_id="sdk-fan")))

raced = c.schedule_new_orchestration(sdk_approval, input=60, instance_id="sdk-approved")
c.wait_for_orchestration_start(raced, timeout=60)
c.raise_orchestration_event(raced, "approve", data={"by": "ann"})
say("approved", **done(raced))
say("timed out", **done(c.schedule_new_orchestration(sdk_approval, input=1,
                                                         instance_id="sdk-late")))

say("parent", **done(c.schedule_new_orchestration(sdk_parent, input=1, instance_id="sdk-parent")))
say("failing", **done(c.schedule_new_orchestration(sdk_failing, instance_id="sdk-failing")))
# No input, no output: absent, as the SDK sent them (not the text 'null').
empty = c.wait_for_orchestration_completion(
    c.schedule_new_orchestration(sdk_empty, instance_id="sdk-empty"), timeout=60)
say("empty", status=empty.runtime_status.name, input=empty.serialized_input,
    output=empty.serialized_output)
# A failed activity caught by the code: its error's own type and message,
# and its stack, as the worker reported them.
say("caught", **done(c.schedule_new_orchestration(sdk_catching, instance_id="sdk-catching")))
# The orchestration version the client started it with reaches its code.
say("version", **done(c.schedule_new_orchestration(sdk_version, instance_id="sdk-version",
                                                       version="2.5.0")))
say("child versions", **done(c.schedule_new_orchestration(
    sdk_versioned_parent, instance_id="sdk-versioned-parent", version="2.5.0")))
say("continue", **done(c.schedule_new_orchestration(sdk_continue, input=0,
                                                        instance_id="sdk-continue")))
say("continue with child", **done(c.schedule_new_orchestration(
    sdk_continue_with_child, input=0, instance_id="sdk-continue-child")))
say("continue on a new version", **done(c.schedule_new_orchestration(
    sdk_bump, instance_id="sdk-bump", version="1.0")))
# Started for later: Pending, nothing run, until its time; then it runs.
at = datetime.now(timezone.utc) + timedelta(seconds=3)
later = c.schedule_new_orchestration(sdk_when, instance_id="sdk-later", start_at=at)
time.sleep(1)
early = c.get_orchestration_state(later).runtime_status.name
ran = done(later)
say("scheduled start", early=early, status=ran["status"], at_ms=int(at.timestamp() * 1000),
    late_by=None if ran["output"] is None else ran["output"] - at.timestamp())
# Started for a time already past: runs at once, its start time kept as given.
past = datetime.now(timezone.utc) - timedelta(hours=1)
began = time.time()
overdue = done(c.schedule_new_orchestration(sdk_when, instance_id="sdk-overdue", start_at=past))
say("overdue start", status=overdue["status"], waited=time.time() - began,
    at_ms=int(past.timestamp() * 1000))

# A counter entity: signalled by the client, then called by an orchestration.
counter = entities.EntityInstanceId("counter", "c1")
c.signal_entity(counter, "add", input=1)
c.signal_entity(counter, "add", input=4)
deadline = time.time() + 60
while (c.get_entity(counter) is None or c.get_entity(counter).get_state(int) != 5) \
        and time.time() < deadline:
    time.sleep(0.1)
say("entity signalled", state=c.get_entity(counter).get_state(int),
    missing=c.get_entity(entities.EntityInstanceId("counter", "never")) is None)
say("entity called", **done(c.schedule_new_orchestration(sdk_counting, input="c1",
                                                             instance_id="sdk-counting")))
say("entity query", ids=sorted(str(e.id) for e in c.get_all_entities()),
    state=c.get_entity(counter).get_state(int))

# An entity's operation signals another entity and starts orchestrations
# (an SDK one and a wasm one), carried out with its batch.
c.signal_entity(entities.EntityInstanceId("relay", "r1"), "forward", input=4)


def started(id, timeout=60):
    deadline = time.time() + timeout
    while c.get_orchestration_state(id) is None and time.time() < deadline:
        time.sleep(0.1)
    return done(id)


def state_of(entity, wanted, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        metadata = c.get_entity(entity)
        if metadata is not None and metadata.get_state(int) == wanted:
            break
        time.sleep(0.1)
    metadata = c.get_entity(entity)
    return metadata.get_state(int) if metadata is not None else None


say("entity actions", sdk=started("sdk-from-entity"), wasm=started("wasm-from-entity"),
    relayed=state_of(entities.EntityInstanceId("counter", "relayed"), 4))

# A class entity registered under a name of its own (mixed case): signalled
# by that name, read back with its metadata, found by an id prefix.
tallies = [entities.EntityInstanceId("TallyCustom", k) for k in ("p1-t", "p2-t")]
for n, tally in enumerate(tallies):
    c.signal_entity(tally, "add", input=n + 1)
counted = [state_of(tally, n + 1) for n, tally in enumerate(tallies)]
meta = c.get_entity(tallies[0])
prefixed = c.get_all_entities(dt.EntityQuery(instance_id_starts_with="@tallycustom@p1"))
say("custom entity name", counted=counted, id=str(meta.id),
    locked=meta.get_locked_by(), before_now=meta.last_modified < datetime.now(timezone.utc),
    by_prefix=[str(e.id) for e in prefixed], prefixed_state=[e.get_state(int) for e in prefixed])

# Signals scheduled for later, by the client and by an orchestration: not
# seen before their time, carried out after it.
later = entities.EntityInstanceId("counter", "later")
sent_at = time.time()
c.signal_entity(later, "add", input=5,
                signal_time=datetime.now(timezone.utc) + timedelta(seconds=3))
time.sleep(1)
early = c.get_entity(later)
say("client signal later", early=early.get_state(int) if early is not None else None,
    state=state_of(later, 5), waited=round(time.time() - sent_at, 1))
later_too = entities.EntityInstanceId("counter", "later-too")
sent_at = time.time()
sent = done(c.schedule_new_orchestration(sdk_signals_later, input="later-too",
                                         instance_id="sdk-signals-later"))
time.sleep(0.5)
early = c.get_entity(later_too)
say("orchestration signal later", sent=sent["output"],
    early=early.get_state(int) if early is not None else None,
    state=state_of(later_too, 7), waited=round(time.time() - sent_at, 1))

# An entity terminated with a call queued behind a long batch: the caller
# is told, not left waiting.
sleepy = entities.EntityInstanceId("sleepy", "z1")
marker = os.path.join(tempfile.mkdtemp(), "wake")
c.signal_entity(sleepy, "nap", input=marker)
caller = c.schedule_new_orchestration(sdk_calls_sleepy, input="z1", instance_id="sdk-calls-sleepy")
deadline = time.time() + 60
while c.get_orchestration_state(caller).serialized_custom_status is None and time.time() < deadline:
    time.sleep(0.05)
c.terminate_orchestration(str(sleepy), output="closed")
told = done(caller)
open(marker, "w").close()
say("entity terminated", **told)

# A batch its worker gives back every time fails after ten; its caller hears.
say("given back", **done(c.schedule_new_orchestration(sdk_calls_odd_entity,
                                                          instance_id="sdk-odd-entity")))

# An activity's result past the payload limit (1 MiB) reaches the host
# whole and fails its task saying why; it is never run again and again.
say("too large", **done(c.schedule_new_orchestration(sdk_big, input=2 << 20,
                                                         instance_id="sdk-big")))

# Suspend, raise while suspended, resume.
waiter = c.schedule_new_orchestration(sdk_waiter, instance_id="sdk-waiter")
started = c.wait_for_orchestration_start(waiter, timeout=60)
deadline = time.time() + 30
while c.get_orchestration_state(waiter).serialized_custom_status is None and time.time() < deadline:
    time.sleep(0.1)
say("custom status", value=c.get_orchestration_state(waiter).serialized_custom_status)
c.suspend_orchestration(waiter)
c.raise_orchestration_event(waiter, "go", data="on")
time.sleep(1.5)
say("suspended", status=c.get_orchestration_state(waiter).runtime_status.name)
c.resume_orchestration(waiter)
say("resumed", **done(waiter))

# Terminate, query, purge.
stuck = c.schedule_new_orchestration(sdk_waiter, instance_id="sdk-stuck")
c.wait_for_orchestration_start(stuck, timeout=60)
c.terminate_orchestration(stuck, output="enough")
say("terminated", **done(stuck))
states = c.get_all_orchestration_states()
say("query", ids=sorted(s.instance_id for s in states if s.instance_id.startswith("sdk-")),
    names=sorted({s.name for s in states if s.instance_id.startswith("sdk-")}),
    entities=sorted(s.instance_id for s in states if s.instance_id.startswith("@")))
# The ids of ended orchestrations, two a page, following the key.
ids, token, pages = [], None, 0
while pages < 100:
    page = c.list_instance_ids(runtime_status=[dt.OrchestrationStatus.COMPLETED],
                               page_size=2, continuation_token=token)
    ids += page.items
    pages += 1
    token = page.continuation_token
    if token is None:
        break
failed_ids = c.list_instance_ids(runtime_status=[dt.OrchestrationStatus.FAILED]).items
running_ids = c.list_instance_ids(runtime_status=[dt.OrchestrationStatus.RUNNING]).items
say("instance ids", completed=sorted(i for i in ids if i.startswith("sdk-")), pages=pages,
    unique=len(ids) == len(set(ids)), entities=[i for i in ids if i.startswith("@")],
    failed=sorted(i for i in failed_ids if i.startswith("sdk-")), running=running_ids,
    terminated="sdk-stuck" in c.list_instance_ids().items)
purged = c.purge_orchestration(stuck)
say("purged", deleted=purged.deleted_instance_count, after=c.get_orchestration_state(stuck) is None)
say("purge unknown", deleted=c.purge_orchestration("sdk-never").deleted_instance_count)

# A tree of sub-orchestrations (SDK and wasm, two deep, ids chosen by the
# code and by the SDK): a terminate stops them all and a purge deletes them
# all, recursive as the SDK's defaults.
tree = c.schedule_new_orchestration(sdk_tree, instance_id="sdk-tree")
deadline = time.time() + 60
while len(c.get_all_orchestration_states()) and time.time() < deadline:
    below = [s for s in c.get_all_orchestration_states()
             if s.instance_id.startswith("sdk-tree") and s.instance_id != "sdk-tree"]
    if len(below) == 3 and all(s.runtime_status.name == "RUNNING" for s in below):
        break
    time.sleep(0.1)
c.terminate_orchestration(tree, output="felled")
below = lambda: sorted((s.instance_id, s.name, s.runtime_status.name)
                       for s in c.get_all_orchestration_states()
                       if s.instance_id.startswith("sdk-tree"))
say("tree terminated", tree=done(tree), below=below())
say("tree purged", deleted=c.purge_orchestration(tree).deleted_instance_count, left=below())

# More slow entity batches than the engine runs episodes at once (32): they
# wait for their worker without holding the engine's slots, so a wasm
# orchestration started behind them completes while they wait.
crowd = os.path.join(tempfile.mkdtemp(), "wake")
for i in range(40):
    c.signal_entity(entities.EntityInstanceId("sleepy", f"crowd-{i}"), "nap", input=crowd)
time.sleep(1)
begun = time.time()
behind = c.schedule_new_orchestration("sequence", input={"n": 2}, instance_id="wasm-behind-crowd")
state = c.wait_for_orchestration_completion(behind, timeout=30)
waited = round(time.time() - begun, 1)
open(crowd, "w").close()
say("crowd", wasm=state.runtime_status.name if state else None, waited=waited)
