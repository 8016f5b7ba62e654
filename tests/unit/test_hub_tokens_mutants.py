"""Hub tokens: rules the fourth mutation run (stop 34) found unpinned. Each test names the mutants of
connectcore.hub.tokens it kills (docs/survivors/hub_tokens.md has the verdicts)."""

from __future__ import annotations

import pytest

from connectcore import control as C
from connectcore import hub as H
from connectcore.grants import Preset
from tests.unit.hubkit import World


def test_a_control_session_resumed_while_another_control_runs_is_refused() -> None:
    """One control at a time, also for a resume: a control's session resumed (a launch not asked as
    control, which still runs as the control it resumes) while another control is live is refused
    ``control_running``, changing nothing. Kills _launch mutmut_3 (the launch's session not looked
    at: the resume let through, a second control live)."""
    w = World()
    first = w.launch("ctl", Preset.OFF, control=True, session=("claude", "s-ctl"))
    w.step(H.PaneGone(w.now, first.pane, first.incarnation))  # lost: none live now
    w.launch("ctl2", Preset.OFF, control=True)  # a new control may start
    before = w.hub
    with pytest.raises(C.ActRefused) as refused:
        w.launch("ctl-again", Preset.OFF, session=("claude", "s-ctl"))
    assert refused.value.reason == "control_running" and w.hub is before
