"""The hub: one action path that joins grants, consent and delivery.

Every agent call and every person's decision goes through :func:`step` (writes) or
:func:`authorize` (reads), so identity, scope, consent, audit and delivery are decided in one place.
The daemon executes the effects and feeds observations back as events. Rules live in
:mod:`connectcore.grants`, :mod:`connectcore.consent` and :mod:`connectcore.delivery`; this module
only sequences them.

The guard protocol with the daemon (the recipient pane's send lock is the linearization point):

1. ``PaneObserved`` reports each reading of a pane, with when it was read. The pane's arming
   (:mod:`connectcore.arming`: seen busy, armed by an idle transition, typing, awaiting the turn,
   quiet re-arm) moves on it; an armed pane takes the first consented message for it, which moves to
   ``guarding`` with a :class:`CheckGuard`.
2. The daemon takes the pane's send lock, reads the pane afresh, resolves the message's handle again
   and answers ``GuardObserved`` while holding it. If every check passes the message moves to
   ``typing`` with, in this order, ``Persist`` (typing started), ``TypeText`` (paste and submit: the
   Enter is owed from the paste call on, pressed once) and ``ConfirmTyping``.
3. The daemon re-reads the pane and answers ``TypingObserved`` with its last reading (still under
   the lock); :func:`connectcore.delivery.landed` decides delivered or unconfirmed.

Revocation takes the affected panes' send locks (:func:`panes_to_lock`) before it is stepped, so a
delivery either finished before it or sees the revoked scope.

Restart-to-connect runs inside the hub too (section "restarts"): the open restarts are hub state, a
revocation or a new grant withdraws their connect, and a pane being restarted is not armed for delivery.
The other way round, a restart does not take a pane as idle while a message is typed into it or its
turn has not been seen since (arming ``awaiting_turn``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from connectcore import arming, consent, control, delivery, grants, hub_acts
from connectcore import restart as restart_
from connectcore._machine import ConnectError
from connectcore.arming import PaneView, Seen
from connectcore.consent import Card, CardState, Decision, PairKey
from connectcore.delivery import (
    DEFAULT_LIMITS,
    AfterTyping,
    Landing,
    Limits,
    Message,
    MessageKey,
    MessageState,
    Refused,
)
from connectcore.effects import (
    Audit,
    CheckGuard,
    ConfirmTyping,
    Effect,
    Notify,
    Persist,
    TypeText,
)
from connectcore.grants import GrantBook, Principal, Scope, SessionKey


class UnknownItem(ConnectError):
    """A card, message or principal the hub does not know (or no longer knows)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


# --- state ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LeftDraft:
    """Needs you: connect may have left its own text unsent in this pane's composer: a message (typing
    that was not confirmed with a draft in the composer, or that a daemon restart interrupted), or a
    restart-to-connect's exit command (the agent was left alone after it was typed: ``message`` is
    None and ``ref`` the restart id). It closes when the pane is next read with an empty composer, or
    goes."""

    pane_id: str
    incarnation: str
    message: MessageKey | None
    ref: str
    at: float
    why: str

    @property
    def summary(self) -> str:
        """What the person is told."""
        if self.message is None:
            return f"connect may have left its exit command unsent in {self.pane_id}'s composer"
        return f"connect left an unsent message in {self.pane_id}'s composer"


@dataclass(frozen=True)
class Hub:
    book: GrantBook = field(default_factory=GrantBook)
    limits: Limits = DEFAULT_LIMITS
    messages: dict[MessageKey, Message] = field(default_factory=dict)
    refs: dict[str, MessageKey] = field(default_factory=dict)
    cards: dict[str, Card] = field(default_factory=dict)
    pairs: frozenset[PairKey] = frozenset()
    sent: dict[str, tuple[float, ...]] = field(default_factory=dict)
    pair_sent: dict[PairKey, tuple[float, ...]] = field(default_factory=dict)
    last_received: dict[str, tuple[str, int, float]] = field(default_factory=dict)
    panes: dict[str, PaneView] = field(default_factory=dict)
    attempts: dict[str, MessageKey] = field(default_factory=dict)  # pane id -> message in guard/typing
    restarts: dict[str, restart_.Restart] = field(default_factory=dict)  # restart id -> open restart
    drafts: dict[str, LeftDraft] = field(default_factory=dict)  # pane id -> what connect may have left
    acts: dict[str, control.Act] = field(default_factory=dict)  # act id -> control's act (connectcore.hub_acts)


# --- events -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Recipient:
    """A target the daemon resolved through the directory."""

    pane_id: str
    incarnation: str
    kind: str  # claude / codex / opencode / shell / unknown
    handle: str | None = None


@dataclass(frozen=True)
class Launch:
    now: float
    token_hash: str
    principal_id: str
    harness: str
    pane_id: str
    pid: int
    incarnation: str
    scopes: frozenset[Scope]
    session: SessionKey | None = None
    control: bool = False


@dataclass(frozen=True)
class BindSession:
    now: float
    principal_id: str
    session: SessionKey


@dataclass(frozen=True)
class SetGrant:
    now: float
    session: SessionKey
    scopes: frozenset[Scope]
    by: str = "owner"


@dataclass(frozen=True)
class Revoke:
    now: float
    principal_id: str
    by: str = "owner"


@dataclass(frozen=True)
class RevokePane:
    """The person's revoke of a pane: what it holds is no longer connected. ``incarnation`` is the
    pane's incarnation as the directory reads it (its token key)."""

    now: float
    pane_id: str
    incarnation: str
    by: str = "owner"


@dataclass(frozen=True)
class DisconnectAll:
    now: float
    by: str = "owner"


@dataclass(frozen=True)
class Submit:
    now: float
    token_hash: str
    message_id: str
    text: str
    recipient: Recipient
    ref: str  # fresh, generated by the daemon
    card_id: str  # fresh, used only if a card is opened
    in_reply_to: str | None = None
    act: str = ""  # a handoff's message: approved on that act's card (connectcore.hub_acts)


@dataclass(frozen=True)
class Decide:
    now: float
    card_id: str
    decision: Decision
    by: str = "owner"


@dataclass(frozen=True)
class PaneObserved:
    now: float
    pane_id: str
    incarnation: str
    ready: bool  # agent pane, idle, composer empty
    fingerprint: str
    read_at: float  # when the pane was read (an older reading never overwrites a newer one)


@dataclass(frozen=True)
class PaneGone:
    now: float
    pane_id: str
    incarnation: str


@dataclass(frozen=True)
class Unresolved:
    """The message's handle names no live pane now (``no_pane``), or several (``ambiguous``)."""

    reason: str


HandleResolution = Recipient | Unresolved


@dataclass(frozen=True)
class GuardObserved:
    """The daemon's fresh reading under the recipient's send lock."""

    now: float
    message: MessageKey
    incarnation: str | None  # the pane's incarnation now (None: the pane is gone)
    ready: bool
    fingerprint: str
    read_at: float
    # Where the message's handle resolves now (None: the message has no handle, or it was not resolved).
    handle: HandleResolution | None = None
    card_id: str = ""  # fresh, used only if the message moves to a new recipient


@dataclass(frozen=True)
class TypingObserved:
    """The daemon's last re-read after typing (None: typing failed before any reading), or why the
    typing failed partway (``failure``: unconfirmed whatever the reading)."""

    now: float
    message: MessageKey
    reading: AfterTyping | None
    failure: str = ""


@dataclass(frozen=True)
class Tick:
    now: float


@dataclass(frozen=True)
class Recover:
    """Daemon start: typing that was in flight is unconfirmed (never retyped); guards restart."""

    now: float


@dataclass(frozen=True)
class Reconcile:
    """Daemon start, after the first look at tmux: ``live`` holds every incarnation that still runs.
    Whatever the hub holds for any other incarnation ended while the daemon was down."""

    now: float
    live: frozenset[str]


@dataclass(frozen=True)
class ActProposed:
    """Control asks for an act of tier 2 or 3 (:mod:`connectcore.hub_acts`). ``target`` is the pane
    it touches (None: it opens a new window); ``question`` the dialog the pane shows (send_keys)."""

    now: float
    token_hash: str
    act_id: str
    tool: control.Tool
    target: Recipient | None
    args: Mapping[str, Any]
    question: control.QuestionShown | None = None  # (prompt, options, subject, highlighted option) as the pane shows it


@dataclass(frozen=True)
class ActDecided:
    """The person answered an act's card."""

    now: float
    act_id: str
    approve: bool
    by: str = "owner"


@dataclass(frozen=True)
class ActGuarded:
    """The daemon's fresh reading of the act's pane under its send lock (None: the pane is gone; for
    an act that opens a window, the daemon answers with the act's own empty incarnation)."""

    now: float
    act_id: str
    incarnation: str | None
    question: control.QuestionShown | None = None
    at_empty_prompt: bool = False  # a shell in the foreground, at its prompt, nothing typed (shell_text)


@dataclass(frozen=True)
class ActExecuted:
    """What executing an act did: ``error`` empty when it ran, else why it failed."""

    now: float
    act_id: str
    error: str = ""
    detail: str = ""


# --- restarts ---------------------------------------------------------------------------------------
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


class RestartRefused(ConnectError):
    """A restart the hub will not start or step: nothing changed; ``reason`` is the code to report."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class RestartPlanned:
    """The owner approved "Restart this agent to connect it": set the session's grant and begin.

    Effects: the grant's (Persist/Audit/Notify), then ``restart.Begin``'s (Audit, Notify, ObservePane)."""

    now: float
    state: restart_.Restart  # from restart.plan_restart, in its planned step
    session: SessionKey  # must be the plan's (harness, session id)
    scopes: frozenset[Scope]
    by: str = "owner"


@dataclass(frozen=True)
class RestartStepped:
    """The daemon's answer to an open restart's effect: ``restart.PaneObserved`` (ObservePane),
    ``StepDone`` / ``StepFailed`` (the effects of a step in AWAITING_DONE), ``Recover`` (InspectPane,
    or a record found open at startup), ``Timeout`` (``state.deadline`` passed)."""

    now: float
    restart_id: str
    event: restart_.RestartEvent
    # The step the daemon saw when it asked (the answer is for it). An answer for a step the restart
    # has left meanwhile (a revocation cancelled it, a timeout moved it on) is stale: ignored.
    for_step: restart_.RestartStep | None = None


@dataclass(frozen=True)
class RestartRespawned:
    """The restart's Respawn ran and ``incarnation`` runs in the pane: its token, if it gets one
    (step it after the Respawn effect, before answering StepDone)."""

    now: float
    restart_id: str
    token_hash: str  # the hash of the token the daemon put in the respawn environment
    principal_id: str  # fresh; unused when the session already has a principal
    pid: int
    incarnation: str


@dataclass(frozen=True)
class RestartRecovered:
    """Daemon start: a restart record found open, resumed; then step ``restart.Recover`` through
    :class:`RestartStepped`."""

    now: float
    record: restart_.RestartRecord
    limits: restart_.RestartLimits | None = None


_RESPAWNING = frozenset({restart_.RestartStep.PROCESS_ENDED, restart_.RestartStep.RESPAWNED})
_IDLE_WAITS = frozenset({restart_.RestartStep.WAITING_IDLE, restart_.RestartStep.RECHECKING_IDLE})
_BEFORE_EXIT = frozenset({restart_.RestartStep.PLANNED, restart_.RestartStep.WAITING_IDLE})  # cancel touches nothing


def _restart_session(state: restart_.Restart) -> SessionKey:
    return (state.record.harness, state.record.session_id)


#: The words of a message's reason while its handle names no pane or several (it waits, never guessed).
NO_SINGLE_PANE = "names no single pane"


def restart_of_pane(hub: Hub, pane_id: str) -> str | None:  # public: the shell asks it too
    """The open restart of this pane, if any (at most one)."""
    return next((rid for rid, r in hub.restarts.items() if r.record.pane_id == pane_id), None)


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
    hub, more = _maybe_attempt(hub, record.pane_id, now)
    return hub, effects + more


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


def _restart_holds(hub: Hub, message: Message, now: float) -> Step:
    """A guard answered once the pane's restart is open: nothing is typed; the message waits."""
    waiting = delivery.advance(message, "guard_wait", now=now, reason="the recipient is being restarted")
    attempts = {k: v for k, v in hub.attempts.items() if v != message.key}
    hub = _store(replace(hub, attempts=attempts), waiting)
    return hub, (Persist("message", waiting.key, waiting),)


# --- end of restarts --------------------------------------------------------------------------------


Event = (
    Launch
    | BindSession
    | SetGrant
    | Revoke
    | RevokePane
    | DisconnectAll
    | Submit
    | Decide
    | PaneObserved
    | PaneGone
    | GuardObserved
    | TypingObserved
    | Tick
    | Recover
    | Reconcile
    | RestartPlanned
    | RestartStepped
    | RestartRespawned
    | RestartRecovered
    | ActProposed
    | ActDecided
    | ActGuarded
    | ActExecuted
)

Step = tuple[Hub, tuple[Effect, ...]]


# --- reads ------------------------------------------------------------------------------------------


class CallRefused(ConnectError):
    """A call refused at the gate; ``audit`` is the record the daemon must write."""

    def __init__(self, reason: str, message: str, audit: Audit) -> None:
        super().__init__(message)
        self.reason = reason
        self.audit = audit


def authorize(
    hub: Hub, *, token_hash: str, scope: Scope | None, action: str, now: float, target: str = ""
) -> tuple[Principal, Audit]:
    """The gate every agent call passes: a live token and the scope (``None``: a connected token is
    enough), audited either way. A refusal names the agent a known token belongs to (revoked or
    ended: its calls are still its own), else ``agent:unknown``."""
    scope_name = scope.value if scope is not None else None
    try:
        principal = grants.authenticate(hub.book, token_hash)
    except grants.NotConnected as exc:
        raise CallRefused(
            exc.reason,
            str(exc),
            Audit(
                actor=_token_actor(hub.book, token_hash),
                action=action,
                outcome="refused",
                scope=scope_name,
                target=target,
                detail=exc.reason,
                at=now,
            ),
        ) from exc
    actor = grants.actor_name(principal)
    try:
        if scope is not None:
            grants.require(hub.book, principal, scope)
    except grants.ScopeDenied as exc:
        raise CallRefused(
            exc.reason,
            str(exc),
            Audit(
                actor=actor,
                action=action,
                outcome="refused",
                scope=scope_name,
                target=target,
                detail=exc.reason,
                at=now,
            ),
        ) from exc
    return principal, Audit(
        actor=actor, action=action, outcome="allowed", scope=scope_name, target=target, at=now
    )


def _token_actor(book: GrantBook, token_hash: str) -> str:
    """The audit actor of a token the daemon issued, whatever its state (the agent it joined)."""
    record = book.tokens.get(token_hash)
    if record is None:
        return "agent:unknown"
    return grants.actor_name(book.principals[grants.canonical(book, record.principal)])


def message_for(hub: Hub, principal_id: str, message_id: str) -> Message | None:
    """A message the principal (or its merge group) sent, by its own id."""
    for member in sorted(grants.group(hub.book, principal_id)):
        found = hub.messages.get((member, message_id))
        if found is not None:
            return found
    return None


# --- counters, pair approvals and hop state, by merge group ------------------------------------------
# They are keyed by the principal that was current when they were written; a later merge (a resumed
# agent's token bound to its session, :func:`connectcore.grants.bind_session`) makes two principals
# one agent, and records written under the old id after the merge (a card approved, a message typed)
# still name it. So every read goes through the merge group: a merge resets nothing.


def sent_within(hub: Hub, principal_id: str, now: float) -> tuple[float, ...]:
    """When the agent (any principal of its merge group) sent, within the rate window."""
    times = (t for m in grants.group(hub.book, principal_id) for t in hub.sent.get(m, ()))
    return delivery.within_window(tuple(sorted(times)), now, hub.limits.rate_window)


def pair_sent_within(hub: Hub, principal_id: str, incarnation: str, now: float) -> tuple[float, ...]:
    """When the agent sent to this recipient incarnation, within the rate window."""
    members = grants.group(hub.book, principal_id)
    times = (t for m in members for t in hub.pair_sent.get((m, incarnation), ()))
    return delivery.within_window(tuple(sorted(times)), now, hub.limits.rate_window)


def pair_approved(hub: Hub, principal_id: str, incarnation: str) -> bool:
    """The person approved this agent (any principal of its merge group) to message this incarnation."""
    return any((m, incarnation) in hub.pairs for m in grants.group(hub.book, principal_id))


def last_received(hub: Hub, principal_id: str) -> tuple[str, int, float] | None:
    """The agent's latest received message (conversation, hop, when), for the hop of its next one."""
    found = [hub.last_received[m] for m in grants.group(hub.book, principal_id) if m in hub.last_received]
    return max(found, key=lambda r: r[2]) if found else None


def awaited_panes(hub: Hub) -> frozenset[str]:
    """The panes a consented message waits to be typed into (``ready``): their next idle transition
    is what it waits for, so the daemon reads them as soon as they draw (``Timing.capture_awaited``).
    A message awaiting consent waits for a person, not for the pane. One pass over the messages."""
    return frozenset(m.recipient_pane for m in hub.messages.values() if m.state is MessageState.READY)


def panes_to_lock(hub: Hub, principal_ids: Iterable[str]) -> tuple[str, ...]:
    """Every pane whose send lock a revocation of these principals must hold: their own panes and
    the recipients of anything they sent or may receive that has not reached its outcome."""
    members: set[str] = set()
    for pid in principal_ids:
        members |= grants.group(hub.book, pid)
    panes: set[str] = set()
    for record in hub.book.tokens.values():
        if record.principal in members:
            panes.add(record.pane_id)
    for message in hub.messages.values():
        if message.is_final:
            continue
        if message.sender in members or message.recipient_principal in members:
            panes.add(message.recipient_pane)
    return tuple(sorted(panes))


# --- helpers ----------------------------------------------------------------------------------------


def _audit_outcome(message: Message, now: float) -> Audit:
    return Audit(
        actor=message.sender_actor,
        action="send_message",
        outcome=message.outcome,
        scope=Scope.MESSAGE.value,
        target=f"{message.recipient_pane}@{message.recipient_incarnation}",
        message_id=message.id,
        detail=message.reason,
        at=now,
    )


def _store(hub: Hub, message: Message) -> Hub:
    return replace(hub, messages={**hub.messages, message.key: message})


def _finalize(hub: Hub, message: Message, event: str, now: float, reason: str) -> Step:
    """Record a final outcome: persist, audit (the second record for this id), wake the sender,
    close an open card and free the pane's attempt slot."""
    done = delivery.advance(message, event, now=now, reason=reason)
    hub = _store(hub, done)
    effects: list[Effect] = [Persist("message", done.key, done), _audit_outcome(done, now)]
    if done.card is not None and done.card in hub.cards and consent.is_open(hub.cards[done.card]):
        card = consent.cancel(hub.cards[done.card], now=now, by="daemon")
        hub = replace(hub, cards={**hub.cards, card.id: card})
        effects += [Persist("card", (card.id,), card), Notify("card", (card.id,))]
    if hub.attempts.get(done.recipient_pane) == done.key:
        attempts = dict(hub.attempts)
        del attempts[done.recipient_pane]
        hub = replace(hub, attempts=attempts)
    waiter = grants.canonical(hub.book, done.sender)  # long polls wait under the agent's current principal
    effects.append(Notify("message", done.key, principal=waiter, payload={"outcome": done.outcome}))
    return hub, tuple(effects)


def _recipient_scopes(hub: Hub, incarnation: str) -> tuple[Principal | None, frozenset[str]]:
    principal = grants.principal_at(hub.book, incarnation)
    if principal is None:
        return None, frozenset()
    return principal, frozenset(s.value for s in grants.scopes_of(hub.book, principal.id))


def _open_card(hub: Hub, message: Message, card_id: str, now: float, recipient_actor: str) -> Step:
    if card_id in hub.cards:
        raise ConnectError(f"card id {card_id} was already used")
    card = Card(
        id=card_id,
        message=message.key,
        sender=message.sender,
        sender_actor=message.sender_actor,
        recipient_pane=message.recipient_pane,
        recipient_incarnation=message.recipient_incarnation,
        recipient_actor=recipient_actor,
        text=message.text,
        hop=message.hop,
        created_at=now,
        expires_at=min(now + hub.limits.card_ttl, message.expires_at),
    )
    hub = replace(hub, cards={**hub.cards, card_id: card})
    return hub, (Persist("card", (card_id,), card), Notify("card", (card_id,), payload={"state": "pending"}))


def _pane_actor(hub: Hub, incarnation: str, pane_id: str) -> str:
    principal = grants.principal_at(hub.book, incarnation)
    return grants.actor_name(principal) if principal is not None else f"pane:{pane_id}"


def _maybe_attempt(hub: Hub, pane_id: str, now: float) -> Step:
    """Start the guard for the oldest consented message to this pane, if the pane is armed."""
    view = hub.panes.get(pane_id)
    if view is None or view.arming is not arming.Arming.ARMED or pane_id in hub.attempts:
        return hub, ()
    if restart_of_pane(hub, pane_id) is not None:  # a pane being restarted is not armed for delivery
        return hub, ()
    for message in hub.messages.values():
        if (
            message.state is MessageState.READY
            and message.recipient_pane == pane_id
            and message.recipient_incarnation == view.incarnation
            and now < message.expires_at  # past its hour it is never typed: the next tick expires it
        ):
            guarded = delivery.advance(message, "attempt", now=now)
            hub = _store(hub, guarded)
            hub = replace(hub, attempts={**hub.attempts, pane_id: guarded.key})
            return hub, (CheckGuard(pane_id, view.incarnation, guarded.key),)
    return hub, ()


# --- transitions ------------------------------------------------------------------------------------


def _launch(hub: Hub, ev: Launch) -> Step:
    hub_acts.check_launch(hub.book, control=ev.control, session=ev.session)  # one control at a time
    book, _principal, effects = grants.issue_token(
        hub.book,
        now=ev.now,
        token_hash=ev.token_hash,
        principal_id=ev.principal_id,
        harness=ev.harness,
        pane_id=ev.pane_id,
        pid=ev.pid,
        incarnation=ev.incarnation,
        scopes=ev.scopes,
        session=ev.session,
        control=ev.control,
    )
    return replace(hub, book=book), effects


def _bind(hub: Hub, ev: BindSession) -> Step:
    if ev.principal_id not in hub.book.principals:
        raise UnknownItem("unknown_principal", f"no principal {ev.principal_id}")
    book, effects = grants.bind_session(
        hub.book, now=ev.now, principal_id=ev.principal_id, session=ev.session
    )
    return replace(hub, book=book), effects


def _cancel_for(hub: Hub, members: frozenset[str], now: float, reason: str) -> Step:
    """Cancel every open message sent by or addressed to these principals, and drop their pairs."""
    effects: list[Effect] = []
    for message in list(hub.messages.values()):
        if message.is_final or message.state is MessageState.TYPING:
            continue
        if message.sender in members or message.recipient_principal in members:
            hub, more = _finalize(hub, message, "cancel", now, reason)
            effects += more
    incarnations = {t.incarnation for t in hub.book.tokens.values() if t.principal in members}
    pairs = frozenset(p for p in hub.pairs if p[0] not in members and p[1] not in incarnations)
    if pairs != hub.pairs:
        effects.append(Persist("pairs", (), tuple(sorted(pairs))))
    return replace(hub, pairs=pairs), tuple(effects)


def _revoke(hub: Hub, principal_id: str, now: float, by: str) -> Step:
    if principal_id not in hub.book.principals:
        raise UnknownItem("unknown_principal", f"no principal {principal_id}")
    members = grants.group(hub.book, principal_id)
    restarts = _restarts_of(hub, members, frozenset())
    book, effects = grants.revoke(hub.book, now=now, principal_id=principal_id, by=by)
    hub, more = _cancel_for(replace(hub, book=book), members, now, "revoked")
    hub, again = _withdraw_restarts(hub, restarts, now, "connect revoked while restarting")
    hub, acts = hub_acts.cancel_by(hub, members, now, "control was revoked")
    return hub, effects + more + again + acts


def revoke_pane_target(hub: Hub, pane_id: str, incarnation: str) -> tuple[str | None, str | None]:
    """What a revoke of ``pane_id`` says "no" to: the connected principal of its incarnation, and its
    open restart-to-connect (an agent launched Off holds no principal while it is restarted to connect).
    Neither: :class:`UnknownItem` ``not_connected``. Public: the shell asks it for the panes to lock."""
    principal = grants.principal_at(hub.book, incarnation)
    restart_id = restart_of_pane(hub, pane_id)
    if principal is None and restart_id is None:
        raise UnknownItem("not_connected", f"{pane_id} holds no connected agent and no open restart to connect it")
    return (principal.id if principal is not None else None), restart_id


def _revoke_pane(hub: Hub, ev: RevokePane) -> Step:
    principal_id, restart_id = revoke_pane_target(hub, ev.pane_id, ev.incarnation)
    effects: tuple[Effect, ...] = ()
    if principal_id is not None:
        hub, effects = _revoke(hub, principal_id, ev.now, ev.by)
    if restart_id is not None:
        hub, more = _withdraw_restarts(hub, (restart_id,), ev.now, "connect revoked while restarting")
        effects += more
    return hub, effects


def _set_grant(hub: Hub, ev: SetGrant) -> Step:
    hub, withdrawn = _set_grant_only(hub, ev)
    members = frozenset(m for p in grants.principals_of_session(hub.book, ev.session) for m in grants.group(hub.book, p))
    restarts = _restarts_of(hub, members, frozenset({ev.session}))
    hub, more = _withdraw_restarts(hub, restarts, ev.now, "the grant changed while restarting")
    return hub, withdrawn + more


def _set_grant_only(hub: Hub, ev: SetGrant) -> Step:
    if not ev.scopes:
        effects: tuple[Effect, ...] = ()
        principals = grants.principals_of_session(hub.book, ev.session)
        book, more = grants.set_grant(hub.book, now=ev.now, session=ev.session, scopes=frozenset(), by=ev.by)
        hub = replace(hub, book=book)
        effects += more
        for principal_id in principals:
            hub, more = _revoke(hub, principal_id, ev.now, ev.by)
            effects += more
        return hub, effects
    book, effects = grants.set_grant(hub.book, now=ev.now, session=ev.session, scopes=ev.scopes, by=ev.by)
    return replace(hub, book=book), effects


def _disconnect_all(hub: Hub, ev: DisconnectAll) -> Step:
    effects: tuple[Effect, ...] = ()
    for principal_id in grants.all_connected(hub.book):
        hub, more = _revoke(hub, principal_id, ev.now, ev.by)
        effects += more
    hub, more = _withdraw_restarts(hub, sorted(hub.restarts), ev.now, "disconnect all while restarting")
    effects += more
    # control stays connected (it is not a peer grant), but nothing it asked for and was not yet run runs
    hub, more = hub_acts.cancel(hub, list(hub.acts.values()), ev.now, "disconnect all")
    effects += more
    return hub, effects + (Audit(actor=ev.by, action="disconnect_all", outcome="done", at=ev.now),)


def _refuse(sender_actor: str, ev: Submit, reason: str, message: str) -> CallRefused:
    return CallRefused(
        reason,
        message,
        Audit(
            actor=sender_actor,
            action="send_message",
            outcome="refused",
            scope=Scope.MESSAGE.value,
            target=f"{ev.recipient.pane_id}@{ev.recipient.incarnation}",
            message_id=ev.message_id,
            detail=reason,
            at=ev.now,
        ),
    )


def _submit(hub: Hub, ev: Submit) -> Step:
    """Admit a message or refuse it before admission (``CallRefused``: nothing stored)."""
    sender, _allowed = authorize(
        hub,
        token_hash=ev.token_hash,
        scope=Scope.MESSAGE,
        action="send_message",
        now=ev.now,
        target=ev.recipient.pane_id,
    )
    actor = grants.actor_name(sender)
    limits = hub.limits
    sender_token = hub.book.tokens[ev.token_hash]
    try:
        delivery.check_message_id(ev.message_id, limits)
        delivery.check_not_duplicate(ev.message_id, message_for(hub, sender.id, ev.message_id))
        delivery.check_text(ev.text)
        delivery.check_not_self(ev.recipient.incarnation, sender_token.incarnation)
        recipient_principal, recipient_scopes = _recipient_scopes(hub, ev.recipient.incarnation)
        sender_scopes = frozenset(s.value for s in grants.scopes_of(hub.book, sender.id))
        why = consent.may_receive(
            recipient_kind=ev.recipient.kind, recipient_scopes=recipient_scopes, sender_scopes=sender_scopes
        )
        if why is not None:
            raise Refused(
                why, f"{ev.recipient.pane_id} cannot receive peer messages ({why.replace('_', ' ')})"
            )
        members = grants.group(hub.book, sender.id)
        original_key = hub.refs.get(ev.in_reply_to) if ev.in_reply_to is not None else None
        original = hub.messages.get(original_key) if original_key is not None else None
        delivery.check_reply(ev.in_reply_to, original, members)
        provenance = delivery.provenance_line(
            ref=ev.ref,
            sender_actor=actor,
            sender_pane=sender_token.pane_id,
            sender_incarnation=sender_token.incarnation,
            control=sender.control,
            can_reply=Scope.MESSAGE.value in recipient_scopes,
        )
        typed = delivery.compose(provenance, ev.text)
        delivery.check_size(typed, limits)
        delivery.check_id_cap(delivery.live_ids(hub.messages, members), limits)
        sent = sent_within(hub, sender.id, ev.now)
        delivery.check_rate(len(sent), limits.sender_per_window, "sender", limits.rate_window)
        pair: PairKey = (sender.id, ev.recipient.incarnation)
        pair_sent = pair_sent_within(hub, sender.id, ev.recipient.incarnation, ev.now)
        delivery.check_rate(len(pair_sent), limits.pair_per_window, "pair", limits.rate_window)
        queued_to_it, queued = delivery.queued_bytes(hub.messages.values(), ev.recipient.incarnation)
        delivery.check_queue(len(typed.encode("utf-8")), queued_to_it, queued, ev.recipient.pane_id, limits)
        if ev.ref in hub.refs:
            raise ConnectError(f"message ref {ev.ref} was already used")
    except Refused as exc:
        raise _refuse(actor, ev, exc.reason, str(exc)) from exc

    conversation, hop = delivery.assign_hop(
        last_received(hub, sender.id), ref=ev.ref, now=ev.now, limits=limits
    )
    message = Message(
        sender=sender.id,
        id=ev.message_id,
        ref=ev.ref,
        sender_actor=actor,
        recipient_pane=ev.recipient.pane_id,
        recipient_incarnation=ev.recipient.incarnation,
        recipient_principal=recipient_principal.id if recipient_principal is not None else None,
        recipient_kind=ev.recipient.kind,
        handle=ev.recipient.handle,
        text=ev.text,
        typed=typed,
        conversation=conversation,
        hop=hop,
        in_reply_to=ev.in_reply_to,
        created_at=ev.now,
        expires_at=ev.now + limits.id_ttl,
        state=MessageState.AWAITING_CONSENT,
    )
    window = limits.rate_window  # each key keeps only its own times (the group is summed on reading)
    hub = replace(
        hub,
        refs={**hub.refs, ev.ref: message.key},
        sent={**hub.sent, sender.id: (*delivery.within_window(hub.sent.get(sender.id, ()), ev.now, window), ev.now)},
        pair_sent={
            **hub.pair_sent,
            pair: (*delivery.within_window(hub.pair_sent.get(pair, ()), ev.now, window), ev.now),
        },
    )
    effects: list[Effect] = []
    approved = pair_approved(hub, sender.id, ev.recipient.incarnation) or (
        bool(ev.act) and hub_acts.covers_handoff(hub, ev.act, grants.group(hub.book, sender.id), ev.recipient.incarnation)
    )
    if consent.needs_card(pair_approved=approved, hop=hop, hop_limit=limits.hop_limit):
        message = replace(message, card=ev.card_id)
        hub = _store(hub, message)
        hub, more = _open_card(
            hub, message, ev.card_id, ev.now, _pane_actor(hub, ev.recipient.incarnation, ev.recipient.pane_id)
        )
        effects += [Persist("message", message.key, message), *more]
    else:
        message = delivery.advance(message, "approve", now=ev.now, reason="pair_approved")
        hub = _store(hub, message)
        effects.append(Persist("message", message.key, message))
    effects.append(_audit_outcome(message, ev.now))
    hub, more = _maybe_attempt(hub, message.recipient_pane, ev.now)
    return hub, (*effects, *more)


def consent_detail(hub: Hub, card: Card) -> str:
    """A consent record names both ends by their panes (``from %1@... to %2@...``): the sender's live
    pane (its actor when it has none left), and the recipient the card is for."""
    tokens = grants.live_tokens(hub.book, card.sender)
    sender = f"{tokens[0].pane_id}@{tokens[0].incarnation}" if tokens else card.sender_actor
    return f"from {sender} to {card.recipient_pane}@{card.recipient_incarnation}"


def _decide(hub: Hub, ev: Decide) -> Step:
    card = hub.cards.get(ev.card_id)
    if card is None:
        raise UnknownItem("unknown_card", f"no card {ev.card_id}")
    if not consent.is_open(card):
        raise UnknownItem("card_closed", f"card {ev.card_id} was already answered ({card.state.value})")
    answered = consent.decide(card, ev.decision, now=ev.now, by=ev.by)
    hub = replace(hub, cards={**hub.cards, card.id: answered})
    effects: list[Effect] = [
        Persist("card", (card.id,), answered),
        Audit(
            actor=ev.by,
            action="consent",
            outcome=answered.state.value,
            target=card.sender_actor,
            message_id=card.message[1],
            detail=consent_detail(hub, card),
            at=ev.now,
        ),
        Notify("card", (card.id,), payload={"state": answered.state.value}),
    ]
    message = hub.messages[card.message]
    if ev.decision is Decision.DECLINE:
        hub, more = _finalize(hub, message, "decline", ev.now, "declined by the person")
        return hub, (*effects, *more)
    if ev.decision is Decision.APPROVE_PAIR:
        hub = replace(hub, pairs=hub.pairs | {(card.sender, card.recipient_incarnation)})
        effects.append(Persist("pairs", (), tuple(sorted(hub.pairs))))
    ready = delivery.advance(message, "approve", now=ev.now, reason=answered.state.value)
    hub = _store(hub, ready)
    effects.append(Persist("message", ready.key, ready))
    hub, more = _maybe_attempt(hub, ready.recipient_pane, ev.now)
    return hub, (*effects, *more)


def _pane_observed(hub: Hub, ev: PaneObserved) -> Step:
    effects: tuple[Effect, ...] = ()
    old = hub.panes.get(ev.pane_id)
    if old is not None and old.incarnation != ev.incarnation:
        hub, effects = _pane_gone(hub, PaneGone(ev.now, ev.pane_id, old.incarnation))
        old = None
    seen = Seen(ev.ready, ev.fingerprint, ev.read_at)
    view = arming.first(ev.incarnation, seen, ev.now) if old is None else arming.observe(old, seen, ev.now)
    hub = replace(hub, panes={**hub.panes, ev.pane_id: view})
    hub, more = _draft_cleared(hub, ev)
    effects += more
    hub, more = _maybe_attempt(hub, ev.pane_id, ev.now)
    return hub, effects + more


def _draft_cleared(hub: Hub, ev: PaneObserved) -> Step:
    """A reading with an empty composer, read after connect left a draft there, closes the item."""
    left = hub.drafts.get(ev.pane_id)
    if left is None or left.incarnation != ev.incarnation or not ev.ready or ev.read_at < left.at:
        return hub, ()
    return _close_draft(hub, ev.pane_id, "the composer is empty again")


def _open_draft(hub: Hub, message: Message, now: float, why: str) -> Step:
    left = LeftDraft(message.recipient_pane, message.recipient_incarnation, message.key, message.ref, now, why)
    return _open_left(hub, left)


def _open_left(hub: Hub, left: LeftDraft) -> Step:
    hub = replace(hub, drafts={**hub.drafts, left.pane_id: left})
    return hub, (Notify("needs", (left.pane_id,), payload={"state": "open", "ref": left.ref}),)


def _close_draft(hub: Hub, pane_id: str, why: str) -> Step:
    if pane_id not in hub.drafts:
        return hub, ()
    hub = replace(hub, drafts={k: v for k, v in hub.drafts.items() if k != pane_id})
    return hub, (Notify("needs", (pane_id,), payload={"state": "closed", "why": why}),)


def _pane_gone(hub: Hub, ev: PaneGone) -> Step:
    """The process a pane held is gone: messages addressed to it are cancelled at once, its tokens
    end, pair approvals for that incarnation lapse, and a restart of it that had not yet sent its exit
    command (planned, waiting for idle) is cancelled: the agent it was to relaunch ended by itself."""
    effects: tuple[Effect, ...] = ()
    for rid, state in list(hub.restarts.items()):
        record = state.record
        if (record.pane_id, record.incarnation) == (ev.pane_id, ev.incarnation) and state.step in _BEFORE_EXIT:
            state, more = restart_.step(state, restart_.Cancel(now=ev.now, reason="the agent ended before its restart"))
            hub, again = _closed(hub, rid, state, ev.now)
            effects += more + again
    for message in list(hub.messages.values()):
        if (
            message.recipient_incarnation == ev.incarnation
            and not message.is_final
            and message.state is not MessageState.TYPING
        ):
            hub, more = _finalize(hub, message, "cancel", ev.now, "recipient incarnation ended")
            effects += more
    hub, more = hub_acts.cancel_at(hub, ev.incarnation, ev.now)  # before its tokens end: control's acts too
    effects += more
    book, more = grants.end_incarnation(hub.book, now=ev.now, incarnation=ev.incarnation)
    effects += more
    pairs = frozenset(p for p in hub.pairs if p[1] != ev.incarnation)
    if pairs != hub.pairs:
        effects += (Persist("pairs", (), tuple(sorted(pairs))),)
    panes = {k: v for k, v in hub.panes.items() if not (k == ev.pane_id and v.incarnation == ev.incarnation)}
    hub = replace(hub, book=book, pairs=pairs, panes=panes)
    left = hub.drafts.get(ev.pane_id)
    if left is not None and left.incarnation == ev.incarnation:
        hub, more = _close_draft(hub, ev.pane_id, "the pane's process ended")
        effects += more
    return hub, effects


def _guard(hub: Hub, ev: GuardObserved) -> Step:
    """The guard's answer. One that ends the message, or moves it to another pane, without typing
    leaves the pane's idle unused: the next consented message for the pane is tried at once."""
    message = hub.messages.get(ev.message)
    if message is None:
        raise UnknownItem("unknown_message", f"no message {ev.message}")
    hub, effects = _guard_decides(hub, ev, message)
    after = hub.messages.get(message.key)
    if after is None or after.is_final or after.recipient_pane != message.recipient_pane:
        hub, more = _maybe_attempt(hub, message.recipient_pane, ev.now)
        effects += more
    return hub, effects


def _guard_decides(hub: Hub, ev: GuardObserved, message: Message) -> Step:
    if message.state is not MessageState.GUARDING:
        # It reached an outcome (revocation, expiry) between CheckGuard and the lock: nothing to type.
        return hub, ()
    if restart_of_pane(hub, message.recipient_pane) is not None:
        return _restart_holds(hub, message, ev.now)
    now = ev.now
    pane = message.recipient_pane
    attempts = {k: v for k, v in hub.attempts.items() if v != message.key}
    if ev.incarnation != message.recipient_incarnation:
        return _finalize(hub, message, "cancel", now, "recipient incarnation changed")
    sender_live = any(t.state is grants.TokenState.LIVE for t in grants.live_tokens(hub.book, message.sender))
    if not sender_live:
        return _finalize(hub, message, "cancel", now, "sender no longer connected")
    sender_scopes = grants.scopes_of(hub.book, message.sender)
    if Scope.MESSAGE not in sender_scopes:
        return _finalize(hub, message, "refuse", now, "sender lost the message scope")
    _principal, recipient_scopes = _recipient_scopes(hub, message.recipient_incarnation)
    why = consent.may_receive(
        recipient_kind=message.recipient_kind,
        recipient_scopes=recipient_scopes,
        sender_scopes=frozenset(s.value for s in sender_scopes),
    )
    if why is not None:
        return _finalize(hub, message, "refuse", now, f"recipient can no longer receive ({why})")
    seen = Seen(ev.ready, ev.fingerprint, ev.read_at)
    view = hub.panes.get(pane)
    target = ev.handle if message.handle is not None else None
    if isinstance(target, Recipient) and (target.pane_id, target.incarnation) != (pane, message.recipient_incarnation):
        return _reroute(replace(hub, attempts=attempts), message, ev, target)
    if not arming.guard_passes(view, ev.incarnation, seen):
        return _guard_waits(hub, message, attempts, seen, now, "screen changed before typing", arming.guard_wait)
    if message.handle is not None and not isinstance(target, Recipient):
        # Never guessed: the message waits until its handle names exactly one pane again, at the back
        # of the pane's queue, so that it does not hold up the messages behind it (the next idle tries
        # the next one; found by the simulation).
        reason = f"handle {message.handle} {NO_SINGLE_PANE} ({target.reason if target else 'unresolved'})"
        hub = replace(hub, messages={k: v for k, v in hub.messages.items() if k != message.key})
        return _guard_waits(hub, message, attempts, seen, now, reason, arming.guard_hold)
    typing = delivery.advance(message, "guard_pass", now=now, reason="typing started")
    hub = _store(hub, typing)
    assert view is not None
    hub = replace(hub, panes={**hub.panes, pane: arming.typing(view, seen, now)})
    inc = message.recipient_incarnation
    return hub, (
        Persist("message", typing.key, typing),
        TypeText(pane, inc, typing.typed, typing.key, submit=True, settle=delivery.submit_settle(typing.recipient_kind)),
        ConfirmTyping(pane, inc, typing.key),
    )


def _guard_waits(
    hub: Hub,
    message: Message,
    attempts: dict[str, MessageKey],
    seen: Seen,
    now: float,
    reason: str,
    disarm: Callable[[PaneView, Seen, float], PaneView],
) -> Step:
    """Transient: the message waits for the pane's next idle; the guard's reading moves the pane's arming."""
    waiting = delivery.advance(message, "guard_wait", now=now, reason=reason)
    hub = _store(replace(hub, attempts=attempts), waiting)
    view = hub.panes.get(message.recipient_pane)
    if view is not None and view.incarnation == message.recipient_incarnation and view.arming is not arming.Arming.TYPING:
        hub = replace(hub, panes={**hub.panes, message.recipient_pane: disarm(view, seen, now)})
    return hub, ()


def _reroute(hub: Hub, message: Message, ev: GuardObserved, target: Recipient) -> Step:
    """A handle that now resolves to another pane: a new recipient, which consent must cover."""
    principal, scopes = _recipient_scopes(hub, target.incarnation)
    sender_scopes = frozenset(s.value for s in grants.scopes_of(hub.book, message.sender))
    why = consent.may_receive(
        recipient_kind=target.kind, recipient_scopes=scopes, sender_scopes=sender_scopes
    )
    if why is not None:
        return _finalize(
            hub, message, "refuse", ev.now, f"handle moved to a pane that cannot receive ({why})"
        )
    moved = replace(
        message,
        recipient_pane=target.pane_id,
        recipient_incarnation=target.incarnation,
        recipient_principal=principal.id if principal is not None else None,
        recipient_kind=target.kind,
    )
    if not consent.needs_card(
        pair_approved=pair_approved(hub, message.sender, target.incarnation),
        hop=message.hop,
        hop_limit=hub.limits.hop_limit,
    ):
        moved = delivery.advance(moved, "reroute_approved", now=ev.now, reason="handle moved; pair approved")
        hub = _store(hub, moved)
        hub, more = _maybe_attempt(hub, moved.recipient_pane, ev.now)
        return hub, (Persist("message", moved.key, moved), *more)
    moved = replace(
        delivery.advance(moved, "reroute", now=ev.now, reason="handle moved; needs consent"), card=ev.card_id
    )
    hub = _store(hub, moved)
    hub, more = _open_card(
        hub, moved, ev.card_id, ev.now, _pane_actor(hub, target.incarnation, target.pane_id)
    )
    return hub, (Persist("message", moved.key, moved), *more)


def _typed(hub: Hub, ev: TypingObserved) -> Step:
    message = hub.messages.get(ev.message)
    if message is None:
        raise UnknownItem("unknown_message", f"no message {ev.message}")
    reading = ev.reading
    verdict, why = delivery.landed(reading, last=True)
    if ev.failure:
        verdict, why = Landing.UNCONFIRMED, ev.failure
    if verdict is Landing.DELIVERED:
        hub, effects = _finalize(hub, message, "confirmed", ev.now, why)
        if message.recipient_principal is not None:
            hub = replace(
                hub,
                last_received={
                    **hub.last_received,
                    message.recipient_principal: (message.conversation, message.hop, ev.now),
                },
            )
            effects += (
                Notify(
                    "inbox",
                    message.key,
                    principal=grants.canonical(hub.book, message.recipient_principal),
                    payload={"ref": message.ref},
                ),
            )
    else:
        hub, effects = _finalize(hub, message, "not_confirmed", ev.now, why)
        # A draft after the confirmation gave up is, the guard having seen the composer empty, most
        # likely connect's own (a collapsed paste shows no marker); after a failed send, only if the
        # marker shows it is.
        if reading is not None and reading.left_draft and (not ev.failure or reading.marker_seen):
            why = "typing was not confirmed; a draft is in the composer"
            hub, more = _open_draft(hub, message, reading.read_at, why)
            effects += more
    view = hub.panes.get(message.recipient_pane)
    if view is not None and view.incarnation == message.recipient_incarnation and view.arming is arming.Arming.TYPING:
        confirming = (
            Seen(reading.ready, reading.fingerprint, reading.read_at, reading.answered) if reading is not None else None
        )
        hub = replace(hub, panes={**hub.panes, message.recipient_pane: arming.typed(view, confirming, ev.now)})
        hub, more = _maybe_attempt(hub, message.recipient_pane, ev.now)
        effects += more
    return hub, effects


def _rearm_quiet_panes(hub: Hub, now: float) -> Step:
    """A pane that sits ready but unarmed for ``rearm_after`` seconds is armed by the clock
    (:func:`connectcore.arming.quiet`): its turn was too quick to be seen, or its reading went unheard."""
    effects: tuple[Effect, ...] = ()
    for pane_id, view in list(hub.panes.items()):
        rearmed = arming.quiet(view, now, hub.limits.rearm_after)
        if rearmed is not None:
            hub = replace(hub, panes={**hub.panes, pane_id: rearmed})
            hub, more = _maybe_attempt(hub, pane_id, now)
            effects += more
    return hub, effects


def _tick(hub: Hub, ev: Tick) -> Step:
    now = ev.now
    hub, effects = _rearm_quiet_panes(hub, now)
    for card in list(hub.cards.values()):
        if consent.is_open(card) and now >= card.expires_at:
            expired = consent.expire(card, now=now)
            hub = replace(hub, cards={**hub.cards, card.id: expired})
            effects += (
                Persist("card", (card.id,), expired),
                Notify("card", (card.id,), payload={"state": "expired"}),
            )
            message = hub.messages[card.message]
            if message.state is MessageState.AWAITING_CONSENT and message.card == card.id:
                hub, more = _finalize(hub, message, "expire", now, "card expired unanswered")
                effects += more
    released: list[MessageKey] = []
    for message in list(hub.messages.values()):
        if now < message.expires_at:
            continue
        if (
            not message.is_final
            and message.state is not MessageState.TYPING
            and message.state is not MessageState.GUARDING
        ):
            hub, more = _finalize(hub, message, "expire", now, "not delivered within the id's hour")
            effects += more
            released.append(message.key)  # recorded expired first, released only after
        elif message.is_final:
            released.append(message.key)
    if released:
        gone = set(released)
        messages = {k: v for k, v in hub.messages.items() if k not in gone}
        refs = {r: k for r, k in hub.refs.items() if k not in gone}
        hub = replace(hub, messages=messages, refs=refs)
    window = hub.limits.rate_window
    sent = {k: t for k, v in hub.sent.items() if (t := delivery.within_window(v, now, window))}
    pair_sent = {k: t for k, v in hub.pair_sent.items() if (t := delivery.within_window(v, now, window))}
    hub, more = hub_acts.tick(hub, now)
    effects += more
    live_cards = {m.card for m in hub.messages.values()}  # once per tick, not once per card
    cards = {
        k: c
        for k, c in hub.cards.items()
        if consent.is_open(c) or k in live_cards
    }
    return replace(hub, sent=sent, pair_sent=pair_sent, cards=cards), effects


def _recover(hub: Hub, ev: Recover) -> Step:
    effects: tuple[Effect, ...] = ()
    panes: dict[str, arming.PaneView] = {}
    for message in list(hub.messages.values()):
        if message.state is MessageState.TYPING:
            # its idle was used by the typing: the first look is not the next idle (arming's rule)
            panes[message.recipient_pane] = arming.typed_before_restart(message.recipient_incarnation, ev.now)
            hub, more = _finalize(hub, message, "not_confirmed", ev.now, "daemon restarted while typing")
            effects += more
            hub, more = _open_draft(hub, message, ev.now, "the daemon restarted while typing")
            effects += more
        elif message.state is MessageState.GUARDING:
            waiting = delivery.advance(
                message, "guard_wait", now=ev.now, reason="daemon restarted before typing"
            )
            hub = _store(hub, waiting)
            effects += (Persist("message", waiting.key, waiting),)
    hub = replace(hub, attempts={}, panes=panes)
    hub, more = hub_acts.recover(hub, ev.now)
    effects += more
    hub, more = _tick(hub, Tick(ev.now))
    return hub, effects + more


def dead_incarnations(hub: Hub, live: frozenset[str]) -> tuple[tuple[str, str], ...]:
    """(pane, incarnation) of everything the hub holds for an incarnation not in ``live``: live
    tokens, messages or cards not final that are addressed to it, and drafts it may hold."""
    held: dict[str, str] = {}
    for token in hub.book.tokens.values():
        if token.state is grants.TokenState.LIVE:
            held.setdefault(token.incarnation, token.pane_id)
    for message in hub.messages.values():
        if not message.is_final:
            held.setdefault(message.recipient_incarnation, message.recipient_pane)
    for card in hub.cards.values():
        if consent.is_open(card):
            held.setdefault(card.recipient_incarnation, card.recipient_pane)
    for left in hub.drafts.values():
        held.setdefault(left.incarnation, left.pane_id)
    return tuple(sorted((pane, inc) for inc, pane in held.items() if inc not in live))


def _reconcile(hub: Hub, ev: Reconcile) -> Step:
    """Each dead incarnation is ended exactly as if the daemon had seen its pane go (R: PaneGone)."""
    effects: tuple[Effect, ...] = ()
    for pane_id, incarnation in dead_incarnations(hub, ev.live):
        hub, more = _pane_gone(hub, PaneGone(ev.now, pane_id, incarnation))
        effects += more
    return hub, effects


def _revoke_event(hub: Hub, ev: Revoke) -> Step:
    return _revoke(hub, ev.principal_id, ev.now, ev.by)


#: Every event's handler, by the event's type: :func:`step` dispatches through it (as the interpreter
#: does with effects); an event type not in it is refused loudly.
HANDLERS: Mapping[type[Any], Callable[[Hub, Any], Step]] = MappingProxyType(
    {
        Submit: _submit,
        PaneObserved: _pane_observed,
        GuardObserved: _guard,
        TypingObserved: _typed,
        Tick: _tick,
        Decide: _decide,
        Launch: _launch,
        BindSession: _bind,
        SetGrant: _set_grant,
        Revoke: _revoke_event,
        RevokePane: _revoke_pane,
        DisconnectAll: _disconnect_all,
        PaneGone: _pane_gone,
        Recover: _recover,
        Reconcile: _reconcile,
        RestartPlanned: _restart_planned,
        RestartStepped: _restart_stepped,
        RestartRespawned: _restart_respawned,
        RestartRecovered: _restart_recovered,
        ActProposed: hub_acts.propose,
        ActDecided: hub_acts.decide,
        ActGuarded: hub_acts.guarded,
        ActExecuted: hub_acts.executed,
    }
)


def step(hub: Hub, event: Event) -> Step:
    """Apply one event. Pure: the same hub and event always give the same hub and effects."""
    handler = HANDLERS.get(type(event))
    if handler is None:
        raise ConnectError(f"unknown event {type(event).__name__}: no handler in hub.HANDLERS")
    return handler(hub, event)


def restore(
    book: GrantBook,
    messages: Iterable[Message],
    cards: Iterable[Card],
    pairs: Iterable[PairKey],
    limits: Limits = DEFAULT_LIMITS,
    acts: Iterable[control.Act] = (),
) -> Hub:
    """Rebuild the hub from the store at daemon start (then step :class:`Recover`)."""
    msgs = {m.key: m for m in messages}
    return Hub(
        book=book,
        limits=limits,
        messages=msgs,
        refs={m.ref: m.key for m in msgs.values()},
        cards={c.id: c for c in cards},
        pairs=frozenset(pairs),
        acts={a.id: a for a in acts},
    )


__all__ = [
    "ActDecided",
    "ActExecuted",
    "ActGuarded",
    "ActProposed",
    "BindSession",
    "CallRefused",
    "CardState",
    "Decide",
    "DisconnectAll",
    "Event",
    "GuardObserved",
    "HANDLERS",
    "HandleResolution",
    "Hub",
    "Launch",
    "LeftDraft",
    "PaneGone",
    "PaneObserved",
    "PaneView",
    "Recipient",
    "Reconcile",
    "Recover",
    "RestartPlanned",
    "RestartRecovered",
    "RestartRefused",
    "RestartRespawned",
    "RestartStepped",
    "Revoke",
    "SetGrant",
    "Submit",
    "Tick",
    "TypingObserved",
    "UnknownItem",
    "Unresolved",
    "authorize",
    "dead_incarnations",
    "last_received",
    "message_for",
    "pair_approved",
    "pair_sent_within",
    "panes_to_lock",
    "restart_of_pane",
    "restore",
    "sent_within",
    "step",
]
