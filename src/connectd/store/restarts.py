"""Restart-to-connect records (written from the core's ``Persist`` effects, kind ``restart``); the
open ones are recovered at start."""

from __future__ import annotations

from connectcore.effects import Persist
from connectcore.restart import FINAL as RESTART_FINAL
from connectcore.restart import RestartRecord
from connectd.store import codec
from connectd.store.connection import Connection, key_of, record_of

_CLOSED_STEPS = tuple(sorted(s.value for s in RESTART_FINAL))


class RestartRecords(Connection):
    def _put_restart(self, p: Persist) -> None:
        if p.record is None:
            self._delete("restarts", "restart_id = ?", key_of(p, 1))
            return
        r = record_of(p, RestartRecord, (getattr(p.record, "restart_id", None),))
        self._upsert(
            "restarts",
            restart_id=r.restart_id, pane_id=r.pane_id, incarnation=r.incarnation, step=r.step.value,
            outcome=None if r.outcome is None else r.outcome.value, updated_at=r.updated_at,
            body=codec.dumps(r),
        )

    def open_restarts(self) -> list[RestartRecord]:
        """Restart records not closed: feed each a ``restart.Recover`` at start."""
        marks = ", ".join("?" for _ in _CLOSED_STEPS)
        rows = self._rows(f"SELECT body FROM restarts WHERE step NOT IN ({marks}) ORDER BY updated_at", _CLOSED_STEPS)
        return [codec.loads(RestartRecord, b) for (b,) in rows]
