"""The pairing records on a real SQLite file (connectd.store.pair_records): the book round-trips
through a close and a reopen; each step's records, audit lines and owed wires are one transaction; an
invitation is consumed at most once, across a reopen too (the core refuses, and the database refuses
a record that would reopen it); a removed pairing stays removed; a foreign record writes nothing."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from connectcore.effects import Persist
from connectcore.federation import pairing as P
from connectcore.federation.boxes import BoxKeys
from connectd.store.pair_records import PairRecords, Wire
from connectd.store.store import Store, StoreError

OWN = BoxKeys(bytes(range(32)), bytes(range(32, 64)))
B1 = BoxKeys(bytes([1]) * 32, bytes([2]) * 32)
B2 = BoxKeys(bytes([3]) * 32, bytes([4]) * 32)
SECRET = b"s" * 32
T0 = 1_000_000.0


class Box:
    """A data directory with the store and the pairing records open, as the daemon has them."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.store = Store.open(data_dir)
        self.records = PairRecords.open(data_dir)

    def reopen(self) -> Box:
        self.close()
        return Box(self.data_dir)

    def close(self) -> None:
        self.records.close()
        self.store.close()

    def load(self) -> P.PairBook:
        return self.records.load(OWN.box_id, "laptop")

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
    box.records.apply(effects)  # type: ignore[arg-type]
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
            box2.records.apply([Persist(P.STORE_REQUEST, ("r2",), forged),
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
        box.records.apply([Persist(P.STORE_PAIRING, ("inv1",), back)])
    assert box.rows() == before
    assert box.reopen().load().pairings["inv1"].removed_by == P.BY_OWNER


def test_a_record_that_is_not_a_pairing_record_writes_nothing(box: Box) -> None:
    book = two_requests(box)
    new, effects = P.approve(book, "r1", pairing_id="pa1", now=T0 + 2)
    before = box.rows()
    with pytest.raises(StoreError, match="not a pairing record"):
        box.records.apply([*effects, Persist("message", ("x",), None)])
    with pytest.raises(StoreError, match="not a pairing record"):  # a key that is not its record's
        box.records.apply([Persist(P.STORE_PAIRING, ("other",), new.pairings["inv1"])])
    assert box.rows() == before
    assert box.load() == book


def test_owed_wires_are_kept_with_the_step_and_until_the_bus_took_them(box: Box) -> None:
    book = box.load()
    new, effects = P.invite(book, invitation_id="inv1", secret_hash=P.secret_hash(SECRET), now=T0)
    once = Wire("answer:r1", "connect.x.pairing.y", b"wire-1", created_at=T0)
    again = Wire("request:inv9", "connect.y.pairing.x", b"wire-2", resend=10.0, created_at=T0 + 1)
    box.records.apply(effects, [once, again])
    assert [w.key for w in box.records.wires()] == ["answer:r1", "request:inv9"]
    box.records.sent("answer:r1", attempt=1, now=T0 + 2)
    box.records.sent("request:inv9", attempt=1, now=T0 + 2)
    box = box.reopen()
    try:
        assert [(w.key, w.due_at, w.attempt) for w in box.records.wires()] == [("request:inv9", T0 + 12, 1)]
        box.records.due_again("answer:r1", T0 + 3)  # a repeated request: the answer is owed again
        assert {w.key for w in box.records.wires()} == {"answer:r1", "request:inv9"}
        box.records.apply([], [Wire.settled("request:inv9"), Wire.settled("never-owed")])  # answered: nothing more owed
        assert [w.key for w in box.records.wires()] == ["answer:r1"]
        assert box.records.wire("request:inv9") is not None  # kept (its bytes), not owed
        assert box.records.wire("never-owed") is None
    finally:
        box.close()


def test_pairing_tables_from_a_newer_connectd_are_refused(tmp_path: Path) -> None:
    made = Box(tmp_path / "data")
    made.records._db.execute("UPDATE pair_schema SET version = 99")
    made.close()
    store = Store.open(tmp_path / "data")
    try:
        with pytest.raises(StoreError, match="newer than this connectd"):
            PairRecords.open(tmp_path / "data")
    finally:
        store.close()
