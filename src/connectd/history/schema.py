"""The history index's SQLite tables, and the SQL its writer and a full build run.

``entries`` (one row per session, keyed by harness and session id, with the searchable text in
``f_*`` columns and their lengths in words in ``n_*``; ``entries_rank`` covers what ranking reads),
``postings`` (one row per word and entry with the word's count per field, keyed by word: a word's
document frequency is the length of its run), ``totals`` (N and words per field, kept by triggers),
``files`` (one row per transcript: stat, offset, parser state) and ``codex_titles`` (Codex's
``session_index.jsonl``). An index of another schema version is rebuilt, never migrated.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path
from typing import Any

from connectcore.history import Field, Harness
from connectd.history.rows import ENTRY_COLUMNS, LENGTH_COLUMNS, OTHER_FIELDS, ROW_COLUMNS, TEXT_COLUMNS

SCHEMA_VERSION = "5"  # 5: a delivered message is neither a prompt nor a title

#: An entry's key: (harness, session id).
Key = tuple[Harness, str]

COLUMNS = dict(zip(Field, TEXT_COLUMNS, strict=True))
LENGTHS = dict(zip(Field, LENGTH_COLUMNS, strict=True))
TFS = tuple(f"t_{f.value}" for f in Field)

SCHEMA = f"""
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
  {", ".join(f"{c} INTEGER NOT NULL" for c in LENGTHS.values())},
  {", ".join(f"{c} TEXT NOT NULL" for c in COLUMNS.values())},
  UNIQUE(harness, session_id)
);
CREATE INDEX IF NOT EXISTS entries_scope ON entries(repo, entrypoint);
CREATE INDEX IF NOT EXISTS entries_recent ON entries(last_active);
CREATE INDEX IF NOT EXISTS entries_parent ON entries(harness, parent_session_id);
-- What ranking reads per candidate, without touching the wide rows.
CREATE INDEX IF NOT EXISTS entries_rank ON entries(
  id, entrypoint, repo, last_active, {", ".join(LENGTHS.values())}
);
-- The inverted index: one row per (term, entry) with the term's frequency in each field, in Field order.
-- A term's document frequency is the length of its run of rows (counted when a query needs it).
CREATE TABLE IF NOT EXISTS postings(
  term TEXT NOT NULL, doc INTEGER NOT NULL,
  {", ".join(f"{c} INTEGER NOT NULL" for c in TFS)},
  PRIMARY KEY(term, doc)
) WITHOUT ROWID;
-- Corpus totals (entries, words per field), kept by triggers: BM25's N and average field lengths.
CREATE TABLE IF NOT EXISTS totals(
  id INTEGER PRIMARY KEY CHECK (id = 1), n INTEGER NOT NULL,
  {", ".join(f"s_{f.value} INTEGER NOT NULL" for f in Field)}
);
INSERT OR IGNORE INTO totals VALUES (1, 0, {", ".join("0" for _ in Field)});
CREATE TRIGGER IF NOT EXISTS entries_ai AFTER INSERT ON entries BEGIN
  UPDATE totals SET n = n + 1, {", ".join(f"s_{f.value} = s_{f.value} + new.n_{f.value}" for f in Field)};
END;
CREATE TRIGGER IF NOT EXISTS entries_ad AFTER DELETE ON entries BEGIN
  UPDATE totals SET n = n - 1, {", ".join(f"s_{f.value} = s_{f.value} - old.n_{f.value}" for f in Field)};
END;
CREATE TRIGGER IF NOT EXISTS entries_au AFTER UPDATE ON entries BEGIN
  UPDATE totals SET {", ".join(f"s_{f.value} = s_{f.value} - old.n_{f.value} + new.n_{f.value}" for f in Field)};
END;
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

DROP = """
DROP TRIGGER IF EXISTS entries_ai; DROP TRIGGER IF EXISTS entries_ad; DROP TRIGGER IF EXISTS entries_au;
DROP TABLE IF EXISTS fts_row; DROP TABLE IF EXISTS fts_inst; DROP TABLE IF EXISTS entries_fts;
DROP TABLE IF EXISTS postings; DROP TABLE IF EXISTS terms; DROP TABLE IF EXISTS totals;
DROP TABLE IF EXISTS entries; DROP TABLE IF EXISTS files; DROP TABLE IF EXISTS codex_titles;
DROP TABLE IF EXISTS meta;
"""

ENTRY_SQL = ", ".join(ENTRY_COLUMNS)


#: A transcript's ``files`` row after an incremental read; the last two parameters: whether the read
#: resumed where the last one stopped (then its skips add to the row's count and keep its last skip).
UPSERT_FILE = (
    "INSERT INTO files(path, harness, session_id, size, mtime_ns, inode, offset, head, head_len,"
    " state, missing, skipped, last_skip) VALUES (?,?,?,?,?,?,?,?,?,?,0,?,?)"
    " ON CONFLICT(path) DO UPDATE SET harness=excluded.harness, session_id=excluded.session_id,"
    " size=excluded.size, mtime_ns=excluded.mtime_ns, inode=excluded.inode,"
    " offset=excluded.offset, head=excluded.head, head_len=excluded.head_len,"
    " state=excluded.state, missing=0,"
    " skipped=CASE WHEN ? THEN files.skipped + excluded.skipped ELSE excluded.skipped END,"
    " last_skip=COALESCE(excluded.last_skip, CASE WHEN ? THEN files.last_skip END)"
)

#: A full build: the rows the readers hand back, into an empty index.
BULK_FILE = (
    "INSERT INTO files(path, harness, session_id, size, mtime_ns, inode, offset, head, head_len, state,"
    " missing, skipped, last_skip) VALUES (?,?,?,?,?,?,?,?,?,?,0,?,?)"
)
BULK_ENTRY = (
    f"INSERT INTO entries(id, {', '.join(ROW_COLUMNS)}) VALUES ({','.join('?' * (len(ROW_COLUMNS) + 1))})"
)
#: Every staged posting, read in (word, chunk) order (the staging table's index: no sort) and each
#: chunk's documents in order: the postings table's key order. A count is a number for a word found in the prompts alone,
#: else an array of the counts in every field (``rows.add_postings``).
BULK_POSTINGS = (
    f"INSERT INTO postings(term, doc, {', '.join(TFS)}) SELECT b.word, CAST(d.key AS INTEGER), "
    + ", ".join(f"iif(d.type = 'integer', 0, d.value ->> {i})" for i in range(len(OTHER_FIELDS)))
    + f", iif(d.type = 'integer', d.value, d.value ->> {len(OTHER_FIELDS)})"
    " FROM temp.bulk AS b, json_each(b.docs) AS d ORDER BY b.word, b.chunk"
)


def file_row(r: Any, path: str, harness: str, session_id: str | None, last_skip: str | None) -> tuple[Any, ...]:
    """A transcript's row of the ``files`` table (``r``: the reader's result), as both the full build
    (:data:`BULK_FILE`) and an update (:data:`UPSERT_FILE`, with its resumed count) write it."""
    return (path, harness, session_id, r.size, r.mtime_ns, r.inode, r.offset, r.head, r.head_len, r.state,
            len(r.skips), last_skip)


def marks(n: int) -> str:
    return ",".join("?" * n)


def remove_db(path: Path) -> None:
    """A database file and its journals, if they exist."""
    for suffix in ("", "-journal", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{path}{suffix}")


def create_schema(db: sqlite3.Connection, *, reset: bool) -> None:
    if reset:
        for stmt in DROP.split(";"):
            if stmt.strip():
                db.execute(stmt)
    for stmt in split_sql(SCHEMA):
        db.execute(stmt)
    db.execute("INSERT OR IGNORE INTO meta(key, value) VALUES ('schema_version', ?)", (SCHEMA_VERSION,))


def split_sql(script: str) -> list[str]:
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
