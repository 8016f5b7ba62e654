"""Pairing: invitations, pair requests and pairings, each transition of their tables, every refusal
changing nothing, repeats and conflicts, removal for good, name collisions
(connectcore.federation.pairing; docs/federation.md "Pairing")."""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from connectcore._machine import TransitionNotAllowed
from connectcore.effects import Audit, Notify, Persist
from connectcore.federation import pairing as P
from connectcore.federation import remote as RM
from connectcore.federation import remote_directory as RD
from connectcore.federation.boxes import BoxKeys

OWN = BoxKeys(bytes(range(32)), bytes(range(32, 64)))
B1 = BoxKeys(bytes([1]) * 32, bytes([2]) * 32)
B2 = BoxKeys(bytes([3]) * 32, bytes([4]) * 32)
SECRET = b"s" * 32
T0 = 1_000_000.0

IS, R, PS, Ref = P.InvitationState, P.RequestState, P.PairingState, P.Refusal


def empty() -> P.PairBook:
    return P.PairBook(own_box=OWN.box_id, own_name="laptop")


def invited(expires_in: float = P.DEFAULT_EXPIRES) -> P.PairBook:
    book, _ = P.invite(
        empty(), invitation_id="inv1", secret_hash=P.secret_hash(SECRET), now=T0, expires_in=expires_in
    )
    return book


def requested(*boxes: tuple[str, BoxKeys, str]) -> P.PairBook:
    book = invited()
    for request_id, keys, name in boxes:
        book, _ = P.receive_request(
            book, request_id=request_id, invitation_id="inv1", keys=keys, name=name, secret=SECRET, now=T0 + 1
        )
    return book


def paired() -> P.PairBook:
    book, _ = P.approve(requested(("r1", B1, "devbox")), "r1", pairing_id="pa1", now=T0 + 2)
    return book


def refused(
    step: Callable[[], Any], reason: P.Refusal, book: P.PairBook, match: str | None = None
) -> P.PairingError:
    """The step raises a PairingError with ``reason`` and leaves ``book`` exactly as it was."""
    before = copy.deepcopy(book)
    with pytest.raises(P.PairingError, match=match) as caught:
        step()
    assert caught.value.reason is reason
    assert book == before
    return caught.value


def persisted(effects: tuple[Any, ...]) -> dict[tuple[str, tuple[Any, ...]], Any]:
    return {(e.kind, e.key): e.record for e in effects if isinstance(e, Persist)}


# --- the tables -------------------------------------------------------------------------------------


def test_the_tables_are_the_documented_ones() -> None:
    """Claim: each table is exactly the doc's rows, finals included (docs/federation.md "The tables")."""
    assert {(s.value, e, d.value) for s, e, d in P.INVITATION_TABLE.edges} == {
        ("open", "approve", "consumed"),
        ("open", "decline", "consumed"),
        ("open", "expire", "expired"),
        ("open", "revoke", "revoked"),
    }
    assert {(s.value, e, d.value) for s, e, d in P.REQUEST_TABLE.edges} == {
        ("pending", "approve", "approved"),
        ("pending", "decline", "declined"),
        ("pending", "invitation_used", "refused"),
        ("pending", "expire", "expired"),
    }
    assert {(s.value, e, d.value) for s, e, d in P.PAIRING_TABLE.edges} == {
        ("requested", "pair_accept", "active"),
        ("requested", "pair_decline", "declined"),
        ("requested", "expire", "expired"),
        ("requested", "remove", "removed"),
        ("active", "remove", "removed"),
        ("active", "removed_by_peer", "removed"),
    }
    assert P.PAIRING_TABLE.finals == {PS.DECLINED, PS.EXPIRED, PS.REMOVED}
    with pytest.raises(TransitionNotAllowed):
        P.PAIRING_TABLE.next(PS.REMOVED, "pair_accept")


# --- invite -----------------------------------------------------------------------------------------


def test_invite_stores_the_hash_of_the_secret_never_the_secret() -> None:
    book, effects = P.invite(empty(), invitation_id="inv1", secret_hash=P.secret_hash(SECRET), now=T0)
    invitation = book.invitations["inv1"]
    assert invitation.secret_hash == hashlib.sha256(SECRET).hexdigest()
    assert SECRET.decode() not in repr(book) and SECRET.decode() not in repr(effects)
    assert (invitation.state, invitation.expires_at) == (IS.OPEN, T0 + 900)
    assert persisted(effects) == {("pair_invitation", ("inv1",)): invitation}
    assert any(isinstance(e, Audit) and e.action == "pair.invite" for e in effects)


@pytest.mark.parametrize("expires_in", [0, -1, P.MAX_EXPIRES + 1, True])
def test_an_invitation_lives_more_than_nothing_and_at_most_a_day(expires_in: float) -> None:
    book = empty()
    refused(
        lambda: P.invite(book, invitation_id="i", secret_hash="0" * 64, now=T0, expires_in=expires_in),
        Ref.BAD_EXPIRY,
        book,
        "at most 86400 s",
    )


def test_invite_refuses_a_reused_id_and_a_hash_that_is_not_one() -> None:
    book = invited()
    refused(lambda: P.invite(book, invitation_id="inv1", secret_hash="0" * 64, now=T0), Ref.ID_IN_USE, book)
    refused(lambda: P.invite(book, invitation_id="inv2", secret_hash="secret", now=T0), Ref.BAD_SECRET, book)


def test_revoke_an_open_invitation_refuses_its_pending_requests_and_later_ones() -> None:
    book = requested(("r1", B1, "devbox"))
    book, effects = P.revoke_invitation(book, "inv1", now=T0 + 5)
    assert book.invitations["inv1"].state is IS.REVOKED
    assert (book.requests["r1"].state, book.requests["r1"].reason) == (R.REFUSED, "invitation_revoked")
    assert len(persisted(effects)) == 2
    refused(lambda: P.revoke_invitation(book, "inv1", now=T0 + 6), Ref.INVITATION_REVOKED, book)
    refused(
        lambda: P.receive_request(
            book, request_id="r2", invitation_id="inv1", keys=B2, name="b2", secret=SECRET, now=T0 + 6
        ),
        Ref.INVITATION_REVOKED,
        book,
    )


# --- a received request -----------------------------------------------------------------------------


def test_a_request_is_stored_pending_and_shown_with_its_fingerprint() -> None:
    book, effects = P.receive_request(
        invited(), request_id="r1", invitation_id="inv1", keys=B1, name="devbox", secret=SECRET, now=T0 + 1
    )
    request = book.requests["r1"]
    assert (request.state, request.box_id, request.keys, request.name) == (R.PENDING, B1.box_id, B1, "devbox")
    assert persisted(effects) == {("pair_request", ("r1",)): request}
    (notice,) = [e for e in effects if isinstance(e, Notify)]
    assert notice.topic == "pairing" and notice.payload["fingerprint"] == B1.fingerprint


def test_several_requests_may_be_pending_on_one_invitation() -> None:
    book = requested(("r1", B1, "devbox"), ("r2", B2, "build"))
    assert [r.state for r in book.requests.values()] == [R.PENDING, R.PENDING]


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"invitation_id": "nope"}, Ref.UNKNOWN_INVITATION),
        ({"secret": b"wrong" * 6}, Ref.BAD_SECRET),
        ({"now": T0 + P.DEFAULT_EXPIRES}, Ref.INVITATION_EXPIRED),
        ({"keys": OWN}, Ref.SELF_PAIRING),
        ({"name": "Not A Name"}, Ref.BAD_NAME),
        ({"request_id": ""}, Ref.BAD_ID),
    ],
)
def test_a_request_is_refused_and_changes_nothing(change: dict[str, Any], reason: P.Refusal) -> None:
    book = invited()
    args: dict[str, Any] = dict(
        request_id="r1", invitation_id="inv1", keys=B1, name="devbox", secret=SECRET, now=T0 + 1
    )
    args.update(change)
    refused(lambda: P.receive_request(book, **args), reason, book)


def test_the_secret_is_checked_before_the_invitation_s_state_is_told() -> None:
    """Claim: without the secret, a requester learns nothing about the invitation (not even expiry)."""
    book = invited()
    refused(
        lambda: P.receive_request(
            book, request_id="r1", invitation_id="inv1", keys=B1, name="d", secret=b"x", now=T0 + 10_000
        ),
        Ref.BAD_SECRET,
        book,
    )


def test_a_request_from_a_box_already_paired_is_refused() -> None:
    book, _ = P.invite(paired(), invitation_id="inv2", secret_hash=P.secret_hash(SECRET), now=T0 + 3)
    refused(
        lambda: P.receive_request(
            book, request_id="r9", invitation_id="inv2", keys=B1, name="devbox", secret=SECRET, now=T0 + 4
        ),
        Ref.ALREADY_PAIRED,
        book,
        "remove that pairing first",
    )


def test_a_repeat_before_the_decision_changes_nothing() -> None:
    book = requested(("r1", B1, "devbox"))
    again, effects = P.receive_request(
        book, request_id="r2", invitation_id="inv1", keys=B1, name="devbox", secret=SECRET, now=T0 + 3
    )
    assert again is book
    assert not persisted(effects) and [e.outcome for e in effects if isinstance(e, Audit)] == ["duplicate"]


def test_an_identical_repeat_after_the_approval_answers_the_stored_accept_and_changes_nothing() -> None:
    book = paired()
    again, effects = P.receive_request(
        book, request_id="r7", invitation_id="inv1", keys=B1, name="devbox", secret=SECRET, now=T0 + 99_999
    )
    assert again is book and not persisted(effects)
    assert P.answer(book, "r1") == P.Answer("pair_accept", B1.box_id, "inv1", "pa1", T0 + 2)


def test_an_identical_repeat_after_the_decline_answers_the_stored_decline() -> None:
    book, _ = P.decline(requested(("r1", B1, "devbox")), "r1", now=T0 + 2)
    again, effects = P.receive_request(
        book, request_id="r7", invitation_id="inv1", keys=B1, name="devbox", secret=SECRET, now=T0 + 3
    )
    assert again is book and not persisted(effects)
    assert P.answer(book, "r1") == P.Answer("pair_decline", B1.box_id, "inv1", None, T0 + 2)


def test_a_conflicting_request_after_the_decision_is_refused_invitation_used() -> None:
    book = paired()
    refused(
        lambda: P.receive_request(
            book, request_id="r2", invitation_id="inv1", keys=B2, name="build", secret=SECRET, now=T0 + 3
        ),
        Ref.INVITATION_USED,
        book,
    )


def test_answer_says_nothing_for_a_pending_refused_or_unknown_request() -> None:
    book = requested(("r1", B1, "devbox"))
    assert P.answer(book, "r1") is None and P.answer(book, "zz") is None


# --- approve and decline ----------------------------------------------------------------------------


def test_approve_consumes_approves_refuses_the_others_and_activates_in_one_step() -> None:
    book = requested(("r1", B1, "devbox"), ("r2", B2, "build"))
    book, effects = P.approve(book, "r1", pairing_id="pa1", now=T0 + 2)
    assert book.invitations["inv1"].state is IS.CONSUMED
    assert book.requests["r1"].state is R.APPROVED and book.requests["r1"].pairing == "pa1"
    assert (book.requests["r2"].state, book.requests["r2"].reason) == (R.REFUSED, "invitation_used")
    pairing = book.pairings["inv1"]
    assert (pairing.state, pairing.id, pairing.keys, pairing.name, pairing.role) == (
        PS.ACTIVE,
        "pa1",
        B1,
        "devbox",
        P.Role.INVITER,
    )
    assert set(persisted(effects)) == {
        ("pair_invitation", ("inv1",)),
        ("pair_request", ("r1",)),
        ("pair_request", ("r2",)),
        ("pairing", ("inv1",)),
    }
    assert book.active_with(B1.box_id) == pairing


def test_approve_under_another_name() -> None:
    book, _ = P.approve(requested(("r1", B1, "devbox")), "r1", pairing_id="pa1", now=T0 + 2, name="gpu")
    assert book.pairings["inv1"].name == "gpu"


@pytest.mark.parametrize("name", ["laptop", None])
def test_a_name_taken_by_this_box_or_an_active_pairing_asks_for_another(name: str | None) -> None:
    """Claim: 'laptop' is this box's own name; the second request's own name 'devbox' is the active
    pairing's name. Either way the approval is refused name_taken, asking for --name."""
    book = paired()
    book, _ = P.invite(book, invitation_id="inv2", secret_hash=P.secret_hash(SECRET), now=T0 + 3)
    book, _ = P.receive_request(
        book, request_id="r2", invitation_id="inv2", keys=B2, name="devbox", secret=SECRET, now=T0 + 4
    )
    refused(
        lambda: P.approve(book, "r2", pairing_id="pa2", now=T0 + 5, name=name), Ref.NAME_TAKEN, book, "--name"
    )
    book, _ = P.approve(book, "r2", pairing_id="pa2", now=T0 + 5, name="devbox-2")
    assert book.active_names() == {"devbox", "devbox-2"}


def test_approve_refusals_change_nothing() -> None:
    book = requested(("r1", B1, "devbox"))
    refused(lambda: P.approve(book, "zz", pairing_id="pa1", now=T0 + 2), Ref.UNKNOWN_REQUEST, book)
    refused(
        lambda: P.approve(book, "r1", pairing_id="pa1", now=T0 + P.DEFAULT_EXPIRES),
        Ref.INVITATION_EXPIRED,
        book,
    )
    refused(lambda: P.approve(book, "r1", pairing_id="pa1", now=T0 + 2, name="B@d"), Ref.BAD_NAME, book)
    done = paired()
    refused(lambda: P.approve(done, "r1", pairing_id="pa9", now=T0 + 3), Ref.NOT_PENDING, done)
    refused(lambda: P.decline(done, "r1", now=T0 + 3), Ref.NOT_PENDING, done)


def test_approve_refuses_a_second_pairing_with_the_same_box_and_a_reused_pairing_id() -> None:
    book = requested(("r1", B1, "devbox"))
    book, _ = P.invite(book, invitation_id="inv2", secret_hash=P.secret_hash(SECRET), now=T0)
    book, _ = P.receive_request(
        book, request_id="r2", invitation_id="inv2", keys=B1, name="devbox", secret=SECRET, now=T0 + 1
    )
    book, _ = P.approve(book, "r1", pairing_id="pa1", now=T0 + 2)
    refused(lambda: P.approve(book, "r2", pairing_id="pa2", now=T0 + 3, name="x"), Ref.ALREADY_PAIRED, book)
    book, _ = P.invite(book, invitation_id="inv3", secret_hash=P.secret_hash(SECRET), now=T0)
    book, _ = P.receive_request(
        book, request_id="r3", invitation_id="inv3", keys=B2, name="build", secret=SECRET, now=T0 + 1
    )
    refused(lambda: P.approve(book, "r3", pairing_id="pa1", now=T0 + 3), Ref.ID_IN_USE, book)


def test_decline_consumes_the_invitation_and_refuses_the_others() -> None:
    book, effects = P.decline(requested(("r1", B1, "devbox"), ("r2", B2, "build")), "r1", now=T0 + 2)
    assert book.invitations["inv1"].state is IS.CONSUMED
    assert [book.requests[r].state for r in ("r1", "r2")] == [R.DECLINED, R.REFUSED]
    assert not book.pairings
    assert len(persisted(effects)) == 3


# --- expiry -----------------------------------------------------------------------------------------


def test_expire_ends_open_invitations_and_their_pending_requests_only_when_due() -> None:
    book = requested(("r1", B1, "devbox"))
    same, effects = P.expire(book, now=T0 + P.DEFAULT_EXPIRES - 1)
    assert same is book and effects == ()
    book, effects = P.expire(book, now=T0 + P.DEFAULT_EXPIRES)
    assert book.invitations["inv1"].state is IS.EXPIRED
    assert (book.requests["r1"].state, book.requests["r1"].reason) == (R.EXPIRED, "invitation_expired")
    assert len(persisted(effects)) == 2
    refused(lambda: P.approve(book, "r1", pairing_id="pa1", now=T0), Ref.NOT_PENDING, book)
    refused(
        lambda: P.receive_request(
            book, request_id="r2", invitation_id="inv1", keys=B2, name="b", secret=SECRET, now=T0
        ),
        Ref.INVITATION_EXPIRED,
        book,
    )


def test_expire_leaves_decided_invitations_and_active_pairings_alone() -> None:
    book = paired()
    same, effects = P.expire(book, now=T0 + 10 * P.MAX_EXPIRES)
    assert same is book and effects == ()


# --- the invitee ------------------------------------------------------------------------------------


def accepted_code(name: str = "laptop-a") -> P.PairBook:
    book, _ = P.accept_code(
        P.PairBook(own_box=B1.box_id, own_name="devbox"),
        invitation_id="inv1",
        keys=OWN,
        name=name,
        expires_at=T0 + 900,
        now=T0,
    )
    return book


def test_accepting_a_code_pins_the_inviter_s_keys_requested() -> None:
    book = accepted_code()
    pairing = book.pairings["inv1"]
    assert (pairing.state, pairing.keys, pairing.box_id, pairing.id, pairing.role) == (
        PS.REQUESTED,
        OWN,
        OWN.box_id,
        None,
        P.Role.INVITEE,
    )
    assert pairing.expires_at == T0 + 900 + P.ANSWER_GRACE


def test_accepting_a_code_refusals_change_nothing() -> None:
    book = P.PairBook(own_box=B1.box_id, own_name="devbox")

    def accept(**change: Any) -> Callable[[], Any]:
        args: dict[str, Any] = dict(
            invitation_id="inv1", keys=OWN, name="laptop", expires_at=T0 + 900, now=T0
        )
        args.update(change)
        return lambda: P.accept_code(book, **args)

    refused(accept(now=T0 + 900), Ref.INVITATION_EXPIRED, book)
    refused(accept(keys=B1), Ref.SELF_PAIRING, book)
    refused(accept(name="devbox"), Ref.NAME_TAKEN, book, "this box's own name")
    done = accepted_code()
    refused(
        lambda: P.accept_code(done, invitation_id="inv1", keys=OWN, name="x", expires_at=T0 + 900, now=T0),
        Ref.INVITATION_USED,
        done,
    )


def test_pair_accept_makes_the_requested_pairing_active_and_a_repeat_changes_nothing() -> None:
    book, effects = P.pair_accepted(accepted_code(), "inv1", pairing_id="pa1", now=T0 + 5)
    pairing = book.pairings["inv1"]
    assert (pairing.state, pairing.id, pairing.since) == (PS.ACTIVE, "pa1", T0 + 5)
    assert persisted(effects) == {("pairing", ("inv1",)): pairing}
    again, effects = P.pair_accepted(book, "inv1", pairing_id="pa1", now=T0 + 6)
    assert again is book and effects == ()
    refused(lambda: P.pair_accepted(book, "inv1", pairing_id="pa2", now=T0 + 6), Ref.NOT_REQUESTED, book)
    refused(lambda: P.pair_accepted(book, "nope", pairing_id="pa1", now=T0 + 6), Ref.UNKNOWN_PAIRING, book)


def test_pair_accept_refused_when_another_pairing_with_that_box_became_active() -> None:
    book = accepted_code()
    book, _ = P.accept_code(
        book, invitation_id="inv2", keys=OWN, name="laptop-b", expires_at=T0 + 900, now=T0
    )
    book, _ = P.pair_accepted(book, "inv2", pairing_id="pa2", now=T0 + 1)
    refused(lambda: P.pair_accepted(book, "inv1", pairing_id="pa1", now=T0 + 2), Ref.ALREADY_PAIRED, book)


def test_pair_decline_and_expiry_on_the_invitee() -> None:
    book, _ = P.pair_declined(accepted_code(), "inv1", now=T0 + 5)
    assert book.pairings["inv1"].state is PS.DECLINED
    again, effects = P.pair_declined(book, "inv1", now=T0 + 6)
    assert again is book and effects == ()
    refused(lambda: P.pair_accepted(book, "inv1", pairing_id="pa1", now=T0 + 6), Ref.NOT_REQUESTED, book)
    waiting = accepted_code()
    same, _ = P.expire(waiting, now=T0 + 900 + P.ANSWER_GRACE - 1)
    assert same is waiting
    gone, effects = P.expire(waiting, now=T0 + 900 + P.ANSWER_GRACE)
    assert gone.pairings["inv1"].state is PS.EXPIRED and persisted(effects)


# --- removal ----------------------------------------------------------------------------------------


def test_remove_is_permanent_the_row_stays_and_nothing_makes_it_active_again() -> None:
    book, effects = P.remove(paired(), "inv1", now=T0 + 10)
    pairing = book.pairings["inv1"]
    assert (pairing.state, pairing.removed_by, pairing.since, pairing.keys, pairing.id) == (
        PS.REMOVED,
        P.BY_OWNER,
        T0 + 10,
        B1,
        "pa1",
    )
    assert persisted(effects) == {("pairing", ("inv1",)): pairing}
    assert book.active_with(B1.box_id) is None and book.active_names() == frozenset()
    refused(lambda: P.remove(book, "inv1", now=T0 + 11), Ref.REMOVED, book)
    # the same request again finds its invitation consumed: a repeat, answered, still removed
    again, _ = P.receive_request(
        book, request_id="r8", invitation_id="inv1", keys=B1, name="devbox", secret=SECRET, now=T0 + 12
    )
    assert again.pairings["inv1"].state is PS.REMOVED
    assert P.removed_by_peer(book, "pa1", now=T0 + 12) == (book, ())
    refused(lambda: P.approve(book, "r1", pairing_id="pa9", now=T0 + 12), Ref.NOT_PENDING, book)
    refused(lambda: P.pair_accepted(book, "inv1", pairing_id="pa1", now=T0 + 12), Ref.UNKNOWN_PAIRING, book)


def test_pairing_again_after_removal_makes_a_new_pairing_with_a_new_id() -> None:
    book, _ = P.remove(paired(), "inv1", now=T0 + 10)
    book, _ = P.invite(book, invitation_id="inv2", secret_hash=P.secret_hash(SECRET), now=T0 + 11)
    book, _ = P.receive_request(
        book, request_id="r2", invitation_id="inv2", keys=B1, name="devbox", secret=SECRET, now=T0 + 12
    )
    refused(lambda: P.approve(book, "r2", pairing_id="pa1", now=T0 + 13), Ref.ID_IN_USE, book)
    book, _ = P.approve(book, "r2", pairing_id="pa2", now=T0 + 13)
    assert book.pairings["inv1"].state is PS.REMOVED and book.pairings["inv2"].state is PS.ACTIVE
    assert book.active_with(B1.box_id) == book.pairings["inv2"]


def test_removing_a_requested_pairing_on_the_invitee() -> None:
    book, _ = P.remove(accepted_code(), "inv1", now=T0 + 1)
    assert book.pairings["inv1"].state is PS.REMOVED
    refused(lambda: P.pair_accepted(book, "inv1", pairing_id="pa1", now=T0 + 2), Ref.REMOVED, book)


def test_removed_by_peer_and_its_repeat() -> None:
    book, effects = P.removed_by_peer(paired(), "pa1", now=T0 + 10)
    assert (book.pairings["inv1"].state, book.pairings["inv1"].removed_by) == (PS.REMOVED, P.BY_PEER)
    assert persisted(effects)
    again, effects = P.removed_by_peer(book, "pa1", now=T0 + 11)
    assert again is book and effects == ()
    refused(lambda: P.removed_by_peer(book, "nope", now=T0 + 11), Ref.UNKNOWN_PAIRING, book)
    refused(lambda: P.remove(book, "inv1", now=T0 + 11), Ref.REMOVED, book)


def test_named_finds_the_active_pairing_by_its_name() -> None:
    book = paired()
    assert book.named("devbox") == book.pairings["inv1"]
    assert book.named("other") is None


def test_a_refusal_audits_itself_on_request() -> None:
    error = P.PairingError(Ref.INVITATION_USED, "invitation 'inv1' was already used")
    line = error.audit(actor="box:x", action="pair.request", target="inv1", at=T0)
    assert (line.outcome, line.detail) == ("refused", "invitation_used: invitation 'inv1' was already used")


# --- the invitation code ---------------------------------------------------------------------------


def test_an_invitation_code_round_trips_and_a_bad_one_is_refused_naming_why() -> None:
    code = P.Code(OWN.box_id, "laptop", OWN, "inv1", SECRET, 1_796_500_000)
    text = P.encode_code(code)
    assert text.startswith(P.CODE_PREFIX)
    back = P.decode_code(text + "\n")  # as pasted, with its line end
    assert (back.box, back.name, back.keys, back.invitation, back.secret, back.expires_at) == (
        OWN.box_id, "laptop", OWN, "inv1", SECRET, 1_796_500_000)
    assert "secret" not in repr(back) and SECRET.decode() not in repr(back)
    other = P.Code(B1.box_id, "laptop", OWN, "inv1", SECRET, 1)  # keys that give another box id
    cases = {
        "nothing": ("", "does not start with"),
        "cut": (text[:-5], "not base64url of JSON"),
        "foreign keys": (P.encode_code(other), f"its keys give box {OWN.box_id}"),
        "short secret": (P.encode_code(P.Code(OWN.box_id, "laptop", OWN, "inv1", b"x", 1)), "secret is not 32"),
        "bad name": (P.encode_code(P.Code(OWN.box_id, "Laptop!", OWN, "inv1", SECRET, 1)), "box name"),
    }
    for what, (bad, words) in cases.items():
        with pytest.raises(P.PairingError, match=words) as caught:
            P.decode_code(bad)
        assert caught.value.reason is P.Refusal.BAD_CODE, what


# --- what a person names (P11) ----------------------------------------------------------------------


def test_a_pending_request_is_found_by_its_id_its_box_id_or_its_name() -> None:
    book = requested(("r1", B1, "devbox"), ("r2", B2, "other"))
    for who in ("r1", B1.box_id, "devbox"):
        assert P.pending_request(book, who).id == "r1"
    assert P.pending_request(book, "other").id == "r2"


def test_a_request_nobody_pending_names_is_refused_listing_the_pending_ones() -> None:
    book = requested(("r1", B1, "devbox"), ("r2", B2, "other"))
    refused(lambda: P.pending_request(book, "nobody"), Ref.UNKNOWN_REQUEST, book,
            match=rf"no pending pair request from 'nobody' on this box \(pending: devbox \({B1.box_id}\), "
                  rf"other \({B2.box_id}\)\)")
    decided, _ = P.approve(book, "r1", pairing_id="pa1", now=T0 + 2)  # r1 approved, r2 refused: none pending
    refused(lambda: P.pending_request(decided, "r1"), Ref.UNKNOWN_REQUEST, decided, match=r"\(pending: none\)")


def test_a_name_two_pending_requests_share_is_ambiguous_and_the_id_is_asked_for() -> None:
    book = requested(("r1", B1, "devbox"), ("r2", B2, "devbox"))
    refused(lambda: P.pending_request(book, "devbox"), Ref.AMBIGUOUS, book,
            match="'devbox' names 2 pending requests: r1, r2; give the request id")
    assert P.pending_request(book, "r2").box_id == B2.box_id


def test_a_pairing_is_found_by_its_name_box_id_pairing_id_or_invitation() -> None:
    book = paired()
    for who in ("devbox", B1.box_id, "pa1", "inv1"):
        assert P.pairing_named(book, who).invitation == "inv1"
    refused(lambda: P.pairing_named(book, "nobody"), Ref.UNKNOWN_PAIRING, book,
            match="no pairing with 'nobody' on this box")


def test_of_several_pairings_a_live_one_wins_over_a_later_ended_one_else_the_latest() -> None:
    live = paired().pairings["inv1"]
    ended = replace(live, invitation="inv2", id="pa2", state=PS.REMOVED, since=T0 + 50, removed_by=P.BY_OWNER)
    book = replace(paired(), pairings={"inv1": live, "inv2": ended})
    assert P.pairing_named(book, B1.box_id).id == "pa1"  # active, though the removed one is later
    older = replace(live, state=PS.REMOVED, since=T0 + 10, removed_by=P.BY_PEER)
    book = replace(book, pairings={"inv1": older, "inv2": ended})
    assert P.pairing_named(book, "devbox").id == "pa2"  # none live: the latest
    requested_too = replace(live, invitation="inv3", id=None, state=PS.REQUESTED, since=T0 + 5)
    book = replace(book, pairings={"inv1": older, "inv2": ended, "inv3": requested_too})
    assert P.pairing_named(book, B1.box_id).invitation == "inv3"  # a requested pairing is live too


# --- who took a person's step (P10) -----------------------------------------------------------------


def _actors(effects: tuple[Any, ...]) -> list[str]:
    return [e.actor for e in effects if isinstance(e, Audit)]


def test_each_persons_step_is_audited_as_who_took_it_owner_by_default() -> None:
    page = "owner:page:3f9c"
    steps: list[Callable[..., tuple[P.PairBook, tuple[Any, ...]]]] = [
        lambda **who: P.invite(empty(), invitation_id="inv1", secret_hash=P.secret_hash(SECRET), now=T0, **who),
        lambda **who: P.revoke_invitation(invited(), "inv1", now=T0 + 1, **who),
        lambda **who: P.approve(requested(("r1", B1, "devbox")), "r1", pairing_id="pa1", now=T0 + 2, **who),
        lambda **who: P.decline(requested(("r1", B1, "devbox")), "r1", now=T0 + 2, **who),
        lambda **who: P.accept_code(empty(), invitation_id="inv9", keys=B2, name="far", expires_at=T0 + 900,
                                    now=T0, **who),
        lambda **who: P.remove(paired(), "inv1", now=T0 + 3, **who),
        lambda **who: P.set_settings(paired(), "inv1", ["messages=off"], now=T0 + 3, **who),
    ]
    for step in steps:
        assert _actors(step()[1]) == [P.OWNER]
        assert _actors(step(actor=page)[1]) == [page]
    # what the peer or the clock did is not the person's: a peer's unpair is still the box's
    _, effects = P.removed_by_peer(paired(), "pa1", now=T0 + 3)
    assert _actors(effects) == [f"box:{B1.box_id}"]


# --- per-pairing settings (P12) ---------------------------------------------------------------------


def test_a_pairing_starts_with_the_default_settings_and_its_words_are_every_key() -> None:
    assert paired().pairings["inv1"].settings == RM.DEFAULT_SETTINGS
    assert P.settings_words(RM.DEFAULT_SETTINGS) == (
        "messages=on", "per_window=60", "live_ids=2000", "queued_bytes=1048576", "directory=reachable",
        "history=none", "history_repos=",
    )
    assert set(P.SETTING_KEYS) == set(RM.PairingSettings.__dataclass_fields__)
    off = RM.PairingSettings(messages=False, per_window=1, live_ids=100_000, queued_bytes=1024,
                             directory="none", history="index", history_repos=("connect", "web.site"))
    assert P.parse_settings(P.settings_words(off)) == off  # the words read back as the same settings
    assert P.SETTING_CHOICES["directory"] == tuple(RD.Setting)  # the directory's own setting, once


def test_the_directory_and_history_settings_take_their_values_and_repository_names() -> None:
    book = paired()
    new, effects = P.set_settings(book, "inv1", ["directory=connected", "history=INDEX",
                                                 "history_repos= connect , web.site,my_repo-2"], now=T0 + 3)
    settings = new.pairings["inv1"].settings
    assert (settings.directory, settings.history, settings.history_repos) == (
        "connected", "index", ("connect", "web.site", "my_repo-2"))
    assert settings.messages is True and settings.per_window == 60  # the others kept
    (audit,) = [e for e in effects if isinstance(e, Audit)]
    assert audit.detail == (f"box {B1.box_id} (devbox): directory reachable -> connected; history none -> index;"
                            " history_repos  -> connect,web.site,my_repo-2")
    # an empty list takes every repository away; directory=none shares nothing
    cleared, _ = P.set_settings(new, "inv1", ["history_repos=", "directory=none"], now=T0 + 4)
    assert cleared.pairings["inv1"].settings.history_repos == ()
    assert cleared.pairings["inv1"].settings.directory == "none"
    assert "history_repos=" in P.settings_words(cleared.pairings["inv1"].settings)


def test_set_settings_persists_audits_and_notifies_only_the_keys_given() -> None:
    book = paired()
    new, effects = P.set_settings(book, "inv1", ["messages=off", " per_window = 5 "], now=T0 + 3,
                                  actor="owner:page:3f9c")
    settings = new.pairings["inv1"].settings
    assert settings == RM.PairingSettings(messages=False, per_window=5)
    assert new.pairings["inv1"] == replace(book.pairings["inv1"], settings=settings)  # nothing else moved
    assert persisted(effects) == {(P.STORE_PAIRING, ("inv1",)): new.pairings["inv1"]}
    (audit,) = [e for e in effects if isinstance(e, Audit)]
    assert (audit.actor, audit.action, audit.outcome, audit.target) == ("owner:page:3f9c", "pair.set", "set", "pa1")
    assert audit.detail == f"box {B1.box_id} (devbox): messages on -> off; per_window 60 -> 5"
    (notice,) = [e for e in effects if isinstance(e, Notify)]
    assert notice.payload["event"] == "settings" and "messages=off" in notice.payload["settings"]
    # a later set keeps what the earlier one set
    again, _ = P.set_settings(new, "inv1", ["live_ids=10", "messages=ON"], now=T0 + 4)
    assert again.pairings["inv1"].settings == RM.PairingSettings(messages=True, per_window=5, live_ids=10)
    # the same values again: still the person's act, audited, nothing changed
    _, same = P.set_settings(again, "inv1", ["live_ids=10"], now=T0 + 5)
    assert [e.detail for e in same if isinstance(e, Audit)] == [f"box {B1.box_id} (devbox): unchanged"]


@pytest.mark.parametrize(
    ("words", "reason", "match"),
    [
        (["colour=blue"], Ref.UNKNOWN_SETTING, "no setting 'colour'"),
        (["messages"], Ref.BAD_SETTING, "is not KEY=VALUE"),
        (["=on"], Ref.BAD_SETTING, "is not KEY=VALUE"),
        (["per_window="], Ref.BAD_SETTING, "is not KEY=VALUE"),
        ([], Ref.BAD_SETTING, "no setting given"),
        (["messages=maybe"], Ref.BAD_SETTING, "messages is on or off, not 'maybe'"),
        (["per_window=ten"], Ref.BAD_SETTING, "per_window is a whole number from 1 to 600, not 'ten'"),
        (["live_ids=-3"], Ref.BAD_SETTING, "live_ids is a whole number"),
        (["queued_bytes=1.5"], Ref.BAD_SETTING, "queued_bytes is a whole number"),
        (["per_window=0"], Ref.SETTING_OUT_OF_RANGE, "per_window=0 is out of range: from 1 to 600"),
        (["per_window=601"], Ref.SETTING_OUT_OF_RANGE, "per_window=601 is out of range"),
        (["live_ids=100001"], Ref.SETTING_OUT_OF_RANGE, "live_ids=100001 is out of range"),
        (["queued_bytes=1023"], Ref.SETTING_OUT_OF_RANGE, "queued_bytes=1023 is out of range"),
        (["messages=off", "messages=on"], Ref.BAD_SETTING, "messages is given twice"),
        (["directory=everyone"], Ref.BAD_SETTING, "directory is reachable or connected or none, not 'everyone'"),
        (["directory="], Ref.BAD_SETTING, "is not KEY=VALUE"),
        (["history=full"], Ref.BAD_SETTING, "history is none or index, not 'full'"),
        (["history_repos=../etc"], Ref.BAD_SETTING, "history_repos is repository names"),
        (["history_repos=a/b"], Ref.BAD_SETTING, "not 'a/b'"),
        (["history_repos=a,,b"], Ref.BAD_SETTING, "not ''"),
        (["history_repos=.hidden"], Ref.BAD_SETTING, "not '.hidden'"),
        (["history_repos=a,b,a"], Ref.BAD_SETTING, "names a repository twice"),
        ([f"history_repos={','.join(f'r{i}' for i in range(65))}"], Ref.SETTING_OUT_OF_RANGE,
         "history_repos names 65 repositories: at most 64"),
        (["history=index", "directory=all"], Ref.BAD_SETTING, "directory is"),
        # all or none: a good word before a bad one is not set either
        (["messages=off", "per_window=0"], Ref.SETTING_OUT_OF_RANGE, "per_window=0"),
    ],
)
def test_a_bad_setting_is_refused_naming_the_problem_and_changes_nothing(
    words: list[str], reason: P.Refusal, match: str
) -> None:
    book = paired()
    refused(lambda: P.set_settings(book, "inv1", words, now=T0 + 3), reason, book, match=match)


def test_settings_of_an_unknown_removed_or_ended_pairing_are_refused_changing_nothing() -> None:
    book = paired()
    refused(lambda: P.set_settings(book, "nope", ["messages=off"], now=T0 + 3), Ref.UNKNOWN_PAIRING, book)
    gone, _ = P.remove(book, "inv1", now=T0 + 3)
    refused(lambda: P.set_settings(gone, "inv1", ["messages=off"], now=T0 + 4), Ref.REMOVED, gone,
            match="is removed: its settings no longer matter")
    declined, _ = P.pair_declined(accepted_code(), "inv1", now=T0 + 1)
    refused(lambda: P.set_settings(declined, "inv1", ["messages=off"], now=T0 + 2), Ref.NOT_ACTIVE, declined,
            match="is declined")
    # a requested pairing (the invitee waiting for the answer) takes settings: they hold once it is active
    waiting, _ = P.set_settings(accepted_code(), "inv1", ["messages=off"], now=T0 + 1)
    active, _ = P.pair_accepted(waiting, "inv1", pairing_id="pa7", now=T0 + 2)
    assert active.pairings["inv1"].settings.messages is False


def test_an_owed_pairing_wire_is_published_once_its_due_time_came_and_the_publisher_sleeps_until_the_next() -> None:
    """wire_due: a due time at or before now; next_wire_due: the earliest due time after now, None
    when none (the publisher then sleeps until a step owes a wire)."""
    assert P.wire_due(5.0, 5.0) and P.wire_due(4.0, 5.0)
    assert not P.wire_due(5.5, 5.0) and not P.wire_due(None, 5.0)
    assert P.next_wire_due([None, 4.0, 12.0, 7.5, 5.0], 5.0) == 7.5  # due ones now, settled ones (None) never
    assert P.next_wire_due([None, 3.0, 5.0], 5.0) is None
    assert P.next_wire_due([], 5.0) is None
