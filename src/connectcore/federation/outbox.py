"""The outbox: the sending box's life of one message to an agent on another box, from admission to
exactly one final outcome (docs/federation.md, "On the sender's box: the outbox").

Rules:

O1  Admission is the hub's, by the sending box's own rules (scope, id and its hour, text, size, rates,
    hop). An admitted message is one row (:func:`admit`), ``queued``, keyed by its identity (sender
    box, sender principal, message id) and holding its canonical inner part and its nonce, so every
    copy published is the same envelope. An identity already in the outbox is refused
    ``duplicate_id``: a retry keeps its id, and the row that has it is the one that goes on.
O2  ``queued`` becomes ``published`` **before** the first publish call: the step's ``Persist`` comes
    before its :class:`PublishEnvelope`. From ``published`` on the envelope may have left this box.
O3  Only a verified receipt of the other box moves a row that left (:func:`receipt`): ``accepted``, or
    one of the six final outcomes. A JetStream publish acknowledgement is recorded on the row
    (:func:`publish_acked`: the attempt and the stream sequence) and changes no state; a failed
    publish changes nothing (:func:`publish_failed`): the row that may have left stays where it is.
O4  Receipts that do not move the table change nothing: ``accepted`` after ``accepted``, in
    ``cancelling`` or after a final, and an identical repeat of the final. A receipt contradicting a
    final outcome is audited ``late receipt`` and changes nothing. A receipt whose digest is not the
    row's, or for a row that never left, is refused. Every receipt's delivery is acknowledged after
    what its step commits.
O5  The schedule (:func:`tick`, a rule over ``now``): a ``queued`` row is published while the bus is
    up (attempt 1); ``published`` gets a new attempt after 5 s, then 10, 20, 40, 60, 60 ... s
    (:func:`retry_delay`, ±20 %, the jitter a hash of the row's digest and attempt, so no randomness
    comes in) **while the other box is live** (heard within 180 s, :func:`is_live`); while it is not,
    no new attempt, and when it is heard again (:func:`heard_again`) every row not yet accepted is
    due at once. ``accepted``: the envelope again every 300 s (the other box answers the receipt it
    holds), and at once when this box's bus is up again after a tick that saw it down (a final receipt
    the other box could not publish while NATS was away is answered to that copy, not 300 s later).
    ``cancelling``: the cancel, on ``published``'s schedule.
O6  The deadline (:func:`deadline`) is ``created_at + id's hour + skew bound + final grace``. A row
    still ``queued`` when the id's hour runs out is ``expired`` (it never left: known never
    delivered). A row that left and has no final receipt by the deadline is ``unconfirmed``, never
    ``expired``: this box cannot tell "never got it" from "got it, and its receipts cannot reach us"
    (ADR 004: a failed send without an acknowledgement is no evidence of non-receipt; the doc's open
    question, decided so).
O7  Revoking a sender (:func:`cancel`) returns at once: its ``queued`` rows are ``cancelled`` (they
    never left), its ``published`` and ``accepted`` rows ``cancelling`` with a cancel published to the
    other box (its own nonce, given as a value: the hub gives :func:`cancel_nonce`, made from the row's
    own random nonce, one cancel per row). ``cancelling`` ends in the receipt's outcome
    (``cancelled``, or the real one if typing had started there), or ``unconfirmed`` at the deadline.
    What the sender's owner learns: :func:`pending_cancels` and :func:`pending_cancels_words`.
O8  Removing a pairing (:func:`pairing_removed`) cancels its ``queued`` rows and makes every row that
    left ``unconfirmed`` ("pairing removed before box ... answered"): the other box may have typed it.
O9  A refused step raises :class:`OutboxError` with its reason and changes nothing. An event the table
    does not allow is a bug in the caller: :class:`connectcore._machine.TransitionNotAllowed`.
O10 The core invents nothing: ``now``, nonces and the liveness facts come in as values; each step
    returns ``(outbox, effects)`` (``Persist`` per row changed, ``Audit``, ``Notify`` for the sender's
    waits, then :class:`PublishEnvelope` or :class:`AckDelivery`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum

from connectcore._machine import ConnectError, Table, freeze
from connectcore.delivery import Limits, Refused
from connectcore.effects import Audit, Effect, Notify, Persist
from connectcore.federation.effects import AckDelivery, Effects, PublishEnvelope
from connectcore.federation.envelope import (
    ID_TTL,
    NONCE_BYTES,
    SKEW_BOUND,
    CancelInner,
    Identity,
    Kind,
    MessageInner,
    Outer,
    ReceiptInner,
    Routing,
    digest_of,
    encode_inner,
    parse_inner,
)

STORE = "outbox"  # Persist.kind of a row
PROVENANCE_ALLOWANCE = 512  # bytes the sender's size check keeps for the recipient box's provenance line
ACTION = "federation.outbox"  # Audit.action of every outbox record
TOPIC = "message"  # Notify.topic: the sender's waits on its message
ACTOR = "connectd"


@dataclass(frozen=True)
class Settings:
    """The outbox's bounds (``[federation]`` in policy.toml; docs/federation.md "Settings")."""

    id_ttl: float = ID_TTL
    skew_bound: float = SKEW_BOUND
    final_grace: float = 600.0
    first_retry: float = 5.0
    max_retry: float = 60.0
    jitter: float = 0.2
    live_within: float = 180.0
    accepted_poll: float = 300.0


DEFAULT_SETTINGS = Settings()


# --------------------------------------------------------------------------------------------------
# Rules as data
# --------------------------------------------------------------------------------------------------


class OutboxState(StrEnum):
    QUEUED = "queued"  # admitted; never left this box
    PUBLISHED = "published"  # committed before the first publish: it may have left
    ACCEPTED = "accepted"  # the other box's signed accepted receipt
    CANCELLING = "cancelling"  # the sender was revoked; the cancel is out, unconfirmed
    DELIVERED = "delivered"
    DECLINED = "declined"
    REFUSED = "refused"
    CANCELLED = "cancelled"
    EXPIRED = "expired"
    UNCONFIRMED = "unconfirmed"


_O = OutboxState
FINAL: frozenset[OutboxState] = frozenset(
    {_O.DELIVERED, _O.DECLINED, _O.REFUSED, _O.CANCELLED, _O.EXPIRED, _O.UNCONFIRMED}
)
#: The six final outcomes a receipt may carry, each an event of the same name.
RECEIPT_FINALS: tuple[OutboxState, ...] = (
    _O.DELIVERED, _O.DECLINED, _O.REFUSED, _O.CANCELLED, _O.EXPIRED, _O.UNCONFIRMED,
)


def _finals_from(state: OutboxState) -> tuple[tuple[OutboxState, str, OutboxState], ...]:
    return tuple((state, str(final), final) for final in RECEIPT_FINALS)


OUTBOX_TABLE: Table[OutboxState] = Table(
    name="outbox",
    initial=_O.QUEUED,
    finals=FINAL,
    edges=(
        (_O.QUEUED, "publish", _O.PUBLISHED),
        (_O.QUEUED, "cancel", _O.CANCELLED),
        (_O.QUEUED, "expire", _O.EXPIRED),
        (_O.PUBLISHED, "accepted", _O.ACCEPTED),
        *_finals_from(_O.PUBLISHED),
        (_O.PUBLISHED, "cancel", _O.CANCELLING),
        (_O.PUBLISHED, "deadline", _O.UNCONFIRMED),
        (_O.PUBLISHED, "pairing_removed", _O.UNCONFIRMED),
        *_finals_from(_O.ACCEPTED),
        (_O.ACCEPTED, "cancel", _O.CANCELLING),
        (_O.ACCEPTED, "deadline", _O.UNCONFIRMED),
        (_O.ACCEPTED, "pairing_removed", _O.UNCONFIRMED),
        *_finals_from(_O.CANCELLING),
        (_O.CANCELLING, "deadline", _O.UNCONFIRMED),
        (_O.CANCELLING, "pairing_removed", _O.UNCONFIRMED),
    ),
)


class Refusal(StrEnum):
    """Why an outbox step was refused."""

    DUPLICATE_ID = "duplicate_id"
    NOT_OURS = "not_ours"
    BAD_NONCE = "bad_nonce"
    UNKNOWN_MESSAGE = "unknown_message"
    OTHER_DIGEST = "other_digest"
    NOT_SENT = "not_sent"
    MISSING_NONCE = "missing_nonce"


class OutboxError(ConnectError):
    """A refused outbox step: ``reason`` (:class:`Refusal`) and a message naming the problem. Nothing
    changed."""

    def __init__(self, reason: Refusal, message: str) -> None:
        super().__init__(message)
        self.reason = reason


# --------------------------------------------------------------------------------------------------
# Records
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    """One outgoing message. ``inner`` and ``nonce`` are what every copy is sealed from; ``attempt``
    counts the message's publishes (0: it never left), ``cancel_attempt`` the cancel's; ``due`` is
    when the schedule next publishes (the message, or in ``cancelling`` the cancel)."""

    identity: Identity
    to: str  # the recipient box's id
    pairing: str
    inner: bytes
    nonce: bytes
    digest: str
    created_at: float
    state: OutboxState = _O.QUEUED
    attempt: int = 0
    due: float | None = None
    reason: str = ""  # the receipt's reason (accepted: what it waits for), or why it ended
    card: str | None = None  # the card it waits on over there, while accepted
    cancel_nonce: bytes | None = None
    cancel_reason: str = ""
    cancel_at: float | None = None
    cancel_attempt: int = 0
    acked: tuple[int, int] | None = None  # (attempt, stream sequence) of the last publish acknowledgement
    final_at: float | None = None

    @property
    def is_final(self) -> bool:
        return self.state in FINAL

    @property
    def left(self) -> bool:
        """It may have left this box (a publish was committed)."""
        return self.attempt > 0


@dataclass(frozen=True)
class Outbox:
    """Every row of this box's outbox, by identity. Read-only: steps return a new outbox. After a
    restart it is made again from the stored rows, and every row goes on from its state."""

    own: str  # this box's id
    rows: Mapping[Identity, Row] = field(default_factory=dict)
    settings: Settings = DEFAULT_SETTINGS
    # the bus as the last tick saw it (O5: up again after down makes every accepted row due); not
    # stored: a restored outbox starts as up, and the daemon's first ticks see its bus connecting
    bus_up: bool = True

    def sent(self) -> dict[Identity, str]:
        """The digest of every message that may have left: what a receipt must match
        (``envelope.View.sent``)."""
        return {i: r.digest for i, r in self.rows.items() if r.left}


# --------------------------------------------------------------------------------------------------
# Pure rules
# --------------------------------------------------------------------------------------------------


def deadline(row: Row, settings: Settings = DEFAULT_SETTINGS) -> float:
    """When a row that left and has no final receipt becomes ``unconfirmed`` (O6)."""
    return row.created_at + settings.id_ttl + settings.skew_bound + settings.final_grace


def retry_delay(digest: str, attempt: int, settings: Settings = DEFAULT_SETTINGS) -> float:
    """Seconds from attempt ``attempt`` to the next one while ``published`` (O5): 5 s doubling to 60 s,
    ±``jitter``, the jitter a hash of the digest and the attempt (no randomness)."""
    base = min(settings.first_retry * 2.0 ** max(attempt - 1, 0), settings.max_retry)
    spread = int.from_bytes(hashlib.sha256(f"{digest}:{attempt}".encode()).digest()[:4], "big") / 0xFFFFFFFF
    return base * (1 + settings.jitter * (2 * spread - 1))


def is_live(last_heard: float | None, now: float, settings: Settings = DEFAULT_SETTINGS) -> bool:
    """The other box was heard (a verified envelope or directory entry) within ``live_within``."""
    return last_heard is not None and 0 <= now - last_heard < settings.live_within


def answer(row: Row) -> str:
    """What the agent is told: ``queued`` for every interim state, else the final outcome."""
    return str(row.state) if row.is_final else "queued"


def waits_for(row: Row, box_name: str) -> str:
    """What a row not yet final waits for, in words (``get_message``, ``connectd messages``)."""
    if row.state in (_O.QUEUED, _O.PUBLISHED):
        return f"until box {box_name} accepts it"
    if row.state is _O.ACCEPTED:
        return f"accepted by box {box_name}" + (f": {row.reason}" if row.reason else "")
    if row.state is _O.CANCELLING:
        return f"cancelling: {cancel_unconfirmed_words(box_name)}"
    return ""


def cancel_unconfirmed_words(box_name: str, n: int = 1) -> str:
    """What a ``cancelling`` row (or ``n`` of them) tells the person: the other box has not yet
    confirmed the cancel (the revocation's answer, ``connectd messages``, the page)."""
    return f"box {box_name} has not yet confirmed {'it is' if n == 1 else 'they are'} cancelled"


def pending_cancels(outbox: Outbox, sender: str) -> dict[str, int]:
    """Per other box, how many of ``sender``'s messages are ``cancelling``: what its revocation's answer
    lists as not yet confirmed (O7)."""
    counts: dict[str, int] = {}
    for row in outbox.rows.values():
        if row.identity.principal == sender and row.state is _O.CANCELLING:
            counts[row.to] = counts.get(row.to, 0) + 1
    return counts


def pending_cancels_words(counts: Mapping[str, int], names: Mapping[str, str]) -> tuple[str, ...]:
    """One line per other box: ``2 messages: box laptop has not yet confirmed they are cancelled``."""
    lines = []
    for box in sorted(counts):
        n = counts[box]
        lines.append(f"{n} {'message' if n == 1 else 'messages'}: {cancel_unconfirmed_words(names.get(box, box), n)}")
    return tuple(lines)


# --------------------------------------------------------------------------------------------------
# Steps
# --------------------------------------------------------------------------------------------------


def _check_nonce(nonce: bytes | None, what: str) -> bytes:
    if not isinstance(nonce, bytes) or len(nonce) != NONCE_BYTES:
        raise OutboxError(Refusal.BAD_NONCE, f"{what}'s nonce is {NONCE_BYTES} bytes")
    return nonce


def _with(outbox: Outbox, rows: Iterable[Row]) -> Outbox:
    return replace(outbox, rows=freeze([*outbox.rows.items(), *((r.identity, r) for r in rows)]))


def _moved(row: Row, now: float) -> tuple[Effect, ...]:
    """The records of a row that changed state: Persist, Audit, and the sender's wake-up."""
    return (
        Persist(STORE, (row.identity,), row),
        Audit(
            actor=ACTOR,
            action=ACTION,
            outcome=str(row.state),
            target=row.to,
            message_id=str(row.identity),
            detail=row.reason,
            at=now,
        ),
        Notify(
            topic=TOPIC,
            key=(row.identity.principal, row.identity.id),
            principal=row.identity.principal,
            payload={"outcome": answer(row), "state": str(row.state), "box": row.to},
        ),
    )


def _advance(row: Row, event: str, now: float, reason: str, **changes: object) -> Row:
    state = OUTBOX_TABLE.next(row.state, event)
    fields: dict[str, object] = {"due": row.due, **changes, "state": state, "reason": reason}
    if state in FINAL:
        fields.update(final_at=now, due=None)
    return replace(row, **fields)  # type: ignore[arg-type]


def admit(outbox: Outbox, inner: MessageInner, *, nonce: bytes, now: float) -> tuple[Outbox, Effects]:
    """An admitted message becomes one ``queued`` row (O1); :func:`tick` publishes it."""
    routing = inner.routing
    if routing.kind is not Kind.MESSAGE or routing.sender != outbox.own or routing.to == outbox.own:
        raise OutboxError(
            Refusal.NOT_OURS, f"a {routing.kind} from box {routing.sender} to {routing.to} is no outgoing message"
        )
    identity = inner.identity
    if identity in outbox.rows:
        raise OutboxError(
            Refusal.DUPLICATE_ID,
            f"message {identity} is already in the outbox ({outbox.rows[identity].state}); a retry keeps its id",
        )
    _check_nonce(nonce, "a message")
    assert routing.pairing is not None  # a message's routing names its pairing (envelope checks it)
    data = encode_inner(inner)
    row = Row(
        identity=identity,
        to=routing.to,
        pairing=routing.pairing,
        inner=data,
        nonce=nonce,
        digest=digest_of(data),
        created_at=inner.created_at,
        reason="admitted",
    )
    return _with(outbox, [row]), (
        Persist(STORE, (identity,), row),
        Audit(actor=ACTOR, action=ACTION, outcome="queued", target=row.to, message_id=str(identity), at=now),
    )


def to_seal(row: Row, kind: Kind) -> tuple[Routing, bytes, bytes]:
    """What the shell seals for a :class:`PublishEnvelope` of ``row``: the routing, the canonical
    inner part and its nonce. The message's are the row's stored ones (O1: every copy the same
    envelope); the cancel's inner part is made from the row's cancel fields, with its own nonce (O7)."""
    if kind is Kind.MESSAGE:
        return Routing(Kind.MESSAGE, row.identity.box, row.to, pairing=row.pairing), row.inner, row.nonce
    if kind is not Kind.CANCEL or row.cancel_nonce is None or row.cancel_at is None:
        raise OutboxError(Refusal.NOT_SENT, f"message {row.identity} has no {kind} to publish")
    routing = Routing(Kind.CANCEL, row.identity.box, row.to, pairing=row.pairing)
    inner = CancelInner(routing, row.identity, row.digest, row.created_at, row.cancel_reason, row.cancel_at)
    return routing, encode_inner(inner), row.cancel_nonce


def message_of(row: Row) -> MessageInner:
    """The message ``row`` holds (its stored canonical inner part, read back)."""
    routing, plain, nonce = to_seal(row, Kind.MESSAGE)
    inner = parse_inner(plain, Outer(routing, nonce, plain))
    if not isinstance(inner, MessageInner):
        raise OutboxError(Refusal.UNKNOWN_MESSAGE, f"row {row.identity} holds no message")
    return inner


def _publish(row: Row, attempt: int) -> PublishEnvelope:
    return PublishEnvelope(Kind.MESSAGE, row.to, row.pairing, row.identity, attempt)


def _publish_cancel(row: Row, attempt: int) -> PublishEnvelope:
    return PublishEnvelope(Kind.CANCEL, row.to, row.pairing, row.identity, attempt)


def _tick_row(row: Row, now: float, bus_up: bool, live: bool, s: Settings) -> tuple[Row, tuple[Effect, ...]]:
    if row.state is _O.QUEUED:
        if now >= row.created_at + s.id_ttl:
            gone = _advance(row, "expire", now, "the id's hour ran out before it left this box")
            return gone, _moved(gone, now)
        if not bus_up:
            return row, ()
        out = _advance(row, "publish", now, "", attempt=1, due=now + retry_delay(row.digest, 1, s))
        return out, (*_moved(out, now), _publish(out, 1))
    if now >= deadline(row, s):
        why = {
            _O.PUBLISHED: f"box {row.to} did not say it has it by the deadline",
            _O.ACCEPTED: f"box {row.to} accepted it and did not say what happened by the deadline",
            _O.CANCELLING: f"box {row.to} never confirmed the cancel",
        }[row.state]
        gone = _advance(row, "deadline", now, why)
        return gone, _moved(gone, now)
    if not bus_up or row.due is None or now < row.due:
        return row, ()
    if row.state is _O.ACCEPTED:
        again = replace(row, attempt=row.attempt + 1, due=now + s.accepted_poll)
        return again, (Persist(STORE, (row.identity,), again), _publish(again, again.attempt))
    if not live:
        return row, ()  # no new attempt while the other box is not heard (O5)
    if row.state is _O.PUBLISHED:
        n = row.attempt + 1
        again = replace(row, attempt=n, due=now + retry_delay(row.digest, n, s))
        return again, (Persist(STORE, (row.identity,), again), _publish(again, n))
    n = row.cancel_attempt + 1  # cancelling
    again = replace(row, cancel_attempt=n, due=now + retry_delay(row.digest, n, s))
    return again, (Persist(STORE, (row.identity,), again), _publish_cancel(again, n))


def publish_new(outbox: Outbox, identity: Identity, *, now: float, bus_up: bool) -> tuple[Outbox, Effects]:
    """The admission's own first publish (O2, O5): the new ``queued`` row ``identity`` published at once
    while the bus is up (attempt 1, committed before its ``PublishEnvelope``), as :func:`tick` would;
    the other rows are left to the tick. Bus down: nothing (the tick publishes it once the bus is up)."""
    row = _row(outbox, identity)
    if row.state is not _O.QUEUED:
        return outbox, ()
    new, effects = _tick_row(row, now, bus_up, False, outbox.settings)
    if new is row:
        return outbox, ()
    return _with(outbox, [new]), effects


def check_size(text: str, limits: Limits) -> None:
    """O1's size rule on the sending box: the text and :data:`PROVENANCE_ALLOWANCE` bytes for the line
    the recipient box writes above it, within this box's cap (``too_large``)."""
    size = len(text.encode("utf-8")) + PROVENANCE_ALLOWANCE
    if size > limits.max_message_bytes:
        raise Refused(
            "too_large",
            f"message is {size} bytes with the {PROVENANCE_ALLOWANCE} bytes kept for the other box's provenance "
            f"line; at most {limits.max_message_bytes}",
        )


def tick(
    outbox: Outbox, *, now: float, bus_up: bool, heard: Mapping[str, float | None]
) -> tuple[Outbox, Effects]:
    """Everything due by ``now`` (O5, O6): expiries and deadlines, first publishes while the bus is up,
    new attempts by the schedule; the bus up again after a tick that saw it down makes every
    ``accepted`` row due at once (O5). ``heard`` is when each other box was last heard. Nothing due and
    the bus as the last tick saw it: the same outbox and no effects."""
    s = outbox.settings
    back = bus_up and not outbox.bus_up
    changed: list[Row] = []
    effects: list[Effect] = []
    for identity in sorted(outbox.rows, key=str):
        row = outbox.rows[identity]
        if row.is_final:
            continue
        new, done = _tick_row(_due_if(row, back, now), now, bus_up, is_live(heard.get(row.to), now, s), s)
        if new is not row:
            changed.append(new)
            effects.extend(done)
    if bus_up != outbox.bus_up:
        outbox = replace(outbox, bus_up=bus_up)
    if not changed:
        return outbox, ()
    return _with(outbox, changed), tuple(effects)


def _due_if(row: Row, back: bool, now: float) -> Row:
    """An ``accepted`` row made due at ``now`` when the bus is ``back`` (O5); else ``row``."""
    if back and row.state is _O.ACCEPTED and (row.due is None or row.due > now):
        return replace(row, due=now)
    return row


def heard_again(outbox: Outbox, box: str, *, now: float) -> tuple[Outbox, Effects]:
    """Box ``box`` is heard again after a silence: every row to it not yet accepted (``published``, and
    ``cancelling``'s cancel) is due at once (O5); :func:`tick` then publishes it. This also repairs a
    stream that lost what it acknowledged."""
    due = [
        replace(r, due=now)
        for r in outbox.rows.values()
        if r.to == box and r.state in (_O.PUBLISHED, _O.CANCELLING) and (r.due is None or r.due > now)
    ]
    if not due:
        return outbox, ()
    return _with(outbox, due), tuple(Persist(STORE, (r.identity,), r) for r in due)


def _row(outbox: Outbox, identity: Identity) -> Row:
    row = outbox.rows.get(identity)
    if row is None:
        raise OutboxError(Refusal.UNKNOWN_MESSAGE, f"no message {identity} in this box's outbox")
    return row


def publish_acked(
    outbox: Outbox, identity: Identity, *, attempt: int, sequence: int
) -> tuple[Outbox, Effects]:
    """A publish acknowledgement: recorded on the row for ``doctor`` and ``connectd messages``; it
    changes no state (O3): it says only that this attempt reached a server."""
    row = _row(outbox, identity)
    noted = replace(row, acked=(attempt, sequence))
    return _with(outbox, [noted]), (Persist(STORE, (identity,), noted),)


def publish_failed(outbox: Outbox, identity: Identity) -> tuple[Outbox, Effects]:
    """A publish that failed (no acknowledgement, the bus away): nothing changes (O3). The row may have
    left all the same; the schedule's next attempt, or the deadline, decides what follows."""
    _row(outbox, identity)
    return outbox, ()


def receipt(
    outbox: Outbox, inner: ReceiptInner, *, now: float, delivery: str | None = None
) -> tuple[Outbox, Effects]:
    """A verified receipt for a message this box sent (O3, O4); ``delivery`` is acknowledged last."""
    row = _row(outbox, inner.message)
    if inner.digest != row.digest:
        raise OutboxError(Refusal.OTHER_DIGEST, f"a receipt for {row.identity} names another digest")
    if not row.left:
        raise OutboxError(Refusal.NOT_SENT, f"message {row.identity} never left this box: no receipt answers it")
    ack: tuple[Effect, ...] = () if delivery is None else (AckDelivery(delivery),)
    outcome = inner.outcome
    if row.is_final:
        if outcome in ("accepted", str(row.state)):
            return outbox, ack
        late = Audit(
            actor=f"box:{inner.routing.sender}",
            action=ACTION,
            outcome="late receipt",
            target=row.to,
            message_id=str(row.identity),
            detail=f"{outcome} after {row.state}: {inner.reason}",
            at=now,
        )
        return outbox, (late, *ack)
    if outcome == "accepted":
        if row.state is not _O.PUBLISHED:
            return outbox, ack  # accepted again, or in cancelling: nothing to learn (O4)
        moved = _advance(row, "accepted", now, inner.reason, card=inner.card, due=now + outbox.settings.accepted_poll)
        return _with(outbox, [moved]), (*_moved(moved, now), *ack)
    moved = _advance(row, outcome, now, inner.reason, card=None)
    return _with(outbox, [moved]), (*_moved(moved, now), *ack)


def cancel_nonce(row: Row) -> bytes:
    """The nonce of ``row``'s cancel (O7): a hash of the row's random nonce and its digest, so unique as
    that nonce is, and not that nonce (as ``inbox.final_nonce`` is for a final receipt). A row has one
    cancel, and every copy of it is the same envelope, so no event needs to carry a nonce for it."""
    return hashlib.sha256(b"connect-cancel-v1" + row.nonce + row.digest.encode()).digest()[:NONCE_BYTES]


def cancels_needed(outbox: Outbox, sender: str) -> tuple[Identity, ...]:
    """The rows :func:`cancel` will publish a cancel for (each needs a nonce): ``sender``'s rows that
    left and have no final outcome nor a cancel yet."""
    return tuple(
        sorted(
            (r.identity for r in outbox.rows.values()
             if r.identity.principal == sender and r.state in (_O.PUBLISHED, _O.ACCEPTED)),
            key=str,
        )
    )


def cancel(
    outbox: Outbox, *, sender: str, now: float, reason: str, nonces: Mapping[Identity, bytes]
) -> tuple[Outbox, Effects]:
    """Revoking ``sender`` (O7): its ``queued`` rows ``cancelled``, its rows that left ``cancelling``,
    each with its cancel published (``nonces`` holds one per :func:`cancels_needed`)."""
    for identity in cancels_needed(outbox, sender):
        if identity not in nonces:
            raise OutboxError(Refusal.MISSING_NONCE, f"the cancel of {identity} needs a nonce")
        _check_nonce(nonces[identity], "a cancel")
    changed: list[Row] = []
    effects: list[Effect] = []
    for identity in sorted(outbox.rows, key=str):
        row = outbox.rows[identity]
        if row.identity.principal != sender:
            continue
        if row.state is _O.QUEUED:
            gone = _advance(row, "cancel", now, f"cancelled before it left this box: {reason}")
            changed.append(gone)
            effects.extend(_moved(gone, now))
        elif row.state in (_O.PUBLISHED, _O.ACCEPTED):
            out = _advance(
                row,
                "cancel",
                now,
                f"cancelling: {reason}",
                cancel_nonce=nonces[identity],
                cancel_reason=reason,
                cancel_at=now,
                cancel_attempt=1,
                due=now + retry_delay(row.digest, 1, outbox.settings),
            )
            changed.append(out)
            effects.extend((*_moved(out, now), _publish_cancel(out, 1)))
    if not changed:
        return outbox, ()
    return _with(outbox, changed), tuple(effects)


def pairing_removed(outbox: Outbox, pairing: str, *, now: float, box_name: str) -> tuple[Outbox, Effects]:
    """The pairing was removed (either box, O8): its ``queued`` rows ``cancelled``, every row that left
    and is not final ``unconfirmed``; no receipt of a removed pairing is believed afterwards."""
    changed: list[Row] = []
    effects: list[Effect] = []
    for identity in sorted(outbox.rows, key=str):
        row = outbox.rows[identity]
        if row.pairing != pairing or row.is_final:
            continue
        if row.state is _O.QUEUED:
            gone = _advance(row, "cancel", now, f"pairing with box {box_name} removed before it left this box")
        else:
            gone = _advance(row, "pairing_removed", now, f"pairing removed before box {box_name} answered")
        changed.append(gone)
        effects.extend(_moved(gone, now))
    if not changed:
        return outbox, ()
    return _with(outbox, changed), tuple(effects)
