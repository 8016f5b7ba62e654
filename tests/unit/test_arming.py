"""Pane arming (connectcore.arming) through the hub: every reading ordered by when it was read."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from connectcore import arming as AR
from connectcore import hub as H
from connectcore.arming import Arming
from connectcore.consent import Decision
from connectcore.delivery import AfterTyping, Landing, MessageState, landed, marker_seen
from connectcore.effects import Audit, CheckGuard, Notify, TypeText
from connectcore.screen import Activity, Composer
from tests.unit.hubkit import World


def _two_for_b(w: World) -> tuple[H.Hub, tuple[str, str], tuple[str, str]]:
    a, b = w.launch("a"), w.launch("b")
    k1, k2 = w.send(a, b), w.send(a, b)
    w.decide(k1)
    w.decide(k2, Decision.APPROVE_ONCE)
    w.idle(b)
    w.guard(k1, b)
    return w.hub, k1, k2


def _guards(effects: tuple[object, ...]) -> list[tuple[str, str]]:
    return [e.message for e in effects if isinstance(e, CheckGuard)]


def test_an_idle_read_after_the_confirmation_is_not_overwritten_by_it() -> None:
    """The defect: the watcher's post-turn idle is stepped before the older confirming reading."""
    w = World.with_limits(rearm_after=10.0)
    _hub, k1, k2 = _two_for_b(w)
    b = w.agents["b"]
    w.now += 1
    confirm_read_at = w.now  # the confirmation saw the turn busy here ...
    w.now += 1
    effects = w.idle(b, "fp-answered")  # ... the watcher saw the next idle later, and was stepped first
    effects += w.typed(k1, fingerprint="fp-busy", busy=True, read_at=confirm_read_at)
    effects += w.tick(60)
    assert confirm_read_at < w.now
    assert _guards(effects) == [k2]


def test_an_idle_seen_during_typing_and_by_the_confirmation_rearms_when_quiet() -> None:
    w = World.with_limits(rearm_after=10.0)
    _hub, k1, k2 = _two_for_b(w)
    b = w.agents["b"]
    w.idle(b, "fp-answered")
    effects = w.typed(k1, fingerprint="fp-answered")
    assert _guards(effects) == [] and _guards(w.tick(9)) == []
    assert _guards(w.tick(1)) == [k2]


def test_a_handle_that_no_longer_resolves_is_never_typed() -> None:
    w = World()
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b, handle="title:reviewer")
    w.decide(key)
    w.idle(b)
    effects = w.guard(key, b, handle=H.Unresolved("ambiguous"))
    assert not [e for e in effects if isinstance(e, TypeText)]
    assert w.message(key).state is MessageState.READY


def test_a_guard_s_reading_that_was_never_reported_is_armed_by_the_clock() -> None:
    w = World.with_limits(rearm_after=10.0)
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b)
    w.decide(key)
    w.idle(b)
    w.guard(key, b, "fp-other")  # the screen changed under the guard: disarmed
    assert w.hub.panes[b.pane].arming is Arming.BUSY
    assert _guards(w.tick(9)) == []
    assert _guards(w.tick(1)) == [key]


def test_a_handle_that_stops_resolving_uses_the_idle_until_a_turn_or_the_clock() -> None:
    w = World.with_limits(rearm_after=10.0)
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b, handle="title:reviewer")
    w.decide(key)
    w.idle(b)
    w.guard(key, b, handle=H.Unresolved("no_pane"))
    assert w.message(key).reason == "handle title:reviewer names no single pane (no_pane)"
    assert w.hub.panes[b.pane].arming is Arming.USED
    assert _guards(w.idle(b)) == []  # the same idle: no new attempt (no busy loop)
    assert _guards(w.tick(10)) == [key]
    here = H.Recipient(b.pane, b.incarnation, "claude", "title:reviewer")
    assert [type(e).__name__ for e in w.guard(key, b, handle=here)][1] == "TypeText"


def test_an_older_watcher_reading_never_overwrites_the_confirmation() -> None:
    w = World()
    _hub, k1, k2 = _two_for_b(w)
    b = w.agents["b"]
    w.now += 2
    w.typed(k1, fingerprint="fp-busy", busy=True)  # read now
    w.idle(b, "fp-answered-early", read_at=w.now - 1)  # read before it, stepped after: ignored
    assert w.hub.panes[b.pane].arming is Arming.BUSY and w.message(k2).state is MessageState.READY
    assert _guards(w.idle(b, "fp-answered")) == [k2]


def test_the_arming_table_reaches_every_state_and_can_always_arm_again() -> None:
    from connectcore.arming import TABLE

    targets = {dst for _s, _e, dst in TABLE.edges}
    assert set(Arming) - targets == {Arming.UNSEEN}
    for state in Arming:
        if state is not Arming.UNSEEN:
            assert any(src == state for src, _e, _d in TABLE.edges)


# --- landed: the core decides from the readings after typing -------------------------------------


def _after(marker: bool, activity: Activity, composer: Composer) -> AfterTyping:
    ready = activity is Activity.IDLE and composer is Composer.EMPTY
    return AfterTyping(marker, activity, composer, ready, "fp", 5.0)


@pytest.mark.parametrize(
    ("marker", "activity", "composer", "looking", "last"),
    [
        (True, Activity.BUSY, Composer.EMPTY, Landing.DELIVERED, Landing.DELIVERED),
        (True, Activity.IDLE, Composer.EMPTY, Landing.DELIVERED, Landing.DELIVERED),  # a turn too quick to see
        (True, Activity.DIALOG, Composer.ABSENT, Landing.DELIVERED, Landing.DELIVERED),  # it asks at once
        (False, Activity.BUSY, Composer.EMPTY, Landing.LOOKING, Landing.UNCONFIRMED),  # someone else's turn
        (False, Activity.IDLE, Composer.EMPTY, Landing.LOOKING, Landing.UNCONFIRMED),  # a lost paste
        (True, Activity.IDLE, Composer.DRAFT, Landing.LOOKING, Landing.UNCONFIRMED),  # still in the composer
        (False, Activity.IDLE, Composer.DRAFT, Landing.LOOKING, Landing.UNCONFIRMED),  # collapsed paste
        (True, Activity.UNKNOWN, Composer.ABSENT, Landing.LOOKING, Landing.UNCONFIRMED),  # cannot say
    ],
)
def test_landed_needs_the_marker_and_a_composer_not_holding_it(
    marker: bool, activity: Activity, composer: Composer, looking: Landing, last: Landing
) -> None:
    reading = _after(marker, activity, composer)
    assert landed(reading, last=False)[0] is looking
    assert landed(reading, last=True)[0] is last


def test_busy_without_the_marker_is_unconfirmed_with_its_reason() -> None:
    assert landed(_after(False, Activity.BUSY, Composer.EMPTY), last=True) == (
        Landing.UNCONFIRMED,
        "the pane is busy but the typed text never showed",
    )
    assert landed(None, last=True) == (Landing.UNCONFIRMED, "no reading after typing")
    assert landed(None, last=False) == (Landing.LOOKING, "no reading after typing")


def test_the_marker_is_found_however_the_pane_wrapped_it() -> None:
    typed = "[connect] message r1 from agent:claude:pane:%1:4000 (pane %1). Peer text\nhello"
    wrapped = "  [connect] message r1 from agent:cla\n  ude:pane:%1:4000 (pane %1). Pe\n"
    assert marker_seen(typed, wrapped)
    assert not marker_seen(typed, "[connect] message r2 from agent:claude:pane:%1:4000 (pane %1)")


def test_a_draft_left_unconfirmed_needs_the_person_until_the_composer_is_empty() -> None:
    w = World()
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b)
    w.decide(key)
    w.idle(b)
    w.guard(key, b)
    effects = w.typed(key, fingerprint="fp-draft", draft=True)
    message = w.message(key)
    assert message.outcome == "unconfirmed" and message.reason == "the text is still in the composer"
    assert Notify("needs", (b.pane,), payload={"state": "open", "ref": message.ref}) in effects
    assert w.hub.drafts[b.pane].message == key
    assert w.hub.panes[b.pane].arming is Arming.BUSY  # a draft: nothing more is typed there
    w.idle(b, "fp-draft", ready=False)
    assert b.pane in w.hub.drafts
    w.idle(b, "fp-idle-2", read_at=w.now - 1)  # read before the draft was seen: says nothing
    assert b.pane in w.hub.drafts
    effects = w.idle(b, "fp-cleared")
    assert Notify("needs", (b.pane,), payload={"state": "closed", "why": "the composer is empty again"}) in effects
    assert w.hub.drafts == {}


def test_a_landed_message_or_a_gone_pane_leaves_no_item() -> None:
    w = World()
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b)
    w.decide(key)
    w.deliver(key, b)
    assert w.hub.drafts == {}
    k2 = w.send(a, b)
    w.now += 20
    w.idle(b, "busy", ready=False)
    w.idle(b, "fp-2")
    w.guard(k2, b, "fp-2")
    w.typed(k2, draft=True)
    assert b.pane in w.hub.drafts
    effects = w.step(H.PaneGone(w.now, b.pane, b.incarnation))
    assert Notify("needs", (b.pane,), payload={"state": "closed", "why": "the pane's process ended"}) in effects
    assert w.hub.drafts == {}


def test_a_draft_in_a_pane_that_died_while_the_daemon_was_down_is_closed_at_startup() -> None:
    w = World()
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b)
    w.decide(key)
    w.idle(b)
    w.guard(key, b)
    w.step(H.Recover(w.now))  # typing interrupted by a restart: the person is told
    assert w.hub.drafts[b.pane].why == "the daemon restarted while typing"
    w.step(H.PaneGone(w.now, b.pane, b.incarnation))  # ends b's token; the draft goes with the pane
    assert w.hub.drafts == {}
    w2 = World()
    a2, b2 = w2.launch("a"), w2.launch("b")
    k2 = w2.send(a2, b2)
    w2.decide(k2)
    w2.idle(b2)
    w2.guard(k2, b2)
    w2.typed(k2, draft=True)
    w2.step(H.Revoke(w2.now, b2.principal))  # nothing else holds b2's incarnation now
    assert H.dead_incarnations(w2.hub, frozenset({a2.incarnation})) == ((b2.pane, b2.incarnation),)
    w2.step(H.Reconcile(w2.now, frozenset({a2.incarnation})))
    assert w2.hub.drafts == {}


def test_a_guard_that_could_not_read_the_pane_waits_for_the_screen_even_with_a_handle() -> None:
    w = World()
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b, handle="title:reviewer")
    w.decide(key)
    w.idle(b)
    w.guard(key, b, "", ready=False)  # the daemon's guard failed: no reading, no resolution
    assert w.message(key).reason == "screen changed before typing"
    assert w.hub.panes[b.pane].arming is Arming.BUSY
    assert _guards(w.idle(b)) == [key]  # the watcher's next reading arms it again at once


# --- the arming machine alone, under any order of readings --------------------------------------

_reading = st.builds(AR.Seen, st.booleans(), st.sampled_from(["f1", "f2", "f3"]), st.floats(0, 100))
_op = st.one_of(
    st.tuples(st.just("observe"), _reading),
    st.tuples(st.just("guard"), _reading),
    st.tuples(st.just("typed"), st.one_of(st.none(), _reading)),
    st.tuples(st.just("quiet"), st.floats(0, 100)),
    st.tuples(st.just("quiet_awaited"), st.floats(0, 100)),
)


@settings(max_examples=300, deadline=None)
@given(first=_reading, ops=st.lists(_op, max_size=30))
def test_no_reading_is_overwritten_by_an_older_one_and_a_ready_pane_is_never_left_unarmed(
    first: AR.Seen, ops: list[tuple[str, object]]
) -> None:
    view = AR.first("inc", first, 0.0)
    for now, (kind, arg) in enumerate(ops, start=1):
        before = view.seen.read_at
        if kind == "observe":
            assert isinstance(arg, AR.Seen)
            view = AR.observe(view, arg, now)
        elif kind == "guard" and view.arming is not AR.Arming.TYPING:
            assert isinstance(arg, AR.Seen)
            if AR.guard_passes(view, "inc", arg):
                assert view.seen.ready  # never typed on the strength of a reading that was not ready
                view = AR.typing(view, arg, now)
            else:
                view = (AR.guard_wait if arg.ready else AR.guard_hold)(view, arg, now)
        elif kind == "typed" and view.arming is AR.Arming.TYPING:
            assert arg is None or isinstance(arg, AR.Seen)
            view = AR.typed(view, arg, now)
        elif kind == "quiet":
            assert isinstance(arg, float)
            view = AR.quiet(view, now + arg, 10.0) or view
        elif kind == "quiet_awaited":
            assert isinstance(arg, float)
            view = AR.quiet(view, now + arg, 10.0, awaited=True) or view
        assert view.seen.read_at >= before  # an older reading never overwrote a newer one
        assert view.arming is not AR.Arming.UNSEEN
        if view.seen.ready and view.arming not in (AR.Arming.ARMED, AR.Arming.TYPING):
            rearmed = AR.quiet(view, view.since + 10.0, 10.0)
            assert rearmed is not None and rearmed.arming is AR.Arming.ARMED  # never stuck unarmed
        if view.arming not in (AR.Arming.ARMED, AR.Arming.TYPING):
            # a pane a message waits for is never stuck unarmed either, whatever its newest reading says
            # (issue 25: that reading may have won a race it should have lost)
            rearmed = AR.quiet(view, view.since + 10.0, 10.0, awaited=True)
            assert rearmed is not None and rearmed.arming is AR.Arming.ARMED


def test_after_a_failed_send_a_draft_is_connect_s_only_when_its_marker_shows() -> None:
    for marker, opened in ((False, False), (True, True)):
        w = World()
        a, b = w.launch("a"), w.launch("b")
        key = w.send(a, b)
        w.decide(key)
        w.idle(b)
        w.guard(key, b)
        reading = AfterTyping(marker, Activity.IDLE, Composer.DRAFT, False, "fp-draft", w.now)
        w.step(H.TypingObserved(w.now, key, reading, failure="send failed partway: pane gone"))
        assert w.message(key).reason == "send failed partway: pane gone"
        assert (b.pane in w.hub.drafts) is opened


def test_a_message_past_its_hour_is_never_guarded() -> None:
    """Claim: an idle transition after a message's hour has passed (before the tick that expires it)
    starts no guard for it; the tick then records it expired (found by the hub model)."""
    w = World()
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b)
    w.decide(key)
    w.now = w.message(key).expires_at + 1.0
    effects = w.idle(b)
    assert not [e for e in effects if isinstance(e, CheckGuard)]
    ticked = w.step(H.Tick(w.now))
    assert [e.outcome for e in ticked if isinstance(e, Audit) and e.message_id == key[1]] == ["expired"]


def test_a_guard_that_ends_a_message_without_typing_tries_the_next_one() -> None:
    """Claim: the pane's unused idle goes to the next consented message at once (found by the
    simulation: the next message waited on an armed idle pane for good)."""
    w = World()
    a, c, b = w.launch("a"), w.launch("c"), w.launch("b")
    first, second = w.send(a, b, message_id="m1"), w.send(c, b, message_id="m2")
    w.decide(first)
    w.decide(second)
    checks = [e for e in w.idle(b) if isinstance(e, CheckGuard)]
    assert [e.message for e in checks] == [first]
    w.step(H.PaneGone(w.now, a.pane, a.incarnation))  # the sender's pane went: m1 can only be cancelled
    effects = w.guard(first, b)
    assert w.message(first).outcome == "cancelled"
    assert [e.message for e in effects if isinstance(e, CheckGuard)] == [second]


def test_a_message_held_for_its_handle_does_not_hold_up_the_ones_behind_it() -> None:
    """Claim: after a guard holds a message whose handle names several panes, the pane's next idle
    goes to the next message for it (found by the simulation: they waited behind it for good)."""
    w = World()
    a, b = w.launch("a"), w.launch("b")
    held = w.send(a, b, message_id="m1", handle="title:reviewer")
    behind = w.send(a, b, message_id="m2")
    w.decide(held)
    w.decide(behind)
    assert [e.message for e in w.idle(b) if isinstance(e, CheckGuard)] == [held]
    w.guard(held, b, handle=H.Unresolved("ambiguous"))
    w.now += w.hub.limits.rearm_after + 1
    rearmed = w.step(H.Tick(w.now))
    assert [e.message for e in rearmed if isinstance(e, CheckGuard)] == [behind]


def test_the_quiet_rule_arms_a_busy_view_only_for_a_waiting_message_and_the_guard_never_passes_on_it() -> None:
    """Issue 25: a view whose newest reading is busy is armed by the clock only while a message waits;
    the guard's fresh reading cannot pass on it, even one of the same screen that reads ready."""
    view = AR.first("inc", AR.Seen(False, "f-busy", 1.0), 1.0)
    assert view.arming is AR.Arming.BUSY
    assert AR.quiet(view, 11.0, 10.0) is None
    assert AR.quiet(view, 10.9, 10.0, awaited=True) is None
    armed = AR.quiet(view, 11.0, 10.0, awaited=True)
    assert armed is not None and armed.arming is AR.Arming.ARMED and not armed.seen.ready
    assert not AR.guard_passes(armed, "inc", AR.Seen(True, "f-busy", 12.0))
    waited = AR.guard_wait(armed, AR.Seen(True, "f-idle", 12.0), 12.0)
    assert waited.arming is AR.Arming.BUSY
    again = AR.observe(waited, AR.Seen(True, "f-idle", 12.0), 12.5)  # the guard's reading, reported
    assert again.arming is AR.Arming.ARMED and AR.guard_passes(again, "inc", AR.Seen(True, "f-idle", 13.0))


def test_a_reading_is_older_only_than_a_newer_one_of_the_same_incarnation() -> None:
    """Claim: ``older`` is exactly the rule ``observe`` drops a reading by (read before the newest the
    view holds, same incarnation); the watcher reads a pane again when it holds."""
    view = AR.first("inc-1", AR.Seen(False, "busy", 10.0), 10.0)
    assert AR.older(view, "inc-1", 9.99) and AR.observe(view, AR.Seen(True, "idle", 9.99), 11.0) == view
    assert not AR.older(view, "inc-1", 10.0) and AR.observe(view, AR.Seen(True, "idle", 10.0), 11.0) != view
    assert not AR.older(view, "inc-2", 9.0), "another incarnation's reading is never older than this one's"
    assert not AR.older(None, "inc-1", 9.0), "a pane the hub holds no reading of"
    hub = H.Hub(panes={"%1": view})
    assert H.reading_dropped(hub, "%1", "inc-1", 9.0) and not H.reading_dropped(hub, "%2", "inc-1", 9.0)
