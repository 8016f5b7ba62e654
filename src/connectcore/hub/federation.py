"""The hub's sequencing of federation events (docs/federation.md, "On the receiving box"), as
:mod:`connectcore.hub.messages` sequences delivery. Rules live in :mod:`connectcore.federation.remote`
(the recipient box's rules) and :mod:`connectcore.federation.inbox` (records and receipts); this module
only joins them to the local message machine.

- A remote message judged new (:class:`RemoteMessageArrived`) is admitted by :func:`remote.admit` over
  what the hub holds: the recipient's grant, and the remote principal's (``box:<box id>/<principal>``)
  live ids, sends, pair approval and last received message; the pairing's counts over every remote
  principal of that box.
- Refused: :func:`inbox.refuse` commits the refusal (final) and receipts it; the hub is unchanged but
  for its inbox.
- Admitted: a local message row exactly as a local sender's (``awaiting_consent`` with its card in
  Needs you, or ``ready`` under an approved pair within the hop limit), committed by
  :func:`inbox.accept` in the inbox record's transaction (its ``Persist`` records), then the
  ``accepted`` receipt, then the acknowledgement. From there it is a local message: the
  state-triggered step attempts it only when it is ``ready``, so the guard types it only under an
  approved pair (or a card approved) and with an empty composer, as ever.
- The local message's final outcome (:func:`finals_receipted`, after every step): whatever event ended
  a remote sender's message here (its typing confirmed, its card declined, an expiry, the guard's
  cancel), :func:`inbox.final` commits the outcome in the same transaction as the message row and
  receipts it to the sender's box (none for a removed pairing, I7).
- On the sending box, an agent's message to a remote target (:class:`RemoteSubmit`) is admitted by this
  box's own rules (:func:`remote_submit`: the gate's ``message`` scope, the id and its hour counted with
  the sender's local ids, the text, the size with the recipient's provenance allowance, the sender and
  pair rates, the hop), refused before admission as a local one (``CallRefused``, nothing stored), or
  made one outbox row (:func:`outbox.admit`) published at once while the bus is up
  (:func:`outbox.publish_new`: the row committed ``published`` before its ``PublishEnvelope``). Its
  receipts (:class:`ReceiptArrived`) move the row (:func:`outbox.receipt`: ``accepted``, then the final
  outcome, which wakes the sender with a ``Notify`` on its message) and acknowledge their delivery.
- The schedules (:class:`FederationTick`): :func:`outbox.tick` (publishes, new attempts while the other
  box is live, expiries, the deadline's ``unconfirmed``, each waking the sender) and :func:`inbox.tick`
  (the retention).
- Cancels and removals across boxes: revoking a sender (``hub.revocations``) cancels its outbox rows
  (:func:`outbox.cancel`; :func:`cancels_unconfirmed` is what the revocation's answer names); a cancel
  from the sending box (:class:`RemoteCancelArrived`, under the send lock :func:`cancel_panes` names)
  cancels the local message not yet typing with :func:`inbox.cancel_arrived`; a removed pairing
  (:class:`PairingRemoved`, under :func:`pairing_panes`) runs :func:`outbox.pairing_removed` and
  :func:`inbox.pairing_removed` and cancels the local messages across it not yet typing; the pairing's
  ``messages`` set off (:class:`MessagesOff`, under :func:`pairing_panes` too) cancels the local
  messages across it not yet typing, and :func:`finals_receipted` sends each its ``cancelled`` receipt
  (the pairing stays: the receipts travel); :func:`messages_off_owed` is what the daemon's tick asks
  of a pairing whose messages are off, so a restart between the book's commit and the step ends them.
  Which of the two steps a pairing of the book still owes is :func:`pairing_step_owed`'s (the daemon
  asks it of every pairing on its tick, and when the person sets ``messages=off``).
- The bus effects (:mod:`connectcore.federation.effects`) are effects like the others: the interpreter
  hands them to the daemon's bus loop.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import TypeGuard

from connectcore import delivery, grants
from connectcore._machine import ConnectError
from connectcore.consent import PairKey
from connectcore.delivery import Message, MessageKey, MessageState, Refused
from connectcore.effects import Audit, Effect, Persist
from connectcore.federation import inbox as inbox_
from connectcore.federation import outbox as outbox_
from connectcore.federation import remote
from connectcore.federation.envelope import (
    Decision,
    Identity,
    Kind,
    MessageInner,
    ReceiptInner,
    Routing,
    Sender,
)
from connectcore.federation.pairing import Pairing, PairingState
from connectcore.grants import Scope
from connectcore.hub.gate import CallRefused, authorize
from connectcore.hub.messages import (
    _audit_outcome,
    _finalize,
    _open_card,
    _pane_actor,
    _recipient_scopes,
    _store,
    last_received,
    message_for,
    sent_to_another_box,
    sent_within,
)
from connectcore.hub.state import (
    FederationTick,
    Hub,
    MessagesOff,
    PairingRemoved,
    ReceiptArrived,
    RemoteCancelArrived,
    RemoteMessageArrived,
    RemoteSettled,
    RemoteSubmit,
    Step,
)


def _within(times: tuple[float, ...], now: float, window: float) -> tuple[float, ...]:
    return delivery.within_window(times, now, window)


def _here(hub: Hub, ev: RemoteMessageArrived, inner: MessageInner) -> remote.Here:
    """What the recipient box's rules read, from the hub's state (R5's counts, R6's last received,
    R7's pair)."""
    box = inner.routing.sender
    principal = remote.remote_principal(box, inner.sender.principal)
    prefix = remote.remote_principal(box, "")
    window = hub.limits.rate_window
    incarnation = ev.recipient.incarnation
    _principal, scopes = _recipient_scopes(hub, incarnation)
    from_box = [m for m in hub.messages.values() if m.sender.startswith(prefix)]
    queued_to_it, queued = delivery.queued_bytes(hub.messages.values(), incarnation)
    return remote.Here(
        box_id=box,
        box_name=ev.box_name,
        fingerprint=ev.fingerprint,
        recipient_kind=ev.recipient.kind,
        recipient_scopes=scopes,
        recipient_place=ev.recipient.pane_id,
        ref=ev.ref,
        now=ev.now,
        settings=ev.settings,
        limits=hub.limits,
        pair_approved=(principal, incarnation) in hub.pairs,
        last_received=remote.reckoning(_answered(hub, inner), now=ev.now),
        live_ids=sum(1 for m in from_box if m.sender == principal),
        sent=len(_within(hub.sent.get(principal, ()), ev.now, window)),
        pair_sent=len(_within(hub.pair_sent.get((principal, incarnation), ()), ev.now, window)),
        pairing_sent=sum(len(_within(t, ev.now, window)) for p, t in hub.sent.items() if p.startswith(prefix)),
        pairing_live_ids=len(from_box),
        queued_to_recipient=queued_to_it,
        queued_total=queued,
        pairing_queued=delivery.queued_bytes(from_box, incarnation)[1],
        reply_known=remote.reply_known(_sent_to(hub, inner.in_reply_to), from_box=box),
    )


def _sent_row(hub: Hub, identity: Identity | None) -> outbox_.Row | None:
    """This box's outbox row ``identity`` (None: no such row here)."""
    return None if identity is None or hub.outbox is None else hub.outbox.rows.get(identity)


def _answered(hub: Hub, inner: MessageInner) -> MessageInner | None:
    """R6: this box's own message that ``inner`` answers (one R9 then checks went to the answering box)."""
    row = _sent_row(hub, inner.in_reply_to)
    return None if row is None else outbox_.message_of(row)


def _sent_to(hub: Hub, identity: Identity | None) -> str | None:
    """The box this box's outbox row ``identity`` went to (None: no such row here)."""
    row = _sent_row(hub, identity)
    return None if row is None else row.to


def remote_message_arrived(hub: Hub, ev: RemoteMessageArrived) -> Step:
    """A new remote message: the recipient box's rules, then the inbox's commit with the local records."""
    inbox = hub.inbox
    if inbox is None:
        raise ConnectError("this box is not federated: it has no inbox")
    inner = ev.verdict.inner
    if not isinstance(inner, MessageInner):
        raise inbox_.InboxError(inbox_.Refusal.WRONG_DECISION, "a remote message's verdict holds no message")
    recipient = (_pane_actor(hub, ev.recipient.incarnation, ev.recipient.pane_id), ev.recipient.pane_id)
    here = _here(hub, ev, inner)
    try:
        admitted = remote.admit(inner, here)
        if (admitted.principal, inner.id) in hub.messages:
            raise Refused("duplicate_id", f"message_id {inner.id!r} was already used here")
        if ev.ref in hub.refs:
            raise ConnectError(f"message ref {ev.ref} was already used")
    except Refused as exc:
        refused_inbox, effects = inbox_.refuse(
            inbox, ev.verdict, nonce=ev.nonce, now=ev.now, reason=f"{exc.reason}: {exc}",
            recipient=recipient, delivery=ev.delivery,
        )
        return replace(hub, inbox=refused_inbox), effects

    local, _scopes = _recipient_scopes(hub, ev.recipient.incarnation)
    message = Message(
        sender=admitted.principal,
        id=inner.id,
        ref=ev.ref,
        sender_actor=admitted.actor,
        recipient_pane=ev.recipient.pane_id,
        recipient_incarnation=ev.recipient.incarnation,
        recipient_principal=None if local is None else local.id,
        recipient_kind=ev.recipient.kind,
        handle=ev.recipient.handle,
        text=inner.text,
        typed=admitted.typed,
        conversation=admitted.conversation,
        hop=admitted.hop,
        in_reply_to=admitted.in_reply_to,
        created_at=ev.now,
        expires_at=inner.created_at + hub.limits.id_ttl,  # it shares its id's hour from the sender's clock
        state=MessageState.AWAITING_CONSENT,
    )
    window = hub.limits.rate_window
    pair = (admitted.principal, ev.recipient.incarnation)
    hub = replace(
        hub,
        refs={**hub.refs, ev.ref: message.key},
        sent={**hub.sent, admitted.principal: (*_within(hub.sent.get(admitted.principal, ()), ev.now, window), ev.now)},
        pair_sent={**hub.pair_sent, pair: (*_within(hub.pair_sent.get(pair, ()), ev.now, window), ev.now)},
    )
    after: tuple[Effect, ...] = ()
    if admitted.needs_card:
        message = replace(message, card=ev.card_id)
        hub = _store(hub, message)
        hub, opened = _open_card(
            hub, message, ev.card_id, ev.now, recipient[0], sender_box=ev.box_name, sender_fingerprint=ev.fingerprint
        )
        records = (Persist("message", message.key, message), *(e for e in opened if isinstance(e, Persist)))
        after = tuple(e for e in opened if not isinstance(e, Persist))
        reason, card = "awaiting_consent", ev.card_id
    else:
        message = delivery.advance(message, "approve", now=ev.now, reason="pair_approved")
        hub = _store(hub, message)
        records = (Persist("message", message.key, message),)
        reason, card = "ready", None
    accepted_inbox, effects = inbox_.accept(
        inbox, ev.verdict, nonce=ev.nonce, now=ev.now, recipient=recipient, reason=reason, card=card,
        delivery=ev.delivery, records=records,
    )
    hub = replace(hub, inbox=accepted_inbox)
    return hub, (*effects, *after, _audit_outcome(message, ev.now))


def remote_settled(hub: Hub, ev: RemoteSettled) -> Step:
    """An envelope the inbox settles by itself (:func:`inbox.receive`), or a new message refused
    before the recipient's rules because its target names no recipient here (:func:`inbox.refuse`,
    final as every remote refusal). Only the inbox changes."""
    inbox = hub.inbox
    if inbox is None:
        raise ConnectError("this box is not federated: it has no inbox")
    if ev.refusal is not None:
        if ev.nonce is None:
            raise inbox_.InboxError(inbox_.Refusal.BAD_NONCE, "a refusal commits a receipt, which needs a nonce")
        inbox, effects = inbox_.refuse(inbox, ev.verdict, nonce=ev.nonce, now=ev.now, reason=ev.refusal,
                                       delivery=ev.delivery)
    else:
        inbox, effects = inbox_.receive(inbox, ev.verdict, now=ev.now, nonce=ev.nonce, delivery=ev.delivery)
    return replace(hub, inbox=inbox), effects


def finals_receipted(hub: Hub, effects: tuple[Effect, ...], now: float) -> Step:
    """After a step: each remote sender's message that the step made final (its ``Persist`` of the
    message row), whose inbox record is still ``accepted``, gets :func:`inbox.final`: the record
    committed with the row (the step's records are one transaction), then the final receipt. Nothing
    else changes; a box with no inbox, or a step that ended no remote message, returns as it was."""
    inbox = hub.inbox
    if inbox is None:
        return hub, ()
    ended: dict[MessageKey, Message] = {}
    for effect in effects:
        if effect_is_message(effect):
            message = effect.record
            if remote.is_remote(message.sender):
                ended[message.key] = message
    more: list[Effect] = []
    for key in sorted(ended):
        message = ended[key]
        identity = remote.identity_of(message.sender, message.id)
        record = None if identity is None else inbox.records.get(identity)
        if identity is None or record is None or record.state is not inbox_.InboxState.ACCEPTED:
            continue
        if message.state not in delivery.FINAL:
            continue
        inbox, receipts = inbox_.final(
            inbox, identity, inbox_.InboxState(message.state.value), reason=message.reason, now=now,
            nonce=inbox_.final_nonce(record),
        )
        more.extend(receipts)
    if not more:
        return hub, ()
    return replace(hub, inbox=inbox), tuple(more)


def finals_audited(effects: tuple[Effect, ...], now: float) -> tuple[Effect, ...]:
    """After a step: each message to another box that the step made final (its ``Persist`` of the
    outbox row) is recorded under the sending agent's actor, as a local message's final outcome is
    (``send_message``, the outcome, the message id; the target with the recipient box's id, which is
    what the row holds), beside the outbox's own record. A row is made final once, so once."""
    more: list[Effect] = []
    for effect in effects:
        if isinstance(effect, Persist) and effect.kind == outbox_.STORE and isinstance(effect.record, outbox_.Row):
            row = effect.record
            if row.is_final:
                inner = outbox_.message_of(row)
                more.append(Audit(
                    actor=inner.sender.actor, action="send_message", outcome=outbox_.answer(row),
                    scope=Scope.MESSAGE.value, target=f"{inner.target[1]}@{row.to}", message_id=row.identity.id,
                    detail=row.reason, at=now,
                ))
    return tuple(more)


def effect_is_message(effect: Effect) -> TypeGuard[Persist]:
    """A ``Persist`` of a message row (its record a :class:`Message`)."""
    return isinstance(effect, Persist) and effect.kind == "message" and isinstance(effect.record, Message)


# --------------------------------------------------------------------------------------------------
# The sending box
# --------------------------------------------------------------------------------------------------


def _sent_rows(hub: Hub, members: frozenset[str], now: float) -> list[outbox_.Row]:
    """The group's outbox rows whose id is still reserved (within its hour)."""
    outbox = hub.outbox
    if outbox is None:
        return []
    return [r for r in outbox.rows.values() if r.identity.principal in members and now - r.created_at < hub.limits.id_ttl]


def _refused(actor: str, ev: RemoteSubmit, reason: str, message: str) -> CallRefused:
    return CallRefused(reason, message, Audit(
        actor=actor, action="send_message", outcome="refused", scope=Scope.MESSAGE.value,
        target=f"{ev.target[1]}@{ev.box_name}", message_id=ev.message_id, detail=reason, at=ev.now,
    ))


def _reply_to(hub: Hub, ev: RemoteSubmit, members: frozenset[str]) -> Identity | None:
    """R9 on the sending box: ``ev.in_reply_to`` (a ref) as the identity it travels as."""
    if ev.in_reply_to is None:
        return None
    key = hub.refs.get(ev.in_reply_to)
    original = hub.messages.get(key) if key is not None else None
    delivery.check_reply(ev.in_reply_to, original, members)
    assert original is not None  # check_reply refuses a ref naming none
    return remote.reply_identity(original.sender, original.id, box=ev.box, box_name=ev.box_name, ref=ev.in_reply_to)


def remote_submit(hub: Hub, ev: RemoteSubmit) -> Step:
    """An agent's message to an agent on another box: this box's rules (O1), then one outbox row,
    published at once while the bus is up, and the call's record under the sender's actor (``send_message``
    ``queued``) beside the outbox's. A refusal stores nothing (``CallRefused``)."""
    outbox = hub.outbox
    if outbox is None:
        raise ConnectError("this box is not federated: it has no outbox")
    sender, _allowed = authorize(
        hub, token_hash=ev.token_hash, scope=Scope.MESSAGE, action="send_message", now=ev.now,
        target=f"{ev.target[1]}@{ev.box_name}",
    )
    actor = grants.actor_name(sender)
    limits = hub.limits
    token = hub.book.tokens[ev.token_hash]
    members = grants.group(hub.book, sender.id)
    pair: PairKey = (sender.id, f"{remote.REMOTE_PREFIX}{ev.box}/{ev.target[1]}")
    try:
        delivery.check_message_id(ev.message_id, limits)
        delivery.check_not_duplicate(ev.message_id, message_for(hub, sender.id, ev.message_id))
        if sent_to_another_box(hub, members, ev.message_id):
            raise Refused("duplicate_id", f"message_id {ev.message_id!r} was already used (sent to another box)")
        delivery.check_text(ev.text)
        reply_to = _reply_to(hub, ev, members)
        outbox_.check_size(ev.text, limits)
        reserved = delivery.live_ids(hub.messages, members) + len(_sent_rows(hub, members, ev.now))
        delivery.check_id_cap(reserved, limits)
        delivery.check_rate(len(sent_within(hub, sender.id, ev.now)), limits.sender_per_window, "sender",
                            limits.rate_window)
        pair_sent = delivery.within_window(hub.pair_sent.get(pair, ()), ev.now, limits.rate_window)
        delivery.check_rate(len(pair_sent), limits.pair_per_window, "pair", limits.rate_window)
        if ev.ref in hub.refs:
            raise ConnectError(f"message ref {ev.ref} was already used")
    except Refused as exc:
        raise _refused(actor, ev, exc.reason, str(exc)) from exc
    conversation, hop = delivery.assign_hop(last_received(hub, sender.id), ref=ev.ref, now=ev.now, limits=limits)
    inner = MessageInner(
        Routing(Kind.MESSAGE, outbox.own, ev.box, pairing=ev.pairing),
        Sender(sender.id, actor, sender.harness, token.pane_id, token.incarnation, sender.control),
        ev.message_id, ev.now, ev.target, ev.text, conversation, hop, in_reply_to=reply_to,
    )
    try:
        outbox, admitted = outbox_.admit(outbox, inner, nonce=ev.nonce, now=ev.now)
    except outbox_.OutboxError as exc:
        raise _refused(actor, ev, str(exc.reason), str(exc)) from exc
    outbox, published = outbox_.publish_new(outbox, inner.identity, now=ev.now, bus_up=ev.bus_up)
    # the call's own record, under the actor that made it (as a local send's and a refused one's)
    called = Audit(actor=actor, action="send_message", outcome="queued", scope=Scope.MESSAGE.value,
                   target=f"{ev.target[1]}@{ev.box_name}", message_id=ev.message_id, at=ev.now)
    window = limits.rate_window
    hub = replace(
        hub,
        outbox=outbox,
        sent={**hub.sent, sender.id: (*delivery.within_window(hub.sent.get(sender.id, ()), ev.now, window), ev.now)},
        pair_sent={**hub.pair_sent, pair: (*pair_sent, ev.now)},
    )
    return hub, (*admitted, called, *published)


def receipt_arrived(hub: Hub, ev: ReceiptArrived) -> Step:
    """A verified receipt for a message this box sent: the outbox row moves by it (O3, O4), the sender
    is woken on a change, and the delivery is acknowledged after what the step commits."""
    outbox = hub.outbox
    inner = ev.verdict.inner
    if outbox is None:
        raise ConnectError("this box is not federated: it has no outbox")
    if ev.verdict.decision is not Decision.RECEIPT or not isinstance(inner, ReceiptInner):
        raise outbox_.OutboxError(outbox_.Refusal.UNKNOWN_MESSAGE, f"a {ev.verdict.decision} verdict is no receipt")
    outbox, effects = outbox_.receipt(outbox, inner, now=ev.now, delivery=ev.delivery)
    return replace(hub, outbox=outbox), effects


def federation_tick(hub: Hub, ev: FederationTick) -> Step:
    """The outbox's schedule (O5, O6) and the inbox's retention (I1, I8) at ``now``; a box that does not
    federate has neither, and nothing changes."""
    effects: list[Effect] = []
    if hub.outbox is not None:
        outbox, more = outbox_.tick(hub.outbox, now=ev.now, bus_up=ev.bus_up, heard=dict(ev.heard))
        hub = replace(hub, outbox=outbox)
        effects.extend(more)
    if hub.inbox is not None:
        inbox, more = inbox_.tick(hub.inbox, now=ev.now)
        hub = replace(hub, inbox=inbox)
        effects.extend(more)
    return hub, tuple(effects)


# --------------------------------------------------------------------------------------------------
# Cancels and removals across boxes (docs/federation.md, "Revocation across boxes")
# --------------------------------------------------------------------------------------------------


def cancels_unconfirmed(hub: Hub, principal_ids: Iterable[str]) -> dict[str, int]:
    """Per other box, how many messages of these principals (and their groups) are ``cancelling``: the
    cancels it has not yet confirmed (O7, :func:`outbox.pending_cancels`), what a revocation's answer
    names (:func:`outbox.pending_cancels_words`). A box that does not federate: none."""
    outbox = hub.outbox
    if outbox is None:
        return {}
    members: set[str] = set()
    for pid in principal_ids:
        members |= grants.group(hub.book, pid) if pid in hub.book.principals else {pid}
    counts: dict[str, int] = {}
    for member in sorted(members):
        for box, n in outbox_.pending_cancels(outbox, member).items():
            counts[box] = counts.get(box, 0) + n
    return counts


def _local_of(hub: Hub, identity: Identity) -> Message | None:
    return hub.messages.get((remote.remote_principal(identity.box, identity.principal), identity.id))


def cancel_panes(hub: Hub, identity: Identity) -> tuple[str, ...]:
    """The send lock a cancel of ``identity`` is stepped under (a pure read, as ``panes_to_lock``): its
    local message's recipient pane, while that message is not final."""
    message = _local_of(hub, identity)
    return () if message is None or message.is_final else (message.recipient_pane,)


def _from_pairing(hub: Hub, pairing: str) -> list[Message]:
    """The local messages this box accepted across ``pairing`` that are not final."""
    inbox = hub.inbox
    if inbox is None:
        return []
    found = []
    for identity, record in inbox.records.items():
        if record.pairing != pairing:
            continue
        message = _local_of(hub, identity)
        if message is not None and not message.is_final:
            found.append(message)
    return sorted(found, key=lambda m: m.key)


def pairing_panes(hub: Hub, pairing: str) -> tuple[str, ...]:
    """The send locks a removal of ``pairing`` is stepped under: the recipient panes of what this box
    accepted across it and has not ended."""
    return tuple(sorted({m.recipient_pane for m in _from_pairing(hub, pairing)}))


@dataclass(frozen=True)
class InFlight:
    """What is in flight across one pairing, as ``pair list`` and ``pair remove`` show it: ``sent``, this
    box's messages to that box not yet final here (their outbox rows); ``received``, messages from that
    box accepted here and not yet final (their inbox records ``accepted``): what a removal cancels,
    but for one whose typing has started."""

    sent: int
    received: int


def in_flight(hub: Hub, pairing: str) -> InFlight:
    """The messages in flight across ``pairing`` (:class:`InFlight`); none on a box that does not federate."""
    sent = sum(1 for r in hub.outbox.rows.values() if r.pairing == pairing and not r.is_final) if hub.outbox else 0
    received = sum(
        1 for r in hub.inbox.records.values() if r.pairing == pairing and r.state is inbox_.InboxState.ACCEPTED
    ) if hub.inbox else 0
    return InFlight(sent, received)


def removal_owed(hub: Hub, pairing: str) -> bool:
    """A pairing the book removed still has something across it that :class:`PairingRemoved` ends: an
    outbox row not final, or a local message accepted across it not final and not typing. The book's
    removal and the hub's step are two commits; the daemon asks this of every removed pairing on its
    federation tick, so a restart between them ends what the step would have ended."""
    if hub.outbox is not None and any(r.pairing == pairing and not r.is_final for r in hub.outbox.rows.values()):
        return True
    return any(m.state is not MessageState.TYPING for m in _from_pairing(hub, pairing))


def _cancellable_from(hub: Hub, pairing: str) -> list[Message]:
    """What a ``messages=off`` ends: the local messages accepted across ``pairing``, not final, whose
    typing has not started, while their inbox record is still ``accepted``."""
    inbox = hub.inbox
    if inbox is None:
        return []
    return [
        m for m in _from_pairing(hub, pairing)
        if m.state is not MessageState.TYPING
        and (i := remote.identity_of(m.sender, m.id)) is not None
        and (record := inbox.records.get(i)) is not None
        and record.state is inbox_.InboxState.ACCEPTED
    ]


def messages_off_owed(hub: Hub, pairing: str) -> bool:
    """A pairing whose ``messages`` setting is off still holds something :class:`MessagesOff` ends (the
    book's setting and the hub's step are two commits; the daemon's federation tick asks this)."""
    return bool(_cancellable_from(hub, pairing))


class OwedStep(StrEnum):
    """The hub step a pairing of the book still owes (the book and the hub commit apart)."""

    REMOVAL = "removal"  # PairingRemoved
    MESSAGES_OFF = "messages_off"  # MessagesOff


def pairing_step_owed(hub: Hub, pairing: Pairing) -> OwedStep | None:
    """The step ``pairing`` (as the book holds it) still owes the hub: a removed pairing with something
    across it :class:`PairingRemoved` ends (:func:`removal_owed`), else an active one whose ``messages``
    are off still holding what :class:`MessagesOff` ends (:func:`messages_off_owed`); None (a pairing
    never active owes nothing: nothing crossed it)."""
    if pairing.id and pairing.state is PairingState.REMOVED and removal_owed(hub, pairing.id):
        return OwedStep.REMOVAL
    if (pairing.id and pairing.state is PairingState.ACTIVE and not pairing.settings.messages
            and messages_off_owed(hub, pairing.id)):
        return OwedStep.MESSAGES_OFF
    return None


def messages_off(hub: Hub, ev: MessagesOff) -> Step:
    """The pairing's ``messages`` set off (R1 from then on refuses what arrives), under the send locks
    of :func:`pairing_panes`, as a local revocation: each local message accepted across it and not yet
    typing is cancelled with its card withdrawn and its audit record; :func:`finals_receipted` then
    commits its inbox record ``cancelled`` in the same step and sends the remote sender its final
    receipt. One whose typing started keeps going; its real outcome is receipted. Stepping it again
    changes nothing more; a box that does not federate is refused loudly."""
    if hub.inbox is None:
        raise ConnectError("this box is not federated: it has no inbox")
    effects: list[Effect] = []
    for message in _cancellable_from(hub, ev.pairing):
        hub, more = _finalize(hub, message, "cancel", ev.now, f"messages from box {ev.box_name} turned off here")
        effects.extend(more)
    return hub, tuple(effects)


def remote_cancel_arrived(hub: Hub, ev: RemoteCancelArrived) -> Step:
    """The sending box's cancel of a message this box holds (I6), under the recipient's send lock: a
    local message not yet typing is cancelled here like a local revocation (its card withdrawn, its
    audit record), its inbox record committed ``cancelled`` in the same step and receipted (the nonce
    :func:`inbox.final_nonce`, the one final receipt the record has: :func:`finals_receipted` then finds
    it no longer ``accepted`` and adds none); once typing started nothing changes and the real outcome
    is receipted when it comes; a message already final is answered with its final receipt."""
    inbox = hub.inbox
    if inbox is None:
        raise ConnectError("this box is not federated: it has no inbox")
    identity = ev.verdict.identity
    if ev.verdict.decision is not Decision.CANCEL or identity is None:
        raise inbox_.InboxError(inbox_.Refusal.WRONG_DECISION,
                                f"a {ev.verdict.decision} verdict is not a cancel of a held message")
    record = inbox.records.get(identity)
    if record is None:
        raise inbox_.InboxError(inbox_.Refusal.UNKNOWN_MESSAGE, f"this box holds no {identity}")
    message = _local_of(hub, identity)
    cancellable = (
        record.state is inbox_.InboxState.ACCEPTED
        and message is not None
        and not message.is_final
        and message.state is not MessageState.TYPING
    )
    local: tuple[Effect, ...] = ()
    if cancellable:
        assert message is not None
        hub, local = _finalize(hub, message, "cancel", ev.now, f"cancelled by its sender's box {identity.box}")
    inbox, effects = inbox_.cancel_arrived(
        inbox, ev.verdict, cancellable=cancellable, now=ev.now, nonce=inbox_.final_nonce(record), delivery=ev.delivery,
    )
    return replace(hub, inbox=inbox), (*local, *effects)


def pairing_removed(hub: Hub, ev: PairingRemoved) -> Step:
    """A pairing removed (either box; the pairing book committed it), under the send locks of
    :func:`pairing_panes`: the outbox's rows across it end (O8: never left ``cancelled``, left
    ``unconfirmed``), the inbox cancels what it accepted across it and is not typing, without a
    receipt (I7), and each such local message is cancelled here with its card withdrawn and its audit
    record; from then on nothing of that pairing is accepted or typed (R8). Stepping it again changes
    nothing more."""
    if hub.inbox is None and hub.outbox is None:
        raise ConnectError("this box is not federated: it has no inbox nor outbox")
    effects: list[Effect] = []
    if hub.outbox is not None:
        outbox, sent = outbox_.pairing_removed(hub.outbox, ev.pairing, now=ev.now, box_name=ev.box_name)
        hub = replace(hub, outbox=outbox)
        effects.extend(sent)
    held = _from_pairing(hub, ev.pairing)
    if hub.inbox is not None:
        typing = frozenset(
            i for m in held if m.state is MessageState.TYPING and (i := remote.identity_of(m.sender, m.id)) is not None
        )
        inbox, received = inbox_.pairing_removed(hub.inbox, ev.pairing, now=ev.now, typing=typing)
        hub = replace(hub, inbox=inbox)
        effects.extend(received)
    for message in held:
        if message.state is MessageState.TYPING:
            continue
        hub, more = _finalize(hub, message, "cancel", ev.now, f"pairing with box {ev.box_name} removed")
        effects.extend(more)
    return hub, tuple(effects)
