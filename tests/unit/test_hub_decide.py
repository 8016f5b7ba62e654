"""The hub's card decisions at their edges: approve a pair, approve once, decline, and the refusals.

Effects are frozen dataclasses, so whole tuples are compared; each test names the rule it pins.
"""

from __future__ import annotations

import pytest

from connectcore import hub as H
from connectcore.consent import CardState, Decision
from connectcore.delivery import MessageState
from connectcore.effects import (
    Audit,
    CheckGuard,
    Notify,
    Persist,
)
from tests.unit.hubkit import World, actor, final_effects

# --- decide -------------------------------------------------------------------------------------------


def test_decide_approve_pair_records_the_card_audit_pairs_and_ready_message(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b, message_id="m1")
    card_id = w.card_of(key)
    w.now += 5
    effects = w.step(H.Decide(w.now, card_id, Decision.APPROVE_PAIR))
    card = w.hub.cards[card_id]
    assert card.state is CardState.APPROVED_PAIR and card.answered_by == "owner" and card.answered_at == w.now
    ready = w.message(key)
    assert ready.state is MessageState.READY and ready.reason == "approved_pair" and ready.final_at is None
    assert effects == (
        Persist("card", (card_id,), card),
        Audit(actor="owner", action="consent", outcome="approved_pair", target=actor(w, a), message_id="m1",
              detail=f"from {a.pane}@{a.incarnation} to {b.pane}@{b.incarnation}", at=w.now),
        Notify("card", (card_id,), payload={"state": "approved_pair"}),
        Persist("pairs", (), ((a.principal, b.incarnation),)),
        Persist("message", key, ready),
    )
    assert w.hub.pairs == {(a.principal, b.incarnation)}


def test_decide_approve_once_by_someone_adds_no_pair_and_may_start_the_guard(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b, message_id="m1")
    w.idle(b)
    card_id = w.card_of(key)
    effects = w.step(H.Decide(w.now, card_id, Decision.APPROVE_ONCE, by="phone"))
    assert effects[1] == Audit(
        actor="phone", action="consent", outcome="approved_once", target=actor(w, a), message_id="m1",
        detail=f"from {a.pane}@{a.incarnation} to {b.pane}@{b.incarnation}", at=w.now,
    )
    assert w.hub.cards[card_id].answered_by == "phone"
    assert effects[3].record.reason == "approved_once"  # type: ignore[attr-defined]
    assert effects[4:] == (CheckGuard(b.pane, b.incarnation, key),)
    assert w.hub.pairs == frozenset()


def test_decline_finalizes_with_the_person_s_reason(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b)
    card_id = w.card_of(key)
    effects = w.step(H.Decide(w.now, card_id, Decision.DECLINE))
    card = w.hub.cards[card_id]
    assert effects[:3] == (
        Persist("card", (card_id,), card),
        Audit(actor="owner", action="consent", outcome="declined", target=actor(w, a), message_id=key[1],
              detail=f"from {a.pane}@{a.incarnation} to {b.pane}@{b.incarnation}", at=w.now),
        Notify("card", (card_id,), payload={"state": "declined"}),
    )
    assert effects[3:] == final_effects(w, key, "declined", "declined by the person")


def test_decide_refusals_carry_reasons(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b)
    with pytest.raises(H.UnknownItem) as err:
        w.step(H.Decide(w.now, "card-x", Decision.DECLINE))
    assert err.value.reason == "unknown_card" and str(err.value) == "no card card-x"
    w.decide(key, Decision.DECLINE)
    with pytest.raises(H.UnknownItem) as err:
        w.decide(key, Decision.DECLINE)
    assert err.value.reason == "card_closed"
    assert str(err.value) == f"card {w.card_of(key)} was already answered (declined)"
