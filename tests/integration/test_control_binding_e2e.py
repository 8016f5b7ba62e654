"""Issue 21 item 1 end to end, the exact attack: a running control agent (a Codex stand-in bound to its
own rollout), and an Observe Codex stand-in that holds open, for writing, inside its own
``CODEX_HOME/sessions``, a file named ``rollout-<time>-<control's session id>.jsonl``: (a) while control
runs, (b) after control's pane closed. A real ``connectd serve``, a private tmux server, the SDK's MCP
client. Also (issue 21 item 1's other two cases) the same name held for writing outside its
``CODEX_HOME/sessions``, and held read-only inside it. The Observe token keeps exactly what the person granted (no act, no message), lists no act
tool, its ``launch_agent`` and ``send_message`` are refused and no act card reaches the owner API."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from connectd.cli.demo_agent import install_wrapper
from tests.support.daemon import AgentHandle, DaemonProcess, call, mcp_agent, wait_for
from tests.support.fixtures import running_daemon
from tests.support.tmux_server import TmuxServer

CONTROL_SESSION = "019a2b3c-4d5e-7f60-8a9b-0c1d2e3f4c70"
ACT_TOOLS = {"send_keys", "launch_agent", "resume_session", "handoff", "shell_text", "close_pane", "get_act"}
OBSERVE_SCOPES = ["history", "read"]


def _rollout(sessions: Path, sid: str) -> Path:
    path = sessions / "2026" / "12" / "05" / f"rollout-2026-12-05T13-00-00-{sid}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch()
    return path


@pytest.fixture
def daemon(tmp_path: Path, tmux: TmuxServer) -> Iterator[DaemonProcess]:
    claude_root, codex_root = tmp_path / "claude", tmp_path / "codex"
    (claude_root / "sessions").mkdir(parents=True)
    (codex_root / "sessions").mkdir(parents=True)
    codex = install_wrapper(tmp_path / "bin", "codex")  # a Codex-shaped stand-in the daemon launches
    democodex = f'[launchers.democodex]\nharness = "codex"\nargv = [{json.dumps(str(codex))}]\nexit_command = "/exit"\n'
    with running_daemon(tmp_path, tmux, launchers=democodex, history_roots=(claude_root, codex_root)) as d:
        yield d


def _as_agent(daemon: DaemonProcess, token: str, to: str) -> tuple[set[str], dict[str, Any], tuple[bool, Any], tuple[bool, Any]]:
    async def go() -> tuple[set[str], dict[str, Any], tuple[bool, Any], tuple[bool, Any]]:
        async with mcp_agent(daemon.mcp_url, token) as client:
            tools = {t.name for t in (await client.list_tools()).tools}
            err, me = await call(client, "whoami")
            assert not err, me
            launched = await call(client, "launch_agent", launcher="democodex", cwd=str(daemon.workdir))
            sent = await call(client, "send_message", to=to, text="hello", message_id=f"m-{time.monotonic_ns()}")
            return tools, me, launched, sent

    return anyio.run(go)


def _observer_claiming(daemon: DaemonProcess, name: str, where: str = "sessions", hold: str = "DEMO_AGENT_HOLD") -> AgentHandle:
    """An Observe Codex holding a file named after control's session: by default open for writing in its
    own CODEX_HOME/sessions; ``where`` another folder of its CODEX_HOME, ``hold`` DEMO_AGENT_HOLD_READ read-only."""
    home = daemon.tmp / f"codex-{name}"
    forged = _rollout(home / where, CONTROL_SESSION)
    agent = daemon.launch(name, "observe", launcher="democodex", env={"CODEX_HOME": str(home), hold: str(forged)})
    assert agent.token
    return agent


def _assert_held(daemon: DaemonProcess, attacker: AgentHandle, control_pane: str | None) -> None:
    time.sleep(3.0)  # several bind rounds of the watcher
    view = daemon.agent_view(attacker.pane)
    assert view["harness"] == "codex" and view["scopes"] == OBSERVE_SCOPES and not view["control"], view
    assert view["session"] is None and CONTROL_SESSION not in (view["actor"] or ""), view
    tools, me, (err, text), (sent_err, sent) = _as_agent(daemon, attacker.token or "", attacker.address)
    assert me["scopes"] == OBSERVE_SCOPES and me["session"] is None, me
    assert not ACT_TOOLS & tools, tools  # (send_message is listed to every caller; its scope is checked)
    assert err and "act" in str(text), text
    assert sent_err and "message" in str(sent), sent
    assert daemon.api("GET", "/api/cards") == []
    assert daemon.api("GET", "/api/acts?all=1") == []
    if control_pane is not None:  # control keeps its principal, its role and its scopes
        ctl = daemon.agent_view(control_pane)
        assert ctl["control"] and "act" in ctl["scopes"], ctl
        assert ctl["actor"] == f"agent:codex:{CONTROL_SESSION}", ctl
        # (the directory shows control's pane unbound while another pane claims its session:
        # connectcore.directory's shared-session rule, both panes unknown; see docs/security.md)
    log = daemon.log_text()
    assert "Traceback" not in log, log


def test_an_observe_codex_naming_control_s_session_never_becomes_control(daemon: DaemonProcess, tmux: TmuxServer) -> None:
    assert daemon.history_roots
    own = _rollout(daemon.history_roots[1] / "sessions", CONTROL_SESSION)
    ctl = daemon.launch("ctl", "off", control=True, launcher="democodex", env={"DEMO_AGENT_HOLD": str(own)})
    view = wait_for(lambda: (v := daemon.agent_view(ctl.pane)).get("session") and v, 20, "control bound to its rollout")
    assert view["session"] == {"harness": "codex", "session_id": CONTROL_SESSION} and view["control"], view

    # outside its CODEX_HOME/sessions (held for writing), and inside it read-only, while control runs
    _assert_held(daemon, _observer_claiming(daemon, "obs-out", where="elsewhere"), ctl.pane)
    _assert_held(daemon, _observer_claiming(daemon, "obs-ro", hold="DEMO_AGENT_HOLD_READ"), ctl.pane)

    # (a) while control runs
    running = _observer_claiming(daemon, "obs-a")
    _assert_held(daemon, running, ctl.pane)

    # (b) after control's pane closed
    tmux.tmux("kill-pane", "-t", ctl.pane)
    wait_for(lambda: daemon.agent_view(ctl.pane)["activity"] == "gone", 15, "control's pane gone")
    after = _observer_claiming(daemon, "obs-b")
    _assert_held(daemon, after, None)
    _assert_held(daemon, running, None)  # the first one, rescanned after control left, gains nothing either
