"""The federation's supervised loops on NATS (docs/federation.md, "Where the code goes"): one
connection per box (:class:`connectd.federation.bus.NatsBus`, as the user ``box-<id>``), a fetch loop
that hands each delivery on this box's consumer to the pairing desk and acknowledges it only once
what it changed is durable (a message, receipt or cancel the desk hands to the engine's hub is
acknowledged by that step's ``AckDelivery``, registered with :meth:`Pump.awaiting_ack`), a publish loop that sends every wire the store says is owed once it is due
and otherwise sleeps until the next falls due (:func:`connectcore.federation.pairing.next_wire_due`) or a
step owes a new one (the ledger's ``owed``: at once), and the effects loop that runs the core's bus effects (``PublishEnvelope``, ``PublishReceipt``, ``AckDelivery``,
which the interpreter hands over through :meth:`connectd.federation.desk.PairingDesk.hand`) in the order
the core emitted them: a step's records were committed before the interpreter ran any of them, so a
receipt is published only after what it says is durable, and a delivery acknowledged only after that.
A bus effect that fails (NATS away) is logged and dropped: an outbox row is published again by its
schedule, a delivery not acknowledged comes again. A receipt is held and tried again every
``RECEIPT_AGAIN`` seconds for ``RECEIPT_HELD`` seconds (the same bytes: its nonce travels with it), then
left to the sender's next copy, which is answered with it: before, a final receipt the bus did not
take (NATS killed, a cluster electing a stream leader) reached its sender only at that copy, up to the
outbox's 300 s poll later (tests/integration/test_federation_faults.py).

The loops (these three, the directory's and history's) run in a task group of their own
(:meth:`connectd.daemon.supervisor.Supervisor.group`, "federation bus"), each a
:data:`connectd.daemon.supervisor.Kind.BUS` service: a failure (NATS away, a refusal, the
store) is logged and audited, and the loop starts again after the backoff (0.5 s doubling to 30 s);
started again while nats-py brings a dropped connection back (``Bus.reconnecting``), it waits for that
(:meth:`Pump._connected`)
and goes on as soon as NATS is back.
NATS away never ends the daemon; what is owed waits in the store, and a delivery not acknowledged
comes again. This module is imported only when ``federation.toml`` names a NATS server.

Moved to another server or turned off without a restart (:meth:`connectd.federation.desk.PairingDesk.
reload`), the loops stop between deliveries (:meth:`Pump.stop`): each delivery's handling (its hub
step, what its interpreter runs, its acknowledgement) and each bus effect is shielded, so a stop waits
for it instead of cutting it between a commit and its effects; the connection is closed after. What
was handed to the effects loop and not run, and the receipts held to try again, go to the next pump
(:meth:`Pump.take_over`; an acknowledgement does not: its delivery is the old server's, and comes again
there).
"""

from __future__ import annotations

import functools
import logging
import math
from typing import Any

import anyio
import anyio.lowlevel

from connectcore.federation import pairing as P
from connectcore.federation.effects import AckDelivery, BusEffect, PublishEnvelope, PublishReceipt
from connectcore.ports import BusRefused, BusUnavailable, Delivery
from connectd.daemon.supervisor import Group, Kind, Supervisor
from connectd.federation.bus import NatsBus
from connectd.federation.desk import PairingDesk, msg_id

log = logging.getLogger("connectd.federation")

FETCH_BATCH = 16
RECONNECT_LOOK = 0.25  # seconds between looks at a connection nats-py is bringing back
RECEIPT_AGAIN = 2.0  # seconds between tries of a receipt the bus did not take
RECEIPT_HELD = 300.0  # seconds a receipt the bus did not take is tried again (the sender's poll covers the rest)
REFUSED_AGAIN = 30.0  # seconds before a wire the server refused (permissions, a full subject) is tried again


class Pump:
    """The bus of one box and its two loops."""

    def __init__(self, desk: PairingDesk, *, fetch_timeout: float = 30.0, bus: Any = None) -> None:
        self.desk = desk
        self.fetch_timeout = fetch_timeout  # the long poll
        self.bus = bus if bus is not None else NatsBus(desk.local.box_id)
        # the core's bus effects, in the order the interpreter handed them over
        self._effects_in, self._effects_out = anyio.create_memory_object_stream[BusEffect](math.inf)
        self.deliveries: dict[str, Delivery] = {}  # delivery handle -> the delivery its AckDelivery names
        self._receipts = 0  # receipts this process published: each one's Nats-Msg-Id attempt
        self._connecting = anyio.Lock()
        self._again: list[tuple[float, float, PublishReceipt]] = []  # (due, given up at, receipt) not yet taken
        self.last_error: str | None = None  # why the last connection attempt failed (doctor shows it)
        self._group: Group | None = None  # the loops' own task group, once started

    def status(self) -> dict[str, object]:
        """The connection as the daemon sees it (``GET /api/pairing/status``, ``connectd doctor``)."""
        errors = self.bus.errors
        return {"connected": self.bus.connected, "last_error": self.last_error or (errors[-1] if errors else None)}

    async def health(self) -> dict[str, Any] | None:
        """The bus's read-only checks (:meth:`connectd.federation.bus.NatsBus.health`), None while it is not
        connected (``connectd doctor`` then says the connection's state only)."""
        if not self.bus.connected:
            return None
        try:
            found: dict[str, Any] = await self.bus.health()
        except BusUnavailable:
            return None
        return found

    def start(self, supervisor: Supervisor) -> None:
        """The loops, in a task group of their own in the daemon's (:meth:`stop` ends them)."""
        self._group = group = supervisor.group("federation bus")
        group.spawn(Kind.BUS, self.fetch_loop, name="federation fetch")
        group.spawn(Kind.BUS, self.publish_loop, name="federation publish")
        group.spawn(Kind.BUS, self.effects_loop, name="federation effects")
        if self.desk.directory is not None:  # the directory across boxes' loops (slice 7)
            self.desk.directory.start(group)
        if self.desk.history is not None:  # remote history search's answering loop (slice 7)
            self.desk.history.start(group)

    async def stop(self) -> None:
        """End the loops between deliveries (each delivery's handling, each bus effect, each directory
        entry and history query finishes first: they are shielded), then close the connection."""
        if self._group is not None:
            await self._group.stop()
        await self.bus.close()

    def left(self) -> list[BusEffect]:
        """What a stopped pump leaves the next one: the bus effects handed over and not run, then the
        receipts held to be tried again; never an acknowledgement (its delivery is this connection's)."""
        left: list[BusEffect] = []
        while True:
            try:
                left.append(self._effects_out.receive_nowait())
            except anyio.WouldBlock:
                break
        left += [receipt for _due, _until, receipt in self._again]
        self._again = []
        return [effect for effect in left if not isinstance(effect, AckDelivery)]

    def take_over(self, old: Pump) -> None:
        """Run what the stopped pump ``old`` left (:meth:`left`) on this one: a receipt handed while the
        loops moved is published on the new server."""
        for effect in old.left():
            self.hand(effect)

    def hand(self, effect: BusEffect) -> None:
        """Queue one of the core's bus effects for :meth:`effects_loop` (never blocks)."""
        self._effects_in.send_nowait(effect)

    def awaiting_ack(self, handle: str, delivery: Delivery) -> None:
        """A delivery whose acknowledgement the core's step will ask for (``AckDelivery(handle)``)."""
        self.deliveries[handle] = delivery

    async def _connected(self) -> NatsBus:
        """The bus, connecting once (nats-py then reconnects by itself for ever). While it reconnects
        (``Bus.reconnecting``: the connection dropped, the client not closed), this waits for it, looking every
        ``RECONNECT_LOOK`` seconds: a loop that failed because NATS went away starts again here and goes
        on as soon as NATS is back, instead of failing again into the supervisor's backoff (0.5 s
        doubling to 30 s), which after a long outage or partition kept the box from fetching for up to
        30 s after NATS was back (tests/unit/test_federation_pump.py)."""
        while self.bus.reconnecting:
            await anyio.sleep(RECONNECT_LOOK)
        async with self._connecting:
            if not self.bus.connected and not self.bus.reconnecting:  # never connected, or closed
                s = self.desk.settings
                assert s.nats is not None
                try:
                    await self.bus.connect(s.nats, user=s.user, password=s.password(), user_credentials=s.creds,
                                           tls=s.tls())
                except (BusUnavailable, OSError) as exc:  # (OSError: a password or TLS file unreadable)
                    self.last_error = str(exc)
                    raise
                self.last_error = None
                log.info("federation: connected to %s as box %s", s.nats, self.bus.box_id)
        return self.bus

    async def fetch_loop(self) -> None:
        bus = await self._connected()
        while True:
            for delivery in await bus.fetch(batch=FETCH_BATCH, timeout=self.fetch_timeout):
                await anyio.lowlevel.checkpoint_if_cancelled()  # a stop (a reload) ends the loop here, between deliveries
                with anyio.CancelScope(shield=True):  # one delivery's handling, its effects and its ack, whole
                    # durable before the ack; a message's, receipt's or cancel's is the hub step's AckDelivery
                    if not await self.desk.received(delivery.subject, delivery.data, delivery):
                        await bus.ack(delivery)

    async def publish_loop(self) -> None:
        """Every owed wire that is due, then asleep until the next falls due
        (:func:`connectcore.federation.pairing.next_wire_due`) or a step owes a new one (``desk.owed``,
        set by the ledger once the wire is committed): no look at the store while nothing is owed."""
        bus = await self._connected()
        desk = self.desk
        while True:
            desk.owed = anyio.Event()
            now = desk.clock()
            wires = await desk.run_sync(desk.records.wires)
            published = False
            for wire in wires:
                if not P.wire_due(wire.due_at, now):
                    continue
                published = True
                attempt = wire.attempt + 1
                try:
                    await bus.publish(wire.subject, wire.wire, msg_id=msg_id(wire, attempt))
                except BusRefused as exc:  # a permission or a full subject: said, and tried again later
                    log.warning("federation: %s refused: %s (again in %.0f s)", wire.key, exc, REFUSED_AGAIN)
                    await desk.run_sync(desk.records.due_again, wire.key, now + REFUSED_AGAIN)
                    continue
                except BusUnavailable:
                    raise  # the service starts again after the backoff
                await desk.run_sync(functools.partial(desk.records.sent, wire.key, attempt=attempt, now=desk.clock()))
            if published:
                continue  # what was sent (or refused) has its next due time in the store: read it
            due = P.next_wire_due((wire.due_at for wire in wires), now)
            with anyio.move_on_after(math.inf if due is None else max(0.0, due - desk.clock())):
                await desk.owed.wait()

    async def effects_loop(self) -> None:
        """Runs whether or not the bus is connected (the fetch and publish loops connect it): while it
        is not, each effect fails at once and is dropped, so nothing piles up while NATS is away."""
        while True:
            effect: BusEffect | None = None
            with anyio.move_on_after(RECEIPT_AGAIN if self._again else math.inf):
                effect = await self._effects_out.receive()
            with anyio.CancelScope(shield=True):  # a stop waits for the effect in hand: none is lost halfway
                if effect is not None:
                    await self.run_effect(effect)
                await self.receipts_again()

    async def receipts_again(self) -> None:
        """Try again each held receipt that is due (a failure holds it again, until its time is up)."""
        now = self.desk.clock()
        due = [held for held in self._again if held[0] <= now]
        self._again = [held for held in self._again if held[0] > now]
        for _due, until, receipt in due:
            if now < until:
                await self.run_effect(receipt, until=until)

    async def run_effect(self, effect: BusEffect, *, until: float | None = None) -> None:
        """One bus effect: seal and publish (its ``Nats-Msg-Id`` the wire's digest and the attempt), or
        acknowledge. A failure is logged and dropped, a receipt's held to be tried again until ``until``
        (default: ``RECEIPT_HELD`` from now; see the module's note)."""
        try:
            if isinstance(effect, AckDelivery):
                delivery = self.deliveries.pop(effect.delivery, None)
                if delivery is None:
                    log.info("federation: delivery %s is not held (a new connection): it comes again", effect.delivery)
                    return
                await self.bus.ack(delivery)
                return
            made = self.desk.wire_for(effect)
            if made is None:
                return
            subject, wire = made
            if isinstance(effect, PublishEnvelope):
                attempt = effect.attempt
            else:  # a receipt (answered again: the same bytes): each copy published is a new attempt
                self._receipts += 1
                attempt = self._receipts
            await self.bus.publish(subject, wire, msg_id=msg_id(wire, attempt))
        except (BusRefused, BusUnavailable) as exc:
            log.warning("federation: %s not run: %s", type(effect).__name__, exc)
            if isinstance(effect, PublishReceipt):
                now = self.desk.clock()
                self._again.append((now + RECEIPT_AGAIN, now + RECEIPT_HELD if until is None else until, effect))

    async def close(self) -> None:
        await self.bus.close()
