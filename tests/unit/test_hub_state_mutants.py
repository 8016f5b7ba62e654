"""hub.state: rules the 2026-12-06 (fourth) mutation run found unpinned (docs/survivors/hub_state.md
names the mutants each test kills)."""

from __future__ import annotations

import pytest

from connectcore import hub as H
from connectcore import restart as R

LIMITS = R.RestartLimits(idle_wait=60.0, step=5.0, exit=10.0, respawn=10.0)


def test_a_refused_restart_says_why_in_words_the_person_reads() -> None:
    """A RestartRefused carries the message the daemon passes on to the person (connectd's
    restart_to_connect raises it as its EngineError's text), besides its reason code (kills
    ``RestartRefused.__init__`` 1, ``super().__init__(None)``)."""
    planned = R.plan_restart(
        R.RestartPlan(
            restart_id="r-1", pane_id="%2", incarnation="inc-b", original_remain_on_exit=None, harness="claude",
            session_id="sess-b", launcher="claude", exit_command="/exit", resume_argv=("claude", "--resume", "sess-b"),
            cwd="/home/u/project", env={"CONNECT_TOKEN": "t"},
        ),
        LIMITS,
    )
    with pytest.raises(H.RestartRefused) as refused:
        H.step(H.Hub(), H.RestartPlanned(1000.0, planned, ("claude", "sess-b"), frozenset()))
    assert (refused.value.reason, str(refused.value)) == ("bad_preset", "restart-to-connect needs observe or collaborate")
