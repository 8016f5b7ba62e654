"""The history index's query side: entries by key, search candidates scored in SQL, listings.

Read-only; :class:`~connectd.history.index.HistoryIndex` holds the connection and its lock. The
listings are what the service and expunge need (a session's files, its subagents, recent directories).
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from connectcore.history import (
    BM25_K1,
    FIELD_B,
    FIELD_WEIGHTS,
    RECENCY_FLOOR,
    RECENCY_HALF_LIFE_S,
    Candidate,
    CorpusStats,
    Entrypoint,
    Field,
    Harness,
    SearchScope,
    SessionEntry,
    idf,
)
from connectd.history.rows import decode_prompts
from connectd.history.schema import ENTRY_SQL, LENGTHS, TFS, marks


class IndexQueries:
    """The reads of one open ``history.db``: each holds the connection lock for its statements."""

    _db: sqlite3.Connection
    _lock: threading.RLock

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
            prompts=decode_prompts(prompts),
        )

    def get(self, harness: Harness, session_id: str, *, with_prompts: bool = False) -> SessionEntry | None:
        prompts_col = "f_prompts" if with_prompts else "''"
        with self._lock:
            r = self._db.execute(
                f"SELECT {ENTRY_SQL}, {prompts_col} FROM entries WHERE harness=? AND session_id=?",
                (harness.value, session_id),
            ).fetchone()
        return None if r is None else self._entry_from_row(r, r[14])

    def entries(self, where: str = "", args: Sequence[Any] = ()) -> list[SessionEntry]:
        with self._lock:
            rows = self._db.execute(f"SELECT {ENTRY_SQL} FROM entries {where}", args).fetchall()
        return [self._entry_from_row(r) for r in rows]

    def count(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT count(*) FROM entries").fetchone()[0])

    def stats(self, terms: Sequence[str]) -> CorpusStats:
        """Corpus statistics over the whole index (BM25's N, average field lengths, term df)."""
        with self._lock:
            n, *sums = self._db.execute(
                f"SELECT n, {', '.join(f's_{f.value}' for f in Field)} FROM totals WHERE id=1"
            ).fetchone()
            df = (
                dict(
                    self._db.execute(
                        f"SELECT term, count(*) FROM postings WHERE term IN ({marks(len(terms))}) GROUP BY term",
                        list(terms),
                    )
                )
                if terms
                else {}
            )
        return CorpusStats(
            documents=int(n),
            average_length={f: (s / n if n else 0.0) for f, s in zip(Field, sums, strict=True)},
            document_frequency={str(k): int(v) for k, v in df.items()},
        )

    def _scope_sql(self, scope: SearchScope) -> tuple[list[str], list[Any]] | None:
        eps = scope.entrypoints()
        where = [f"e.entrypoint IN ({marks(len(eps))})"]
        args: list[Any] = [e.value for e in eps]
        if scope.repos is not None:
            if not scope.repos:
                return None
            where.append(f"e.repo IN ({marks(len(scope.repos))})")
            args += sorted(scope.repos)
        return where, args

    def _present(self, terms: Sequence[str]) -> dict[str, str]:
        """The query terms some entry holds (as a mapping term -> term, what postings rows carry)."""
        return {
            str(r[0]): str(r[0])
            for r in self._db.execute(
                f"SELECT DISTINCT term FROM postings WHERE term IN ({marks(len(terms))})", list(terms)
            )
        }

    def candidates(self, terms: Sequence[str], scope: SearchScope) -> list[Candidate]:
        """Every entry the scope admits that holds a query term, with per-field term frequencies.

        The scope (repos, entrypoints) is part of the SQL, so no admitted match is ever cut before
        ranking. The entries are thin (identity, repo, cwd, entrypoint, last active): enough to rank;
        :meth:`get` gives the whole entry.
        """
        if not terms:
            return []
        sql = self._scope_sql(scope)
        if sql is None:
            return []
        where, args = sql
        with self._lock:
            ids = self._present(terms)
            if not ids:
                return []
            docs = [
                r[0]
                for r in self._db.execute(
                    f"SELECT DISTINCT p.doc FROM postings AS p JOIN entries AS e ON e.id = p.doc"
                    f" WHERE p.term IN ({marks(len(ids))}) AND {' AND '.join(where)}",
                    [*ids, *args],
                )
            ]
            return self._thin_candidates(ids, docs)

    def _thin_candidates(self, ids: Mapping[str, str], docs: Sequence[int]) -> list[Candidate]:
        """Candidates for ``docs``: thin entries (what ranking needs) and the query terms' frequencies."""
        tf: dict[int, dict[tuple[Field, str], int]] = {}
        entries: dict[int, tuple[SessionEntry, dict[Field, int]]] = {}
        for start in range(0, len(docs), 500):
            chunk = list(docs[start : start + 500])
            for doc, term, *counts in self._db.execute(
                f"SELECT doc, term, {', '.join(TFS)} FROM postings"
                f" WHERE term IN ({marks(len(ids))}) AND doc IN ({marks(len(chunk))})",
                [*ids, *chunk],
            ):
                freq = tf.setdefault(doc, {})
                for f, c in zip(Field, counts, strict=True):
                    if c:
                        freq[(f, ids[term])] = c
            for r in self._db.execute(
                "SELECT id, harness, session_id, repo, cwd, last_active, entrypoint,"
                f" {', '.join(LENGTHS.values())} FROM entries WHERE id IN ({marks(len(chunk))})",
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
            for doc in docs
            if doc in entries and doc in tf
        ]

    def top_candidates(
        self, terms: Sequence[str], scope: SearchScope, stats: CorpusStats, *, now: float, limit: int
    ) -> list[Candidate]:
        """The candidates that can be among the best ``limit``: a superset of the true top.

        SQLite scores every admitted candidate with the same BM25F x recency formula as
        ``connectcore.history.rank`` and sorts them; the rows whose score is within a rounding margin of
        the ``limit``-th come back as candidates, and ``rank`` orders those exactly. A document outside
        them scores below the ``limit``-th by far more than floating-point noise, so the ranking is the
        same as ranking every candidate.
        """
        if not terms:
            return []
        sql = self._scope_sql(scope)
        if sql is None:
            return []
        where, args = sql
        with self._lock:
            ids = self._present(terms)
            if not ids:
                return []
            query, qargs = _score_sql(ids, stats, where)
            docs = _within_margin(self._db.execute(query, [*qargs, now, *args]), limit)
            return self._thin_candidates(ids, docs)

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

    def skipped_files(self) -> list[tuple[str, int, str | None]]:
        with self._lock:
            return [
                (r[0], r[1], r[2])
                for r in self._db.execute("SELECT path, skipped, last_skip FROM files WHERE skipped > 0")
            ]


def _score_sql(ids: Mapping[str, str], stats: CorpusStats, where: Sequence[str]) -> tuple[str, list[Any]]:
    """The query that scores every admitted document holding a query term, best first, with the same
    BM25F x recency formula as ``connectcore.history.rank``; and its leading parameters (each term and
    its idf). The caller appends ``now`` and the scope's parameters."""
    values = []
    qargs: list[Any] = []
    for tid, term in ids.items():
        df = max(stats.document_frequency.get(term, 1), 1)
        values.append("(?, ?)")
        qargs += [tid, idf(max(stats.documents, df), df)]
    parts = []
    for i, f in enumerate(Field):
        avg = stats.average_length.get(f, 0.0) or 1.0
        b = FIELD_B[f]
        parts.append(
            f"{FIELD_WEIGHTS[f]!r} * p.{TFS[i]} / max({1.0 - b!r} + {b!r} * e.{LENGTHS[f]} / {avg!r}, 1e-9)"
        )
    weighted = " + ".join(parts)
    recency = (
        f"CASE WHEN e.last_active IS NULL THEN {RECENCY_FLOOR!r} ELSE {RECENCY_FLOOR!r} + "
        f"{1.0 - RECENCY_FLOOR!r} * pow(0.5, max(0.0, ? - e.last_active) / {RECENCY_HALF_LIFE_S!r}) END"
    )
    query = (
        f"WITH q(tid, idf) AS (VALUES {', '.join(values)}) "
        f"SELECT doc, sum(idf * w / ({BM25_K1!r} + w)) * rec AS s FROM ("
        f" SELECT p.doc AS doc, q.idf AS idf, ({weighted}) AS w, {recency} AS rec"
        " FROM q JOIN postings AS p ON p.term = q.tid"
        " JOIN entries AS e INDEXED BY entries_rank ON e.id = p.doc"
        f" WHERE {' AND '.join(where)}"
        ") GROUP BY doc ORDER BY s DESC"
    )
    return query, qargs


def _within_margin(scored: Iterable[tuple[int, float]], limit: int) -> list[int]:
    """The documents, best first, down to the ``limit``-th and any within a rounding margin of it."""
    docs: list[int] = []
    bar = None
    for doc, score in scored:
        if bar is not None and score < bar:
            break
        docs.append(doc)
        if len(docs) == limit:
            bar = score * (1.0 - 1e-9)
    return docs
