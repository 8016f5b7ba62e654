"""The core's bus effects run by the daemon (connectd.federation.desk and pump): two boxes paired on
real SQLite files and real PyNaCl keys, the pump on a recording bus. A ``PublishReceipt`` is sealed to
the other box and opens there to the very receipt; a ``PublishEnvelope`` of an outbox row is the row's
stored bytes and nonce (the same wire every time), judged new by the other box, and a cancel's is judged
there as a cancel; an ``AckDelivery`` acknowledges the delivery it names, after the receipt handed before
it; nothing is published in a pairing that is no longer active; a receipt the bus did not take is tried
again (the same bytes) until it is taken or ``RECEIPT_HELD`` is up."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import pytest

from connectcore import hub as H
from connectcore.federation import envelope as E
from connectcore.federation import outbox as O
from connectcore.federation import pairing as P
from connectcore.federation.effects import AckDelivery, PublishEnvelope, PublishReceipt
from connectcore.ports import BusRefused, BusUnavailable, Delivery
from connectd.federation.desk import msg_id
from connectd.federation.pump import RECEIPT_AGAIN, RECEIPT_HELD, Pump
from connectd.federation.seal import read_wire, receive
from tests.integration.test_pairing_desk import Clock, Side, deliver, requested

NONCE = bytes([7]) * 24


class RecordingBus:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    async def publish(self, subject: str, data: bytes, *, msg_id: str) -> None:
        self.calls.append(("publish", subject, data, msg_id))

    async def ack(self, delivery: Delivery) -> None:
        self.calls.append(("ack", delivery))

    async def put_entry(self, reader_box: str, data: bytes) -> int:
        """A directory entry (a removal's tombstone) put under ``<this box>.<reader_box>``."""
        self.calls.append(("put", reader_box, data))
        return len(self.calls)


@pytest.fixture
def paired(tmp_path: Path) -> Iterator[tuple[Side, Side, str]]:
    clock = Clock()
    a, b = Side(tmp_path / "a", "laptop", 1, clock), Side(tmp_path / "b", "devbox", 3, clock)
    requested(a, b)
    anyio.run(lambda: a.desk.approve("devbox"))
    (answer,) = a.owed()
    deliver(b, answer)
    (pairing,) = a.desk.book.active()
    assert [p.state for p in b.desk.book.pairings.values()] == [P.PairingState.ACTIVE]
    yield a, b, str(pairing.id)
    a.close()
    b.close()


def pump(side: Side) -> tuple[Pump, RecordingBus]:
    bus = RecordingBus()
    p = Pump(side.desk, bus=bus)
    side.desk.pump = p
    return p, bus


def message(a: Side, b: Side, pairing: str) -> E.MessageInner:
    return E.MessageInner(
        E.Routing(E.Kind.MESSAGE, a.local.box_id, b.local.box_id, pairing=pairing),
        E.Sender("p-7", "agent:claude:s-1", "claude", "%3", "0123456789abcdef"),
        "m-1", a.desk.clock() - 5, ("address", "%4@51d7a9c03e6f2b18"), "hello from box A", "c-1", 1,
    )


def run(p: Pump) -> None:
    """What the effects loop does: every effect handed over, in order."""

    async def drain() -> None:
        while True:
            try:
                effect = p._effects_out.receive_nowait()
            except anyio.WouldBlock:
                return
            await p.run_effect(effect)

    anyio.run(drain)


def test_a_receipt_is_sealed_to_the_other_box_and_opens_there_to_the_same_receipt(
    paired: tuple[Side, Side, str],
) -> None:
    a, b, pairing = paired
    p, bus = pump(b)
    inner = message(a, b, pairing)
    receipt = E.ReceiptInner(
        E.Routing(E.Kind.RECEIPT, b.local.box_id, a.local.box_id, pairing=pairing), inner.identity,
        E.digest_of(E.encode_inner(inner)), "accepted", "awaiting_consent", b.desk.clock(), ("agent:codex:x", "%4"),
    )
    delivery = Delivery(f"connect.{b.local.box_id}.inbox.{a.local.box_id}", b"...", 1)
    p.awaiting_ack("d-1", delivery)
    b.desk.hand(PublishReceipt(receipt, NONCE))  # the interpreter's handler
    b.desk.hand(AckDelivery("d-1"))
    run(p)
    assert [c[0] for c in bus.calls] == ["publish", "ack"]  # the receipt before the acknowledgement
    _, subject, wire, mid = bus.calls[0]
    assert subject == f"connect.{a.local.box_id}.receipts.{b.local.box_id}"
    assert mid == msg_id(wire, 1)
    facts = read_wire(a.local, subject, wire, a.desk.view())
    assert facts.signature_ok and facts.opened == E.encode_inner(receipt)
    assert bus.calls[1] == ("ack", delivery) and p.deliveries == {}
    b.desk.hand(AckDelivery("d-1"))  # already acknowledged: not held, nothing done
    run(p)
    assert len(bus.calls) == 2


class AwayBus(RecordingBus):
    """A bus that takes nothing while ``away`` (NATS killed, a stream electing its leader)."""

    def __init__(self) -> None:
        super().__init__()
        self.away: Exception | None = BusUnavailable("not connected")

    async def publish(self, subject: str, data: bytes, *, msg_id: str) -> None:
        if self.away is not None:
            self.calls.append(("failed", subject, data, msg_id))
            raise self.away
        await super().publish(subject, data, msg_id=msg_id)


def _receipt_handed(paired: tuple[Side, Side, str], outcome: str, reason: str) -> tuple[AwayBus, Pump, Clock]:
    """B's receipt of A's message (``outcome``, ``reason``) handed to B's bus loop over a bus that fails
    while ``away``; the bus, the loop and B's clock."""
    a, b, pairing = paired
    bus = AwayBus()
    p = Pump(b.desk, bus=bus)
    b.desk.pump = p
    inner = message(a, b, pairing)
    receipt = E.ReceiptInner(
        E.Routing(E.Kind.RECEIPT, b.local.box_id, a.local.box_id, pairing=pairing), inner.identity,
        E.digest_of(E.encode_inner(inner)), outcome, reason, b.desk.clock(), ("agent:codex:x", "%4"),
    )
    clock = b.desk.clock
    assert isinstance(clock, Clock)
    b.desk.hand(PublishReceipt(receipt, NONCE))
    run(p)
    return bus, p, clock


def test_a_receipt_the_bus_did_not_take_is_tried_again_until_it_does_then_no_more(
    paired: tuple[Side, Side, str],
) -> None:
    """Before, it was dropped, and the sender learnt the outcome only from its next copy, up to 300 s
    later (test_federation_faults found it with a cluster's leader killed)."""
    bus, p, clock = _receipt_handed(paired, "delivered", "typed and submitted")
    anyio.run(p.receipts_again)  # not yet due
    assert [c[0] for c in bus.calls] == ["failed"]
    clock.now += RECEIPT_AGAIN
    bus.away = BusRefused("no stream takes it")  # (a cluster electing its stream's leader)
    anyio.run(p.receipts_again)
    assert [c[0] for c in bus.calls] == ["failed", "failed"]
    clock.now += RECEIPT_AGAIN
    bus.away = None
    anyio.run(p.receipts_again)
    assert [c[0] for c in bus.calls] == ["failed", "failed", "publish"]
    assert len({c[2] for c in bus.calls}) == 1  # the same bytes each time
    clock.now += RECEIPT_HELD
    anyio.run(p.receipts_again)
    assert len(bus.calls) == 3  # taken: held no more


def test_a_receipt_is_held_no_longer_than_receipt_held(paired: tuple[Side, Side, str]) -> None:
    bus, p, clock = _receipt_handed(paired, "accepted", "ready")
    clock.now += RECEIPT_HELD
    anyio.run(p.receipts_again)
    bus.away = None
    clock.now += RECEIPT_AGAIN
    anyio.run(p.receipts_again)
    assert [c[0] for c in bus.calls] == ["failed"] and p._again == []  # left to the sender's next copy


def test_an_outbox_row_is_published_as_its_stored_bytes_and_the_other_box_judges_it_new(
    paired: tuple[Side, Side, str],
) -> None:
    a, b, pairing = paired
    p, bus = pump(a)
    inner = message(a, b, pairing)
    outbox, _ = O.admit(O.Outbox(own=a.local.box_id), inner, nonce=NONCE, now=a.desk.clock())
    outbox, effects = O.tick(outbox, now=a.desk.clock(), bus_up=True, heard={})
    published = [e for e in effects if isinstance(e, PublishEnvelope)]
    assert published == [PublishEnvelope(E.Kind.MESSAGE, b.local.box_id, pairing, inner.identity, 1)]
    a.desk.hub = lambda: H.Hub(outbox=outbox)
    a.desk.hand(published[0])
    a.desk.hand(replace(published[0], attempt=2))
    run(p)
    (_, subject, wire, mid), (_, _, again, mid2) = bus.calls
    assert subject == f"connect.{b.local.box_id}.inbox.{a.local.box_id}"
    assert again == wire and (mid, mid2) == (msg_id(wire, 1), msg_id(wire, 2))  # one envelope, two attempts
    verdict = receive(b.local, subject, wire, b.desk.view())
    assert verdict.decision is E.Decision.NEW and verdict.inner == inner


def test_a_cancel_is_published_from_the_row_and_judged_a_cancel(paired: tuple[Side, Side, str]) -> None:
    a, b, pairing = paired
    p, bus = pump(a)
    inner = message(a, b, pairing)
    now = a.desk.clock()
    outbox, _ = O.admit(O.Outbox(own=a.local.box_id), inner, nonce=NONCE, now=now)
    outbox, _ = O.tick(outbox, now=now, bus_up=True, heard={})
    outbox, effects = O.cancel(outbox, sender="p-7", now=now, reason="revoked", nonces={inner.identity: bytes(24)})
    (cancel,) = [e for e in effects if isinstance(e, PublishEnvelope)]
    a.desk.hub = lambda: H.Hub(outbox=outbox)
    a.desk.hand(cancel)
    run(p)
    (_, subject, wire, _mid), = bus.calls
    assert subject == f"connect.{b.local.box_id}.cancel.{a.local.box_id}"
    verdict = receive(b.local, subject, wire, b.desk.view())
    assert verdict.decision is E.Decision.TOMBSTONE and verdict.identity == inner.identity


def test_nothing_is_published_in_a_pairing_that_is_no_longer_active(paired: tuple[Side, Side, str]) -> None:
    a, b, pairing = paired
    p, bus = pump(a)
    inner = message(a, b, pairing)
    outbox, _ = O.admit(O.Outbox(own=a.local.box_id), inner, nonce=NONCE, now=a.desk.clock())
    outbox, effects = O.tick(outbox, now=a.desk.clock(), bus_up=True, heard={})
    a.desk.hub = lambda: H.Hub(outbox=outbox)
    anyio.run(lambda: a.desk.remove("devbox"))
    a.desk.hand(next(e for e in effects if isinstance(e, PublishEnvelope)))
    run(p)
    assert bus.calls == []


def test_without_a_bus_the_desk_drops_a_bus_effect_quietly(paired: tuple[Side, Side, str]) -> None:
    """A box with federation.toml but no NATS server: nothing to hand to (what matters comes again)."""
    a, _b, _ = paired
    assert a.desk.pump is None
    a.desk.hand(AckDelivery("d-1"))  # no error


def test_a_bus_effect_that_fails_is_dropped_and_the_next_one_runs(paired: tuple[Side, Side, str]) -> None:
    """NATS away: the publish fails (BusUnavailable), nothing waits for it (the sender's next copy or
    the row's schedule recovers it), and the acknowledgement after it still runs."""
    from connectcore.ports import BusUnavailable

    a, b, pairing = paired
    p, bus = pump(b)
    calls = bus.calls

    async def away(subject: str, data: bytes, *, msg_id: str) -> None:
        calls.append(("refused", subject))
        raise BusUnavailable("not connected")

    bus.publish = away  # type: ignore[method-assign]
    inner = message(a, b, pairing)
    receipt = E.ReceiptInner(
        E.Routing(E.Kind.RECEIPT, b.local.box_id, a.local.box_id, pairing=pairing), inner.identity,
        E.digest_of(E.encode_inner(inner)), "accepted", "ready", b.desk.clock(), ("agent:codex:x", "%4"),
    )
    delivery = Delivery("s", b"...", 1)
    p.awaiting_ack("d-1", delivery)
    b.desk.hand(PublishReceipt(receipt, NONCE))
    b.desk.hand(AckDelivery("d-1"))
    run(p)
    assert [c[0] for c in calls] == ["refused", "ack"]
