"""Reading transcripts, in this process or in a worker per core.

:func:`read_transcript` is the whole of reading one file: stat it, decide whether the stored parser state
can be resumed (same inode, same first bytes, not shrunk), parse from there, and return what the index
stores (:class:`FileResult`). It touches no database, so a full build can run it in worker processes
(:class:`Readers`, one per core) while the index writes the results; small updates run it inline.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import multiprocessing
import os
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import orjson

from connectcore.history import TERM_MAX_CHARS, Harness, TranscriptFacts, tokens
from connectd.history.parsers import MAX_LINE_BYTES, Skip, SkipReason, accumulator_for, parse_file

HEAD_BYTES = 4096
#: Below this many files to read, a pass reads them in this process (starting workers costs more).
PARALLEL_MIN_FILES = 200
#: Files per task sent to a worker.
CHUNK_FILES = 64


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

    @property
    def session_id(self) -> str | None:
        return self.facts.session_id if self.facts is not None else None


def pack_state(state: dict[str, Any]) -> bytes:
    """A parser's state as stored: compact JSON, zlib-compressed (it holds the file's prompts)."""
    try:
        raw = orjson.dumps(state)
    except TypeError:  # an integer orjson cannot hold: the reference encoder can
        raw = json.dumps(state, separators=(",", ":")).encode("utf-8")
    # A small window and memory level: states are a few KiB, and zlib's defaults cost more to set up
    # (a 256 KiB state per call) than to compress them. Any zlib stream decompresses the same way.
    z = zlib.compressobj(1, zlib.DEFLATED, 12, 1)
    return z.compress(raw) + z.flush()


def unpack_state(blob: bytes) -> dict[str, Any]:
    state = orjson.loads(zlib.decompress(blob))
    if not isinstance(state, dict):
        raise ValueError("stored parser state is not an object")
    return state


def prompt_term_counts(text: str) -> tuple[int, bytes]:
    """The prompts field's length in words and its searchable words' counts (JSON, for the index).

    Words longer than ``TERM_MAX_CHARS`` are never a query term, so they get no posting.
    """
    words = tokens(text)
    return len(words), orjson.dumps({w: c for w, c in Counter(words).items() if len(w) <= TERM_MAX_CHARS})


def read_transcript(job: Job) -> FileResult:
    """Read one transcript from where the last pass stopped (or from the start)."""
    harness, path, prior, state, max_line_bytes = job
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return FileResult(harness, path, "vanished", skips=[Skip(path, SkipReason.VANISHED)])
    except OSError:
        return FileResult(harness, path, "unreadable", skips=[Skip(path, SkipReason.UNREADABLE)])
    if (
        prior is not None
        and not prior.missing
        and (prior.size, prior.mtime_ns, prior.inode) == (st.st_size, st.st_mtime_ns, st.st_ino)
    ):
        return FileResult(harness, path, "unchanged")
    acc = accumulator_for(harness, path)
    offset = 0
    resumed = False
    head_len = min(st.st_size, HEAD_BYTES)
    try:
        if (
            prior is not None
            and state is not None
            and prior.inode == st.st_ino
            and st.st_size >= prior.offset
            and prior.offset > 0
            and _head_hash(path, prior.head_len) == prior.head
        ):
            acc.load_state(unpack_state(state))
            offset = prior.offset
            resumed = True
        result = parse_file(path, acc, offset, max_line_bytes=max_line_bytes)
        head = _head_hash(path, head_len)
    except FileNotFoundError:  # gone while it was read: the index marks it missing
        return FileResult(harness, path, "gone", skips=[Skip(path, SkipReason.VANISHED)])
    except OSError:
        return FileResult(harness, path, "unreadable", skips=[Skip(path, SkipReason.UNREADABLE)])
    facts = acc.facts()
    words, terms = (0, b"{}")
    if facts is not None:
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


def _read_chunk(jobs: list[Job]) -> list[FileResult]:
    return [read_transcript(j) for j in jobs]


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

    def read(self, jobs: list[Job]) -> Iterator[FileResult]:
        if self.workers < 2 or len(jobs) < PARALLEL_MIN_FILES:
            yield from (read_transcript(j) for j in jobs)
            return
        # "spawn": the daemon runs threads; a forked child would inherit their locks.
        ctx = multiprocessing.get_context("spawn")
        chunks = [jobs[i : i + CHUNK_FILES] for i in range(0, len(jobs), CHUNK_FILES)]
        with ProcessPoolExecutor(max_workers=self.workers, mp_context=ctx) as pool:
            window = 4 * self.workers  # bounded look-ahead: results wait in memory at most this deep
            pending: list[Future[list[FileResult]]] = []
            it = iter(chunks)
            try:
                for chunk in _take(it, window):
                    pending.append(pool.submit(_read_chunk, chunk))
                while pending:
                    done = pending.pop(0).result()
                    for chunk in _take(it, 1):
                        pending.append(pool.submit(_read_chunk, chunk))
                    yield from done
            finally:
                for f in pending:
                    with contextlib.suppress(Exception):
                        f.cancel()


def _take(it: Iterator[list[Job]], n: int) -> Iterable[list[Job]]:
    for _ in range(n):
        try:
            yield next(it)
        except StopIteration:
            return
