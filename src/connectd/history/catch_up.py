"""An incremental pass over the transcripts (``update()`` without ``full``; issue 24: was
``HistoryIndex._catch_up`` and its helpers).

A pass plans what to read (:meth:`CatchUp.plan`: a scan of both roots, or the watcher's changed
paths), reads it in reader processes and writes each full batch of files in its own transaction
(:meth:`CatchUp.read_in_batches`), then writes the last batch, the files that are gone, Codex's titles
and the sessions they change in one transaction (:meth:`CatchUp.finish`). A transcript whose size,
mtime and inode are unchanged is not opened; one that grew is read from where the last pass stopped,
its parser's state restored from the ``files`` table.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from connectcore.history import Harness
from connectd.history.codex_titles import codex_index_stale, update_codex_titles
from connectd.history.discover import discover
from connectd.history.entries import rebuild_entries
from connectd.history.parsers import Skip, SkipReason
from connectd.history.postings import Postings
from connectd.history.reader import FileResult, Job, Prior, Readers
from connectd.history.report import IndexReport
from connectd.history.repos import RepoResolver
from connectd.history.schema import UPSERT_FILE, Key, file_row

Progress = Callable[[int, int], None]


class FileRow(NamedTuple):
    """A ``files`` row without the parser state (a plain tuple: 10,000 of them load per catch-up)."""

    path: str
    harness: Harness
    session_id: str | None
    size: int
    mtime_ns: int
    inode: int
    offset: int
    head: str
    head_len: int
    missing: int


@dataclass(frozen=True)
class Pass:
    """An incremental pass's plan: how many transcripts it covers, the index's rows of them, those to
    read (with their position, for progress) and the indexed ones that are gone."""

    total: int
    known: dict[str, FileRow]
    read: list[tuple[int, Harness, str]]
    gone: list[FileRow]


class CatchUp:
    """One incremental pass over the index whose open connection is ``db`` (held under ``lock`` for
    each statement group; ``tx`` opens a write transaction on it): the transcripts read by ``workers``
    reader processes, ``batch_files`` files per transaction, each line at most ``max_line_bytes``;
    what it did goes into ``report``."""

    def __init__(
        self,
        *,
        db: sqlite3.Connection,
        lock: threading.RLock,
        tx: Callable[[], AbstractContextManager[sqlite3.Connection]],
        max_line_bytes: int,
        batch_files: int,
        report: IndexReport,
        progress: Progress | None,
        workers: int | None,
    ) -> None:
        self._db, self._lock, self._tx = db, lock, tx
        self.max_line_bytes, self.batch_files = max_line_bytes, batch_files
        self.report, self.progress, self.workers = report, progress, workers

    def run(self, claude_root: Path, codex_root: Path, paths: Iterable[tuple[Harness, str]] | None) -> None:
        """An incremental pass: read what changed, write it ``batch_files`` files per transaction."""
        resolver = RepoResolver()
        todo = self.plan(claude_root, codex_root, paths)
        self.report.files_seen = todo.total
        with self._lock:
            post = Postings(self._db)
        batch, dirty = self.read_in_batches(todo, resolver, post)
        self.finish(codex_root, todo, batch, dirty, resolver, post)
        if self.progress is not None:
            self.progress(todo.total, todo.total)

    def plan(self, claude_root: Path, codex_root: Path, paths: Iterable[tuple[Harness, str]] | None) -> Pass:
        """What an incremental pass reads: a scan of both roots, or the watcher's changed ``paths``."""
        if paths is None:
            known = self._known()
            found, todo, gone = _scan(Path(claude_root), Path(codex_root), known)
        else:
            found = list(dict.fromkeys(paths))
            known = self._known([p for _, p in found])
            todo, gone = _named(found, known)
        return Pass(len(found), known, todo, gone)

    def read_in_batches(
        self, todo: Pass, resolver: RepoResolver, post: Postings
    ) -> tuple[list[FileResult], set[Key]]:
        """Read the transcripts to read and write every full batch in its own transaction; the last
        (partial) batch and the sessions still to build are left for :meth:`finish`."""
        known = todo.known
        jobs = [
            Job(harness, path, _prior(known.get(path)), self._state(path) if path in known else None, self.max_line_bytes)
            for _, harness, path in todo.read
        ]
        done_at = [done for done, _, _ in todo.read]
        dirty: set[Key] = set()
        batch: list[FileResult] = []
        for i, result in enumerate(Readers(self.workers).read(jobs)):
            batch.append(result)
            if len(batch) >= self.batch_files:
                self._write_batch(batch, known, dirty, resolver, post)
                batch = []
                if self.progress is not None:
                    self.progress(done_at[i], todo.total)
        return batch, dirty

    def finish(
        self,
        codex_root: Path,
        todo: Pass,
        batch: list[FileResult],
        dirty: set[Key],
        resolver: RepoResolver,
        post: Postings,
    ) -> None:
        """The last batch, the gone files, Codex's titles and the sessions they change, in one
        transaction (none when nothing changed); then any postings still staged."""
        report = self.report
        if batch or todo.gone or dirty or codex_index_stale(self._db, self._lock, Path(codex_root)):
            with self._tx() as db:
                fresh: dict[str, FileResult] = {}
                if batch:
                    _apply(db, batch, todo.known, dirty, report, fresh)
                dirty |= _mark_missing(db, todo.gone, report)
                dirty |= update_codex_titles(db, Path(codex_root), report)
                rebuild_entries(db, dirty, report, resolver, post, fresh)
                post.flush()
        if post.pending:
            with self._tx():
                post.flush()

    def _write_batch(
        self,
        batch: list[FileResult],
        known: dict[str, FileRow],
        dirty: set[Key],
        resolver: RepoResolver,
        post: Postings,
    ) -> None:
        """A full batch in its own transaction: its files, and the sessions they hold built again."""
        with self._tx() as db:
            keys: set[Key] = set()
            fresh: dict[str, FileResult] = {}
            _apply(db, batch, known, keys, self.report, fresh)
            rebuild_entries(db, keys, self.report, resolver, post, fresh)
            dirty -= keys
            if post.due():
                post.flush()

    def _known(self, paths: Sequence[str] | None = None) -> dict[str, FileRow]:
        """The index's rows of these transcript paths (all of them when ``paths`` is None)."""
        with self._lock:
            if paths is None:
                return {row.path: row for row in self._file_rows()}
            known: dict[str, FileRow] = {}
            for p in paths:
                known.update((row.path, row) for row in self._file_rows("WHERE path=?", (p,)))
            return known

    def _file_rows(self, where: str = "", args: Sequence[Any] = ()) -> list[FileRow]:
        # ``harness`` stays the stored string (a StrEnum value compares and hashes equal to it).
        rows = self._db.execute(
            "SELECT path, harness, session_id, size, mtime_ns, inode, offset, head, head_len, missing"
            f" FROM files {where}",
            args,
        ).fetchall()
        return [FileRow._make(r) for r in rows]

    def _state(self, path: str) -> bytes | None:
        with self._lock:
            row = self._db.execute("SELECT state FROM files WHERE path=?", (path,)).fetchone()
        return bytes(row[0]) if row is not None else None


def _unchanged(row: FileRow | None, path: str) -> bool:
    """The file is as the index last read it (size, mtime, inode): not opened again."""
    if row is None or row.missing:
        return False
    try:
        st = os.stat(path)
    except OSError:
        return False
    return (row.size, row.mtime_ns, row.inode) == (st.st_size, st.st_mtime_ns, st.st_ino)


def _scan(
    claude_root: Path, codex_root: Path, known: Mapping[str, FileRow]
) -> tuple[list[tuple[Harness, str]], list[tuple[int, Harness, str]], list[FileRow]]:
    """A scan of both roots: every transcript found, those to read (with their position, for
    progress), and the rows whose file is gone."""
    found = list(discover(claude_root, codex_root))
    seen = {path for _, path in found}
    todo = [(done, harness, path) for done, (harness, path) in enumerate(found, 1) if not _unchanged(known.get(path), path)]
    gone = [row for p, row in known.items() if p not in seen and not row.missing]
    return found, todo, gone


def _named(
    wanted: Sequence[tuple[Harness, str]], known: Mapping[str, FileRow]
) -> tuple[list[tuple[int, Harness, str]], list[FileRow]]:
    """The watcher's changed paths: those that exist are read, the indexed ones that do not are gone."""
    todo: list[tuple[int, Harness, str]] = []
    gone: list[FileRow] = []
    for done, (harness, path) in enumerate(wanted, 1):
        if os.path.lexists(path):
            todo.append((done, harness, path))
        elif (row := known.get(path)) is not None and not row.missing:
            gone.append(row)
    return todo, gone


def _mark_missing(db: sqlite3.Connection, gone: Sequence[FileRow], report: IndexReport) -> set[Key]:
    """Mark the gone files missing; the sessions they held, to rebuild."""
    dirty: set[Key] = set()
    for row in gone:
        db.execute("UPDATE files SET missing=1 WHERE path=?", (row.path,))
        report.files_missing += 1
        report.skips.append(Skip(row.path, SkipReason.VANISHED))
        if row.session_id:
            dirty.add((Harness(row.harness), row.session_id))
    return dirty


def _apply(
    db: sqlite3.Connection,
    results: Iterable[FileResult],
    known: dict[str, FileRow],
    dirty: set[Key],
    report: IndexReport,
    fresh: dict[str, FileResult],
) -> None:
    """Write what the readers found into ``files``; note the sessions whose entries must change."""
    for r in results:
        if r.status == "unchanged":
            continue
        report.skips.extend(r.skips)
        if r.status == "gone":
            _mark_gone(db, known.get(r.path), dirty)
        elif r.status == "read":
            _record_read(db, r, known, dirty, report, fresh)


def _mark_gone(db: sqlite3.Connection, row: FileRow | None, dirty: set[Key]) -> None:
    """A transcript the reader found gone: its row marked missing, its session to build again."""
    if row is None:
        return
    db.execute("UPDATE files SET missing=1 WHERE path=?", (row.path,))
    if row.session_id:
        dirty.add((Harness(row.harness), row.session_id))


def _record_read(
    db: sqlite3.Connection,
    r: FileResult,
    known: dict[str, FileRow],
    dirty: set[Key],
    report: IndexReport,
    fresh: dict[str, FileResult],
) -> None:
    """A transcript read: its ``files`` row written (a resumed read adds to its skip count), the session
    it held before and the one it holds now to build again."""
    path, harness, session_id = r.path, r.harness, r.session_id
    row = known.get(path)
    report.files_read += 1
    report.files_resumed += int(r.resumed)
    report.bytes_read += r.bytes_read
    if row is not None and row.session_id and row.session_id != session_id:
        dirty.add((Harness(row.harness), row.session_id))
    if session_id and r.facts is not None:
        dirty.add((harness, session_id))
        fresh[path] = r
    last_skip = r.skips[-1].reason if r.skips else None
    db.execute(UPSERT_FILE, (*file_row(r, path, harness.value, session_id, last_skip), r.resumed, r.resumed))
    known[path] = FileRow(path, harness, session_id, r.size, r.mtime_ns, r.inode, r.offset, r.head, r.head_len, False)


def _prior(row: FileRow | None) -> Prior | None:
    if row is None:
        return None
    return Prior(
        row.size, row.mtime_ns, row.inode, row.offset, row.head, row.head_len, row.missing, row.session_id
    )
