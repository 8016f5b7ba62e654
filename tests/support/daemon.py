"""A real ``connectd serve`` in a subprocess, on a private tmux server, for end-to-end tests.

Agents are the stand-in ``connectd.cli.demo_agent`` launched through the daemon's owner API with the real
injection; each writes the prompts it receives (and, for the test only, its token) to a log file, so
a test can act as that agent over MCP and check exactly what was typed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2

from connectd.cli.demo_agent import install_wrapper
from tests.support.tmux_server import TmuxServer

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class AgentHandle:
    name: str
    pane: str
    address: str
    log: Path
    token: str | None

    def prompts(self) -> list[str]:
        if not self.log.exists():
            return []
        rows = [json.loads(line) for line in self.log.read_text().splitlines() if line.strip()]
        return [r["prompt"] for r in rows if "prompt" in r]


class DaemonProcess:
    def __init__(
        self,
        tmp: Path,
        tmux: TmuxServer,
        *,
        policy: str = "",
        extra_args: tuple[str, ...] = (),
        history_roots: tuple[Path, Path] | None = None,
    ) -> None:
        self.tmp = tmp
        self.tmux = tmux
        self.data_dir = tmp / "data"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.workdir = tmp / "work"
        self.workdir.mkdir(exist_ok=True)
        wrapper = install_wrapper(tmp / "bin")
        (self.data_dir / "launchers.toml").write_text(
            "[launchers.demo]\n"
            'harness = "claude"\n'
            f"argv = [{json.dumps(str(wrapper))}]\n"
            'exit_command = "/exit"\n'
            f'resume = [{json.dumps(str(wrapper))}, "--resume", "{{session_id}}"]\n'
            # the built-in "claude" launcher, pointed at the stand-in (restore relaunches by harness)
            "[launchers.claude]\n"
            'harness = "claude"\n'
            f"argv = [{json.dumps(str(wrapper))}]\n"
            f'resume = [{json.dumps(str(wrapper))}, "--resume", "{{session_id}}"]\n'
        )
        if policy:
            (self.data_dir / "policy.toml").write_text(policy)
        self.extra_args = extra_args
        self.history_roots = history_roots  # (claude root, codex root): serve the history index
        self.proc: subprocess.Popen[bytes] | None = None
        self.env_extra: dict[str, str] = {}  # set before start(): added to the daemon's environment
        self.port = 0
        self.agents: dict[str, AgentHandle] = {}
        self._http: httpx2.Client | None = None

    # --- life -------------------------------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> DaemonProcess:
        info = self.data_dir / "daemon.json"
        info.unlink(missing_ok=True)
        env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE")}
        env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + str(ROOT)
        env.setdefault("CONNECTD_LOG", "WARNING")
        env.update(self.env_extra)
        history = ["--no-history"]
        if self.history_roots is not None:
            history = []
            env["CLAUDE_CONFIG_DIR"], env["CODEX_HOME"] = (str(p) for p in self.history_roots)
        log = open(self.tmp / "daemon.log", "ab")  # noqa: SIM115 - closed by the child's exit
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "connectd.cli", "serve", "--data-dir", str(self.data_dir), "--port", "0",
             "--tmux-socket", self.tmux.socket_name, *history, *self.extra_args],
            stdout=log, stderr=log, env=env, cwd=str(self.workdir),
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"connectd exited with {self.proc.returncode}:\n{self.log_text()}")
            if info.exists():
                self.port = json.loads(info.read_text())["port"]
                try:
                    if self.http().get("/api/agents").status_code == 200:
                        return self
                except httpx2.TransportError:
                    pass
            time.sleep(0.1)
        raise RuntimeError(f"connectd did not start:\n{self.log_text()}")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int:
        if self._http is not None:
            self._http.close()
            self._http = None
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
            raise RuntimeError("connectd did not stop on " + signal.Signals(sig).name) from None

    def log_text(self) -> str:
        path = self.tmp / "daemon.log"
        return path.read_text(errors="replace")[-6000:] if path.exists() else ""

    # --- the owner API ------------------------------------------------------------------------------

    @property
    def owner_token(self) -> str:
        return (self.data_dir / "owner_token").read_text().strip()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def mcp_url(self) -> str:
        return f"{self.base_url}/mcp"

    def http(self) -> httpx2.Client:
        if self._http is None:
            self._http = httpx2.Client(
                base_url=self.base_url, headers={"Authorization": f"Bearer {self.owner_token}"}, timeout=30
            )
        return self._http

    def api(self, method: str, path: str, body: dict[str, Any] | None = None, expect: int = 200) -> Any:
        response = self.http().request(method, path, json=body)
        assert response.status_code == expect, f"{method} {path}: {response.status_code} {response.text}"
        return response.json()

    def launch(self, name: str, connect: str = "collaborate", **extra: Any) -> AgentHandle:
        log = self.tmp / f"agent-{name}.jsonl"
        env = {"DEMO_AGENT_NAME": name, "DEMO_AGENT_LOG": str(log), "DEMO_AGENT_REVEAL_TOKEN": "1", **extra.pop("env", {})}
        result = self.api("POST", "/api/launch", {"launcher": "demo", "connect": connect, "cwd": str(self.workdir), "env": env, **extra})
        token = None
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and token is None:
            lines = log.read_text().splitlines() if log.exists() else []
            if lines and lines[0].endswith("}"):
                token = json.loads(lines[0]).get("token")
                if token or connect == "off":
                    break
            time.sleep(0.05)
        handle = AgentHandle(name, result["pane"], result["address"], log, token)
        self.agents[name] = handle
        return handle

    def type_launch_here(self, tmux: TmuxServer, pane: str, launcher: str, *args: str) -> None:
        """Type ``connectd launch --here LAUNCHER ARGS`` (against this daemon's data directory) into a
        shell pane and press Enter, as a person would."""
        command = (
            f"PYTHONPATH={ROOT / 'src'}:{ROOT} {sys.executable} -m connectd.cli launch --here {launcher} "
            f"--data-dir {self.data_dir} {' '.join(args)}"
        )
        tmux.tmux("send-keys", "-t", pane, "-l", command)
        tmux.tmux("send-keys", "-t", pane, "Enter")

    def cards(self) -> list[dict[str, Any]]:
        return list(self.api("GET", "/api/cards"))

    def wait_card(self, timeout: float = 10.0) -> dict[str, Any]:
        return wait_for(lambda: (self.cards() or [None])[0], timeout, "a consent card")

    def agent_view(self, pane: str) -> dict[str, Any]:
        """The pane's entry in the directory; a pane between two processes (a restart) is absent."""
        absent = {
            "pane": pane, "activity": "gone", "composer": "absent", "connect": "off", "address": None,
            "session": None, "actor": None, "title": "", "control": False, "scopes": [],
        }  # (a predicate polling a pane between two processes reads it as not there, never a KeyError)
        return next((a for a in self.api("GET", "/api/agents") if a["pane"] == pane), absent)

    def wait_ready(self, agent: AgentHandle, timeout: float = 15.0) -> None:
        wait_for(lambda: self.agent_view(agent.pane)["activity"] == "idle" and self.agent_view(agent.pane)["composer"] == "empty", timeout, f"{agent.name} idle")


def wait_for(predicate: Any, timeout: float = 10.0, what: str = "condition", every: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(every)


@asynccontextmanager
async def mcp_agent(url: str, token: str, era: str = "legacy") -> Iterator[Any]:  # type: ignore[misc]
    """The SDK's own MCP client over HTTP, as an agent with ``token``, in either protocol era."""
    from mcp.client import Client
    from mcp.client.streamable_http import streamable_http_client

    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http,
        Client(streamable_http_client(url, http_client=http), mode=era) as client,  # type: ignore[arg-type]
    ):
        yield client


async def call(client: Any, tool: str, **args: Any) -> tuple[bool, Any]:
    """(is_error, structured payload or the error text)."""
    result = await client.call_tool(tool, args)
    if result.is_error:
        return True, " ".join(getattr(c, "text", "") for c in result.content)
    return False, result.structured_content
