"""The daemon's side of messages across boxes (connectd.federation.flow): engines on real SQLite files
and real PyNaCl keys, their pairing desks paired as the daemon pairs them, each box's pump on a
recording bus. A federated box's hub is restored at start with its outbox and inbox (a box that does
not federate keeps neither). The fetch loop's envelopes go to the hub: A's row, published, is judged on
B and becomes a carded local message for the pane its target names (committed before B's receipt, and
the delivery acknowledged only after it); B's receipt moves A's row; a copy is answered with the same
receipt; a target naming no pane on B is committed refused; a pairing envelope is still the desk's. The
ticker steps the outbox's schedule with the bus's state and when each box was last heard."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import pytest

from connectcore import directory as D
from connectcore import grants
from connectcore import hub as H
from connectcore.delivery import MessageState
from connectcore.effects import Audit, Effect, Persist
from connectcore.federation import envelope as E
from connectcore.federation import inbox as I
from connectcore.federation import outbox as O
from connectcore.federation import pairing as P
from connectcore.federation import policy as F
from connectcore.federation import remote as R
from connectcore.grants import PRESET_SCOPES, Preset
from connectcore.ports import Delivery
from connectd.daemon.ids import hash_token
from connectd.daemon.parts import Engine
from connectd.federation import keys as K
from connectd.federation.desk import PairingDesk, open_desk
from connectd.federation.pump import Pump
from connectd.federation.seal import receive
from connectd.store.store import Store
from tests.integration.test_federation_effects import RecordingBus, run
from tests.integration.test_pairing_desk import Clock, direct
from tests.unit import test_federation_inbox as TI
from tests.unit import test_federation_outbox as TO
from tests.unit.test_directory_view import _incarnation, _observe


def records(effects: Iterable[Any]) -> list[Effect]:
    return [e for e in effects if isinstance(e, Persist | Audit)]


class Locks:
    """The send locks (``TmuxAdapter.pane_lock``), each one taken recorded."""

    def __init__(self) -> None:
        self.taken: list[str] = []

    def pane_lock(self, pane_id: str) -> anyio.Lock:
        self.taken.append(pane_id)
        return anyio.Lock()


class Box:
    """One daemon's engine and desk on ``root`` (``name``: set up by ``federate init``; None: not federated)."""

    def __init__(self, root: Path, name: str | None, clock: Clock, settings: F.FederationPolicy = F.DEFAULT) -> None:
        self.root, self.name, self.clock, self.settings = root, name, clock, settings
        if name is not None and not (root / K.FEDERATION_FILE).exists():
            K.init(root, name)
        self.open()

    def open(self) -> None:
        self.store = Store.open(self.root)
        self.engine = Engine(self.store, None, endpoint_url="http://127.0.0.1:9/mcp", clock=self.clock,  # type: ignore[arg-type]
                             run_sync=direct)
        self.locks = Locks()
        self.engine.person.tmux = self.locks  # type: ignore[assignment]  # (the send locks a revocation takes)
        self.desk: PairingDesk | None = open_desk(self.root, self.engine, self.settings)
        self.engine.federation = self.desk

    @property
    def fed(self) -> PairingDesk:
        assert self.desk is not None
        return self.desk

    def owed(self) -> list[Any]:
        return [w for w in self.fed.records.wires() if w.due_at is not None and w.due_at <= self.clock()]

    def pump(self) -> RecordingBus:
        bus = RecordingBus()
        bus.connected = False  # type: ignore[attr-defined]  # (NatsBus.connected: the ticker's bus_up)
        self.fed.pump = Pump(self.fed, bus=bus)
        return bus

    def reopen(self) -> None:
        self.store.close()
        self.open()

    def close(self) -> None:
        self.store.close()


def test_a_federated_box_s_hub_is_restored_with_its_outbox_and_inbox(tmp_path: Path) -> None:
    box = Box(tmp_path / "a", "laptop", Clock())
    hub = box.engine.hub
    assert hub.outbox is not None and hub.inbox is not None
    assert hub.outbox.rows == {} and hub.inbox.records == {}
    # a published outbox row and an accepted inbox record (the core's, made for other box ids),
    # committed through the store
    outbox, effects = O.admit(TO.empty(), TO.message("m-1"), nonce=TO.NONCE, now=TO.T0)
    box.store.apply(records(effects))
    outbox, effects = O.publish_new(outbox, TO.message("m-1").identity, now=TO.T0, bus_up=True)
    box.store.apply(records(effects))
    inbox, effects = I.accept(TI.empty(), TI.judged(TI.message(), TI.empty()), nonce=TI.N1, now=TI.NOW,
                              recipient=TI.RECIPIENT, reason="ready")
    box.store.apply(records(effects))
    box.reopen()
    hub = box.engine.hub
    assert hub.outbox is not None and hub.inbox is not None
    row = hub.outbox.rows[TO.message("m-1").identity]
    assert row == outbox.rows[row.identity] and row.state is O.OutboxState.PUBLISHED and row.attempt == 1
    assert hub.inbox.records == inbox.records and I.may_deliver(hub.inbox, TI.ID1)
    assert box.desk is not None and hub.inbox.own == hub.outbox.own == box.desk.local.box_id
    box.close()


def test_a_box_opened_with_federation_settings_schedules_and_judges_by_them_after_a_restart_too(tmp_path: Path) -> None:
    settings = F.parse({"skew_bound": 30, "accepted_poll": 45, "retention": 7200})
    box = Box(tmp_path / "a", "laptop", Clock(), settings)
    for _ in range(2):  # as opened, and as reopened (a restart)
        hub = box.engine.hub
        assert hub.outbox is not None and hub.inbox is not None and box.desk is not None
        assert hub.outbox.settings == settings.outbox and hub.inbox.retention == 7200.0
        view = box.desk.view()  # what judges an arriving envelope
        assert (view.skew_bound, view.retention) == (30.0, 7200.0)
        box.reopen()
    box.close()
    plain = Box(tmp_path / "b", "devbox", Clock())
    assert plain.desk is not None and (plain.desk.view().skew_bound, plain.desk.view().retention) == (
        E.SKEW_BOUND, E.RETENTION)
    plain.close()


def test_a_box_that_does_not_federate_has_neither(tmp_path: Path) -> None:
    box = Box(tmp_path / "plain", None, Clock())
    assert box.desk is None and box.engine.hub.outbox is None and box.engine.hub.inbox is None
    box.close()



def _launch(box: Box, n: int) -> None:
    """An agent on pane %n, committed as the daemon commits a launch (principal p-n, token tok-n)."""
    token = D.incarnation_token(_incarnation(n))
    anyio.run(box.engine.step, H.Launch(box.clock(), hash_token(f"tok-{n}"), f"p-{n}", "claude", f"%{n}", 100 + n, token,
                                        PRESET_SCOPES[Preset.COLLABORATE]))


def _deliver(to: Box, wire: Any) -> None:
    assert not anyio.run(to.fed.received, wire.subject, wire.wire)  # a pairing step: acknowledged by the caller


def _paired(a: Box, b: Box) -> str:
    """A and B paired by both approvals over their desks, with A's sender p-1 on %1 and B's recipient
    p-4 on %4; the pairing's id."""
    code = anyio.run(a.fed.invite)["code"]
    anyio.run(lambda: b.fed.accept(code))
    (request,) = b.owed()
    _deliver(a, request)
    anyio.run(lambda: a.fed.approve("devbox"))
    (answer,) = a.owed()
    _deliver(b, answer)
    (pairing,) = a.fed.book.active()
    _observe(a.engine, 1)
    _launch(a, 1)  # the sender: p-1 on %1
    _observe(b.engine, 4)
    _launch(b, 4)  # the recipient: p-4 on %4
    return str(pairing.id)


@pytest.fixture
def boxes(tmp_path: Path) -> Any:
    clock = Clock()
    a, b = Box(tmp_path / "a", "laptop", clock), Box(tmp_path / "b", "devbox", clock)
    yield a, b, _paired(a, b)
    a.close()
    b.close()


def _submit(a: Box, b: Box, pairing: str, mid: str = "m-1", target: str | None = None) -> tuple[str, bytes]:
    """A's agent sends to B's pane (the hub's RemoteSubmit); A's pump publishes the row: its subject and wire."""
    bus = a.pump()
    to = target or f"%4@{D.incarnation_token(_incarnation(4))}"
    anyio.run(a.engine.step, H.RemoteSubmit(
        a.clock(), hash_token("tok-1"), mid, "hello from box A", ("address", to), b.fed.local.box_id, pairing, "devbox",
        a.engine.ids.new_id("msg"), bytes([5]) * 24, bus_up=True,
    ))
    run(a.fed.pump)
    ((_, subject, wire, _mid),) = bus.calls
    return subject, wire


@pytest.mark.parametrize(("skew_bound", "accepted"), [(None, True), (30, False)])
def test_the_receiving_box_s_own_skew_bound_judges_a_message_stamped_ahead(
    tmp_path: Path, skew_bound: int | None, accepted: bool,
) -> None:
    a_clock, b_clock = Clock(), Clock()
    settings = F.parse({} if skew_bound is None else {"skew_bound": skew_bound})
    a, b = Box(tmp_path / "a", "laptop", a_clock), Box(tmp_path / "b", "devbox", b_clock, settings)
    pairing = _paired(a, b)
    a_clock.now += 60  # A's clock a minute ahead of B's: within the default bound (300 s), past 30 s
    subject, wire = _submit(a, b, pairing)
    b.pump()
    anyio.run(b.fed.received, subject, wire, Delivery(subject, wire, 1))
    sender = R.remote_principal(a.fed.local.box_id, "p-1")
    assert ((sender, "m-1") in b.engine.hub.messages) is accepted
    ahead = [r for r in b.store.audit(outcome="refused", limit=20) if "ahead of this box (the bound is 30 s)" in str(r)]
    assert bool(ahead) is not accepted, ahead
    a.close()
    b.close()


def test_a_message_from_another_box_becomes_a_carded_local_message_acknowledged_after_its_commit(
    boxes: tuple[Box, Box, str],
) -> None:
    a, b, pairing = boxes
    subject, wire = _submit(a, b, pairing)
    bus = b.pump()
    delivery = Delivery(subject, wire, 1)
    assert anyio.run(b.fed.received, subject, wire, delivery) is True  # the hub's step acknowledges it
    assert bus.calls == [] and list(b.fed.pump.deliveries.values()) == [delivery]
    sender = R.remote_principal(a.fed.local.box_id, "p-1")
    message = b.engine.hub.messages[(sender, "m-1")]
    assert message.state is MessageState.AWAITING_CONSENT and message.recipient_pane == "%4"
    card = b.engine.hub.cards[message.card or ""]
    assert card.sender_actor.startswith(f"box:{a.fed.local.box_id}/agent:") and card.recipient_pane == "%4"
    assert "on box laptop" in message.typed
    # committed before the receipt: a reopened store holds the inbox record with the message row
    assert b.store.message(sender, "m-1") is not None
    assert [r.identity.id for r in b.store.inbox_records()] == ["m-1"]
    assert b.fed.heard == {a.fed.local.box_id: b.clock()}
    run(b.fed.pump)
    assert [c[0] for c in bus.calls] == ["publish", "ack"] and bus.calls[1] == ("ack", delivery)
    _, rsubject, receipt, _ = bus.calls[0]
    assert rsubject == f"connect.{a.fed.local.box_id}.receipts.{b.fed.local.box_id}"
    # the receipt on A: the row accepted, its delivery acknowledged by A's step
    abus = a.pump()
    back = Delivery(rsubject, receipt, 2)
    assert anyio.run(a.fed.received, rsubject, receipt, back) is True
    assert a.engine.hub.outbox is not None
    (row,) = a.engine.hub.outbox.rows.values()
    assert row.state is O.OutboxState.ACCEPTED and row.card == message.card
    run(a.fed.pump)
    assert abus.calls == [("ack", back)]
    # a copy of A's wire: answered with the very receipt, nothing new
    before = b.engine.hub.messages
    bus.calls.clear()
    again = Delivery(subject, wire, 3)
    assert anyio.run(b.fed.received, subject, wire, again) is True
    run(b.fed.pump)
    assert b.engine.hub.messages == before
    assert [c[0] for c in bus.calls] == ["publish", "ack"] and bus.calls[0][2] == receipt and bus.calls[1][1] == again
    # a restart: the message, its card and its inbox record come back; the remote principal's row
    # (the messages' sender) never enters the grant book
    b.reopen()
    assert b.engine.hub.messages[(sender, "m-1")].card == message.card and message.card in b.engine.hub.cards
    assert sender not in b.engine.hub.book.principals
    assert b.engine.hub.inbox is not None and I.may_deliver(b.engine.hub.inbox, row.identity)


def test_a_message_whose_target_names_no_pane_here_is_committed_refused_and_receipted(
    boxes: tuple[Box, Box, str],
) -> None:
    a, b, pairing = boxes
    subject, wire = _submit(a, b, pairing, target="%9@0123456789abcdef")
    bus = b.pump()
    before = (b.engine.hub.messages, b.engine.hub.cards)
    assert anyio.run(b.fed.received, subject, wire, Delivery(subject, wire, 1)) is True
    assert (b.engine.hub.messages, b.engine.hub.cards) == before
    assert b.engine.hub.inbox is not None
    (record,) = b.engine.hub.inbox.records.values()
    assert record.state is I.InboxState.REFUSED and record.receipt.reason == "unknown_target: no live pane %9"
    run(b.fed.pump)
    _, rsubject, receipt, _ = bus.calls[0]
    verdict = receive(a.fed.local, rsubject, receipt, a.fed.view())
    assert verdict.decision is E.Decision.RECEIPT
    assert isinstance(verdict.inner, E.ReceiptInner) and verdict.inner.outcome == "refused"


def test_a_pairing_with_messages_off_refuses_an_arriving_message_with_its_stored_settings(
    boxes: tuple[Box, Box, str],
) -> None:
    a, b, pairing = boxes
    view = anyio.run(lambda: b.fed.set_settings("laptop", ["messages=off"], actor="owner:page:1"))
    assert view["settings"]["messages"] is False and view["heard_at"] == b.fed.heard[a.fed.local.box_id]
    b.reopen()  # the setting is the stored pairing's, not a value the desk kept
    _observe(b.engine, 4)  # (the panes seen are the watcher's, in memory)
    subject, wire = _submit(a, b, pairing)
    bus = b.pump()
    before = (b.engine.hub.messages, b.engine.hub.cards)
    assert anyio.run(b.fed.received, subject, wire, Delivery(subject, wire, 1)) is True
    assert (b.engine.hub.messages, b.engine.hub.cards) == before  # nothing typed, no card
    assert b.engine.hub.inbox is not None
    (record,) = b.engine.hub.inbox.records.values()
    assert record.state is I.InboxState.REFUSED and record.receipt.reason == "messages_off: messages from box laptop are off"
    run(b.fed.pump)
    _, rsubject, receipt, _ = bus.calls[0]
    verdict = receive(a.fed.local, rsubject, receipt, a.fed.view())
    assert isinstance(verdict.inner, E.ReceiptInner) and verdict.inner.outcome == "refused"
    # on again: the next message is carded as before
    anyio.run(lambda: b.fed.set_settings("laptop", ["messages=on"]))
    subject, wire = _submit(a, b, pairing, mid="m-2")
    b.pump()
    assert anyio.run(b.fed.received, subject, wire, Delivery(subject, wire, 2)) is True
    sender = R.remote_principal(a.fed.local.box_id, "p-1")
    assert b.engine.hub.messages[(sender, "m-2")].state is MessageState.AWAITING_CONSENT


def test_a_receipt_for_no_message_of_this_box_is_refused_changes_nothing_and_is_acknowledged_by_the_caller(
    boxes: tuple[Box, Box, str],
) -> None:
    a, b, pairing = boxes
    subject, wire = _submit(a, b, pairing)
    b.pump()
    anyio.run(b.fed.received, subject, wire, Delivery(subject, wire, 1))
    bus = b.fed.pump.bus
    run(b.fed.pump)
    _, rsubject, receipt, _ = bus.calls[0]
    # A forgot its row (as if its outbox were another's): the receipt is judged against nothing sent
    a.engine.hub = H.replace(a.engine.hub, outbox=O.Outbox(own=a.fed.local.box_id))
    a.pump()
    before = a.engine.hub
    assert anyio.run(a.fed.received, rsubject, receipt, Delivery(rsubject, receipt, 9)) is False
    assert a.engine.hub == before and a.fed.pump.deliveries == {}
    assert a.store.audit(outcome="refused", limit=10)


def test_the_ticker_steps_the_outbox_schedule_with_the_bus_s_state_and_who_was_heard(
    boxes: tuple[Box, Box, str],
) -> None:
    a, b, pairing = boxes
    bus = a.pump()
    bus.connected = False  # type: ignore[attr-defined]
    anyio.run(a.engine.step, H.RemoteSubmit(
        a.clock(), hash_token("tok-1"), "m-1", "hello", ("address", f"%4@{D.incarnation_token(_incarnation(4))}"),
        b.fed.local.box_id, pairing, "devbox", a.engine.ids.new_id("msg"), bytes([5]) * 24, bus_up=False,
    ))
    assert a.engine.hub.outbox is not None
    (row,) = a.engine.hub.outbox.rows.values()
    assert row.state is O.OutboxState.QUEUED
    stepped: list[Any] = []
    step = a.engine.runner.step

    async def recording(event: Any) -> Any:
        stepped.append(event)
        return await step(event)

    a.engine.runner.step = recording  # type: ignore[method-assign]
    assert a.fed.messages is not None
    assert a.fed.heard == {b.fed.local.box_id: a.clock()}  # B's pair_request verified on A: heard
    a.fed.heard.clear()
    anyio.run(a.fed.messages.tick)  # the bus down: the row waits
    run(a.fed.pump)
    assert a.engine.hub.outbox.rows[row.identity].state is O.OutboxState.QUEUED and bus.calls == []
    a.fed.heard[b.fed.local.box_id] = a.clock() - 3
    bus.connected = True  # type: ignore[attr-defined]
    anyio.run(a.fed.messages.tick)
    run(a.fed.pump)
    assert stepped[-1] == H.FederationTick(a.clock(), True, ((b.fed.local.box_id, a.clock() - 3),))
    assert stepped[0] == H.FederationTick(a.clock(), False, ())
    assert a.engine.hub.outbox.rows[row.identity].state is O.OutboxState.PUBLISHED
    ((kind, subject, _wire, _mid),) = bus.calls
    assert kind == "publish" and subject == f"connect.{b.fed.local.box_id}.inbox.{a.fed.local.box_id}"
    # committed before it was published: a restart finds it published
    a.reopen()
    assert a.engine.hub.outbox is not None and a.engine.hub.outbox.rows[row.identity].attempt == 1


def test_a_desk_joined_to_an_engine_starts_the_federation_tick(tmp_path: Path) -> None:
    box = Box(tmp_path / "a", "laptop", Clock())
    spawned: list[tuple[str, Any, Any]] = []

    class Spawns:
        def spawn(self, _kind: Any, fn: Any, *, every: float | None = None, name: str = "") -> None:
            spawned.append((name, every, fn))

    box.fed.start(Spawns())  # type: ignore[arg-type]
    assert box.fed.messages is not None
    assert ("federation tick", 1.0, box.fed.messages.tick) in spawned
    box.close()


# --- send_message and get_message to another box (connectd.federation.remote_calls) ----------------

B_ADDRESS = f"%4@{D.incarnation_token(_incarnation(4))}"


def _send(box: Box, to: str, mid: str = "m-1", **kw: Any) -> Any:
    return anyio.run(lambda: box.engine.calls.send_message("tok-1", to=to, text="hello from box A",
                                                           message_id=mid, **kw))


def test_send_message_to_a_qualified_target_is_one_outbox_row_and_get_message_reads_its_outcome(
    boxes: tuple[Box, Box, str],
) -> None:
    a, b, pairing = boxes
    bus = a.pump()
    bus.connected = True  # type: ignore[attr-defined]
    answer = _send(a, f"{B_ADDRESS}@devbox")
    assert answer["outcome"] == "queued" and answer["to_box"] == "devbox"
    assert answer["reason"] == "until box devbox accepts it"
    # the shape of a local message's answer: from (the sender's actor), to, in_reply_to (none given)
    actor = grants.actor_name(a.engine.hub.book.principals["p-1"])
    assert (answer["from"], answer["to"], answer["in_reply_to"]) == (actor, f"{B_ADDRESS}@devbox", None)
    assert {"message_id", "created_at", "final_at"} <= set(answer)
    assert a.engine.hub.outbox is not None
    (row,) = a.engine.hub.outbox.rows.values()
    assert (row.to, row.pairing, row.state) == (b.fed.local.box_id, pairing, O.OutboxState.PUBLISHED)
    run(a.fed.pump)
    ((_, subject, wire, _),) = bus.calls
    verdict = receive(b.fed.local, subject, wire, b.fed.view())
    assert isinstance(verdict.inner, E.MessageInner)
    assert verdict.inner.target == ("address", B_ADDRESS) and verdict.inner.text == "hello from box A"
    # B accepts it and, once typed, says delivered: get_message reads each
    b.pump()
    anyio.run(b.fed.received, subject, wire, Delivery(subject, wire, 1))
    run(b.fed.pump)
    _, rsubject, receipt, _ = b.fed.pump.bus.calls[0]
    anyio.run(a.fed.received, rsubject, receipt, Delivery(rsubject, receipt, 2))
    got = anyio.run(lambda: a.engine.calls.get_message("tok-1", "m-1"))
    assert got["outcome"] == "queued" and got["reason"].startswith("accepted by box devbox")
    assert b.engine.hub.inbox is not None
    key = (R.remote_principal(a.fed.local.box_id, "p-1"), "m-1")
    done, receipts = I.final(b.engine.hub.inbox, row.identity, I.InboxState.DELIVERED, reason="typed", now=b.clock(),
                             nonce=I.final_nonce(b.engine.hub.inbox.records[row.identity]))
    (final,) = [e for e in receipts if type(e).__name__ == "PublishReceipt"]
    wire2 = b.fed.wire_for(final)
    assert wire2 is not None and key in b.engine.hub.messages
    anyio.run(a.fed.received, wire2[0], wire2[1], Delivery(wire2[0], wire2[1], 3))
    got = anyio.run(lambda: a.engine.calls.get_message("tok-1", "m-1", 5.0))  # final: no wait
    assert got["outcome"] == "delivered" and got["final_at"] is not None
    assert (got["from"], got["to"], got["in_reply_to"]) == (actor, f"{B_ADDRESS}@devbox", None)


@pytest.mark.parametrize(
    ("to", "reason"),
    [
        (f"{B_ADDRESS}@nowhere", "unknown_box"),  # a valid name that is no active pairing
        ("%4@0123456789abcdef", "unknown_target"),  # an unqualified address is this box's, as before
        (f"{B_ADDRESS}@Devbox!", "bad_target"),  # no box name: read whole, and no target
    ],
)
def test_a_refused_send_to_another_box_changes_nothing(boxes: tuple[Box, Box, str], to: str, reason: str) -> None:
    a, _b, _ = boxes
    a.pump()
    before = a.engine.hub
    with pytest.raises(Exception) as refused:
        _send(a, to)
    assert str(getattr(refused.value, "reason", None)) == reason
    assert a.engine.hub.outbox == before.outbox and a.engine.hub.messages == before.messages
    assert a.fed.pump.bus.calls == []


def test_a_target_qualified_by_this_box_s_own_name_is_a_local_message(boxes: tuple[Box, Box, str]) -> None:
    """Claim: ``%2@<token>@laptop`` sent on box laptop is this box's pane %2 (boxes.place: own name is
    this box): one local message, no outbox row. (Before: the daemon resolved the whole text on this
    box and refused it ``unknown_target``.)"""
    a, _b, _ = boxes
    a.pump()
    _observe(a.engine, 2)
    _launch(a, 2)
    answer = _send(a, f"%2@{D.incarnation_token(_incarnation(2))}@laptop", mid="m-local")
    assert answer["outcome"] == "queued" and "to_box" not in answer, answer
    assert a.engine.hub.outbox is not None and not a.engine.hub.outbox.rows
    message = H.message_for(a.engine.hub, "p-1", "m-local")
    assert message is not None and message.recipient_pane == "%2"
    assert a.fed.pump.bus.calls == []


A_ADDRESS = f"%1@{D.incarnation_token(_incarnation(1))}"


def _reply(b: Box, to: str, mid: str = "r-1", **kw: Any) -> Any:
    return anyio.run(lambda: b.engine.calls.send_message("tok-4", to=to, text="the answer from box B",
                                                         message_id=mid, **kw))


def _arrived_on_b(a: Box, b: Box, pairing: str) -> str:
    """A's m-1 accepted on B: B's local copy's ref (what its provenance line tells %4 to reply with)."""
    subject, wire = _submit(a, b, pairing, target=B_ADDRESS)
    b.pump()
    anyio.run(b.fed.received, subject, wire, Delivery(subject, wire, 1))
    return b.engine.hub.messages[(R.remote_principal(a.fed.local.box_id, "p-1"), "m-1")].ref


def test_a_reply_across_boxes_carries_the_identity_and_a_s_sender_sees_it_correlated(
    boxes: tuple[Box, Box, str],
) -> None:
    """Claim (R9): B's agent answers A's message with in_reply_to=<B's ref>; it travels as the message's
    identity, A's copy carries that identity's text, and A's sender's get_message lists it among the
    replies. (Before: refused ``reply_across_boxes``.)"""
    a, b, pairing = boxes
    ref = _arrived_on_b(a, b, pairing)
    bus = b.fed.pump.bus
    bus.connected = True  # type: ignore[attr-defined]
    bus.calls.clear()  # type: ignore[attr-defined]
    answer = _reply(b, f"{A_ADDRESS}@laptop", in_reply_to=ref)
    assert answer["outcome"] == "queued" and answer["to_box"] == "laptop", answer
    # as a local reply's answer says (test_live: reply_sent["from"], ["to"], ["in_reply_to"])
    b_actor = grants.actor_name(b.engine.hub.book.principals["p-4"])
    assert (answer["from"], answer["to"], answer["in_reply_to"]) == (b_actor, f"{A_ADDRESS}@laptop", ref), answer
    got_reply = anyio.run(lambda: b.engine.calls.get_message("tok-4", "r-1"))
    assert (got_reply["from"], got_reply["to"], got_reply["in_reply_to"]) == (b_actor, f"{A_ADDRESS}@laptop", ref)
    run(b.fed.pump)
    (subject, wire) = next((c[1], c[2]) for c in bus.calls if c[0] == "publish" and ".inbox" in c[1])  # type: ignore[attr-defined]
    verdict = receive(a.fed.local, subject, wire, a.fed.view())
    assert isinstance(verdict.inner, E.MessageInner)
    (row,) = a.engine.hub.outbox.rows.values()  # type: ignore[union-attr]
    assert verdict.inner.in_reply_to == row.identity
    a.pump()
    anyio.run(a.fed.received, subject, wire, Delivery(subject, wire, 7))
    copy = a.engine.hub.messages[(R.remote_principal(b.fed.local.box_id, "p-4"), "r-1")]
    assert copy.in_reply_to == str(row.identity) and copy.recipient_pane == "%1"
    got = anyio.run(lambda: a.engine.calls.get_message("tok-1", "m-1"))
    assert got["replies"] == [{"ref": copy.ref, "from": copy.sender_actor, "outcome": copy.outcome}], got


def test_a_reply_across_boxes_to_a_message_not_from_that_box_is_refused_and_changes_nothing(
    boxes: tuple[Box, Box, str],
) -> None:
    """Claim (R9): in_reply_to must name a message this agent received from the box it replies to: an
    unknown ref, or one this agent received from a sender on its own box, is refused ``bad_reply`` and
    nothing is stored."""
    a, b, pairing = boxes
    _arrived_on_b(a, b, pairing)
    _observe(b.engine, 4, 5)
    _launch(b, 5)  # a local sender on B: p-5
    local = anyio.run(lambda: b.engine.calls.send_message("tok-5", to=B_ADDRESS, text="local hello", message_id="l-1"))
    local_ref = b.engine.hub.messages[("p-5", "l-1")].ref
    before = b.engine.hub
    for in_reply_to, says in (("msg-unknown", "names no message this agent received"),
                              (local_ref, "did not come from box laptop")):
        with pytest.raises(Exception, match=says) as refused:
            _reply(b, f"{A_ADDRESS}@laptop", in_reply_to=in_reply_to)
        assert getattr(refused.value, "reason", None) == "bad_reply"
        assert b.engine.hub.outbox == before.outbox and b.engine.hub.messages == before.messages
    assert local["outcome"] in {"queued", "delivered"}


def test_an_arriving_reply_naming_no_message_sent_to_that_box_is_refused(boxes: tuple[Box, Box, str]) -> None:
    """Claim (R9, the receiving box): an envelope whose in_reply_to names no message this box sent to
    the replying box is committed refused ``bad_reply`` (its receipt says so), and no local row is made."""
    a, b, pairing = boxes
    bus = b.pump()
    bus.connected = True  # type: ignore[attr-defined]
    ghost = E.Identity(a.fed.local.box_id, "p-1", "never-sent")
    anyio.run(b.engine.step, H.RemoteSubmit(
        b.clock(), hash_token("tok-4"), "r-9", "an answer to nothing", ("address", A_ADDRESS), a.fed.local.box_id,
        pairing, "laptop", b.engine.ids.new_id("msg"), bytes([6]) * 24, bus_up=True,
    ))
    (row,) = b.engine.hub.outbox.rows.values()  # type: ignore[union-attr]
    # the sending box's rule would refuse it (R9): forge the row's inner as a faulty box would send it
    inner = E.parse_inner(row.inner, E.Outer(O.to_seal(row, E.Kind.MESSAGE)[0], row.nonce, row.inner))
    assert isinstance(inner, E.MessageInner)
    forged = E.encode_inner(replace(inner, in_reply_to=ghost))
    outbox = b.engine.hub.outbox
    assert outbox is not None
    b.engine.hub = replace(b.engine.hub, outbox=replace(outbox, rows={row.identity: replace(row, inner=forged)}))
    run(b.fed.pump)
    (subject, wire) = next((c[1], c[2]) for c in bus.calls if c[0] == "publish")  # type: ignore[attr-defined]
    a.pump()
    anyio.run(a.fed.received, subject, wire, Delivery(subject, wire, 8))
    assert (R.remote_principal(b.fed.local.box_id, "p-4"), "r-9") not in a.engine.hub.messages
    (record,) = a.engine.hub.inbox.records.values()  # type: ignore[union-attr]
    assert record.state is I.InboxState.REFUSED and "bad_reply" in record.receipt.reason


def test_the_sending_rules_refuse_before_admission_and_store_nothing(boxes: tuple[Box, Box, str]) -> None:
    a, _b, _ = boxes
    a.pump()
    _send(a, f"{B_ADDRESS}@devbox")
    assert a.engine.hub.outbox is not None
    rows = dict(a.engine.hub.outbox.rows)
    with pytest.raises(H.CallRefused) as refused:
        _send(a, f"{B_ADDRESS}@devbox")  # the same id again
    assert refused.value.reason == "duplicate_id" and dict(a.engine.hub.outbox.rows) == rows
    assert a.store.outbox_rows() == list(rows.values())



# --- cancels across boxes (docs/federation.md, "Revocation across boxes") ----------------------------


def _carded_on_b(a: Box, b: Box, pairing: str) -> tuple[Any, tuple[str, str], str]:
    """A's m-1 carded on B, B's accepted receipt back on A: A's row accepted. B's pump is recording."""
    subject, wire = _submit(a, b, pairing)
    b.pump()
    assert anyio.run(b.fed.received, subject, wire, Delivery(subject, wire, 1)) is True
    run(b.fed.pump)
    _, rsubject, receipt, _ = b.fed.pump.bus.calls[0]
    a.pump()
    anyio.run(a.fed.received, rsubject, receipt, Delivery(rsubject, receipt, 2))
    run(a.fed.pump)
    key = (R.remote_principal(a.fed.local.box_id, "p-1"), "m-1")
    card = b.engine.hub.messages[key].card
    assert card is not None and b.engine.hub.cards[card].state.value == "pending"
    b.fed.pump.bus.calls.clear()
    a.fed.pump.bus.calls.clear()
    return a.fed.pump.bus, key, card


def test_revoking_the_sender_cancels_across_boxes_and_the_answer_names_the_unconfirmed(
    boxes: tuple[Box, Box, str],
) -> None:
    """Revoke A's sender while B's card is open: A's revoke answers at once, naming the message box
    devbox has not confirmed cancelled; A publishes the cancel; on B it is stepped under %4's send lock,
    the card withdrawn and the message cancelled with its record, and the one final receipt goes back;
    on A the row ends cancelled and nothing is unconfirmed any more."""
    a, b, pairing = boxes
    abus, key, card = _carded_on_b(a, b, pairing)
    answer = anyio.run(a.engine.person.revoke_pane, "%1")
    assert answer["cancels_unconfirmed"] == ["1 message: box devbox has not yet confirmed it is cancelled"]
    assert a.engine.hub.outbox is not None
    (row,) = a.engine.hub.outbox.rows.values()
    assert row.state is O.OutboxState.CANCELLING
    assert a.store.outbox_rows()[0].state is O.OutboxState.CANCELLING  # committed before it was published
    run(a.fed.pump)
    ((kind, subject, wire, _mid),) = abus.calls
    assert kind == "publish" and subject == f"connect.{b.fed.local.box_id}.cancel.{a.fed.local.box_id}"
    # on B: under the recipient pane's send lock, the card withdrawn, the message cancelled, receipted
    b.locks.taken.clear()
    cancel = Delivery(subject, wire, 1)
    assert anyio.run(b.fed.received, subject, wire, cancel) is True
    assert b.locks.taken == ["%4"]
    message = b.engine.hub.messages[key]
    assert message.state is MessageState.CANCELLED and b.engine.hub.cards[card].state.value == "cancelled"
    assert b.store.message(*key).state is MessageState.CANCELLED  # type: ignore[union-attr]
    assert [r.state for r in b.store.inbox_records()] == [I.InboxState.CANCELLED]
    assert b.store.audit(outcome="cancelled", limit=10)
    run(b.fed.pump)
    bbus = b.fed.pump.bus
    assert [c[0] for c in bbus.calls] == ["publish", "ack"] and bbus.calls[1] == ("ack", cancel)
    _, rsubject, receipt, _ = bbus.calls[0]
    verdict = receive(a.fed.local, rsubject, receipt, a.fed.view())
    assert isinstance(verdict.inner, E.ReceiptInner) and verdict.inner.outcome == "cancelled"
    # the receipt on A: the row cancelled, nothing left unconfirmed
    assert anyio.run(a.fed.received, rsubject, receipt, Delivery(rsubject, receipt, 3)) is True
    assert a.engine.hub.outbox.rows[row.identity].state is O.OutboxState.CANCELLED
    assert a.engine.person.cancels_unconfirmed(["p-1"]) == []
    # a copy of the cancel on B: answered with the same receipt, nothing changes
    before = b.engine.hub
    bbus.calls.clear()
    assert anyio.run(b.fed.received, subject, wire, Delivery(subject, wire, 4)) is True
    run(b.fed.pump)
    assert b.engine.hub.messages == before.messages and bbus.calls[0][2] == receipt


def test_removing_the_pairing_on_the_recipient_s_box_and_the_notice_on_the_sender_s(
    boxes: tuple[Box, Box, str],
) -> None:
    """B's person removes the pairing: B's carded message from A cancelled, its card withdrawn, under
    %4's send lock, no receipt; A's row, on B's signed notice, unconfirmed (it left: B may have had it);
    nothing more from A is accepted on B."""
    a, b, pairing = boxes
    _abus, key, card = _carded_on_b(a, b, pairing)
    # what pair list and pair remove's question show: one message in flight each way
    assert [p["in_flight"] for p in a.fed.pairings()] == [{"sent": 1, "received": 0}]
    assert [p["in_flight"] for p in b.fed.pairings()] == [{"sent": 0, "received": 1}]
    assert b.fed.pairing("laptop")["in_flight"] == {"sent": 0, "received": 1}  # pair remove's question reads this
    with pytest.raises(P.PairingError, match="no pairing with 'nobody'"):
        b.fed.pairing("nobody")
    b.locks.taken.clear()
    anyio.run(lambda: b.fed.remove("laptop"))
    assert [p["in_flight"] for p in b.fed.pairings()] == [{"sent": 0, "received": 0}]
    assert b.locks.taken == ["%4"]
    assert b.engine.hub.messages[key].state is MessageState.CANCELLED
    assert b.engine.hub.cards[card].state.value == "cancelled"
    assert [r.state for r in b.store.inbox_records()] == [I.InboxState.CANCELLED]
    run(b.fed.pump)
    assert [c for c in b.fed.pump.bus.calls if c[0] == "publish"] == []  # no receipt for a removed pairing
    (unpair,) = [w for w in b.owed() if w.key.startswith("unpair:")]
    _deliver(a, unpair)
    assert a.engine.hub.outbox is not None
    (row,) = a.engine.hub.outbox.rows.values()
    assert row.state is O.OutboxState.UNCONFIRMED and row.reason == "pairing removed before box devbox answered"
    assert a.store.outbox_rows()[0].state is O.OutboxState.UNCONFIRMED
    # a restart of B: the pairing still removed for the inbox; the message stays cancelled
    b.reopen()
    assert b.engine.hub.inbox is not None and pairing in b.engine.hub.inbox.removed
    assert b.engine.hub.messages[key].state is MessageState.CANCELLED


def test_removing_the_pairing_on_the_sender_s_box_cancels_what_never_left(boxes: tuple[Box, Box, str]) -> None:
    a, b, pairing = boxes
    bus = a.pump()
    bus.connected = False  # type: ignore[attr-defined]
    anyio.run(a.engine.step, H.RemoteSubmit(
        a.clock(), hash_token("tok-1"), "m-1", "hello", ("address", B_ADDRESS), b.fed.local.box_id, pairing,
        "devbox", a.engine.ids.new_id("msg"), bytes([5]) * 24, bus_up=False,
    ))
    anyio.run(lambda: a.fed.remove("devbox"))
    assert a.engine.hub.outbox is not None
    (row,) = a.engine.hub.outbox.rows.values()
    assert row.state is O.OutboxState.CANCELLED
    assert a.store.outbox_rows()[0].state is O.OutboxState.CANCELLED
    bus.connected = True  # type: ignore[attr-defined]
    anyio.run(a.fed.messages.tick)  # type: ignore[union-attr]
    run(a.fed.pump)
    assert [c for c in bus.calls if c[0] == "publish" and ".inbox." in c[1]] == []  # never published now


def test_a_lost_unpair_is_owed_again_when_the_other_box_still_sends_across_the_removed_pairing(
    boxes: tuple[Box, Box, str],
) -> None:
    """P17: A removes the pairing and its unpair is lost; B, still paired, sends A a message; A refuses
    it ``removed`` and owes its unpair again (once a minute at most, with the refusal's audit record);
    delivered, it removes the pairing on B. Before: the unpair was published once, and B kept the
    pairing active for good (the federation simulation's seed 38)."""
    a, b, pairing = boxes
    anyio.run(lambda: a.fed.remove("devbox"))
    (unpair,) = [w for w in a.owed() if w.key.startswith("unpair:")]
    a.fed.records.sent(unpair.key, attempt=1, now=a.clock())  # published once, then lost on the bus
    assert [w for w in a.owed() if w.key.startswith("unpair:")] == []
    _observe(b.engine, 7)
    _launch(b, 7)  # B's sender: p-7 on %7
    bbus = b.pump()
    anyio.run(b.engine.step, H.RemoteSubmit(
        b.clock(), hash_token("tok-7"), "m-b", "hello from box B", ("address", f"%1@{D.incarnation_token(_incarnation(1))}"),
        a.fed.local.box_id, pairing, "laptop", b.engine.ids.new_id("msg"), bytes([6]) * 24, bus_up=True,
    ))
    run(b.fed.pump)
    ((_, subject, wire, _mid),) = [c for c in bbus.calls if c[0] == "publish"]
    a.pump()
    assert anyio.run(a.fed.received, subject, wire, Delivery(subject, wire, 1)) is False  # refused removed
    assert a.engine.hub.messages == {} or all(m.sender != "p-7" for m in a.engine.hub.messages.values())
    (again,) = [w for w in a.owed() if w.key.startswith("unpair:")]
    assert again.wire == unpair.wire, "the stored unpair, the same bytes"
    a.fed.records.sent(again.key, attempt=2, now=a.clock())
    anyio.run(a.fed.received, subject, wire, Delivery(subject, wire, 2))  # the same box again within the minute
    assert [w for w in a.owed() if w.key.startswith("unpair:")] == [], "at most once a minute"
    _deliver(b, again)
    assert [p.state for p in b.fed.book.pairings.values()] == [P.PairingState.REMOVED]
    assert [p.removed_by for p in b.fed.book.pairings.values()] == [P.BY_PEER]


@pytest.mark.parametrize("notice", ["unpair", "tombstone"])
def test_the_other_box_learns_of_a_removal_from_its_tombstone_alone_exactly_as_from_its_unpair(
    boxes: tuple[Box, Box, str], notice: str,
) -> None:
    """A removes the pairing while B holds A's carded m-1. Either A's signed unpair reaches B, or it is
    lost and only the signed tombstone A put in its directory key for B does (D10, P18): B ends the same
    either way, by the one step (``removed_by_peer``): the pairing removed by the peer, the card
    withdrawn and the message cancelled under %4's send lock, its inbox record cancelled, no receipt.
    Before: a lost unpair left B's pairing active and the message waiting, until B sent something."""
    a, b, pairing = boxes
    abus, key, card = _carded_on_b(a, b, pairing)
    anyio.run(lambda: a.fed.remove("devbox"))
    (unpair,) = [w for w in a.owed() if w.key.startswith("unpair:")]
    ((_, reader, tombstone),) = [c for c in abus.calls if c[0] == "put"]  # put at once, on A's bus
    assert reader == b.fed.local.box_id and b"hello" not in tombstone
    b.locks.taken.clear()
    if notice == "unpair":
        _deliver(b, unpair)
    else:  # the unpair lost: the tombstone, as B's listen loop hears it
        assert b.fed.directory is not None
        assert anyio.run(lambda: b.fed.directory.arrived(a.fed.local.box_id, tombstone, live=True)) is True
    (gone,) = b.fed.book.pairings.values()
    assert (gone.id, gone.state, gone.removed_by) == (pairing, P.PairingState.REMOVED, P.BY_PEER)
    assert b.locks.taken == ["%4"]
    assert b.engine.hub.messages[key].state is MessageState.CANCELLED
    assert b.engine.hub.cards[card].state.value == "cancelled"
    assert [r.state for r in b.store.inbox_records()] == [I.InboxState.CANCELLED]
    assert b.engine.hub.inbox is not None and pairing in b.engine.hub.inbox.removed
    removals = [r for r in b.store.audit(limit=500) if r.action == "pair.remove"]
    assert [(r.actor, r.outcome, r.target) for r in removals] == [(f"box:{a.fed.local.box_id}", "removed", pairing)]
    run(b.fed.pump)
    assert [c for c in b.fed.pump.bus.calls if c[0] == "publish"] == []  # no receipt for a removed pairing
    # the other notice after the first changes nothing more
    if notice == "unpair":
        assert b.fed.directory is not None
        anyio.run(lambda: b.fed.directory.arrived(a.fed.local.box_id, tombstone, live=True))
    else:
        _deliver(b, unpair)
    assert [r for r in b.store.audit(limit=500) if r.action == "pair.remove"] == removals


def test_a_removal_whose_hub_step_a_restart_interrupted_is_stepped_by_the_next_tick(
    boxes: tuple[Box, Box, str],
) -> None:
    """The book's removal and the hub's step are two commits: the daemon stopping between them (here,
    the desk joined to no engine when it removed) leaves the row; the federation tick after the
    restart ends it."""
    a, b, pairing = boxes
    a.pump()
    anyio.run(a.engine.step, H.RemoteSubmit(
        a.clock(), hash_token("tok-1"), "m-1", "hello", ("address", B_ADDRESS), b.fed.local.box_id, pairing,
        "devbox", a.engine.ids.new_id("msg"), bytes([5]) * 24, bus_up=True,
    ))
    flow, a.fed.messages = a.fed.messages, None
    anyio.run(lambda: a.fed.remove("devbox"))
    a.fed.messages = flow
    assert a.store.outbox_rows()[0].state is O.OutboxState.PUBLISHED  # the step did not run
    a.reopen()
    assert a.fed.messages is not None
    anyio.run(a.fed.messages.tick)
    assert a.store.outbox_rows()[0].state is O.OutboxState.UNCONFIRMED
    assert a.engine.hub.outbox is not None and not H.removal_owed(a.engine.hub, pairing)


def test_messages_off_on_the_recipient_s_box_cancels_what_it_holds_and_the_sender_gets_cancelled(
    boxes: tuple[Box, Box, str],
) -> None:
    """B's person sets ``messages=off`` while B holds A's carded m-1: under %4's send lock the card is
    withdrawn and the message cancelled with its inbox record, and the final ``cancelled`` receipt goes
    to A, where the row ends cancelled. The pairing stays. A refused setting changes nothing; the tick
    after a restart between the setting's commit and the hub's step ends what is still held."""
    a, b, pairing = boxes
    _abus, key, card = _carded_on_b(a, b, pairing)
    before = (b.engine.hub, b.store.inbox_records())
    b.locks.taken.clear()
    with pytest.raises(Exception, match="messages is on or off"):
        anyio.run(lambda: b.fed.set_settings("laptop", ["messages=no"]))
    assert (b.engine.hub, b.store.inbox_records()) == before and b.locks.taken == []
    anyio.run(lambda: b.fed.set_settings("laptop", ["messages=off"]))
    assert b.locks.taken == ["%4"]
    message = b.engine.hub.messages[key]
    assert message.state is MessageState.CANCELLED and message.reason == "messages from box laptop turned off here"
    assert b.engine.hub.cards[card].state.value == "cancelled"
    assert b.store.message(*key).state is MessageState.CANCELLED  # type: ignore[union-attr]
    assert [r.state for r in b.store.inbox_records()] == [I.InboxState.CANCELLED]
    assert [p.id for p in b.fed.book.active()] == [pairing]
    run(b.fed.pump)
    (publish,) = [c for c in b.fed.pump.bus.calls if c[0] == "publish"]
    _, rsubject, receipt, _ = publish
    assert anyio.run(a.fed.received, rsubject, receipt, Delivery(rsubject, receipt, 3)) is True
    assert a.engine.hub.outbox is not None
    (row,) = a.engine.hub.outbox.rows.values()
    assert row.state is O.OutboxState.CANCELLED and "turned off" in (row.reason or "")
    # setting another key while messages are off: nothing more held, no lock taken
    b.locks.taken.clear()
    anyio.run(lambda: b.fed.set_settings("laptop", ["per_window=5"]))
    assert b.locks.taken == []


def test_messages_off_whose_hub_step_a_restart_interrupted_is_stepped_by_the_next_tick(
    boxes: tuple[Box, Box, str],
) -> None:
    a, b, pairing = boxes
    _abus, key, _card = _carded_on_b(a, b, pairing)
    flow, b.fed.messages = b.fed.messages, None
    anyio.run(lambda: b.fed.set_settings("laptop", ["messages=off"]))
    b.fed.messages = flow
    assert b.store.message(*key).state is MessageState.AWAITING_CONSENT  # type: ignore[union-attr]  # (not stepped)
    b.reopen()
    assert b.fed.messages is not None and H.messages_off_owed(b.engine.hub, pairing)
    anyio.run(b.fed.messages.tick)
    assert b.store.message(*key).state is MessageState.CANCELLED  # type: ignore[union-attr]
    assert [r.state for r in b.store.inbox_records()] == [I.InboxState.CANCELLED]
    assert not H.messages_off_owed(b.engine.hub, pairing)


def test_the_off_toggle_and_disconnect_all_answer_the_unconfirmed_cancels_as_revoke_does(
    boxes: tuple[Box, Box, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    """A pane's Off (the page's toggle) and disconnect-all are revocations: their answers name the
    messages box devbox has not yet confirmed cancelled, each for the principals it revoked; the CLI
    prints the sentence."""
    from connectd.cli import main as cli

    a, b, pairing = boxes
    _carded_on_b(a, b, pairing)  # p-1's m-1, accepted on B
    off = anyio.run(a.engine.person.set_pane_preset, "%1", Preset.OFF)
    assert off == {"pane": "%1", "connect": "off",
                   "cancels_unconfirmed": ["1 message: box devbox has not yet confirmed it is cancelled"]}
    _observe(a.engine, 1, 2)
    _launch(a, 2)
    a.pump()
    anyio.run(a.engine.step, H.RemoteSubmit(
        a.clock(), hash_token("tok-2"), "m-2", "hello", ("address", B_ADDRESS), b.fed.local.box_id, pairing,
        "devbox", a.engine.ids.new_id("msg"), bytes([6]) * 24, bus_up=True,
    ))
    answer = anyio.run(a.engine.person.disconnect_all)
    # p-2's m-2 only: p-1's cancel, also unconfirmed, was the Off toggle's answer
    assert answer == {"disconnected": 1,
                      "cancels_unconfirmed": ["1 message: box devbox has not yet confirmed it is cancelled"]}
    assert anyio.run(b.engine.person.disconnect_all) == {"disconnected": 1, "cancels_unconfirmed": []}  # nothing sent

    class Client:
        def call(self, method: str, path: str, body: Any) -> Any:
            assert (method, path) == ("POST", "/api/disconnect-all")
            return answer

    monkeypatch.setattr(cli, "_client", lambda args: Client())
    assert cli.cmd_disconnect_all(cli.argparse.Namespace(json=False)) == 0
    assert capsys.readouterr().out.splitlines() == [
        "Connect is off for every agent (1 disconnected)",
        "1 message: box devbox has not yet confirmed it is cancelled",
    ]


def test_a_sender_whose_process_ended_cancels_across_boxes_in_the_step_that_ends_its_token(
    boxes: tuple[Box, Box, str],
) -> None:
    """A's %1 ends (its pane's process gone: no revocation) while B's card for its m-1 is open: the step
    that ends its token commits A's row ``cancelling`` (and a row that never left ``cancelled``) and
    publishes the cancel; on B it is stepped under %4's send lock, the card withdrawn, and the
    ``cancelled`` receipt ends A's row ``cancelled``."""
    a, b, pairing = boxes
    abus, key, card = _carded_on_b(a, b, pairing)
    abus.connected = False  # type: ignore[attr-defined]
    anyio.run(a.engine.step, H.RemoteSubmit(
        a.clock(), hash_token("tok-1"), "m-2", "hello", ("address", B_ADDRESS), b.fed.local.box_id, pairing,
        "devbox", a.engine.ids.new_id("msg"), bytes([6]) * 24, bus_up=False,
    ))
    anyio.run(a.engine.step, H.PaneGone(a.clock(), "%1", D.incarnation_token(_incarnation(1))))
    stored = {r.identity.id: r for r in a.store.outbox_rows()}
    assert (stored["m-1"].state, stored["m-2"].state) == (O.OutboxState.CANCELLING, O.OutboxState.CANCELLED)
    assert stored["m-1"].cancel_reason == "sender no longer connected (its process ended)"
    assert a.engine.person.cancels_unconfirmed(["p-1"]) == ["1 message: box devbox has not yet confirmed it is cancelled"]
    assert a.engine.hub.book.tokens[hash_token("tok-1")].state.value != "live"
    run(a.fed.pump)
    (publish,) = [c for c in abus.calls if c[0] == "publish"]
    _, subject, wire, _ = publish
    assert subject == f"connect.{b.fed.local.box_id}.cancel.{a.fed.local.box_id}"
    b.locks.taken.clear()
    assert anyio.run(b.fed.received, subject, wire, Delivery(subject, wire, 5)) is True
    assert b.locks.taken == ["%4"]
    assert b.engine.hub.messages[key].state is MessageState.CANCELLED
    assert b.engine.hub.cards[card].state.value == "cancelled"
    run(b.fed.pump)
    (back,) = [c for c in b.fed.pump.bus.calls if c[0] == "publish"]
    _, rsubject, receipt, _ = back
    assert anyio.run(a.fed.received, rsubject, receipt, Delivery(rsubject, receipt, 6)) is True
    assert {r.identity.id: r.state for r in a.store.outbox_rows()} == {
        "m-1": O.OutboxState.CANCELLED, "m-2": O.OutboxState.CANCELLED}
    assert a.engine.person.cancels_unconfirmed(["p-1"]) == []
