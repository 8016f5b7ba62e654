"""Federation's outbox rows and inbox records in the store (connectd.store.remote_messages) on real
SQLite files: the core's records round-trip a close and a reopen (the outbox goes on from its rows, the
inbox is made again from its records); one identity is one row, whose digest never changes; and an inbox
record commits in one transaction with the hub's records of its step (the local message row, its card),
so a failure anywhere in the batch leaves neither (docs/federation.md, "On the receiving box")."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from connectcore.effects import Audit, Effect, Persist
from connectcore.federation import inbox as I
from connectcore.federation import outbox as O
from connectd.store import store as store_mod
from connectd.store.store import Store, StoreError
from tests.integration.test_store import GOOD, _scenario
from tests.unit import test_federation_inbox as TI
from tests.unit import test_federation_outbox as TO

RAW = bytes(range(200, 224))  # a nonce that is not UTF-8 text


def records(effects: Iterable[Any]) -> list[Effect]:
    """What of a step the store writes (the bus effects are the interpreter's)."""
    return [e for e in effects if isinstance(e, Persist | Audit)]


def table(path: Path, name: str) -> list[tuple[Any, ...]]:
    db = sqlite3.connect(path)
    try:
        return sorted(db.execute(f"SELECT * FROM {name}").fetchall())  # noqa: S608 - fixed names
    finally:
        db.close()


def an_outbox(store: Store) -> O.Outbox:
    """Three rows through the core's steps, each step applied: one queued, one published and then
    cancelling (its cancel's nonce not UTF-8), one accepted with its publish acknowledgement noted."""
    box = TO.empty()
    for inner, nonce in ((TO.message("m-1"), TO.NONCE), (TO.message("m-2"), RAW)):
        box, effects = O.admit(box, inner, nonce=nonce, now=TO.T0)
        store.apply(records(effects))
    box, effects = O.tick(box, now=TO.T0 + 1, bus_up=True, heard={})
    store.apply(records(effects))
    m1, m2 = TO.message("m-1").identity, TO.message("m-2").identity
    box, effects = O.publish_acked(box, m1, attempt=1, sequence=42)
    store.apply(records(effects))
    box, effects = O.receipt(box, TO.receipt_for(box.rows[m1], "accepted", "awaiting consent: card c-1", "c-1"),
                             now=TO.T0 + 2)
    store.apply(records(effects))
    box, effects = O.cancel(box, sender="p-7", now=TO.T0 + 3, reason="sender revoked", nonces={m1: RAW, m2: RAW})
    store.apply(records(effects))
    box, effects = O.admit(box, TO.message("m-3"), nonce=TO.NONCE, now=TO.T0 + 4)
    store.apply(records(effects))
    assert {str(r.state) for r in box.rows.values()} == {"cancelling", "queued"}
    return box


def an_inbox(store: Store) -> I.Inbox:
    """An accepted message (its text held), a refused one, and a cancel's tombstone."""
    box = TI.empty()
    box, effects = I.accept(box, TI.judged(TI.message("m-1"), box), nonce=RAW, now=TI.NOW, recipient=TI.RECIPIENT,
                            reason="awaiting consent: card c-1", card="c-1", delivery="d-1")
    store.apply(records(effects))
    box, effects = I.refuse(box, TI.judged(TI.message("m-2"), box), nonce=TI.N2, now=TI.NOW, reason="no_pane")
    store.apply(records(effects))
    box, effects = I.receive(box, TI.judged(TI.cancel_of(TI.message("m-3")), box), now=TI.NOW, nonce=TI.N3)
    store.apply(records(effects))
    assert sorted(str(r.state) for r in box.records.values()) == ["accepted", "cancelled", "refused"]
    return box


def test_outbox_rows_and_inbox_records_round_trip_a_reopen(tmp_path: Path) -> None:
    with Store.open(tmp_path) as store:
        outbox, inbox = an_outbox(store), an_inbox(store)
    with Store.open(tmp_path) as store:
        rows, held = store.outbox_rows(), store.inbox_records()
    assert O.Outbox(TO.A, {r.identity: r for r in rows}) == outbox
    assert I.load(TI.B, held) == replace(inbox, windows={})
    accepted = next(r for r in held if r.state is I.InboxState.ACCEPTED)
    assert accepted.message is not None and accepted.message.text == "hello from box A"  # the text, with its identity
    assert accepted.nonce == RAW  # the receipt's nonce: a duplicate gets the same bytes
    # the outbox goes on from its rows after the restart: the due one is published again, the same envelope
    again, effects = O.tick(O.Outbox(TO.A, {r.identity: r for r in rows}), now=TO.T0 + 600, bus_up=True,
                            heard={TO.B: TO.T0 + 599})
    assert any(isinstance(e, Persist) for e in effects) and again != outbox


def test_one_identity_is_one_row_and_keeps_its_digest(tmp_path: Path) -> None:
    with Store.open(tmp_path) as store:
        outbox, inbox = an_outbox(store), an_inbox(store)
        assert len(store.outbox_rows()) == len(outbox.rows) == 3  # five steps wrote m-1, one row still
        assert len(store.inbox_records()) == len(inbox.records) == 3
        row = outbox.rows[TO.message("m-1").identity]
        record = next(iter(inbox.records.values()))
        before = table(store.path, "outbox"), table(store.path, "inbox")
        for bad, needle in (
            (Persist(O.STORE, (row.identity,), replace(row, digest="0" * 64)), "outbox identity keeps its digest"),
            (Persist(I.STORE, (record.identity,), replace(record, digest="0" * 64)), "inbox identity keeps its digest"),
            (Persist(O.STORE, (TO.message("m-9").identity,), row), "does not match its record"),
            (Persist(I.STORE, ("m-1",), record), "does not match its record"),
            (Persist(I.STORE, (record.identity,), row), "inbox record must be a Record, got Row"),
        ):
            with pytest.raises(StoreError, match=needle):
                store.apply([Persist(O.STORE, (row.identity,), replace(row, reason="changed")), bad])
            assert (table(store.path, "outbox"), table(store.path, "inbox")) == before
        # the inbox's retention deletes the record, by its identity
        _, effects = I.tick(inbox, now=TI.NOW + inbox.retention + 3600)
        store.apply(records(effects))
        assert store.inbox_records() == []


def _arrived(store_effects: list[Any]) -> tuple[list[Effect], I.Record]:
    """The hub's records of an arrival (principals, the local message rows, their cards: a scenario's
    effects) and the inbox record committed with them."""
    box = TI.empty()
    _, effects = I.accept(box, TI.judged(TI.message("m-1"), box), nonce=RAW, now=TI.NOW, recipient=TI.RECIPIENT,
                          reason="awaiting consent: card c-1", card="c-1", delivery="d-1",
                          records=tuple(e for e in store_effects if isinstance(e, Persist)))
    inbox_record = next(e.record for e in effects if isinstance(e, Persist) and e.kind == I.STORE)
    return records(effects), inbox_record


def test_an_inbox_record_commits_with_the_message_row_and_its_card_or_not_at_all(tmp_path: Path) -> None:
    w = _scenario()
    batch, record = _arrived(list(w.effects))
    kinds = {e.kind for e in batch if isinstance(e, Persist)}
    assert {"message", "card", I.STORE} <= kinds
    with Store.open(tmp_path / "ok") as store:
        store.apply(batch)
    with Store.open(tmp_path / "ok") as store:
        assert store.inbox_records() == [record]
        loaded = store.load_hub(w.now, w.hub.limits)
        assert loaded.messages == w.hub.messages and loaded.cards == w.hub.cards
    # the same batch with a failure at its end (a record the store refuses): neither is written
    bad = Persist(O.STORE, ("not an identity",), None)
    with Store.open(tmp_path / "bad") as store, pytest.raises(StoreError, match=r"outbox key must be \(Identity,\)"):
        store.apply([*batch, bad])
    for name in ("inbox", "messages", "cards", "principals"):
        assert table(tmp_path / "bad" / "connect.db", name) == [], name
    # and a failure before it (the hub's rows refused) writes no inbox record either
    with Store.open(tmp_path / "bad2") as store, pytest.raises(StoreError):
        store.apply([Persist("message", ("x", "y"), "not a message"), *batch])
    assert table(tmp_path / "bad2" / "connect.db", "inbox") == []
    assert table(tmp_path / "bad2" / "connect.db", "messages") == []


def test_the_migration_adds_the_tables_to_a_data_directory_at_version_5(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as older:
        older.setattr(store_mod, "MIGRATIONS", store_mod.MIGRATIONS[:5])
        with Store.open(tmp_path) as store:
            store.apply([GOOD])
            assert store.schema_version == 5
    with Store.open(tmp_path) as store:
        assert store.schema_version == len(store_mod.MIGRATIONS) >= 6
        assert list(store.load_hub(0.0).book.principals) == ["p1"]
        outbox = an_outbox(store)
    with Store.open(tmp_path) as store:
        assert O.Outbox(TO.A, {r.identity: r for r in store.outbox_rows()}) == outbox
