"""Pairing: rules the 2026-12-06 (third) mutation run found unpinned (docs/quality.md names the
mutants each test kills)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from connectcore.effects import Audit, Notify, Persist
from connectcore.federation import pairing as P
from connectcore.federation.boxes import BoxKeys
from connectcore.federation.envelope import b64, canonical
from tests.unit.test_federation_pairing import B1, B2, OWN, SECRET, T0, accepted_code, paired, requested

IS, R, PS, Ref = P.InvitationState, P.RequestState, P.PairingState, P.Refusal


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


def _refusal(step: object, reason: P.Refusal) -> str:
    assert callable(step)
    with pytest.raises(P.PairingError) as caught:
        step()
    assert caught.value.reason is reason
    return str(caught.value)


def test_revoking_an_invitation_is_one_whole_step_and_its_refusals_say_why() -> None:
    """The invitation revoked at that time, each pending request on it refused ``invitation_revoked``
    at that time, one audit line as who took it; an unknown or closed invitation refused in words."""
    book = requested(("r1", B1, "devbox"))
    after, effects = P.revoke_invitation(book, "inv1", now=T0 + 3, actor="owner:page:1")
    revoked = replace(book.invitations["inv1"], state=IS.REVOKED, decided_at=T0 + 3)
    refused = replace(book.requests["r1"], state=R.REFUSED, reason="invitation_revoked", decided_at=T0 + 3)
    assert (after.invitations["inv1"], after.requests["r1"]) == (revoked, refused)
    assert effects == (
        Persist("pair_invitation", ("inv1",), revoked),
        Persist("pair_request", ("r1",), refused),
        Audit(actor="owner:page:1", action="pair.invite", outcome="revoked", target="inv1", at=T0 + 3),
    )
    assert _refusal(lambda: P.revoke_invitation(book, "nope", now=T0 + 3), Ref.UNKNOWN_INVITATION) == (
        "no invitation 'nope' on this box")
    assert _refusal(lambda: P.revoke_invitation(after, "inv1", now=T0 + 4), Ref.INVITATION_REVOKED) == (
        "invitation 'inv1' is revoked, not open")


def test_declining_is_one_whole_step_refusing_only_the_other_requests() -> None:
    book = requested(("r1", B1, "devbox"), ("r2", B2, "other"))
    after, effects = P.decline(book, "r1", now=T0 + 4, actor="owner:page:1")
    consumed = replace(book.invitations["inv1"], state=IS.CONSUMED, decided_at=T0 + 4)
    declined = replace(book.requests["r1"], state=R.DECLINED, decided_at=T0 + 4)
    other = replace(book.requests["r2"], state=R.REFUSED, reason="invitation_used", decided_at=T0 + 4)
    assert (after.invitations["inv1"], after.requests["r1"], after.requests["r2"]) == (consumed, declined, other)
    assert effects == (
        Persist("pair_invitation", ("inv1",), consumed),
        Persist("pair_request", ("r1",), declined),
        Persist("pair_request", ("r2",), other),
        Audit(actor="owner:page:1", action="pair.decline", outcome="declined", target="r1", at=T0 + 4),
        Notify(topic="pairing", key=("r1",), payload={"event": "declined", "box": B1.box_id}),
    )


def test_an_expiry_tick_is_one_whole_step_for_invitations_requests_and_requested_pairings() -> None:
    """P8: an open invitation past its expiry and its pending request expire at the tick's time; an
    invitee's requested pairing past its grace expires then too, audited by connectd and notified."""
    book = requested(("r1", B1, "devbox"))
    book, _ = P.accept_code(book, invitation_id="inv9", keys=B2, name="other", expires_at=T0 + 10, now=T0)
    now = T0 + 10 + P.ANSWER_GRACE
    after, effects = P.expire(book, now=now)
    invitation = replace(book.invitations["inv1"], state=IS.EXPIRED, decided_at=now)
    request = replace(book.requests["r1"], state=R.EXPIRED, reason="invitation_expired", decided_at=now)
    pairing = replace(book.pairings["inv9"], state=PS.EXPIRED, since=now)
    assert (after.invitations["inv1"], after.requests["r1"], after.pairings["inv9"]) == (invitation, request, pairing)
    assert effects == (
        Persist("pair_invitation", ("inv1",), invitation),
        Persist("pair_request", ("r1",), request),
        Audit(actor="connectd", action="pair.invite", outcome="expired", target="inv1", at=now),
        Persist("pairing", ("inv9",), pairing),
        Audit(actor="connectd", action="pair.accept", outcome="expired", target="inv9", at=now),
        Notify(topic="pairing", key=("inv9",), payload={"event": "expired", "box": B2.box_id, "name": "other"}),
    )


def test_the_inviter_s_accept_is_one_whole_step_and_its_refusals_say_why() -> None:
    book = accepted_code()
    after, effects = P.pair_accepted(book, "inv1", pairing_id="pa1", now=T0 + 5)
    active = replace(book.pairings["inv1"], state=PS.ACTIVE, since=T0 + 5, id="pa1", expires_at=None)
    assert after.pairings["inv1"] == active
    assert effects == (
        Persist("pairing", ("inv1",), active),
        Audit(actor=f"box:{OWN.box_id}", action="pair.accept", outcome="active", target="pa1", at=T0 + 5),
        Notify(topic="pairing", key=("pa1",), payload={
            "event": "active", "box": OWN.box_id, "name": "laptop-a", "fingerprint": OWN.fingerprint}),
    )
    assert _refusal(lambda: P.pair_accepted(book, "nope", pairing_id="pa1", now=T0 + 5), Ref.UNKNOWN_PAIRING) == (
        "this box accepted no invitation 'nope'")
    taken, _ = P.accept_code(book, invitation_id="inv2", keys=B2, name="other", expires_at=T0 + 900, now=T0)
    taken, _ = P.pair_accepted(taken, "inv2", pairing_id="pa1", now=T0 + 1)
    assert _refusal(lambda: P.pair_accepted(taken, "inv1", pairing_id="pa1", now=T0 + 5), Ref.ID_IN_USE) == (
        "pairing id 'pa1' is already in use on this box")
    assert _refusal(lambda: P.pair_accepted(book, "inv1", pairing_id="", now=T0 + 5), Ref.BAD_ID) == (
        "a pairing id is a non-empty string of at most 128 characters, got ''")


def test_the_inviter_s_decline_is_one_whole_step() -> None:
    book = accepted_code()
    after, effects = P.pair_declined(book, "inv1", now=T0 + 5)
    declined = replace(book.pairings["inv1"], state=PS.DECLINED, since=T0 + 5, expires_at=None)
    assert after.pairings["inv1"] == declined
    assert effects == (
        Persist("pairing", ("inv1",), declined),
        Audit(actor=f"box:{OWN.box_id}", action="pair.decline", outcome="declined", target="inv1", at=T0 + 5),
        Notify(topic="pairing", key=("inv1",), payload={"event": "declined", "box": OWN.box_id, "name": "laptop-a"}),
    )


def test_a_removal_by_the_peer_is_one_whole_step() -> None:
    book = paired()
    after, effects = P.removed_by_peer(book, "pa1", now=T0 + 10)
    removed = replace(book.pairings["inv1"], state=PS.REMOVED, since=T0 + 10, removed_by=P.BY_PEER)
    assert after.pairings["inv1"] == removed
    assert effects == (
        Persist("pairing", ("inv1",), removed),
        Audit(actor=f"box:{B1.box_id}", action="pair.remove", outcome="removed", target="pa1",
              detail="by box devbox", at=T0 + 10),
        Notify(topic="pairing", key=("pa1",), payload={
            "event": "removed", "box": B1.box_id, "name": "devbox", "by": "peer"}),
    )
    assert _refusal(lambda: P.removed_by_peer(book, "nope", now=T0 + 10), Ref.UNKNOWN_PAIRING) == (
        "no pairing 'nope' on this box")


def test_history_repos_takes_up_to_64_names_and_its_refusals_say_why() -> None:
    """P12: at most :data:`MAX_HISTORY_REPOS` repositories (inclusive); a name that is no repository's
    is quoted cut to 40 characters; a name given twice is refused saying so."""
    names = [f"repo{n}" for n in range(P.MAX_HISTORY_REPOS)]
    assert len(P.parse_settings(["history_repos=" + ",".join(names)]).history_repos) == 64
    assert _refusal(lambda: P.parse_settings(["history_repos=" + ",".join([*names, "one-more"])]),
                    Ref.SETTING_OUT_OF_RANGE) == "history_repos names 65 repositories: at most 64"
    path = "/" + "a" * 50
    assert _refusal(lambda: P.parse_settings([f"history_repos={path}"]), Ref.BAD_SETTING) == (
        f"history_repos is repository names separated by commas (letters, digits, . _ -), not {path[:40]!r}")
    assert _refusal(lambda: P.parse_settings(["history_repos=a,a"]), Ref.BAD_SETTING) == (
        "history_repos names a repository twice: name each once")


def test_each_field_of_a_code_is_checked_and_refused_in_its_own_words() -> None:
    """``decode_code``: the seal key and the secret must be base64url, the invitation id a string of 1
    to 128 characters, the expiry a whole number (not a flag, not text), and the text canonical."""
    def words(why: str) -> str:
        return f"not an invitation code: {why}" + HINT

    assert _bad_code(_code_text({**_code_row(), "seal": "!!"})) == words("seal is not base64url")
    assert _bad_code(_code_text({**_code_row(), "secret": "!!"})) == words("secret is not base64url")
    assert P.decode_code(_code_text({**_code_row(), "invitation": "i" * 128})).invitation == "i" * 128
    for invitation in ("", "i" * 129, 5):
        assert _bad_code(_code_text({**_code_row(), "invitation": invitation})) == words(
            "its invitation id is missing"), invitation
    for expires_at in ("soon", True):
        assert _bad_code(_code_text({**_code_row(), "expires_at": expires_at})) == words(
            "its expiry is not a time"), expires_at
    spaced = P.CODE_PREFIX + b64(json.dumps(_code_row(), sort_keys=True).encode())
    assert _bad_code(spaced) == words("it is not in canonical form")
