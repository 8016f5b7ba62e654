"""In-memory fakes of the core's ports (``connectcore.ports``), for tests of the pure core.

Only the clock: ``Panes`` has no fake here (the one that stood here was used by no test); an
in-memory pane server must pass ``tests.support.conformance.port_mismatches(Panes, ...)`` as the
real ``connectd.tmux.adapter.TmuxAdapter`` and the simulation's ``SimTmux`` do (``tests/unit/test_ports.py``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class FakeClock:
    """A clock that moves only when told to."""

    now: float = 1_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        self.now += seconds
        return self.now
