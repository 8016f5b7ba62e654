"""Hub revocations: rules the 2026-12-06 (fourth) mutation run found unpinned (docs/quality.md names
the mutants each test kills)."""

from __future__ import annotations

import pytest

from connectcore import hub as H
from connectcore.effects import Audit
from connectcore.hub.revocations import revoke_pane_target
from connectcore.hub.state import UnknownItem
from tests.unit.hubkit import World


def test_revoking_a_pane_with_nothing_to_revoke_is_refused_naming_the_pane() -> None:
    """A pane with no connected agent and no open restart-to-connect: refused ``not_connected``, with
    words naming the pane (the shell shows them). Kills revoke_pane_target mutmut_15 (the words)."""
    w = World()
    with pytest.raises(UnknownItem) as refused:
        revoke_pane_target(w.hub, "%9", "inc-none")
    assert refused.value.reason == "not_connected"
    assert str(refused.value) == "%9 holds no connected agent and no open restart to connect it"


def test_a_pane_revoke_is_audited_as_the_one_who_revoked() -> None:
    """The revoke of a pane's connected agent is audited with the revoker as its actor (``by``), and the
    agent as its target. Kills ``_revoke``'s ``by`` -> None (_revoke_pane mutmut_14)."""
    w = World()
    a = w.launch("a")
    effects = w.step(H.RevokePane(w.now, a.pane, a.incarnation, by="person:desk"))
    revokes = [e for e in effects if isinstance(e, Audit) and e.action == "revoke"]
    assert [r.actor for r in revokes] == ["person:desk"]


def test_a_pane_revoke_with_a_principal_and_a_restart_reports_both_at_its_time() -> None:
    """A connected pane with an open restart: one revoke both revokes the principal and withdraws the
    restart, and its effects carry both records, at the revoke's time. Kills ``effects += more`` -> ``=``
    (_revoke_pane mutmut_31: the principal's revoke would go unrecorded)."""
    from connectcore.grants import Preset
    from tests.unit.test_hub_restarts import begin

    w = World()
    b = w.launch("b", Preset.OBSERVE, session=("claude", "sess-b"))
    begin(w, b)
    effects = w.step(H.RevokePane(w.now, b.pane, b.incarnation))
    audited = [(e.action, e.at) for e in effects if isinstance(e, Audit)]
    assert ("revoke", w.now) in audited
    assert ("restart.cancel", w.now) in audited
