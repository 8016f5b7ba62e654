"""The daemon's adapters and the tests' fakes both satisfy the core's ports."""

from __future__ import annotations

import time

import anyio

from connectcore.ports import Clock, Panes
from connectd.tmux import TmuxAdapter
from tests.support.fakes import FakeClock, FakePanes


def test_the_real_adapter_and_clock_satisfy_the_ports() -> None:
    assert isinstance(TmuxAdapter(socket_name="connect-ports-never-started"), Panes)
    assert isinstance(time.time, Clock)


def test_the_fakes_satisfy_the_ports_and_record_what_happened() -> None:
    clock, panes = FakeClock(), FakePanes()
    assert isinstance(clock, Clock) and isinstance(panes, Panes)
    assert clock.advance(5) == clock() == 1_005.0

    async def drive() -> None:
        await panes.paste_text("%1", "hello\nworld")
        await panes.press_enter("%1")
        await panes.set_pane_option("%1", "remain-on-exit", "on")
        await panes.set_pane_option("%1", "remain-on-exit", None)
        await panes.send_exit_command("%1", "/exit")
        await panes.respawn("%1", ["claude", "--resume", "s"], "/tmp", {})

    anyio.run(drive)
    pane = panes.pane("%1")
    assert pane.typed == ["hello\nworld"] and pane.options == {} and pane.alive and pane.argv[-1] == "s"
