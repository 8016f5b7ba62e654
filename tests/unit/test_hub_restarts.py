"""Restarts inside the hub: a revocation is never undone by a restart, recovery never grants more than
the stored grant, and a pane being restarted is not armed for delivery."""

from __future__ import annotations

from dataclasses import replace

import pytest

from connectcore import grants
from connectcore import hub as H
from connectcore import restart as R
from connectcore._machine import TransitionNotAllowed
from connectcore.consent import Decision
from connectcore.effects import Audit, CheckGuard, Effect, Persist, Respawn
from connectcore.grants import PRESET_SCOPES, Preset, Scope
from connectcore.restart import RestartStep as S

from .hubkit import Agent, World

LIMITS = R.RestartLimits(idle_wait=60.0, step=5.0, exit=10.0, respawn=10.0)
COLLABORATE = PRESET_SCOPES[Preset.COLLABORATE]
OBSERVE = PRESET_SCOPES[Preset.OBSERVE]


def plan(agent: Agent, rid: str = "r-1", session_id: str = "sess-b") -> R.Restart:
    return R.plan_restart(
        R.RestartPlan(
            restart_id=rid,
            pane_id=agent.pane,
            incarnation=agent.incarnation,
            original_remain_on_exit=None,
            harness="claude",
            session_id=session_id,
            launcher="claude",
            exit_command="/exit",
            resume_argv=("claude", "--resume", session_id),
            cwd="/home/u/project",
            env={"CONNECT_TOKEN": "t"},
        ),
        LIMITS,
    )


def begin(w: World, agent: Agent, scopes: frozenset[Scope] = COLLABORATE, rid: str = "r-1") -> tuple[Effect, ...]:
    return w.step(H.RestartPlanned(w.now, plan(agent, rid), ("claude", "sess-b"), scopes))


def feed(w: World, event: R.RestartEvent, rid: str = "r-1") -> tuple[Effect, ...]:
    return w.step(H.RestartStepped(w.now, rid, event))


def observed(w: World, agent: Agent, incarnation: str | None = None, **over: bool) -> R.PaneObserved:
    fields = {"agent_running": True, "idle": True, "composer_empty": True, "pane_dead": False, **over}
    return R.PaneObserved(now=w.now, pane_id=agent.pane, incarnation=incarnation or agent.incarnation, **fields)


def step_of(w: World, rid: str = "r-1") -> S:
    return w.hub.restarts[rid].step


def to_rechecking(w: World, agent: Agent) -> None:
    feed(w, observed(w, agent))  # idle: the record is persisted
    feed(w, R.StepDone(now=w.now, step=S.RECORD_PERSISTED))
    feed(w, R.StepDone(now=w.now, step=S.REMAIN_ON_EXIT_SET))
    assert step_of(w) is S.RECHECKING_IDLE


def to_process_ended(w: World, agent: Agent) -> tuple[Effect, ...]:
    to_rechecking(w, agent)
    feed(w, observed(w, agent))  # fresh idle: the exit command is sent
    assert step_of(w) is S.EXIT_SENT
    effects = feed(w, observed(w, agent, agent_running=False, idle=False, composer_empty=False, pane_dead=True))
    assert step_of(w) is S.PROCESS_ENDED and any(isinstance(e, Respawn) for e in effects)
    return effects


def respawned(w: World, agent: Agent, rid: str = "r-1", token: str = "tok-new") -> tuple[Effect, ...]:
    return w.step(H.RestartRespawned(w.now, rid, token, "p-new", 9999, "inc-new"))


def finish(w: World, rid: str = "r-1") -> tuple[Effect, ...]:
    """From process_ended: the respawn confirmed, the new incarnation seen running, the option restored."""
    state = w.hub.restarts[rid]
    effects = feed(w, R.StepDone(now=w.now, step=S.PROCESS_ENDED), rid)
    effects += feed(
        w,
        R.PaneObserved(
            now=w.now, pane_id=state.record.pane_id, incarnation="inc-new", agent_running=True, idle=True, composer_empty=True
        ),
        rid,
    )
    effects += feed(w, R.StepDone(now=w.now, step=S.OPTION_RESTORED), rid)
    assert rid not in w.hub.restarts
    return effects


def unconnected_agent(w: World) -> Agent:
    """An agent running in %2 that connectd launched with Off: no token, no grant."""
    return Agent("b", "", "", "%2", "inc-b")


def audits(effects: tuple[Effect, ...], action: str) -> list[Audit]:
    return [e for e in effects if isinstance(e, Audit) and e.action == action]


# --- the restart joins the hub ------------------------------------------------------------------------


def test_planned_sets_the_grant_and_begins_waiting_for_idle() -> None:
    w = World()
    b = unconnected_agent(w)
    effects = begin(w, b)
    assert grants.session_scopes(w.hub.book, ("claude", "sess-b")) == COLLABORATE
    assert step_of(w) is S.WAITING_IDLE
    assert any(isinstance(e, R.ObservePane) for e in effects)
    assert audits(effects, "grant") and audits(effects, "restart.begin")


def test_a_full_restart_issues_the_token_with_the_stored_grant_and_closes() -> None:
    w = World()
    b = unconnected_agent(w)
    begin(w, b)
    to_process_ended(w, b)
    effects = respawned(w, b)
    principal = grants.authenticate(w.hub.book, "tok-new")
    assert principal.session == ("claude", "sess-b")
    assert grants.scopes_of(w.hub.book, principal.id) == COLLABORATE
    assert audits(effects, "launch_token")
    effects = finish(w)
    assert audits(effects, "restart.close")[0].outcome == R.RestartOutcome.RESTARTED


def test_the_respawned_token_joins_the_sessions_principal() -> None:
    w = World()
    b = w.launch("b", Preset.OBSERVE, session=("claude", "sess-b"))
    begin(w, b)
    to_process_ended(w, b)
    respawned(w, b)
    assert grants.authenticate(w.hub.book, "tok-new").id == b.principal


# --- refusals: a clear reason, nothing changed ------------------------------------------------------------


def test_a_second_restart_of_the_same_pane_is_refused() -> None:
    w = World()
    b = unconnected_agent(w)
    begin(w, b)
    before = w.snapshot()
    with pytest.raises(H.RestartRefused) as refused:
        begin(w, b, rid="r-2")
    assert refused.value.reason == "restart_running"
    assert w.hub == before


def test_a_restart_id_already_open_is_refused() -> None:
    w = World()
    b = unconnected_agent(w)
    begin(w, b)
    before = w.snapshot()
    other = replace(b, pane="%7")
    with pytest.raises(H.RestartRefused) as refused:
        begin(w, other)
    assert refused.value.reason == "restart_reused"
    assert w.hub == before


def test_a_restart_over_the_cap_is_refused() -> None:
    w = World(hub=H.Hub(book=grants.with_cap(grants.GrantBook(), Preset.OBSERVE)))
    b = unconnected_agent(w)
    before = w.snapshot()
    with pytest.raises(grants.GrantError) as refused:
        begin(w, b, COLLABORATE)
    assert refused.value.reason == "over_cap"
    assert w.hub == before and not w.hub.restarts


def test_a_restart_without_scopes_is_refused() -> None:
    w = World()
    b = unconnected_agent(w)
    with pytest.raises(H.RestartRefused) as refused:
        begin(w, b, frozenset())
    assert refused.value.reason == "bad_preset"
    assert w.hub == World().hub


def test_a_restart_for_another_session_than_its_plan_is_refused() -> None:
    w = World()
    b = unconnected_agent(w)
    with pytest.raises(H.RestartRefused) as refused:
        w.step(H.RestartPlanned(w.now, plan(b), ("claude", "sess-other"), COLLABORATE))
    assert refused.value.reason == "session_mismatch"
    assert not w.hub.restarts and not w.hub.book.grants


def test_a_restart_not_in_its_planned_step_is_refused() -> None:
    w = World()
    b = unconnected_agent(w)
    state, _ = R.step(plan(b), R.Begin(now=w.now))
    with pytest.raises(H.RestartRefused) as refused:
        w.step(H.RestartPlanned(w.now, state, ("claude", "sess-b"), COLLABORATE))
    assert refused.value.reason == "not_planned"
    assert not w.hub.restarts


@pytest.mark.parametrize(
    "event",
    [
        H.RestartStepped(0.0, "r-missing", R.Timeout(now=0.0)),
        H.RestartRespawned(0.0, "r-missing", "tok", "p", 1, "inc"),
    ],
)
def test_an_unknown_restart_is_refused(event: H.Event) -> None:
    w = World()
    with pytest.raises(H.UnknownItem) as refused:
        w.step(event)
    assert refused.value.reason == "unknown_restart"
    assert w.hub == World().hub


def test_a_closed_record_is_not_recovered() -> None:
    w = World()
    record = replace(plan(unconnected_agent(w)).record, step=S.CLOSED)
    with pytest.raises(H.RestartRefused) as refused:
        w.step(H.RestartRecovered(w.now, record))
    assert refused.value.reason == "restart_closed"
    assert not w.hub.restarts


def test_an_event_the_restart_table_does_not_allow_changes_nothing() -> None:
    w = World()
    b = unconnected_agent(w)
    begin(w, b)
    before = w.snapshot()
    with pytest.raises(TransitionNotAllowed):
        feed(w, R.StepDone(now=w.now, step=S.WAITING_IDLE))
    assert w.hub == before


# --- defect: an in-flight restart undid a revocation ------------------------------------------------------


def test_off_pressed_after_the_exit_was_sent_is_not_undone_by_the_respawn() -> None:
    w = World()
    b = unconnected_agent(w)
    begin(w, b)
    to_rechecking(w, b)
    feed(w, observed(w, b))
    assert step_of(w) is S.EXIT_SENT
    w.step(H.SetGrant(w.now, ("claude", "sess-b"), frozenset()))  # Off, while the agent is quitting
    feed(w, observed(w, b, agent_running=False, idle=False, composer_empty=False, pane_dead=True))
    effects = respawned(w, b)
    assert grants.authenticate_or_none(w.hub.book, "tok-new") is None
    assert "tok-new" not in w.hub.book.tokens and not audits(effects, "launch_token")
    assert audits(effects, "restart.respawn")[0].outcome == "unconnected"
    assert grants.session_scopes(w.hub.book, ("claude", "sess-b")) == frozenset()
    finish(w)  # the dead pane is respawned and the option restored all the same


def test_off_pressed_while_waiting_for_idle_cancels_the_restart_touching_nothing() -> None:
    w = World()
    b = unconnected_agent(w)
    begin(w, b)
    effects = w.step(H.SetGrant(w.now, ("claude", "sess-b"), frozenset()))
    assert "r-1" not in w.hub.restarts
    assert audits(effects, "restart.cancel")[0].outcome == R.RestartOutcome.CANCELLED
    assert not any(isinstance(e, Persist) and e.kind == R.STORE_KIND for e in effects)


def test_a_new_grant_while_waiting_for_idle_cancels_the_restart() -> None:
    w = World()
    b = unconnected_agent(w)
    begin(w, b, OBSERVE)
    effects = w.step(H.SetGrant(w.now, ("claude", "sess-b"), COLLABORATE))
    assert "r-1" not in w.hub.restarts and audits(effects, "restart.cancel")


def test_revoke_while_rechecking_recovers_and_restores_the_option() -> None:
    w = World()
    b = w.launch("b", Preset.OBSERVE, session=("claude", "sess-b"))
    begin(w, b)
    to_rechecking(w, b)
    effects = w.step(H.Revoke(w.now, b.principal))
    assert step_of(w) is S.RECOVERING and any(isinstance(e, R.InspectPane) for e in effects)
    feed(w, R.Recover(now=w.now, condition=R.PaneCondition.LIVE))
    effects = feed(w, R.StepDone(now=w.now, step=S.OPTION_RESTORED))
    assert "r-1" not in w.hub.restarts
    assert audits(effects, "restart.close")[0].outcome == R.RestartOutcome.LEFT_ALONE


def test_revoke_of_a_merged_principal_cancels_the_restart_of_its_session() -> None:
    w = World()
    b = w.launch("b", Preset.OBSERVE, session=("claude", "sess-b"))
    w.step(H.PaneGone(w.now, b.pane, b.incarnation))  # b's process ended; it is resumed by hand in %5
    early = w.launch("early", Preset.OBSERVE, pane="%5")  # a token issued before its session was known
    w.step(H.BindSession(w.now, early.principal, ("claude", "sess-b")))  # merged into b's principal
    begin(w, early)
    w.step(H.Revoke(w.now, early.principal))
    assert "r-1" not in w.hub.restarts


# --- defect (issue 22.3): `revoke %N` could not stop a restart of an agent launched Off ------------------


def test_revoke_of_a_pane_cancels_the_restart_of_an_agent_launched_off() -> None:
    """A revoke of a pane that holds no principal but an open restart cancels that restart."""
    w = World()
    b = unconnected_agent(w)
    begin(w, b)
    effects = w.step(H.RevokePane(w.now, b.pane, b.incarnation))
    assert "r-1" not in w.hub.restarts
    assert audits(effects, "restart.cancel")[0].detail == "connect revoked while restarting"


def test_revoke_of_a_pane_after_the_exit_was_sent_respawns_an_off_agent_without_a_token() -> None:
    """Past the exit command the restart goes on, but its connect is withdrawn: the respawn gets no token."""
    w = World()
    b = unconnected_agent(w)
    begin(w, b)
    to_rechecking(w, b)
    feed(w, observed(w, b))
    w.step(H.RevokePane(w.now, b.pane, b.incarnation))
    assert step_of(w) is S.EXIT_SENT and w.hub.restarts["r-1"].record.connect_withdrawn
    feed(w, observed(w, b, agent_running=False, idle=False, composer_empty=False, pane_dead=True))
    respawned(w, b)
    assert grants.authenticate_or_none(w.hub.book, "tok-new") is None


def test_revoke_of_a_pane_revokes_its_principal_and_cancels_its_restart() -> None:
    """A connected pane's revoke does both: the principal is revoked and the open restart cancelled."""
    w = World()
    b = w.launch("b", Preset.OBSERVE, session=("claude", "sess-b"))
    begin(w, b)
    w.step(H.RevokePane(w.now, b.pane, b.incarnation))
    assert "r-1" not in w.hub.restarts
    assert grants.principal_at(w.hub.book, b.incarnation) is None


def test_revoke_of_a_pane_with_nothing_to_revoke_is_refused_and_changes_nothing() -> None:
    """No principal and no open restart: refused ``not_connected``, the hub unchanged."""
    w = World()
    b = unconnected_agent(w)
    before = w.hub
    with pytest.raises(H.UnknownItem) as refused:
        w.step(H.RevokePane(w.now, b.pane, b.incarnation))
    assert refused.value.reason == "not_connected" and w.hub == before


def test_revoke_after_the_exit_was_sent_respawns_without_a_token() -> None:
    w = World()
    b = w.launch("b", Preset.OBSERVE, session=("claude", "sess-b"))
    begin(w, b)
    to_rechecking(w, b)
    feed(w, observed(w, b))
    w.step(H.Revoke(w.now, b.principal))
    assert step_of(w) is S.EXIT_SENT  # past the point of no return: the restart goes on
    feed(w, observed(w, b, agent_running=False, idle=False, composer_empty=False, pane_dead=True))
    respawned(w, b)
    assert grants.authenticate_or_none(w.hub.book, "tok-new") is None


def test_a_grant_set_again_after_the_exit_was_sent_still_gives_the_respawn_no_token() -> None:
    w = World()
    b = unconnected_agent(w)
    begin(w, b)
    to_rechecking(w, b)
    feed(w, observed(w, b))
    w.step(H.SetGrant(w.now, ("claude", "sess-b"), frozenset()))
    w.step(H.SetGrant(w.now, ("claude", "sess-b"), OBSERVE))  # the owner changed their mind: at next launch
    feed(w, observed(w, b, agent_running=False, idle=False, composer_empty=False, pane_dead=True))
    respawned(w, b)
    assert grants.authenticate_or_none(w.hub.book, "tok-new") is None


def test_disconnect_all_cancels_every_open_restart() -> None:
    w = World()
    b = unconnected_agent(w)
    c = Agent("c", "", "", "%3", "inc-c")
    begin(w, b)
    w.step(H.RestartPlanned(w.now, plan(c, "r-2", "sess-c"), ("claude", "sess-c"), OBSERVE))
    to_rechecking(w, b)
    effects = w.step(H.DisconnectAll(w.now))
    assert "r-2" not in w.hub.restarts and step_of(w) is S.RECOVERING
    assert audits(effects, "restart.cancel") and audits(effects, "restart.recover")


def test_a_revocation_of_another_session_leaves_the_restart_alone() -> None:
    w = World()
    b = unconnected_agent(w)
    other = w.launch("other", session=("claude", "sess-other"))
    begin(w, b)
    w.step(H.Revoke(w.now, other.principal))
    w.step(H.SetGrant(w.now, ("claude", "sess-other"), OBSERVE))
    assert step_of(w) is S.WAITING_IDLE


# --- defect: startup recovery granted Observe to a session turned Off ------------------------------------


def recovered_at_exit_sent(w: World, b: Agent) -> None:
    record = replace(plan(b).record, step=S.EXIT_SENT, updated_at=w.now - 5)
    w.step(H.RestartRecovered(w.now, record, LIMITS))
    effects = feed(w, R.Recover(now=w.now, condition=R.PaneCondition.DEAD, env={"CONNECT_TOKEN": "fresh"}))
    assert step_of(w) is S.PROCESS_ENDED and any(isinstance(e, Respawn) for e in effects)


def test_recovery_of_a_session_turned_off_grants_nothing() -> None:
    w = World()
    b = unconnected_agent(w)
    w.step(H.SetGrant(w.now, ("claude", "sess-b"), frozenset()))  # turned Off (before the daemon died)
    recovered_at_exit_sent(w, b)
    effects = respawned(w, b)
    assert grants.authenticate_or_none(w.hub.book, "tok-new") is None
    assert audits(effects, "restart.respawn")[0].outcome == "unconnected"


def test_recovery_of_a_session_with_no_grant_grants_nothing() -> None:
    w = World()
    b = unconnected_agent(w)
    recovered_at_exit_sent(w, b)
    respawned(w, b)
    assert grants.authenticate_or_none(w.hub.book, "tok-new") is None


def test_recovery_grants_exactly_the_stored_grant() -> None:
    w = World()
    b = unconnected_agent(w)
    w.step(H.SetGrant(w.now, ("claude", "sess-b"), frozenset({Scope.READ})))  # an advanced grant
    recovered_at_exit_sent(w, b)
    respawned(w, b)
    principal = grants.authenticate(w.hub.book, "tok-new")
    assert grants.scopes_of(w.hub.book, principal.id) == frozenset({Scope.READ})


# --- defect: a consented message could be typed in the idle moment the restart waits for -----------------


def ready_message_to(w: World, b: Agent) -> tuple[str, str]:
    a = w.launch("a")
    key = w.send(a, b)
    w.decide(key, Decision.APPROVE_PAIR)
    assert w.message(key).state is H.MessageState.READY
    return key


def test_no_guard_starts_for_a_pane_being_restarted() -> None:
    w = World()
    b = w.launch("b", session=("claude", "sess-b"))
    key = ready_message_to(w, b)
    begin(w, b)
    effects = w.idle(b)  # the very idle moment the restart waits for
    assert not any(isinstance(e, CheckGuard) for e in effects)
    assert w.message(key).state is H.MessageState.READY


def test_a_guard_answered_after_the_restart_began_types_nothing_and_the_message_waits() -> None:
    w = World()
    b = w.launch("b", session=("claude", "sess-b"))
    key = ready_message_to(w, b)
    assert any(isinstance(e, CheckGuard) for e in w.idle(b))
    begin(w, b)
    effects = w.guard(key, b)
    waiting = w.message(key)
    assert effects == (Persist("message", key, waiting),)  # stored as waiting; nothing typed
    assert waiting.state is H.MessageState.READY and waiting.reason == "the recipient is being restarted"
    assert b.pane not in w.hub.attempts


def test_a_restart_that_ends_untouched_gives_the_pane_back_to_delivery() -> None:
    w = World()
    b = w.launch("b", session=("claude", "sess-b"))
    key = ready_message_to(w, b)
    begin(w, b)
    w.idle(b)
    w.now += LIMITS.idle_wait
    effects = feed(w, R.Timeout(now=w.now))
    assert "r-1" not in w.hub.restarts
    assert [e for e in effects if isinstance(e, CheckGuard)] == [CheckGuard(b.pane, b.incarnation, key)]


# --- more refusals and edges --------------------------------------------------------------------------


def test_a_second_restart_of_the_same_session_is_refused() -> None:
    w = World()
    b = unconnected_agent(w)
    begin(w, b)
    before = w.snapshot()
    with pytest.raises(H.RestartRefused) as refused:
        w.step(H.RestartPlanned(w.now, plan(replace(b, pane="%7"), "r-2"), ("claude", "sess-b"), OBSERVE))
    assert refused.value.reason == "restart_running"
    assert w.hub == before


def test_a_respawn_reported_before_the_restart_respawns_is_refused() -> None:
    w = World()
    b = unconnected_agent(w)
    begin(w, b)
    before = w.snapshot()
    with pytest.raises(H.RestartRefused) as refused:
        respawned(w, b)
    assert refused.value.reason == "not_respawning"
    assert w.hub == before


def test_a_respawn_reported_with_the_old_incarnation_is_refused() -> None:
    w = World()
    b = unconnected_agent(w)
    begin(w, b)
    to_process_ended(w, b)
    before = w.snapshot()
    with pytest.raises(H.RestartRefused) as refused:
        w.step(H.RestartRespawned(w.now, "r-1", "tok-new", "p-new", 1, b.incarnation))
    assert refused.value.reason == "same_incarnation"
    assert w.hub == before


def test_a_record_for_a_pane_already_restarting_is_not_recovered() -> None:
    w = World()
    b = unconnected_agent(w)
    begin(w, b)
    before = w.snapshot()
    record = replace(plan(b, "r-2").record, step=S.EXIT_SENT)
    with pytest.raises(H.RestartRefused) as refused:
        w.step(H.RestartRecovered(w.now, record))
    assert refused.value.reason == "restart_running"
    assert w.hub == before


def test_the_respawn_token_never_exceeds_a_cap_lowered_meanwhile() -> None:
    w = World()
    b = unconnected_agent(w)
    begin(w, b)
    to_process_ended(w, b)
    w.hub = replace(w.hub, book=grants.with_cap(w.hub.book, Preset.OBSERVE))  # the daemon restarted with a lower cap
    respawned(w, b)
    principal = grants.authenticate(w.hub.book, "tok-new")
    assert grants.scopes_of(w.hub.book, principal.id) == OBSERVE


def test_the_first_reason_a_restart_lost_its_connect_is_the_one_audited() -> None:
    w = World()
    b = w.launch("b", Preset.OBSERVE, session=("claude", "sess-b"))
    begin(w, b)
    to_rechecking(w, b)
    feed(w, observed(w, b))
    w.step(H.Revoke(w.now, b.principal))
    w.step(H.SetGrant(w.now, ("claude", "sess-b"), OBSERVE))
    feed(w, observed(w, b, agent_running=False, idle=False, composer_empty=False, pane_dead=True))
    effects = respawned(w, b)
    assert audits(effects, "restart.respawn")[0].detail == "respawned without connect: connect revoked while restarting"
    finish(w)


def test_a_restart_does_not_take_the_pane_as_idle_while_a_message_is_typed_into_it() -> None:
    w = World()
    b = w.launch("b", session=("claude", "sess-b"))
    key = ready_message_to(w, b)
    w.idle(b)
    w.guard(key, b)
    assert w.message(key).state is H.MessageState.TYPING
    begin(w, b)
    assert feed(w, observed(w, b)) == ()  # the idle reading taken while the paste is in flight
    assert step_of(w) is S.WAITING_IDLE
    w.typed(key)  # confirmed on a ready screen that does not show the answer: the turn may not have started
    assert feed(w, observed(w, b)) == ()
    assert step_of(w) is S.WAITING_IDLE
    w.idle(b, "fp-turn", ready=False)  # the turn, seen
    w.idle(b, "fp-after-the-turn")
    feed(w, observed(w, b))
    assert step_of(w) is S.RECORD_PERSISTED


def test_a_restart_waits_for_the_turn_of_a_message_just_typed_unless_its_answer_showed() -> None:
    """Claim: after a typing whose turn was not seen, a restart takes the pane as idle only once the
    turn's answer showed, the pane was seen busy or on a new idle screen, or the quiet clock re-armed it
    (found by the simulation, seed 213: /exit typed into a turn about to start)."""
    for answered, quiet in ((True, False), (False, True)):
        w = World.with_limits(rearm_after=10.0)
        b = w.launch("b", session=("claude", "sess-b"))
        key = ready_message_to(w, b)
        w.idle(b)
        w.guard(key, b)
        w.typed(key, fingerprint="fp-confirming", answered=answered)
        begin(w, b)
        if quiet:
            assert feed(w, observed(w, b)) == () and step_of(w) is S.WAITING_IDLE
            w.tick(10.0)
        feed(w, observed(w, b))
        assert step_of(w) is S.RECORD_PERSISTED, (answered, quiet)


def test_a_withdrawn_connect_is_persisted_and_survives_a_daemon_restart() -> None:
    w = World()
    b = w.launch("b", Preset.OBSERVE, session=("claude", "sess-b"))
    begin(w, b)
    to_rechecking(w, b)
    feed(w, observed(w, b))
    effects = w.step(H.Revoke(w.now, b.principal))
    stored = [e.record for e in effects if isinstance(e, Persist) and e.kind == R.STORE_KIND]
    assert stored and stored[-1].connect_withdrawn == "connect revoked while restarting"
    w.step(H.SetGrant(w.now, ("claude", "sess-b"), OBSERVE))  # the owner grants again: for its next launch
    w.hub = replace(w.hub, restarts={})  # the daemon dies; its successor finds the record open
    w.step(H.RestartRecovered(w.now, stored[-1], LIMITS))
    feed(w, R.Recover(now=w.now, condition=R.PaneCondition.DEAD, env={"CONNECT_TOKEN": "fresh"}))
    respawned(w, b)
    assert grants.authenticate_or_none(w.hub.book, "tok-new") is None


def test_an_answer_for_a_step_the_restart_left_is_ignored() -> None:
    w = World()
    b = w.launch("b", Preset.OBSERVE, session=("claude", "sess-b"))
    begin(w, b)
    to_rechecking(w, b)
    w.step(H.Revoke(w.now, b.principal))  # cancelled while the daemon was reading the pane
    before = w.hub
    assert w.step(H.RestartStepped(w.now, "r-1", observed(w, b), for_step=S.RECHECKING_IDLE)) == ()
    assert w.hub == before and step_of(w) is S.RECOVERING
    with pytest.raises(TransitionNotAllowed):  # without for_step the same answer is a bug
        feed(w, observed(w, b))


def test_restart_of_pane_names_the_open_restart() -> None:
    w = World()
    b = unconnected_agent(w)
    assert H.restart_of_pane(w.hub, b.pane) is None
    begin(w, b)
    assert H.restart_of_pane(w.hub, b.pane) == "r-1"


def test_revoking_the_agent_holding_the_restarted_incarnation_cancels_its_restart() -> None:
    w = World()
    b = w.launch("b", Preset.OBSERVE)  # its token's principal never learned its session
    begin(w, b)
    w.step(H.Revoke(w.now, b.principal))
    assert "r-1" not in w.hub.restarts


def test_a_restarted_control_stays_control_and_a_second_control_is_not_connected() -> None:
    from connectcore.hub import acts as hub_acts

    w = World()
    ctl = w.launch("ctl", Preset.OFF, control=True, session=("claude", "sess-b"))
    begin(w, ctl)
    to_process_ended(w, ctl)
    respawned(w, ctl)
    principal = grants.authenticate(w.hub.book, "tok-new")
    assert principal.id == ctl.principal and principal.control
    assert Scope.ACT in grants.scopes_of(w.hub.book, principal.id)
    assert hub_acts.live_controls(w.hub.book) == {ctl.principal}
    # another control running meanwhile: the respawned session comes back, but not connected
    w2 = World()
    ctl2 = w2.launch("ctl", Preset.OFF, control=True, session=("claude", "sess-b"))
    begin(w2, ctl2)
    to_process_ended(w2, ctl2)
    w2.step(H.PaneGone(w2.now, ctl2.pane, ctl2.incarnation))
    w2.launch("other", Preset.OFF, control=True)
    effects = respawned(w2, ctl2)
    assert audits(effects, "restart.respawn")[0].outcome == "unconnected"
    assert "tok-new" not in w2.hub.book.tokens


def test_an_agent_that_ends_by_itself_while_its_restart_waits_for_idle_ends_the_restart() -> None:
    """Claim: a restart that has not sent its exit command is cancelled, touching nothing, when the
    process it was to relaunch is gone (found by the simulation: it stayed open until its deadline)."""
    w = World()
    b = unconnected_agent(w)
    begin(w, b)
    assert step_of(w) is S.WAITING_IDLE
    effects = w.step(H.PaneGone(w.now, b.pane, b.incarnation))
    assert w.hub.restarts == {}
    assert audits(effects, "restart.cancel") or any(isinstance(e, Audit) and e.outcome == "cancelled" for e in effects)
    assert not any(isinstance(e, Respawn) for e in effects)


def test_the_old_process_ending_after_the_exit_command_does_not_cancel_the_restart() -> None:
    """Claim: once the exit command is sent, the old incarnation going is the restart's own progress."""
    w = World()
    b = unconnected_agent(w)
    begin(w, b)
    restart_id = next(iter(w.hub.restarts))
    state = w.hub.restarts[restart_id]
    w.hub = replace(w.hub, restarts={restart_id: replace(state, record=replace(state.record, step=S.EXIT_SENT))})
    w.step(H.PaneGone(w.now, b.pane, b.incarnation))
    assert restart_id in w.hub.restarts


# --- issue 22.1: the exit command left in a composer is told, as a message left there is ---------------


def _left_alone_after_exit(w: World, b: Agent) -> tuple[Effect, ...]:
    begin(w, b)
    to_rechecking(w, b)
    feed(w, observed(w, b))  # fresh idle: the exit command is typed
    assert step_of(w) is S.EXIT_SENT
    w.now += LIMITS.exit
    feed(w, R.Timeout(now=w.now))  # the agent did not exit (its harness dropped the Enter)
    assert step_of(w) is S.RECOVERING
    feed(w, R.Recover(now=w.now, condition=R.PaneCondition.LIVE))
    return feed(w, R.StepDone(now=w.now, step=S.OPTION_RESTORED))


def test_a_restart_that_leaves_the_agent_alone_after_its_exit_command_tells_the_person() -> None:
    """An agent left alone after the exit command was typed may hold it unsent in its composer: a
    Needs you item names it (no message), and a reading with an empty composer closes it."""
    w = World()
    b = w.launch("b", Preset.OBSERVE, session=("claude", "sess-b"))
    effects = _left_alone_after_exit(w, b)
    close = audits(effects, "restart.close")[0]
    assert close.outcome == R.RestartOutcome.LEFT_ALONE and "'/exit' may be left in the composer" in close.detail
    left = w.hub.drafts[b.pane]
    assert (left.message, left.ref, left.incarnation) == (None, "r-1", b.incarnation)
    assert "exit command" in left.summary and "'/exit'" in left.why
    w.now += 1
    w.idle(b, ready=False)  # still a draft in the composer: the item stays
    assert b.pane in w.hub.drafts
    w.now += 1
    w.idle(b, ready=True)
    assert w.hub.drafts == {}


def test_a_restart_left_alone_before_its_exit_command_tells_nobody() -> None:
    """Recovery that leaves the agent alone before the exit command was typed left nothing in its composer."""
    w = World()
    b = w.launch("b", Preset.OBSERVE, session=("claude", "sess-b"))
    begin(w, b)
    to_rechecking(w, b)
    w.step(H.Revoke(w.now, b.principal))
    feed(w, R.Recover(now=w.now, condition=R.PaneCondition.LIVE))
    effects = feed(w, R.StepDone(now=w.now, step=S.OPTION_RESTORED))
    assert audits(effects, "restart.close")[0].outcome == R.RestartOutcome.LEFT_ALONE
    assert w.hub.drafts == {}
