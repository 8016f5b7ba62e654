"""How many MCP sessions a caller may hold open (issue 11, item 4).

Rules:

- A connected principal holds at most :data:`PER_PRINCIPAL` open sessions (a harness needs one, a
  restart or a reconnect briefly two); all principals together at most :data:`TOTAL`.
- A revoked token (its principal is known but no longer connected) may hold at most
  :data:`REVOKED_PER_PRINCIPAL`, so its calls still answer "not connected", as the specification
  asks, and it cannot fill the daemon's memory.
- An unknown token holds none (the transport answers 401 before any session exists).
- A refused opening is audited once per principal until that principal opens a session again, not
  once per request: a loop of refused reconnects writes one record.

Pure: the caller counts the open sessions.
"""

from __future__ import annotations

from dataclasses import dataclass

PER_PRINCIPAL = 8
REVOKED_PER_PRINCIPAL = 1
TOTAL = 256


@dataclass(frozen=True)
class Refusal:
    reason: str  # "unknown_token", "too_many_sessions", "revoked_sessions", "daemon_full"
    message: str


def admit(*, known: bool, connected: bool, held: int, total: int) -> Refusal | None:
    """May a caller open one more session? ``held``: its open sessions; ``total``: everyone's."""
    if not known:
        return Refusal("unknown_token", "this token was never issued by connect")
    if total >= TOTAL:
        return Refusal("daemon_full", f"the daemon holds {total} MCP sessions, its most; close one first")
    if not connected and held >= REVOKED_PER_PRINCIPAL:
        return Refusal(
            "revoked_sessions",
            f"this agent is not connected; it may keep {REVOKED_PER_PRINCIPAL} session to be told so",
        )
    if held >= PER_PRINCIPAL:
        return Refusal("too_many_sessions", f"this agent holds {held} MCP sessions, its most; close one first")
    return None


def audit_refusal(refused_before: frozenset[str], principal: str) -> tuple[frozenset[str], bool]:
    """Record a refusal of ``principal``: the new set and whether this one is audited."""
    if principal in refused_before:
        return refused_before, False
    return refused_before | {principal}, True


def admitted(refused_before: frozenset[str], principal: str) -> frozenset[str]:
    """A session opened: the principal's next refusal is audited again."""
    return refused_before - {principal}
