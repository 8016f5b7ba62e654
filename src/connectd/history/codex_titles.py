"""Codex's thread titles in the history index, from ``<codex root>/session_index.jsonl``.

The file is read into the ``codex_titles`` table from where the last pass stopped while it only grew
(same inode), whole otherwise. Its size, mtime, inode and offset are kept in ``meta`` (key
``codex_index``).
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from pathlib import Path
from typing import Any

from connectcore.history import Harness
from connectd.history.parsers import Skip, SkipReason, read_codex_titles
from connectd.history.report import IndexReport
from connectd.history.schema import Key

INDEX_FILE = "session_index.jsonl"


def codex_index_stale(db: sqlite3.Connection, lock: threading.RLock, codex_root: Path) -> bool:
    """Whether Codex's index file changed since it was last read (False when there is none)."""
    try:
        st = os.stat(codex_root / INDEX_FILE)
    except OSError:
        return False
    with lock:
        prev = _last_read(db)
    return not _as_read(prev, st)


def update_codex_titles(db: sqlite3.Connection, codex_root: Path, report: IndexReport) -> set[Key]:
    """Read what changed in Codex's index file into ``codex_titles``; the sessions whose title changed."""
    path = codex_root / INDEX_FILE
    prev = _last_read(db)
    try:
        st = os.stat(path)
    except OSError:
        return set()
    if _as_read(prev, st):
        return set()
    offset = 0
    if prev and prev["inode"] == st.st_ino and st.st_size >= prev["offset"]:
        offset = prev["offset"]
    try:
        titles, next_offset, skips = read_codex_titles(str(path), offset)
    except OSError:
        report.skips.append(Skip(str(path), SkipReason.UNREADABLE))
        return set()
    report.skips.extend(skips)
    changed: set[Key] = set()
    if offset == 0:
        changed |= {(Harness.CODEX, r[0]) for r in db.execute("SELECT session_id FROM codex_titles")}
        db.execute("DELETE FROM codex_titles")
    for sid, (name, updated) in titles.items():
        db.execute(
            "INSERT INTO codex_titles(session_id, title, updated_at) VALUES (?,?,?)"
            " ON CONFLICT(session_id) DO UPDATE SET title=excluded.title, updated_at=excluded.updated_at",
            (sid, name, updated),
        )
        changed.add((Harness.CODEX, sid))
    stamp = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "inode": st.st_ino, "offset": next_offset}
    db.execute(
        "INSERT INTO meta(key, value) VALUES ('codex_index', ?) ON CONFLICT(key) DO UPDATE SET value=excluded.value",
        (json.dumps(stamp),),
    )
    return changed


def _last_read(db: sqlite3.Connection) -> dict[str, Any] | None:
    row = db.execute("SELECT value FROM meta WHERE key='codex_index'").fetchone()
    return json.loads(row[0]) if row else None


def _as_read(prev: dict[str, Any] | None, st: os.stat_result) -> bool:
    """The file is as it was when last read (size, mtime, inode)."""
    return bool(
        prev and prev["size"] == st.st_size and prev["mtime_ns"] == st.st_mtime_ns and prev["inode"] == st.st_ino
    )
