"""A full build of the history index (``update(full=True)``; issue 24: was inside ``HistoryIndex``).

Every transcript is read whole into a new file, which then replaces the index in one transaction
(:meth:`FullBuild.run`): searches see the previous index until the new one is complete, and a build
that stops midway, for any reason, leaves the index untouched.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from connectcore.history import Harness
from connectd.history.codex_titles import update_codex_titles
from connectd.history.discover import discover
from connectd.history.entries import rebuild_entries
from connectd.history.postings import Postings
from connectd.history.reader import Job, Readers, RowContext
from connectd.history.report import IndexReport
from connectd.history.repos import RepoResolver
from connectd.history.schema import (
    BULK_ENTRY,
    BULK_FILE,
    BULK_POSTINGS,
    Key,
    create_schema,
    file_row,
    remove_db,
)

#: A full build is written here, then copied into the index in one transaction.
BUILD_SUFFIX = ".build"

Progress = Callable[[int, int], None]


class FullBuild:
    """One full build of the index at ``path``, whose open connection is ``live`` (held under ``lock``
    for each statement): the transcripts read by ``workers`` reader processes, ``batch_files`` files
    per write, each line at most ``max_line_bytes``; what it did goes into ``report``."""

    def __init__(
        self,
        *,
        path: Path,
        live: sqlite3.Connection,
        lock: threading.RLock,
        max_line_bytes: int,
        batch_files: int,
        report: IndexReport,
        progress: Progress | None,
        workers: int | None,
    ) -> None:
        self.path, self._db, self._lock = path, live, lock
        self.max_line_bytes, self.batch_files = max_line_bytes, batch_files
        self.report, self.progress, self.workers = report, progress, workers

    def run(self, claude_root: Path, codex_root: Path) -> None:
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
        report, progress = self.report, self.progress
        build = self.path.with_name(self.path.name + BUILD_SUFFIX)
        remove_db(build)
        os.close(os.open(build, os.O_RDWR | os.O_CREAT, 0o600))
        try:
            db = sqlite3.connect(build, isolation_level=None)
            try:
                self._fill(db, claude_root, codex_root)
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

    def _fill(self, db: sqlite3.Connection, claude_root: Path, codex_root: Path) -> None:
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
        report, progress = self.report, self.progress
        context = self._begin(db, codex_root)
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
        for done, r in enumerate(Readers(self.workers).read(jobs, context), 1):
            report.skips.extend(r.skips)
            if r.status == "read":
                report.files_read += 1
                report.bytes_read += r.bytes_read
                files.append(file_row(r, r.path, r.harness.value, r.session_id, r.skips[-1].reason if r.skips else None))
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
            if done % self.batch_files == 0 or done == total:
                db.executemany(BULK_FILE, files)
                db.executemany(BULK_ENTRY, entries)
                files, entries = [], []
                if progress is not None and done < total:
                    progress(done, total)
        self._end(db, docs, again, orphans)

    def _begin(self, db: sqlite3.Connection, codex_root: Path) -> RowContext:
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
        update_codex_titles(db, codex_root, self.report)
        return RowContext({str(sid): str(t) for sid, t in db.execute("SELECT session_id, title FROM codex_titles")})

    def _end(self, db: sqlite3.Connection, docs: Mapping[Key, int], again: set[Key], orphans: list[int]) -> None:
        """The staged postings written in key order, a session's later transcripts' documents dropped,
        the sessions with several transcripts built again from all of them; committed."""
        report = self.report
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
