"""Restart-to-connect in the hub (the machine is :mod:`connectcore.restart`): a restart planned,
stepped, respawned (its token, if it gets one) and recovered at start; its connect withdrawn; a
closed restart giving its pane back to delivery.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from connectcore import arming, control, grants
from connectcore import restart as restart_
from connectcore.delivery import (
    MessageState,
)
from connectcore.effects import (
    Audit,
    Effect,
    Persist,
)
from connectcore.grants import SessionKey
from connectcore.hub import acts as hub_acts
from connectcore.hub.messages import _open_left
from connectcore.hub.state import (
    Hub,
    Launch,
    LeftDraft,
    RestartPlanned,
    RestartRecovered,
    RestartRefused,
    RestartRespawned,
    RestartStepped,
    Step,
    UnknownItem,
    restart_of_pane,
)
from connectcore.hub.tokens import _launch

# Restart-to-connect runs inside the hub: the open restarts are part of its state, stepped under the
# same lock as every grant and delivery (the machine itself is :mod:`connectcore.restart`). Rules:
#
# - A restart's respawned process gets a token only with the session's grant as stored when it is seen
#   running (never scopes captured when the restart began, never more than the cap), and none at all
#   if that grant is Off or the restart's connect was withdrawn while it was open. Recovery of a record
#   found open at startup follows the same rule: it never grants more than the stored grant.
# - ``Revoke``, ``RevokePane`` (also an open restart of that pane, connected or not), ``DisconnectAll``
#   and ``SetGrant`` (any new grant, Off included) withdraw the connect of
#   every open restart of the affected agent (its session, the sessions of its merged principals, or
#   the incarnation it restarts): the machine takes ``restart.Cancel`` where its table allows it
#   (planned / waiting for idle: cancelled, touching nothing; rechecking: recovery restores the option);
#   after the exit command was sent it goes on to respawn a dead pane, with no token.
# - A pane being restarted is not armed for delivery: no guard starts for it, and a guard answered
#   once its restart is open types nothing (the message waits). A restart does not take an idle
#   reading as idle while a message is being typed into its pane. When the restart closes, delivery
#   may start again (its new incarnation is a new recipient: PaneGone / PaneObserved rules).

_RESPAWNING = frozenset({restart_.RestartStep.PROCESS_ENDED, restart_.RestartStep.RESPAWNED})
_IDLE_WAITS = frozenset({restart_.RestartStep.WAITING_IDLE, restart_.RestartStep.RECHECKING_IDLE})
_BEFORE_EXIT = frozenset({restart_.RestartStep.PLANNED, restart_.RestartStep.WAITING_IDLE})  # cancel touches nothing


def _restart_session(state: restart_.Restart) -> SessionKey:
    return (state.record.harness, state.record.session_id)


def _restarts_of(hub: Hub, members: frozenset[str], sessions: frozenset[SessionKey]) -> tuple[str, ...]:
    """Open restarts of these principals (any merged id) or sessions: by session, by the session's
    principal, or by a token of theirs on the incarnation being restarted."""
    book = hub.book
    roots = {grants.canonical(book, p) for p in members}
    found: list[str] = []
    for rid, state in hub.restarts.items():
        session = _restart_session(state)
        alias = book.aliases.get(session)
        holders = {
            grants.canonical(book, t.principal)
            for t in book.tokens.values()
            if t.incarnation == state.record.incarnation
        }
        if session in sessions or (alias is not None and grants.canonical(book, alias) in roots) or holders & roots:
            found.append(rid)
    return tuple(sorted(found))


def _closed(hub: Hub, restart_id: str, state: restart_.Restart, now: float) -> Step:
    """Store the stepped machine; a final one leaves the hub and gives its pane back to delivery."""
    if not state.final:
        return replace(hub, restarts={**hub.restarts, restart_id: state}), ()
    hub = replace(hub, restarts={k: v for k, v in hub.restarts.items() if k != restart_id})
    effects: tuple[Effect, ...] = ()
    record = state.record
    view = hub.panes.get(record.pane_id)
    if restart_.left_exit_command(record) and (view is None or view.incarnation == record.incarnation):
        why = f"a restart-to-connect typed {record.exit_command!r} and the agent did not exit"
        hub, effects = _open_left(hub, LeftDraft(record.pane_id, record.incarnation, None, restart_id, now, why))
    return hub, effects


def _withdraw_restarts(hub: Hub, restart_ids: Iterable[str], now: float, why: str) -> Step:
    """The connect these restarts were to give was withdrawn: mark their records (persisted once the
    record is), and cancel them where the table allows."""
    effects: tuple[Effect, ...] = ()
    for rid in restart_ids:
        state = hub.restarts.get(rid)
        if state is None or state.record.connect_withdrawn:  # the first why stays
            continue
        state = replace(state, record=replace(state.record, connect_withdrawn=why))
        hub = replace(hub, restarts={**hub.restarts, rid: state})
        if state.step in restart_.RECOVERABLE:
            effects += (Persist(restart_.STORE_KIND, (rid,), state.record),)
        if restart_.TABLE.allows(state.step, "cancel"):
            state, more = restart_.step(state, restart_.Cancel(now=now, reason=why))
            hub, again = _closed(hub, rid, state, now)
            effects += more + again
    return hub, effects


def _restart_planned(hub: Hub, ev: RestartPlanned) -> Step:
    record = ev.state.record
    if ev.state.step is not restart_.RestartStep.PLANNED:
        raise RestartRefused("not_planned", f"restart {record.restart_id} is {ev.state.step}, not planned")
    if record.restart_id in hub.restarts:
        raise RestartRefused("restart_reused", f"restart id {record.restart_id} is already open")
    if restart_of_pane(hub, record.pane_id) is not None:
        raise RestartRefused("restart_running", f"a restart of {record.pane_id} is already under way")
    if not ev.scopes:
        raise RestartRefused("bad_preset", "restart-to-connect needs observe or collaborate")
    if ev.session != _restart_session(ev.state):
        raise RestartRefused(
            "session_mismatch", f"restart {record.restart_id} resumes {_restart_session(ev.state)}, not {ev.session}"
        )
    if any(_restart_session(r) == ev.session for r in hub.restarts.values()):
        raise RestartRefused("restart_running", f"a restart of session {ev.session[1]} is already under way")
    book, effects = grants.set_grant(hub.book, now=ev.now, session=ev.session, scopes=ev.scopes, by=ev.by)
    state, more = restart_.step(ev.state, restart_.Begin(now=ev.now))
    hub = replace(hub, book=book, restarts={**hub.restarts, record.restart_id: state})
    return hub, effects + more


def _open_restart(hub: Hub, restart_id: str) -> restart_.Restart:
    state = hub.restarts.get(restart_id)
    if state is None:
        raise UnknownItem("unknown_restart", f"no open restart {restart_id}")
    return state


def _delivery_holds(hub: Hub, pane_id: str, incarnation: str) -> bool:
    """A message is being typed into the pane, or was typed and its turn has not been seen
    (``awaiting_turn``: its screen may show it submitted, the turn not yet started, which reads as
    idle). Either way a restart's exit command would land in that turn (found by the simulation,
    seed 213, once its agents could start a turn late)."""
    view = hub.panes.get(pane_id)
    awaiting = view is not None and view.incarnation == incarnation and view.arming is arming.Arming.AWAITING_TURN
    return awaiting or any(
        hub.messages[key].state is MessageState.TYPING
        for pane, key in hub.attempts.items()
        if pane == pane_id and key in hub.messages
    )


def _restart_stepped(hub: Hub, ev: RestartStepped) -> Step:
    state = _open_restart(hub, ev.restart_id)
    event = ev.event
    if ev.for_step is not None and ev.for_step is not state.step:
        return hub, ()  # a stale answer: the restart left that step meanwhile
    if (
        isinstance(event, restart_.PaneObserved)
        and state.step in _IDLE_WAITS
        and event.idle_and_empty
        and _delivery_holds(hub, state.record.pane_id, state.record.incarnation)
    ):
        return hub, ()  # not the idle the restart waits for (the restarter looks again)
    state, effects = restart_.step(state, event)
    hub, more = _closed(hub, ev.restart_id, state, ev.now)
    return hub, effects + more


def _restart_respawned(hub: Hub, ev: RestartRespawned) -> Step:
    state = _open_restart(hub, ev.restart_id)
    record = state.record
    if state.step not in _RESPAWNING:
        raise RestartRefused("not_respawning", f"restart {record.restart_id} is {state.step}, not respawning")
    if ev.incarnation == record.incarnation:
        raise RestartRefused(
            "same_incarnation", f"restart {record.restart_id}: {ev.incarnation} is the incarnation it replaces"
        )
    session = _restart_session(state)
    scopes = grants.session_scopes(hub.book, session)  # within the cap
    why = record.connect_withdrawn or ("" if scopes else "the session's grant is off")
    try:
        hub_acts.check_launch(hub.book, control=False, session=session)  # a control session stays control
    except control.ActRefused as exc:
        why = why or str(exc)
    if why:
        return hub, (
            Audit(
                actor=restart_.ACTOR,
                action="restart.respawn",
                outcome="unconnected",
                target=f"agent:{session[0]}:{session[1]}",
                detail=f"respawned without connect: {why}",
                at=ev.now,
            ),
        )
    launch = Launch(
        ev.now, ev.token_hash, ev.principal_id, record.harness, record.pane_id, ev.pid, ev.incarnation, scopes, session
    )
    return _launch(hub, launch)


def _restart_recovered(hub: Hub, ev: RestartRecovered) -> Step:
    record = ev.record
    if not record.open:
        raise RestartRefused("restart_closed", f"restart {record.restart_id} is already {record.step}")
    if record.restart_id in hub.restarts:
        raise RestartRefused("restart_reused", f"restart id {record.restart_id} is already open")
    if restart_of_pane(hub, record.pane_id) is not None:
        raise RestartRefused("restart_running", f"a restart of {record.pane_id} is already under way")
    state = restart_.resume(record, ev.limits)
    return replace(hub, restarts={**hub.restarts, record.restart_id: state}), ()
