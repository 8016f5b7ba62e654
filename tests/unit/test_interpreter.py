"""The interpreter executes every effect the core can emit: one handler per effect type, none ignored."""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

import anyio
import pytest

import connectcore
from connectcore.effects import Effect, Notify
from connectd.daemon.interpreter import Interpreter


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


class _FailingTmux:
    """Every tmux call fails, as when the server went away."""

    async def paste_text(self, pane_id: str, text: str, *, submit_after: float | None = None) -> None:
        raise OSError("tmux: server exited")

    async def set_pane_option(self, pane_id: str, option: str, value: str | None) -> None:
        raise OSError("tmux: no such pane")


class _Delivery:
    def __init__(self, tmux: _FailingTmux) -> None:
        self.tmux = tmux
        self.unconfirmed_calls: list[tuple[Any, ...]] = []
        self.confirmed: list[Any] = []

    async def type_text(self, effect: Any) -> None:
        await self.tmux.paste_text(effect.pane_id, effect.text, submit_after=effect.settle)

    async def confirm(self, effect: Any) -> None:
        self.confirmed.append(effect)

    async def unconfirmed(self, key: Any, detail: str, pane_id: str | None = None) -> None:
        self.unconfirmed_calls.append((key, detail, pane_id))


def _failing_engine() -> Any:
    from types import SimpleNamespace

    tmux = _FailingTmux()
    return SimpleNamespace(tmux=tmux, delivery=_Delivery(tmux))


def test_typing_that_fails_ends_the_message_unconfirmed_and_skips_its_confirmation() -> None:
    """Claim: a paste that fails makes the message unconfirmed (the reason names the failure and the
    pane is looked at), and the rest of that message's effects do not run; another subject's do."""
    from connectcore.effects import ConfirmTyping, TypeText

    engine = _failing_engine()
    key = ("p", "m1")
    effects = (
        TypeText("%2", "inc", "hello", key, submit=True, settle=0.1),
        ConfirmTyping("%2", "inc", key),
        Notify("message", ("p", "m2"), principal="p", payload={}),
    )
    engine.subscribers = type("S", (), {"wake": lambda self, p: None, "publish": lambda self, i: None})()
    anyio.run(Interpreter(engine).run, effects)
    assert engine.delivery.unconfirmed_calls == [(key, "send failed partway: tmux: server exited", "%2")]
    assert engine.delivery.confirmed == []


def test_a_confirmation_that_fails_says_so() -> None:
    """Claim: a confirming re-read that fails is unconfirmed with its own reason."""
    from connectcore.effects import ConfirmTyping

    engine = _failing_engine()
    key = ("p", "m1")

    async def confirm(effect: Any) -> None:
        raise OSError("capture failed")

    engine.delivery.confirm = confirm
    anyio.run(Interpreter(engine).run, (ConfirmTyping("%2", "inc", key),))
    assert engine.delivery.unconfirmed_calls == [(key, "confirming re-read failed: capture failed", "%2")]


def test_a_restart_effect_that_fails_is_raised_to_its_driver_with_the_effect_and_cause() -> None:
    """Claim: a restart's tmux effect that fails raises RestartEffectFailed (its driver steps
    StepFailed) carrying the effect and the cause; nothing is swallowed."""
    from connectcore.effects import SetPaneOption
    from connectd.daemon.interpreter import RestartEffectFailed

    engine = _failing_engine()
    effect = SetPaneOption("%2", "remain-on-exit", "on")
    with pytest.raises(RestartEffectFailed) as raised:
        anyio.run(Interpreter(engine).run, (effect,))
    assert raised.value.effect == effect and isinstance(raised.value.cause, OSError)
    assert str(raised.value) == "SetPaneOption failed: tmux: no such pane"


def test_every_effect_type_the_core_defines_is_emitted_by_the_core() -> None:
    """Claim: connectcore defines no effect type it never constructs (a handler for nothing is dead code)."""
    import ast
    from pathlib import Path

    built: set[str] = set()
    for path in Path(connectcore.__path__[0]).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                built.add(name)
    never = sorted(t.__name__ for t in _effect_types() if t.__name__ not in built)
    assert never == [], f"effect types the core never emits: {never}"


def test_a_coding_error_in_an_effect_is_a_bug_not_an_io_failure() -> None:
    """Claim: a ValueError from the daemon's own code (not the tmux adapter's refusal of an argument, not
    /proc) propagates to the task's supervisor as a bug; the message is not quietly made unconfirmed."""
    from connectcore.effects import TypeText

    engine = _failing_engine()

    async def buggy(effect: Any) -> None:
        raise ValueError("a bug: unpacked the wrong tuple")

    engine.delivery.type_text = buggy
    key = ("p", "m1")
    with pytest.raises(ValueError, match="a bug"):
        anyio.run(Interpreter(engine).run, (TypeText("%2", "inc", "hello", key, submit=True, settle=0.1),))
    assert engine.delivery.unconfirmed_calls == []


def test_the_adapters_own_refusals_still_read_as_io_failures() -> None:
    """Claim: TmuxInputError (an argument tmux must not get) and ProcStatError (a /proc file that vanished)
    are I/O failures: the message ends unconfirmed and the daemon goes on."""
    from connectcore.effects import TypeText
    from connectd.tmux.adapter import TmuxInputError
    from connectd.tmux.procfs import ProcStatError

    for exc in (TmuxInputError("a control character in the target"), ProcStatError("no /proc/123/stat")):
        engine = _failing_engine()

        async def refuses(effect: Any, exc: Exception = exc) -> None:
            raise exc

        engine.delivery.type_text = refuses
        key = ("p", "m1")
        anyio.run(Interpreter(engine).run, (TypeText("%2", "inc", "hello", key, submit=True, settle=0.1),))
        assert [c[0] for c in engine.delivery.unconfirmed_calls] == [key]
