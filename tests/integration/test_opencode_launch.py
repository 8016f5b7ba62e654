"""A connected OpenCode launch through a real ``connectd serve`` on real tmux: the daemon picks the
port and the password, reads the pane as OpenCode idle, binds it through the pane's own server, and
the principal gets the session (its grant keyed by it); a listener that is not the pane's leaves it
unbound, never talked to, and says why.

The pane runs the stand-in for OpenCode's server (tests/support/fake_opencode_server.py, drawing
OpenCode's idle screen); the same on the real OpenCode binary is in tests/integration/
test_opencode_live.py (``live``).
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from connectcore import opencode_binding as OC
from tests.support.daemon import DaemonProcess, call, mcp_agent, wait_for
from tests.support.fake_opencode_server import SESSION_ID, install_wrapper
from tests.support.fixtures import running_daemon, tmux_session
from tests.support.live import argv_holding, proc_argv
from tests.support.tmux_server import TmuxServer

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def tmux() -> Iterator[TmuxServer]:
    with tmux_session("connect-oc", width=80, height=24) as server:  # the stand-in draws the 80x24 idle screen
        yield server


@pytest.fixture
def daemon(tmp_path: Path, tmux: TmuxServer) -> Iterator[DaemonProcess]:
    wrapper = install_wrapper(tmp_path / "oc-bin", ROOT)
    oc = f'[launchers.oc]\nharness = "opencode"\nargv = [{json.dumps(str(wrapper))}]\n'
    with running_daemon(tmp_path, tmux, launchers=oc) as d:
        yield d


def launch(daemon: DaemonProcess, tmp_path: Path, **env: str) -> tuple[dict[str, object], Path]:
    log = tmp_path / "fake-opencode.jsonl"
    body = {"launcher": "oc", "connect": "collaborate", "cwd": str(daemon.workdir),
            "env": {"FAKE_OPENCODE_LOG": str(log), **env}}
    return daemon.api("POST", "/api/launch", body), log


def requests(log: Path) -> list[tuple[str, str]]:
    rows = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return [(r["request"], r["value"]) for r in rows]


def environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
    return dict(item.split("=", 1) for item in raw.split("\0") if "=" in item)


def audit(daemon: DaemonProcess) -> list[dict[str, object]]:
    return list(daemon.api("GET", "/api/audit?order=oldest&limit=500"))


def test_a_connected_opencode_launch_is_bound_through_its_own_server_and_its_grant_works(
    daemon: DaemonProcess, tmux: TmuxServer, tmp_path: Path
) -> None:
    launched, log = launch(daemon, tmp_path)
    pane = str(launched["pane"])
    assert launched["connect"] == "collaborate" and launched["session"] is None  # not known at launch
    try:
        view = wait_for(  # the directory binds the pane, then the hub names the principal by its session
            lambda: (v := daemon.agent_view(pane))["session"] and v["actor"] == f"agent:opencode:{SESSION_ID}" and v, 30,
            "the pane bound to its session and its principal named by it",
        )
    except AssertionError:
        raise AssertionError(f"{daemon.agent_view(pane)}\n{requests(log)}\n{tmux.capture(pane)}\n{daemon.log_text()}") from None
    assert view["session"] == {"harness": "opencode", "session_id": SESSION_ID}
    assert view["actor"] == f"agent:opencode:{SESSION_ID}" and view["session_note"] == ""
    assert requests(log) == [("create", SESSION_ID), ("select", SESSION_ID)]  # once, created then selected

    # the launch: the server on a loopback port connectd picked, the secrets only in the environment
    pid = tmux.pane_pid(pane)
    argv, env = proc_argv(pid), environ(pid)
    port = next(int(a.split("=", 1)[1]) for a in argv if a.startswith("--port="))
    assert "--hostname=127.0.0.1" in argv and "--mdns=false" in argv and 0 < port < 65536
    token, password = env["CONNECT_TOKEN"], env[OC.PASSWORD_ENV]
    assert daemon.mcp_url in env["OPENCODE_CONFIG_CONTENT"] and "{env:CONNECT_TOKEN}" in env["OPENCODE_CONFIG_CONTENT"]
    assert argv_holding(token) == [] and argv_holding(password) == []

    rows = audit(daemon)
    assert any(r["action"] == "opencode.bind" and r["outcome"] == "bound" and r["detail"] == SESSION_ID
               and r["target"] == pane for r in rows), rows
    assert any(r["action"] == "rebind" and r["actor"] == f"agent:opencode:{SESSION_ID}" for r in rows), rows

    async def whoami() -> dict[str, object]:
        async with mcp_agent(daemon.mcp_url, token) as client:
            err, who = await call(client, "whoami")
            assert not err, who
            return who  # type: ignore[no-any-return]

    who = anyio.run(whoami)
    assert who["actor"] == f"agent:opencode:{SESSION_ID}" and who["pane"] == pane
    assert who["scopes"] == ["history", "message", "reachable", "read"]
    # the grant is the session's: the pane's toggle (which needs a bound session) changes it
    daemon.api("POST", f"/api/panes/{pane}/connect", {"preset": "observe"})
    assert anyio.run(whoami)["scopes"] == ["history", "read"]


def test_a_listener_outside_the_pane_leaves_it_unbound_and_is_never_talked_to(
    daemon: DaemonProcess, tmux: TmuxServer, tmp_path: Path
) -> None:
    launched, log = launch(daemon, tmp_path, FAKE_OPENCODE_LISTEN="0")
    pane = str(launched["pane"])
    pid = wait_for(lambda: tmux.pane_pid(pane), 10, "the pane's process")
    port = wait_for(lambda: next((int(a.split("=", 1)[1]) for a in proc_argv(pid) if a.startswith("--port=")), None),
                    10, "the launch's --port")
    with socket.socket() as foreign:  # this test process takes the launch's port: not the pane's tree
        foreign.bind(("127.0.0.1", port))
        foreign.listen()
        foreign.settimeout(0.2)
        words = OC.REFUSAL_WORDS[OC.Refusal.FOREIGN_LISTENER]
        view = wait_for(lambda: (v := daemon.agent_view(pane))["session_note"] == words and v, 90, "the refusal")
        with pytest.raises(TimeoutError):
            foreign.accept()  # nobody connected: the password never left the daemon
    assert view["session"] is None and view["actor"] == f"agent:opencode:pane:{pane}:{pid}"
    assert requests(log) == []
    rows = audit(daemon)
    assert any(r["action"] == "opencode.bind" and r["outcome"] == "refused" and r["detail"] == "foreign_listener"
               for r in rows), rows
    assert not any(r["action"] == "rebind" for r in rows)
    # nothing changed: no session to resume, so restart-to-connect refuses, naming why
    refused = daemon.api("POST", "/api/restart", {"pane": pane, "preset": "observe"}, expect=409)
    assert "ambiguous_binding" in json.dumps(refused)


def test_a_selection_the_tui_does_not_show_leaves_it_unbound(
    daemon: DaemonProcess, tmux: TmuxServer, tmp_path: Path
) -> None:
    launched, log = launch(daemon, tmp_path, FAKE_OPENCODE_STAY_HOME="1")
    pane = str(launched["pane"])
    words = OC.REFUSAL_WORDS[OC.Refusal.NOT_SHOWN]
    view = wait_for(lambda: (v := daemon.agent_view(pane))["session_note"] == words and v, OC.SHOWN_WAIT + 30,
                    "the refusal")
    assert view["session"] is None and requests(log) == [("create", SESSION_ID), ("select", SESSION_ID)]
    assert any(r["action"] == "opencode.bind" and r["detail"] == "not_shown" for r in audit(daemon))


def test_launch_here_binds_an_opencode_in_the_persons_own_pane(
    daemon: DaemonProcess, tmux: TmuxServer, tmp_path: Path
) -> None:
    log = tmp_path / "fake-opencode-here.jsonl"
    pane = tmux.tmux("new-window", "-d", "-P", "-F", "#{pane_id}", "-c", str(daemon.workdir)).strip()
    daemon.type_launch_here(tmux, pane, "oc", "--connect collaborate", f"--env FAKE_OPENCODE_LOG={log}")
    try:
        view = wait_for(  # the directory binds the pane, then the hub names the principal by its session
            lambda: (v := daemon.agent_view(pane)).get("session") and v["actor"] == f"agent:opencode:{SESSION_ID}" and v, 60,
            "the --here OpenCode bound and its principal named by its session",
        )
    except AssertionError:
        raise AssertionError(tmux.capture(pane) + repr(daemon.agent_view(pane))) from None
    assert view["session"] == {"harness": "opencode", "session_id": SESSION_ID} and view["launcher"] == "oc"
    assert view["actor"] == f"agent:opencode:{SESSION_ID}" and view["connect"] == "collaborate"
    assert requests(log) == [("create", SESSION_ID), ("select", SESSION_ID)]
