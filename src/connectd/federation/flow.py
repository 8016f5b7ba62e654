"""The daemon's side of messages across boxes (docs/federation.md, "On the receiving box", "On the
sending box"): what joins the pairing desk and its bus loops to the engine's hub. The rules are the
core's (:mod:`connectcore.hub.federation`); this module only hands it the events and the values the
shell knows.

- At start (:func:`attach`), a federated box's hub gets its outbox and inbox back from the store
  (``outbox_rows``, ``inbox_records``; the pairings removed from the pairing book): everything it
  committed before a restart goes on from its state. A box that does not federate keeps ``None``.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from connectcore import hub as H
from connectcore._machine import freeze
from connectcore.federation import inbox as I
from connectcore.federation import outbox as O
from connectcore.federation import pairing as P

if TYPE_CHECKING:
    from connectd.federation.desk import PairingDesk

log = logging.getLogger("connectd.federation")


def restored(hub: H.Hub, desk: PairingDesk, store: Any) -> H.Hub:
    """``hub`` with this box's outbox and inbox as the store holds them."""
    own = desk.local.box_id
    removed = [p.id for p in desk.book.pairings.values() if p.id and p.state is P.PairingState.REMOVED]
    outbox = O.Outbox(own=own, rows=freeze((r.identity, r) for r in store.outbox_rows()))
    inbox = I.load(own, store.inbox_records(), removed=removed)
    return replace(hub, outbox=outbox, inbox=inbox)


def attach(engine: Any, desk: PairingDesk) -> None:
    """Join a federated box's desk to its engine: the hub restored with its outbox and inbox."""
    engine.hub = restored(engine.hub, desk, engine.store)
