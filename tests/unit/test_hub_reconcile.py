"""Startup reconciliation: what the hub holds for an incarnation that died while the daemon was down
ends exactly as if the daemon had seen the pane go."""

from __future__ import annotations

from connectcore import grants
from connectcore import hub as H
from connectcore.delivery import MessageState
from connectcore.effects import Audit, EndSubscriptions
from tests.unit.hubkit import World


def test_a_dead_recipient_s_token_ends_and_its_queued_message_is_cancelled_at_once() -> None:
    w = World()
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b)
    assert w.message(key).state is MessageState.AWAITING_CONSENT
    assert H.dead_incarnations(w.hub, frozenset({a.incarnation})) == ((b.pane, b.incarnation),)
    effects = w.step(H.Reconcile(w.now, frozenset({a.incarnation})))
    assert w.message(key).outcome == "cancelled" and w.message(key).reason == "recipient incarnation ended"
    assert grants.authenticate_or_none(w.hub.book, b.token) is None
    assert grants.authenticate_or_none(w.hub.book, a.token) is not None
    assert EndSubscriptions(b.principal) in effects
    assert [e.outcome for e in effects if isinstance(e, Audit)] == ["cancelled"]
    assert not any(c.state.value == "pending" for c in w.hub.cards.values())


def test_nothing_changes_when_every_incarnation_still_lives() -> None:
    w = World()
    a, b = w.launch("a"), w.launch("b")
    w.send(a, b)
    before = w.hub
    assert w.step(H.Reconcile(w.now, frozenset({a.incarnation, b.incarnation}))) == ()
    assert w.hub == before


def test_a_dead_sender_s_token_ends_too() -> None:
    w = World()
    a, b = w.launch("a"), w.launch("b")
    w.step(H.Reconcile(w.now, frozenset({b.incarnation})))
    assert grants.authenticate_or_none(w.hub.book, a.token) is None
    assert grants.authenticate_or_none(w.hub.book, b.token) is not None
