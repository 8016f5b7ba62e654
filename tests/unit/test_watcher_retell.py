"""A reading the hub dropped as older is not taken as told: the watcher reads the pane again at its next
capture round and tells that screen (issue 25's ten-daemon stall: an idle screen captured late, stamped
before a busy confirmation, dropped; the pane drew nothing more, and only the quiet rule's clock armed it)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import anyio

from connectcore import arming
from connectcore import hub as H
from connectcore.arming import Seen
from tests.unit.test_watcher_release import _Engine, _idle, _Probe, _watcher


@dataclass
class _Core(_Engine):
    """The daemon's core as the watcher reaches it: a real hub stepped by every event, on a clock the
    test moves."""

    hub: H.Hub = field(default_factory=H.Hub)
    now: float = 1000.0

    def clock(self) -> float:
        return self.now

    async def step(self, event: Any) -> tuple[Any, ...]:
        self.stepped.append(event)
        self.hub, effects = H.step(self.hub, event)
        return effects


def _setup() -> tuple[Any, _Core, str]:
    watcher, engine = _watcher(_idle("2.1.332"), _Probe(None))
    core = _Core(engine.tmux, engine.release_probe)
    watcher.core = core
    watcher.clock = core.clock
    token = watcher.panes["%1"].record.token
    return watcher, core, token


def _observed(core: _Core) -> list[float]:
    return [e.read_at for e in core.stepped if isinstance(e, H.PaneObserved)]


def test_a_reading_the_hub_dropped_as_older_is_told_again_at_the_next_read() -> None:
    """Claim: when the hub holds a newer reading, the same screen read again is reported again (with
    its new ``read_at``), and the hub then holds it."""
    watcher, core, token = _setup()
    # the hub already holds a busy reading taken after the watcher's capture began (a confirmation's)
    core.hub = replace(core.hub, panes={"%1": arming.first(token, Seen(False, "busy-screen", 1000.5), 1000.5)})
    anyio.run(watcher.observe_pane, "%1")  # stamped 1000.0: older, dropped
    assert _observed(core) == [1000.0] and core.hub.panes["%1"].seen.fingerprint == "busy-screen"
    assert H.reading_dropped(core.hub, "%1", token, 1000.0)
    core.now = 1001.0
    anyio.run(watcher.observe_pane, "%1")  # the same idle screen, read again
    assert _observed(core) == [1000.0, 1001.0]
    assert core.hub.panes["%1"].seen.read_at == 1001.0 and core.hub.panes["%1"].seen.ready


def test_a_reading_the_hub_kept_is_told_once() -> None:
    """Claim: the same screen read again is not reported again once the hub holds it (the watcher tells
    a screen once)."""
    watcher, core, token = _setup()
    anyio.run(watcher.observe_pane, "%1")
    assert not H.reading_dropped(core.hub, "%1", token, 1000.0)
    core.now = 1001.0
    anyio.run(watcher.observe_pane, "%1")
    assert _observed(core) == [1000.0]
