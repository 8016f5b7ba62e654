"""The gate every agent call passes (:func:`authorize`): a live token and the scope, audited either
way; a refusal (:class:`CallRefused`) names the agent a known token belongs to, else ``agent:unknown``.
"""

from __future__ import annotations

from connectcore import grants
from connectcore._machine import ConnectError
from connectcore.effects import (
    Audit,
)
from connectcore.grants import GrantBook, Principal, Scope
from connectcore.hub.state import Hub


class CallRefused(ConnectError):
    """A call refused at the gate; ``audit`` is the record the daemon must write."""

    def __init__(self, reason: str, message: str, audit: Audit) -> None:
        super().__init__(message)
        self.reason = reason
        self.audit = audit


def authorize(
    hub: Hub, *, token_hash: str, scope: Scope | None, action: str, now: float, target: str = ""
) -> tuple[Principal, Audit]:
    """The gate every agent call passes: a live token and the scope (``None``: a connected token is
    enough), audited either way. A refusal names the agent a known token belongs to (revoked or
    ended: its calls are still its own), else ``agent:unknown``."""
    scope_name = scope.value if scope is not None else None
    try:
        principal = grants.authenticate(hub.book, token_hash)
    except grants.NotConnected as exc:
        raise CallRefused(
            exc.reason,
            str(exc),
            Audit(
                actor=_token_actor(hub.book, token_hash),
                action=action,
                outcome="refused",
                scope=scope_name,
                target=target,
                detail=exc.reason,
                at=now,
            ),
        ) from exc
    actor = grants.actor_name(principal)
    try:
        if scope is not None:
            grants.require(hub.book, principal, scope)
    except grants.ScopeDenied as exc:
        raise CallRefused(
            exc.reason,
            str(exc),
            Audit(
                actor=actor,
                action=action,
                outcome="refused",
                scope=scope_name,
                target=target,
                detail=exc.reason,
                at=now,
            ),
        ) from exc
    return principal, Audit(
        actor=actor, action=action, outcome="allowed", scope=scope_name, target=target, at=now
    )


def _token_actor(book: GrantBook, token_hash: str) -> str:
    """The audit actor of a token the daemon issued, whatever its state (the agent it joined)."""
    record = book.tokens.get(token_hash)
    if record is None:
        return "agent:unknown"
    return grants.actor_name(book.principals[grants.canonical(book, record.principal)])
