"""Control's acts in the hub (connectcore.hub.acts): proposed onto a card, guarded, executed once."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from connectcore import control as C
from connectcore import grants
from connectcore import hub as H
from connectcore.consent import Decision
from connectcore.delivery import MessageState
from connectcore.effects import (
    Audit,
    CheckActGuard,
    ClosePane,
    HandOff,
    OpenWindow,
    Persist,
    PressKeys,
    TypeShellText,
)
from connectcore.grants import Preset
from connectcore.hub import acts as hub_acts
from tests.unit.hubkit import Agent, World, actor

QUESTION = ("Allow the connect MCP server to run tool send_message?", ("1. Yes", "2. No"), ("connect - send_message",), 0)


def world() -> tuple[World, Agent, Agent, Agent]:
    w = World()
    ctl = w.launch("ctl", Preset.OFF, control=True)
    pure = w.launch("pure", Preset.OFF, harness="codex")
    shell = Agent("sh", "tok-none", "p-none", "%9", "inc-sh", "shell")
    return w, ctl, pure, shell


def propose(w: World, ctl: Agent, tool: C.Tool, target: Agent | None, question: Any = None, **args: Any) -> str:
    act_id = w.fresh("act-")
    recipient = H.Recipient(target.pane, target.incarnation, target.harness) if target else None
    w.step(H.ActProposed(w.now, ctl.token, act_id, tool, recipient, args, question))
    return act_id


def approve(w: World, act_id: str, approve: bool = True) -> tuple[Any, ...]:
    return w.step(H.ActDecided(w.now, act_id, approve))


def test_send_keys_waits_on_a_card_that_shows_the_question_then_presses_after_the_guard() -> None:
    w, ctl, pure, _ = world()
    act_id = propose(w, ctl, C.Tool.SEND_KEYS, pure, QUESTION, keys=["1", "Enter"])
    act = w.hub.acts[act_id]
    assert act.state is C.ActState.AWAITING_CONSENT and act.tier == 2
    assert "Allow the connect MCP server" in act.shown and pure.pane in act.shown and "tier 2" in act.shown
    assert not any(isinstance(e, PressKeys) for e in w.effects)  # no act without its card
    effects = approve(w, act_id)
    assert CheckActGuard(act_id, pure.pane, pure.incarnation) in effects
    effects = w.step(H.ActGuarded(w.now, act_id, pure.incarnation, QUESTION))
    assert PressKeys(act_id, pure.pane, pure.incarnation, ("1", "Enter")) in effects
    assert w.hub.acts[act_id].state is C.ActState.EXECUTING
    effects = w.step(H.ActExecuted(w.now, act_id))
    assert w.hub.acts[act_id].state is C.ActState.DONE
    audit = [e for e in effects if isinstance(e, Audit)][-1]
    assert (audit.action, audit.outcome, audit.target) == ("send_keys", "done", f"{pure.pane}@{pure.incarnation}")
    assert "role=control" in audit.detail and "tier=2" in audit.detail


def test_a_stale_question_is_never_answered() -> None:
    w, ctl, pure, _ = world()
    act_id = propose(w, ctl, C.Tool.SEND_KEYS, pure, QUESTION, keys=["y"])
    approve(w, act_id)
    other = ("Allow the connect MCP server to run tool close_pane?", ("1. Yes", "2. No"), ("connect - close_pane",), 0)
    effects = w.step(H.ActGuarded(w.now, act_id, pure.incarnation, other))
    assert w.hub.acts[act_id].state is C.ActState.STALE
    assert not any(isinstance(e, PressKeys) for e in effects)
    effects = w.step(H.ActGuarded(w.now, act_id, pure.incarnation, QUESTION))  # too late: nothing
    assert effects == ()


def test_a_new_incarnation_under_the_lock_cancels_the_act() -> None:
    w, ctl, pure, _ = world()
    act_id = propose(w, ctl, C.Tool.CLOSE_PANE, pure)
    approve(w, act_id)
    effects = w.step(H.ActGuarded(w.now, act_id, "inc-other"))
    assert w.hub.acts[act_id].state is C.ActState.CANCELLED
    assert not any(isinstance(e, ClosePane) for e in effects)


@pytest.mark.parametrize(
    ("tool", "target", "question", "args", "reason"),
    [
        (C.Tool.SEND_KEYS, "pure", None, {"keys": ["Enter"]}, "no_question"),
        (C.Tool.SEND_KEYS, "pure", QUESTION, {"keys": ["C-c"]}, "bad_key"),
        (C.Tool.SEND_KEYS, "pure", QUESTION, {"keys": "Enter"}, "bad_keys"),
        (C.Tool.SEND_KEYS, "shell", QUESTION, {"keys": ["Enter"]}, "not_an_agent"),
        (C.Tool.SEND_KEYS, "ctl", QUESTION, {"keys": ["Enter"]}, "self"),
        (C.Tool.SHELL_TEXT, "pure", None, {"text": "ls"}, "not_a_shell"),
        (C.Tool.SHELL_TEXT, "shell", None, {"text": "ls\nrm -rf /"}, "control_character"),
        (C.Tool.SHELL_TEXT, "shell", None, {"text": "  "}, "empty_text"),
        (C.Tool.CLOSE_PANE, None, None, {}, "no_target"),
        (C.Tool.CLOSE_PANE, "ctl", None, {}, "self"),
        (C.Tool.LAUNCH_AGENT, None, None, {"launcher": "claude", "cwd": "/", "preset": "root"}, "bad_preset"),
        (C.Tool.HANDOFF, "shell", None, {"text": "take over"}, "not_an_agent"),
        # issue 21 item 5: a control character in any act argument is refused at proposal (no card)
        (C.Tool.LAUNCH_AGENT, None, None, {"launcher": "claude", "cwd": "/x\x1b[2A\x1b[2K", "preset": "off"},
         "control_character"),
        (C.Tool.LAUNCH_AGENT, None, None, {"launcher": "claude\r", "cwd": "/", "preset": "off"}, "control_character"),
        (C.Tool.LAUNCH_AGENT, None, None, {"launcher": "claude", "cwd": "/x\x9b2A", "preset": "off"},
         "control_character"),
        (C.Tool.LAUNCH_AGENT, None, None, {"launcher": "claude", "cwd": "/x\x7f", "preset": "off"},
         "control_character"),
        (C.Tool.RESUME_SESSION, None, None, {"harness": "claude", "session_id": "s\x1b[A", "cwd": "/"},
         "control_character"),
        # a right-to-left override, a zero-width space or a line separator reorders or hides what the card
        # shows (the page and the CLI escape them, but a card is never made of one)
        (C.Tool.LAUNCH_AGENT, None, None, {"launcher": "claude", "cwd": "/x\u202etxt.exe", "preset": "off"},
         "control_character"),
        (C.Tool.LAUNCH_AGENT, None, None, {"launcher": "claude", "cwd": "/x\u200b", "preset": "off"},
         "control_character"),
        (C.Tool.LAUNCH_AGENT, None, None, {"launcher": "claude", "cwd": "/x\u2028y", "preset": "off"},
         "control_character"),
        (C.Tool.HANDOFF, "pure", None, {"text": "take over\x1b[1A\x1b[2K"}, "control_character"),
    ],
)
def test_each_refusal_changes_nothing_and_is_audited(
    tool: C.Tool, target: str | None, question: Any, args: dict[str, Any], reason: str
) -> None:
    w, ctl, pure, shell = world()
    agents = {"pure": pure, "shell": shell, "ctl": ctl}
    before = w.hub
    with pytest.raises(H.CallRefused) as refused:
        propose(w, ctl, tool, agents[target] if target else None, question, **args)
    assert refused.value.reason == reason
    assert w.hub is before
    assert refused.value.audit.outcome == "refused" and "role=control" in refused.value.audit.detail


def test_launch_above_the_cap_is_refused() -> None:
    w, ctl, _, _ = world()
    w.hub = H.replace(w.hub, book=H.replace(w.hub.book, cap=Preset.OBSERVE))
    with pytest.raises(H.CallRefused) as refused:
        propose(w, ctl, C.Tool.LAUNCH_AGENT, None, launcher="claude", cwd="/tmp", preset="collaborate")
    assert refused.value.reason == "above_cap"


def test_an_ordinary_agent_has_no_act_at_all() -> None:
    w, _, pure, _ = world()
    collab = w.launch("collab", Preset.COLLABORATE)
    before = w.hub
    with pytest.raises(H.CallRefused) as refused:
        propose(w, collab, C.Tool.CLOSE_PANE, pure)
    assert refused.value.reason == "out_of_scope" or refused.value.audit.scope == "act"
    assert w.hub is before


def test_declined_and_expired_cards_never_run() -> None:
    w, ctl, _, shell = world()
    declined = propose(w, ctl, C.Tool.SHELL_TEXT, shell, text="make test")
    approve(w, declined, approve=False)
    assert w.hub.acts[declined].state is C.ActState.DECLINED
    expiring = propose(w, ctl, C.Tool.SHELL_TEXT, shell, text="make test")
    w.tick(w.hub.limits.card_ttl + 1)
    assert w.hub.acts[expiring].state is C.ActState.EXPIRED
    with pytest.raises(H.UnknownItem):
        approve(w, expiring)
    assert not any(isinstance(e, TypeShellText | CheckActGuard) for e in w.effects)


def test_shell_text_card_shows_the_exact_text_and_types_it() -> None:
    w, ctl, _, shell = world()
    act_id = propose(w, ctl, C.Tool.SHELL_TEXT, shell, text="git status --short")
    act = w.hub.acts[act_id]
    assert act.tier == 3 and "git status --short" in act.shown and "runs as a command" in act.shown
    approve(w, act_id)
    effects = w.step(H.ActGuarded(w.now, act_id, shell.incarnation, at_empty_prompt=True))
    assert TypeShellText(act_id, shell.pane, shell.incarnation, "git status --short") in effects


def test_shell_text_is_stale_unless_the_shell_waits_at_an_empty_prompt() -> None:
    """Issue 21 item 4: a draft on the command line, or another program in the foreground, ends the act
    stale and types nothing."""
    w, ctl, _, shell = world()
    act_id = propose(w, ctl, C.Tool.SHELL_TEXT, shell, text="echo CARD-TEXT")
    approve(w, act_id)
    effects = w.step(H.ActGuarded(w.now, act_id, shell.incarnation, at_empty_prompt=False))
    assert not any(isinstance(e, TypeShellText) for e in effects)
    assert w.hub.acts[act_id].state is C.ActState.STALE


def test_launch_and_resume_open_a_window() -> None:
    w, ctl, _, _ = world()
    launch = propose(w, ctl, C.Tool.LAUNCH_AGENT, None, launcher="codex", cwd="/src", preset="off")
    resume = propose(w, ctl, C.Tool.RESUME_SESSION, None, harness="claude", session_id="s-1", cwd="/src/a")
    for act_id in (launch, resume):
        assert CheckActGuard(act_id, "", "") in approve(w, act_id)
    assert OpenWindow(launch, "codex", "/src", "off") in w.step(H.ActGuarded(w.now, launch, ""))
    assert OpenWindow(resume, "claude", "/src/a", "off", session="s-1") in w.step(H.ActGuarded(w.now, resume, ""))


@pytest.mark.parametrize("how", ["revoke", "disconnect_all", "target_gone", "control_gone"])
def test_revocation_and_gone_panes_cancel_acts_not_yet_executed(how: str) -> None:
    w, ctl, pure, _ = world()
    waiting = propose(w, ctl, C.Tool.CLOSE_PANE, pure)
    approved = propose(w, ctl, C.Tool.SEND_KEYS, pure, QUESTION, keys=["1"])
    approve(w, approved)  # guarding: the guard will find control gone, or the pane
    if how == "revoke":
        w.step(H.Revoke(w.now, ctl.principal))
    elif how == "disconnect_all":
        w.step(H.DisconnectAll(w.now))
    elif how == "target_gone":
        w.step(H.PaneGone(w.now, pure.pane, pure.incarnation))
    else:
        w.step(H.PaneGone(w.now, ctl.pane, ctl.incarnation))
    assert w.hub.acts[waiting].state is C.ActState.CANCELLED
    effects = w.step(H.ActGuarded(w.now, approved, pure.incarnation, QUESTION))
    assert not any(isinstance(e, PressKeys) for e in effects)
    assert w.hub.acts[approved].state is C.ActState.CANCELLED


def test_recover_never_runs_an_act_twice() -> None:
    w, ctl, pure, shell = world()
    pending = propose(w, ctl, C.Tool.CLOSE_PANE, pure)
    guarding = propose(w, ctl, C.Tool.SHELL_TEXT, shell, text="ls")
    approve(w, guarding)
    running = propose(w, ctl, C.Tool.SHELL_TEXT, shell, text="pwd")
    approve(w, running)
    w.step(H.ActGuarded(w.now, running, shell.incarnation, at_empty_prompt=True))
    restored = H.restore(w.hub.book, (), (), (), acts=w.hub.acts.values())
    hub, effects = H.step(restored, H.Recover(w.now))
    assert hub.acts[pending].state is C.ActState.AWAITING_CONSENT
    assert hub.acts[guarding].state is C.ActState.CANCELLED
    assert hub.acts[running].state is C.ActState.FAILED and "never run twice" in hub.acts[running].detail
    assert not any(isinstance(e, CheckActGuard | TypeShellText) for e in effects)
    assert {e.key for e in effects if isinstance(e, Persist) and e.kind == "act"} == {(guarding,), (running,)}


def test_control_reaches_a_pure_agent_but_no_ordinary_agent_does() -> None:
    """Control's reach is the one exception to "both ends opt in"."""
    w, ctl, pure, _ = world()
    collab = w.launch("collab", Preset.COLLABORATE)
    key = w.send(ctl, pure, "from control")
    assert w.message(key).state is MessageState.AWAITING_CONSENT  # tier 1: a card
    assert w.message(key).sender_actor.startswith("control:")
    assert "(control agent, pane" in w.message(key).typed.split("\n", 1)[0]
    with pytest.raises(H.CallRefused) as refused:
        w.send(collab, pure, "from a peer")
    assert refused.value.reason == "not_reachable"
    w.decide(key, Decision.APPROVE_ONCE)
    w.deliver(key, pure)
    assert w.message(key).state is MessageState.DELIVERED


def test_a_recipient_without_the_message_scope_is_not_told_to_reply_with_send_message() -> None:
    """Seen live: a real Codex launched Off got "Reply: send_message ..." from control, a tool it does not
    have. The provenance line offers send_message only to a recipient that holds the message scope."""
    w, ctl, pure, _ = world()
    observer = w.launch("observer", Preset.OBSERVE)
    collab = w.launch("collab", Preset.COLLABORATE)
    for recipient in (pure, observer):
        line = w.message(w.send(ctl, recipient, "from control")).typed.split("\n", 1)[0]
        assert "send_message" not in line and line.endswith("answer here, on your own screen, where the sender reads it.")
    message = w.message(w.send(ctl, collab, "from control"))
    assert message.typed.split("\n", 1)[0].endswith(
        f"Reply: send_message to={ctl.pane}@{ctl.incarnation} in_reply_to={message.ref}")


def test_handoff_to_a_live_pane_sends_control_s_message_without_a_second_card() -> None:
    w, ctl, pure, _ = world()
    act_id = propose(w, ctl, C.Tool.HANDOFF, pure, text="please pick up PR 12")
    approve(w, act_id)
    effects = w.step(H.ActGuarded(w.now, act_id, pure.incarnation))
    assert HandOff(act_id, pure.pane, pure.incarnation, "please pick up PR 12") in effects
    w.step(H.Submit(w.now, ctl.token, "h1", "please pick up PR 12", H.Recipient(pure.pane, pure.incarnation, "codex"),
                    "r-h1", "card-h1", act=act_id))
    assert w.message((ctl.principal, "h1")).state is MessageState.READY
    key2 = (ctl.principal, "h2")  # the act covers only its own recipient
    other = w.launch("other", Preset.OFF)
    w.step(H.Submit(w.now, ctl.token, "h2", "x", H.Recipient(other.pane, other.incarnation, "claude"), "r-h2", "card-h2", act=act_id))
    assert w.message(key2).state is MessageState.AWAITING_CONSENT


def test_at_most_one_control_and_a_resumed_control_stays_control() -> None:
    w = World()
    first = w.launch("ctl", Preset.OFF, control=True, session=("claude", "s-ctl"))
    before = w.hub
    with pytest.raises(C.ActRefused) as refused:
        w.launch("ctl2", Preset.OFF, control=True)
    assert refused.value.reason == "control_running" and w.hub is before
    w.step(H.PaneGone(w.now, first.pane, first.incarnation))  # tmux lost: restored as control
    assert hub_acts.control_to_restore(w.hub.book, ("claude", "s-ctl"))
    again = w.launch("ctl-again", Preset.COLLABORATE, session=("claude", "s-ctl"))
    assert w.hub.book.principals[again.principal].control and again.principal == first.principal
    w.step(H.Revoke(w.now, again.principal))  # stopped by the person: not restored as control
    assert not hub_acts.control_to_restore(w.hub.book, ("claude", "s-ctl"))
    w.launch("ctl3", Preset.OFF, control=True)  # none live now: a new control may start


def test_an_act_is_read_only_by_its_caller_s_merge_group_the_hub_s_copy_and_a_stored_row_alike() -> None:
    w, ctl, pure, _ = world()
    act_id = propose(w, ctl, C.Tool.SEND_KEYS, pure, QUESTION, keys=["1"])
    act = w.hub.acts[act_id]
    assert hub_acts.act_for(w.hub, ctl.principal, act_id) == act
    assert hub_acts.act_for(w.hub, pure.principal, act_id) is None  # another agent's act
    assert hub_acts.act_for(w.hub, ctl.principal, "act-none") is None
    # the hub's copy wins over a stored row of the same id
    older = replace(act, state=C.ActState.DECLINED)
    assert hub_acts.act_for(w.hub, ctl.principal, act_id, [older]) == act
    # an act the hub no longer keeps is read from the stored rows, by the same rule
    a = w.launch("a", harness="codex", session=("codex", "s1"))
    row = replace(act, id="act-old", principal=a.principal)
    assert hub_acts.act_for(w.hub, a.principal, "act-old", [older, row]) == row
    assert hub_acts.act_for(w.hub, ctl.principal, "act-old", [row]) is None
    w.step(H.PaneGone(w.now, a.pane, a.incarnation))
    again = w.launch("again", harness="codex", pane="%7")
    assert hub_acts.act_for(w.hub, again.principal, "act-old", [row]) is None  # not merged yet
    w.step(H.BindSession(w.now, again.principal, ("codex", "s1")))  # merged into a's principal
    assert hub_acts.act_for(w.hub, again.principal, "act-old", [row]) == row


def test_a_control_whose_newest_token_was_revoked_is_not_restored_whatever_order_the_book_holds() -> None:
    """The token check of control_to_restore on its own (grants.revoke also clears the role, so the
    book is edited by hand: control still marked, the newest token by issue time revoked): not restored,
    whether the book holds its tokens in issue order or in reverse; the newest token ended: restored."""
    w = World()
    first = w.launch("ctl", Preset.OFF, control=True, session=("claude", "s-ctl"))
    w.step(H.PaneGone(w.now, first.pane, first.incarnation))
    w.now += 1
    w.launch("ctl-again", Preset.OFF, session=("claude", "s-ctl"))  # resumed: a second token, issued later
    book = w.hub.book
    older, newer = sorted(book.tokens.values(), key=lambda t: t.issued_at)
    assert older.issued_at < newer.issued_at
    for state, restored in ((grants.TokenState.REVOKED, False), (grants.TokenState.ENDED, True)):
        tokens = {older.token_hash: older, newer.token_hash: replace(newer, state=state)}
        for order in (tokens, dict(reversed(tokens.items()))):
            assert hub_acts.control_to_restore(replace(book, tokens=order), ("claude", "s-ctl")) is restored


def test_the_control_handle_points_at_the_one_running_control_s_live_token() -> None:
    """control_pane: (pane, incarnation) of the running control's live token; None with no control
    running, or with two (the handle is then not guessed)."""
    w = World()
    w.launch("worker", Preset.COLLABORATE)
    assert hub_acts.control_pane(w.hub.book) is None  # no control
    ctl = w.launch("ctl", Preset.OFF, control=True, session=("claude", "s-ctl"))
    assert hub_acts.control_pane(w.hub.book) == (ctl.pane, ctl.incarnation)
    w.step(H.PaneGone(w.now, ctl.pane, ctl.incarnation))
    assert hub_acts.control_pane(w.hub.book) is None  # its token ended
    w.now += 1
    again = w.launch("ctl-again", Preset.OFF, session=("claude", "s-ctl"), pane="%8")
    assert hub_acts.control_pane(w.hub.book) == (again.pane, again.incarnation) == ("%8", again.incarnation)
    book = w.hub.book
    (live,) = [t for t in book.tokens.values() if t.state is grants.TokenState.LIVE and t.pane_id == again.pane]
    other = replace(live, token_hash="tok-other", principal="p-other", pane_id="%9", incarnation="inc-other")
    two = replace(book, tokens={**book.tokens, other.token_hash: other},
                  principals={**book.principals, "p-other": replace(book.principals[live.principal], id="p-other")})
    assert hub_acts.control_pane(two) is None  # two controls live: no single pane


@pytest.mark.parametrize(
    ("error", "detail", "state", "recorded"),
    [
        ("", "", C.ActState.DONE, "done"),  # ran, nothing to add: "done"
        ("", "window @3", C.ActState.DONE, "window @3"),  # ran: what it did
        ("pane gone", "", C.ActState.FAILED, "pane gone"),  # failed: why
    ],
)
def test_an_executed_act_records_its_outcome_at_the_execution_s_time(
    error: str, detail: str, state: C.ActState, recorded: str
) -> None:
    w, ctl, pure, _ = world()
    act_id = propose(w, ctl, C.Tool.SEND_KEYS, pure, QUESTION, keys=["1"])
    approve(w, act_id)
    w.step(H.ActGuarded(w.now, act_id, pure.incarnation, QUESTION))
    w.now += 7
    effects = w.step(H.ActExecuted(w.now, act_id, error=error, detail=detail))
    act = w.hub.acts[act_id]
    assert (act.state, act.detail, act.final_at) == (state, recorded, w.now)
    audit = effects[-1]
    assert isinstance(audit, Audit)
    assert (audit.outcome, audit.detail, audit.at) == (state.value, f"role=control tier=2 {recorded}", w.now)
    assert w.step(H.ActExecuted(w.now, act_id)) == ()  # once only
    assert w.step(H.ActExecuted(w.now, "act-unknown")) == ()


def test_close_pane_and_a_handoff_to_a_closed_session_run_as_their_one_effect() -> None:
    w, ctl, pure, _ = world()
    close = propose(w, ctl, C.Tool.CLOSE_PANE, pure)
    approve(w, close)
    assert w.step(H.ActGuarded(w.now, close, pure.incarnation))[-1] == ClosePane(close, pure.pane, pure.incarnation)
    handoff = propose(w, ctl, C.Tool.HANDOFF, None, harness="claude", session_id="s-1", cwd="/src/a", text="go on")
    approve(w, handoff)
    opened = w.step(H.ActGuarded(w.now, handoff, ""))[-1]
    assert opened == OpenWindow(handoff, "claude", "/src/a", "off", session="s-1", handoff="go on")


def test_the_guard_s_own_check_of_control_ends_the_act_with_its_record() -> None:
    """The guard's own check that control is still connected, on its own (a gone pane or a revocation
    cancels the act first, so the book is edited by hand: control's token ended under the lock)."""
    w, ctl, pure, _ = world()
    act_id = propose(w, ctl, C.Tool.SEND_KEYS, pure, QUESTION, keys=["1"])
    approve(w, act_id)
    book = w.hub.book
    ended = {h: replace(t, state=grants.TokenState.ENDED) if t.principal == ctl.principal else t for h, t in book.tokens.items()}
    w.hub = replace(w.hub, book=replace(book, tokens=ended))
    w.now += 4
    effects = w.step(H.ActGuarded(w.now, act_id, pure.incarnation, QUESTION))
    act = w.hub.acts[act_id]
    assert (act.state, act.detail, act.final_at) == (C.ActState.CANCELLED, "control is no longer connected", w.now)
    audit = effects[-1]
    assert audit == hub_acts.act_audit(act, actor(w, ctl), "cancelled", w.now, "control is no longer connected")
    assert isinstance(audit, Audit) and audit.actor == actor(w, ctl) and audit.at == w.now
    assert audit.detail == "role=control tier=2 control is no longer connected"
    assert not any(isinstance(e, PressKeys) for e in effects)
