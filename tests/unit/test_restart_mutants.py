"""Restart-to-connect: rules the 2026-12-06 (second) mutation run found unpinned (docs/quality.md).

Each test states a rule of :mod:`connectcore.restart` that no other test held exactly; the mutants it
kills are named in docs/quality.md.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from connectcore import launchers as L
from connectcore.effects import SetPaneOption
from connectcore.restart import (
    ObservePane,
    PaneCondition,
    Recover,
    RestartError,
    RestartLimits,
    RestartOutcome,
    RestartStep,
    StepFailed,
    Timeout,
    moves,
    plan_refusal,
    plan_restart,
    step,
)
from tests.unit.test_restart import (
    ENV,
    LIMITS,
    NEW,
    PANE,
    RID,
    audit,
    dead,
    notify,
    obs,
    persist,
    plan,
    reach,
)

S = RestartStep


def test_only_an_observation_that_moves_the_machine_is_acted_on() -> None:
    """Claim (the shell's restarter asks :func:`moves` before it steps): busy, still running and still
    starting are the quiet self-loops; idle, ended, started, and another agent in the pane move; an
    observation that does not fit raises as :func:`step` would."""
    waiting = reach(S.WAITING_IDLE)
    assert not moves(waiting, obs(101.0, idle=False))  # mid-turn: keep waiting
    assert not moves(waiting, obs(101.0, composer_empty=False))  # a draft: keep waiting
    assert moves(waiting, obs(101.0))  # idle, empty composer: persist the record
    assert moves(waiting, obs(101.0, incarnation="other"))  # another agent: cancelled
    exiting = reach(S.EXIT_SENT)
    assert not moves(exiting, obs(106.0, idle=False))  # still running after its exit command
    assert moves(exiting, dead(106.0))
    respawned = reach(S.RESPAWNED)
    assert not moves(respawned, obs(108.0))  # the planned incarnation still shows: not yet started
    assert moves(respawned, obs(108.0, incarnation=NEW))
    with pytest.raises(RestartError, match="is for pane %3, not %4"):
        moves(waiting, obs(101.0, pane_id="%4"))
    with pytest.raises(RestartError, match="stale observation"):
        moves(exiting, obs(100.0))


def test_an_early_answer_while_retrying_the_restore_is_refused_by_its_name() -> None:
    """Claim (R5): in ``retry_restore`` neither the pane's condition nor a failed inspection may come
    before the step's deadline; the refusal names which answer came early and when."""
    state = reach(S.RETRY_RESTORE)
    assert state.deadline is not None
    early = state.deadline - 1.0
    with pytest.raises(RestartError, match=rf"Recover at {early} before the deadline {state.deadline} of step retry_restore"):
        step(state, Recover(now=early, condition=PaneCondition.LIVE))
    with pytest.raises(RestartError, match=rf"StepFailed at {early} before the deadline {state.deadline} of step retry_restore"):
        step(state, StepFailed(now=early, step=S.RETRY_RESTORE, reason="tmux down"))


def test_a_record_found_in_exit_sent_with_its_agent_running_records_the_wait_exactly() -> None:
    """Claim (R4's exception): at startup, an exit_sent record whose agent still runs is persisted
    again, audited ``restart.recover`` with outcome ``exit_sent`` and the reason, told to the owner,
    and the pane is watched for the exit; nothing touches the pane."""
    rec = dataclasses.replace(plan_restart(plan(), LIMITS).record, step=S.EXIT_SENT, updated_at=10.0)
    waiting, effects = step(rec, Recover(now=20.0, condition=PaneCondition.LIVE, env=ENV))
    detail = "recovery: the agent was asked to exit and still runs; waiting for it to end"
    assert waiting.record == dataclasses.replace(rec, updated_at=20.0, exit_typed=True)
    assert effects == (
        persist(waiting.record),
        audit("restart.recover", "exit_sent", 20.0, detail),
        notify("exit_sent", detail=detail),
        ObservePane(PANE, RID),
    )


def test_each_refusal_of_restart_to_connect_says_what_is_wrong() -> None:
    """Claim (restart.plan_refusal): the refusal's problem names what is wrong in words for the person:
    the preset's missing scope, the pane that connect did not start, the pane with no session."""
    ok: dict[str, Any] = dict(
        scopes_given=True, pane_live=True, launched=True, launcher_name="claude",
        launcher=L.builtin_launchers()["claude"], session=("claude", "sess-1"),
    )
    bad = plan_refusal("%7", **{**ok, "scopes_given": False})
    assert bad is not None and (bad.reason, bad.problem) == ("bad_preset", "restart-to-connect needs observe or collaborate")
    hand = plan_refusal("%7", **{**ok, "launched": False})
    assert hand is not None and hand.problem == "%7 was not started by connectd, so restart-to-connect cannot relaunch it"
    none = plan_refusal("%7", **{**ok, "session": None})
    assert none is not None and (none.reason, none.problem) == (
        "ambiguous_binding", "%7 holds no unambiguously bound session to resume"
    )


def test_giving_up_puts_back_the_pane_s_own_value_of_the_option() -> None:
    """Claim (R5, "no pane keeps the temporary option"): giving up restores the value the pane had
    before the restart (here ``off``), not tmux's default; so does each retry of that restore."""
    assert SetPaneOption(PANE, "remain-on-exit", "off") in given_up_effects(original_remain_on_exit="off")
    state = reach(S.RETRY_RESTORE, original_remain_on_exit="off")
    assert state.deadline is not None and state.record.outcome is RestartOutcome.GAVE_UP
    retried, effects = step(state, Recover(now=state.deadline, condition=PaneCondition.LIVE))
    assert retried.step is S.GIVING_UP and effects == (SetPaneOption(PANE, "remain-on-exit", "off"),)


def given_up_effects(**plan_over: Any) -> tuple[Any, ...]:
    """The effects of the step that gave up (recoveries=1: the second recovery gives up)."""
    state = reach(S.RECOVERING, limits=RestartLimits(recoveries=1), **plan_over)
    assert state.deadline is not None
    after, effects = step(state, Timeout(now=state.deadline))
    assert after.step is S.GIVING_UP
    return effects


def test_a_record_found_giving_up_at_startup_is_persisted_again_before_the_restore() -> None:
    """Claim (R2: persisted before every step that touches the pane): a record found at startup in
    ``giving_up`` is persisted with its new time, then the option restored; nothing else."""
    state = reach(S.GIVING_UP)
    stored = state.record
    for condition in (PaneCondition.LIVE, PaneCondition.DEAD):
        after, effects = step(stored, Recover(now=200.0, condition=condition))
        assert after.record == dataclasses.replace(stored, updated_at=200.0)
        assert effects == (persist(after.record), SetPaneOption(PANE, "remain-on-exit", None))


def test_waiting_to_retry_the_restore_stamps_the_record_with_the_failure_s_time() -> None:
    """Claim (RestartRecord.updated_at: the ``now`` of the event that entered ``step``): the failed
    restore that enters ``retry_restore`` stamps the record with its time, as every step does."""
    state = reach(S.GIVING_UP)
    after, _ = step(state, StepFailed(now=state.record.updated_at + 2.5, step=S.GIVING_UP, reason="tmux down"))
    assert after.step is S.RETRY_RESTORE and after.record.updated_at == state.record.updated_at + 2.5
