"""The audit log: one row per ``Audit`` effect, read in pages; and how far each export destination got."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from connectcore.effects import Audit
from connectd.store.connection import Connection


@dataclass(frozen=True)
class AuditRow:
    id: int
    at: float
    actor: str
    action: str
    outcome: str
    scope: str | None
    target: str | None
    message_id: str | None
    detail: str


class AuditLog(Connection):
    def _put_audit(self, effect: Audit) -> None:
        self._db.execute(
            "INSERT INTO audit (at, actor, action, scope, target, outcome, message_id, detail)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (effect.at, effect.actor, effect.action, effect.scope, effect.target, effect.outcome,
             effect.message_id, effect.detail),
        )

    def set_export_cursor(self, name: str, audit_id: int, *, updated_at: float) -> None:
        """Every audit record with id <= ``audit_id`` reached the destination ``name`` (never moves back)."""
        with self._tx() as db:
            db.execute(
                "INSERT INTO export_cursors (name, audit_id, updated_at) VALUES (?, ?, ?)"
                " ON CONFLICT(name) DO UPDATE SET audit_id = max(audit_id, excluded.audit_id),"
                " updated_at = excluded.updated_at",
                (name, audit_id, updated_at),
            )

    def export_cursor(self, name: str) -> int:
        """The last audit id the destination ``name`` accepted (0: none yet)."""
        rows = self._rows("SELECT audit_id FROM export_cursors WHERE name = ?", (name,))
        return int(rows[0][0]) if rows else 0

    def audit(
        self, *, actor: str | None = None, pane: str | None = None, outcome: str | None = None,
        since: float | None = None, until: float | None = None, after_id: int = 0,
        before_id: int | None = None, limit: int = 100, newest_first: bool = False,
    ) -> list[AuditRow]:
        """Audit records with ``after_id`` < id < ``before_id``: the oldest ``limit`` of them, oldest
        first (page on: ``after_id`` = the last row's id), or with ``newest_first`` the newest ``limit``,
        newest first (page on: ``before_id`` = the last row's id).

        ``pane`` matches a target that is the pane (``%3``), one of its incarnations (``%3@...``) or an
        actor named by it (``agent:claude:pane:%3:...``); ``actor`` matches that actor exactly, or,
        ending in ``:*``, every actor under it (``owner:page:*``: every page session); ``since`` <= at < ``until``.
        """
        where: list[str] = ["id > ?"]
        args: list[Any] = [after_id]
        if before_id is not None:
            where.append("id < ?")
            args.append(before_id)
        if actor is not None:
            if actor.endswith(":*"):
                where.append("substr(actor, 1, length(?)) = ?")
                args += [actor[:-1], actor[:-1]]
            else:
                where.append("actor = ?")
                args.append(actor)
        if pane is not None:
            where.append("(target = ? OR substr(target, 1, length(?) + 1) = ? || '@' OR instr(target, ':pane:' || ? || ':') > 0)")
            args += [pane, pane, pane, pane]
        if outcome is not None:
            where.append("outcome = ?")
            args.append(outcome)
        if since is not None:
            where.append("at >= ?")
            args.append(since)
        if until is not None:
            where.append("at < ?")
            args.append(until)
        sql = (
            "SELECT id, at, actor, action, outcome, scope, target, message_id, detail FROM audit"
            f" WHERE {' AND '.join(where)} ORDER BY id {'DESC' if newest_first else 'ASC'} LIMIT ?"
        )
        return [AuditRow(*row) for row in self._rows(sql, (*args, max(0, limit)))]
