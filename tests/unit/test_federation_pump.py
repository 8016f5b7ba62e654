"""The federation's bus loops under the supervisor, while NATS is away and when it is back
(connectd/federation/pump.py; found by tests/integration/test_federation_partition.py)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from connectcore.ports import BusUnavailable
from connectd.daemon.supervisor import Kind, Supervisor
from connectd.federation.pump import Pump


class DroppedBus:
    """A bus whose connection drops at ``down`` and that nats-py brings back at ``up`` (its client is
    never closed: it reconnects by itself); each fetch while connected is recorded."""

    def __init__(self, clock: Any, down: float, up: float) -> None:
        self.clock, self.down, self.up = clock, down, up
        self._nc = SimpleNamespace(is_closed=False)
        self.fetched: list[float] = []

    @property
    def connected(self) -> bool:
        return not self.down <= self.clock() < self.up

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
