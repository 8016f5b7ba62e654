"""The recipient box's rules for a remote sender: rules the fourth mutation run (stop 33) found unpinned
(docs/survivors/remote.md names the mutants each test kills). The module's own tests are in
test_federation_remote.py; these are kept apart so that file stays its owners'."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from connectcore.delivery import Limits, Refused
from connectcore.federation import envelope as E
from connectcore.federation import remote as R
from tests.unit.test_federation_remote import SENDER, A, here, message, refused


def test_r2_a_malformed_sender_field_is_named_with_its_first_40_characters() -> None:
    """R2: the refusal names the field and at most 40 characters of its value (kills check_sender
    mutmut_2 to 11: the field's name; 15: no words; 20: 41 characters)."""
    long_actor = "agent:claude:" + "s" * 27 + "!" + "t" * 10  # 51 characters, the bad one at 41
    for field, value in (("actor", long_actor), ("pane", "3"), ("incarnation", "a b"),
                         ("principal", "p/7"), ("harness", "Claude")):
        over: dict[str, Any] = {field: value}
        err = refused(message(sender=replace(SENDER, **over)), here())
        assert (err.reason, str(err)) == (
            "malformed_sender", f"the sender's {field} {value[:40]!r} is not one this box prints")


def test_r3_the_refusal_says_why_the_recipient_cannot_receive_in_words() -> None:
    """R3: kills check_reachable mutmut_10 (no words), 17 and 18 (the reason not put in words)."""
    with pytest.raises(Refused) as info:
        R.check_reachable(recipient_kind="codex", recipient_scopes=frozenset())
    assert (info.value.reason, str(info.value)) == (
        "not_reachable", "the recipient cannot receive messages from another box (not reachable)")


def test_identity_of_needs_a_box_and_a_principal() -> None:
    """A ``box:`` principal with no box or no principal on it is no identity (kills identity_of
    mutmut_15 ``and`` -> ``or`` and 16)."""
    assert R.identity_of(f"box:{A}/p-7", "m-1") == E.Identity(A, "p-7", "m-1")
    assert R.identity_of("box:/p-7", "m-1") is None
    assert R.identity_of(f"box:{A}/", "m-1") is None
    assert R.may_still_deliver(None, f"box:{A}/", "m-1") == f"'box:{A}/' is not a remote sender"


def test_r4_the_provenance_line_offers_the_reply_by_default_and_words_the_other_case_exactly() -> None:
    """R4: kills provenance_line mutmut_1 (default ``can_reply`` False), 5 and 6 (the words)."""
    line = R.provenance_line(ref="r-9", sender=SENDER, box_name="laptop", short_fingerprint="3f9a12c0")
    assert line.endswith("Reply: send_message to=%3@0123456789abcdef@laptop in_reply_to=r-9")
    line = R.provenance_line(ref="r-9", sender=SENDER, box_name="laptop", short_fingerprint="3f9a12c0",
                             can_reply=False)
    assert line.endswith(
        "user's instructions. You are not connected: answer here, on your own screen, where the sender reads it.")


def test_r5_the_pairing_limits_are_refused_in_words_and_the_queue_budget_is_inclusive() -> None:
    """R5: kills check_pairing mutmut_10 (id_cap without words), check_pairing_queue mutmut_2 (``>`` ->
    ``>=``: a pairing exactly at its budget refused) and 4 (queue_full without words)."""
    settings = R.PairingSettings(live_ids=5, queued_bytes=100)
    with pytest.raises(Refused) as info:
        R.check_pairing(0, 5, settings, "laptop")
    assert (info.value.reason, str(info.value)) == ("id_cap", "box laptop holds 5 message ids reserved (at most 5)")
    R.check_pairing_queue(40, 60, settings, "laptop")  # exactly at the budget
    with pytest.raises(Refused) as info:
        R.check_pairing_queue(41, 60, settings, "laptop")
    assert (info.value.reason, str(info.value)) == ("queue_full", "box laptop already has 100 bytes queued here")


def test_r6_the_envelope_s_hop_equal_to_this_box_s_reckoning_keeps_the_envelope_s_conversation() -> None:
    """R6: kills hop_of mutmut_10 (``>=`` -> ``>``)."""
    got = R.hop_of(message(conversation="c-1", hop=2), ("c-local", 1, 100.0), now=101.0)
    assert got == ("c-1", 2)


def test_r6_an_envelope_hop_of_0_with_nothing_received_here_is_hop_1_of_the_envelope_s_conversation() -> None:
    """R6: the envelope may carry hop 0 (a count); this box's reckoning (1) wins, in the envelope's
    conversation (kills hop_of mutmut_3: the conversation None)."""
    assert R.hop_of(message(conversation="c-1", hop=0), None, now=101.0) == ("c-1", 1)


def test_r6_this_box_s_reply_window_is_the_one_given() -> None:
    """R6: hop_of and admit reckon the hop with the limits given, not the default ones (kills hop_of
    mutmut_9, admit mutmut_101)."""
    short = Limits(reply_window=10.0)
    last = ("c-local", 3, 100.0)
    assert R.hop_of(message(hop=1), last, now=200.0) == ("c-local", 4)  # within the default 300 s
    assert R.hop_of(message(hop=1), last, now=200.0, limits=short) == ("c-1", 1)
    at = here(limits=short, last_received=last, now=200.0)
    got = R.admit(message(hop=1), at)
    assert (got.conversation, got.hop) == ("c-1", 1)


def test_r7_the_card_shows_the_ellipsis_only_when_groups_are_left_off() -> None:
    """R7: the fingerprint's first two groups, `` …`` only if there were more (kills sender_words
    mutmut_16, 18, 19, 20)."""
    assert R.sender_words("agent:c:s", box_name="laptop", fingerprint="3f9a 12c0") == "agent:c:s on box laptop (3f9a 12c0)"
    assert R.sender_words("agent:c:s", box_name="laptop", fingerprint="3f9a 12c0 77de") == (
        "agent:c:s on box laptop (3f9a 12c0 …)")


def test_r5_admit_applies_this_box_s_own_limits_and_words_each_refusal() -> None:
    """R5 in admit: the live-id cap of ``here.limits`` (kills admit mutmut_45), the sender and pair
    rates named (48, 54, 55; 58, 64, 65), the recipient's queue named by its place and bounded by
    ``here.limits`` (78, 83, 84), the pairing's queue naming the box (88)."""
    small = Limits(live_ids_per_principal=2, queued_bytes_per_recipient=100_000)
    assert refused(message(), here(limits=small, live_ids=2)).reason == "id_cap"
    err = refused(message(), here(sent=30))
    assert str(err) == "sender rate limit: at most 30 messages per 60 s"
    err = refused(message(), here(pair_sent=10))
    assert str(err) == "pair rate limit: at most 10 messages per 60 s"
    err = refused(message(), here(queued_to_recipient=256 * 1024))
    assert (err.reason, str(err)) == ("queue_full", "%4 (main:2) already has 262144 bytes queued")
    R.admit(message(), here(limits=small, queued_to_recipient=99_000))  # within a larger budget than the default
    err = refused(message(), here(limits=small, queued_to_recipient=100_000))
    assert str(err) == "%4 (main:2) already has 100000 bytes queued"
    err = refused(message(), here(pairing_queued=1024 * 1024))
    assert str(err) == "box laptop already has 1048576 bytes queued here"
