"""What the daemon remembers of panes across its restarts: which launcher started each incarnation,
the agent session last known in each pane, and the harness release each incarnation runs."""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable
from dataclasses import dataclass

from connectd.store.connection import Connection


@dataclass(frozen=True)
class LaunchRow:
    """Which launcher started which pane incarnation (for restart-to-connect and restore)."""

    pane_id: str
    incarnation: str
    launcher: str
    harness: str
    session_id: str | None
    cwd: str
    argv: tuple[str, ...]
    started_at: float


@dataclass(frozen=True)
class BindingRow:
    """The last agent session known in a pane (for restore after a lost tmux server)."""

    pane_id: str
    harness: str
    session_id: str
    cwd: str | None
    updated_at: float


class PaneRecords(Connection):
    def record_launch(
        self, pane_id: str, incarnation: str, *, launcher: str, harness: str, session_id: str | None,
        cwd: str, argv: Iterable[str], started_at: float,
    ) -> None:
        """Which launcher started this pane incarnation (argv only: the token is never in it)."""
        with self._tx() as db:
            db.execute(
                "INSERT OR REPLACE INTO launches (pane_id, incarnation, launcher, harness, session_id, cwd,"
                " argv, started_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (pane_id, incarnation, launcher, harness, session_id, cwd, json.dumps(list(argv)), started_at),
            )

    def launch_for(self, pane_id: str, incarnation: str) -> LaunchRow | None:
        rows = self._rows(
            "SELECT pane_id, incarnation, launcher, harness, session_id, cwd, argv, started_at FROM launches"
            " WHERE pane_id = ? AND incarnation = ?",
            (pane_id, incarnation),
        )
        if not rows:
            return None
        pane, inc, launcher, harness, session_id, cwd, argv, started_at = rows[0]
        return LaunchRow(pane, inc, launcher, harness, session_id, cwd, tuple(json.loads(argv)), started_at)

    def record_binding(
        self, pane_id: str, *, harness: str, session_id: str, cwd: str | None, updated_at: float
    ) -> None:
        """The agent session last known in ``pane_id`` (replaces the pane's earlier binding)."""
        with self._tx() as db:
            db.execute(
                "INSERT OR REPLACE INTO bindings (pane_id, harness, session_id, cwd, updated_at)"
                " VALUES (?, ?, ?, ?, ?)",
                (pane_id, harness, session_id, cwd, updated_at),
            )

    def bindings(self) -> list[BindingRow]:
        rows = self._rows("SELECT pane_id, harness, session_id, cwd, updated_at FROM bindings ORDER BY pane_id")
        return [BindingRow(*row) for row in rows]

    def record_release(self, incarnation: str, *, harness: str, release: str, learned_at: float) -> None:
        """The harness release an incarnation runs, once learned: it cannot change while the process
        lives, so a daemon restart keeps it (a banner that scrolled away is not needed again)."""
        with self._tx() as db:
            db.execute(
                "INSERT OR REPLACE INTO releases (incarnation, harness, release, learned_at) VALUES (?, ?, ?, ?)",
                (incarnation, harness, release, learned_at),
            )

    def releases(self, incarnations: Collection[str]) -> dict[str, tuple[str, str]]:
        """The learned (harness, release) of each of these incarnations that has one."""
        found: dict[str, tuple[str, str]] = {}
        for incarnation in incarnations:
            rows = self._rows("SELECT harness, release FROM releases WHERE incarnation = ?", (incarnation,))
            if rows:
                found[incarnation] = (rows[0][0], rows[0][1])
        return found

    def forget_releases(self, incarnations: Collection[str]) -> None:
        """Drop the releases of incarnations that ended."""
        with self._tx() as db:
            db.executemany("DELETE FROM releases WHERE incarnation = ?", [(i,) for i in incarnations])
