"""The fields of the sidecar protocol the SDKs build on, read raw (the
Python SDK's generated stubs, no SDK worker between): execution ids,
a sub-orchestration's parent info, a `null` output, the managed
scheduler's instance id limit and history event numbering
(tests/durable_task_protocol_shapes.rs).

usage: protocol_shapes.py scenario ADDRESS

A raw worker in a thread answers each orchestration by its name, as the
JavaScript SDK would: `shape_parent` calls `shape_child` under the id that
SDK derives (`{execution id}:0001`), `shape_child` returns what it was told
of its parent, `shape_null` returns JSON `null`, `shape_none` returns
nothing, `shape_generations` continues as new once. The client prints one
JSON line per step.
"""

import json
import sys
import threading

import grpc
from google.protobuf import wrappers_pb2

from durabletask.internal import orchestrator_service_pb2 as pb
from durabletask.internal import orchestrator_service_pb2_grpc as stubs

mode, address = sys.argv[1], sys.argv[2]
channel = grpc.insecure_channel(address)
stub = stubs.TaskHubSidecarServiceStub(channel)
COMPLETED = pb.ORCHESTRATION_STATUS_COMPLETED


def say(step, **fields):
    print(json.dumps({"step": step, **fields}), flush=True)


def text(value):
    return value.value if value is not None else None


def started_of(request):
    for event in list(request.pastEvents) + list(request.newEvents):
        if event.WhichOneof("eventType") == "executionStarted":
            return event.executionStarted
    raise RuntimeError("no ExecutionStarted")


def complete(action_id, result=None):
    done = pb.CompleteOrchestrationAction(orchestrationStatus=COMPLETED)
    if result is not None:
        done.result.CopyFrom(wrappers_pb2.StringValue(value=result))
    return pb.OrchestratorAction(id=action_id, completeOrchestration=done)


def answer(request):
    started = started_of(request)
    name, execution = started.name, request.executionId.value
    seen = {
        "request": execution,
        "started": started.orchestrationInstance.executionId.value,
    }
    new = [e.WhichOneof("eventType") for e in request.newEvents]
    if name == "shape_parent":
        child_done = [e.subOrchestrationInstanceCompleted for e in request.newEvents
                      if e.WhichOneof("eventType") == "subOrchestrationInstanceCompleted"]
        if child_done:
            child = json.loads(child_done[0].result.value)
            return [complete(2, json.dumps({"own": seen, "child": child}))]
        call = pb.CreateSubOrchestrationAction(instanceId=f"{execution}:0001", name="shape_child")
        call.version.CopyFrom(wrappers_pb2.StringValue(value="2.0"))
        call.input.CopyFrom(wrappers_pb2.StringValue(value="1"))
        return [pb.OrchestratorAction(id=1, createSubOrchestration=call)]
    if name == "shape_child":
        parent = started.parentInstance
        return [complete(1, json.dumps({
            "id": request.instanceId,
            "own": seen,
            "version": started.version.value,
            "has_parent": started.HasField("parentInstance"),
            "parent_name": text(parent.name) if parent.HasField("name") else None,
            "parent_version": text(parent.version) if parent.HasField("version") else None,
            "parent_id": parent.orchestrationInstance.instanceId,
            "parent_execution": parent.orchestrationInstance.executionId.value,
            "task": parent.taskScheduledId,
        }))]
    if name == "shape_null":
        return [complete(1, "null")]
    if name == "shape_none":
        return [complete(1)]
    if name == "shape_generations":
        before = json.loads(started.input.value)
        if len(before) < 2:
            done = pb.CompleteOrchestrationAction(
                orchestrationStatus=pb.ORCHESTRATION_STATUS_CONTINUED_AS_NEW,
                result=wrappers_pb2.StringValue(value=json.dumps(before + [seen])))
            return [pb.OrchestratorAction(id=1, completeOrchestration=done)]
        return [complete(1, json.dumps(before + [seen]))]
    if name == "shape_plain":
        return [complete(1, json.dumps(seen))]
    raise RuntimeError(f"no orchestration {name} ({new})")


def work():
    for item in stub.GetWorkItems(pb.GetWorkItemsRequest()):
        if item.WhichOneof("request") != "orchestratorRequest":
            continue
        request = item.orchestratorRequest
        stub.CompleteOrchestratorTask(pb.OrchestratorResponse(
            instanceId=request.instanceId,
            actions=answer(request),
            completionToken=item.completionToken,
        ))


def start(name, id, input=None, version=None):
    request = pb.CreateInstanceRequest(instanceId=id, name=name)
    if input is not None:
        request.input.CopyFrom(wrappers_pb2.StringValue(value=input))
    if version is not None:
        request.version.CopyFrom(wrappers_pb2.StringValue(value=version))
    return stub.StartInstance(request, timeout=30).instanceId


def done(id):
    state = stub.WaitForInstanceCompletion(
        pb.GetInstanceRequest(instanceId=id, getInputsAndOutputs=True), timeout=60
    ).orchestrationState
    return {
        "status": pb.OrchestrationStatus.Name(state.orchestrationStatus),
        "has_output": state.HasField("output"),
        "output": state.output.value if state.HasField("output") else None,
        "has_input": state.HasField("input"),
        "input": state.input.value if state.HasField("input") else None,
        "execution": state.executionId.value,
    }


def history(id):
    events = []
    for chunk in stub.StreamInstanceHistory(pb.StreamInstanceHistoryRequest(instanceId=id),
                                            timeout=30):
        for event in chunk.events:
            kind = event.WhichOneof("eventType")
            kind = kind[0].upper() + kind[1:]
            events.append([kind, event.eventId])
    return events


def refused(call):
    try:
        call()
        return None
    except grpc.RpcError as e:
        return {"code": e.code().name, "details": e.details()}


threading.Thread(target=work, daemon=True).start()

# A sub-orchestration called under the id the JavaScript SDK derives from
# its parent's execution id; the child is told its parent's name and version.
id = start("shape_parent", "shape-parent", version="1.5")
say("parent", state=done(id), history=history(id))

# JSON null as an output, and none.
say("null", null=done(start("shape_null", "shape-null", input="null")),
    none=done(start("shape_none", "shape-none")))

# A continue-as-new, and a restart, begin an execution of their own.
id = start("shape_generations", "shape-generations", input="[]")
say("generations", state=done(id))
id = start("shape_plain", "shape-plain")
first = done(id)
stub.RestartInstance(pb.RestartInstanceRequest(instanceId=id), timeout=30)
say("restarted", first=first, second=done(id))

# The managed scheduler's instance id limit: 100 characters.
say("limits",
    longest=done(start("shape_plain", "x" * 100)),
    too_long=refused(lambda: start("shape_plain", "y" * 101)),
    entity=refused(lambda: stub.SignalEntity(pb.SignalEntityRequest(
        instanceId="@counter@" + "k" * 92, name="add", requestId="r1"), timeout=30)))
