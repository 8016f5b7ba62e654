"""Every way the person says "no": ``Revoke``, ``RevokePane``, ``SetGrant`` (Off revokes),
``DisconnectAll``. Each cancels the messages and acts of the agents it touches, drops their pairs and
withdraws the connect of their open restarts; on a federated box it also cancels what they sent to other
boxes (the outbox's O7: a cancel published for each row that left, the revocation not waiting for it).
"""

from __future__ import annotations

from dataclasses import replace

from connectcore import grants
from connectcore.delivery import (
    MessageState,
)
from connectcore.effects import (
    Audit,
    Effect,
    Persist,
)
from connectcore.hub import acts as hub_acts
from connectcore.hub.messages import _finalize, cancel_across
from connectcore.hub.restarts import _restarts_of, _withdraw_restarts
from connectcore.hub.state import DisconnectAll, Hub, RevokePane, SetGrant, Step, UnknownItem, restart_of_pane


def _cancel_for(hub: Hub, members: frozenset[str], now: float, reason: str) -> Step:
    """Cancel every open message sent by or addressed to these principals, and drop their pairs."""
    effects: list[Effect] = []
    for message in list(hub.messages.values()):
        if message.is_final or message.state is MessageState.TYPING:
            continue
        if message.sender in members or message.recipient_principal in members:
            hub, more = _finalize(hub, message, "cancel", now, reason)
            effects += more
    incarnations = {t.incarnation for t in hub.book.tokens.values() if t.principal in members}
    pairs = frozenset(p for p in hub.pairs if p[0] not in members and p[1] not in incarnations)
    if pairs != hub.pairs:
        effects.append(Persist("pairs", (), tuple(sorted(pairs))))
    return replace(hub, pairs=pairs), tuple(effects)


def _revoke(hub: Hub, principal_id: str, now: float, by: str) -> Step:
    if principal_id not in hub.book.principals:
        raise UnknownItem("unknown_principal", f"no principal {principal_id}")
    members = grants.group(hub.book, principal_id)
    restarts = _restarts_of(hub, members, frozenset())
    book, effects = grants.revoke(hub.book, now=now, principal_id=principal_id, by=by)
    hub, more = _cancel_for(replace(hub, book=book), members, now, "revoked")
    hub, across = cancel_across(hub, members, now, "the sender was revoked")
    hub, again = _withdraw_restarts(hub, restarts, now, "connect revoked while restarting")
    hub, acts = hub_acts.cancel_by(hub, members, now, "control was revoked")
    return hub, effects + more + across + again + acts


def revoke_pane_target(hub: Hub, pane_id: str, incarnation: str) -> tuple[str | None, str | None]:
    """What a revoke of ``pane_id`` says "no" to: the connected principal of its incarnation, and its
    open restart-to-connect (an agent launched Off holds no principal while it is restarted to connect).
    Neither: :class:`UnknownItem` ``not_connected``. Public: the shell asks it for the panes to lock."""
    principal = grants.principal_at(hub.book, incarnation)
    restart_id = restart_of_pane(hub, pane_id)
    if principal is None and restart_id is None:
        raise UnknownItem("not_connected", f"{pane_id} holds no connected agent and no open restart to connect it")
    return (principal.id if principal is not None else None), restart_id


def _revoke_pane(hub: Hub, ev: RevokePane) -> Step:
    principal_id, restart_id = revoke_pane_target(hub, ev.pane_id, ev.incarnation)
    effects: tuple[Effect, ...] = ()
    if principal_id is not None:
        hub, effects = _revoke(hub, principal_id, ev.now, ev.by)
    if restart_id is not None:
        hub, more = _withdraw_restarts(hub, (restart_id,), ev.now, "connect revoked while restarting")
        effects += more
    return hub, effects


def _set_grant(hub: Hub, ev: SetGrant) -> Step:
    hub, withdrawn = _set_grant_only(hub, ev)
    members = frozenset(m for p in grants.principals_of_session(hub.book, ev.session) for m in grants.group(hub.book, p))
    restarts = _restarts_of(hub, members, frozenset({ev.session}))
    hub, more = _withdraw_restarts(hub, restarts, ev.now, "the grant changed while restarting")
    return hub, withdrawn + more


def _set_grant_only(hub: Hub, ev: SetGrant) -> Step:
    if not ev.scopes:
        effects: tuple[Effect, ...] = ()
        principals = grants.principals_of_session(hub.book, ev.session)
        book, more = grants.set_grant(hub.book, now=ev.now, session=ev.session, scopes=frozenset(), by=ev.by)
        hub = replace(hub, book=book)
        effects += more
        for principal_id in principals:
            hub, more = _revoke(hub, principal_id, ev.now, ev.by)
            effects += more
        return hub, effects
    book, effects = grants.set_grant(hub.book, now=ev.now, session=ev.session, scopes=ev.scopes, by=ev.by)
    return replace(hub, book=book), effects


def _disconnect_all(hub: Hub, ev: DisconnectAll) -> Step:
    effects: tuple[Effect, ...] = ()
    for principal_id in grants.all_connected(hub.book):
        hub, more = _revoke(hub, principal_id, ev.now, ev.by)
        effects += more
    hub, more = _withdraw_restarts(hub, sorted(hub.restarts), ev.now, "disconnect all while restarting")
    effects += more
    # control stays connected (it is not a peer grant), but nothing it asked for and was not yet run runs
    hub, more = hub_acts.cancel(hub, list(hub.acts.values()), ev.now, "disconnect all")
    effects += more
    return hub, effects + (Audit(actor=ev.by, action="disconnect_all", outcome="done", at=ev.now),)
