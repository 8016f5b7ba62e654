"""Messages and their outcomes: one row per admitted message, kept after its hour ends (history).

Written from the core's ``Persist`` effects (kind ``message``); listed and looked up for the agents'
and the person's reads.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from connectcore.delivery import Message
from connectcore.effects import Persist
from connectd.store import codec
from connectd.store.connection import Connection, StoreError, key_of, record_of

MessageCursor = tuple[float, str]
"""A message's place in the list: (created_at, ref)."""


def message_cursor(message: Message) -> MessageCursor:
    return (message.created_at, message.ref)


class MessageRecords(Connection):
    def _put_message(self, p: Persist) -> None:
        if p.record is None:
            self._delete("messages", "sender = ? AND message_id = ?", key_of(p, 2))
            return
        m = record_of(p, Message, (getattr(p.record, "sender", None), getattr(p.record, "id", None)))
        row = self._db.execute("SELECT sender, message_id FROM messages WHERE ref = ?", (m.ref,)).fetchone()
        if row is not None and tuple(row) != m.key:
            raise StoreError(f"message ref {m.ref!r} already names message {tuple(row)!r}, not {m.key!r}")
        clash = self._db.execute(
            "SELECT ref FROM messages WHERE sender = ? AND message_id = ? AND ref != ? AND expires_at > ?",
            (m.sender, m.id, m.ref, m.created_at),
        ).fetchone()
        if clash is not None:
            raise StoreError(f"message id {m.id!r} of {m.sender} is still reserved by message {clash[0]!r}")
        self._upsert(
            "messages",
            ref=m.ref, sender=m.sender, message_id=m.id, recipient_pane=m.recipient_pane,
            recipient_incarnation=m.recipient_incarnation, recipient_principal=m.recipient_principal,
            state=m.state.value, created_at=m.created_at, expires_at=m.expires_at, final_at=m.final_at,
            body=codec.dumps(m),
        )

    def messages(
        self, *, principal: str | Collection[str] | None = None, pane: str | None = None, limit: int = 200,
        before: MessageCursor | None = None, after: MessageCursor | None = None, newest_first: bool = True,
    ) -> list[Message]:
        """Messages sent or received, newest first (``newest_first=False``: oldest first), history included.

        ``principal``: one id or a merge group (``grants.group``), as sender or recipient. ``pane``: sent
        from (a principal launched in it) or addressed to that pane. ``before``/``after``: only messages
        ordered before/after that position (:func:`message_cursor` of a listed message); the order is
        (created_at, ref), which never changes for a message.
        """
        where: list[str] = []
        args: list[Any] = []
        if before is not None:
            where.append("(created_at, ref) < (?, ?)")
            args += [before[0], before[1]]
        if after is not None:
            where.append("(created_at, ref) > (?, ?)")
            args += [after[0], after[1]]
        if principal is not None:
            ids = (principal,) if isinstance(principal, str) else tuple(principal)
            marks = ", ".join("?" for _ in ids)
            where.append(f"(sender IN ({marks}) OR recipient_principal IN ({marks}))")
            args += [*ids, *ids]
        if pane is not None:
            where.append("(recipient_pane = ? OR sender IN (SELECT id FROM principals WHERE pane_id = ?))")
            args += [pane, pane]
        sql = "SELECT body FROM messages" + (f" WHERE {' AND '.join(where)}" if where else "")
        direction = "DESC" if newest_first else "ASC"
        sql += f" ORDER BY created_at {direction}, ref {direction} LIMIT ?"
        return [codec.loads(Message, b) for (b,) in self._rows(sql, (*args, max(0, limit)))]

    def message(self, sender: str, message_id: str) -> Message | None:
        """The newest message with this key (an id may be reused once its hour ended)."""
        rows = self._rows(
            "SELECT body FROM messages WHERE sender = ? AND message_id = ? ORDER BY created_at DESC LIMIT 1",
            (sender, message_id),
        )
        return codec.loads(Message, rows[0][0]) if rows else None
