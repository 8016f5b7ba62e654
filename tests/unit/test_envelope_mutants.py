"""The envelope: rules the 2026-12-06 (third) mutation run found unpinned (docs/quality.md names the
mutants each test kills)."""

from __future__ import annotations

import json

import pytest

from connectcore.federation import envelope as E
from tests.unit.test_federation_envelope import (
    KA,
    KC,
    NONCE,
    NOW,
    SEALED,
    A,
    B,
    facts,
    message,
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
