"""The history index: a SQLite file (``history.db``) in the data directory, with its own inverted index.

It is derived data: every row comes from a transcript and ``update(full=True)`` rebuilds it (entries
whose transcript is gone are then dropped): into a new file, where the readers hand back ready rows
and every posting is written in one pass in key order, then copied into ``history.db`` in one
transaction once complete (:meth:`HistoryIndex._build`). Other updates are incremental: a transcript whose size, mtime and
inode are unchanged is not opened; one that grew (same inode, same first bytes) is read from the byte
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
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from connectcore.history import (
    Harness,
)
from connectd.history.codex_titles import codex_index_stale, update_codex_titles
from connectd.history.discover import discover
from connectd.history.entries import delete_entry, rebuild_entries
from connectd.history.parsers import (
    MAX_LINE_BYTES,
    Skip,
    SkipReason,
)
from connectd.history.postings import Postings
from connectd.history.queries import IndexQueries
from connectd.history.reader import FileResult, Job, Prior, Readers, RowContext
from connectd.history.report import IndexReport as IndexReport  # re-exported: its callers import it from here
from connectd.history.repos import RepoResolver
from connectd.history.schema import (
    BULK_ENTRY,
    BULK_FILE,
    BULK_POSTINGS,
    SCHEMA_VERSION,
    UPSERT_FILE,
    Key,
    create_schema,
    remove_db,
)

DB_NAME = "history.db"
_BATCH_FILES = 500
#: A full build is written here, then copied into ``DB_NAME`` in one transaction.
BUILD_SUFFIX = ".build"

Progress = Callable[[int, int], None]


class IndexError_(Exception):
    """The index file cannot be used (wrong schema version from a newer build, not a database)."""


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
                self._build(Path(claude_root), Path(codex_root), report, progress, workers)
            else:
                self._catch_up(Path(claude_root), Path(codex_root), report, progress, paths, workers)
        self._moved(report.changed)
        report.seconds = time.monotonic() - t0
        return report

    def _catch_up(
        self,
        claude_root: Path,
        codex_root: Path,
        report: IndexReport,
        progress: Progress | None,
        paths: Iterable[tuple[Harness, str]] | None,
        workers: int | None,
    ) -> None:
        """An incremental pass: read what changed, write it 500 files per transaction."""
        resolver = RepoResolver()
        todo = self._plan(claude_root, codex_root, paths)
        report.files_seen = todo.total
        with self._lock:
            post = Postings(self._db)
        batch, dirty = self._read_in_batches(todo, report, resolver, post, progress, workers)
        self._finish_pass(codex_root, todo, batch, dirty, report, resolver, post)
        if progress is not None:
            progress(todo.total, todo.total)

    def _plan(
        self, claude_root: Path, codex_root: Path, paths: Iterable[tuple[Harness, str]] | None
    ) -> _Pass:
        """What an incremental pass reads: a scan of both roots, or the watcher's changed ``paths``."""
        if paths is None:
            known = self._known()
            found, todo, gone = self._scan(Path(claude_root), Path(codex_root), known)
        else:
            found = list(dict.fromkeys(paths))
            known = self._known([p for _, p in found])
            todo, gone = self._named(found, known)
        return _Pass(len(found), known, todo, gone)

    def _read_in_batches(
        self,
        todo: _Pass,
        report: IndexReport,
        resolver: RepoResolver,
        post: Postings,
        progress: Progress | None,
        workers: int | None,
    ) -> tuple[list[FileResult], set[Key]]:
        """Read the transcripts to read and write every full batch in its own transaction; the last
        (partial) batch and the sessions still to build are left for :meth:`_finish_pass`."""
        known = todo.known
        jobs = [
            Job(harness, path, _prior(known.get(path)), self._state(path) if path in known else None, self.max_line_bytes)
            for _, harness, path in todo.read
        ]
        done_at = [done for done, _, _ in todo.read]
        dirty: set[Key] = set()
        batch: list[FileResult] = []
        for i, result in enumerate(Readers(workers).read(jobs)):
            batch.append(result)
            if len(batch) >= _BATCH_FILES:
                self._update_batch(batch, known, dirty, report, resolver, post)
                batch = []
                if progress is not None:
                    progress(done_at[i], todo.total)
        return batch, dirty

    def _finish_pass(
        self,
        codex_root: Path,
        todo: _Pass,
        batch: list[FileResult],
        dirty: set[Key],
        report: IndexReport,
        resolver: RepoResolver,
        post: Postings,
    ) -> None:
        """The last batch, the gone files, Codex's titles and the sessions they change, in one
        transaction (none when nothing changed); then any postings still staged."""
        if batch or todo.gone or dirty or codex_index_stale(self._db, self._lock, Path(codex_root)):
            with self._tx() as db:
                fresh: dict[str, FileResult] = {}
                if batch:
                    self._apply(db, batch, todo.known, dirty, report, fresh)
                dirty |= self._mark_missing(db, todo.gone, report)
                dirty |= update_codex_titles(db, Path(codex_root), report)
                rebuild_entries(db, dirty, report, resolver, post, fresh)
                post.flush()
        if post.pending:
            with self._tx():
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

    @staticmethod
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
        self, claude_root: Path, codex_root: Path, known: Mapping[str, FileRow]
    ) -> tuple[list[tuple[Harness, str]], list[tuple[int, Harness, str]], list[FileRow]]:
        """A scan of both roots: every transcript found, those to read (with their position, for
        progress), and the rows whose file is gone."""
        found = list(discover(claude_root, codex_root))
        seen = {path for _, path in found}
        todo = [(done, harness, path) for done, (harness, path) in enumerate(found, 1) if not self._unchanged(known.get(path), path)]
        gone = [row for p, row in known.items() if p not in seen and not row.missing]
        return found, todo, gone

    @staticmethod
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

    @staticmethod
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

    def _build(
        self,
        claude_root: Path,
        codex_root: Path,
        report: IndexReport,
        progress: Progress | None,
        workers: int | None,
    ) -> None:
        """A full build: every transcript read whole into a new file, which then replaces the index.

        The new file is written without a journal or syncs (``history.db.build``, 0600): if the build
        stops midway, for any reason, the index is untouched and the next full build starts the file
        again. When it is complete its pages are copied into ``history.db`` by SQLite's backup API, in
        one write transaction: every connection, in this process or another, sees the old index or
        the new one, and a crash during the copy leaves the old one (the transaction never committed).
        Renaming the file into place instead would leave a connection that another process holds
        open (the daemon's, while the CLI rebuilds) on the unlinked file, and pair its WAL with the
        new one, which SQLite names as a way to corrupt a database.
        """
        build = self.path.with_name(self.path.name + BUILD_SUFFIX)
        remove_db(build)
        os.close(os.open(build, os.O_RDWR | os.O_CREAT, 0o600))
        try:
            db = sqlite3.connect(build, isolation_level=None)
            try:
                self._fill(db, claude_root, codex_root, report, progress, workers)
                with self._lock:
                    old = {
                        (Harness(h), s)
                        for h, s in self._db.execute("SELECT harness, session_id FROM entries")
                    }
                    db.backup(self._db)
                    # The copy went through the WAL: as large as the index; give the space back.
                    self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            finally:
                db.close()
        finally:
            remove_db(build)
        report.entries_removed = len(old - report.changed)
        report.changed |= old  # whoever read an entry of the old index reads it again
        if progress is not None:
            progress(report.files_seen, report.files_seen)

    def _fill(
        self,
        db: sqlite3.Connection,
        claude_root: Path,
        codex_root: Path,
        report: IndexReport,
        progress: Progress | None,
        workers: int | None,
    ) -> None:
        """Write a whole index into the empty database ``db`` (a full build's file).

        The readers hand back each transcript's ``files`` row and its session's ``entries`` row (the
        entry of transcript ``i`` is document ``i``), and per chunk of transcripts their postings
        inverted, word -> documents (``reader.read_rows``). This writes the rows as they come and the
        chunks into a staging table, one row per (word, chunk), appended; at the end, indexed by
        (word, chunk), one pass over it in that order yields every posting in the postings table's own
        key order, so SQLite appends them to its B-tree: no sort of the postings and no insert into
        the middle of the tree. A session
        with several transcripts keeps the entry of its first and is then built again from all of
        them, as an incremental pass builds it.
        """
        context = self._begin_build(db, codex_root, report)
        found = list(discover(claude_root, codex_root))
        total = report.files_seen = len(found)
        jobs = [Job(harness, path, None, None, self.max_line_bytes) for harness, path in found]
        db.execute("PRAGMA temp.cache_size=-131072")
        db.execute("CREATE TEMP TABLE bulk(word TEXT NOT NULL, chunk INTEGER NOT NULL, docs TEXT NOT NULL)")
        docs: dict[Key, int] = {}
        again: set[Key] = set()
        orphans: list[int] = []  # documents of a session's later transcripts: postings to delete
        chunks = 0
        files: list[tuple[Any, ...]] = []
        entries: list[tuple[Any, ...]] = []
        for done, r in enumerate(Readers(workers).read(jobs, context), 1):
            report.skips.extend(r.skips)
            if r.status == "read":
                report.files_read += 1
                report.bytes_read += r.bytes_read
                files.append(_file_row(r, r.path, r.harness.value, r.session_id, r.skips[-1].reason if r.skips else None))
                if r.row is not None:
                    key = (r.harness, str(r.row[1]))
                    if key in docs:
                        again.add(key)
                        orphans.append(done)
                    else:
                        docs[key] = done
                        entries.append((done, *r.row))
            if r.postings:
                chunks += 1
                db.execute(
                    "INSERT INTO temp.bulk(word, chunk, docs) SELECT key, ?, value FROM json_each(?)",
                    (chunks, r.postings),
                )
            if done % _BATCH_FILES == 0 or done == total:
                db.executemany(BULK_FILE, files)
                db.executemany(BULK_ENTRY, entries)
                files, entries = [], []
                if progress is not None and done < total:
                    progress(done, total)
        self._end_build(db, docs, again, orphans, report)

    def _begin_build(self, db: sqlite3.Connection, codex_root: Path, report: IndexReport) -> RowContext:
        """The build file set up for one bulk write (no journal, no syncs: thrown away unless complete),
        its schema, and Codex's titles, which the readers need to name Codex sessions."""
        with self._lock:
            page_size = self._db.execute("PRAGMA page_size").fetchone()[0]
        db.execute(f"PRAGMA page_size={int(page_size)}")  # the backup API needs the index's page size
        db.execute("PRAGMA journal_mode=OFF")  # the file is thrown away unless it is complete
        db.execute("PRAGMA synchronous=OFF")
        db.execute("PRAGMA cache_size=-131072")  # 128 MiB: also what the final sort holds in memory
        db.execute("BEGIN")
        create_schema(db, reset=False)
        update_codex_titles(db, codex_root, report)
        return RowContext({str(sid): str(t) for sid, t in db.execute("SELECT session_id, title FROM codex_titles")})

    def _end_build(
        self, db: sqlite3.Connection, docs: Mapping[Key, int], again: set[Key], orphans: list[int], report: IndexReport
    ) -> None:
        """The staged postings written in key order, a session's later transcripts' documents dropped,
        the sessions with several transcripts built again from all of them; committed."""
        db.execute("CREATE INDEX temp.bulk_key ON bulk(word, chunk)")
        db.execute(BULK_POSTINGS)
        db.execute("DROP TABLE temp.bulk")
        if orphans:
            db.execute("DELETE FROM postings WHERE doc IN (SELECT value FROM json_each(?))", (json.dumps(orphans),))
        report.changed |= set(docs)
        if again:
            post = Postings(db)
            rebuild_entries(db, again, report, RepoResolver(), post)
            post.flush()
        report.entries_written = len(docs)
        db.execute("COMMIT")

    def _update_batch(
        self,
        batch: list[FileResult],
        known: dict[str, FileRow],
        dirty: set[Key],
        report: IndexReport,
        resolver: RepoResolver,
        post: Postings,
    ) -> None:
        with self._tx() as db:
            keys: set[Key] = set()
            fresh: dict[str, FileResult] = {}
            self._apply(db, batch, known, keys, report, fresh)
            rebuild_entries(db, keys, report, resolver, post, fresh)
            dirty -= keys
            if post.due():
                post.flush()

    def _apply(
        self,
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


@dataclass(frozen=True)
class _Pass:
    """An incremental pass's plan: how many transcripts it covers, the index's rows of them, those to
    read (with their position, for progress) and the indexed ones that are gone."""

    total: int
    known: dict[str, FileRow]
    read: list[tuple[int, Harness, str]]
    gone: list[FileRow]


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
    db.execute(UPSERT_FILE, (*_file_row(r, path, harness.value, session_id, last_skip), r.resumed, r.resumed))
    known[path] = FileRow(path, harness, session_id, r.size, r.mtime_ns, r.inode, r.offset, r.head, r.head_len, False)


def _prior(row: FileRow | None) -> Prior | None:
    if row is None:
        return None
    return Prior(
        row.size, row.mtime_ns, row.inode, row.offset, row.head, row.head_len, row.missing, row.session_id
    )


def _file_row(r: Any, path: str, harness: str, session_id: str | None, last_skip: str | None) -> tuple[Any, ...]:
    """A transcript's row of the ``files`` table, as both the full build and an update write it."""
    return (path, harness, session_id, r.size, r.mtime_ns, r.inode, r.offset, r.head, r.head_len, r.state,
            len(r.skips), last_skip)
