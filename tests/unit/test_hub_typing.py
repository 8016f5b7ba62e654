"""The hub after typing, at its edges: landed, failed or not landed; a seen turn; a quiet pane rearmed by
the clock; the paste's settle.

Effects are frozen dataclasses, so whole tuples are compared; each test names the rule it pins.
"""

from __future__ import annotations

import pytest

from connectcore import hub as H
from connectcore.arming import Arming, Seen
from connectcore.consent import Decision
from connectcore.delivery import SUBMIT_SETTLE, MessageState
from connectcore.effects import (
    CheckGuard,
    Notify,
    TypeText,
)
from connectcore.grants import Preset
from connectcore.screen import Activity, Composer
from tests.unit.hubkit import World, final_effects, guarding

# --- typing observed ------------------------------------------------------------------------------


def test_typing_landed_is_delivered_wakes_the_recipient_s_inbox_and_records_the_reply_window(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    key = guarding(w, a, b)
    w.guard(key, b)
    w.now += 3
    effects = w.typed(key, fingerprint="fp-done")
    message = w.message(key)
    assert effects == (
        *final_effects(w, key, "delivered", "typed and submitted"),
        Notify("inbox", key, principal=b.principal, payload={"ref": message.ref}),
    )
    assert w.hub.last_received == {b.principal: (message.conversation, 1, w.now)}
    assert w.hub.panes[b.pane] == H.PaneView(
        b.incarnation, Arming.AWAITING_TURN, Seen(True, "fp-done", w.now), w.now, ("fp-idle", "fp-done")
    )
    assert w.hub.attempts == {}


def test_a_typing_failure_becomes_the_reason_whatever_the_reading(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    key = guarding(w, a, b)
    w.guard(key, b)
    reading = H.delivery.AfterTyping(True, Activity.BUSY, Composer.EMPTY, False, "fp-busy", w.now)
    w.step(H.TypingObserved(w.now, key, reading, failure="paste failed"))
    assert w.message(key).outcome == "unconfirmed" and w.message(key).reason == "paste failed"
    w2 = World()
    a2, b2 = w2.launch("a"), w2.launch("b")
    k2 = guarding(w2, a2, b2)
    w2.guard(k2, b2)
    w2.step(H.TypingObserved(w2.now, k2, None))
    assert w2.message(k2).reason == "no reading after typing"
    assert w2.hub.panes[b2.pane].stale == ("fp-idle",)  # no confirming screen: nothing added


def test_typing_not_landed_is_unconfirmed_and_wakes_no_inbox(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    key = guarding(w, a, b)
    w.guard(key, b)
    effects = w.typed(key, False, fingerprint="fp-x")
    assert effects == final_effects(w, key, "unconfirmed", "the typed text is not visible")
    assert w.hub.last_received == {}
    w2 = World()
    a2, b2 = w2.launch("a"), w2.launch("b")
    k2 = guarding(w2, a2, b2)
    w2.guard(k2, b2)
    w2.step(H.TypingObserved(w2.now, k2, None, failure="paste lost"))
    assert w2.message(k2).reason == "paste lost"


def test_a_draft_left_after_typing_is_unconfirmed_and_opens_a_needs_you_item(w: World) -> None:
    """The outcome's records and the Needs you item together: the draft adds to _finalize's effects."""
    a, b = w.launch("a"), w.launch("b")
    key = guarding(w, a, b)
    w.guard(key, b)
    w.now += 2
    effects = w.typed(key, False, draft=True)
    ref = w.message(key).ref
    needs = Notify("needs", (b.pane,), payload={"state": "open", "ref": ref})
    assert effects == (*final_effects(w, key, "unconfirmed", "the text is still in the composer"), needs)
    assert w.hub.drafts[b.pane].why == "typing was not confirmed; a draft is in the composer"


def test_typing_observed_after_the_pane_went_is_unconfirmed_and_touches_no_pane(w: World) -> None:
    """The pane vanished while its message was typing (the message waits for its confirmation): the
    late confirmation ends the message and leaves the hub with no view of the pane."""
    a, b = w.launch("a"), w.launch("b")
    key = guarding(w, a, b)
    w.guard(key, b)
    w.step(H.PaneGone(w.now, b.pane, b.incarnation))
    assert w.message(key).state is MessageState.TYPING and b.pane not in w.hub.panes
    effects = w.typed(key, False)
    assert effects == final_effects(w, key, "unconfirmed", "the typed text is not visible")
    assert b.pane not in w.hub.panes


def test_typing_after_the_busy_screen_was_seen_adds_no_stale_screen(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    key = guarding(w, a, b)
    w.guard(key, b)
    w.now += 1
    w.idle(b, "busy", ready=False)  # read after the confirmation below: the turn
    assert w.hub.panes[b.pane].arming is Arming.TYPING
    w.typed(key, fingerprint="fp-late", read_at=w.now - 0.5)
    assert w.hub.panes[b.pane].stale == () and w.hub.panes[b.pane].arming is Arming.BUSY


def test_typing_into_a_pane_with_no_principal_records_no_inbox(w: World) -> None:
    control = w.launch("ctl", Preset.OFF, control=True)
    key = w.step(H.Submit(w.now, control.token, "m", "hi", H.Recipient("%9", "inc-p", "claude"), "r", "c")) and (
        control.principal,
        "m",
    )
    w.decide(key)
    w.step(H.PaneObserved(w.now, "%9", "inc-p", True, "fp", w.now))
    w.step(H.GuardObserved(w.now, key, "inc-p", True, "fp", w.now))
    effects = w.typed(key)
    assert not [e for e in effects if isinstance(e, Notify) and e.topic == "inbox"]
    assert w.hub.last_received == {}


def test_typing_observed_for_an_unknown_message_names_the_reason(w: World) -> None:
    with pytest.raises(H.UnknownItem) as err:
        w.typed(("p", "m"))
    assert err.value.reason == "unknown_message" and str(err.value) == "no message ('p', 'm')"


# --- ordering and accumulation ------------------------------------------------------------------------


def test_an_idle_screen_seen_while_typing_is_used_up_by_the_typing(w: World) -> None:
    """The pane answered before the typing was confirmed: that idle does not also start the next message."""
    a, b = w.launch("a"), w.launch("b")
    k1, k2 = w.send(a, b), w.send(a, b)
    w.decide(k1)
    w.decide(k2, Decision.APPROVE_ONCE)
    w.idle(b)
    w.guard(k1, b)
    assert w.idle(b, "fp-answered") == ()  # the slot is taken by k1's typing
    assert w.hub.panes[b.pane].arming is Arming.TYPING
    w.typed(k1, fingerprint="fp-answered")
    assert w.hub.panes[b.pane] == H.PaneView(
        b.incarnation, Arming.AWAITING_TURN, Seen(True, "fp-answered", w.now), w.now, ("fp-idle", "fp-answered")
    )
    assert w.idle(b, "fp-answered") == ()
    assert w.message(k2).state is MessageState.READY
    w.idle(b, "busy", ready=False)
    assert [e.message for e in w.idle(b, "fp-3") if isinstance(e, CheckGuard)] == [k2]


# --- after typing: a seen turn, and a quiet pane ------------------------------------------------------


def test_a_confirmation_that_saw_the_turn_resets_the_view_to_wait_for_the_next_idle(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    key = guarding(w, a, b)
    w.guard(key, b)
    w.now += 1
    w.typed(key, fingerprint="fp-busy", busy=True)
    assert w.hub.panes[b.pane] == H.PaneView(b.incarnation, Arming.BUSY, Seen(False, "fp-busy", w.now), w.now)


def test_a_quiet_pane_rearms_exactly_rearm_after_seconds_after_the_typing() -> None:
    w = World.with_limits(rearm_after=10.0)
    a, b = w.launch("a"), w.launch("b")
    k1, k2 = w.send(a, b), w.send(a, b)
    w.decide(k1)
    w.decide(k2, Decision.APPROVE_ONCE)
    w.idle(b)
    w.guard(k1, b)
    typed_at = w.now
    w.typed(k1, fingerprint="fp-idle")
    w.idle(b, "fp-idle")  # the same idle screen: not yet the next idle
    assert w.tick(9.5) == ()
    assert w.hub.panes[b.pane].arming is Arming.AWAITING_TURN
    effects = w.tick(0.5)
    assert effects == (CheckGuard(b.pane, b.incarnation, k2),)
    assert w.hub.panes[b.pane] == H.PaneView(b.incarnation, Arming.ARMED, Seen(True, "fp-idle", typed_at), w.now)


def test_a_busy_or_settled_pane_is_not_rearmed_by_the_clock(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    key = guarding(w, a, b)
    w.guard(key, b)
    w.typed(key, fingerprint="fp-idle")
    w.idle(b, "busy", ready=False)
    before = w.hub.panes[b.pane]
    assert w.tick(60) == () and w.hub.panes[b.pane] == before


def test_a_seen_turn_disarms_a_pane_that_looked_idle_during_the_typing(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    key = guarding(w, a, b)
    w.guard(key, b)
    w.idle(b, "fp-answered", read_at=w.now - 0.1)  # seen idle during the typing, before the confirmation
    assert (w.hub.panes[b.pane].ready, w.hub.panes[b.pane].arming) == (True, Arming.TYPING)
    w.typed(key, fingerprint="fp-busy", busy=True)
    view = w.hub.panes[b.pane]
    assert (view.ready, view.arming, view.stale) == (False, Arming.BUSY, ())


def test_every_quiet_pane_rearms_in_one_tick() -> None:
    w = World.with_limits(rearm_after=10.0)
    a, b, c = w.launch("a"), w.launch("b"), w.launch("c")
    keys = {}
    for to in (b, c):
        k1, k2 = w.send(a, to), w.send(a, to)
        w.decide(k1)
        w.decide(k2, Decision.APPROVE_ONCE)
        w.idle(to)
        w.guard(k1, to)
        w.typed(k1, fingerprint="fp-idle")
        w.idle(to, "fp-idle")
        keys[to.pane] = k2
    effects = w.tick(10)
    assert effects == (CheckGuard(b.pane, b.incarnation, keys[b.pane]), CheckGuard(c.pane, c.incarnation, keys[c.pane]))


def test_the_paste_settles_as_long_as_the_recipients_harness_needs(w: World) -> None:
    """Claim: the Enter after a message's paste is due after the settle measured for the recipient's
    harness (docs/delivery.md), and after the most cautious one for a harness never measured."""
    from connectcore.delivery import UNMEASURED_SETTLE, submit_settle

    a = w.launch("a")
    for harness, pane in (("claude", "%7"), ("codex", "%8")):
        b = w.launch(f"b-{harness}", harness=harness, pane=pane)
        key = guarding(w, a, b)
        w.now += 2
        (typed,) = [e for e in w.guard(key, b) if isinstance(e, TypeText)]
        assert typed.settle == SUBMIT_SETTLE[harness] == submit_settle(harness)
    assert SUBMIT_SETTLE["claude"] != SUBMIT_SETTLE["codex"]  # the harness decides, not one constant
    assert submit_settle("opencode") == submit_settle("a-harness-never-measured") == UNMEASURED_SETTLE
