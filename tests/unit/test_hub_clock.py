"""The hub's clock at its edges: card expiry, the id hour, and what a tick prunes or keeps.

Effects are frozen dataclasses, so whole tuples are compared; each test names the rule it pins.
"""

from __future__ import annotations

from connectcore import hub as H
from connectcore.consent import CardState, Decision
from connectcore.delivery import MessageState
from connectcore.effects import (
    Audit,
    CheckGuard,
    Notify,
    Persist,
)
from tests.unit.hubkit import World, final_effects, guarding

# --- tick / recover -----------------------------------------------------------------------------------


def test_card_expiry_at_its_exact_time_records_card_then_message(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b)
    card_id = w.card_of(key)
    w.now += 900
    effects = w.step(H.Tick(w.now))
    card = w.hub.cards[card_id]
    assert card.state is CardState.EXPIRED and card.answered_at == w.now and card.answered_by is None
    assert effects == (
        Persist("card", (card_id,), card),
        Notify("card", (card_id,), payload={"state": "expired"}),
        *final_effects(w, key, "expired", "card expired unanswered"),
    )


def test_the_id_hour_expires_queued_messages_at_its_exact_end_and_releases_them(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b)
    w.decide(key)
    ref = w.message(key).ref
    w.now += 3599.5
    assert w.step(H.Tick(w.now)) == ()
    w.now += 0.5
    done = None
    effects = w.step(H.Tick(w.now))
    done = effects[0].record  # type: ignore[attr-defined]
    assert done.state is MessageState.EXPIRED and done.reason == "not delivered within the id's hour"
    assert done.final_at == w.now
    assert [type(e) for e in effects] == [Persist, Audit, Notify]
    assert key not in w.hub.messages and ref not in w.hub.refs


def test_a_message_at_the_exact_end_of_its_hour_is_not_guarded(w: World) -> None:
    """An idle at ``expires_at`` itself starts no guard (the tick at that moment expires the message);
    a moment before, it does."""
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b)
    w.decide(key)
    w.now = w.message(key).expires_at
    assert w.idle(b) == () and w.hub.panes[b.pane].armed  # armed, and no guard
    assert w.message(key).state is MessageState.READY
    w2 = World()
    a2, b2 = w2.launch("a"), w2.launch("b")
    k2 = w2.send(a2, b2)
    w2.decide(k2)
    w2.now = w2.message(k2).expires_at - 0.001
    assert [e for e in w2.idle(b2) if isinstance(e, CheckGuard)] == [CheckGuard(b2.pane, b2.incarnation, k2)]


def test_guarding_and_typing_messages_outlive_the_hour_until_their_outcome(w: World) -> None:
    a, b, c = w.launch("a"), w.launch("b"), w.launch("c")
    k1 = guarding(w, a, b)
    k2 = guarding(w, a, c)
    w.guard(k2, c)
    w.now += 4000
    assert w.step(H.Tick(w.now)) == ()
    assert w.message(k1).state is MessageState.GUARDING and w.message(k2).state is MessageState.TYPING
    w.typed(k2)
    w.tick()
    assert k2 not in w.hub.messages and k1 in w.hub.messages


def test_tick_prunes_rate_windows_and_closed_cards_no_message_refers_to(w: World) -> None:
    a, b, c = w.launch("a"), w.launch("b"), w.launch("c")
    k1 = w.send(a, b)
    w.decide(k1, Decision.DECLINE)
    w.now += 30
    k2 = w.send(a, c)
    w.tick(30)  # 60 s after the first send, 30 after the second
    assert w.hub.sent == {a.principal: (w.now - 30,)}
    assert w.hub.pair_sent == {(a.principal, c.incarnation): (w.now - 30,)}
    assert set(w.hub.cards) == {w.card_of(k1), w.card_of(k2)}
    w.tick(3600)
    assert w.hub.sent == {} and w.hub.pair_sent == {} and w.hub.cards == {}


def test_tick_keeps_open_cards_and_closed_ones_of_live_messages(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    k1 = w.send(a, b)
    k2 = w.send(a, b)
    w.decide(k2, Decision.APPROVE_ONCE)
    w.tick(1)
    assert set(w.hub.cards) == {w.card_of(k1), w.card_of(k2)}


# --- ordering and accumulation ------------------------------------------------------------------------


def test_two_cards_expiring_in_one_tick_are_both_recorded(w: World) -> None:
    a, b, c = w.launch("a"), w.launch("b"), w.launch("c")
    k1, k2 = w.send(a, b), w.send(a, c)
    effects = w.tick(900)
    expired = [e.key for e in effects if isinstance(e, Notify) and e.topic == "card"]
    assert expired == [(w.card_of(k1),), (w.card_of(k2),)]
    assert [e.message_id for e in effects if isinstance(e, Audit)] == [k1[1], k2[1]]


def test_two_messages_reaching_their_hour_in_one_tick_are_both_recorded(w: World) -> None:
    a, b, c = w.launch("a"), w.launch("b"), w.launch("c")
    k1, k2 = w.send(a, b), w.send(a, c)
    w.decide(k1)
    w.decide(k2)
    effects = w.tick(3600)
    assert [(e.message_id, e.outcome) for e in effects if isinstance(e, Audit)] == [
        (k1[1], "expired"),
        (k2[1], "expired"),
    ]


def test_the_hour_is_judged_per_message_whatever_the_store_order(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    early = w.send(a, b)
    w.decide(early, Decision.APPROVE_ONCE)
    w.now += 100
    late = w.send(a, b)
    w.decide(late, Decision.APPROVE_ONCE)
    hub = H.restore(w.hub.book, [w.message(late), w.message(early)], list(w.hub.cards.values()), [])
    hub, effects = H.step(hub, H.Tick(w.message(early).expires_at))
    assert early not in hub.messages and late in hub.messages
    assert [e.message_id for e in effects if isinstance(e, Audit)] == [early[1]]
