"""The pairing desk's side of the bus (a part of :mod:`connectd.federation.desk`): envelopes in and
publishes out.

- In (:meth:`Envelopes.received`): an envelope is judged by :func:`connectcore.federation.envelope.judge`
  with the keys the book pins; a pairing envelope's step is committed (a repeated ``pair_request`` from
  the same box is answered with the decision again and changes nothing; an ``unpair`` records
  ``removed_by_peer``: :meth:`Envelopes.peer_removed`, the one path of an unpair and of a directory
  tombstone); a message, receipt or cancel is handed to the engine's hub (``messages``:
  :class:`connectd.federation.flow.RemoteFlow`). A refusal (of the envelope or of the pairing step) is
  one audit line and changes nothing; a flooding box's refused envelopes are one audit line a minute per
  reason (:func:`connectcore.federation.envelope.refusal_audit_due`).
- Out (:meth:`Envelopes.hand`, :meth:`Envelopes.wire_for`): the interpreter's bus effects go to the bus
  loops in order, and a publish effect is sealed for the pairing it travels in.

The bus loops (``pump``), the engine's hub (``hub``) and its side of message envelopes (``messages``) are
callables: each is set, or replaced, after the desk is built.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from connectcore.federation import envelope as E
from connectcore.federation import outbox as O
from connectcore.federation import pairing as P
from connectcore.federation.boxes import BoxKeys
from connectcore.federation.effects import BusEffect, PublishEnvelope, PublishReceipt
from connectcore.ports import Delivery
from connectd.federation.ledger import PairLedger
from connectd.federation.seal import LocalBox, receive, seal_encoded
from connectd.store.pair_records import Wire

log = logging.getLogger("connectd.federation")


class Envelopes:
    """Envelopes from the bus judged and stepped, and the bus effects handed to the bus loops."""

    def __init__(
        self,
        ledger: PairLedger,
        local: LocalBox,
        *,
        view: Callable[[], E.View],
        heard: dict[str, float],
        removed: Callable[[P.Pairing], Awaitable[None]],
        messages: Callable[[], Any],
        pump: Callable[[], Any],
        hub: Callable[[], Any],
    ) -> None:
        """``view``: what the judgement reads (:meth:`connectd.federation.views.PairingViews.view`);
        ``heard``: box id -> when an envelope from it last verified (written here); ``removed``: what ends
        across a pairing the other box removed (:meth:`connectd.federation.steps.PairingSteps.removed`)."""
        self.ledger, self.local, self.view, self.heard, self.removed = ledger, local, view, heard, removed
        self.messages, self.pump, self.hub = messages, pump, hub
        # (box, reason) -> when a refusal of it was last audited (envelope.refusal_audit_due: a flood, one a minute)
        self.audited: E.RefusalAudits = {}

    # --- in -------------------------------------------------------------------------------------

    async def received(self, subject: str, data: bytes, delivery: Delivery | None = None) -> bool:
        """One envelope the bus delivered: judged, and its pairing step taken, or (a message, receipt
        or cancel) handed to the engine's hub (``messages``); every refusal audited. Returns once what
        it changed is durable; True when the hub's step acknowledges ``delivery`` itself (after its
        commit), False when the caller acknowledges it now. Raises only when the store failed (then
        the delivery comes again)."""
        ledger = self.ledger
        removed: P.Pairing | None = None
        async with ledger.lock:
            verdict = receive(self.local, subject, data, self.view())
            if verdict.decision is E.Decision.REFUSED:
                audited = await self.refusal_audited(verdict.actor, str(verdict.reason), f"{verdict.reason}: {verdict.detail}")
                again = P.unpair_again(ledger.book, verdict) if audited else None  # P17: a lost unpair
                if again is not None:
                    await ledger.run_sync(lambda: ledger.records.due_again(f"unpair:{again}", ledger.clock()))
                    ledger.owed.set()
                return False
            inner = verdict.inner
            if inner is not None:
                self.heard[inner.routing.sender] = ledger.clock()  # verified: that box is heard
            if verdict.decision is not E.Decision.PAIRING or not isinstance(inner, E.PairingInner):
                if self.messages() is None:  # no engine joined: nobody to hand it to
                    await ledger.write([verdict.ignored(ledger.clock())])
                    return False
            else:
                try:
                    removed = await self._step(inner, data, verdict.actor)
                except P.PairingError as error:
                    action = f"pair.{inner.routing.kind}"
                    await ledger.refused(error, actor=verdict.actor, action=action,
                                         target=inner.routing.pairing or inner.routing.invitation)
                if removed is None:
                    return False
        if removed is not None:  # the other box removed the pairing: what is queued across it ends here too
            await self.removed(removed)
            return False
        # a message, receipt or cancel: the hub's step, outside the desk's lock (the fetch loop hands
        # one delivery at a time, so nothing is judged meanwhile)
        handled: bool = await self.messages().arrived(verdict, delivery)
        return handled

    async def refusal_audited(self, actor: str, reason: str, detail: str, *, message_id: str | None = None) -> bool:
        """Audit one refused envelope of ``actor`` (``federation.envelope``, ``refused``), unless one of that
        box for that reason was audited within the minute (:func:`connectcore.federation.envelope.
        refusal_audit_due`: a flooding box costs one record a minute per reason, which says how many
        were left out since the last); logged either way.
        True when it was audited."""
        now = self.ledger.clock()
        log.info("federation: envelope from %s refused: %s", actor, detail)
        due, left_out, self.audited = E.refusal_audit_due(self.audited, actor, reason, now)
        if not due:
            return False
        await self.ledger.audit(E.refusal_record(actor, detail, left_out, at=now, message_id=message_id))
        return True

    async def _step(self, inner: E.PairingInner, data: bytes, actor: str) -> P.Pairing | None:
        """A pairing step from the bus, committed; the pairing it removed (an ``unpair``), else None."""
        ledger = self.ledger
        routing, now = inner.routing, ledger.clock()
        if routing.kind is E.Kind.PAIR_REQUEST:
            await self._request(inner, data, now)
        elif routing.kind is E.Kind.PAIR_ACCEPT:
            assert routing.invitation is not None and routing.pairing is not None
            book, effects = P.pair_accepted(ledger.book, routing.invitation, pairing_id=routing.pairing, now=now)
            await ledger.commit(book, effects, [Wire.settled(f"request:{routing.invitation}")])
        elif routing.kind is E.Kind.PAIR_DECLINE:
            assert routing.invitation is not None
            book, effects = P.pair_declined(ledger.book, routing.invitation, now=now)
            await ledger.commit(book, effects, [Wire.settled(f"request:{routing.invitation}")])
        else:
            assert routing.pairing is not None
            return await self._removed_by_peer(routing.pairing)
        return None

    async def _removed_by_peer(self, pairing_id: str) -> P.Pairing | None:
        """The other box removed ``pairing_id`` (under the desk's lock): the core's ``removed_by_peer``
        committed (a repeat changes nothing); the pairing as the book now holds it."""
        ledger = self.ledger
        book, effects = P.removed_by_peer(ledger.book, pairing_id, now=ledger.clock())
        await ledger.commit(book, effects)
        return book.by_pairing_id(pairing_id)

    async def peer_removed(self, pairing_id: str) -> None:
        """The other box removed ``pairing_id``, as its verified directory tombstone says
        (:meth:`connectd.federation.directory.RemoteDirectoryDesk.arrived`; the core's D10): recorded
        exactly as a received ``unpair`` is (the same step, :meth:`_removed_by_peer`), then what is
        queued across it ends (``removed``, outside the lock), as for an unpair."""
        async with self.ledger.lock:
            removed = await self._removed_by_peer(pairing_id)
        if removed is not None:
            await self.removed(removed)

    async def _request(self, inner: E.PairingInner, data: bytes, now: float) -> None:
        """A ``pair_request``, committed; a repeat from the same box changes nothing and is answered
        with the decision again, if there is one."""
        ledger, routing = self.ledger, inner.routing
        outer = E.parse_outer(data[E.SIGNATURE_BYTES:])
        assert outer.keys is not None and routing.invitation is not None  # the judgement checked both
        secret = E.unb64(inner.get("secret"), "the secret", E.Refusal.BAD_BINDING)
        book, effects = P.receive_request(
            ledger.book, request_id=f"req-{ledger.draw.token_hex(8)}", invitation_id=routing.invitation,
            keys=outer.keys, name=inner.get("name"), secret=secret, now=now,
        )
        if book is ledger.book:  # a repeat: the decision again, if there is one (the core's P14)
            await ledger.write(effects)
            answered = [r.id for r in book.requests_on(routing.invitation)
                        if ledger.records.wire(f"answer:{r.id}") is not None]
            same = P.answer_again(book, routing.invitation, outer.keys, answered)
            if same is not None:
                await ledger.run_sync(lambda: ledger.records.due_again(f"answer:{same.id}", now))
                ledger.owed.set()
            return
        await ledger.commit(book, effects)

    # --- out ------------------------------------------------------------------------------------

    def hand(self, effect: BusEffect) -> None:
        """The interpreter's handler for a bus effect: to the bus loop, in order. Without a NATS server
        (or before the loops start) nothing is lost that matters: an outbox row is published again by
        its schedule, a receipt is answered again to the sender's next copy, and there is no delivery
        to acknowledge."""
        pump = self.pump()
        if pump is None:
            log.info("federation: no bus to run %s (no NATS server named)", type(effect).__name__)
            return
        pump.hand(effect)

    def _active_keys(self, box: str, pairing: str) -> BoxKeys | None:
        active = self.ledger.book.active_in(box, pairing)
        return None if active is None else active.keys

    def wire_for(self, effect: PublishEnvelope | PublishReceipt) -> tuple[str, bytes] | None:
        """The subject and the sealed, signed wire a publish effect asks for; None when there is nothing
        to publish (the pairing is not active here, or the outbox no longer holds the row)."""
        if isinstance(effect, PublishReceipt):
            routing, plain, nonce = effect.inner.routing, E.encode_inner(effect.inner), effect.nonce
        else:
            outbox = getattr(self.hub(), "outbox", None)
            row = None if outbox is None else outbox.rows.get(effect.identity)
            if row is None:
                log.warning("federation: no outbox row %s to publish", effect.identity)
                return None
            routing, plain, nonce = O.to_seal(row, effect.kind)
        assert routing.pairing is not None  # messages, cancels and receipts travel in a pairing
        keys = self._active_keys(routing.to, routing.pairing)
        if keys is None:
            log.info("federation: pairing %s with box %s is not active: %s not published", routing.pairing,
                     routing.to, routing.kind)
            return None
        wire = seal_encoded(self.local, keys, routing, plain, nonce)
        return E.subject_for(routing.kind, self.local.box_id, routing.to), wire

