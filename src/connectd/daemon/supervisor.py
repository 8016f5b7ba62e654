"""Supervision: one way to start a task, and a written failure policy for every kind of task.

After trio's ``serve_listeners``: the supervisor takes the task group it runs in (the daemon's one
group, opened by :meth:`connectd.daemon.parts.Engine.run`), and every task of the daemon is started through
:meth:`Supervisor.spawn`. Nothing is fire-and-forget and no exception from tmux, the store or the
network ends the daemon. The policy of each kind is data, in :data:`POLICIES`:

- a **loop** (the watcher's poll, capture and sweep, the ticker) runs its body every ``every``
  seconds; a body that raises is logged and audited once per streak of failures, and the next round
  waits the backoff (doubling up to ``backoff_max``) instead of ``every``;
- a **service** (the control-mode reader, the audit exporter) that returns or raises is started
  again after the backoff (which starts over when the service had run for ``backoff_max`` or more);
- an **until-done** call (the daemon's start: Recover, the first look, reconciliation, open restarts)
  is awaited by its caller and made again after the backoff until it succeeds; the daemon serves
  only once its start is done (so it never serves a token of an incarnation that died meanwhile);
- a **one-shot** task (a delivery guard, a restart, an OpenCode launch's session binding) runs once;
  if it raises, the failure is logged and audited, and when its policy says so (``steps_into_core``)
  the caller's ``on_error`` turns the exception into the core's event (a guard that cannot read the
  pane -> a guard wait; typing that failed partway -> unconfirmed; a restart step that failed ->
  ``StepFailed``; a binding that failed -> refused, the pane unbound). The table decides: ``spawn``
  refuses such a kind without its ``on_error``, and any other kind with one;
- an **essential** task (the HTTP server: uvicorn answers each connection's errors itself) runs for
  the daemon's life; if it fails, the failure is logged and audited and raised out of the task group,
  so the daemon stops loudly instead of running on unreachable. Its normal end (the daemon stopping)
  is not a failure.

A **group** (:meth:`Supervisor.group`: the federation's bus loops) is a task group of its own, opened
inside the daemon's one group by a task the supervisor starts, whose tasks are spawned through it under
their own kinds' policies (loops, services and one-shots; never an essential or until-done task) and
stopped together by :meth:`Group.stop`: cancelled, and awaited until every one has ended (a section a
task shields, such as one delivery's handling, finishes first). Its failure policy is its tasks': each
keeps its failures inside the group as its kind says, so a group never fails the daemon; the daemon's
end cancels it with everything else.

A bug (``TransitionNotAllowed``, or any other exception) is logged with the task's name and the
daemon keeps serving the others. Only cancellation (the daemon stopping, a group stopped) passes through.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import anyio
from anyio.abc import TaskGroup

from connectcore._machine import TransitionNotAllowed
from connectcore.effects import Audit

log = logging.getLogger("connectd.supervisor")

ACTOR = "connectd"  # the audit actor of the daemon's own failures


class Kind(StrEnum):
    WATCH = "watch"  # poll, capture, sweep: loops
    TICK = "tick"  # expiry of cards and ids: a loop
    GUARD = "guard"  # one delivery attempt under the recipient's send lock: one-shot
    RESTART = "restart"  # one restart-to-connect driver: one-shot
    BIND = "bind"  # one OpenCode launch's session binding through its own server: one-shot
    HISTORY_WATCH = "history_watch"  # the transcript directories' watcher: a service
    CONTROL_MODE = "control_mode"  # the control-mode reader: a service
    EXPORT = "export"  # the OTLP audit exporter: a service
    BUS = "bus"  # the federation's NATS loops (fetch, publish): services
    START = "start"  # the daemon's start (Recover, the first look, reconciliation, open restarts): until done
    HTTP = "http"  # uvicorn serving the owner API, the page and /mcp: essential


class Shape(StrEnum):
    LOOP = "loop"
    SERVICE = "service"
    ONE_SHOT = "one_shot"
    UNTIL_DONE = "until_done"  # awaited by its caller, retried after the backoff until it succeeds
    ESSENTIAL = "essential"  # runs for the daemon's life; its failure stops the daemon


@dataclass(frozen=True)
class Policy:
    shape: Shape
    backoff: float  # first wait after a failure, seconds
    backoff_max: float  # the doubling stops here
    on_failure: str  # what happens, in words (the docs and the audit line say it)
    steps_into_core: bool = False  # a one-shot whose failure the caller's on_error steps into the core


POLICIES: dict[Kind, Policy] = {
    Kind.WATCH: Policy(Shape.LOOP, 1.0, 30.0, "logged; the next round waits the backoff"),
    Kind.TICK: Policy(Shape.LOOP, 1.0, 30.0, "logged; the next round waits the backoff"),
    Kind.GUARD: Policy(
        Shape.ONE_SHOT, 0.0, 0.0, "a guard wait, or typing unconfirmed, stepped into the core", steps_into_core=True
    ),
    Kind.RESTART: Policy(
        Shape.ONE_SHOT, 0.0, 0.0, "StepFailed stepped into the restart; recovery follows", steps_into_core=True
    ),
    Kind.BIND: Policy(
        Shape.ONE_SHOT,
        0.0,
        0.0,
        "the binding ends refused (failed): the pane stays unbound and the page says so",
        steps_into_core=True,
    ),
    Kind.HISTORY_WATCH: Policy(
        Shape.SERVICE, 1.0, 60.0, "started again after the backoff (with a scan); searches scan meanwhile"
    ),
    Kind.CONTROL_MODE: Policy(Shape.SERVICE, 1.0, 60.0, "started again after the backoff; the sweep covers the gap"),
    Kind.EXPORT: Policy(Shape.SERVICE, 1.0, 60.0, "started again after the backoff; records wait in the store behind its cursor"),
    Kind.BUS: Policy(
        Shape.SERVICE, 0.5, 30.0, "started again after the backoff; NATS away never ends the daemon (what is owed waits in the store)"
    ),
    Kind.START: Policy(
        Shape.UNTIL_DONE, 1.0, 30.0, "retried after the backoff; the daemon serves only once its start is done"
    ),
    Kind.HTTP: Policy(
        Shape.ESSENTIAL, 0.0, 0.0, "logged, audited and raised: the daemon stops rather than run unreachable"
    ),
}

OnError = Callable[[Exception], Awaitable[None]]
AuditSink = Callable[[Audit], Awaitable[None]]


class Supervisor:
    """Starts every task of the daemon in one task group, each under its kind's policy."""

    def __init__(
        self,
        tg: TaskGroup,
        *,
        audit: AuditSink | None = None,
        clock: Callable[[], float] | None = None,
        backoff_scale: float = 1.0,  # tests shrink the policies' waits
    ) -> None:
        self._tg = tg
        self._scale = backoff_scale
        self._audit = audit
        self._clock = clock
        self.failures: dict[Kind, int] = {kind: 0 for kind in Kind}  # counted, for the page and tests

    def spawn(
        self,
        kind: Kind,
        fn: Callable[..., Awaitable[Any]],
        *args: Any,
        name: str = "",
        every: float | None = None,
        on_error: OnError | None = None,
    ) -> None:
        """Start ``fn(*args)`` under ``kind``'s policy (``every``: the loop's period)."""
        policy = _checked(kind, every, on_error)
        label = name or getattr(fn, "__qualname__", repr(fn))
        if policy.shape is Shape.LOOP:
            assert every is not None  # (_checked)
            self._tg.start_soon(self._loop, kind, policy, fn, args, label, every, name=label)
        elif policy.shape is Shape.SERVICE:
            self._tg.start_soon(self._service, kind, policy, fn, args, label, name=label)
        elif policy.shape is Shape.ESSENTIAL:
            self._tg.start_soon(self._essential, kind, fn, args, label, name=label)
        else:
            self._tg.start_soon(self._once, kind, fn, args, label, on_error, name=label)

    def group(self, name: str) -> Group:
        """A task group of its own inside the daemon's (see the module's note): spawn into it at once
        (its tasks start when it opens), stop it with :meth:`Group.stop`."""
        group = Group(name)
        self._tg.start_soon(self._group, group, name=f"group {name}")
        return group

    async def _group(self, group: Group) -> None:
        try:
            with group._scope:
                async with anyio.create_task_group() as tg:
                    inner = Supervisor(tg, audit=self._audit, clock=self._clock, backoff_scale=self._scale)
                    inner.failures = self.failures  # one count for the daemon
                    group._opened(inner)
                    await anyio.sleep_forever()
        finally:
            group._ended.set()

    async def until_done(self, kind: Kind, fn: Callable[..., Awaitable[Any]], *args: Any, name: str = "") -> Any:
        """Await ``fn(*args)`` until it succeeds, under an UNTIL_DONE kind's policy: a failure is logged
        and audited (once per streak) and the call is made again after the backoff."""
        policy = POLICIES[kind]
        if policy.shape is not Shape.UNTIL_DONE:
            raise ValueError(f"{kind} is a {policy.shape}, not until_done")
        label = name or getattr(fn, "__qualname__", repr(fn))
        wait, streak = policy.backoff * self._scale, 0
        while True:
            try:
                return await fn(*args)
            except Exception as exc:
                streak += 1
                if streak == 1:
                    await self._failed(kind, label, exc)
            await anyio.sleep(wait)
            wait = min(wait * 2, policy.backoff_max * self._scale)

    async def _loop(
        self, kind: Kind, policy: Policy, fn: Callable[..., Awaitable[Any]], args: tuple[Any, ...], label: str, every: float
    ) -> None:
        wait = policy.backoff * self._scale
        streak = 0
        while True:
            try:
                await fn(*args)
            except Exception as exc:
                streak += 1
                if streak == 1:
                    await self._failed(kind, label, exc)
                await anyio.sleep(wait)
                wait = min(wait * 2, policy.backoff_max * self._scale)
                continue
            if streak:
                log.info("%s %s recovered after %d failed rounds", kind, label, streak)
            streak, wait = 0, policy.backoff * self._scale
            await anyio.sleep(every)

    async def _service(
        self, kind: Kind, policy: Policy, fn: Callable[..., Awaitable[Any]], args: tuple[Any, ...], label: str
    ) -> None:
        wait = policy.backoff * self._scale
        while True:
            started = anyio.current_time()
            try:
                await fn(*args)
                log.warning("%s %s returned; starting it again in %.0fs", kind, label, wait)
            except Exception as exc:
                await self._failed(kind, label, exc)
            if anyio.current_time() - started >= policy.backoff_max * self._scale:
                wait = policy.backoff * self._scale  # it ran well for a while: a new streak, from the first wait
            await anyio.sleep(wait)
            wait = min(wait * 2, policy.backoff_max * self._scale)

    async def _once(
        self, kind: Kind, fn: Callable[..., Awaitable[Any]], args: tuple[Any, ...], label: str, on_error: OnError | None
    ) -> None:
        try:
            await fn(*args)
        except Exception as exc:
            await self._failed(kind, label, exc)
            if on_error is not None:
                try:
                    await on_error(exc)
                except Exception as again:
                    await self._failed(kind, f"{label} (failure handler)", again)

    async def _essential(self, kind: Kind, fn: Callable[..., Awaitable[Any]], args: tuple[Any, ...], label: str) -> None:
        try:
            await fn(*args)
        except Exception as exc:
            await self._failed(kind, label, exc)
            raise

    async def _failed(self, kind: Kind, label: str, exc: Exception) -> None:
        """Log (a bug loudly, with its event), count and audit one failure; never raises."""
        self.failures[kind] += 1
        if isinstance(exc, TransitionNotAllowed):
            log.error("bug in %s %s: %s", kind, label, exc, exc_info=exc)
        else:
            log.warning("%s %s failed: %s: %s", kind, label, type(exc).__name__, exc, exc_info=log.isEnabledFor(logging.DEBUG))
        if self._audit is None:
            return
        try:
            at = self._clock() if self._clock else 0.0
            detail = f"{label}: {type(exc).__name__}: {exc}"[:500]
            await self._audit(Audit(ACTOR, f"task.{kind}", "failed", detail=detail, at=at))
        except Exception as again:  # the store itself may be what failed
            log.warning("could not audit the failure of %s %s: %s", kind, label, again)


def _checked(kind: Kind, every: float | None, on_error: OnError | None) -> Policy:
    """``kind``'s policy, once the arguments of a spawn fit it (else TypeError or ValueError)."""
    policy = POLICIES[kind]
    if policy.steps_into_core and on_error is None:
        raise TypeError(f"{kind} steps its failure into the core: spawn it with on_error=")
    if not policy.steps_into_core and on_error is not None:
        raise TypeError(f"{kind} takes no on_error: its policy is {policy.on_failure!r}")
    if policy.shape is Shape.UNTIL_DONE:
        raise ValueError(f"{kind} is until_done: await until_done() instead")
    if policy.shape is Shape.LOOP and every is None:
        raise ValueError(f"{kind} is a loop: spawn it with every=")
    return policy


class Group:
    """Tasks started and stopped together in a task group of their own (:meth:`Supervisor.group`)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._scope = anyio.CancelScope()
        self._ended = anyio.Event()
        self._inner: Supervisor | None = None
        self._waiting: list[Callable[[Supervisor], None]] = []  # spawns made before the group opened
        self.stopping = False

    def spawn(
        self,
        kind: Kind,
        fn: Callable[..., Awaitable[Any]],
        *args: Any,
        name: str = "",
        every: float | None = None,
        on_error: OnError | None = None,
    ) -> None:
        """:meth:`Supervisor.spawn` in this group (not an essential task: a group never fails the daemon)."""
        if _checked(kind, every, on_error).shape is Shape.ESSENTIAL:
            raise ValueError(f"{kind} is essential: it runs in the daemon's own group")
        if self.stopping:
            raise RuntimeError(f"group {self.name} is stopping: nothing starts in it")
        def start(inner: Supervisor) -> None:
            inner.spawn(kind, fn, *args, name=name, every=every, on_error=on_error)

        if self._inner is None:
            self._waiting.append(start)
        else:
            start(self._inner)

    def _opened(self, inner: Supervisor) -> None:
        self._inner = inner
        for start in self._waiting:
            start(inner)
        self._waiting = []

    async def stop(self) -> None:
        """Cancel every task of the group and wait until each has ended (what a task shields finishes
        first). Stopping twice waits for the same end."""
        self.stopping = True
        self._scope.cancel()
        await self._ended.wait()

    @property
    def stopped(self) -> bool:
        return self._ended.is_set()
