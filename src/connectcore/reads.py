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
- **What a card shows the person** (:func:`card_view`): both panes by name with their tmux
  ``session:window`` (the shell reads the windows from ``list-panes`` and hands them in as data), the
  answers in words, the hop explained, and for a reply the message it answers.
- The caller's own pane (:func:`own_record`) is the live directory record its live token is bound to;
  its directory is what history reads are limited to (:func:`connectcore.history.caller_repos`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType

from connectcore import consent, grants
from connectcore import directory as D
from connectcore import hub as H
from connectcore._machine import ConnectError
from connectcore.delivery import Message, MessageState
from connectcore.effects import Audit
from connectcore.grants import GrantBook, Principal, Scope

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
        # control's acts (connectcore.hub_acts): only the control role holds act
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
class CardView:
    """A card as the person sees it (page, CLI)."""

    card: consent.Card
    sender_pane: str | None  # None when the sender has no live token left (the card is then closed)
    sender_name: str
    recipient_name: str
    words: consent.CardWords
    in_reply_to: str | None  # the ref of the message this one answers


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

    return CardView(
        card=card,
        sender_pane=sender.pane_id if sender is not None else None,
        sender_name=name(sender.pane_id, sender.incarnation) if sender is not None else card.sender_actor,
        recipient_name=name(card.recipient_pane, card.recipient_incarnation),
        words=consent.card_words(
            card,
            sender=place(sender.pane_id) if sender is not None else card.sender_actor,
            recipient=place(card.recipient_pane),
            hop_limit=hub.limits.hop_limit,
            answers=answers,
        ),
        in_reply_to=in_reply_to,
    )


def _live(directory: D.Directory, pane_id: str, incarnation: str) -> D.PaneRecord | None:
    record = directory.panes.get(pane_id)
    return record if record is not None and record.token == incarnation else None


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


__all__ = [
    "AUDITED_BY_STEP",
    "CALL_SCOPES",
    "Admitted",
    "UnknownCall",
    "call_scope",
    "gate",
    "inbox",
    "own_record",
    "refusal_reason",
    "replies",
    "wait_over",
]
