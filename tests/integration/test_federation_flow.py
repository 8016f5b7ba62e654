"""The daemon's side of messages across boxes (connectd.federation.flow): engines on real SQLite files
and real PyNaCl keys, their pairing desks paired as the daemon pairs them. A federated box's hub is
restored at start with its outbox and inbox (a box that does not federate keeps neither)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from connectcore.effects import Audit, Effect, Persist
from connectcore.federation import inbox as I
from connectcore.federation import outbox as O
from connectd.daemon.parts import Engine
from connectd.federation import keys as K
from connectd.federation.desk import PairingDesk, open_desk
from connectd.store.store import Store
from tests.integration.test_pairing_desk import Clock, direct
from tests.unit import test_federation_inbox as TI
from tests.unit import test_federation_outbox as TO


def records(effects: Iterable[Any]) -> list[Effect]:
    return [e for e in effects if isinstance(e, Persist | Audit)]


class Box:
    """One daemon's engine and desk on ``root`` (``name``: set up by ``federate init``; None: not federated)."""

    def __init__(self, root: Path, name: str | None, clock: Clock) -> None:
        self.root, self.name, self.clock = root, name, clock
        if name is not None and not (root / K.FEDERATION_FILE).exists():
            K.init(root, name)
        self.open()

    def open(self) -> None:
        self.store = Store.open(self.root)
        self.engine = Engine(self.store, None, endpoint_url="http://127.0.0.1:9/mcp", clock=self.clock,  # type: ignore[arg-type]
                             run_sync=direct)
        self.desk: PairingDesk | None = open_desk(self.root, self.engine)
        self.engine.federation = self.desk

    def reopen(self) -> None:
        self.store.close()
        self.open()

    def close(self) -> None:
        self.store.close()


def test_a_federated_box_s_hub_is_restored_with_its_outbox_and_inbox(tmp_path: Path) -> None:
    box = Box(tmp_path / "a", "laptop", Clock())
    hub = box.engine.hub
    assert hub.outbox is not None and hub.inbox is not None
    assert hub.outbox.rows == {} and hub.inbox.records == {}
    # a published outbox row and an accepted inbox record (the core's, made for other box ids),
    # committed through the store
    outbox, effects = O.admit(TO.empty(), TO.message("m-1"), nonce=TO.NONCE, now=TO.T0)
    box.store.apply(records(effects))
    outbox, effects = O.publish_new(outbox, TO.message("m-1").identity, now=TO.T0, bus_up=True)
    box.store.apply(records(effects))
    inbox, effects = I.accept(TI.empty(), TI.judged(TI.message(), TI.empty()), nonce=TI.N1, now=TI.NOW,
                              recipient=TI.RECIPIENT, reason="ready")
    box.store.apply(records(effects))
    box.reopen()
    hub = box.engine.hub
    assert hub.outbox is not None and hub.inbox is not None
    row = hub.outbox.rows[TO.message("m-1").identity]
    assert row == outbox.rows[row.identity] and row.state is O.OutboxState.PUBLISHED and row.attempt == 1
    assert hub.inbox.records == inbox.records and I.may_deliver(hub.inbox, TI.ID1)
    assert box.desk is not None and hub.inbox.own == hub.outbox.own == box.desk.local.box_id
    box.close()


def test_a_box_that_does_not_federate_has_neither(tmp_path: Path) -> None:
    box = Box(tmp_path / "plain", None, Clock())
    assert box.desk is None and box.engine.hub.outbox is None and box.engine.hub.inbox is None
    box.close()

