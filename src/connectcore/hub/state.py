"""The hub's state and the events it steps: :class:`Hub`, the items it holds (:class:`LeftDraft`),
every event type (:data:`Event`), the errors a step raises, and :func:`restart_of_pane`, the one query
every part asks. Data only: the parts of :mod:`connectcore.hub` import it, it imports none of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from connectcore import control
from connectcore import restart as restart_
from connectcore._machine import ConnectError
from connectcore.arming import PaneView
from connectcore.consent import Card, Decision, PairKey
from connectcore.delivery import (
    DEFAULT_LIMITS,
    AfterTyping,
    Limits,
    Message,
    MessageKey,
)
from connectcore.effects import (
    Effect,
)
from connectcore.federation.envelope import Verdict
from connectcore.federation.inbox import Inbox
from connectcore.federation.outbox import Outbox
from connectcore.federation.remote import DEFAULT_SETTINGS, PairingSettings
from connectcore.grants import GrantBook, Scope, SessionKey


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
    # pane id -> message whose CheckGuard the daemon has not answered yet (GuardObserved / GuardFailed):
    # while it is in flight the pane takes no other message, even once that message ended without it
    guards: dict[str, MessageKey] = field(default_factory=dict)
    restarts: dict[str, restart_.Restart] = field(default_factory=dict)  # restart id -> open restart
    drafts: dict[str, LeftDraft] = field(default_factory=dict)  # pane id -> what connect may have left
    acts: dict[str, control.Act] = field(default_factory=dict)  # act id -> control's act (connectcore.hub.acts)
    inbox: Inbox | None = None  # this box's federation inbox (connectcore.hub.federation); None: not federated
    outbox: Outbox | None = None  # this box's federation outbox (the same); None: not federated


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
    in_place: bool = False  # a running process connected where it runs (grants.TokenRecord.in_place)


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
    act: str = ""  # a handoff's message: approved on that act's card (connectcore.hub.acts)


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
class GuardFailed:
    """The guard could not finish (the pane exited between two tmux calls, tmux failed, the typing it
    ran failed partway): ``reason`` says what failed. The core decides what that means for the
    message (:func:`connectcore.hub.messages._guard_failed`)."""

    now: float
    message: MessageKey
    incarnation: str | None
    reason: str


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
    """Control asks for an act of tier 2 or 3 (:mod:`connectcore.hub.acts`). ``target`` is the pane
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


# --- restart events (sequenced in connectcore.hub.restarts) ---------------------------------------


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


def restart_of_pane(hub: Hub, pane_id: str) -> str | None:  # public: the shell asks it too
    """The open restart of this pane, if any (at most one)."""
    return next((rid for rid, r in hub.restarts.items() if r.record.pane_id == pane_id), None)


@dataclass(frozen=True)
class RemoteMessageArrived:
    """A message from another box, judged new (``verdict``: :func:`connectcore.federation.envelope.judge`'s
    ``new``, its inner part a message), its target resolved by the daemon against this box's directory
    (``recipient``), with what this box knows of the pairing and the values the core does not invent
    (the local ref and card id, the receipt's nonce, the delivery's handle). Stepped by
    :mod:`connectcore.hub.federation`."""

    now: float
    verdict: Verdict
    recipient: Recipient
    box_name: str  # this box's name for the sending box
    fingerprint: str  # the sending box's pinned fingerprint, in groups of four
    ref: str
    card_id: str
    nonce: bytes
    delivery: str | None = None
    settings: PairingSettings = DEFAULT_SETTINGS


@dataclass(frozen=True)
class RemoteSubmit:
    """An agent's ``send_message`` to an agent on another box: the target qualified by an active
    pairing's name, which the daemon resolved to that box's id and the pairing (``unknown_box``
    otherwise, before any step). ``target`` is the part the other box resolves (``("address",
    "%4@<token>")`` or ``("handle", "pr:12")``); ``nonce`` seals every copy of the row; ``bus_up``: the
    bus is connected now (the row is then published at once). Stepped by :mod:`connectcore.hub.federation`."""

    now: float
    token_hash: str
    message_id: str
    text: str
    target: tuple[str, str]
    box: str  # the recipient box's id
    pairing: str
    box_name: str  # this box's name for it
    ref: str  # fresh: the conversation a new one starts
    nonce: bytes
    bus_up: bool = False
    in_reply_to: str | None = None  # a ref of a message this agent received from that box (R9)


@dataclass(frozen=True)
class ReceiptArrived:
    """A receipt for a message this box sent (``verdict``: the judgement's ``receipt``), and the
    delivery it came in."""

    now: float
    verdict: Verdict
    delivery: str | None = None


@dataclass(frozen=True)
class RemoteSettled:
    """An envelope from another box that the inbox settles without the recipient's rules
    (:func:`connectcore.federation.inbox.receive`: a duplicate, a message cancelled before it came, one
    too late, a cancel's tombstone), or a new message whose target the daemon resolved to no recipient
    on this box (``refusal``: why, committed ``refused`` by :func:`connectcore.federation.inbox.refuse`).
    ``nonce`` seals the receipt a commit answers with; ``delivery`` is acknowledged after it."""

    now: float
    verdict: Verdict
    nonce: bytes | None = None
    delivery: str | None = None
    refusal: str | None = None


@dataclass(frozen=True)
class RemoteCancelArrived:
    """The sending box's cancel of a message this box holds (``verdict``: the judgement's ``cancel``),
    stepped under the recipient pane's send lock like a local revocation (the daemon takes the locks
    :func:`connectcore.hub.federation.cancel_panes` names), and the delivery it came in."""

    now: float
    verdict: Verdict
    delivery: str | None = None


@dataclass(frozen=True)
class PairingRemoved:
    """A pairing was removed (this box's owner, or the other box's signed notice), committed in the
    pairing book: what is queued across it ends here (``pairing``: its id; ``box_name``: this box's name
    for the other box). Stepped under the send locks :func:`connectcore.hub.federation.pairing_panes`
    names."""

    now: float
    pairing: str
    box_name: str


@dataclass(frozen=True)
class MessagesOff:
    """The person set a pairing's ``messages`` setting off (committed in the pairing book): what this
    box holds from that box and has not started typing ends here (``pairing``: its id; ``box_name``:
    this box's name for the other box). Stepped under the send locks
    :func:`connectcore.hub.federation.pairing_panes` names, as a revocation."""

    now: float
    pairing: str
    box_name: str


@dataclass(frozen=True)
class FederationTick:
    """The federation's schedules (the daemon's ticker, with what only the shell knows): the outbox's
    publishes, new attempts, expiries and deadlines (``bus_up``: the bus is connected; ``heard``: when
    each other box was last heard, by box id) and the inbox's retention."""

    now: float
    bus_up: bool = False
    heard: tuple[tuple[str, float], ...] = ()


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
    | GuardFailed
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
    | RemoteMessageArrived
    | RemoteSubmit
    | ReceiptArrived
    | RemoteSettled
    | RemoteCancelArrived
    | PairingRemoved
    | MessagesOff
    | FederationTick
)

Step = tuple[Hub, tuple[Effect, ...]]
