"""The core runner: the daemon's one place that steps the core.

Every event goes through :meth:`CoreRunner.step`: under the core lock the hub is stepped and the
step's ``Persist`` and ``Audit`` records are committed to the store before the new hub is kept, so a
message is durable before the call answers ``queued`` and "typing started" is durable before the
first byte is pasted. A store that raises leaves the hub as it was (the step did not happen) and the
error goes to the caller, whose supervision policy decides what follows. Then, outside the core lock,
the interpreter executes the rest of the effects in order (:mod:`connectd.interpreter`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import anyio

from connectcore import hub as H
from connectcore.effects import Audit, Effect

log = logging.getLogger("connectd.runner")

RunSync = Callable[..., Awaitable[Any]]


class Interprets(Protocol):
    async def run(self, effects: tuple[Effect, ...]) -> None: ...

    def published(self, record: Audit) -> None: ...


class CoreRunner:
    def __init__(self, store: Any, hub: H.Hub, *, run_sync: RunSync | None = None) -> None:
        self.store = store
        self.hub = hub
        self.run_sync: RunSync = run_sync or anyio.to_thread.run_sync
        self.interpreter: Interprets | None = None  # set once by the engine, which builds both
        self._lock = anyio.Lock()

    async def step(self, event: H.Event) -> tuple[Effect, ...]:
        """Step the core under the core lock, commit its records, then interpret the rest."""
        async with self._lock:
            try:
                hub, effects = H.step(self.hub, event)
            except H.CallRefused as refused:
                await self.run_sync(self.store.apply, (refused.audit,))
                if self.interpreter is not None:
                    self.interpreter.published(refused.audit)
                raise
            await self.run_sync(self.store.apply, effects)
            self.hub = hub
        if log.isEnabledFor(logging.DEBUG) and not isinstance(event, H.Tick):
            log.debug("%s -> %s", event, [type(e).__name__ for e in effects])
        if self.interpreter is not None:
            await self.interpreter.run(effects)
        return effects

    async def audit(self, record: Audit) -> None:
        """One audit record that no step produced (a read, a refusal at the edge, a task failure)."""
        await self.run_sync(self.store.apply, (record,))
        if self.interpreter is not None:
            self.interpreter.published(record)
