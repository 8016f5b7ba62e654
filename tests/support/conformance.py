"""Hold an implementation against a port (a ``typing.Protocol`` of ``connectcore.ports``), member by member.

``isinstance(x, SomeProtocol)`` on a runtime-checkable Protocol only checks that the names exist
(``isinstance(print, Clock)`` is true). :func:`port_mismatches` checks what a caller relies on:
each declared method exists, is async exactly when declared async (each declared property is a
property of the same type), takes exactly the declared
parameters (names, kinds, defaults, annotations) and declares the same return type, or for a return
declared as a data Protocol, a class with the same annotated attributes. A member whose signature
cannot be read (a builtin such as ``time.time``) and that takes no arguments is called once and its
result checked against the declared return type instead.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from typing import Any


def declared_members(protocol: type) -> dict[str, Callable[..., Any]]:
    """The methods a Protocol declares itself (``__call__`` included, other dunders not)."""
    return {
        name: fn
        for name, fn in vars(protocol).items()
        if inspect.isfunction(fn) and (name == "__call__" or not name.startswith("_"))
    }


def _hints(fn: Callable[..., Any]) -> dict[str, Any]:
    try:
        return typing.get_type_hints(fn)
    except (NameError, TypeError):  # unresolvable annotations are reported as missing, below
        return {}


def _is_data_protocol(tp: Any) -> bool:
    return isinstance(tp, type) and getattr(tp, "_is_protocol", False) and not declared_members(tp)


def _return_mismatch(declared: Any, actual: Any) -> str | None:
    if declared == actual or declared is object:
        return None
    if _is_data_protocol(declared) and isinstance(actual, type):
        want, have = typing.get_type_hints(declared), typing.get_type_hints(actual)
        wrong = sorted(k for k, v in want.items() if have.get(k) != v)
        return f"{actual.__name__} lacks {', '.join(f'{k}: {want[k]}' for k in wrong)}" if wrong else None
    return f"returns {actual!r}, the port declares {declared!r}"


def _parameters(fn: Callable[..., Any], hints: dict[str, Any]) -> list[tuple[str, Any, Any, Any]]:
    return [
        (p.name, p.kind, p.default, hints.get(p.name, inspect.Parameter.empty))
        for p in inspect.signature(fn).parameters.values()
        if p.name != "self"
    ]


def declared_properties(protocol: type) -> dict[str, property]:
    """The properties a Protocol declares itself (a bus's ``connected``, ``reconnecting``)."""
    return {name: p for name, p in vars(protocol).items() if isinstance(p, property)}


def port_mismatches(protocol: type, impl: object) -> list[str]:
    """Every way ``impl`` differs from what ``protocol`` declares; empty when it conforms."""
    problems: list[str] = []
    cls = impl if isinstance(impl, type) else type(impl)
    for name, declared_property in declared_properties(protocol).items():
        where = f"{protocol.__name__}.{name}"
        found = getattr(cls, name, None)
        if not isinstance(found, property) or found.fget is None:
            problems.append(f"{where}: {'missing' if found is None else 'not a property'}")
            continue
        want, have = _hints(declared_property.fget), _hints(found.fget)  # type: ignore[arg-type]
        if have.get("return") != want.get("return"):
            problems.append(f"{where}: a property of {have.get('return')!r}, the port declares {want.get('return')!r}")
    for name, declared in declared_members(protocol).items():
        where = f"{protocol.__name__}.{name}"
        if name == "__call__":
            actual: Any = impl if callable(impl) else None
        else:
            actual = getattr(impl, name, None)
        if actual is None or not callable(actual):
            problems.append(f"{where}: missing")
            continue
        function = getattr(actual, "__func__", actual)  # a bound method's function: its own annotations
        if name == "__call__" and not inspect.isroutine(impl):
            function = type(impl).__call__
        if inspect.iscoroutinefunction(declared) != inspect.iscoroutinefunction(function):
            problems.append(
                f"{where}: {'async' if inspect.iscoroutinefunction(declared) else 'plain'} in the port"
            )
        want = _hints(declared)
        try:
            inspect.signature(function)
        except ValueError:  # a builtin: no signature to read, so call it (only if it takes nothing)
            if _parameters(declared, want):
                problems.append(f"{where}: signature unreadable and the port takes arguments")
                continue
            result = actual()
            expected = want.get("return")
            if isinstance(expected, type) and not isinstance(result, expected):
                problems.append(f"{where}: returned {result!r}, the port declares {expected!r}")
            continue
        have = _hints(function)
        ours, theirs = _parameters(declared, want), _parameters(function, have)
        if ours != theirs:
            problems.append(
                f"{where}: takes {inspect.signature(function)}, the port {inspect.signature(declared)}"
            )
        if "return" not in have:
            problems.append(f"{where}: return type not declared")
        elif (why := _return_mismatch(want.get("return"), have["return"])) is not None:
            problems.append(f"{where}: {why}")
    return problems
