"""The baseline of the MCP read benchmark: the same SDK (``mcp.server.MCPServer``, streamable HTTP,
stateful like connectd's endpoint) serving no-op tools named ``list_agents`` and ``send_message``, on uvicorn over a
pre-bound loopback socket made as connectd makes its own (``IPPROTO_TCP``, so asyncio turns Nagle off
on each connection; with protocol 0 every 2026-07-28 call waits ~40 ms for a delayed ACK, which would
measure the socket, not the SDK). Prints ``port <n>`` once it listens; runs until SIGTERM.

Given a JSON file, its ``list_agents`` answers that object instead of ``{"data": []}`` (the benchmark
hands it connectd's own answer, so the second baseline serves a payload of the same size and shape).

    python noop_mcp.py [ANSWER.json]
"""

from __future__ import annotations

import json
import logging
import signal
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import uvicorn
from mcp.server.mcpserver import MCPServer
from starlette.applications import Starlette
from starlette.routing import Mount


def build(answer: dict[str, Any] | None = None) -> Starlette:
    server = MCPServer(name="noop", log_level="WARNING")
    listed = answer if answer is not None else {"data": []}

    @server.tool(name="list_agents", description="A no-op: returns an empty list, or the answer it was given.")
    async def list_agents() -> dict[str, Any]:
        return listed

    @server.tool(name="send_message", description="A no-op: answers queued.")
    async def send_message(to: str, text: str, message_id: str) -> dict[str, Any]:
        return {"message_id": message_id, "outcome": "queued"}

    mcp_app = server.streamable_http_app(streamable_http_path="/mcp")

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        async with server.session_manager.run():
            yield

    return Starlette(routes=[Mount("/", app=mcp_app)], lifespan=lifespan)


async def main() -> None:
    logging.basicConfig(level=logging.WARNING)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    answer = json.loads(Path(sys.argv[1]).read_text()) if len(sys.argv) > 1 else None
    server = uvicorn.Server(uvicorn.Config(build(answer), log_level="warning", lifespan="on"))
    server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: server.serve(sockets=[sock]))
        while not server.started:
            await anyio.sleep(0.02)
        print(f"port {sock.getsockname()[1]}", flush=True)
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for _ in signals:
                break
        server.should_exit = True


if __name__ == "__main__":
    anyio.run(main)
    sys.exit(0)
