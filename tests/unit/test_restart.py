"""Restart-to-connect: every rule, every refusal, every timeout and recovery from every persisted step."""

from __future__ import annotations

import dataclasses
from collections import deque
from typing import Any

import pytest

from connectcore._machine import TransitionNotAllowed, mermaid
from connectcore.effects import Audit, Effect, ExitAgent, Notify, Persist, Respawn, SetPaneOption
from connectcore.restart import (
    ACTOR,
    AWAITING_DONE,
    FINAL,
    OBSERVING,
    RECOVERABLE,
    TABLE,
    Begin,
    Cancel,
    InspectPane,
    ObservePane,
    PaneCondition,
    PaneObserved,
    Recover,
    Restart,
    RestartError,
    RestartLimits,
    RestartOutcome,
    RestartPlan,
    RestartRecord,
    RestartStep,
    StepDone,
    StepFailed,
    Timeout,
    plan_restart,
    resume,
    step,
)

S = RestartStep
PANE = "%3"
RID = "r-1"
INC = "inc-old"
NEW = "inc-new"
TOKEN = "0123456789abcdef-secret"
ENV = {"CONNECT_TOKEN": TOKEN, "CLAUDE_CONFIG_DIR": "/home/u/.claude-work"}
ARGV = ("claude", "--resume", "sess-1")
CWD = "/home/u/project"
TARGET = "agent:claude:sess-1"
LIMITS = RestartLimits()  # idle_wait 600, step 10, exit 20, respawn 30, recoveries 3


def plan(**over: Any) -> RestartPlan:
    fields: dict[str, Any] = {
        "restart_id": RID,
        "pane_id": PANE,
        "incarnation": INC,
        "original_remain_on_exit": None,
        "harness": "claude",
        "session_id": "sess-1",
        "launcher": "claude-work",
        "exit_command": "/exit",
        "resume_argv": ARGV,
        "cwd": CWD,
        "env": ENV,
    }
    fields.update(over)
    return RestartPlan(**fields)


def obs(now: float, **over: Any) -> PaneObserved:
    fields: dict[str, Any] = {
        "now": now,
        "pane_id": PANE,
        "incarnation": INC,
        "agent_running": True,
        "idle": True,
        "composer_empty": True,
        "pane_dead": False,
    }
    fields.update(over)
    return PaneObserved(**fields)


def dead(now: float) -> PaneObserved:
    return obs(now, agent_running=False, idle=False, pane_dead=True)


# The normal path, one event per step, times 100..108.
PATH: tuple[tuple[RestartStep, Any], ...] = (
    (S.PLANNED, Begin(now=100.0)),
    (S.WAITING_IDLE, obs(101.0)),
    (S.RECORD_PERSISTED, StepDone(now=102.0, step=S.RECORD_PERSISTED)),
    (S.REMAIN_ON_EXIT_SET, StepDone(now=103.0, step=S.REMAIN_ON_EXIT_SET)),
    (S.RECHECKING_IDLE, obs(104.0)),
    (S.EXIT_SENT, dead(105.0)),
    (S.PROCESS_ENDED, StepDone(now=106.0, step=S.PROCESS_ENDED)),
    (S.RESPAWNED, obs(107.0, incarnation=NEW)),
    (S.OPTION_RESTORED, StepDone(now=108.0, step=S.OPTION_RESTORED)),
)


def reach(target: RestartStep, **plan_over: Any) -> Restart:
    """A genuine state at ``target``, driven along the normal path (RECOVERING: an exit timeout)."""
    limits = plan_over.pop("limits", None)
    state = plan_restart(plan(**plan_over), limits)
    if target is S.RECOVERING:
        state = reach(S.EXIT_SENT, limits=limits, **plan_over)
        assert state.deadline is not None
        return step(state, Timeout(now=state.deadline))[0]
    if target in (S.GIVING_UP, S.RETRY_RESTORE):  # every recovery timed out (recoveries=1 unless given)
        state = reach(S.RECOVERING, limits=limits or RestartLimits(recoveries=1), **plan_over)
        while state.step is S.RECOVERING:
            assert state.deadline is not None
            state = step(state, Timeout(now=state.deadline))[0]
        if target is S.RETRY_RESTORE:
            state = step(state, StepFailed(now=state.record.updated_at, step=S.GIVING_UP, reason="tmux down"))[0]
        assert state.step is target
        return state
    for at, event in PATH:
        if state.step is target:
            return state
        assert state.step is at
        state = step(state, event)[0]
    assert state.step is target
    return state


def run(state: Restart | RestartRecord, *events: Any) -> tuple[Restart, list[tuple[Effect, ...]]]:
    out = []
    for event in events:
        state, effects = step(state, event)
        out.append(effects)
    assert isinstance(state, Restart)
    return state, out


def record_at(state: Restart, **changes: Any) -> RestartRecord:
    return dataclasses.replace(state.record, **changes)


def persist(record: RestartRecord) -> Persist:
    return Persist(kind="restart", key=(RID,), record=record)


def notify(step_: str, *, outcome: str | None = None, incarnation: str | None = None, detail: str = "") -> Notify:
    payload = {"pane_id": PANE, "step": step_, "outcome": outcome, "incarnation": incarnation, "detail": detail}
    return Notify(topic="restart", key=(RID,), payload=payload)


def audit(action: str, outcome: str, at: float, detail: str = "") -> Audit:
    return Audit(actor="connectd", action=action, outcome=outcome, target=TARGET, detail=detail, at=at)


def touches_pane(effect: Effect) -> bool:
    return isinstance(effect, SetPaneOption | ExitAgent | Respawn)


# --------------------------------------------------------------------------------------------------
# The table is data
# --------------------------------------------------------------------------------------------------


def test_table_shape_every_state_reachable_and_only_finals_are_dead_ends() -> None:
    assert TABLE.name == "restart"
    assert TABLE.initial is S.PLANNED
    assert TABLE.finals == FINAL == {S.CLOSED, S.CANCELLED}
    seen, todo = {S.PLANNED}, deque([S.PLANNED])
    while todo:
        src = todo.popleft()
        for s, _event, dst in TABLE.edges:
            if s == src and dst not in seen:
                seen.add(dst)
                todo.append(dst)
    assert seen == set(S)
    sources = {s for s, _e, _d in TABLE.edges}
    assert sources == set(S) - FINAL


def test_every_persisted_step_has_the_whole_recovery_path() -> None:
    assert {S.PLANNED, S.WAITING_IDLE, S.CLOSED, S.CANCELLED}.isdisjoint(RECOVERABLE)
    assert len(RECOVERABLE) == 8
    for s in RECOVERABLE:
        assert TABLE.next(s, "timeout") is S.RECOVERING
        assert TABLE.next(s, "step_failed") is S.RECOVERING
        assert TABLE.next(s, "give_up") is S.GIVING_UP
        assert TABLE.next(s, "pane_dead") is S.PROCESS_ENDED
        # (exit_sent found live at startup waits for the exit it asked for, once: see the test below)
        assert TABLE.next(s, "pane_live") is (S.EXIT_SENT if s is S.EXIT_SENT else S.OPTION_RESTORED)
        assert TABLE.next(s, "pane_gone") is S.CLOSED


def test_step_sets_name_what_the_daemon_feeds() -> None:
    assert {S.WAITING_IDLE, S.RECHECKING_IDLE, S.EXIT_SENT, S.RESPAWNED} == OBSERVING
    assert {S.RECORD_PERSISTED, S.REMAIN_ON_EXIT_SET, S.PROCESS_ENDED, S.OPTION_RESTORED, S.GIVING_UP} == AWAITING_DONE
    assert ACTOR == "connectd"


def test_the_table_builds_a_transitions_machine_and_a_diagram() -> None:
    class Model:
        state: str

    model = Model()
    TABLE.as_transitions_machine(model)
    assert model.state == "planned"
    model.begin()  # type: ignore[attr-defined]
    assert model.state == "waiting_idle"
    text = mermaid(TABLE)
    assert "rechecking_idle" in text and "closed --> [*]" in text


# --------------------------------------------------------------------------------------------------
# Plans and limits: bad input names the problem
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("restart_id", "", "restart_id"),
        ("restart_id", 7, "restart_id"),
        ("incarnation", "", "incarnation"),
        ("harness", "", "harness"),
        ("session_id", "a\nb", "session_id"),
        ("launcher", "", "launcher"),
        ("exit_command", "", "exit_command"),
        ("exit_command", "/exit\r", "exit_command"),
        ("exit_command", "/exit\x9b", "exit_command"),
        ("exit_command", "\x1b[A", "exit_command"),
        ("exit_command", "/ex\x7fit", "exit_command"),
        ("pane_id", "3", "pane_id"),
        ("pane_id", "%03", "pane_id"),
        ("pane_id", "%3 ", "pane_id"),
        ("pane_id", 3, "pane_id"),
        ("original_remain_on_exit", "yes", "original_remain_on_exit"),
        ("original_remain_on_exit", "", "original_remain_on_exit"),
        ("resume_argv", (), "resume_argv"),
        ("resume_argv", ["claude"], "resume_argv"),
        ("resume_argv", ("claude", 1), "resume_argv"),
        ("resume_argv", ("", "--resume"), "resume_argv"),
        ("cwd", "project", "cwd"),
        ("cwd", "", "cwd"),
        ("cwd", None, "cwd"),
        ("env", {"1BAD": "x"}, "'1BAD'"),
        ("env", {"A-B": "x"}, "'A-B'"),
        ("env", {"A": 1}, "env value of A"),
        ("env", {"A": "x\x00y"}, "env value of A"),
    ],
)
def test_a_malformed_plan_is_refused_naming_the_field(field: str, value: Any, words: str) -> None:
    with pytest.raises(RestartError, match=words.replace("[", r"\[")):
        plan(**{field: value})


@pytest.mark.parametrize("value", [None, "on", "off", "failed"])
def test_each_remain_on_exit_value_is_accepted(value: str | None) -> None:
    assert plan(original_remain_on_exit=value).original_remain_on_exit == value


def test_a_plan_at_its_bounds_is_accepted() -> None:
    p = plan(pane_id="%0", env={}, resume_argv=("codex",), cwd="/")
    assert plan_restart(p).record.env_names == ()
    assert plan(pane_id="%1234567890", env={"_x9": ""}).pane_id == "%1234567890"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("idle_wait", 0),
        ("idle_wait", -1.0),
        ("step", 0.0),
        ("exit", True),
        ("respawn", "30"),
        ("recoveries", 0),
        ("recoveries", 1.5),
        ("recoveries", True),
    ],
)
def test_bad_limits_are_refused_naming_the_limit(field: str, value: Any) -> None:
    with pytest.raises(RestartError, match=f"restart limit {field} must be"):
        RestartLimits(**{field: value})


def test_limits_defaults_and_small_positive_values() -> None:
    assert RestartLimits(idle_wait=600.0, step=10.0, exit=20.0, respawn=30.0, recoveries=3) == LIMITS
    assert RestartLimits(idle_wait=0.001, step=1, exit=1, respawn=1, recoveries=1).recoveries == 1


def test_planning_keeps_env_values_out_of_the_record() -> None:
    state = plan_restart(plan(original_remain_on_exit="off"))
    assert state.step is S.PLANNED and not state.final
    assert state.limits == LIMITS
    assert state.deadline is None
    assert state.record == RestartRecord(
        restart_id=RID,
        pane_id=PANE,
        incarnation=INC,
        original_remain_on_exit="off",
        harness="claude",
        session_id="sess-1",
        launcher="claude-work",
        exit_command="/exit",
        resume_argv=ARGV,
        cwd=CWD,
        env_names=("CLAUDE_CONFIG_DIR", "CONNECT_TOKEN"),
        step=S.PLANNED,
        updated_at=0.0,
        attempts=0,
        outcome=None,
        new_incarnation=None,
    )
    assert state.env == (("CLAUDE_CONFIG_DIR", "/home/u/.claude-work"), ("CONNECT_TOKEN", TOKEN))
    assert TOKEN not in repr(state.record) and TOKEN not in repr(state) and TOKEN not in repr(plan())
    assert state.record.open
    custom = RestartLimits(idle_wait=5.0)
    assert plan_restart(plan(), custom).limits is custom


# --------------------------------------------------------------------------------------------------
# The normal path, effect by effect
# --------------------------------------------------------------------------------------------------


def test_the_whole_restart_effect_by_effect() -> None:
    state = plan_restart(plan(original_remain_on_exit="off"))
    state, out = run(state, *(event for _s, event in PATH))
    assert state.step is S.CLOSED and state.final and not state.record.open
    assert state.record.outcome is RestartOutcome.RESTARTED
    assert state.record.new_incarnation == NEW
    assert state.deadline is None
    base = plan_restart(plan(original_remain_on_exit="off")).record

    def rec(step_: RestartStep, at: float, **changes: Any) -> RestartRecord:
        return dataclasses.replace(base, step=step_, updated_at=at, **changes)

    observe = ObservePane(PANE, RID)
    assert out == [
        (audit("restart.begin", "waiting_idle", 100.0), notify("waiting_idle"), observe),
        (persist(rec(S.RECORD_PERSISTED, 101.0)), notify("record_persisted")),
        (SetPaneOption(PANE, "remain-on-exit", "on"), notify("remain_on_exit_set")),
        (notify("rechecking_idle"), observe),
        (
            persist(rec(S.EXIT_SENT, 104.0, exit_typed=True)),
            ExitAgent(PANE, "/exit"),
            audit("restart.exit", "exit_sent", 104.0),
            notify("exit_sent"),
            observe,
        ),
        (
            persist(rec(S.PROCESS_ENDED, 105.0)),
            Respawn(PANE, ARGV, CWD, ENV),
            audit("restart.respawn", "process_ended", 105.0),
            notify("process_ended"),
        ),
        (notify("respawned"), observe),
        (
            persist(rec(S.OPTION_RESTORED, 107.0, outcome=RestartOutcome.RESTARTED, new_incarnation=NEW)),
            SetPaneOption(PANE, "remain-on-exit", "off"),
            notify("option_restored", outcome="restarted", incarnation=NEW),
        ),
        (
            persist(rec(S.CLOSED, 108.0, outcome=RestartOutcome.RESTARTED, new_incarnation=NEW)),
            audit("restart.close", "restarted", 108.0),
            notify("closed", outcome="restarted", incarnation=NEW),
        ),
    ]


def test_persist_comes_before_the_first_effect_that_touches_the_pane() -> None:
    _state, out = run(plan_restart(plan()), *(event for _s, event in PATH))
    flat = [effect for effects in out for effect in effects]
    first_touch = next(i for i, e in enumerate(flat) if touches_pane(e))
    assert any(isinstance(e, Persist) for e in flat[:first_touch])


def test_an_unset_option_is_restored_as_unset() -> None:
    state = reach(S.RESPAWNED)  # plan() leaves remain-on-exit unset
    _state, (effects,) = run(state, obs(107.0, incarnation=NEW))
    assert SetPaneOption(PANE, "remain-on-exit", None) in effects


@pytest.mark.parametrize(
    ("target", "deadline"),
    [
        (S.WAITING_IDLE, 700.0),  # Begin at 100 + idle_wait 600
        (S.RECORD_PERSISTED, 111.0),  # 101 + step
        (S.REMAIN_ON_EXIT_SET, 112.0),  # 102 + step
        (S.RECHECKING_IDLE, 700.0),  # still the idle deadline
        (S.EXIT_SENT, 124.0),  # 104 + exit
        (S.PROCESS_ENDED, 115.0),  # 105 + step
        (S.RESPAWNED, 136.0),  # 106 + respawn
        (S.OPTION_RESTORED, 117.0),  # 107 + step
        (S.RECOVERING, 134.0),  # timeout at 124 + step
    ],
)
def test_each_step_sets_its_deadline(target: RestartStep, deadline: float) -> None:
    state = reach(target)
    assert state.deadline == deadline
    assert state.idle_deadline == 700.0


def test_the_recheck_gets_at_least_one_step_interval_when_the_idle_deadline_is_near() -> None:
    state = reach(S.REMAIN_ON_EXIT_SET, limits=RestartLimits(idle_wait=2.5))  # idle deadline 102.5
    state, _ = run(state, StepDone(now=103.0, step=S.REMAIN_ON_EXIT_SET))
    assert state.step is S.RECHECKING_IDLE
    assert state.deadline == 113.0


# --------------------------------------------------------------------------------------------------
# R1: never mid-turn, never over a draft
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "busy",
    [
        {"idle": False},  # mid-turn
        {"composer_empty": False},  # an unsent draft
        {"idle": False, "composer_empty": False},
    ],
)
@pytest.mark.parametrize("target", [S.WAITING_IDLE, S.RECHECKING_IDLE])
def test_busy_or_a_draft_keeps_waiting_and_touches_nothing(target: RestartStep, busy: dict[str, bool]) -> None:
    state = reach(target)
    after, effects = step(state, obs(150.0, **busy))
    assert after is state and effects == ()
    later, effects = step(after, obs(151.0))
    assert later.step is TABLE.next(target, "idle")
    assert effects


def test_idle_in_waiting_only_persists_the_record() -> None:
    state, (effects,) = run(reach(S.WAITING_IDLE), obs(101.0))
    assert state.step is S.RECORD_PERSISTED
    assert not any(touches_pane(e) for e in effects)


def test_the_exit_command_is_sent_only_on_the_fresh_recheck() -> None:
    state = reach(S.REMAIN_ON_EXIT_SET)
    with pytest.raises(TransitionNotAllowed):
        step(state, obs(102.5))  # an observation before the option is confirmed set is not the recheck
    state, (effects,) = run(state, StepDone(now=103.0, step=S.REMAIN_ON_EXIT_SET))
    assert not any(isinstance(e, ExitAgent) for e in effects)
    with pytest.raises(RestartError, match="stale observation taken at 102.9, before step rechecking_idle began at 103.0"):
        step(state, obs(102.9))
    state, (effects,) = run(state, obs(103.0))  # taken at the very moment the step began: fresh
    assert ExitAgent(PANE, "/exit") in effects


@pytest.mark.parametrize("target", sorted(OBSERVING))
def test_an_observation_of_another_pane_is_refused(target: RestartStep) -> None:
    state = reach(target)
    with pytest.raises(RestartError, match=f"restart {RID} is for pane %3, not %4"):
        step(state, obs(200.0, pane_id="%4"))


@pytest.mark.parametrize(
    "changed",
    [{"incarnation": "inc-other"}, {"agent_running": False}, {"pane_dead": True, "agent_running": False}],
)
def test_waiting_ends_untouched_when_the_planned_agent_is_gone(changed: dict[str, Any]) -> None:
    state, (effects,) = run(reach(S.WAITING_IDLE), obs(150.0, **changed))
    assert state.step is S.CANCELLED and state.final
    assert state.record.outcome is RestartOutcome.CANCELLED
    detail = "the planned agent no longer runs in the pane"
    assert effects == (
        audit("restart.cancel", "cancelled", 150.0, detail),
        notify("cancelled", outcome="cancelled", detail=detail),
    )


@pytest.mark.parametrize(
    "changed",
    [{"incarnation": "inc-other"}, {"agent_running": False}, {"pane_dead": True, "agent_running": False}],
)
def test_the_agent_changing_at_the_recheck_takes_the_recovery_path(changed: dict[str, Any]) -> None:
    state, (effects,) = run(reach(S.RECHECKING_IDLE), obs(150.0, **changed))
    assert state.step is S.RECOVERING
    assert state.record.attempts == 1
    detail = "the planned agent no longer runs in the pane (step rechecking_idle)"
    assert effects == (
        audit("restart.recover", "recovering", 150.0, detail),
        notify("recovering", detail=detail),
        InspectPane(PANE, RID),
    )


# --------------------------------------------------------------------------------------------------
# Before anything is persisted: cancel, timeout, unreadable pane
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("target", [S.PLANNED, S.WAITING_IDLE])
def test_the_owner_can_cancel_before_anything_is_touched(target: RestartStep) -> None:
    state, (effects,) = run(reach(target), Cancel(now=120.0))
    assert state.step is S.CANCELLED
    assert effects == (
        audit("restart.cancel", "cancelled", 120.0, "cancelled by the owner"),
        notify("cancelled", outcome="cancelled", detail="cancelled by the owner"),
    )
    _state, (effects,) = run(reach(target), Cancel(now=120.0, reason="grant revoked"))
    assert effects[0] == audit("restart.cancel", "cancelled", 120.0, "grant revoked")


@pytest.mark.parametrize("target", sorted(RECOVERABLE - {S.RECHECKING_IDLE}))
def test_cancel_once_the_restart_is_under_way_is_not_allowed(target: RestartStep) -> None:
    with pytest.raises(TransitionNotAllowed):
        step(reach(target), Cancel(now=500.0))


def test_cancel_while_rechecking_restores_the_option_through_recovery() -> None:
    state, out = run(
        reach(S.RECHECKING_IDLE),
        Cancel(now=150.0, reason="grant revoked"),
        Recover(now=151.0, condition=PaneCondition.LIVE),
        StepDone(now=152.0, step=S.OPTION_RESTORED),
    )
    detail = "cancelled in step rechecking_idle: grant revoked"
    assert out[0] == (
        audit("restart.recover", "recovering", 150.0, detail),
        notify("recovering", detail=detail),
        InspectPane(PANE, RID),
    )
    assert SetPaneOption(PANE, "remain-on-exit", None) in out[1]
    assert state.step is S.CLOSED and state.record.outcome is RestartOutcome.LEFT_ALONE


def test_waiting_times_out_untouched() -> None:
    state = reach(S.WAITING_IDLE)
    with pytest.raises(RestartError, match=r"timeout at 699.0 before the deadline 700.0 of step waiting_idle"):
        step(state, Timeout(now=699.0))
    state, (effects,) = run(state, Timeout(now=700.0))
    assert state.step is S.CANCELLED
    detail = "the agent was not idle with an empty composer within 600s"
    assert effects == (
        audit("restart.cancel", "cancelled", 700.0, detail),
        notify("cancelled", outcome="cancelled", detail=detail),
    )


def test_an_unreadable_pane_while_waiting_ends_untouched() -> None:
    state, (effects,) = run(reach(S.WAITING_IDLE), StepFailed(now=130.0, step=S.WAITING_IDLE, reason="no pane"))
    assert state.step is S.CANCELLED
    assert effects[0] == audit("restart.cancel", "cancelled", 130.0, "the pane could not be observed: no pane")


# --------------------------------------------------------------------------------------------------
# The exit and the respawn
# --------------------------------------------------------------------------------------------------


def test_after_the_exit_a_running_agent_is_waited_for() -> None:
    state = reach(S.EXIT_SENT)
    for quiet in (obs(110.0), obs(111.0, idle=False), obs(112.0, agent_running=False)):
        after, effects = step(state, quiet)
        assert after is state and effects == ()


def test_another_incarnation_after_the_exit_takes_the_recovery_path() -> None:
    state, (effects,) = run(reach(S.EXIT_SENT), obs(110.0, incarnation="inc-other"))
    assert state.step is S.RECOVERING
    assert effects[0] == audit(
        "restart.recover", "recovering", 110.0, "the planned agent no longer runs in the pane (step exit_sent)"
    )


def test_the_respawn_waits_for_a_new_incarnation_running() -> None:
    state = reach(S.RESPAWNED)
    for quiet in (
        obs(110.0, incarnation=NEW, agent_running=False),  # something runs, not yet the agent
        obs(111.0),  # a read of the old incarnation: not the respawned agent
    ):
        after, effects = step(state, quiet)
        assert after is state and effects == ()
    state, (effects,) = run(state, obs(112.0, incarnation=NEW, idle=False, composer_empty=False))
    assert state.step is S.OPTION_RESTORED
    assert state.record.new_incarnation == NEW


def test_a_respawned_process_that_dies_takes_the_recovery_path() -> None:
    state, (effects,) = run(reach(S.RESPAWNED), dead(110.0))
    assert state.step is S.RECOVERING
    assert effects == (
        audit("restart.recover", "recovering", 110.0, "the respawned process exited"),
        notify("recovering", detail="the respawned process exited"),
        InspectPane(PANE, RID),
    )


# --------------------------------------------------------------------------------------------------
# Timeouts and failed steps after the record is persisted: the recovery path
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("target", sorted(RECOVERABLE))
def test_a_timeout_in_any_persisted_step_takes_the_recovery_path(target: RestartStep) -> None:
    state = reach(target)
    assert state.deadline is not None
    with pytest.raises(RestartError, match="before the deadline"):
        step(state, Timeout(now=state.deadline - 0.5))
    after, effects = step(state, Timeout(now=state.deadline))
    assert after.step is S.RECOVERING
    assert after.record.attempts == state.record.attempts + 1
    assert after.deadline == state.deadline + 10.0
    detail = f"step {target} timed out"
    rec = state.record
    outcome = None if rec.outcome is None else str(rec.outcome)
    assert effects == (
        audit("restart.recover", "recovering", state.deadline, detail),
        notify("recovering", outcome=outcome, incarnation=rec.new_incarnation, detail=detail),
        InspectPane(PANE, RID),
    )
    assert not any(touches_pane(e) for e in effects)


@pytest.mark.parametrize("target", sorted(RECOVERABLE))
def test_a_failed_step_in_any_persisted_step_takes_the_recovery_path(target: RestartStep) -> None:
    state = reach(target)
    after, effects = step(state, StepFailed(now=150.0, step=target, reason="tmux said no"))
    assert after.step is S.RECOVERING
    assert effects[0] == audit("restart.recover", "recovering", 150.0, f"step {target} failed: tmux said no")


@pytest.mark.parametrize("target", sorted(AWAITING_DONE))
def test_a_confirmation_or_failure_of_another_step_is_refused(target: RestartStep) -> None:
    state = reach(target)
    other = S.EXIT_SENT
    with pytest.raises(RestartError, match=f"StepDone for step exit_sent arrived in step {target}"):
        step(state, StepDone(now=150.0, step=other))
    with pytest.raises(RestartError, match=f"StepFailed for step exit_sent arrived in step {target}"):
        step(state, StepFailed(now=150.0, step=other, reason="x"))


RESTORE = "tmux set-option -p -u -t %3 remain-on-exit"


def test_recovery_past_the_limit_gives_up_the_restart_but_not_the_option() -> None:
    """R5 (seed 4030): past limits.recoveries the machine stops respawning and puts the pane's own
    remain-on-exit back; the record closes ``gave_up`` only once the option is restored."""
    limits = RestartLimits(recoveries=2)
    state = reach(S.RECOVERING, limits=limits)  # first entry
    assert state.record.attempts == 1
    state, _ = run(state, Timeout(now=134.0))  # the inspection went unanswered: second entry
    assert state.step is S.RECOVERING and state.record.attempts == 2
    state, (effects,) = run(state, Timeout(now=144.0))
    assert state.step is S.GIVING_UP and state.record.outcome is RestartOutcome.GAVE_UP
    detail = "step recovering timed out; gave up after 2 recoveries; restoring remain-on-exit on %3"
    assert effects == (
        persist(record_at(state)),
        SetPaneOption(PANE, "remain-on-exit", None),
        audit("restart.give_up", "giving_up", 144.0, detail),
        notify("giving_up", outcome="gave_up", detail=detail),
    )
    assert state.deadline == 154.0
    state, (effects,) = run(state, StepDone(now=145.0, step=S.GIVING_UP))
    assert state.step is S.CLOSED and state.record.outcome is RestartOutcome.GAVE_UP
    closed = "gave up after 2 recoveries; remain-on-exit restored"
    assert effects == (
        persist(record_at(state)),
        audit("restart.close", "gave_up", 145.0, closed),
        notify("closed", outcome="gave_up", detail=closed),
    )


def test_a_failed_restore_after_giving_up_is_retried_until_it_lands() -> None:
    """Seed 4030: tmux failed through every recovery and the restore; the option stayed on and the
    agent's later exit left the pane dead. The machine now retries the restore every
    ``limits.retry_restore`` seconds, tells the person the command once, and closes when it lands."""
    limits = RestartLimits(recoveries=1, retry_restore=30.0)
    state = reach(S.EXIT_SENT, limits=limits)
    state, _ = run(state, StepFailed(now=121.0, step=S.EXIT_SENT, reason="tmux down"))
    state, _ = run(state, StepFailed(now=121.0, step=S.RECOVERING, reason="tmux down"))
    assert state.step is S.GIVING_UP
    state, (effects,) = run(state, StepFailed(now=121.0, step=S.GIVING_UP, reason="tmux down"))
    assert state.step is S.RETRY_RESTORE and state.deadline == 151.0 and not state.final
    told = f"remain-on-exit on %3 could not be restored (step giving_up failed: tmux down); retrying every 30s; or run: {RESTORE}"
    assert effects == (audit("restart.give_up", "retry_restore", 121.0, told), notify("retry_restore", outcome="gave_up", detail=told))
    for early in (Recover(now=150.0, condition=PaneCondition.LIVE), StepFailed(now=150.0, step=S.RETRY_RESTORE, reason="x")):
        with pytest.raises(RestartError, match="before the deadline"):
            step(state, early)
    with pytest.raises(TransitionNotAllowed):
        step(state, Timeout(now=151.0))  # its deadline asks for the pane's condition, not a timeout
    state, (effects,) = run(state, Recover(now=151.0, condition=PaneCondition.LIVE))
    assert state.step is S.GIVING_UP and effects == (SetPaneOption(PANE, "remain-on-exit", None),)
    state, (effects,) = run(state, StepFailed(now=151.0, step=S.GIVING_UP, reason="tmux down"))
    assert state.step is S.RETRY_RESTORE and effects == ()  # told once, not every 30 s
    state, (effects,) = run(state, StepFailed(now=181.0, step=S.RETRY_RESTORE, reason="tmux down"))
    assert state.step is S.RETRY_RESTORE and state.deadline == 211.0 and effects == ()  # could not inspect: wait again
    gone, _ = run(state, Recover(now=211.0, condition=PaneCondition.GONE))
    assert gone.step is S.CLOSED and gone.record.outcome is RestartOutcome.PANE_GONE  # nothing to restore
    state, _ = run(state, Recover(now=211.0, condition=PaneCondition.DEAD), StepDone(now=212.0, step=S.GIVING_UP))
    assert state.step is S.CLOSED and state.record.outcome is RestartOutcome.GAVE_UP


def test_a_record_found_giving_up_at_startup_restores_the_option_again() -> None:
    state = reach(S.EXIT_SENT, limits=RestartLimits(recoveries=1))
    state, out = run(state, Timeout(now=124.0), Timeout(now=134.0))
    assert state.step is S.GIVING_UP
    stored = next(e.record for e in out[-1] if isinstance(e, Persist))
    assert stored.step is S.GIVING_UP
    for condition in (PaneCondition.LIVE, PaneCondition.DEAD):
        after, effects = step(stored, Recover(now=200.0, condition=condition, env=ENV))
        assert after.step is S.GIVING_UP
        assert SetPaneOption(PANE, "remain-on-exit", None) in effects
        assert not any(isinstance(e, Respawn) for e in effects)  # it gave up respawning
    after, _ = step(stored, Recover(now=200.0, condition=PaneCondition.GONE))
    assert after.step is S.CLOSED and after.record.outcome is RestartOutcome.PANE_GONE


def test_giving_up_names_the_last_trouble() -> None:
    state = reach(S.RESPAWNED, limits=RestartLimits(recoveries=1))
    state = dataclasses.replace(state, record=record_at(state, attempts=1))
    after, (effects,) = run(state, dead(110.0))
    assert after.record.outcome is RestartOutcome.GAVE_UP
    assert effects[2].detail == "the respawned process exited; gave up after 1 recoveries; restoring remain-on-exit on %3"  # type: ignore[attr-defined]
    after, (effects,) = run(state, StepFailed(now=110.0, step=S.RESPAWNED, reason="gone"))
    assert effects[2].detail == "step respawned failed: gone; gave up after 1 recoveries; restoring remain-on-exit on %3"  # type: ignore[attr-defined]


def test_the_last_allowed_recovery_is_still_taken() -> None:
    state = reach(S.EXIT_SENT, limits=RestartLimits(recoveries=1))
    after, _ = step(state, Timeout(now=124.0))
    assert after.step is S.RECOVERING and after.record.attempts == 1


# --------------------------------------------------------------------------------------------------
# R4: recovery from every persisted step, in-process or from the record after a daemon restart
# --------------------------------------------------------------------------------------------------


def persisted_records() -> list[RestartRecord]:
    """Every record the normal path persists before it closes (what a crash can leave behind)."""
    _state, out = run(plan_restart(plan(original_remain_on_exit="on")), *(event for _s, event in PATH))
    return [e.record for effects in out for e in effects if isinstance(e, Persist) and e.record.open]


def test_the_normal_path_persists_at_each_step_that_touches_the_pane() -> None:
    assert [r.step for r in persisted_records()] == [
        S.RECORD_PERSISTED,
        S.EXIT_SENT,
        S.PROCESS_ENDED,
        S.OPTION_RESTORED,
    ]


@pytest.mark.parametrize("record", persisted_records(), ids=lambda r: str(r.step))
def test_after_a_daemon_restart_a_dead_pane_is_respawned_as_planned(record: RestartRecord) -> None:
    respawn_env = {"CONNECT_TOKEN": "new-secret", "CLAUDE_CONFIG_DIR": "/home/u/.claude-work"}
    state, out = run(
        record,
        Recover(now=500.0, condition=PaneCondition.DEAD, env=respawn_env),
        StepDone(now=501.0, step=S.PROCESS_ENDED),
        obs(502.0, incarnation="inc-3"),
        StepDone(now=503.0, step=S.OPTION_RESTORED),
    )
    # a respawn in flight forgets what an earlier run confirmed (the record at option_restored had one)
    # and an exit command typed is used up (the agent ended)
    respawning = dataclasses.replace(
        record, step=S.PROCESS_ENDED, updated_at=500.0, outcome=None, new_incarnation=None, exit_typed=False
    )
    assert out[0] == (
        persist(respawning),
        Respawn(PANE, ARGV, CWD, respawn_env),
        audit("restart.respawn", "process_ended", 500.0, "recovery: the pane was dead"),
        notify("process_ended", detail="recovery: the pane was dead"),
    )
    assert SetPaneOption(PANE, "remain-on-exit", "on") in out[2]
    assert state.step is S.CLOSED
    assert state.record.outcome is RestartOutcome.RESTARTED
    assert state.record.new_incarnation == "inc-3"
    assert "new-secret" not in repr(state.record)


@pytest.mark.parametrize(
    "record", [r for r in persisted_records() if r.step is not S.EXIT_SENT], ids=lambda r: str(r.step)
)  # (exit_sent, live: the agent asked to exit may be exiting; the test above)
def test_after_a_daemon_restart_a_live_agent_is_left_alone(record: RestartRecord) -> None:
    state, out = run(
        record,
        Recover(now=500.0, condition=PaneCondition.LIVE),
        StepDone(now=501.0, step=S.OPTION_RESTORED),
    )
    # an agent already confirmed restarted (the record at option_restored) stays restarted
    outcome = RestartOutcome.RESTARTED if record.step is S.OPTION_RESTORED else RestartOutcome.LEFT_ALONE
    left = dataclasses.replace(record, step=S.OPTION_RESTORED, updated_at=500.0, outcome=outcome)
    assert out[0] == (
        persist(left),
        SetPaneOption(PANE, "remain-on-exit", "on"),
        notify("option_restored", outcome=str(outcome), incarnation=record.new_incarnation),
    )
    assert not any(isinstance(e, Respawn | ExitAgent) for effects in out for e in effects)
    assert state.step is S.CLOSED
    assert state.record.outcome is outcome
    assert out[1] == (
        persist(dataclasses.replace(left, step=S.CLOSED, updated_at=501.0)),
        audit("restart.close", str(outcome), 501.0),
        notify("closed", outcome=str(outcome), incarnation=record.new_incarnation),
    )


@pytest.mark.parametrize("record", persisted_records(), ids=lambda r: str(r.step))
def test_after_a_daemon_restart_a_gone_pane_closes_the_record(record: RestartRecord) -> None:
    state, (effects,) = run(record, Recover(now=500.0, condition=PaneCondition.GONE))
    assert state.step is S.CLOSED and state.record.outcome is RestartOutcome.PANE_GONE
    detail = "the pane is gone; nothing to restore"
    assert effects == (
        persist(dataclasses.replace(record, step=S.CLOSED, updated_at=500.0, outcome=RestartOutcome.PANE_GONE)),
        audit("restart.close", "pane_gone", 500.0, detail),
        notify("closed", outcome="pane_gone", incarnation=record.new_incarnation, detail=detail),
    )


@pytest.mark.parametrize("target", sorted(RECOVERABLE))
@pytest.mark.parametrize("condition", list(PaneCondition))
def test_in_process_recovery_from_every_persisted_step(target: RestartStep, condition: PaneCondition) -> None:
    state = reach(target, original_remain_on_exit="failed")
    state, (effects,) = run(state, Recover(now=400.0, condition=condition))
    expected = {
        PaneCondition.DEAD: S.PROCESS_ENDED,
        PaneCondition.LIVE: S.EXIT_SENT if target is S.EXIT_SENT else S.OPTION_RESTORED,
        PaneCondition.GONE: S.CLOSED,
    }[condition]
    assert state.step is expected
    assert isinstance(effects[0], Persist)
    if condition is PaneCondition.DEAD:
        assert effects[1] == Respawn(PANE, ARGV, CWD, ENV)  # the plan's environment, held in memory
    if condition is PaneCondition.LIVE and target is S.EXIT_SENT:  # waits for the exit it asked for
        assert not [e for e in effects if isinstance(e, (SetPaneOption, ExitAgent, Respawn))]
    elif condition is PaneCondition.LIVE:
        assert effects[1] == SetPaneOption(PANE, "remain-on-exit", "failed")


def test_a_recovery_env_replaces_the_one_in_memory() -> None:
    _state, (effects,) = run(reach(S.RECOVERING), Recover(now=400.0, condition=PaneCondition.DEAD, env={"B": "2"}))
    assert effects[1] == Respawn(PANE, ARGV, CWD, {"B": "2"})


def test_a_dead_pane_from_a_record_needs_the_respawn_environment() -> None:
    record = persisted_records()[1]
    with pytest.raises(RestartError, match="respawning the dead pane needs the respawn environment"):
        step(record, Recover(now=500.0, condition=PaneCondition.DEAD))
    # a live or gone pane needs none
    assert record.step is S.EXIT_SENT
    assert step(record, Recover(now=500.0, condition=PaneCondition.LIVE))[0].step is S.EXIT_SENT  # waits
    assert step(record, Recover(now=500.0, condition=PaneCondition.GONE))[0].step is S.CLOSED


@pytest.mark.parametrize(
    "event",
    [
        Begin(now=500.0),
        StepDone(now=500.0, step=S.EXIT_SENT),
        Timeout(now=10_000.0),
        obs(500.0),
        Cancel(now=500.0),
    ],
)
def test_a_record_loaded_at_startup_only_takes_recover(event: Any) -> None:
    record = persisted_records()[1]
    expected = f"restart {RID}: a record loaded at startup only takes Recover, got {type(event).__name__}$"
    with pytest.raises(RestartError, match=expected):
        step(record, event)


def test_a_recovery_environment_is_kept_for_a_later_respawn() -> None:
    record = persisted_records()[1]
    env = {"CONNECT_TOKEN": "fresh"}
    state, _ = run(
        record,
        Recover(now=500.0, condition=PaneCondition.DEAD, env=env),
        StepFailed(now=501.0, step=S.PROCESS_ENDED, reason="respawn-pane failed"),
    )
    assert state.step is S.RECOVERING
    _state, (effects,) = run(state, Recover(now=502.0, condition=PaneCondition.DEAD))
    assert effects[1] == Respawn(PANE, ARGV, CWD, env)


def test_resume_keeps_given_limits_and_knows_no_env() -> None:
    record = persisted_records()[0]
    custom = RestartLimits(step=3.0)
    state = resume(record, custom)
    assert state.limits is custom and state.env is None and state.deadline is None
    assert state.record is record
    assert resume(record).limits == LIMITS
    after, _ = step(state, Recover(now=500.0, condition=PaneCondition.LIVE))
    assert after.deadline == 503.0


def test_a_closed_record_cannot_be_recovered_again() -> None:
    closed, _ = run(persisted_records()[0], Recover(now=500.0, condition=PaneCondition.GONE))
    with pytest.raises(TransitionNotAllowed):
        step(closed.record, Recover(now=600.0, condition=PaneCondition.LIVE))


# --------------------------------------------------------------------------------------------------
# Events the table does not allow are loud
# --------------------------------------------------------------------------------------------------

KINDS = ("begin", "cancel", "observed", "done", "failed", "timeout", "recover")
ALLOWED: dict[RestartStep, set[str]] = {
    S.PLANNED: {"begin", "cancel"},
    S.WAITING_IDLE: {"observed", "failed", "timeout", "cancel"},
    S.RECORD_PERSISTED: {"done", "failed", "timeout", "recover"},
    S.REMAIN_ON_EXIT_SET: {"done", "failed", "timeout", "recover"},
    S.RECHECKING_IDLE: {"observed", "failed", "timeout", "recover", "cancel"},
    S.EXIT_SENT: {"observed", "failed", "timeout", "recover"},
    S.PROCESS_ENDED: {"done", "failed", "timeout", "recover"},
    S.RESPAWNED: {"observed", "failed", "timeout", "recover"},
    S.OPTION_RESTORED: {"done", "failed", "timeout", "recover"},
    S.RECOVERING: {"failed", "timeout", "recover"},
    S.GIVING_UP: {"done", "failed", "timeout", "recover"},
    S.RETRY_RESTORE: {"failed", "recover"},
    S.CLOSED: set(),
    S.CANCELLED: set(),
}


def some_state(target: RestartStep) -> Restart:
    if target is S.CLOSED:
        return run(reach(S.OPTION_RESTORED), StepDone(now=108.0, step=S.OPTION_RESTORED))[0]
    if target is S.CANCELLED:
        return run(reach(S.WAITING_IDLE), Cancel(now=101.0))[0]
    return reach(target)


def event_of(kind: str, state: Restart) -> Any:
    now = 10_000.0
    return {
        "begin": Begin(now=now),
        "cancel": Cancel(now=now),
        "observed": obs(now),
        "done": StepDone(now=now, step=state.step),
        "failed": StepFailed(now=now, step=state.step, reason="x"),
        "timeout": Timeout(now=now),
        "recover": Recover(now=now, condition=PaneCondition.LIVE),
    }[kind]


@pytest.mark.parametrize("target", list(S))
@pytest.mark.parametrize("kind", KINDS)
def test_an_event_is_allowed_exactly_where_the_table_says(target: RestartStep, kind: str) -> None:
    state = some_state(target)
    event = event_of(kind, state)
    if kind in ALLOWED[target]:
        after, _effects = step(state, event)
        assert isinstance(after, Restart)
    else:
        with pytest.raises(TransitionNotAllowed) as caught:
            step(state, event)
        assert caught.value.machine == "restart" and caught.value.state == str(target)


def test_an_observation_outside_an_observing_step_names_the_event() -> None:
    with pytest.raises(TransitionNotAllowed) as caught:
        step(reach(S.RECORD_PERSISTED), obs(150.0))
    assert caught.value.event == "observed"


def test_every_transition_stamps_the_record_with_the_event_time() -> None:
    state = plan_restart(plan())
    for _at, event in PATH:
        state = step(state, event)[0]
        assert state.record.updated_at == event.now
    assert step(reach(S.EXIT_SENT), Timeout(now=124.0))[0].record.updated_at == 124.0
    assert step(reach(S.WAITING_IDLE), Cancel(now=120.0))[0].record.updated_at == 120.0


def test_a_foreign_value_is_not_a_restart_event() -> None:
    with pytest.raises(RestartError, match="not a restart event: 'begin'"):
        step(reach(S.PLANNED), "begin")  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------------
# Purity
# --------------------------------------------------------------------------------------------------


def test_the_same_state_and_event_give_the_same_answer_and_change_nothing() -> None:
    state = reach(S.EXIT_SENT)
    before = dataclasses.replace(state)
    first = step(state, dead(110.0))
    second = step(state, dead(110.0))
    assert first == second
    assert state == before and state.step is S.EXIT_SENT
    with pytest.raises(dataclasses.FrozenInstanceError):
        state.record.step = S.CLOSED  # type: ignore[misc]


def test_giving_up_tells_the_person_how_to_put_the_pane_s_own_option_back() -> None:
    """Claim (R5): the restore command names the pane and its original remain-on-exit, or unsets it
    when the pane had none (seed 4030: tmux failed through every recovery, the option stayed on)."""
    from connectcore.restart import restore_command

    unset = plan_restart(plan(), LIMITS).record
    assert restore_command(unset) == "tmux set-option -p -u -t %3 remain-on-exit"
    had = plan_restart(plan(original_remain_on_exit="failed"), LIMITS).record
    assert restore_command(had) == "tmux set-option -p -t %3 remain-on-exit failed"


def test_a_record_found_in_exit_sent_with_its_agent_running_waits_for_the_exit_then_leaves_it_alone() -> None:
    """Claim (R4's exception, issue 22 item 1): at startup, an exit_sent record whose agent still runs
    waits for it to end within the exit deadline, touching nothing (no second exit command, the option
    kept on so the pane survives the exit); it ending is respawned as planned; a timeout then recovers
    and leaves it alone with the option restored."""
    rec = dataclasses.replace(plan_restart(plan(), LIMITS).record, step=S.EXIT_SENT, updated_at=10.0)
    waiting, effects = step(rec, Recover(now=20.0, condition=PaneCondition.LIVE, env=ENV))
    assert waiting.step is S.EXIT_SENT and waiting.deadline == 20.0 + LIMITS.exit
    assert not [e for e in effects if isinstance(e, (ExitAgent, SetPaneOption, Respawn))]
    assert [e.detail for e in effects if isinstance(e, Audit)] == [
        "recovery: the agent was asked to exit and still runs; waiting for it to end"
    ]
    ended, effects = step(waiting, obs(25.0, agent_running=False, pane_dead=True))
    assert ended.step is S.PROCESS_ENDED and [e for e in effects if isinstance(e, Respawn)]
    recovering, _ = step(waiting, Timeout(now=20.0 + LIMITS.exit))
    alone, effects = step(recovering, Recover(now=45.0, condition=PaneCondition.LIVE, env=ENV))
    assert alone.step is S.OPTION_RESTORED and [e for e in effects if isinstance(e, SetPaneOption)]


def test_a_record_from_before_exit_typed_found_in_exit_sent_still_tells_when_left_alone() -> None:
    """Claim: a record persisted in exit_sent by a daemon that did not yet store ``exit_typed`` (the
    field missing: False) was still asked to exit, so leaving its agent alone says the exit command
    may be in the composer (issue 22.1)."""
    rec = dataclasses.replace(plan_restart(plan(), LIMITS).record, step=S.EXIT_SENT, updated_at=10.0)
    assert rec.exit_typed is False
    state, out = run(
        rec,
        Recover(now=20.0, condition=PaneCondition.LIVE, env=ENV),
        Timeout(now=20.0 + LIMITS.exit),
        Recover(now=45.0, condition=PaneCondition.LIVE, env=ENV),
        StepDone(now=46.0, step=S.OPTION_RESTORED),
    )
    assert state.step is S.CLOSED and state.record.outcome is RestartOutcome.LEFT_ALONE
    assert [e.detail for e in out[-1] if isinstance(e, Audit)] == [
        "the agent did not exit; its exit command '/exit' may be left in the composer"
    ]


def test_the_restartability_rule_refuses_in_order_and_names_each_reason() -> None:
    """Claim: restart-to-connect is refused, before anything is touched, for a preset with no scope,
    then a pane that is not live, then a pane connect did not launch (with the by-hand advice), then a
    launcher gone or unable to restart, then no single session to resume; else it may be planned
    (issue 24: was decided in connectd/agents/restart_to_connect.py)."""
    from dataclasses import replace as copy

    from connectcore import launchers as L
    from connectcore.restart import plan_refusal

    claude = L.builtin_launchers()["claude"]
    ok: dict[str, Any] = dict(
        scopes_given=True, pane_live=True, launched=True, launcher_name="claude", launcher=claude,
        session=("claude", "sess-1"),
    )
    assert plan_refusal("%3", **ok) is None

    def reason(**over: Any) -> tuple[str, str]:
        refusal = plan_refusal("%3", **{**ok, **over})
        assert refusal is not None
        return refusal.reason, refusal.problem

    assert reason(scopes_given=False, pane_live=False, launched=False)[0] == "bad_preset"
    assert reason(pane_live=False, launched=False) == ("unknown_target", "no live pane %3")
    hand = plan_refusal("%3", **{**ok, "launched": False}, read_harness="codex", bound_session="s-9")
    assert hand is not None and hand.reason == "not_restartable" and "not started by connectd" in hand.problem
    assert "codex" in hand.fix and "s-9" in hand.fix
    assert reason(launcher=None) == ("not_restartable", "launcher 'claude' is no longer configured")
    no_exit = copy(claude, exit_command=None)
    assert reason(launcher=no_exit) == ("not_restartable", no_exit.restart_refusal)
    assert reason(session=None)[0] == "ambiguous_binding"


def test_a_restart_resumes_in_the_launch_s_directory_else_the_pane_s() -> None:
    """Claim (issue 24: was ``launch.cwd or record.cwd`` in connectd/agents/restart_to_connect.py)."""
    from connectcore.restart import restart_cwd

    assert restart_cwd("/home/u/launched", "/home/u/now") == "/home/u/launched"
    assert restart_cwd("", "/home/u/now") == "/home/u/now"
    assert restart_cwd(None, "/home/u/now") == "/home/u/now"


@pytest.mark.parametrize(
    ("dead", "pane_pid", "start", "exited_here", "expected"),
    [
        (False, 100, 5, False, False),  # a live process of its own
        (True, 100, 5, False, True),  # tmux keeps it dead (remain-on-exit)
        (False, None, None, False, True),  # no process listed
        (False, 0, 5, False, True),
        (False, 100, None, False, True),  # no start time of its own: gone, or a reused pid
        (False, 100, 0, False, True),
        (False, 100, 5, True, True),  # a --here supervisor lives on, its agent exited
    ],
)
def test_a_dead_pane_is_one_rule_for_observing_and_recovery(
    dead: bool, pane_pid: int | None, start: int | None, exited_here: bool, expected: bool
) -> None:
    """Claim (issue 24: two definitions in connectd/agents/restart_to_connect.py, recovery's without
    the start time): the pane's agent process is dead to a restart by one rule."""
    from connectcore.restart import pane_dead

    assert pane_dead(dead=dead, pane_pid=pane_pid, process_start=start, agent_exited_here=exited_here) is expected
