"""SimBus against NatsBus: the same port (member by member, as tests/unit/test_ports.py holds every
port), and the same behaviour for one script run against each, NatsBus on a real nats-server with the
boxes' permissions and SimBus with its faults off (docs/federation.md, "Conformance"): a publish and its
copy under the same ``Nats-Msg-Id`` (one stored, the copy acknowledged ``duplicate``), fetch,
acknowledge, redelivery after ``ack_wait``, a permission refusal as ``BusRefused``, the bucket's put,
direct get and republish, a request and its answer, and no responder; and the connection's state
(``connected``, ``reconnecting``) connected, with the server away and back."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from connectcore.ports import Bus, BusRefused, Delivery
from connectd.federation.bus import NatsBus
from tests.simulation.sim_bus import Faults, SimBus, SimNetwork
from tests.support.conformance import port_mismatches
from tests.support.nats import NatsServer, nats_server_fixture

A, B, C = "aaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbb", "cccccccccccccccc"
ACK_WAIT = 1.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.parametrize("impl", [NatsBus, SimBus], ids=["NatsBus", "SimBus"])
def test_each_bus_conforms_to_the_port(impl: type) -> None:
    """Every Bus method exists on both, async as declared (the two streams plain, returning async
    iterators), with the port's parameters and return types."""
    assert port_mismatches(Bus, impl) == []


def test_the_check_sees_a_bus_that_differs() -> None:
    """A SimBus whose fetch takes its batch positionally is told apart (the check can fail)."""

    class Positional(SimBus):
        async def fetch(self, batch: int, timeout: float) -> list[Delivery]:
            return []

    assert {p.split(":")[0] for p in port_mismatches(Bus, Positional)} == {"Bus.fetch"}


def test_the_check_sees_a_bus_without_the_connection_s_state() -> None:
    """A bus whose ``reconnecting`` is a plain flag, or that has none, is told apart (the pump waits
    on it: :meth:`connectd.federation.pump.Pump._connected`)."""

    class Flag(SimBus):
        reconnecting = False  # type: ignore[assignment]

    class Text(SimBus):
        @property
        def reconnecting(self) -> str:  # type: ignore[override]
            return "no"

    assert port_mismatches(Bus, Flag) == ["Bus.reconnecting: not a property"]
    assert [p.split(":")[0] for p in port_mismatches(Bus, Text)] == ["Bus.reconnecting"]
    assert [p.split(":")[0] for p in port_mismatches(Bus, object)][:2] == ["Bus.connected", "Bus.reconnecting"]


MakeBus = Callable[..., Awaitable[Any]]


async def _first(stream: AsyncIterator[Any], into: list[Any], *, count: int = 1) -> None:
    async for item in stream:
        into.append(item)
        if len(into) >= count:
            return


async def _script(bus: MakeBus) -> list[object]:
    """What a box sees, step by step; the same list from both buses is the conformance."""
    a, b, c = await bus(A), await bus(B), await bus(C)
    seen: list[object] = []
    seen.append(("connected, not reconnecting", a.connected, a.reconnecting))
    to_b = f"connect.{B}.inbox.{A}"
    first = await a.publish(to_b, b"envelope-1", msg_id="m-1")
    again = await a.publish(to_b, b"envelope-1", msg_id="m-1")
    seen.append(("the copy is a duplicate of the first", first.duplicate, again.duplicate, again.sequence == first.sequence))
    got = await b.fetch(batch=10, timeout=2)
    seen.append(("one delivery", [(d.subject, d.data, d.delivered) for d in got]))
    seen.append(("unacknowledged, not handed over again before ack_wait", await b.fetch(batch=10, timeout=0.2)))
    await anyio.sleep(ACK_WAIT + 0.2)
    again_got = await b.fetch(batch=10, timeout=2)
    seen.append(("again after ack_wait", [(d.data, d.delivered) for d in again_got]))
    await b.ack(again_got[0])
    seen.append(("acknowledged: gone", await b.fetch(batch=10, timeout=ACK_WAIT + 0.5)))
    seen.append(("nothing for A", await a.fetch(batch=10, timeout=0.2)))
    try:
        await c.publish(to_b, b"forged", msg_id="m-2")
    except BusRefused:
        seen.append("C publishing as A: BusRefused")
    try:
        await (await bus(C, consumer=f"box-{B}")).fetch(batch=1, timeout=1)
    except BusRefused:
        seen.append("C fetching B's consumer: BusRefused")
    heard: list[tuple[str, bytes]] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(_first, b.entry_updates(), heard)
        await anyio.sleep(0.3)
        revision = await a.put_entry(B, b"directory of A for B")
        with anyio.fail_after(5):
            while not heard:
                await anyio.sleep(0.02)
    seen.append(("put gives a revision", isinstance(revision, int) and revision > 0))
    seen.append(("B hears A's entry", heard))
    seen.append(("B reads A's entry", await b.get_entry(A), "and none from C", await b.get_entry(C)))
    seen.append(("A reads none from B", await a.get_entry(B)))

    async def serve() -> None:
        async for request in b.requests():
            await b.answer(request, b"answer to " + request.data)

    async with anyio.create_task_group() as tg:
        tg.start_soon(serve)
        await anyio.sleep(0.3)
        seen.append(("B answers", await a.request(B, b"query", timeout=3)))
        seen.append(("C does not listen", await a.request(C, b"query", timeout=0.5)))
        tg.cancel_scope.cancel()
    return seen


EXPECTED: list[object] = [
    ("connected, not reconnecting", True, False),
    ("the copy is a duplicate of the first", False, True, True),
    ("one delivery", [(f"connect.{B}.inbox.{A}", b"envelope-1", 1)]),
    ("unacknowledged, not handed over again before ack_wait", []),
    ("again after ack_wait", [(b"envelope-1", 2)]),
    ("acknowledged: gone", []),
    ("nothing for A", []),
    "C publishing as A: BusRefused",
    "C fetching B's consumer: BusRefused",
    ("put gives a revision", True),
    ("B hears A's entry", [(A, b"directory of A for B")]),
    ("B reads A's entry", b"directory of A for B", "and none from C", None),
    ("A reads none from B", None),
    ("B answers", b"answer to query"),
    ("C does not listen", None),
]


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[NatsServer]:
    yield from nats_server_fixture(tmp_path, [A, B, C], ack_wait=ACK_WAIT)


@pytest.mark.anyio
async def test_natsbus_runs_the_script(nats_server: NatsServer) -> None:
    await nats_server.provision()
    opened: list[NatsBus] = []

    async def bus(box: str, consumer: str | None = None) -> NatsBus:
        made = NatsBus(box, consumer=consumer, call_timeout=2)
        await nats_server.connect(made)
        opened.append(made)
        return made

    try:
        assert await _script(bus) == EXPECTED
    finally:
        for made in opened:
            await made.close()


@pytest.mark.anyio
async def test_simbus_runs_the_script() -> None:
    network = SimNetwork(ack_wait=ACK_WAIT)

    async def bus(box: str, consumer: str | None = None) -> SimBus:
        return network.bus(box, consumer=consumer)

    assert await _script(bus) == EXPECTED


@pytest.mark.anyio
async def test_simbus_faults_are_seeded_and_off_by_default() -> None:
    """Duplicates and drops come from the seed: the same seed, the same deliveries; faults off, each
    message once."""

    async def deliveries(faults: Faults, seed: int) -> list[bytes]:
        network = SimNetwork(seed=seed, faults=faults)
        a, b = network.bus(A), network.bus(B)
        for i in range(30):
            await a.publish(f"connect.{B}.inbox.{A}", f"m{i}".encode(), msg_id=f"id-{i}")
        got = await b.fetch(batch=100, timeout=0.1)
        return [d.data for d in got]

    faulty = Faults(drop=0.2, duplicate=0.2, reorder=True)
    assert await deliveries(faulty, 7) == await deliveries(faulty, 7)
    assert await deliveries(faulty, 7) != await deliveries(Faults(), 7)
    assert await deliveries(Faults(), 7) == [f"m{i}".encode() for i in range(30)]


async def _until(check: Callable[[], bool], timeout: float = 10.0) -> None:
    with anyio.fail_after(timeout):
        while not check():
            await anyio.sleep(0.02)


async def _through_a_drop(bus: Any, away: Callable[[], None], back: Callable[[], None]) -> list[tuple[bool, bool]]:
    """(connected, reconnecting) connected, with the server away (the client not closed) and back:
    what the pump waits on (``Pump._connected``: a reconnecting bus is waited for, not connected again)."""
    seen = [(bus.connected, bus.reconnecting)]
    away()
    await _until(lambda: not bus.connected)
    seen.append((bus.connected, bus.reconnecting))
    back()
    await _until(lambda: bus.connected)
    seen.append((bus.connected, bus.reconnecting))
    return seen


THROUGH_A_DROP = [(True, False), (False, True), (True, False)]


@pytest.mark.anyio
async def test_natsbus_is_reconnecting_while_the_server_is_away(nats_server: NatsServer) -> None:
    await nats_server.provision()
    bus = await nats_server.connect(NatsBus(A, call_timeout=2))
    try:
        assert await _through_a_drop(bus, nats_server.kill, nats_server.start) == THROUGH_A_DROP
    finally:
        await bus.close()
    assert (bus.connected, bus.reconnecting) == (False, False)  # closed: connected again, not waited for
    assert (NatsBus(B).connected, NatsBus(B).reconnecting) == (False, False)  # never connected


@pytest.mark.anyio
async def test_simbus_is_reconnecting_while_the_network_is_away() -> None:
    network = SimNetwork(ack_wait=ACK_WAIT)

    def away() -> None:
        network.up = False

    def back() -> None:
        network.up = True

    assert await _through_a_drop(network.bus(A), away, back) == THROUGH_A_DROP
