"""Control's act guard on the daemon's side (connectd.control.acts): the real core and the real
interpreter, a recording pane. Each test states its claim."""

from __future__ import annotations

from contextlib import asynccontextmanager
from types import SimpleNamespace
from typing import Any

import anyio

from connectcore import control as C
from connectcore.effects import CheckActGuard
from connectd.control.acts import ActsIO
from connectd.daemon.interpreter import Interpreter
from tests.unit.test_hub_acts import approve, propose, world


class _Pane:
    """The target pane: records each tmux call with the core steps running at that moment."""

    def __init__(self, running: list[str], *, fail: str = "") -> None:
        self.running, self.fail = running, fail
        self.events: list[tuple[str, tuple[str, ...]]] = []

    def note(self, name: str) -> None:
        self.events.append((name, tuple(self.running)))

    @asynccontextmanager
    async def pane_lock(self, pane_id: str) -> Any:
        self.note("lock")
        try:
            yield
        finally:
            self.note("unlock")

    async def capture(self, pane_id: str, lines: int) -> Any:
        self.note("capture")
        return SimpleNamespace(text="$ ", cursor=(0, 2), height=1)

    async def kill_pane(self, pane_id: str) -> None:
        self.note("kill")
        if self.fail == "kill":
            from connectd.tmux.adapter import TmuxError

            raise TmuxError("server exited")


def _guarding(fail: str = "") -> tuple[ActsIO, _Pane, CheckActGuard, Any, list[str]]:
    """A close_pane act approved and waiting for its guard; ActsIO on a core that steps the real hub and
    runs the real interpreter on each step's effects (as connectd.daemon.runner does)."""
    w, ctl, pure, _ = world()
    act_id = propose(w, ctl, C.Tool.CLOSE_PANE, pure)
    check = next(e for e in approve(w, act_id) if isinstance(e, CheckActGuard))
    running: list[str] = []
    stepped: list[str] = []
    pane = _Pane(running, fail=fail)

    async def fresh(pane_id: str) -> Any:
        return SimpleNamespace(current_command="codex"), pure.incarnation

    async def poll() -> None:
        pane.note("poll")

    watcher = SimpleNamespace(fresh_incarnation=fresh, poll=poll)
    subscribers = SimpleNamespace(wake=lambda p: None, publish=lambda item: None, end=lambda p: None)
    parts: dict[str, Any] = {}
    interpreter = Interpreter(  # the parts an act's effects reach; the others stand in as None
        subscribers=subscribers, delivery=None, acts=None, restarts=None, here=None,  # type: ignore[arg-type]
        here_launches=None, tmux=None, timing=None, supervisor=lambda: parts["supervisor"],  # type: ignore[arg-type]
        federation=lambda: None,
    )

    async def step(event: Any) -> tuple[Any, ...]:
        running.append(type(event).__name__)
        stepped.append(type(event).__name__)
        try:
            effects = w.step(event)
            await interpreter.run(effects)
            return effects
        finally:
            running.pop()

    core = SimpleNamespace(step=step, hub=w.hub)
    acts = ActsIO(
        core=core, clock=lambda: w.now, ids=SimpleNamespace(), tmux=pane, watcher=watcher,  # type: ignore[arg-type]
        timing=SimpleNamespace(settle=0.0), launches=SimpleNamespace(), launchers={},  # type: ignore[arg-type]
    )
    interpreter.acts = acts  # (the interpreter spawns act guards with it)
    return acts, pane, check, w, stepped


def test_the_act_runs_after_its_guard_step_not_nested_inside_it() -> None:
    """Claim (issue 24): the ActGuarded step returns before the act runs; the keys are pressed with no
    step running, still under the pane's send lock, and ActExecuted is stepped after them. (Before: the
    interpreter ran the act inside the ActGuarded step, and ActExecuted was stepped nested in it.)"""
    acts, pane, check, w, stepped = _guarding()
    anyio.run(acts.guard, check)
    assert stepped == ["ActGuarded", "ActExecuted"]
    names = [name for name, _ in pane.events]
    assert names == ["lock", "capture", "kill", "poll", "unlock"]
    assert dict(pane.events)["kill"] == ()  # no step running while the act runs
    assert w.hub.acts[check.act].state is C.ActState.DONE


def test_an_act_that_fails_is_reported_failed_once_and_the_lock_let_go() -> None:
    """Claim: a tmux failure while closing the pane ends the act failed with the error (never
    retried), after its guard step, and the send lock is let go."""
    acts, pane, check, w, stepped = _guarding(fail="kill")
    anyio.run(acts.guard, check)
    assert stepped == ["ActGuarded", "ActExecuted"]
    assert [name for name, _ in pane.events] == ["lock", "capture", "kill", "unlock"]
    act = w.hub.acts[check.act]
    assert act.state is C.ActState.FAILED and "server exited" in act.detail
