"""The inbox: rules the 2026-12-06 (third) mutation run found unpinned (docs/quality.md names the
mutants each test kills)."""

from __future__ import annotations

import hashlib
from dataclasses import replace

from connectcore.effects import Audit, Persist
from connectcore.federation import envelope as E
from connectcore.federation import inbox as I
from tests.unit.test_federation_inbox import ID1, N1, N2, NOW, PAIRING, A, accepted, empty, judged, message

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
