"""The inbox: the receiving box's records of the messages other boxes sent it, and the receipts it
answers them with (docs/federation.md, "On the receiving box", "How a receiver judges an envelope").

Rules:

I1  A message is known by its identity (sender box, sender principal, message id): the dedup key. An
    identity is held, with the digest of its inner part, for the retention (24 h from its
    ``created_at``, :func:`tick`), and a copy of it is never a new message.
I2  Commit before the receipt: every step that answers an envelope returns its ``Persist`` first (the
    inbox record, which holds the message's text and identity together, and the records the hub
    commits in the same transaction, such as the local message row and its card), then its
    :class:`PublishReceipt`, then its :class:`AckDelivery`. Nothing is receipted that is not durable.
I3  A **duplicate** (:func:`receive`) is answered with the receipt held for its identity, the very
    value and nonce, so the same bytes for one outcome each time; it commits nothing and never
    becomes a message again, so it is never typed again.
I4  The recipient box's rules decide a new message (``remote.py``, the hub's): :func:`accept` commits
    it ``accepted`` (with what it waits for, such as its card) and receipts that; :func:`refuse`
    commits it ``refused`` and receipts that. **A remote refusal is final**: committed, so the same
    identity is answered ``refused`` again and cannot be retried there (the doc's open question,
    decided so). Too late (past the id's hour) commits ``expired``; a cancel for an identity not held
    commits a tombstone (``cancelled``) that answers the message if it comes later.
I5  Each final outcome of the local message (:func:`final`) is committed, then receipted once; a lost
    final receipt is recovered by the sender's next copy, answered as a duplicate. Its nonce is
    :func:`final_nonce`, made from the record's own (the random one its ``accepted`` receipt was sealed
    with): one final per record, so never one nonce for two receipts, and the hub needs no new value
    from the shell for an outcome any event may bring.
I6  A cancel (:func:`cancel_arrived`) cancels an accepted message not yet typing and receipts
    ``cancelled``; once typing started it changes nothing and the real outcome follows; a message
    already final is answered with its final receipt.
I7  A removed pairing delivers nothing more (:func:`pairing_removed`): from the removal on, its
    accepted messages not yet typing are ``cancelled`` (no receipt: none of a removed pairing is
    believed), nothing new from it is accepted, :func:`may_deliver` says no for the rest, and their
    finals are committed without a receipt.
I8  A refused envelope (the judgement's refusal) changes nothing but its delivery's acknowledgement;
    its audit record is collapsed to one a minute per sending box and reason, with the count of the
    others (:func:`receive`, :func:`tick`).
I9  A refused step raises :class:`InboxError` and changes nothing; an event :data:`INBOX_TABLE` does
    not allow is :class:`connectcore._machine.TransitionNotAllowed`. The core invents nothing: ``now``,
    nonces and delivery handles come in as values. After a restart the inbox is made again from its
    stored records (:func:`load`): everything it receipted is in them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum

from connectcore._machine import ConnectError, Table, freeze
from connectcore.effects import Audit, Effect, Persist
from connectcore.federation.effects import AckDelivery, Effects, PublishReceipt
from connectcore.federation.envelope import (
    AUDIT_EVENT,
    NONCE_BYTES,
    RETENTION,
    CancelInner,
    Decision,
    Held,
    Identity,
    Kind,
    MessageInner,
    ReceiptInner,
    Routing,
    Verdict,
)

STORE = "inbox"  # Persist.kind of a record
ACTION = "federation.inbox"  # Audit.action of the inbox's records
AUDIT_WINDOW = 60.0  # seconds: refusals from one box for one reason are audited once per window
NOBODY = ("", "")  # the receipt's recipient when no local recipient was reached


class InboxState(StrEnum):
    RECEIVED = "received"  # judged new: the recipient box's rules decide (never stored)
    ACCEPTED = "accepted"  # committed, receipted accepted: a local message
    DELIVERED = "delivered"
    DECLINED = "declined"
    REFUSED = "refused"
    CANCELLED = "cancelled"
    EXPIRED = "expired"
    UNCONFIRMED = "unconfirmed"


_I = InboxState
FINAL: frozenset[InboxState] = frozenset(
    {_I.DELIVERED, _I.DECLINED, _I.REFUSED, _I.CANCELLED, _I.EXPIRED, _I.UNCONFIRMED}
)
LOCAL_FINALS: tuple[InboxState, ...] = (
    _I.DELIVERED, _I.DECLINED, _I.REFUSED, _I.CANCELLED, _I.EXPIRED, _I.UNCONFIRMED,
)

INBOX_TABLE: Table[InboxState] = Table(
    name="inbox",
    initial=_I.RECEIVED,
    finals=FINAL,
    edges=(
        (_I.RECEIVED, "accept", _I.ACCEPTED),
        (_I.RECEIVED, "refuse", _I.REFUSED),
        (_I.RECEIVED, "too_late", _I.EXPIRED),
        (_I.RECEIVED, "tombstone", _I.CANCELLED),
        *((_I.ACCEPTED, str(f), f) for f in LOCAL_FINALS),
    ),
)


class Refusal(StrEnum):
    """Why an inbox step was refused."""

    HELD = "held"
    REMOVED = "removed"
    UNKNOWN_MESSAGE = "unknown_message"
    BAD_NONCE = "bad_nonce"
    WRONG_DECISION = "wrong_decision"


class InboxError(ConnectError):
    """A refused inbox step: ``reason`` (:class:`Refusal`) and a message. Nothing changed."""

    def __init__(self, reason: Refusal, message: str) -> None:
        super().__init__(message)
        self.reason = reason


# --------------------------------------------------------------------------------------------------
# Records
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Record:
    """What this box holds for one identity it received: the digest, its state, the receipt it
    answers with (and that receipt's nonce: a duplicate gets the same bytes), and for an accepted
    message its inner part (the text, committed with the identity)."""

    identity: Identity
    pairing: str
    digest: str
    created_at: float  # the message's (or the cancel's claim of it): the retention counts from it
    state: InboxState
    receipt: ReceiptInner
    nonce: bytes
    message: MessageInner | None = None
    tombstone: bool = False

    @property
    def held(self) -> Held:
        """What the judgement reads (``envelope.View.retained``)."""
        return Held(self.digest, str(self.state), self.tombstone)


@dataclass(frozen=True)
class Window:
    """Refusals from one box for one reason: when the audited one was, and how many since."""

    start: float
    suppressed: int = 0


@dataclass(frozen=True)
class Inbox:
    """This box's inbox. Read-only: steps return a new inbox. ``removed`` are the pairings removed
    (from the pairing book); ``windows`` only collapse audit records and are not stored."""

    own: str
    records: Mapping[Identity, Record] = field(default_factory=dict)
    removed: frozenset[str] = frozenset()
    windows: Mapping[tuple[str, str], Window] = field(default_factory=dict)
    retention: float = RETENTION

    def retained(self) -> dict[Identity, Held]:
        return {i: r.held for i, r in self.records.items()}


def load(own: str, records: Iterable[Record], *, removed: Iterable[str] = (), retention: float = RETENTION) -> Inbox:
    """The inbox after a restart, from its stored records (I9)."""
    return Inbox(own, freeze((r.identity, r) for r in records), frozenset(removed), {}, retention)


def may_deliver(inbox: Inbox, identity: Identity) -> bool:
    """The local message of ``identity`` may still be typed: accepted, and its pairing not removed (I7)."""
    record = inbox.records.get(identity)
    return record is not None and record.state is _I.ACCEPTED and record.pairing not in inbox.removed


# --------------------------------------------------------------------------------------------------
# Steps
# --------------------------------------------------------------------------------------------------


def _check_nonce(nonce: bytes) -> bytes:
    if not isinstance(nonce, bytes) or len(nonce) != NONCE_BYTES:
        raise InboxError(Refusal.BAD_NONCE, f"a receipt's nonce is {NONCE_BYTES} bytes")
    return nonce


def _with(inbox: Inbox, records: Iterable[Record]) -> Inbox:
    return replace(inbox, records=freeze([*inbox.records.items(), *((r.identity, r) for r in records)]))


def _receipt(
    inbox: Inbox, identity: Identity, pairing: str, digest: str, outcome: InboxState, *,
    reason: str, now: float, recipient: tuple[str, str] = NOBODY, card: str | None = None,
) -> ReceiptInner:
    return ReceiptInner(
        Routing(Kind.RECEIPT, inbox.own, identity.box, pairing=pairing),
        identity, digest, str(outcome), reason, now, recipient, card,
    )


def _audit(record: Record, now: float, actor: str, detail: str = "") -> Audit:
    return Audit(
        actor=actor,
        action=ACTION,
        outcome=str(record.state),
        target=record.pairing,
        message_id=str(record.identity),
        detail=detail or record.receipt.reason,
        at=now,
    )


def _commit_and_answer(
    inbox: Inbox, record: Record, now: float, actor: str, delivery: str | None,
    records: tuple[Persist, ...] = (),
) -> tuple[Inbox, Effects]:
    """I2: the record (and the hub's records of the same transaction), then the receipt, then the ack."""
    ack: tuple[Effect, ...] = () if delivery is None else (AckDelivery(delivery),)
    return _with(inbox, [record]), (
        Persist(STORE, (record.identity,), record),
        *records,
        _audit(record, now, actor),
        PublishReceipt(record.receipt, record.nonce),
        *ack,
    )


def _held_receipt(inbox: Inbox, record: Record) -> tuple[Effect, ...]:
    """The receipt held for ``record``, published again; none for a removed pairing (I7)."""
    if record.pairing in inbox.removed:
        return ()
    return (PublishReceipt(record.receipt, record.nonce),)


def _new(inbox: Inbox, verdict: Verdict) -> tuple[MessageInner, str]:
    if verdict.decision is not Decision.NEW or not isinstance(verdict.inner, MessageInner) or verdict.digest is None:
        raise InboxError(Refusal.WRONG_DECISION, f"a {verdict.decision} verdict is not a new message")
    inner = verdict.inner
    if inner.identity in inbox.records:
        raise InboxError(Refusal.HELD, f"this box already holds {inner.identity}: a duplicate, never new")
    pairing = inner.routing.pairing
    assert pairing is not None  # a message's routing names its pairing (envelope checks it)
    if pairing in inbox.removed:
        raise InboxError(Refusal.REMOVED, f"pairing {pairing} was removed: nothing more from it is accepted")
    return inner, pairing


def accept(
    inbox: Inbox, verdict: Verdict, *, nonce: bytes, now: float, recipient: tuple[str, str],
    reason: str, card: str | None = None, delivery: str | None = None, records: tuple[Persist, ...] = (),
) -> tuple[Inbox, Effects]:
    """The recipient box's rules accepted a new message (I4): one commit holds the inbox record (its
    text and identity) and the hub's ``records`` (the local message row, its card); then the
    ``accepted`` receipt (``reason``: what it waits for); then the acknowledgement."""
    inner, pairing = _new(inbox, verdict)
    assert verdict.digest is not None
    _check_nonce(nonce)
    state = INBOX_TABLE.next(INBOX_TABLE.initial, "accept")
    record = Record(
        inner.identity, pairing, verdict.digest, inner.created_at, state,
        _receipt(inbox, inner.identity, pairing, verdict.digest, state, reason=reason, now=now,
                 recipient=recipient, card=card),
        nonce, message=inner,
    )
    return _commit_and_answer(inbox, record, now, verdict.actor, delivery, records)


def refuse(
    inbox: Inbox, verdict: Verdict, *, nonce: bytes, now: float, reason: str,
    recipient: tuple[str, str] = NOBODY, delivery: str | None = None,
) -> tuple[Inbox, Effects]:
    """The recipient box's rules refused a new message (I4): committed ``refused`` (final: the same
    identity is answered so again), then receipted."""
    inner, pairing = _new(inbox, verdict)
    assert verdict.digest is not None
    _check_nonce(nonce)
    state = INBOX_TABLE.next(INBOX_TABLE.initial, "refuse")
    record = Record(
        inner.identity, pairing, verdict.digest, inner.created_at, state,
        _receipt(inbox, inner.identity, pairing, verdict.digest, state, reason=reason, now=now, recipient=recipient),
        nonce,
    )
    return _commit_and_answer(inbox, record, now, verdict.actor, delivery)


def _refused(inbox: Inbox, verdict: Verdict, now: float, ack: tuple[Effect, ...]) -> tuple[Inbox, Effects]:
    key = (verdict.actor, str(verdict.reason))
    window = inbox.windows.get(key)
    if window is not None and now - window.start < AUDIT_WINDOW:
        counted = replace(window, suppressed=window.suppressed + 1)
        return replace(inbox, windows=freeze([*inbox.windows.items(), (key, counted)])), ack
    more = f" ({window.suppressed} more before this)" if window is not None and window.suppressed else ""
    audit = Audit(
        actor=verdict.actor, action=AUDIT_EVENT, outcome="refused",
        detail=f"{verdict.reason}: {verdict.detail}{more}", at=now,
    )
    return replace(inbox, windows=freeze([*inbox.windows.items(), (key, Window(now))])), (audit, *ack)


def receive(
    inbox: Inbox, verdict: Verdict, *, now: float, nonce: bytes | None = None, delivery: str | None = None
) -> tuple[Inbox, Effects]:
    """An envelope the judgement settled without the recipient's rules: a refusal (I8), a duplicate
    (I3), a message cancelled before it came, too late, or a cancel's tombstone (I4; these two commit
    and need a ``nonce`` for their receipt). A new message goes to :func:`accept` or :func:`refuse`, a
    cancel of a held message to :func:`cancel_arrived`, receipts to the outbox."""
    ack: tuple[Effect, ...] = () if delivery is None else (AckDelivery(delivery),)
    decision = verdict.decision
    if decision is Decision.REFUSED:
        return _refused(inbox, verdict, now, ack)
    identity = verdict.identity
    if decision in (Decision.DUPLICATE, Decision.CANCELLED_FIRST):
        held = inbox.records.get(identity) if identity is not None else None
        if held is None:
            raise InboxError(Refusal.UNKNOWN_MESSAGE, f"this box holds no {identity} to answer")
        note = Audit(
            actor=verdict.actor, action=AUDIT_EVENT, outcome=str(decision), message_id=str(identity),
            detail=f"answered {held.state} again", at=now,
        )
        return inbox, (note, *_held_receipt(inbox, held), *ack)
    if decision not in (Decision.TOO_LATE, Decision.TOMBSTONE):
        raise InboxError(Refusal.WRONG_DECISION, f"a {decision} verdict is not the inbox's to settle here")
    assert identity is not None and verdict.inner is not None and verdict.record is not None
    if identity in inbox.records:
        raise InboxError(Refusal.HELD, f"this box already holds {identity}")
    if nonce is None:
        raise InboxError(Refusal.BAD_NONCE, f"a {decision} commits a receipt, which needs a nonce")
    _check_nonce(nonce)
    pairing = verdict.inner.routing.pairing
    assert pairing is not None
    if pairing in inbox.removed:
        raise InboxError(Refusal.REMOVED, f"pairing {pairing} was removed: nothing more from it is committed")
    digest = verdict.record.digest
    if decision is Decision.TOO_LATE:
        assert isinstance(verdict.inner, MessageInner)
        created, event = verdict.inner.created_at, "too_late"
    else:
        assert isinstance(verdict.inner, CancelInner)
        created, event = verdict.inner.created_at, "tombstone"
    state = INBOX_TABLE.next(INBOX_TABLE.initial, event)
    record = Record(
        identity, pairing, digest, created, state,
        _receipt(inbox, identity, pairing, digest, state, reason=verdict.detail, now=now),
        nonce, tombstone=decision is Decision.TOMBSTONE,
    )
    return _commit_and_answer(inbox, record, now, verdict.actor, delivery)


def _held(inbox: Inbox, identity: Identity) -> Record:
    record = inbox.records.get(identity)
    if record is None:
        raise InboxError(Refusal.UNKNOWN_MESSAGE, f"this box holds no {identity}")
    return record


def final_nonce(record: Record) -> bytes:
    """The nonce of ``record``'s final receipt (I5): a hash of its ``accepted`` receipt's random nonce
    and its digest, so unique as that nonce is, and not that nonce."""
    return hashlib.sha256(b"connect-final-v1" + record.nonce + record.digest.encode()).digest()[:NONCE_BYTES]


def final(
    inbox: Inbox, identity: Identity, outcome: InboxState, *, reason: str, now: float, nonce: bytes,
    recipient: tuple[str, str] | None = None,
) -> tuple[Inbox, Effects]:
    """The local message reached its final ``outcome`` (I5): committed, then receipted once (no receipt
    for a removed pairing, I7). The same outcome again changes nothing."""
    record = _held(inbox, identity)
    if record.state is outcome:
        return inbox, ()
    _check_nonce(nonce)
    state = INBOX_TABLE.next(record.state, str(outcome))
    receipt = _receipt(
        inbox, identity, record.pairing, record.digest, state, reason=reason, now=now,
        recipient=record.receipt.recipient if recipient is None else recipient,
    )
    done = replace(record, state=state, receipt=receipt, nonce=nonce)
    if record.pairing in inbox.removed:
        return _with(inbox, [done]), (Persist(STORE, (identity,), done), _audit(done, now, "connectd"))
    return _commit_and_answer(inbox, done, now, "connectd", None)


def cancel_arrived(
    inbox: Inbox, verdict: Verdict, *, cancellable: bool, now: float, nonce: bytes, delivery: str | None = None
) -> tuple[Inbox, Effects]:
    """A cancel of a message this box holds (I6). ``cancellable``: the hub found its local message not
    yet typing (under the recipient's send lock) and cancels it in the same step."""
    if verdict.decision is not Decision.CANCEL or verdict.identity is None:
        raise InboxError(Refusal.WRONG_DECISION, f"a {verdict.decision} verdict is not a cancel of a held message")
    record = _held(inbox, verdict.identity)
    ack: tuple[Effect, ...] = () if delivery is None else (AckDelivery(delivery),)
    if record.state in FINAL:
        return inbox, (*_held_receipt(inbox, record), *ack)
    if not cancellable:
        note = _audit(record, now, verdict.actor, "cancel arrived after typing started: the real outcome follows")
        return inbox, (note, *ack)
    _check_nonce(nonce)
    state = INBOX_TABLE.next(record.state, "cancelled")
    receipt = _receipt(
        inbox, record.identity, record.pairing, record.digest, state, reason="cancelled by the sender's box",
        now=now, recipient=record.receipt.recipient,
    )
    done = replace(record, state=state, receipt=receipt, nonce=nonce)
    return _commit_and_answer(inbox, done, now, verdict.actor, delivery)


def pairing_removed(
    inbox: Inbox, pairing: str, *, now: float, typing: frozenset[Identity] = frozenset()
) -> tuple[Inbox, Effects]:
    """The pairing was removed (I7): every message accepted from it and not ``typing`` (the hub's
    local messages whose typing started) is ``cancelled``, committed, with no receipt."""
    changed: list[Record] = []
    effects: list[Effect] = []
    for identity in sorted(inbox.records, key=str):
        record = inbox.records[identity]
        if record.pairing != pairing or record.state is not _I.ACCEPTED or identity in typing:
            continue
        state = INBOX_TABLE.next(record.state, "cancelled")
        # Never published (no receipt of a removed pairing: _held_receipt), so its nonce is not reused.
        done = replace(record, state=state, receipt=replace(record.receipt, outcome=str(state),
                                                             reason="pairing removed", at=now))
        changed.append(done)
        effects.extend((Persist(STORE, (identity,), done), _audit(done, now, "owner", "pairing removed")))
    after = replace(_with(inbox, changed), removed=inbox.removed | {pairing})
    return after, tuple(effects)


def tick(inbox: Inbox, *, now: float) -> tuple[Inbox, Effects]:
    """Past the retention, records are deleted (I1: an envelope that old is refused ``stale``); a
    refusal window that ended with refusals it did not audit gets its one record with the count (I8)."""
    effects: list[Effect] = []
    keep: dict[Identity, Record] = {}
    for identity, record in inbox.records.items():
        if record.created_at < now - inbox.retention:
            effects.append(Persist(STORE, (identity,), None))
        else:
            keep[identity] = record
    windows = dict(inbox.windows)
    for (actor, reason), window in sorted(inbox.windows.items()):
        if now - window.start >= AUDIT_WINDOW:
            del windows[(actor, reason)]
            if window.suppressed:
                effects.append(Audit(
                    actor=actor, action=AUDIT_EVENT, outcome="refused",
                    detail=f"{reason}: {window.suppressed} more in the minute from {window.start:.0f}", at=now,
                ))
    if not effects and windows == dict(inbox.windows):
        return inbox, ()
    return replace(inbox, records=freeze(keep.items()), windows=freeze(windows.items())), tuple(effects)
