"""The directory across boxes, the daemon's side (docs/federation.md, "Directory and history across
boxes: reads"): this box's entry for each active pairing put in the bucket, the other boxes' entries
heard and held in memory, and what ``list_agents`` and target resolution read of them. The rules are
the core's (:mod:`connectcore.federation.remote_directory`, D1 to D11); this module only sequences them.

- **Publishing** (:meth:`RemoteDirectoryDesk.publish_loop`): for each active pairing,
  the agents that pairing sees (``remote_directory.shared`` over this box's directory view, by the
  pairing's ``directory`` setting: :func:`setting_for`), sealed to that box and signed
  (:mod:`connectd.federation.seal`) as a ``directory`` envelope with a rising revision, put under
  ``<this box>.<reader>`` (``Bus.put_entry``) when it changed (at most once a second) and every 60 s
  as a heartbeat (``remote_directory.due``), even when empty. Between looks the loop sleeps until the
  first entry or catch-up read falls due (``remote_directory.next_due``, ``next_read``), or until the
  owner's event stream (``Subscribers.publish``: a pane's reading, an audit record, a notice such as a
  pairing's or a grant's) says something may have changed: a change is looked at at once, as before,
  and nothing is looked at every second while nothing changes.
- **Hearing** (:meth:`RemoteDirectoryDesk.listen_loop`): each paired box's key read once by direct get
  when the loop (re)starts, then every entry the bucket republishes for this box
  (``Bus.entry_updates``); a box whose entry is not held yet is read again every
  ``remote_directory.CATCH_UP`` seconds by the publish loop (``remote_directory.read_due``, D11). Each
  entry is judged by the envelope judgement (with the keys the pairing desk pins) and
  ``remote_directory.receive``; a verified one marks its box heard (``PairingDesk.heard``, as any
  verified envelope does) as of the entry's age (an old entry read by a direct get does not make a box
  that stopped look live). A refusal changes nothing and is audited
  (``federation.directory``), at most once a minute per box and reason
  (:func:`connectcore.federation.envelope.refusal_audit_due`).
- **The removal's tombstone** (the core's D10 and P18): when this box's owner removes a pairing,
  :meth:`RemoteDirectoryDesk.removed` puts a signed tombstone of it under ``<this box>.<reader>`` at
  once if the bus is there; the tombstones the book still owes (``pairing.tombstones_owed``) are put
  at the publish loop's next look on a connected bus and each time the listen loop (re)starts (a
  removal while NATS was away, a restart before the put, or the bus moved to another server). A verified tombstone heard from another
  box drops its entry and records the removal as a received ``unpair`` does
  (:meth:`connectd.federation.envelopes.Envelopes.peer_removed`).
- Both loops are :data:`connectd.daemon.supervisor.Kind.BUS` services started
  in the pump's task group (:meth:`connectd.federation.pump.Pump.start`; a reload stops them between
  entries): NATS away never ends the daemon. The entries are held
  in memory only: after a restart the direct gets read them again.
- **Reading**: :meth:`RemoteDirectoryDesk.listed` (``list_agents``: this box's view, then each remote
  agent with its box, its address qualified by the box's name, its age and staleness; aged-out and
  removed pairings' agents not shown) and :meth:`RemoteDirectoryDesk.matches` (how many panes an
  unqualified handle names in each paired box's entry, for ``boxes.place``'s ambiguity rule) and
  :meth:`RemoteDirectoryDesk.detail` (``get_agent`` for an agent on a paired box, from its entry).
"""

from __future__ import annotations

import logging
import math
import secrets
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

import anyio

from connectcore import directory as D
from connectcore.effects import Audit
from connectcore.federation import envelope as E
from connectcore.federation import pairing as P
from connectcore.federation import remote_directory as RD
from connectcore.ports import BusRefused, BusUnavailable
from connectd.daemon.supervisor import Group, Kind, Supervisor
from connectd.federation.seal import receive, seal

if TYPE_CHECKING:
    from connectd.daemon.parts import Subscribers
    from connectd.federation.desk import PairingDesk

log = logging.getLogger("connectd.federation")

CATCH_UP = RD.CATCH_UP  # seconds between direct gets of a paired box whose entry is not held yet (D11)
TOMBSTONE_WAIT = 5.0  # seconds a removal waits for its tombstone's put (else the publish loop's next look puts it)


def setting_for(pairing: P.Pairing) -> RD.Setting:
    """The pairing's ``directory`` setting (D1), as the person set it (``connectd pair set BOX
    directory=...``; the default ``reachable``)."""
    return RD.Setting(pairing.settings.directory)


def short_fingerprint(pairing: P.Pairing) -> str:
    return pairing.keys.fingerprint.replace(" ", "")[:8]


class RemoteDirectoryDesk:
    """This box's entries for its pairings, and the other boxes' entries as last heard."""

    def __init__(
        self, desk: PairingDesk, *, directory_view: Callable[[], tuple[dict[str, Any], ...]],
        audit: Callable[[Audit], Awaitable[None]], subscribers: Subscribers | None = None,
    ) -> None:
        self.desk = desk
        self.directory_view = directory_view  # this box's directory as its agents see it
        self.audit = audit  # an audit record, durable then shown (the core runner's)
        self.subscribers = subscribers  # the owner's event stream: what wakes the publish loop
        self.held = RD.RemoteDirectory()
        self.published: dict[str, RD.Published] = {}  # reader box id -> what was last put for it, and when
        self.revision = 0  # the last revision put (any key): the next is above it (D3)
        self.next_at: float | None = None  # when the next entry or catch-up read falls due (the last look's)
        self._asked: dict[str, float] = {}  # box id -> when its key was last read by direct get
        self._audited: E.RefusalAudits = {}  # (box, reason) -> when last audited, how many left out since
        self.tombstoned: dict[str, str] = {}  # box id -> the removed pairing whose tombstone this run put
        self._listed: tuple[tuple[dict[str, Any], ...], tuple[dict[str, Any], ...], tuple[dict[str, Any], ...]] | None = None

    # --- the pairings -----------------------------------------------------------------------------

    def active(self) -> list[P.Pairing]:
        return [p for p in self.desk.book.pairings.values() if p.state is P.PairingState.ACTIVE and p.id]

    def peers(self) -> list[RD.Peer]:
        return [RD.Peer(p.name, p.box_id, str(p.id), short_fingerprint(p)) for p in self.active()]

    def _pruned(self) -> RD.RemoteDirectory:
        """The entries of active pairings only (D6): a removed pairing's are dropped here."""
        self.held = RD.prune(self.held, {p.box_id: str(p.id) for p in self.active()})
        return self.held

    # --- publishing -------------------------------------------------------------------------------

    def shared_with(self, pairing: P.Pairing) -> tuple[dict[str, Any], ...]:
        """What ``pairing`` sees of this box's directory now (D1, D2)."""
        return RD.shared(self.directory_view(), setting_for(pairing))

    def wire(self, pairing: P.Pairing, agents: Sequence[dict[str, Any]], now: float) -> bytes:
        """The entry for ``pairing``, sealed to its box and signed (D3)."""
        self.revision = RD.next_revision(self.revision, now)
        routing = E.Routing(E.Kind.DIRECTORY, self.desk.local.box_id, pairing.box_id, pairing=pairing.id)
        inner = RD.entry(routing, agents, revision=self.revision, now=now)
        return seal(self.desk.local, pairing.keys, inner, secrets.token_bytes(E.NONCE_BYTES))

    async def publish_once(self, bus: Any) -> int:
        """Put every entry that is due (D3); the number put. A refusal is logged and tried again a
        second later (``remote_directory.refused_again``), and so is a tombstone still owed (P18) whose
        put failed. Sets :attr:`next_at`."""
        now, put = self.desk.clock(), 0
        active = self.active()
        readers = {p.box_id for p in active}
        for gone in set(self.published) - readers:
            del self.published[gone]
        times: list[float] = []
        for pairing in active:
            if self.desk.book.active_in(pairing.box_id, pairing.id) is None:
                continue  # removed while this look waited on the bus: its key holds the tombstone
            agents = self.shared_with(pairing)
            last = self.published.get(pairing.box_id)
            if not RD.due(last, agents, now):
                times.append(RD.next_due(last, agents, now))
                continue
            with anyio.CancelScope(shield=True):  # the put and its record, whole (a stop waits for them)
                try:
                    await bus.put_entry(pairing.box_id, self.wire(pairing, agents, now))
                except BusRefused as exc:
                    log.warning("federation: directory entry for box %s refused: %s", pairing.box_id, exc)
                    times.append(RD.refused_again(now))
                    continue
                self.published[pairing.box_id] = RD.Published(tuple(agents), now)
            times.append(RD.next_due(self.published[pairing.box_id], agents, now))
            put += 1
        times.extend(await self.catch_up(bus, now))
        if bus.connected:  # a tombstone whose put failed at the removal (NATS away): at this look, not at a restart
            await self.put_tombstones(bus)
        if self.tombstones_unput():
            times.append(RD.refused_again(now))
        self.next_at = min(times, default=None)
        return put

    async def catch_up(self, bus: Any, now: float) -> list[float]:
        """Read once more the key of each paired box whose entry is not held yet (D11); when each
        such box is to be read next."""
        held, times = self._pruned().entries, []
        for pairing in self.active():
            box = pairing.box_id
            if RD.read_due(box in held, self._asked.get(box), now):
                await self.read(bus, box, now)
            if (at := RD.next_read(box in self.held.entries, self._asked.get(box), now)) is not None:
                times.append(at)
        return times

    async def read(self, bus: Any, box: str, now: float) -> None:
        self._asked[box] = now
        try:
            data = await bus.get_entry(box)
        except BusRefused as exc:
            log.warning("federation: directory entry of box %s not readable: %s", box, exc)
            return
        if data is not None:
            await self.arrived(box, data, live=False)

    async def publish_loop(self, bus: Any = None) -> None:
        """What is due, then asleep until the next is due or the owner's event stream says something
        may have changed (``bus``: the pump's, connected, unless a test hands one)."""
        bus = bus if bus is not None else await self.desk.pump._connected()
        told, heard = anyio.create_memory_object_stream[dict[str, Any]](math.inf)
        if self.subscribers is not None:
            self.subscribers.owner.add(told)
        try:
            while True:
                while True:  # what was told before this look is seen by it
                    try:
                        heard.receive_nowait()
                    except anyio.WouldBlock:
                        break
                await self.publish_once(bus)
                due = self.next_at
                with anyio.move_on_after(math.inf if due is None else max(0.0, due - self.desk.clock())):
                    await heard.receive()
        finally:
            if self.subscribers is not None:
                self.subscribers.owner.discard(told)
            told.close()
            heard.close()

    def bus_moved(self) -> None:
        """The bus loops moved to another server (a reload): what was put is the old server's, so every
        entry is due again at once on the new one (the entries held from the other boxes stay, aging as
        they do; the listen loop reads each paired box's key again when it starts), and so is each
        tombstone still owed (the listen loop puts it again on the new server when it starts)."""
        self.published.clear()
        self.tombstoned.clear()

    # --- the removal's tombstone (D10, P18) ---------------------------------------------------------

    async def removed(self, pairing: P.Pairing) -> None:
        """This box's owner removed ``pairing``: its tombstone put now if a bus is there (waiting at most
        :data:`TOMBSTONE_WAIT`); else, or if the put fails, the publish loop's next look puts it."""
        pump = self.desk.pump
        if pump is None:
            return
        with anyio.move_on_after(TOMBSTONE_WAIT):
            await self.put_tombstones(pump.bus)

    def tombstones_unput(self) -> list[P.Pairing]:
        """The tombstones the book owes (``pairing.tombstones_owed``) that this run has not put yet."""
        return [p for p in P.tombstones_owed(self.desk.book) if self.tombstoned.get(p.box_id) != p.id]

    async def put_tombstones(self, bus: Any) -> int:
        """Put each tombstone the book owes (``pairing.tombstones_owed``) not yet put by this run: a
        ``directory`` envelope of the removed pairing, flagged, no agents, signed and sealed to that box,
        under ``<this box>.<reader>``. The number put; a refusal or NATS away is logged (tried again at
        the publish loop's next look)."""
        put = 0
        local = self.desk.local
        for pairing in self.tombstones_unput():
            if self.tombstoned.get(pairing.box_id) == pairing.id:
                continue  # put meanwhile, while an earlier put of this loop waited (the listen loop's, or the publish loop's)
            now = self.desk.clock()
            self.revision = RD.next_revision(self.revision, now)
            routing = E.Routing(E.Kind.DIRECTORY, local.box_id, pairing.box_id, pairing=pairing.id)
            dead = RD.tombstone(routing, revision=self.revision, now=now)
            try:
                await bus.put_entry(pairing.box_id, seal(local, pairing.keys, dead, secrets.token_bytes(E.NONCE_BYTES)))
            except (BusRefused, BusUnavailable) as exc:
                log.warning("federation: the tombstone for box %s not put: %s", pairing.box_id, exc)
                continue
            self.tombstoned[pairing.box_id] = str(pairing.id)
            put += 1
        return put

    # --- hearing ----------------------------------------------------------------------------------

    async def listen_loop(self, bus: Any = None) -> None:
        """The tombstones owed, each paired box's key once, then the updates (``bus`` as for
        :meth:`publish_loop`)."""
        bus = bus if bus is not None else await self.desk.pump._connected()
        await self.put_tombstones(bus)
        now = self.desk.clock()
        for pairing in self.active():  # after a (re)start: each paired box's key once
            with anyio.CancelScope(shield=True):  # one entry whole (a stop waits for it)
                await self.read(bus, pairing.box_id, now)
        async for publisher, data in bus.entry_updates():
            with anyio.CancelScope(shield=True):  # one entry judged and held or refused, whole
                await self.arrived(publisher, data, live=True)

    async def arrived(self, publisher: str, data: bytes, *, live: bool) -> bool:
        """One entry from ``publisher`` (the subject's last token): judged and held, or refused and
        audited (nothing changes). True when it was taken (new, a repeat, or a tombstone: then the
        pairing it names is removed here as by the other box's unpair)."""
        now = self.desk.clock()
        subject = f"connect.{self.desk.local.box_id}.{E.SUBJECT_TOKEN[E.Kind.DIRECTORY]}.{publisher}"
        verdict = receive(self.desk.local, subject, data, self.desk.view())
        try:
            held, taken = RD.receive(self._pruned(), verdict, now=now, live=live)
        except RD.EntryRefused as refused:
            await self._refused(verdict.actor, refused, now)
            return False
        self.held = held
        if taken is RD.Taken.REMOVED:  # D10: the one path of a received unpair
            assert verdict.inner is not None and verdict.inner.routing.pairing is not None
            await self.desk.envelopes.peer_removed(verdict.inner.routing.pairing)
            return True
        # verified: that box is heard, as of when it published it (an old entry read by a direct get
        # does not make a box that stopped look live to the outbox's schedule)
        since = held.entries[publisher].since
        self.desk.heard[publisher] = max(self.desk.heard.get(publisher, since), since)
        return True

    async def _refused(self, actor: str, refused: RD.EntryRefused, now: float) -> None:
        key = (actor, refused.reason)
        log.info("federation: directory entry from %s refused: %s: %s", actor, refused.reason, refused)
        due, left_out, self._audited = E.refusal_audit_due(self._audited, *key, now)  # one a minute per box and reason
        if not due:
            return
        await self.audit(Audit(actor, RD.AUDIT_EVENT, "refused", at=now,
                                      detail=f"{refused.reason}: {refused}{E.refusal_count_words(left_out)}"))

    # --- reading ----------------------------------------------------------------------------------

    def listing(self) -> tuple[dict[str, Any], ...]:
        """The remote agents ``list_agents`` shows now (D5 to D7)."""
        return RD.listing(self._pruned(), self.peers(), self.desk.clock())

    def listed(self, view: tuple[dict[str, Any], ...]) -> tuple[dict[str, Any], ...]:
        """``view`` (this box's directory view) and then the remote agents; ``view`` itself when there
        are none (the same object: ``list_agents``' answer is made once per view)."""
        remote = self.listing()
        if not remote:
            return view
        made = self._listed
        if made is not None and made[0] is view and made[1] == remote:
            return made[2]
        combined = view + remote
        self._listed = (view, remote, combined)
        return combined

    def detail(self, box_name: str, target: D.Target) -> dict[str, Any]:
        """``get_agent`` for the agent ``target`` names on the paired box ``box_name`` (D9): its
        entry as this box holds it, read only; or :class:`connectcore.directory.TargetError`."""
        return RD.detail(self._pruned(), self.peers(), self.desk.clock(), box_name, target)

    def matches(self, target: D.Target) -> dict[str, int]:
        """How many panes the unqualified ``target`` names in each paired box's entry (D8)."""
        return RD.matches(self._pruned(), self.peers(), self.desk.clock(), target)

    def start(self, supervisor: Supervisor | Group) -> None:
        """The two loops, as bus services (started in the pump's group)."""
        supervisor.spawn(Kind.BUS, self.publish_loop, name="federation directory publish")
        supervisor.spawn(Kind.BUS, self.listen_loop, name="federation directory listen")


def attach(
    desk: PairingDesk, *, directory_view: Callable[[], tuple[dict[str, Any], ...]],
    audit: Callable[[Audit], Awaitable[None]], subscribers: Subscribers | None = None,
) -> RemoteDirectoryDesk:
    """The remote directory of a federated box (``desk.directory``), given what it uses: this box's
    directory view (``AgentCalls.directory_view``), where its refusals are audited (the core
    runner's ``audit``) and the owner's event stream that wakes its publish loop."""
    directory = RemoteDirectoryDesk(desk, directory_view=directory_view, audit=audit, subscribers=subscribers)
    desk.directory = directory
    return directory
