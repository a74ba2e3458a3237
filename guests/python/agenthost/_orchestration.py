"""Durable orchestrations: straight-line code over a :class:`Context`.

The host runs the code again from the start after every step and answers
each call it has journaled from the journal, so the code must reach the
outside world only through the context (or an activity). Python's own
clock (``time.time()``, ``datetime.now()``) and randomness (``random``,
``uuid.uuid4()``) are safe too: inside an orchestration the host hands the
journaled step time and numbers seeded by the instance id.
"""

import dataclasses
import datetime
import inspect
import json
import typing

from ._bindings import Err
from ._bindings import durable as _wit

from ._schema import ConvertError, convert, dumps, schema_of


class TaskError(Exception):
    """A task failed, or its result did not decode into the type asked for.
    Uncaught, it fails the orchestration with its message."""


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """How a failed agent call or activity is retried: ``max_attempts`` in
    all, waiting ``first_delay_seconds``, multiplied by ``backoff`` each time,
    never longer than ``max_delay_seconds``."""

    max_attempts: int
    first_delay_seconds: float = 1.0
    backoff: float = 2.0
    max_delay_seconds: float = 60.0

    def _wit(self) -> "_wit.RetryPolicy":
        return _wit.RetryPolicy(
            max_attempts=self.max_attempts,
            first_delay_ms=int(self.first_delay_seconds * 1000),
            backoff_coefficient=float(self.backoff),
            max_delay_ms=int(self.max_delay_seconds * 1000),
        )


def _retry(policy):
    return policy._wit() if policy is not None else None


@dataclasses.dataclass(frozen=True)
class Session:
    """A conversation with an agent that several calls share."""

    id: str


_TEXT = object()


class Task:
    """A scheduled agent call, activity, sub-orchestration, timer or event
    wait. Schedule several, then wait for them together."""

    def __init__(self, task_id: int, result_type=_TEXT):
        self.id = task_id
        self._type = result_type

    def wait(self):
        """Suspends the orchestration until the task is done; its result
        (text for an agent's answer, else decoded JSON, or the type asked
        for). Raises :class:`TaskError` if the task failed."""
        try:
            text = _wit.await_(self.id)
        except Err as e:
            raise TaskError(e.value) from None
        return self._decode(text)

    def _decode(self, text: str):
        if self._type is _TEXT:
            return text
        try:
            value = json.loads(text)
        except ValueError as e:
            raise TaskError(f"the task's result is not JSON: {e}") from None
        if self._type is None:
            return value
        try:
            return convert(value, self._type, "the result")
        except ConvertError as e:
            raise TaskError(f"the task's result does not decode: {e}") from None


def _json(value) -> str:
    return dumps(value)


class Context:
    """What orchestration code uses to reach the host. Every call is
    journaled: on replay it returns what it returned the first time."""

    def call_agent(self, agent: str, message: str, *, session: Session = None,
                   schema=None, retry: RetryPolicy = None) -> Task:
        """Asks ``agent`` for an answer to ``message``, in ``session`` when
        given. With ``schema`` (a dataclass or TypedDict type, or a JSON
        Schema dict) the answer is structured output decoded into it;
        without, the answer text."""
        if schema is None:
            response_schema, result_type = None, _TEXT
        elif isinstance(schema, dict):
            response_schema, result_type = json.dumps(schema), None
        else:
            response_schema, result_type = json.dumps(schema_of(schema)), schema
        task = _wit.call_agent(agent, message, session.id if session else None,
                               response_schema, _retry(retry))
        return Task(task, result_type)

    def call_remote_agent(self, card_url: str, message: str, *, context: str = None,
                          retry: RetryPolicy = None) -> Task:
        """Asks the A2A agent whose card is at ``card_url`` for an answer to
        ``message`` (in the remote conversation ``context`` when given); the
        component's ``allowed_hosts`` must grant its host."""
        return Task(_wit.call_remote_agent(card_url, message, context, _retry(retry)))

    def call_activity(self, name: str, input=None, *, retry: RetryPolicy = None,
                      result_type=None) -> Task:
        """Runs activity (tool) ``name`` with ``input`` (a JSON-ready value):
        one of this component's, or another component's as ``component/name``."""
        return Task(_wit.call_activity(name, _json(input), _retry(retry)), result_type)

    def call_orchestration(self, name: str, input=None, *, result_type=None) -> Task:
        """Runs orchestration ``name`` as a child instance."""
        return Task(_wit.call_orchestration(name, _json(input)), result_type)

    def timer(self, seconds: float) -> Task:
        """A durable timer firing ``seconds`` after the current step's time."""
        delay = seconds.total_seconds() if isinstance(seconds, datetime.timedelta) else seconds
        fire_at = self.now_ms() + max(0, int(delay * 1000))
        return Task(_wit.start_timer(fire_at), None)

    def wait_for_event(self, name: str, *, result_type=None) -> Task:
        """Waits for the external event ``name``; its payload as decoded JSON
        (or ``result_type``)."""
        return Task(_wit.wait_for_event(name), result_type)

    def when_all(self, tasks: typing.List[Task]) -> list:
        """Waits for every task; their results in order. Raises the first
        failure as :class:`TaskError`."""
        results = _wit.await_all([t.id for t in tasks])
        values = []
        for task, result in zip(tasks, results):
            if isinstance(result, Err):
                raise TaskError(result.value)
            values.append(task._decode(result.value))
        return values

    def when_any(self, tasks: typing.List[Task]) -> int:
        """Waits for the first of ``tasks`` to finish; its index. Timers and
        event waits that lost are cancelled. The winner's ``wait()`` then
        returns at once."""
        index, _ = _wit.await_any([t.id for t in tasks])
        return index

    def now_ms(self) -> int:
        """The current step's time, in milliseconds since the Unix epoch."""
        return _wit.now()

    def now(self) -> datetime.datetime:
        """The current step's time (UTC)."""
        return datetime.datetime.fromtimestamp(self.now_ms() / 1000, tz=datetime.timezone.utc)

    def new_guid(self) -> str:
        """A GUID, the same on every replay."""
        return _wit.new_guid()

    def new_session(self, agent: str) -> Session:
        """A new conversation with ``agent``, for calls that should share history."""
        return Session(_wit.new_session(agent))

    @property
    def instance_id(self) -> str:
        return _wit.instance_id()

    @property
    def is_replaying(self) -> bool:
        """True while the code re-executes journaled steps (e.g. to skip logging)."""
        return _wit.is_replaying()

    def set_custom_status(self, status) -> None:
        """Shown as ``customStatus`` by the status API."""
        _wit.set_custom_status(_json(status))

    def continue_as_new(self, input=None) -> None:
        """Restarts the orchestration with ``input`` and an empty journal once
        the current run returns; return right after calling it."""
        _wit.continue_as_new(_json(input))


class Orchestration:
    """A durable orchestration the component offers: ``fn(ctx, input)``
    returning a JSON-ready value. With a type hint on its input parameter
    (a dataclass, a TypedDict, ...), the start request's JSON is checked and
    converted into it."""

    def __init__(self, name: str, fn: typing.Callable):
        self.name = name
        self.fn = fn
        self._description = ""
        self._routes = []
        self._event_routes = []
        params = list(inspect.signature(fn).parameters)
        if len(params) < 2:
            raise TypeError(
                f"orchestration {name}: the function takes (ctx, input), "
                f"not ({', '.join(params)})"
            )
        hints = typing.get_type_hints(fn, include_extras=True)
        self._input_type = hints.get(params[1])
        # Made now so that a hint the SDK cannot describe fails the build.
        self._input_schema = (
            None if self._input_type is None else schema_of(self._input_type, strict=False)
        )

    def input_schema(self):
        """The JSON Schema of the input, from its type hint (``None``
        without one): the host refuses a start whose input does not match."""
        return self._input_schema

    def description(self, text: str) -> "Orchestration":
        self._description = text
        return self

    def route(self, path: str) -> "Orchestration":
        """Also start it with ``POST /api/{path}``, e.g. ``writer/run``."""
        self._routes.append(path)
        return self

    def event_route(self, path: str, event: str) -> "Orchestration":
        """``POST /api/{path}`` (which must contain ``{instanceId}``) raises
        ``event`` on that instance with the request body as payload."""
        self._event_routes.append((path, event))
        return self

    def run(self, input_text: str) -> str:
        """Runs the code on ``input_text``; its output as JSON text. Raises
        ``Err(message)`` when the orchestration fails, and nothing else: any
        other exception would trap the component (a suspension is a trap of
        the host's own, never an exception here)."""
        try:
            value = json.loads(input_text) if input_text.strip() else None
            if self._input_type is not None:
                value = convert(value, self._input_type, "input")
        except (ConvertError, ValueError) as e:
            raise Err(f"invalid input: {e}") from None
        except Exception as e:
            raise Err(f"invalid input: {type(e).__name__}: {e}") from None
        try:
            output = self.fn(Context(), value)
        except TaskError as e:
            raise Err(str(e)) from None
        except Err:
            raise
        except Exception as e:
            raise Err(f"{type(e).__name__}: {e}") from None
        try:
            return _json(output)
        except Exception as e:
            raise Err(f"the output could not be serialized: {e}") from None
