"""The hub's sequencing of delivery (the rules are :mod:`connectcore.delivery` and
:mod:`connectcore.consent`): a message admitted or refused (``Submit``), the person's answer on its card
(``Decide``), the guard under the send lock (``GuardObserved``, a moved handle's new recipient), the
typing's outcome (``TypingObserved``), the attempt an armed pane takes (``attempt_armed``, the
state-triggered step :func:`connectcore.hub.step` runs after every event), the Needs you items connect's own unsent text opens, and the reads by merge group (counters, pair
approvals, hop state).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace

from connectcore import arming, consent, delivery, grants
from connectcore._machine import ConnectError
from connectcore.arming import PaneView, Seen
from connectcore.consent import Card, Decision, PairKey
from connectcore.delivery import (
    Landing,
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
from connectcore.federation import outbox as outbox_
from connectcore.federation import remote
from connectcore.grants import Principal, Scope
from connectcore.hub import acts as hub_acts
from connectcore.hub.gate import CallRefused, authorize
from connectcore.hub.state import (
    Decide,
    GuardFailed,
    GuardObserved,
    Hub,
    LeftDraft,
    Recipient,
    Step,
    Submit,
    TypingObserved,
    UnknownItem,
    restart_of_pane,
)

#: The words of a message's reason while its handle names no pane or several (it waits, never guessed).
NO_SINGLE_PANE = "names no single pane"


def _restart_holds(hub: Hub, message: Message, now: float) -> Step:
    """A guard answered once the pane's restart is open: nothing is typed; the message waits."""
    waiting = delivery.advance(message, "guard_wait", now=now, reason="the recipient is being restarted")
    attempts = {k: v for k, v in hub.attempts.items() if v != message.key}
    hub = _store(replace(hub, attempts=attempts), waiting)
    return hub, (Persist("message", waiting.key, waiting),)


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


def sent_to_another_box(hub: Hub, members: frozenset[str], message_id: str) -> bool:
    """The merge group already used ``message_id`` for a message to another box (an outbox row): ids
    are the sender's, wherever the message went."""
    outbox = hub.outbox
    return outbox is not None and any(
        r.identity.principal in members and r.identity.id == message_id for r in outbox.rows.values()
    )


def cancel_across(hub: Hub, members: frozenset[str], now: float, reason: str) -> Step:
    """O7 (:func:`connectcore.federation.outbox.cancel`): what these principals sent to other boxes and
    is not final: a row that never left ``cancelled``, a row that left ``cancelling`` with its cancel
    published (its nonce :func:`~connectcore.federation.outbox.cancel_nonce`). The revocation does not
    wait for the other box; :func:`connectcore.hub.federation.cancels_unconfirmed` says what it has not
    confirmed. A box that does not federate has no outbox: nothing."""
    outbox = hub.outbox
    if outbox is None:
        return hub, ()
    effects: list[Effect] = []
    for member in sorted(members):
        nonces = {i: outbox_.cancel_nonce(outbox.rows[i]) for i in outbox_.cancels_needed(outbox, member)}
        outbox, more = outbox_.cancel(outbox, sender=member, now=now, reason=reason, nonces=nonces)
        effects.extend(more)
    return replace(hub, outbox=outbox), tuple(effects)


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


def _open_card(
    hub: Hub, message: Message, card_id: str, now: float, recipient_actor: str,
    sender_box: str | None = None, sender_fingerprint: str | None = None,
) -> Step:
    """The card for ``message``; a remote sender's names its box and fingerprint
    (:func:`connectcore.federation.remote.sender_words`)."""
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
        sender_box=sender_box,
        sender_fingerprint=sender_fingerprint,
    )
    hub = replace(hub, cards={**hub.cards, card_id: card})
    return hub, (Persist("card", (card_id,), card), Notify("card", (card_id,), payload={"state": "pending"}))


def _pane_actor(hub: Hub, incarnation: str, pane_id: str) -> str:
    principal = grants.principal_at(hub.book, incarnation)
    return grants.actor_name(principal) if principal is not None else f"pane:{pane_id}"


def attempt_armed(hub: Hub, now: float) -> Step:
    """The state-triggered step, run once after every event (:func:`connectcore.hub.step`, as h11 runs
    its state fixpoint): every pane that can attempt takes its oldest consented message. A pane can
    attempt when it is armed, holds no attempt (a message in guard or typing), has no guard in flight
    (``Hub.guards``: a guard whose message ended without it, a revocation's cancel, still runs; its
    answer frees the pane) and is not being restarted. One pass is the fixpoint: an attempt takes only
    its own pane's slot, and arms nothing."""
    effects: tuple[Effect, ...] = ()
    for pane_id in list(hub.panes):
        hub, more = _maybe_attempt(hub, pane_id, now)
        effects += more
    return hub, effects


def _maybe_attempt(hub: Hub, pane_id: str, now: float) -> Step:
    """Start the guard for the oldest consented message to this pane, if the pane can attempt."""
    view = hub.panes.get(pane_id)
    if view is None or view.arming is not arming.Arming.ARMED or pane_id in hub.attempts or pane_id in hub.guards:
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
            hub = replace(
                hub,
                attempts={**hub.attempts, pane_id: guarded.key},
                guards={**hub.guards, pane_id: guarded.key},
            )
            return hub, (CheckGuard(pane_id, view.incarnation, guarded.key),)
    return hub, ()


def _guard_answered(hub: Hub, key: MessageKey) -> Hub:
    """The guard of ``key`` answered (``GuardObserved`` or ``GuardFailed``): it is no longer in flight."""
    if key not in hub.guards.values():
        return hub
    return replace(hub, guards={p: k for p, k in hub.guards.items() if k != key})


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
        if sent_to_another_box(hub, grants.group(hub.book, sender.id), ev.message_id):
            raise Refused("duplicate_id", f"message_id {ev.message_id!r} was already used (sent to another box)")
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
    return hub, tuple(effects)


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
    return hub, tuple(effects)


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


def _guard(hub: Hub, ev: GuardObserved) -> Step:
    """The guard's answer: the guard is no longer in flight. One that ends the message, or moves it to
    another pane, without typing leaves the pane's idle unused: the state-triggered step after the
    event (:func:`attempt_armed`) tries the next consented message for the pane at once."""
    message = hub.messages.get(ev.message)
    if message is None:
        raise UnknownItem("unknown_message", f"no message {ev.message}")
    return _guard_decides(_guard_answered(hub, ev.message), ev, message)


def guard_reading_counts(hub: Hub, key: MessageKey) -> bool:
    """After a guard that typed nothing, whether its fresh reading is also the pane's next observation
    (``PaneObserved``): while the message it checked still waits (ready). A pane whose screen changed
    under the guard and then stays still re-arms from it."""
    message = hub.messages.get(key)
    return message is not None and message.state is MessageState.READY


def _guard_failed(hub: Hub, ev: GuardFailed) -> Step:
    """The guard failed. If typing had started (the guard's step ran it), the message is unconfirmed
    after one last look at the pane (``ConfirmTyping`` with the failure: a draft left there is seen);
    otherwise the failure counts as a reading that is not ready: the message waits for the next idle
    (the pane is read again). A message the hub no longer holds: nothing to do."""
    hub = _guard_answered(hub, ev.message)
    message = hub.messages.get(ev.message)
    if message is None:
        return hub, ()
    if message.state is MessageState.TYPING:
        confirm = ConfirmTyping(message.recipient_pane, message.recipient_incarnation, message.key, ev.reason)
        return hub, (confirm,)
    return _guard(hub, GuardObserved(ev.now, ev.message, ev.incarnation, False, "", ev.now))


def _sender_scopes(hub: Hub, sender: str) -> frozenset[str]:
    """The sender's scopes as the recipient's rules read them; a remote sender brings none (R3)."""
    if remote.is_remote(sender):
        return frozenset()
    return frozenset(s.value for s in grants.scopes_of(hub.book, sender))


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
    if remote.is_remote(message.sender):  # R8: the inbox and the pairing, in place of a token and scopes
        gone = remote.may_still_deliver(hub.inbox, message.sender, message.id)
        if gone is not None:
            return _finalize(hub, message, "cancel", now, gone)
    else:
        sender_live = any(t.state is grants.TokenState.LIVE for t in grants.live_tokens(hub.book, message.sender))
        if not sender_live:
            return _finalize(hub, message, "cancel", now, "sender no longer connected")
        if Scope.MESSAGE not in grants.scopes_of(hub.book, message.sender):
            return _finalize(hub, message, "refuse", now, "sender lost the message scope")
    _principal, recipient_scopes = _recipient_scopes(hub, message.recipient_incarnation)
    why = consent.may_receive(
        recipient_kind=message.recipient_kind,
        recipient_scopes=recipient_scopes,
        sender_scopes=_sender_scopes(hub, message.sender),
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
    why = consent.may_receive(
        recipient_kind=target.kind, recipient_scopes=scopes, sender_scopes=_sender_scopes(hub, message.sender)
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
        return hub, (Persist("message", moved.key, moved),)
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
    return hub, effects
