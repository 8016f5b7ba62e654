"""A database written by the store before pydantic (the hand-written codec, tests/support/legacy_codec.py)
loads through today's store, and every body it holds is the text today's codec writes for that record."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from connectcore import control as C
from connectcore.consent import Card
from connectcore.control import Act
from connectcore.delivery import Message
from connectcore.effects import Persist
from connectcore.grants import Principal, Scope, TokenRecord
from connectcore.restart import RestartRecord
from connectd.store import codec
from connectd.store import store as store_mod
from connectd.store.store import DB_NAME, Store
from tests.integration.test_store import _restart_effects, _scenario
from tests.support import legacy_codec
from tests.unit.test_hub_acts import QUESTION, approve, propose, world

BODY_TYPES = {
    "principals": Principal, "tokens": TokenRecord, "grants": frozenset[Scope], "messages": Message,
    "cards": Card, "restarts": RestartRecord, "acts": Act,
}


def test_a_database_written_with_the_legacy_codec_loads_and_keeps_its_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    w = _scenario()
    restart, restart_effects = _restart_effects(w.now)
    aw, ctl, pure, shell = world()
    pending = propose(aw, ctl, C.Tool.SEND_KEYS, pure, QUESTION, keys=["1", "Enter"])
    approve(aw, propose(aw, ctl, C.Tool.SHELL_TEXT, shell, text="ls"))
    with monkeypatch.context() as legacy:
        legacy.setattr(store_mod, "codec", legacy_codec)
        with Store.open(tmp_path) as store:
            store.apply(w.effects)
            store.apply(restart_effects)
            store.apply(e for e in aw.effects if isinstance(e, Persist) and e.kind == "act")
    assert store_mod.codec is codec

    with Store.open(tmp_path) as store:
        loaded = store.load_hub(w.now, w.hub.limits)
        assert loaded.book == w.hub.book
        assert loaded.messages == w.hub.messages and loaded.cards == w.hub.cards
        assert store.open_restarts() == [restart.record]
        assert {a.id: a for a in store.acts()} == aw.hub.acts
        assert loaded.acts[pending].args["keys"] == ["1", "Enter"]

    db = sqlite3.connect(tmp_path / DB_NAME)
    try:
        for table, tp in BODY_TYPES.items():
            bodies = [body for (body,) in db.execute(f"SELECT body FROM {table}")]  # noqa: S608 - fixed names
            assert bodies, f"the scenario writes no {table}"
            for body in bodies:
                assert codec.dumps(codec.loads(tp, body)) == body
    finally:
        db.close()


def test_a_database_written_today_loads_with_the_legacy_codec(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other way: a downgrade to the hand-written codec reads what the pydantic codec wrote."""
    w = _scenario()
    with Store.open(tmp_path) as store:
        store.apply(w.effects)
    monkeypatch.setattr(store_mod, "codec", legacy_codec)
    with Store.open(tmp_path) as store:
        loaded = store.load_hub(w.now, w.hub.limits)
    assert loaded.book == w.hub.book and loaded.messages == w.hub.messages and loaded.cards == w.hub.cards
