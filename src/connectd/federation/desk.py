"""The pairing desk: the daemon's side of pairing (docs/federation.md, "Pairing"). It holds this box's
:class:`~connectcore.federation.pairing.PairBook`, runs the core's steps for the person's calls (``pair
invite``, ``accept``, ``approve``, ``decline``, ``remove``, ``set``) and for the pairing envelopes the bus hands
it, commits each step (its records, its audit lines and the wires it owes the bus) in one transaction of
the daemon's store (its part :class:`~connectd.store.pair_records.PairRecords`) before the book changes,
and seals and signs those wires once (:mod:`connectd.federation.seal`), so every publish of one is the
same bytes. The rules are the core's; this module only sequences them.

- ``pair accept`` pins the inviter's keys from the code and owes a ``pair_request`` (sealed to the
  inviter, holding the code's secret), published again every ``resend`` seconds until an answer comes or
  the pairing ends. Accepting a code again returns the pairing it made (a repeat); a code whose
  invitation this box used with other keys is refused.
- ``pair approve`` / ``decline`` owe the ``pair_accept`` / ``pair_decline``; a repeated request from
  the same box is answered with it again and changes nothing.
- ``pair remove`` owes a signed ``unpair``; the other box records ``removed_by_peer``.
- A pairing envelope is judged by :func:`connectcore.federation.envelope.judge` with the keys the book
  pins; a refusal (of the envelope or of the pairing step) is one audit line and changes nothing; a
  flooding box's refused envelopes are one audit line a minute per reason
  (:func:`connectcore.federation.envelope.refusal_audit_due`).

Settings come from ``federation.toml`` (:class:`Settings`): ``name`` (``federate init``) and, to
reach NATS, ``nats`` (the server URL) with ``creds`` (a credentials file) or ``user`` and
``password_file``, and ``tls_ca``, ``tls_cert``, ``tls_key`` (``connectd federate --nats URL ...`` writes
them, ``--off`` clears them). Without ``nats`` the desk still invites and lists; what it owes waits in the store.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import secrets
import ssl
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import anyio

from connectcore.effects import Audit, Effect, Notify
from connectcore.federation import envelope as E
from connectcore.federation import outbox as O
from connectcore.federation import pairing as P
from connectcore.federation import remote_directory as RD
from connectcore.federation.boxes import BoxKeys
from connectcore.federation.effects import BusEffect, PublishEnvelope, PublishReceipt
from connectcore.ports import Delivery
from connectd.daemon.ids import EngineError
from connectd.daemon.supervisor import Kind, Supervisor
from connectd.federation import keys as K
from connectd.federation.directory import attach as attach_directory
from connectd.federation.flow import attach
from connectd.federation.history import attach as attach_history
from connectd.federation.remote_calls import RemoteCalls
from connectd.federation.seal import LocalBox, receive, seal, seal_encoded
from connectd.store.pair_records import PairRecords, Wire

log = logging.getLogger("connectd.federation")
T = TypeVar("T")

#: The settings of how this box reaches NATS (what ``federate --nats``/``--off`` write).
NATS_FIELDS = ("nats", "creds", "user", "password_file", "tls_ca", "tls_cert", "tls_key")
RESEND = 10.0  # seconds between copies of a pair_request while it waits for its answer
EXPIRY_EVERY = 5.0  # seconds between looks for invitations and requested pairings past their time


@dataclass(frozen=True)
class Settings:
    """``federation.toml``: this box's name, and how it reaches NATS (``nats`` None: it does not)."""

    name: str
    nats: str | None = None
    creds: str | None = None
    user: str | None = None
    password_file: str | None = None
    resend: float = RESEND
    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None

    @classmethod
    def read(cls, data_dir: Path) -> Settings | None:
        """The settings, or None when this box is not set up for federation (no ``federation.toml``)."""
        path = data_dir / K.FEDERATION_FILE
        if not path.exists():
            return None
        try:
            row = tomllib.loads(path.read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise K.BoxKeyError(f"{path} cannot be read ({exc})") from None
        known = {"name", "nats", "creds", "user", "password_file", "resend", "tls_ca", "tls_cert", "tls_key"}
        unknown = sorted(set(row) - known)
        if unknown or not isinstance(row.get("name"), str):
            raise K.BoxKeyError(f"{path}: needs name = \"...\" and takes only {sorted(known)} (unknown: {unknown})")
        return cls(
            name=row["name"], nats=row.get("nats"), creds=row.get("creds"), user=row.get("user"),
            password_file=row.get("password_file"), resend=float(row.get("resend", RESEND)),
            tls_ca=row.get("tls_ca"), tls_cert=row.get("tls_cert"), tls_key=row.get("tls_key"),
        )

    def password(self) -> str | None:
        return None if self.password_file is None else Path(self.password_file).read_text().strip()

    def tls(self) -> ssl.SSLContext | None:
        """The TLS context ``tls_ca`` / ``tls_cert`` and ``tls_key`` ask for (None: the URL's scheme decides)."""
        if not (self.tls_ca or self.tls_cert):
            return None
        context = ssl.create_default_context(cafile=self.tls_ca)
        if self.tls_cert:
            context.load_cert_chain(self.tls_cert, self.tls_key)
        return context


def _named(find: Callable[[P.PairBook, str], T], book: P.PairBook, who: str) -> T:
    """What ``who`` names in the book, by the core's lookup (pairing.py, P11); a refusal is the engine's
    (a 400, or 409 ``ambiguous``, as the owner API has always answered it)."""
    try:
        return find(book, who)
    except P.PairingError as refused:
        raise EngineError(str(refused.reason), str(refused)) from None


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
        self.records = records
        self.clock = clock
        self.run_sync = run_sync or anyio.to_thread.run_sync
        self.publish_audit = publish_audit
        self.notify = notify
        self.hub = hub  # the engine's hub now (its outbox holds the rows a PublishEnvelope names)
        self.book = records.pair_book(local.box_id, settings.name)
        self.lock = anyio.Lock()
        self.owed = anyio.Event()  # set when a wire becomes due: the publisher looks at once
        self.pump: Any = None  # the bus loops (connectd.federation.pump.Pump), once started with a NATS server
        self.early: list[BusEffect] = []  # receipts handed before the bus loops started (the engine's recovery)
        self.messages: Any = None  # the engine's side of message envelopes (connectd.federation.flow.RemoteFlow)
        self.heard: dict[str, float] = {}  # box id -> when an envelope from it last verified (FederationTick)
        # (box, reason) -> when a refusal of it was last audited (envelope.refusal_audit_due: a flood, one a minute)
        self.audited: E.RefusalAudits = {}
        # the directory across boxes (connectd.federation.directory.RemoteDirectoryDesk; slice 7)
        self.directory: Any = None
        # remote history search (connectd.federation.history.RemoteHistoryDesk; slice 7)
        self.history: Any = None
        self.data_dir: Path | None = None  # where federation.toml is (set by open: a reload reads it again)
        self._supervisor: Supervisor | None = None  # the daemon's, once started (a reload starts the bus loops)

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

            self.pump = Pump(self)
            self.pump.start(supervisor)
            for effect in self.early:
                self.pump.hand(effect)
        self.early = []

    async def reload(self, *, actor: str = P.OWNER) -> dict[str, Any]:
        """``federation.toml`` read again (``connectd federate --nats ...`` asks the running daemon). The
        one change taken without a restart is the safe one: a daemon whose bus loops never started (it
        started with no NATS server named) starts them now, as a start would, when the file now names one
        and nothing else changed. Anything else (another server, ``--off``, another name) needs a restart:
        stopping the running loops is not safe yet (docs/federation.md, build order 4). Changes nothing
        then. ``restart_needed`` says which."""
        if self.data_dir is None or self._supervisor is None:
            return {"picked_up": False, "restart_needed": True, "why": "this desk was not started by a daemon"}
        settings = Settings.read(self.data_dir)
        async with self.lock:
            if settings == self.settings:
                return {"picked_up": False, "restart_needed": False, "nats": self.settings.nats, "why": "nothing changed"}
            why, restart = None, True
            if settings is None:
                why = "federation.toml is gone"
            elif dataclasses.replace(settings, **{k: getattr(self.settings, k) for k in NATS_FIELDS}) != self.settings:
                why = "more than how this box reaches NATS changed (its name, resend): a restart reads it"
            elif self.pump is not None:
                why = (f"the running daemon's bus uses {self.settings.nats}: "
                       + ("moving it to another server" if settings.nats else "turning federation off")
                       + " needs a restart")
            elif not settings.nats:
                why, restart = "no NATS server named: no bus to start", False
            if why is not None:
                return {"picked_up": False, "restart_needed": restart, "nats": self.settings.nats, "why": why}
            assert settings is not None
            self.settings = settings
            record = Audit(actor, "federation.settings", "picked_up", detail=f"NATS {settings.nats}: the bus loops start",
                           at=self.clock())
            await self.run_sync(lambda: self.records.apply_pairing([record]))
            self.publish_audit(record)
            from connectd.federation.pump import Pump  # nats is imported only by a box that federates

            self.pump = Pump(self)
            self.pump.start(self._supervisor)
        log.info("federation: federation.toml picked up: connecting to %s", settings.nats)
        return {"picked_up": True, "restart_needed": False, "nats": settings.nats, "why": None}

    # --- committing a step ----------------------------------------------------------------------

    async def _commit(self, book: P.PairBook, effects: Sequence[Effect], wires: Sequence[Wire] = ()) -> None:
        """Durable first (records, audit lines and owed wires in one transaction), then the book."""
        await self.run_sync(lambda: self.records.apply_pairing(effects, wires))
        self.book = book
        for effect in effects:
            if isinstance(effect, Audit):
                self.publish_audit(effect)
            elif isinstance(effect, Notify):
                self.notify({"topic": effect.topic, "key": list(effect.key), **dict(effect.payload)})
        if any(w.due_at is not None for w in wires):
            self.owed.set()

    async def _refused(self, error: P.PairingError, *, actor: str, action: str, target: str | None) -> None:
        record = error.audit(actor=actor, action=action, target=target, at=self.clock())
        await self.run_sync(lambda: self.records.apply_pairing([record]))
        self.publish_audit(record)

    def _wire(self, key: str, to: P.Pairing | P.PairRequest, inner: E.Inner, *, resend: float | None = None) -> Wire:
        now = self.clock()
        data = seal(self.local, to.keys, inner, secrets.token_bytes(E.NONCE_BYTES))
        return Wire(key, E.subject_for(inner.routing.kind, self.local.box_id, to.box_id), data, 0, now, resend, now)

    # --- the bus effects (connectcore.federation.effects) -------------------------------------------

    def hand(self, effect: BusEffect) -> None:
        """The interpreter's handler for a bus effect: to the bus loop, in order. Without a NATS server
        (or before the loops start) nothing is lost that matters: an outbox row is published again by
        its schedule, a receipt is answered again to the sender's next copy, and there is no delivery
        to acknowledge. A receipt handed before the loops start (the engine's recovery runs first: a card
        that expired while the daemon was down, a message it was typing) waits for them: before, it was
        dropped, and its sender learned the outcome only from its 300 s poll
        (tests/integration/test_federation_faults.py)."""
        if self.pump is None:
            if isinstance(effect, PublishReceipt) and self.settings.nats and self._supervisor is None:
                self.early.append(effect)
                return
            log.info("federation: no bus to run %s (no NATS server named)", type(effect).__name__)
            return
        self.pump.hand(effect)

    def _active_keys(self, box: str, pairing: str) -> BoxKeys | None:
        for p in self.book.pairings.values():
            if p.box_id == box and p.id == pairing and p.state is P.PairingState.ACTIVE:
                return p.keys
        return None

    def wire_for(self, effect: PublishEnvelope | PublishReceipt) -> tuple[str, bytes] | None:
        """The subject and the sealed, signed wire a publish effect asks for; None when there is nothing
        to publish (the pairing is not active here, or the outbox no longer holds the row)."""
        if isinstance(effect, PublishReceipt):
            routing, plain, nonce = effect.inner.routing, E.encode_inner(effect.inner), effect.nonce
        else:
            outbox = getattr(self.hub(), "outbox", None)
            row = None if outbox is None else outbox.rows.get(effect.identity)
            if row is None:
                log.warning("federation: no outbox row %s to publish", effect.identity)
                return None
            routing, plain, nonce = O.to_seal(row, effect.kind)
        assert routing.pairing is not None  # messages, cancels and receipts travel in a pairing
        keys = self._active_keys(routing.to, routing.pairing)
        if keys is None:
            log.info("federation: pairing %s with box %s is not active: %s not published", routing.pairing,
                     routing.to, routing.kind)
            return None
        wire = seal_encoded(self.local, keys, routing, plain, nonce)
        return E.subject_for(routing.kind, self.local.box_id, routing.to), wire

    # --- views ----------------------------------------------------------------------------------

    def this_box(self) -> dict[str, str]:
        return {"box": self.local.box_id, "name": self.settings.name, "fingerprint": self.local.keys.fingerprint}

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
            **self.directory_age(p),
        }

    def directory_age(self, p: P.Pairing) -> dict[str, Any]:
        """How old the directory entry held from the pairing's box is (``directory_age``: seconds, None
        when none is held; ``directory``: ``fresh``, ``stale (N min)``, ``aged out`` or ``none yet``;
        :func:`connectcore.federation.remote_directory.age_words`). Held in memory: none yet after a
        restart until the entry is read again."""
        seconds = None
        if self.directory is not None and p.state is P.PairingState.ACTIVE:
            seconds = RD.entry_age(self.directory.held, p.box_id, p.id, self.clock())
        return {"directory_age": None if seconds is None else int(seconds), "directory": RD.age_words(seconds)}

    def status(self) -> dict[str, Any]:
        """This box, its NATS server and whether the bus is connected (None: no server named, or the
        loops not started), with the counts a person looks at first."""
        bus: dict[str, Any] = self.pump.status() if self.pump is not None else {"connected": None, "last_error": None}
        return {
            "this_box": self.this_box(), "nats": self.settings.nats, **bus,
            "pending_requests": sum(r.state is P.RequestState.PENDING for r in self.book.requests.values()),
            "pairings": sum(p.state is P.PairingState.ACTIVE for p in self.book.pairings.values()),
        }

    def remote_agents(self) -> list[dict[str, Any]]:
        """The agents the paired boxes share, as ``list_agents`` adds them (each with its box, its address
        qualified by the box's name, the entry's age and freshness; removed and aged-out pairings' not
        shown): for the person's views, read-only (the other box's owner decides who reaches them)."""
        return [] if self.directory is None else list(self.directory.listing())

    async def checked_status(self) -> dict[str, Any]:
        """:meth:`status` with the bus's read-only checks (``checks``: the NATS server's version, JetStream,
        this box's consumer; None when the bus is not connected or no server is named), for ``connectd doctor``."""
        checks = await self.pump.health() if self.pump is not None else None
        return {**self.status(), "checks": checks}

    def requests(self, *, include_decided: bool = False) -> list[dict[str, Any]]:
        rows = sorted(self.book.requests.values(), key=lambda r: (r.received_at, r.id))
        return [self.request_view(r) for r in rows if include_decided or r.state is P.RequestState.PENDING]

    def box_names(self) -> dict[str, str]:
        """This box's name for each box it paired with, by box id (the newest pairing's name)."""
        return {p.box_id: p.name for p in sorted(self.book.pairings.values(), key=lambda p: p.since)}

    def pairings(self) -> list[dict[str, Any]]:
        return [self.pairing_view(p) for p in sorted(self.book.pairings.values(), key=lambda p: (p.since, p.invitation))]

    def view(self) -> E.View:
        """What the envelope judgement reads: the keys pinned per box, each box's active pairing and
        every pairing ever made with it."""
        peers: dict[str, E.Peer] = {}
        for p in sorted(self.book.pairings.values(), key=lambda p: p.since):
            had = peers.get(p.box_id)
            ids = (had.pairings if had else frozenset()) | ({p.id} if p.id else set())
            active = p.id if p.state is P.PairingState.ACTIVE else (had.active if had else None)
            peers[p.box_id] = E.Peer(p.keys, active, frozenset(ids))
        hub = self.hub()
        inbox, outbox = getattr(hub, "inbox", None), getattr(hub, "outbox", None)
        return E.View(own=self.local.box_id, peers=peers, now=self.clock(),
                      retained=inbox.retained() if inbox is not None else {},
                      sent=outbox.sent() if outbox is not None else {})

    # --- the inviter ----------------------------------------------------------------------------

    async def invite(self, expires_in: float = P.DEFAULT_EXPIRES, *, actor: str = P.OWNER) -> dict[str, Any]:
        """A new invitation; the code (with its secret) is in this answer only. ``actor``, here and in
        every person's step below, is who took it, as the owner API resolved them (the audit actor)."""
        secret = secrets.token_bytes(P.SECRET_BYTES)
        async with self.lock:
            book, effects = P.invite(
                self.book, invitation_id=secrets.token_hex(16), secret_hash=P.secret_hash(secret),
                now=self.clock(), expires_in=expires_in, actor=actor,
            )
            invitation = next(i for i in book.invitations.values() if i.id not in self.book.invitations)
            await self._commit(book, effects)
        code = P.Code(self.local.box_id, self.settings.name, self.local.keys, invitation.id, secret,
                      int(invitation.expires_at))
        return {"code": P.encode_code(code), "invitation": invitation.id, "expires_at": int(invitation.expires_at),
                **self.this_box()}

    async def revoke(self, invitation_id: str, *, actor: str = P.OWNER) -> dict[str, Any]:
        """Withdraw an open invitation (``pair invite --revoke ID``); its pending requests are refused."""
        async with self.lock:
            book, effects = P.revoke_invitation(self.book, invitation_id, now=self.clock(), actor=actor)
            await self._commit(book, effects)
            invitation = book.invitations[invitation_id]
            return {"invitation": invitation.id, "state": str(invitation.state)}

    def _answer_wire(self, book: P.PairBook, request: P.PairRequest) -> Wire | None:
        answer = P.answer(book, request.id)
        if answer is None:
            return None
        kind = E.Kind(answer.kind)
        routing = E.Routing(kind, self.local.box_id, request.box_id, pairing=answer.pairing,
                            invitation=answer.invitation)
        return self._wire(f"answer:{request.id}", request, E.PairingInner(routing, (("at", answer.at),)))

    async def approve(self, who: str, *, name: str | None = None, actor: str = P.OWNER) -> dict[str, Any]:
        async with self.lock:
            request = _named(P.pending_request, self.book, who)
            book, effects = P.approve(self.book, request.id, pairing_id=secrets.token_hex(16), now=self.clock(),
                                      name=name, actor=actor)
            wire = self._answer_wire(book, request)
            await self._commit(book, effects, [wire] if wire else [])
            return self.pairing_view(book.pairings[request.invitation])

    async def decline(self, who: str, *, actor: str = P.OWNER) -> dict[str, Any]:
        async with self.lock:
            request = _named(P.pending_request, self.book, who)
            book, effects = P.decline(self.book, request.id, now=self.clock(), actor=actor)
            wire = self._answer_wire(book, request)
            await self._commit(book, effects, [wire] if wire else [])
            return self.request_view(book.requests[request.id])

    # --- the invitee ----------------------------------------------------------------------------

    async def accept(self, text: str, *, name: str | None = None, actor: str = P.OWNER) -> dict[str, Any]:
        """Approval 1: pin the inviter's keys from the code and owe its pair_request. The same code
        again returns the pairing it made and changes nothing."""
        code = P.decode_code(text)
        if code.box == self.local.box_id:
            raise P.PairingError(P.Refusal.SELF_PAIRING, "this is this box's own invitation: a box cannot pair "
                                 "with itself (run `pair accept` on the other box)")
        async with self.lock:
            made = self.book.pairings.get(code.invitation)
            if (made is not None and made.box_id == code.box and made.keys == code.keys
                    and made.state in (P.PairingState.REQUESTED, P.PairingState.ACTIVE)):
                return {**self.pairing_view(made), "repeat": True, "this_box": self.this_box()}
            book, effects = P.accept_code(
                self.book, invitation_id=code.invitation, keys=code.keys, name=code.name if name is None else name,
                expires_at=float(code.expires_at), now=self.clock(), actor=actor,
            )
            pairing = book.pairings[code.invitation]
            routing = E.Routing(E.Kind.PAIR_REQUEST, self.local.box_id, code.box, invitation=code.invitation)
            inner = E.PairingInner(routing, (("name", self.settings.name), ("secret", E.b64(code.secret))))
            wire = self._wire(f"request:{code.invitation}", pairing, inner, resend=self.settings.resend)
            await self._commit(book, effects, [wire])
            return {**self.pairing_view(pairing), "repeat": False, "this_box": self.this_box()}

    # --- both -----------------------------------------------------------------------------------

    async def remove(self, who: str, *, actor: str = P.OWNER) -> dict[str, Any]:
        """Remove a pairing for good and owe the other box a signed unpair."""
        async with self.lock:
            pairing = _named(P.pairing_named, self.book, who)
            now = self.clock()
            book, effects = P.remove(self.book, pairing.invitation, now=now, actor=actor)
            wires = [Wire.settled(f"request:{pairing.invitation}")]  # nothing more to ask
            if pairing.id is not None:
                routing = E.Routing(E.Kind.UNPAIR, self.local.box_id, pairing.box_id, pairing=pairing.id)
                inner = E.PairingInner(routing, (("at", now), ("reason", "removed by its owner")))
                wires.append(self._wire(f"unpair:{pairing.id}", pairing, inner))
            await self._commit(book, effects, wires)
            removed = book.pairings[pairing.invitation]
        await self._removed(removed)
        return self.pairing_view(removed)

    async def _removed(self, pairing: P.Pairing) -> None:
        """What is queued across a pairing the book removed ends (the hub's ``PairingRemoved``, under
        the send locks: :meth:`connectd.federation.flow.RemoteFlow.pairing_removed`), outside the desk's
        lock, once the removal is durable."""
        if self.messages is not None:
            await self.messages.pairing_removed(pairing)

    async def set_settings(self, who: str, words: Sequence[str], *, actor: str = P.OWNER) -> dict[str, Any]:
        """``pair set BOX KEY=VALUE...``: the pairing's settings (the core's step checks every word, all
        or none); what arrives from that box is judged with them from the next message on. ``messages=off``
        also cancels what this box holds from that box and has not started typing, under the send locks
        (:meth:`connectd.federation.flow.RemoteFlow.messages_off`), once the setting is durable and
        outside the desk's lock, as a removal."""
        async with self.lock:
            pairing = _named(P.pairing_named, self.book, who)
            book, effects = P.set_settings(self.book, pairing.invitation, words, now=self.clock(), actor=actor)
            await self._commit(book, effects)
            updated = book.pairings[pairing.invitation]
        if self.messages is not None and not updated.settings.messages:
            await self.messages.messages_off(updated)
        return self.pairing_view(updated)

    async def tick(self) -> None:
        """Expire what is past its time (open invitations, requested pairings never answered)."""
        async with self.lock:
            book, effects = P.expire(self.book, now=self.clock())
            if effects:
                ended = [p for k, p in book.pairings.items() if p.state is not self.book.pairings[k].state]
                await self._commit(book, effects, [Wire.settled(f"request:{p.invitation}") for p in ended])

    # --- the bus --------------------------------------------------------------------------------

    async def received(self, subject: str, data: bytes, delivery: Delivery | None = None) -> bool:
        """One envelope the bus delivered: judged, and its pairing step taken, or (a message, receipt
        or cancel) handed to the engine's hub (``messages``); every refusal audited. Returns once what
        it changed is durable; True when the hub's step acknowledges ``delivery`` itself (after its
        commit), False when the caller acknowledges it now. Raises only when the store failed (then
        the delivery comes again)."""
        removed: P.Pairing | None = None
        async with self.lock:
            verdict = receive(self.local, subject, data, self.view())
            if verdict.decision is E.Decision.REFUSED:
                await self.refusal_audited(verdict.actor, str(verdict.reason), f"{verdict.reason}: {verdict.detail}")
                return False
            inner = verdict.inner
            if inner is not None:
                self.heard[inner.routing.sender] = self.clock()  # verified: that box is heard
            if verdict.decision is not E.Decision.PAIRING or not isinstance(inner, E.PairingInner):
                if self.messages is None:
                    record = Audit(verdict.actor, E.AUDIT_EVENT, "ignored", detail=f"a {verdict.decision} envelope: "
                                   "this desk is joined to no engine", at=self.clock())
                    await self.run_sync(lambda: self.records.apply_pairing([record]))
                    return False
            else:
                try:
                    removed = await self._step(inner, data, verdict.actor)
                except P.PairingError as error:
                    action = f"pair.{inner.routing.kind}"
                    await self._refused(error, actor=verdict.actor, action=action,
                                        target=inner.routing.pairing or inner.routing.invitation)
                if removed is None:
                    return False
        if removed is not None:  # the other box removed the pairing: what is queued across it ends here too
            await self._removed(removed)
            return False
        # a message, receipt or cancel: the hub's step, outside the desk's lock (the fetch loop hands
        # one delivery at a time, so nothing is judged meanwhile)
        handled: bool = await self.messages.arrived(verdict, delivery)
        return handled

    async def refusal_audited(self, actor: str, reason: str, detail: str, *, message_id: str | None = None) -> bool:
        """Audit one refused envelope of ``actor`` (``federation.envelope``, ``refused``), unless one of that
        box for that reason was audited within the minute (:func:`connectcore.federation.envelope.
        refusal_audit_due`: a flooding box costs one record a minute per reason, which says how many
        were left out since the last); logged either way.
        True when it was audited."""
        now = self.clock()
        log.info("federation: envelope from %s refused: %s", actor, detail)
        due, left_out, self.audited = E.refusal_audit_due(self.audited, actor, reason, now)
        if not due:
            return False
        record = Audit(actor, E.AUDIT_EVENT, "refused", message_id=message_id,
                       detail=detail + E.refusal_count_words(left_out), at=now)
        await self.run_sync(lambda: self.records.apply_pairing([record]))
        self.publish_audit(record)
        return True

    async def _step(self, inner: E.PairingInner, data: bytes, actor: str) -> P.Pairing | None:
        """A pairing step from the bus, committed; the pairing it removed (an ``unpair``), else None."""
        routing, now = inner.routing, self.clock()
        if routing.kind is E.Kind.PAIR_REQUEST:
            outer = E.parse_outer(data[E.SIGNATURE_BYTES:])
            assert outer.keys is not None and routing.invitation is not None  # the judgement checked both
            secret = E.unb64(inner.get("secret"), "the secret", E.Refusal.BAD_BINDING)
            book, effects = P.receive_request(
                self.book, request_id=f"req-{secrets.token_hex(8)}", invitation_id=routing.invitation,
                keys=outer.keys, name=inner.get("name"), secret=secret, now=now,
            )
            if book is self.book:  # a repeat: the decision again, if there is one
                same = next((r for r in book.requests_on(routing.invitation)
                             if r.box_id == outer.keys.box_id and r.keys == outer.keys), None)
                await self.run_sync(lambda: self.records.apply_pairing(effects))
                if same is not None and self.records.wire(f"answer:{same.id}") is not None:
                    await self.run_sync(lambda: self.records.due_again(f"answer:{same.id}", now))
                    self.owed.set()
                return None
            await self._commit(book, effects)
        elif routing.kind is E.Kind.PAIR_ACCEPT:
            assert routing.invitation is not None and routing.pairing is not None
            book, effects = P.pair_accepted(self.book, routing.invitation, pairing_id=routing.pairing, now=now)
            await self._commit(book, effects, [Wire.settled(f"request:{routing.invitation}")])
        elif routing.kind is E.Kind.PAIR_DECLINE:
            assert routing.invitation is not None
            book, effects = P.pair_declined(self.book, routing.invitation, now=now)
            await self._commit(book, effects, [Wire.settled(f"request:{routing.invitation}")])
        else:
            assert routing.pairing is not None
            book, effects = P.removed_by_peer(self.book, routing.pairing, now=now)
            await self._commit(book, effects)
            return next((p for p in book.pairings.values() if p.id == routing.pairing), None)
        return None


def msg_id(wire: Wire | bytes, attempt: int) -> str:
    """The ``Nats-Msg-Id`` of one attempt: the wire's digest and the attempt (docs/federation.md)."""
    data = wire.wire if isinstance(wire, Wire) else wire
    return f"{hashlib.sha256(data).hexdigest()[:32]}-{attempt}"


def open_desk(data_dir: Path, engine: Any) -> PairingDesk | None:
    """The engine's pairing desk, or None for a box not set up for federation; a desk is joined to
    the engine's hub (:func:`connectd.federation.flow.attach`: its outbox and inbox from the store), and
    the agent calls given their way to other boxes (:class:`connectd.federation.remote_calls.RemoteCalls`)."""
    desk = PairingDesk.open(
        data_dir, engine.store, clock=engine.clock, run_sync=engine.run_sync,
        publish_audit=engine.interpreter.published, notify=engine.subscribers.publish, hub=lambda: engine.hub,
    )
    if desk is not None:
        attach(engine, desk)
        engine.calls.remote = RemoteCalls(engine)
        engine.person.box_names = desk.box_names  # a revocation names the boxes that owe a cancel's receipt
        attach_directory(engine, desk)  # the directory across boxes (slice 7)
        attach_history(engine, desk)  # remote history search (slice 7)
    return desk
