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

This module opens the file and keeps the schema (:data:`MIGRATIONS`) and the one funnel for the core's
effects (:meth:`Store.apply`); :class:`Store` is the one object callers hold, made of the connection
(:mod:`connectd.store.connection`) and one part per kind of record, each in its own module:
``grants`` (principals, tokens, grants), ``messages``, ``cards`` (cards and pairs), ``restarts``,
``acts``, ``audit`` (and the export cursors), ``owner``, ``panes`` (launches, bindings, releases) and
``pair_records`` (federation's invitations, pair requests, pairings and the pairing envelopes owed) and
``remote_messages`` (federation's outbox rows and inbox records).
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import stat
from collections.abc import Callable, Iterable
from pathlib import Path

from connectcore import grants, hub
from connectcore.consent import Card
from connectcore.delivery import DEFAULT_LIMITS, FINAL, Limits, Message
from connectcore.effects import Audit, Effect, Persist
from connectcore.federation import inbox as I
from connectcore.federation import outbox as O
from connectcore.grants import Preset, Principal, Scope, TokenRecord
from connectd.daemon.ids import (
    hash_token as hash_token,  # the one hash a token is kept as (SHA-256, 64 lowercase hex)
)
from connectd.store import codec
from connectd.store.acts import ActRecords
from connectd.store.audit import AuditLog
from connectd.store.audit import AuditRow as AuditRow
from connectd.store.cards import CardRecords
from connectd.store.connection import STORE_ERRORS as STORE_ERRORS
from connectd.store.connection import Connection, StoreError
from connectd.store.connection import StoreUnavailable as StoreUnavailable
from connectd.store.grants import GrantRecords
from connectd.store.messages import MessageCursor as MessageCursor
from connectd.store.messages import MessageRecords
from connectd.store.messages import message_cursor as message_cursor
from connectd.store.owner import OwnerRecord
from connectd.store.pair_records import PairRecords
from connectd.store.panes import BindingRow as BindingRow
from connectd.store.panes import LaunchRow as LaunchRow
from connectd.store.panes import PaneRecords
from connectd.store.remote_messages import RemoteMessageRecords
from connectd.store.restarts import RestartRecords

DB_NAME = "connect.db"
PAIR_SCHEMA_VERSION = 1
"""The one version of ``pair_schema``, the pairing tables' own version table before migration 5."""
_FINAL_STATES = tuple(sorted(s.value for s in FINAL))

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

_V5 = """
-- The pairing tables. A data directory an older connectd federated already has them (it made them on a
-- connection of its own, with their own version table, pair_schema): they are kept with their rows, and
-- pair_schema goes (a newer pair_schema is refused before any migration runs: _check_version).
CREATE TABLE IF NOT EXISTS pair_invitations (
    id TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    expires_at REAL NOT NULL,
    body TEXT NOT NULL CHECK (json_valid(body))
) STRICT;
CREATE TRIGGER IF NOT EXISTS pair_invitation_decided_once BEFORE UPDATE OF state ON pair_invitations
    WHEN OLD.state != 'open' AND NEW.state != OLD.state
    BEGIN SELECT RAISE(ABORT, 'an invitation that left open never changes state again'); END;
CREATE TABLE IF NOT EXISTS pair_requests (
    id TEXT PRIMARY KEY,
    invitation TEXT NOT NULL,
    box_id TEXT NOT NULL,
    state TEXT NOT NULL,
    body TEXT NOT NULL CHECK (json_valid(body))
) STRICT;
CREATE INDEX IF NOT EXISTS pair_requests_invitation ON pair_requests(invitation);
CREATE TABLE IF NOT EXISTS pairings (
    invitation TEXT PRIMARY KEY,
    id TEXT UNIQUE,
    box_id TEXT NOT NULL,
    state TEXT NOT NULL,
    body TEXT NOT NULL CHECK (json_valid(body))
) STRICT;
CREATE TRIGGER IF NOT EXISTS pairing_removed_for_good BEFORE UPDATE OF state ON pairings
    WHEN OLD.state = 'removed' AND NEW.state != 'removed'
    BEGIN SELECT RAISE(ABORT, 'a removed pairing is never made active again'); END;
CREATE TABLE IF NOT EXISTS pair_wires (
    key TEXT PRIMARY KEY,
    subject TEXT NOT NULL,
    wire BLOB NOT NULL,
    attempt INTEGER NOT NULL,
    due_at REAL,
    resend REAL,
    created_at REAL NOT NULL
) STRICT;
DROP TABLE IF EXISTS pair_schema;
"""

_V6 = """
-- Federation's messages: the sending box's outbox and the receiving box's inbox, one row per message
-- identity (sender box, sender principal, message id), whose digest never changes.
CREATE TABLE outbox (
    box TEXT NOT NULL,                     -- the identity: this box (the sender's) ...
    principal TEXT NOT NULL,               -- ... the sending principal ...
    message_id TEXT NOT NULL,              -- ... and the id it chose
    to_box TEXT NOT NULL,                  -- the recipient box's id
    pairing TEXT NOT NULL,
    digest TEXT NOT NULL,                  -- of the canonical inner part every copy is sealed from
    state TEXT NOT NULL,
    created_at REAL NOT NULL,
    due REAL,                              -- when the schedule next publishes (NULL: nothing due)
    body TEXT NOT NULL CHECK (json_valid(body)),
    PRIMARY KEY (box, principal, message_id)
) STRICT;
CREATE INDEX outbox_pairing ON outbox(pairing, state);
CREATE INDEX outbox_due ON outbox(due);
CREATE TRIGGER outbox_digest_fixed BEFORE UPDATE OF digest ON outbox WHEN NEW.digest != OLD.digest
    BEGIN SELECT RAISE(ABORT, 'an outbox identity keeps its digest'); END;

CREATE TABLE inbox (
    box TEXT NOT NULL,                     -- the identity: the sending box ...
    principal TEXT NOT NULL,               -- ... its principal ...
    message_id TEXT NOT NULL,              -- ... and the id it chose
    pairing TEXT NOT NULL,
    digest TEXT NOT NULL,
    state TEXT NOT NULL,
    created_at REAL NOT NULL,              -- the message's: the retention counts from it
    body TEXT NOT NULL CHECK (json_valid(body)),
    PRIMARY KEY (box, principal, message_id)
) STRICT;
CREATE INDEX inbox_pairing ON inbox(pairing, state);
CREATE INDEX inbox_created ON inbox(created_at);
CREATE TRIGGER inbox_digest_fixed BEFORE UPDATE OF digest ON inbox WHEN NEW.digest != OLD.digest
    BEGIN SELECT RAISE(ABORT, 'an inbox identity keeps its digest'); END;
"""

_V7 = """
-- Per-pairing settings (connectd pair set), kept in the pairing's body: every pairing stored before them
-- gets this version's defaults (connectcore.federation.remote.DEFAULT_SETTINGS), and from now on a
-- pairing body without settings is refused.
UPDATE pairings SET body = json_set(body, '$.settings',
        json('{"live_ids":2000,"messages":true,"per_window":60,"queued_bytes":1048576}'))
    WHERE json_type(body, '$.settings') IS NULL;
CREATE TRIGGER pairing_settings_kept_insert BEFORE INSERT ON pairings
    WHEN json_type(NEW.body, '$.settings') IS NOT 'object'
    BEGIN SELECT RAISE(ABORT, 'a pairing keeps its settings'); END;
CREATE TRIGGER pairing_settings_kept_update BEFORE UPDATE OF body ON pairings
    WHEN json_type(NEW.body, '$.settings') IS NOT 'object'
    BEGIN SELECT RAISE(ABORT, 'a pairing keeps its settings'); END;
"""

MIGRATIONS: list[str] = [_V1, _V2, _V3, _V4, _V5, _V6, _V7]
"""Migration N is ``MIGRATIONS[N - 1]``; append, never edit one that has shipped."""


# --- the store --------------------------------------------------------------------------------------


class Store(
    GrantRecords, MessageRecords, CardRecords, RestartRecords, ActRecords, PairRecords, AuditLog, OwnerRecord,
    PaneRecords, RemoteMessageRecords, Connection,
):
    """The one object callers hold: one connection (:class:`connectd.store.connection.Connection`) and
    the parts that keep each kind of record in it, each in its own module."""

    def __init__(self, path: Path, db: sqlite3.Connection) -> None:
        super().__init__(path, db)
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
            O.STORE: self._put_outbox,
            I.STORE: self._put_inbox,
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
                    self._put_audit(effect)
        for listener in self.audit_listeners:
            for effect in mine:
                if isinstance(effect, Audit):
                    listener(effect)

    # -- reads -----------------------------------------------------------------------------------

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
                    (codec.loads(Principal, b) for (b,) in db.execute(
                        "SELECT body FROM principals WHERE harness != 'remote'")),  # (remote_messages.py)
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


# --- helpers ----------------------------------------------------------------------------------------


def _check_version(db: sqlite3.Connection, path: Path) -> None:
    version = db.execute("PRAGMA user_version").fetchone()[0]
    if version > len(MIGRATIONS):
        raise StoreError(
            f"database schema version {version} is newer than this connectd ({len(MIGRATIONS)}); "
            "refusing to run: a downgrade would destroy data"
        )
    # Before migration 5 the pairing tables kept their own version (pair_schema): one newer than this
    # connectd knows is refused as well, before anything is touched.
    if db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'pair_schema'").fetchone():
        row = db.execute("SELECT max(version) FROM pair_schema").fetchone()
        if row[0] is not None and row[0] > PAIR_SCHEMA_VERSION:
            raise StoreError(
                f"{path}: the pairing tables are version {row[0]}, newer than this connectd "
                f"({PAIR_SCHEMA_VERSION}); refusing to run: a downgrade would destroy data"
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
