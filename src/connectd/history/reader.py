"""Reading transcripts, in this process or in a worker per core.

:func:`read_transcript` is the whole of reading one file: stat it, decide whether the stored parser state
can be resumed (same inode, same first bytes, not shrunk), parse from there, and return what the index
stores (:class:`FileResult`). It touches no database, so a full build can run it in worker processes
(:class:`Readers`, one per core) while the index writes the results; small updates run it inline.
For a full build a reader also builds each session's entry row and its postings (:func:`read_rows`),
so the writer only inserts what it is handed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import multiprocessing
import os
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import orjson

from connectcore.history import Harness, TranscriptFacts
from connectd.history.parsers import (
    MAX_LINE_BYTES,
    Accumulator,
    ParseResult,
    Skip,
    SkipReason,
    accumulator_for,
    parse_file,
)
from connectd.history.repos import RepoResolver
from connectd.history.rows import (
    add_postings,
    assemble,
    entry_values,
    inverted,
    prompt_term_counts,
    stored_texts,
)

HEAD_BYTES = 4096
#: Below this many files to read, a pass reads them in this process (starting workers costs more).
PARALLEL_MIN_FILES = 200
#: Files per task sent to a worker.
CHUNK_FILES = 64
#: Files per task in a full build: each task's postings come back as one inverted chunk, and fewer,
#: larger chunks leave the writer fewer (word, chunk) rows to store.
ROW_CHUNK_FILES = 256


class Prior(NamedTuple):
    """What the index knew of a file before this pass (a ``files`` row without the state)."""

    size: int
    mtime_ns: int
    inode: int
    offset: int
    head: str
    head_len: int
    missing: int
    session_id: str | None


class Job(NamedTuple):
    harness: Harness
    path: str
    prior: Prior | None
    state: bytes | None  # the stored parser state, for a file that may be resumed
    max_line_bytes: int = MAX_LINE_BYTES


@dataclass
class FileResult:
    """One file read (``status`` "read"), found unchanged, vanished or unreadable."""

    harness: Harness
    path: str
    status: str  # "read", "unchanged", "vanished" (at its stat), "gone" (while read), "unreadable"
    size: int = 0
    mtime_ns: int = 0
    inode: int = 0
    offset: int = 0
    head: str = ""
    head_len: int = 0
    state: bytes = b""
    facts: TranscriptFacts | None = None
    skips: list[Skip] = field(default_factory=list)
    bytes_read: int = 0
    resumed: bool = False
    prompt_words: int = 0  # the prompts field's length in words
    prompt_terms: bytes = b"{}"  # its searchable words' counts, JSON (counted here, off the writer)
    # A full build (:func:`read_rows`): the entry's row (``rows.ROW_COLUMNS``) instead of ``facts``,
    # and on a chunk's last result the chunk's postings (``rows.Inverted``, JSON).
    row: tuple[Any, ...] | None = None
    postings: bytes = b""

    @property
    def session_id(self) -> str | None:
        if self.facts is not None:
            return self.facts.session_id
        return self.row[1] if self.row is not None else None


def pack_state(state: dict[str, Any]) -> bytes:
    """A parser's state as stored: compact JSON, zlib-compressed (it holds the file's prompts)."""
    try:
        raw = orjson.dumps(state)
    except TypeError:  # an integer orjson cannot hold: the reference encoder can
        raw = json.dumps(state, separators=(",", ":")).encode("utf-8")
    # A small window (states are a few KiB; zlib's default window costs more to set up than to use)
    # and the default memory level (a smaller one halves the speed at level 1, for a larger output).
    # Any zlib stream decompresses the same way.
    z = zlib.compressobj(1, zlib.DEFLATED, 12, 8)
    return z.compress(raw) + z.flush()


def unpack_state(blob: bytes) -> dict[str, Any]:
    state = orjson.loads(zlib.decompress(blob))
    if not isinstance(state, dict):
        raise ValueError("stored parser state is not an object")
    return state


def read_transcript(job: Job, *, count_prompts: bool = True) -> FileResult:
    """Read one transcript from where the last pass stopped (or from the start).

    ``count_prompts``: also count the prompts' words (what an incremental pass writes them from).
    Its steps: :func:`_stat` (the file as it is now), :func:`_unchanged` (nothing to read),
    :func:`_resume` (the stored parser state taken up where it stopped, or a start from the top),
    the parse, and :func:`_read_result` (what the index stores).
    """
    harness, path, prior, state, max_line_bytes = job
    st = _stat(harness, path)
    if isinstance(st, FileResult):
        return st
    if _unchanged(prior, st):
        return FileResult(harness, path, "unchanged")
    acc = accumulator_for(harness, path)
    head_len = min(st.st_size, HEAD_BYTES)
    try:
        offset = _resume(path, prior, state, st, acc)
        result = parse_file(path, acc, offset, max_line_bytes=max_line_bytes)
        head = _head_hash(path, head_len)
    except FileNotFoundError:  # gone while it was read: the index marks it missing
        return FileResult(harness, path, "gone", skips=[Skip(path, SkipReason.VANISHED)])
    except OSError:
        return FileResult(harness, path, "unreadable", skips=[Skip(path, SkipReason.UNREADABLE)])
    return _read_result(
        harness, path, st, acc, result, head=head, head_len=head_len, resumed=offset > 0, count_prompts=count_prompts
    )


def _stat(harness: Harness, path: str) -> os.stat_result | FileResult:
    """The file's ``stat``, or the result of a file that vanished or cannot be read."""
    try:
        return os.stat(path)
    except FileNotFoundError:
        return FileResult(harness, path, "vanished", skips=[Skip(path, SkipReason.VANISHED)])
    except OSError:
        return FileResult(harness, path, "unreadable", skips=[Skip(path, SkipReason.UNREADABLE)])


def _unchanged(prior: Prior | None, st: os.stat_result) -> bool:
    """The file is as the last pass left it (same size, modification time and inode, not missing)."""
    return (
        prior is not None
        and not prior.missing
        and (prior.size, prior.mtime_ns, prior.inode) == (st.st_size, st.st_mtime_ns, st.st_ino)
    )


def _resume(path: str, prior: Prior | None, state: bytes | None, st: os.stat_result, acc: Accumulator) -> int:
    """Where to parse from: the stored state loaded into ``acc`` and its offset when the file is the
    one it was read from (same inode, same first bytes, not shrunk, some of it read), else 0 (the
    start; an offset above 0 is a resumed read). Reads the file's head: raises its ``OSError``."""
    if (
        prior is not None
        and state is not None
        and prior.inode == st.st_ino
        and st.st_size >= prior.offset
        and prior.offset > 0
        and _head_hash(path, prior.head_len) == prior.head
    ):
        acc.load_state(unpack_state(state))
        return prior.offset
    return 0


def _read_result(
    harness: Harness, path: str, st: os.stat_result, acc: Accumulator, result: ParseResult, *, head: str, head_len: int,
    resumed: bool, count_prompts: bool,
) -> FileResult:
    """What the index stores of a file read: where it stopped, its head, the parser's state, the
    session's facts and (``count_prompts``) its prompts' words."""
    facts = acc.facts()
    words, terms = (0, b"{}")
    if facts is not None and count_prompts:
        words, terms = prompt_term_counts("\n\n".join(facts.prompts))  # as field_texts joins them
    return FileResult(
        harness,
        path,
        "read",
        size=st.st_size,
        mtime_ns=st.st_mtime_ns,
        inode=st.st_ino,
        offset=result.offset,
        head=head,
        head_len=head_len,
        state=pack_state(acc.to_state()),
        facts=facts,
        skips=result.skips,
        bytes_read=result.bytes_read,
        resumed=resumed,
        prompt_words=words,
        prompt_terms=terms,
    )


@dataclass(frozen=True)
class RowContext:
    """What a reader needs besides the transcript to build a session's entry (a full build)."""

    codex_titles: Mapping[str, str] = field(default_factory=dict)  # Codex's thread names, by session


def read_rows(
    jobs: Sequence[tuple[int, Job]], context: RowContext, resolve: Callable[[str], str | None]
) -> list[FileResult]:
    """Read whole transcripts (numbered: ``(doc, job)``) and build each one's entry row from it alone.

    Each result holds its entry's row (``rows.ROW_COLUMNS``), to be stored with id ``doc``; the last
    result also holds the postings of the whole chunk, inverted: ``{word: {doc: counts}}`` as JSON,
    docs in increasing order, counts as ``rows.add_postings`` gives them. A writer that stores chunks in
    order and each word's chunks in order thereby has every word's postings in key order without
    sorting them. A session with several transcripts gets one row per transcript here: the writer of
    a full build keeps the first and builds that session again from all of them
    (``HistoryIndex._rebuild``, as an incremental pass does).
    """
    results: list[FileResult] = []
    words = inverted()
    for doc, job in jobs:
        result = read_transcript(job, count_prompts=False)
        facts = result.facts
        if facts is not None:
            entry = assemble(
                [facts],
                missing=False,
                codex_title=context.codex_titles.get(facts.session_id),
                resolve=resolve,
                previous_repo=lambda: None,
            )
            texts, stored = stored_texts(entry)
            lengths = add_postings(texts, str(doc), words)
            result.row = tuple(entry_values(entry, lengths, stored))
            result.facts = None  # the row holds what the writer needs; the facts are not sent back
        results.append(result)
    if results:
        results[-1].postings = orjson.dumps(words)
    return results


_context: RowContext | None = None
_resolver: RepoResolver | None = None


def _init_rows(context: RowContext) -> None:
    global _context, _resolver
    _context, _resolver = context, RepoResolver()


def _read_chunk(jobs: list[Job]) -> list[FileResult]:
    return [read_transcript(j) for j in jobs]


def _read_rows_chunk(jobs: list[tuple[int, Job]]) -> list[FileResult]:
    assert _context is not None and _resolver is not None, "a row reader starts with _init_rows"
    return read_rows(jobs, _context, _resolver)


def _head_hash(path: str, length: int) -> str:
    with open(path, "rb") as f:
        return hashlib.sha1(f.read(length)).hexdigest()


def default_workers() -> int:
    """A worker per core this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


class Readers:
    """Reads many jobs, in order: inline for a few, in worker processes (one per core) for many."""

    def __init__(self, workers: int | None = None) -> None:
        self.workers = default_workers() if workers is None else workers

    def read(self, jobs: list[Job], rows: RowContext | None = None) -> Iterator[FileResult]:
        """Each job's result, in order. ``rows``: build entry rows and postings too (a full build: job
        ``i`` is document ``i + 1``; see :func:`read_rows`)."""
        if rows is not None:
            numbered = list(enumerate(jobs, 1))
            tasks: list[Any] = [
                numbered[i : i + ROW_CHUNK_FILES] for i in range(0, len(jobs), ROW_CHUNK_FILES)
            ]
        else:
            tasks = [jobs[i : i + CHUNK_FILES] for i in range(0, len(jobs), CHUNK_FILES)]
        if self.workers < 2 or len(jobs) < PARALLEL_MIN_FILES:
            if rows is None:
                yield from (read_transcript(j) for j in jobs)
            else:
                resolver = RepoResolver()
                for task in tasks:
                    yield from read_rows(task, rows, resolver)
            return
        # "spawn": the daemon runs threads; a forked child would inherit their locks.
        ctx = multiprocessing.get_context("spawn")
        init: dict[str, Any] = {} if rows is None else {"initializer": _init_rows, "initargs": (rows,)}
        read: Callable[[Any], list[FileResult]] = _read_chunk if rows is None else _read_rows_chunk
        with ProcessPoolExecutor(max_workers=self.workers, mp_context=ctx, **init) as pool:
            window = 4 * self.workers  # bounded look-ahead: results wait in memory at most this deep
            pending: list[Future[list[FileResult]]] = []
            it = iter(tasks)
            try:
                for task in _take(it, window):
                    pending.append(pool.submit(read, task))
                while pending:
                    done = pending.pop(0).result()
                    for task in _take(it, 1):
                        pending.append(pool.submit(read, task))
                    yield from done
            finally:
                for f in pending:
                    with contextlib.suppress(Exception):
                        f.cancel()


def _take(it: Iterator[Any], n: int) -> Iterable[Any]:
    for _ in range(n):
        try:
            yield next(it)
        except StopIteration:
            return
