"""connectd.agents.opencode_session on real tmux: the pane's process serves on the launch's port and is bound
through it; a listener outside the pane, a wrong password or no listener leaves it unbound.

The pane runs a stand-in for OpenCode's server (tests/support/fake_opencode_server.py); the same
binding on the real OpenCode binary is in tests/integration/test_opencode_bind_live.py (``live``).
"""

from __future__ import annotations

import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from connectcore import opencode_binding as OC
from connectd.agents import opencode_session as opencode_bind
from tests.support import harnesses as H
from tests.support.fixtures import free_port

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "pw-per-launch-0123456789"


@pytest.fixture
def tmux() -> Iterator[H.Tmux]:
    t = H.Tmux("tc-ocbind")
    try:
        yield t
    finally:
        t.kill()


def start_fake(tmux: H.Tmux, tmp_path: Path, port: int) -> tuple[str, int]:
    env = H.base_env(tmp_path / "home")
    (tmp_path / "home" / "tmp").mkdir(parents=True, exist_ok=True)
    env["PYTHONPATH"] = str(ROOT)
    pane = tmux.launch("oc", [sys.executable, "-m", "tests.support.fake_opencode_server", str(port), PASSWORD,
                              str(tmp_path)], env, tmp_path)
    tmux.wait_for(pane, lambda c: "listening" in c.text, timeout=60)
    pid = int(tmux.run("display-message", "-p", "-t", pane, "#{pane_pid}").strip())
    return pane, pid


def bind(port: int, pid: int, directory: Path, *, password: str = PASSWORD, wait: float = 30.0) -> object:
    return anyio.run(lambda: opencode_bind.bind(port=port, password=password, directory=str(directory),
                                                pane_pid=pid, wait=wait))


def test_the_panes_own_server_binds_the_session_it_created_and_selected(tmux: H.Tmux, tmp_path: Path) -> None:
    port = free_port()
    pane, pid = start_fake(tmux, tmp_path, port)
    assert bind(port, pid, tmp_path) == "ses_fake0000000000000000000001"
    screen = tmux.wait_for(pane, lambda c: "select ses_fake" in c.text, timeout=30).text
    assert "create ses_fake0000000000000000000001" in screen


def test_a_wrong_password_is_refused_and_nothing_is_created(tmux: H.Tmux, tmp_path: Path) -> None:
    port = free_port()
    pane, pid = start_fake(tmux, tmp_path, port)
    assert bind(port, pid, tmp_path, password="wrong") is OC.Refusal.SERVER_REFUSED
    time.sleep(0.5)
    assert "create" not in tmux.capture(pane).text


def test_a_listener_outside_the_pane_is_never_talked_to(tmux: H.Tmux, tmp_path: Path) -> None:
    _, pid = start_fake(tmux, tmp_path, free_port())
    with socket.socket() as foreign:  # this test process listens: not in the pane's tree
        foreign.bind(("127.0.0.1", 0))
        foreign.listen()
        foreign.settimeout(0.5)
        assert bind(foreign.getsockname()[1], pid, tmp_path) is OC.Refusal.FOREIGN_LISTENER
        with pytest.raises(TimeoutError):
            foreign.accept()  # no connection was made: the password never left


def test_no_listener_within_the_wait_leaves_it_unbound(tmux: H.Tmux, tmp_path: Path) -> None:
    _, pid = start_fake(tmux, tmp_path, free_port())
    assert bind(free_port(), pid, tmp_path, wait=1.0) is OC.Refusal.NO_LISTENER


def test_a_bad_port_is_refused_before_anything_is_read() -> None:
    with pytest.raises(ValueError, match="1..65535"):
        anyio.run(lambda: opencode_bind.bind(port=0, password=PASSWORD, directory="/", pane_pid=1))
