"""The daemon's clock (connectd.daemon.clock.LifeClock): wall time at start, advanced by the monotonic clock."""

from __future__ import annotations

import pytest

from connectd.daemon.clock import LifeClock


@pytest.mark.parametrize("step", [-3.0, -120.0, -7200.0, 5.0, 3600.0, 86400.0])
def test_a_wall_clock_step_moves_no_interval(step: float) -> None:
    """Stepping the wall clock by seconds to hours changes no reading of the daemon's clock."""
    wall, mono = [1_800_000_000.0], [50.0]
    clock = LifeClock(lambda: wall[0], lambda: mono[0])
    assert clock() == 1_800_000_000.0
    mono[0] += 10.0
    wall[0] += 10.0 + step
    assert clock() == 1_800_000_010.0
    mono[0] += 2.5
    assert clock() == 1_800_000_012.5


def test_a_new_life_reads_the_wall_clock_again() -> None:
    """What survives a restart meets the wall clock of the next start (the step shows up there)."""
    wall, mono = [1_800_000_000.0], [50.0]
    LifeClock(lambda: wall[0], lambda: mono[0])
    wall[0] -= 120.0
    assert LifeClock(lambda: wall[0], lambda: mono[0])() == 1_799_999_880.0
