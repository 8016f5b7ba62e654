"""Hub revocations: rules the 2026-12-06 (fourth) mutation run found unpinned (docs/quality.md names
the mutants each test kills)."""

from __future__ import annotations

import pytest

from connectcore import hub as H
from connectcore.effects import Audit
from connectcore.federation import outbox as O
from connectcore.hub.revocations import revoke_pane_target
from connectcore.hub.state import UnknownItem
from tests.unit.hubkit import World
from tests.unit.test_hub_federation import NOW, A


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


# ------------------------------------------------------------------------------------- stop 34


def test_revoking_a_sender_cancels_what_it_sent_to_another_box_saying_why() -> None:
    """O7: a revoked sender's rows to another box are cancelled with the revoke's reason, the one the
    person's list and the other box are told. Kills _revoke mutmut_53, 54 (the reason's words)."""
    from tests.unit.test_hub_federation import _rows, submit

    w = World(hub=H.Hub(outbox=O.Outbox(own=A)), now=NOW)
    me = w.launch("me")
    submit(w, me, "m-1")  # published: cancelling
    w.step(H.Revoke(w.now, me.principal))
    assert _rows(w)["m-1"].cancel_reason == "the sender was revoked"


def _control_with_a_waiting_act() -> tuple[World, str]:
    from connectcore import control as C
    from tests.unit.test_hub_acts import propose
    from tests.unit.test_hub_acts import world as acts_world

    w, ctl, pure, _ = acts_world()
    w.now += 5.0
    return w, propose(w, ctl, C.Tool.CLOSE_PANE, pure)


def test_revoking_control_cancels_its_acts_at_the_revoke_s_time_saying_why() -> None:
    """Revoking control cancels the acts it asked for and that did not run, at the revoke's time and
    saying why (the act's record and its audit). Kills _revoke mutmut_69 (time None), 70 (reason
    None), 75, 76 (the reason's words)."""
    from connectcore import control as C

    w, act_id = _control_with_a_waiting_act()
    ctl = w.agents["ctl"]
    effects = w.step(H.Revoke(w.now, ctl.principal))
    act = w.hub.acts[act_id]
    assert (act.state, act.detail, act.final_at) == (C.ActState.CANCELLED, "control was revoked", w.now)
    audited = [e for e in effects if isinstance(e, Audit) and e.message_id == act_id]
    assert [(a.outcome, a.at) for a in audited] == [("cancelled", w.now)]
    assert audited[0].detail.endswith(" control was revoked")


def test_disconnect_all_cancels_control_s_acts_at_its_time_saying_why() -> None:
    """Disconnect all leaves control connected but cancels what it asked for and that did not run, at
    the disconnect's time and saying so. Kills _disconnect_all mutmut_31 (time None), 32 (reason
    None), 38, 39 (the reason's words)."""
    from connectcore import control as C

    w, act_id = _control_with_a_waiting_act()
    w.step(H.DisconnectAll(w.now))
    act = w.hub.acts[act_id]
    assert (act.state, act.detail, act.final_at) == (C.ActState.CANCELLED, "disconnect all", w.now)


def test_a_restart_of_an_agent_launched_off_is_withdrawn_at_the_revoke_s_time_or_by_disconnect_all() -> None:
    """An agent launched Off holds no principal while it is restarted to connect: a pane revoke
    withdraws the restart at the revoke's time; disconnect all withdraws it saying so. Kills
    _revoke_pane mutmut_23 (the withdrawal's time None) and _disconnect_all mutmut_18 (reason None), 24,
    25 (its words)."""
    from tests.unit.test_hub_restarts import audits, begin, unconnected_agent

    for how in ("revoke", "disconnect all"):
        w = World()
        b = unconnected_agent(w)
        begin(w, b)
        w.now += 7.0
        if how == "revoke":
            effects = w.step(H.RevokePane(w.now, b.pane, b.incarnation))
            why = "connect revoked while restarting"
        else:
            effects = w.step(H.DisconnectAll(w.now))
            why = "disconnect all while restarting"
        cancelled = audits(effects, "restart.cancel")
        assert [(a.detail, a.at) for a in cancelled] == [(why, w.now)], how
        assert "r-1" not in w.hub.restarts, how


def test_a_grant_set_while_restarting_withdraws_the_restart_saying_so() -> None:
    """A new grant for the session being restarted to connect withdraws the restart, the cancel's
    record saying why. Kills _set_grant mutmut_33, 34 (the reason's words)."""
    from tests.unit.test_hub_restarts import COLLABORATE, audits, begin, unconnected_agent

    w = World()
    b = unconnected_agent(w)
    begin(w, b, frozenset(COLLABORATE))
    w.now += 3.0
    effects = w.step(H.SetGrant(w.now, ("claude", "sess-b"), COLLABORATE))
    assert [(a.detail, a.at) for a in audits(effects, "restart.cancel")] == [("the grant changed while restarting", w.now)]


def test_a_grant_set_for_a_principal_withdraws_its_restart_resuming_another_session() -> None:
    """A grant set for a session reaches the restarts of its principal, not only those resuming that
    session: here the principal's pane is restarted to resume another session, and the principal's
    token is on the incarnation being restarted. Kills _set_grant mutmut_9, 13 (the members of the
    session's principal lost)."""
    from connectcore.grants import Preset
    from tests.unit.test_hub_restarts import COLLABORATE, plan

    w = World()
    b = w.launch("b", Preset.OBSERVE, session=("claude", "sess-b"))
    w.step(H.RestartPlanned(w.now, plan(b, session_id="sess-c"), ("claude", "sess-c"), COLLABORATE))
    assert "r-1" in w.hub.restarts
    w.step(H.SetGrant(w.now, ("claude", "sess-b"), COLLABORATE))
    assert "r-1" not in w.hub.restarts

