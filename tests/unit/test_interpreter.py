"""The interpreter executes every effect the core can emit: one handler per effect type, none ignored."""

from __future__ import annotations

import importlib
import pkgutil
from types import SimpleNamespace
from typing import Any

import anyio
import pytest

import connectcore
from connectcore.effects import Effect, Notify
from connectd.daemon.interpreter import Interpreter

PARTS = ("subscribers", "delivery", "acts", "restarts", "here", "here_launches", "tmux", "timing")


def _interpreter(parts: Any = None, **given: Any) -> Interpreter:
    """The interpreter over the stand-ins ``parts`` holds (as attributes) or ``given`` names; a part
    neither names is None (the effects a test runs never reach it)."""
    found = {name: getattr(parts, name, None) for name in PARTS}
    supervisor = given.pop("supervisor", lambda: getattr(parts, "supervisor", None))
    federation = given.pop("federation", lambda: getattr(parts, "federation", None))
    return Interpreter(**{**found, **given}, supervisor=supervisor, federation=federation)


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
    handled = _interpreter().handled()
    assert _effect_types() == set(handled)


def test_an_effect_type_without_a_handler_is_a_loud_type_error() -> None:
    """Claim: an unknown effect is never silently ignored."""

    class Stray(Effect):
        pass

    with pytest.raises(TypeError, match="no handler for Stray"):
        anyio.run(_interpreter().execute, Stray())


def test_notify_wakes_the_principal_and_tells_the_owner_stream() -> None:
    """Claim: a Notify reaches the principal's long polls and the owner's stream."""
    seen: list[Any] = []

    class Subs:
        def wake(self, principal: str | None) -> None:
            seen.append(("wake", principal))

        def publish(self, item: dict[str, Any]) -> None:
            seen.append(("publish", item))

    anyio.run(_interpreter(subscribers=Subs()).execute, Notify("message", ("p", "m1"), principal="p", payload={"outcome": "delivered"}))
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
        self.typed: list[Any] = []

    async def type_text(self, effect: Any) -> None:
        self.typed.append(effect)
        await self.tmux.paste_text(effect.pane_id, effect.text, submit_after=effect.settle)

    async def confirm(self, effect: Any) -> None:
        self.confirmed.append(effect)

    async def unconfirmed(self, key: Any, detail: str, pane_id: str | None = None) -> None:
        self.unconfirmed_calls.append((key, detail, pane_id))


def _failing_engine() -> Any:
    from types import SimpleNamespace

    tmux = _FailingTmux()
    return SimpleNamespace(tmux=tmux, delivery=_Delivery(tmux))


def test_the_guards_typing_and_confirmation_are_answered_by_the_guard_not_run_here() -> None:
    """Claim (issue 24): ``TypeText`` and ``ConfirmTyping`` without a failure come out of the delivery
    guard's step and are typed and confirmed by the guard after it (connectd.delivery.guard): the
    interpreter pastes nothing and confirms nothing (its tmux would fail if it did); the step's other
    effects still run."""
    from connectcore.effects import ConfirmTyping, TypeText

    engine = _failing_engine()
    key = ("p", "m1")
    woken: list[str] = []
    effects = (
        TypeText("%2", "inc", "hello", key, submit=True, settle=0.1),
        ConfirmTyping("%2", "inc", key),
        Notify("message", ("p", "m2"), principal="p", payload={}),
    )
    engine.subscribers = SimpleNamespace(wake=woken.append, publish=lambda item: None)
    anyio.run(_interpreter(engine).run, effects)
    assert engine.delivery.typed == [] and engine.delivery.confirmed == [] and engine.delivery.unconfirmed_calls == []
    assert woken == ["p"]


def test_a_last_look_after_a_failed_guard_is_run_here_and_its_own_failure_says_so() -> None:
    """Claim: ``ConfirmTyping`` with a failure (the core's answer to ``GuardFailed`` once typing had
    started) is one last look answered with that failure; if the look itself fails in a way it does
    not catch (an adapter's refusal), the message is unconfirmed naming that."""
    from connectcore.effects import ConfirmTyping
    from connectd.tmux.adapter import TmuxInputError

    engine = _failing_engine()
    key = ("p", "m1")
    anyio.run(_interpreter(engine).run, (ConfirmTyping("%2", "inc", key, failure="typing failed: x"),))
    assert engine.delivery.unconfirmed_calls == [(key, "typing failed: x", "%2")]
    engine = _failing_engine()
    calls = engine.delivery.unconfirmed_calls

    async def refuses_once(key: Any, detail: str, pane_id: str | None = None) -> None:
        calls.append((key, detail, pane_id))
        if len(calls) == 1:
            raise TmuxInputError("a control character in the target")

    engine.delivery.unconfirmed = refuses_once
    anyio.run(_interpreter(engine).run, (ConfirmTyping("%2", "inc", key, failure="typing failed: x"),))
    assert calls[-1] == (key, "confirming re-read failed: a control character in the target", "%2")


def test_a_restart_effect_that_fails_is_raised_to_its_driver_with_the_effect_and_cause() -> None:
    """Claim: a restart's tmux effect that fails raises RestartEffectFailed (its driver steps
    StepFailed) carrying the effect and the cause; nothing is swallowed."""
    from connectcore.effects import SetPaneOption
    from connectd.daemon.interpreter import RestartEffectFailed

    engine = _failing_engine()
    effect = SetPaneOption("%2", "remain-on-exit", "on")
    with pytest.raises(RestartEffectFailed) as raised:
        anyio.run(_interpreter(engine).run, (effect,))
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
    /proc) propagates to the task's supervisor as a bug; the message is not quietly made unconfirmed
    again. (The guard's typing: tests/unit/test_delivery_io.py.)"""
    from connectcore.effects import ConfirmTyping

    engine = _failing_engine()

    async def buggy(key: Any, detail: str, pane_id: str | None = None) -> None:
        raise ValueError("a bug: unpacked the wrong tuple")

    engine.delivery.unconfirmed = buggy
    key = ("p", "m1")
    with pytest.raises(ValueError, match="a bug"):
        anyio.run(_interpreter(engine).run, (ConfirmTyping("%2", "inc", key, failure="typing failed: x"),))


def test_the_bus_effects_are_handed_to_the_federation_desk_in_order() -> None:
    """Claim: PublishEnvelope, PublishReceipt and AckDelivery go to the desk (and so the bus loop) in the
    order the core emitted them; on a box that does not federate they are dropped, never an error."""
    from connectcore.federation.effects import AckDelivery, PublishEnvelope
    from connectcore.federation.envelope import Identity, Kind

    handed: list[Any] = []

    class Desk:
        def hand(self, effect: Any) -> None:
            handed.append(effect)

    desk: list[Any] = [Desk()]  # the pairing desk, set once the box federates

    effects = (PublishEnvelope(Kind.MESSAGE, "b" * 16, "p-1", Identity("a" * 16, "p", "m"), 1), AckDelivery("d-1"))
    interpreter = _interpreter(federation=lambda: desk[0])
    anyio.run(interpreter.run, effects)
    assert handed == list(effects)
    desk[0] = None
    anyio.run(interpreter.run, effects)
    assert handed == list(effects)


def test_a_box_that_does_not_federate_never_imports_nats() -> None:
    """Claim: the daemon's app, interpreter, pairing desk and CLI import no ``nats`` module: only the
    bus loops (connectd.federation.pump, started for a box whose federation.toml names a server) do."""
    import subprocess
    import sys

    code = (
        "import sys, connectd.daemon.app, connectd.daemon.interpreter, connectd.federation.desk, connectd.cli.main;"
        "bad = sorted(m for m in sys.modules if m == 'nats' or m.startswith('nats.'));"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
