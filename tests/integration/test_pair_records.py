"""The pairing records on a real SQLite file (connectd.store.pair_records, a part of the store): the book round-trips
through a close and a reopen; each step's records, audit lines and owed wires are one transaction; an
invitation is consumed at most once, across a reopen too (the core refuses, and the database refuses
a record that would reopen it); a removed pairing stays removed; a foreign record writes nothing."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from connectcore.effects import Persist
from connectcore.federation import pairing as P
from connectcore.federation import remote as R
from connectcore.federation.boxes import BoxKeys
from connectd.store import store as store_mod
from connectd.store.pair_records import PairRecords, Wire, encode
from connectd.store.store import Store, StoreError

OWN = BoxKeys(bytes(range(32)), bytes(range(32, 64)))
B1 = BoxKeys(bytes([1]) * 32, bytes([2]) * 32)
B2 = BoxKeys(bytes([3]) * 32, bytes([4]) * 32)
SECRET = b"s" * 32
T0 = 1_000_000.0


class Box:
    """A data directory with the store open, its pairing records a part of it, as the daemon has them."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.store = Store.open(data_dir)
        self.records: PairRecords = self.store

    def reopen(self) -> Box:
        self.close()
        return Box(self.data_dir)

    def close(self) -> None:
        self.store.close()

    def load(self) -> P.PairBook:
        return self.records.pair_book(OWN.box_id, "laptop")

    def audit(self) -> list[tuple[str, str, str | None]]:
        return [(r.action, r.outcome, r.target) for r in self.store.audit(limit=1000)]

    def rows(self) -> dict[str, list[tuple[object, ...]]]:
        db = self.records._db
        return {t: sorted(db.execute(f"SELECT * FROM {t}").fetchall()) for t in
                ("pair_invitations", "pair_requests", "pairings", "pair_wires", "audit")}


@pytest.fixture
def box(tmp_path: Path) -> Iterator[Box]:
    made = Box(tmp_path / "data")
    yield made
    made.close()


def step(box: Box, book: P.PairBook, result: tuple[P.PairBook, tuple[object, ...]]) -> P.PairBook:
    new, effects = result
    box.records.apply_pairing(effects)  # type: ignore[arg-type]
    return new


def two_requests(box: Box) -> P.PairBook:
    book = box.load()
    book = step(box, book, P.invite(book, invitation_id="inv1", secret_hash=P.secret_hash(SECRET), now=T0))
    for rid, keys, name in (("r1", B1, "devbox"), ("r2", B2, "other")):
        book = step(box, book, P.receive_request(book, request_id=rid, invitation_id="inv1", keys=keys,
                                                 name=name, secret=SECRET, now=T0 + 1))
    return book


def test_the_book_round_trips_through_a_reopen(box: Box) -> None:
    book = two_requests(box)
    book = step(box, book, P.approve(book, "r1", pairing_id="pa1", now=T0 + 2, name="dev"))
    # the invitee's side too: a requested pairing with keys pinned from a code, then active
    book = step(box, book, P.accept_code(book, invitation_id="inv9", keys=B2, name="far", expires_at=T0 + 900, now=T0 + 3))
    book = step(box, book, P.pair_accepted(book, "inv9", pairing_id="pa9", now=T0 + 4))
    box = box.reopen()
    try:
        loaded = box.load()
        assert loaded == book
        assert loaded.pairings["inv1"].keys == B1 and loaded.pairings["inv1"].state is P.PairingState.ACTIVE
        assert loaded.requests["r2"].state is P.RequestState.REFUSED
        assert ("pair.approve", "active", "pa1") in box.audit()  # the step's audit line, in the store's log
    finally:
        box.close()


def test_an_invitation_is_consumed_at_most_once_across_a_reopen(box: Box) -> None:
    book = two_requests(box)
    step(box, book, P.approve(book, "r1", pairing_id="pa1", now=T0 + 2))
    box2 = box.reopen()
    try:
        book = box2.load()
        assert book.invitations["inv1"].state is P.InvitationState.CONSUMED
        with pytest.raises(P.PairingError) as refused:
            P.approve(book, "r2", pairing_id="pa2", now=T0 + 3)
        assert refused.value.reason is P.Refusal.NOT_PENDING
        third = BoxKeys(bytes([5]) * 32, bytes([6]) * 32)
        with pytest.raises(P.PairingError) as used:
            P.receive_request(book, request_id="r3", invitation_id="inv1", keys=third, name="c",
                              secret=SECRET, now=T0 + 3)
        assert used.value.reason is P.Refusal.INVITATION_USED
        # and the database itself refuses to reopen it, writing nothing of that step
        before = box2.rows()
        reopened = replace(book.invitations["inv1"], state=P.InvitationState.OPEN, decided_at=None)
        forged = replace(book.requests["r2"], state=P.RequestState.APPROVED, pairing="pa2")
        with pytest.raises(StoreError, match="never changes state again"):
            box2.records.apply_pairing([Persist(P.STORE_REQUEST, ("r2",), forged),
                                Persist(P.STORE_INVITATION, ("inv1",), reopened)])
        assert box2.rows() == before
    finally:
        box2.close()


def test_a_removed_pairing_stays_removed_in_the_database(box: Box) -> None:
    book = two_requests(box)
    book = step(box, book, P.approve(book, "r1", pairing_id="pa1", now=T0 + 2))
    book = step(box, book, P.remove(book, "inv1", now=T0 + 3))
    before = box.rows()
    back = replace(book.pairings["inv1"], state=P.PairingState.ACTIVE, removed_by=None)
    with pytest.raises(StoreError, match="never made active again"):
        box.records.apply_pairing([Persist(P.STORE_PAIRING, ("inv1",), back)])
    assert box.rows() == before
    assert box.reopen().load().pairings["inv1"].removed_by == P.BY_OWNER


def test_a_pairing_s_settings_round_trip_a_reopen_and_the_database_keeps_them(box: Box) -> None:
    book = two_requests(box)
    book = step(box, book, P.approve(book, "r1", pairing_id="pa1", now=T0 + 2))
    book = step(box, book, P.set_settings(book, "inv1", ["messages=off", "per_window=7", "directory=none",
                                                         "history=index", "history_repos=connect,web"], now=T0 + 3))
    assert ("pair.set", "set", "pa1") in box.audit()
    box = box.reopen()
    try:
        loaded = box.load()
        assert loaded == book
        assert loaded.pairings["inv1"].settings == R.PairingSettings(
            messages=False, per_window=7, directory="none", history="index", history_repos=("connect", "web"))
        # a pairing body without its settings is refused by the database, whoever writes it
        before = box.rows()
        with pytest.raises(sqlite3.IntegrityError, match="a pairing keeps its settings"):
            box.records._db.execute("UPDATE pairings SET body = ? WHERE invitation = 'inv1'",
                                    (_old_body(loaded.pairings["inv1"]),))
        assert box.rows() == before
    finally:
        box.close()


def test_a_version_6_data_directory_migrates_its_pairings_with_the_default_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data_dir = tmp_path / "data"
    monkeypatch.setattr(store_mod, "MIGRATIONS", store_mod.MIGRATIONS[:6])
    with Store.open(data_dir) as old:
        assert old.schema_version == 6
        book = P.PairBook(own_box=OWN.box_id, own_name="laptop")
        book, _ = P.invite(book, invitation_id="inv1", secret_hash=P.secret_hash(SECRET), now=T0)
        book, _ = P.receive_request(book, request_id="r1", invitation_id="inv1", keys=B1, name="devbox",
                                    secret=SECRET, now=T0 + 1)
        book, _ = P.approve(book, "r1", pairing_id="pa1", now=T0 + 2)
        pairing = book.pairings["inv1"]
        with old._tx() as db:  # version 6's statement and body (no settings)
            db.execute("INSERT INTO pairings (invitation, id, box_id, state, body) VALUES (?, ?, ?, ?, ?)",
                       (pairing.invitation, pairing.id, pairing.box_id, pairing.state.value, _old_body(pairing)))
    monkeypatch.undo()
    box = Box(data_dir)
    try:
        assert box.store.schema_version == len(store_mod.MIGRATIONS) >= 7
        loaded = box.load().pairings["inv1"]
        assert loaded == pairing and loaded.settings == R.DEFAULT_SETTINGS
        body = json.loads(box.records._db.execute("SELECT body FROM pairings").fetchone()[0])
        assert body["settings"] == {"messages": True, "per_window": 60, "live_ids": 2000, "queued_bytes": 1048576}
        # the settings added after migration 7 (directory, history, history_repos) read as their defaults
        assert (loaded.settings.directory, loaded.settings.history, loaded.settings.history_repos) == (
            "reachable", "none", ())
    finally:
        box.close()


def test_a_record_that_is_not_a_pairing_record_writes_nothing(box: Box) -> None:
    book = two_requests(box)
    new, effects = P.approve(book, "r1", pairing_id="pa1", now=T0 + 2)
    before = box.rows()
    with pytest.raises(StoreError, match="not a pairing record"):
        box.records.apply_pairing([*effects, Persist("message", ("x",), None)])
    with pytest.raises(StoreError, match="not a pairing record"):  # a key that is not its record's
        box.records.apply_pairing([Persist(P.STORE_PAIRING, ("other",), new.pairings["inv1"])])
    assert box.rows() == before
    assert box.load() == book


def test_owed_wires_are_kept_with_the_step_and_until_the_bus_took_them(box: Box) -> None:
    book = box.load()
    new, effects = P.invite(book, invitation_id="inv1", secret_hash=P.secret_hash(SECRET), now=T0)
    once = Wire("answer:r1", "connect.x.pairing.y", b"wire-1", created_at=T0)
    again = Wire("request:inv9", "connect.y.pairing.x", b"wire-2", resend=10.0, created_at=T0 + 1)
    box.records.apply_pairing(effects, [once, again])
    assert [w.key for w in box.records.wires()] == ["answer:r1", "request:inv9"]
    box.records.sent("answer:r1", attempt=1, now=T0 + 2)
    box.records.sent("request:inv9", attempt=1, now=T0 + 2)
    box = box.reopen()
    try:
        assert [(w.key, w.due_at, w.attempt) for w in box.records.wires()] == [("request:inv9", T0 + 12, 1)]
        box.records.due_again("answer:r1", T0 + 3)  # a repeated request: the answer is owed again
        assert {w.key for w in box.records.wires()} == {"answer:r1", "request:inv9"}
        box.records.apply_pairing([], [Wire.settled("request:inv9"), Wire.settled("never-owed")])  # answered: nothing more owed
        assert [w.key for w in box.records.wires()] == ["answer:r1"]
        assert box.records.wire("request:inv9") is not None  # kept (its bytes), not owed
        assert box.records.wire("never-owed") is None
    finally:
        box.close()


# --- a data directory the pairing tables' own connection made (before migration 5) ------------------

# What connectd wrote before the pairing tables joined the store's migrations: the store at migration 4,
# then PairRecords.open on a connection of its own ran this (pair_records.py's _SCHEMA, copied as shipped)
# and recorded its own version in pair_schema.
OLD_PAIR_SCHEMA = """
CREATE TABLE IF NOT EXISTS pair_schema (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    version INTEGER NOT NULL
) STRICT;
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
"""


def _old_body(pairing: P.Pairing) -> str:
    """A pairing's body as the code before migration 7 wrote it: no settings."""
    row = json.loads(encode(pairing))
    del row["settings"]
    return json.dumps(row, sort_keys=True, separators=(",", ":"))


def _old_data_dir(data_dir: Path, monkeypatch: pytest.MonkeyPatch, *, pair_version: int = 1) -> P.PairBook:
    """A data directory as the code before migration 5 left it: the store at version 4, the pairing
    tables and pair_schema made on their own connection, a book's records in them (rows written with
    the old code's SQL), an owed wire and an audit line. Returns the book it holds."""
    monkeypatch.setattr(store_mod, "MIGRATIONS", store_mod.MIGRATIONS[:4])
    Store.open(data_dir).close()
    monkeypatch.undo()
    book = P.PairBook(own_box=OWN.box_id, own_name="laptop")
    records: list[object] = []
    steps = [
        lambda b: P.invite(b, invitation_id="inv1", secret_hash=P.secret_hash(SECRET), now=T0),
        lambda b: P.receive_request(b, request_id="r1", invitation_id="inv1", keys=B1, name="devbox",
                                    secret=SECRET, now=T0 + 1),
        lambda b: P.approve(b, "r1", pairing_id="pa1", now=T0 + 2, name="dev"),
        lambda b: P.accept_code(b, invitation_id="inv9", keys=B2, name="far", expires_at=T0 + 900, now=T0 + 3),
        lambda b: P.pair_accepted(b, "inv9", pairing_id="pa9", now=T0 + 4),
        lambda b: P.remove(b, "inv9", now=T0 + 5),
    ]
    for take in steps:
        book, effects = take(book)
        records.extend(e.record for e in effects if isinstance(e, Persist))
    db = sqlite3.connect(data_dir / "connect.db", isolation_level=None)
    try:
        db.executescript(f"BEGIN IMMEDIATE;\n{OLD_PAIR_SCHEMA}\n"
                         f"INSERT OR IGNORE INTO pair_schema (id, version) VALUES (1, {pair_version});\nCOMMIT;")
        for r in records:  # the old _put's statements
            if isinstance(r, P.Invitation):
                db.execute("INSERT INTO pair_invitations (id, state, expires_at, body) VALUES (?, ?, ?, ?)"
                           " ON CONFLICT (id) DO UPDATE SET state = excluded.state, body = excluded.body",
                           (r.id, r.state.value, r.expires_at, encode(r)))
            elif isinstance(r, P.PairRequest):
                db.execute("INSERT INTO pair_requests (id, invitation, box_id, state, body) VALUES (?, ?, ?, ?, ?)"
                           " ON CONFLICT (id) DO UPDATE SET state = excluded.state, body = excluded.body",
                           (r.id, r.invitation, r.box_id, r.state.value, encode(r)))
            elif isinstance(r, P.Pairing):
                db.execute("INSERT INTO pairings (invitation, id, box_id, state, body) VALUES (?, ?, ?, ?, ?)"
                           " ON CONFLICT (invitation) DO UPDATE SET id = excluded.id, state = excluded.state,"
                           " body = excluded.body",
                           (r.invitation, r.id, r.box_id, r.state.value, _old_body(r)))
        db.execute("INSERT INTO pair_wires (key, subject, wire, attempt, due_at, resend, created_at)"
                   " VALUES ('answer:r1', 'connect.x.pairing.y', x'00ff', 0, ?, NULL, ?)", (T0 + 2, T0 + 2))
        db.execute("INSERT INTO audit (at, actor, action, scope, target, outcome, message_id, detail)"
                   " VALUES (?, 'owner', 'pair.approve', NULL, 'pa1', 'active', NULL, '')", (T0 + 2,))
    finally:
        db.close()
    return book


def test_a_data_directory_with_the_old_pairing_tables_migrates_with_its_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data_dir = tmp_path / "data"
    book = _old_data_dir(data_dir, monkeypatch)
    assert book.pairings["inv1"].state is P.PairingState.ACTIVE and book.pairings["inv9"].removed_by == P.BY_OWNER
    box = Box(data_dir)
    try:
        assert box.store.schema_version == len(store_mod.MIGRATIONS)
        assert box.load() == book  # the pairings with the default settings (migration 7)
        assert {p.settings for p in box.load().pairings.values()} == {R.DEFAULT_SETTINGS}
        assert [(w.key, w.wire, w.due_at) for w in box.records.wires()] == [("answer:r1", b"\x00\xff", T0 + 2)]
        assert box.audit() == [("pair.approve", "active", "pa1")]
        tables = {n for (n,) in box.store._db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert "pair_schema" not in tables
        # the tables' own refusals came through with them
        with pytest.raises(StoreError, match="never made active again"):
            box.records.apply_pairing([Persist(P.STORE_PAIRING, ("inv9",), replace(
                book.pairings["inv9"], state=P.PairingState.ACTIVE, removed_by=None))])
    finally:
        box.close()
    assert _user_version(data_dir) == len(store_mod.MIGRATIONS)
    box = Box(data_dir)  # and it opens again at its version, the same
    try:
        assert box.load() == book
    finally:
        box.close()


def test_pairing_tables_from_a_newer_connectd_are_refused_untouched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data_dir = tmp_path / "data"
    _old_data_dir(data_dir, monkeypatch, pair_version=2)
    before = {p.name: p.read_bytes() for p in data_dir.iterdir()}
    with pytest.raises(StoreError, match="the pairing tables are version 2, newer than this connectd"):
        Store.open(data_dir)
    assert {p.name: p.read_bytes() for p in data_dir.iterdir()} == before
    assert _user_version(data_dir) == 4


def test_a_database_from_a_newer_connectd_with_pairings_is_refused_untouched(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    box = Box(data_dir)
    step(box, box.load(), P.invite(box.load(), invitation_id="inv1", secret_hash=P.secret_hash(SECRET), now=T0))
    box.close()
    db = sqlite3.connect(data_dir / "connect.db")
    db.execute(f"PRAGMA user_version = {len(store_mod.MIGRATIONS) + 1}")
    db.close()
    before = {p.name: p.read_bytes() for p in data_dir.iterdir()}
    with pytest.raises(StoreError, match="newer than this connectd"):
        Store.open(data_dir)
    assert {p.name: p.read_bytes() for p in data_dir.iterdir()} == before


def _user_version(data_dir: Path) -> int:
    db = sqlite3.connect(data_dir / "connect.db")
    try:
        return int(db.execute("PRAGMA user_version").fetchone()[0])
    finally:
        db.close()
