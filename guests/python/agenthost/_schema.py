"""JSON Schema from Python type hints, and JSON values checked and converted
back into those types.

What a tool's parameters may be annotated with: ``str``, ``int``, ``float``,
``bool``, ``list[T]``, ``dict[str, T]``, ``Optional[T]`` (or ``T | None``),
``Literal[...]``, an ``Enum``, a dataclass, a ``TypedDict``, ``Any``, and
``Annotated[T, "description"]`` to describe a parameter to the model.
A hint outside that list is refused when the tool is declared, so the
mistake shows at build time rather than as a model's confusion.
"""

import dataclasses
import enum
import types as _pytypes
import typing
from typing import Any

_PRIMITIVES = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
    type(None): {"type": "null"},
}


class SchemaError(TypeError):
    """A type hint the SDK cannot describe as JSON Schema."""


def _is_typed_dict(hint) -> bool:
    return isinstance(hint, type) and issubclass(hint, dict) and hasattr(hint, "__annotations__") and hasattr(hint, "__total__")


def _hints(cls) -> dict:
    return typing.get_type_hints(cls, include_extras=True)


def _primitive(hint):
    """The schema of a plain type, or ``None`` (``Annotated`` with a dict
    in it is not hashable)."""
    try:
        schema = _PRIMITIVES.get(hint)
    except TypeError:
        return None
    return dict(schema) if schema is not None else None


_WRAPPERS = tuple(w for w in (getattr(typing, "Required", None), getattr(typing, "NotRequired", None)) if w)


def allows_none(hint) -> bool:
    """Whether ``None`` is a value of ``hint`` (``Optional[T]``, ``T | None``)."""
    origin = typing.get_origin(hint)
    if origin is typing.Annotated:
        return allows_none(typing.get_args(hint)[0])
    if origin in (typing.Union, _pytypes.UnionType):
        return any(a is type(None) for a in typing.get_args(hint))
    return hint is Any or hint is type(None)


def schema_of(hint, strict: bool = False) -> dict:
    """The JSON Schema of values of type ``hint``. Object keys a dataclass
    or TypedDict does not name are ignored, as serde does for the Rust SDK;
    ``strict`` refuses them instead."""
    if hint is Any or hint is typing.Any:
        return {}
    primitive = _primitive(hint)
    if primitive is not None:
        return primitive
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in _WRAPPERS:
        return schema_of(args[0], strict)
    if origin is typing.Annotated:
        schema = schema_of(args[0], strict)
        for extra in args[1:]:
            if isinstance(extra, str):
                schema["description"] = extra
        return schema
    if origin in (typing.Union, _pytypes.UnionType):
        return {"anyOf": [schema_of(a, strict) for a in args]}
    if origin is typing.Literal:
        return {"enum": list(args)}
    if origin is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
        return {
            "type": "array",
            "prefixItems": [schema_of(a, strict) for a in args],
            "minItems": len(args),
            "maxItems": len(args),
        }
    if origin in (list, tuple, set, frozenset) or hint in (list, tuple, set):
        item = args[0] if args else Any
        return {"type": "array", "items": schema_of(item, strict)}
    if origin is dict or hint is dict:
        value = args[1] if len(args) == 2 else Any
        schema = {"type": "object"}
        if value is not Any:
            schema["additionalProperties"] = schema_of(value, strict)
        return schema
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return {"enum": [m.value for m in hint]}
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        hints = _hints(hint)
        properties = {}
        required = []
        for field in dataclasses.fields(hint):
            field_hint = hints.get(field.name, Any)
            properties[field.name] = schema_of(field_hint, strict)
            if field.name in _required_of(hint):
                required.append(field.name)
        return _object(properties, required, hint.__doc__ if _own_doc(hint) else None, strict)
    if _is_typed_dict(hint):
        hints = _hints(hint)
        properties = {name: schema_of(h, strict) for name, h in hints.items()}
        required = [n for n in hints if n in getattr(hint, "__required_keys__", hints)]
        return _object(properties, required, None, strict)
    raise SchemaError(f"no JSON Schema for the type hint {hint!r}")


def _own_doc(cls) -> bool:
    """Dataclasses get a generated docstring (their signature) when they have
    none; only a written one describes the type."""
    doc = cls.__doc__ or ""
    return bool(doc) and not doc.startswith(cls.__name__ + "(")


def _object(properties: dict, required: list, description, strict: bool = False) -> dict:
    schema = {"type": "object", "properties": properties}
    if strict:
        schema["additionalProperties"] = False
    if required:
        schema["required"] = required
    if description:
        schema["description"] = description.strip()
    return schema


class ConvertError(ValueError):
    """A JSON value that does not fit its type hint; the message names where."""


def convert(value, hint, where: str, strict: bool = False):
    """``value`` (decoded JSON) checked against ``hint`` and turned into it
    (dicts into dataclasses, strings into enums). ``strict`` refuses object
    keys the type does not name (a tool's arguments); otherwise they are
    ignored, as serde does for the Rust SDK."""
    if hint is Any or hint is typing.Any:
        return value
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Annotated or origin in _WRAPPERS:
        return convert(value, args[0], where, strict)
    if hint is type(None):
        if value is not None:
            raise ConvertError(f"{where} must be null")
        return None
    if hint is bool:
        if not isinstance(value, bool):
            raise ConvertError(f"{where} must be a boolean")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                return int(value)
            raise ConvertError(f"{where} must be an integer")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConvertError(f"{where} must be a number")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise ConvertError(f"{where} must be a string")
        return value
    if origin in (typing.Union, _pytypes.UnionType):
        problems = []
        for member in args:
            try:
                return convert(value, member, where, strict)
            except ConvertError as e:
                problems.append(str(e))
        raise ConvertError(" or ".join(problems))
    if origin is typing.Literal:
        # 1 == True in Python; in JSON they are different values.
        if not any(value == a and type(value) is type(a) for a in args):
            raise ConvertError(f"{where} must be one of {list(args)!r}")
        return value
    if origin is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
        if not isinstance(value, list) or len(value) != len(args):
            raise ConvertError(f"{where} must be an array of {len(args)} items")
        return tuple(convert(v, a, f"{where}[{i}]", strict) for i, (v, a) in enumerate(zip(value, args)))
    if origin in (list, tuple, set, frozenset) or hint in (list, tuple, set):
        if not isinstance(value, list):
            raise ConvertError(f"{where} must be an array")
        item = args[0] if args and args[0] is not Ellipsis else Any
        items = [convert(v, item, f"{where}[{i}]", strict) for i, v in enumerate(value)]
        return (origin or hint)(items) if (origin or hint) is not list else items
    if origin is dict or hint is dict:
        if not isinstance(value, dict):
            raise ConvertError(f"{where} must be an object")
        item = args[1] if len(args) == 2 else Any
        return {k: convert(v, item, f"{where}.{k}", strict) for k, v in value.items()}
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        try:
            return hint(value)
        except ValueError:
            raise ConvertError(f"{where} must be one of {[m.value for m in hint]!r}") from None
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        if not isinstance(value, dict):
            raise ConvertError(f"{where} must be an object")
        init = {f.name for f in dataclasses.fields(hint) if f.init}
        hints = {k: v for k, v in _hints(hint).items() if k in init}
        fields = fields_of(value, hints, _required_of(hint), where, strict)
        for name in _none_by_default(hint):
            fields.setdefault(name, None)
        return hint(**fields)
    if _is_typed_dict(hint):
        if not isinstance(value, dict):
            raise ConvertError(f"{where} must be an object")
        hints = _hints(hint)
        required = set(getattr(hint, "__required_keys__", hints))
        return fields_of(value, hints, required, where, strict)
    raise ConvertError(f"{where}: no conversion for the type hint {hint!r}")


def _no_default(cls):
    return [
        f
        for f in dataclasses.fields(cls)
        if f.init
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    ]


def _required_of(cls) -> set:
    """Fields with no default, but an ``Optional`` one, which is ``None``
    when missing (as serde reads a Rust ``Option``)."""
    hints = _hints(cls)
    return {f.name for f in _no_default(cls) if not allows_none(hints.get(f.name, Any))}


def _none_by_default(cls) -> list:
    hints = _hints(cls)
    return [f.name for f in _no_default(cls) if allows_none(hints.get(f.name, Any))]


def fields_of(value: dict, hints: dict, required: set, where: str, strict: bool) -> dict:
    """The keys of ``value`` converted by ``hints``; a missing required key
    (or, ``strict``, an unknown key) is an error naming it."""
    missing = sorted(required - set(value))
    if missing:
        raise ConvertError(f"{where} is missing required field(s): {', '.join(missing)}")
    unknown = sorted(set(value) - set(hints))
    if unknown and strict:
        raise ConvertError(f"{where} has unknown field(s): {', '.join(unknown)}")
    return {k: convert(v, hints[k], f"{where}.{k}", strict) for k, v in value.items() if k in hints}


def to_json_value(value):
    """``value`` made JSON-ready: dataclasses as objects, enums as their
    values, tuples and sets as arrays."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_json_value(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return to_json_value(value.value)
    if isinstance(value, dict):
        return {_key(k): to_json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [to_json_value(v) for v in value]
    return value


def _key(key) -> str:
    """An object key as JSON would write it."""
    if isinstance(key, enum.Enum):
        key = key.value
    if key is None or isinstance(key, bool):
        return {None: "null", True: "true", False: "false"}[key]
    return str(key)


def dumps(value) -> str:
    """``value`` as compact JSON text, as the Rust SDK writes it: UTF-8
    (not ``\\u`` escapes), and no ``NaN``/``Infinity`` (not JSON: a
    ``ValueError``)."""
    import json

    return json.dumps(
        to_json_value(value), separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
