# The hand-written codec as src/connectd/store/codec.py was before it moved to pydantic (at 5571919), kept
# unchanged as the oracle of tests/unit/test_codec_compat.py and tests/integration/test_store_compat.py.
"""A JSON codec for the core's frozen dataclasses, driven by their type hints.

``encode(obj)`` turns a value into plain JSON data; ``decode(tp, data)`` turns it back into ``tp``
using ``typing.get_type_hints``, so a new record type needs no codec code. Rules:

- ``str``, ``int``, ``float``, ``bool`` and ``None`` are themselves (``bool`` is never an ``int``, an
  ``int`` is accepted where a ``float`` is declared).
- An ``Enum`` (``StrEnum``) is its value.
- A dataclass is an object of its fields; on decoding, a missing field takes its default (so adding a
  field with a default needs no migration) and an unknown field is refused.
- ``tuple`` (``tuple[X, ...]`` or ``tuple[X, Y]``) and ``list`` are arrays; ``frozenset`` and ``set``
  are arrays sorted by their JSON text, so equal sets encode to equal text.
- A ``dict`` / ``Mapping`` whose keys are all strings is an object; any other is an array of
  ``[key, value]`` pairs. Decoding accepts either form and decodes keys by the declared key type.
- ``X | None`` / ``Optional``, other unions (first alternative that decodes wins), ``Literal`` and
  ``Any`` (the JSON data itself).

Bad data raises :class:`CodecError` naming the path (``Message.state``) and what was wrong.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from collections.abc import Collection, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from enum import Enum
from functools import cache
from typing import Any, TypeVar

T = TypeVar("T")

_SCALARS = (str, int, float, bool, type(None))


class CodecError(ValueError):
    """Data that does not fit the declared type; the message names the path and the problem."""


def encode(obj: Any) -> Any:
    """Plain JSON data (dicts, lists, str, int, float, bool, None) for ``obj``."""
    if isinstance(obj, Enum):
        return obj.value
    if obj is None or isinstance(obj, _SCALARS):
        return obj
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: encode(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, tuple | list):
        return [encode(item) for item in obj]
    if isinstance(obj, frozenset | set):
        return sorted((encode(item) for item in obj), key=_sort_key)
    if isinstance(obj, Mapping):
        if all(isinstance(k, str) for k in obj):
            return {k: encode(v) for k, v in obj.items()}
        return sorted(([encode(k), encode(v)] for k, v in obj.items()), key=_sort_key)
    raise CodecError(f"cannot encode a {type(obj).__name__}: {obj!r}")


def dumps(obj: Any) -> str:
    """``encode`` as compact JSON text (keys in field order); NaN and infinities are refused."""
    try:
        return json.dumps(encode(obj), ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except ValueError as exc:
        raise CodecError(f"cannot write {type(obj).__name__} as JSON: {exc}") from exc


def loads(tp: type[T], text: str | bytes) -> T:
    """``decode`` from JSON text."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise CodecError(f"{_name(tp)}: not JSON: {exc}") from exc
    value: T = decode(tp, data)
    return value


def decode(tp: Any, data: Any, path: str = "") -> Any:
    """The value of type ``tp`` that ``data`` encodes (:class:`CodecError` if it does not fit)."""
    here = path or _name(tp)
    if tp is Any or tp is object:
        return data
    if tp is type(None) or tp is None:
        if data is not None:
            raise CodecError(f"{here}: expected null, got {_show(data)}")
        return None
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Union or origin is types.UnionType:
        return _decode_union(args, data, here)
    if origin is typing.Literal:
        if data not in args:
            raise CodecError(f"{here}: expected one of {list(args)!r}, got {_show(data)}")
        return data
    if origin is not None:
        return _decode_generic(origin, args, data, here)
    if isinstance(tp, type):
        if issubclass(tp, Enum):
            try:
                return tp(data)
            except ValueError:
                allowed = ", ".join(repr(m.value) for m in tp)
                raise CodecError(f"{here}: {_show(data)} is not a {tp.__name__} ({allowed})") from None
        if dataclasses.is_dataclass(tp):
            return _decode_dataclass(tp, data, here)
        if tp is bool:
            if not isinstance(data, bool):
                raise CodecError(f"{here}: expected a bool, got {_show(data)}")
            return data
        if tp is int:
            if isinstance(data, bool) or not isinstance(data, int):
                raise CodecError(f"{here}: expected an int, got {_show(data)}")
            return data
        if tp is float:
            if isinstance(data, bool) or not isinstance(data, int | float):
                raise CodecError(f"{here}: expected a number, got {_show(data)}")
            return float(data)
        if tp is str:
            if not isinstance(data, str):
                raise CodecError(f"{here}: expected a string, got {_show(data)}")
            return data
        if tp in (tuple, list, frozenset, set, dict):
            return _decode_generic(tp, (), data, here)
    raise CodecError(f"{here}: the codec does not handle the type {tp!r}")


def _decode_union(args: tuple[Any, ...], data: Any, here: str) -> Any:
    if data is None and type(None) in args:
        return None
    problems = []
    for alternative in args:
        if alternative is type(None):
            continue
        try:
            return decode(alternative, data, here)
        except CodecError as exc:
            problems.append(str(exc))
    raise CodecError(" / ".join(problems) if len(problems) == 1 else f"{here}: fits no alternative: {problems}")


def _decode_generic(origin: Any, args: tuple[Any, ...], data: Any, here: str) -> Any:
    if origin is dict or origin is Mapping:
        key_tp, value_tp = args if args else (Any, Any)
        if isinstance(data, dict):
            items = list(data.items())
        elif isinstance(data, list) and all(isinstance(p, list) and len(p) == 2 for p in data):
            items = [(p[0], p[1]) for p in data]
        else:
            raise CodecError(f"{here}: expected an object or [key, value] pairs, got {_show(data)}")
        return {
            decode(key_tp, k, f"{here}[{k!r}]"): decode(value_tp, v, f"{here}[{k!r}]") for k, v in items
        }
    if not isinstance(data, list):
        raise CodecError(f"{here}: expected an array, got {_show(data)}")
    if origin is tuple:
        if not args or (len(args) == 2 and args[1] is Ellipsis):
            item_tp = args[0] if args else Any
            return tuple(decode(item_tp, item, f"{here}[{i}]") for i, item in enumerate(data))
        if args == ((),):  # tuple[()]
            args = ()
        if len(data) != len(args):
            raise CodecError(f"{here}: expected {len(args)} items, got {len(data)}")
        return tuple(decode(a, item, f"{here}[{i}]") for i, (a, item) in enumerate(zip(args, data, strict=True)))
    item_tp = args[0] if args else Any
    items = [decode(item_tp, item, f"{here}[{i}]") for i, item in enumerate(data)]
    if origin is list:
        return items
    if origin is set:
        return set(items)
    if origin in (frozenset, AbstractSet):
        return frozenset(items)
    if origin in (Sequence, Collection, Iterable):
        return tuple(items)
    raise CodecError(f"{here}: the codec does not handle {origin!r}")


@cache
def _hints(cls: type) -> tuple[tuple[str, Any, bool], ...]:
    """(name, type, required) of each init field of a dataclass."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        out.append((f.name, hints[f.name], required))
    return tuple(out)


def _decode_dataclass(cls: type, data: Any, here: str) -> Any:
    if not isinstance(data, dict):
        raise CodecError(f"{here}: expected an object, got {_show(data)}")
    fields = _hints(cls)
    known = {name for name, _tp, _req in fields}
    unknown = sorted(set(data) - known)
    if unknown:
        raise CodecError(f"{here}: unknown field(s) {', '.join(map(repr, unknown))} for {cls.__name__}")
    kwargs = {}
    for name, tp, required in fields:
        if name not in data:
            if required:
                raise CodecError(f"{here}.{name}: missing (required by {cls.__name__})")
            continue
        kwargs[name] = decode(tp, data[name], f"{here}.{name}")
    try:
        return cls(**kwargs)
    except Exception as exc:  # a record's own validation (__post_init__) refusing the values
        raise CodecError(f"{here}: {cls.__name__} refused the values: {exc}") from exc


def _sort_key(item: Any) -> str:
    return json.dumps(item, sort_keys=True, ensure_ascii=False)


def _name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or repr(tp)


def _show(data: Any) -> str:
    text = repr(data)
    return text if len(text) <= 60 else text[:57] + "..."
