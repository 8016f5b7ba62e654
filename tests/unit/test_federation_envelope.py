"""The envelope (connectcore.federation.envelope): fields per kind, the canonical encoding, and the
receiver's judgement from the facts the shell reports: every refusal in the documented order, each
refusal changing nothing, duplicates, too late, tombstones (docs/federation.md, "The envelope")."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from connectcore.federation import envelope as E
from connectcore.federation.boxes import BoxKeys

KA, KB, KC = (BoxKeys(bytes([n]) * 32, bytes([n + 1]) * 32) for n in (1, 11, 21))
A, B, C = KA.box_id, KB.box_id, KC.box_id  # A sends, B (this box) receives, C is a third box
PAIRING, OLD_PAIRING = "pairing-2", "pairing-1"
NOW = 1_796_500_000.0
NONCE = bytes(range(24))
SEALED = b"ciphertext stands in"


def routing(kind: E.Kind = E.Kind.MESSAGE, sender: str = A, to: str = B, **over: Any) -> E.Routing:
    fields = {"pairing": PAIRING} if "pairing" in E.ROUTING_FIELDS[kind] else {}
    if "invitation" in E.ROUTING_FIELDS[kind]:
        fields["invitation"] = "inv-1"
    fields.update(over)
    return E.Routing(kind, sender, to, **fields)


def message(**over: Any) -> E.MessageInner:
    values: dict[str, Any] = {
        "routing": routing(),
        "sender": E.Sender("p-7", "agent:claude:s-1", "claude", "%3", "0123456789abcdef"),
        "id": "m-1",
        "created_at": NOW - 5,
        "target": ("address", "%4@51d7a9c03e6f2b18"),
        "text": "hello from box A",
        "conversation": "c-1",
        "hop": 1,
        "in_reply_to": None,
    }
    values.update(over)
    return E.MessageInner(**values)


def receipt(**over: Any) -> E.ReceiptInner:
    values: dict[str, Any] = {
        "routing": routing(E.Kind.RECEIPT),
        "message": E.Identity(B, "p-1", "m-9"),
        "digest": "ab" * 32,
        "outcome": "accepted",
        "reason": "awaiting consent: card card-1",
        "at": NOW - 1,
        "recipient": ("agent:codex:s-2", "%4"),
        "card": "card-1",
    }
    values.update(over)
    return E.ReceiptInner(**values)


def cancel(**over: Any) -> E.CancelInner:
    values: dict[str, Any] = {
        "routing": routing(E.Kind.CANCEL),
        "message": message().identity,
        "digest": E.digest_of(E.encode_inner(message())),
        "created_at": NOW - 5,
        "reason": "sender revoked",
        "at": NOW - 1,
    }
    values.update(over)
    return E.CancelInner(**values)


def facts(
    inner: E.Inner,
    *,
    subject: str | None = None,
    signature_ok: bool | None = True,
    outer: bytes | None = None,
    opened: bytes | None | str = "inner",
    keys: BoxKeys | None = None,
) -> E.Facts:
    r = inner.routing
    if outer is None:
        carried = keys if keys is not None else (KA if r.kind is E.Kind.PAIR_REQUEST else None)
        outer = E.Outer(r, NONCE, SEALED, carried).encode()
    return E.Facts(
        subject if subject is not None else E.subject_for(r.kind, r.sender, r.to),
        E.SIGNATURE_BYTES + len(outer),
        signature_ok,
        outer,
        E.encode_inner(inner) if opened == "inner" else opened,  # type: ignore[arg-type]
    )


def view(**over: Any) -> E.View:
    values: dict[str, Any] = {
        "own": B,
        "peers": {A: E.Peer(KA, active=PAIRING, pairings=frozenset({OLD_PAIRING, PAIRING}))},
        "now": NOW,
    }
    values.update(over)
    return E.View(**values)


def _json_bytes(row: dict[str, Any], **dumps: Any) -> bytes:
    return json.dumps(row, **dumps).encode()


# --- the canonical encoding ---------------------------------------------------------------------------


def test_a_message_s_inner_part_is_canonical_json_and_round_trips() -> None:
    m = message()
    data = E.encode_inner(m)
    row = json.loads(data)
    assert data == json.dumps(row, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    assert {"v", "kind", "from", "to", "pairing"} <= set(row) and "keys" not in row
    outer = E.Outer(m.routing, NONCE, SEALED)
    assert E.parse_inner(data, outer) == m
    assert E.parse_outer(outer.encode()) == outer
    assert E.digest_of(data) == hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("inner", [receipt(), cancel(), message(in_reply_to=E.Identity(B, "p-1", "m-0"))])
def test_every_kind_round_trips(inner: E.Inner) -> None:
    outer = E.Outer(inner.routing, NONCE, SEALED)
    assert E.parse_inner(E.encode_inner(inner), outer) == inner


texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=200)


@given(texts, st.floats(min_value=0, max_value=4e9, allow_nan=False), st.integers(0, 10), texts)
def test_any_message_encodes_to_one_form_that_parses_back(text: str, created: float, hop: int, conv: str) -> None:
    """Claim: encode_inner is deterministic and parse_inner(encode_inner(m)) == m for any field values."""
    m = message(text=text, created_at=created, hop=hop, conversation=conv)
    data = E.encode_inner(m)
    assert data == E.encode_inner(dataclasses.replace(m))
    assert E.parse_inner(data, E.Outer(m.routing, NONCE, SEALED)) == m


@pytest.mark.parametrize(
    "mangle",
    [
        lambda row: _json_bytes(row, sort_keys=True),  # whitespace
        lambda row: _json_bytes(dict(reversed(list(row.items()))), separators=(",", ":")),  # keys not sorted
        lambda row: E.canonical(row).replace(b'"v"', b'"\\u0076"'),  # an escape for a plain letter
        lambda row: E.canonical(row) + b"\n",
        lambda row: _json_bytes({**row, "extra": 1}, sort_keys=True, separators=(",", ":")),
        lambda row: _json_bytes({k: v for k, v in row.items() if k != "nonce"}, sort_keys=True, separators=(",", ":")),
        lambda row: _json_bytes({**row, "v": 2}, sort_keys=True, separators=(",", ":")),
        lambda row: _json_bytes({**row, "kind": "history"}, sort_keys=True, separators=(",", ":")),
        lambda row: _json_bytes({**row, "nonce": row["nonce"] + "=="}, sort_keys=True, separators=(",", ":")),
        lambda row: _json_bytes({**row, "nonce": "AAAA"}, sort_keys=True, separators=(",", ":")),
        lambda row: _json_bytes({**row, "to": "NOT-A-BOX"}, sort_keys=True, separators=(",", ":")),
        lambda row: b"[1, 2]",
        lambda row: b"\xff\xfe",
        lambda row: b'{"v": NaN}',
    ],
)
def test_an_outer_part_that_is_not_canonical_is_malformed(mangle: Any) -> None:
    row = json.loads(E.Outer(routing(), NONCE, SEALED).encode().decode("utf-8"))
    assert E.parse_outer(E.canonical(row)) == E.Outer(routing(), NONCE, SEALED)
    with pytest.raises(E.EnvelopeError) as caught:
        E.parse_outer(mangle(row))
    assert caught.value.reason is E.Refusal.MALFORMED


def test_an_escaped_inner_part_is_not_canonical() -> None:
    m = message(text="café")
    escaped = json.dumps(json.loads(E.encode_inner(m)), sort_keys=True, separators=(",", ":")).encode()
    with pytest.raises(E.EnvelopeError, match="canonical") as caught:
        E.parse_inner(escaped, E.Outer(m.routing, NONCE, SEALED))
    assert caught.value.reason is E.Refusal.BAD_BINDING


def test_routing_fields_are_per_kind_and_checked_loudly() -> None:
    with pytest.raises(E.EnvelopeError, match="carries no invitation"):
        E.Routing(E.Kind.MESSAGE, A, B, pairing=PAIRING, invitation="inv-1")
    with pytest.raises(E.EnvelopeError, match="names its pairing by an id"):
        E.Routing(E.Kind.MESSAGE, A, B)
    with pytest.raises(E.EnvelopeError, match="from is not a box id"):
        E.Routing(E.Kind.MESSAGE, "laptop", B, pairing=PAIRING)
    with pytest.raises(E.EnvelopeError, match="only a pair_request carries"):
        E.Outer(routing(), NONCE, SEALED, KA)
    with pytest.raises(E.EnvelopeError, match="24 bytes"):
        E.Outer(routing(), b"short", SEALED)
    assert E.subject_for(E.Kind.RECEIPT, A, B) == f"connect.{B}.receipts.{A}"
    assert E.parse_subject(f"connect.{B}.inbox.{A}") == E.Subject(B, "inbox", A)
    # a directory entry's subject is the bucket's republish (slice 7); a history query or answer is
    # judged under connect.<to>.history.<from> (the NATS subject, connect.<to>.history, names no sender)
    assert E.parse_subject(f"connect.{B}.directory.{A}") == E.Subject(B, "directory", A)
    assert E.parse_subject(f"connect.{B}.history.{A}") == E.Subject(B, "history", A)
    assert E.parse_subject(f"connect.{B}.history") is None


# --- the judgement: what passes -------------------------------------------------------------------


def test_a_new_message_from_a_paired_box_is_new_for_the_recipient_s_rules() -> None:
    m = message()
    verdict = E.judge(facts(m), view())
    assert verdict.decision is E.Decision.NEW
    assert verdict.identity == E.Identity(A, "p-7", "m-1")
    assert verdict.digest == E.digest_of(E.encode_inner(m))
    assert verdict.inner == m and verdict.record is None and verdict.answer is None
    assert verdict.actor == f"box:{A}"


def test_a_duplicate_is_answered_with_the_receipt_held_and_commits_nothing() -> None:
    m = message()
    held = {m.identity: E.Held(E.digest_of(E.encode_inner(m)), "delivered")}
    verdict = E.judge(facts(m), view(retained=held))
    assert (verdict.decision, verdict.answer, verdict.record) == (E.Decision.DUPLICATE, "delivered", None)
    assert verdict.audit == ("federation.envelope", "duplicate", "held: delivered")


def test_a_message_past_its_id_s_hour_is_committed_expired_and_answered() -> None:
    m = message(created_at=NOW - 3601)
    verdict = E.judge(facts(m), view())
    assert verdict.decision is E.Decision.TOO_LATE
    assert verdict.record == E.Held(E.digest_of(E.encode_inner(m)), "expired")
    assert verdict.answer == "expired" and "after the id's hour" in verdict.detail
    assert E.judge(facts(message(created_at=NOW - 3599)), view()).decision is E.Decision.NEW


def test_a_cancel_for_a_message_not_held_commits_a_tombstone_that_answers_the_message_later() -> None:
    c = cancel()
    verdict = E.judge(facts(c), view())
    assert verdict.decision is E.Decision.TOMBSTONE and verdict.answer == "cancelled"
    assert verdict.record == E.Held(c.digest, "cancelled", tombstone=True)
    assert verdict.identity == message().identity
    retained = {message().identity: verdict.record}
    later = E.judge(facts(message()), view(retained=retained))
    assert (later.decision, later.answer, later.record) == (E.Decision.CANCELLED_FIRST, "cancelled", None)
    again = E.judge(facts(c), view(retained=retained))
    assert (again.decision, again.answer, again.record) == (E.Decision.DUPLICATE, "cancelled", None)


def test_a_cancel_for_a_message_held_goes_to_its_cancellation() -> None:
    retained = {message().identity: E.Held(cancel().digest, "accepted")}
    verdict = E.judge(facts(cancel()), view(retained=retained))
    assert verdict.decision is E.Decision.CANCEL and verdict.record is None and verdict.answer is None


def test_a_receipt_for_a_message_this_box_sent_goes_to_the_outbox() -> None:
    r = receipt()
    verdict = E.judge(facts(r), view(sent={r.message: r.digest}))
    assert verdict.decision is E.Decision.RECEIPT and verdict.identity == r.message


def test_a_pair_request_from_an_unpaired_box_is_checked_with_the_keys_it_carries() -> None:
    inner = E.PairingInner(routing(E.Kind.PAIR_REQUEST), (("name", "devbox"), ("secret", "c2VjcmV0")))
    f = facts(inner)
    v = view(peers={})
    assert E.keys_to_verify(f.subject, f.size, f.outer, v) == KA
    verdict = E.judge(f, v)
    assert verdict.decision is E.Decision.PAIRING and verdict.inner == inner


def test_the_keys_to_verify_with_are_the_pinned_ones_and_none_before_any_refusal_of_steps_1_to_3() -> None:
    f = facts(message())
    assert E.keys_to_verify(f.subject, f.size, f.outer, view()) == KA
    assert E.keys_to_verify(f.subject, f.size, f.outer, view(peers={})) is None
    assert E.keys_to_verify(f.subject, 70_000, f.outer, view()) is None
    assert E.keys_to_verify(f.subject.replace(B, C), f.size, f.outer, view()) is None


# --- the judgement: every refusal, in order, each changing nothing ------------------------------------

_other_outer = E.Outer(routing(E.Kind.MESSAGE, to=C), NONCE, SEALED).encode()
_c_outer = E.Outer(routing(E.Kind.MESSAGE, sender=C), NONCE, SEALED).encode()
_receipt_outer = E.Outer(routing(E.Kind.RECEIPT), NONCE, SEALED).encode()
_unpair = E.PairingInner(routing(E.Kind.UNPAIR, pairing="pairing-9"), (("at", NOW), ("reason", "removed")))
_pair_request = E.PairingInner(routing(E.Kind.PAIR_REQUEST, sender=C), (("name", "c"), ("secret", "s")))
_digest = E.digest_of(E.encode_inner(message()))

REFUSALS: list[tuple[str, E.Refusal, E.Facts, E.View]] = [
    ("subject not one", E.Refusal.MALFORMED, facts(message(), subject="connect.x.inbox.y"), view()),
    ("too long", E.Refusal.MALFORMED, dataclasses.replace(facts(message()), size=64 * 1024 + 1), view()),
    ("no room for a signature", E.Refusal.MALFORMED, dataclasses.replace(facts(message()), size=64), view()),
    ("subject for another box", E.Refusal.WRONG_BOX, facts(message(), subject=f"connect.{C}.inbox.{A}"), view()),
    ("never paired", E.Refusal.UNPAIRED, facts(message()), view(peers={})),
    ("unpaired, pairing subject, not a request", E.Refusal.UNPAIRED, facts(_unpair), view(peers={})),
    ("request keys are another box's", E.Refusal.BAD_BINDING,
     facts(_pair_request, subject=E.subject_for(E.Kind.PAIR_REQUEST, A, B), keys=KC), view(peers={})),
    ("request outer garbled", E.Refusal.MALFORMED,
     facts(_pair_request, subject=E.subject_for(E.Kind.PAIR_REQUEST, C, B), outer=b"{}"), view(peers={})),
    ("bad signature", E.Refusal.BAD_SIGNATURE, facts(message(), signature_ok=False), view()),
    ("outer not canonical", E.Refusal.MALFORMED, facts(message(), outer=b'{"v": 1}'), view()),
    ("outer for another box", E.Refusal.WRONG_BOX, facts(message(), outer=_other_outer), view()),
    ("outer from another box", E.Refusal.BAD_BINDING, facts(message(), outer=_c_outer),
     view(peers={A: E.Peer(KA, PAIRING), C: E.Peer(KC, "pc")})),
    ("outer kind off its subject", E.Refusal.BAD_BINDING, facts(message(), outer=_receipt_outer), view()),
    ("pairing removed", E.Refusal.REMOVED, facts(message(routing=routing(pairing=OLD_PAIRING))), view()),
    ("no active pairing", E.Refusal.REMOVED, facts(message()), view(peers={A: E.Peer(KA, None)})),
    ("unpair of a pairing never made", E.Refusal.REMOVED, facts(_unpair), view()),
    ("seal does not open", E.Refusal.BAD_SEAL, facts(message(), opened=None), view()),
    ("inner routing moved", E.Refusal.BAD_BINDING,
     facts(message(), opened=E.encode_inner(message(routing=routing(pairing=OLD_PAIRING)))), view()),
    ("inner not JSON", E.Refusal.BAD_BINDING, facts(message(), opened=b"\x00garbage"), view()),
    ("inner lacks a field", E.Refusal.BAD_BINDING, facts(message(), opened=E.canonical(
        {k: v for k, v in json.loads(E.encode_inner(message())).items() if k != "hop"})), view()),
    ("inner field of the wrong type", E.Refusal.BAD_BINDING, facts(message(), opened=E.canonical(
        {**json.loads(E.encode_inner(message())), "hop": "1"})), view()),
    ("clock far ahead", E.Refusal.CLOCK_AHEAD, facts(message(created_at=NOW + 301)), view()),
    ("receipt from the future", E.Refusal.CLOCK_AHEAD, facts(receipt(at=NOW + 3600)), view()),
    ("older than the retention", E.Refusal.STALE, facts(message(created_at=NOW - 86_401)), view()),
    ("reused id, other content", E.Refusal.CONFLICT, facts(message()),
     view(retained={message().identity: E.Held("00" * 32, "delivered")})),
    ("cancel names another digest", E.Refusal.CONFLICT, facts(cancel(digest="11" * 32)),
     view(retained={message().identity: E.Held(_digest, "accepted")})),
    ("receipt for a message never sent", E.Refusal.UNKNOWN_MESSAGE, facts(receipt()), view()),
    ("receipt with another digest", E.Refusal.UNKNOWN_MESSAGE, facts(receipt()),
     view(sent={receipt().message: "cd" * 32})),
    ("cancel of another box's message", E.Refusal.UNKNOWN_MESSAGE,
     facts(cancel(message=E.Identity(C, "p-7", "m-1"))), view()),
]


@pytest.mark.parametrize(("case", "reason", "given_facts", "given_view"), REFUSALS, ids=[r[0] for r in REFUSALS])
def test_every_refusal_is_its_reason_with_an_audit_note_and_changes_nothing(
    case: str, reason: E.Refusal, given_facts: E.Facts, given_view: E.View
) -> None:
    before = (dict(given_view.peers), dict(given_view.retained), dict(given_view.sent))
    verdict = E.judge(given_facts, given_view)
    assert verdict.decision is E.Decision.REFUSED, case
    assert verdict.reason is reason, (case, verdict.detail)
    assert verdict.detail  # says why, in words
    assert verdict.audit == ("federation.envelope", "refused", str(reason))
    # nothing to commit, nothing to publish, nothing carried on
    assert (verdict.record, verdict.answer, verdict.inner, verdict.identity) == (None, None, None, None)
    assert (dict(given_view.peers), dict(given_view.retained), dict(given_view.sent)) == before


def test_every_refusal_reason_is_exercised() -> None:
    assert {reason for _, reason, _, _ in REFUSALS} == set(E.Refusal)


def test_the_actor_of_a_refusal_is_the_subject_s_sender_box() -> None:
    assert E.judge(facts(message(), signature_ok=False), view()).actor == f"box:{A}"
    assert E.judge(facts(message(), subject="nonsense"), view()).actor == "box:unknown"


def test_the_first_refusal_in_the_order_decides() -> None:
    """A wire that fails several checks is refused by the earliest: the subject's box before the
    signature, the signature before the outer part, the seal before the inner part, the clock before
    staleness."""
    bad_everything = facts(message(created_at=NOW + 10_000), signature_ok=False, opened=None)
    assert E.judge(bad_everything, view(peers={})).reason is E.Refusal.UNPAIRED
    assert E.judge(bad_everything, view()).reason is E.Refusal.BAD_SIGNATURE
    assert E.judge(dataclasses.replace(bad_everything, signature_ok=True), view()).reason is E.Refusal.BAD_SEAL
    wrong_to = dataclasses.replace(facts(message(), outer=_other_outer, signature_ok=False), subject=f"connect.{C}.inbox.{A}")
    assert E.judge(wrong_to, view()).reason is E.Refusal.WRONG_BOX
    assert E.judge(facts(message(created_at=NOW + 10_000), opened=b"{"), view()).reason is E.Refusal.BAD_BINDING


def test_the_clock_bound_and_the_retention_are_inclusive_edges() -> None:
    assert E.judge(facts(message(created_at=NOW + 300)), view()).decision is E.Decision.NEW
    assert E.judge(facts(message(created_at=NOW - 86_400)), view()).decision is E.Decision.TOO_LATE
    shorter = view(retention=60.0)
    assert E.judge(facts(message(created_at=NOW - 61)), shorter).reason is E.Refusal.STALE


@given(st.sampled_from(range(len(REFUSALS))), st.floats(min_value=-1e6, max_value=1e6, allow_nan=False))
def test_a_refusal_does_not_depend_on_what_else_the_box_holds(index: int, shift: float) -> None:
    """Claim: judging a refused wire twice, with other identities held meanwhile, gives the same refusal."""
    _, reason, given_facts, given_view = REFUSALS[index]
    other = {E.Identity(A, "p-x", f"m-{shift}"): E.Held("ee" * 32, "accepted")}
    busier = dataclasses.replace(given_view, retained={**given_view.retained, **other})
    assert E.judge(given_facts, busier).reason is reason
    assert E.judge(given_facts, given_view) == E.judge(given_facts, given_view)


def test_a_flood_of_refusals_is_audited_once_a_minute_per_box_and_reason() -> None:
    """refusal_audit_due: the first refusal of a box for a reason is audited, then none until a minute
    after it, and that next record counts those left out; another box or another reason is its own;
    the mapping handed in is never changed."""
    audited: E.RefusalAudits = {}
    due, left_out, state = E.refusal_audit_due(audited, "box:a", "bad_signature", NOW)
    assert (due, left_out, audited, state) == (True, 0, {}, {("box:a", "bad_signature"): (NOW, 0)})
    for n, dt in enumerate((1.0, 30.0, E.REFUSAL_AUDIT_EVERY - 0.001), start=1):
        before = dict(state)
        due, left_out, state = E.refusal_audit_due(state, "box:a", "bad_signature", NOW + dt)
        assert (due, left_out) == (False, n) and before != state
    assert E.refusal_audit_due(state, "box:a", "stale", NOW + 1)[0]
    assert E.refusal_audit_due(state, "box:b", "bad_signature", NOW + 1)[0]
    due, left_out, later = E.refusal_audit_due(state, "box:a", "bad_signature", NOW + E.REFUSAL_AUDIT_EVERY)
    assert (due, left_out, later) == (True, 3, {("box:a", "bad_signature"): (NOW + E.REFUSAL_AUDIT_EVERY, 0)})
    assert E.refusal_count_words(3) == " (and 3 more refused since the last record)" and E.refusal_count_words(0) == ""
    _, _, pruned = E.refusal_audit_due(later, "box:b", "stale", NOW + 3 * E.REFUSAL_AUDIT_EVERY)
    assert pruned == {("box:b", "stale"): (NOW + 3 * E.REFUSAL_AUDIT_EVERY, 0)}  # a minute old, nothing left out
    _, _, kept = E.refusal_audit_due(state, "box:b", "stale", NOW + 3 * E.REFUSAL_AUDIT_EVERY)
    assert kept[("box:a", "bad_signature")] == state[("box:a", "bad_signature")]  # its count still owed
