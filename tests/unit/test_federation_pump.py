"""The federation's bus loops under the supervisor, while NATS is away and when it is back
(connectd/federation/pump.py; found by tests/integration/test_federation_partition.py)."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace
from typing import Any

from connectcore.federation.effects import AckDelivery
from connectcore.ports import BusRefused, BusUnavailable, PublishAck
from connectd.daemon.supervisor import Kind, Supervisor
from connectd.federation.pump import REFUSED_AGAIN, Pump
from connectd.store.pair_records import Wire


class DroppedBus:
    """A bus whose connection drops at ``down`` and that nats-py brings back at ``up`` (its client is
    never closed: it reconnects by itself); each fetch while connected is recorded."""

    def __init__(self, clock: Any, down: float, up: float) -> None:
        self.clock, self.down, self.up = clock, down, up
        self.fetched: list[float] = []

    @property
    def connected(self) -> bool:
        return not self.down <= self.clock() < self.up

    @property
    def reconnecting(self) -> bool:
        return not self.connected

    async def fetch(self, *, batch: int, timeout: float) -> list[Any]:
        import trio

        if not self.connected:
            raise BusUnavailable("not connected")
        self.fetched.append(self.clock())
        await trio.sleep(1.0)  # a long poll that ends with nothing
        return []


def test_the_fetch_loop_polls_again_as_soon_as_the_bus_is_back_not_after_its_backoff() -> None:
    """Claim: NATS away for 100 s (the box partitioned), the fetch loop polls again within a second of
    the connection coming back. Before: each poll while away failed into the supervisor's backoff
    (0.5 s doubling to 30 s), so after a long outage the box fetched nothing for up to 30 s after
    NATS was back (here the first poll came 21.5 s after it)."""
    import trio
    import trio.testing

    bus = DroppedBus(trio.current_time, down=10.0, up=110.0)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            pump = Pump(SimpleNamespace(), bus=bus)  # type: ignore[arg-type]
            Supervisor(nursery).spawn(Kind.BUS, pump.fetch_loop, name="federation fetch")  # type: ignore[arg-type]
            await trio.sleep(150)
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    after = [t for t in bus.fetched if t >= bus.up]
    assert after and after[0] < bus.up + 1.0, after[:3]
    assert not [t for t in bus.fetched if bus.down <= t < bus.up]  # nothing polled while away


class OneBatchBus:
    """A connected bus whose first fetch hands two deliveries, then long-polls for ever; acks and
    closes recorded."""

    def __init__(self) -> None:
        self.connected = True
        self.reconnecting = False  # (the Bus port's connection state)
        self.acked: list[str] = []
        self.closed = False
        self.fetches = 0

    async def fetch(self, *, batch: int, timeout: float) -> list[Any]:
        import trio

        self.fetches += 1
        if self.fetches == 1:
            return [SimpleNamespace(subject="s", data=b"d1", handle="d1"), SimpleNamespace(subject="s", data=b"d2", handle="d2")]
        await trio.sleep_forever()
        raise AssertionError

    async def ack(self, delivery: Any) -> None:
        self.acked.append(delivery.handle)

    async def close(self) -> None:
        self.closed = True


class SlowDesk:
    """A desk whose handling of a delivery takes 5 s (its commit), then runs its effects: it hands a
    receipt and an acknowledgement to the bus loops and records that it finished."""

    def __init__(self) -> None:
        import trio

        self.clock = trio.current_time
        self.directory = self.history = None
        self.records = SimpleNamespace(wires=lambda: [])
        self.owed: Any = None
        self.started = trio.Event()
        self.finished: list[bytes] = []
        self.pump: Pump | None = None
        self.receipt = SimpleNamespace(name="a receipt")

    async def run_sync(self, fn: Any, *args: Any) -> Any:
        return fn(*args)

    async def received(self, subject: str, data: bytes, delivery: Any) -> bool:
        import trio

        self.started.set()
        await trio.sleep(5.0)  # the commit
        assert self.pump is not None
        self.pump.hand(self.receipt)  # type: ignore[arg-type]  # the interpreter's effects, after it
        self.pump.hand(AckDelivery("dlv-1"))
        self.finished.append(data)
        return False  # the caller acknowledges it


def test_a_stop_arriving_mid_delivery_waits_for_its_handling_its_effects_and_its_ack() -> None:
    """Claim: the bus loops stopped (a reload moving the bus) while one delivery is being handled end
    only once that delivery's handling has finished: its effects were handed over (the receipt goes to
    the next pump, the acknowledgement, of this connection, does not) and it was acknowledged; the next
    delivery of the batch is left unhandled (it comes again), and the connection is closed after.
    Before: the loops were supervisor services nothing could stop but the daemon's end."""
    import trio
    import trio.testing

    bus, desk = OneBatchBus(), SlowDesk()

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            pump = Pump(desk, bus=bus)  # type: ignore[arg-type]
            desk.pump = pump
            pump.start(Supervisor(nursery))
            with trio.fail_after(60):  # (a loop that cannot start fails here, not by hanging in virtual time)
                await desk.started.wait()
            asked = trio.current_time()
            await pump.stop()
            assert trio.current_time() - asked >= 4.9  # it waited for the handling
            assert desk.finished == [b"d1"] and bus.acked == ["d1"] and bus.closed
            after = Pump(desk, bus=OneBatchBus())  # type: ignore[arg-type]
            after.take_over(pump)
            assert after.left() == [desk.receipt]  # the receipt runs on the next pump; the ack is not carried
            await trio.sleep(10)
            assert desk.finished == [b"d1"] and bus.fetches == 1  # nothing more handled after the stop
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


class OwedWires:
    """The store's ``pair_wires`` as the publish loop reads and writes them (``wires``, ``sent``,
    ``due_again``), counting the reads."""

    def __init__(self) -> None:
        self.rows: dict[str, Wire] = {}
        self.reads = 0

    def owe(self, key: str, due_at: float, resend: float | None = None) -> None:
        self.rows[key] = Wire(key, f"connect.bbbb.pairing.{key}", key.encode(), 0, due_at, resend, due_at)

    def wires(self) -> list[Wire]:
        self.reads += 1
        return [w for w in self.rows.values() if w.due_at is not None]

    def sent(self, key: str, *, attempt: int, now: float) -> None:
        w = self.rows[key]
        self.rows[key] = replace(w, attempt=attempt, due_at=None if w.resend is None else now + w.resend)

    def due_again(self, key: str, due_at: float) -> None:
        self.rows[key] = replace(self.rows[key], due_at=due_at)


class Publishes:
    """A connected bus that records each publish (subject, when); ``refuse``: subjects it refuses."""

    def __init__(self, clock: Any) -> None:
        self.clock, self.published, self.refuse = clock, [], set()  # type: ignore[var-annotated]
        self.connected, self.reconnecting = True, False

    async def publish(self, subject: str, data: bytes, *, msg_id: str) -> PublishAck:
        if subject in self.refuse:
            raise BusRefused("permissions violation")
        self.published.append((subject.rsplit(".", 1)[1], round(self.clock(), 3)))
        return PublishAck("CONNECT", len(self.published), False)


def test_the_publish_loop_sleeps_until_a_wire_is_due_and_wakes_at_once_for_a_new_one() -> None:
    """Claim (issue 25, idle CPU): the publish loop reads the owed wires only when one falls due or a
    step owes a new one, not every second; a new wire is published at once, a copy sent again when
    its resend time comes, a refused one REFUSED_AGAIN later. Before: the store was read every second
    (``Pump.idle``) whether or not anything was owed."""
    import anyio
    import trio
    import trio.testing

    store = OwedWires()
    bus = Publishes(trio.current_time)
    desk: Any = SimpleNamespace(clock=trio.current_time, records=store, owed=anyio.Event())

    async def run_sync(fn: Any, *args: Any) -> Any:
        return fn(*args)

    desk.run_sync = run_sync
    reads: dict[str, int] = {}

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            pump = Pump(desk, bus=bus)
            nursery.start_soon(pump.publish_loop)
            await trio.sleep(100)  # nothing owed: asleep
            reads["idle"] = store.reads
            store.owe("request", 100.0, resend=10.0)  # a step owes a pair request (resent every 10 s)
            desk.owed.set()
            await trio.sleep(25.5)
            bus.refuse.add("connect.bbbb.pairing.answer")
            store.owe("answer", 125.5)
            desk.owed.set()
            await trio.sleep(40)
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert reads["idle"] == 1  # one read at start, none in the 100 s after
    assert bus.published == [("request", 100.0), ("request", 110.0), ("request", 120.0), ("request", 130.0),
                             ("request", 140.0), ("request", 150.0), ("request", 160.0)]
    answer = store.rows["answer"]
    assert answer.due_at == 125.5 + 2 * REFUSED_AGAIN  # refused at 125.5 and at 155.5: due again later
    assert store.reads <= 1 + 2 * 7 + 2 * 2  # a read per wake and one after each pass that sent
