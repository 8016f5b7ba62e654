"""The history index: a SQLite file (``history.db``) in the data directory, with its own inverted index.

It is derived data: every row comes from a transcript and ``update(full=True)`` rebuilds it (entries
whose transcript is gone are then dropped): into a new file, where the readers hand back ready rows
and every posting is written in one pass in key order, then copied into ``history.db`` in one
transaction once complete (:class:`connectd.history.build.FullBuild`). Other updates are incremental
(:class:`connectd.history.catch_up.CatchUp`): a transcript whose size, mtime and inode are unchanged is not opened; one that grew (same inode, same first bytes) is read from the byte
offset where the last pass stopped, with the parser's state restored from the ``files`` table; any
other change reparses the file. A transcript that disappears keeps its entry, marked
``source_missing`` (and without a resume command). ``update(paths=...)`` reads only the transcripts a
watcher saw change, without scanning the roots; large passes read in worker processes
(:mod:`connectd.history.reader`).

The tables and the SQL are :mod:`connectd.history.schema`, the inverted index's writes
:mod:`connectd.history.postings`, which transcripts there are :mod:`connectd.history.discover`. The
file is created 0600 in a 0700 directory, in WAL mode. Searches score every admitted candidate in SQL
and hand the few that can make the top to ``connectcore.history.rank``.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from connectcore.history import Harness
from connectd.history.build import BUILD_SUFFIX as BUILD_SUFFIX  # re-exported: the tests name the build file
from connectd.history.build import FullBuild, Progress
from connectd.history.catch_up import CatchUp
from connectd.history.entries import delete_entry
from connectd.history.parsers import MAX_LINE_BYTES
from connectd.history.postings import Postings
from connectd.history.queries import IndexQueries
from connectd.history.report import IndexReport as IndexReport  # re-exported: its callers import it from here
from connectd.history.schema import SCHEMA_VERSION, Key, create_schema

DB_NAME = "history.db"
_BATCH_FILES = 500  # transcripts per write, in a full build and an incremental pass

__all__ = ["BUILD_SUFFIX", "DB_NAME", "SCHEMA_VERSION", "HistoryIndex", "IndexError_", "IndexReport", "Progress"]


class IndexError_(Exception):
    """The index file cannot be used (wrong schema version from a newer build, not a database)."""


# ---------------------------------------------------------------------------------------------------
# The store
# ---------------------------------------------------------------------------------------------------


def _ensure_private_dir(path: Path) -> None:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    with contextlib.suppress(OSError):
        if path.stat().st_mode & 0o077:
            os.chmod(path, 0o700)


class HistoryIndex(IndexQueries):
    """One open ``history.db``. Thread-safe: statements hold the connection lock, and one writer pass
    (an update or a removal) runs at a time; reads interleave with a long build between its batches."""

    def __init__(self, data_dir: Path, *, max_line_bytes: int = MAX_LINE_BYTES) -> None:
        self.data_dir = Path(data_dir)
        self.path = self.data_dir / DB_NAME
        self.max_line_bytes = max_line_bytes
        self._lock = threading.RLock()  # the connection: held per statement group / transaction
        self._update_lock = threading.Lock()  # one writer pass at a time (update, remove)
        _ensure_private_dir(self.data_dir)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        os.close(fd)
        os.chmod(self.path, 0o600)
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=30.0)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA busy_timeout=30000")
        self._db.execute("PRAGMA cache_size=-65536")  # 64 MiB: a build rewrites postings pages
        self._init_schema()
        # How often each session's entry was rewritten (or removed) since this index was opened, moved
        # after the write committed: a reader that keeps an entry reads it again when its version moved.
        self._versions: dict[Key, int] = {}

    def version(self, harness: Harness, session_id: str) -> int:
        """The session's entry version (0: not written since the index was opened). No I/O, no lock:
        cheap enough to ask at every poll."""
        return self._versions.get((harness, session_id), 0)

    def _moved(self, keys: Iterable[Key]) -> None:
        for key in keys:
            self._versions[key] = self._versions.get(key, 0) + 1

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> HistoryIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _init_schema(self) -> None:
        with self._lock:
            try:
                row = (
                    self._db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
                    if self._has_table("meta")
                    else None
                )
            except sqlite3.DatabaseError as exc:
                raise IndexError_(f"{self.path} is not a usable SQLite database: {exc}") from exc
            with self._tx() as db:
                # Derived data: an index from another schema version is rebuilt, never migrated.
                create_schema(db, reset=row is not None and row[0] != SCHEMA_VERSION)

    def _has_table(self, name: str) -> bool:
        return (
            self._db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (name,)).fetchone()
            is not None
        )

    # -- update ------------------------------------------------------------------------------------

    def update(
        self,
        claude_root: Path,
        codex_root: Path,
        *,
        full: bool = False,
        progress: Progress | None = None,
        paths: Iterable[tuple[Harness, str]] | None = None,
        workers: int | None = None,
    ) -> IndexReport:
        """Bring the index up to date with the transcripts under the two roots.

        ``full``: rebuild the index from every transcript (``paths`` is then ignored); searches see
        the previous index until the new one is complete.
        ``paths``: only these transcripts changed (the watcher's events): they are read (or marked
        missing) without a scan of the roots; Codex's ``session_index.jsonl`` is checked too.
        ``workers``: reader processes for a large pass (default: one per core).
        """
        t0 = time.monotonic()
        report = IndexReport()
        # Searches interleave with an incremental pass between batches (they see what is written so
        # far) and see the previous index until a full build is complete; only one update or removal
        # runs at a time.
        with self._update_lock:
            if full:
                FullBuild(
                    path=self.path, live=self._db, lock=self._lock, max_line_bytes=self.max_line_bytes,
                    batch_files=_BATCH_FILES, report=report, progress=progress, workers=workers,
                ).run(Path(claude_root), Path(codex_root))
            else:
                CatchUp(
                    db=self._db, lock=self._lock, tx=self._tx, max_line_bytes=self.max_line_bytes,
                    batch_files=_BATCH_FILES, report=report, progress=progress, workers=workers,
                ).run(Path(claude_root), Path(codex_root), paths)
        self._moved(report.changed)
        report.seconds = time.monotonic() - t0
        return report

    def remove(self, harness: Harness, session_ids: Iterable[str], paths: Iterable[str]) -> int:
        """Delete entries and their file rows (expunge). Returns the number of entries removed."""
        removed = 0
        session_ids = list(session_ids)
        with self._update_lock, self._tx() as db:
            post = Postings(db)
            for sid in session_ids:
                removed += delete_entry(db, harness, sid, post)
                db.execute("DELETE FROM files WHERE harness=? AND session_id=?", (harness.value, sid))
                if harness is Harness.CODEX:
                    db.execute("DELETE FROM codex_titles WHERE session_id=?", (sid,))
            for p in paths:
                db.execute("DELETE FROM files WHERE path=?", (p,))
            post.flush()
        self._moved((harness, sid) for sid in session_ids)
        return removed
