"""The fixtures most integration tests share: a private tmux server with one 160x40 session, and a real
daemon on it (a module that needs another shape defines its own fixture of the same name)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.daemon import DaemonProcess
from tests.support.tmux_server import TmuxServer


@pytest.fixture
def tmux() -> Iterator[TmuxServer]:
    with TmuxServer("connect-it") as server:
        server.new_session("main", width=160, height=40)
        yield server


@pytest.fixture
def daemon(tmp_path: Path, tmux: TmuxServer) -> Iterator[DaemonProcess]:
    d = DaemonProcess(tmp_path, tmux).start()
    try:
        yield d
    finally:
        d.stop()
