"""Each agent's harness release, on a real daemon and a real tmux server (issue 14).

The stand-in agent's banner names a release as Claude Code's does (``Claude Code v2.1.332``, the pin,
by default; ``DEMO_AGENT_RELEASE`` names another, empty leaves it out). connectd records it, and the
API, ``connectd agents`` (text and JSON) and the agents' own ``list_agents`` mark a release outside
the verified matrix: "unverified release: messages wait until its screens are read". A consented
message to such an agent waits, queued, while its screen reads idle and empty, and nothing is
typed; the same for an agent whose release is not known. The page's mark is in test_page.py.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from connectcore.releases import TRUSTED_NOTE, UNKNOWN_NOTE, UNVERIFIED_NOTE
from tests.integration.test_daemon_e2e import agents, get_message, run, send
from tests.support.daemon import ROOT, AgentHandle, DaemonProcess, call, mcp_agent
from tests.support.tmux_server import TmuxServer


def launch(daemon: DaemonProcess, name: str, release: str) -> AgentHandle:
    handle = daemon.launch(name, "collaborate", env={"DEMO_AGENT_RELEASE": release})
    daemon.wait_ready(handle)
    return handle


def cli(daemon: DaemonProcess, *args: str) -> str:
    env = {"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-m", "connectd.cli", *args, "--data-dir", str(daemon.data_dir)],
                         capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


async def list_agents(daemon: DaemonProcess, agent: AgentHandle) -> list[dict[str, object]]:
    async with mcp_agent(daemon.mcp_url, agent.token or "") as client:
        err, listed = await call(client, "list_agents")
        assert not err, listed
        return list(listed["data"])


def test_each_agent_s_release_is_recorded_and_one_outside_the_matrix_is_marked(daemon: DaemonProcess) -> None:
    (v,) = agents(daemon, "v")
    u, n = launch(daemon, "u", "2.1.999"), launch(daemon, "n", "")
    views = {h.name: daemon.agent_view(h.pane) for h in (v, u, n)}
    assert {k: (x["release"], x["release_status"], x["release_note"]) for k, x in views.items()} == {
        "v": ("2.1.332", "verified", ""),
        "u": ("2.1.999", "unverified", UNVERIFIED_NOTE),
        "n": (None, "unknown", UNKNOWN_NOTE),
    }
    assert UNVERIFIED_NOTE == "unverified release: messages wait until its screens are read"
    shell = daemon.tmux.tmux("new-window", "-d", "-P", "-F", "#{pane_id}").strip()
    deadline = time.monotonic() + 15
    while daemon.agent_view(shell).get("harness") != "shell" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert (daemon.agent_view(shell)["release"], daemon.agent_view(shell)["release_status"]) == (None, None)

    text = cli(daemon, "agents")
    header, *rows = text.splitlines()
    assert header.split()[:5] == ["ADDRESS", "HARNESS", "READING", "CONNECT", "RELEASE"]
    row = {h.name: next(r for r in rows if r.startswith(views[h.name]["address"])) for h in (v, u, n)}
    assert row["v"].split()[4] == "2.1.332" and row["u"].split()[4:6] == ["2.1.999", "(unverified)"]
    assert row["n"].split()[4] == "unknown"
    assert next(r for r in rows if r.startswith(daemon.agent_view(shell)["address"])).split()[4] == "-"
    assert f"{views['u']['address']}: {UNVERIFIED_NOTE}" in rows
    assert f"{views['n']['address']}: {UNKNOWN_NOTE}" in rows
    assert not any(r.startswith(f"{views['v']['address']}: ") for r in rows), "a verified release has no mark"

    listed = {a["pane"]: a for a in run(list_agents, daemon, v)}
    assert listed[u.pane]["release_note"] == UNVERIFIED_NOTE and listed[v.pane]["release_note"] == ""


@pytest.mark.parametrize("release", ["2.1.999", ""], ids=["unverified", "unknown"])
def test_a_consented_message_to_an_agent_outside_the_matrix_waits_and_nothing_is_typed(
    daemon: DaemonProcess, release: str
) -> None:
    (a,) = agents(daemon, "a")
    b = launch(daemon, "b", release)
    err, sent = run(send, daemon, a, b.address, "only for a verified release", "m-rel")
    assert not err and sent["outcome"] == "queued", sent  # type: ignore[index]
    card = daemon.wait_card()
    daemon.api("POST", f"/api/cards/{card['id']}/approve", {"pair": False})
    until = time.monotonic() + 4.0
    while time.monotonic() < until:  # b reads idle and empty all along: only its release holds the message
        view = daemon.agent_view(b.pane)
        assert (view["activity"], view["composer"]) == ("idle", "empty"), view
        assert run(get_message, daemon, a, "m-rel")["outcome"] == "queued"
        time.sleep(0.5)
    assert b.prompts() == [], "typed into an agent on a release whose screens were never read"
    row = next(m for m in daemon.api("GET", "/api/messages") if m["message_id"] == "m-rel")
    assert row["outcome"] == "queued" and row["state"] == "ready", row


def test_a_release_the_daemon_is_told_to_trust_receives_and_is_marked_trusted(tmp_path: Path, tmux: TmuxServer) -> None:
    """``connectd serve --trust-release claude@2.1.999`` (what make compat runs to verify a release): the
    message is typed; the release is shown as trusted, never as verified."""
    d = DaemonProcess(tmp_path, tmux, extra_args=("--trust-release", "claude@2.1.999")).start()
    try:
        (a,) = agents(d, "a")
        b = launch(d, "b", "2.1.999")
        view = d.agent_view(b.pane)
        assert (view["release"], view["release_status"], view["release_note"]) == ("2.1.999", "trusted", TRUSTED_NOTE)
        assert "2.1.999 (trusted)" in cli(d, "agents")
        run(send, d, a, b.address, "typed on a trusted release", "m-trusted")
        d.api("POST", f"/api/cards/{d.wait_card()['id']}/approve", {"pair": False})
        deadline = time.monotonic() + 15
        while run(get_message, d, a, "m-trusted")["outcome"] == "queued" and time.monotonic() < deadline:
            time.sleep(0.3)
        assert run(get_message, d, a, "m-trusted")["outcome"] == "delivered"
        assert b.prompts()[-1].endswith("typed on a trusted release")
    finally:
        d.stop()


def test_serve_refuses_a_trusted_release_that_names_no_harness_and_release(tmp_path: Path) -> None:
    env = {"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-m", "connectd.cli", "serve", "--data-dir", str(tmp_path / "d"),
                          "--trust-release", "claude"], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 2 and "not HARNESS@X.Y.Z" in out.stderr, out.stderr


def test_a_release_learned_before_a_daemon_restart_is_kept_for_the_incarnation(tmp_path: Path, tmux: TmuxServer) -> None:
    """Issue 22.4: the release read from an agent's banner is persisted for its incarnation, so after a
    daemon restart an agent whose banner scrolled away is still on its release and receives at once."""
    d = DaemonProcess(tmp_path, tmux).start()
    try:
        (a,) = agents(d, "a")
        b = d.launch("b", "collaborate", env={"DEMO_AGENT_BANNER_SCROLLS": "1"})
        d.wait_ready(b)
        assert d.agent_view(b.pane)["release_status"] == "verified"
        tmux.tmux("send-keys", "-t", b.pane, "-l", "a prompt of its own")
        tmux.tmux("send-keys", "-t", b.pane, "Enter")  # the banner scrolls away
        deadline = time.monotonic() + 10
        while "Claude Code v" in tmux.tmux("capture-pane", "-p", "-t", b.pane) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert "Claude Code v" not in tmux.tmux("capture-pane", "-p", "-S", "-", "-t", b.pane)
        d.stop()
        d.start()
        d.wait_ready(b)
        view = d.agent_view(b.pane)
        assert (view["release"], view["release_status"]) == ("2.1.332", "verified"), view
        run(send, d, a, b.address, "after the daemon restart", "m-kept")
        d.api("POST", f"/api/cards/{d.wait_card()['id']}/approve", {"pair": False})
        deadline = time.monotonic() + 15
        while run(get_message, d, a, "m-kept")["outcome"] == "queued" and time.monotonic() < deadline:
            time.sleep(0.3)
        assert run(get_message, d, a, "m-kept")["outcome"] == "delivered"
    finally:
        d.stop()
