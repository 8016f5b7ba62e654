"""hub.acts: rules the 2026-12-06 (fourth) mutation run found unpinned (docs/survivors/hub_acts.md
names the mutants each test kills): the exact records, refusals and effects of control's acts."""

from __future__ import annotations

from typing import Any

import pytest

from connectcore import control as C
from connectcore import hub as H
from connectcore._machine import ConnectError
from connectcore.effects import Audit, CheckActGuard, Notify, OpenWindow, Persist
from connectcore.grants import Preset
from connectcore.hub import acts as hub_acts
from tests.unit.hubkit import Agent, World, actor
from tests.unit.test_hub_acts import QUESTION
from tests.unit.test_hub_acts import world as acts_world


def world() -> tuple[World, Agent, Agent, Agent]:
    """test_hub_acts's world, its clock at a time no default could be mistaken for."""
    w, ctl, pure, shell = acts_world()
    w.now = 1234.5
    return w, ctl, pure, shell


def proposal(w: World, caller: Agent, tool: C.Tool, target: Agent | None, question: Any = None,
             **args: Any) -> tuple[str, H.ActProposed]:
    act_id = w.fresh("act-")
    recipient = H.Recipient(target.pane, target.incarnation, target.harness) if target else None
    return act_id, H.ActProposed(w.now, caller.token, act_id, tool, recipient, args, question)


def propose(w: World, caller: Agent, tool: C.Tool, target: Agent | None, question: Any = None, **args: Any) -> str:
    act_id, event = proposal(w, caller, tool, target, question, **args)
    w.step(event)
    return act_id


def saved(act: C.Act) -> tuple[Persist, Notify]:
    return Persist("act", (act.id,), act), Notify("act", (act.id,), payload={"state": act.state.value})


def final_audit(w: World, ctl: Agent, act: C.Act, outcome: str, detail: str) -> Audit:
    target = f"{act.pane_id}@{act.incarnation}" if act.pane_id else "new window"
    return Audit(actor=actor(w, ctl), action=act.tool.value, outcome=outcome, scope="act", target=target,
                 message_id=act.id, detail=f"role=control tier={act.tier} {detail}", at=w.now)


def test_a_proposed_act_is_stored_persisted_notified_and_audited_exactly() -> None:
    """The step's effects are the act's row, its notification with its state, and its record (actor,
    tool, outcome, scope, target, act id, ``role=control tier=N`` and nothing after it, time); the card
    shows the keys in order, the pane's kind and the question; the act keeps the checked keys and no
    other argument (kills act_audit 1, 4, 5, 9, 11, 17, 19; _save 8, 14, 17-23; shown 5;
    _checked_args 32, 33; propose 19, 98, 108, 117-119)."""
    w, ctl, pure, _ = world()
    act_id, event = proposal(w, ctl, C.Tool.SEND_KEYS, pure, QUESTION, keys=["1", "Enter"])
    effects = w.step(event)
    act = w.hub.acts[act_id]
    target = f"{pure.pane}@{pure.incarnation}"
    assert act.shown == f"tier 2: press 1 Enter in codex pane {target}, answering: {C.question_text(QUESTION)!r}"
    assert dict(act.args) == {"keys": ["1", "Enter"]}
    assert act.question_fingerprint == C.question_fingerprint(*QUESTION)
    record = Audit(actor=actor(w, ctl), action="send_keys", outcome="awaiting_consent", scope="act", target=target,
                   message_id=act_id, detail="role=control tier=2", at=w.now)
    assert effects == (*saved(act), record)


def test_a_window_act_names_a_new_window_defaults_to_preset_off_and_keeps_no_fingerprint() -> None:
    """launch_agent without a preset launches Off (the argument is stored as checked); an act with no
    pane is recorded against "new window"; only send_keys keeps a question's fingerprint (kills
    _target_name 2, 3, 4; _checked_args 67, 69, 72, 73, 84, 85, 114)."""
    w, ctl, _, _ = world()
    act_id, event = proposal(w, ctl, C.Tool.LAUNCH_AGENT, None, launcher="codex", cwd="/src")
    effects = w.step(event)
    act = w.hub.acts[act_id]
    assert dict(act.args) == {"launcher": "codex", "cwd": "/src", "preset": "off"}
    assert act.question_fingerprint == ""
    assert act.shown == "tier 2: open a new window running codex in /src, connect off"
    record = effects[-1]
    assert isinstance(record, Audit) and record.target == "new window"
    w.step(H.ActDecided(w.now, act_id, True))
    assert w.step(H.ActGuarded(w.now, act_id, ""))[-1] == OpenWindow(act_id, "codex", "/src", "off")


def test_a_shell_text_act_keeps_the_checked_text_as_its_one_argument() -> None:
    """The act stores the text as checked (a string) under ``text`` and nothing else; that text is what
    is typed (kills _checked_args 48, 49)."""
    w, ctl, _, shell = world()
    act_id = propose(w, ctl, C.Tool.SHELL_TEXT, shell, text="git status --short")
    assert dict(w.hub.acts[act_id].args) == {"text": "git status --short"}


def test_the_card_of_a_pane_act_shows_the_pane_s_kind_and_a_handoff_the_session_it_reopens() -> None:
    """What the card shows, exactly: close_pane names the pane and its kind; a handoff to a pane names
    the pane; a handoff to a closed session names the harness, the session and where it reopens
    (kills shown 26, 28; propose 98, 106, 107, 108)."""
    w, ctl, pure, _ = world()
    target = f"{pure.pane}@{pure.incarnation}"
    close = propose(w, ctl, C.Tool.CLOSE_PANE, pure)
    assert w.hub.acts[close].shown == f"tier 3: close pane {target} (codex); its process ends"
    to_pane = propose(w, ctl, C.Tool.HANDOFF, pure, text="pick up PR 12")
    assert w.hub.acts[to_pane].shown == f"tier 2: hand off to pane {target}; control then sends it: pick up PR 12"
    to_session = propose(w, ctl, C.Tool.HANDOFF, None, harness="claude", session_id="s-1", cwd="/src/a", text="go on")
    assert w.hub.acts[to_session].shown == (
        "tier 2: hand off to claude session s-1 (reopened in /src/a); control then sends it: go on")


@pytest.mark.parametrize(
    ("tool", "target", "args", "reason", "message"),
    [
        (C.Tool.CLOSE_PANE, None, {}, "no_target", "close_pane needs a pane"),
        (C.Tool.CLOSE_PANE, "ctl", {}, "self", "control cannot close_pane its own pane"),
        (C.Tool.SHELL_TEXT, "shell", {}, "empty_text", "shell_text needs a command"),  # no text: no command
        (C.Tool.LAUNCH_AGENT, None, {"launcher": "claude", "cwd": "/", "preset": "root"}, "bad_preset",
         "no preset 'root' (off, observe, collaborate)"),
        (C.Tool.HANDOFF, "pure", {}, "empty_text", "text is empty"),  # no text: nothing to hand off
        (C.Tool.HANDOFF, "shell", {"text": "take over"}, "not_an_agent",
         "handoff reaches agent panes only, not a shell pane"),
    ],
)
def test_a_refused_act_says_why_and_its_record_names_the_call(
    tool: C.Tool, target: str | None, args: dict[str, Any], reason: str, message: str
) -> None:
    """A refusal's reason and message, and its one record: control's actor, the tool, "refused", the
    act scope, the target (a pane, or "new window"), the act id, ``role=control tier=N <reason>``, the
    time (kills _checked_args 17, 24, 56, 58, 61, 75, 80-82, 94, 96, 99, 101, 104, 109; propose 4, 5,
    19, 37, 38, 40-42, 44, 48-50, 52, 57, 62)."""
    w, ctl, pure, shell = world()
    agent = {"pure": pure, "shell": shell, "ctl": ctl}[target] if target else None
    act_id, event = proposal(w, ctl, tool, agent, **args)
    with pytest.raises(H.CallRefused) as refused:
        w.step(event)
    assert (refused.value.reason, str(refused.value)) == (reason, message)
    assert refused.value.audit == Audit(
        actor=actor(w, ctl), action=tool.value, outcome="refused", scope="act",
        target=f"{agent.pane}@{agent.incarnation}" if agent else "new window", message_id=act_id,
        detail=f"role=control tier={C.tier_of(tool)} {reason}", at=w.now,
    )
    assert act_id not in w.hub.acts


@pytest.mark.parametrize("tool", [C.Tool.CLOSE_PANE, C.Tool.LAUNCH_AGENT])
def test_the_gate_s_refusal_of_an_agent_without_act_names_the_tool_the_target_and_the_time(tool: C.Tool) -> None:
    """An agent without the act scope is refused at the gate; its record names the tool, the target
    (the pane, or "new window") and the time (kills propose 4, 5, 10, 11, 12, 18)."""
    w, _, pure, _ = world()
    collab = w.launch("collab", Preset.COLLABORATE)
    target = pure if tool is C.Tool.CLOSE_PANE else None
    args = {} if target else {"launcher": "claude", "cwd": "/", "preset": "off"}
    _, event = proposal(w, collab, tool, target, **args)
    with pytest.raises(H.CallRefused) as refused:
        w.step(event)
    assert refused.value.audit == Audit(
        actor=actor(w, collab), action=tool.value, outcome="refused", scope="act",
        target=f"{pure.pane}@{pure.incarnation}" if target else "new window", detail=refused.value.reason, at=w.now,
    )


def test_an_act_id_is_used_once() -> None:
    """A second proposal with an act id already used is an error that names the id (kills propose 28)."""
    w, ctl, pure, _ = world()
    act_id = propose(w, ctl, C.Tool.CLOSE_PANE, pure)
    again = H.ActProposed(w.now, ctl.token, act_id, C.Tool.CLOSE_PANE, H.Recipient(pure.pane, pure.incarnation, "codex"), {})
    with pytest.raises(ConnectError) as error:
        w.step(again)
    assert str(error.value) == f"act id {act_id} was already used"


def test_answering_an_unknown_act_or_a_closed_card_is_refused_with_its_reason() -> None:
    """(kills decide 4-9, 11, 12, 15, 16)"""
    w, ctl, pure, _ = world()
    with pytest.raises(H.UnknownItem) as unknown:
        w.step(H.ActDecided(w.now, "act-none", True))
    assert (unknown.value.reason, str(unknown.value)) == ("unknown_act", "no act act-none")
    act_id = propose(w, ctl, C.Tool.CLOSE_PANE, pure)
    w.step(H.ActDecided(w.now, act_id, False))
    with pytest.raises(H.UnknownItem) as closed:
        w.step(H.ActDecided(w.now, act_id, True))
    assert (closed.value.reason, str(closed.value)) == ("card_closed", f"act {act_id} was already answered (declined)")


@pytest.mark.parametrize("approve", [True, False])
def test_the_person_s_answer_is_recorded_then_the_act_is_guarded_or_ends_declined(approve: bool) -> None:
    """The consent record names who answered, approved or declined, the act scope, control as the
    target, the act, its tier, tool and pane, and the time; approved, the act is saved and its guard
    asked for; declined, it ends at once, "declined by the person", audited (kills decide 17-25, 29-41,
    52, 53, 61, 62)."""
    w, ctl, pure, _ = world()
    act_id = propose(w, ctl, C.Tool.CLOSE_PANE, pure)
    w.now += 5
    effects = w.step(H.ActDecided(w.now, act_id, approve, by="owner:web"))
    act = w.hub.acts[act_id]
    target = f"{pure.pane}@{pure.incarnation}"
    consent = Audit(actor="owner:web", action="consent", outcome="approved" if approve else "declined", scope="act",
                    target=actor(w, ctl), message_id=act_id, detail=f"tier=3 close_pane on {target}", at=w.now)
    if approve:
        assert act.state is C.ActState.GUARDING
        assert effects == (consent, *saved(act), CheckActGuard(act_id, pure.pane, pure.incarnation))
    else:
        assert (act.state, act.detail, act.final_at) == (C.ActState.DECLINED, "declined by the person", w.now)
        assert effects == (consent, *saved(act), final_audit(w, ctl, act, "declined", "declined by the person"))


@pytest.mark.parametrize(
    ("tool", "reading", "state", "detail"),
    [
        (C.Tool.CLOSE_PANE, {"incarnation": "inc-other"}, C.ActState.CANCELLED,
         "the pane's process is not the one the card showed"),
        (C.Tool.SEND_KEYS, {"question": ("Another question?", ("1. Yes",), (), 0)}, C.ActState.STALE,
         "the pane no longer shows the question the card showed"),
        (C.Tool.SHELL_TEXT, {"at_empty_prompt": False}, C.ActState.STALE,
         "the shell is not at an empty prompt in the foreground"),
    ],
)
def test_a_guard_that_fails_ends_the_act_with_why_at_the_guard_s_time(
    tool: C.Tool, reading: dict[str, Any], state: C.ActState, detail: str
) -> None:
    """(kills guarded 42, 43, 49, 50, 54-61, 65, 66)"""
    w, ctl, pure, shell = world()
    target = shell if tool is C.Tool.SHELL_TEXT else pure
    args: dict[str, Any] = {"keys": ["1"]} if tool is C.Tool.SEND_KEYS else {"text": "ls"} if tool is C.Tool.SHELL_TEXT else {}
    act_id = propose(w, ctl, tool, target, QUESTION if tool is C.Tool.SEND_KEYS else None, **args)
    w.step(H.ActDecided(w.now, act_id, True))
    w.now += 3
    seen = {"incarnation": target.incarnation, "question": QUESTION, "at_empty_prompt": True, **reading}
    effects = w.step(H.ActGuarded(w.now, act_id, **seen))
    act = w.hub.acts[act_id]
    assert (act.state, act.detail, act.final_at) == (state, detail, w.now)
    assert effects == (*saved(act), final_audit(w, ctl, act, state.value, detail))


def test_an_act_whose_guard_passed_is_recorded_as_executing() -> None:
    """(kills guarded 76, 80, 81, 82)"""
    w, ctl, pure, _ = world()
    act_id = propose(w, ctl, C.Tool.CLOSE_PANE, pure)
    w.step(H.ActDecided(w.now, act_id, True))
    w.step(H.ActGuarded(w.now, act_id, pure.incarnation))
    act = w.hub.acts[act_id]
    assert (act.state, act.detail) == (C.ActState.EXECUTING, "executing")


def test_recover_ends_what_was_approved_or_executing_with_why_at_the_restart_s_time() -> None:
    """(kills recover 8, 9, 17, 18, 24, 33)"""
    w, ctl, pure, shell = world()
    guarding = propose(w, ctl, C.Tool.CLOSE_PANE, pure)
    w.step(H.ActDecided(w.now, guarding, True))
    running = propose(w, ctl, C.Tool.SHELL_TEXT, shell, text="pwd")
    w.step(H.ActDecided(w.now, running, True))
    w.step(H.ActGuarded(w.now, running, shell.incarnation, at_empty_prompt=True))
    w.now += 60
    w.step(H.Recover(w.now))
    assert (w.hub.acts[guarding].state, w.hub.acts[guarding].detail, w.hub.acts[guarding].final_at) == (
        C.ActState.CANCELLED, "the daemon restarted before it ran", w.now)
    assert (w.hub.acts[running].state, w.hub.acts[running].detail, w.hub.acts[running].final_at) == (
        C.ActState.FAILED, "the daemon restarted while executing it; it is never run twice", w.now)


def test_an_act_whose_principal_the_book_does_not_hold_is_recorded_under_its_principal_id() -> None:
    """A stored act whose principal is not in the book (a store written by an older daemon could hold
    one): its record names ``agent:<principal id>`` rather than failing (kills _actor 8)."""
    w, ctl, pure, _ = world()
    act_id = propose(w, ctl, C.Tool.CLOSE_PANE, pure)
    w.step(H.ActDecided(w.now, act_id, True))
    hub = H.restore(World().hub.book, (), (), (), acts=w.hub.acts.values())
    _, effects = H.step(hub, H.Recover(w.now))
    (record,) = [e for e in effects if isinstance(e, Audit)]
    assert record.actor == f"agent:{ctl.principal}" and record.outcome == "cancelled"


def test_revoking_control_cancels_each_of_its_open_acts_with_why_at_the_revocation_s_time() -> None:
    """Every open act of control ends cancelled, "control was revoked", at the revocation's time, and the
    step records each of them, not only the last (kills cancel 12, 13, 21; cancel_by 3, 4)."""
    w, ctl, pure, _ = world()
    acts = [propose(w, ctl, C.Tool.CLOSE_PANE, pure),
            propose(w, ctl, C.Tool.LAUNCH_AGENT, None, launcher="codex", cwd="/src", preset="off")]
    w.now += 9
    effects = w.step(H.Revoke(w.now, ctl.principal))
    for act_id in acts:
        act = w.hub.acts[act_id]
        assert (act.state, act.detail, act.final_at) == (C.ActState.CANCELLED, "control was revoked", w.now)
        assert final_audit(w, ctl, act, "cancelled", "control was revoked") in effects


def test_an_act_on_a_pane_whose_process_ended_is_cancelled_with_why_at_that_time() -> None:
    """(kills cancel_at 10, 11, 16, 17)"""
    w, ctl, pure, _ = world()
    act_id = propose(w, ctl, C.Tool.CLOSE_PANE, pure)
    w.now += 2
    effects = w.step(H.PaneGone(w.now, pure.pane, pure.incarnation))
    act = w.hub.acts[act_id]
    assert (act.state, act.detail, act.final_at) == (C.ActState.CANCELLED, "the pane's process ended", w.now)
    assert final_audit(w, ctl, act, "cancelled", "the pane's process ended") in effects


def test_every_card_unanswered_expires_at_its_expiry_time_with_its_record() -> None:
    """A card expires at the tick of its expiry time itself (not only after it); each expired act ends
    "card expired unanswered" at the tick's time, and the tick records each, not only the last (kills
    tick 5, 10, 11, 19, 20, 21)."""
    w, ctl, pure, _ = world()
    acts = [propose(w, ctl, C.Tool.CLOSE_PANE, pure), propose(w, ctl, C.Tool.HANDOFF, pure, text="go on")]
    w.now = w.hub.acts[acts[0]].expires_at
    effects = w.step(H.Tick(w.now))
    for act_id in acts:
        act = w.hub.acts[act_id]
        assert (act.state, act.detail, act.final_at) == (C.ActState.EXPIRED, "card expired unanswered", w.now)
        assert final_audit(w, ctl, act, "expired", "card expired unanswered") in effects


def test_a_final_act_stays_readable_in_the_hub_for_an_hour_then_is_dropped() -> None:
    """A final act is kept until an hour (``FINAL_KEPT``) after it ended, and dropped at the tick of that
    time; an open act stays (kills tick 27, 29-35)."""
    w, ctl, pure, _ = world()
    w.now = 5000.0
    done = propose(w, ctl, C.Tool.CLOSE_PANE, pure)
    w.step(H.ActDecided(w.now, done, False))
    w.now += hub_acts.FINAL_KEPT - 1
    still_open = propose(w, ctl, C.Tool.CLOSE_PANE, pure)
    w.step(H.Tick(w.now))
    assert set(w.hub.acts) == {done, still_open}
    w.now += 1
    w.step(H.Tick(w.now))
    assert set(w.hub.acts) == {still_open}


def test_resuming_a_stopped_control_s_session_is_refused_while_another_control_runs() -> None:
    """A launch that resumes a control's session runs as that control (even without ``control``), so it
    is refused while another control is live: at most one control at a time (kills check_launch 4,
    ``session=None``: the resumed session not looked up, the launch let through as an ordinary agent)."""
    w = World()
    old = w.launch("old-ctl", Preset.OFF, control=True, session=("claude", "s-old"))
    w.step(H.PaneGone(w.now, old.pane, old.incarnation))  # its token ended: a new control may start
    w.launch("ctl", Preset.OFF, control=True)
    before = w.snapshot()
    with pytest.raises(C.ActRefused) as refused:
        w.launch("again", Preset.OFF, session=("claude", "s-old"))
    assert refused.value.reason == "control_running"
    assert w.hub == before
