"""Control's acts in the hub: proposed, shown on a card, guarded under the pane's send lock, executed once.

The rules of one act are :mod:`connectcore.control` (tiers, named keys, shell text, the preset cap,
``ACT_TABLE``); this module keeps the hub's acts (``Hub.acts``) and sequences them:

- ``ActProposed``: the caller must hold ``act`` (only the control role does, :mod:`connectcore.grants`);
  the tool's input rule must pass; a pane act must not target control's own pane. A refusal is a
  :class:`connectcore.hub.CallRefused` raised before anything is stored (its audit is the one record).
  Otherwise the act waits on its card (``shown`` is exactly what will happen, on which pane, with its
  tier). Acts are tiers 2 and 3: a card every time, never pair-approvable.
- ``ActDecided``: declined, or approved: the act moves to the guard at once (``CheckActGuard``).
- ``ActGuarded``: the daemon's fresh reading under the pane's send lock. The act runs only if control
  is still connected, the pane is the incarnation the card showed, and for ``send_keys`` the same
  question is on screen (its fingerprint); else it ends stale or cancelled and nothing is pressed.
  Passing, it moves to ``executing`` with the one effect that executes it (run under the same lock).
- ``ActExecuted``: done or failed, audited with tier, target and outcome.
- An act not yet executing is cancelled when control is revoked (``Revoke``, ``DisconnectAll``, a grant
  set Off), on ``DisconnectAll`` (control stays connected), or when its target pane's process ends
  (``PaneGone``); a card unanswered expires on ``Tick``.
- ``Recover`` (daemon start): an act approved or guarding is cancelled, one executing is failed: an
  act is never run twice. A pending card stays pending (it expires as usual).
- An act is read (``get_act``) only by its caller's merge group, the hub's copy and a stored row alike
  (:func:`act_for`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from connectcore import control as C
from connectcore import delivery, grants
from connectcore._machine import ConnectError
from connectcore.consent import AGENT_KINDS
from connectcore.effects import (
    Audit,
    CheckActGuard,
    ClosePane,
    Effect,
    HandOff,
    Notify,
    OpenWindow,
    Persist,
    PressKeys,
    TypeShellText,
)
from connectcore.grants import Preset, Scope
from connectcore.hub.gate import CallRefused, authorize
from connectcore.hub.state import ActDecided, ActExecuted, ActGuarded, ActProposed, Hub, Step, UnknownItem

PANE_TOOLS = frozenset({C.Tool.SEND_KEYS, C.Tool.SHELL_TEXT, C.Tool.CLOSE_PANE})
FINAL_KEPT = 3600.0  # a final act stays readable in the hub this long (the store keeps it for good)


def _fp(question: C.QuestionShown | None) -> str:
    return C.question_fingerprint(*question) if question else ""


def _target_name(act: C.Act) -> str:
    return f"{act.pane_id}@{act.incarnation}" if act.pane_id else "new window"


def act_audit(act: C.Act, actor: str, outcome: str, now: float, detail: str = "") -> Audit:
    """Every act's record names its tier, target and outcome; control's calls carry ``role=control``."""
    extra = f" {detail}" if detail else ""
    return Audit(
        actor=actor, action=act.tool.value, outcome=outcome, scope=Scope.ACT.value, target=_target_name(act),
        message_id=act.id, detail=f"role=control tier={act.tier}{extra}", at=now,
    )


def _actor(hub: Hub, act: C.Act) -> str:
    principal = hub.book.principals.get(grants.canonical(hub.book, act.principal))
    return grants.actor_name(principal) if principal is not None else f"agent:{act.principal}"


def _save(hub: Hub, act: C.Act) -> Step:
    hub = replace(hub, acts={**hub.acts, act.id: act})
    return hub, (Persist("act", (act.id,), act), Notify("act", (act.id,), payload={"state": act.state.value}))


# --- proposing ----------------------------------------------------------------------------------------


def shown(tool: C.Tool, args: dict[str, Any], target: str, kind: str, question: str) -> str:
    """What the card shows: exactly what will happen, and where."""
    tier = f"tier {C.tier_of(tool)}"
    if tool is C.Tool.SEND_KEYS:
        return f"{tier}: press {' '.join(args['keys'])} in {kind} pane {target}, answering: {question!r}"
    if tool is C.Tool.SHELL_TEXT:
        return f"{tier}: type into shell pane {target} and press Enter (it runs as a command): {args['text']}"
    if tool is C.Tool.CLOSE_PANE:
        return f"{tier}: close pane {target} ({kind}); its process ends"
    if tool is C.Tool.LAUNCH_AGENT:
        return f"{tier}: open a new window running {args['launcher']} in {args['cwd']}, connect {args['preset']}"
    if tool is C.Tool.RESUME_SESSION:
        return f"{tier}: reopen {args['harness']} session {args['session_id']} in a new window in {args['cwd']}"
    where = f"pane {target}" if target else f"{args['harness']} session {args['session_id']} (reopened in {args['cwd']})"
    return f"{tier}: hand off to {where}; control then sends it: {args['text']}"


def _checked_args(hub: Hub, ev: ActProposed, own_incarnations: frozenset[str]) -> tuple[dict[str, Any], str]:
    """The act's arguments after its input rule (``ActRefused``), and the question's fingerprint."""
    tool, target, args = ev.tool, ev.target, dict(ev.args)
    C.check_act_args(tool, args)
    if tool in PANE_TOOLS or (tool is C.Tool.HANDOFF and not args.get("session_id")):
        if target is None:
            raise C.ActRefused("no_target", f"{tool.value} needs a pane")
        if target.incarnation in own_incarnations:
            raise C.ActRefused("self", f"control cannot {tool.value} its own pane")
    if tool is C.Tool.SEND_KEYS:
        assert target is not None
        args["keys"] = list(C.check_keys(args.get("keys") or ()))
        return args, C.check_key_target(recipient_kind=target.kind, question_fingerprint=_fp(ev.question))
    if tool is C.Tool.SHELL_TEXT:
        assert target is not None
        args["text"] = C.check_shell_text(recipient_kind=target.kind, text=str(args.get("text", "")))
    elif tool is C.Tool.LAUNCH_AGENT:
        try:
            preset = Preset(str(args.get("preset", "off")))
        except ValueError as exc:
            raise C.ActRefused("bad_preset", f"no preset {args.get('preset')!r} (off, observe, collaborate)") from exc
        args["preset"] = C.check_launch_preset(preset, hub.book.cap).value
    elif tool is C.Tool.HANDOFF:
        try:
            delivery.check_text(str(args.get("text", "")))
        except delivery.Refused as exc:
            raise C.ActRefused(exc.reason, str(exc)) from exc
        if target is not None and target.kind not in AGENT_KINDS:
            raise C.ActRefused("not_an_agent", f"handoff reaches agent panes only, not a {target.kind} pane")
    return args, ""


def propose(hub: Hub, ev: ActProposed) -> Step:
    """Admit an act onto its card, or refuse it before anything is stored."""
    target_name = f"{ev.target.pane_id}@{ev.target.incarnation}" if ev.target else "new window"
    principal, _allowed = authorize(
        hub, token_hash=ev.token_hash, scope=Scope.ACT, action=ev.tool.value, now=ev.now, target=target_name
    )
    actor = grants.actor_name(principal)
    own = frozenset(t.incarnation for t in grants.live_tokens(hub.book, principal.id))
    try:
        if ev.act_id in hub.acts:
            raise ConnectError(f"act id {ev.act_id} was already used")
        args, fingerprint = _checked_args(hub, ev, own)
    except C.ActRefused as exc:
        record = Audit(
            actor=actor, action=ev.tool.value, outcome="refused", scope=Scope.ACT.value, target=target_name,
            message_id=ev.act_id, detail=f"role=control tier={C.tier_of(ev.tool)} {exc.reason}", at=ev.now,
        )
        raise CallRefused(exc.reason, str(exc), record) from exc
    question = C.question_text(ev.question) if ev.question else ""
    act = C.propose(
        act_id=ev.act_id, tool=ev.tool, principal=principal.id,
        pane_id=ev.target.pane_id if ev.target else "", incarnation=ev.target.incarnation if ev.target else "",
        shown=shown(ev.tool, args, target_name if ev.target else "", ev.target.kind if ev.target else "", question),
        args=args, question_fingerprint=fingerprint, now=ev.now, card_ttl=hub.limits.card_ttl,
    )
    hub, effects = _save(hub, act)
    return hub, (*effects, act_audit(act, actor, act.state.value, ev.now))


# --- the card, the guard, the outcome -------------------------------------------------------------


def decide(hub: Hub, ev: ActDecided) -> Step:
    act = hub.acts.get(ev.act_id)
    if act is None:
        raise UnknownItem("unknown_act", f"no act {ev.act_id}")
    if act.state is not C.ActState.AWAITING_CONSENT:
        raise UnknownItem("card_closed", f"act {ev.act_id} was already answered ({act.state.value})")
    consent_record = Audit(
        actor=ev.by, action="consent", outcome="approved" if ev.approve else "declined", scope=Scope.ACT.value,
        target=_actor(hub, act), message_id=act.id, detail=f"tier={act.tier} {act.tool.value} on {_target_name(act)}",
        at=ev.now,
    )
    if not ev.approve:
        hub, effects = _final(hub, act, "decline", ev.now, "declined by the person")
        return hub, (consent_record, *effects)
    act = C.advance(C.advance(act, "approve", now=ev.now), "attempt", now=ev.now)
    hub, effects = _save(hub, act)
    return hub, (consent_record, *effects, CheckActGuard(act.id, act.pane_id, act.incarnation))


def _control_live(hub: Hub, act: C.Act) -> bool:
    live = any(t.state is grants.TokenState.LIVE for t in grants.live_tokens(hub.book, act.principal))
    return live and Scope.ACT in grants.scopes_of(hub.book, act.principal)


def execution(act: C.Act) -> Effect:
    """The one effect that executes an act whose guard passed."""
    a = act.args
    if act.tool is C.Tool.SEND_KEYS:
        return PressKeys(act.id, act.pane_id, act.incarnation, tuple(a["keys"]))
    if act.tool is C.Tool.SHELL_TEXT:
        return TypeShellText(act.id, act.pane_id, act.incarnation, a["text"])
    if act.tool is C.Tool.CLOSE_PANE:
        return ClosePane(act.id, act.pane_id, act.incarnation)
    if act.tool is C.Tool.LAUNCH_AGENT:
        return OpenWindow(act.id, a["launcher"], a["cwd"], a["preset"])
    if act.tool is C.Tool.RESUME_SESSION:
        return OpenWindow(act.id, a["harness"], a["cwd"], Preset.OFF.value, session=a["session_id"])
    if act.pane_id:  # handoff to the live pane holding the session
        return HandOff(act.id, act.pane_id, act.incarnation, a["text"])
    return OpenWindow(act.id, a["harness"], a["cwd"], Preset.OFF.value, session=a["session_id"], handoff=a["text"])


def guarded(hub: Hub, ev: ActGuarded) -> Step:
    act = hub.acts.get(ev.act_id)
    if act is None or act.state is not C.ActState.GUARDING:
        return hub, ()  # it reached an outcome between the card and the lock: nothing runs
    if not _control_live(hub, act):
        return _final(hub, act, "guard_gone", ev.now, "control is no longer connected")
    event = C.guard(act, incarnation=ev.incarnation, question_fingerprint=_fp(ev.question) or None,
                    at_empty_prompt=ev.at_empty_prompt)
    if event == "guard_gone":
        return _final(hub, act, event, ev.now, "the pane's process is not the one the card showed")
    if event == "guard_stale":
        why = ("the shell is not at an empty prompt in the foreground" if act.tool is C.Tool.SHELL_TEXT
               else "the pane no longer shows the question the card showed")
        return _final(hub, act, event, ev.now, why)
    running = C.advance(act, event, now=ev.now, detail="executing")
    hub, effects = _save(hub, running)
    return hub, (*effects, execution(running))


def executed(hub: Hub, ev: ActExecuted) -> Step:
    act = hub.acts.get(ev.act_id)
    if act is None or act.state is not C.ActState.EXECUTING:
        return hub, ()
    if ev.error:
        return _final(hub, act, "failed", ev.now, ev.error)
    return _final(hub, act, "executed", ev.now, ev.detail or "done")


def _final(hub: Hub, act: C.Act, event: str, now: float, detail: str) -> Step:
    done = C.advance(act, event, now=now, detail=detail)
    hub, effects = _save(hub, done)
    return hub, (*effects, act_audit(done, _actor(hub, done), done.state.value, now, detail))


# --- cancellation, expiry, recovery -----------------------------------------------------------------


def cancel(hub: Hub, acts: Iterable[C.Act], now: float, why: str) -> Step:
    """Cancel these acts where their state allows it (not yet executing)."""
    effects: tuple[Effect, ...] = ()
    for act in acts:
        if C.ACT_TABLE.allows(act.state, "cancel"):
            hub, more = _final(hub, act, "cancel", now, why)
            effects += more
    return hub, effects


def cancel_by(hub: Hub, members: frozenset[str], now: float, why: str) -> Step:
    return cancel(hub, [a for a in list(hub.acts.values()) if a.principal in members], now, why)


def cancel_at(hub: Hub, incarnation: str, now: float) -> Step:
    """The incarnation ended: acts on it, and acts of a control that ran in it."""
    ran_there = {t.principal for t in hub.book.tokens.values() if t.incarnation == incarnation}
    found = [a for a in list(hub.acts.values()) if a.incarnation == incarnation or a.principal in ran_there]
    return cancel(hub, found, now, "the pane's process ended")


def tick(hub: Hub, now: float) -> Step:
    effects: tuple[Effect, ...] = ()
    for act in list(hub.acts.values()):
        if act.state is C.ActState.AWAITING_CONSENT and now >= act.expires_at:
            hub, more = _final(hub, act, "expire", now, "card expired unanswered")
            effects += more
    kept = {k: a for k, a in hub.acts.items() if not (a.is_final and (a.final_at or 0.0) + FINAL_KEPT <= now)}
    if len(kept) != len(hub.acts):
        hub = replace(hub, acts=kept)
    return hub, effects


def recover(hub: Hub, now: float) -> Step:
    """Daemon start: nothing approved before the stop runs now; nothing executing runs again."""
    effects: tuple[Effect, ...] = ()
    for act in list(hub.acts.values()):
        if act.state in (C.ActState.APPROVED, C.ActState.GUARDING):
            hub, more = _final(hub, act, "cancel", now, "the daemon restarted before it ran")
        elif act.state is C.ActState.EXECUTING:
            hub, more = _final(hub, act, "failed", now, "the daemon restarted while executing it; it is never run twice")
        else:
            continue
        effects += more
    return hub, effects


def covers_handoff(hub: Hub, act_id: str, sender_members: frozenset[str], incarnation: str) -> bool:
    """A handoff's message needs no card of its own: the person approved it on the act's card."""
    act = hub.acts.get(act_id)
    return (
        act is not None
        and act.tool is C.Tool.HANDOFF
        and act.state is C.ActState.EXECUTING
        and act.principal in sender_members
        and (not act.incarnation or act.incarnation == incarnation)
    )


# --- the control role -------------------------------------------------------------------------------


def act_for(hub: Hub, principal_id: str, act_id: str, stored: Iterable[C.Act] = ()) -> C.Act | None:
    """The act ``act_id`` as the principal may read it (``get_act``): the hub's copy, else the stored row
    with that id (``stored``: the daemon reads the store only for an act the hub no longer keeps), and
    only an act the principal's merge group asked for (the rule of
    :func:`connectcore.hub.messages.message_for`); None for an act of another agent or none."""
    act = hub.acts.get(act_id)
    if act is None:
        act = next((a for a in stored if a.id == act_id), None)
    if act is None or act.principal not in grants.group(hub.book, principal_id):
        return None
    return act


def live_controls(book: grants.GrantBook) -> frozenset[str]:
    """The canonical control principals that hold a live token (at most one, by :func:`check_launch`)."""
    return frozenset(
        grants.canonical(book, t.principal)
        for t in book.tokens.values()
        if t.state is grants.TokenState.LIVE and book.principals[grants.canonical(book, t.principal)].control
    )


def launches_control(book: grants.GrantBook, *, control: bool, session: grants.SessionKey | None) -> str | None:
    """The control principal a launch would run as: a new one (``control``), or the control whose
    session it resumes (restart-to-connect and restore keep it control). ``""``: a new control."""
    existing = book.aliases.get(session) if session is not None else None
    if existing is not None and book.principals[grants.canonical(book, existing)].control:
        return grants.canonical(book, existing)
    return "" if control else None


def check_launch(book: grants.GrantBook, *, control: bool, session: grants.SessionKey | None) -> None:
    """At most one control at a time (:func:`connectcore.control.may_start_control`): a launch that
    runs as control is refused while another control principal is live."""
    runs_as = launches_control(book, control=control, session=session)
    if runs_as is not None:
        C.may_start_control(len(live_controls(book) - {runs_as}))


def control_to_restore(book: grants.GrantBook, session: grants.SessionKey) -> bool:
    """A lost control session is restored as control, unless the person stopped it (revoked)."""
    runs_as = launches_control(book, control=False, session=session)
    if not runs_as:
        return False
    tokens = sorted((t for t in book.tokens.values() if t.principal in grants.group(book, runs_as)), key=lambda t: t.issued_at)
    return bool(tokens) and tokens[-1].state is not grants.TokenState.REVOKED


def control_pane(book: grants.GrantBook) -> tuple[str, str] | None:
    """(pane, incarnation) of the one running control's live token: where the ``control`` handle
    points while the directory does not yet mark control's pane itself."""
    live = live_controls(book)
    if len(live) != 1:
        return None
    (root,) = live
    tokens = grants.live_tokens(book, root)
    return (tokens[-1].pane_id, tokens[-1].incarnation) if tokens else None
