"""Consent: the cards the person answers (Needs you) and the pairs an approval opened.

Written from the core's ``Persist`` effects (kinds ``card``, ``pairs``).
"""

from __future__ import annotations

from connectcore.consent import Card, CardState
from connectcore.effects import Persist
from connectd.store import codec
from connectd.store.connection import Connection, StoreError, key_of, record_of


class CardRecords(Connection):
    def _put_card(self, p: Persist) -> None:
        if p.record is None:
            self._delete("cards", "id = ?", key_of(p, 1))
            return
        c = record_of(p, Card, (getattr(p.record, "id", None),))
        self._upsert(
            "cards",
            id=c.id, message_sender=c.message[0], message_id=c.message[1], recipient_pane=c.recipient_pane,
            recipient_incarnation=c.recipient_incarnation, state=c.state.value, created_at=c.created_at,
            expires_at=c.expires_at, body=codec.dumps(c),
        )

    def _put_pairs(self, p: Persist) -> None:
        if p.key != ():
            raise StoreError(f"pairs key must be (), got {p.key!r}")
        try:
            rows = [tuple(pair) for pair in (p.record or ())]
        except TypeError:
            rows = [()]
        if not all(len(row) == 2 and all(isinstance(part, str) for part in row) for row in rows):
            raise StoreError(f"pairs record must be (sender principal, recipient incarnation) pairs, got {p.record!r}")
        self._db.execute("DELETE FROM pairs")
        self._db.executemany("INSERT INTO pairs (sender, incarnation) VALUES (?, ?)", rows)

    def cards(self, *, state: CardState | None = None, limit: int = 200) -> list[Card]:
        """Cards, newest first (``state=CardState.PENDING``: what Needs you shows)."""
        sql, args = "SELECT body FROM cards", []
        if state is not None:
            sql, args = sql + " WHERE state = ?", [state.value]
        rows = self._rows(sql + " ORDER BY created_at DESC, rowid DESC LIMIT ?", (*args, max(0, limit)))
        return [codec.loads(Card, b) for (b,) in rows]
