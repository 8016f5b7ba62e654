"""A simulated bus: the ``Bus`` port (``connectcore.ports``) in memory, with faults on demand.

:class:`SimNetwork` is the world (one NATS server with its stream ``CONNECT``, one consumer per box, the
bucket ``connect_dir`` and the history subjects); :class:`SimBus` is one box's view of it, with that
box's permissions (docs/federation.md, "Permissions for box X"): it publishes stream subjects only under
its own id (the last token), fetches only from its own consumer, writes only its own directory keys and
reads only the keys written for it. What NATS refuses, it refuses with ``BusRefused``; a network that is
down answers ``BusUnavailable``.

Faithful by default (``Faults()``): stored once per ``msg_id`` within the duplicate window, delivered in
order, an unacknowledged delivery again after ``ack_wait``, deleted once acknowledged (work queue).
Faults, drawn from the seeded RNG: ``drop`` (acknowledged but not stored: the loss ``sync_interval``
allows), ``duplicate`` (stored twice, as a copy the duplicate window missed), ``delay`` (visible only
after up to that many seconds), ``reorder`` (a fetch hands over what is visible in a shuffled order).
A crash (:meth:`SimNetwork.crash`) loses what was acknowledged in the last seconds. A partition cuts one box's link to the server (:attr:`SimNetwork.cut`): that box's calls answer
``BusUnavailable`` while the others go on, and what was stored for it waits until the link heals.
``poll`` is how often a waiting fetch looks again (the federation simulation polls less often: each
look is a scheduler wake-up of virtual time).
Time is ``clock`` (the simulation's virtual clock; the conformance test uses ``time.monotonic``); waits
are ``anyio`` sleeps, so it runs under asyncio and trio alike.
"""

from __future__ import annotations

import random
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field

import anyio

from connectcore.ports import BusRefused, BusRequest, BusUnavailable, Delivery, PublishAck

STREAM = "CONNECT"
STREAM_KINDS = ("inbox", "receipts", "cancel", "pairing")
POLL = 0.01


@dataclass(frozen=True)
class Faults:
    drop: float = 0.0
    duplicate: float = 0.0
    delay: float = 0.0  # the most a message waits before it is visible, seconds
    reorder: bool = False


@dataclass
class _Stored:
    sequence: int
    subject: str
    data: bytes
    visible_at: float
    delivered: int = 0
    pending_until: float | None = None  # delivered, unacknowledged: again after this
    stored_at: float = 0.0


@dataclass
class _Reply:
    answer: bytes | None = None


class _Mailbox(deque):  # type: ignore[type-arg]
    """A listener's queue that wakes its reader when something is put in it (a subscription's
    delivery), instead of the reader looking every ``POLL``: each look was a scheduler wake-up of
    virtual time, most of a multi-box seed's cost while nothing crossed the bus."""

    def __init__(self) -> None:
        super().__init__()
        self._put = anyio.Event()

    def append(self, item: object) -> None:
        super().append(item)
        self._put.set()

    async def wait(self) -> None:
        while not self:
            self._put = anyio.Event()
            await self._put.wait()


@dataclass
class SimNetwork:
    clock: Callable[[], float] = time.monotonic
    seed: int = 0
    faults: Faults = field(default_factory=Faults)
    duplicate_window: float = 120.0
    ack_wait: float = 30.0
    up: bool = True
    poll: float = POLL  # seconds between a waiting fetch's looks
    cut: set[str] = field(default_factory=set)  # the boxes whose link to the server is down (partitions)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.sequence = 0
        self.stored: list[_Stored] = []
        self.msg_ids: dict[str, tuple[float, int]] = {}  # msg_id -> (when, sequence)
        self.bucket: dict[str, tuple[int, bytes]] = {}
        self.bucket_revision = 0
        self.entry_listeners: dict[str, list[deque[tuple[str, bytes]]]] = {}
        self.request_listeners: dict[str, list[deque[tuple[bytes, _Reply]]]] = {}

    def crash(self, lost: float) -> None:
        """The server crashes and comes back having lost what it acknowledged in its last ``lost``
        seconds (the ``sync_interval`` loss: stored, acknowledged, never flushed), with their duplicate
        window entries. Bring it down meanwhile with ``up``."""
        since = self.clock() - lost
        self.stored = [m for m in self.stored if m.stored_at < since]
        self.msg_ids = {k: v for k, v in self.msg_ids.items() if v[0] < since}

    def bus(self, box_id: str, *, consumer: str | None = None) -> SimBus:
        return SimBus(self, box_id, consumer=consumer)


class SimBus:
    """Box ``box_id``'s view of ``network``: the ``Bus`` port."""

    def __init__(self, network: SimNetwork, box_id: str, *, consumer: str | None = None) -> None:
        self.network = network
        self.box_id = box_id
        self.consumer = consumer or f"box-{box_id}"

    @property
    def connected(self) -> bool:
        return self.network.up and self.box_id not in self.network.cut

    @property
    def reconnecting(self) -> bool:
        """The simulated connection is never closed: while the network is down or this box cut off, it
        is being brought back (as nats-py's)."""
        return not self.connected

    def _up(self) -> SimNetwork:
        if not self.network.up or self.box_id in self.network.cut:
            raise BusUnavailable("not connected")
        return self.network

    async def publish(self, subject: str, data: bytes, *, msg_id: str) -> PublishAck:
        net = self._up()
        await anyio.sleep(0)
        tokens = subject.split(".")
        if len(tokens) != 4 or tokens[0] != "connect" or tokens[2] not in STREAM_KINDS:
            raise BusRefused(f"no stream takes {subject}")
        if tokens[3] != self.box_id:
            raise BusRefused(f"permissions violation: publish to {subject}")
        now = net.clock()
        net.msg_ids = {k: v for k, v in net.msg_ids.items() if now - v[0] < net.duplicate_window}
        if msg_id in net.msg_ids:
            return PublishAck(STREAM, net.msg_ids[msg_id][1], True)
        net.sequence += 1
        net.msg_ids[msg_id] = (now, net.sequence)
        if net.rng.random() >= net.faults.drop:
            copies = 2 if net.rng.random() < net.faults.duplicate else 1
            for _ in range(copies):
                visible = now + net.rng.uniform(0, net.faults.delay) if net.faults.delay else now
                net.stored.append(_Stored(net.sequence, subject, data, visible, stored_at=now))
        return PublishAck(STREAM, net.sequence, False)

    def _ready(self) -> list[_Stored]:
        net = self.network
        now = net.clock()
        mine = f"connect.{self.box_id}."
        return [
            m for m in net.stored
            if m.subject.startswith(mine) and m.visible_at <= now and (m.pending_until is None or m.pending_until <= now)
        ]

    async def fetch(self, *, batch: int, timeout: float) -> Sequence[Delivery]:
        self._up()
        if self.consumer != f"box-{self.box_id}":
            raise BusRefused(f"permissions violation: publish to $JS.API.CONSUMER.MSG.NEXT.{STREAM}.{self.consumer}")
        ready: list[_Stored] = []
        with anyio.move_on_after(timeout):
            while not (ready := self._ready()):
                await anyio.sleep(self.network.poll)
                self._up()
        net = self.network
        if net.faults.reorder:
            net.rng.shuffle(ready)
        out = []
        for m in ready[:batch]:
            m.delivered += 1
            m.pending_until = net.clock() + net.ack_wait
            out.append(Delivery(m.subject, m.data, m.delivered, handle=m))
        return out

    async def ack(self, delivery: Delivery) -> None:
        net = self._up()
        await anyio.sleep(0)
        m = delivery.handle
        if not isinstance(m, _Stored) or not m.subject.startswith(f"connect.{self.box_id}."):
            raise BusRefused("not a delivery of this bus")
        if m in net.stored:
            net.stored.remove(m)

    async def put_entry(self, reader_box: str, data: bytes) -> int:
        net = self._up()
        await anyio.sleep(0)
        net.bucket_revision += 1
        net.bucket[f"{self.box_id}.{reader_box}"] = (net.bucket_revision, data)
        for listener in net.entry_listeners.get(reader_box, []):
            listener.append((self.box_id, data))
        return net.bucket_revision

    async def get_entry(self, publisher_box: str) -> bytes | None:
        net = self._up()
        await anyio.sleep(0)
        held = net.bucket.get(f"{publisher_box}.{self.box_id}")
        return None if held is None else held[1]

    async def entry_updates(self) -> AsyncIterator[tuple[str, bytes]]:
        net = self._up()
        queue = _Mailbox()
        net.entry_listeners.setdefault(self.box_id, []).append(queue)
        try:
            while True:
                await queue.wait()
                yield queue.popleft()
        finally:
            net.entry_listeners[self.box_id].remove(queue)

    async def answer(self, request: BusRequest, data: bytes) -> None:
        self._up()
        await anyio.sleep(0)
        if not isinstance(request.handle, _Reply):
            raise BusRefused("not a request of this bus")
        request.handle.answer = data

    async def request(self, box: str, data: bytes, *, timeout: float) -> bytes | None:
        net = self._up()
        listeners = net.request_listeners.get(box, [])
        if not listeners:
            return None  # no responders: that box is not listening
        reply = _Reply()
        listeners[0].append((data, reply))  # a queue group of one: the first listener answers
        with anyio.move_on_after(timeout):
            while reply.answer is None:
                await anyio.sleep(POLL)
        return reply.answer

    async def requests(self) -> AsyncIterator[BusRequest]:
        net = self._up()
        queue = _Mailbox()
        net.request_listeners.setdefault(self.box_id, []).append(queue)
        try:
            while True:
                await queue.wait()
                data, reply = queue.popleft()
                yield BusRequest(data, handle=reply)
        finally:
            net.request_listeners[self.box_id].remove(queue)
