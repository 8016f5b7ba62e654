"""hub.panes: rules the 2026-12-06 (fourth) mutation run found unpinned (docs/survivors/hub_panes.md
names the mutants each test kills)."""

from __future__ import annotations

from dataclasses import replace

from connectcore import hub as H
from connectcore.delivery import MessageState
from connectcore.effects import EndSubscriptions
from tests.unit.hubkit import Agent, World


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


# ------------------------------------------------------------------------------------- stop 34


def test_a_restart_whose_agent_ended_before_its_exit_is_cancelled_at_that_time_saying_why() -> None:
    """The agent a planned restart was to relaunch ended by itself: the restart is cancelled at the
    pane's end, saying why (its audit). Kills _pane_gone mutmut_12 (the Cancel's time None), 13, 15
    (its reason None / left out), 16, 17 (its words) and 22 (``_closed``'s time None)."""
    from connectcore.grants import Preset
    from tests.unit.test_hub_restarts import audits, begin

    w = World()
    b = w.launch("b", Preset.OBSERVE, session=("claude", "sess-b"))
    begin(w, b)
    w.now += 9.0
    effects = w.step(H.PaneGone(w.now, b.pane, b.incarnation))
    assert [(a.detail, a.at) for a in audits(effects, "restart.cancel")] == [
        ("the agent ended before its restart", w.now)
    ]
    assert "r-1" not in w.hub.restarts


def test_control_s_act_on_a_pane_that_ended_is_cancelled_at_the_pane_s_end() -> None:
    """An act control asked for on a pane whose process ended is cancelled at that time. Kills
    _pane_gone mutmut_56 (``cancel_at``'s time None)."""
    from connectcore import control as C
    from tests.unit.test_hub_acts import propose
    from tests.unit.test_hub_acts import world as acts_world

    w, ctl, pure, _ = acts_world()
    act_id = propose(w, ctl, C.Tool.CLOSE_PANE, pure)
    w.now += 3.0
    w.step(H.PaneGone(w.now, pure.pane, pure.incarnation))
    act = w.hub.acts[act_id]
    assert (act.state, act.detail, act.final_at) == (C.ActState.CANCELLED, "the pane's process ended", w.now)


def _a_draft_left_in_b() -> tuple[World, Agent]:
    """a's message typed into b and left there as a draft (the confirmation saw it still in the composer)."""
    w = World()
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b)
    w.decide(key)
    w.now += 20
    w.idle(b, "busy", ready=False)
    w.idle(b, "fp-2")
    w.guard(key, b, "fp-2")
    w.typed(key, draft=True)
    assert b.pane in w.hub.drafts
    return w, b


def test_a_pane_that_ends_holding_a_draft_reports_the_draft_and_the_rest() -> None:
    """A pane whose process ends with a draft left in it: the step's effects hold the draft's closing
    and everything else the end did (its token's end first). Kills _pane_gone mutmut_145 (``effects +=
    more`` -> ``=``: only the draft's closing left)."""
    from connectcore.effects import Notify

    w, b = _a_draft_left_in_b()
    effects = w.step(H.PaneGone(w.now, b.pane, b.incarnation))
    assert Notify("needs", (b.pane,), payload={"state": "closed", "why": "the pane's process ended"}) in effects
    assert EndSubscriptions(b.principal) in effects


def test_an_act_the_daemon_restart_cancels_is_final_at_the_restart_s_time() -> None:
    """At the daemon's start an approved act that had not run is cancelled at the start's time. Kills
    _recover mutmut_80 (``hub_acts.recover``'s time None)."""
    from connectcore import control as C
    from tests.unit.test_hub_acts import QUESTION, approve, propose
    from tests.unit.test_hub_acts import world as acts_world

    w, ctl, pure, _ = acts_world()
    guarding = propose(w, ctl, C.Tool.SEND_KEYS, pure, QUESTION, keys=["1"])
    approve(w, guarding)
    w.now += 11.0
    w.step(H.Recover(w.now))
    act = w.hub.acts[guarding]
    assert (act.state, act.final_at) == (C.ActState.CANCELLED, w.now)


def test_a_new_process_seen_in_a_pane_ends_the_old_one_there_draft_included() -> None:
    """A pane seen running a new process: the old incarnation ends as if its pane had gone, in that
    pane, so the draft connect left there is closed and said so. Kills _pane_observed mutmut_13 (the
    old incarnation ended in no pane: the draft left open)."""
    from connectcore.effects import Notify

    w, b = _a_draft_left_in_b()
    w.now += 1
    effects = w.step(H.PaneObserved(w.now, b.pane, "inc-new", True, "fp-3", w.now))
    assert Notify("needs", (b.pane,), payload={"state": "closed", "why": "the pane's process ended"}) in effects
    assert w.hub.drafts == {}
