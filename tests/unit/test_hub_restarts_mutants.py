"""Restarts in the hub: rules the fourth mutation run (stop 34) found unpinned. Each test names the
mutants of connectcore.hub.restarts it kills (docs/survivors/hub_restarts.md has the verdicts)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from connectcore import control, grants
from connectcore import hub as H
from connectcore import restart as R
from connectcore.effects import Audit
from connectcore.grants import Preset
from connectcore.restart import RestartStep as S

from .hubkit import World
from .test_hub_restarts import (
    COLLABORATE,
    LIMITS,
    audits,
    begin,
    feed,
    observed,
    plan,
    ready_message_to,
    recovered_at_exit_sent,
    respawned,
    step_of,
    to_process_ended,
    unconnected_agent,
)


def _not_planned(w: World) -> None:
    state, _ = R.step(plan(unconnected_agent(w)), R.Begin(now=w.now))
    w.step(H.RestartPlanned(w.now, state, ("claude", "sess-b"), COLLABORATE))


def _id_open(w: World) -> None:
    b = unconnected_agent(w)
    begin(w, b)
    begin(w, replace(b, pane="%7"))


def _pane_restarting(w: World) -> None:
    b = unconnected_agent(w)
    begin(w, b)
    begin(w, b, rid="r-2")


def _no_scopes(w: World) -> None:
    begin(w, unconnected_agent(w), frozenset())


def _other_session(w: World) -> None:
    w.step(H.RestartPlanned(w.now, plan(unconnected_agent(w)), ("claude", "sess-other"), COLLABORATE))


def _session_restarting(w: World) -> None:
    b = unconnected_agent(w)
    begin(w, b)
    begin(w, replace(b, pane="%7"), rid="r-2")


def _unknown(w: World) -> None:
    w.step(H.RestartStepped(w.now, "r-missing", R.Timeout(now=w.now)))


def _not_respawning(w: World) -> None:
    b = unconnected_agent(w)
    begin(w, b)
    respawned(w, b)


def _same_incarnation(w: World) -> None:
    b = unconnected_agent(w)
    begin(w, b)
    to_process_ended(w, b)
    w.step(H.RestartRespawned(w.now, "r-1", "tok-new", "p-new", 1, b.incarnation))


def _record_closed(w: World) -> None:
    w.step(H.RestartRecovered(w.now, replace(plan(unconnected_agent(w)).record, step=S.CLOSED)))


def _record_id_open(w: World) -> None:
    b = unconnected_agent(w)
    begin(w, b)
    w.step(H.RestartRecovered(w.now, replace(plan(replace(b, pane="%7")).record, step=S.EXIT_SENT)))


def _record_pane_restarting(w: World) -> None:
    b = unconnected_agent(w)
    begin(w, b)
    w.step(H.RestartRecovered(w.now, replace(plan(b, "r-2").record, step=S.EXIT_SENT)))


@pytest.mark.parametrize("scenario,reason,words", [
    (_not_planned, "not_planned", "restart r-1 is waiting_idle, not planned"),
    (_id_open, "restart_reused", "restart id r-1 is already open"),
    (_pane_restarting, "restart_running", "a restart of %2 is already under way"),
    (_no_scopes, "bad_preset", "restart-to-connect needs observe or collaborate"),
    (_other_session, "session_mismatch", "restart r-1 resumes ('claude', 'sess-b'), not ('claude', 'sess-other')"),
    (_session_restarting, "restart_running", "a restart of session sess-b is already under way"),
    (_unknown, "unknown_restart", "no open restart r-missing"),
    (_not_respawning, "not_respawning", "restart r-1 is waiting_idle, not respawning"),
    (_same_incarnation, "same_incarnation", "restart r-1: inc-b is the incarnation it replaces"),
    (_record_closed, "restart_closed", "restart r-1 is already closed"),
    (_record_id_open, "restart_reused", "restart id r-1 is already open"),
    (_record_pane_restarting, "restart_running", "a restart of %2 is already under way"),
], ids=lambda v: v.__name__ if callable(v) else None)
def test_a_refusal_names_its_reason_and_says_in_words_what_it_refuses(
    scenario: Callable[[World], None], reason: str, words: str
) -> None:
    """The owner sees the refusal's words (restart_to_connect's EngineError, the recovery's warning):
    each names the restart, pane or session it is about. Kills _restart_planned 4, 11, 22, 29, 34, 35,
    39, 49, _open_restart 5, _restart_respawned 9, 16 and _restart_recovered 4, 11, 22 (the words
    None or changed) and _restart_recovered 10, 12, 13, 14, 15 (the reason of a recovered record
    whose id is open: changed, None, or the refusal not built)."""
    w = World()
    with pytest.raises((H.RestartRefused, H.UnknownItem)) as refused:
        scenario(w)
    error = refused.value
    assert isinstance(error, (H.RestartRefused, H.UnknownItem))
    assert (error.reason, str(error)) == (reason, words)


def test_a_second_restart_of_a_pane_is_refused_even_for_another_session() -> None:
    """Kills _restart_planned 17 (the pane check asked about pane None: only the session check left)."""
    w = World()
    b = unconnected_agent(w)
    begin(w, b)
    before = w.snapshot()
    with pytest.raises(H.RestartRefused) as refused:
        w.step(H.RestartPlanned(w.now, plan(b, "r-2", session_id="sess-c"), ("claude", "sess-c"), COLLABORATE))
    assert refused.value.reason == "restart_running"
    assert w.hub == before


def test_the_grant_a_restart_sets_is_audited_as_set_by_whom_and_when() -> None:
    """Kills _restart_planned 57 (the grant's time None), 60 (its setter None) and 65 (the setter
    left to the default "owner")."""
    w = World()
    b = unconnected_agent(w)
    effects = w.step(H.RestartPlanned(w.now, plan(b), ("claude", "sess-b"), COLLABORATE, by="agent:ctl"))
    assert audits(effects, "grant") == [Audit(
        actor="agent:ctl", action="grant", outcome="set", target="agent:claude:sess-b",
        detail=",".join(sorted(s.value for s in COLLABORATE)), at=w.now,
    )]


def test_a_message_typed_into_another_pane_does_not_hold_the_restart() -> None:
    """Only a message typed into the restarted pane keeps its idle reading from counting. Kills
    _delivery_holds 12 (``pane == pane_id and`` -> ``or``: any typing anywhere held it)."""
    w = World()
    b = unconnected_agent(w)
    c = w.launch("c", session=("claude", "sess-c"))
    key = ready_message_to(w, c)
    w.idle(c)
    w.guard(key, c)
    assert w.message(key).state is H.MessageState.TYPING
    begin(w, b)
    feed(w, observed(w, b))
    assert step_of(w) is S.RECORD_PERSISTED


def test_a_respawn_without_a_grant_is_audited_whole() -> None:
    """The unconnected respawn's audit line: the restarter, the session, why, when. Kills
    _restart_respawned 33, 34 (the words changed), 45 (actor None), 48, 54 (target None or left out),
    50, 56 (time None or left out) and 61 (the session's harness replaced by its id)."""
    w = World()
    b = unconnected_agent(w)
    recovered_at_exit_sent(w, b)
    w.now += 7.0
    effects = respawned(w, b)
    assert audits(effects, "restart.respawn") == [Audit(
        actor=R.ACTOR, action="restart.respawn", outcome="unconnected", target="agent:claude:sess-b",
        detail="respawned without connect: the session's grant is off", at=w.now,
    )]


def test_a_respawn_refused_as_a_second_control_says_why() -> None:
    """Kills _restart_respawned 44 (the refusal's words replaced by "None")."""
    w = World()
    ctl = w.launch("ctl", Preset.OFF, control=True, session=("claude", "sess-b"))
    begin(w, ctl)
    to_process_ended(w, ctl)
    w.step(H.PaneGone(w.now, ctl.pane, ctl.incarnation))
    w.launch("other", Preset.OFF, control=True)
    with pytest.raises(control.ActRefused) as second:
        control.may_start_control(1)
    effects = respawned(w, ctl)
    assert audits(effects, "restart.respawn")[0].detail == f"respawned without connect: {second.value}"


def test_a_plain_agent_restarted_while_a_control_runs_is_connected() -> None:
    """Only a control session's respawn is held to one control at a time. Kills _restart_respawned 41
    (``control=False`` -> ``True``: every respawn counted as a new control, refused while one runs)."""
    w = World()
    w.launch("ctl", Preset.OFF, control=True)
    b = unconnected_agent(w)
    begin(w, b)
    to_process_ended(w, b)
    respawned(w, b)
    principal = grants.authenticate(w.hub.book, "tok-new")
    assert not principal.control and grants.scopes_of(w.hub.book, principal.id) == COLLABORATE


def test_the_respawned_token_records_its_process() -> None:
    """The token issued to the respawned process: when, which harness, pane, pid and incarnation.
    Kills _restart_respawned 64, 67, 68, 69, 70 (one of them None)."""
    w = World()
    b = unconnected_agent(w)
    begin(w, b)
    to_process_ended(w, b)
    w.now += 3.0
    respawned(w, b)
    token = w.hub.book.tokens["tok-new"]
    assert (token.issued_at, token.pane_id, token.pid, token.incarnation) == (w.now, b.pane, 9999, "inc-new")
    assert w.hub.book.principals[token.principal].harness == "claude"


def test_a_recovered_restart_keeps_the_limits_it_was_given() -> None:
    """Kills _restart_recovered 29, 31 (the default limits instead)."""
    w = World()
    record = replace(plan(unconnected_agent(w)).record, step=S.EXIT_SENT)
    w.step(H.RestartRecovered(w.now, record, LIMITS))
    assert R.RestartLimits() != LIMITS
    assert w.hub.restarts["r-1"].limits == LIMITS


def test_a_revoke_reaches_a_restart_of_its_session_resumed_off_and_only_its_own() -> None:
    """A principal's session, its first pane gone, resumed by hand in another pane launched Off (no
    token there) and restarted to connect: revoking the principal withdraws that restart (found by
    the session's alias to the principal); revoking another principal leaves it alone. Kills
    _restarts_of mutmut_10, 11, 22, 24 (the alias not looked up or not matched) and 21, 27 (any
    alias matched)."""
    from .hubkit import Agent

    for whom in ("b", "other"):
        w = World()
        b = w.launch("b", Preset.OBSERVE, session=("claude", "sess-b"))
        other = w.launch("other", Preset.OBSERVE, session=("claude", "sess-other"))
        w.step(H.PaneGone(w.now, b.pane, b.incarnation))
        resumed = Agent("b2", "", "", "%9", "inc-resumed")
        begin(w, resumed)
        assert "r-1" in w.hub.restarts
        w.step(H.Revoke(w.now, (b if whom == "b" else other).principal))
        assert ("r-1" in w.hub.restarts) is (whom == "other"), whom


def test_the_exit_command_left_in_a_composer_is_told_only_while_its_agent_is_the_pane_s() -> None:
    """A restart that typed its exit command and then left the agent alone tells the person (a Needs
    you item for the pane) while the pane last seen holds that agent's incarnation; a pane seen
    holding another incarnation since (the agent gone, another in its place) is told nothing. Kills
    _closed mutmut_14, 15 (the pane's view not looked up) and 20 (``==`` -> ``!=``)."""
    from .hubkit import Agent
    from .test_hub_restarts import to_rechecking

    for seen in ("inc-b", "inc-new"):
        w = World()
        b = Agent("b", "", "", "%2", "inc-b")
        begin(w, b)
        to_rechecking(w, b)
        feed(w, observed(w, b))  # fresh idle: the exit command is typed
        assert step_of(w) is S.EXIT_SENT
        w.now += LIMITS.exit
        feed(w, R.Timeout(now=w.now))  # the agent did not exit
        feed(w, R.Recover(now=w.now, condition=R.PaneCondition.LIVE))
        w.step(H.PaneObserved(w.now, b.pane, seen, False, "fp-draft", w.now))
        assert b.pane in w.hub.panes, seen
        feed(w, R.StepDone(now=w.now, step=S.OPTION_RESTORED))
        assert "r-1" not in w.hub.restarts, seen
        assert (b.pane in w.hub.drafts) is (seen == "inc-b"), seen



def test_disconnect_all_withdraws_every_restart_past_one_already_withdrawn_or_stored() -> None:
    """Disconnect all withdraws every open restart-to-connect, in order of id: one already withdrawn
    (its exit sent, so it runs on without a token) is passed over, not the end of the list; a
    cancelled one keeps its record when a later one, past its stored record, is marked and stored.
    Kills _withdraw_restarts mutmut_6 (``continue`` -> ``break``) and 22 (``effects += (Persist…)`` ->
    ``=``: the cancel before it lost)."""
    from connectcore.effects import Persist

    from .hubkit import Agent
    from .test_hub_restarts import to_rechecking

    b, c = Agent("b", "", "", "%2", "inc-b"), Agent("c", "", "", "%3", "inc-c")
    why = "disconnect all while restarting"

    # r-1 withdrawn already (revoked after its exit was sent); r-2 still waiting for idle
    w = World()
    begin(w, b)
    to_rechecking(w, b)
    feed(w, observed(w, b))
    assert step_of(w) is S.EXIT_SENT
    w.step(H.RevokePane(w.now, b.pane, b.incarnation))
    assert step_of(w) is S.EXIT_SENT and w.hub.restarts["r-1"].record.connect_withdrawn
    w.step(H.RestartPlanned(w.now, plan(c, "r-2", "sess-c"), ("claude", "sess-c"), COLLABORATE))
    effects = w.step(H.DisconnectAll(w.now))
    assert "r-2" not in w.hub.restarts
    assert [a.detail for a in audits(effects, "restart.cancel")] == [why]

    # r-1 waiting for idle (cancelled), r-2 past its stored record (marked and stored)
    w = World()
    begin(w, b)
    w.step(H.RestartPlanned(w.now, plan(c, "r-2", "sess-c"), ("claude", "sess-c"), COLLABORATE))
    feed(w, observed(w, c), "r-2")
    feed(w, R.StepDone(now=w.now, step=S.RECORD_PERSISTED), "r-2")
    assert step_of(w, "r-2") in R.RECOVERABLE
    effects = w.step(H.DisconnectAll(w.now))
    assert "r-1" not in w.hub.restarts
    assert [a.detail for a in audits(effects, "restart.cancel")] == [why]
    stored = [e for e in effects if isinstance(e, Persist) and e.kind == R.STORE_KIND and e.key == ("r-2",)]
    assert [e.record.connect_withdrawn for e in stored] == [why]
