"""The core runner: the daemon's one place that steps the core, with group commit.

Every event goes through :meth:`CoreRunner.step`. Under the core lock the hub is stepped (pure, fast)
and the step's ``Persist`` and ``Audit`` records join the batch that is being gathered; the core lock
is then released and the step waits, outside it, until its batch is durable. Commits are taken
leader-style: the first step to wait writes every record gathered so far in one SQLite transaction
(one fsync), and the steps that arrived meanwhile find their records already durable. No task runs in
the background; whoever waits writes.

The rules this keeps (a message is durable before the call answers ``queued``; "typing started" is
durable before the first byte is pasted):

- No effect of a step is executed, and no caller hears its result, before every record of that step
  and of every earlier step is durable. Batches are written in the order they were gathered.
- A commit that fails fails every step of its batch and every step stepped on top of it since: the
  hub goes back to the last durable state (those steps did not happen) and each of their callers gets
  the store's error, which its supervision policy turns into the core's event or a failed call.
- A refusal at the core's gate (``CallRefused``) changes no state; its audit record is committed the
  same way before the refusal is raised.

Then the interpreter executes the rest of the step's effects in order (:mod:`connectd.daemon.interpreter`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio
import anyio.lowlevel

from connectcore import hub as H
from connectcore.effects import Audit, Effect, Persist

log = logging.getLogger("connectd.runner")

RunSync = Callable[..., Awaitable[Any]]


class Core(Protocol):
    """What a part of the shell needs of the core runner (:class:`CoreRunner` is one): the hub as it
    stands, a step, an audit record. A part holds the runner itself, not its bound ``step``, so a
    runner whose ``step`` is replaced later (the simulation traces it) is still the one it calls."""

    @property
    def hub(self) -> H.Hub: ...

    async def step(self, event: H.Event) -> tuple[Effect, ...]: ...

    async def audit(self, record: Audit) -> None: ...


class Interprets(Protocol):
    async def run(self, effects: tuple[Effect, ...]) -> None: ...

    def published(self, record: Audit) -> None: ...


@dataclass
class Batch:
    """Records gathered for one durable commit, and the hub as it stands after the last step in it."""

    hub: H.Hub
    records: list[Effect] = field(default_factory=list)
    written: bool = False
    error: Exception | None = None


def records_of(effects: tuple[Effect, ...]) -> list[Effect]:
    return [e for e in effects if isinstance(e, Persist | Audit)]


class CoreRunner:
    def __init__(self, store: Any, hub: H.Hub, *, run_sync: RunSync | None = None) -> None:
        self.store = store
        self.run_sync: RunSync = run_sync or anyio.to_thread.run_sync
        self.interpreter: Interprets | None = None  # set once by the engine, which builds both
        self._hub = hub
        self._durable = hub  # the hub as of the last durable commit
        self._pending = Batch(hub)
        # Both locks take the fast path when free (no extra trip round the event loop: each call takes
        # them up to three times). A cancelled caller is still refused at the lock.
        self._lock = anyio.Lock(fast_acquire=True)  # the core lock: stepping only, never I/O
        self._commit = anyio.Lock(fast_acquire=True)  # one writer at a time, batches in order
        self._writing = False  # a batch is being written (taken out of pending, not yet durable)
        self.commits = 0  # durable commits taken (a benchmark and the tests read it)

    @property
    def hub(self) -> H.Hub:
        return self._hub

    @hub.setter
    def hub(self, hub: H.Hub) -> None:
        """Replace the hub outright (tests, a cap applied at start): it is taken as durable."""
        self._hub = self._durable = hub
        self._pending.hub = hub

    @property
    def durable(self) -> H.Hub:
        """The hub as of the last durable commit: what a restart would recover, and all that any caller
        can have been told (``hub`` may be ahead of it by steps whose batch is not yet written)."""
        return self._durable

    async def step(self, event: H.Event) -> tuple[Effect, ...]:
        """Step the core under the core lock, wait until its records are durable, then interpret."""
        refused: H.CallRefused | None = None
        async with self._lock:
            try:
                hub, effects = H.step(self._hub, event)
            except H.CallRefused as exc:
                refused, effects = exc, (exc.audit,)
                hub = self._hub
            batch = self._gather(hub, records_of(effects))
        await self._wait_durable(batch)
        if refused is not None:
            if self.interpreter is not None:
                self.interpreter.published(refused.audit)
            raise refused
        if log.isEnabledFor(logging.DEBUG) and not isinstance(event, H.Tick):
            log.debug("%s -> %s", event, [type(e).__name__ for e in effects])
        if self.interpreter is not None:
            await self.interpreter.run(effects)
        return effects

    async def audit(self, record: Audit) -> None:
        """One audit record that no step produced (a read, a refusal at the edge, a task failure)."""
        async with self._lock:
            batch = self._gather(self._hub, [record])
        await self._wait_durable(batch)
        if self.interpreter is not None:
            self.interpreter.published(record)

    def _gather(self, hub: H.Hub, records: list[Effect]) -> Batch | None:
        """Under the core lock: keep the stepped hub and add its records to the pending batch. None when
        there is nothing to wait for: no records of its own and nothing before it still to be written
        (then the step is as durable as the state it was decided on)."""
        self._hub = hub
        batch = self._pending
        batch.hub = hub
        batch.records += records
        if batch.records or self._writing:
            return batch
        self._durable = hub
        return None

    async def _wait_durable(self, batch: Batch | None) -> None:
        if batch is None:
            return
        async with self._commit:
            if not batch.written:
                await self._write_pending()
        if batch.error is not None:
            raise batch.error

    async def _write_pending(self) -> None:
        """Under the commit lock: write the pending batch (the waiter's own, or one gathered after it).
        One trip round the event loop first, shielded (it adds no cancellation point): with the locks'
        fast path the first caller of a burst gets here without having let the others run, and would
        write its batch alone; the callers already runnable now join it (one commit for ten audits
        started together instead of two)."""
        await anyio.lowlevel.cancel_shielded_checkpoint()
        async with self._lock:
            batch, self._pending = self._pending, Batch(self._hub)
            self._writing = True
        try:
            if batch.records:
                await self.run_sync(self.store.apply, tuple(batch.records))
                self.commits += 1
        except Exception as exc:
            batch.error = exc
            await self._roll_back(exc)
        else:
            self._durable = batch.hub
        finally:
            batch.written = True
            self._writing = False

    async def _roll_back(self, exc: Exception) -> None:
        """A commit failed: the hub returns to the last durable state, and the steps gathered on top
        of the failed batch meanwhile fail with it (they were decided on state that never became real)."""
        log.error("commit failed, the hub returns to its last durable state: %s", exc)
        async with self._lock:
            self._hub = self._durable
            stacked, self._pending = self._pending, Batch(self._durable)
        stacked.error, stacked.written = exc, True
