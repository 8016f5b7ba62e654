"""The history index: a SQLite + FTS5 file (``history.db``) in the data directory.

It is derived data: every row comes from a transcript and ``update(full=True)`` rebuilds it (entries
whose transcript is gone are then dropped). Updates are incremental: a transcript whose size, mtime and
inode are unchanged is not opened; one that grew (same inode, same first bytes) is read from the byte
offset where the last pass stopped, with the parser's state restored from the ``files`` table; any
other change reparses the file. A transcript that disappears keeps its entry, marked
``source_missing`` (and without a resume command).

Tables: ``entries`` (one row per session, keyed by harness and session id, with the searchable text in
``f_*`` columns and their lengths in words in ``n_*``), ``entries_fts`` (an external-content FTS5 index
over the ``f_*`` columns, kept in step by triggers), two ``fts5vocab`` views the ranking reads term
statistics from, ``files`` (one row per transcript: stat, offset, parser state) and ``codex_titles``
(Codex's ``session_index.jsonl``). The file is created 0600 in a 0700 directory, in WAL mode.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
import threading
import time
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from connectcore.history import (
    TITLE_RANK,
    Candidate,
    CorpusStats,
    Entrypoint,
    Field,
    Harness,
    SearchScope,
    SessionEntry,
    TranscriptFacts,
    build_entry,
    field_lengths,
    field_texts,
)
from connectd.history.parsers import (
    MAX_LINE_BYTES,
    Skip,
    SkipReason,
    accumulator_for,
    parse_file,
    read_codex_titles,
)
from connectd.history.repos import RepoResolver

SCHEMA_VERSION = "3"
DB_NAME = "history.db"
_HEAD_BYTES = 4096
_BATCH_FILES = 500
_PROMPT_SEP = "\n\x1e\n"

_COLUMNS = {f: f"f_{f.value}" for f in Field}
_LENGTHS = {f: f"n_{f.value}" for f in Field}
_COLUMN_FIELD = {v: k for k, v in _COLUMNS.items()}

_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS entries(
  id INTEGER PRIMARY KEY,
  harness TEXT NOT NULL,
  session_id TEXT NOT NULL,
  repo TEXT NOT NULL,
  cwd TEXT NOT NULL,
  title TEXT NOT NULL,
  branches TEXT NOT NULL,
  prs TEXT NOT NULL,
  started REAL,
  last_active REAL,
  entrypoint TEXT NOT NULL,
  parent_session_id TEXT,
  resume_argv TEXT,
  source_path TEXT NOT NULL,
  source_missing INTEGER NOT NULL,
  {", ".join(f"{c} INTEGER NOT NULL" for c in _LENGTHS.values())},
  {", ".join(f"{c} TEXT NOT NULL" for c in _COLUMNS.values())},
  UNIQUE(harness, session_id)
);
CREATE INDEX IF NOT EXISTS entries_scope ON entries(repo, entrypoint);
CREATE INDEX IF NOT EXISTS entries_recent ON entries(last_active);
CREATE INDEX IF NOT EXISTS entries_parent ON entries(harness, parent_session_id);
CREATE VIRTUAL TABLE IF NOT EXISTS entries_fts USING fts5(
  {", ".join(_COLUMNS.values())},
  content='entries', content_rowid='id', tokenize='unicode61 remove_diacritics 0'
);
CREATE TRIGGER IF NOT EXISTS entries_ai AFTER INSERT ON entries BEGIN
  INSERT INTO entries_fts(rowid, {", ".join(_COLUMNS.values())})
  VALUES (new.id, {", ".join("new." + c for c in _COLUMNS.values())});
END;
CREATE TRIGGER IF NOT EXISTS entries_ad AFTER DELETE ON entries BEGIN
  INSERT INTO entries_fts(entries_fts, rowid, {", ".join(_COLUMNS.values())})
  VALUES ('delete', old.id, {", ".join("old." + c for c in _COLUMNS.values())});
END;
CREATE TRIGGER IF NOT EXISTS entries_au AFTER UPDATE ON entries BEGIN
  INSERT INTO entries_fts(entries_fts, rowid, {", ".join(_COLUMNS.values())})
  VALUES ('delete', old.id, {", ".join("old." + c for c in _COLUMNS.values())});
  INSERT INTO entries_fts(rowid, {", ".join(_COLUMNS.values())})
  VALUES (new.id, {", ".join("new." + c for c in _COLUMNS.values())});
END;
CREATE VIRTUAL TABLE IF NOT EXISTS fts_row USING fts5vocab(entries_fts, 'row');
CREATE VIRTUAL TABLE IF NOT EXISTS fts_inst USING fts5vocab(entries_fts, 'instance');
CREATE TABLE IF NOT EXISTS files(
  path TEXT PRIMARY KEY,
  harness TEXT NOT NULL,
  session_id TEXT,
  size INTEGER NOT NULL,
  mtime_ns INTEGER NOT NULL,
  inode INTEGER NOT NULL,
  offset INTEGER NOT NULL,
  head TEXT NOT NULL,
  head_len INTEGER NOT NULL,
  missing INTEGER NOT NULL DEFAULT 0,
  skipped INTEGER NOT NULL DEFAULT 0,
  last_skip TEXT,
  state BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS files_session ON files(harness, session_id);
CREATE TABLE IF NOT EXISTS codex_titles(
  session_id TEXT PRIMARY KEY, title TEXT NOT NULL, updated_at TEXT NOT NULL
);
"""

_DROP = """
DROP TRIGGER IF EXISTS entries_ai; DROP TRIGGER IF EXISTS entries_ad; DROP TRIGGER IF EXISTS entries_au;
DROP TABLE IF EXISTS fts_row; DROP TABLE IF EXISTS fts_inst; DROP TABLE IF EXISTS entries_fts;
DROP TABLE IF EXISTS entries; DROP TABLE IF EXISTS files; DROP TABLE IF EXISTS codex_titles;
DROP TABLE IF EXISTS meta;
"""

_ENTRY_COLUMNS = (
    "harness, session_id, repo, cwd, title, branches, prs, started, last_active, entrypoint, "
    "parent_session_id, resume_argv, source_path, source_missing"
)

Progress = Callable[[int, int], None]
Key = tuple[Harness, str]


class IndexError_(Exception):
    """The index file cannot be used (wrong schema version from a newer build, not a database)."""


# ---------------------------------------------------------------------------------------------------
# Discovery
# ---------------------------------------------------------------------------------------------------


def _scandir(path: str) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(path) as it:
            return list(it)
    except OSError:
        return []


def _transcript(name: str, prefix: str = "") -> bool:
    return name.endswith(".jsonl") and name.startswith(prefix) and not name.startswith("agent-acompact")


def discover(claude_root: Path, codex_root: Path) -> Iterator[tuple[Harness, str]]:
    """Every transcript under the two roots, as (harness, path)."""
    join = os.path.join
    for project in _scandir(join(claude_root, "projects")):
        if not project.is_dir(follow_symlinks=False):
            continue
        for item in _scandir(project.path):
            if _transcript(item.name) and item.is_file(follow_symlinks=False):
                yield Harness.CLAUDE, item.path
            elif item.is_dir(follow_symlinks=False):
                for sub in _scandir(join(item.path, "subagents")):
                    if _transcript(sub.name, "agent-") and sub.is_file(follow_symlinks=False):
                        yield Harness.CLAUDE, sub.path
    for top in ("sessions", "archived_sessions"):
        stack = [(join(codex_root, top), 0)]
        while stack:
            d, depth = stack.pop()
            for item in _scandir(d):
                if item.is_dir(follow_symlinks=False):
                    if depth < 4:
                        stack.append((item.path, depth + 1))
                elif item.name.startswith("rollout-") and item.name.endswith(".jsonl"):
                    yield Harness.CODEX, item.path


# ---------------------------------------------------------------------------------------------------
# Reports
# ---------------------------------------------------------------------------------------------------


@dataclass
class IndexReport:
    """What one update did. ``skips`` lists every skipped line or file with its reason."""

    files_seen: int = 0
    files_read: int = 0
    files_resumed: int = 0
    files_missing: int = 0
    bytes_read: int = 0
    entries_written: int = 0
    entries_removed: int = 0
    skips: list[Skip] = field(default_factory=list)
    seconds: float = 0.0

    def skip_counts(self) -> dict[str, int]:
        return dict(Counter(s.reason for s in self.skips))

    def as_dict(self) -> dict[str, Any]:
        return {
            "files_seen": self.files_seen,
            "files_read": self.files_read,
            "files_resumed": self.files_resumed,
            "files_missing": self.files_missing,
            "bytes_read": self.bytes_read,
            "entries_written": self.entries_written,
            "entries_removed": self.entries_removed,
            "skipped": self.skip_counts(),
            "seconds": round(self.seconds, 3),
        }


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


def _head_hash(path: str, length: int) -> str:
    with open(path, "rb") as f:
        return hashlib.sha1(f.read(length)).hexdigest()


# ---------------------------------------------------------------------------------------------------
# The store
# ---------------------------------------------------------------------------------------------------


def _ensure_private_dir(path: Path) -> None:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    with contextlib.suppress(OSError):
        if path.stat().st_mode & 0o077:
            os.chmod(path, 0o700)


def _encode_prompts(prompts: Sequence[str]) -> str:
    return _PROMPT_SEP.join(p.replace("\x1e", " ") for p in prompts)


def _decode_prompts(text: str) -> tuple[str, ...]:
    return tuple(p for p in text.split(_PROMPT_SEP) if p) if text else ()


class HistoryIndex:
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
        self._init_schema()

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
                _create_schema(db, reset=row is not None and row[0] != SCHEMA_VERSION)

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
    ) -> IndexReport:
        """Bring the index up to date with the transcripts under the two roots."""
        t0 = time.monotonic()
        report = IndexReport()
        resolver = RepoResolver()
        # Searches interleave with a long build between batches (they see what is written so far);
        # only one update or removal runs at a time.
        with self._update_lock:
            if full:
                with self._tx() as db:
                    _create_schema(db, reset=True)
            with self._lock:
                known = {row.path: row for row in self._file_rows()}
            found = list(discover(Path(claude_root), Path(codex_root)))
            report.files_seen = len(found)
            total = len(found)
            seen: set[str] = set()
            dirty: set[Key] = set()
            batch: list[tuple[Harness, str]] = []
            for done, (harness, path) in enumerate(found, 1):
                seen.add(path)
                row = known.get(path)
                if row is not None and not row.missing:
                    try:
                        st = os.stat(path)
                    except OSError:
                        st = None
                    if st is not None and (row.size, row.mtime_ns, row.inode) == (
                        st.st_size,
                        st.st_mtime_ns,
                        st.st_ino,
                    ):
                        continue  # unchanged: not opened
                batch.append((harness, path))
                if len(batch) >= _BATCH_FILES:
                    self._update_batch(batch, known, dirty, report, resolver)
                    batch = []
                    if progress is not None:
                        progress(done, total)
            gone = [row for p, row in known.items() if p not in seen and not row.missing]
            if batch or gone or dirty or self._codex_index_stale(Path(codex_root)):
                with self._tx() as db:
                    if batch:
                        self._read_files(db, batch, known, dirty, report)
                    for row in gone:
                        db.execute("UPDATE files SET missing=1 WHERE path=?", (row.path,))
                        report.files_missing += 1
                        report.skips.append(Skip(row.path, SkipReason.VANISHED))
                        if row.session_id:
                            dirty.add((Harness(row.harness), row.session_id))
                    dirty |= self._update_codex_titles(db, Path(codex_root), report)
                    self._rebuild(db, dirty, report, resolver)
            if full:
                # A full build leaves a WAL as large as the index; give the space back.
                with self._lock:
                    self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            if progress is not None:
                progress(total, total)
        report.seconds = time.monotonic() - t0
        return report

    def _update_batch(
        self,
        batch: list[tuple[Harness, str]],
        known: dict[str, FileRow],
        dirty: set[Key],
        report: IndexReport,
        resolver: RepoResolver,
    ) -> None:
        with self._tx() as db:
            keys: set[Key] = set()
            self._read_files(db, batch, known, keys, report)
            self._rebuild(db, keys, report, resolver)
            dirty -= keys

    def _read_files(
        self,
        db: sqlite3.Connection,
        batch: Iterable[tuple[Harness, str]],
        known: dict[str, FileRow],
        dirty: set[Key],
        report: IndexReport,
    ) -> None:
        for harness, path in batch:
            row = known.get(path)
            try:
                st = os.stat(path)
            except FileNotFoundError:
                report.skips.append(Skip(path, SkipReason.VANISHED))
                continue
            except OSError:
                report.skips.append(Skip(path, SkipReason.UNREADABLE))
                continue
            if (
                row is not None
                and not row.missing
                and row.size == st.st_size
                and row.mtime_ns == st.st_mtime_ns
                and row.inode == st.st_ino
            ):
                continue
            acc = accumulator_for(harness, path)
            offset = 0
            head_len = min(st.st_size, _HEAD_BYTES)
            try:
                if (
                    row is not None
                    and row.inode == st.st_ino
                    and st.st_size >= row.offset
                    and row.offset > 0
                    and _head_hash(path, row.head_len) == row.head
                ):
                    acc.load_state(self._state(path))
                    offset = row.offset
                    report.files_resumed += 1
                result = parse_file(path, acc, offset, max_line_bytes=self.max_line_bytes)
                head = _head_hash(path, head_len)
            except FileNotFoundError:
                report.skips.append(Skip(path, SkipReason.VANISHED))
                if row is not None:
                    db.execute("UPDATE files SET missing=1 WHERE path=?", (path,))
                    if row.session_id:
                        dirty.add((Harness(row.harness), row.session_id))
                continue
            except OSError:
                report.skips.append(Skip(path, SkipReason.UNREADABLE))
                continue
            report.files_read += 1
            report.bytes_read += result.bytes_read
            report.skips.extend(result.skips)
            facts = acc.facts()
            session_id = facts.session_id if facts is not None else None
            if row is not None and row.session_id and row.session_id != session_id:
                dirty.add((Harness(row.harness), row.session_id))
            if session_id:
                dirty.add((harness, session_id))
            last_skip = result.skips[-1].reason if result.skips else None
            db.execute(
                "INSERT INTO files(path, harness, session_id, size, mtime_ns, inode, offset, head, head_len,"
                " state, missing, skipped, last_skip) VALUES (?,?,?,?,?,?,?,?,?,?,0,?,?)"
                " ON CONFLICT(path) DO UPDATE SET harness=excluded.harness, session_id=excluded.session_id,"
                " size=excluded.size, mtime_ns=excluded.mtime_ns, inode=excluded.inode,"
                " offset=excluded.offset, head=excluded.head, head_len=excluded.head_len,"
                " state=excluded.state, missing=0,"
                " skipped=CASE WHEN ? THEN files.skipped + excluded.skipped ELSE excluded.skipped END,"
                " last_skip=COALESCE(excluded.last_skip, CASE WHEN ? THEN files.last_skip END)",
                (
                    path,
                    harness.value,
                    session_id,
                    st.st_size,
                    st.st_mtime_ns,
                    st.st_ino,
                    result.offset,
                    head,
                    head_len,
                    _pack_state(acc.to_state()),
                    len(result.skips),
                    last_skip,
                    offset > 0,
                    offset > 0,
                ),
            )
            known[path] = FileRow(
                path,
                harness,
                session_id,
                st.st_size,
                st.st_mtime_ns,
                st.st_ino,
                result.offset,
                head,
                head_len,
                False,
            )

    def _codex_index_stale(self, codex_root: Path) -> bool:
        try:
            st = os.stat(codex_root / "session_index.jsonl")
        except OSError:
            return False
        with self._lock:
            row = self._db.execute("SELECT value FROM meta WHERE key='codex_index'").fetchone()
        prev = json.loads(row[0]) if row else None
        return not (
            prev
            and prev["size"] == st.st_size
            and prev["mtime_ns"] == st.st_mtime_ns
            and prev["inode"] == st.st_ino
        )

    def _update_codex_titles(self, db: sqlite3.Connection, codex_root: Path, report: IndexReport) -> set[Key]:
        path = codex_root / "session_index.jsonl"
        row = db.execute("SELECT value FROM meta WHERE key='codex_index'").fetchone()
        prev = json.loads(row[0]) if row else None
        try:
            st = os.stat(path)
        except OSError:
            return set()
        if (
            prev
            and prev["size"] == st.st_size
            and prev["mtime_ns"] == st.st_mtime_ns
            and prev["inode"] == st.st_ino
        ):
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
        db.execute(
            "INSERT INTO meta(key, value) VALUES ('codex_index', ?)"
            " ON CONFLICT(key) DO UPDATE SET value=excluded.value",
            (
                json.dumps(
                    {
                        "size": st.st_size,
                        "mtime_ns": st.st_mtime_ns,
                        "inode": st.st_ino,
                        "offset": next_offset,
                    }
                ),
            ),
        )
        return changed

    def _rebuild(
        self, db: sqlite3.Connection, keys: Iterable[Key], report: IndexReport, resolver: RepoResolver
    ) -> None:
        for harness, session_id in keys:
            rows = db.execute(
                "SELECT path, state, missing FROM files WHERE harness=? AND session_id=?",
                (harness.value, session_id),
            ).fetchall()
            facts: list[TranscriptFacts] = []
            missing = True
            for path, state, is_missing in rows:
                acc = accumulator_for(harness, path)
                acc.load_state(_unpack_state(state))
                f = acc.facts()
                if f is not None and f.session_id == session_id:
                    facts.append(f)
                    missing = missing and bool(is_missing)
            if not facts:
                cur = db.execute(
                    "DELETE FROM entries WHERE harness=? AND session_id=?", (harness.value, session_id)
                )
                report.entries_removed += cur.rowcount
                continue
            title_override = None
            if harness is Harness.CODEX:
                t = db.execute("SELECT title FROM codex_titles WHERE session_id=?", (session_id,)).fetchone()
                if t is not None:
                    title_override = (t[0], TITLE_RANK["thread-name"])
            cwd = next((f.cwd for f in facts if f.cwd), "")
            repo = resolver(cwd) if cwd else None
            if repo is None:
                prev = db.execute(
                    "SELECT repo FROM entries WHERE harness=? AND session_id=?", (harness.value, session_id)
                ).fetchone()
                repo = prev[0] if prev is not None and prev[0] else cwd
            entry = build_entry(facts, repo, source_missing=missing, title_override=title_override)
            self._write_entry(db, entry)
            report.entries_written += 1

    def _write_entry(self, db: sqlite3.Connection, entry: SessionEntry) -> None:
        texts = field_texts(entry)
        texts[Field.PROMPTS] = _encode_prompts(entry.prompts)
        lengths = field_lengths(entry)
        values: list[Any] = [
            entry.harness.value,
            entry.session_id,
            entry.repo,
            entry.cwd,
            entry.title,
            json.dumps(list(entry.branches)),
            json.dumps(list(entry.prs)),
            entry.started,
            entry.last_active,
            entry.entrypoint.value,
            entry.parent_session_id,
            json.dumps(list(entry.resume_argv)) if entry.resume_argv is not None else None,
            entry.source_path,
            int(entry.source_missing),
        ]
        values += [texts[f] for f in Field]
        values += [lengths[f] for f in Field]
        cols = [*(c.strip() for c in _ENTRY_COLUMNS.split(",")), *_COLUMNS.values(), *_LENGTHS.values()]
        updates = ", ".join(f"{c}=excluded.{c}" for c in cols[2:])
        db.execute(
            f"INSERT INTO entries({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})"
            f" ON CONFLICT(harness, session_id) DO UPDATE SET {updates}",
            values,
        )

    def _file_rows(self, where: str = "", args: Sequence[Any] = ()) -> list[FileRow]:
        # ``harness`` stays the stored string (a StrEnum value compares and hashes equal to it).
        rows = self._db.execute(
            "SELECT path, harness, session_id, size, mtime_ns, inode, offset, head, head_len, missing"
            f" FROM files {where}",
            args,
        ).fetchall()
        return [FileRow._make(r) for r in rows]

    def _state(self, path: str) -> dict[str, Any]:
        with self._lock:
            row = self._db.execute("SELECT state FROM files WHERE path=?", (path,)).fetchone()
        return _unpack_state(row[0]) if row is not None else {}

    # -- reads -------------------------------------------------------------------------------------

    def _entry_from_row(self, r: Sequence[Any], prompts: str = "") -> SessionEntry:
        return SessionEntry(
            harness=Harness(r[0]),
            session_id=r[1],
            repo=r[2],
            cwd=r[3],
            title=r[4],
            branches=tuple(json.loads(r[5])),
            prs=tuple(json.loads(r[6])),
            started=r[7],
            last_active=r[8],
            entrypoint=Entrypoint(r[9]),
            parent_session_id=r[10],
            resume_argv=tuple(json.loads(r[11])) if r[11] is not None else None,
            source_path=r[12],
            source_missing=bool(r[13]),
            prompts=_decode_prompts(prompts),
        )

    def get(self, harness: Harness, session_id: str, *, with_prompts: bool = False) -> SessionEntry | None:
        prompts_col = "f_prompts" if with_prompts else "''"
        with self._lock:
            r = self._db.execute(
                f"SELECT {_ENTRY_COLUMNS}, {prompts_col} FROM entries WHERE harness=? AND session_id=?",
                (harness.value, session_id),
            ).fetchone()
        return None if r is None else self._entry_from_row(r, r[14])

    def entries(self, where: str = "", args: Sequence[Any] = ()) -> list[SessionEntry]:
        with self._lock:
            rows = self._db.execute(f"SELECT {_ENTRY_COLUMNS} FROM entries {where}", args).fetchall()
        return [self._entry_from_row(r) for r in rows]

    def count(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT count(*) FROM entries").fetchone()[0])

    def stats(self, terms: Sequence[str]) -> CorpusStats:
        """Corpus statistics over the whole index (BM25's N, average field lengths, term df)."""
        with self._lock:
            n, *avgs = self._db.execute(
                f"SELECT count(*), {', '.join(f'avg({c})' for c in _LENGTHS.values())} FROM entries"
            ).fetchone()
            marks = ",".join("?" * len(terms))
            df = dict(self._db.execute(f"SELECT term, doc FROM fts_row WHERE term IN ({marks})", list(terms)))
        return CorpusStats(
            documents=int(n),
            average_length={f: float(a or 0.0) for f, a in zip(Field, avgs, strict=True)},
            document_frequency={str(k): int(v) for k, v in df.items()},
        )

    def candidates(self, terms: Sequence[str], scope: SearchScope) -> list[Candidate]:
        """Every entry the scope admits that holds a query term, with per-field term frequencies.

        The scope (repos, entrypoints) is part of the SQL, so no admitted match is ever cut before
        ranking. The entries are thin (identity, repo, cwd, entrypoint, last active): enough to rank;
        :meth:`get` gives the whole entry.
        """
        if not terms:
            return []
        where = [f"i.term IN ({_marks(len(terms))})"]
        args: list[Any] = list(terms)
        eps = scope.entrypoints()
        where.append(f"e.entrypoint IN ({_marks(len(eps))})")
        args += [e.value for e in eps]
        if scope.repos is not None:
            if not scope.repos:
                return []
            where.append(f"e.repo IN ({_marks(len(scope.repos))})")
            args += sorted(scope.repos)
        with self._lock:
            rows = self._db.execute(
                "SELECT i.doc, i.col, i.term, count(*) FROM fts_inst AS i JOIN entries AS e ON e.id = i.doc"
                f" WHERE {' AND '.join(where)} GROUP BY i.doc, i.col, i.term",
                args,
            ).fetchall()
            tf: dict[int, dict[tuple[Field, str], int]] = {}
            for doc, col, term, count in rows:
                tf.setdefault(doc, {})[(_COLUMN_FIELD[col], term)] = count
            if not tf:
                return []
            # Thin entries: what ranking needs (identity, scope fields, last active); the caller
            # fetches the few it returns in full.
            entries: dict[int, tuple[SessionEntry, dict[Field, int]]] = {}
            ids = list(tf)
            for start in range(0, len(ids), 500):
                chunk = ids[start : start + 500]
                for r in self._db.execute(
                    "SELECT id, harness, session_id, repo, cwd, last_active, entrypoint,"
                    f" {', '.join(_LENGTHS.values())} FROM entries WHERE id IN ({_marks(len(chunk))})",
                    chunk,
                ):
                    entry = SessionEntry(
                        harness=Harness(r[1]),
                        session_id=r[2],
                        repo=r[3],
                        cwd=r[4],
                        last_active=r[5],
                        entrypoint=Entrypoint(r[6]),
                    )
                    entries[r[0]] = (entry, {f: r[7 + i] for i, f in enumerate(Field)})
        return [
            Candidate(entry=entries[doc][0], term_frequency=tf[doc], field_length=entries[doc][1])
            for doc in ids
            if doc in entries
        ]

    def recent_dirs(self) -> list[tuple[str, str, float | None]]:
        """(cwd, repo, last active) of every top-level session's directory, most recent first."""
        with self._lock:
            rows = self._db.execute(
                "SELECT cwd, repo, max(last_active) AS t FROM entries"
                " WHERE cwd != '' AND entrypoint != 'subagent' GROUP BY cwd ORDER BY t DESC"
            ).fetchall()
        return [(r[0], r[1], r[2]) for r in rows]

    def files_of(self, harness: Harness, session_id: str) -> list[str]:
        with self._lock:
            return [
                r[0]
                for r in self._db.execute(
                    "SELECT path FROM files WHERE harness=? AND session_id=?", (harness.value, session_id)
                )
            ]

    def path_sessions(self, harness: Harness) -> dict[str, str]:
        """Transcript path -> session id, for liveness (Codex holds its rollout open)."""
        with self._lock:
            return {
                r[0]: r[1]
                for r in self._db.execute(
                    "SELECT path, session_id FROM files WHERE harness=? AND session_id IS NOT NULL",
                    (harness.value,),
                )
            }

    def children(self, harness: Harness, parent_session_id: str) -> list[str]:
        with self._lock:
            return [
                r[0]
                for r in self._db.execute(
                    "SELECT session_id FROM entries WHERE harness=? AND parent_session_id=?",
                    (harness.value, parent_session_id),
                )
            ]

    def remove(self, harness: Harness, session_ids: Iterable[str], paths: Iterable[str]) -> int:
        """Delete entries and their file rows (expunge). Returns the number of entries removed."""
        removed = 0
        with self._update_lock, self._tx() as db:
            for sid in session_ids:
                removed += db.execute(
                    "DELETE FROM entries WHERE harness=? AND session_id=?", (harness.value, sid)
                ).rowcount
                db.execute("DELETE FROM files WHERE harness=? AND session_id=?", (harness.value, sid))
                if harness is Harness.CODEX:
                    db.execute("DELETE FROM codex_titles WHERE session_id=?", (sid,))
            for p in paths:
                db.execute("DELETE FROM files WHERE path=?", (p,))
        return removed

    def skipped_files(self) -> list[tuple[str, int, str | None]]:
        with self._lock:
            return [
                (r[0], r[1], r[2])
                for r in self._db.execute("SELECT path, skipped, last_skip FROM files WHERE skipped > 0")
            ]


def _pack_state(state: dict[str, Any]) -> bytes:
    """A parser's state as stored: compact JSON, zlib-compressed (it holds the file's prompts)."""
    return zlib.compress(json.dumps(state, separators=(",", ":")).encode("utf-8"), 6)


def _unpack_state(blob: bytes) -> dict[str, Any]:
    state = json.loads(zlib.decompress(blob).decode("utf-8"))
    if not isinstance(state, dict):
        raise ValueError("stored parser state is not an object")
    return state


def _marks(n: int) -> str:
    return ",".join("?" * n)


def _create_schema(db: sqlite3.Connection, *, reset: bool) -> None:
    if reset:
        for stmt in _DROP.split(";"):
            if stmt.strip():
                db.execute(stmt)
    for stmt in _split_sql(_SCHEMA):
        db.execute(stmt)
    db.execute("INSERT OR IGNORE INTO meta(key, value) VALUES ('schema_version', ?)", (SCHEMA_VERSION,))


def _split_sql(script: str) -> list[str]:
    """Split a schema script into statements, keeping trigger bodies whole."""
    out: list[str] = []
    buf: list[str] = []
    for line in script.splitlines():
        buf.append(line)
        text = "\n".join(buf).strip()
        if text and sqlite3.complete_statement(text):
            out.append(text)
            buf = []
    return out
