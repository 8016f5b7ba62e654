"""The hub's sequencing of a remote message (connectcore.hub.federation): the recipient box's rules,
then the inbox's commit with the local message row and its card, through the same consent and delivery
path as a local message (docs/federation.md, "On the receiving box")."""

from __future__ import annotations

from typing import Any

import pytest

from connectcore import directory as D
from connectcore import hub as H
from connectcore import reads
from connectcore._machine import ConnectError
from connectcore.consent import Decision
from connectcore.delivery import MessageState
from connectcore.effects import CheckGuard, Persist, TypeText
from connectcore.federation import envelope as E
from connectcore.federation import inbox as I
from connectcore.federation import outbox as O
from connectcore.federation import remote as R
from connectcore.federation.boxes import BoxKeys
from connectcore.federation.effects import AckDelivery, PublishEnvelope, PublishReceipt
from connectcore.grants import Preset
from tests.unit.hubkit import Agent, World, actor

KA, KB = (BoxKeys(bytes([n]) * 32, bytes([n + 1]) * 32) for n in (1, 11))
A, B = KA.box_id, KB.box_id  # A sends, B (this box) receives
PAIRING = "pairing-1"
NOW = 1_796_500_000.0
N1 = bytes([1]) * 24
FP = "3f9a 12c0 77de 0b41 9c2e 5a18 d003 e6f7"
SENDER = E.Sender("p-7", "agent:claude:s-1", "claude", "%3", "0123456789abcdef")
REMOTE = R.remote_principal(A, "p-7")


def message(mid: str = "m-1", **over: Any) -> E.MessageInner:
    values: dict[str, Any] = {
        "routing": E.Routing(E.Kind.MESSAGE, A, B, pairing=PAIRING),
        "sender": SENDER,
        "id": mid,
        "created_at": NOW - 5,
        "target": ("address", "%4@51d7a9c03e6f2b18"),
        "text": "hello from box A",
        "conversation": "c-1",
        "hop": 1,
        "in_reply_to": None,
    }
    values.update(over)
    return E.MessageInner(**values)


def judged(inner: E.MessageInner, inbox: I.Inbox) -> E.Verdict:
    r = inner.routing
    outer = E.Outer(r, bytes(24), b"sealed").encode()
    facts = E.Facts(E.subject_for(r.kind, r.sender, r.to), 64 + len(outer), True, outer, E.encode_inner(inner))
    view = E.View(own=B, peers={A: E.Peer(KA, active=PAIRING, pairings=frozenset({PAIRING}))},
                  retained=inbox.retained(), now=NOW)
    return E.judge(facts, view)


@pytest.fixture
def world() -> World:
    w = World(hub=H.Hub(inbox=I.Inbox(own=B)), now=NOW)
    return w


def arrive(w: World, to: Agent, inner: E.MessageInner | None = None, **over: Any) -> tuple[Any, ...]:
    assert w.hub.inbox is not None
    inner = inner or message()
    values: dict[str, Any] = {
        "now": w.now, "verdict": judged(inner, w.hub.inbox),
        "recipient": H.Recipient(to.pane, to.incarnation, to.harness), "box_name": "laptop", "fingerprint": FP,
        "ref": w.fresh("r"), "card_id": w.fresh("card"), "nonce": N1, "delivery": "d-1",
    }
    values.update(over)
    return w.step(H.RemoteMessageArrived(**values))


def kinds(effects: tuple[Any, ...]) -> list[str]:
    return [type(e).__name__ for e in effects]


def test_a_remote_message_with_no_pair_approval_is_carded_and_not_attempted(world: World) -> None:
    to = world.launch("codex", harness="codex")
    world.idle(to)  # armed: a ready message would be attempted at once
    effects = arrive(world, to)
    row = world.hub.messages[(REMOTE, "m-1")]
    assert row.state is MessageState.AWAITING_CONSENT and row.card is not None
    card = world.hub.cards[row.card]
    assert card.sender == REMOTE and card.sender_actor == f"box:{A}/agent:claude:s-1"
    assert not any(isinstance(e, CheckGuard) for e in effects)
    # one commit (inbox record, the message row, its card), then the receipt, then the acknowledgement
    assert kinds(effects)[:3] == ["Persist", "Persist", "Persist"]
    assert [e.kind for e in effects[:3] if isinstance(e, Persist)] == [I.STORE, "message", "card"]
    receipt = next(e for e in effects if isinstance(e, PublishReceipt))
    assert receipt.inner.outcome == "accepted" and receipt.inner.card == row.card
    assert kinds(effects).index("PublishReceipt") < kinds(effects).index("AckDelivery")
    assert kinds(effects).index("PublishReceipt") > max(i for i, k in enumerate(kinds(effects)) if k == "Persist")
    assert world.hub.inbox is not None and I.may_deliver(world.hub.inbox, message().identity)
    assert row.typed.startswith("[connect] message ") and "on box laptop, 3f9a12c0" in row.typed


def test_the_card_names_the_remote_agent_by_its_box_name_and_fingerprint(world: World) -> None:
    """R7: the card carries the name this box approved the pairing under and the pinned fingerprint, and
    the person reads the agent on that box (never only ``box:<box id>/...``), as the card's words say."""
    to = world.launch("codex", harness="codex")
    arrive(world, to)
    card = world.hub.cards[world.card_of((REMOTE, "m-1"))]
    assert (card.sender_box, card.sender_fingerprint) == ("laptop", FP)
    view = reads.card_view(world.hub, D.Directory(), card, {to.pane: "main:2"})
    words = "agent:claude:s-1 on box laptop (3f9a 12c0 …)"
    assert view.sender_name == words and view.sender_pane is None
    assert view.words.approve_pair == f"Approve pair: every message from {words} to {to.pane} (main:2) until {to.pane} (main:2) ends"
    assert R.card_title(SENDER, box_name="laptop", fingerprint=FP, recipient=f"{to.pane} (main:2)").startswith(words)
    a, b = world.launch("a"), world.launch("b")
    sent = world.send(a, b)
    local = world.hub.cards[world.card_of(sent)]
    assert (local.sender_box, local.sender_fingerprint) == (None, None)  # a local sender's card: no box


def test_approving_the_card_for_the_pair_leads_to_the_usual_attempt(world: World) -> None:
    to = world.launch("codex", harness="codex")
    arrive(world, to)
    key = (REMOTE, "m-1")
    world.decide(key, Decision.APPROVE_PAIR)
    assert (REMOTE, to.incarnation) in world.hub.pairs
    effects = world.idle(to)
    assert CheckGuard(to.pane, to.incarnation, key) in effects


def test_an_approved_pair_leads_to_the_usual_attempt(world: World) -> None:
    to = world.launch("codex", harness="codex")
    world.hub = H.replace(world.hub, pairs=world.hub.pairs | {(REMOTE, to.incarnation)})
    world.idle(to)
    effects = arrive(world, to)
    key = (REMOTE, "m-1")
    assert world.hub.messages[key].state is MessageState.GUARDING
    assert world.hub.messages[key].card is None
    assert CheckGuard(to.pane, to.incarnation, key) in effects
    receipt = next(e for e in effects if isinstance(e, PublishReceipt))
    assert receipt.inner.outcome == "accepted" and receipt.inner.card is None


def test_the_pair_approval_of_another_principal_of_the_same_box_does_not_cover_it(world: World) -> None:
    to = world.launch("codex", harness="codex")
    other = R.remote_principal(A, "p-8")
    world.hub = H.replace(world.hub, pairs=world.hub.pairs | {(other, to.incarnation)})
    world.idle(to)
    effects = arrive(world, to)
    assert world.hub.messages[(REMOTE, "m-1")].state is MessageState.AWAITING_CONSENT
    assert not any(isinstance(e, CheckGuard) for e in effects)


def test_a_refused_remote_message_commits_only_the_refusal_and_receipts_it(world: World) -> None:
    to = world.launch("quiet", Preset.OFF, harness="codex")  # not reachable
    before = world.snapshot()
    effects = arrive(world, to)
    assert world.hub.messages == before.messages and world.hub.cards == before.cards
    assert world.hub.sent == before.sent and world.hub.refs == before.refs
    assert kinds(effects) == ["Persist", "Audit", "PublishReceipt", "AckDelivery"]
    receipt = next(e for e in effects if isinstance(e, PublishReceipt))
    assert receipt.inner.outcome == "refused" and receipt.inner.reason.startswith("not_reachable")
    assert effects[-1] == AckDelivery("d-1")
    assert world.hub.inbox is not None
    assert world.hub.inbox.records[message().identity].state is I.InboxState.REFUSED  # final (I4)


def test_messages_off_for_the_pairing_is_refused(world: World) -> None:
    to = world.launch("codex", harness="codex")
    effects = arrive(world, to, settings=R.PairingSettings(messages=False))
    receipt = next(e for e in effects if isinstance(e, PublishReceipt))
    assert receipt.inner.outcome == "refused" and "messages from box laptop are off" in receipt.inner.reason
    assert not world.hub.messages


def test_a_box_that_is_not_federated_refuses_the_event_loudly() -> None:
    w = World(now=NOW)
    to = w.launch("codex", harness="codex")
    with pytest.raises(ConnectError, match="not federated"):
        w.step(H.RemoteMessageArrived(
            NOW, judged(message(), I.Inbox(own=B)), H.Recipient(to.pane, to.incarnation, "codex"),
            "laptop", FP, "r-1", "card-1", N1,
        ))


def test_a_copy_of_a_held_message_is_answered_with_its_receipt_and_changes_nothing(world: World) -> None:
    to = world.launch("codex", harness="codex")
    arrive(world, to)
    assert world.hub.inbox is not None
    held = world.hub.inbox.records[message().identity]
    before = world.snapshot()
    verdict = judged(message(), world.hub.inbox)
    assert verdict.decision is E.Decision.DUPLICATE
    effects = world.step(H.RemoteSettled(NOW + 1, verdict, delivery="d-2"))
    assert world.hub.inbox.records == before.inbox.records and world.hub.messages == before.messages  # type: ignore[union-attr]
    assert kinds(effects) == ["Audit", "PublishReceipt", "AckDelivery"]
    assert effects[1] == PublishReceipt(held.receipt, held.nonce) and effects[2] == AckDelivery("d-2")


def test_a_message_whose_target_names_no_recipient_here_is_committed_refused(world: World) -> None:
    before = world.snapshot()
    assert world.hub.inbox is not None
    effects = world.step(H.RemoteSettled(NOW, judged(message(), world.hub.inbox), nonce=N1, delivery="d-1",
                                         refusal="no_pane: no live pane matches %4"))
    assert world.hub.messages == before.messages and world.hub.cards == before.cards
    record = world.hub.inbox.records[message().identity]
    assert record.state is I.InboxState.REFUSED and record.receipt.reason.startswith("no_pane")
    assert kinds(effects)[0] == "Persist" and kinds(effects)[-2:] == ["PublishReceipt", "AckDelivery"]


def test_a_refusal_without_a_nonce_or_without_an_inbox_is_a_loud_error_and_changes_nothing(world: World) -> None:
    assert world.hub.inbox is not None
    before = world.hub
    with pytest.raises(I.InboxError, match="nonce"):
        world.step(H.RemoteSettled(NOW, judged(message(), world.hub.inbox), refusal="no_pane"))
    assert world.hub is before
    with pytest.raises(ConnectError, match="not federated"):
        H.step(H.Hub(), H.RemoteSettled(NOW, judged(message(), I.Inbox(own=B)), nonce=N1, refusal="no_pane"))


def _guarded(world: World) -> tuple[Agent, tuple[str, str]]:
    """A remote message under an approved pair, its CheckGuard out."""
    to = world.launch("codex", harness="codex")
    world.hub = H.replace(world.hub, pairs=world.hub.pairs | {(REMOTE, to.incarnation)})
    world.idle(to)
    arrive(world, to)
    key = (REMOTE, "m-1")
    assert world.hub.messages[key].state is MessageState.GUARDING
    return to, key


def test_the_guard_types_a_remote_message_whose_pairing_is_active(world: World) -> None:
    """R8 in the guard: a remote principal has no token nor grant here, and the guard does not take
    that for 'sender no longer connected' (before R8 it cancelled every remote message so)."""
    to, key = _guarded(world)
    effects = world.guard(key, to)
    assert world.hub.messages[key].state is MessageState.TYPING
    assert any(isinstance(e, TypeText) and e.message == key for e in effects)


def test_the_guard_cancels_a_remote_message_whose_pairing_was_removed(world: World) -> None:
    to, key = _guarded(world)
    assert world.hub.inbox is not None
    removed, _ = I.pairing_removed(world.hub.inbox, PAIRING, now=world.now)
    world.hub = H.replace(world.hub, inbox=removed)
    world.now += 5
    effects = world.guard(key, to)
    done = world.hub.messages[key]
    assert (done.state, done.reason) == (MessageState.CANCELLED, f"pairing with box {A} removed")
    assert not any(isinstance(e, TypeText) for e in effects)
    assert done.final_at == world.now  # the outcome is stamped with the guard's time, and so is its record
    assert [e.at for e in effects if isinstance(e, H.Audit)] == [world.now]


def test_a_remote_message_whose_handle_moved_is_judged_with_no_sender_scope(world: World) -> None:
    """The reroute reads the sender's scopes: a remote sender brings none (and has no grant to read)."""
    to, key = _guarded(world)
    other = world.launch("other", harness="codex")
    moved = H.Recipient(other.pane, other.incarnation, "codex", "pr:1")
    world.hub = H.replace(world.hub, messages={**world.hub.messages, key: H.replace(world.hub.messages[key], handle="pr:1")})
    world.guard(key, to, handle=moved)
    assert world.hub.messages[key].recipient_pane == other.pane
    assert world.hub.messages[key].state is MessageState.AWAITING_CONSENT  # a new recipient needs consent


# --- the local message's final outcome: inbox.final and the final receipt (I5) --------------------


def _receipts(effects: tuple[Any, ...]) -> list[E.ReceiptInner]:
    return [e.inner for e in effects if isinstance(e, PublishReceipt)]


def test_a_remote_message_delivered_here_commits_its_final_and_receipts_it_once(world: World) -> None:
    to, key = _guarded(world)
    assert world.hub.inbox is not None
    accepted = world.hub.inbox.records[message().identity]
    world.guard(key, to)
    effects = world.typed(key)
    assert world.hub.messages[key].state is MessageState.DELIVERED
    (receipt,) = _receipts(effects)
    assert (receipt.outcome, receipt.message, receipt.routing.to) == ("delivered", message().identity, A)
    record = world.hub.inbox.records[message().identity]
    assert record.state is I.InboxState.DELIVERED and record.receipt == receipt
    assert record.nonce == I.final_nonce(accepted) != accepted.nonce and len(record.nonce) == 24
    # the inbox record is committed with the message row (one step's records), before the receipt
    persisted = [(i, e.kind) for i, e in enumerate(effects) if isinstance(e, Persist)]
    assert (I.STORE in [k for _, k in persisted]) and "message" in [k for _, k in persisted]
    assert max(i for i, _ in persisted) < kinds(effects).index("PublishReceipt")
    assert _receipts(world.tick(1.0)) == []  # once
    # a copy of the message now is answered with that final receipt, the same bytes (I3)
    inbox, again = I.receive(world.hub.inbox, judged(message(), world.hub.inbox), now=world.now)
    assert [e for e in again if isinstance(e, PublishReceipt)] == [PublishReceipt(receipt, record.nonce)]


def test_a_declined_card_receipts_declined(world: World) -> None:
    to = world.launch("codex", harness="codex")
    arrive(world, to)
    effects = world.decide((REMOTE, "m-1"), Decision.DECLINE)
    assert [r.outcome for r in _receipts(effects)] == ["declined"]
    assert world.hub.inbox is not None
    assert world.hub.inbox.records[message().identity].state is I.InboxState.DECLINED


def test_a_remote_message_cancelled_after_its_pairing_was_removed_is_not_receipted(world: World) -> None:
    """I7: the removal already cancelled the inbox record, without a receipt; the guard's cancel of
    the local row adds none."""
    to, key = _guarded(world)
    assert world.hub.inbox is not None
    removed, _ = I.pairing_removed(world.hub.inbox, PAIRING, now=world.now)
    world.hub = H.replace(world.hub, inbox=removed)
    effects = world.guard(key, to)
    assert world.hub.messages[key].state is MessageState.CANCELLED
    assert _receipts(effects) == [] and world.hub.inbox is removed


def test_a_local_message_s_outcome_touches_no_inbox(world: World) -> None:
    a = world.launch("a")
    b = world.launch("b", harness="codex")
    key = world.send(a, b)
    world.decide(key)
    effects = world.deliver(key, b)
    assert world.message(key).state is MessageState.DELIVERED
    assert _receipts(effects) == [] and not any(isinstance(e, Persist) and e.kind == I.STORE for e in effects)


# --- the sending box: a remote target admitted into the outbox, its receipts back ------------------


N2 = bytes([2]) * 24


@pytest.fixture
def sender_box() -> World:
    return World(hub=H.Hub(outbox=O.Outbox(own=A)), now=NOW)


def submit(w: World, agent: Agent, mid: str = "m-1", text: str = "hello from box A", **over: Any) -> tuple[Any, ...]:
    values: dict[str, Any] = {
        "now": w.now, "token_hash": agent.token, "message_id": mid, "text": text,
        "target": ("address", "%4@51d7a9c03e6f2b18"), "box": B, "pairing": PAIRING, "box_name": "devbox",
        "ref": w.fresh("r"), "nonce": N2, "bus_up": True,
    }
    values.update(over)
    return w.step(H.RemoteSubmit(**values))


def receipt_for(w: World, inner: E.ReceiptInner, delivery: str = "d-9") -> tuple[Any, ...]:
    """B's receipt judged on A (the view's `sent`: what A's outbox says may have left), then stepped."""
    assert w.hub.outbox is not None
    r = inner.routing
    outer = E.Outer(r, bytes(24), b"sealed").encode()
    facts = E.Facts(E.subject_for(r.kind, r.sender, r.to), 64 + len(outer), True, outer, E.encode_inner(inner))
    view = E.View(own=A, peers={B: E.Peer(KB, active=PAIRING, pairings=frozenset({PAIRING}))},
                  sent=w.hub.outbox.sent(), now=w.now)
    verdict = E.judge(facts, view)
    assert verdict.decision is E.Decision.RECEIPT, verdict
    return w.step(H.ReceiptArrived(w.now, verdict, delivery))


def test_a_message_to_a_remote_target_is_one_outbox_row_published_at_once(sender_box: World) -> None:
    w = sender_box
    me = w.launch("me")
    effects = submit(w, me)
    assert w.hub.outbox is not None and not w.hub.messages
    (row,) = w.hub.outbox.rows.values()
    assert (row.identity, row.state, row.attempt, row.to) == (E.Identity(A, me.principal, "m-1"),
                                                              O.OutboxState.PUBLISHED, 1, B)
    assert effects[-1] == PublishEnvelope(E.Kind.MESSAGE, B, PAIRING, row.identity, 1)
    # the row is committed published before its publish (O2)
    assert max(i for i, e in enumerate(effects) if isinstance(e, Persist)) < len(effects) - 1
    routing, plain, nonce = O.to_seal(row, E.Kind.MESSAGE)
    inner = E.parse_inner(plain, E.Outer(routing, nonce, b"x"))
    assert isinstance(inner, E.MessageInner)
    assert (inner.sender.principal, inner.sender.pane, inner.sender.incarnation) == (me.principal, me.pane, me.incarnation)
    assert (inner.text, inner.target, inner.hop, nonce) == ("hello from box A", ("address", "%4@51d7a9c03e6f2b18"), 1, N2)


def test_an_admitted_remote_send_is_audited_under_the_sending_agent_s_actor(sender_box: World) -> None:
    """The call's own record names who made it, as a local send's (and a refused remote send's) does:
    ``send_message`` ``queued`` under the agent's actor, its message id and the qualified target, beside
    the outbox's record carrying the identity. Before, an admitted send to another box was audited only
    as ``connectd federation.outbox``: ``connectd audit`` by the agent's actor missed it (the live
    two-box acceptance found it)."""
    w = sender_box
    me = w.launch("me")
    effects = submit(w, me)
    audits = [(e.actor, e.action, e.outcome, e.target, e.message_id) for e in effects if isinstance(e, H.Audit)]
    assert ("connectd", O.ACTION, "queued", B, str(E.Identity(A, me.principal, "m-1"))) in audits, audits
    assert (actor(w, me), "send_message", "queued", "%4@51d7a9c03e6f2b18@devbox", "m-1") in audits, audits
    assert effects[-1] == PublishEnvelope(E.Kind.MESSAGE, B, PAIRING, E.Identity(A, me.principal, "m-1"), 1)


def test_with_the_bus_down_the_row_waits_queued(sender_box: World) -> None:
    w = sender_box
    effects = submit(w, w.launch("me"), bus_up=False)
    assert w.hub.outbox is not None
    assert [r.state for r in w.hub.outbox.rows.values()] == [O.OutboxState.QUEUED]
    assert not any(isinstance(e, PublishEnvelope) for e in effects)


def test_the_sender_box_s_own_rules_refuse_before_admission_and_store_nothing(sender_box: World) -> None:
    w = sender_box
    me = w.launch("me")
    quiet = w.launch("quiet", Preset.OFF)
    limit = w.hub.limits.max_message_bytes - O.PROVENANCE_ALLOWANCE
    submit(w, me, "m-1")
    local = w.launch("local", harness="codex")
    for agent, mid, text, reason in (
        (quiet, "m-2", "hi", "not_connected"),  # Off: the gate
        (me, "m-1", "hi", "duplicate_id"),  # the id again
        (me, "m-3", "x" * (limit + 1), "too_large"),  # with the recipient's provenance allowance
        (me, "bad id!", "hi", "bad_message_id"),
    ):
        before = w.snapshot()
        with pytest.raises(H.CallRefused) as refused:
            submit(w, agent, mid, text)
        assert refused.value.reason == reason
        assert w.hub.outbox == before.outbox and w.hub.sent == before.sent and w.hub.pair_sent == before.pair_sent
    submit(w, me, "m-4", "x" * limit)  # exactly at the cap: admitted
    with pytest.raises(H.CallRefused, match="already used") as reused:  # a local message cannot reuse a remote id
        w.send(me, local, message_id="m-1")
    assert reused.value.reason == "duplicate_id" and str(reused.value).endswith("(sent to another box)")


def test_receipts_move_the_row_and_wake_the_sender_and_the_final_is_the_receiver_s(sender_box: World) -> None:
    w = sender_box
    me = w.launch("me")
    submit(w, me)
    assert w.hub.outbox is not None
    (row,) = w.hub.outbox.rows.values()

    def receipt(outcome: str, card: str | None = None) -> E.ReceiptInner:
        return E.ReceiptInner(E.Routing(E.Kind.RECEIPT, B, A, pairing=PAIRING), row.identity, row.digest, outcome,
                              "awaiting_consent" if outcome == "accepted" else "delivered", w.now,
                              ("agent:codex:x", "%4"), card)

    effects = receipt_for(w, receipt("accepted", "card-7"))
    assert w.hub.outbox.rows[row.identity].state is O.OutboxState.ACCEPTED
    woken = [e for e in effects if isinstance(e, H.Notify)]
    assert [(n.principal, n.payload["outcome"]) for n in woken] == [(me.principal, "queued")]
    assert effects[-1] == AckDelivery("d-9")
    effects = receipt_for(w, receipt("delivered"))
    assert w.hub.outbox.rows[row.identity].state is O.OutboxState.DELIVERED
    woken = [e for e in effects if isinstance(e, H.Notify)]
    assert [(n.principal, n.key, n.payload["outcome"]) for n in woken] == [(me.principal, (me.principal, "m-1"), "delivered")]
    effects = receipt_for(w, receipt("declined"))  # contradicting the final: audited, nothing changes
    assert w.hub.outbox.rows[row.identity].state is O.OutboxState.DELIVERED
    assert [e.outcome for e in effects if isinstance(e, H.Audit)] == ["late receipt"]


def test_a_message_to_another_box_that_ends_is_audited_under_the_sending_agent_s_actor(sender_box: World) -> None:
    """Claim: when a message to another box ends (the other box's final receipt, a cancel, the
    deadline), its final outcome is recorded under the sending agent's actor (``send_message``, the
    outcome, the message id; the target with the box's id), as a local message's is; an interim
    receipt adds none. (Before: only ``connectd federation.outbox`` recorded it.)"""
    w = sender_box
    me = w.launch("me")
    submit(w, me)
    assert w.hub.outbox is not None
    (row,) = w.hub.outbox.rows.values()

    def receipt(outcome: str) -> E.ReceiptInner:
        return E.ReceiptInner(E.Routing(E.Kind.RECEIPT, B, A, pairing=PAIRING), row.identity, row.digest, outcome,
                              "typed", w.now, ("agent:codex:x", "%4"), None)

    def mine(effects: tuple[Any, ...]) -> list[tuple[str, str, str, str | None]]:
        return [(e.outcome, e.target, e.message_id or "", e.detail) for e in effects
                if isinstance(e, H.Audit) and e.actor == actor(w, me) and e.action == "send_message"]

    assert mine(receipt_for(w, receipt("accepted"))) == []
    assert mine(receipt_for(w, receipt("delivered"))) == [("delivered", f"%4@51d7a9c03e6f2b18@{B}", "m-1", "typed")]
    assert mine(receipt_for(w, receipt("delivered"))) == []  # a copy: nothing new


def test_two_boxes_end_to_end_in_the_core_delivered_once_and_the_sender_told(sender_box: World, world: World) -> None:
    """A's outbox row, as B's inbox judges and accepts it, typed under an approved pair, delivered; B's
    final receipt judged on A moves the row to delivered."""
    a_box, b_box = sender_box, world
    me = a_box.launch("me")
    to = b_box.launch("codex", harness="codex")
    submit(a_box, me)
    assert a_box.hub.outbox is not None
    (row,) = a_box.hub.outbox.rows.values()
    routing, plain, nonce = O.to_seal(row, E.Kind.MESSAGE)
    inner = E.parse_inner(plain, E.Outer(routing, nonce, b"x"))
    assert isinstance(inner, E.MessageInner)
    remote = R.remote_principal(A, me.principal)
    b_box.hub = H.replace(b_box.hub, pairs=b_box.hub.pairs | {(remote, to.incarnation)})
    b_box.idle(to)
    effects = arrive(b_box, to, inner)
    key = (remote, "m-1")
    effects += b_box.guard(key, to)
    effects += b_box.typed(key)
    receipts = [e.inner for e in effects if isinstance(e, PublishReceipt)]
    assert [r.outcome for r in receipts] == ["accepted", "delivered"]
    for r in receipts:
        receipt_for(a_box, r)
    assert a_box.hub.outbox.rows[row.identity].state is O.OutboxState.DELIVERED


def test_the_federation_tick_runs_the_outbox_schedule_and_the_inbox_retention(sender_box: World) -> None:
    w = sender_box
    me = w.launch("me")
    submit(w, me, bus_up=False)
    assert w.hub.outbox is not None
    (row,) = w.hub.outbox.rows.values()
    effects = w.step(H.FederationTick(w.now, bus_up=True))
    assert [e for e in effects if isinstance(e, PublishEnvelope)] == [
        PublishEnvelope(E.Kind.MESSAGE, B, PAIRING, row.identity, 1)]
    w.now += 5 * 60  # due again, but B was never heard: no new attempt (O5)
    assert not any(isinstance(e, PublishEnvelope) for e in w.step(H.FederationTick(w.now, bus_up=True)))
    effects = w.step(H.FederationTick(w.now, bus_up=True, heard=((B, w.now - 1),)))
    assert [e.attempt for e in effects if isinstance(e, PublishEnvelope)] == [2]
    w.now = O.deadline(w.hub.outbox.rows[row.identity])
    effects = w.step(H.FederationTick(w.now, bus_up=True))
    assert w.hub.outbox.rows[row.identity].state is O.OutboxState.UNCONFIRMED  # left, never answered
    assert [(n.principal, n.payload["outcome"]) for n in effects if isinstance(n, H.Notify)] == [
        (me.principal, "unconfirmed")]


def test_the_federation_tick_deletes_inbox_records_past_the_retention(world: World) -> None:
    to = world.launch("quiet", Preset.OFF)
    arrive(world, to)  # refused: an inbox record only
    assert world.hub.inbox is not None and len(world.hub.inbox.records) == 1
    world.step(H.FederationTick(world.now + 60))
    assert len(world.hub.inbox.records) == 1
    effects = world.step(H.FederationTick(message().created_at + world.hub.inbox.retention + 1))
    assert world.hub.inbox.records == {}
    assert [e for e in effects if isinstance(e, Persist)] == [Persist(I.STORE, (message().identity,), None)]


def test_a_box_that_does_not_federate_ticks_nothing() -> None:
    w = World(now=NOW)
    assert w.step(H.FederationTick(NOW, bus_up=True)) == ()


# --- cancels across boxes (docs/federation.md, "Revocation across boxes") ----------------------------


def _rows(w: World) -> dict[str, O.Row]:
    assert w.hub.outbox is not None
    return {r.identity.id: r for r in w.hub.outbox.rows.values()}


def _publishes(effects: tuple[Any, ...]) -> list[PublishEnvelope]:
    return [e for e in effects if isinstance(e, PublishEnvelope)]


def test_revoking_a_sender_cancels_its_rows_and_publishes_a_cancel_for_each_that_left(sender_box: World) -> None:
    """O7 through the hub's revoke: its queued row cancelled (it never left), the rows that left
    cancelling, each with its cancel published after the commit; another sender's row untouched. The
    cancel's nonce is the core's (``outbox.cancel_nonce``, from the row's own), so no event carries one."""
    w = sender_box
    me, other = w.launch("me"), w.launch("other")
    submit(w, me, "m-1")  # published
    submit(w, me, "m-2", bus_up=False)  # queued
    submit(w, other, "m-3")
    effects = w.step(H.Revoke(w.now, me.principal))
    rows = _rows(w)
    assert [rows[m].state for m in ("m-1", "m-2", "m-3")] == [
        O.OutboxState.CANCELLING, O.OutboxState.CANCELLED, O.OutboxState.PUBLISHED]
    m1 = rows["m-1"]
    assert _publishes(effects) == [PublishEnvelope(E.Kind.CANCEL, B, PAIRING, m1.identity, 1)]
    persisted = [i for i, e in enumerate(effects) if isinstance(e, Persist) and e.kind == O.STORE]
    assert len(persisted) == 2  # both rows, and m-1's committed cancelling before its cancel is published
    assert effects.index(Persist(O.STORE, (m1.identity,), m1)) < effects.index(_publishes(effects)[0])
    assert m1.cancel_nonce == O.cancel_nonce(m1) and m1.cancel_nonce != m1.nonce and len(m1.cancel_nonce) == 24
    routing, plain, nonce = O.to_seal(m1, E.Kind.CANCEL)
    cancel = E.parse_inner(plain, E.Outer(routing, nonce, b"x"))
    assert isinstance(cancel, E.CancelInner) and (cancel.message, cancel.digest) == (m1.identity, m1.digest)
    woken = sorted((n.key, n.payload["outcome"]) for n in effects if isinstance(n, H.Notify) and n.topic == O.TOPIC)
    assert woken == [((me.principal, "m-1"), "queued"), ((me.principal, "m-2"), "cancelled")]
    assert H.cancels_unconfirmed(w.hub, [me.principal]) == {B: 1}
    assert H.cancels_unconfirmed(w.hub, [other.principal]) == {}


def test_cancel_receipts_move_the_cancelling_rows_to_the_other_box_s_outcome(sender_box: World) -> None:
    w = sender_box
    me = w.launch("me")
    submit(w, me, "m-1")
    submit(w, me, "m-2")
    w.step(H.Revoke(w.now, me.principal))
    rows = _rows(w)

    def receipt(row: O.Row, outcome: str) -> E.ReceiptInner:
        return E.ReceiptInner(E.Routing(E.Kind.RECEIPT, B, A, pairing=PAIRING), row.identity, row.digest, outcome,
                              outcome, w.now, ("agent:codex:x", "%4"), None)

    receipt_for(w, receipt(rows["m-1"], "cancelled"))
    assert H.cancels_unconfirmed(w.hub, [me.principal]) == {B: 1}
    receipt_for(w, receipt(rows["m-2"], "delivered"))  # typing had started over there: its real outcome
    rows = _rows(w)
    assert (rows["m-1"].state, rows["m-2"].state) == (O.OutboxState.CANCELLED, O.OutboxState.DELIVERED)
    assert H.cancels_unconfirmed(w.hub, [me.principal]) == {}


def test_disconnect_all_and_a_revoked_pane_cancel_across_boxes_too(sender_box: World) -> None:
    w = sender_box
    me, other = w.launch("me"), w.launch("other")
    submit(w, me, "m-1")
    w.step(H.RevokePane(w.now, me.pane, me.incarnation))
    assert _rows(w)["m-1"].state is O.OutboxState.CANCELLING
    submit(w, other, "m-2")
    effects = w.step(H.DisconnectAll(w.now))
    assert _rows(w)["m-2"].state is O.OutboxState.CANCELLING
    assert [p.identity.id for p in _publishes(effects)] == ["m-2"]  # m-1's cancel is not published twice


def test_a_revoke_the_core_refuses_sends_no_cancel_and_changes_nothing(sender_box: World) -> None:
    w = sender_box
    submit(w, w.launch("me"), "m-1")
    before = w.snapshot()
    with pytest.raises(H.UnknownItem):
        w.step(H.Revoke(w.now, "p-nobody"))
    assert w.hub == before


def _cancel(w: World, inner: E.MessageInner | None = None, delivery: str = "d-2") -> tuple[Any, ...]:
    """A's cancel of ``inner`` judged on B, stepped as the daemon steps it (under the send lock)."""
    assert w.hub.inbox is not None
    inner = inner or message()
    cancel = E.CancelInner(E.Routing(E.Kind.CANCEL, A, B, pairing=PAIRING), inner.identity,
                           E.digest_of(E.encode_inner(inner)), inner.created_at, "sender revoked", w.now)
    verdict = judged(cancel, w.hub.inbox)  # type: ignore[arg-type]
    assert verdict.decision is E.Decision.CANCEL, verdict
    return w.step(H.RemoteCancelArrived(w.now, verdict, delivery))


def test_a_cancel_of_a_carded_message_withdraws_the_card_and_receipts_cancelled_once(world: World) -> None:
    to = world.launch("codex", harness="codex")
    arrive(world, to)
    key = (REMOTE, "m-1")
    card = world.card_of(key)
    assert world.hub.inbox is not None
    accepted = world.hub.inbox.records[message().identity]
    assert H.cancel_panes(world.hub, message().identity) == (to.pane,)
    effects = _cancel(world)
    done = world.hub.messages[key]
    assert done.state is MessageState.CANCELLED and "box" in done.reason
    assert world.hub.cards[card].state is H.CardState.CANCELLED  # withdrawn from Needs you
    record = world.hub.inbox.records[message().identity]
    assert record.state is I.InboxState.CANCELLED
    (receipt,) = _receipts(effects)
    assert (receipt.outcome, receipt.message) == ("cancelled", message().identity)
    assert record.nonce == I.final_nonce(accepted)
    # the local row and the inbox record in the step's one commit, then the receipt, then the ack
    stored = [e.kind for e in effects if isinstance(e, Persist)]
    assert "message" in stored and I.STORE in stored and "card" in stored
    last_persist = max(i for i, e in enumerate(effects) if isinstance(e, Persist))
    assert last_persist < kinds(effects).index("PublishReceipt") < kinds(effects).index("AckDelivery")
    assert effects[-1] == AckDelivery("d-2")
    assert H.cancel_panes(world.hub, message().identity) == ()
    # a copy of the cancel: answered with the same final receipt, nothing changes
    before = world.snapshot()
    again = _cancel(world, delivery="d-3")
    assert world.hub == before
    assert [e for e in again if isinstance(e, PublishReceipt)] == [PublishReceipt(record.receipt, record.nonce)]
    assert again[-1] == AckDelivery("d-3")


def test_a_cancel_after_typing_started_changes_nothing_and_the_real_outcome_is_receipted(world: World) -> None:
    to, key = _guarded(world)
    world.guard(key, to)
    assert world.hub.messages[key].state is MessageState.TYPING
    before = world.snapshot()
    effects = _cancel(world)
    assert world.hub.messages == before.messages and world.hub.inbox == before.inbox
    assert _receipts(effects) == [] and effects[-1] == AckDelivery("d-2")
    assert [e.detail for e in effects if isinstance(e, H.Audit)] == [
        "cancel arrived after typing started: the real outcome follows"]
    effects = world.typed(key)
    assert [r.outcome for r in _receipts(effects)] == ["delivered"]


def test_a_cancel_of_a_message_whose_guard_is_out_cancels_it_and_the_guard_then_types_nothing(world: World) -> None:
    to, key = _guarded(world)
    effects = _cancel(world)
    assert world.hub.messages[key].state is MessageState.CANCELLED
    assert [r.outcome for r in _receipts(effects)] == ["cancelled"]
    effects = world.guard(key, to)
    assert not any(isinstance(e, TypeText) for e in effects) and _receipts(effects) == []


def test_a_cancel_the_core_refuses_changes_nothing(world: World) -> None:
    to = world.launch("codex", harness="codex")
    arrive(world, to)
    assert world.hub.inbox is not None
    before = world.snapshot()
    new = judged(message("m-2"), world.hub.inbox)  # a new message is no cancel
    with pytest.raises(I.InboxError, match="not a cancel"):
        world.step(H.RemoteCancelArrived(world.now, new))
    assert world.hub == before
    with pytest.raises(ConnectError, match="not federated"):
        H.step(H.Hub(), H.RemoteCancelArrived(NOW, new))


def test_revoking_the_recipient_here_sends_the_remote_sender_the_final_cancelled_receipt(world: World) -> None:
    """On the recipient's box a revocation is linearized with delivery as a local one; its remote
    sender learns the outcome by the final receipt (finals_receipted), once."""
    to = world.launch("codex", harness="codex")
    arrive(world, to)
    effects = world.step(H.Revoke(world.now, to.principal))
    assert world.hub.messages[(REMOTE, "m-1")].state is MessageState.CANCELLED
    (receipt,) = _receipts(effects)
    assert (receipt.outcome, receipt.routing.to) == ("cancelled", A)
    assert world.hub.inbox is not None
    assert world.hub.inbox.records[message().identity].state is I.InboxState.CANCELLED


def test_removing_the_pairing_here_cancels_what_it_holds_not_typing_without_a_receipt(world: World) -> None:
    """I7 through the hub: a carded message from the pairing cancelled with its card withdrawn and its
    audit record, one whose typing started left to its outcome, no receipt; then nothing more is
    accepted from that pairing. And the outbox's rows across it (O8) in the same step."""
    to, typing_key = _guarded(world)
    world.guard(typing_key, to)
    carded = world.launch("carded", harness="codex")
    arrive(world, carded, message("m-2"))
    key = (REMOTE, "m-2")
    card = world.card_of(key)
    assert H.pairing_panes(world.hub, PAIRING) == tuple(sorted({to.pane, carded.pane}))
    effects = world.step(H.PairingRemoved(world.now, PAIRING, "laptop"))
    assert world.hub.messages[key].state is MessageState.CANCELLED
    assert world.hub.cards[card].state is H.CardState.CANCELLED
    assert world.hub.messages[typing_key].state is MessageState.TYPING
    assert _receipts(effects) == [] and not any(isinstance(e, PublishEnvelope) for e in effects)
    assert world.hub.inbox is not None and PAIRING in world.hub.inbox.removed
    assert world.hub.inbox.records[message("m-2").identity].state is I.InboxState.CANCELLED
    assert any(isinstance(e, H.Audit) and e.detail == "pairing removed" for e in effects)
    assert _receipts(world.typed(typing_key)) == []  # its outcome is committed, never receipted
    before = world.snapshot()
    with pytest.raises(I.InboxError, match="removed"):
        arrive(world, carded, message("m-3"))
    assert world.hub == before


def test_removing_the_pairing_on_the_sending_box_ends_its_rows_across_it(sender_box: World) -> None:
    w = sender_box
    me = w.launch("me")
    submit(w, me, "m-1")  # left
    submit(w, me, "m-2", bus_up=False)  # never left
    effects = w.step(H.PairingRemoved(w.now, PAIRING, "devbox"))
    rows = _rows(w)
    assert (rows["m-1"].state, rows["m-2"].state) == (O.OutboxState.UNCONFIRMED, O.OutboxState.CANCELLED)
    assert rows["m-1"].reason == "pairing removed before box devbox answered"
    assert not _publishes(effects)
    woken = sorted((n.key[1], n.payload["outcome"]) for n in effects if isinstance(n, H.Notify))
    assert woken == [("m-1", "unconfirmed"), ("m-2", "cancelled")]
    assert not _publishes(w.step(H.FederationTick(w.now + 3600, bus_up=True, heard=((B, w.now + 3599),))))


def test_removing_a_pairing_on_a_box_that_does_not_federate_is_refused_loudly() -> None:
    with pytest.raises(ConnectError, match="not federated"):
        H.step(H.Hub(), H.PairingRemoved(NOW, PAIRING, "laptop"))


def test_a_removal_is_owed_while_something_across_the_pairing_is_open_and_not_after_its_step(
    world: World, sender_box: World,
) -> None:
    """The book's removal and the hub's step are two commits: the daemon asks ``removal_owed`` of each
    removed pairing, so a restart between them still ends what is queued across it."""
    to, typing_key = _guarded(world)
    world.guard(typing_key, to)
    assert not H.removal_owed(world.hub, PAIRING)  # only a message whose typing started: nothing to end
    carded = world.launch("carded", harness="codex")
    arrive(world, carded, message("m-2"))
    assert H.removal_owed(world.hub, PAIRING) and not H.removal_owed(world.hub, "pairing-2")
    world.step(H.PairingRemoved(world.now, PAIRING, "laptop"))
    assert not H.removal_owed(world.hub, PAIRING)
    w = sender_box
    submit(w, w.launch("me"), "m-1")
    assert H.removal_owed(w.hub, PAIRING)
    w.step(H.PairingRemoved(w.now, PAIRING, "devbox"))
    assert not H.removal_owed(w.hub, PAIRING)


def test_which_step_a_pairing_of_the_book_still_owes_the_hub(world: World) -> None:
    """The daemon's tick (and ``pair set messages=off``) steps only what ``pairing_step_owed`` names:
    a removed pairing with something across it still open owes ``PairingRemoved``; an active one whose
    messages are off and that holds messages not typing owes ``MessagesOff``; one never active, one
    with its messages on, or one with nothing open owes nothing (was decided in connectd/federation/flow.py)."""
    from dataclasses import replace

    from connectcore.federation import pairing as P

    active = P.Pairing("inv1", P.Role.INVITER, A, KA, "laptop", P.PairingState.ACTIVE, NOW, id=PAIRING)
    off = replace(active, settings=replace(active.settings, messages=False))
    removed = replace(active, state=P.PairingState.REMOVED)
    assert [H.pairing_step_owed(world.hub, p) for p in (active, off, removed)] == [None, None, None]  # nothing open
    carded = world.launch("carded", harness="codex")
    arrive(world, carded, message("m-2"))  # held, not typing
    assert H.pairing_step_owed(world.hub, active) is None  # messages on
    assert H.pairing_step_owed(world.hub, off) is H.OwedStep.MESSAGES_OFF
    assert H.pairing_step_owed(world.hub, removed) is H.OwedStep.REMOVAL
    assert H.pairing_step_owed(world.hub, replace(removed, settings=off.settings)) is H.OwedStep.REMOVAL
    never = replace(off, id=None, state=P.PairingState.REQUESTED)
    assert H.pairing_step_owed(world.hub, never) is None
    assert H.pairing_step_owed(world.hub, replace(off, state=P.PairingState.REQUESTED)) is None
    assert H.pairing_step_owed(world.hub, replace(off, id="pairing-2")) is None  # nothing across that one
    world.step(H.MessagesOff(world.now, PAIRING, "laptop"))
    assert H.pairing_step_owed(world.hub, off) is None  # stepped: owed no more


# --- messages=off while messages from that box are held here -------------------------------------


def test_messages_off_cancels_what_the_pairing_holds_not_typing_and_receipts_each_cancelled(world: World) -> None:
    """"Revocation across boxes": setting the pairing's ``messages`` off takes the affected panes' send
    locks (:func:`pairing_panes`) and cancels what is not typing yet, as a revocation; each remote sender
    gets its final ``cancelled`` receipt (finals_receipted), once; one whose typing started keeps going
    and its real outcome is receipted. The pairing stays."""
    to, typing_key = _guarded(world)
    world.guard(typing_key, to)  # typing started
    carded = world.launch("carded", harness="codex")
    arrive(world, carded, message("m-2"))
    guarded = world.launch("guarded", harness="codex")
    world.hub = H.replace(world.hub, pairs=world.hub.pairs | {(REMOTE, guarded.incarnation)})
    world.idle(guarded)
    arrive(world, guarded, message("m-3"))
    key2, key3 = (REMOTE, "m-2"), (REMOTE, "m-3")
    assert world.hub.messages[key3].state is MessageState.GUARDING
    card = world.card_of(key2)
    assert H.pairing_panes(world.hub, PAIRING) == tuple(sorted({to.pane, carded.pane, guarded.pane}))
    assert H.messages_off_owed(world.hub, PAIRING) and not H.messages_off_owed(world.hub, "pairing-2")
    effects = world.step(H.MessagesOff(world.now, PAIRING, "laptop"))
    for key in (key2, key3):
        done = world.hub.messages[key]
        assert done.state is MessageState.CANCELLED and done.reason == "messages from box laptop turned off here"
    assert world.hub.cards[card].state is H.CardState.CANCELLED  # withdrawn from Needs you
    assert world.hub.messages[typing_key].state is MessageState.TYPING
    receipts = _receipts(effects)
    assert sorted((r.message.id, r.outcome) for r in receipts) == [("m-2", "cancelled"), ("m-3", "cancelled")]
    assert all(r.routing.to == A for r in receipts)
    assert world.hub.inbox is not None and PAIRING not in world.hub.inbox.removed
    assert world.hub.inbox.records[message("m-2").identity].state is I.InboxState.CANCELLED
    assert world.hub.inbox.records[message("m-1").identity].state is I.InboxState.ACCEPTED
    assert not H.messages_off_owed(world.hub, PAIRING)
    # the guard out for m-3 then types nothing; again changes nothing
    assert not any(isinstance(e, TypeText) for e in world.guard(key3, guarded))
    before = world.snapshot()
    assert world.step(H.MessagesOff(world.now, PAIRING, "laptop")) == ()
    assert world.hub == before
    # the typing message's real outcome is receipted
    assert [r.outcome for r in _receipts(world.typed(typing_key))] == ["delivered"]


def test_messages_off_on_a_box_that_does_not_federate_is_refused_loudly_and_changes_nothing() -> None:
    with pytest.raises(ConnectError, match="not federated"):
        H.step(H.Hub(), H.MessagesOff(NOW, PAIRING, "laptop"))


# --- a sender whose process ended ------------------------------------------------------------------


def test_a_sender_whose_process_ended_has_its_rows_cancelled_in_the_step_that_ends_its_token(
    sender_box: World,
) -> None:
    """As the local rule (its queued local messages are cancelled at the guard, "sender no longer
    connected"): the step that ends a sender's last live token (its pane gone, no revocation) cancels
    what it sent to other boxes, as a revocation does: never left ``cancelled``, left ``cancelling``
    with its cancel published; another sender's row untouched; the revocation's count names it."""
    w = sender_box
    me, other = w.launch("me"), w.launch("other")
    submit(w, me, "m-1")  # published
    submit(w, me, "m-2", bus_up=False)  # queued
    submit(w, other, "m-3")
    effects = w.step(H.PaneGone(w.now, me.pane, me.incarnation))
    rows = _rows(w)
    assert [rows[m].state for m in ("m-1", "m-2", "m-3")] == [
        O.OutboxState.CANCELLING, O.OutboxState.CANCELLED, O.OutboxState.PUBLISHED]
    assert rows["m-1"].cancel_reason == "sender no longer connected (its process ended)"
    assert _publishes(effects) == [PublishEnvelope(E.Kind.CANCEL, B, PAIRING, rows["m-1"].identity, 1)]
    token_ended = next(i for i, e in enumerate(effects) if isinstance(e, Persist) and e.kind == "token")
    assert token_ended < effects.index(_publishes(effects)[0])  # one step: the token's end committed with it
    assert H.cancels_unconfirmed(w.hub, [me.principal]) == {B: 1}
    # the same pane gone again (Reconcile after a restart): nothing more
    before = w.snapshot()
    assert not _publishes(w.step(H.PaneGone(w.now, me.pane, me.incarnation)))
    assert _rows(w) == _rows(World(hub=before))


def test_a_sender_with_another_live_token_keeps_its_rows_until_its_last_process_ends(sender_box: World) -> None:
    """The local guard asks whether the sender's group still holds a live token; so does this."""
    w = sender_box
    first = w.launch("first", session=("claude", "s-1"))
    second = w.launch("second", session=("claude", "s-1"), pane="%9")
    assert H.grants.group(w.hub.book, first.principal) == H.grants.group(w.hub.book, second.principal)
    submit(w, first, "m-1")
    assert not _publishes(w.step(H.PaneGone(w.now, first.pane, first.incarnation)))
    assert _rows(w)["m-1"].state is O.OutboxState.PUBLISHED
    effects = w.step(H.PaneGone(w.now, second.pane, second.incarnation))
    assert _rows(w)["m-1"].state is O.OutboxState.CANCELLING and len(_publishes(effects)) == 1


# --- liveness: a pane whose ready reading was dropped as older (issue 25, the ten-daemon stall) ------


def test_a_pane_whose_idle_reading_lost_the_race_to_a_busy_confirmation_is_looked_at_again(world: World) -> None:
    """The ten-daemon benchmark's stall: under load the watcher stamped its reading (ready, the idle
    screen after the turn) before its capture ran, the confirmation stamped its busy reading later,
    so the hub took the watcher's as the older and dropped it (an older reading never overwrites a
    newer one) while the watcher, having told it, never told that unchanged screen again. The hub's
    newest reading stayed busy, so the quiet rule (ready readings only) never re-armed the pane and
    the remote messages behind it stayed ``ready`` for good. With a message waiting, the quiet rule
    has the guard look afresh; the guard's own reading then arms the pane and the next one is typed."""
    to = world.launch("codex", harness="codex")
    world.hub = H.replace(world.hub, pairs=world.hub.pairs | {(REMOTE, to.incarnation)})
    world.idle(to)
    arrive(world, to, message("m-1"))
    arrive(world, to, message("m-2"), ref=world.fresh("r"), card_id=world.fresh("card"), delivery="d-2")
    first, second = (REMOTE, "m-1"), (REMOTE, "m-2")
    world.guard(first, to)
    assert world.hub.messages[first].state is MessageState.TYPING
    world.now += 0.3
    # the confirmation's reading, stamped at now: the turn has begun (busy)
    world.typed(first, fingerprint="fp-turn", busy=True)
    assert world.hub.messages[first].state is MessageState.DELIVERED
    # the watcher's reading of the idle screen after the turn, stamped just before the confirmation's
    assert world.idle(to, fingerprint="fp-after", read_at=world.now - 0.01) == ()
    assert world.hub.messages[second].state is MessageState.READY
    checks: list[CheckGuard] = []
    for _ in range(30):  # 300 s of ticks and no new reading (the screen does not change again)
        checks += [e for e in world.tick(10.0) if isinstance(e, CheckGuard)]
        if checks:
            break
    assert [c.message for c in checks] == [second], "the pane was never looked at again: delivery stalled"
    # the guard's fresh reading differs from the busy one the hub held: nothing typed, it waits ...
    effects = world.guard(second, to, fingerprint="fp-after")
    assert not any(isinstance(e, TypeText) for e in effects)
    assert world.hub.messages[second].state is MessageState.READY
    # ... and that reading, reported as the pane's next (guard_reading_counts), arms it: typed once
    assert H.guard_reading_counts(world.hub, second)
    again = world.idle(to, fingerprint="fp-after")
    assert [e.message for e in again if isinstance(e, CheckGuard)] == [second]
    world.guard(second, to, fingerprint="fp-after")
    assert world.hub.messages[second].state is MessageState.TYPING


def test_in_flight_counts_what_is_open_across_a_pairing_each_way(world: World, sender_box: World) -> None:
    """Claim: ``in_flight`` (``pair list``, ``pair remove``'s question) counts the outbox rows to the
    pairing's box not final and the messages from it accepted here not final; nothing of another
    pairing, nothing once they end."""
    assert H.in_flight(world.hub, PAIRING) == H.InFlight(0, 0)
    carded = world.launch("carded", harness="codex")
    arrive(world, carded, message("m-1"))
    arrive(world, carded, message("m-2"))
    assert H.in_flight(world.hub, PAIRING) == H.InFlight(0, 2) and H.in_flight(world.hub, "pairing-2") == H.InFlight(0, 0)
    world.step(H.PairingRemoved(world.now, PAIRING, "laptop"))
    assert H.in_flight(world.hub, PAIRING) == H.InFlight(0, 0)
    w = sender_box
    submit(w, w.launch("me"), "m-1")
    submit(w, w.launch("me2"), "m-2", bus_up=False)
    assert H.in_flight(w.hub, PAIRING) == H.InFlight(2, 0)
    w.step(H.PairingRemoved(w.now, PAIRING, "devbox"))
    assert H.in_flight(w.hub, PAIRING) == H.InFlight(0, 0)
    assert H.in_flight(H.Hub(), PAIRING) == H.InFlight(0, 0), "a box that does not federate"
