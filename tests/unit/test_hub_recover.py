"""The hub's recover and restore at their edges: nothing typed again, guards back to wait, state rebuilt.

Effects are frozen dataclasses, so whole tuples are compared; each test names the rule it pins.
"""

from __future__ import annotations

from connectcore import arming
from connectcore import hub as H
from connectcore.delivery import MessageState
from connectcore.effects import (
    Audit,
    Notify,
    Persist,
)
from tests.unit.hubkit import World, final_effects, guarding

# --- tick / recover -----------------------------------------------------------------------------------


def test_recover_types_nothing_again_and_puts_guards_back_to_wait(w: World) -> None:
    a, b, c = w.launch("a"), w.launch("b"), w.launch("c")
    k1 = guarding(w, a, b)
    w.guard(k1, b)
    k2 = guarding(w, a, c)
    w.now += 4
    effects = w.step(H.Recover(w.now))
    waiting = w.message(k2)
    assert waiting.state is MessageState.READY and waiting.reason == "daemon restarted before typing"
    assert effects == (
        *final_effects(w, k1, "unconfirmed", "daemon restarted while typing"),
        Notify("needs", (b.pane,), payload={"state": "open", "ref": w.message(k1).ref}),
        Persist("message", k2, waiting),
    )
    # every view is forgotten but that of the pane typed into, whose idle the typing used (seed 4469)
    assert w.hub.attempts == {} and w.hub.panes == {b.pane: arming.typed_before_restart(b.incarnation, w.now)}
    assert w.hub.panes[b.pane].arming is arming.Arming.USED
    assert w.hub.drafts == {b.pane: H.LeftDraft(b.pane, b.incarnation, k1, w.message(k1).ref, w.now, "the daemon restarted while typing")}


def test_recover_also_runs_the_clock(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b)
    w.now += 3600
    effects = w.step(H.Recover(w.now))
    assert w.hub.messages == {} and any(isinstance(e, Audit) and e.outcome == "expired" for e in effects)
    assert key not in w.hub.messages


# --- restore --------------------------------------------------------------------------------------


def test_restore_rebuilds_refs_cards_and_pairs(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b)
    message = w.message(key)
    card = w.hub.cards[w.card_of(key)]
    hub = H.restore(w.hub.book, [message], [card], [(a.principal, b.incarnation)])
    assert hub == H.Hub(
        book=w.hub.book,
        messages={key: message},
        refs={message.ref: key},
        cards={card.id: card},
        pairs=frozenset({(a.principal, b.incarnation)}),
    )
    assert hub.limits == H.DEFAULT_LIMITS


# --- ordering and accumulation ------------------------------------------------------------------------


def test_recover_records_every_typing_message(w: World) -> None:
    a, b, c = w.launch("a"), w.launch("b"), w.launch("c")
    k1 = guarding(w, a, b)
    w.guard(k1, b)
    k2 = guarding(w, a, c)
    w.guard(k2, c)
    effects = w.step(H.Recover(w.now))
    assert effects == (
        *final_effects(w, k1, "unconfirmed", "daemon restarted while typing"),
        Notify("needs", (b.pane,), payload={"state": "open", "ref": w.message(k1).ref}),
        *final_effects(w, k2, "unconfirmed", "daemon restarted while typing"),
        Notify("needs", (c.pane,), payload={"state": "open", "ref": w.message(k2).ref}),
    )


def test_restore_keeps_the_configured_limits(w: World) -> None:
    limits = H.Limits(hop_limit=2)
    assert H.restore(w.hub.book, [], [], [], limits).limits == limits
