"""The agent calls' rules: the gate in front of every call, and what a read shows. One place each.

Rules (specification: shared/seeds/000, "Scopes", "Revocation", "Audit"; issue 10):

- **Auth first.** Every MCP tool passes :func:`gate` before anything is looked up: a live token and
  the tool's scope (:data:`CALL_SCOPES`). A caller that is not connected learns nothing else: not
  whether a target exists, not how many panes a handle matches.
- ``list_messages`` needs ``message``; an agent that may only receive (``reachable`` without
  ``message``) lists the messages it received with ``reachable``.
- **One audit record per call**, written when its outcome is known: ``allowed``, or ``refused`` with
  the reason, whether the gate refused it or a lookup after the gate did (a target that names no pane,
  a repository out of scope). ``send_message``'s record is its step's (queued, a final outcome, or a
  refusal before admission); only a refusal before its step (a bad target) comes from here.
  A refused call's actor is the agent a known token belongs to (:func:`connectcore.hub.authorize`).
- A long poll re-passes the gate when it wakes; revoked meanwhile, it ends refused (``not_connected``).
- **The inbox** (:func:`inbox`): messages being typed into the caller, or delivered to it within the
  reply window, for any principal of its merge group. A ``get_message`` wait ends (:func:`wait_over`)
  on the message's final outcome, at its deadline, or, once woken, when the caller has an inbox.
- **What a sender is told** (:func:`sender_reason`): while its message waits on a person, its reason
  says so and names the card (``awaiting consent: card <id>``), on ``send_message``, ``get_message``
  and ``list_messages`` alike; otherwise the message's own reason.
- **What a message waits for** (:func:`waits_for`): the words, for the person (the owner API's
  messages, ``connectd messages``, and per recipient in the fleet list: :func:`waiting`), for what a
  message that is not final waits on before it is typed, the first that holds of: a person's answer to
  its open card; the check before typing, or the confirmation of typing, under way; the recipient's
  restart-to-connect; connect's own unsent draft left in its composer (Needs you); its release
  unknown, or unverified (no message is typed into either: :mod:`connectcore.releases`); an OpenCode
  launch whose session is not bound yet (:mod:`connectcore.opencode_binding`); its handle
  naming no single pane; the message before it being typed, or the turn that message started not yet
  seen; the recipient's screen (no reading yet, a turn running, a question shown, a draft in its
  composer, a screen not read as any known one); else its next wait for input. The release and the screen's reading are the daemon's
  facts, handed in as data (:class:`Recipient`). A final message waits for nothing (""). Nothing
  else holds an admitted message: the rate limits refuse a message before admission, never queue it.
- **What a card shows the person** (:func:`card_view`): both panes by name with their tmux
  ``session:window`` (the shell reads the windows from ``list-panes`` and hands them in as data), the
  answers in words, the hop explained, and for a reply the message it answers.
- **The other box of a message** (``connectd messages``, the owner API's messages): a message from
  an agent on another box shows that box (:func:`from_box`), a message to an agent on another box (an
  outbox row: there is no local message row for it) shows the box it went to, what the row's inner
  part names as its sender and target, and its outcome in the sender's words (:func:`sent_across`;
  the person's list shows a row whose sender was revoked or ended ``cancelling``, "box laptop has not
  yet confirmed it is cancelled", until the other box's receipt ends it);
  each box by this box's name for it (:func:`connectcore.federation.pairing.box_name`).
- The caller's own pane (:func:`own_record`) is the live directory record its live token is bound to;
  its directory is what history reads are limited to (:func:`connectcore.history.caller_repos`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

from connectcore import advice, consent, grants
from connectcore import directory as D
from connectcore import hub as H
from connectcore._machine import ConnectError
from connectcore.arming import Arming
from connectcore.delivery import Message, MessageState
from connectcore.effects import Audit
from connectcore.federation import envelope as E
from connectcore.federation import outbox as O
from connectcore.federation import pairing as P
from connectcore.federation import remote
from connectcore.grants import GrantBook, Principal, Scope
from connectcore.releases import ReleaseStatus
from connectcore.screen import Activity, Composer

#: The scope each agent call needs (``None``: a connected token is enough).
CALL_SCOPES: Mapping[str, Scope | None] = MappingProxyType(
    {
        "whoami": None,
        "list_agents": Scope.READ,
        "get_agent": Scope.READ,
        "resolve": Scope.READ,
        "find_sessions": Scope.HISTORY,
        "get_session": Scope.HISTORY,
        "send_message": Scope.MESSAGE,
        "get_message": Scope.MESSAGE,
        "list_messages": Scope.MESSAGE,
        # control's acts (connectcore.hub.acts): only the control role holds act
        "send_keys": Scope.ACT,
        "launch_agent": Scope.ACT,
        "resume_session": Scope.ACT,
        "handoff": Scope.ACT,
        "shell_text": Scope.ACT,
        "close_pane": Scope.ACT,
        "get_act": Scope.ACT,
    }
)

#: Calls whose record is written by the step they run (the gate writes only a refusal before it).
AUDITED_BY_STEP: frozenset[str] = frozenset(
    {"send_message", "send_keys", "launch_agent", "resume_session", "handoff", "shell_text", "close_pane"}
)


class UnknownCall(ConnectError):
    """A call name no rule covers (a bug in the shell): refused, nothing looked up."""

    reason = "unknown_call"


@dataclass(frozen=True)
class Admitted:
    """A call the gate let through: who makes it, and its audit record once the outcome is known."""

    principal: Principal
    record: Audit  # outcome "allowed"

    def allowed(self) -> Audit | None:
        """The record of a call that succeeded (``None`` where its step writes the record)."""
        return None if self.record.action in AUDITED_BY_STEP else self.record

    def refused(self, reason: str) -> Audit:
        """The record of a call refused after the gate (the one record it gets)."""
        return replace(self.record, outcome="refused", detail=reason)


def refusal_reason(exc: BaseException) -> str:
    """The reason a call refused after the gate is audited with: the error's ``reason`` code, else
    its kind in snake case (``OutOfScope`` -> ``out_of_scope``)."""
    reason = getattr(exc, "reason", None)
    if isinstance(reason, str) and reason:
        return str(reason)
    return re.sub(r"(?<!^)(?=[A-Z])", "_", type(exc).__name__).lower()


def call_scope(hub: H.Hub, token_hash: str, action: str) -> Scope | None:
    """The scope ``action`` needs from this caller."""
    if action not in CALL_SCOPES:
        raise UnknownCall(f"unknown call {action!r}: no rule names its scope")
    scope = CALL_SCOPES[action]
    if action == "list_messages":
        principal = grants.authenticate_or_none(hub.book, token_hash)
        if principal is not None:
            held = grants.scopes_of(hub.book, principal.id)
            if Scope.MESSAGE not in held and Scope.REACHABLE in held:
                return Scope.REACHABLE
    return scope


def gate(
    hub: H.Hub, *, token_hash: str, action: str, now: float, target: str = "", message_id: str | None = None
) -> Admitted:
    """Pass the gate or raise :class:`connectcore.hub.CallRefused` (its ``audit`` is the record)."""
    scope = call_scope(hub, token_hash, action)
    principal, record = H.authorize(hub, token_hash=token_hash, scope=scope, action=action, now=now, target=target)
    return Admitted(principal, replace(record, message_id=message_id))


#: Why the edge refuses a call before any handler runs (the MCP SDK's own refusals).
UNKNOWN_TOOL = "unknown_tool"
BAD_ARGUMENTS = "bad_arguments"


def tools_listed(book: grants.GrantBook, token_hash: str | None, names: Sequence[str]) -> tuple[str, ...]:
    """The tools ``list_tools`` shows a caller, in the order given: control's act tools only to a
    caller whose principal holds ``act`` (every call is gated anyway: this is what is shown)."""
    principal = grants.authenticate_or_none(book, token_hash) if token_hash else None
    acts = principal is not None and grants.Scope.ACT in grants.scopes_of(book, principal.id)
    return tuple(n for n in names if acts or CALL_SCOPES.get(n) is not grants.Scope.ACT)


def refused_at_the_edge(hub: H.Hub, *, token_hash: str, action: str, reason: str, now: float) -> Audit:
    """The one audit record of a call refused before its handler ran (an unknown tool, arguments the
    tool's schema refuses): the agent the token names (``agent:unknown`` for none), the call's name as
    given (cut to 100 characters: it is the caller's text), ``refused`` and the reason."""
    scope = CALL_SCOPES.get(action)
    return Audit(
        actor=H._token_actor(hub.book, token_hash),
        action=action[:100],
        outcome="refused",
        scope=scope.value if scope is not None else None,
        detail=reason,
        at=now,
    )


# --- what the reads show ----------------------------------------------------------------------------


def inbox(hub: H.Hub, principal_id: str, now: float) -> tuple[Message, ...]:
    """Messages typed into this agent's pane in the reply window (so a wait can break on them).

    A message being typed counts: the recipient can read and act on it before the confirming re-read
    marks it delivered (a real Claude Code agent asked about a reply while connectd was still
    confirming it, and was told of no reply).
    """
    members = grants.group(hub.book, principal_id)
    return tuple(
        m
        for m in hub.messages.values()
        if m.recipient_principal in members
        and (
            m.state is MessageState.TYPING
            or (m.outcome == "delivered" and m.final_at is not None and now - m.final_at <= hub.limits.reply_window)
        )
    )


def replies(hub: H.Hub, ref: str) -> tuple[Message, ...]:
    """The correlated answers: messages sent with ``in_reply_to`` naming this one."""
    return tuple(m for m in hub.messages.values() if m.in_reply_to == ref)


def sender_reason(hub: H.Hub, message: Message) -> str:
    """The reason a sender is shown for its message: ``awaiting consent: card <id>`` while a card for
    it is open (with why it was opened, when the message moved to a new recipient), else the
    message's own reason."""
    card = hub.cards.get(message.card) if message.card else None
    if message.state is MessageState.AWAITING_CONSENT and card is not None and consent.is_open(card):
        why = f" ({message.reason})" if message.reason else ""
        return f"awaiting consent: card {card.id}{why}"
    return message.reason


@dataclass(frozen=True)
class Recipient:
    """What the daemon last knew of a recipient pane, for :func:`waits_for`: the agent's release
    status (None: not an agent) and its screen's newest reading (None: no reading yet)."""

    release: ReleaseStatus | None = ReleaseStatus.VERIFIED
    activity: Activity | None = None
    composer: Composer | None = None
    binding: bool = False  # an OpenCode launch whose session is not bound yet (nothing is typed meanwhile)


def waits_for(hub: H.Hub, message: Message, recipient: Recipient) -> str:
    """What a message that is not final waits for, in words (``until ...``); "" for a final one."""
    if message.is_final:
        return ""
    if message.state is MessageState.AWAITING_CONSENT:
        card = hub.cards.get(message.card) if message.card else None
        if card is not None and consent.is_open(card):
            return f"until the person answers card {card.id}"
        return "until the person answers its card"
    if message.state is MessageState.GUARDING:
        return "until the check of its screen just before typing ends"
    if message.state is MessageState.TYPING:
        return "until its typing is confirmed on the recipient's screen"
    return _ready_waits_for(hub, message, recipient)


def _ready_waits_for(hub: H.Hub, message: Message, recipient: Recipient) -> str:
    pane, incarnation = message.recipient_pane, message.recipient_incarnation
    if H.restart_of_pane(hub, pane) is not None:
        return "until its restart-to-connect ends"
    left = hub.drafts.get(pane)
    if left is not None and left.incarnation == incarnation:
        return "until connect's unsent draft in its composer is cleared (see Needs you)"
    if recipient.release is ReleaseStatus.UNKNOWN:
        return "until its release is known"
    if recipient.release is ReleaseStatus.UNVERIFIED:
        return "until its release is verified (make compat) or trusted (connectd serve --trust-release)"
    if recipient.binding:
        return "until its OpenCode session is bound"
    if message.handle is not None and H.NO_SINGLE_PANE in message.reason:
        return f"until {message.handle} names a single pane again"
    ahead = hub.attempts.get(pane)
    if ahead is not None and ahead != message.key:
        return "until the message before it is typed"
    view = hub.panes.get(pane)
    if view is not None and view.incarnation == incarnation and view.arming is Arming.AWAITING_TURN:
        return "until the turn of the message typed before it shows"
    if recipient.activity is None or view is None or view.incarnation != incarnation or view.arming is Arming.UNSEEN:
        return "until its screen is read"
    if recipient.activity is Activity.BUSY:
        return "until it finishes its turn (busy)"
    if recipient.activity is Activity.DIALOG:
        return "until the question on its screen is answered"
    if recipient.composer is Composer.DRAFT:
        return "until the draft in its composer is sent or cleared"
    if recipient.activity is Activity.UNKNOWN:
        return "until its screen reads as waiting for input (it is not read as any known screen now)"
    return "until it next waits for input with an empty composer"


def waiting(hub: H.Hub, pane_id: str, incarnation: str, recipient: Recipient) -> tuple[tuple[str, str], ...]:
    """The messages not final addressed to this pane's incarnation, oldest first: (message id, what
    it waits for)."""
    found = sorted(
        (m for m in hub.messages.values()
         if not m.is_final and m.recipient_pane == pane_id and m.recipient_incarnation == incarnation),
        key=lambda m: (m.created_at, m.ref),
    )
    return tuple((m.id, waits_for(hub, m, recipient)) for m in found)


def awaited(hub: H.Hub) -> frozenset[tuple[str, str]]:
    """The (pane, incarnation) pairs some message not final is addressed to: the only ones
    :func:`waiting` can list anything for (one pass over the messages, not one per pane)."""
    return frozenset((m.recipient_pane, m.recipient_incarnation) for m in hub.messages.values() if not m.is_final)


def waiting_lines(waits: Sequence[str]) -> tuple[str, ...]:
    """The lines a person reads under a recipient: one per distinct wait, in order of first showing,
    counted (``2 messages wait: until its release is known``)."""
    counts: dict[str, int] = {}
    for words in waits:
        counts[words] = counts.get(words, 0) + 1
    return tuple(
        f"{advice.counted(n, 'message')} {'waits' if n == 1 else 'wait'}: {words}" for words, n in counts.items()
    )


@dataclass(frozen=True)
class CardView:
    """A card as the person sees it (page, CLI)."""

    card: consent.Card
    sender_pane: str | None  # None when the sender has no live token left (the card is then closed)
    sender_name: str
    recipient_name: str
    words: consent.CardWords
    in_reply_to: str | None  # the ref of the message this one answers
    state: str = "open"  # :func:`connectcore.consent.state_words`


def card_view(hub: H.Hub, directory: D.Directory, card: consent.Card, windows: Mapping[str, str]) -> CardView:
    """The card in a person's words. ``windows`` maps a live pane id to its tmux ``session:window``."""
    tokens = grants.live_tokens(hub.book, card.sender)
    sender = tokens[0] if tokens else None
    message = hub.messages.get(card.message)
    in_reply_to = message.in_reply_to if message is not None else None
    answered_key = hub.refs.get(in_reply_to) if in_reply_to is not None else None
    answered = hub.messages.get(answered_key) if answered_key is not None else None
    answers = answered.text if answered is not None else ("(no longer held)" if in_reply_to else None)

    def name(pane: str, incarnation: str) -> str:
        return D.pane_label(_live(directory, pane, incarnation), pane, windows.get(pane, ""))

    def place(pane: str) -> str:
        return D.pane_place(pane, windows.get(pane, ""))

    gone = card.sender_actor  # a local sender with no live token left: its actor
    if card.sender_box is not None:  # a remote sender (never a live token here): its agent on its box
        gone = remote.sender_words(card.sender_actor, box_name=card.sender_box, fingerprint=card.sender_fingerprint or "")
    return CardView(
        card=card,
        sender_pane=sender.pane_id if sender is not None else None,
        sender_name=name(sender.pane_id, sender.incarnation) if sender is not None else gone,
        recipient_name=name(card.recipient_pane, card.recipient_incarnation),
        words=consent.card_words(
            card,
            sender=place(sender.pane_id) if sender is not None else gone,
            recipient=place(card.recipient_pane),
            hop_limit=hub.limits.hop_limit,
            answers=answers,
        ),
        in_reply_to=in_reply_to,
        state=consent.state_words(card, message.reason if message is not None and message.is_final else ""),
    )


def _live(directory: D.Directory, pane_id: str, incarnation: str) -> D.PaneRecord | None:
    record = directory.panes.get(pane_id)
    return record if record is not None and record.token == incarnation else None


MAX_WAIT = 60.0  # the longest a get_message or get_act call waits (seconds)


def bounded_wait(wait: float) -> float:
    """How long a ``get_message`` / ``get_act`` call asked to wait ``wait`` seconds waits: never less
    than none, never more than :data:`MAX_WAIT`."""
    return max(0.0, min(wait, MAX_WAIT))


def wait_over(message: Message, caller_inbox: tuple[Message, ...], *, timed_out: bool, woken: bool) -> bool:
    """Whether a ``get_message`` wait answers now: the message is final, the wait ran out, or the
    caller was woken and has something in its inbox."""
    return message.is_final or timed_out or (woken and bool(caller_inbox))


def own_record(directory: D.Directory, book: GrantBook, principal: Principal) -> D.PaneRecord | None:
    """The caller's own pane: the live record whose incarnation holds a live token of its agent."""
    root = grants.canonical(book, principal.id)
    for record in directory.records():
        holder = grants.principal_at(book, record.token)
        if holder is not None and holder.id == root:
            return record
    return None


# --------------------------------------------------------------------------------------------------
# The other box of a message (connectd messages)
# --------------------------------------------------------------------------------------------------


def from_box(message: Message, book: P.PairBook | None) -> str | None:
    """The box a message held here came from, by this box's name for it; None for a message from an
    agent of this box."""
    identity = remote.identity_of(message.sender, message.id)
    if identity is None:
        return None
    return identity.box if book is None else P.box_name(book, identity.box)


@dataclass(frozen=True)
class SentAcross:
    """A message an agent here sent to an agent on another box, as the person's list shows it."""

    row: O.Row
    to_box: str  # the recipient box, by this box's name for it
    sender_actor: str
    target: str  # the address or handle as the sender gave it, resolved on the other box
    text: str
    conversation: str
    hop: int
    outcome: str  # what the sender is told: queued, then the other box's final outcome
    reason: str
    waits_for: str
    listed: str = ""  # what the person's list shows: ``cancelling`` until the other box confirms, else outcome


def sent_across(row: O.Row, book: P.PairBook | None) -> SentAcross:
    """``row`` (this box's outbox) with what its stored inner part says and its outcome in words."""
    routing, plain, nonce = O.to_seal(row, E.Kind.MESSAGE)
    inner = E.parse_inner(plain, E.Outer(routing, nonce, plain))  # made here: its own routing
    assert isinstance(inner, E.MessageInner)
    name = row.to if book is None else P.box_name(book, row.to)
    waits = O.waits_for(row, name)
    cancelling = row.state is O.OutboxState.CANCELLING
    return SentAcross(
        row=row, to_box=name, sender_actor=inner.sender.actor, target=inner.target[1], text=inner.text,
        conversation=inner.conversation, hop=inner.hop, outcome=O.answer(row),
        reason=O.cancel_unconfirmed_words(name) if cancelling else waits or row.reason, waits_for=waits,
        listed=str(row.state) if cancelling else O.answer(row),
    )


def reply_ref(hub: H.Hub, identity: E.Identity | None) -> str | None:
    """The ref of the message from another box that a reply's ``in_reply_to`` names (the identity it
    travels as: R9), as this box gave it to its recipient; the identity's text when the hub no longer
    holds that message; None for a message that answers none."""
    if identity is None:
        return None
    message = hub.messages.get((remote.remote_principal(identity.box, identity.principal), identity.id))
    return message.ref if message is not None else str(identity)


def sent_view(hub: H.Hub, row: O.Row, box_name: str) -> dict[str, Any]:
    """What the sending agent is told about its message to another box (``send_message``'s and
    ``get_message``'s answer; its own text is not echoed back), in the shape of a local message's
    answer for the fields both have: ``message_id``, ``outcome`` (``queued`` until the other box's
    final receipt, :func:`outbox.answer`), ``reason`` (what it waits for, in words), ``from`` (the
    sending agent's actor), ``to`` (its target as sent, qualified by the box's name:
    ``%4@<token>@devbox``, or a handle the other box resolves, ``pr:12@devbox``), ``in_reply_to``
    (:func:`reply_ref`), ``created_at`` and ``final_at``; and ``to_box``, the box by this box's name."""
    inner = O.message_of(row)
    return {
        "message_id": row.identity.id,
        "outcome": O.answer(row),
        "reason": O.waits_for(row, box_name) or row.reason,
        "from": inner.sender.actor,
        "to": f"{inner.target[1]}@{box_name}",
        "in_reply_to": reply_ref(hub, inner.in_reply_to),
        "to_box": box_name,
        "created_at": row.created_at,
        "final_at": row.final_at,
    }


__all__ = [
    "AUDITED_BY_STEP",
    "CALL_SCOPES",
    "Admitted",
    "SentAcross",
    "UnknownCall",
    "call_scope",
    "from_box",
    "gate",
    "inbox",
    "own_record",
    "refusal_reason",
    "replies",
    "reply_ref",
    "sent_across",
    "sent_view",
    "wait_over",
    "awaited",
    "waiting",
    "waiting_lines",
    "waits_for",
]

