"""The Durable Task Python SDK's client (PyPI `durabletask`, pinned in the
Makefile) against agenthost's gRPC endpoint, on the wasm orchestrations of
the `orchestration-tests` guest. Prints one JSON line per step; the Rust test
(tests/durable_task_grpc.rs) checks them, and the instances over HTTP.

usage: client.py ADDRESS scenario PREFIX HTTP_INSTANCE_ID
       client.py ADDRESS access KEY_OR_EMPTY TASKHUB_OR_EMPTY
       client.py ADDRESS hostile
       client.py ADDRESS front
"""

import json
import time
import sys

import grpc
from durabletask import client as dt

address, mode = sys.argv[1], sys.argv[2]


def say(step, **fields):
    print(json.dumps({"step": step, **fields}), flush=True)


def status(state):
    return None if state is None else state.runtime_status.name


def refused(call):
    """The gRPC status code and message a call ends with, or None."""
    try:
        call()
    except grpc.RpcError as error:
        return {"code": error.code().name, "message": error.details()}
    except TimeoutError as error:
        return {"code": "TIMEOUT", "message": str(error)}
    return None


if mode == "access":
    key, hub = sys.argv[3], sys.argv[4]
    metadata = []
    if key:
        metadata.append(("authorization", f"Bearer {key}"))
    if hub:
        metadata.append(("taskhub", hub))
    c = dt.TaskHubGrpcClient(host_address=address, metadata=metadata or None)
    say("access", refused=refused(lambda: c.get_orchestration_state("nobody")))
    sys.exit(0)

if mode == "front":
    # A `--no-worker` front: its clients' instances run on the hub's
    # workers; SDK workers are sent elsewhere.
    from durabletask.internal import orchestrator_service_pb2 as pb
    from durabletask.internal import orchestrator_service_pb2_grpc as stubs

    c = dt.TaskHubGrpcClient(host_address=address)
    id = c.schedule_new_orchestration("sequence", input={"n": 3}, instance_id="through-front")
    done = c.wait_for_orchestration_completion(id, timeout=60)
    stub = stubs.TaskHubSidecarServiceStub(grpc.insecure_channel(address))
    say("front", status=status(done), output=done.get_output(),
        work_items=refused(lambda: next(iter(stub.GetWorkItems(pb.GetWorkItemsRequest(), timeout=10)))))
    sys.exit(0)

if mode == "hostile":
    # The contract's own stub, with what the SDK would never send.
    from google.protobuf import wrappers_pb2
    from durabletask.internal import orchestrator_service_pb2 as pb
    from durabletask.internal import orchestrator_service_pb2_grpc as stubs

    stub = stubs.TaskHubSidecarServiceStub(grpc.insecure_channel(address))

    def start(**fields):
        return refused(lambda: stub.StartInstance(pb.CreateInstanceRequest(**fields)))

    def query(**fields):
        return stub.QueryInstances(pb.QueryInstancesRequest(query=pb.InstanceQuery(**fields)))

    # Instances that wait, so that filters and pages have something to miss.
    for id in ("page-1", "page-2", "page-3"):
        stub.StartInstance(pb.CreateInstanceRequest(name="wait_event", instanceId=id))
    first = query(instanceIdPrefix=wrappers_pb2.StringValue(value="page-"), maxInstanceCount=2)
    second = query(instanceIdPrefix=wrappers_pb2.StringValue(value="page-"), maxInstanceCount=2,
                   continuationToken=first.continuationToken)
    big = "\"" + "x" * (2 << 20) + "\""
    huge = "\"" + "x" * (33 << 20) + "\""
    say("hostile",
        not_json=start(name="sequence", input=wrappers_pb2.StringValue(value="{not json")),
        bad_id=start(name="sequence", instanceId="a/b"),
        # PostgreSQL's text refuses NUL: refused first, never a store error.
        nul_id=start(name="sequence", instanceId="a\x00b"),
        nul_name=start(name="sdk\x00thing", instanceId="nul-name"),
        nul_read=refused(lambda: stub.GetInstance(pb.GetInstanceRequest(instanceId="a\x00b"))),
        nul_terminate=refused(lambda: stub.TerminateInstance(pb.TerminateRequest(instanceId="a\x00b"))),
        # An entity's id names no orchestration: its operations would go to it.
        entity_shaped=start(name="sequence", instanceId="@counter@yy"),
        entity_no_key=refused(lambda: stub.SignalEntity(pb.SignalEntityRequest(
            instanceId="@counter@", name="add"))),
        entity_nul=refused(lambda: stub.SignalEntity(pb.SignalEntityRequest(
            instanceId="@counter@k\x00", name="add"))),
        too_big=start(name="sequence", input=wrappers_pb2.StringValue(value=big)),
        huge=start(name="sequence", input=wrappers_pb2.StringValue(value=huge)),
        event_not_json=refused(lambda: stub.RaiseEvent(pb.RaiseEventRequest(
            instanceId="page-1", name="go", input=wrappers_pb2.StringValue(value="nope")))),
        purge_nothing=refused(lambda: stub.PurgeInstances(pb.PurgeInstancesRequest())),
        purge_too_many=refused(lambda: stub.PurgeInstances(pb.PurgeInstancesRequest(
            instanceBatch=pb.InstanceBatch(instanceIds=[f"x{i}" for i in range(501)])))),
        bad_status=refused(lambda: query(runtimeStatus=[42])),
        bad_token=refused(lambda: query(continuationToken=wrappers_pb2.StringValue(value="forged"))),
        canceled_only=len(query(runtimeStatus=[pb.ORCHESTRATION_STATUS_CANCELED]).orchestrationState),
        waiting=len(query(runtimeStatus=[pb.ORCHESTRATION_STATUS_PENDING, pb.ORCHESTRATION_STATUS_RUNNING,
                                         pb.ORCHESTRATION_STATUS_CANCELED]).orchestrationState),
        pages=[[s.instanceId for s in first.orchestrationState],
               [s.instanceId for s in second.orchestrationState]],
        tokens=[first.HasField("continuationToken"), second.HasField("continuationToken")],
        deadline=refused(lambda: stub.WaitForInstanceCompletion(
            pb.GetInstanceRequest(instanceId="page-1"), timeout=2)),
        orchestrator_answer=refused(lambda: stub.CompleteOrchestratorTask(pb.OrchestratorResponse(
            completionToken="never-issued"))),
        entity_answer=refused(lambda: stub.CompleteEntityTask(pb.EntityBatchResult(
            completionToken="never-issued"))),
        entity_missing=stub.GetEntity(pb.GetEntityRequest(instanceId="@counter@a")).exists,
        entity_bad_id=refused(lambda: stub.SignalEntity(pb.SignalEntityRequest(
            instanceId="counter", name="add"))),
        # An SDK entity's input is the SDK's own text (a large-payload
        # store's token is not JSON): taken as sent.
        entity_own_text=refused(lambda: stub.SignalEntity(pb.SignalEntityRequest(
            instanceId="@counter@a", name="add", input=wrappers_pb2.StringValue(value="{x")))),
        # The event entity operations travel in, raised from outside with a
        # caller: it would forge page-2's task result.
        reserved=refused(lambda: stub.RaiseEvent(pb.RaiseEventRequest(
            instanceId="page-1", name="entity-operation",
            input=wrappers_pb2.StringValue(value=json.dumps({
                "request_id": "x", "operation": "add", "input": None,
                "caller": {"id": "page-2", "execution": 1, "task": 0}}))))),
        entity_query_other=len(stub.QueryEntities(pb.QueryEntitiesRequest(query=pb.EntityQuery(
            instanceIdStartsWith=wrappers_pb2.StringValue(value="page-")))).entities),
        stray_answer=refused(lambda: stub.CompleteActivityTask(pb.ActivityResponse(
            completionToken="never-issued", result=wrappers_pb2.StringValue(value="1")))))
    sys.exit(0)

prefix = sys.argv[3]
c = dt.TaskHubGrpcClient(host_address=address)

# An activity sequence, started by name with a chosen id, followed to its end.
seq = c.schedule_new_orchestration("sequence", input={"n": 5}, instance_id=f"{prefix}-seq")
done = c.wait_for_orchestration_completion(seq, timeout=60)
say("sequence", id=seq, status=status(done), output=done.get_output(),
    input=done.get_input(), created=done.created_at.isoformat())

# An instance started over HTTP, read like one of the SDK's own.
other = c.wait_for_orchestration_completion(sys.argv[4], timeout=60)
say("from_http", status=status(other), name=other.name, output=other.get_output())

# An external event: the instance waits (custom status), the event ends it.
wait = c.schedule_new_orchestration("wait_event", instance_id=f"{prefix}-wait")
c.wait_for_orchestration_start(wait, timeout=60)
waiting = c.get_orchestration_state(wait)
c.raise_orchestration_event(wait, "go", data={"ok": True})
done = c.wait_for_orchestration_completion(wait, timeout=60)
say("event", waiting=status(waiting), custom=waiting.get_custom_status(),
    status=status(done), output=done.get_output())

# A deadline the instance does not meet: the SDK's TimeoutError.
slow = c.schedule_new_orchestration("wait_event", instance_id=f"{prefix}-slow")
say("timeout", refused=refused(lambda: c.wait_for_orchestration_completion(slow, timeout=1)))

# Suspend: an event raised meanwhile waits for the resume.
sus = c.schedule_new_orchestration("wait_event", instance_id=f"{prefix}-sus")
c.wait_for_orchestration_start(sus, timeout=60)
c.suspend_orchestration(sus, reason="hold")
suspended = c.get_orchestration_state(sus)
c.raise_orchestration_event(sus, "go", data=7)
still = c.get_orchestration_state(sus)
c.resume_orchestration(sus)
done = c.wait_for_orchestration_completion(sus, timeout=60)
say("suspend", suspended=status(suspended), still=status(still),
    status=status(done), output=done.get_output())

# Terminate, with an output.
c.terminate_orchestration(slow, output="enough")
done = c.wait_for_orchestration_completion(slow, timeout=60)
say("terminate", status=status(done), output=done.get_output(),
    again=refused(lambda: c.terminate_orchestration(slow)))

# A failing orchestration: its reason as the failure details.
bad = c.schedule_new_orchestration("failing", instance_id=f"{prefix}-fail")
done = c.wait_for_orchestration_completion(bad, timeout=60)
say("failed", status=status(done), message=done.failure_details.message,
    type=done.failure_details.error_type, output=done.serialized_output)

# Started for 2030: Pending, nothing run; a terminate ends it all the same.
later = c.schedule_new_orchestration(
    "sequence", instance_id="scheduled-2030", start_at=__import__("datetime").datetime(2030, 1, 1))
time.sleep(1)
scheduled = status(c.get_orchestration_state(later))
c.terminate_orchestration(later)
say("scheduled", status=scheduled,
    then=status(c.wait_for_orchestration_completion(later, timeout=60)))

# Refusals the SDK surfaces as gRPC errors.
twice = c.schedule_new_orchestration("wait_event", instance_id=f"{prefix}-twice")
say("refusals",
    # A name no component serves is an SDK worker's: it waits for one.
    unknown=refused(lambda: c.schedule_new_orchestration(
        "no_such_orchestration", instance_id=f"{prefix}-unknown")),
    unknown_status=status(c.get_orchestration_state(f"{prefix}-unknown")),
    running=refused(lambda: c.schedule_new_orchestration("wait_event", instance_id=twice)),
    raise_missing=refused(lambda: c.raise_orchestration_event("nobody", "go")),
    purge_running=refused(lambda: c.purge_orchestration(twice)),
    missing=status(c.get_orchestration_state("nobody")))

# Restart a finished instance, with its id and with a new one.
same = c.restart_orchestration(seq)
done = c.wait_for_orchestration_completion(same, timeout=60)
fresh = c.restart_orchestration(seq, restart_with_new_instance_id=True)
done_fresh = c.wait_for_orchestration_completion(fresh, timeout=60)
say("restart", same=same, status=status(done), output=done.get_output(),
    fresh_is_new=fresh != seq, fresh_status=status(done_fresh), fresh_output=done_fresh.get_output())

# Query by prefix and status, in pages of 2 (the SDK follows the token).
everything = c.get_all_orchestration_states(dt.OrchestrationQuery(
    instance_id_prefix=prefix, max_instance_count=2, fetch_inputs_and_outputs=True))
completed = c.get_all_orchestration_states(dt.OrchestrationQuery(
    instance_id_prefix=prefix, runtime_status=[dt.OrchestrationStatus.COMPLETED]))
say("query", ids=sorted(s.instance_id for s in everything),
    completed=sorted(s.instance_id for s in completed),
    inputs={s.instance_id: json.loads(s.serialized_input or "null") for s in everything})

# Purge one finished instance, then everything finished under the prefix.
purged = c.purge_orchestration(seq)
gone = c.get_orchestration_state(seq)
again = c.purge_orchestration(seq)
c.terminate_orchestration(twice)
c.wait_for_orchestration_completion(twice, timeout=60)
c.terminate_orchestration(f"{prefix}-unknown")
c.wait_for_orchestration_completion(f"{prefix}-unknown", timeout=60)
rest = c.purge_orchestrations_by(runtime_status=[
    dt.OrchestrationStatus.COMPLETED, dt.OrchestrationStatus.FAILED, dt.OrchestrationStatus.TERMINATED])
say("purge", deleted=purged.deleted_instance_count, gone=gone is None,
    again=again.deleted_instance_count, rest=rest.deleted_instance_count, complete=rest.is_complete,
    left=sorted(s.instance_id for s in c.get_all_orchestration_states(
        dt.OrchestrationQuery(instance_id_prefix=prefix))))
