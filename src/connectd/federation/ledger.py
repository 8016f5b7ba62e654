"""The pairing ledger: this box's :class:`~connectcore.federation.pairing.PairBook` and how a step on it
becomes durable (a part of the pairing desk, :mod:`connectd.federation.desk`). A step's records, audit
lines and the wires it owes the bus are written in one transaction of the daemon's store (its part
:class:`~connectd.store.pair_records.PairRecords`) before the book changes; then its audit lines and
notices are shown and, when a wire became due, the publisher is woken (``owed``). A wire is sealed and
signed here once (:mod:`connectd.federation.seal`), so every publish of it is the same bytes.

One step at a time: the desk's parts take ``lock`` around each step on the book.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import anyio

from connectcore.effects import Audit, Effect, Notify
from connectcore.federation import envelope as E
from connectcore.federation import pairing as P
from connectd.federation.seal import LocalBox, seal
from connectd.store.pair_records import PairRecords, Wire


class Draw(Protocol):
    """Where the desk's parts draw ids, secrets and nonces (``secrets``'s two calls)."""

    def token_bytes(self, n: int) -> bytes: ...

    def token_hex(self, n: int) -> str: ...


class PairLedger:
    """The book, durable first: each step committed before it shows."""

    def __init__(
        self,
        local: LocalBox,
        book: P.PairBook,
        records: PairRecords,
        *,
        clock: Callable[[], float],
        run_sync: Callable[..., Any],
        publish_audit: Callable[[Audit], None],
        notify: Callable[[dict[str, Any]], None],
        draw: Draw,
    ) -> None:
        self.local, self.book, self.records = local, book, records
        self.clock, self.run_sync, self.publish_audit, self.notify, self.draw = clock, run_sync, publish_audit, notify, draw
        self.lock = anyio.Lock()
        self.owed = anyio.Event()  # set when a wire becomes due: the publisher looks at once

    async def commit(self, book: P.PairBook, effects: Sequence[Effect], wires: Sequence[Wire] = ()) -> None:
        """Durable first (records, audit lines and owed wires in one transaction), then the book."""
        await self.run_sync(lambda: self.records.apply_pairing(effects, wires))
        self.book = book
        for effect in effects:
            if isinstance(effect, Audit):
                self.publish_audit(effect)
            elif isinstance(effect, Notify):
                self.notify({"topic": effect.topic, "key": list(effect.key), **dict(effect.payload)})
        if any(w.due_at is not None for w in wires):
            self.owed.set()

    async def write(self, effects: Sequence[Effect]) -> None:
        """Durable, not shown (a repeat's records; an ignored envelope's audit line)."""
        await self.run_sync(lambda: self.records.apply_pairing(effects))

    async def audit(self, record: Audit) -> None:
        """One audit line: durable, then shown."""
        await self.run_sync(lambda: self.records.apply_pairing([record]))
        self.publish_audit(record)

    async def refused(self, error: P.PairingError, *, actor: str, action: str, target: str | None) -> None:
        """A refused step: its one audit line, nothing else changes."""
        await self.audit(error.audit(actor=actor, action=action, target=target, at=self.clock()))

    def wire(self, key: str, to: P.Pairing | P.PairRequest, inner: E.Inner, *, resend: float | None = None) -> Wire:
        """A pairing envelope to ``to``'s box, sealed and signed now, due now."""
        now = self.clock()
        data = seal(self.local, to.keys, inner, self.draw.token_bytes(E.NONCE_BYTES))
        return Wire(key, E.subject_for(inner.routing.kind, self.local.box_id, to.box_id), data, 0, now, resend, now)
