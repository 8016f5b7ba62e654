"""The outbox (connectcore.federation.outbox): each transition of its table, the schedule over ``now``,
the receipts it takes and those that change nothing, every refusal changing nothing, the deadline's
``unconfirmed`` (never ``expired`` for a row that left), cancels and pairing removal, and the loud error
for an event the table does not allow (docs/federation.md, "On the sender's box: the outbox")."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from connectcore._machine import TransitionNotAllowed
from connectcore.effects import Audit, Notify, Persist
from connectcore.federation import envelope as E
from connectcore.federation import outbox as O
from connectcore.federation.boxes import BoxKeys
from connectcore.federation.effects import AckDelivery, PublishEnvelope

KA, KB = (BoxKeys(bytes([n]) * 32, bytes([n + 1]) * 32) for n in (1, 11))
A, B = KA.box_id, KB.box_id  # A (this box) sends, B receives
PAIRING = "pairing-1"
T0 = 1_796_500_000.0
NONCE, CANCEL_NONCE = bytes(range(24)), bytes(range(1, 25))
S = O.DEFAULT_SETTINGS
OS = O.OutboxState


def message(mid: str = "m-1", principal: str = "p-7", created: float = T0, **over: Any) -> E.MessageInner:
    values: dict[str, Any] = {
        "routing": E.Routing(E.Kind.MESSAGE, A, B, pairing=PAIRING),
        "sender": E.Sender(principal, "agent:claude:s-1", "claude", "%3", "0123456789abcdef"),
        "id": mid,
        "created_at": created,
        "target": ("address", "%4@51d7a9c03e6f2b18"),
        "text": "hello from box A",
        "conversation": "c-1",
        "hop": 1,
        "in_reply_to": None,
    }
    values.update(over)
    return E.MessageInner(**values)


ID1 = message().identity


def receipt_for(row: O.Row, outcome: str, reason: str = "", card: str | None = None, **over: Any) -> E.ReceiptInner:
    values: dict[str, Any] = {
        "routing": E.Routing(E.Kind.RECEIPT, B, A, pairing=row.pairing),
        "message": row.identity,
        "digest": row.digest,
        "outcome": outcome,
        "reason": reason,
        "at": T0 + 10,
        "recipient": ("agent:codex:s-2", "%4"),
        "card": card,
    }
    values.update(over)
    return E.ReceiptInner(**values)


def empty() -> O.Outbox:
    return O.Outbox(own=A)


def queued(*inners: E.MessageInner) -> O.Outbox:
    box = empty()
    for inner in inners or (message(),):
        box, _ = O.admit(box, inner, nonce=NONCE, now=inner.created_at)
    return box


def live(at: float) -> dict[str, float | None]:
    return {B: at}


def published(*inners: E.MessageInner) -> O.Outbox:
    box, _ = O.tick(queued(*inners), now=T0 + 1, bus_up=True, heard={})
    return box


def accepted() -> O.Outbox:
    box = published()
    box, _ = O.receipt(box, receipt_for(box.rows[ID1], "accepted", "awaiting consent: card card-1", "card-1"), now=T0 + 2)
    return box


def cancelling(base: O.Outbox | None = None) -> O.Outbox:
    box, _ = O.cancel(base or published(), sender="p-7", now=T0 + 3, reason="sender revoked", nonces={ID1: CANCEL_NONCE})
    return box


def refused(step: Callable[[], Any], reason: O.Refusal, box: O.Outbox) -> None:
    """The step raises an OutboxError with ``reason`` and leaves ``box`` exactly as it was."""
    before = copy.deepcopy(box)
    with pytest.raises(O.OutboxError) as caught:
        step()
    assert caught.value.reason is reason
    assert box == before


def unchanged_but_ack(step: Callable[[], tuple[O.Outbox, Any]], box: O.Outbox) -> tuple[Any, ...]:
    after, effects = step()
    assert after == box
    assert not any(isinstance(e, Persist | Notify) for e in effects)
    assert effects[-1:] == (AckDelivery("d-1"),)
    return tuple(effects)


def kinds(effects: tuple[Any, ...]) -> list[str]:
    return [type(e).__name__ for e in effects]


# --- the table --------------------------------------------------------------------------------------


def test_the_table_is_the_documented_one() -> None:
    """Claim: OUTBOX_TABLE is exactly the doc's rows (docs/federation.md, "the outbox machine")."""
    finals = ("delivered", "declined", "refused", "cancelled", "expired", "unconfirmed")
    expected = {
        ("queued", "publish", "published"),
        ("queued", "cancel", "cancelled"),
        ("queued", "expire", "expired"),
        ("published", "accepted", "accepted"),
        ("published", "cancel", "cancelling"),
        ("accepted", "cancel", "cancelling"),
    }
    for state in ("published", "accepted", "cancelling"):
        expected |= {(state, f, f) for f in finals}
        expected |= {(state, "deadline", "unconfirmed"), (state, "pairing_removed", "unconfirmed")}
    assert {(s.value, e, d.value) for s, e, d in O.OUTBOX_TABLE.edges} == expected
    assert {f.value for f in O.OUTBOX_TABLE.finals} == set(finals)
    assert O.OUTBOX_TABLE.initial is OS.QUEUED


@pytest.mark.parametrize(
    ("state", "event"),
    [
        (OS.DELIVERED, "accepted"),
        (OS.UNCONFIRMED, "delivered"),
        (OS.QUEUED, "deadline"),
        (OS.QUEUED, "delivered"),
        (OS.CANCELLING, "cancel"),
        (OS.CANCELLING, "accepted"),
        (OS.ACCEPTED, "publish"),
    ],
)
def test_an_event_the_table_does_not_allow_is_a_loud_error(state: OS, event: str) -> None:
    """Claim: an event the table lacks raises TransitionNotAllowed naming the machine, never a no-op."""
    with pytest.raises(TransitionNotAllowed, match="outbox"):
        O.OUTBOX_TABLE.next(state, event)


# --- admission --------------------------------------------------------------------------------------


def test_an_admitted_message_is_one_queued_row_with_its_inner_part_and_nonce() -> None:
    box, effects = O.admit(empty(), message(), nonce=NONCE, now=T0)
    row = box.rows[ID1]
    assert (row.state, row.attempt, row.to, row.pairing, row.nonce) == (OS.QUEUED, 0, B, PAIRING, NONCE)
    assert row.inner == E.encode_inner(message()) and row.digest == E.digest_of(row.inner)
    assert kinds(effects) == ["Persist", "Audit"]  # nothing published at admission
    assert effects[0] == Persist(O.STORE, (ID1,), row)
    assert O.answer(row) == "queued" and box.sent() == {}


def test_the_same_identity_again_is_refused_and_changes_nothing() -> None:
    """Claim: a retry keeps its id; a second row for one identity is refused duplicate_id."""
    box = published()
    refused(lambda: O.admit(box, message(text="other"), nonce=NONCE, now=T0 + 5), O.Refusal.DUPLICATE_ID, box)


@pytest.mark.parametrize(
    "inner",
    [
        message(routing=E.Routing(E.Kind.MESSAGE, B, A, pairing=PAIRING)),  # not from this box
        message(routing=E.Routing(E.Kind.MESSAGE, A, A, pairing=PAIRING)),  # to this box
    ],
)
def test_a_message_that_is_not_this_box_s_outgoing_one_is_refused(inner: E.MessageInner) -> None:
    box = empty()
    refused(lambda: O.admit(box, inner, nonce=NONCE, now=T0), O.Refusal.NOT_OURS, box)


def test_a_nonce_of_the_wrong_size_is_refused() -> None:
    box = empty()
    refused(lambda: O.admit(box, message(), nonce=b"short", now=T0), O.Refusal.BAD_NONCE, box)


# --- publishing -------------------------------------------------------------------------------------


def test_queued_is_published_once_the_bus_is_up_committed_before_the_publish() -> None:
    """Claim: the row is persisted published (attempt 1) before the PublishEnvelope that may send it."""
    box, effects = O.tick(queued(), now=T0 + 1, bus_up=True, heard={})
    row = box.rows[ID1]
    assert (row.state, row.attempt) == (OS.PUBLISHED, 1)
    assert kinds(effects) == ["Persist", "Audit", "Notify", "PublishEnvelope"]
    assert effects[0] == Persist(O.STORE, (ID1,), row)
    assert effects[-1] == PublishEnvelope(E.Kind.MESSAGE, B, PAIRING, ID1, 1)
    assert box.sent() == {ID1: row.digest}
    assert row.due == T0 + 1 + O.retry_delay(row.digest, 1)


def test_nothing_is_published_while_the_bus_is_down() -> None:
    box = queued()
    after, effects = O.tick(box, now=T0 + 100, bus_up=False, heard=live(T0 + 100))
    assert (after.rows, effects) == (box.rows, ()) and not after.bus_up
    assert O.tick(after, now=T0 + 101, bus_up=False, heard=live(T0 + 101)) == (after, ())


def test_a_queued_row_whose_id_hour_runs_out_is_expired_never_published() -> None:
    """Claim: a row that never left is expired at the id's hour (known never delivered), not published."""
    box, effects = O.tick(queued(), now=T0 + S.id_ttl, bus_up=True, heard={})
    row = box.rows[ID1]
    assert (row.state, row.attempt) == (OS.EXPIRED, 0)
    assert "PublishEnvelope" not in kinds(effects) and row.final_at == T0 + S.id_ttl
    assert O.tick(box, now=T0 + S.id_ttl + 1, bus_up=True, heard={}) == (box, ())


def test_the_retry_delays_double_from_5_to_60_seconds_within_the_jitter() -> None:
    digest = "ab" * 32
    for attempt, base in zip(range(1, 9), (5, 10, 20, 40, 60, 60, 60, 60), strict=True):
        delay = O.retry_delay(digest, attempt)
        assert base * 0.8 <= delay <= base * 1.2
        assert delay == O.retry_delay(digest, attempt)  # no randomness: the same row, the same delay
    assert O.retry_delay("cd" * 32, 1) != O.retry_delay(digest, 1)  # rows spread


def test_published_gets_a_new_attempt_when_due_while_the_other_box_is_live() -> None:
    box = published()
    due = box.rows[ID1].due
    assert due is not None
    assert O.tick(box, now=due - 0.01, bus_up=True, heard=live(due)) == (box, ())
    after, effects = O.tick(box, now=due, bus_up=True, heard=live(due - 1))
    row = after.rows[ID1]
    assert (row.state, row.attempt) == (OS.PUBLISHED, 2)
    assert kinds(effects) == ["Persist", "PublishEnvelope"]
    assert effects[1] == PublishEnvelope(E.Kind.MESSAGE, B, PAIRING, ID1, 2)
    assert row.due == due + O.retry_delay(row.digest, 2)


def test_no_new_attempt_while_the_other_box_is_not_live_until_it_is_heard_again() -> None:
    """Claim: not heard within live_within, no new attempt; heard again, every row not accepted is due
    at once."""
    box = published()
    due = box.rows[ID1].due
    assert due is not None
    later = due + 500
    assert O.tick(box, now=later, bus_up=True, heard=live(later - S.live_within)) == (box, ())
    assert O.tick(box, now=later, bus_up=True, heard={}) == (box, ())
    again, effects = O.heard_again(box, B, now=later)
    assert again.rows[ID1].due == due  # already due: nothing to change
    assert effects == ()
    early = O.tick(published(), now=T0 + 2, bus_up=True, heard={})[0]
    made_due, effects = O.heard_again(early, B, now=T0 + 2)
    assert made_due.rows[ID1].due == T0 + 2 and kinds(effects) == ["Persist"]
    after, effects = O.tick(made_due, now=T0 + 2, bus_up=True, heard=live(T0 + 2))
    assert after.rows[ID1].attempt == 2 and effects[-1] == PublishEnvelope(E.Kind.MESSAGE, B, PAIRING, ID1, 2)


def test_heard_again_leaves_accepted_and_other_boxes_rows_alone() -> None:
    box = accepted()
    assert O.heard_again(box, B, now=T0 + 3) == (box, ())
    box = published()
    assert O.heard_again(box, A, now=T0 + 3) == (box, ())


def test_accepted_publishes_the_envelope_again_every_300_seconds_live_or_not() -> None:
    box = accepted()
    assert box.rows[ID1].due == T0 + 2 + S.accepted_poll
    assert O.tick(box, now=T0 + 2 + S.accepted_poll - 1, bus_up=True, heard={}) == (box, ())
    after, effects = O.tick(box, now=T0 + 2 + S.accepted_poll, bus_up=True, heard={})
    assert after.rows[ID1].state is OS.ACCEPTED and after.rows[ID1].attempt == 2
    assert effects[-1] == PublishEnvelope(E.Kind.MESSAGE, B, PAIRING, ID1, 2)
    assert after.rows[ID1].due == T0 + 2 + 2 * S.accepted_poll


def test_an_accepted_row_is_sent_again_at_once_when_the_bus_is_up_again() -> None:
    """Claim: a final receipt the other box could not publish while NATS was away (its delivered,
    typed meanwhile) reaches this box as soon as the bus is back: the copy sent then is answered with
    it, not the 300 s poll later (tests/integration/test_federation_faults.py found the 300 s)."""
    box = accepted()
    down, effects = O.tick(box, now=T0 + 10, bus_up=False, heard={})
    assert effects == () and down.rows == box.rows
    assert O.tick(down, now=T0 + 11, bus_up=False, heard={}) == (down, ())
    back, effects = O.tick(down, now=T0 + 12, bus_up=True, heard={})  # live or not: the other box answers
    row = back.rows[ID1]
    assert (row.state, row.attempt, row.due) == (OS.ACCEPTED, 2, T0 + 12 + S.accepted_poll)
    assert kinds(effects) == ["Persist", "PublishEnvelope"]
    assert effects[-1] == PublishEnvelope(E.Kind.MESSAGE, B, PAIRING, ID1, 2)
    assert O.tick(back, now=T0 + 13, bus_up=True, heard={}) == (back, ())  # once, then the poll again


def test_the_bus_up_again_leaves_published_and_cancelling_rows_to_their_schedule() -> None:
    for make in (published, cancelling):
        box = make()
        down, _ = O.tick(box, now=T0 + 2.5, bus_up=False, heard={})
        back, effects = O.tick(down, now=T0 + 3, bus_up=True, heard={})
        assert (back.rows, effects) == (box.rows, ())


def test_a_publish_acknowledgement_is_recorded_and_changes_no_state() -> None:
    """Claim: a JetStream acknowledgement is never acceptance (ADR 004)."""
    box = published()
    after, effects = O.publish_acked(box, ID1, attempt=1, sequence=42)
    row = after.rows[ID1]
    assert row.acked == (1, 42) and row.state is OS.PUBLISHED
    assert kinds(effects) == ["Persist"]
    assert O.answer(row) == "queued"


def test_a_failed_publish_changes_nothing() -> None:
    """Claim: a failed send without an acknowledgement stays where it was (it may have left)."""
    box = published()
    assert O.publish_failed(box, ID1) == (box, ())
    refused(lambda: O.publish_failed(box, message(mid="nope").identity), O.Refusal.UNKNOWN_MESSAGE, box)


# --- receipts ---------------------------------------------------------------------------------------


def test_an_accepted_receipt_moves_published_to_accepted_and_its_delivery_is_acknowledged_last() -> None:
    box = published()
    r = receipt_for(box.rows[ID1], "accepted", "awaiting consent: card card-1", "card-1")
    after, effects = O.receipt(box, r, now=T0 + 2, delivery="d-1")
    row = after.rows[ID1]
    assert (row.state, row.reason, row.card) == (OS.ACCEPTED, "awaiting consent: card card-1", "card-1")
    assert kinds(effects) == ["Persist", "Audit", "Notify", "AckDelivery"]
    assert O.answer(row) == "queued"
    assert O.waits_for(row, "laptop") == "accepted by box laptop: awaiting consent: card card-1"


@pytest.mark.parametrize("outcome", [str(s) for s in O.RECEIPT_FINALS])
@pytest.mark.parametrize("make", [published, accepted, cancelling], ids=["published", "accepted", "cancelling"])
def test_a_final_receipt_ends_the_row_in_its_outcome(outcome: str, make: Callable[[], O.Outbox]) -> None:
    box = make()
    after, effects = O.receipt(box, receipt_for(box.rows[ID1], outcome, "why"), now=T0 + 20, delivery="d-1")
    row = after.rows[ID1]
    assert (str(row.state), row.reason, row.final_at, row.due) == (outcome, "why", T0 + 20, None)
    assert kinds(effects) == ["Persist", "Audit", "Notify", "AckDelivery"]
    assert effects[2].payload["outcome"] == outcome  # type: ignore[attr-defined]
    assert O.tick(after, now=T0 + 10_000, bus_up=True, heard=live(T0 + 10_000)) == (after, ())


def test_receipts_that_do_not_move_the_table_change_nothing() -> None:
    """Claim: accepted again, accepted while cancelling, accepted after a final and an identical
    final repeat change nothing but acknowledge their delivery."""
    box = accepted()
    unchanged_but_ack(lambda: O.receipt(box, receipt_for(box.rows[ID1], "accepted", "other"), now=T0 + 9, delivery="d-1"), box)
    box = cancelling()
    unchanged_but_ack(lambda: O.receipt(box, receipt_for(box.rows[ID1], "accepted"), now=T0 + 9, delivery="d-1"), box)
    done, _ = O.receipt(box, receipt_for(box.rows[ID1], "cancelled"), now=T0 + 9)
    for outcome in ("accepted", "cancelled"):
        effects = unchanged_but_ack(
            lambda o=outcome: O.receipt(done, receipt_for(done.rows[ID1], o), now=T0 + 10, delivery="d-1"), done  # type: ignore[misc]
        )
        assert effects == (AckDelivery("d-1"),)


def test_a_receipt_contradicting_a_final_outcome_is_audited_late_and_changes_nothing() -> None:
    """Claim: a final outcome, once durable, never changes (guarantee 4)."""
    box, _ = O.receipt(published(), receipt_for(published().rows[ID1], "declined"), now=T0 + 5)
    effects = unchanged_but_ack(lambda: O.receipt(box, receipt_for(box.rows[ID1], "delivered"), now=T0 + 6, delivery="d-1"), box)
    late = effects[0]
    assert isinstance(late, Audit) and late.outcome == "late receipt" and late.actor == f"box:{B}"
    gone, _ = O.tick(published(), now=T0 + 1 + O.deadline(published().rows[ID1]) - T0, bus_up=True, heard={})
    assert gone.rows[ID1].state is OS.UNCONFIRMED
    unchanged_but_ack(lambda: O.receipt(gone, receipt_for(gone.rows[ID1], "delivered"), now=T0 + 9999, delivery="d-1"), gone)


def test_receipts_for_no_row_another_digest_or_a_row_that_never_left_are_refused() -> None:
    box = published()
    row = box.rows[ID1]
    stranger = receipt_for(row, "delivered", message=message(mid="m-9").identity)
    refused(lambda: O.receipt(box, stranger, now=T0 + 5), O.Refusal.UNKNOWN_MESSAGE, box)
    refused(lambda: O.receipt(box, receipt_for(row, "delivered", digest="cd" * 32), now=T0 + 5), O.Refusal.OTHER_DIGEST, box)
    never = queued()
    refused(lambda: O.receipt(never, receipt_for(never.rows[ID1], "delivered"), now=T0 + 5), O.Refusal.NOT_SENT, never)


# --- the deadline -----------------------------------------------------------------------------------


@pytest.mark.parametrize("make", [published, accepted, cancelling], ids=["published", "accepted", "cancelling"])
def test_a_row_that_left_with_no_final_receipt_is_unconfirmed_at_the_deadline_never_expired(
    make: Callable[[], O.Outbox],
) -> None:
    """Claim: no answer by the deadline is unconfirmed (ADR 004: no evidence of non-receipt)."""
    box = make()
    end = O.deadline(box.rows[ID1])
    assert end == T0 + S.id_ttl + S.skew_bound + S.final_grace
    before, _ = O.tick(box, now=end - 0.01, bus_up=False, heard={})
    assert before.rows[ID1].state is box.rows[ID1].state
    after, effects = O.tick(box, now=end, bus_up=False, heard={})
    row = after.rows[ID1]
    assert row.state is OS.UNCONFIRMED and row.final_at == end
    assert kinds(effects) == ["Persist", "Audit", "Notify"]
    assert B in row.reason


# --- cancel (the sender revoked) --------------------------------------------------------------------


def test_revoking_the_sender_cancels_what_never_left_and_asks_the_other_box_for_the_rest() -> None:
    m2, m3 = message("m-2", created=T0 + 1), message("m-3", created=T0 + 1)
    other = message("m-4", principal="p-8")
    box = published(message(), m2, other)
    box, _ = O.receipt(box, receipt_for(box.rows[m2.identity], "accepted"), now=T0 + 2)
    box, _ = O.admit(box, m3, nonce=NONCE, now=T0 + 2)
    assert O.cancels_needed(box, "p-7") == (ID1, m2.identity)
    after, effects = O.cancel(
        box, sender="p-7", now=T0 + 3, reason="sender revoked", nonces={ID1: CANCEL_NONCE, m2.identity: CANCEL_NONCE}
    )
    states = {i.id: r.state for i, r in after.rows.items()}
    assert states == {"m-1": OS.CANCELLING, "m-2": OS.CANCELLING, "m-3": OS.CANCELLED, "m-4": OS.PUBLISHED}
    row = after.rows[ID1]
    assert (row.cancel_nonce, row.cancel_reason, row.cancel_at, row.cancel_attempt) == (
        CANCEL_NONCE, "sender revoked", T0 + 3, 1,
    )
    publishes = [e for e in effects if isinstance(e, PublishEnvelope)]
    assert publishes == [PublishEnvelope(E.Kind.CANCEL, B, PAIRING, ID1, 1),
                         PublishEnvelope(E.Kind.CANCEL, B, PAIRING, m2.identity, 1)]
    assert O.answer(row) == "queued" and O.waits_for(row, "laptop") == (
        "cancelling: box laptop has not yet confirmed it is cancelled")
    assert O.pending_cancels(after, "p-7") == {B: 2}
    assert O.pending_cancels_words({B: 2}, {B: "laptop"}) == (
        "2 messages: box laptop has not yet confirmed they are cancelled",
    )
    assert O.pending_cancels_words({B: 1}, {}) == (f"1 message: box {B} has not yet confirmed it is cancelled",)


def test_a_cancel_without_a_nonce_for_a_row_that_left_is_refused_and_changes_nothing() -> None:
    box = published()
    refused(lambda: O.cancel(box, sender="p-7", now=T0 + 3, reason="r", nonces={}), O.Refusal.MISSING_NONCE, box)
    refused(
        lambda: O.cancel(box, sender="p-7", now=T0 + 3, reason="r", nonces={ID1: b"x"}), O.Refusal.BAD_NONCE, box
    )


def test_revoking_a_sender_with_nothing_in_flight_changes_nothing() -> None:
    box = cancelling()
    assert O.cancel(box, sender="p-7", now=T0 + 4, reason="again", nonces={}) == (box, ())


def test_cancelling_publishes_its_cancel_on_published_s_schedule() -> None:
    box = cancelling()
    due = box.rows[ID1].due
    assert due == T0 + 3 + O.retry_delay(box.rows[ID1].digest, 1)
    assert O.tick(box, now=due, bus_up=True, heard={}) == (box, ())  # not live
    after, effects = O.tick(box, now=due, bus_up=True, heard=live(due))
    assert after.rows[ID1].cancel_attempt == 2 and after.rows[ID1].attempt == 1
    assert effects[-1] == PublishEnvelope(E.Kind.CANCEL, B, PAIRING, ID1, 2)


# --- pairing removed --------------------------------------------------------------------------------


def test_removing_the_pairing_cancels_queued_rows_and_makes_the_rest_unconfirmed() -> None:
    m2 = message("m-2", created=T0 + 1)
    box, _ = O.admit(accepted(), m2, nonce=NONCE, now=T0 + 2)
    after, effects = O.pairing_removed(box, PAIRING, now=T0 + 5, box_name="laptop")
    assert after.rows[ID1].state is OS.UNCONFIRMED
    assert after.rows[ID1].reason == "pairing removed before box laptop answered"
    assert after.rows[m2.identity].state is OS.CANCELLED
    assert kinds(effects).count("Persist") == 2 and "PublishEnvelope" not in kinds(effects)
    assert O.pairing_removed(after, PAIRING, now=T0 + 6, box_name="laptop") == (after, ())
    assert O.pairing_removed(box, "pairing-other", now=T0 + 6, box_name="x") == (box, ())


def test_words_for_what_a_row_waits_for() -> None:
    assert O.waits_for(queued().rows[ID1], "laptop") == "until box laptop accepts it"
    assert O.waits_for(published().rows[ID1], "laptop") == "until box laptop accepts it"
    assert O.is_live(None, T0) is False and O.is_live(T0, T0 + S.live_within - 1) is True
    assert O.is_live(T0, T0 + S.live_within) is False and O.is_live(T0 + 5, T0) is False


def test_the_admission_publishes_only_its_own_new_row_at_once_while_the_bus_is_up() -> None:
    box = queued(message("m-1"), message("m-2"))
    first = E.Identity(A, "p-7", "m-1")
    after, effects = O.publish_new(box, first, now=T0, bus_up=True)
    assert after.rows[first].state is OS.PUBLISHED and after.rows[first].attempt == 1
    assert after.rows[E.Identity(A, "p-7", "m-2")] == box.rows[E.Identity(A, "p-7", "m-2")]  # left to the tick
    assert kinds(effects) == ["Persist", "Audit", "Notify", "PublishEnvelope"]  # committed before the publish
    assert O.publish_new(box, first, now=T0, bus_up=False) == (box, ())
    assert O.publish_new(after, first, now=T0, bus_up=True) == (after, ())  # not queued: nothing
    refused(lambda: O.publish_new(box, E.Identity(A, "p-7", "m-9"), now=T0, bus_up=True),
            O.Refusal.UNKNOWN_MESSAGE, box)


def test_the_sender_s_size_check_keeps_room_for_the_recipient_s_provenance_line() -> None:
    from connectcore.delivery import DEFAULT_LIMITS, Refused

    room = DEFAULT_LIMITS.max_message_bytes - O.PROVENANCE_ALLOWANCE
    O.check_size("é" * (room // 2), DEFAULT_LIMITS)
    with pytest.raises(Refused, match="512 bytes kept") as raised:
        O.check_size("x" * (room + 1), DEFAULT_LIMITS)
    assert raised.value.reason == "too_large"


def test_what_the_shell_seals_is_the_row_s_bytes_and_nonce_or_its_cancel() -> None:
    box = published(message())
    (row,) = box.rows.values()
    routing, plain, nonce = O.to_seal(row, E.Kind.MESSAGE)
    assert (routing, plain, nonce) == (message().routing, E.encode_inner(message()), NONCE)
    refused(lambda: O.to_seal(row, E.Kind.CANCEL), O.Refusal.NOT_SENT, box)
    (crow,) = cancelling(box).rows.values()
    routing, plain, nonce = O.to_seal(crow, E.Kind.CANCEL)
    assert nonce == CANCEL_NONCE and routing == E.Routing(E.Kind.CANCEL, A, B, pairing=PAIRING)
    cancel = E.parse_inner(plain, E.Outer(routing, nonce, b"x"))
    assert cancel == E.CancelInner(routing, row.identity, row.digest, row.created_at, crow.cancel_reason, crow.cancel_at)
