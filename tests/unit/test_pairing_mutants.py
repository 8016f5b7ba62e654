"""Pairing: rules the 2026-12-06 (third) mutation run found unpinned (docs/quality.md names the
mutants each test kills)."""

from __future__ import annotations

import json

import pytest

from connectcore.effects import Audit
from connectcore.federation import pairing as P
from connectcore.federation.boxes import BoxKeys
from connectcore.federation.envelope import b64, canonical
from tests.unit.test_federation_pairing import B1, B2, OWN, SECRET, T0

PS, Ref = P.PairingState, P.Refusal


def test_a_refusal_s_audit_line_is_whole_and_at_time_zero_unless_given() -> None:
    """P9: the caller's audit line of a refusal carries who, what, its target and time as given; with
    neither target nor time, none and 0."""
    error = P.PairingError(Ref.INVITATION_USED, "invitation 'inv1' was already used")
    assert error.audit(actor="box:x", action="pair.request", target="inv1", at=T0) == Audit(
        actor="box:x", action="pair.request", outcome="refused", target="inv1",
        detail="invitation_used: invitation 'inv1' was already used", at=T0,
    )
    assert error.audit(actor="owner", action="pair.approve") == Audit(
        actor="owner", action="pair.approve", outcome="refused", target=None,
        detail="invitation_used: invitation 'inv1' was already used", at=0.0,
    )


def _pairing(invitation: str, keys: BoxKeys, state: P.PairingState, since: float) -> P.Pairing:
    return P.Pairing(invitation, P.Role.INVITEE, keys.box_id, keys, "devbox", state, since)


def test_named_prefers_the_active_pairing_of_a_name_else_the_latest_requested() -> None:
    """``PairBook.named``: of the live pairings called ``name``, the active one even if a requested one
    is later; of requested ones only, the latest, whatever order the book holds them in."""
    active = _pairing("inv1", B1, PS.ACTIVE, T0)
    later = _pairing("inv2", B2, PS.REQUESTED, T0 + 5)
    book = P.PairBook(OWN.box_id, "laptop", pairings={"inv1": active, "inv2": later})
    assert book.named("devbox") == active
    older = _pairing("inv3", B1, PS.REQUESTED, T0 + 1)
    book = P.PairBook(OWN.box_id, "laptop", pairings={"inv2": later, "inv3": older})
    assert book.named("devbox") == later


def _code_text(row: object) -> str:
    return P.CODE_PREFIX + b64(json.dumps(row, sort_keys=True, separators=(",", ":")).encode())


def _code_row() -> dict[str, object]:
    return {
        "v": 1, "box": OWN.box_id, "name": "laptop", "sign": b64(OWN.sign), "seal": b64(OWN.seal),
        "invitation": "inv1", "secret": b64(SECRET), "expires_at": 1_796_500_000,
    }


def _bad_code(text: str) -> str:
    with pytest.raises(P.PairingError) as caught:
        P.decode_code(text)
    assert caught.value.reason is Ref.BAD_CODE
    return str(caught.value)


HINT = " (copy the whole line `pair invite` printed)"


def test_a_code_that_is_not_a_version_1_invitation_is_refused_in_those_words() -> None:
    """A code's JSON must be an object of exactly the invitation's fields at version 1: a list, a
    version 2 or a missing field is refused ``bad_code`` saying so (never a ``KeyError`` or an
    ``AttributeError`` of a half-read code)."""
    assert P.decode_code(P.CODE_PREFIX + b64(canonical(_code_row()))).invitation == "inv1"  # the row is good
    words = "not an invitation code: it is not a version 1 invitation" + HINT
    missing = {k: v for k, v in _code_row().items() if k != "secret"}
    for bad in ([1, 2], {**_code_row(), "v": 2}, missing):
        assert _bad_code(_code_text(bad)) == words, bad


def test_a_code_whose_text_or_keys_are_not_base64url_is_refused_naming_which() -> None:
    assert _bad_code(P.CODE_PREFIX + "!!") == "not an invitation code: it is not base64url of JSON" + HINT
    row = {**_code_row(), "sign": "!!"}
    assert _bad_code(_code_text(row)) == "not an invitation code: sign is not base64url" + HINT
