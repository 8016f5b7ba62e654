"""The daemon: one task group for its whole life, holding the engine, the HTTP server and the
control-mode watcher. Cancelling it (Ctrl-C, SIGTERM) ends every task cleanly."""

from __future__ import annotations

import contextlib
import fcntl
import gc
import logging
import os
import signal
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import uvicorn
from starlette.applications import Starlette
from starlette.routing import Mount, Route

from connectcore.delivery import DEFAULT_LIMITS, Limits
from connectcore.federation.policy import DEFAULT as DEFAULT_FEDERATION
from connectcore.federation.policy import FederationPolicy
from connectcore.grants import Preset
from connectd.agents.restore_fleet import restore_routes
from connectd.daemon.parts import Engine, Timing
from connectd.daemon.supervisor import Kind
from connectd.edges.http import LoopbackGuard, OwnerApi, OwnerAuth, owner_routes
from connectd.edges.http.events import KEEPALIVE_SECONDS
from connectd.edges.http.federation import federation_routes
from connectd.edges.http.page import page_routes
from connectd.edges.http.routes import RecentDirs
from connectd.edges.mcp import build_mcp, capped_mcp_app
from connectd.federation.desk import open_desk
from connectd.store.store import Store
from connectd.tmux.adapter import TmuxAdapter

log = logging.getLogger("connectd")

DEFAULT_PORT = 7878


@dataclass
class Config:
    data_dir: Path
    port: int = DEFAULT_PORT
    host: str = "127.0.0.1"
    tmux_socket: str | None = None
    tmux_socket_path: str | None = None
    limits: Limits = DEFAULT_LIMITS
    cap: Preset = Preset.COLLABORATE
    timing: Timing = field(default_factory=Timing)
    history: Any | None = None  # True: the index in the data directory; or a HistoryService
    launchers: dict[str, Any] | None = None
    watch_control_mode: bool = True
    otlp_endpoint: str | None = None  # export the audit log to an OTLP/HTTP collector when set
    trusted_releases: frozenset[tuple[str, str]] = frozenset()  # --trust-release (connectcore.releases)
    federation: FederationPolicy = DEFAULT_FEDERATION  # policy.toml's [federation], for a federated box


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening loopback socket, bound before the server starts (port 0: any free port).

    Made with its protocol named (``IPPROTO_TCP``): asyncio turns Nagle off (``TCP_NODELAY``) on an
    accepted connection only when its socket says TCP, and a socket made with protocol 0 does not.
    With Nagle on, a response written as headers then body waits for the client's delayed ACK of the
    headers (about 40 ms on Linux) before the body leaves: every 2026-07-28 MCP call (one JSON
    response per request) took 45-50 ms instead of 3.
    """
    if host not in {"127.0.0.1", "::1", "localhost"}:
        raise ValueError(f"connectd listens on loopback only, not {host!r}")
    family = socket.AF_INET6 if host == "::1" else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1" if host == "localhost" else host, port))
    sock.listen(128)
    sock.set_inheritable(False)
    return sock


@dataclass
class Daemon:
    config: Config
    store: Store
    tmux: TmuxAdapter
    engine: Engine
    auth: OwnerAuth
    app: Starlette
    sock: socket.socket

    @property
    def port(self) -> int:
        return int(self.sock.getsockname()[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def mcp_url(self) -> str:
        return f"{self.base_url}/mcp"


class DataDirLocked(RuntimeError):
    """Another daemon holds this data directory's lock."""

    def __init__(self, data_dir: Path) -> None:
        super().__init__(f"another connectd is already running on {data_dir}")
        self.data_dir = data_dir


def lock_data_dir(data_dir: Path) -> int:
    """One daemon per data directory: a second one is refused instead of sharing the store."""
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(data_dir / "daemon.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise DataDirLocked(data_dir) from None
    return fd


def owner_api(engine: Engine, auth: OwnerAuth, history: RecentDirs | None, keepalive: float = KEEPALIVE_SECONDS) -> OwnerApi:
    """The owner API, given the engine's parts it calls (the composition root wires them here)."""
    return OwnerApi(
        calls=engine.calls, core=engine.runner, clock=engine.clock, tmux=engine.tmux, store=engine.store,
        subscribers=engine.subscribers, launchers=engine.launchers, person=engine.person, launches=engine.launches,
        here=engine.here_launches, restarts=engine.restarts, auth=auth, history=history, keepalive=keepalive,
        federation=lambda: engine.federation,
    )


def build_daemon(config: Config, sock: socket.socket | None = None) -> Daemon:
    lock_data_dir(config.data_dir)
    sock = sock or bind_socket(config.host, config.port)
    port = int(sock.getsockname()[1])
    store = Store.open(config.data_dir)
    tmux = TmuxAdapter(socket_name=config.tmux_socket, socket_path=config.tmux_socket_path, launcher_dir=config.data_dir)
    tmux.sync.remove_stale_launchers()
    engine = Engine(
        store,
        tmux,
        endpoint_url=f"http://127.0.0.1:{port}/mcp",
        limits=config.limits,
        timing=config.timing,
        launchers=config.launchers,
        cap=config.cap,
        trusted_releases=config.trusted_releases,
    )
    auth = OwnerAuth.load_or_create(config.data_dir)
    if config.history is True:
        from connectd.history.service import HistoryService

        config.history = HistoryService(data_dir=config.data_dir, pane_pids=engine.watcher.pane_pids)
    engine.history = config.history or None
    engine.federation = open_desk(config.data_dir, engine, config.federation)
    history = engine.history  # None when the daemon serves no history (--no-history)
    mcp = build_mcp(engine.calls, engine.act_calls(history), engine.runner, engine.clock, history)
    mcp_app = capped_mcp_app(mcp, engine.calls, engine.runner, engine.clock)

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        async with mcp.session_manager.run():
            yield

    app = Starlette(
        routes=[
            # The MCP endpoint first: it takes nearly every request, which then skip matching every
            # other route's pattern. The Mount at the end serves the MCP app's other paths, as before.
            Route("/mcp", endpoint=mcp_app, name="mcp"),
            *page_routes(engine.calls, engine.runner, engine.clock, auth, config.data_dir),
            *restore_routes(engine.restore, engine.calls, auth),
            *federation_routes(lambda: engine.federation, engine.calls, auth),
            *owner_routes(owner_api(engine, auth, history)),
            Mount("/", app=mcp_app),
        ],
        lifespan=lifespan,
    )
    app.add_middleware(LoopbackGuard, port=port)
    return Daemon(config, store, tmux, engine, auth, app, sock)


async def serve(daemon: Daemon, *, ready: Callable[[Daemon], Awaitable[None] | None] | None = None) -> None:
    """Run the daemon until cancelled. Every task lives in this one task group."""
    server = uvicorn.Server(
        uvicorn.Config(daemon.app, log_level="warning", lifespan="on", timeout_graceful_shutdown=2)
    )
    server.install_signal_handlers = lambda: None  # type: ignore[attr-defined]
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(daemon.engine.run)
            if daemon.config.watch_control_mode:
                daemon.engine.supervisor.spawn(Kind.CONTROL_MODE, lambda: _watch_control_mode(daemon), name="control-mode reader")
            if daemon.config.otlp_endpoint:
                from connectd.edges.otlp import OtlpExporter

                exporter = OtlpExporter(daemon.config.otlp_endpoint, daemon.store)
                daemon.engine.supervisor.spawn(Kind.EXPORT, exporter.run, name="OTLP exporter")
            if daemon.engine.federation is not None:
                daemon.engine.federation.start(daemon.engine.supervisor)
            http_done = anyio.Event()
            daemon.engine.supervisor.spawn(Kind.HTTP, _serve_http, server, daemon.sock, http_done, name="http server")
            while not server.started:  # (if it fails to start, _serve_http raises and the group ends)
                await anyio.sleep(0.02)
            _freeze_startup_objects()
            if ready is not None:
                result = ready(daemon)
                if result is not None:
                    await result
            await _until_signal()
            server.should_exit = True  # let uvicorn close its connections and run its lifespan shutdown
            with anyio.move_on_after(5):
                await http_done.wait()
            tg.cancel_scope.cancel()
    finally:
        daemon.store.close()


def _freeze_startup_objects() -> None:
    """Leave what start-up made (modules, the SDK's pydantic schemas, the restored state: ~100,000
    objects that live as long as the daemon) out of every later garbage collection.

    Each collection of the oldest generation walked all of them again, and the allocations of MCP
    calls trigger one often enough to show: driven in-process, ~24 us of every ``list_agents`` call
    went to those collections, ~0.3 us with them frozen; on the quick benchmark's load the server CPU
    per call fell by 5-15% (two runs of 4 alternated windows; the machine was noisy). Cycles among
    them are collected first.
    """
    gc.collect()
    gc.freeze()


async def _serve_http(server: uvicorn.Server, sock: socket.socket, done: anyio.Event) -> None:
    """uvicorn on the pre-bound socket (an essential task: its failure stops the daemon). uvicorn
    exits when its lifespan fails to start, and may return without being asked: failures too, not an end."""
    try:
        await server.serve(sockets=[sock])
    except SystemExit as exc:  # uvicorn's answer to a failed lifespan start
        raise RuntimeError(f"the HTTP server failed to start (exit {exc.code})") from exc
    finally:
        done.set()
    if not (server.started and server.should_exit):
        raise RuntimeError("the HTTP server ended on its own (its start failed or it stopped serving)")


async def _until_signal() -> None:
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for _signum in signals:
            return


async def _watch_control_mode(daemon: Daemon) -> None:
    """Capture only panes that produced output; the slow list-panes poll stays the source of truth."""
    try:
        from connectd.tmux.control_mode import ControlModeWatcher
    except ImportError:  # pragma: no cover - the watcher is optional; the sweep still sees everything
        return
    watcher = ControlModeWatcher(daemon.tmux, on_output=daemon.engine.watcher.mark_output, on_structure=daemon.engine.watcher.mark_structure)
    daemon.engine.watcher.output_reported = lambda: watcher.complete
    daemon.tmux.respawning = watcher.detached  # tmux 3.3a: no reader may lag behind a respawned pane
    try:
        await watcher.run()
    finally:
        daemon.engine.watcher.output_reported = lambda: False
        daemon.tmux.respawning = contextlib.nullcontext
