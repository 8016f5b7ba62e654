"""The interpreter executes every effect the core can emit: one handler per effect type, none ignored."""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

import anyio
import pytest

import connectcore
from connectcore.effects import Effect, Notify
from connectd.interpreter import Interpreter


def _effect_types() -> set[type[Effect]]:
    for info in pkgutil.iter_modules(connectcore.__path__):
        importlib.import_module(f"connectcore.{info.name}")
    found: set[type[Effect]] = set()
    todo = [Effect]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub.__module__.startswith("connectcore."):
                found.add(sub)
            todo.append(sub)
    return found


def test_every_effect_type_the_core_defines_has_a_handler() -> None:
    """Claim: no effect type in connectcore lacks a handler, and no handler serves a non-effect."""
    handled = Interpreter(engine=None).handled()  # type: ignore[arg-type]
    assert _effect_types() == set(handled)


def test_an_effect_type_without_a_handler_is_a_loud_type_error() -> None:
    """Claim: an unknown effect is never silently ignored."""

    class Stray(Effect):
        pass

    with pytest.raises(TypeError, match="no handler for Stray"):
        anyio.run(Interpreter(engine=None).execute, Stray())  # type: ignore[arg-type]


def test_notify_wakes_the_principal_and_tells_the_owner_stream() -> None:
    """Claim: a Notify reaches the principal's long polls and the owner's stream."""
    seen: list[Any] = []

    class Subs:
        def wake(self, principal: str | None) -> None:
            seen.append(("wake", principal))

        def publish(self, item: dict[str, Any]) -> None:
            seen.append(("publish", item))

    class FakeEngine:
        subscribers = Subs()

    anyio.run(Interpreter(FakeEngine()).execute, Notify("message", ("p", "m1"), principal="p", payload={"outcome": "delivered"}))  # type: ignore[arg-type]
    assert seen == [("wake", "p"), ("publish", {"topic": "message", "key": ["p", "m1"], "outcome": "delivered"})]
