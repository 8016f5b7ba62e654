"""``make run`` on a machine with no tmux server: an isolated demo fleet.

A private tmux server (``tmux -L connect-demo``) with two stand-in agents (``connectd.demo_agent``)
launched connected (Collaborate), a daemon on it with its own data directory, and one real MCP call:
agent A sends agent B a message, which waits on a consent card until you approve it.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import anyio
import platformdirs

from connectcore import launchers as L
from connectcore.grants import Preset

DEMO_SOCKET = "connect-demo"


def tmux_server_running() -> bool:
    if shutil.which("tmux") is None:
        return False
    return subprocess.run(["tmux", "list-sessions"], capture_output=True).returncode == 0


def _tmux(*args: str) -> None:
    subprocess.run(["tmux", "-L", DEMO_SOCKET, "-f", "/dev/null", *args], check=True, capture_output=True)


def demo_launcher(bin_dir: Path) -> L.Launcher:
    from connectd.demo_agent import install_wrapper

    wrapper = str(install_wrapper(bin_dir))
    return L.Launcher(
        name="demo",
        harness="claude",
        argv=(wrapper,),
        exit_command="/exit",
        resume_argv=(wrapper, "--resume", "{session_id}"),
    )


def run_demo(port: int = 7878, data_dir: Path | None = None) -> int:
    from connectd.app import Config, build_daemon, serve

    data_dir = data_dir or Path(platformdirs.user_data_dir("connect-demo"))
    shutil.rmtree(data_dir, ignore_errors=True)  # an isolated demo: a fresh fleet and store each time
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    subprocess.run(["tmux", "-L", DEMO_SOCKET, "kill-server"], capture_output=True)
    _tmux("new-session", "-d", "-s", "demo", "-x", "160", "-y", "48")
    workdir = Path(tempfile.mkdtemp(prefix="connect-demo-"))
    launchers = {**L.builtin_launchers(), "demo": demo_launcher(data_dir / "bin")}
    config = Config(data_dir=data_dir, port=port, tmux_socket=DEMO_SOCKET, launchers=launchers)
    daemon = build_daemon(config)

    async def ready(d: Any) -> None:
        from connectd.cli import write_daemon_info

        write_daemon_info(data_dir, d.port, d.mcp_url)
        a = await d.engine.launch("demo", preset=Preset.COLLABORATE, cwd=str(workdir), tmux_session="demo", extra_env={"DEMO_AGENT_NAME": "agent A"}, reveal_token=True)
        b = await d.engine.launch("demo", preset=Preset.COLLABORATE, cwd=str(workdir), tmux_session="demo", extra_env={"DEMO_AGENT_NAME": "agent B"})
        print(f"connectd demo on {d.base_url} (MCP {d.mcp_url}); data in {data_dir}", flush=True)
        print(f"  agents: A in {a['address']}, B in {b['address']}  (watch: tmux -L {DEMO_SOCKET} attach)", flush=True)
        await anyio.sleep(1.5)
        result = await _send_as(d.mcp_url, a["token"], to=b["address"], text="Hello B, this is A. Could you run the tests?")
        print(f"  A sent B a message over MCP: {result.get('outcome')} (a consent card is waiting)", flush=True)
        dd = f"--data-dir {data_dir}"
        print(f"  try: connectd cards {dd}  then  connectd approve CARD --pair {dd}", flush=True)
        print(f"       connectd agents {dd}  ·  connectd audit --follow {dd}  ·  Ctrl-C to stop", flush=True)

    try:
        anyio.run(lambda: serve(daemon, ready=ready))
    except KeyboardInterrupt:
        pass
    finally:
        from connectd.cli import remove_daemon_info

        remove_daemon_info(data_dir)
        subprocess.run(["tmux", "-L", DEMO_SOCKET, "kill-server"], capture_output=True)
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


async def _send_as(mcp_url: str, token: str, *, to: str, text: str) -> dict[str, Any]:
    """One real MCP call with an agent's token, through the SDK's own client."""
    import httpx2
    from mcp.client import Client
    from mcp.client.streamable_http import streamable_http_client

    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as http,
        Client(streamable_http_client(mcp_url, http_client=http)) as client,
    ):
        result = await client.call_tool("send_message", {"to": to, "text": text, "message_id": "demo-hello"})
    if result.is_error:
        return {"outcome": "refused: " + " ".join(getattr(c, "text", "") for c in result.content)}
    return dict(result.structured_content or {})
