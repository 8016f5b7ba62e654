"""The store: one SQLite file that makes the core's decisions durable.

``connect.db`` in the data directory (0700; the database and its ``-wal``/``-shm`` files 0600), WAL
mode with ``synchronous=FULL``, foreign keys on. Every table has the typed columns the daemon queries
on plus, for the core's records, a ``body`` column with the whole record as JSON (:mod:`connectd.store.codec`).

Rules:

- Durable first. :meth:`Store.apply` writes every :class:`Persist` and :class:`Audit` of one step in
  one transaction, in order, and returns only once it is committed (fsynced): the engine calls it
  before it runs any later effect, so a message and its id are committed before the call answers
  ``queued``, and "typing started" is committed before the first byte is pasted.
- All or nothing. A bad effect (an unknown ``Persist`` kind, a key that does not match its record, a
  plain token where a hash belongs) raises :class:`StoreError` naming it, and nothing of that step is
  written.
- Never a plain token. Token columns hold only :func:`hash_token` values (64 lowercase hex digits);
  anything else is refused.
- History stays. A message whose id hour ended is not loaded into the hub but stays in the table, so
  its outcome can still be asked for. A message that never reached its outcome is loaded whatever its
  age, so the hub's ``Recover`` records it (typing in flight: unconfirmed; past its hour: expired).
- Numbered migrations (:data:`MIGRATIONS`) run at open, each in its own transaction, the version in
  ``PRAGMA user_version``. A database from a newer connectd is refused untouched: a downgrade would
  destroy data.

One connection, owned by the store, guarded by a lock: call it from any one thread at a time (the
daemon calls it directly or through ``anyio.to_thread``).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sqlite3
import stat
import threading
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from connectcore import grants, hub
from connectcore.consent import Card, CardState
from connectcore.control import ACT_TABLE, Act
from connectcore.delivery import DEFAULT_LIMITS, FINAL, Limits, Message
from connectcore.effects import Audit, Effect, Persist
from connectcore.grants import Preset, Principal, Scope, TokenRecord
from connectcore.restart import FINAL as RESTART_FINAL
from connectcore.restart import RestartRecord
from connectd.daemon.ids import (
    hash_token as hash_token,  # the one hash a token is kept as (SHA-256, 64 lowercase hex)
)
from connectd.store import codec

DB_NAME = "connect.db"
_TOKEN_HASH_RE = re.compile(r"[0-9a-f]{64}")
_FINAL_STATES = tuple(sorted(s.value for s in FINAL))
_CLOSED_STEPS = tuple(sorted(s.value for s in RESTART_FINAL))

# --- schema -----------------------------------------------------------------------------------------

_V1 = """
CREATE TABLE principals (
    id TEXT PRIMARY KEY,
    harness TEXT NOT NULL,
    pane_id TEXT NOT NULL,
    pid INTEGER NOT NULL,
    incarnation TEXT NOT NULL,
    session_harness TEXT,
    session_id TEXT,
    control INTEGER NOT NULL,
    merged_into TEXT REFERENCES principals(id) DEFERRABLE INITIALLY DEFERRED,
    created_at REAL NOT NULL,
    body TEXT NOT NULL CHECK (json_valid(body))
) STRICT;
CREATE INDEX principals_session ON principals(session_harness, session_id);
CREATE INDEX principals_pane ON principals(pane_id);

CREATE TABLE tokens (
    token_hash TEXT PRIMARY KEY CHECK (length(token_hash) = 64),
    principal TEXT NOT NULL REFERENCES principals(id) DEFERRABLE INITIALLY DEFERRED,
    incarnation TEXT NOT NULL,
    pane_id TEXT NOT NULL,
    pid INTEGER NOT NULL,
    state TEXT NOT NULL,
    issued_at REAL NOT NULL,
    body TEXT NOT NULL CHECK (json_valid(body))
) STRICT;
CREATE INDEX tokens_principal ON tokens(principal);
CREATE INDEX tokens_incarnation ON tokens(incarnation);

CREATE TABLE grants (
    grant_key TEXT PRIMARY KEY,            -- the JSON of the core's key tuple
    kind TEXT NOT NULL CHECK (kind IN ('session', 'principal')),
    harness TEXT,                          -- kind 'session'
    session_id TEXT,                       -- kind 'session'
    principal TEXT,                        -- kind 'principal'
    scopes TEXT NOT NULL,                  -- sorted, comma separated; '' is Off
    body TEXT NOT NULL CHECK (json_valid(body))
) STRICT;
CREATE INDEX grants_session ON grants(harness, session_id);

CREATE TABLE messages (
    ref TEXT PRIMARY KEY,                  -- the daemon's fresh ref: one row per admitted message
    sender TEXT NOT NULL REFERENCES principals(id) DEFERRABLE INITIALLY DEFERRED,
    message_id TEXT NOT NULL,              -- the sender's id: unique per sender within its hour
    recipient_pane TEXT NOT NULL,
    recipient_incarnation TEXT NOT NULL,
    recipient_principal TEXT,
    state TEXT NOT NULL,
    created_at REAL NOT NULL,
    expires_at REAL NOT NULL,
    final_at REAL,
    body TEXT NOT NULL CHECK (json_valid(body))
) STRICT;
CREATE INDEX messages_key ON messages(sender, message_id, created_at);
CREATE INDEX messages_recipient ON messages(recipient_principal, created_at);
CREATE INDEX messages_pane ON messages(recipient_pane, created_at);
CREATE INDEX messages_live ON messages(expires_at, state);

CREATE TABLE cards (
    id TEXT PRIMARY KEY,
    message_sender TEXT NOT NULL REFERENCES principals(id) DEFERRABLE INITIALLY DEFERRED,
    message_id TEXT NOT NULL,
    recipient_pane TEXT NOT NULL,
    recipient_incarnation TEXT NOT NULL,
    state TEXT NOT NULL,
    created_at REAL NOT NULL,
    expires_at REAL NOT NULL,
    body TEXT NOT NULL CHECK (json_valid(body))
) STRICT;
CREATE INDEX cards_message ON cards(message_sender, message_id);
CREATE INDEX cards_state ON cards(state);

CREATE TABLE pairs (
    sender TEXT NOT NULL REFERENCES principals(id) DEFERRABLE INITIALLY DEFERRED,
    incarnation TEXT NOT NULL,             -- the recipient's incarnation token
    PRIMARY KEY (sender, incarnation)
) STRICT;

CREATE TABLE restarts (
    restart_id TEXT PRIMARY KEY,
    pane_id TEXT NOT NULL,
    incarnation TEXT NOT NULL,
    step TEXT NOT NULL,
    outcome TEXT,
    updated_at REAL NOT NULL,
    body TEXT NOT NULL CHECK (json_valid(body))
) STRICT;
CREATE INDEX restarts_step ON restarts(step);

CREATE TABLE audit (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    actor TEXT NOT NULL,
    action TEXT NOT NULL,
    scope TEXT,
    target TEXT,
    outcome TEXT NOT NULL,
    message_id TEXT,
    detail TEXT NOT NULL
) STRICT;
CREATE INDEX audit_at ON audit(at);
CREATE INDEX audit_actor ON audit(actor, id);

CREATE TABLE owner (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    token_hash TEXT NOT NULL CHECK (length(token_hash) = 64),
    tunnel_secret_hash TEXT CHECK (tunnel_secret_hash IS NULL OR length(tunnel_secret_hash) = 64),
    created_at REAL NOT NULL
) STRICT;

CREATE TABLE launches (
    pane_id TEXT NOT NULL,
    incarnation TEXT NOT NULL,
    launcher TEXT NOT NULL,
    harness TEXT NOT NULL,
    session_id TEXT,
    cwd TEXT NOT NULL,
    argv TEXT NOT NULL CHECK (json_valid(argv)),
    started_at REAL NOT NULL,
    PRIMARY KEY (pane_id, incarnation)
) STRICT;

CREATE TABLE bindings (
    pane_id TEXT PRIMARY KEY,
    harness TEXT NOT NULL,
    session_id TEXT NOT NULL,
    cwd TEXT,
    updated_at REAL NOT NULL
) STRICT;
"""

_V2 = """
CREATE TABLE export_cursors (
    name TEXT PRIMARY KEY,                 -- one per destination, e.g. 'otlp:http://127.0.0.1:4318/v1/logs'
    audit_id INTEGER NOT NULL,             -- every audit record with id <= this one was accepted there
    updated_at REAL NOT NULL
) STRICT;
"""

_V3 = """
CREATE TABLE acts (
    id TEXT PRIMARY KEY,
    principal TEXT NOT NULL,               -- control's principal
    tool TEXT NOT NULL,
    pane_id TEXT NOT NULL,                 -- '' for an act that opens a window
    state TEXT NOT NULL,
    created_at REAL NOT NULL,
    final_at REAL,
    body TEXT NOT NULL CHECK (json_valid(body))
) STRICT;
CREATE INDEX acts_state ON acts(state);
"""

_V4 = """
CREATE TABLE releases (
    incarnation TEXT PRIMARY KEY,          -- the pane incarnation (its token key); never a token
    harness TEXT NOT NULL,
    release TEXT NOT NULL,                 -- what its banner or its program named (fixed while it lives)
    learned_at REAL NOT NULL
) STRICT;
"""

MIGRATIONS: list[str] = [_V1, _V2, _V3, _V4]
"""Migration N is ``MIGRATIONS[N - 1]``; append, never edit one that has shipped."""


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


# --- rows -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AuditRow:
    id: int
    at: float
    actor: str
    action: str
    outcome: str
    scope: str | None
    target: str | None
    message_id: str | None
    detail: str


MessageCursor = tuple[float, str]
"""A message's place in the list: (created_at, ref)."""


def message_cursor(message: Message) -> MessageCursor:
    return (message.created_at, message.ref)


@dataclass(frozen=True)
class LaunchRow:
    """Which launcher started which pane incarnation (for restart-to-connect and restore)."""

    pane_id: str
    incarnation: str
    launcher: str
    harness: str
    session_id: str | None
    cwd: str
    argv: tuple[str, ...]
    started_at: float


@dataclass(frozen=True)
class BindingRow:
    """The last agent session known in a pane (for restore after a lost tmux server)."""

    pane_id: str
    harness: str
    session_id: str
    cwd: str | None
    updated_at: float


# --- the store --------------------------------------------------------------------------------------


class Store:
    def __init__(self, path: Path, db: sqlite3.Connection) -> None:
        self.path = path
        self._db = db
        self._lock = threading.Lock()
        self.schema_version = len(MIGRATIONS)
        self._writers: dict[str, Callable[[Persist], None]] = {
            "principal": self._put_principal,
            "token": self._put_token,
            "grant": self._put_grant,
            "message": self._put_message,
            "card": self._put_card,
            "pairs": self._put_pairs,
            "restart": self._put_restart,
            "act": self._put_act,
        }
        #: Called with each committed Audit, after the commit.
        self.audit_listeners: list[Callable[[Audit], None]] = []

    @classmethod
    def open(cls, data_dir: Path) -> Store:
        """Open (creating if missing) ``data_dir/connect.db`` and bring its schema up to date."""
        data_dir = Path(data_dir)
        data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(data_dir, 0o700)
        path = data_dir / DB_NAME
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise StoreError(f"cannot open {path}: {exc}") from exc
        os.close(fd)
        db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=10.0)
        try:
            _check_version(db, path)
            _private(path)
            mode = db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if mode != "wal":
                raise StoreError(f"{path}: could not switch to WAL mode (got {mode!r})")
            db.execute("PRAGMA synchronous=FULL")
            db.execute("PRAGMA foreign_keys=ON")
            _migrate(db, path)
            _private(path)
        except sqlite3.DatabaseError as exc:
            db.close()
            raise StoreError(f"{path} is not a usable connectd database: {exc}") from exc
        except BaseException:
            db.close()
            raise
        return cls(path, db)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

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

    # -- writes ----------------------------------------------------------------------------------

    def apply(self, effects: Iterable[Effect]) -> None:
        """Write every Persist and Audit in ``effects`` in one transaction, in order; other effects
        are not the store's. Returns once committed; on any refusal nothing is written."""
        mine = [e for e in effects if isinstance(e, Persist | Audit)]
        if not mine:
            return  # a step that changed nothing durable: no transaction, no fsync
        with self._tx():
            for effect in mine:
                if isinstance(effect, Persist):
                    writer = self._writers.get(effect.kind)
                    if writer is None:
                        known = ", ".join(sorted(self._writers))
                        raise StoreError(f"unknown Persist kind {effect.kind!r} (known: {known}); nothing written")
                    writer(effect)
                elif isinstance(effect, Audit):
                    self._db.execute(
                        "INSERT INTO audit (at, actor, action, scope, target, outcome, message_id, detail)"
                        " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                        (effect.at, effect.actor, effect.action, effect.scope, effect.target, effect.outcome,
                         effect.message_id, effect.detail),
                    )
        for listener in self.audit_listeners:
            for effect in mine:
                if isinstance(effect, Audit):
                    listener(effect)

    def _put_principal(self, p: Persist) -> None:
        if p.record is None:
            self._delete("principals", "id = ?", _key(p, 1))
            return
        r = _record(p, Principal, (getattr(p.record, "id", None),))
        session = r.session or (None, None)
        self._upsert(
            "principals",
            id=r.id, harness=r.harness, pane_id=r.pane_id, pid=r.pid, incarnation=r.incarnation,
            session_harness=session[0], session_id=session[1], control=int(r.control),
            merged_into=r.merged_into, created_at=r.created_at, body=codec.dumps(r),
        )
        if r.session is not None or r.merged_into is not None:
            # grants.bind_session drops the pre-binding grant from the book without a Persist for it:
            # mirror that here, so a reloaded book equals the live one.
            self._delete("grants", "grant_key = ?", (json.dumps(["principal", r.id]),))

    def _put_token(self, p: Persist) -> None:
        if p.record is None:
            self._delete("tokens", "token_hash = ?", _key(p, 1))
            return
        r = _record(p, TokenRecord, (getattr(p.record, "token_hash", None),))
        _check_hash(r.token_hash, "token")
        self._upsert(
            "tokens",
            token_hash=r.token_hash, principal=r.principal, incarnation=r.incarnation, pane_id=r.pane_id,
            pid=r.pid, state=r.state.value, issued_at=r.issued_at, body=codec.dumps(r),
        )

    def _put_grant(self, p: Persist) -> None:
        key = p.key
        shape_ok = (len(key) == 3 and key[0] == "session") or (len(key) == 2 and key[0] == "principal")
        if not shape_ok or not all(isinstance(part, str) and part for part in key):
            raise StoreError(
                f"grant key must be ('session', harness, session id) or ('principal', id), got {key!r}"
            )
        grant_key = json.dumps(list(key))
        if p.record is None:
            self._delete("grants", "grant_key = ?", (grant_key,))
            return
        if not isinstance(p.record, frozenset) or not all(isinstance(s, Scope) for s in p.record):
            raise StoreError(f"grant {key!r}: record must be a frozenset of Scope, got {p.record!r}")
        self._upsert(
            "grants",
            grant_key=grant_key, kind=key[0],
            harness=key[1] if key[0] == "session" else None,
            session_id=key[2] if key[0] == "session" else None,
            principal=key[1] if key[0] == "principal" else None,
            scopes=",".join(sorted(s.value for s in p.record)), body=codec.dumps(p.record),
        )

    def _put_message(self, p: Persist) -> None:
        if p.record is None:
            self._delete("messages", "sender = ? AND message_id = ?", _key(p, 2))
            return
        m = _record(p, Message, (getattr(p.record, "sender", None), getattr(p.record, "id", None)))
        row = self._db.execute("SELECT sender, message_id FROM messages WHERE ref = ?", (m.ref,)).fetchone()
        if row is not None and tuple(row) != m.key:
            raise StoreError(f"message ref {m.ref!r} already names message {tuple(row)!r}, not {m.key!r}")
        clash = self._db.execute(
            "SELECT ref FROM messages WHERE sender = ? AND message_id = ? AND ref != ? AND expires_at > ?",
            (m.sender, m.id, m.ref, m.created_at),
        ).fetchone()
        if clash is not None:
            raise StoreError(f"message id {m.id!r} of {m.sender} is still reserved by message {clash[0]!r}")
        self._upsert(
            "messages",
            ref=m.ref, sender=m.sender, message_id=m.id, recipient_pane=m.recipient_pane,
            recipient_incarnation=m.recipient_incarnation, recipient_principal=m.recipient_principal,
            state=m.state.value, created_at=m.created_at, expires_at=m.expires_at, final_at=m.final_at,
            body=codec.dumps(m),
        )

    def _put_card(self, p: Persist) -> None:
        if p.record is None:
            self._delete("cards", "id = ?", _key(p, 1))
            return
        c = _record(p, Card, (getattr(p.record, "id", None),))
        self._upsert(
            "cards",
            id=c.id, message_sender=c.message[0], message_id=c.message[1], recipient_pane=c.recipient_pane,
            recipient_incarnation=c.recipient_incarnation, state=c.state.value, created_at=c.created_at,
            expires_at=c.expires_at, body=codec.dumps(c),
        )

    def _put_pairs(self, p: Persist) -> None:
        if p.key != ():
            raise StoreError(f"pairs key must be (), got {p.key!r}")
        try:
            rows = [tuple(pair) for pair in (p.record or ())]
        except TypeError:
            rows = [()]
        if not all(len(row) == 2 and all(isinstance(part, str) for part in row) for row in rows):
            raise StoreError(f"pairs record must be (sender principal, recipient incarnation) pairs, got {p.record!r}")
        self._db.execute("DELETE FROM pairs")
        self._db.executemany("INSERT INTO pairs (sender, incarnation) VALUES (?, ?)", rows)

    def _put_restart(self, p: Persist) -> None:
        if p.record is None:
            self._delete("restarts", "restart_id = ?", _key(p, 1))
            return
        r = _record(p, RestartRecord, (getattr(p.record, "restart_id", None),))
        self._upsert(
            "restarts",
            restart_id=r.restart_id, pane_id=r.pane_id, incarnation=r.incarnation, step=r.step.value,
            outcome=None if r.outcome is None else r.outcome.value, updated_at=r.updated_at,
            body=codec.dumps(r),
        )

    def _put_act(self, p: Persist) -> None:
        if p.record is None:
            self._delete("acts", "id = ?", _key(p, 1))
            return
        a = _record(p, Act, (getattr(p.record, "id", None),))
        self._upsert(
            "acts", id=a.id, principal=a.principal, tool=a.tool.value, pane_id=a.pane_id, state=a.state.value,
            created_at=a.created_at, final_at=a.final_at, body=codec.dumps(a),
        )

    def acts(self, *, limit: int = 200, open_only: bool = False) -> list[Act]:
        """Control's acts, newest first (``open_only``: those not final)."""
        finals = [s.value for s in ACT_TABLE.finals]
        where = f"WHERE state NOT IN ({', '.join('?' for _ in finals)})" if open_only else ""
        args = (*finals, limit) if open_only else (limit,)
        rows = self._rows(f"SELECT body FROM acts {where} ORDER BY created_at DESC LIMIT ?", args)
        return [codec.loads(Act, b) for (b,) in rows]

    def _upsert(self, table: str, **cols: Any) -> None:
        names = ", ".join(cols)
        marks = ", ".join("?" for _ in cols)
        self._db.execute(f"INSERT OR REPLACE INTO {table} ({names}) VALUES ({marks})", tuple(cols.values()))

    def _delete(self, table: str, where: str, key: tuple[Any, ...]) -> None:
        self._db.execute(f"DELETE FROM {table} WHERE {where}", key)

    def set_owner(self, token_hash: str, *, created_at: float, tunnel_secret_hash: str | None = None) -> None:
        """Record the owner token's hash (and the tunnel secret's), replacing any earlier one."""
        _check_hash(token_hash, "owner token")
        if tunnel_secret_hash is not None:
            _check_hash(tunnel_secret_hash, "tunnel secret")
        with self._tx() as db:
            db.execute(
                "INSERT OR REPLACE INTO owner (id, token_hash, tunnel_secret_hash, created_at) VALUES (1, ?, ?, ?)",
                (token_hash, tunnel_secret_hash, created_at),
            )

    def record_launch(
        self, pane_id: str, incarnation: str, *, launcher: str, harness: str, session_id: str | None,
        cwd: str, argv: Iterable[str], started_at: float,
    ) -> None:
        """Which launcher started this pane incarnation (argv only: the token is never in it)."""
        with self._tx() as db:
            db.execute(
                "INSERT OR REPLACE INTO launches (pane_id, incarnation, launcher, harness, session_id, cwd,"
                " argv, started_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (pane_id, incarnation, launcher, harness, session_id, cwd, json.dumps(list(argv)), started_at),
            )

    def record_binding(
        self, pane_id: str, *, harness: str, session_id: str, cwd: str | None, updated_at: float
    ) -> None:
        """The agent session last known in ``pane_id`` (replaces the pane's earlier binding)."""
        with self._tx() as db:
            db.execute(
                "INSERT OR REPLACE INTO bindings (pane_id, harness, session_id, cwd, updated_at)"
                " VALUES (?, ?, ?, ?, ?)",
                (pane_id, harness, session_id, cwd, updated_at),
            )

    def record_release(self, incarnation: str, *, harness: str, release: str, learned_at: float) -> None:
        """The harness release an incarnation runs, once learned: it cannot change while the process
        lives, so a daemon restart keeps it (a banner that scrolled away is not needed again)."""
        with self._tx() as db:
            db.execute(
                "INSERT OR REPLACE INTO releases (incarnation, harness, release, learned_at) VALUES (?, ?, ?, ?)",
                (incarnation, harness, release, learned_at),
            )

    def releases(self, incarnations: Collection[str]) -> dict[str, tuple[str, str]]:
        """The learned (harness, release) of each of these incarnations that has one."""
        found: dict[str, tuple[str, str]] = {}
        for incarnation in incarnations:
            rows = self._rows("SELECT harness, release FROM releases WHERE incarnation = ?", (incarnation,))
            if rows:
                found[incarnation] = (rows[0][0], rows[0][1])
        return found

    def forget_releases(self, incarnations: Collection[str]) -> None:
        """Drop the releases of incarnations that ended."""
        with self._tx() as db:
            db.executemany("DELETE FROM releases WHERE incarnation = ?", [(i,) for i in incarnations])

    def set_export_cursor(self, name: str, audit_id: int, *, updated_at: float) -> None:
        """Every audit record with id <= ``audit_id`` reached the destination ``name`` (never moves back)."""
        with self._tx() as db:
            db.execute(
                "INSERT INTO export_cursors (name, audit_id, updated_at) VALUES (?, ?, ?)"
                " ON CONFLICT(name) DO UPDATE SET audit_id = max(audit_id, excluded.audit_id),"
                " updated_at = excluded.updated_at",
                (name, audit_id, updated_at),
            )

    # -- reads -----------------------------------------------------------------------------------

    def export_cursor(self, name: str) -> int:
        """The last audit id the destination ``name`` accepted (0: none yet)."""
        rows = self._rows("SELECT audit_id FROM export_cursors WHERE name = ?", (name,))
        return int(rows[0][0]) if rows else 0

    def _rows(self, sql: str, args: Iterable[Any] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            try:
                return self._db.execute(sql, tuple(args)).fetchall()
            except sqlite3.Error as exc:
                raise StoreError(f"{self.path}: {exc}") from exc

    def load_hub(self, now: float, limits: Limits = DEFAULT_LIMITS, *, cap: Preset = Preset.COLLABORATE) -> hub.Hub:
        """The hub as the store knows it (step ``hub.Recover(now)`` on it next, and apply its effects).

        Loads every principal, token, grant and pair; the messages whose id hour has not ended plus
        any message that has not reached its outcome (so Recover records it); the cards of those
        messages.
        """
        finals = ", ".join("?" for _ in _FINAL_STATES)
        live = f"(m.expires_at > ? OR m.state NOT IN ({finals}))"
        with self._lock:
            db = self._db
            try:
                book = grants.restore(
                    (codec.loads(Principal, b) for (b,) in db.execute("SELECT body FROM principals")),
                    (codec.loads(TokenRecord, b) for (b,) in db.execute("SELECT body FROM tokens")),
                    ((tuple(json.loads(k)), codec.loads(frozenset[Scope], b))
                     for k, b in db.execute("SELECT grant_key, body FROM grants")),
                    cap,
                )
                messages = [
                    codec.loads(Message, b)
                    for (b,) in db.execute(f"SELECT body FROM messages m WHERE {live}", (now, *_FINAL_STATES))
                ]
                cards = [
                    codec.loads(Card, b)
                    for (b,) in db.execute(
                        "SELECT c.body FROM cards c WHERE EXISTS (SELECT 1 FROM messages m WHERE"
                        " m.sender = c.message_sender AND m.message_id = c.message_id"
                        f" AND m.created_at <= c.created_at AND {live})",
                        (now, *_FINAL_STATES),
                    )
                ]
                pairs = [(s, i) for s, i in db.execute("SELECT sender, incarnation FROM pairs")]
            except (sqlite3.Error, codec.CodecError) as exc:
                raise StoreError(f"{self.path}: cannot load the hub: {exc}") from exc
        return hub.restore(book, messages, cards, pairs, limits, self.acts(open_only=True))

    def audit(
        self, *, actor: str | None = None, pane: str | None = None, outcome: str | None = None,
        since: float | None = None, until: float | None = None, after_id: int = 0,
        before_id: int | None = None, limit: int = 100, newest_first: bool = False,
    ) -> list[AuditRow]:
        """Audit records with ``after_id`` < id < ``before_id``: the oldest ``limit`` of them, oldest
        first (page on: ``after_id`` = the last row's id), or with ``newest_first`` the newest ``limit``,
        newest first (page on: ``before_id`` = the last row's id).

        ``pane`` matches a target that is the pane (``%3``), one of its incarnations (``%3@...``) or an
        actor named by it (``agent:claude:pane:%3:...``); ``actor`` matches that actor exactly, or,
        ending in ``:*``, every actor under it (``owner:page:*``: every page session); ``since`` <= at < ``until``.
        """
        where: list[str] = ["id > ?"]
        args: list[Any] = [after_id]
        if before_id is not None:
            where.append("id < ?")
            args.append(before_id)
        if actor is not None:
            if actor.endswith(":*"):
                where.append("substr(actor, 1, length(?)) = ?")
                args += [actor[:-1], actor[:-1]]
            else:
                where.append("actor = ?")
                args.append(actor)
        if pane is not None:
            where.append("(target = ? OR substr(target, 1, length(?) + 1) = ? || '@' OR instr(target, ':pane:' || ? || ':') > 0)")
            args += [pane, pane, pane, pane]
        if outcome is not None:
            where.append("outcome = ?")
            args.append(outcome)
        if since is not None:
            where.append("at >= ?")
            args.append(since)
        if until is not None:
            where.append("at < ?")
            args.append(until)
        sql = (
            "SELECT id, at, actor, action, outcome, scope, target, message_id, detail FROM audit"
            f" WHERE {' AND '.join(where)} ORDER BY id {'DESC' if newest_first else 'ASC'} LIMIT ?"
        )
        return [AuditRow(*row) for row in self._rows(sql, (*args, max(0, limit)))]

    def messages(
        self, *, principal: str | Collection[str] | None = None, pane: str | None = None, limit: int = 200,
        before: MessageCursor | None = None, after: MessageCursor | None = None, newest_first: bool = True,
    ) -> list[Message]:
        """Messages sent or received, newest first (``newest_first=False``: oldest first), history included.

        ``principal``: one id or a merge group (``grants.group``), as sender or recipient. ``pane``: sent
        from (a principal launched in it) or addressed to that pane. ``before``/``after``: only messages
        ordered before/after that position (:func:`message_cursor` of a listed message); the order is
        (created_at, ref), which never changes for a message.
        """
        where: list[str] = []
        args: list[Any] = []
        if before is not None:
            where.append("(created_at, ref) < (?, ?)")
            args += [before[0], before[1]]
        if after is not None:
            where.append("(created_at, ref) > (?, ?)")
            args += [after[0], after[1]]
        if principal is not None:
            ids = (principal,) if isinstance(principal, str) else tuple(principal)
            marks = ", ".join("?" for _ in ids)
            where.append(f"(sender IN ({marks}) OR recipient_principal IN ({marks}))")
            args += [*ids, *ids]
        if pane is not None:
            where.append("(recipient_pane = ? OR sender IN (SELECT id FROM principals WHERE pane_id = ?))")
            args += [pane, pane]
        sql = "SELECT body FROM messages" + (f" WHERE {' AND '.join(where)}" if where else "")
        direction = "DESC" if newest_first else "ASC"
        sql += f" ORDER BY created_at {direction}, ref {direction} LIMIT ?"
        return [codec.loads(Message, b) for (b,) in self._rows(sql, (*args, max(0, limit)))]

    def message(self, sender: str, message_id: str) -> Message | None:
        """The newest message with this key (an id may be reused once its hour ended)."""
        rows = self._rows(
            "SELECT body FROM messages WHERE sender = ? AND message_id = ? ORDER BY created_at DESC LIMIT 1",
            (sender, message_id),
        )
        return codec.loads(Message, rows[0][0]) if rows else None

    def cards(self, *, state: CardState | None = None, limit: int = 200) -> list[Card]:
        """Cards, newest first (``state=CardState.PENDING``: what Needs you shows)."""
        sql, args = "SELECT body FROM cards", []
        if state is not None:
            sql, args = sql + " WHERE state = ?", [state.value]
        rows = self._rows(sql + " ORDER BY created_at DESC, rowid DESC LIMIT ?", (*args, max(0, limit)))
        return [codec.loads(Card, b) for (b,) in rows]

    def open_restarts(self) -> list[RestartRecord]:
        """Restart records not closed: feed each a ``restart.Recover`` at start."""
        marks = ", ".join("?" for _ in _CLOSED_STEPS)
        rows = self._rows(f"SELECT body FROM restarts WHERE step NOT IN ({marks}) ORDER BY updated_at", _CLOSED_STEPS)
        return [codec.loads(RestartRecord, b) for (b,) in rows]

    def owner_token_hash(self) -> str | None:
        rows = self._rows("SELECT token_hash FROM owner WHERE id = 1")
        return str(rows[0][0]) if rows else None

    def tunnel_secret_hash(self) -> str | None:
        rows = self._rows("SELECT tunnel_secret_hash FROM owner WHERE id = 1")
        return None if not rows or rows[0][0] is None else str(rows[0][0])

    def launch_for(self, pane_id: str, incarnation: str) -> LaunchRow | None:
        rows = self._rows(
            "SELECT pane_id, incarnation, launcher, harness, session_id, cwd, argv, started_at FROM launches"
            " WHERE pane_id = ? AND incarnation = ?",
            (pane_id, incarnation),
        )
        if not rows:
            return None
        pane, inc, launcher, harness, session_id, cwd, argv, started_at = rows[0]
        return LaunchRow(pane, inc, launcher, harness, session_id, cwd, tuple(json.loads(argv)), started_at)

    def bindings(self) -> list[BindingRow]:
        rows = self._rows("SELECT pane_id, harness, session_id, cwd, updated_at FROM bindings ORDER BY pane_id")
        return [BindingRow(*row) for row in rows]


# --- helpers ----------------------------------------------------------------------------------------


def _check_version(db: sqlite3.Connection, path: Path) -> None:
    version = db.execute("PRAGMA user_version").fetchone()[0]
    if version > len(MIGRATIONS):
        raise StoreError(
            f"database schema version {version} is newer than this connectd ({len(MIGRATIONS)}); "
            "refusing to run: a downgrade would destroy data"
        )


def _migrate(db: sqlite3.Connection, path: Path) -> None:
    version = db.execute("PRAGMA user_version").fetchone()[0]
    for number in range(version + 1, len(MIGRATIONS) + 1):
        try:
            db.executescript(f"BEGIN IMMEDIATE;\n{MIGRATIONS[number - 1]}\nPRAGMA user_version = {number};\nCOMMIT;")
        except sqlite3.Error as exc:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise StoreError(f"{path}: migration {number} failed, database left at version {number - 1}: {exc}") from exc


def _private(path: Path) -> None:
    """The database and its WAL companions: owner read/write only."""
    for candidate in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        with contextlib.suppress(FileNotFoundError):
            if stat.S_IMODE(candidate.lstat().st_mode) != 0o600:
                os.chmod(candidate, 0o600, follow_symlinks=False)


def _key(p: Persist, size: int) -> tuple[Any, ...]:
    if len(p.key) != size:
        raise StoreError(f"{p.kind} key must have {size} part(s), got {p.key!r}")
    return tuple(p.key)


def _record(p: Persist, cls: type[Any], expected_key: tuple[Any, ...]) -> Any:
    if not isinstance(p.record, cls):
        raise StoreError(f"{p.kind} record must be a {cls.__name__}, got {type(p.record).__name__}")
    if tuple(p.key) != expected_key:
        raise StoreError(f"{p.kind} key {p.key!r} does not match its record's {expected_key!r}")
    return p.record


def _check_hash(value: str, what: str) -> None:
    if not isinstance(value, str) or not _TOKEN_HASH_RE.fullmatch(value):
        raise StoreError(f"{what} must be stored as its hash (64 lowercase hex digits, see hash_token), never plain")
