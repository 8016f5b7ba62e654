"""Writing the history index's inverted index (``postings``).

Changes are staged per document and written by SQLite from JSON in a few sorted statements.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

import orjson

from connectcore.history import TERM_MAX_CHARS, tokens
from connectd.history.rows import OTHER_FIELDS
from connectd.history.schema import TFS, Key


def terms_of(texts: Sequence[str]) -> list[str]:
    return sorted({w for text in texts for w in tokens(text) if len(w) <= TERM_MAX_CHARS})


class Postings:
    """Changes to the inverted index, staged and written by SQLite from JSON in a few sorted statements.

    A large pass stages many documents before writing them (each write is a pass over the postings
    B-tree, so fewer, larger writes are much cheaper); the threshold grows with the index. Searches
    see a document's entry at once and its postings when they are written (at the latest when the
    pass ends). Methods run inside the caller's transaction, under the connection lock.
    """

    FLUSH_MIN_DOCS = 2000

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db
        self.staged: dict[int, tuple[bytes, bytes]] = {}
        # An index with no entry when the pass starts: an entry not written in this pass does not exist.
        self.empty_at_start = db.execute("SELECT n FROM totals WHERE id=1").fetchone()[0] == 0
        self.written: set[Key] = set()

    @property
    def pending(self) -> int:
        return len(self.staged)

    def drop(self, doc: int, old_texts: Sequence[str]) -> None:
        """Delete document ``doc``'s postings, found from the text it was indexed with."""
        self.db.execute(
            "DELETE FROM postings WHERE doc=? AND term IN (SELECT value FROM json_each(?))",
            (doc, orjson.dumps(terms_of(old_texts))),
        )
        self.staged.pop(doc, None)

    def add(self, doc: int, prompts: bytes, others: bytes) -> None:
        self.staged[doc] = (prompts, others)

    def due(self) -> bool:
        if self.pending < self.FLUSH_MIN_DOCS:
            return False
        total = self.db.execute("SELECT n FROM totals WHERE id=1").fetchone()[0]
        return self.pending >= max(self.FLUSH_MIN_DOCS, int(total) // 2)

    def flush(self) -> None:
        if not self.staged:
            return
        db = self.db
        db.execute(STAGE)
        db.execute("DELETE FROM temp.stage")
        db.executemany(
            "INSERT INTO temp.stage(doc, prompts, others) VALUES (?,?,?)",
            [(doc, p, o) for doc, (p, o) in self.staged.items()],
        )
        for statement in FLUSH:
            db.execute(statement)
        db.execute("DELETE FROM temp.stage")
        self.staged = {}


STAGE = (
    "CREATE TEMP TABLE IF NOT EXISTS stage(doc INTEGER NOT NULL, prompts BLOB NOT NULL, others BLOB NOT NULL)"
)
#: The staged documents' postings in key order: the prompts' words (most rows), then the other fields'
#: words merged into them.
FLUSH = (
    f"INSERT OR REPLACE INTO postings(term, doc, {', '.join(TFS)})"
    f" SELECT j.key, s.doc, {', '.join('0' for _ in TFS[:-1])}, j.value"
    " FROM temp.stage AS s, json_each(s.prompts) AS j ORDER BY 1, 2",
    f"INSERT INTO postings(term, doc, {', '.join(TFS)})"
    f" SELECT j.key, s.doc, {', '.join(f'j.value ->> {i}' for i in range(len(OTHER_FIELDS)))}, 0"
    " FROM temp.stage AS s, json_each(s.others) AS j WHERE true ORDER BY 1, 2"
    f" ON CONFLICT(term, doc) DO UPDATE SET {', '.join(f'{c} = excluded.{c}' for c in TFS[:-1])}",
)
