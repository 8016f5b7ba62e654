"""MCP read throughput: ``list_agents`` over streamable HTTP on connectd (bearer token per agent, scope
check, an audit record committed per call) vs the same SDK serving a no-op tool of the same name.

Both are driven by the SDK's own client (``mcp.client.Client`` over ``streamable_http_client``) from
this process, with the same number of concurrent clients (one MCP session each), a warm-up, then a
fixed wall-clock window, the server pinned to one CPU and the clients to another (:func:`pinned`);
the servers compared take their windows in turn (:func:`interleaved`). The server's CPU per call is
reported too.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import AsyncExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from benchlib.common import cpu_seconds, log, pct
from tests.support.daemon import mcp_agent

NOOP = Path(__file__).resolve().with_name("noop_mcp.py")
NOOP_EMPTY = "no-op"  # the baseline answering an empty list
NOOP_SAME = "no-op, same payload"  # the baseline answering what connectd answered


@dataclass
class Rate:
    server: str
    era: str
    clients: int
    calls: int = 0
    wall: float = 0.0
    errors: int = 0
    server_cpu: float = 0.0
    latencies: list[float] = field(default_factory=list)

    @property
    def per_second(self) -> float:
        return self.calls / self.wall if self.wall else 0.0

    @property
    def cpu_ms_per_call(self) -> float:
        return self.server_cpu / self.calls * 1000 if self.calls else 0.0

    def row(self) -> dict[str, Any]:
        return {
            "server": self.server,
            "era": self.era,
            "clients": self.clients,
            "calls": self.calls,
            "errors": self.errors,
            "calls_per_s": round(self.per_second, 1),
            "p50_ms": round(pct(self.latencies, 50) * 1000, 2),
            "p99_ms": round(pct(self.latencies, 99) * 1000, 2),
            "server_cpu_ms_per_call": round(self.cpu_ms_per_call, 3),
        }


async def _drive(rate: Rate, url: str, tokens: list[str], server_pid: int, seconds: float, warmup: int) -> None:
    async with AsyncExitStack() as stack:
        clients = [await stack.enter_async_context(mcp_agent(url, token, rate.era)) for token in tokens]

        async def one(client: Any, record: bool, deadline: float, count: int) -> None:
            done = 0
            while (record and time.monotonic() < deadline) or (not record and done < count):
                start = time.perf_counter()
                result = await client.call_tool("list_agents", {})
                elapsed = time.perf_counter() - start
                done += 1
                if record:
                    rate.calls += 1
                    rate.latencies.append(elapsed)
                    rate.errors += bool(result.is_error)
                elif result.is_error:
                    raise RuntimeError(f"list_agents failed on {rate.server}: {result.content}")

        async with anyio.create_task_group() as tg:
            for client in clients:
                tg.start_soon(one, client, False, 0.0, warmup)
        cpu_before = cpu_seconds(server_pid, tree=False)
        start = time.monotonic()
        async with anyio.create_task_group() as tg:
            for client in clients:
                tg.start_soon(one, client, True, start + seconds, 0)
        rate.wall += time.monotonic() - start
        rate.server_cpu += cpu_seconds(server_pid, tree=False) - cpu_before


def pinning() -> tuple[int, int] | None:
    """The server's CPU and the client's, when this machine lets them have one each (None: it does not)."""
    cpus = sorted(os.sched_getaffinity(0))
    return (cpus[0], cpus[1]) if len(cpus) >= 2 else None


@contextmanager
def pinned(server_pid: int) -> Iterator[None]:
    """The server (every thread it has now; threads it starts later inherit it) on one CPU, this
    process (the clients) on another, restored afterwards: neither takes the other's CPU or caches, so
    the server's CPU per call is its own work, not the scheduler's. Every server compared is measured so."""
    cpus = pinning()
    if cpus is None:
        yield
        return
    mine = os.sched_getaffinity(0)
    tasks = [int(t) for t in os.listdir(f"/proc/{server_pid}/task")]
    theirs = {tid: os.sched_getaffinity(tid) for tid in tasks}
    for tid in tasks:
        os.sched_setaffinity(tid, {cpus[0]})
    os.sched_setaffinity(0, {cpus[1]})
    try:
        yield
    finally:
        os.sched_setaffinity(0, mine)
        for tid, was in theirs.items():
            with suppress(ProcessLookupError):
                os.sched_setaffinity(tid, was)


@dataclass(frozen=True)
class Server:
    name: str
    url: str
    tokens: list[str]
    pid: int


def interleaved(servers: list[Server], *, era: str, seconds: float, rounds: int = 4, warmup: int = 20) -> list[Rate]:
    """Each server measured for ``seconds`` in all, in ``rounds`` windows taken in turn (A B C A B C ...),
    so a machine that slows down or speeds up during the run weighs on every server alike."""
    rates = [Rate(s.name, era, len(s.tokens)) for s in servers]
    for _ in range(rounds):
        for server, rate in zip(servers, rates, strict=True):
            with pinned(server.pid):
                anyio.run(_drive, rate, server.url, server.tokens, server.pid, seconds / rounds, warmup)
    for rate in rates:
        log(
            f"{rate.server} list_agents ({era}, {rate.clients} clients, {rounds} windows): {rate.per_second:.0f} calls/s, "
            f"p50 {pct(rate.latencies, 50) * 1000:.1f} ms, p99 {pct(rate.latencies, 99) * 1000:.1f} ms, "
            f"{rate.cpu_ms_per_call:.2f} ms server CPU per call"
        )
    return rates


async def _answer(url: str, token: str, era: str) -> dict[str, Any]:
    async with mcp_agent(url, token, era) as client:
        result = await client.call_tool("list_agents", {})
    if result.is_error or not isinstance(result.structured_content, dict):
        raise RuntimeError(f"list_agents failed: {result.content}")
    return dict(result.structured_content)


def answer_of(url: str, token: str, era: str = "legacy") -> dict[str, Any]:
    """``list_agents``' structured answer, as the caller with ``token`` gets it."""
    answer: dict[str, Any] = anyio.run(_answer, url, token, era)
    return answer


class NoopServer:
    """The baseline server in its own process (as connectd is); ``answer`` (a JSON file): its
    ``list_agents`` answers that object instead of an empty list."""

    def __init__(self, answer: Path | None = None) -> None:
        self.answer = answer

    def __enter__(self) -> NoopServer:
        argv = [sys.executable, str(NOOP), *([str(self.answer)] if self.answer is not None else [])]
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().split()
        if not line or line[0] != "port":
            self.proc.kill()
            raise RuntimeError("the no-op MCP server did not start")
        self.url = f"http://127.0.0.1:{line[1]}/mcp"
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
