"""The owner's credentials: the owner token's hash and the tunnel secret's (never the plain values)."""

from __future__ import annotations

from connectd.store.connection import Connection, check_hash


class OwnerRecord(Connection):
    def set_owner(self, token_hash: str, *, created_at: float, tunnel_secret_hash: str | None = None) -> None:
        """Record the owner token's hash (and the tunnel secret's), replacing any earlier one."""
        check_hash(token_hash, "owner token")
        if tunnel_secret_hash is not None:
            check_hash(tunnel_secret_hash, "tunnel secret")
        with self._tx() as db:
            db.execute(
                "INSERT OR REPLACE INTO owner (id, token_hash, tunnel_secret_hash, created_at) VALUES (1, ?, ?, ?)",
                (token_hash, tunnel_secret_hash, created_at),
            )

    def owner_token_hash(self) -> str | None:
        rows = self._rows("SELECT token_hash FROM owner WHERE id = 1")
        return str(rows[0][0]) if rows else None

    def tunnel_secret_hash(self) -> str | None:
        rows = self._rows("SELECT tunnel_secret_hash FROM owner WHERE id = 1")
        return None if not rows or rows[0][0] is None else str(rows[0][0])
