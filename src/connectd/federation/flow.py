"""The daemon's side of messages across boxes (docs/federation.md, "On the receiving box", "On the
sending box"): what joins the pairing desk and its bus loops to the daemon's hub. The rules are the
core's (:mod:`connectcore.hub.federation`); this module only hands it the events and the values the
shell knows.

- At start (:func:`attach`), a federated box's hub gets its outbox and inbox back from the store
  (``outbox_rows``, ``inbox_records``; the pairings removed from the pairing book): everything it
  committed before a restart goes on from its state. A box that does not federate keeps ``None``.
- The fetch loop hands every message, receipt and cancel envelope the desk judged
  (:func:`connectcore.federation.envelope.judge`, with the hub's inbox and outbox in the view) to
  :meth:`RemoteFlow.arrived`, which steps the hub with it: a new message as
  :class:`~connectcore.hub.RemoteMessageArrived`, its target resolved on this box as a local send's
  (:func:`connectd.delivery.targets.resolve_in`; one naming no pane here is committed ``refused`` by
  :class:`~connectcore.hub.RemoteSettled`), a receipt as :class:`~connectcore.hub.ReceiptArrived`, a
  copy, a message too late or a cancel's tombstone as ``RemoteSettled``, a cancel of a message this
  box holds as :class:`~connectcore.hub.RemoteCancelArrived` under its recipient pane's send lock
  (``PersonCalls.lock_panes``, as a revocation). The delivery is registered
  with :meth:`connectd.federation.pump.Pump.awaiting_ack`: the step's ``AckDelivery`` acknowledges it
  after the step's commit, never before. A step the core refuses is audited (at most once a minute per box and
  event: :func:`connectcore.federation.envelope.refusal_audit_due`) and the delivery acknowledged (it
  would be refused again); a store that fails raises, and the delivery comes again.
  The target is text from another box: data, resolved and never run.
- A pairing removed on either side (:meth:`RemoteFlow.pairing_removed`, called by the desk once the
  book committed it) is stepped as :class:`~connectcore.hub.PairingRemoved` under the send locks of
  what was accepted across it.
- A pairing whose ``messages`` the person set off (:meth:`RemoteFlow.messages_off`, called by the desk
  once the book committed the setting) is stepped as :class:`~connectcore.hub.MessagesOff` under the
  same send locks: what it holds from that box and has not started typing is cancelled and receipted.
- The ticker (:meth:`RemoteFlow.tick`, every ``TICK`` seconds) steps
  :class:`~connectcore.hub.FederationTick` with what only the shell knows: whether the bus is connected
  now, and when each other box was last heard (its last envelope that verified, ``PairingDesk.heard``);
  and once when a reload stopped the bus loops (:meth:`RemoteFlow.bus_moved`: the bus down).
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from connectcore import directory as D
from connectcore import hub as H
from connectcore._machine import ConnectError, freeze
from connectcore.effects import Audit
from connectcore.federation import envelope as E
from connectcore.federation import inbox as I
from connectcore.federation import outbox as O
from connectcore.federation import pairing as P
from connectcore.federation import policy as F
from connectcore.ports import Delivery
from connectd.delivery import targets

if TYPE_CHECKING:
    from connectd.daemon.ids import Ids
    from connectd.daemon.runner import CoreRunner
    from connectd.federation.desk import PairingDesk
    from connectd.person import PersonCalls
    from connectd.tmux.watcher import Watcher

log = logging.getLogger("connectd.federation")


def restored(hub: H.Hub, desk: PairingDesk, store: Any, settings: F.FederationPolicy = F.DEFAULT) -> H.Hub:
    """``hub`` with this box's outbox and inbox as the store holds them, under the box's ``settings``
    (policy.toml's ``[federation]``)."""
    own = desk.local.box_id
    removed = desk.book.removed_ids()
    outbox = O.Outbox(own=own, rows=freeze((r.identity, r) for r in store.outbox_rows()), settings=settings.outbox)
    inbox = I.load(own, store.inbox_records(), removed=removed, retention=settings.retention)
    return replace(hub, outbox=outbox, inbox=inbox)


#: What the inbox settles by itself (``inbox.receive``); the two that commit need a nonce.
SETTLED = frozenset({E.Decision.DUPLICATE, E.Decision.CANCELLED_FIRST, E.Decision.TOO_LATE, E.Decision.TOMBSTONE})
COMMITS = frozenset({E.Decision.TOO_LATE, E.Decision.TOMBSTONE})


TICK = 1.0  # seconds between FederationTicks (the outbox's schedule is in seconds)


class RemoteFlow:
    """The hub's side of the envelopes of messages across boxes, given what it uses (issue 24): the
    core runner as ``core`` (the hub, ``step``, ``audit``), ``clock``, ``ids``, the ``watcher`` (a
    target resolved in its directory, the recipient's harness) and ``person`` (the send locks)."""

    def __init__(
        self, desk: PairingDesk, *, core: CoreRunner, clock: Callable[[], float], ids: Ids, watcher: Watcher,
        person: PersonCalls,
    ) -> None:
        self.core, self.clock, self.ids, self.watcher, self.person = core, clock, ids, watcher, person
        self.desk = desk
        self.every = TICK  # the federation tick's period

    def _nonce(self) -> bytes:
        return secrets.token_bytes(E.NONCE_BYTES)

    def _pairing_of(self, box: str) -> P.Pairing | None:
        return self.desk.book.active_with(box)

    def _event(self, verdict: E.Verdict, handle: str | None, now: float) -> H.Event | None:
        decision = verdict.decision
        if decision is E.Decision.RECEIPT:
            return H.ReceiptArrived(now, verdict, handle)
        if decision in SETTLED:
            return H.RemoteSettled(now, verdict, self._nonce() if decision in COMMITS else None, handle)
        if decision is not E.Decision.NEW or not isinstance(verdict.inner, E.MessageInner):
            return None
        inner = verdict.inner
        pairing = self._pairing_of(inner.routing.sender)
        if pairing is None:  # (the judgement needs an active pairing: removed meanwhile)
            return H.RemoteSettled(now, verdict, self._nonce(), handle, refusal="pairing_removed: no active pairing")
        _kind, target = inner.target
        try:
            record = targets.resolve_in(self.watcher.directory, self.core.hub.book, target)
        except D.TargetError as refused:
            return H.RemoteSettled(now, verdict, self._nonce(), handle, refusal=f"{refused.reason}: {refused}")
        recipient = H.Recipient(record.pane_id, record.token, self.watcher.harness_of(record), D.handle_of(target))
        return H.RemoteMessageArrived(
            now, verdict, recipient, pairing.name, pairing.keys.fingerprint, self.ids.new_id("msg"),
            self.ids.new_id("card"), self._nonce(), handle, settings=pairing.settings,
        )

    async def arrived(self, verdict: E.Verdict, delivery: Delivery | None) -> bool:
        """Step the hub with one judged message, receipt or cancel envelope. True: the step's
        ``AckDelivery`` acknowledges ``delivery`` (after its commit); False: the caller acknowledges it
        (nothing was committed that it waits for). Raises when the store failed (it comes again). A
        cancel of a message this box holds is stepped under its recipient pane's send lock
        (:func:`connectcore.hub.federation.cancel_panes`), as a local revocation is."""
        core, pump = self.core, self.desk.pump
        handle = self.ids.new_id("dlv") if delivery is not None and pump is not None else None
        if verdict.decision is E.Decision.CANCEL and verdict.identity is not None:
            identity = verdict.identity
            async with self.person.lock_panes(lambda: H.cancel_panes(core.hub, identity)):
                return await self._step(verdict, H.RemoteCancelArrived(self.clock(), verdict, handle), handle,
                                        delivery)
        return await self._step(verdict, self._event(verdict, handle, self.clock()), handle, delivery)

    async def _step(self, verdict: E.Verdict, event: H.Event | None, handle: str | None,
                    delivery: Delivery | None) -> bool:
        core, pump = self.core, self.desk.pump
        now = self.clock()
        if event is None:  # (the judgement hands the flow nothing else)
            await core.audit(Audit(verdict.actor, E.AUDIT_EVENT, "ignored", message_id=str(verdict.identity),
                                     detail=f"a {verdict.decision} envelope is not the flow's", at=now))
            return False
        if handle is not None:
            pump.awaiting_ack(handle, delivery)
        try:
            await core.step(event)
        except ConnectError as refused:  # the core's refusal: it changed nothing, and would again
            if handle is not None:
                pump.deliveries.pop(handle, None)
            due, left_out, self.desk.audited = E.refusal_audit_due(self.desk.audited, verdict.actor,
                                                                   type(event).__name__, now)
            log.info("federation: %s from %s refused: %s", type(event).__name__, verdict.actor, refused)
            if due:  # a flooding box: one audit record a minute per reason
                await core.audit(Audit(verdict.actor, E.AUDIT_EVENT, "refused", message_id=str(verdict.identity),
                                         detail=f"{type(event).__name__}: {refused}{E.refusal_count_words(left_out)}",
                                         at=now))
            return False
        except BaseException:
            if handle is not None:
                pump.deliveries.pop(handle, None)
            raise
        return handle is not None

    async def pairing_removed(self, pairing: P.Pairing) -> None:
        """A pairing the book has just removed (the person's ``pair remove``, or the other box's notice):
        stepped into the hub under the send locks of what this box accepted across it
        (:func:`connectcore.hub.federation.pairing_panes`), so a delivery either finished before it or
        sees it. What it changes is committed by the step (a second transaction after the book's: a
        restart in between leaves the inbox refusing that pairing all the same, ``restored``)."""
        if pairing.id is None:
            return  # never active: nothing was sent or accepted across it
        core, pairing_id = self.core, pairing.id
        async with self.person.lock_panes(lambda: H.pairing_panes(core.hub, pairing_id)):
            await core.step(H.PairingRemoved(self.clock(), pairing_id, pairing.name))

    async def messages_off(self, pairing: P.Pairing) -> None:
        """A pairing whose ``messages`` setting the book has just committed off (``pair set BOX
        messages=off``): what this box holds from that box and has not started typing is cancelled,
        stepped as :class:`~connectcore.hub.MessagesOff` under the send locks of what was accepted across
        it (:func:`connectcore.hub.federation.pairing_panes`), as a revocation; the remote senders'
        ``cancelled`` receipts follow. Nothing held (or the messages on): no step
        (:func:`connectcore.hub.federation.pairing_step_owed`)."""
        core, pairing_id = self.core, pairing.id
        if H.pairing_step_owed(core.hub, pairing) is not H.OwedStep.MESSAGES_OFF or pairing_id is None:
            return
        async with self.person.lock_panes(lambda: H.pairing_panes(core.hub, pairing_id)):
            await core.step(H.MessagesOff(self.clock(), pairing_id, pairing.name))

    async def bus_moved(self) -> None:
        """The bus loops stopped for a reload (another server, or ``--off``): one tick that saw the bus
        down (it is: the old connection is closed, the new one not yet made), so once the new one is up
        every ``accepted`` row's envelope goes again at once (the core's O5: the other box answers it
        with the receipt it holds), not at its 300 s poll; a ``published`` row keeps its schedule."""
        heard = tuple(sorted(self.desk.heard.items()))
        await self.core.step(H.FederationTick(self.clock(), False, heard))

    def bus_up(self) -> bool:
        pump = self.desk.pump
        return bool(pump is not None and pump.bus.connected)

    async def tick(self) -> None:
        """The outbox's schedule and the inbox's retention, with the bus's state and who was heard; first,
        a removed pairing whose hub step is still owed (:func:`connectcore.hub.federation.removal_owed`:
        the daemon stopped between the book's commit and the step) is stepped now, and so is an active
        one whose ``messages`` are off and that still holds messages from its box
        (:func:`connectcore.hub.federation.messages_off_owed`); which, the core's
        :func:`connectcore.hub.federation.pairing_step_owed`."""
        for pairing in list(self.desk.book.pairings.values()):
            owed = H.pairing_step_owed(self.core.hub, pairing)
            if owed is H.OwedStep.REMOVAL:
                await self.pairing_removed(pairing)
            elif owed is H.OwedStep.MESSAGES_OFF:
                await self.messages_off(pairing)
        heard = tuple(sorted(self.desk.heard.items()))
        await self.core.step(H.FederationTick(self.clock(), self.bus_up(), heard))


def attach(
    desk: PairingDesk, *, core: CoreRunner, store: Any, clock: Callable[[], float], ids: Ids, watcher: Watcher,
    person: PersonCalls, settings: F.FederationPolicy = F.DEFAULT,
) -> None:
    """Join a federated box's desk to its hub: the hub restored with its outbox and inbox (under
    ``settings``), and the desk's message envelopes handed to the hub (:class:`RemoteFlow`)."""
    core.hub = restored(core.hub, desk, store, settings)
    desk.messages = RemoteFlow(desk, core=core, clock=clock, ids=ids, watcher=watcher, person=person)
