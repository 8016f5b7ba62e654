"""The inbox: rules the 2026-12-06 (third) mutation run found unpinned (docs/quality.md names the
mutants each test kills)."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from typing import Any

import pytest

from connectcore.effects import Audit, Persist
from connectcore.federation import envelope as E
from connectcore.federation import inbox as I
from tests.unit.test_federation_inbox import (
    ID1,
    N1,
    N2,
    NOW,
    PAIRING,
    RECIPIENT,
    A,
    B,
    accepted,
    cancel_of,
    empty,
    judged,
    message,
)

ST = I.InboxState


def test_refusals_are_audited_whole_once_a_minute_and_the_next_record_counts_the_others() -> None:
    """I8: the first refusal of a box for a reason is one whole audit record; those within the minute
    after it are not audited; the first after the minute says how many were left out; a tick past the
    minute drops a window with nothing left out, and a tick within it changes nothing."""
    box = empty()
    verdict = judged(message(), box, signature_ok=False)
    assert verdict.reason is E.Refusal.BAD_SIGNATURE
    box, effects = I.receive(box, verdict, now=NOW)
    first = Audit(actor=f"box:{A}", action="federation.envelope", outcome="refused",
                  detail=f"bad_signature: {verdict.detail}", at=NOW)
    assert effects == (first,)
    still, effects = I.tick(box, now=NOW + 30)
    assert (still, effects) == (box, ()) and still is box
    box, effects = I.receive(box, verdict, now=NOW + 1)
    assert effects == ()
    box, effects = I.receive(box, verdict, now=NOW + 60)
    assert effects == (replace(first, detail=f"bad_signature: {verdict.detail} (1 more before this)", at=NOW + 60),)
    later, effects = I.tick(box, now=NOW + 120)
    assert (later.windows, effects) == ({}, ())


def test_a_window_that_ended_with_refusals_left_out_is_audited_by_the_tick_with_their_count() -> None:
    box = accepted()
    verdict = judged(message("m-2"), box, signature_ok=False)
    box, _ = I.receive(box, verdict, now=NOW)
    box, _ = I.receive(box, verdict, now=NOW + 1)
    after, effects = I.tick(box, now=NOW + 60)
    assert effects == (Audit(actor=f"box:{A}", action="federation.envelope", outcome="refused",
                             detail=f"bad_signature: 1 more in the minute from {NOW:.0f}", at=NOW + 60),)
    assert (after.records, after.windows) == (box.records, {})


def test_removing_a_pairing_cancels_its_accepted_messages_whole_without_a_receipt() -> None:
    """I7: the record cancelled, its receipt saying so at the removal's time (never published), one
    Persist and one audit record as the owner's."""
    box = accepted()
    after, effects = I.pairing_removed(box, PAIRING, now=NOW + 5)
    record = box.records[ID1]
    done = replace(record, state=ST.CANCELLED,
                   receipt=replace(record.receipt, outcome="cancelled", reason="pairing removed", at=NOW + 5))
    assert after.records[ID1] == done
    assert effects == (
        Persist("inbox", (ID1,), done),
        Audit(actor="owner", action="federation.inbox", outcome="cancelled", target=PAIRING,
              message_id=str(ID1), detail="pairing removed", at=NOW + 5),
    )


def test_a_final_receipt_s_nonce_is_the_documented_hash_of_the_record_s_own() -> None:
    """I5: sha256("connect-final-v1" + the accepted receipt's nonce + the digest), cut to the nonce's size."""
    record = accepted().records[ID1]
    assert record.nonce == N1
    expected = hashlib.sha256(b"connect-final-v1" + N1 + record.digest.encode()).digest()[: E.NONCE_BYTES]
    assert I.final_nonce(record) == expected


# --- the fourth mutation run (stop 33; docs/survivors/inbox.md) ---


def test_a_final_outcome_is_committed_audited_as_the_daemon_s_and_receipted_whole() -> None:
    """I5: the record, its audit line (actor ``connectd``, at the outcome's time), then its receipt
    with the new nonce (kills ``final`` 64, 65, 71, 72); a recipient given is the receipt's (32)."""
    from connectcore.federation.effects import PublishReceipt

    box = accepted()
    after, effects = I.final(box, ID1, ST.DELIVERED, reason="delivered", now=NOW + 9, nonce=N2,
                             recipient=("agent:codex:s-9", "%9"))
    done = after.records[ID1]
    assert done.state is ST.DELIVERED and done.nonce == N2 and done.receipt.recipient == ("agent:codex:s-9", "%9")
    assert effects == (
        Persist("inbox", (ID1,), done),
        Audit(actor="connectd", action="federation.inbox", outcome="delivered", target=PAIRING,
              message_id=str(ID1), detail="delivered", at=NOW + 9),
        PublishReceipt(done.receipt, N2),
    )


def test_a_final_outcome_across_a_removed_pairing_is_committed_and_audited_but_never_receipted() -> None:
    """I7: a message whose typing had started when its pairing was removed still reaches its outcome:
    committed and audited as the daemon's, with no receipt (kills ``final`` 48-50, 55, 56, 60, 61)."""
    box = accepted()
    box, _ = I.pairing_removed(box, PAIRING, now=NOW + 5, typing=frozenset({ID1}))
    after, effects = I.final(box, ID1, ST.DELIVERED, reason="delivered", now=NOW + 9, nonce=N2)
    done = after.records[ID1]
    assert done.state is ST.DELIVERED
    assert effects == (
        Persist("inbox", (ID1,), done),
        Audit(actor="connectd", action="federation.inbox", outcome="delivered", target=PAIRING,
              message_id=str(ID1), detail="delivered", at=NOW + 9),
    )


# --- the fourth mutation run, read at stop 34 (docs/survivors/inbox.md) ---


def _says(step: Any, reason: I.Refusal, *words: str) -> None:
    """The step is refused for ``reason`` with a message naming ``words`` (a person reads it)."""
    with pytest.raises(I.InboxError) as caught:
        step()
    assert caught.value.reason is reason
    for word in words:
        assert word in str(caught.value)


def test_a_duplicate_is_noted_whole_as_the_sender_box_s_at_its_time() -> None:
    """I3: the note of a copy answered again names the box, the event, the decision, the message and
    the state answered, at the copy's time (kills ``receive`` 29-34, 38-42)."""
    from connectcore.federation.effects import AckDelivery, PublishReceipt

    box = accepted()
    verdict = judged(message(), box, now=NOW + 100)
    assert verdict.decision is E.Decision.DUPLICATE
    after, effects = I.receive(box, verdict, now=NOW + 100, delivery="d-2")
    record = box.records[ID1]
    assert after is box
    assert effects == (
        Audit(actor=f"box:{A}", action="federation.envelope", outcome="duplicate", message_id=str(ID1),
              detail="answered accepted again", at=NOW + 100),
        PublishReceipt(record.receipt, record.nonce),
        AckDelivery("d-2"),
    )


def test_a_message_too_late_is_committed_whole_audited_as_the_sender_box_s_and_receipted() -> None:
    """I4: the expired record holds the pairing, the message's own time (the retention counts from
    it), the nonce, and a receipt with the judgement's reason at the step's time; its audit line is
    the sender box's at that time (kills ``receive`` 90, 92, 95, 108, 110, 111, 122, 123;
    ``_commit_and_answer`` 17, 18; ``_audit`` 1)."""
    from connectcore.federation.effects import PublishReceipt

    box = I.Inbox(own=B)
    old = message(created=NOW - E.ID_TTL - 1)
    verdict = judged(old, box)
    assert verdict.decision is E.Decision.TOO_LATE and verdict.detail and verdict.record is not None
    after, effects = I.receive(box, verdict, now=NOW + 2, nonce=N1)
    receipt = E.ReceiptInner(E.Routing(E.Kind.RECEIPT, B, A, pairing=PAIRING), old.identity, verdict.record.digest,
                             "expired", verdict.detail, NOW + 2, I.NOBODY, None)
    record = I.Record(old.identity, PAIRING, verdict.record.digest, old.created_at, ST.EXPIRED, receipt, N1)
    assert after.records == {old.identity: record}
    assert effects == (
        Persist("inbox", (old.identity,), record),
        Audit(actor=f"box:{A}", action="federation.inbox", outcome="expired", target=PAIRING,
              message_id=str(old.identity), detail=verdict.detail, at=NOW + 2),
        PublishReceipt(receipt, N1),
    )


def test_accept_and_refuse_are_audited_as_the_sender_box_s_at_the_step_s_time() -> None:
    """I4: kills ``accept`` 52, 53 and ``refuse`` 48, 49; a refusal's record names its pairing (17)
    and its receipt the recipient given (45)."""
    box = I.Inbox(own=B)
    _, effects = I.accept(box, judged(message(), box), nonce=N1, now=NOW + 3, recipient=RECIPIENT, reason="waits")
    assert effects[1] == Audit(actor=f"box:{A}", action="federation.inbox", outcome="accepted", target=PAIRING,
                               message_id=str(ID1), detail="waits", at=NOW + 3)
    after, effects = I.refuse(box, judged(message(), box), nonce=N1, now=NOW + 4, reason="off", recipient=RECIPIENT)
    record = after.records[ID1]
    assert record.pairing == PAIRING and record.receipt.recipient == RECIPIENT
    assert effects[1] == Audit(actor=f"box:{A}", action="federation.inbox", outcome="refused", target=PAIRING,
                               message_id=str(ID1), detail="off", at=NOW + 4)


def test_a_cancel_of_a_held_message_is_committed_whole_and_acknowledged_only_when_asked() -> None:
    """I6: the cancelled receipt keeps the recipient, says the sender's box cancelled it, and is
    audited as the sender box's at the cancel's time; no acknowledgement without a delivery (kills
    ``cancel_arrived`` 14, 59-61, 73, 74). A cancel after typing started is noted the same way
    (26, 27)."""
    from connectcore.federation.effects import PublishReceipt

    box = accepted()
    verdict = judged(cancel_of(message()), box, now=NOW + 7)
    assert verdict.decision is E.Decision.CANCEL
    after, effects = I.cancel_arrived(box, verdict, cancellable=True, now=NOW + 7, nonce=N2)
    done = after.records[ID1]
    assert done.receipt.recipient == RECIPIENT and done.receipt.reason == "cancelled by the sender's box"
    assert effects == (
        Persist("inbox", (ID1,), done),
        Audit(actor=f"box:{A}", action="federation.inbox", outcome="cancelled", target=PAIRING,
              message_id=str(ID1), detail="cancelled by the sender's box", at=NOW + 7),
        PublishReceipt(done.receipt, N2),
    )
    same, effects = I.cancel_arrived(box, verdict, cancellable=False, now=NOW + 8, nonce=N2)
    assert same is box
    assert effects == (Audit(actor=f"box:{A}", action="federation.inbox", outcome="accepted", target=PAIRING,
                             message_id=str(ID1),
                             detail="cancel arrived after typing started: the real outcome follows", at=NOW + 8),)


def test_each_refusal_of_an_inbox_step_says_its_reason_and_what_it_refused() -> None:
    """The reason (a caller branches on it) and a message naming the message or the rule (kills
    ``receive`` 24-27, 49, 58-61, 64, 72; ``_check_nonce`` 5; ``_new`` 7, 13; ``_held`` 5;
    ``cancel_arrived`` 5)."""
    box = accepted()
    fresh = I.Inbox(own=B)
    copy_of = judged(message(), box)
    _says(lambda: I.receive(fresh, copy_of, now=NOW), I.Refusal.UNKNOWN_MESSAGE, str(ID1), "to answer")
    _says(lambda: I.receive(fresh, judged(message(), fresh), now=NOW), I.Refusal.WRONG_DECISION, "new", "not the inbox")
    late = judged(message(created=NOW - E.ID_TTL - 1), fresh)
    held = judged(message(created=NOW - E.ID_TTL - 1), fresh)
    _says(lambda: I.receive(box, held, now=NOW, nonce=N2), I.Refusal.HELD, str(ID1), "already holds")
    _says(lambda: I.receive(fresh, late, now=NOW), I.Refusal.BAD_NONCE, "too_late", "needs a nonce")
    _says(lambda: I.receive(fresh, late, now=NOW, nonce=b"x"), I.Refusal.BAD_NONCE, f"{E.NONCE_BYTES} bytes")
    gone, _ = I.pairing_removed(fresh, PAIRING, now=NOW)
    _says(lambda: I.receive(gone, late, now=NOW, nonce=N2), I.Refusal.REMOVED, PAIRING, "was removed")
    _says(lambda: I.accept(box, late, nonce=N2, now=NOW, recipient=RECIPIENT, reason=""),
          I.Refusal.WRONG_DECISION, "too_late", "not a new message")
    new = judged(message(), fresh)
    _says(lambda: I.accept(box, new, nonce=N2, now=NOW, recipient=RECIPIENT, reason=""),
          I.Refusal.HELD, str(ID1), "never new")
    cancel = judged(cancel_of(message()), box)
    _says(lambda: I.cancel_arrived(fresh, cancel, cancellable=True, now=NOW, nonce=N2),
          I.Refusal.UNKNOWN_MESSAGE, str(ID1))
    _says(lambda: I.cancel_arrived(box, copy_of, cancellable=True, now=NOW, nonce=N2),
          I.Refusal.WRONG_DECISION, "duplicate", "not a cancel")


def test_a_reloaded_inbox_keeps_its_retention_and_audits_a_refusal() -> None:
    """I9: the inbox after a restart starts with no refusal window (the first refusal is audited)
    and keeps the retention it was given (kills ``load`` 4, 5, 9, 10)."""
    box = accepted()
    again = I.load(B, box.records.values(), retention=60.0)
    assert again.retention == 60.0 and again.windows == {}
    _, effects = I.receive(again, judged(message("m-2"), again, signature_ok=False), now=NOW)
    assert [type(e).__name__ for e in effects] == ["Audit"]
    after, effects = I.tick(again, now=NOW - 5 + 61)
    assert after.records == {} and effects == (Persist("inbox", (ID1,), None),)
