"""``connectd launch --here`` on a private tmux server: the launcher runs in the person's own pane under
a supervisor, connected at launch (its tools work, it receives a consented message), and the shell
survives its exit (the agent's token ends with it)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from tests.integration.test_daemon_e2e import agents, run, send
from tests.support.daemon import DaemonProcess, call, mcp_agent, wait_for
from tests.support.tmux_server import TmuxServer


async def _whoami(d: DaemonProcess, token: str) -> tuple[bool, object]:
    async with mcp_agent(d.mcp_url, token) as client:
        return await call(client, "whoami")


def _typed(log: Path) -> list[dict[str, object]]:
    if not log.exists():
        return []
    return [json.loads(x) for x in log.read_text().splitlines() if x.strip().endswith("}")]


def test_launch_here_runs_in_this_pane_connected_and_the_shell_survives(daemon: DaemonProcess, tmux: TmuxServer) -> None:
    (a,) = agents(daemon, "a")
    log = daemon.tmp / "here.jsonl"
    pane = tmux.tmux("new-window", "-d", "-P", "-F", "#{pane_id}", "-c", str(daemon.workdir)).strip()
    shell_pid = tmux.tmux("display-message", "-p", "-t", pane, "#{pane_pid}").strip()
    daemon.type_launch_here(tmux, pane, "demo", "--connect collaborate", f"--env DEMO_AGENT_LOG={log}",
                            "--env DEMO_AGENT_REVEAL_TOKEN=1", "--env DEMO_AGENT_NAME=here")
    try:
        view = wait_for(
            lambda: (v := daemon.agent_view(pane)).get("activity") == "idle" and v.get("connect") == "collaborate" and v,
            20, "the agent launched here, idle and connected",
        )
    except AssertionError:
        raise AssertionError(tmux.tmux("capture-pane", "-p", "-t", pane) + repr(daemon.agent_view(pane))) from None
    assert view["launcher"] == "demo" and view["harness"] == "claude" and view["session"] is not None
    token = wait_for(lambda: next((r["token"] for r in _typed(log) if r.get("token")), None), 10, "the agent's token")
    err, who = run(_whoami, daemon, token)
    assert not err and who["pane"] == pane  # type: ignore[index]  # its tools work: connected at launch

    err, queued = run(send, daemon, a, view["address"], "hello from a", "m-here")
    assert not err, queued
    card = daemon.wait_card()
    daemon.api("POST", f"/api/cards/{card['id']}/approve", {})
    wait_for(lambda: any(r.get("prompt") == "hello from a" or "hello from a" in str(r.get("prompt", "")) for r in _typed(log)), 15, "the message typed")

    def typed_exit() -> bool:
        if daemon.agent_view(pane).get("harness") == "shell":
            return True
        tmux.tmux("send-keys", "-t", pane, "-l", "/exit")
        time.sleep(0.4)
        tmux.tmux("send-keys", "-t", pane, "Enter")
        time.sleep(1.5)
        return False

    wait_for(lambda: daemon.agent_view(pane)["activity"] == "idle" and daemon.agent_view(pane)["composer"] == "empty", 10, "idle")
    wait_for(typed_exit, 20, "the agent to exit", every=0.0)
    try:
        after = wait_for(lambda: (v := daemon.agent_view(pane)).get("harness") == "shell" and v, 15, "the shell back in the pane")
    except AssertionError:
        raise AssertionError(tmux.tmux("capture-pane", "-p", "-t", pane)[-1500:] + repr(daemon.agent_view(pane))) from None
    assert after["connect"] == "off" and after["address"] != view["address"]
    assert tmux.tmux("display-message", "-p", "-t", pane, "#{pane_pid} #{pane_dead}").split() == [shell_pid, "0"]
    err, text = run(_whoami, daemon, token)
    assert err and "not connected" in str(text).lower() or "401" in str(text)


def test_restart_to_connect_relaunches_a_here_agent_in_place_and_the_shell_survives(daemon: DaemonProcess, tmux: TmuxServer) -> None:
    log = daemon.tmp / "here-off.jsonl"
    pane = tmux.tmux("new-window", "-d", "-P", "-F", "#{pane_id}", "-c", str(daemon.workdir)).strip()
    shell_pid = tmux.tmux("display-message", "-p", "-t", pane, "#{pane_pid}").strip()
    daemon.type_launch_here(tmux, pane, "demo", f"--env DEMO_AGENT_LOG={log}", "--env DEMO_AGENT_REVEAL_TOKEN=1")
    before = wait_for(
        lambda: (v := daemon.agent_view(pane)).get("activity") == "idle" and v.get("launcher") == "demo" and v, 20, "idle, off"
    )
    assert before["connect"] == "off" and before["session"] is not None
    daemon.api("POST", "/api/restart", {"pane": pane, "preset": "observe"})
    try:
        after = wait_for(
            lambda: (v := daemon.agent_view(pane)).get("connect") == "observe" and v.get("activity") == "idle" and v, 45, "relaunched, connected"
        )
    except AssertionError:
        raise AssertionError(tmux.tmux("capture-pane", "-p", "-t", pane)[-1500:] + repr(daemon.agent_view(pane)) + daemon.log_text()[-2000:]) from None
    assert after["address"] != before["address"] and after["session"] == before["session"]
    token = wait_for(lambda: next((r["token"] for r in _typed(log) if r.get("token")), None), 10, "the relaunched agent's token")
    err, who = run(_whoami, daemon, token)
    assert not err and who["pane"] == pane  # type: ignore[index]
    assert tmux.tmux("display-message", "-p", "-t", pane, "#{pane_pid} #{pane_dead}").split() == [shell_pid, "0"]
