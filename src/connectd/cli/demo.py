"""``make run`` on a machine with no tmux server: an isolated demo fleet.

A private tmux server (``tmux -L connect-demo``) with two stand-in agents (``connectd.cli.demo_agent``)
launched connected (Collaborate), a daemon on it with its own data directory, and one real MCP call:
agent A sends agent B a message, which waits on a consent card until you approve it.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import platformdirs
from anyio.abc import TaskGroup

from connectcore import advice
from connectcore import launchers as L
from connectcore.grants import Preset
from connectd.cli import facts

if TYPE_CHECKING:
    from connectd.daemon.app import Daemon

DEMO_SOCKET = "connect-demo"
DEMO_MESSAGE_ID = "demo-hello"


def _tmux(*args: str) -> None:
    subprocess.run(["tmux", "-L", DEMO_SOCKET, "-f", "/dev/null", *args], check=True, capture_output=True)


def demo_launcher(bin_dir: Path) -> L.Launcher:
    from connectd.cli.demo_agent import install_wrapper

    wrapper = str(install_wrapper(bin_dir))
    return L.Launcher(
        name="demo",
        harness="claude",
        argv=(wrapper,),
        exit_command="/exit",
        resume_argv=(wrapper, "--resume", "{session_id}"),
    )


def run_demo(port: int = 7878, data_dir: Path | None = None) -> int:
    from connectd.cli.main import CliError, start_daemon
    from connectd.daemon.app import Config, DataDirLocked, lock_data_dir, serve

    data_dir = data_dir or Path(platformdirs.user_data_dir("connect-demo"))
    try:  # a demo already running keeps its fleet and store: this one is refused before touching them
        os.close(lock_data_dir(data_dir))
    except DataDirLocked:
        raise CliError.of(advice.daemon_running(str(data_dir), facts.cli_command())) from None
    shutil.rmtree(data_dir, ignore_errors=True)  # an isolated demo: a fresh fleet and store each time
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    subprocess.run(["tmux", "-L", DEMO_SOCKET, "kill-server"], capture_output=True)
    _tmux("new-session", "-d", "-s", "demo", "-x", "160", "-y", "48")
    workdir = Path(tempfile.mkdtemp(prefix="connect-demo-"))
    launchers = {**L.builtin_launchers(), "demo": demo_launcher(data_dir / "bin")}
    config = Config(data_dir=data_dir, port=port, tmux_socket=DEMO_SOCKET, launchers=launchers)
    cli = facts.cli_command()

    async def ready(d: Daemon, tg: TaskGroup) -> None:
        from connectd.cli.main import write_daemon_info

        write_daemon_info(data_dir, d.port, d.mcp_url)
        a = await d.engine.launches.launch("demo", preset=Preset.COLLABORATE, cwd=str(workdir), tmux_session="demo", extra_env={"DEMO_AGENT_NAME": "agent A"}, reveal_token=True)
        b = await d.engine.launches.launch("demo", preset=Preset.COLLABORATE, cwd=str(workdir), tmux_session="demo", extra_env={"DEMO_AGENT_NAME": "agent B"})
        print(f"connectd demo on {d.base_url} (MCP {d.mcp_url}); data in {data_dir}", flush=True)
        print(f"  agents: A in {a['address']}, B in {b['address']}", flush=True)
        await anyio.sleep(1.5)
        result = await _send_as(d.mcp_url, a["token"], to=b["address"], text="Hello B, this is A. Could you run the tests?")
        print(f"  A sent B a message over MCP: {result.get('outcome')} (a consent card is waiting)", flush=True)
        for line in demo_commands(cli, data_dir, inside_tmux=bool(os.environ.get("TMUX"))):
            print(line, flush=True)
        tg.start_soon(_report_outcome, d.mcp_url, a["token"], b["address"])

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            await serve(daemon, ready=lambda d: ready(d, tg))
            tg.cancel_scope.cancel()  # the outcome watcher, if the outcome never came

    try:
        daemon = start_daemon(config)  # a busy port: one line and its fix (the demo's tmux server goes too)
        anyio.run(main)
    except KeyboardInterrupt:
        pass
    finally:
        from connectd.cli.main import remove_daemon_info

        remove_daemon_info(data_dir)
        subprocess.run(["tmux", "-L", DEMO_SOCKET, "kill-server"], capture_output=True)
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


def demo_commands(cli: str, data_dir: Path, *, inside_tmux: bool) -> list[str]:
    """What to type next, as commands that run as printed (``cli``: :func:`connectd.cli.facts.cli_command`).
    Inside tmux, attaching to the demo's server is a nested client, which tmux allows once $TMUX is unset."""
    dd = f"--data-dir {shlex.quote(str(data_dir))}"
    attach = f"{'TMUX= ' if inside_tmux else ''}tmux -L {DEMO_SOCKET} attach"
    rows = [
        (f"{cli} cards {dd}", "the card A's message opened"),
        (f"{cli} approve CARD_ID --pair {dd}", "deliver it (CARD_ID from cards)"),
        (f"{cli} token --open {dd}", "or log in to the owner page (a one-time link) and approve it there"),
        (attach, "B's pane shows the message"),
        (f"{cli} audit --follow {dd}", "every call, with its actor"),
    ]
    width = max(len(command) for command, _ in rows)
    return [
        "  next, in another terminal:",
        *(f"    {command.ljust(width)}  # {why}" for command, why in rows),
        "  Ctrl-C stops the demo",
    ]


async def _report_outcome(mcp_url: str, token: str, to: str) -> None:
    """Say when A's message reaches its outcome (read as A, over MCP, with get_message's bounded wait)."""
    import httpx2
    from mcp.client import Client
    from mcp.client.streamable_http import streamable_http_client

    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http,
        Client(streamable_http_client(mcp_url, http_client=http)) as client,
    ):
        while True:
            result = await client.call_tool("get_message", {"message_id": DEMO_MESSAGE_ID, "wait": 30})
            view = dict(result.structured_content or {}) if not result.is_error else {}
            outcome = str(view.get("outcome") or "unknown")
            if result.is_error or outcome not in ("queued", ""):
                break
    said = {"delivered": f"typed into B's pane {to} (attach to the demo's tmux server to see it)"}
    print(f"  outcome: A's message was {outcome}: {said.get(outcome, view.get('reason') or 'final')}", flush=True)


async def _send_as(mcp_url: str, token: str, *, to: str, text: str) -> dict[str, Any]:
    """One real MCP call with an agent's token, through the SDK's own client."""
    import httpx2
    from mcp.client import Client
    from mcp.client.streamable_http import streamable_http_client

    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as http,
        Client(streamable_http_client(mcp_url, http_client=http)) as client,
    ):
        result = await client.call_tool("send_message", {"to": to, "text": text, "message_id": DEMO_MESSAGE_ID})
    if result.is_error:
        return {"outcome": "refused: " + " ".join(getattr(c, "text", "") for c in result.content)}
    return dict(result.structured_content or {})
