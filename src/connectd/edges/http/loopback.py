"""The loopback guard in front of every route (``/api/``, ``/mcp``, the page).

Rules (specification: shared/seeds/000; issue 4):

- Every request must name this daemon's loopback address in ``Host`` (``127.0.0.1:PORT``,
  ``localhost:PORT`` or ``[::1]:PORT``; else 421), and an ``Origin``, when sent, must be one of the
  same three as ``http://`` origins (else 403). This stops DNS rebinding and cross-site requests from
  a browser; it does not stop a process of the same user, which can send any header it likes.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from connectd.edges.http.errors import Problem, problem_response


class LoopbackGuard:
    """Pure ASGI middleware: refuse a foreign ``Host`` (421) or ``Origin`` (403) on every route."""

    def __init__(self, app: ASGIApp, *, port: int) -> None:
        if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
            raise ValueError(f"port must be 1-65535, not {port!r}")
        self.app = app
        self.port = port
        self.hosts = frozenset({f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"})
        self.origins = frozenset(f"http://{host}" for host in self.hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        hosts = [v.decode("latin-1") for k, v in scope.get("headers", ()) if k == b"host"]
        origins = [v.decode("latin-1") for k, v in scope.get("headers", ()) if k == b"origin"]
        problem: Problem | None = None
        if len(hosts) != 1 or hosts[0].strip().lower() not in self.hosts:
            shown = hosts[0][:200] if len(hosts) == 1 else f"{len(hosts)} Host headers"
            problem = Problem(
                421,
                "foreign_host",
                f"Host {shown!r} is not this daemon: use http://127.0.0.1:{self.port}/",
                host=shown,
            )
        elif origins and (len(origins) != 1 or origins[0].strip().lower() not in self.origins):
            shown = origins[0][:200] if len(origins) == 1 else f"{len(origins)} Origin headers"
            problem = Problem(
                403,
                "foreign_origin",
                f"Origin {shown!r} may not call this daemon: only pages served from 127.0.0.1:{self.port} may",
                origin=shown,
            )
        if problem is None:
            await self.app(scope, receive, send)
        elif scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008, "reason": problem.error})
        else:
            await problem_response(problem)(scope, receive, send)

