"""What the Durable Task SDK's own emulator suite (microsoft/durabletask-python,
tests/durabletask-azuremanaged, run unmodified by `make durabletask-conformance`)
checks, in our words, so that `make test` holds the line without a fetched
copy of it (tests/durable_task_suite_behaviours.rs reads the lines printed).

usage: suite_behaviours.py scenario ADDRESS    the sync and the async client
       suite_behaviours.py filters ADDRESS     work item filters and versions
       suite_behaviours.py schedules ADDRESS   the SDK's scheduled tasks
       suite_behaviours.py payloads ADDRESS    large payloads kept outside

Each mode runs its own worker in this process (the suite's way), then prints
one JSON line per step.
"""

import asyncio
import json
import sys
import threading
import time
import uuid
from collections import Counter
from datetime import datetime, timedelta, timezone

from durabletask import client as dt
from durabletask import entities, task, worker

mode, address = sys.argv[1], sys.argv[2]

# What the activities and orchestrations ran (not replays), in this process.
_lock = threading.Lock()
ran = Counter()


def count(key):
    with _lock:
        ran[key] += 1


def runs(key):
    with _lock:
        return ran[key]


def say(step, **fields):
    print(json.dumps({"step": step, **fields}, default=str), flush=True)


def view(state):
    """What a test reads of an instance's state."""
    if state is None:
        return None
    return {
        "id": state.instance_id,
        "name": state.name,
        "status": state.runtime_status.name,
        "input": state.serialized_input,
        "output": state.serialized_output,
        "custom": state.serialized_custom_status,
        "failure": None if state.failure_details is None else {
            "type": state.failure_details.error_type,
            "message": state.failure_details.message,
            "stack": bool(state.failure_details.stack_trace),
        },
    }


# ---- orchestrations and activities ----------------------------------------

def plus_one(ctx, n):
    count("plus_one")
    return n + 1


def refuse(ctx, what):
    count(f"refuse {what}")
    raise RuntimeError(f"refused {what}")


def undo(ctx, what):
    count("undo")
    return f"undone {what}"


def nothing(ctx, _):
    return None


def climb(ctx, n):
    # Ten activities in a row, each result the next one's input.
    seen = [n]
    for _ in range(10):
        n = yield ctx.call_activity(plus_one, input=n)
        seen.append(n)
    return seen


def compensate(ctx, _):
    # A failure caught, then two activities that undo what came before.
    try:
        yield ctx.call_activity(refuse, input="booking")
    except task.TaskFailedError as e:
        undone = yield task.when_all([ctx.call_activity(undo, input=w) for w in ("hotel", "car")])
        return {"caught": e.details.message, "undone": undone}
    return "unreachable"


def three_steps(ctx, n):
    total = n
    for _ in range(3):
        total = yield ctx.call_activity(plus_one, input=total)
    return total


def child_fan(ctx, n):
    # `n` sub-orchestrations at once, three activities each.
    results = yield task.when_all([ctx.call_sub_orchestrator(three_steps, input=i) for i in range(n)])
    return sum(results)


def three_events(ctx, _):
    # Events raised before the code waits wait in order, taken by name.
    a = yield ctx.wait_for_external_event("A")
    b = yield ctx.wait_for_external_event("B")
    c = yield ctx.wait_for_external_event("C")
    return [a, b, c]


def status_then_end(ctx, _):
    ctx.set_custom_status("almost there")
    return None


def forever(ctx, _):
    yield ctx.wait_for_external_event("never")
    return "unreachable"


def parent_of_forever(ctx, _):
    yield ctx.call_sub_orchestrator(forever, instance_id=f"{ctx.instance_id}-child")
    return "unreachable"


FAST = task.RetryPolicy(first_retry_interval=timedelta(seconds=1), max_number_of_attempts=3,
                        backoff_coefficient=1)


def retried_child(ctx, _):
    if not ctx.is_replaying:
        count("retried_child")
    yield ctx.call_activity(refuse, input="retried", retry_policy=FAST)
    return "unreachable"


def retried_parent(ctx, _):
    # Three attempts of a child, each of three attempts of an activity.
    yield ctx.call_sub_orchestrator(retried_child, retry_policy=FAST)
    return "unreachable"


def timed_out_retries(ctx, _):
    # Waits of 1, 2, 4 s; the next (8 s) would end past the 14 s allowed.
    policy = task.RetryPolicy(first_retry_interval=timedelta(seconds=1), max_number_of_attempts=6,
                              backoff_coefficient=2, retry_timeout=timedelta(seconds=14))
    yield ctx.call_activity(refuse, input="timed", retry_policy=policy)
    return "unreachable"


def uuids(ctx, _):
    # Replayed after each activity: the same three every time.
    first = ctx.new_uuid()
    yield ctx.call_activity(plus_one, input=0)
    second = ctx.new_uuid()
    yield ctx.call_activity(plus_one, input=1)
    third = ctx.new_uuid()
    return [str(first), str(second), str(third)]


def unencodable(ctx, _):
    return object()


class Account(entities.DurableEntity):
    def add(self, amount):
        self.set_state(self.get_state(int, 0) + amount)

    def get(self):
        return self.get_state(int, 0)


def inside_a_lock(ctx, key):
    # What the SDK refuses inside a critical section: signalling an entity
    # it holds, and a second call while one is under way.
    account = entities.EntityInstanceId("account", key)
    with (yield ctx.lock_entities([account])):
        try:
            ctx.signal_entity(account, "add", input=1)
            signal_refused = False
        except Exception:
            signal_refused = True
        pending = ctx.call_entity(account, "get")
        try:
            ctx.call_entity(account, "get")
            second_refused = False
        except Exception:
            second_refused = True
        balance = yield pending
    return {"signal_refused": signal_refused, "second_refused": second_refused,
            "balance": balance}


ORCHESTRATORS = (nothing, climb, compensate, three_steps, child_fan, three_events,
                 status_then_end, forever, parent_of_forever, retried_child, retried_parent,
                 timed_out_retries, uuids, unencodable, inside_a_lock)
ACTIVITIES = (plus_one, refuse, undo)


def serving(w):
    for o in ORCHESTRATORS:
        w.add_orchestrator(o)
    for a in ACTIVITIES:
        w.add_activity(a)
    w.add_entity(Account)
    return w


# ---- the sync and the async client over the same behaviours ----------------

class Sync:
    """The blocking client, with the async one's shape."""

    def __init__(self):
        self.c = dt.TaskHubGrpcClient(host_address=address)

    async def call(self, name, *args, **kwargs):
        return getattr(self.c, name)(*args, **kwargs)


class Async:
    def __init__(self):
        self.c = dt.AsyncTaskHubGrpcClient(host_address=address)

    async def call(self, name, *args, **kwargs):
        return await getattr(self.c, name)(*args, **kwargs)


async def behaviours(client, tag):
    call = client.call

    async def done(id, timeout=90):
        return view(await call("wait_for_orchestration_completion", id, timeout=timeout))

    async def start(orchestrator, **kwargs):
        return await call("schedule_new_orchestration", orchestrator,
                          instance_id=f"{tag}-{orchestrator.__name__}-{uuid.uuid4().hex[:6]}",
                          **kwargs)

    # The long ones first, awaited last.
    retried = await start(retried_parent)
    timed = await start(timed_out_retries)

    id = await start(nothing)
    say(f"{tag} empty", asked=id, **await done(id))
    id = await start(climb, input=1)
    say(f"{tag} sequence", **await done(id))
    id = await start(compensate)
    say(f"{tag} compensation", **await done(id), undone=runs("undo"))
    before = runs("plus_one")
    id = await start(child_fan, input=10)
    say(f"{tag} child fan-out", **await done(id), activities=runs("plus_one") - before)
    id = await start(three_events)
    for name in ("A", "B", "C"):
        await call("raise_orchestration_event", id, name, data=name.lower())
    say(f"{tag} events before the wait", **await done(id))
    id = await start(status_then_end)
    say(f"{tag} custom status", **await done(id))
    id = await start(uuids)
    say(f"{tag} new uuid", **await done(id))
    id = await start(unencodable)
    say(f"{tag} unencodable output", **await done(id))

    # Terminated with an output, once running; recursively, with its child.
    id = await start(forever)
    started = view(await call("wait_for_orchestration_start", id, timeout=30))
    await call("terminate_orchestration", id, output="stopped")
    say(f"{tag} terminate", started=started["status"], **await done(id))
    root = await start(parent_of_forever)
    deadline = time.time() + 30
    while time.time() < deadline and (view(await call("get_orchestration_state", f"{root}-child"))
                                      or {}).get("status") != "RUNNING":
        await asyncio.sleep(0.1)
    await call("terminate_orchestration", root, recursive=True)
    ended = await done(root)
    child = await done(f"{root}-child")
    purged = await call("purge_orchestration", root, recursive=True)
    say(f"{tag} terminate recursive", root=ended["status"], child=child["status"],
        deleted=purged.deleted_instance_count,
        after=view(await call("get_orchestration_state", root)),
        child_after=view(await call("get_orchestration_state", f"{root}-child")))

    # Restarted under its own id, and under a new one.
    id = await start(three_steps, input=5)
    await done(id)
    same = await call("restart_orchestration", id)
    again = await done(same)
    fresh = await call("restart_orchestration", id, restart_with_new_instance_id=True)
    say(f"{tag} restart", same=same == id, again=again, fresh_is_new=fresh != id,
        fresh=await done(fresh))

    # The retries, run meanwhile.
    say(f"{tag} retry policies", **await done(retried, timeout=120))
    say(f"{tag} retry timeout", **await done(timed, timeout=120))


def counts_of_retries(tag):
    say(f"{tag} retry runs", child=runs("retried_child"), activity=runs("refuse retried"),
        timed=runs("refuse timed"))


if mode == "scenario":
    with serving(worker.TaskHubGrpcWorker(host_address=address)) as w:
        w.start()
        c = dt.TaskHubGrpcClient(host_address=address)
        asyncio.run(behaviours(Sync(), "sync"))
        counts_of_retries("sync")
        with _lock:
            ran.clear()

        async def with_async():
            client = Async()
            try:
                await behaviours(client, "async")
            finally:
                await client.c.close()
        asyncio.run(with_async())
        counts_of_retries("async")

        # Queries: by creation time, by status, with and without payloads.
        before = datetime.now(timezone.utc) - timedelta(seconds=2)
        ok = c.schedule_new_orchestration(climb, input=1, instance_id="query-ok")
        bad = c.schedule_new_orchestration(compensate, instance_id="query-bad")
        c.wait_for_orchestration_completion(ok, timeout=60)
        c.wait_for_orchestration_completion(bad, timeout=60)
        failing = c.schedule_new_orchestration(unencodable, instance_id="query-failed")
        c.wait_for_orchestration_completion(failing, timeout=60)
        after = datetime.now(timezone.utc) + timedelta(seconds=2)
        later = after + timedelta(hours=1)

        def ids(query):
            return sorted(s.instance_id for s in c.get_all_orchestration_states(query)
                          if s.instance_id.startswith("query-"))

        plain = {s.instance_id: s for s in c.get_all_orchestration_states(
            dt.OrchestrationQuery(instance_id_prefix="query-"))}
        fetched = {s.instance_id: s for s in c.get_all_orchestration_states(
            dt.OrchestrationQuery(instance_id_prefix="query-", fetch_inputs_and_outputs=True))}
        failed = c.get_all_orchestration_states(dt.OrchestrationQuery(
            instance_id_prefix="query-", runtime_status=[dt.OrchestrationStatus.FAILED],
            fetch_inputs_and_outputs=True))
        say("query",
            in_window=ids(dt.OrchestrationQuery(created_time_from=before, created_time_to=after)),
            later_window=ids(dt.OrchestrationQuery(created_time_from=after, created_time_to=later)),
            plain={"input": plain["query-ok"].serialized_input,
                   "output": plain["query-ok"].serialized_output},
            fetched={"input": fetched["query-ok"].serialized_input,
                     "output": fetched["query-ok"].serialized_output},
            failed=[view(s) for s in failed])
        # Purged by creation time and status: a window that holds them, then
        # one that holds nothing.
        gone = c.purge_orchestrations_by(created_time_from=before, created_time_to=after,
                                         runtime_status=[dt.OrchestrationStatus.COMPLETED])
        none = c.purge_orchestrations_by(created_time_from=after, created_time_to=later,
                                         runtime_status=[dt.OrchestrationStatus.COMPLETED])
        say("purge by time", deleted=gone.deleted_instance_count,
            ok=view(c.get_orchestration_state("query-ok")),
            failed_kept=view(c.get_orchestration_state("query-failed")) is not None,
            later_deleted=none.deleted_instance_count)

        # Entities: listed without their state, and by when they last changed.
        touched_from = datetime.now(timezone.utc) - timedelta(seconds=2)
        account = entities.EntityInstanceId("account", "listed")
        c.signal_entity(account, "add", input=5)
        deadline = time.time() + 30
        while (c.get_entity(account) is None or c.get_entity(account).get_state(int) != 5) \
                and time.time() < deadline:
            time.sleep(0.1)
        touched_to = datetime.now(timezone.utc) + timedelta(seconds=2)

        def listed(query):
            return {str(e.id): e for e in c.get_all_entities(query)}

        bare = listed(dt.EntityQuery(include_state=False)).get("@account@listed")
        say("entity queries",
            bare=None if bare is None else {"state": bare.get_state(int)},
            full=listed(dt.EntityQuery()).get("@account@listed").get_state(int),
            in_window=sorted(listed(dt.EntityQuery(last_modified_from=touched_from,
                                                   last_modified_to=touched_to))),
            later_window=sorted(listed(dt.EntityQuery(
                last_modified_from=touched_to, last_modified_to=touched_to + timedelta(hours=1)))))

        id = c.schedule_new_orchestration(inside_a_lock, input="listed",
                                          instance_id="inside-a-lock")
        say("inside a lock", **view(c.wait_for_orchestration_completion(id, timeout=60)))
    sys.exit(0)


# ---- work item filters and versions: a worker per configuration -----------

def f_orch(ctx, n):
    result = yield ctx.call_activity(f_plus_one, input=n)
    return result


def f_plus_one(ctx, n):
    return n + 1


def f_other(ctx, _):
    return "other"


def f_filtered_out(ctx, _):
    return "ran"


def f_versioned(ctx, n):
    return n + 1


def f_pinned(ctx, n):
    return n - 1


def f_strict(ctx, _):
    return "ran"


def f_not_newer(ctx, _):
    return "ran"


class Tally(entities.DurableEntity):
    def add(self, amount):
        self.set_state(self.get_state(int, 0) + amount)


entity_pings = []


class Allowed(entities.DurableEntity):
    def ping(self):
        entity_pings.append("allowed")


class Blocked(entities.DurableEntity):
    def ping(self):
        entity_pings.append("blocked")


def status_of(c, id):
    state = c.get_orchestration_state(id)
    return None if state is None else state.runtime_status.name


def finished(c, id):
    return view(c.wait_for_orchestration_completion(id, timeout=60))


def configured(setup):
    w = worker.TaskHubGrpcWorker(host_address=address)
    setup(w)
    w.start()
    return w


if mode == "filters":
    c = dt.TaskHubGrpcClient(host_address=address)
    started = datetime.now(timezone.utc)

    # Filters derived from what the worker registers.
    def auto(w):
        w.add_orchestrator(f_orch)
        w.add_activity(f_plus_one)
        w.use_work_item_filters()
    with configured(auto):
        say("auto filters", **finished(c, c.schedule_new_orchestration(f_orch, input=5)))

    # Filters named explicitly: an orchestration, its activity, an entity.
    def explicit(w):
        w.add_orchestrator(f_orch)
        w.add_activity(f_plus_one)
        w.add_entity(Tally)
        w.use_work_item_filters(worker.WorkItemFilters(
            orchestrations=[worker.OrchestrationWorkItemFilter(name="f_orch")],
            activities=[worker.ActivityWorkItemFilter(name="f_plus_one")],
            entities=[worker.EntityWorkItemFilter(name="tally")]))
    with configured(explicit):
        answer = finished(c, c.schedule_new_orchestration(f_orch, input=10))
        tally = entities.EntityInstanceId("tally", "t")
        c.signal_entity(tally, "add", input=10)
        deadline = time.time() + 30
        while c.get_entity(tally) is None and time.time() < deadline:
            time.sleep(0.1)
        entity = c.get_entity(tally)
        say("explicit filters", **answer, entity=None if entity is None else entity.get_state(int))

    # What no filter names is not sent: it waits, Pending.
    def narrow(w):
        w.add_orchestrator(f_filtered_out)
        w.add_orchestrator(f_other)
        w.add_entity(Allowed)
        w.add_entity(Blocked)
        w.use_work_item_filters(worker.WorkItemFilters(
            orchestrations=[worker.OrchestrationWorkItemFilter(name="f_other")],
            entities=[worker.EntityWorkItemFilter(name="allowed")]))
    with configured(narrow):
        waiting = c.schedule_new_orchestration(f_filtered_out, instance_id="filtered-out")
        other = finished(c, c.schedule_new_orchestration(f_other))
        c.signal_entity(entities.EntityInstanceId("allowed", "a"), "ping")
        c.signal_entity(entities.EntityInstanceId("blocked", "b"), "ping")
        deadline = time.time() + 30
        while "allowed" not in entity_pings and time.time() < deadline:
            time.sleep(0.1)
        time.sleep(2)
        say("not matching", other=other, waiting=status_of(c, waiting), pings=sorted(entity_pings))

    # Strict versions with filters: only instances of the worker's version.
    def strict(w):
        w.add_orchestrator(f_versioned)
        w.use_versioning(worker.VersioningOptions(
            version="2.0", default_version="2.0",
            match_strategy=worker.VersionMatchStrategy.STRICT,
            failure_strategy=worker.VersionFailureStrategy.FAIL))
        w.use_work_item_filters()
    with configured(strict):
        old = c.schedule_new_orchestration(f_versioned, input=1, version="1.0")
        unversioned = c.schedule_new_orchestration(f_versioned, input=1)
        matching = finished(c, c.schedule_new_orchestration(f_versioned, input=10, version="2.0"))
        time.sleep(2)
        say("strict versions", matching=matching, old=status_of(c, old),
            unversioned=status_of(c, unversioned))

    # A filter that lists versions.
    def pinned(w):
        w.add_orchestrator(f_pinned)
        w.use_work_item_filters(worker.WorkItemFilters(
            orchestrations=[worker.OrchestrationWorkItemFilter(name="f_pinned", versions=["3.0"])]))
    with configured(pinned):
        other_version = c.schedule_new_orchestration(f_pinned, input=3, version="2.0")
        listed_version = finished(c, c.schedule_new_orchestration(f_pinned, input=3, version="3.0"))
        time.sleep(2)
        say("filter versions", listed=listed_version, other=status_of(c, other_version))

    # No filters, versioning that fails what it does not take.
    def strict_failing(w):
        w.add_orchestrator(f_strict)
        w.use_versioning(worker.VersioningOptions(
            version="1.0.0", default_version="1.0.0",
            match_strategy=worker.VersionMatchStrategy.STRICT,
            failure_strategy=worker.VersionFailureStrategy.FAIL))
    with configured(strict_failing):
        say("strict mismatch", **finished(c, c.schedule_new_orchestration(f_strict,
                                                                           version="2.0.0")))

    def not_newer(w):
        w.add_orchestrator(f_not_newer)
        w.use_versioning(worker.VersioningOptions(
            version="1.0.0", default_version="1.0.0",
            match_strategy=worker.VersionMatchStrategy.CURRENT_OR_OLDER,
            failure_strategy=worker.VersionFailureStrategy.FAIL))
    with configured(not_newer):
        say("newer version", **finished(c, c.schedule_new_orchestration(f_not_newer,
                                                                         version="1.1.0")),
            older=finished(c, c.schedule_new_orchestration(f_not_newer, version="0.9.0")))
    sys.exit(0)


# ---- the SDK's scheduled tasks ----------------------------------------------

def ticked(ctx, value):
    if not ctx.is_replaying:
        count(f"tick {value}")
    return value


if mode == "schedules":
    from durabletask.scheduled import (ScheduleCreationOptions, ScheduledTaskClient,
                                       ScheduleQuery, ScheduleStatus, ScheduleUpdateOptions)

    def wait_until(check, timeout=30):
        deadline = time.time() + timeout
        while not check() and time.time() < deadline:
            time.sleep(0.2)
        return check()

    w = worker.TaskHubGrpcWorker(host_address=address)
    w.add_orchestrator(ticked)
    w.configure_scheduled_tasks()
    with w:
        w.start()
        sc = ScheduledTaskClient(dt.TaskHubGrpcClient(host_address=address))
        now = datetime.now(timezone.utc)
        every = sc.create_schedule(ScheduleCreationOptions(
            schedule_id="every-second", orchestration_name="ticked", interval=timedelta(seconds=1),
            orchestration_input="hello", start_at=now, start_immediately_if_late=True))
        ticking = wait_until(lambda: runs("tick hello") >= 1)
        described = every.describe()
        say("schedule runs", ran=ticking, id=described.schedule_id, status=described.status.name,
            last_run=described.last_run_at is not None)

        every.pause()
        paused = every.describe().status.name
        time.sleep(2)
        held = runs("tick hello")
        time.sleep(3)
        still = runs("tick hello")
        every.resume()
        resumed = every.describe().status.name
        again = wait_until(lambda: runs("tick hello") > still)
        say("schedule paused", paused=paused, held=held == still, resumed=resumed, again=again)
        every.delete()

        later = sc.create_schedule(ScheduleCreationOptions(
            schedule_id="later", orchestration_name="ticked", interval=timedelta(seconds=30),
            orchestration_input="before", start_at=now + timedelta(hours=1)))
        later.update(ScheduleUpdateOptions(orchestration_input="after",
                                           interval=timedelta(seconds=2)))
        updated = later.describe()
        say("schedule updated", interval=updated.interval.total_seconds(),
            input=updated.orchestration_input)
        later.delete()

        for i in range(3):
            sc.create_schedule(ScheduleCreationOptions(
                schedule_id=f"listed-{i}", orchestration_name="ticked",
                interval=timedelta(minutes=5), start_at=now + timedelta(hours=1)))
        listed = sorted(s.schedule_id for s in sc.list_schedules(
            ScheduleQuery(schedule_id_prefix="listed-")))
        for i in range(3):
            sc.get_schedule_client(f"listed-{i}").delete()
        say("schedules listed", listed=listed, after=sc.get_schedule("listed-0") is None)
    sys.exit(0)

# ---- large payloads, kept by the SDK outside the host ---------------------
#
# The suite keeps them in Azure Blob storage (and skips them without it);
# here a directory stands in. The host stores and hands back the tokens.

if mode == "payloads":
    import gzip
    import tempfile

    from durabletask.payload.store import LargePayloadStorageOptions, PayloadStore

    class DirectoryStore(PayloadStore):
        def __init__(self, root):
            self.root = root

        @property
        def options(self):
            return LargePayloadStorageOptions(threshold_bytes=1024)

        def upload(self, data, *, instance_id=None):
            name = uuid.uuid4().hex
            with open(f"{self.root}/{name}", "wb") as f:
                f.write(gzip.compress(data))
            return f"dirstore:{name}"

        async def upload_async(self, data, *, instance_id=None):
            return self.upload(data, instance_id=instance_id)

        def download(self, token):
            with open(f"{self.root}/{token.removeprefix('dirstore:')}", "rb") as f:
                return gzip.decompress(f.read())

        async def download_async(self, token):
            return self.download(token)

        def is_known_token(self, value):
            return isinstance(value, str) and value.startswith("dirstore:")

    def echo(ctx, value):
        return value

    def produce(ctx, kib):
        return "x" * (kib * 1024)

    def large_result(ctx, kib):
        result = yield ctx.call_activity(produce, input=kib)
        return len(result)

    def large_results(ctx, n):
        results = yield task.when_all([ctx.call_activity(produce, input=2) for _ in range(n)])
        return [len(r) for r in results]

    def large_event(ctx, _):
        value = yield ctx.wait_for_external_event("big")
        return len(value)

    store = DirectoryStore(tempfile.mkdtemp())
    w = worker.TaskHubGrpcWorker(host_address=address, payload_store=store)
    for o in (echo, large_result, large_results, large_event, forever):
        w.add_orchestrator(o)
    w.add_activity(produce)
    with w:
        w.start()
        c = dt.TaskHubGrpcClient(host_address=address, payload_store=store)
        raw = dt.TaskHubGrpcClient(host_address=address)

        def outcome(id):
            state = c.wait_for_orchestration_completion(id, timeout=60)
            stored = raw.get_orchestration_state(id, fetch_payloads=True)
            return {"status": state.runtime_status.name,
                    "output": json.loads(state.serialized_output) if state.serialized_output else None,
                    "input_token": (stored.serialized_input or "").startswith("dirstore:"),
                    "output_token": (stored.serialized_output or "").startswith("dirstore:")}

        big = "y" * 5000
        id = c.schedule_new_orchestration(echo, input=big)
        said = outcome(id)
        say("large input", same=said.pop("output") == big, **said)
        say("large activity result", **outcome(c.schedule_new_orchestration(large_result, input=10)))
        say("large fan-in", **outcome(c.schedule_new_orchestration(large_results, input=5)))
        id = c.schedule_new_orchestration(large_event)
        c.raise_orchestration_event(id, "big", data="z" * 5000)
        say("large event", **outcome(id))
        id = c.schedule_new_orchestration(forever)
        c.wait_for_orchestration_start(id, timeout=30)
        c.terminate_orchestration(id, output="t" * 3000)
        state = c.wait_for_orchestration_completion(id, timeout=60)
        say("large terminate", status=state.runtime_status.name,
            length=len(json.loads(state.serialized_output)))
    sys.exit(0)

sys.exit(f"unknown mode {mode}")
