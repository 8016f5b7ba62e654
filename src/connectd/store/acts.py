"""Control's acts (written from the core's ``Persist`` effects, kind ``act``)."""

from __future__ import annotations

from connectcore.control import ACT_TABLE, Act
from connectcore.effects import Persist
from connectd.store import codec
from connectd.store.connection import Connection, key_of, record_of


class ActRecords(Connection):
    def _put_act(self, p: Persist) -> None:
        if p.record is None:
            self._delete("acts", "id = ?", key_of(p, 1))
            return
        a = record_of(p, Act, (getattr(p.record, "id", None),))
        self._upsert(
            "acts", id=a.id, principal=a.principal, tool=a.tool.value, pane_id=a.pane_id, state=a.state.value,
            created_at=a.created_at, final_at=a.final_at, body=codec.dumps(a),
        )

    def acts(self, *, limit: int = 200, open_only: bool = False) -> list[Act]:
        """Control's acts, newest first (``open_only``: those not final)."""
        finals = [s.value for s in ACT_TABLE.finals]
        where = f"WHERE state NOT IN ({', '.join('?' for _ in finals)})" if open_only else ""
        args = (*finals, limit) if open_only else (limit,)
        rows = self._rows(f"SELECT body FROM acts {where} ORDER BY created_at DESC LIMIT ?", args)
        return [codec.loads(Act, b) for (b,) in rows]
