"""The JSON codec for the core's frozen dataclasses: pydantic, driven by their type hints.

``dumps(obj)`` writes a value as JSON text and ``loads(tp, text)`` reads it back as ``tp``
(``encode`` / ``decode`` do the same with plain JSON data). A new record type needs no codec code:
pydantic builds the schema from the type hints (``TypeAdapter(tp).core_schema``, once per type), and
:func:`_rules` adjusts that schema to the rules below, which are the store's format (databases written
before pydantic still load, and the same record still writes the same text):

- ``str``, ``int``, ``float``, ``bool`` and ``None`` are themselves, strictly: ``bool`` is never an
  ``int``, a string is never a number, an ``int`` is accepted where a ``float`` is declared.
- An ``Enum`` (``StrEnum``) is its value.
- ``bytes`` is its base64 text (the standard alphabet, padded); reading accepts only that text (no
  record stored before this rule held bytes: federation's outbox rows and inbox records are the first).
- A dataclass is an object of its fields in field order; on reading, a missing field takes its default
  (so adding a field with a default needs no migration) and an unknown field is refused.
- ``tuple`` (``tuple[X, ...]`` or ``tuple[X, Y]``) and ``list`` are arrays; ``frozenset`` and ``set``
  are arrays sorted by their JSON text, so equal sets encode to equal text.
- A ``dict`` / ``Mapping`` whose keys are all strings is an object; any other is an array of
  ``[key, value]`` pairs sorted by their JSON text. Reading accepts either form and reads keys by the
  declared key type.
- ``X | None`` / ``Optional``, other unions (the first alternative that fits wins), ``Literal``, and
  ``Any``: the JSON data itself on reading; on writing, the value by its own type, by these rules.
- The text is compact (``,`` and ``:``, no spaces), not ASCII-escaped; NaN and infinities are refused.

Bad data raises :class:`CodecError` naming the path (``Message.state``) and what was wrong; a record
whose ``__post_init__`` refuses the values is reported the same way.

How the rules map onto pydantic. Validation runs in pydantic's lax mode with the scalar schemas made
strict, so one schema reads JSON text and plain data alike (strict mode would want ``Enum`` members and
tuples from plain data, and mapping pairs are plain data by the time they are a mapping). Sets,
mappings and ``Any`` get wrap/plain serializers; unions read left to right; dataclass arguments forbid
extras. Hand-written, and why:

- :func:`_rules`, a walk over the finished core schema that applies these. Pydantic has no public hook
  for how it builds the schema of a type one does not own (``GenerateSchema`` is private, the
  ``schema_generator`` setting has had no effect since 2.10, and ``TypeAdapter`` takes no config for a
  dataclass), and a set or mapping can sit anywhere inside a record.
- :func:`_encode_any`, which picks the schema for an ``Any`` value by its type: pydantic's own
  inference writes a set unsorted and a non-string key as a string.
- The text is written by :func:`json.dumps` from pydantic's JSON-mode data, not by ``dump_json``:
  the two write floats differently (``1e-07`` against ``1e-7``), and the stored text must not change.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from functools import cache
from typing import Any, TypeVar, cast

from pydantic import TypeAdapter
from pydantic_core import (
    PydanticSerializationError,
    SchemaSerializer,
    SchemaValidator,
    ValidationError,
    core_schema,
)

T = TypeVar("T")

_SCALARS = (str, int, float, bool, type(None))
# Keys of a core schema whose values are not schemas (Python values, functions, config): left as they are.
_OPAQUE = frozenset({"cls", "members", "expected", "default", "default_factory", "metadata", "config",
                     "serialization", "function", "ref", "schema_ref", "custom_error_context"})


class CodecError(ValueError):
    """Data that does not fit the declared type; the message names the path and the problem."""


def encode(obj: Any) -> Any:
    """Plain JSON data (dicts, lists, str, int, float, bool, None) for ``obj``, by its own type."""
    return _encode_any(obj)


def dumps(obj: Any) -> str:
    """``encode`` as compact JSON text (keys in field order); NaN and infinities are refused."""
    data = encode(obj)
    try:
        return json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except ValueError as exc:
        raise CodecError(f"cannot write {type(obj).__name__} as JSON: {exc}") from exc


def loads(tp: type[T], text: str | bytes) -> T:
    """The value of type ``tp`` that the JSON ``text`` encodes."""
    codec = _codec(cast(Any, tp))  # a type is hashable; mypy does not know it of ``type[T]``
    try:
        value: T = codec.validator.validate_json(text)
    except ValidationError as exc:
        raise CodecError(_describe(codec.name, exc)) from None
    return value


def decode(tp: Any, data: Any) -> Any:
    """The value of type ``tp`` that the plain JSON ``data`` encodes (:class:`CodecError` if it does not fit)."""
    codec = _codec(tp)
    try:
        return codec.validator.validate_python(data)
    except ValidationError as exc:
        raise CodecError(_describe(codec.name, exc)) from None


# --- one validator and serializer per type ------------------------------------------------------------


@dataclass(frozen=True)
class _Codec:
    name: str
    validator: SchemaValidator
    serializer: SchemaSerializer


@cache
def _codec(tp: Any) -> _Codec:
    name = tp.__name__ if isinstance(tp, type) else repr(tp)
    try:
        schema = _rules(TypeAdapter(tp).core_schema)
    except Exception as exc:  # pydantic's own refusal of the type (PydanticSchemaGenerationError, ...)
        raise CodecError(f"{name}: the codec does not handle the type {tp!r}: {exc}") from exc
    return _Codec(name, SchemaValidator(schema), SchemaSerializer(schema))


def _rules(node: Any) -> Any:
    """A copy of the core schema ``node`` with the codec's rules applied to every schema in it."""
    if isinstance(node, list):
        return [_rules(item) for item in node]
    if isinstance(node, tuple):  # a union's (schema, label) choice
        return tuple(_rules(item) for item in node)
    if not isinstance(node, dict):
        return node
    schema = {key: value if key in _OPAQUE else _rules(value) for key, value in node.items()}
    rule = _RULES.get(schema.get("type", ""))
    return rule(schema) if rule else schema


def _strict(schema: dict[str, Any]) -> dict[str, Any]:
    return {**schema, "strict": True}


def _left_to_right(schema: dict[str, Any]) -> dict[str, Any]:
    return {**schema, "mode": "left_to_right"}


def _forbid_extra(schema: dict[str, Any]) -> dict[str, Any]:
    return {**schema, "extra_behavior": "forbid"}


def _report_refusal(schema: dict[str, Any]) -> Any:
    """A dataclass whose ``__post_init__`` may refuse: its exception becomes an error at its path."""
    if not schema.get("post_init"):
        return schema
    cls_name = schema["cls"].__name__

    def refused(data: Any, handler: core_schema.ValidatorFunctionWrapHandler) -> Any:
        try:
            return handler(data)
        except ValidationError:
            raise
        except Exception as exc:  # the record's own validation (__post_init__) refusing the values
            raise ValueError(f"{cls_name} refused the values: {exc}") from exc

    inner = {key: value for key, value in schema.items() if key != "ref"}  # a reference reaches the wrapper
    return core_schema.no_info_wrap_validator_function(
        refused, cast(core_schema.CoreSchema, inner), ref=schema.get("ref")
    )


def _sorted_array(schema: dict[str, Any]) -> dict[str, Any]:
    """A set: an array sorted by JSON text."""
    return {**schema, "serialization": core_schema.wrap_serializer_function_ser_schema(
        _encode_set, schema=cast(core_schema.CoreSchema, schema), when_used="json",
    )}


def _object_or_pairs(schema: dict[str, Any]) -> Any:
    """A mapping: written as an object or as sorted pairs, read from either. With string keys it stays
    pydantic's mapping (errors name the key); with other keys it is read as pairs, as keys from JSON can
    be arrays, which a Python dict cannot hold before they are read as the key type."""
    any_ = core_schema.any_schema()
    keys = schema.get("keys_schema", any_)
    pairs = core_schema.list_schema(core_schema.tuple_schema([keys, schema.get("values_schema", any_)]))
    written = core_schema.wrap_serializer_function_ser_schema(_encode_mapping, schema=pairs, when_used="json")
    if keys.get("type") == "str":
        return core_schema.no_info_before_validator_function(
            _pairs_to_object, cast(core_schema.CoreSchema, schema), serialization=written
        )
    return core_schema.no_info_before_validator_function(
        _object_to_pairs, core_schema.no_info_after_validator_function(dict, pairs), serialization=written
    )


def _base64(schema: dict[str, Any]) -> Any:
    """``bytes``: written as base64 text, read from it (never as raw text, which need not be UTF-8)."""
    return core_schema.no_info_before_validator_function(
        _from_base64, cast(core_schema.CoreSchema, {**schema, "strict": True}),
        serialization=core_schema.plain_serializer_function_ser_schema(_to_base64, when_used="json"),
    )


def _by_own_type(schema: dict[str, Any]) -> dict[str, Any]:
    """``Any``: written by the value's own type, so a set or a non-string key follows the rules too."""
    return {**schema, "serialization": core_schema.plain_serializer_function_ser_schema(
        _encode_any, when_used="json",
    )}


_RULES: dict[str, Callable[[dict[str, Any]], Any]] = {
    "int": _strict, "float": _strict, "bool": _strict, "str": _strict,
    "union": _left_to_right,
    "dataclass-args": _forbid_extra,
    "dataclass": _report_refusal,
    "set": _sorted_array, "frozenset": _sorted_array,
    "dict": _object_or_pairs,
    "any": _by_own_type,
    "bytes": _base64,
}


# --- the functions the schemas call -------------------------------------------------------------------


def _encode_any(value: Any) -> Any:
    """``value`` written by its own type (a ``StrEnum`` member is a ``str`` too: its value, not itself)."""
    tp: Any
    if isinstance(value, Enum) or (dataclasses.is_dataclass(value) and not isinstance(value, type)):
        tp = type(value)
    elif value is None or isinstance(value, _SCALARS):
        return value
    elif isinstance(value, bytes):
        tp = bytes
    elif isinstance(value, tuple | list | frozenset | set):
        tp = next(kind for kind in (tuple, list, frozenset, set) if isinstance(value, kind))
    elif isinstance(value, Mapping):
        tp = dict
    else:
        raise CodecError(f"cannot encode a {type(value).__name__}: {value!r}")
    try:
        return _codec(tp).serializer.to_python(value, mode="json", warnings=False)
    except PydanticSerializationError as exc:
        raise CodecError(f"cannot encode {type(value).__name__}: {exc}") from None


def _to_base64(value: bytes) -> str:
    return base64.b64encode(value).decode("ascii")


def _from_base64(data: Any) -> Any:
    if not isinstance(data, str):
        return data  # bytes already (plain Python data), or wrong: the strict bytes schema says which
    try:
        return base64.b64decode(data.encode("ascii"), validate=True)
    except (UnicodeEncodeError, binascii.Error) as exc:
        raise ValueError(f"not base64 text ({exc})") from None


def _encode_set(value: Any, handler: core_schema.SerializerFunctionWrapHandler) -> Any:
    return sorted(handler(value), key=_sort_key)


def _encode_mapping(value: Any, handler: core_schema.SerializerFunctionWrapHandler) -> Any:
    pairs = handler(list(value.items()))
    if all(isinstance(key, str) for key in value):
        return {key: item for key, item in pairs}
    return sorted(pairs, key=_sort_key)


def _pairs_to_object(data: Any) -> Any:
    if isinstance(data, list) and all(isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) for p in data):
        return dict(data)
    return data


def _object_to_pairs(data: Any) -> Any:
    return [[key, value] for key, value in data.items()] if isinstance(data, dict) else data


def _sort_key(item: Any) -> str:
    return json.dumps(item, sort_keys=True, ensure_ascii=False)


# --- errors ------------------------------------------------------------------------------------------


def _describe(name: str, exc: ValidationError) -> str:
    problems = []
    for error in exc.errors(include_url=False):
        path = name + "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in error["loc"])
        kind = error["type"]
        if kind in ("unexpected_keyword_argument", "extra_forbidden"):
            problems.append(f"{path}: unknown field")
        elif kind in ("missing", "missing_argument"):
            problems.append(f"{path}: missing (required)")
        elif kind == "json_invalid":
            problems.append(f"{path}: not JSON: {error['msg']}")
        else:
            problems.append(f"{path}: {error['msg']}, got {_show(error['input'])}")
    return "; ".join(problems)


def _show(data: Any) -> str:
    text = repr(data)
    return text if len(text) <= 60 else text[:57] + "..."
