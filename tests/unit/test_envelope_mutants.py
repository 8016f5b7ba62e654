"""The envelope: rules the 2026-12-06 (third) mutation run found unpinned (docs/quality.md names the
mutants each test kills)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from connectcore.federation import envelope as E
from tests.unit.test_federation_envelope import (
    KA,
    KC,
    NONCE,
    NOW,
    OLD_PAIRING,
    SEALED,
    A,
    B,
    C,
    cancel,
    facts,
    message,
    receipt,
    routing,
    view,
)


def test_a_refusal_kind_a_minute_old_with_nothing_left_out_is_dropped_from_the_state() -> None:
    """``refusal_audit_due``: an entry exactly :data:`REFUSAL_AUDIT_EVERY` old with nothing left out is
    dropped; one with refusals left out is kept (its count is owed to the next record)."""
    audited = {("box:a", "stale"): (NOW, 0), ("box:c", "stale"): (NOW, 2)}
    due, left_out, state = E.refusal_audit_due(audited, "box:b", "stale", NOW + E.REFUSAL_AUDIT_EVERY)
    assert (due, left_out) == (True, 0)
    assert state == {("box:c", "stale"): (NOW, 2), ("box:b", "stale"): (NOW + E.REFUSAL_AUDIT_EVERY, 0)}


def test_a_pairing_step_stamped_past_the_skew_bound_is_clock_ahead() -> None:
    """Step 11 reads a pair_accept's ``at`` (``PairingInner.get``): past the bound it is refused, within
    it the step is the pairing rules'."""
    late = E.PairingInner(routing(E.Kind.PAIR_ACCEPT), (("at", NOW + 301),))
    verdict = E.judge(facts(late), view())
    assert (verdict.decision, verdict.reason) == (E.Decision.REFUSED, E.Refusal.CLOCK_AHEAD)
    assert verdict.detail == "stamped 301 s ahead of this box (the bound is 300 s)"
    on_time = E.PairingInner(routing(E.Kind.PAIR_ACCEPT), (("at", NOW + 300),))
    assert E.judge(facts(on_time), view()).decision is E.Decision.PAIRING


def test_a_part_with_a_json_constant_is_refused_naming_it() -> None:
    with pytest.raises(E.EnvelopeError) as caught:
        E.parse_outer(b'{"v":NaN}')
    assert (caught.value.reason, str(caught.value)) == (
        E.Refusal.MALFORMED, "the outer part is not JSON (NaN is not JSON)")


def test_a_field_of_the_wrong_type_is_refused_naming_the_field_and_its_value() -> None:
    outer = E.Outer(routing(), NONCE, SEALED)
    row = json.loads(E.encode_inner(message()))
    row["hop"] = -1
    with pytest.raises(E.EnvelopeError) as caught:
        E.parse_inner(E.canonical(row), outer)
    assert (caught.value.reason, str(caught.value)) == (E.Refusal.BAD_BINDING, "message.hop is not a count: -1")


def test_a_pairing_wire_from_an_unpaired_box_is_refused_as_that_box_s_with_its_reason() -> None:
    """Steps 3 and 5 to 7 for a box with no keys pinned, on a pairing subject: each refusal names the
    subject's sender as its actor, with the reason's words."""
    alone = view(peers={})
    subject = E.subject_for(E.Kind.PAIR_REQUEST, A, B)
    accept = E.PairingInner(routing(E.Kind.PAIR_ACCEPT), (("at", NOW),))
    garbled = facts(accept, subject=subject, outer=b"{not json")
    assert E.judge(garbled, alone) == E.Verdict(
        E.Decision.REFUSED, f"box:{A}", E.Refusal.MALFORMED,
        "the outer part is not JSON (Expecting property name enclosed in double quotes: line 1 column 2 (char 1))",
    )
    assert E.judge(facts(accept), alone) == E.Verdict(
        E.Decision.REFUSED, f"box:{A}", E.Refusal.UNPAIRED, f"box {A} is not paired with this box (a pair_accept)")
    request = E.PairingInner(routing(E.Kind.PAIR_REQUEST), (("name", "devbox"), ("secret", "s")))
    assert E.judge(facts(request, keys=KC), alone) == E.Verdict(
        E.Decision.REFUSED, f"box:{A}", E.Refusal.BAD_BINDING,
        f"the keys a pair_request carries give box {KC.box_id}, not {A}",
    )
    assert E.keys_to_verify(subject, 100, E.Outer(request.routing, NONCE, SEALED, KA).encode(), alone) == KA


# --------------------------------------------------------------------------------------------------
# Read at stop 34 (the fourth 2026-12-06 run; docs/survivors/envelope.md names the mutants each kills)
# --------------------------------------------------------------------------------------------------


def test_a_pair_request_carrying_other_keys_than_those_pinned_for_its_box_is_bad_binding() -> None:
    """Step 7: keys are pinned for A, a pair_request from A carries C's keys (signed with A's pinned
    key): refused ``bad_binding`` with its words; carrying the pinned keys it goes to the pairing rules.
    Kills judge mutmut_53 (``!=`` -> ``==``), 54 to 59 (reason, detail)."""
    request = E.PairingInner(routing(E.Kind.PAIR_REQUEST), (("name", "devbox"), ("secret", "s")))
    assert E.judge(facts(request, keys=KC), view()) == E.Verdict(
        E.Decision.REFUSED, f"box:{A}", E.Refusal.BAD_BINDING,
        "a pair_request's keys differ from those pinned for its box")
    assert E.judge(facts(request, keys=KA), view()).decision is E.Decision.PAIRING


def test_a_wire_of_exactly_64_kib_is_checked_and_one_byte_more_is_malformed() -> None:
    """Step 1's bound is inclusive: 64 KiB is a wire, 64 KiB + 1 is not. Kills _precheck mutmut_19
    (``>`` -> ``>=``) and 22 (the refusal's actor)."""
    subject = E.subject_for(E.Kind.MESSAGE, A, B)
    outer = E.Outer(routing(), NONCE, SEALED).encode()
    assert E.keys_to_verify(subject, E.MAX_WIRE_BYTES, outer, view()) == KA
    assert E.keys_to_verify(subject, E.MAX_WIRE_BYTES + 1, outer, view()) is None
    big = dataclasses.replace(facts(message()), size=E.MAX_WIRE_BYTES + 1)
    assert E.judge(big, view()) == E.Verdict(
        E.Decision.REFUSED, f"box:{A}", E.Refusal.MALFORMED,
        f"a wire of {E.MAX_WIRE_BYTES + 1} bytes (more than 64, at most {E.MAX_WIRE_BYTES})")


def test_a_long_subject_is_quoted_to_its_first_120_characters() -> None:
    """Step 1: the refusal of a subject that is not one quotes at most 120 characters of it (text from
    another machine). Kills _precheck mutmut_17."""
    subject = "x" * 200
    verdict = E.judge(dataclasses.replace(facts(message()), subject=subject), view())
    assert (verdict.actor, verdict.reason) == ("box:unknown", E.Refusal.MALFORMED)
    assert verdict.detail == f"subject {'x' * 120!r} is not connect.<to>.<kind>.<from>"


def test_wrong_box_and_unpaired_refusals_name_the_subject_s_sender() -> None:
    """Steps 2 and 3: the refusal's actor is ``box:<the subject's sender>``. Kills _precheck mutmut_31, 43."""
    to_c = E.judge(facts(message(routing=routing(to=C)), subject=E.subject_for(E.Kind.MESSAGE, A, C)), view())
    assert (to_c.decision, to_c.actor, to_c.reason) == (E.Decision.REFUSED, f"box:{A}", E.Refusal.WRONG_BOX)
    unpaired = E.judge(facts(message()), view(peers={}))
    assert (unpaired.decision, unpaired.actor, unpaired.reason) == (
        E.Decision.REFUSED, f"box:{A}", E.Refusal.UNPAIRED)


def test_an_outer_whose_sealed_part_is_four_characters_of_base64_is_read() -> None:
    """``unb64``: only a length of 1 modulo 4 is no base64url; four characters (three bytes) are.
    Kills unb64 mutmut_6 (``% 4 == 1`` -> ``/ 4 == 1``)."""
    outer = E.Outer(routing(), NONCE, b"abc")
    assert E.parse_outer(outer.encode()) == outer
    with pytest.raises(E.EnvelopeError) as caught:
        E.unb64("AAAAA", "the sealed part", E.Refusal.MALFORMED)
    assert (caught.value.reason, str(caught.value)) == (E.Refusal.MALFORMED, "the sealed part is not base64url")


def test_step_5_and_step_10_refusals_say_what_is_wrong() -> None:
    """A signed outer part that is not canonical is ``malformed`` with the parse's words; an inner part
    that is not is ``bad_binding`` with its words. Kills judge mutmut_35, 107."""
    garbled = E.judge(facts(message(), outer=b"{not json"), view())
    assert (garbled.reason, garbled.detail) == (
        E.Refusal.MALFORMED,
        "the outer part is not JSON (Expecting property name enclosed in double quotes: line 1 column 2 (char 1))")
    bad_inner = E.judge(facts(message(), opened=b"[]"), view())
    assert (bad_inner.reason, bad_inner.detail) == (E.Refusal.BAD_BINDING, "the inner part is not a JSON object")


def test_a_removed_pairing_s_refusal_names_the_pairing_and_an_unpair_of_an_old_pairing_passes() -> None:
    """Step 8: a message of a pairing no longer active is ``removed`` and the verdict names that pairing
    (the unpair is owed again); an unpair naming an old pairing of that box is not ``removed``.
    Kills judge mutmut_76, 78 (pairing dropped), 88 (``|`` -> ``&``)."""
    old = message(routing=routing(pairing=OLD_PAIRING))
    verdict = E.judge(facts(old), view())
    assert (verdict.reason, verdict.pairing) == (E.Refusal.REMOVED, OLD_PAIRING)
    unpair = E.PairingInner(routing(E.Kind.UNPAIR, pairing=OLD_PAIRING), (("at", NOW), ("reason", "bye")))
    assert E.judge(facts(unpair), view()).decision is E.Decision.PAIRING


def test_every_passing_verdict_names_its_sender_box_and_the_inner_digest() -> None:
    """A pairing step, directory entry, history query, receipt and cancel that pass carry actor
    ``box:<sender>`` and the SHA-256 of the inner bytes. Kills judge mutmut_122, 124, 128, 130, 132,
    136, 138, 140, 144, 154, 156, 161, 177, 178."""
    sent_id = E.Identity(B, "p-1", "m-9")
    inners: list[E.Inner] = [
        E.PairingInner(routing(E.Kind.PAIR_ACCEPT), (("at", NOW),)),
        E.DirectoryInner(routing(E.Kind.DIRECTORY), 3, NOW, ()),
        E.HistoryQueryInner(routing(E.Kind.HISTORY_QUERY), "q-1", NOW, "agent:claude:s-1", "words", None, 5),
        receipt(message=sent_id),
        cancel(),
    ]
    for inner in inners:
        verdict = E.judge(facts(inner), view(sent={sent_id: "ab" * 32}))
        assert verdict.decision is not E.Decision.REFUSED, verdict
        assert (verdict.actor, verdict.digest) == (f"box:{A}", E.digest_of(E.encode_inner(inner)))


def test_a_stale_refusal_says_how_old_the_envelope_is() -> None:
    """Step 12: the detail counts the seconds since ``created_at``. Kills judge mutmut_170."""
    old = message(created_at=NOW - E.RETENTION - 10)
    verdict = E.judge(facts(old), view())
    assert (verdict.reason, verdict.detail) == (
        E.Refusal.STALE, "created 86410 s ago, older than the retention (86400 s): a replay")


def _outer_row(kind: E.Kind = E.Kind.MESSAGE) -> dict[str, object]:
    keys = KA if kind is E.Kind.PAIR_REQUEST else None
    row: dict[str, object] = json.loads(E.Outer(routing(kind), NONCE, SEALED, keys).encode())
    return row


def _with(row: dict[str, object], **over: object) -> bytes:
    return E.canonical({**row, **over})


@pytest.mark.parametrize(("data", "words"), [
    (_with(_outer_row(), v=2), "the outer part is not version 1"),
    (_with(_outer_row(), extra=1), "the outer part of a message lacks [] or has unknown fields ['extra']"),
    (_with(_outer_row(E.Kind.PAIR_REQUEST), keys=["sign", "seal"]), "a pair_request's keys are {sign, seal}"),
    (_with(_outer_row(E.Kind.PAIR_REQUEST), keys={"sign": E.b64(KA.sign)}), "a pair_request's keys are {sign, seal}"),
    (_with(_outer_row(E.Kind.PAIR_REQUEST), keys={"sign": "A", "seal": E.b64(KA.seal)}),
     "keys.sign is not base64url"),
    (_with(_outer_row(E.Kind.PAIR_REQUEST), keys={"sign": E.b64(KA.sign), "seal": "A"}),
     "keys.seal is not base64url"),
    (_with(_outer_row(E.Kind.PAIR_REQUEST), keys={"sign": "abcd", "seal": E.b64(KA.seal)}),
     "a box's signing public key is 32 bytes, got 3 bytes"),
    (_with(_outer_row(), nonce="A"), "the nonce is not base64url"),
    (_with(_outer_row(), sealed=""), "the sealed part is empty"),
    (_with(_outer_row(), kind="bogus"), "unknown envelope kind 'bogus'"),
    (_with(_outer_row(), **{"from": "nobox"}), "from is not a box id: 'nobox'"),
    (_with(_outer_row(), sealed="A"), "the sealed part is not base64url"),
    (json.dumps(dict(reversed(_outer_row().items())), separators=(",", ":")).encode(),
     "the outer part is not in canonical form"),
])
def test_an_outer_part_that_is_not_one_is_malformed_saying_why(data: bytes, words: str) -> None:
    """``parse_outer``: each way an outer part (text from another machine) is not one is ``malformed``
    with its own words. Kills parse_outer's survivors of the fourth run (docs/survivors/envelope.md)."""
    with pytest.raises(E.EnvelopeError) as caught:
        E.parse_outer(data)
    assert (caught.value.reason, str(caught.value)) == (E.Refusal.MALFORMED, words)


def _inner_row(inner: E.Inner) -> dict[str, object]:
    row: dict[str, object] = json.loads(E.encode_inner(inner))
    return row


_SENDER = {"principal": "p-7", "actor": "agent:claude:s-1", "harness": "claude", "pane": "%3",
           "incarnation": "0123456789abcdef", "control": False}
_QUERY = E.HistoryQueryInner(routing(E.Kind.HISTORY_QUERY), "q-1", NOW, "agent:claude:s-1", "words", None, 5,
                             ("claude", "s-1"))
_ANSWER = E.HistoryAnswerInner(routing(E.Kind.HISTORY_ANSWER), "q-1", NOW, "results", "", ())
_ENTRY = E.DirectoryInner(routing(E.Kind.DIRECTORY), 3, NOW, ())


@pytest.mark.parametrize(("inner", "over", "words"), [
    (message(), {"v": 2}, "the inner part is not version 1"),
    (message(), {"from": C}, "the inner routing differs from the outer routing"),
    (message(), {"extra": 1}, "the inner part of a message lacks [] or has unknown fields ['extra']"),
    (message(), {"target": {"address": "%4", "handle": "pr:1"}},
     "message.target is not {address} or {handle}: {'address': '%4', 'handle': 'pr:1'}"),
    (message(), {"target": ["address"]}, "message.target is not {address} or {handle}: ['address']"),
    (message(), {"target": {}}, "message.target is not {address} or {handle}: {}"),
    (message(), {"target": {"address": ""}}, "message.target is not a target: {'address': ''}"),
    (message(), {"sender": {**_SENDER, "principal": ""}}, "message.sender.principal is not a non-empty string: ''"),
    (message(), {"sender": {**_SENDER, "actor": ""}}, "message.sender.actor is not a non-empty string: ''"),
    (message(), {"sender": {**_SENDER, "control": "yes"}}, "message.sender.control is not true or false: 'yes'"),
    (message(), {"id": ""}, "message.id is not a non-empty string: ''"),
    (receipt(), {"outcome": "maybe"}, "receipt.outcome is not accepted or a final outcome: 'maybe'"),
    (_ENTRY, {"agents": [1]}, "directory.agents is not a list of objects: [1]"),
    (_ENTRY, {"agents": {}}, "directory.agents is not a list of objects: {}"),
    (_QUERY, {"session": {"harness": "", "id": "s-1"}}, "history_query.session.harness is not a non-empty string: ''"),
    (_QUERY, {"session": {"harness": "claude", "id": ""}}, "history_query.session.id is not a non-empty string: ''"),
    (_QUERY, {"id": ""}, "history_query.id is not a non-empty string: ''"),
    (_ANSWER, {"results": [1]}, "history_answer.results is not a list of objects: [1]"),
    (_ANSWER, {"results": {}}, "history_answer.results is not a list of objects: {}"),
    (_ANSWER, {"query": ""}, "history_answer.query is not a non-empty string: ''"),
    (message(), {"text": 1}, "message.text is not a string: 1"),
    (message(), {"created_at": "soon"}, "message.created_at is not a number: 'soon'"),
    (message(), {"created_at": True}, "message.created_at is not a number: True"),
    (message(), {"sender": 1}, "message.sender is not an object: 1"),
    (message(), {"sender": {"principal": "p-7"}},
     "message.sender lacks ['actor', 'control', 'harness', 'incarnation', 'pane'] or has unknown fields []"),
    (message(), {"sender": {**_SENDER, "harness": 1}}, "message.sender.harness is not a string: 1"),
    (receipt(), {"digest": "AB" * 32}, f"receipt.digest is not a SHA-256 in hex: {'AB' * 32!r}"),
    (receipt(), {"message": {"box": "nobox", "principal": "p-1", "id": "m-9"}},
     "receipt.message.box is not a box id: 'nobox'"),
    (receipt(), {"message": {"box": B, "principal": "", "id": "m-9"}},
     "receipt.message.principal is not a non-empty string: ''"),
    (receipt(), {"message": {"box": B, "principal": "p-1", "id": ""}},
     "receipt.message.id is not a non-empty string: ''"),
])
def test_an_inner_part_that_is_not_one_is_bad_binding_saying_why(inner: E.Inner, over: dict[str, object],
                                                                   words: str) -> None:
    """``parse_inner``: each way an opened inner part is not one of its kind (empty ids and names, a
    target that is not one, lists that are not of objects) is ``bad_binding`` with its own words.
    Kills parse_inner's survivors of the fourth run (docs/survivors/envelope.md)."""
    outer = E.Outer(inner.routing, NONCE, SEALED, KA if inner.routing.kind is E.Kind.PAIR_REQUEST else None)
    with pytest.raises(E.EnvelopeError) as caught:
        E.parse_inner(E.canonical({**_inner_row(inner), **over}), outer)
    assert (caught.value.reason, str(caught.value)) == (E.Refusal.BAD_BINDING, words)


def test_a_message_from_a_control_sender_is_read_as_one() -> None:
    """A message whose sender has ``control`` set parses with it set (kills the mutant dropping it)."""
    inner = message(sender=E.Sender("p-7", "agent:claude:s-1", "claude", "%3", "0123456789abcdef", True))
    outer = E.Outer(inner.routing, NONCE, SEALED)
    assert E.parse_inner(E.encode_inner(inner), outer) == inner


def test_what_a_held_identity_decides_names_its_box_digest_and_words() -> None:
    """Steps 13 and after for a message and a cancel: conflict, cancelled first, duplicate, too late (the
    id's hour is exclusive: exactly an hour old is new), cancel held, cancel, tombstone: each verdict whole.
    Kills _message's and _cancel's survivors of the fourth run (docs/survivors/envelope.md)."""
    inner = message()
    digest = E.digest_of(E.encode_inner(inner))
    ident = inner.identity
    actor = f"box:{A}"
    held = {ident: E.Held("cd" * 32, "accepted")}
    assert E.judge(facts(inner), view(retained=held)) == E.Verdict(
        E.Decision.REFUSED, actor, E.Refusal.CONFLICT, f"this box holds {ident} with other content: a reused id")
    tomb = {ident: E.Held(digest, "cancelled", tombstone=True)}
    assert E.judge(facts(inner), view(retained=tomb)) == E.Verdict(
        E.Decision.CANCELLED_FIRST, actor, detail="cancelled before it arrived", inner=inner, digest=digest,
        identity=ident, answer="cancelled")
    dup = {ident: E.Held(digest, "delivered")}
    assert E.judge(facts(inner), view(retained=dup)) == E.Verdict(
        E.Decision.DUPLICATE, actor, detail="held: delivered", inner=inner, digest=digest, identity=ident,
        answer="delivered")
    late = message(created_at=NOW - E.ID_TTL - 1)
    late_digest = E.digest_of(E.encode_inner(late))
    assert E.judge(facts(late), view()) == E.Verdict(
        E.Decision.TOO_LATE, actor, detail="reached this box after the id's hour; not accepted", inner=late,
        digest=late_digest, identity=ident, record=E.Held(late_digest, "expired"), answer="expired")
    hour = message(created_at=NOW - E.ID_TTL)
    assert E.judge(facts(hour), view()).decision is E.Decision.NEW

    c = cancel()
    c_digest = E.digest_of(E.encode_inner(c))
    assert E.judge(facts(c), view(retained=held)) == E.Verdict(
        E.Decision.REFUSED, actor, E.Refusal.CONFLICT,
        f"this box holds {ident} with another digest than the cancel names")
    assert E.judge(facts(c), view(retained=tomb)) == E.Verdict(
        E.Decision.DUPLICATE, actor, detail="cancel held", inner=c, digest=c_digest, identity=ident,
        answer="cancelled")
    assert E.judge(facts(c), view(retained={ident: E.Held(digest, "accepted")})) == E.Verdict(
        E.Decision.CANCEL, actor, inner=c, digest=c_digest, identity=ident)
    assert E.judge(facts(c), view()) == E.Verdict(
        E.Decision.TOMBSTONE, actor, detail="cancelled before it arrived", inner=c, digest=c_digest, identity=ident,
        record=E.Held(digest, "cancelled", tombstone=True), answer="cancelled")


def test_a_pair_request_with_an_empty_name_or_secret_is_bad_binding() -> None:
    """A pair_request's ``name`` and ``secret`` are non-empty strings. Kills parse_inner mutmut_438, 441,
    445, 448 (``empty=True`` or the default)."""
    request = E.PairingInner(routing(E.Kind.PAIR_REQUEST), (("name", "devbox"), ("secret", "s")))
    outer = E.Outer(request.routing, NONCE, SEALED, KA)
    for name in ("name", "secret"):
        with pytest.raises(E.EnvelopeError) as caught:
            E.parse_inner(E.canonical({**_inner_row(request), name: ""}), outer)
        assert (caught.value.reason, str(caught.value)) == (
            E.Refusal.BAD_BINDING, f"pair_request.{name} is not a non-empty string: ''")


def test_an_inner_part_that_is_not_json_or_not_canonical_is_bad_binding() -> None:
    """Kills parse_inner mutmut_4 (the reason of an inner part that is not JSON) and 469 (the words)."""
    outer = E.Outer(routing(), NONCE, SEALED)
    with pytest.raises(E.EnvelopeError) as caught:
        E.parse_inner(b"[", outer)
    assert caught.value.reason is E.Refusal.BAD_BINDING
    assert str(caught.value).startswith("the inner part is not JSON (")
    shuffled = json.dumps(dict(reversed(_inner_row(message()).items())), separators=(",", ":")).encode()
    with pytest.raises(E.EnvelopeError) as caught:
        E.parse_inner(shuffled, outer)
    assert (caught.value.reason, str(caught.value)) == (E.Refusal.BAD_BINDING, "the inner part is not in canonical form")


@pytest.mark.parametrize(("make", "words"), [
    (lambda: E.Routing("message", A, B, pairing="p"), "unknown envelope kind 'message'"),  # type: ignore[arg-type]
    (lambda: E.Routing(E.Kind.MESSAGE, A, "nobox", pairing="p"), "to is not a box id: 'nobox'"),
    (lambda: E.Routing(E.Kind.MESSAGE, A, B, pairing=""), "a message names its pairing by an id, got ''"),
    (lambda: E.Routing(E.Kind.MESSAGE, A, B, pairing="p", invitation="i"), "a message carries no invitation"),
    (lambda: E.Outer(routing(), NONCE, SEALED, KA), "only a pair_request carries the sender's keys"),
    (lambda: E.Outer(routing(), NONCE, b""), "the sealed part is empty"),
])
def test_an_envelope_this_box_builds_wrongly_is_refused_malformed(make: Any, words: str) -> None:
    """``Routing`` and ``Outer`` refuse what is not one (a sending box's bug is caught before the wire).
    Kills _check_routing mutmut_2 to 5, 8, 9, 14, 32, 37; Outer.__post_init__ 8, 11 to 16, 20, 24."""
    with pytest.raises(E.EnvelopeError) as caught:
        make()
    assert (caught.value.reason, str(caught.value)) == (E.Refusal.MALFORMED, words)


def test_the_canonical_encoding_has_no_nan() -> None:
    """Kills canonical mutmut_10, 15 (``allow_nan`` dropped or true)."""
    with pytest.raises(ValueError):
        E.canonical({"at": float("nan")})
