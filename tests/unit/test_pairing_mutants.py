"""Pairing: rules the 2026-12-06 (third) mutation run found unpinned (docs/quality.md names the
mutants each test kills)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace

import pytest

from connectcore.effects import Audit, Notify, Persist
from connectcore.federation import pairing as P
from connectcore.federation.boxes import BoxKeys
from connectcore.federation.envelope import b64, canonical
from tests.unit.test_federation_pairing import (
    B1,
    B2,
    OWN,
    SECRET,
    T0,
    accepted_code,
    invited,
    paired,
    requested,
)

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


# --- the fourth run (stop 34): docs/survivors/pairing.md names the mutants each test kills ---------------


def test_a_secret_that_is_no_non_empty_byte_string_is_refused_in_those_words() -> None:
    """P2: the secret hashed is a non-empty byte string; an empty one or text is refused ``bad_secret``
    (never the SHA-256 of nothing, never a ``TypeError``)."""
    assert P.secret_hash(SECRET) == hashlib.sha256(SECRET).hexdigest()
    secrets: tuple[object, ...] = (b"", "text")
    for secret in secrets:
        assert _refusal(lambda: P.secret_hash(secret), Ref.BAD_SECRET) == (  # type: ignore[arg-type]  # noqa: B023
            "an invitation's secret is a non-empty byte string"), secret


def _receive(book: P.PairBook, **change: object) -> tuple[P.PairBook, tuple[object, ...]]:
    args: dict[str, object] = dict(
        request_id="r1", invitation_id="inv1", keys=B1, name="devbox", secret=SECRET, now=T0 + 1)
    args.update(change)
    return P.receive_request(book, **args)  # type: ignore[arg-type]


def test_a_received_request_is_one_whole_step() -> None:
    """P3, P10: the request stored pending at the time it arrived, one audit line as the requesting box,
    and a notice for the owner's page naming the box, its name, fingerprint and invitation."""
    book, effects = _receive(invited())
    request = P.PairRequest(id="r1", invitation="inv1", box_id=B1.box_id, keys=B1, name="devbox", received_at=T0 + 1)
    assert book.requests["r1"] == request
    assert effects == (
        Persist("pair_request", ("r1",), request),
        Audit(actor=f"box:{B1.box_id}", action="pair.request", outcome="pending", target="r1", at=T0 + 1),
        Notify(topic="pairing", key=("r1",), payload={
            "event": "request", "box": B1.box_id, "name": "devbox", "fingerprint": B1.fingerprint,
            "invitation": "inv1"}),
    )


def test_a_repeated_request_is_audited_as_a_duplicate_naming_what_it_repeats() -> None:
    """P3: a repeat changes nothing; its one audit line, as the requesting box at the repeat's time,
    names the request it repeats and whether it was still pending or approved or declined."""
    def duplicate(detail: str) -> Audit:
        return Audit(actor=f"box:{B1.box_id}", action="pair.request", outcome="duplicate", target="r1",
                     detail=detail, at=T0 + 3)

    pending = requested(("r1", B1, "devbox"))
    assert _receive(pending, request_id="r7", now=T0 + 3) == (pending, (duplicate("repeat"),))
    assert _receive(paired(), request_id="r7", now=T0 + 3)[1] == (duplicate("repeat of approved"),)
    declined, _ = P.decline(pending, "r1", now=T0 + 2)
    assert _receive(declined, request_id="r7", now=T0 + 3)[1] == (duplicate("repeat of declined"),)


def test_each_refusal_of_a_received_request_says_why_in_its_own_words() -> None:
    """P3, P9: each refusal of a pair_request names its problem (the words the requester's box audits)."""
    book = invited()
    assert _refusal(lambda: _receive(book, invitation_id="nope"), Ref.UNKNOWN_INVITATION) == (
        "no invitation 'nope' on this box")
    assert _refusal(lambda: _receive(book, secret=b"x" * 32), Ref.BAD_SECRET) == (
        "the request's secret does not match invitation 'inv1'")
    assert _refusal(lambda: _receive(paired(), keys=B2, request_id="r2"), Ref.INVITATION_USED) == (
        "invitation 'inv1' was already used by another request")
    revoked, _ = P.revoke_invitation(book, "inv1", now=T0)
    assert _refusal(lambda: _receive(revoked), Ref.INVITATION_REVOKED) == "invitation 'inv1' was revoked by its owner"
    assert _refusal(lambda: _receive(book, now=T0 + P.DEFAULT_EXPIRES), Ref.INVITATION_EXPIRED) == (
        "invitation 'inv1' expired; ask for a new one")
    assert _refusal(lambda: _receive(book, keys=OWN), Ref.SELF_PAIRING) == "a box cannot pair with itself"
    assert _refusal(lambda: _receive(book, request_id=""), Ref.BAD_ID) == (
        "a request id is a non-empty string of at most 128 characters, got ''")
    taken = requested(("r1", B1, "devbox"))
    assert _refusal(lambda: _receive(taken, keys=B2), Ref.ID_IN_USE) == (
        "request id 'r1' is already in use on this box")
    assert _refusal(lambda: _receive(book, name="Not A Name"), Ref.BAD_NAME) == (
        "the requester's name: a box name is 1 to 32 characters of a-z, 0-9 and -, got 'Not A Name'")


def test_an_invitation_id_that_is_no_id_is_refused_naming_an_invitation_id() -> None:
    """P9: ``invite`` and ``accept_code`` refuse an empty invitation id ``bad_id``, naming it."""
    words = "a invitation id is a non-empty string of at most 128 characters, got ''"
    assert _refusal(lambda: P.invite(P.PairBook(OWN.box_id, "laptop"), invitation_id="",
                                     secret_hash=P.secret_hash(SECRET), now=T0), Ref.BAD_ID) == words
    book = P.PairBook(own_box=B1.box_id, own_name="devbox")
    assert _refusal(lambda: P.accept_code(book, invitation_id="", keys=OWN, name="laptop", expires_at=T0 + 900,
                                          now=T0), Ref.BAD_ID) == words


def test_approving_is_one_whole_step_refusing_only_the_other_requests() -> None:
    """P4: the invitation consumed, the request approved and the other pending one refused, all at that
    time; the pairing active since then; one audit line as who approved, naming the box and its name;
    and the page told the pairing is active."""
    book = requested(("r1", B1, "devbox"), ("r2", B2, "other"))
    after, effects = P.approve(book, "r1", pairing_id="pa1", now=T0 + 4, name="dev", actor="owner:page:1")
    consumed = replace(book.invitations["inv1"], state=IS.CONSUMED, decided_at=T0 + 4)
    approved = replace(book.requests["r1"], state=R.APPROVED, decided_at=T0 + 4, pairing="pa1")
    other = replace(book.requests["r2"], state=R.REFUSED, reason="invitation_used", decided_at=T0 + 4)
    pairing = P.Pairing("inv1", P.Role.INVITER, B1.box_id, B1, "dev", PS.ACTIVE, T0 + 4, id="pa1")
    assert (after.invitations["inv1"], after.requests["r1"], after.requests["r2"]) == (consumed, approved, other)
    assert after.pairings["inv1"] == pairing
    assert effects == (
        Persist("pair_invitation", ("inv1",), consumed),
        Persist("pair_request", ("r1",), approved),
        Persist("pair_request", ("r2",), other),
        Persist("pairing", ("inv1",), pairing),
        Audit(actor="owner:page:1", action="pair.approve", outcome="active", target="pa1",
              detail=f"box {B1.box_id} as dev", at=T0 + 4),
        Notify(topic="pairing", key=("pa1",), payload={
            "event": "active", "box": B1.box_id, "name": "dev", "fingerprint": B1.fingerprint}),
    )


def test_each_refusal_of_an_approval_says_why_in_its_own_words() -> None:
    book = requested(("r1", B1, "devbox"))
    assert _refusal(lambda: P.approve(book, "nope", pairing_id="pa1", now=T0 + 2), Ref.UNKNOWN_REQUEST) == (
        "no pair request 'nope' on this box")
    declined, _ = P.decline(book, "r1", now=T0 + 2)
    assert _refusal(lambda: P.approve(declined, "r1", pairing_id="pa1", now=T0 + 3), Ref.NOT_PENDING) == (
        "pair request 'r1' is declined, not pending")
    assert _refusal(lambda: P.approve(book, "r1", pairing_id="pa1", now=T0 + P.DEFAULT_EXPIRES),
                    Ref.INVITATION_EXPIRED) == "invitation 'inv1' expired; ask for a new one"
    assert _refusal(lambda: P.approve(book, "r1", pairing_id="", now=T0 + 2), Ref.BAD_ID) == (
        "a pairing id is a non-empty string of at most 128 characters, got ''")
    assert _refusal(lambda: P.approve(book, "r1", pairing_id="pa1", now=T0 + 2, name="Bad Name"), Ref.BAD_NAME) == (
        f"box {B1.box_id}: a box name is 1 to 32 characters of a-z, 0-9 and -, got 'Bad Name'")
    assert _refusal(lambda: P.approve(book, "r1", pairing_id="pa1", now=T0 + 2, name="laptop"), Ref.NAME_TAKEN) == (
        f"box {B1.box_id}: box name 'laptop' is this box's own name: choose another name for this box"
        " (give it one with --name)")
    # B1 and B2 ask on a second invitation before B1 is paired on the first: B1 is paired, pa1 given
    again, _ = P.invite(book, invitation_id="inv2", secret_hash=P.secret_hash(SECRET), now=T0 + 1)
    for request_id, keys in (("r2", B2), ("r3", B1)):
        again, _ = P.receive_request(again, request_id=request_id, invitation_id="inv2", keys=keys, name="other",
                                     secret=SECRET, now=T0 + 2)
    again, _ = P.approve(again, "r1", pairing_id="pa1", now=T0 + 3)
    assert _refusal(lambda: P.approve(again, "r2", pairing_id="pa1", now=T0 + 4), Ref.ID_IN_USE) == (
        "pairing id 'pa1' is already in use on this box")
    assert _refusal(lambda: P.approve(again, "r3", pairing_id="pa2", now=T0 + 4), Ref.ALREADY_PAIRED) == (
        f"box {B1.box_id} is already paired with this box; remove that pairing first")


@pytest.mark.parametrize(("state", "reason"), [
    (IS.CONSUMED, Ref.INVITATION_USED), (IS.REVOKED, Ref.INVITATION_REVOKED), (IS.EXPIRED, Ref.INVITATION_EXPIRED)])
def test_a_pending_request_on_a_closed_invitation_is_refused_with_the_invitation_s_reason(
    state: P.InvitationState, reason: P.Refusal
) -> None:
    """P9: a request still pending on an invitation no longer open (a store's rows out of step) is not
    decided: approving or declining it is refused with why the invitation closed, naming its state."""
    book = requested(("r1", B1, "devbox"))
    closed = replace(book, invitations={"inv1": replace(book.invitations["inv1"], state=state)})
    assert _refusal(lambda: P.approve(closed, "r1", pairing_id="pa1", now=T0 + 2), reason) == (
        f"invitation 'inv1' is {state}")
    assert _refusal(lambda: P.decline(closed, "r1", now=T0 + 2), reason) == f"invitation 'inv1' is {state}"


def _inviter_book() -> P.PairBook:
    return P.PairBook(own_box=B1.box_id, own_name="devbox")


def _accept(book: P.PairBook, **change: object) -> tuple[P.PairBook, tuple[object, ...]]:
    args: dict[str, object] = dict(invitation_id="inv1", keys=OWN, name="laptop", expires_at=T0 + 900, now=T0)
    args.update(change)
    return P.accept_code(book, **args)  # type: ignore[arg-type]


def test_accepting_a_code_is_one_whole_step() -> None:
    """P1, P8: the pairing requested since the acceptance, waiting until the code's expiry and the grace;
    one audit line as who accepted it, naming the box and its name."""
    after, effects = _accept(_inviter_book(), now=T0 + 2, actor="owner:page:1")
    pairing = P.Pairing("inv1", P.Role.INVITEE, OWN.box_id, OWN, "laptop", PS.REQUESTED, T0 + 2,
                        expires_at=T0 + 900 + P.ANSWER_GRACE)
    assert after.pairings["inv1"] == pairing
    assert effects == (
        Persist("pairing", ("inv1",), pairing),
        Audit(actor="owner:page:1", action="pair.accept", outcome="requested", target="inv1",
              detail=f"box {OWN.box_id} as laptop", at=T0 + 2),
    )


def test_each_refusal_of_accepting_a_code_says_why_in_its_own_words() -> None:
    book = _inviter_book()
    assert _refusal(lambda: _accept(accepted_code()), Ref.INVITATION_USED) == (
        "invitation 'inv1' was already used on this box")
    assert _refusal(lambda: _accept(book, now=T0 + 900), Ref.INVITATION_EXPIRED) == (
        "invitation 'inv1' expired; ask for a new one")
    assert _refusal(lambda: _accept(book, keys=B1), Ref.SELF_PAIRING) == "a box cannot pair with itself"
    assert _refusal(lambda: _accept(book, name="Bad Name"), Ref.BAD_NAME) == (
        f"box {OWN.box_id}: a box name is 1 to 32 characters of a-z, 0-9 and -, got 'Bad Name'")
    active, _ = P.pair_accepted(accepted_code(), "inv1", pairing_id="pa1", now=T0 + 1)
    assert _refusal(lambda: _accept(active, invitation_id="inv2", name="other"), Ref.ALREADY_PAIRED) == (
        f"box {OWN.box_id} is already paired with this box; remove that pairing first")


def test_each_refusal_of_the_inviter_s_accept_or_decline_says_why_in_its_own_words() -> None:
    """An answer to a pairing no longer requested, for a box already paired, or giving a name an active
    pairing took since is refused naming the problem."""
    declined, _ = P.pair_declined(accepted_code(), "inv1", now=T0 + 1)
    assert _refusal(lambda: P.pair_accepted(declined, "inv1", pairing_id="pa1", now=T0 + 2), Ref.NOT_REQUESTED) == (
        "the pairing from invitation 'inv1' is declined: this pair_accept changes nothing")
    active, _ = P.pair_accepted(accepted_code(), "inv1", pairing_id="pa1", now=T0 + 1)
    assert _refusal(lambda: P.pair_declined(active, "inv1", now=T0 + 2), Ref.NOT_REQUESTED) == (
        "the pairing from invitation 'inv1' is active: this pair_decline changes nothing")
    # two codes of one box, both requested: once one is active the other's accept is already_paired
    two, _ = _accept(accepted_code(), invitation_id="inv2", name="laptop-b")
    two, _ = P.pair_accepted(two, "inv2", pairing_id="pa2", now=T0 + 1)
    assert _refusal(lambda: P.pair_accepted(two, "inv1", pairing_id="pa1", now=T0 + 2), Ref.ALREADY_PAIRED) == (
        f"box {OWN.box_id} is already paired with this box; remove that pairing first")
    # two boxes' codes under one name (both requested): once one is active the other's name is taken
    named, _ = _accept(accepted_code("same"), invitation_id="inv2", keys=B2, name="same")
    named, _ = P.pair_accepted(named, "inv2", pairing_id="pa2", now=T0 + 1)
    assert _refusal(lambda: P.pair_accepted(named, "inv1", pairing_id="pa1", now=T0 + 2), Ref.NAME_TAKEN) == (
        f"box {OWN.box_id}: box name 'same' is the name of an active pairing: choose another name for this box"
        " (give it one with --name)")


def test_removing_is_one_whole_step_and_its_refusals_say_why() -> None:
    """P7: the pairing removed by the owner since that time, no longer waiting for an answer; one audit
    line as who removed it, naming the pairing id (the invitation's while it has none), the box and its
    name; the page told. An unknown pairing, a removed one or one otherwise ended is refused in words."""
    book = paired()
    after, effects = P.remove(book, "inv1", now=T0 + 10, actor="owner:page:1")
    removed = replace(book.pairings["inv1"], state=PS.REMOVED, since=T0 + 10, removed_by=P.BY_OWNER)
    assert after.pairings["inv1"] == removed
    assert effects == (
        Persist("pairing", ("inv1",), removed),
        Audit(actor="owner:page:1", action="pair.remove", outcome="removed", target="pa1",
              detail=f"box {B1.box_id} (devbox)", at=T0 + 10),
        Notify(topic="pairing", key=("pa1",), payload={
            "event": "removed", "box": B1.box_id, "name": "devbox", "by": "owner"}),
    )
    waiting = accepted_code()
    after, effects = P.remove(waiting, "inv1", now=T0 + 1)
    removed = replace(waiting.pairings["inv1"], state=PS.REMOVED, since=T0 + 1, removed_by=P.BY_OWNER,
                      expires_at=None)
    assert after.pairings["inv1"] == removed
    assert effects[1:] == (
        Audit(actor="owner", action="pair.remove", outcome="removed", target="inv1",
              detail=f"box {OWN.box_id} (laptop-a)", at=T0 + 1),
        Notify(topic="pairing", key=("inv1",), payload={
            "event": "removed", "box": OWN.box_id, "name": "laptop-a", "by": "owner"}),
    )
    assert _refusal(lambda: P.remove(book, "nope", now=T0 + 10), Ref.UNKNOWN_PAIRING) == (
        "no pairing from invitation 'nope' on this box")
    declined, _ = P.pair_declined(waiting, "inv1", now=T0 + 1)
    assert _refusal(lambda: P.remove(declined, "inv1", now=T0 + 2), Ref.NOT_REQUESTED) == (
        f"the pairing with box {OWN.box_id} (laptop-a) is declined: nothing to remove")


def test_a_setting_word_is_split_at_its_first_equals_sign() -> None:
    """P12: ``KEY=VALUE`` splits at the first ``=``: the rest is the value (refused as a value, not taken
    as an unknown key)."""
    assert _refusal(lambda: P.parse_settings(["messages=on=off"]), Ref.BAD_SETTING) == (
        "messages is on or off, not 'on=off'")


def test_the_settings_refusals_name_every_key_and_quote_a_bad_choice_cut_to_40_characters() -> None:
    keys = "messages, per_window, live_ids, queued_bytes, directory, history, history_repos"
    assert _refusal(lambda: P.parse_settings(["colour=blue"]), Ref.UNKNOWN_SETTING) == (
        f"no setting 'colour': a pairing's settings are {keys}")
    assert _refusal(lambda: P.parse_settings([]), Ref.BAD_SETTING) == f"no setting given: KEY=VALUE, the keys {keys}"
    assert _refusal(lambda: P.parse_settings(["directory=" + "x" * 50]), Ref.BAD_SETTING) == (
        f"directory is reachable or connected or none, not {'x' * 40!r}")
    assert _refusal(lambda: P.parse_settings([5]), Ref.BAD_SETTING) == (  # type: ignore[list-item]
        "a setting is KEY=VALUE text, not 5")


def test_setting_a_pairing_s_settings_is_one_whole_step() -> None:
    """P12: the pairing with its new settings, one audit line at that time, and the page told the
    pairing's id, box, name and every setting as words."""
    book = paired()
    after, effects = P.set_settings(book, "inv1", ["messages=off"], now=T0 + 3, actor="owner:page:1")
    updated = replace(book.pairings["inv1"], settings=replace(book.pairings["inv1"].settings, messages=False))
    assert after.pairings["inv1"] == updated
    assert effects == (
        Persist("pairing", ("inv1",), updated),
        Audit(actor="owner:page:1", action="pair.set", outcome="set", target="pa1",
              detail=f"box {B1.box_id} (devbox): messages on -> off", at=T0 + 3),
        Notify(topic="pairing", key=("pa1",), payload={
            "event": "settings", "box": B1.box_id, "name": "devbox",
            "settings": "messages=off per_window=60 live_ids=2000 queued_bytes=1048576 directory=reachable"
                        " history=none history_repos="}),
    )


def test_an_invitation_is_one_whole_step_living_from_just_over_nothing_to_a_whole_day() -> None:
    """P2: the open invitation made at that time, one audit line as who made it; it lives any time
    more than 0 s up to :data:`MAX_EXPIRES` inclusive, half a second as a whole day."""
    book = P.PairBook(OWN.box_id, "laptop")
    hashed = P.secret_hash(SECRET)
    after, effects = P.invite(book, invitation_id="inv1", secret_hash=hashed, now=T0, expires_in=0.5, actor="owner:page:1")
    invitation = P.Invitation(id="inv1", secret_hash=hashed, created_at=T0, expires_at=T0 + 0.5)
    assert after.invitations["inv1"] == invitation
    assert effects == (
        Persist("pair_invitation", ("inv1",), invitation),
        Audit(actor="owner:page:1", action="pair.invite", outcome="open", target="inv1", at=T0),
    )
    day, _ = P.invite(book, invitation_id="inv1", secret_hash=hashed, now=T0, expires_in=P.MAX_EXPIRES)
    assert day.invitations["inv1"].expires_at == T0 + P.MAX_EXPIRES


def test_an_invitation_s_id_and_secret_hash_are_checked_and_refused_in_their_own_words() -> None:
    """P2, P9: an id of 1 to 128 characters, not one in use; the hash exactly 64 lowercase hex digits
    (not shorter, not another character, not text at all)."""
    book = P.PairBook(OWN.box_id, "laptop")
    hashed = P.secret_hash(SECRET)
    assert "i" * 128 in P.invite(book, invitation_id="i" * 128, secret_hash=hashed, now=T0)[0].invitations
    assert _refusal(lambda: P.invite(book, invitation_id="i" * 129, secret_hash=hashed, now=T0), Ref.BAD_ID) == (
        f"a invitation id is a non-empty string of at most 128 characters, got {'i' * 129!r}")
    assert _refusal(lambda: P.invite(invited(), invitation_id="inv1", secret_hash=hashed, now=T0), Ref.ID_IN_USE) == (
        "invitation id 'inv1' is already in use on this box")
    bad_hashes: tuple[object, ...] = (hashed[:-1], "0" * 63 + "X", hashed.upper(), None)
    for bad in bad_hashes:
        assert _refusal(lambda: P.invite(book, invitation_id="inv1", secret_hash=bad, now=T0),  # type: ignore[arg-type]  # noqa: B023
                        Ref.BAD_SECRET) == "an invitation keeps the SHA-256 of its secret as 64 lowercase hex digits", bad
