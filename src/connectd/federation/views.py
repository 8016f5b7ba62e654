"""What the pairing desk shows (a part of :mod:`connectd.federation.desk`): this box, its requests and
pairings as the person sees them, the bus's status, the paired boxes' agents, and the view the envelope
judgement reads (:func:`connectcore.federation.envelope.judge`). Read-only: nothing here changes the book.

The bus loops (``pump``), the directory across boxes (``directory``), the engine's hub (``hub``) and the
settings are given as callables: each is set, or replaced, after the desk is built.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from connectcore import hub as H
from connectcore.federation import envelope as E
from connectcore.federation import pairing as P
from connectcore.federation import remote_directory as RD
from connectd.federation.ledger import PairLedger
from connectd.federation.seal import LocalBox

if TYPE_CHECKING:
    from connectd.federation.settings import Settings


class PairingViews:
    """The desk's reads, each of the book as it is now."""

    def __init__(
        self,
        ledger: PairLedger,
        local: LocalBox,
        *,
        settings: Callable[[], Settings],
        heard: dict[str, float],
        pump: Callable[[], Any],
        directory: Callable[[], Any],
        hub: Callable[[], Any],
        clock: Callable[[], float],
    ) -> None:
        """``heard``: box id -> when an envelope from it last verified (the desk's, written as it verifies)."""
        self.ledger, self.local, self.settings, self.heard = ledger, local, settings, heard
        self.pump, self.directory, self.hub, self.clock = pump, directory, hub, clock

    def this_box(self) -> dict[str, str]:
        return {"box": self.local.box_id, "name": self.settings().name, "fingerprint": self.local.keys.fingerprint}

    def request_view(self, r: P.PairRequest) -> dict[str, Any]:
        return {
            "id": r.id, "box": r.box_id, "name": r.name, "fingerprint": r.keys.fingerprint, "state": str(r.state),
            "reason": r.reason, "invitation": r.invitation, "received_at": r.received_at, "pairing": r.pairing,
            "this_box": self.this_box(),
        }

    def pairing_view(self, p: P.Pairing) -> dict[str, Any]:
        """A pairing as the person sees it, with its settings (``settings`` by key, ``settings_words`` as
        ``pair set`` takes them), when its box was last heard (``heard_at``: an envelope from it
        verified; kept in memory, so None again after a restart until it is heard) and its directory's
        age (:meth:`directory_age`)."""
        return {
            "name": p.name, "box": p.box_id, "fingerprint": p.keys.fingerprint, "state": str(p.state),
            "since": p.since, "role": str(p.role), "pairing": p.id, "invitation": p.invitation,
            "removed_by": p.removed_by, "expires_at": p.expires_at, "heard_at": self.heard.get(p.box_id),
            "settings": dataclasses.asdict(p.settings), "settings_words": list(P.settings_words(p.settings)),
            **self.directory_age(p), "in_flight": self.in_flight(p),
        }

    def in_flight(self, p: P.Pairing) -> dict[str, int]:
        """The messages in flight across the pairing (:func:`connectcore.hub.in_flight`): ``sent`` to its
        box and not final here, ``received`` from it and not final here."""
        hub = self.hub()
        if p.id is None or getattr(hub, "outbox", None) is None:
            return {"sent": 0, "received": 0}
        return dataclasses.asdict(H.in_flight(hub, p.id))

    def directory_age(self, p: P.Pairing) -> dict[str, Any]:
        """How old the directory entry held from the pairing's box is (``directory_age``: seconds, None
        when none is held; ``directory``: ``fresh``, ``stale (N min)``, ``aged out`` or ``none yet``;
        :func:`connectcore.federation.remote_directory.age_words`). Held in memory: none yet after a
        restart until the entry is read again."""
        seconds = None
        directory = self.directory()
        if directory is not None and p.state is P.PairingState.ACTIVE:
            seconds = RD.entry_age(directory.held, p.box_id, p.id, self.clock())
        return {"directory_age": None if seconds is None else int(seconds), "directory": RD.age_words(seconds)}

    def status(self) -> dict[str, Any]:
        """This box, its NATS server and whether the bus is connected (None: no server named, or the
        loops not started), with the counts a person looks at first."""
        pump, book = self.pump(), self.ledger.book
        bus: dict[str, Any] = pump.status() if pump is not None else {"connected": None, "last_error": None}
        return {
            "this_box": self.this_box(), "nats": self.settings().nats, **bus,
            "pending_requests": sum(r.state is P.RequestState.PENDING for r in book.requests.values()),
            "pairings": sum(p.state is P.PairingState.ACTIVE for p in book.pairings.values()),
        }

    def remote_agents(self) -> list[dict[str, Any]]:
        """The agents the paired boxes share, as ``list_agents`` adds them (each with its box, its address
        qualified by the box's name, the entry's age and freshness; removed and aged-out pairings' not
        shown): for the person's views, read-only (the other box's owner decides who reaches them)."""
        directory = self.directory()
        return [] if directory is None else list(directory.listing())

    async def checked_status(self) -> dict[str, Any]:
        """:meth:`status` with the bus's read-only checks (``checks``: the NATS server's version, JetStream,
        this box's consumer; None when the bus is not connected or no server is named), for ``connectd doctor``."""
        pump = self.pump()
        checks = await pump.health() if pump is not None else None
        return {**self.status(), "checks": checks}

    def requests(self, *, include_decided: bool = False) -> list[dict[str, Any]]:
        rows = sorted(self.ledger.book.requests.values(), key=lambda r: (r.received_at, r.id))
        return [self.request_view(r) for r in rows if include_decided or r.state is P.RequestState.PENDING]

    def box_names(self) -> dict[str, str]:
        """This box's name for each box it paired with, by box id (:func:`connectcore.federation.pairing.box_name`:
        the live pairing's name, else the latest's)."""
        book = self.ledger.book
        return {box: P.box_name(book, box) for box in {p.box_id for p in book.pairings.values()}}

    def pairings(self) -> list[dict[str, Any]]:
        pairings = self.ledger.book.pairings.values()
        return [self.pairing_view(p) for p in sorted(pairings, key=lambda p: (p.since, p.invitation))]

    def view(self) -> E.View:
        """What the envelope judgement reads: the keys pinned per box, each box's active pairing and
        every pairing ever made with it."""
        peers = P.envelope_peers(self.ledger.book)
        hub = self.hub()
        inbox, outbox = getattr(hub, "inbox", None), getattr(hub, "outbox", None)
        return E.View(own=self.local.box_id, peers=peers, now=self.clock(),
                      skew_bound=outbox.settings.skew_bound if outbox is not None else E.SKEW_BOUND,
                      retention=inbox.retention if inbox is not None else E.RETENTION,
                      retained=inbox.retained() if inbox is not None else {},
                      sent=outbox.sent() if outbox is not None else {})
