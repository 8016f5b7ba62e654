"""The OpenCode binding on the real binary (the pinned release, offline against the scripted model
server, private HOME and tmux server): a launch with connectd's server arguments and password is bound
to the session connectd created on the process's own server, and the person's next prompt goes into
exactly that session: the I/O step alone. The live acceptance of a connected OpenCode (launched by
connectd, bound by the daemon, its tools, a consented message) is tests/integration/test_live_opencode.py."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import anyio
import pytest

from connectcore import opencode_binding as OC
from connectcore.launchers import harness_injection
from connectd.agents import opencode_session as opencode_bind
from connectd.tmux.procfs import alive
from tests.support import harnesses as H
from tests.support.live import argv_holding
from tests.support.model_server import ModelServer, Turn

pytestmark = pytest.mark.live

PASSWORD = "pw-live-opencode-5f1c2e9a77"
TOKEN = "tok-live-opencode-0b7d3c11aa"


class McpStandIn(BaseHTTPRequestHandler):
    seen: list[str | None] = []

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("content-length") or 0))
        McpStandIn.seen.append(self.headers.get("Authorization"))
        self.send_response(401)
        self.send_header("content-length", "0")
        self.end_headers()

    def do_GET(self) -> None:  # noqa: N802
        self.send_response(404)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[tuple[H.Tmux, ModelServer, ThreadingHTTPServer]]:
    binary = H.install("opencode")
    assert binary.exists()
    model, tmux = ModelServer(), H.Tmux("tc-oclive")
    mcp = ThreadingHTTPServer(("127.0.0.1", 0), McpStandIn)
    threading.Thread(target=mcp.serve_forever, daemon=True).start()
    model.start()
    try:
        yield tmux, model, mcp
    finally:
        # OpenCode outlives its tmux server (it ignores the hang-up): end the pane's process by its pid
        # (and it does not always heed SIGTERM: SIGKILL after a bounded wait)
        out = tmux.run("list-panes", "-a", "-F", "#{pane_pid}", check=False)
        pids = [int(p) for p in out.split() if p.isdigit()]
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, sig)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and any(alive(pid) for pid in pids):
                time.sleep(0.1)
        tmux.kill()
        model.stop()
        mcp.shutdown()
        H.reap(tmp_path)


def test_a_connected_opencode_is_bound_to_the_session_connectd_created(
    rig: tuple[H.Tmux, ModelServer, ThreadingHTTPServer], tmp_path: Path
) -> None:
    tmux, model, mcp = rig
    home, cwd = tmp_path / "home", tmp_path / "work"
    cwd.mkdir()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    injection = harness_injection("opencode", endpoint_url=f"http://127.0.0.1:{mcp.server_port}/mcp",
                                  server_port=port)
    env = H.opencode_home(home, cwd, model.url)
    env.update({**injection.env, OC.PASSWORD_ENV: PASSWORD, "CONNECT_TOKEN": TOKEN})
    model.script("claude", [Turn.reply("Bound and answered.")])
    pane = tmux.launch("oc", [str(H.binary("opencode")), *injection.argv], env, cwd, width=100, height=30)
    tmux.wait_for(pane, lambda c: "Ask anything" in c.text, timeout=240)  # a first start is slow
    pid = int(tmux.run("display-message", "-p", "-t", pane, "#{pane_pid}").strip())

    assert anyio.run(lambda: opencode_bind.bind(port=port, password="wrong", directory=str(cwd), pane_pid=pid,
                                                wait=120)) is OC.Refusal.SERVER_REFUSED
    found = anyio.run(lambda: opencode_bind.bind(port=port, password=PASSWORD, directory=str(cwd), pane_pid=pid,
                                                 wait=120))
    assert isinstance(found, str) and OC.SESSION_ID_RE.fullmatch(found), found

    # the TUI shows the selected (empty) session: the home screen's placeholder is gone, and stays gone
    # (the switch redraws the screen: a prompt typed into the home screen's composer would be dropped)
    for _ in range(20):
        tmux.wait_for(pane, lambda c: "Ask anything" not in c.text and "tab agents" in c.text, timeout=60)
        time.sleep(0.5)
        if "Ask anything" not in tmux.capture(pane).text:
            break
    for _ in range(3):  # the person types, and presses Enter again while the text stays a draft
        if "say something" not in tmux.capture(pane).text:
            tmux.type(pane, "say something")
            tmux.wait_for(pane, lambda c: "say something" in c.text, timeout=30)
        time.sleep(0.4)
        tmux.keys(pane, "Enter")
        try:
            tmux.wait_for(pane, lambda c: "Bound and answered." in c.text, timeout=60)
            break
        except TimeoutError:
            continue
    tmux.wait_for(pane, lambda c: "Bound and answered." in c.text, timeout=60)

    db = sqlite3.connect(f"file:{home}/.local/share/opencode/opencode.db?mode=ro", uri=True)
    try:
        sessions = db.execute("select id, parent_id, directory from session where parent_id is null").fetchall()
        by_session = dict(db.execute("select session_id, count(*) from message group by session_id").fetchall())
    finally:
        db.close()
    assert sessions == [(found, None, str(cwd))]  # the prompt went into it: no other session was made
    assert by_session.get(found, 0) >= 2
    # the token reached the MCP endpoint by the {env:} header, and no argv holds a secret
    assert f"Bearer {TOKEN}" in McpStandIn.seen
    assert argv_holding(TOKEN) == [] and argv_holding(PASSWORD) == []
    assert json.dumps(TOKEN) not in (home / "opencode.json").read_text()
