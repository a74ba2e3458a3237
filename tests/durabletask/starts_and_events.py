"""Events one orchestration sends another, tags, id-reuse policies and
restarts under a new id, run by agenthost for the Python SDK's worker
(tests/durable_task_starts_and_events.rs).

usage: starts_and_events.py worker ADDRESS LOG
       starts_and_events.py scenario ADDRESS LOG

The worker appends `sent KEY` to LOG each time a sender's code passes its
send_event (replays included: the host must send once all the same). The
client prints one JSON line per step.
"""

import json
import sys
import time
from datetime import timedelta

import grpc
from google.protobuf import wrappers_pb2
from durabletask import client as dt
from durabletask import task, worker
import durabletask.internal.orchestrator_service_pb2 as pb

mode, address, log = sys.argv[1], sys.argv[2], sys.argv[3]


def say(step, **fields):
    print(json.dumps({"step": step, **fields}), flush=True)


def plus_one(ctx, n):
    return n + 1


def receiver(ctx, _):
    """The first `ping` (its data), then whether a second one came within
    two seconds."""
    first = yield ctx.wait_for_external_event("ping")
    second = ctx.wait_for_external_event("ping")
    timeout = ctx.create_timer(timedelta(seconds=2))
    won = yield task.when_any([second, timeout])
    return {"first": first, "second": won is second}


def sender(ctx, args):
    """Sends one event, then runs three more episodes: each replays the
    send, which the host must not carry out again."""
    if not ctx.is_replaying:
        with open(log, "a") as f:
            f.write(f"sent {args['key']}\n")
    if "data" in args:
        ctx.send_event(args["target"], args["event"], data=args["data"])
    else:
        ctx.send_event(args["target"], args["event"])
    n = yield ctx.call_activity(plus_one, input=1)
    yield ctx.create_timer(timedelta(milliseconds=50))
    n = yield ctx.call_activity(plus_one, input=n)
    return n


def signalled(ctx, _):
    yield ctx.wait_for_external_event("signal")
    return "received signal"


def tagging_parent(ctx, _):
    """Starts `waiter` as a child with tags (the Python SDK has no argument
    for them: the worker below adds them, as the JavaScript SDK sends
    them)."""
    return (yield ctx.call_sub_orchestrator(waiter, input={"value": "child", "wait": False},
                                            instance_id="se-tagged-child"))


def waiter(ctx, args):
    if args["wait"]:
        yield ctx.wait_for_external_event("finish")
    return args["value"]


if mode == "worker":
    import durabletask.internal.helpers as ph

    untagged = ph.new_create_sub_orchestration_action

    def with_tags(*args, **kwargs):
        action = untagged(*args, **kwargs)
        action.createSubOrchestration.tags.update({"team": "blue", "tier": "child"})
        return action

    ph.new_create_sub_orchestration_action = with_tags
    with worker.TaskHubGrpcWorker(host_address=address) as w:
        for orchestrator in (receiver, sender, signalled, waiter, tagging_parent):
            w.add_orchestrator(orchestrator)
        w.add_activity(plus_one)
        w.start()
        print("worker started", flush=True)
        while True:
            time.sleep(1)

c = dt.TaskHubGrpcClient(host_address=address)
S = pb.OrchestrationStatus


def done(id, timeout=60):
    state = c.wait_for_orchestration_completion(id, timeout=timeout)
    return {
        "status": state.runtime_status.name,
        "input": json.loads(state.serialized_input) if state.serialized_input else None,
        "output": json.loads(state.serialized_output) if state.serialized_output else None,
    }


def status(id):
    state = c.get_orchestration_state(id)
    return state.runtime_status.name if state else None


def refused(call):
    try:
        call()
        return None
    except grpc.RpcError as e:
        return {"code": e.code().name, "details": e.details()}


def policy(*statuses):
    return pb.OrchestrationIdReusePolicy(replaceableStatus=list(statuses))


def tags_of(id):
    got = c._stub.GetInstance(pb.GetInstanceRequest(instanceId=id))
    return dict(got.orchestrationState.tags)


# An event with data from one orchestration to another, sent once however
# often the sender replays.
r = c.schedule_new_orchestration(receiver, instance_id="se-receiver")
c.wait_for_orchestration_start(r, timeout=30)
s = c.schedule_new_orchestration(sender, input={
    "key": "data", "target": r, "event": "ping", "data": {"message": "hello"}})
say("with data", sender=done(s), receiver=done(r))

# Without data.
r = c.schedule_new_orchestration(signalled)
c.wait_for_orchestration_start(r, timeout=30)
s = c.schedule_new_orchestration(sender, input={"key": "bare", "target": r, "event": "signal"})
say("without data", sender=done(s), receiver=done(r))

# To an instance that does not exist, and to one that is over: dropped, the
# sender goes on.
s = c.schedule_new_orchestration(sender, input={
    "key": "missing", "target": "se-nobody", "event": "ping", "data": 1})
over = c.schedule_new_orchestration(waiter, input={"value": "v", "wait": False})
done(over)
t = c.schedule_new_orchestration(sender, input={
    "key": "over", "target": over, "event": "finish", "data": 1})
say("missing target", sender=done(s), nobody=status("se-nobody"),
    over_sender=done(t), over=done(over))

# Tags, read back by GetInstance and QueryInstances, kept by a restart.
tagged = c.schedule_new_orchestration(waiter, input={"value": "t", "wait": False},
                                      tags={"env": "test", "owner": "durable"})
done(tagged)
queried = c._stub.QueryInstances(pb.QueryInstancesRequest(query=pb.InstanceQuery(
    instanceIdPrefix=wrappers_pb2.StringValue(value=tagged), maxInstanceCount=10)))
restarted = c.restart_orchestration(tagged, restart_with_new_instance_id=True)
done(restarted)
parent = c.schedule_new_orchestration(tagging_parent)
say("tags", got=tags_of(tagged), untagged=tags_of(over),
    queried=[dict(s.tags) for s in queried.orchestrationState if s.instanceId == tagged],
    restarted=tags_of(restarted), parent=done(parent), child=tags_of("se-tagged-child"),
    parent_tags=tags_of(parent))

# Id-reuse policies over a running instance.
all_statuses = [S.ORCHESTRATION_STATUS_COMPLETED, S.ORCHESTRATION_STATUS_FAILED,
                S.ORCHESTRATION_STATUS_TERMINATED, S.ORCHESTRATION_STATUS_CANCELED,
                S.ORCHESTRATION_STATUS_PENDING, S.ORCHESTRATION_STATUS_RUNNING,
                S.ORCHESTRATION_STATUS_SUSPENDED]
original = {"value": "original", "wait": True}
replacement = {"value": "replacement", "wait": False}
id = c.schedule_new_orchestration(waiter, input=original, instance_id="reuse-running")
c.wait_for_orchestration_start(id, timeout=30)
deduped = refused(lambda: c.schedule_new_orchestration(
    waiter, input=replacement, instance_id=id,
    reuse_id_policy=policy(*[s for s in all_statuses if s != S.ORCHESTRATION_STATUS_RUNNING])))
default = refused(lambda: c.schedule_new_orchestration(waiter, input=replacement, instance_id=id))
kept = status(id)
c.schedule_new_orchestration(waiter, input=replacement, instance_id=id,
                             reuse_id_policy=policy(*all_statuses))
say("reuse running", deduped=deduped, default=default, kept=kept, replaced=done(id))

# A policy that reuses running instances but not terminated ones is refused.
id = c.schedule_new_orchestration(waiter, input=original, instance_id="reuse-suspended")
c.wait_for_orchestration_start(id, timeout=30)
c.suspend_orchestration(id)
invalid = refused(lambda: c.schedule_new_orchestration(
    waiter, input=replacement, instance_id=id,
    reuse_id_policy=policy(S.ORCHESTRATION_STATUS_COMPLETED, S.ORCHESTRATION_STATUS_FAILED,
                           S.ORCHESTRATION_STATUS_CANCELED, S.ORCHESTRATION_STATUS_SUSPENDED)))
state = c.get_orchestration_state(id)
say("reuse invalid", refused=invalid, status=state.runtime_status.name,
    input=json.loads(state.serialized_input))
c.terminate_orchestration(id)

# Over a finished instance: a policy listing none refuses, one listing
# Completed replaces.
id = c.schedule_new_orchestration(waiter, input={"value": "first", "wait": False},
                                  instance_id="reuse-finished")
done(id)
none = refused(lambda: c.schedule_new_orchestration(
    waiter, input=replacement, instance_id=id, reuse_id_policy=policy()))
c.schedule_new_orchestration(waiter, input=replacement, instance_id=id,
                             reuse_id_policy=policy(S.ORCHESTRATION_STATUS_COMPLETED))
say("reuse finished", none=none, replaced=done(id))

# Restarts: a running instance under a new id (both then run), not under
# its own; a missing one is not found.
id = c.schedule_new_orchestration(waiter, input={"value": "again", "wait": True},
                                  instance_id="restart-running")
c.wait_for_orchestration_start(id, timeout=30)
own = refused(lambda: c.restart_orchestration(id))
new = c.restart_orchestration(id, restart_with_new_instance_id=True)
c.wait_for_orchestration_start(new, timeout=30)
both = [status(id), status(new)]
c.raise_orchestration_event(new, "finish")
say("restart running", own=own, new=new, both=both, ended=done(new),
    original=status(id), missing=refused(lambda: c.restart_orchestration("restart-nobody")))
c.terminate_orchestration(id)
