"""A loopback proxy that adds an agent's bearer token to every request, for clients that cannot send one.

The MCP conformance suite (``@modelcontextprotocol/conformance``) takes a URL and nothing else, while
``/mcp`` answers 401 without ``Authorization``. This proxy listens on its own pre-bound loopback socket
and forwards each request to the daemon unchanged but for two headers:

- ``Authorization: Bearer <token>`` is set (replacing any the client sent);
- ``Host`` (and an ``Origin`` naming the proxy) are rewritten to the daemon's address *only* when they
  name the proxy itself, so a foreign ``Host`` or ``Origin`` (the suite's DNS-rebinding scenario)
  reaches the daemon as sent and is judged by the daemon, not by the proxy.

Responses (JSON or an SSE stream) are relayed as they arrive, status and headers included.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager

import httpx2
import uvicorn
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "content-length"}


def _app(upstream: str, token: str, own: set[str], upstream_host: str) -> Starlette:
    client = httpx2.AsyncClient(base_url=upstream, timeout=httpx2.Timeout(60.0, read=None))

    async def forward(request: Request) -> StreamingResponse:
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP | {"authorization"}}
        if headers.get("host") in own:
            headers["host"] = upstream_host
        origin = headers.get("origin")
        if origin is not None and origin.removeprefix("http://") in own:
            headers["origin"] = f"http://{upstream_host}"
        headers["authorization"] = f"Bearer {token}"
        body = await request.body()
        sent = client.build_request(request.method, request.url.path, params=request.url.query or None,
                                    headers=headers, content=body)
        reply = await client.send(sent, stream=True)

        async def relay() -> AsyncIterator[bytes]:
            async for chunk in reply.aiter_raw():
                yield chunk

        out = {k: v for k, v in reply.headers.items() if k.lower() not in _HOP_BY_HOP}
        return StreamingResponse(relay(), status_code=reply.status_code, headers=out,
                                 background=BackgroundTask(reply.aclose))

    methods = ["GET", "POST", "DELETE", "PUT", "PATCH", "OPTIONS", "HEAD"]
    return Starlette(routes=[Route("/{path:path}", forward, methods=methods)])


@contextmanager
def bearer_proxy(upstream: str, token: str) -> Iterator[str]:
    """Serve the proxy in a thread for the block; yields its MCP URL (``http://127.0.0.1:PORT/mcp``)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    own = {f"127.0.0.1:{port}", f"localhost:{port}"}
    upstream_host = upstream.removeprefix("http://").split("/", 1)[0]
    config = uvicorn.Config(_app(upstream, token, own, upstream_host), log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        while not server.started:
            if not thread.is_alive():
                raise RuntimeError("the bearer proxy did not start")
            threading.Event().wait(0.02)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()
