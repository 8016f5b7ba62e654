"""Watching on a real tmux server: a pane that drew since the last poll is captured even when its
control-mode %output was lost (tmux's window_activity, read by the same list-panes), and a pane that
drew nothing is never captured."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from connectd.daemon.parts import Engine
from connectd.store.store import Store
from tests.support.tmux_server import TmuxServer, tmux_server_fixture


@pytest.fixture
def tmux() -> Iterator[TmuxServer]:
    yield from tmux_server_fixture("connect-watch")


def test_a_pane_that_drew_is_captured_from_list_panes_alone_and_a_quiet_one_never(tmp_path: Path, tmux: TmuxServer) -> None:
    """Claim: with no control-mode reader and no sweep, one poll finds exactly the panes that drew."""
    active = tmux.new_session("a", ["cat"])
    quiet = tmux.new_session("b", ["cat"])
    engine = Engine(Store.open(tmp_path), tmux.adapter(), endpoint_url="http://127.0.0.1:9/mcp")
    captured: list[str] = []
    real_capture = engine.tmux.capture

    async def counting(pane_id: str, scrollback_lines: int = 0) -> Any:
        captured.append(pane_id)
        return await real_capture(pane_id, scrollback_lines)

    async def look() -> None:
        await engine.watcher.poll()
        await engine.watcher.capture_dirty()

    async def main() -> None:
        await look()
        assert sorted(captured) == sorted([active, quiet])  # new panes are read once
        await anyio.sleep(1.1)
        await look()  # whatever they drew at start is now in an earlier second than this poll
        captured.clear()
        await look()
        assert captured == []  # nothing drew: no capture
        tmux.send_keys(active, "-l", "drawn-after-the-last-poll")
        tmux.wait_for(lambda: "drawn-after-the-last-poll" in tmux.capture(active), what="cat to echo")
        await look()
        assert captured == [active]
        assert "drawn-after-the-last-poll" in engine.watcher.panes[active].capture.text  # type: ignore[union-attr]

    engine.tmux.capture = counting  # type: ignore[method-assign]
    anyio.run(main)
