"""The inbox (connectcore.federation.inbox): dedup by identity, the commit before the receipt, a
duplicate answered with the same receipt and never new again, a receipt for each final outcome,
remote refusals final, cancels and tombstones, a removed pairing delivering nothing more, refusals
audited once a minute, every refused step changing nothing, and the loud error for an event the table
does not allow (docs/federation.md, "On the receiving box"). Verdicts come from the real judgement."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from connectcore._machine import TransitionNotAllowed
from connectcore.effects import Audit, Persist
from connectcore.federation import envelope as E
from connectcore.federation import inbox as I
from connectcore.federation.boxes import BoxKeys
from connectcore.federation.effects import AckDelivery, PublishReceipt

KA, KB = (BoxKeys(bytes([n]) * 32, bytes([n + 1]) * 32) for n in (1, 11))
A, B = KA.box_id, KB.box_id  # A sends, B (this box) receives
PAIRING = "pairing-1"
NOW = 1_796_500_000.0
N1, N2, N3 = (bytes([n]) * 24 for n in (1, 2, 3))
ST = I.InboxState
RECIPIENT = ("agent:codex:s-2", "%4")


def message(mid: str = "m-1", created: float = NOW - 5, **over: Any) -> E.MessageInner:
    values: dict[str, Any] = {
        "routing": E.Routing(E.Kind.MESSAGE, A, B, pairing=PAIRING),
        "sender": E.Sender("p-7", "agent:claude:s-1", "claude", "%3", "0123456789abcdef"),
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


def cancel_of(inner: E.MessageInner) -> E.CancelInner:
    return E.CancelInner(
        E.Routing(E.Kind.CANCEL, A, B, pairing=PAIRING), inner.identity, E.digest_of(E.encode_inner(inner)),
        inner.created_at, "sender revoked", NOW - 1,
    )


ID1 = message().identity


def judged(inner: E.Inner, inbox: I.Inbox, *, now: float = NOW, signature_ok: bool = True) -> E.Verdict:
    r = inner.routing
    outer = E.Outer(r, bytes(24), b"sealed").encode()
    facts = E.Facts(E.subject_for(r.kind, r.sender, r.to), 64 + len(outer), signature_ok, outer, E.encode_inner(inner))
    view = E.View(own=B, peers={A: E.Peer(KA, active=PAIRING, pairings=frozenset({PAIRING}))},
                  retained=inbox.retained(), now=now)
    return E.judge(facts, view)


def empty() -> I.Inbox:
    return I.Inbox(own=B)


LOCAL = Persist("message", ("p-remote", "m-1"), "the local message row")


def accepted(inner: E.MessageInner | None = None, base: I.Inbox | None = None) -> I.Inbox:
    box = base or empty()
    verdict = judged(inner or message(), box)
    box, _ = I.accept(box, verdict, nonce=N1, now=NOW, recipient=RECIPIENT, reason="awaiting consent: card c-1",
                      card="c-1", delivery="d-1", records=(LOCAL,))
    return box


def refused(step: Callable[[], Any], reason: I.Refusal, box: I.Inbox) -> None:
    before = copy.deepcopy(box)
    with pytest.raises(I.InboxError) as caught:
        step()
    assert caught.value.reason is reason
    assert box == before


def kinds(effects: tuple[Any, ...]) -> list[str]:
    return [type(e).__name__ for e in effects]


def receipts(effects: tuple[Any, ...]) -> list[PublishReceipt]:
    return [e for e in effects if isinstance(e, PublishReceipt)]


# --- the table --------------------------------------------------------------------------------------


def test_the_table_is_the_documented_one() -> None:
    finals = ("delivered", "declined", "refused", "cancelled", "expired", "unconfirmed")
    assert {(s.value, e, d.value) for s, e, d in I.INBOX_TABLE.edges} == {
        ("received", "accept", "accepted"),
        ("received", "refuse", "refused"),
        ("received", "too_late", "expired"),
        ("received", "tombstone", "cancelled"),
        *(("accepted", f, f) for f in finals),
    }
    assert {f.value for f in I.INBOX_TABLE.finals} == set(finals)


@pytest.mark.parametrize(
    ("state", "event"),
    [(ST.DELIVERED, "accept"), (ST.RECEIVED, "delivered"), (ST.ACCEPTED, "accept"), (ST.REFUSED, "delivered")],
)
def test_an_event_the_table_does_not_allow_is_a_loud_error(state: ST, event: str) -> None:
    with pytest.raises(TransitionNotAllowed, match="inbox"):
        I.INBOX_TABLE.next(state, event)


def test_a_second_final_outcome_is_the_table_s_loud_error_and_changes_nothing() -> None:
    box, _ = I.final(accepted(), ID1, ST.DELIVERED, reason="typed", now=NOW + 5, nonce=N2)
    before = copy.deepcopy(box)
    with pytest.raises(TransitionNotAllowed):
        I.final(box, ID1, ST.UNCONFIRMED, reason="x", now=NOW + 6, nonce=N3)
    assert box == before


# --- accept: commit before the receipt --------------------------------------------------------------


def test_accepting_commits_text_and_identity_together_then_receipts_then_acknowledges() -> None:
    """Claim: the inbox record (with the text) and the hub's records come before the receipt, and the
    receipt before the acknowledgement (I2)."""
    box = empty()
    after, effects = I.accept(box, judged(message(), box), nonce=N1, now=NOW, recipient=RECIPIENT,
                              reason="awaiting consent: card c-1", card="c-1", delivery="d-1", records=(LOCAL,))
    record = after.records[ID1]
    assert kinds(effects) == ["Persist", "Persist", "Audit", "PublishReceipt", "AckDelivery"]
    assert effects[0] == Persist(I.STORE, (ID1,), record) and effects[1] == LOCAL
    assert record.message is not None and record.message.text == "hello from box A" and record.identity == ID1
    assert effects[3] == PublishReceipt(record.receipt, N1) and effects[4] == AckDelivery("d-1")
    r = record.receipt
    assert (r.outcome, r.reason, r.card, r.recipient, r.message, r.digest) == (
        "accepted", "awaiting consent: card c-1", "c-1", RECIPIENT, ID1, record.digest,
    )
    assert r.routing == E.Routing(E.Kind.RECEIPT, B, A, pairing=PAIRING)
    assert after.retained() == {ID1: E.Held(record.digest, "accepted")}
    assert I.may_deliver(after, ID1)


def test_accept_and_refuse_take_only_a_new_message_not_held_from_a_live_pairing() -> None:
    box = accepted()
    again = judged(message(), box)  # a duplicate now
    refused(lambda: I.accept(box, again, nonce=N2, now=NOW, recipient=RECIPIENT, reason=""),
            I.Refusal.WRONG_DECISION, box)
    refused(lambda: I.refuse(box, again, nonce=N2, now=NOW, reason="r"), I.Refusal.WRONG_DECISION, box)
    stale_view = judged(message(), empty())  # judged NEW on a view that did not hold it yet
    refused(lambda: I.accept(box, stale_view, nonce=N2, now=NOW, recipient=RECIPIENT, reason=""), I.Refusal.HELD, box)
    fresh = empty()
    refused(lambda: I.accept(fresh, judged(message(), fresh), nonce=b"x", now=NOW, recipient=RECIPIENT, reason=""),
            I.Refusal.BAD_NONCE, fresh)


# --- duplicates -------------------------------------------------------------------------------------


def test_a_duplicate_is_answered_with_the_very_receipt_held_and_never_new_again() -> None:
    """Claim: a copy gets the same receipt value and nonce (the same bytes), commits nothing (I3)."""
    box = empty()
    box, first = I.accept(box, judged(message(), box), nonce=N1, now=NOW, recipient=RECIPIENT, reason="waits")
    verdict = judged(message(), box, now=NOW + 100)
    assert verdict.decision is E.Decision.DUPLICATE
    after, effects = I.receive(box, verdict, now=NOW + 100, delivery="d-2")
    assert after == box
    assert kinds(effects) == ["Audit", "PublishReceipt", "AckDelivery"]
    assert receipts(effects) == receipts(first)


def test_a_duplicate_after_the_final_outcome_gets_the_final_receipt() -> None:
    box, done = I.final(accepted(), ID1, ST.DELIVERED, reason="typed and submitted", now=NOW + 5, nonce=N2)
    verdict = judged(message(), box, now=NOW + 50)
    after, effects = I.receive(box, verdict, now=NOW + 50)
    assert after == box and receipts(effects) == receipts(done)
    assert receipts(effects)[0].inner.outcome == "delivered" and receipts(effects)[0].nonce == N2


# --- refusals by the recipient's rules are final ----------------------------------------------------


def test_a_remote_refusal_is_committed_final_and_a_retry_of_the_id_is_answered_refused() -> None:
    box = empty()
    box, effects = I.refuse(box, judged(message(), box), nonce=N1, now=NOW, reason="messages from box laptop are off",
                            delivery="d-1")
    assert kinds(effects) == ["Persist", "Audit", "PublishReceipt", "AckDelivery"]
    assert box.records[ID1].state is ST.REFUSED and box.records[ID1].message is None
    again = judged(message(), box, now=NOW + 30)
    assert again.decision is E.Decision.DUPLICATE and again.answer == "refused"
    after, answer = I.receive(box, again, now=NOW + 30)
    assert after == box and receipts(answer) == receipts(effects)
    assert not I.may_deliver(box, ID1)


# --- too late, tombstones ---------------------------------------------------------------------------


def test_a_message_past_its_id_hour_is_committed_expired_then_receipted() -> None:
    box = empty()
    old = message(created=NOW - E.ID_TTL - 1)
    verdict = judged(old, box)
    assert verdict.decision is E.Decision.TOO_LATE
    refused(lambda: I.receive(box, verdict, now=NOW), I.Refusal.BAD_NONCE, box)
    after, effects = I.receive(box, verdict, now=NOW, nonce=N1, delivery="d-1")
    assert kinds(effects) == ["Persist", "Audit", "PublishReceipt", "AckDelivery"]
    assert after.records[old.identity].state is ST.EXPIRED
    assert receipts(effects)[0].inner.outcome == "expired"


def test_a_cancel_before_its_message_commits_a_tombstone_that_answers_the_message_cancelled() -> None:
    box = empty()
    verdict = judged(cancel_of(message()), box)
    assert verdict.decision is E.Decision.TOMBSTONE
    box, effects = I.receive(box, verdict, now=NOW, nonce=N1, delivery="d-1")
    assert kinds(effects) == ["Persist", "Audit", "PublishReceipt", "AckDelivery"]
    assert box.records[ID1].tombstone and box.records[ID1].state is ST.CANCELLED
    late = judged(message(), box, now=NOW + 1)
    assert late.decision is E.Decision.CANCELLED_FIRST
    after, answer = I.receive(box, late, now=NOW + 1, delivery="d-2")
    assert after == box and receipts(answer) == receipts(effects)
    refused(lambda: I.accept(box, late, nonce=N2, now=NOW, recipient=RECIPIENT, reason=""),
            I.Refusal.WRONG_DECISION, box)


def test_receive_refuses_the_verdicts_that_are_not_its_own() -> None:
    box = empty()
    refused(lambda: I.receive(box, judged(message(), box), now=NOW), I.Refusal.WRONG_DECISION, box)
    held = accepted()
    refused(lambda: I.receive(held, judged(cancel_of(message()), held), now=NOW, nonce=N2),
            I.Refusal.WRONG_DECISION, held)


# --- refusals of the judgement ----------------------------------------------------------------------


def test_a_refused_envelope_changes_nothing_and_is_audited_once_a_minute_with_its_count() -> None:
    box = empty()
    bad = judged(message(), box, signature_ok=False)
    assert bad.decision is E.Decision.REFUSED
    box, effects = I.receive(box, bad, now=NOW, delivery="d-1")
    assert box.records == {} and kinds(effects) == ["Audit", "AckDelivery"]
    assert "bad_signature" in effects[0].detail  # type: ignore[attr-defined]
    for second in range(1, 4):
        box, effects = I.receive(box, bad, now=NOW + second, delivery="d-1")
        assert effects == (AckDelivery("d-1"),)
    box, effects = I.receive(box, bad, now=NOW + I.AUDIT_WINDOW, delivery="d-1")
    assert kinds(effects) == ["Audit", "AckDelivery"] and "(3 more before this)" in effects[0].detail  # type: ignore[attr-defined]
    box, _ = I.receive(box, bad, now=NOW + I.AUDIT_WINDOW + 1)
    box, effects = I.tick(box, now=NOW + 2 * I.AUDIT_WINDOW)
    assert [e.detail.split(":")[0] for e in effects if isinstance(e, Audit)] == ["bad_signature"]
    assert "1 more" in effects[0].detail and box.windows == {}  # type: ignore[attr-defined]


# --- finals -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("outcome", I.LOCAL_FINALS)
def test_each_final_outcome_is_committed_then_receipted_once(outcome: ST) -> None:
    box = accepted()
    after, effects = I.final(box, ID1, outcome, reason="why", now=NOW + 9, nonce=N2)
    record = after.records[ID1]
    assert kinds(effects) == ["Persist", "Audit", "PublishReceipt"]
    assert effects[0] == Persist(I.STORE, (ID1,), record)
    assert effects[2] == PublishReceipt(record.receipt, N2)
    assert (record.receipt.outcome, record.receipt.reason, record.receipt.recipient) == (str(outcome), "why", RECIPIENT)
    assert record.message == box.records[ID1].message  # the text stays with the identity
    assert I.final(after, ID1, outcome, reason="again", now=NOW + 10, nonce=N3) == (after, ())
    assert not I.may_deliver(after, ID1)


def test_a_final_for_an_identity_not_held_is_refused() -> None:
    box = accepted()
    refused(lambda: I.final(box, message("m-9").identity, ST.DELIVERED, reason="", now=NOW, nonce=N2),
            I.Refusal.UNKNOWN_MESSAGE, box)
    refused(lambda: I.final(box, ID1, ST.DELIVERED, reason="", now=NOW, nonce=b""), I.Refusal.BAD_NONCE, box)


# --- cancels ----------------------------------------------------------------------------------------


def test_a_cancel_of_a_message_not_yet_typing_cancels_it_and_receipts_cancelled() -> None:
    box = accepted()
    verdict = judged(cancel_of(message()), box)
    assert verdict.decision is E.Decision.CANCEL
    after, effects = I.cancel_arrived(box, verdict, cancellable=True, now=NOW + 3, nonce=N2, delivery="d-3")
    assert kinds(effects) == ["Persist", "Audit", "PublishReceipt", "AckDelivery"]
    assert after.records[ID1].state is ST.CANCELLED and receipts(effects)[0].inner.outcome == "cancelled"


def test_a_cancel_after_typing_started_changes_nothing_and_the_real_outcome_follows() -> None:
    box = accepted()
    verdict = judged(cancel_of(message()), box)
    after, effects = I.cancel_arrived(box, verdict, cancellable=False, now=NOW + 3, nonce=N2, delivery="d-3")
    assert after == box and kinds(effects) == ["Audit", "AckDelivery"]
    done, _ = I.final(box, ID1, ST.DELIVERED, reason="typed", now=NOW + 4, nonce=N3)
    verdict = judged(cancel_of(message()), done)
    after, effects = I.cancel_arrived(done, verdict, cancellable=True, now=NOW + 5, nonce=N2)
    assert after == done and receipts(effects)[0].inner.outcome == "delivered"
    refused(lambda: I.cancel_arrived(box, judged(message(), box), cancellable=True, now=NOW, nonce=N2),
            I.Refusal.WRONG_DECISION, box)


# --- a removed pairing ------------------------------------------------------------------------------


def test_a_removed_pairing_delivers_nothing_more() -> None:
    """Claim: accepted messages not typing are cancelled without a receipt; nothing more is accepted,
    committed or receipted from that pairing (I7)."""
    m2 = message("m-2")
    box = accepted(m2, accepted())
    after, effects = I.pairing_removed(box, PAIRING, now=NOW + 5, typing=frozenset({m2.identity}))
    assert after.records[ID1].state is ST.CANCELLED and after.records[m2.identity].state is ST.ACCEPTED
    assert kinds(effects) == ["Persist", "Audit"] and receipts(effects) == []
    assert not I.may_deliver(after, ID1) and not I.may_deliver(after, m2.identity)
    done, effects = I.final(after, m2.identity, ST.DELIVERED, reason="typing had started", now=NOW + 6, nonce=N3)
    assert kinds(effects) == ["Persist", "Audit"] and done.records[m2.identity].state is ST.DELIVERED
    stray = message("m-3")
    verdict = judged(stray, empty())
    refused(lambda: I.accept(after, verdict, nonce=N2, now=NOW, recipient=RECIPIENT, reason=""), I.Refusal.REMOVED, after)
    refused(lambda: I.refuse(after, verdict, nonce=N2, now=NOW, reason="r"), I.Refusal.REMOVED, after)
    late = judged(message("m-4", created=NOW - E.ID_TTL - 1), empty())
    refused(lambda: I.receive(after, late, now=NOW, nonce=N2), I.Refusal.REMOVED, after)


# --- retention and restart --------------------------------------------------------------------------


def test_records_are_kept_for_the_retention_then_deleted() -> None:
    box = accepted()
    assert I.tick(box, now=NOW - 5 + I.RETENTION) == (box, ())
    after, effects = I.tick(box, now=NOW - 5 + I.RETENTION + 1)
    assert after.records == {} and effects == (Persist(I.STORE, (ID1,), None),)


def test_a_restart_reloads_every_record_it_receipted() -> None:
    box, _ = I.final(accepted(message("m-2"), accepted()), ID1, ST.DECLINED, reason="no", now=NOW + 1, nonce=N2)
    again = I.load(B, box.records.values(), removed=box.removed)
    assert again.records == box.records and again.retained() == box.retained()


def test_nothing_of_a_removed_pairing_is_receipted_again() -> None:
    """Claim: a copy or a cancel reaching the inbox after the removal (the judgement refuses them
    ``removed`` first; this is the inbox's own guard) is acknowledged and answered with no receipt."""
    box, _ = I.final(accepted(), ID1, ST.DELIVERED, reason="typed", now=NOW + 1, nonce=N2)
    copy_of = judged(message(), box, now=NOW + 2)
    cancel = judged(cancel_of(message()), box, now=NOW + 2)
    after, _ = I.pairing_removed(box, PAIRING, now=NOW + 3)
    _, effects = I.receive(after, copy_of, now=NOW + 4, delivery="d-9")
    assert receipts(effects) == [] and effects[-1] == AckDelivery("d-9")
    _, effects = I.cancel_arrived(after, cancel, cancellable=True, now=NOW + 4, nonce=N3, delivery="d-9")
    assert effects == (AckDelivery("d-9"),)


def test_the_same_principal_and_id_from_two_boxes_are_two_messages() -> None:
    """Claim: the dedup identity includes the sender box (two boxes' seeded ids may collide)."""
    kc = BoxKeys(bytes([21]) * 32, bytes([22]) * 32)
    from_c = message(routing=E.Routing(E.Kind.MESSAGE, kc.box_id, B, pairing="pairing-c"))
    assert (from_c.sender.principal, from_c.id) == (message().sender.principal, message().id)
    box = accepted()
    r = from_c.routing
    outer = E.Outer(r, bytes(24), b"sealed").encode()
    facts = E.Facts(E.subject_for(r.kind, r.sender, r.to), 64 + len(outer), True, outer, E.encode_inner(from_c))
    view = E.View(own=B, peers={A: E.Peer(KA, active=PAIRING), kc.box_id: E.Peer(kc, active="pairing-c")},
                  retained=box.retained(), now=NOW)
    verdict = E.judge(facts, view)
    assert verdict.decision is E.Decision.NEW
    after, _ = I.accept(box, verdict, nonce=N2, now=NOW, recipient=RECIPIENT, reason="waits")
    assert set(after.records) == {ID1, from_c.identity} and from_c.identity != ID1
