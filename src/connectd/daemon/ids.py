"""Fresh ids and tokens, and the one error type the daemon's calls refuse with.

The core invents nothing: every id and token it holds arrives from here as a value. Tokens reach the
core and the store only as hashes. A simulation passes its own seeded :class:`Ids`.
"""

from __future__ import annotations

import hashlib
import secrets


def hash_token(token: str) -> str:
    """Tokens never reach the core or the store in plain text."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


class Ids:
    """Where fresh ids and tokens come from (``secrets`` in the daemon)."""

    def new_token(self) -> str:
        return "ct_" + secrets.token_urlsafe(32)

    def new_id(self, prefix: str) -> str:
        return f"{prefix}-{secrets.token_hex(6)}"

    def new_uuid(self) -> str:
        import uuid

        return str(uuid.uuid4())


class EngineError(Exception):
    """A request the daemon refuses, with a reason code, a clear message and, when something can be
    done about it, the fix (:class:`connectcore.advice.Advice`)."""

    def __init__(self, reason: str, message: str, fix: str = "") -> None:
        super().__init__(message)
        self.reason = reason
        self.fix = fix
