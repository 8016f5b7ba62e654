"""The outbox: rules the 2026-12-06 (second) mutation run found unpinned (docs/quality.md names the
mutants each test kills)."""

from __future__ import annotations

import dataclasses
import hashlib

import pytest

from connectcore.effects import Audit, Notify
from connectcore.federation import envelope as E
from connectcore.federation import outbox as O
from connectcore.federation.effects import AckDelivery
from tests.unit.test_federation_envelope import C
from tests.unit.test_federation_outbox import (
    CANCEL_NONCE,
    ID1,
    NONCE,
    PAIRING,
    T0,
    A,
    B,
    accepted,
    cancelling,
    message,
    published,
    queued,
    receipt_for,
)

OS = O.OutboxState


def test_an_accepted_row_waits_for_what_the_other_box_said_or_just_its_acceptance() -> None:
    row = accepted().rows[ID1]
    assert O.waits_for(row, "laptop") == "accepted by box laptop: awaiting consent: card card-1"
    assert O.waits_for(dataclasses.replace(row, reason=""), "laptop") == "accepted by box laptop"


def test_the_outbox_seals_only_a_message_or_its_cancel() -> None:
    """O1, O7: what the shell seals for a row is its message or, once cancelling, its cancel; a
    receipt (the other box's to send) is refused ``not_sent``, with the words."""
    row = cancelling().rows[ID1]
    with pytest.raises(O.OutboxError) as error:
        O.to_seal(row, E.Kind.RECEIPT)
    assert (error.value.reason, str(error.value)) == (O.Refusal.NOT_SENT, f"message {ID1} has no receipt to publish")


def test_a_row_made_due_already_is_left_alone_when_its_box_is_heard_again() -> None:
    """O5: heard again, only rows due later than now are made due now; a row due now already changes
    nothing and is not stored again."""
    box = published()
    due = box.rows[ID1].due
    assert due is not None
    assert O.heard_again(box, B, now=due) == (box, ())


def test_a_cancel_s_nonce_is_the_documented_hash_of_the_row_s_own() -> None:
    """O7: every copy of a row's cancel is the same envelope, from one daemon version to the next: its
    nonce is sha256("connect-cancel-v1" + the row's nonce + its digest), cut to the nonce's size."""
    row = published().rows[ID1]
    expected = hashlib.sha256(b"connect-cancel-v1" + NONCE + row.digest.encode()).digest()[: E.NONCE_BYTES]
    assert O.cancel_nonce(row) == expected


def test_removing_a_pairing_ends_each_of_its_rows_at_that_time_with_its_reason() -> None:
    """O8: every row of the removed pairing ends (``cancelled`` if it never left, else
    ``unconfirmed``), stamped and audited at the removal's time, whatever rows of another pairing sort
    before it."""
    other = message("m-0", routing=E.Routing(E.Kind.MESSAGE, A, B, pairing="pairing-0"))
    box = published(other, message("m-1"))
    box, _ = O.admit(box, message("m-2", created=T0 + 1), nonce=NONCE, now=T0 + 1)
    after, effects = O.pairing_removed(box, PAIRING, now=T0 + 5, box_name="laptop")
    left, never = after.rows[ID1], after.rows[E.Identity(A, "p-7", "m-2")]
    assert (left.state, left.reason, left.final_at) == (OS.UNCONFIRMED, "pairing removed before box laptop answered", T0 + 5)
    assert (never.state, never.reason, never.final_at) == (
        OS.CANCELLED, "pairing with box laptop removed before it left this box", T0 + 5)
    assert after.rows[other.identity] == box.rows[other.identity]
    assert [e.at for e in effects if isinstance(e, Audit)] == [T0 + 5, T0 + 5]


def test_an_outbox_refusal_carries_its_words() -> None:
    with pytest.raises(O.OutboxError) as error:
        O.admit(queued(), message(), nonce=NONCE, now=T0)
    assert str(error.value).startswith(f"message {ID1} is already in the outbox")


def test_revoking_a_sender_ends_and_cancels_its_rows_at_that_time_on_this_box_s_schedule() -> None:
    """O7: the queued row is ``cancelled`` (stamped and audited at the revocation's time, with its
    reason); the row that left is ``cancelling``, audited then, its cancel due by this box's own retry
    settings; a missing or malformed cancel nonce is refused with its words."""
    settings = O.Settings(first_retry=7.0)
    box = dataclasses.replace(published(), settings=settings)
    box, _ = O.admit(box, message("m-2", created=T0 + 1), nonce=NONCE, now=T0 + 1)
    after, effects = O.cancel(box, sender="p-7", now=T0 + 3, reason="sender revoked", nonces={ID1: CANCEL_NONCE})
    never = after.rows[E.Identity(A, "p-7", "m-2")]
    assert (never.state, never.reason, never.final_at) == (OS.CANCELLED, "cancelled before it left this box: sender revoked", T0 + 3)
    out = after.rows[ID1]
    assert (out.state, out.reason) == (OS.CANCELLING, "cancelling: sender revoked")
    assert out.due == T0 + 3 + O.retry_delay(out.digest, 1, settings) != T0 + 3 + O.retry_delay(out.digest, 1)
    assert [e.at for e in effects if isinstance(e, Audit)] == [T0 + 3, T0 + 3]
    with pytest.raises(O.OutboxError) as missing:
        O.cancel(box, sender="p-7", now=T0 + 3, reason="x", nonces={})
    assert (missing.value.reason, str(missing.value)) == (O.Refusal.MISSING_NONCE, f"the cancel of {ID1} needs a nonce")
    with pytest.raises(O.OutboxError) as short:
        O.cancel(box, sender="p-7", now=T0 + 3, reason="x", nonces={ID1: b"short"})
    assert (short.value.reason, str(short.value)) == (O.Refusal.BAD_NONCE, "a cancel's nonce is 24 bytes")


def test_each_move_is_audited_whole_and_a_receipt_s_delivery_is_acknowledged_only_when_given() -> None:
    """O10: a row that moves is audited by connectd as ``federation.outbox`` with its new state, the
    other box, the message and the time; a receipt with no delivery handle acknowledges nothing; a
    final outcome drops the card the row waited on."""
    box = accepted()
    row = box.rows[ID1]
    after, effects = O.receipt(box, receipt_for(row, "delivered", "typed"), now=T0 + 20)
    assert [e for e in effects if isinstance(e, Audit)] == [Audit(
        actor="connectd", action="federation.outbox", outcome="delivered", target=B, message_id=str(ID1),
        detail="typed", at=T0 + 20)]
    assert not [e for e in effects if isinstance(e, AckDelivery)]
    assert row.card == "card-1" and after.rows[ID1].card is None
    moved, effects = O.receipt(published(), receipt_for(published().rows[ID1], "accepted", "waits"), now=T0 + 9)
    assert [e.at for e in effects if isinstance(e, Audit)] == [T0 + 9]


def test_a_late_receipt_is_audited_whole_as_the_other_box_s() -> None:
    box, _ = O.receipt(accepted(), receipt_for(accepted().rows[ID1], "delivered"), now=T0 + 20)
    row = box.rows[ID1]
    _, effects = O.receipt(box, receipt_for(row, "declined", "too late"), now=T0 + 30, delivery="d-1")
    assert effects == (
        Audit(actor=f"box:{B}", action="federation.outbox", outcome="late receipt", target=B, message_id=str(ID1),
              detail="declined after delivered: too late", at=T0 + 30),
        AckDelivery("d-1"),
    )


def test_receipts_that_are_refused_say_why() -> None:
    box = published()
    row = box.rows[ID1]
    with pytest.raises(O.OutboxError) as other:
        O.receipt(box, receipt_for(row, "delivered", digest="0" * 64), now=T0 + 5)
    assert str(other.value) == f"a receipt for {ID1} names another digest"
    never = queued()
    with pytest.raises(O.OutboxError) as unsent:
        O.receipt(never, receipt_for(never.rows[ID1], "delivered"), now=T0 + 5)
    assert str(unsent.value) == f"message {ID1} never left this box: no receipt answers it"
    missing = E.Identity(A, "p-7", "m-9")
    with pytest.raises(O.OutboxError) as unknown:
        O.publish_failed(box, missing)
    assert str(unknown.value) == f"no message {missing} in this box's outbox"


def test_the_bus_back_makes_due_only_accepted_rows_due_later() -> None:
    """O5: with the bus up again, an accepted row due later is due now; one already due keeps its due
    time; the other box's liveness is judged by this box's ``live_within``."""
    box = dataclasses.replace(accepted(), bus_up=False)
    row = box.rows[ID1]
    assert row.due is not None
    early = dataclasses.replace(box, rows={ID1: dataclasses.replace(row, due=T0 + 3)})
    assert O._due_if(early.rows[ID1], True, T0 + 5).due == T0 + 3
    assert O._due_if(row, True, T0 + 5).due == T0 + 5
    assert O._due_if(dataclasses.replace(row, due=T0 + 5), True, T0 + 5) == dataclasses.replace(row, due=T0 + 5)
    short = dataclasses.replace(published(), settings=O.Settings(live_within=10.0))
    due = short.rows[ID1].due
    assert due is not None
    assert O.tick(short, now=due, bus_up=True, heard={B: due - 20}) == (short, ())  # not live by its own bound


def test_the_schedule_stamps_each_move_with_its_time_reason_and_this_box_s_settings() -> None:
    """O5, O6: the first publish (reason cleared, due by this box's settings) and the expiry of a row
    that never left (its reason) are audited at the tick's time and wake the sender with the row's
    answer, state and box; a row that left is judged against this box's own deadline; nothing is
    published again while the bus is down."""
    settings = O.Settings(first_retry=7.0, final_grace=5.0, max_retry=100.0)
    box = dataclasses.replace(queued(), settings=settings)
    out, effects = O.tick(box, now=T0 + 1, bus_up=True, heard={})
    row = out.rows[ID1]
    assert (row.state, row.reason, row.due) == (OS.PUBLISHED, "", T0 + 1 + O.retry_delay(row.digest, 1, settings))
    assert [e.at for e in effects if isinstance(e, Audit)] == [T0 + 1]
    assert [e.payload for e in effects if isinstance(e, Notify)] == [{"outcome": "queued", "state": "published", "box": B}]
    assert row.due is not None
    assert O.tick(out, now=row.due + 1, bus_up=False, heard={B: row.due}) == (dataclasses.replace(out, bus_up=False), ())
    end = O.deadline(row, settings)
    ended, effects = O.tick(out, now=end, bus_up=True, heard={})
    assert ended.rows[ID1].state is OS.UNCONFIRMED  # this box's deadline, not the default's
    assert [e.at for e in effects if isinstance(e, Audit)] == [end]
    n = 3
    again = O.tick(dataclasses.replace(out, rows={ID1: dataclasses.replace(row, attempt=n - 1)}), now=row.due,
                   bus_up=True, heard={B: row.due})[0].rows[ID1]
    assert again.due == row.due + O.retry_delay(row.digest, n, settings) != row.due + O.retry_delay(row.digest, n)
    expired, effects = O.tick(box, now=T0 + settings.id_ttl, bus_up=False, heard={})
    gone = expired.rows[ID1]
    assert (gone.state, gone.reason) == (OS.EXPIRED, "the id's hour ran out before it left this box")
    assert [e.at for e in effects if isinstance(e, Audit)] == [T0 + settings.id_ttl]


def test_admission_records_the_row_at_its_time_and_refuses_another_box_s_message_with_words() -> None:
    """O1: only this box's outgoing message is admitted, ``queued`` with reason ``admitted`` and
    audited at the admission's time; each refusal says why."""
    box, effects = O.admit(O.Outbox(own=A), message(), nonce=NONCE, now=T0 + 2)
    assert box.rows[ID1].reason == "admitted"
    assert [e.at for e in effects if isinstance(e, Audit)] == [T0 + 2]
    theirs = message(routing=E.Routing(E.Kind.MESSAGE, B, C, pairing=PAIRING))  # relayed: neither ours nor to us
    with pytest.raises(O.OutboxError) as not_ours:
        O.admit(O.Outbox(own=A), theirs, nonce=NONCE, now=T0)
    assert (not_ours.value.reason, str(not_ours.value)) == (
        O.Refusal.NOT_OURS, f"a message from box {B} to {C} is no outgoing message")
    with pytest.raises(O.OutboxError) as again:
        O.admit(box, message(), nonce=NONCE, now=T0)
    assert str(again.value) == f"message {ID1} is already in the outbox (queued); a retry keeps its id"
    with pytest.raises(O.OutboxError) as short:
        O.admit(O.Outbox(own=A), message(), nonce=b"short", now=T0)
    assert str(short.value) == "a message's nonce is 24 bytes"


def test_a_cancel_is_published_again_on_its_own_schedule_by_this_box_s_settings() -> None:
    settings = O.Settings(first_retry=7.0, max_retry=100.0)
    box = cancelling(dataclasses.replace(published(), settings=settings))
    row = box.rows[ID1]
    assert row.due is not None
    again = O.tick(box, now=row.due, bus_up=True, heard={B: row.due})[0].rows[ID1]
    assert again.cancel_attempt == 2
    assert again.due == row.due + O.retry_delay(row.digest, 2, settings) != row.due + O.retry_delay(row.digest, 2)
