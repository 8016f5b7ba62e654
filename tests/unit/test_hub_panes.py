"""The hub's pane observations at their edges: a pane gone, a new incarnation, a view's readiness and
arming.

Effects are frozen dataclasses, so whole tuples are compared; each test names the rule it pins.
"""

from __future__ import annotations

from connectcore import hub as H
from connectcore.arming import Arming, Seen
from connectcore.consent import CardState
from connectcore.delivery import MessageState
from connectcore.effects import (
    EndSubscriptions,
    Notify,
    Persist,
)
from connectcore.grants import TokenState
from tests.unit.hubkit import World, final_effects, guarding

# --- pane observed / gone ----------------------------------------------------------------------------


def test_pane_gone_cancels_what_was_addressed_to_it_ends_tokens_and_lapses_pairs(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    k1 = w.send(a, b)
    w.decide(k1)
    w.idle(b, ready=False)
    k2 = w.send(a, b)  # ready (pair approved)
    effects = w.step(H.PaneGone(w.now, b.pane, b.incarnation))
    token = w.hub.book.tokens[b.token]
    assert token.state is TokenState.ENDED
    assert effects == (
        *final_effects(w, k1, "cancelled", "recipient incarnation ended"),
        *final_effects(w, k2, "cancelled", "recipient incarnation ended"),
        Persist("token", (b.token,), token),
        EndSubscriptions(b.principal),
        Persist("pairs", (), ()),
    )
    assert w.hub.pairs == frozenset() and b.pane not in w.hub.panes


def test_pane_gone_closes_an_open_card_as_the_daemon(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b)
    card_id = w.card_of(key)
    effects = w.step(H.PaneGone(w.now, b.pane, b.incarnation))
    card = w.hub.cards[card_id]
    assert card.state is CardState.CANCELLED and card.answered_by == "daemon" and card.answered_at == w.now
    assert effects[:4] == (
        Persist("message", key, w.message(key)),
        final_effects(w, key, "cancelled", "recipient incarnation ended")[1],
        Persist("card", (card_id,), card),
        Notify("card", (card_id,)),
    )


def test_pane_gone_spares_typing_another_incarnation_s_view_and_unrelated_pairs(w: World) -> None:
    a, b, c = w.launch("a"), w.launch("b"), w.launch("c")
    pre = w.send(a, c)
    w.decide(pre)
    key = guarding(w, a, b)
    w.guard(key, b)
    effects = w.step(H.PaneGone(w.now, b.pane, "inc-older"))
    assert effects == () and w.message(key).state is MessageState.TYPING
    assert b.pane in w.hub.panes and w.hub.pairs == {(a.principal, c.incarnation), (a.principal, b.incarnation)}
    effects = w.step(H.PaneGone(w.now, b.pane, b.incarnation))
    assert w.message(key).state is MessageState.TYPING  # its outcome comes from the typing observation
    assert effects[-1] == Persist("pairs", (), ((a.principal, c.incarnation),))


def test_a_new_incarnation_in_a_watched_pane_ends_the_old_one_first(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b)
    w.idle(b)
    effects = w.step(H.PaneObserved(w.now, b.pane, "inc-new", True, "fp", w.now))
    assert effects[:3] == (
        Persist("message", key, w.message(key)),
        final_effects(w, key, "cancelled", "recipient incarnation ended")[1],
        Persist("card", (w.card_of(key),), w.hub.cards[w.card_of(key)]),
    )
    assert w.hub.panes[b.pane] == H.PaneView("inc-new", Arming.ARMED, Seen(True, "fp", w.now), w.now)


def test_pane_views_track_readiness_and_arming(w: World) -> None:
    b = w.launch("b")
    w.idle(b, "f1", ready=False)
    assert w.hub.panes[b.pane] == H.PaneView(b.incarnation, Arming.BUSY, Seen(False, "f1", w.now), w.now)
    w.now += 1
    w.idle(b, "f2")
    assert w.hub.panes[b.pane] == H.PaneView(b.incarnation, Arming.ARMED, Seen(True, "f2", w.now), w.now)
    w.now += 1
    w.idle(b, "f3")  # still ready: stays armed
    assert w.hub.panes[b.pane] == H.PaneView(b.incarnation, Arming.ARMED, Seen(True, "f3", w.now), w.now - 1)
    w.idle(b, "f0", ready=False, read_at=w.now - 2)  # read before the newest reading: changes nothing
    assert w.hub.panes[b.pane].seen == Seen(True, "f3", w.now)
