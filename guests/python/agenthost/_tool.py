"""Tools: plain Python functions the model can call through the host."""

import enum
import inspect
import json
import typing

from ._bindings import types as _wit

from ._schema import ConvertError, _object, allows_none, dumps, fields_of, schema_of


class Approval(enum.Enum):
    """Whether the host may run a tool as soon as the model asks for it."""

    NEVER_REQUIRE = "never-require"
    """Runs when the model calls it (the default)."""
    ALWAYS_REQUIRE = "always-require"
    """Never runs on the model's word alone: a human approves each call."""


class ToolError(Exception):
    """Raised by a tool to fail with a message the model is shown."""


class Tool:
    """A function of the component that agents (and orchestrations, as an
    activity) can call.

    Its parameters are the arguments object the model fills: their type
    hints give the JSON Schema the model sees (``Annotated[T, "text"]``
    describes one), and the model's arguments are checked and converted
    (a dataclass parameter from an object) before the function runs. Its
    return value is any JSON-ready value or dataclass.
    """

    def __init__(self, name: str, description: str, fn: typing.Callable):
        self.name = name
        self.description = description
        self.fn = fn
        self._approval = Approval.NEVER_REQUIRE
        signature = inspect.signature(fn)
        hints = typing.get_type_hints(fn, include_extras=True)
        self._hints = {}
        self._required = set()
        # Parameters the model may leave out that have no default: an
        # Optional one is then None (as a Rust Option field is).
        self._none_by_default = []
        for param in signature.parameters.values():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                continue
            hint = hints.get(param.name, typing.Any)
            self._hints[param.name] = hint
            if param.default is param.empty:
                if allows_none(hint):
                    self._none_by_default.append(param.name)
                else:
                    self._required.add(param.name)
        # Checked now so that a hint the SDK cannot describe fails the build.
        self._schema = json.dumps(self._schema_value())

    def approval(self, approval: Approval) -> "Tool":
        """Sets whether the tool needs a human's approval before it runs."""
        self._approval = approval
        return self

    def _schema_value(self) -> dict:
        properties = {name: schema_of(hint) for name, hint in self._hints.items()}
        required = [n for n in self._hints if n in self._required]
        return _object(properties, required, None)

    def to_wit(self) -> "_wit.Activity":
        mode = (
            _wit.ApprovalMode.ALWAYS_REQUIRE
            if self._approval is Approval.ALWAYS_REQUIRE
            else _wit.ApprovalMode.NEVER_REQUIRE
        )
        return _wit.Activity(
            name=self.name,
            description=self.description,
            parameters_schema=self._schema,
            approval=mode,
        )

    def call(self, arguments: str):
        """Runs the tool on ``arguments`` (a JSON object as text; empty or
        ``null`` is no arguments); the result as JSON text, or an
        ``ActivityError`` value. Never raises: an exception that escaped
        would trap the component and fail the whole agent run, where the
        model should be told what went wrong."""
        try:
            value = json.loads(arguments) if arguments.strip() else None
        except ValueError as e:
            return _wit.ActivityError_InvalidArguments(f"the arguments are not JSON: {e}")
        if value is None:
            value = {}
        if not isinstance(value, dict):
            return _wit.ActivityError_InvalidArguments("the arguments must be a JSON object")
        try:
            kwargs = fields_of(value, self._hints, self._required, "arguments", False)
            for name in self._none_by_default:
                kwargs.setdefault(name, None)
        except ConvertError as e:
            return _wit.ActivityError_InvalidArguments(str(e))
        except Exception as e:  # a dataclass's own checks, nesting too deep
            return _wit.ActivityError_InvalidArguments(f"{type(e).__name__}: {e}")
        try:
            result = self.fn(**kwargs)
        except Exception as e:  # the tool failed: the model is told why
            return _wit.ActivityError_Failed(str(e) or type(e).__name__)
        try:
            return dumps(result)
        except Exception as e:
            return _wit.ActivityError_Failed(f"the result could not be serialized: {e}")
