"""Restarts inside the hub: a revocation is never undone by a restart, recovery never grants more than
the stored grant, and a pane being restarted is not armed for delivery."""

from __future__ import annotations

from dataclasses import replace

import pytest

from connectcore import grants
from connectcore import hub as H
from connectcore import restart as R
from connectcore._machine import TransitionNotAllowed
from connectcore.effects import Audit, Effect, Respawn
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
    before = w.hub
    with pytest.raises(H.RestartRefused) as refused:
        begin(w, b, rid="r-2")
    assert refused.value.reason == "restart_running"
    assert w.hub == before


def test_a_restart_id_already_open_is_refused() -> None:
    w = World()
    b = unconnected_agent(w)
    begin(w, b)
    before = w.hub
    other = replace(b, pane="%7")
    with pytest.raises(H.RestartRefused) as refused:
        begin(w, other)
    assert refused.value.reason == "restart_reused"
    assert w.hub == before


def test_a_restart_over_the_cap_is_refused() -> None:
    w = World(hub=H.Hub(book=grants.with_cap(grants.GrantBook(), Preset.OBSERVE)))
    b = unconnected_agent(w)
    before = w.hub
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
    before = w.hub
    with pytest.raises(TransitionNotAllowed):
        feed(w, R.StepDone(now=w.now, step=S.WAITING_IDLE))
    assert w.hub == before
