"""The pairing rules the desk's shell used to decide itself, now the core's (issue 24;
connectcore.federation.pairing P13-P15, and the envelope's audit lines): accepting a code that is this
box's own or was accepted before, which repeated pair_request is answered again, which pairings an
expiry tick ended, and the audit lines of an ignored and of a refused envelope. Their daemon side:
tests/integration/test_pairing_desk.py."""

from __future__ import annotations

from dataclasses import replace

import pytest

from connectcore.effects import Audit
from connectcore.federation import envelope as E
from connectcore.federation import pairing as P
from connectcore.federation.boxes import BoxKeys

INVITER = BoxKeys(bytes(range(32)), bytes(range(32, 64)))
INVITEE = BoxKeys(bytes([1]) * 32, bytes([2]) * 32)
OTHER = BoxKeys(bytes([3]) * 32, bytes([4]) * 32)
SECRET = b"s" * 32
T0 = 1_000_000.0
PS = P.PairingState


def code(keys: BoxKeys = INVITER, invitation: str = "inv1") -> P.Code:
    return P.Code(keys.box_id, "laptop", keys, invitation, SECRET, int(T0 + 900))


def accepted(state: P.PairingState = PS.REQUESTED) -> P.PairBook:
    """The invitee's book after accepting ``code()``, its pairing then in ``state``."""
    book, _ = P.accept_code(P.PairBook(own_box=INVITEE.box_id, own_name="devbox"), invitation_id="inv1",
                            keys=INVITER, name="laptop", expires_at=T0 + 900, now=T0)
    pairing = replace(book.pairings["inv1"], state=state)
    return replace(book, pairings={"inv1": pairing})


def requested(*boxes: tuple[str, BoxKeys]) -> P.PairBook:
    """The inviter's book: invitation ``inv1``, a pending request from each box."""
    book, _ = P.invite(P.PairBook(own_box=INVITER.box_id, own_name="laptop"), invitation_id="inv1",
                       secret_hash=P.secret_hash(SECRET), now=T0)
    for request_id, keys in boxes:
        book, _ = P.receive_request(book, request_id=request_id, invitation_id="inv1", keys=keys, name="devbox",
                                    secret=SECRET, now=T0 + 1)
    return book


# --- P13: accepting a code ----------------------------------------------------------------------------


def test_a_code_of_this_box_itself_is_refused_self_pairing_naming_where_to_run_it() -> None:
    with pytest.raises(P.PairingError) as caught:
        P.check_code_not_own(code(INVITEE), INVITEE.box_id)
    assert caught.value.reason is P.Refusal.SELF_PAIRING
    assert str(caught.value) == ("this is this box's own invitation: a box cannot pair with itself "
                                 "(run `pair accept` on the other box)")
    other = code()
    assert P.check_code_not_own(other, INVITEE.box_id) is other


@pytest.mark.parametrize("state", [PS.REQUESTED, PS.ACTIVE])
def test_the_same_code_again_is_a_repeat_while_its_pairing_is_requested_or_active(state: P.PairingState) -> None:
    book = accepted(state)
    assert P.code_repeat(book, code()) is book.pairings["inv1"]


@pytest.mark.parametrize("state", [PS.DECLINED, PS.EXPIRED, PS.REMOVED])
def test_the_same_code_again_after_its_pairing_ended_is_no_repeat(state: P.PairingState) -> None:
    """accept_code then refuses it (invitation_used)."""
    book = accepted(state)
    assert P.code_repeat(book, code()) is None
    with pytest.raises(P.PairingError) as caught:
        P.accept_code(book, invitation_id="inv1", keys=INVITER, name="laptop", expires_at=T0 + 900, now=T0)
    assert caught.value.reason is P.Refusal.INVITATION_USED


def test_a_code_with_other_keys_or_another_invitation_is_no_repeat() -> None:
    book = accepted()
    assert P.code_repeat(book, code(OTHER)) is None  # the invitation's id, another box's keys
    foreign = replace(code(), keys=OTHER)  # the same box id, other keys
    assert P.code_repeat(book, foreign) is None
    assert P.code_repeat(book, code(invitation="inv2")) is None


# --- P14: a repeated pair_request is answered again -------------------------------------------------


def test_a_repeated_request_is_the_one_from_the_same_box_with_the_same_keys() -> None:
    book = requested(("r1", INVITEE), ("r2", OTHER))
    assert P.repeated_request(book, "inv1", INVITEE) is book.requests["r1"]
    assert P.repeated_request(book, "inv1", OTHER) is book.requests["r2"]
    assert P.repeated_request(book, "inv2", INVITEE) is None
    assert P.repeated_request(requested(("r2", OTHER)), "inv1", INVITEE) is None


def test_a_repeat_is_answered_again_only_when_its_own_answer_is_kept() -> None:
    pending = requested(("r1", INVITEE), ("r2", OTHER))
    assert P.answer_again(pending, "inv1", INVITEE, []) is None  # pending: no answer yet
    book, _ = P.approve(pending, "r1", pairing_id="pa1", now=T0 + 2)
    assert P.answer_again(book, "inv1", INVITEE, ["r1"]) is book.requests["r1"]
    assert P.answer_again(book, "inv1", INVITEE, []) is None  # no answer kept: nothing to send again
    assert P.answer_again(book, "inv1", INVITEE, ["r2"]) is None  # another request's answer
    assert P.answer_again(book, "inv1", OTHER, ["r1"]) is None  # the refused one repeats: r1's is not its


def test_receive_request_s_repeat_is_the_request_answer_again_finds() -> None:
    """One rule for both: the request a repeat changes nothing for is the one answered again."""
    book, _ = P.approve(requested(("r1", INVITEE)), "r1", pairing_id="pa1", now=T0 + 2)
    again, effects = P.receive_request(book, request_id="r9", invitation_id="inv1", keys=INVITEE, name="devbox",
                                       secret=SECRET, now=T0 + 3)
    assert again is book
    (audit,) = effects
    assert isinstance(audit, Audit) and (audit.outcome, audit.target) == ("duplicate", "r1")
    assert P.answer_again(book, "inv1", INVITEE, ["r1"]) is book.requests["r1"]


# --- P15: what a step ended ---------------------------------------------------------------------------


def test_an_expiry_tick_ends_the_requested_pairings_it_expired_and_no_other() -> None:
    book = accepted()
    book, _ = P.accept_code(book, invitation_id="inv2", keys=OTHER, name="other", expires_at=T0 + 1e6, now=T0)
    book, _ = P.invite(book, invitation_id="inv3", secret_hash=P.secret_hash(SECRET), now=T0, expires_in=60)
    not_yet, _ = P.expire(book, now=T0 + 900 + P.ANSWER_GRACE - 1)  # only inv3's invitation expires
    assert not_yet is not book and P.pairings_ended(book, not_yet) == ()
    later, _ = P.expire(book, now=T0 + 900 + P.ANSWER_GRACE)
    assert P.pairings_ended(book, later) == (later.pairings["inv1"],)
    assert later.pairings["inv1"].state is PS.EXPIRED and later.pairings["inv2"].state is PS.REQUESTED
    assert P.pairings_ended(book, book) == ()


def test_a_pairing_whose_state_changed_otherwise_is_ended_too_and_a_new_one_is_not() -> None:
    book = accepted()
    active, _ = P.pair_accepted(book, "inv1", pairing_id="pa1", now=T0 + 1)
    assert P.pairings_ended(book, active) == (active.pairings["inv1"],)
    assert P.pairings_ended(P.PairBook(own_box=INVITEE.box_id, own_name="devbox"), book) == ()


# --- the envelope's audit lines ---------------------------------------------------------------------


def test_a_verdict_nobody_takes_is_one_ignored_line_naming_its_decision() -> None:
    verdict = E.Verdict(E.Decision.NEW, "box:abc")
    assert verdict.ignored(T0) == Audit("box:abc", "federation.envelope", "ignored",
                                        detail="a new envelope: this desk is joined to no engine", at=T0)


def test_a_refused_envelope_s_line_says_how_many_were_left_out() -> None:
    assert E.refusal_record("box:abc", "bad_seal: x", 0, at=T0) == Audit(
        "box:abc", "federation.envelope", "refused", detail="bad_seal: x", at=T0)
    assert E.refusal_record("box:abc", "bad_seal: x", 3, at=T0, message_id="m1") == Audit(
        "box:abc", "federation.envelope", "refused", message_id="m1",
        detail="bad_seal: x (and 3 more refused since the last record)", at=T0)


# --- P16: what travels in a pairing, what the judgement pins ------------------------------------------


def test_only_an_active_pairing_by_box_and_id_is_sealed_for_and_removed_ones_are_named() -> None:
    book = accepted()
    assert book.active_in(INVITER.box_id, None) is None  # requested: no id, not active
    active, _ = P.pair_accepted(book, "inv1", pairing_id="pa1", now=T0 + 1)
    assert active.active_in(INVITER.box_id, "pa1") is active.pairings["inv1"]
    assert active.active_in(INVITER.box_id, "pa2") is None
    assert active.active_in(OTHER.box_id, "pa1") is None
    assert active.removed_ids() == ()
    gone, _ = P.removed_by_peer(active, "pa1", now=T0 + 2)
    assert gone.active_in(INVITER.box_id, "pa1") is None
    assert gone.removed_ids() == ("pa1",)


def test_the_judgement_pins_each_box_s_keys_its_active_pairing_and_every_pairing_id_ever() -> None:
    book = accepted()
    assert P.envelope_peers(book) == {INVITER.box_id: E.Peer(INVITER, None, frozenset())}
    book, _ = P.pair_accepted(book, "inv1", pairing_id="pa1", now=T0 + 1)
    assert P.envelope_peers(book) == {INVITER.box_id: E.Peer(INVITER, "pa1", frozenset({"pa1"}))}
    # a later pairing with that box, not active: the earlier active one stays the box's active pairing
    later = replace(book.pairings["inv1"], invitation="inv2", id="pa2", state=PS.REQUESTED, since=T0 + 5)
    both = replace(book, pairings={**book.pairings, "inv2": later})
    assert P.envelope_peers(both) == {INVITER.box_id: E.Peer(INVITER, "pa1", frozenset({"pa1", "pa2"}))}
    # removed, then active again under a new pairing: the new one is active, both ids are known
    gone, _ = P.removed_by_peer(book, "pa1", now=T0 + 2)
    again = replace(gone, pairings={**gone.pairings, "inv2": replace(later, state=PS.ACTIVE)})
    assert P.envelope_peers(again) == {INVITER.box_id: E.Peer(INVITER, "pa2", frozenset({"pa1", "pa2"}))}
    assert P.envelope_peers(gone) == {INVITER.box_id: E.Peer(INVITER, None, frozenset({"pa1"}))}


def test_a_box_paired_twice_under_two_names_is_called_by_its_live_pairing_else_the_latest() -> None:
    """Claim: ``box_name`` is the one answer to "what does this box call box X" (``connectd messages``,
    a revocation's answer, ``get_message``): the live pairing's name, else the latest's, else the id."""
    import dataclasses

    from connectcore.federation import pairing as P
    from connectcore.federation.boxes import BoxKeys

    keys = BoxKeys(bytes([1]) * 32, bytes([2]) * 32)
    old = P.Pairing("inv1", P.Role.INVITER, "box-x", keys, "laptop", P.PairingState.REMOVED, 10.0, id="pa1")
    new = dataclasses.replace(old, invitation="inv2", name="laptop2", state=P.PairingState.ACTIVE, since=5.0, id="pa2")
    book = P.PairBook(own_box="box-own", own_name="devbox", pairings={"inv1": old, "inv2": new})
    assert P.box_name(book, "box-x") == "laptop2", "the live pairing's name, though the removed one is newer"
    ended = dataclasses.replace(book, pairings={"inv1": old, "inv2": dataclasses.replace(new, state=P.PairingState.REMOVED)})
    assert P.box_name(ended, "box-x") == "laptop", "none live: the latest's (by since)"
    assert P.box_name(book, "box-y") == "box-y", "no pairing names it: its id"


def test_a_removed_refusal_of_a_pairing_this_box_s_owner_removed_owes_its_unpair_again() -> None:
    """Claim (P17): only an envelope refused ``removed`` that names a pairing with the signing box, removed
    here by this box's owner, owes that pairing's unpair again."""
    import dataclasses

    from connectcore.federation import envelope as E
    from connectcore.federation import pairing as P
    from connectcore.federation.boxes import BoxKeys

    keys = BoxKeys(bytes([1]) * 32, bytes([2]) * 32)
    mine = P.Pairing("inv1", P.Role.INVITER, "box-x", keys, "laptop", P.PairingState.REMOVED, 10.0, id="pa1",
                     removed_by=P.BY_OWNER)
    book = P.PairBook(own_box="box-own", own_name="devbox", pairings={"inv1": mine})
    refused = E.Verdict(E.Decision.REFUSED, "box:box-x", E.Refusal.REMOVED, "not active", pairing="pa1")
    assert P.unpair_again(book, refused) == "pa1"
    by_peer = dataclasses.replace(book, pairings={"inv1": dataclasses.replace(mine, removed_by=P.BY_PEER)})
    assert P.unpair_again(by_peer, refused) is None, "the other box removed it: it knows"
    active = dataclasses.replace(book, pairings={"inv1": dataclasses.replace(mine, state=P.PairingState.ACTIVE)})
    assert P.unpair_again(active, refused) is None
    assert P.unpair_again(book, dataclasses.replace(refused, actor="box:box-y")) is None, "another box's envelope"
    assert P.unpair_again(book, dataclasses.replace(refused, pairing="pa2")) is None
    assert P.unpair_again(book, dataclasses.replace(refused, pairing=None)) is None
    assert P.unpair_again(book, dataclasses.replace(refused, reason=E.Refusal.STALE)) is None


def test_a_removal_tells_the_other_box_only_of_a_pairing_with_an_id_this_box_s_owner_removed() -> None:
    """Claim (P18): the signed unpair and the directory tombstone a removal owes name the removed
    pairing's id; a pairing still requested here (no id: the inviter never answered) owes neither,
    nor does one the other box removed."""
    import dataclasses

    keys = BoxKeys(bytes([1]) * 32, bytes([2]) * 32)
    mine = P.Pairing("inv1", P.Role.INVITER, "box-x", keys, "laptop", PS.REMOVED, 10.0, id="pa1",
                     removed_by=P.BY_OWNER)
    assert P.removal_notice(mine) == "pa1"
    assert P.removal_notice(dataclasses.replace(mine, id=None)) is None, "never active: nothing to name"
    assert P.removal_notice(dataclasses.replace(mine, removed_by=P.BY_PEER)) is None, "the other box removed it"
    assert P.removal_notice(dataclasses.replace(mine, state=PS.ACTIVE, removed_by=None)) is None


def test_the_directory_key_for_a_box_holds_a_tombstone_while_its_latest_pairing_is_one_this_box_removed() -> None:
    """Claim (P18): per box, the latest pairing with an id (by since) this box's owner removed is the
    tombstone its directory key holds; a newer pairing with that box (active, or removed by the other
    box) owes none, and a requested one with no id leaves the tombstone owed."""
    import dataclasses

    keys = BoxKeys(bytes([1]) * 32, bytes([2]) * 32)
    old = P.Pairing("inv1", P.Role.INVITER, "box-x", keys, "laptop", PS.REMOVED, 10.0, id="pa1",
                    removed_by=P.BY_OWNER)
    other = dataclasses.replace(old, invitation="inv9", box_id="box-y", id="pa9", removed_by=P.BY_PEER)
    book = P.PairBook(own_box="box-own", own_name="devbox", pairings={"inv1": old, "inv9": other})
    assert [p.id for p in P.tombstones_owed(book)] == ["pa1"]
    new = dataclasses.replace(old, invitation="inv2", state=PS.ACTIVE, since=20.0, id="pa2", removed_by=None)
    assert P.tombstones_owed(dataclasses.replace(book, pairings={**book.pairings, "inv2": new})) == ()
    asked = dataclasses.replace(new, state=PS.REQUESTED, id=None)
    assert [p.id for p in P.tombstones_owed(dataclasses.replace(book, pairings={**book.pairings, "inv2": asked}))] == ["pa1"]
