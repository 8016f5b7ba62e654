"""The panes the hub hears of: a reading (``PaneObserved``: arming, a Needs you item closed), a pane
gone (``PaneGone``), the clock (``Tick``: quiet re-arm, expiries, the rate windows), the daemon's
start (``Recover``, then ``Reconcile``: every incarnation that ended while it was down).
"""

from __future__ import annotations

from dataclasses import replace

from connectcore import arming, consent, delivery, grants
from connectcore import restart as restart_
from connectcore.arming import Seen
from connectcore.delivery import (
    MessageKey,
    MessageState,
)
from connectcore.effects import (
    Effect,
    Notify,
    Persist,
)
from connectcore.hub import acts as hub_acts
from connectcore.hub.messages import (
    _close_draft,
    _finalize,
    _open_draft,
    _store,
    awaited_panes,
    cancel_across,
)
from connectcore.hub.restarts import _BEFORE_EXIT, _closed
from connectcore.hub.state import Hub, PaneGone, PaneObserved, Reconcile, Recover, Step, Tick

#: Why what a sender sent to other boxes is cancelled when its process ended (its last live token).
SENDER_ENDED = "sender no longer connected (its process ended)"


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
    return hub, effects + more


def reading_dropped(hub: Hub, pane_id: str, incarnation: str, read_at: float) -> bool:
    """The hub holds a newer reading of this incarnation than one read at ``read_at``: that reading,
    reported, changed nothing (:func:`connectcore.arming.older`)."""
    return arming.older(hub.panes.get(pane_id), incarnation, read_at)


def _draft_cleared(hub: Hub, ev: PaneObserved) -> Step:
    """A reading with an empty composer, read after connect left a draft there, closes the item."""
    left = hub.drafts.get(ev.pane_id)
    if left is None or left.incarnation != ev.incarnation or not ev.ready or ev.read_at < left.at:
        return hub, ()
    return _close_draft(hub, ev.pane_id, "the composer is empty again")


def _pane_gone(hub: Hub, ev: PaneGone) -> Step:
    """The process a pane held is gone: messages addressed to it are cancelled at once, its tokens
    end, pair approvals for that incarnation lapse, and a restart of it that had not yet sent its exit
    command (planned, waiting for idle) is cancelled: the agent it was to relaunch ended by itself. A
    sender left with no live token has what it sent to other boxes cancelled in the same step
    (:func:`connectcore.hub.messages.cancel_across`, :data:`SENDER_ENDED`)."""
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
    ending = {t.principal for t in hub.book.tokens.values()
              if t.incarnation == ev.incarnation and t.state is grants.TokenState.LIVE}
    book, more = grants.end_incarnation(hub.book, now=ev.now, incarnation=ev.incarnation)
    effects += more
    # A sender whose last live token this ends is no longer connected: locally its queued messages are
    # cancelled at the guard ("sender no longer connected"); what it sent to other boxes cannot wait for
    # a guard here, so it is cancelled now, in this step (O7, as a revocation: never left ``cancelled``,
    # left ``cancelling`` with its cancel published).
    gone = frozenset(m for p in sorted(ending) if not grants.live_tokens(book, p) for m in grants.group(book, p))
    hub, more = cancel_across(replace(hub, book=book), gone, ev.now, SENDER_ENDED)
    effects += more
    pairs = frozenset(p for p in hub.pairs if p[1] != ev.incarnation)
    if pairs != hub.pairs:
        effects += (Persist("pairs", (), tuple(sorted(pairs))),)
    panes = {k: v for k, v in hub.panes.items() if not (k == ev.pane_id and v.incarnation == ev.incarnation)}
    hub = replace(hub, pairs=pairs, panes=panes)
    left = hub.drafts.get(ev.pane_id)
    if left is not None and left.incarnation == ev.incarnation:
        hub, more = _close_draft(hub, ev.pane_id, "the pane's process ended")
        effects += more
    return hub, effects


def _rearm_quiet_panes(hub: Hub, now: float) -> Step:
    """A pane that sits ready but unarmed for ``rearm_after`` seconds is armed by the clock
    (:func:`connectcore.arming.quiet`): its turn was too quick to be seen, or its reading went unheard.
    A pane a consented message waits for (:func:`awaited_panes`) is armed so even when its newest
    reading is not ready: that reading may be one that won a race it should have lost (a ready
    reading dropped as older), and the guard looks afresh before anything is typed."""
    effects: tuple[Effect, ...] = ()
    awaited = awaited_panes(hub)
    for pane_id, view in list(hub.panes.items()):
        rearmed = arming.quiet(view, now, hub.limits.rearm_after, awaited=pane_id in awaited)
        if rearmed is not None:
            hub = replace(hub, panes={**hub.panes, pane_id: rearmed})
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
    hub = replace(hub, attempts={}, guards={}, panes=panes)
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
