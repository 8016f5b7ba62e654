"""The interpreter: the one place that executes the effects the core emits, in order.

Every step of the core, for every caller (agent calls, the person's calls, the watcher, delivery,
restarts), returns its effects to :class:`connectd.daemon.runner.CoreRunner`, which commits ``Persist`` and
``Audit`` under the core lock and hands every effect to :meth:`Interpreter.run`. Each effect type has
exactly one handler here (the table built in ``Interpreter.__init__``); an effect with no handler is a loud
``TypeError``, never ignored.

Failure policy, per effect: an I/O error while executing an effect (tmux, the filesystem) ends that
effect's sequence (no later effect of the same message or restart runs) and is turned into the core's
event by :meth:`Interpreter.failed`: a last look after a failed guard that failed itself ->
``TypingObserved`` unconfirmed with the reason; a restart effect -> :class:`RestartEffectFailed` for its
driver, which steps ``StepFailed``. Nothing here decides a rule: what to type, where, and what an
outcome is, the core already decided.

Answered by the task that stepped them (it reads the step's effects once the step returns, never
nested inside it): the restart driver's ``ObservePane`` and ``InspectPane``, and the delivery guard's
``TypeText`` and ``ConfirmTyping`` (without a failure), which the guard types and confirms after its
``GuardObserved`` step, still under the recipient's send lock (:mod:`connectd.delivery.guard`: the
paste is shielded from cancellation there, and its failures are mapped to the outcome there).
``ConfirmTyping`` with a failure (after ``GuardFailed``) is executed here: one last look. Control's act
guard likewise runs the act its ``ActGuarded`` step emits (``PressKeys``, ``TypeShellText``,
``ClosePane``, ``OpenWindow``, ``HandOff``) after that step (:mod:`connectd.control.acts`).

Federation's bus effects (``PublishEnvelope``, ``PublishReceipt``, ``AckDelivery``) are handed, in
order, to the daemon's bus loop (:mod:`connectd.federation.pump`, through the pairing desk).

Locks: ``ExitAgent`` comes out of the restart step the restart driver takes under the recipient's
send lock. The interpreter never takes a lock itself.

The interpreter is given the parts whose effects it executes (issue 24), not the engine:
``subscribers``, ``delivery`` (the guard, its failure, the last look), ``acts`` (control's acts),
``restarts`` (a respawn's report), ``here`` and ``here_launches`` (a ``--here`` pane's respawn),
``tmux``, ``timing``, and as callables ``supervisor`` (it exists only while the daemon runs) and
``federation`` (the pairing desk, set once the box federates, or None).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from connectcore import restart as R
from connectcore.effects import (
    Audit,
    CheckActGuard,
    CheckGuard,
    ClosePane,
    ConfirmTyping,
    Effect,
    EndSubscriptions,
    ExitAgent,
    HandOff,
    Notify,
    OpenWindow,
    Persist,
    PressKeys,
    Respawn,
    SetPaneOption,
    TypeShellText,
    TypeText,
)
from connectcore.federation.effects import AckDelivery, BusEffect, PublishEnvelope, PublishReceipt
from connectd.daemon.supervisor import Kind
from connectd.tmux.adapter import TmuxError, TmuxInputError
from connectd.tmux.procfs import ProcStatError

if TYPE_CHECKING:
    from connectd.agents.launch_here import HereLaunches, HerePanes
    from connectd.agents.restart_to_connect import Restarts
    from connectd.control.acts import ActsIO
    from connectd.daemon.parts import Subscribers, Timing
    from connectd.daemon.supervisor import Supervisor
    from connectd.delivery.guard import Delivery
    from connectd.tmux.adapter import TmuxAdapter

log = logging.getLogger("connectd.interpreter")

# What the world can do to an effect: tmux failing or refusing an argument, a file or socket error, a
# /proc file gone. Anything else (a bare ValueError included) is a bug: it reaches the task's supervisor,
# which logs it loudly, instead of reading as a failed send.
IO_ERRORS: tuple[type[Exception], ...] = (TmuxError, TmuxInputError, OSError, ProcStatError)


class RestartEffectFailed(Exception):
    """A restart effect could not be executed; its driver steps ``StepFailed``."""

    def __init__(self, effect: Effect, cause: Exception) -> None:
        super().__init__(f"{type(effect).__name__} failed: {cause}")
        self.effect = effect
        self.cause = cause


def subject(effect: Effect) -> tuple[Any, ...]:
    """What a sequence of effects is about: a failure skips the rest of the same subject."""
    message = getattr(effect, "message", None)
    if message is not None:
        return ("message", *message)
    pane = getattr(effect, "pane_id", None)
    return ("pane", pane) if pane is not None else ("none",)


class Interpreter:
    def __init__(
        self,
        *,
        subscribers: Subscribers,
        delivery: Delivery,
        acts: ActsIO,
        restarts: Restarts,
        here: HerePanes,
        here_launches: HereLaunches,
        tmux: TmuxAdapter,
        timing: Timing,
        supervisor: Callable[[], Supervisor],
        federation: Callable[[], Any | None],
    ) -> None:
        self.subscribers, self.delivery, self.acts, self.restarts = subscribers, delivery, acts, restarts
        self.here, self.here_launches, self.tmux, self.timing = here, here_launches, tmux, timing
        self.supervisor, self.federation = supervisor, federation
        self._handlers: dict[type[Effect], Callable[[Any], Awaitable[None]]] = {
            Persist: self._persist,
            Audit: self._audit,
            Notify: self._notify,
            EndSubscriptions: self._end,
            CheckGuard: self._check_guard,
            TypeText: self._typed_by_guard,
            ConfirmTyping: self._confirm,
            SetPaneOption: self._set_option,
            ExitAgent: self._exit_agent,
            Respawn: self._respawn,
            R.ObservePane: self._answered_by_driver,
            R.InspectPane: self._answered_by_driver,
            CheckActGuard: self._check_act_guard,
            PressKeys: self._run_by_act_guard,
            TypeShellText: self._run_by_act_guard,
            ClosePane: self._run_by_act_guard,
            OpenWindow: self._run_by_act_guard,
            HandOff: self._run_by_act_guard,
            PublishEnvelope: self._bus,
            PublishReceipt: self._bus,
            AckDelivery: self._bus,
        }

    def handled(self) -> frozenset[type[Effect]]:
        """The effect types this interpreter executes (a test checks it is every type the core emits)."""
        return frozenset(self._handlers)

    async def run(self, effects: tuple[Effect, ...]) -> None:
        failed: set[tuple[Any, ...]] = set()
        for effect in effects:
            key = subject(effect)
            if key in failed:
                continue
            try:
                await self.execute(effect)
            except IO_ERRORS as exc:
                failed.add(key)
                await self.failed(effect, exc)

    def published(self, record: Audit) -> None:
        """An audit record reached the store: tell the owner's stream."""
        self.subscribers.publish({"topic": "audit", "actor": record.actor, "action": record.action})

    # --- execution: one handler per effect type, as a table ----------------------------------------
    # (a table, not decorators: the dispatch is data a test can read, and mutation testing reaches
    # every handler's body)

    async def execute(self, effect: Effect) -> None:
        handler = self._handlers.get(type(effect))
        if handler is None:
            raise TypeError(f"the interpreter has no handler for {type(effect).__name__}: {effect!r}")
        await handler(effect)

    async def _persist(self, effect: Persist) -> None:
        """Committed by the runner under the core lock before any effect runs; nothing more to do."""

    async def _audit(self, effect: Audit) -> None:
        self.published(effect)  # committed by the runner; the owner's stream hears of it

    async def _notify(self, effect: Notify) -> None:
        subscribers = self.subscribers
        subscribers.wake(effect.principal)
        subscribers.publish({"topic": effect.topic, "key": list(effect.key), **dict(effect.payload)})

    async def _end(self, effect: EndSubscriptions) -> None:
        self.subscribers.end(effect.principal)

    async def _check_guard(self, effect: CheckGuard) -> None:
        delivery = self.delivery
        self.supervisor().spawn(
            Kind.GUARD,
            delivery.guard,
            effect,
            name=f"guard {effect.pane_id} {effect.message[1]}",
            on_error=lambda exc: delivery.guard_failed(effect, exc),
        )

    async def _typed_by_guard(self, effect: TypeText) -> None:
        """Typed by the delivery guard that stepped it, after the step and under the same send lock
        (it reads the step's effects; connectd.delivery.guard)."""

    async def _confirm(self, effect: ConfirmTyping) -> None:
        """Without a failure: confirmed by the delivery guard that stepped it (after its typing). With
        one (the core's ``GuardFailed``: typing had started), one last look, answered with the failure."""
        if effect.failure:
            await self.delivery.unconfirmed(effect.message, effect.failure, effect.pane_id)

    async def _set_option(self, effect: SetPaneOption) -> None:
        await self.tmux.set_pane_option(effect.pane_id, effect.option, effect.value)

    async def _exit_agent(self, effect: ExitAgent) -> None:
        await self.tmux.send_exit_command(effect.pane_id, effect.command, settle=self.timing.settle)

    async def _respawn(self, effect: Respawn) -> None:
        if self.here.is_here(effect.pane_id):  # launched --here: its supervisor relaunches it
            await self.here_launches.respawn(effect)
        else:
            await self.tmux.respawn(effect.pane_id, list(effect.argv), effect.cwd, dict(effect.env))
        await self.restarts.respawned(effect)

    async def _check_act_guard(self, effect: CheckActGuard) -> None:
        acts = self.acts
        self.supervisor().spawn(
            Kind.GUARD,
            acts.guard,
            effect,
            name=f"act guard {effect.act}",
            on_error=lambda exc: acts.guard_failed(effect, exc),
        )

    async def _run_by_act_guard(self, effect: PressKeys | TypeShellText | ClosePane | OpenWindow | HandOff) -> None:
        """Control's act: run once by the act guard that stepped it, after the step and under the same
        send lock (it reads the step's effects; connectd.control.acts), which reports its outcome."""

    async def _bus(self, effect: BusEffect) -> None:
        """Federation's bus effects, handed to the bus loop in order (``connectd.federation.desk`` and
        ``pump``: sealed there with ``seal.py``). Only a federated box's core emits them (its hub has an
        inbox or an outbox); this module imports neither ``nats`` nor ``nacl``."""
        federation = self.federation()
        if federation is None:
            log.error("a bus effect on a box that does not federate: %r", effect)
            return
        federation.hand(effect)

    async def _answered_by_driver(self, effect: R.ObservePane | R.InspectPane) -> None:
        """A question the restart driver that stepped it answers (it reads the step's effects)."""

    # --- failures: turned into the core's events ---------------------------------------------------

    async def failed(self, effect: Effect, exc: Exception) -> None:
        if isinstance(effect, ConfirmTyping):  # its last look failed in a way it does not catch itself
            await self.delivery.unconfirmed(effect.message, f"confirming re-read failed: {exc}", effect.pane_id)
        elif isinstance(effect, SetPaneOption | ExitAgent | Respawn):
            raise RestartEffectFailed(effect, exc) from exc
        else:
            log.warning("effect %s failed: %s", type(effect).__name__, exc)
