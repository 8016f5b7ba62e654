"""The real parts integration tests run against, each defined once: a private tmux server with one
session, a real daemon on it, and a free local port.

`tests/conftest.py` registers the two default fixtures, ``tmux`` (a server "connect-it" with one 160x40
session "main") and ``daemon`` (a `DaemonProcess` on it in the test's tmp_path), for every test. A module
that needs another shape (module scope, another size or first command, launchers or history roots added
before the daemon starts, a prepared data directory) keeps its own fixture of the same name, built from
`tmux_session` and `running_daemon` with that difference as an argument, so the difference stays visible
where it is used. A bare server with no session is `tests.support.tmux_server.tmux_server_fixture`.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support.daemon import DaemonProcess
from tests.support.tmux_server import TmuxServer


def free_port() -> int:
    """A local TCP port nothing listens on right now (the kernel's pick; free until someone binds it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def tmux_session(
    prefix: str = "connect-it",
    command: Sequence[str] | None = None,
    *,
    width: int = 160,
    height: int = 40,
) -> Iterator[TmuxServer]:
    """A private tmux server with one session "main" (running ``command``, else a shell); killed on exit."""
    with TmuxServer(prefix) as server:
        server.new_session("main", command, width=width, height=height)
        yield server


@contextmanager
def running_daemon(
    tmp: Path,
    tmux: TmuxServer,
    *,
    launchers: str = "",
    **options: object,
) -> Iterator[DaemonProcess]:
    """A started `DaemonProcess` in ``tmp`` on ``tmux``, stopped on exit. ``launchers`` is appended to
    its launchers.toml before it starts; ``options`` go to `DaemonProcess` (policy, extra_args,
    history_roots)."""
    d = DaemonProcess(tmp, tmux, **options)  # type: ignore[arg-type]
    if launchers:
        with (d.data_dir / "launchers.toml").open("a") as fh:
            fh.write(launchers)
    d.start()
    try:
        yield d
    finally:
        d.stop()


@pytest.fixture
def tmux() -> Iterator[TmuxServer]:
    """A private tmux server "connect-it" with one 160x40 session "main" running a shell."""
    with tmux_session() as server:
        yield server


@pytest.fixture
def daemon(tmp_path: Path, tmux: TmuxServer) -> Iterator[DaemonProcess]:
    """A real daemon (`DaemonProcess`, its data directory in tmp_path) on the ``tmux`` fixture."""
    with running_daemon(tmp_path, tmux) as d:
        yield d
