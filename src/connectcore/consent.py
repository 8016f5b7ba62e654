"""Consent: the tiers that decide whether a person must tap before an agent's action happens.

Rules (specification: shared/seeds/000, "Consent", "Loops and runaways"):

- Reads (directory, pane detail, history) run at once and are audited; they never need a card.
- A plain-text message to an idle agent pane needs a card: a pending item with an expiry, shown in
  Needs you, cancelled by revocation, answered approve-once, approve-pair or decline.
- Approve-pair lasts for the rest of the recipient's incarnation: it keys on the sender's principal
  and the recipient's incarnation token, so a new process in the same pane needs a new approval.
- Past the hop limit the next hop needs a card even for an approved pair.
- Both ends opt in: only a recipient whose grant includes ``reachable`` receives, except from the
  control role, whose ``act`` scope reaches every agent pane. Key presses, windows, resumes and sends
  to shell panes are never offered to peers.
- A card that nobody answers expires (default 15 minutes); its message is recorded expired.
- A card says in words what each answer allows (:func:`card_words`): approve-once this message only,
  approve-pair every message from the sender to the recipient until the recipient's process ends,
  decline nothing typed. It names panes where a person finds them (``%N (session:window)``), says
  what its hop means, and a reply card quotes the message it answers (bounded). An answered card
  says how (:func:`state_words`): approved once or for the pair and by whom, declined, expired
  unanswered, or withdrawn (its message ended first: revoked, cancelled); only an open card has time
  left to answer.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum

from connectcore._machine import Table


class CardState(StrEnum):
    PENDING = "pending"
    APPROVED_ONCE = "approved_once"
    APPROVED_PAIR = "approved_pair"
    DECLINED = "declined"
    EXPIRED = "expired"
    CANCELLED = "cancelled"


class Decision(StrEnum):
    APPROVE_ONCE = "approve_once"
    APPROVE_PAIR = "approve_pair"
    DECLINE = "decline"


CARD_TABLE: Table[CardState] = Table(
    name="card",
    initial=CardState.PENDING,
    finals=frozenset(
        {
            CardState.APPROVED_ONCE,
            CardState.APPROVED_PAIR,
            CardState.DECLINED,
            CardState.EXPIRED,
            CardState.CANCELLED,
        }
    ),
    edges=(
        (CardState.PENDING, Decision.APPROVE_ONCE.value, CardState.APPROVED_ONCE),
        (CardState.PENDING, Decision.APPROVE_PAIR.value, CardState.APPROVED_PAIR),
        (CardState.PENDING, Decision.DECLINE.value, CardState.DECLINED),
        (CardState.PENDING, "expire", CardState.EXPIRED),
        (CardState.PENDING, "cancel", CardState.CANCELLED),
    ),
)

# Kinds of recipient pane, as the directory and screen reader classify them.
AGENT_KINDS: frozenset[str] = frozenset({"claude", "codex", "opencode"})

# Actions that are never offered to peers, whatever their grant (control's act scope only).
NEVER_FOR_PEERS: frozenset[str] = frozenset({"keys", "window", "resume", "shell_send"})


@dataclass(frozen=True)
class Card:
    """A pending-consent item for one message."""

    id: str
    message: tuple[str, str]  # (sender principal, message id)
    sender: str  # canonical sender principal
    sender_actor: str
    recipient_pane: str
    recipient_incarnation: str
    recipient_actor: str
    text: str
    hop: int
    created_at: float
    expires_at: float
    state: CardState = CardState.PENDING
    answered_by: str | None = None
    answered_at: float | None = None
    # A remote sender's (docs/federation.md, R7): the name this box approved the pairing under and the
    # pairing's pinned fingerprint, as the message arrived; None for a local sender.
    sender_box: str | None = None
    sender_fingerprint: str | None = None


PairKey = tuple[str, str]  # (canonical sender principal, recipient incarnation token)


#: How much of the message a reply answers its card quotes.
QUOTE_MAX_CHARS = 280


@dataclass(frozen=True)
class CardWords:
    """What a card says to the person, beside the message text: each answer, in words, and the hop."""

    approve_once: str
    approve_pair: str
    decline: str
    hop: str
    answers: str | None = None  # the text of the message this one replies to, bounded


def quote(text: str, limit: int = QUOTE_MAX_CHARS) -> str:
    """``text`` bounded for a card: at most ``limit`` characters, an ellipsis when cut."""
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def hop_words(hop: int, hop_limit: int) -> str:
    """What a message's hop means to a person: a new conversation, or the how-manieth reply."""
    if hop <= 1:
        return "Starts a conversation (hop 1)."
    said = f"Reply {hop - 1} in a back-and-forth between agents (hop {hop})"
    if hop > hop_limit:
        return f"{said}: past {hop_limit} hops a person approves every message, even for an approved pair."
    return f"{said}; past {hop_limit} hops a person approves every message."


def card_words(
    card: Card, *, sender: str, recipient: str, hop_limit: int, answers: str | None = None
) -> CardWords:
    """The card's words; ``sender`` and ``recipient`` are where a person finds the panes
    (:func:`connectcore.directory.pane_place`), ``answers`` the text of the message it replies to."""
    return CardWords(
        approve_once="Approve once: this message only",
        approve_pair=f"Approve pair: every message from {sender} to {recipient} until {recipient} ends",
        decline="Decline: nothing is typed; the sender is told it was declined",
        hop=hop_words(card.hop, hop_limit),
        answers=None if answers is None else quote(answers),
    )


def state_words(card: Card, why: str = "") -> str:
    """A card's state for the person (``cards --all``): open, or how it was answered and by whom;
    ``why`` a withdrawn card's reason (its message's final reason, when known)."""
    by = f" by {card.answered_by}" if card.answered_by else ""
    words = {
        CardState.PENDING: "open",
        CardState.APPROVED_ONCE: f"approved once{by}",
        CardState.APPROVED_PAIR: f"approved for the pair{by}",
        CardState.DECLINED: f"declined{by}",
        CardState.EXPIRED: "expired unanswered",
        CardState.CANCELLED: "withdrawn before an answer",
    }[card.state]
    return f"{words} ({why})" if why and card.state is CardState.CANCELLED else words


def needs_card(*, pair_approved: bool, hop: int, hop_limit: int) -> bool:
    """A message needs a person's tap unless the pair is approved and the hop is within the limit."""
    return not pair_approved or hop > hop_limit


def may_receive(
    *, recipient_kind: str, recipient_scopes: frozenset[str], sender_scopes: frozenset[str]
) -> str | None:
    """Why this recipient cannot receive a peer message, or None when it can.

    Both ends opt in: the recipient must be an agent pane whose grant includes ``reachable``; the
    control role's ``act`` scope reaches every agent pane. Shell panes never receive: text there runs
    as a command.
    """
    if recipient_kind not in AGENT_KINDS:
        if recipient_kind == "shell":
            return "shell_pane"
        return "not_an_agent"
    if "reachable" in recipient_scopes or "act" in sender_scopes:
        return None
    return "not_reachable"


def decide(card: Card, decision: Decision, *, now: float, by: str) -> Card:
    """Answer a pending card (``TransitionNotAllowed`` if it is no longer pending)."""
    state = CARD_TABLE.next(card.state, decision.value)
    return replace(card, state=state, answered_by=by, answered_at=now)


def expire(card: Card, *, now: float) -> Card:
    return replace(card, state=CARD_TABLE.next(card.state, "expire"), answered_at=now)


def cancel(card: Card, *, now: float, by: str) -> Card:
    return replace(card, state=CARD_TABLE.next(card.state, "cancel"), answered_by=by, answered_at=now)


def is_open(card: Card) -> bool:
    return card.state is CardState.PENDING
