"""hub.panes: rules the 2026-12-06 (fourth) mutation run found unpinned (docs/survivors/hub_panes.md
names the mutants each test kills)."""

from __future__ import annotations

from dataclasses import replace

from connectcore import hub as H
from connectcore.delivery import MessageState
from connectcore.effects import EndSubscriptions
from tests.unit.hubkit import World


def test_reconcile_ends_every_dead_incarnation_not_only_the_last() -> None:
    """Two agents died while the daemon was down: both are ended, and the step's effects hold both
    (kills ``_reconcile`` 17, ``effects += more`` -> ``=``)."""
    w = World()
    a, b = w.launch("a"), w.launch("b")
    effects = w.step(H.Reconcile(w.now, frozenset()))
    assert EndSubscriptions(a.principal) in effects and EndSubscriptions(b.principal) in effects


def test_a_message_reconcile_cancels_is_final_at_the_reconcile_s_time() -> None:
    """What the reconcile ends, it ends at its own time (kills ``_reconcile`` 11: ``PaneGone``'s time)."""
    w = World()
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b)
    w.now += 42.0
    w.step(H.Reconcile(w.now, frozenset({a.incarnation})))
    assert w.message(key).outcome == "cancelled" and w.message(key).final_at == w.now


def test_an_open_message_or_card_holds_its_recipient_s_incarnation_even_without_its_token() -> None:
    """``dead_incarnations`` names an incarnation an open message or an open card is addressed to,
    with that message's or card's pane, even when no live token is left for it; a final message does
    not (kills ``dead_incarnations`` 7, 9, 11, 14, 16). The hub is built by hand: the recipient's
    token taken out of the book, as a store written by an older daemon could hold it."""
    w = World()
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b)  # awaiting consent: an open message and an open card, both to b
    tokens = {k: t for k, t in w.hub.book.tokens.items() if t.incarnation != b.incarnation}
    hub = replace(w.hub, book=replace(w.hub.book, tokens=tokens))
    assert H.dead_incarnations(hub, frozenset({a.incarnation})) == ((b.pane, b.incarnation),)
    only_card = replace(hub, messages={})
    assert H.dead_incarnations(only_card, frozenset({a.incarnation})) == ((b.pane, b.incarnation),)
    message = w.message(key)
    final = replace(hub, messages={key: replace(message, state=MessageState.CANCELLED)}, cards={})
    assert final.messages[key].is_final
    assert H.dead_incarnations(final, frozenset({a.incarnation})) == ()
