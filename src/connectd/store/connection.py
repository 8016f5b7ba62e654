"""The store's one SQLite connection, its lock, and the checks every record's writer shares.

:class:`Connection` is the base of :class:`connectd.store.store.Store` and of each part that keeps one
kind of record (:mod:`connectd.store.messages`, ``grants``, ``cards``, ``acts``, ``restarts``,
``audit``, ``owner``, ``panes``, ``pair_records``, ``remote_messages``): every part reads and writes through the same connection, behind the
same lock, in the same transactions (:meth:`Connection._tx`). Opening the file and its schema are
:meth:`connectd.store.store.Store.open`'s.
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from connectcore.effects import Persist
from connectd.store import codec

_TOKEN_HASH_RE = re.compile(r"[0-9a-f]{64}")


class StoreError(Exception):
    """The store refused (bad effect, newer schema, unusable file); nothing was written."""


class StoreUnavailable(StoreError):
    """The data directory cannot be written now (full, read-only, an I/O error): nothing was written,
    and writes work again once it can be. The edges answer it as ``store_unavailable`` (503 on the
    owner API, the tool's error on ``/mcp``) with these words."""

    reason = "store_unavailable"

    def __init__(self, path: Path, cause: Exception) -> None:
        super().__init__(
            f"the daemon could not write its records to {path} ({cause}); nothing was changed. "
            "It works again once its data directory has free space and is writable"
        )


# What a write to the store can fail with (the runner then rolls the step back: it did not happen).
STORE_ERRORS: tuple[type[Exception], ...] = (StoreError, sqlite3.Error, OSError)


class Connection:
    """One connection, owned by the store, guarded by a lock: call it from any one thread at a time."""

    def __init__(self, path: Path, db: sqlite3.Connection) -> None:
        self.path = path
        self._db = db
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise StoreUnavailable(self.path, exc) from exc
            try:
                yield self._db
                self._db.execute("COMMIT")  # deferred foreign keys are checked here
            except BaseException as exc:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                if isinstance(exc, sqlite3.OperationalError):  # full, read-only, I/O error, locked
                    raise StoreUnavailable(self.path, exc) from exc
                if isinstance(exc, sqlite3.Error | codec.CodecError):
                    raise StoreError(f"nothing written: {exc}") from exc
                raise

    def _rows(self, sql: str, args: Iterable[Any] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            try:
                return self._db.execute(sql, tuple(args)).fetchall()
            except sqlite3.Error as exc:
                raise StoreError(f"{self.path}: {exc}") from exc

    def _upsert(self, table: str, **cols: Any) -> None:
        names = ", ".join(cols)
        marks = ", ".join("?" for _ in cols)
        self._db.execute(f"INSERT OR REPLACE INTO {table} ({names}) VALUES ({marks})", tuple(cols.values()))

    def _delete(self, table: str, where: str, key: tuple[Any, ...]) -> None:
        self._db.execute(f"DELETE FROM {table} WHERE {where}", key)


def key_of(p: Persist, size: int) -> tuple[Any, ...]:
    """A deletion's key, checked to have ``size`` parts."""
    if len(p.key) != size:
        raise StoreError(f"{p.kind} key must have {size} part(s), got {p.key!r}")
    return tuple(p.key)


def record_of(p: Persist, cls: type[Any], expected_key: tuple[Any, ...]) -> Any:
    """A write's record, checked to be a ``cls`` whose key is the ``Persist``'s."""
    if not isinstance(p.record, cls):
        raise StoreError(f"{p.kind} record must be a {cls.__name__}, got {type(p.record).__name__}")
    if tuple(p.key) != expected_key:
        raise StoreError(f"{p.kind} key {p.key!r} does not match its record's {expected_key!r}")
    return p.record


def check_hash(value: str, what: str) -> None:
    """Never a plain token: ``value`` must be a :func:`connectd.daemon.ids.hash_token` value."""
    if not isinstance(value, str) or not _TOKEN_HASH_RE.fullmatch(value):
        raise StoreError(f"{what} must be stored as its hash (64 lowercase hex digits, see hash_token), never plain")
