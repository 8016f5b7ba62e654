"""Seal then sign, verify then open, on real PyNaCl keys (connectd.federation.seal), judged by the
core: a sealed envelope is accepted once and answered as a duplicate after; a forged signature, a
ciphertext re-signed by another box, a wire for another box, a replay past the retention, a clock far
ahead and any flipped byte are each refused, and a refusal changes nothing (docs/federation.md,
"The envelope", "Threat model")."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import nacl.signing
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from connectcore.federation import boxes
from connectcore.federation import envelope as E
from connectd.federation import keys as K
from connectd.federation import seal as S
from connectd.federation.keys import BoxSecrets


def _box(n: int) -> S.LocalBox:
    return S.LocalBox.from_secrets(BoxSecrets(bytes([n]) * 32, bytes([n + 100]) * 32))


BOX_A, BOX_B, BOX_C = _box(1), _box(2), _box(3)
A, B, C = BOX_A.box_id, BOX_B.box_id, BOX_C.box_id
PAIRING = "pairing-1"
NOW = 1_796_500_000.0
NONCE = bytes(range(24))


def message(sender: S.LocalBox = BOX_A, to: S.LocalBox = BOX_B, **over: Any) -> E.MessageInner:
    values: dict[str, Any] = {
        "routing": E.Routing(E.Kind.MESSAGE, sender.box_id, to.box_id, pairing=PAIRING),
        "sender": E.Sender("p-7", "agent:claude:s-1", "claude", "%3", "0123456789abcdef"),
        "id": "m-1",
        "created_at": NOW - 5,
        "target": ("handle", "pr:12"),
        "text": "the secret plan: ship on friday",
        "conversation": "c-1",
        "hop": 1,
    }
    values.update(over)
    return E.MessageInner(**values)


def b_view(**over: Any) -> E.View:
    """Box B's view: A paired and active (C too, on its own pairing, for the re-signing attack)."""
    values: dict[str, Any] = {
        "own": B,
        "peers": {A: E.Peer(BOX_A.keys, active=PAIRING), C: E.Peer(BOX_C.keys, active="pairing-c")},
        "now": NOW,
    }
    values.update(over)
    return E.View(**values)


def on(inner: E.Inner) -> str:
    r = inner.routing
    return E.subject_for(r.kind, r.sender, r.to)


def test_the_box_id_of_a_local_box_is_the_core_s_digest_of_its_public_keys(tmp_path: Path) -> None:
    local = S.LocalBox.from_secrets(K.create(tmp_path))
    again = S.LocalBox.from_secrets(K.read(tmp_path))
    assert local.keys == again.keys
    assert local.box_id == boxes.box_id(bytes(local.signing.verify_key), bytes(local.sealing.public_key))
    assert "secret" not in repr(local) and local.box_id in repr(local)


def test_a_sealed_message_is_new_then_a_duplicate_and_the_stream_sees_no_text() -> None:
    m = message()
    wire = S.seal(BOX_A, BOX_B.keys, m, NONCE)
    assert b"secret plan" not in wire and b"pr:12" not in wire and b"p-7" not in wire
    verdict = S.receive(BOX_B, on(m), wire, b_view())
    assert verdict.decision is E.Decision.NEW and verdict.inner == m
    held = {m.identity: E.Held(verdict.digest or "", "accepted")}
    replay = S.receive(BOX_B, on(m), wire, b_view(retained=held))
    assert (replay.decision, replay.answer, replay.record) == (E.Decision.DUPLICATE, "accepted", None)


@settings(max_examples=50, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=300), st.binary(min_size=24, max_size=24), st.binary(min_size=24, max_size=24))
def test_the_same_row_sealed_twice_is_the_same_bytes(text: str, nonce: bytes, other: bytes) -> None:
    """Claim: seal(inner, nonce) is deterministic (the outbox stores the nonce), and another nonce changes it."""
    m = message(text=text)
    first = S.seal(BOX_A, BOX_B.keys, m, nonce)
    assert S.seal(BOX_A, BOX_B.keys, m, nonce) == first
    if other != nonce:
        assert S.seal(BOX_A, BOX_B.keys, m, other) != first


_WIRE = S.seal(BOX_A, BOX_B.keys, message(), NONCE)


@settings(max_examples=300)
@given(st.data())
def test_any_flipped_byte_of_a_sealed_and_signed_wire_is_refused(data: st.DataObject) -> None:
    """Claim: flipping any bits of any one byte of the wire makes the receiver refuse it (bad_signature)."""
    position = data.draw(st.integers(0, len(_WIRE) - 1))
    mask = data.draw(st.integers(1, 255))
    flipped = bytearray(_WIRE)
    flipped[position] ^= mask
    verdict = S.receive(BOX_B, on(message()), bytes(flipped), b_view())
    assert verdict.decision is E.Decision.REFUSED
    assert verdict.reason is E.Refusal.BAD_SIGNATURE
    assert (verdict.record, verdict.answer) == (None, None)


def _refused(wire: bytes, subject: str, view: E.View, reason: E.Refusal) -> None:
    before = (dict(view.peers), dict(view.retained), dict(view.sent))
    verdict = S.receive(BOX_B, subject, wire, view)
    assert (verdict.decision, verdict.reason) == (E.Decision.REFUSED, reason), verdict.detail
    assert (verdict.record, verdict.answer, verdict.inner) == (None, None, None)
    assert (dict(view.peers), dict(view.retained), dict(view.sent)) == before


def test_a_forged_signature_is_refused() -> None:
    """A wire signed by a key B never pinned for A (the outer part intact)."""
    outer = _WIRE[E.SIGNATURE_BYTES :]
    forged = nacl.signing.SigningKey(b"\x09" * 32).sign(outer).signature + outer
    _refused(forged, on(message()), b_view(), E.Refusal.BAD_SIGNATURE)


def test_a_ciphertext_re_signed_by_another_paired_box_does_not_open() -> None:
    """C takes A's sealed part and sends it as its own (its outer, its signature): crypto_box is
    authenticated with A's key, so it does not open with C's (bad_seal)."""
    honest = E.parse_outer(_WIRE[E.SIGNATURE_BYTES :])
    stolen = E.Outer(E.Routing(E.Kind.MESSAGE, C, B, pairing="pairing-c"), honest.nonce, honest.sealed).encode()
    wire = BOX_C.signing.sign(stolen).signature + stolen
    _refused(wire, E.subject_for(E.Kind.MESSAGE, C, B), b_view(), E.Refusal.BAD_SEAL)


def test_an_envelope_from_an_unpaired_box_is_refused_before_any_cryptography() -> None:
    m = message(sender=BOX_C)
    wire = S.seal(BOX_C, BOX_B.keys, m, NONCE)
    facts = S.read_wire(BOX_B, on(m), wire, b_view(peers={A: E.Peer(BOX_A.keys, PAIRING)}))
    assert (facts.signature_ok, facts.opened) == (None, None)
    _refused(wire, on(m), b_view(peers={A: E.Peer(BOX_A.keys, PAIRING)}), E.Refusal.UNPAIRED)


def test_a_wire_for_another_box_is_refused() -> None:
    """Sealed to C, published to B under B's subject (wrong_box from the outer), or under C's (from the subject)."""
    m = message(to=BOX_C)
    wire = S.seal(BOX_A, BOX_C.keys, m, NONCE)
    _refused(wire, E.subject_for(E.Kind.MESSAGE, A, B), b_view(), E.Refusal.WRONG_BOX)
    _refused(wire, on(m), b_view(), E.Refusal.WRONG_BOX)


def test_a_replay_past_the_retention_is_stale() -> None:
    later = b_view(now=NOW + 86_400 + 60)
    _refused(_WIRE, on(message()), later, E.Refusal.STALE)


def test_a_clock_far_ahead_is_refused() -> None:
    m = message(created_at=NOW + 3600)
    _refused(S.seal(BOX_A, BOX_B.keys, m, NONCE), on(m), b_view(), E.Refusal.CLOCK_AHEAD)


def test_an_envelope_after_the_pairing_was_removed_is_refused() -> None:
    _refused(_WIRE, on(message()), b_view(peers={A: E.Peer(BOX_A.keys, None, frozenset({PAIRING}))}),
             E.Refusal.REMOVED)


@pytest.mark.parametrize("cut", [0, 10, 64, 65, len(_WIRE) - 1])
def test_a_truncated_wire_is_refused_not_raised(cut: int) -> None:
    verdict = S.receive(BOX_B, on(message()), _WIRE[:cut], b_view())
    assert verdict.decision is E.Decision.REFUSED
    assert verdict.reason in (E.Refusal.MALFORMED, E.Refusal.BAD_SIGNATURE)


def test_a_pair_request_is_verified_with_the_keys_it_carries_and_opened() -> None:
    inner = E.PairingInner(E.Routing(E.Kind.PAIR_REQUEST, C, B, invitation="inv-1"),
                           (("name", "devbox"), ("secret", "c2VjcmV0")))
    wire = S.seal(BOX_C, BOX_B.keys, inner, NONCE)
    assert E.parse_outer(wire[E.SIGNATURE_BYTES :]).keys == BOX_C.keys
    verdict = S.receive(BOX_B, on(inner), wire, b_view(peers={}))
    assert verdict.decision is E.Decision.PAIRING and verdict.inner == inner
    # the same request signed by a key that is not the one it carries
    outer = wire[E.SIGNATURE_BYTES :]
    forged = BOX_A.signing.sign(outer).signature + outer
    _refused(forged, on(inner), b_view(peers={}), E.Refusal.BAD_SIGNATURE)


def test_seal_refuses_keys_that_do_not_match_the_routing() -> None:
    with pytest.raises(ValueError, match="other boxes"):
        S.seal(BOX_A, BOX_C.keys, message(), NONCE)


def test_a_row_sealed_with_another_nonce_still_opens_and_judges_the_same() -> None:
    one = S.receive(BOX_B, on(message()), S.seal(BOX_A, BOX_B.keys, message(), bytes(24)), b_view())
    two = S.receive(BOX_B, on(message()), _WIRE, b_view())
    assert dataclasses.replace(one) == two  # the verdict depends on the inner part, not the nonce
