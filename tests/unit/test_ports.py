"""The daemon's adapters and the tests' stand-ins for them (the simulator's pane server, the fake clock)
conform to the core's ports, member by member, and the check names each way a wrong implementation
differs. (``isinstance`` against a runtime-checkable Protocol only looks for names, ``print`` is a
``Clock``; these tests do not use it.)"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

import pytest

from connectcore.ports import Bus, Clock, Panes
from connectd.daemon.clock import LifeClock
from connectd.federation.bus import NatsBus
from connectd.tmux.adapter import Capture, TmuxAdapter
from tests.simulation.sim_bus import SimNetwork
from tests.simulation.sim_tmux import SimServer
from tests.support.conformance import port_mismatches
from tests.support.fakes import FakeClock

# Every implementation of a port the daemon or a test runs against: the real one and each stand-in.
IMPLEMENTATIONS: list[tuple[type, str, Callable[[], object]]] = [
    (Panes, "connectd.tmux.adapter.TmuxAdapter", lambda: TmuxAdapter(socket_name="connect-ports-never-started")),
    (Panes, "tests.simulation.sim_tmux.SimTmux", lambda: SimServer(FakeClock()).view()),
    (Clock, "time.time", lambda: time.time),
    (Clock, "connectd.daemon.clock.LifeClock", LifeClock),
    (Clock, "tests.support.fakes.FakeClock", FakeClock),
    (Bus, "connectd.federation.bus.NatsBus", lambda: NatsBus("aaaaaaaaaaaaaaaa")),
    (Bus, "tests.simulation.sim_bus.SimBus", lambda: SimNetwork().bus("aaaaaaaaaaaaaaaa")),
]


@pytest.mark.parametrize(("port", "make"), [(p, m) for p, _, m in IMPLEMENTATIONS], ids=[n for _, n, _ in IMPLEMENTATIONS])
def test_each_implementation_conforms_to_its_port(port: type, make: Callable[[], object]) -> None:
    """Every method of the port exists, async as declared, with the port's parameters (names, kinds,
    defaults, annotations) and return type; a capture's class has PaneText's attributes and types."""
    assert port_mismatches(port, make()) == []


def test_the_daemon_clock_and_the_fake_clock_agree() -> None:
    """time.time, the daemon's LifeClock and FakeClock all give float seconds that never go back; the fake moves only when told."""
    fake = FakeClock()
    life = LifeClock()
    now = life()
    assert type(now) is float and life() >= now and abs(now - time.time()) < 60
    first, second = time.time(), time.time()
    assert type(first) is float and second >= first and abs(first - time.time()) < 60
    before = fake()
    assert type(before) is float and fake() == before
    assert fake.advance(5) == fake() == before + 5


# --- deliberately wrong implementations: each differs from the port in one way --------------------


class ReturnsInt:
    def __call__(self) -> int:
        return 1


class SyncPaste(TmuxAdapter):
    def paste_text(self, pane_id: str, text: str, *, submit_after: float | None = None) -> str | None:  # type: ignore[override]
        pass


class RenamedParameter(TmuxAdapter):
    async def press_enter(self, pane: str) -> None:
        pass


class PositionalSettle(TmuxAdapter):
    async def send_exit_command(self, pane_id: str, command: str, settle: float = 0.4) -> None:
        pass


class OtherDefault(TmuxAdapter):
    async def capture(self, pane_id: str, scrollback_lines: int = 100) -> Capture:
        raise AssertionError


class CapturesText(TmuxAdapter):
    async def capture(self, pane_id: str, scrollback_lines: int = 0) -> str:  # type: ignore[override]
        return ""


class OptionAlwaysSet(TmuxAdapter):
    async def get_pane_option(self, pane_id: str, name: str) -> str:
        return ""


class NoRespawn(TmuxAdapter):
    respawn = None  # type: ignore[assignment]


class LooseRespawn(TmuxAdapter):
    async def respawn(
        self, pane_id: str, argv: Sequence[str], cwd: str, env: Mapping[str, str], kill: bool = False
    ) -> None:
        pass


def _adapter(cls: type[TmuxAdapter]) -> TmuxAdapter:
    return cls(socket_name="connect-ports-never-started")


WRONG: list[tuple[type, object, str]] = [
    (Clock, print, "Clock.__call__: takes (*args"),
    (Clock, lambda: 1.0, "Clock.__call__: return type not declared"),
    (Clock, ReturnsInt(), "Clock.__call__: returns <class 'int'>"),
    (Clock, time.monotonic_ns, "Clock.__call__: returned"),  # a builtin: called, and it gives an int
    (Panes, _adapter(SyncPaste), "Panes.paste_text: async in the port"),
    (Panes, _adapter(RenamedParameter), "Panes.press_enter: takes (self, pane: 'str')"),
    (Panes, _adapter(PositionalSettle), "Panes.send_exit_command: takes"),
    (Panes, _adapter(OtherDefault), "scrollback_lines: 'int' = 100"),
    (Panes, _adapter(CapturesText), "Panes.capture: str lacks cursor"),
    (Panes, _adapter(OptionAlwaysSet), "Panes.get_pane_option: returns <class 'str'>"),
    (Panes, _adapter(NoRespawn), "Panes.respawn: missing"),
    (Panes, _adapter(LooseRespawn), "Panes.respawn: takes"),
    (Panes, object(), "Panes.capture: missing"),
]


@pytest.mark.parametrize(("port", "impl", "expected"), WRONG, ids=[str(i) for i in range(len(WRONG))])
def test_a_wrong_implementation_is_named(port: type, impl: object, expected: str) -> None:
    """Each deliberately wrong implementation fails the check, with the member and the difference named."""
    problems = port_mismatches(port, impl)
    assert any(expected in p for p in problems), problems
    if isinstance(impl, TmuxAdapter):
        assert len(problems) == 1, problems  # only the one member it changed
