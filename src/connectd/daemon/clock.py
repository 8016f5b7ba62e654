"""The daemon's clock: wall time read once at start, advanced by the monotonic clock.

Every rule of the core reads ``now`` from its events, and the engine stamps them with this clock. A
wall clock stepped backwards or forwards (NTP, a person, a suspended VM's catch-up) inside one
daemon's life therefore moves no interval: reading order, the quiet re-arm, rate windows, guard
waits, card and id lifetimes all count seconds that passed. What survives a restart is stamped with
it too, and so stays wall time as of the start plus what passed since; a step shows up at the next
start, where stored times are compared with the wall clock read then. (docs/architecture.md, "which
clock each rule reads")
"""

from __future__ import annotations

import time
from collections.abc import Callable


class LifeClock:
    """Seconds since the epoch as of the daemon's start, plus monotonic seconds since then."""

    def __init__(self, wall: Callable[[], float] = time.time, mono: Callable[[], float] = time.monotonic) -> None:
        self._mono = mono
        self._wall_at_start = wall()
        self._mono_at_start = mono()

    def __call__(self) -> float:
        return self._wall_at_start + (self._mono() - self._mono_at_start)
