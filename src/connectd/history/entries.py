"""The history index's writer of entries: a session's entry built again, written or deleted.

An entry is built from every transcript of the session (what the readers just found, else each
file's saved parser state) and written with its postings, or deleted when no transcript holds the
session any more.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Mapping

from connectcore.history import Field, Harness, SessionEntry, TranscriptFacts
from connectd.history.parsers import accumulator_for
from connectd.history.postings import Postings
from connectd.history.reader import FileResult, unpack_state
from connectd.history.report import IndexReport
from connectd.history.repos import RepoResolver
from connectd.history.rows import (
    ROW_COLUMNS,
    assemble,
    entry_values,
    other_fields,
    prompt_term_counts,
    stored_texts,
)
from connectd.history.schema import COLUMNS, Key


def rebuild_entries(
    db: sqlite3.Connection,
    keys: Iterable[Key],
    report: IndexReport,
    resolver: RepoResolver,
    post: Postings,
    fresh: Mapping[str, FileResult] | None = None,
) -> None:
    """Build each session's entry again from its transcripts (``fresh``: the ones just read)."""
    fresh = fresh or {}
    for harness, session_id in keys:
        report.changed.add((harness, session_id))
        facts, missing, read_now = _session_facts(db, harness, session_id, fresh)
        if not facts:
            report.entries_removed += delete_entry(db, harness, session_id, post)
            continue

        def previous_repo(key: Key = (harness, session_id)) -> str | None:
            prev = db.execute(
                "SELECT repo FROM entries WHERE harness=? AND session_id=?", (key[0].value, key[1])
            ).fetchone()
            return str(prev[0]) if prev is not None and prev[0] else None

        entry = assemble(
            facts,
            missing=missing,
            codex_title=_codex_title(db, session_id) if harness is Harness.CODEX else None,
            resolve=resolver,
            previous_repo=previous_repo,
        )
        prompt_terms = None
        if read_now is not None and read_now.facts is not None and read_now.facts.prompts == entry.prompts:
            prompt_terms = (read_now.prompt_words, read_now.prompt_terms)  # counted by the reader
        write_entry(db, entry, post, prompt_terms)
        report.entries_written += 1


def _session_facts(
    db: sqlite3.Connection, harness: Harness, session_id: str, fresh: Mapping[str, FileResult]
) -> tuple[list[TranscriptFacts], bool, FileResult | None]:
    """What every transcript of the session says of it; whether all of them are gone; and the one just
    read when the session has a single transcript."""
    rows = db.execute(
        "SELECT path, missing FROM files WHERE harness=? AND session_id=?",
        (harness.value, session_id),
    ).fetchall()
    facts: list[TranscriptFacts] = []
    missing = True
    read_now: FileResult | None = None
    for path, is_missing in rows:
        r = fresh.get(path)
        f = r.facts if r is not None else None
        if r is not None and len(rows) == 1:
            read_now = r
        if r is None:
            acc = accumulator_for(harness, path)
            acc.load_state(_saved_state(db, path))
            f = acc.facts()
        if f is not None and f.session_id == session_id:
            facts.append(f)
            missing = missing and bool(is_missing)
    return facts, missing, read_now


def _codex_title(db: sqlite3.Connection, session_id: str) -> str | None:
    t = db.execute("SELECT title FROM codex_titles WHERE session_id=?", (session_id,)).fetchone()
    return t[0] if t is not None else None


def _saved_state(db: sqlite3.Connection, path: str) -> dict[str, object]:
    row = db.execute("SELECT state FROM files WHERE path=?", (path,)).fetchone()
    return unpack_state(row[0]) if row is not None else {}


def delete_entry(db: sqlite3.Connection, harness: Harness, session_id: str, post: Postings) -> int:
    """Delete the session's entry and its postings; 1 if there was one, else 0."""
    old = db.execute(
        f"SELECT id, {', '.join(COLUMNS.values())} FROM entries WHERE harness=? AND session_id=?",
        (harness.value, session_id),
    ).fetchone()
    if old is None:
        return 0
    db.execute("DELETE FROM entries WHERE id=?", (old[0],))
    post.drop(old[0], old[1:])
    return 1


def write_entry(
    db: sqlite3.Connection,
    entry: SessionEntry,
    post: Postings,
    prompt_terms: tuple[int, bytes] | None = None,
) -> None:
    """Insert or update the entry; its postings are staged again only when its searchable text changed."""
    texts, stored = stored_texts(entry)
    if prompt_terms is None:
        prompt_terms = prompt_term_counts(texts[Field.PROMPTS])
    lengths, others = other_fields(texts)
    lengths[Field.PROMPTS] = prompt_terms[0]
    values = entry_values(entry, lengths, stored)
    old = None
    if not post.empty_at_start or entry.key in post.written:
        old = db.execute(
            f"SELECT id, {', '.join(COLUMNS.values())} FROM entries WHERE harness=? AND session_id=?",
            (entry.harness.value, entry.session_id),
        ).fetchone()
    post.written.add(entry.key)
    cols = ROW_COLUMNS
    updates = ", ".join(f"{c}=excluded.{c}" for c in cols[2:])
    cur = db.execute(
        f"INSERT INTO entries({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})"
        f" ON CONFLICT(harness, session_id) DO UPDATE SET {updates} RETURNING id",
        values,
    )
    doc = int(cur.fetchone()[0])
    if old is None:
        post.add(doc, prompt_terms[1], others)
    elif tuple(old[1:]) != tuple(stored[f] for f in Field):
        post.drop(old[0], old[1:])
        post.add(old[0], prompt_terms[1], others)
