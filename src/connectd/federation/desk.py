"""The pairing desk: the daemon's side of pairing (docs/federation.md, "Pairing"). It holds this box's
:class:`~connectcore.federation.pairing.PairBook` and runs the core's steps on it, for the person's calls
(``pair invite``, ``accept``, ``approve``, ``decline``, ``remove``, ``set``) and for the pairing envelopes
the bus hands it. The rules are the core's; the desk only sequences them, in five parts, each given the
few collaborators it uses.

- :class:`~connectd.federation.ledger.PairLedger`: the book, and each step committed (its records, audit
  lines and the wires it owes the bus in one transaction of the daemon's store) before the book changes;
- :class:`~connectd.federation.steps.PairingSteps`: the person's steps and the expiry tick;
- :class:`~connectd.federation.envelopes.Envelopes`: envelopes from the bus judged and stepped (or handed
  to the engine's hub), and the bus effects handed to the bus loops;
- :class:`~connectd.federation.views.PairingViews`: what the person sees, and the judgement's view;
- :mod:`connectd.federation.settings`: ``federation.toml`` (which change of it a running daemon takes
  is the core's: :func:`connectcore.federation.connection.reload_refusal`).

The desk builds them, keeps what the bus loops, the directory and history across boxes and the engine's
side of message envelopes share (``book``, ``heard``, ``audited``, ``owed``, ``pump``, ``messages``, ...), and
answers for them: its callers call the desk. Without ``nats`` the desk still invites and lists; what it
owes waits in the store.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import anyio

from connectcore.effects import Audit
from connectcore.federation import envelope as E
from connectcore.federation import pairing as P
from connectcore.federation.connection import Change, reload_change, reload_refusal
from connectcore.federation.effects import BusEffect, PublishEnvelope, PublishReceipt
from connectcore.federation.policy import DEFAULT as DEFAULT_FEDERATION
from connectcore.federation.policy import FederationPolicy
from connectcore.ports import Delivery
from connectd.daemon.supervisor import Kind, Supervisor
from connectd.federation import keys as K
from connectd.federation.directory import attach as attach_directory
from connectd.federation.envelopes import Envelopes
from connectd.federation.flow import attach
from connectd.federation.history import attach as attach_history
from connectd.federation.ledger import PairLedger
from connectd.federation.remote_calls import RemoteCalls
from connectd.federation.seal import LocalBox
from connectd.federation.settings import NATS_FIELDS, RESEND, Settings
from connectd.federation.steps import PairingSteps
from connectd.federation.views import PairingViews
from connectd.store.pair_records import PairRecords, Wire

__all__ = ["EXPIRY_EVERY", "NATS_FIELDS", "RESEND", "PairingDesk", "Settings", "msg_id", "open_desk"]

log = logging.getLogger("connectd.federation")

EXPIRY_EVERY = 5.0  # seconds between looks for invitations and requested pairings past their time


class _Secrets:
    """The desk's parts draw ids, secrets and nonces from this module's ``secrets`` at each call, so a
    simulation that seeds it (``tests/simulation/federation_driver.seeded_secrets``) seeds them all."""

    def token_bytes(self, n: int) -> bytes:
        return secrets.token_bytes(n)

    def token_hex(self, n: int) -> str:
        return secrets.token_hex(n)


class PairingDesk:
    """This box's pairing book and the steps on it (one at a time, each durable before it shows)."""

    def __init__(
        self,
        local: LocalBox,
        settings: Settings,
        records: PairRecords,
        *,
        clock: Callable[[], float],
        run_sync: Callable[..., Any] | None = None,
        publish_audit: Callable[[Audit], None] = lambda _a: None,
        notify: Callable[[dict[str, Any]], None] = lambda _n: None,
        hub: Callable[[], Any] = lambda: None,
    ) -> None:
        self.local = local
        self.settings = settings
        self.clock = clock
        self.run_sync = run_sync or anyio.to_thread.run_sync
        self.hub = hub  # the engine's hub now (its outbox holds the rows a PublishEnvelope names)
        self.pump: Any = None  # the bus loops (connectd.federation.pump.Pump), once started with a NATS server
        self.bus: Any = None  # the bus the pump is given at start (None: NATS, as federation.toml says; the simulation's SimLink)
        self.early: list[BusEffect] = []  # receipts handed before the bus loops started (the engine's recovery)
        self.messages: Any = None  # the engine's side of message envelopes (connectd.federation.flow.RemoteFlow)
        self.heard: dict[str, float] = {}  # box id -> when an envelope from it last verified (FederationTick)
        # the directory across boxes (connectd.federation.directory.RemoteDirectoryDesk; slice 7)
        self.directory: Any = None
        # remote history search (connectd.federation.history.RemoteHistoryDesk; slice 7)
        self.history: Any = None
        self.data_dir: Path | None = None  # where federation.toml is (set by open: a reload reads it again)
        self._supervisor: Supervisor | None = None  # the daemon's, once started (a reload starts the bus loops)
        self._reloading = anyio.Lock()  # one reload at a time
        # the parts; what is set or replaced later (settings, hub, pump, messages, directory) read at each use
        self.ledger = PairLedger(
            local, records.pair_book(local.box_id, settings.name), records, clock=clock, run_sync=self.run_sync,
            publish_audit=publish_audit, notify=notify, draw=_Secrets(),
        )
        self.views = PairingViews(
            self.ledger, local, settings=lambda: self.settings, heard=self.heard, pump=lambda: self.pump,
            directory=lambda: self.directory, hub=lambda: self.hub(), clock=clock,
        )
        self.steps = PairingSteps(
            self.ledger, local, self.views, settings=lambda: self.settings, messages=lambda: self.messages,
            directory=lambda: self.directory,
        )
        self.envelopes = Envelopes(
            self.ledger, local, view=self.views.view, heard=self.heard, removed=self.steps.removed,
            messages=lambda: self.messages, pump=lambda: self.pump, hub=lambda: self.hub(),
        )

    @classmethod
    def open(cls, data_dir: Path, records: PairRecords, **kw: Any) -> PairingDesk | None:
        """The desk of a box set up for federation (``federation.toml`` and ``box.key``), on the
        daemon's store (``records``), else None."""
        settings = Settings.read(data_dir)
        if settings is None:
            return None
        local = LocalBox.from_secrets(K.read(data_dir))
        desk = cls(local, settings, records, **kw)
        desk.data_dir = data_dir
        return desk

    def start(self, supervisor: Supervisor) -> None:
        """The expiry tick, the federation tick (joined to an engine) and, when ``federation.toml``
        names a NATS server, the bus loops."""
        self._supervisor = supervisor
        supervisor.spawn(Kind.TICK, self.tick, every=EXPIRY_EVERY, name="pairing expiry")
        if self.messages is not None:
            supervisor.spawn(Kind.TICK, self.messages.tick, every=self.messages.every, name="federation tick")
        if self.settings.nats:
            from connectd.federation.pump import Pump  # nats is imported only by a box that federates

            self.pump = Pump(self, bus=self.bus)
            self.pump.start(supervisor)
            for effect in self.early:
                self.pump.hand(effect)
        self.early = []

    async def reload(self, *, actor: str = P.OWNER) -> dict[str, Any]:
        """``federation.toml`` read again (``connectd federate --nats ...`` or ``--off`` asks the running
        daemon, ``POST /api/pairing/reload``). Which change is taken is the core's
        (:func:`connectcore.federation.connection.reload_refusal`, :func:`~connectcore.federation.connection.
        reload_change`): a daemon with no bus starts its loops; one whose loops run has them stopped
        between deliveries (:meth:`connectd.federation.pump.Pump.stop`: each delivery's handling and its
        effects finish first; outside the desk's lock, which a delivery's handling takes) and its old
        connection closed, then, under the desk's lock, the settings and the pump replaced together (new
        loops on the new server, taking over what the old ones were handed and did not run; none for
        ``--off``: the daemon serves its own fleet with no NATS). Audited (``federation.settings``,
        ``picked_up``). Another name, or the file gone, needs a restart and changes nothing;
        ``restart_needed`` says which. One reload at a time."""
        if self.data_dir is None or self._supervisor is None:
            return {"picked_up": False, "restart_needed": True, "why": "this desk was not started by a daemon"}
        supervisor = self._supervisor
        async with self._reloading:
            settings = Settings.read(self.data_dir)
            async with self.lock:
                refused = reload_refusal(self.settings.values(), None if settings is None else settings.values(),
                                         bus_running=self.pump is not None)
            if refused is not None:
                why, restart = refused
                return {"picked_up": False, "restart_needed": restart, "nats": self.settings.nats, "why": why}
            assert settings is not None
            old, was = self.pump, self.settings.nats
            change = reload_change(settings.values(), bus_running=old is not None)
            if old is not None:
                await old.stop()  # between deliveries; the old connection closed
                if self.messages is not None:
                    try:  # the outbox sees the bus down: accepted rows go again once up
                        await self.messages.bus_moved()
                    except Exception as exc:  # (the store): they wait for their poll instead; the move goes on
                        log.warning("federation: the tick that saw the bus down failed: %s", exc)
                if self.directory is not None:
                    self.directory.bus_moved()  # this box's entries put again at once on the new server
            detail = {
                Change.START: f"NATS {settings.nats}: the bus loops start",
                Change.MOVE: f"NATS {was} -> {settings.nats}: the bus loops moved (what is not yet receipted is "
                             "published again there)",
                Change.STOP: f"NATS {was} -> none: the bus loops stopped (this box serves its own fleet)",
            }[change]
            async with self.lock:
                await self.ledger.audit(Audit(actor, "federation.settings", "picked_up", detail=detail, at=self.clock()))
                pump = None
                if settings.nats:
                    from connectd.federation.pump import Pump  # nats is imported only by a box that federates

                    pump = Pump(self)
                    if old is not None:
                        pump.take_over(old)
                elif old is not None and (left := old.left()):  # --off: no bus to publish them on
                    log.info("federation: %d receipt(s) not published (no NATS now): the inbox holds each, "
                             "answered to its sender's next copy once a bus runs again", len(left))
                self.settings, self.pump = settings, pump  # together: nothing runs between these
                if pump is not None:
                    pump.start(supervisor)
        log.info("federation: federation.toml picked up: %s", detail)
        return {"picked_up": True, "restart_needed": False, "nats": settings.nats, "why": None, "change": str(change)}

    # --- what the parts share (read and written by the bus loops and the engine's side) ---------

    @property
    def book(self) -> P.PairBook:
        return self.ledger.book

    @book.setter
    def book(self, book: P.PairBook) -> None:
        self.ledger.book = book

    @property
    def records(self) -> PairRecords:
        return self.ledger.records

    @records.setter
    def records(self, records: PairRecords) -> None:
        self.ledger.records = records

    @property
    def lock(self) -> anyio.Lock:
        return self.ledger.lock

    @property
    def owed(self) -> anyio.Event:
        """Set when a wire becomes due: the publisher looks at once (which replaces it after each look)."""
        return self.ledger.owed

    @owed.setter
    def owed(self, event: anyio.Event) -> None:
        self.ledger.owed = event

    @property
    def audited(self) -> E.RefusalAudits:
        """(box, reason) -> when a refusal of it was last audited (a flood, one a minute)."""
        return self.envelopes.audited

    @audited.setter
    def audited(self, audited: E.RefusalAudits) -> None:
        self.envelopes.audited = audited

    # --- the person's steps (connectd.federation.steps) -----------------------------------------

    async def invite(self, expires_in: float = P.DEFAULT_EXPIRES, *, actor: str = P.OWNER) -> dict[str, Any]:
        return await self.steps.invite(expires_in, actor=actor)

    async def revoke(self, invitation_id: str, *, actor: str = P.OWNER) -> dict[str, Any]:
        return await self.steps.revoke(invitation_id, actor=actor)

    async def approve(self, who: str, *, name: str | None = None, actor: str = P.OWNER) -> dict[str, Any]:
        return await self.steps.approve(who, name=name, actor=actor)

    async def decline(self, who: str, *, actor: str = P.OWNER) -> dict[str, Any]:
        return await self.steps.decline(who, actor=actor)

    async def accept(self, text: str, *, name: str | None = None, actor: str = P.OWNER) -> dict[str, Any]:
        return await self.steps.accept(text, name=name, actor=actor)

    def pairing(self, who: str) -> dict[str, Any]:
        """The pairing ``who`` (a name or box id) names, as ``pair list`` shows it (the core's
        :func:`connectcore.federation.pairing.pairing_named`: the live one, else the latest), or
        :class:`connectcore.federation.pairing.PairingError`."""
        return self.pairing_view(P.pairing_named(self.book, who))

    async def remove(self, who: str, *, actor: str = P.OWNER) -> dict[str, Any]:
        return await self.steps.remove(who, actor=actor)

    async def set_settings(self, who: str, words: Sequence[str], *, actor: str = P.OWNER) -> dict[str, Any]:
        return await self.steps.set_settings(who, words, actor=actor)

    async def tick(self) -> None:
        await self.steps.tick()

    # --- the bus (connectd.federation.envelopes) ------------------------------------------------

    async def received(self, subject: str, data: bytes, delivery: Delivery | None = None) -> bool:
        return await self.envelopes.received(subject, data, delivery)

    async def refusal_audited(self, actor: str, reason: str, detail: str, *, message_id: str | None = None) -> bool:
        return await self.envelopes.refusal_audited(actor, reason, detail, message_id=message_id)

    def hand(self, effect: BusEffect) -> None:
        """The interpreter's handler for a bus effect (:meth:`Envelopes.hand`). A receipt handed before
        the loops start (the engine's recovery runs first: a card that expired while the daemon was
        down, a message it was typing) waits for them: before, it was dropped, and its sender learned
        the outcome only from its 300 s poll (tests/integration/test_federation_faults.py)."""
        if self.pump is None and isinstance(effect, PublishReceipt) and self.settings.nats and self._supervisor is None:
            self.early.append(effect)
            return
        self.envelopes.hand(effect)

    def wire_for(self, effect: PublishEnvelope | PublishReceipt) -> tuple[str, bytes] | None:
        return self.envelopes.wire_for(effect)

    # --- views (connectd.federation.views) ------------------------------------------------------

    def this_box(self) -> dict[str, str]:
        return self.views.this_box()

    def request_view(self, r: P.PairRequest) -> dict[str, Any]:
        return self.views.request_view(r)

    def pairing_view(self, p: P.Pairing) -> dict[str, Any]:
        return self.views.pairing_view(p)

    def directory_age(self, p: P.Pairing) -> dict[str, Any]:
        return self.views.directory_age(p)

    def status(self) -> dict[str, Any]:
        return self.views.status()

    async def checked_status(self) -> dict[str, Any]:
        return await self.views.checked_status()

    def remote_agents(self) -> list[dict[str, Any]]:
        return self.views.remote_agents()

    def requests(self, *, include_decided: bool = False) -> list[dict[str, Any]]:
        return self.views.requests(include_decided=include_decided)

    def box_names(self) -> dict[str, str]:
        return self.views.box_names()

    def pairings(self) -> list[dict[str, Any]]:
        return self.views.pairings()

    def view(self) -> E.View:
        return self.views.view()


def msg_id(wire: Wire | bytes, attempt: int) -> str:
    """The ``Nats-Msg-Id`` of one attempt: the wire's digest and the attempt (docs/federation.md)."""
    data = wire.wire if isinstance(wire, Wire) else wire
    return f"{hashlib.sha256(data).hexdigest()[:32]}-{attempt}"


def open_desk(data_dir: Path, engine: Any, settings: FederationPolicy = DEFAULT_FEDERATION) -> PairingDesk | None:
    """The engine's pairing desk, or None for a box not set up for federation; a desk is joined to
    the engine's hub (:func:`connectd.federation.flow.attach`: its outbox and inbox from the store), and
    the agent calls given their way to other boxes (:class:`connectd.federation.remote_calls.RemoteCalls`).
    Federation's composition root: it takes the engine and gives each part the few collaborators it
    uses (but :func:`connectd.federation.directory.attach`, which still takes the engine)."""
    desk = PairingDesk.open(
        data_dir, engine.store, clock=engine.clock, run_sync=engine.run_sync,
        publish_audit=engine.interpreter.published, notify=engine.subscribers.publish, hub=lambda: engine.hub,
    )
    if desk is not None:
        attach(  # policy.toml's [federation] bounds
            desk, core=engine.runner, store=engine.store, clock=engine.clock, ids=engine.ids, watcher=engine.watcher,
            person=engine.person, settings=settings,
        )
        engine.calls.remote = RemoteCalls(
            federation=lambda: engine.federation, core=engine.runner, clock=engine.clock, ids=engine.ids,
            subscribers=engine.subscribers, watcher=engine.watcher,
        )
        engine.person.box_names = desk.box_names  # a revocation names the boxes that owe a cancel's receipt
        attach_directory(desk, directory_view=engine.calls.directory_view, audit=engine.runner.audit,
                         subscribers=engine.subscribers)  # the directory across boxes (slice 7)
        attach_history(desk, core=engine.runner, history=lambda: engine.history)  # remote history search (slice 7)
    return desk
