"""The hub: one action path that joins grants, consent and delivery.

Every agent call and every person's decision goes through :func:`step` (writes) or
:func:`authorize` (reads), so identity, scope, consent, audit and delivery are decided in one place.
The daemon executes the effects and feeds observations back as events. Rules live in
:mod:`connectcore.grants`, :mod:`connectcore.consent` and :mod:`connectcore.delivery`; this module
only sequences them.

The guard protocol with the daemon (the recipient pane's send lock is the linearization point):

1. ``PaneObserved`` reports each reading of a pane, with when it was read. The pane's arming
   (:mod:`connectcore.arming`: seen busy, armed by an idle transition, typing, awaiting the turn,
   quiet re-arm) moves on it; after every event, an armed pane with no attempt and no guard in flight
   takes the first consented message for it (the state-triggered step :func:`step` runs), which moves
   to ``guarding`` with a :class:`CheckGuard`.
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

The hub is a package, split by machine (docs/architecture.md, "The layout"): this module holds
:func:`step` and its event table :data:`HANDLERS`, and re-exports the names the daemon and the tests
use (``from connectcore import hub as H``). The parts import downwards only, never back (import-linter's
layers contract): :mod:`~connectcore.hub.state` (the hub's state, its events and errors),
:mod:`~connectcore.hub.gate` (``authorize``), :mod:`~connectcore.hub.acts` (control's acts),
:mod:`~connectcore.hub.messages` (the sequencing of delivery), :mod:`~connectcore.hub.tokens` (launch,
bind), :mod:`~connectcore.hub.restarts`, :mod:`~connectcore.hub.panes` (readings, reconcile, recover,
tick), :mod:`~connectcore.hub.revocations` and :mod:`~connectcore.hub.federation` (a remote message:
the recipient box's rules, then the inbox's commit with the local message row and its card; its final
receipt; on the sending box, a remote target admitted into the outbox, and its receipts; a cancel from
the sending box, a pairing removed).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace as replace
from types import MappingProxyType
from typing import Any

from connectcore import control
from connectcore import delivery as delivery
from connectcore import grants as grants
from connectcore._machine import ConnectError
from connectcore.arming import PaneView
from connectcore.consent import Card, CardState, PairKey
from connectcore.delivery import DEFAULT_LIMITS as DEFAULT_LIMITS
from connectcore.delivery import Limits as Limits
from connectcore.delivery import Message as Message
from connectcore.delivery import MessageState as MessageState
from connectcore.effects import Audit as Audit
from connectcore.effects import Notify as Notify
from connectcore.grants import GrantBook
from connectcore.grants import Scope as Scope
from connectcore.hub import acts as hub_acts
from connectcore.hub.federation import (
    InFlight,
    OwedStep,
    cancel_panes,
    cancels_unconfirmed,
    federation_tick,
    finals_audited,
    finals_receipted,
    in_flight,
    messages_off,
    messages_off_owed,
    pairing_panes,
    pairing_removed,
    pairing_step_owed,
    receipt_arrived,
    remote_cancel_arrived,
    remote_message_arrived,
    remote_settled,
    remote_submit,
    removal_owed,
)
from connectcore.hub.gate import CallRefused, authorize
from connectcore.hub.gate import _token_actor as _token_actor
from connectcore.hub.messages import NO_SINGLE_PANE as NO_SINGLE_PANE
from connectcore.hub.messages import (
    _decide,
    _guard,
    _guard_failed,
    _submit,
    _typed,
    attempt_armed,
    guard_reading_counts,
    last_received,
    message_for,
    pair_approved,
    pair_sent_within,
    panes_to_lock,
    sent_within,
)
from connectcore.hub.messages import _guard_decides as _guard_decides
from connectcore.hub.messages import _recipient_scopes as _recipient_scopes
from connectcore.hub.messages import awaited_panes as awaited_panes
from connectcore.hub.messages import consent_detail as consent_detail
from connectcore.hub.panes import _pane_gone, _pane_observed, _reconcile, _recover, _tick, dead_incarnations
from connectcore.hub.panes import reading_dropped as reading_dropped
from connectcore.hub.restarts import (
    _restart_planned,
    _restart_recovered,
    _restart_respawned,
    _restart_stepped,
)
from connectcore.hub.revocations import _disconnect_all, _revoke, _revoke_pane, _set_grant
from connectcore.hub.revocations import revoke_pane_target as revoke_pane_target
from connectcore.hub.state import (
    ActDecided,
    ActExecuted,
    ActGuarded,
    ActProposed,
    BindSession,
    Decide,
    DisconnectAll,
    Event,
    FederationTick,
    GuardFailed,
    GuardObserved,
    HandleResolution,
    Hub,
    Launch,
    LeftDraft,
    MessagesOff,
    PairingRemoved,
    PaneGone,
    PaneObserved,
    ReceiptArrived,
    Recipient,
    Reconcile,
    Recover,
    RemoteCancelArrived,
    RemoteMessageArrived,
    RemoteSettled,
    RemoteSubmit,
    RestartPlanned,
    RestartRecovered,
    RestartRefused,
    RestartRespawned,
    RestartStepped,
    Revoke,
    SetGrant,
    Step,
    Submit,
    Tick,
    TypingObserved,
    UnknownItem,
    Unresolved,
    restart_of_pane,
)
from connectcore.hub.state import RevokePane as RevokePane
from connectcore.hub.tokens import _bind, _launch


def _revoke_event(hub: Hub, ev: Revoke) -> Step:
    return _revoke(hub, ev.principal_id, ev.now, ev.by)


#: Every event's handler, by the event's type: :func:`step` dispatches through it (as the interpreter
#: does with effects); an event type not in it is refused loudly.
HANDLERS: Mapping[type[Any], Callable[[Hub, Any], Step]] = MappingProxyType(
    {
        Submit: _submit,
        PaneObserved: _pane_observed,
        GuardObserved: _guard,
        GuardFailed: _guard_failed,
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
        RemoteMessageArrived: remote_message_arrived,
        RemoteSubmit: remote_submit,
        ReceiptArrived: receipt_arrived,
        RemoteSettled: remote_settled,
        RemoteCancelArrived: remote_cancel_arrived,
        PairingRemoved: pairing_removed,
        MessagesOff: messages_off,
        FederationTick: federation_tick,
    }
)


def step(hub: Hub, event: Event) -> Step:
    """Apply one event, then the state-triggered step (:func:`connectcore.hub.messages.attempt_armed`:
    every armed pane that can attempt takes its next consented message), as h11 runs its state fixpoint
    after every event: no handler starts a guard itself; then the final receipts of the remote
    senders' messages the step ended (:func:`connectcore.hub.federation.finals_receipted`). Pure: the
    same hub and event always give the same hub and effects."""
    handler = HANDLERS.get(type(event))
    if handler is None:
        raise ConnectError(f"unknown event {type(event).__name__}: no handler in hub.HANDLERS")
    hub, effects = handler(hub, event)
    hub, more = attempt_armed(hub, event.now)
    hub, receipts = finals_receipted(hub, effects + more, event.now)
    return hub, effects + more + receipts + finals_audited(effects + more, event.now)


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
    "GuardFailed",
    "GuardObserved",
    "guard_reading_counts",
    "HANDLERS",
    "HandleResolution",
    "Hub",
    "Launch",
    "LeftDraft",
    "MessagesOff",
    "PairingRemoved",
    "PaneGone",
    "PaneObserved",
    "PaneView",
    "Recipient",
    "Reconcile",
    "Recover",
    "FederationTick",
    "ReceiptArrived",
    "RemoteCancelArrived",
    "RemoteMessageArrived",
    "RemoteSettled",
    "RemoteSubmit",
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
    "cancel_panes",
    "cancels_unconfirmed",
    "dead_incarnations",
    "last_received",
    "message_for",
    "messages_off_owed",
    "OwedStep",
    "pairing_step_owed",
    "InFlight",
    "in_flight",
    "pair_approved",
    "pair_sent_within",
    "pairing_panes",
    "panes_to_lock",
    "reading_dropped",
    "removal_owed",
    "restart_of_pane",
    "restore",
    "sent_within",
    "step",
]
