"""Shared parts of the daemon benchmarks: process CPU and memory from /proc, percentiles, machine
facts, a fleet (private tmux server + a real ``connectd serve`` + stand-in agents), an owner event
stream listener and a control-mode screen observer that timestamps what the panes draw.

Everything runs on loopback and on a private tmux server (``tmux -L <unique> -f /dev/null``); every
loop is bounded and every process started here is stopped by the ``with`` block that started it.
"""

from __future__ import annotations

import json
import os
import platform
import queue
import re
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2

REPO = Path(__file__).resolve().parents[2]
for _path in (REPO, REPO / "src"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from tests.support.daemon import AgentHandle, DaemonProcess, wait_for  # noqa: E402
from tests.support.tmux_server import TmuxServer  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")

__all__ = [
    "REPO",
    "AgentHandle",
    "DaemonProcess",
    "EventListener",
    "Fleet",
    "ScreenObserver",
    "TmuxServer",
    "cpu_seconds",
    "log",
    "machine_info",
    "pct",
    "rss_mb",
    "wait_for",
]


def log(*parts: object) -> None:
    print("[bench]", *parts, file=sys.stderr, flush=True)


# --- /proc ------------------------------------------------------------------------------------------


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rfind(")") + 2 :].split()  # fields from 3 (state) on


def _children_map() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = _stat_fields(int(entry))
        if fields is not None:
            children.setdefault(int(fields[1]), []).append(int(entry))
    return children


def cpu_seconds(pid: int, *, tree: bool = True) -> float:
    """CPU seconds (user + system) a process used, plus, with ``tree``, its reaped children's
    (cutime + cstime) and its live descendants'. The difference of two readings is exact across a
    child that exits in between: its time moves from "live descendant" into the parent's cutime."""
    fields = _stat_fields(pid)
    if fields is None:
        raise RuntimeError(f"process {pid} is gone")
    ticks = int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)
    if tree:
        ticks += int(fields[13]) + int(fields[14])  # cutime, cstime
        children = _children_map()
        stack = list(children.get(pid, ()))
        while stack:
            child = stack.pop()
            sub = _stat_fields(child)
            if sub is not None:
                ticks += int(sub[11]) + int(sub[12]) + int(sub[13]) + int(sub[14])
            stack.extend(children.get(child, ()))
    return ticks / CLK_TCK


def rss_mb(pid: int, field_name: str = "VmRSS") -> float:
    """Resident set size (``VmRSS``) or its peak (``VmHWM``) of one process, in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field_name + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field_name} for {pid}")


@dataclass
class CpuWindow:
    """CPU of some processes over one wall-clock window."""

    wall: float
    cpu: dict[str, float]

    def per_minute(self, name: str) -> float:
        return self.cpu[name] / self.wall * 60.0


def measure_cpu(pids: dict[str, tuple[int, bool]], seconds: float) -> CpuWindow:
    """``pids``: name -> (pid, count the process tree). Sleeps ``seconds`` between two readings."""
    start_wall = time.monotonic()
    before = {name: cpu_seconds(pid, tree=tree) for name, (pid, tree) in pids.items()}
    time.sleep(seconds)
    after = {name: cpu_seconds(pid, tree=tree) for name, (pid, tree) in pids.items()}
    return CpuWindow(time.monotonic() - start_wall, {name: after[name] - before[name] for name in pids})


# --- numbers ----------------------------------------------------------------------------------------


def pct(values: Iterable[float], q: float) -> float:
    """The q-th percentile (0-100), linear between closest ranks."""
    data = sorted(values)
    if not data:
        return float("nan")
    if len(data) == 1:
        return data[0]
    k = (len(data) - 1) * q / 100.0
    lo = int(k)
    hi = min(lo + 1, len(data) - 1)
    return data[lo] + (data[hi] - data[lo]) * (k - lo)


def mean(values: Iterable[float]) -> float:
    data = list(values)
    return statistics.fmean(data) if data else float("nan")


def machine_info() -> dict[str, str]:
    def run(*argv: str) -> str:
        try:
            return subprocess.run(argv, capture_output=True, text=True, timeout=10).stdout.strip()
        except OSError:
            return "?"

    model = "?"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    mem_kb = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            mem_kb = int(line.split()[1])
    from importlib.metadata import version

    return {
        "os": f"{platform.system()} {platform.release()} {platform.machine()}",
        "cpu": f"{os.cpu_count()} CPUs ({model})",
        "memory": f"{mem_kb / 1024 / 1024:.1f} GiB",
        "python": platform.python_version(),
        "tmux": run("tmux", "-V"),
        "mcp": version("mcp"),
        "uvicorn": version("uvicorn"),
        "sqlite": __import__("sqlite3").sqlite_version,
        "load": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }


# --- a fleet: private tmux server, a real daemon, stand-in agents -----------------------------------


class _Daemon(DaemonProcess):
    """``DaemonProcess`` that survives reading ``daemon.json`` while ``serve`` is still writing it (the
    file is written in place, so a reader can see it empty)."""

    def start(self, timeout: float = 30.0) -> DaemonProcess:
        try:
            return super().start(timeout)
        except json.JSONDecodeError:
            pass
        info = self.data_dir / "daemon.json"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"connectd exited with {self.proc.returncode}:\n{self.log_text()}")
            try:
                self.port = json.loads(info.read_text())["port"]
                if self.http().get("/api/agents").status_code == 200:
                    return self
            except (OSError, ValueError, httpx2.TransportError):
                pass
            time.sleep(0.1)
        raise RuntimeError(f"connectd did not start:\n{self.log_text()}")



class Fleet:
    """A private tmux server with one session, and a real ``connectd serve`` on it (started on demand).

    with Fleet(tmp, "watch", policy=...) as fleet:
        fleet.start_daemon()
        agents = fleet.launch_many(10)
    """

    def __init__(self, tmp: Path, name: str, *, policy: str = "", width: int = 160, height: int = 40) -> None:
        self.tmp = tmp / name
        self.tmp.mkdir(parents=True, exist_ok=True)
        self.tmux = TmuxServer(f"connect-bench-{name}")
        self.tmux.new_session("main", width=width, height=height)
        self.policy = policy
        self.daemon: DaemonProcess | None = None

    def __enter__(self) -> Fleet:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.stop_daemon()
        finally:
            self.tmux.kill()

    def start_daemon(self) -> DaemonProcess:
        daemon = _Daemon(self.tmp, self.tmux, policy=self.policy)
        try:
            daemon.start(timeout=60)
        except BaseException:
            daemon.stop()  # a daemon that failed to come up is not left running
            raise
        self.daemon = daemon
        return daemon

    def stop_daemon(self) -> None:
        if self.daemon is not None:
            self.daemon.stop()

    @property
    def d(self) -> DaemonProcess:
        assert self.daemon is not None, "start the daemon first"
        return self.daemon

    @property
    def pid(self) -> int:
        assert self.d.proc is not None
        return self.d.proc.pid

    @property
    def server_pid(self) -> int:
        return int(self.tmux.tmux("display-message", "-p", "#{pid}").strip())

    def launch_many(
        self, count: int, *, prefix: str = "agent", connect: str = "collaborate", env: dict[str, str] | None = None
    ) -> list[AgentHandle]:
        start = len(self.d.agents)
        handles = [
            self.d.launch(f"{prefix}{start + i:02d}", connect, env=dict(env or {})) for i in range(count)
        ]
        self.wait_idle(handles)
        return handles

    def wait_idle(self, handles: list[AgentHandle], timeout: float = 90.0) -> None:
        panes = {h.pane for h in handles}

        def all_idle() -> bool:
            views = {a["pane"]: a for a in self.d.api("GET", "/api/agents") if a["pane"] in panes}
            return len(views) == len(panes) and all(
                v["activity"] == "idle" and v["composer"] == "empty" for v in views.values()
            )

        wait_for(all_idle, timeout, f"{len(panes)} agents idle", every=0.25)

    def type(self, pane: str, text: str) -> None:
        """Type like a person: the text, then Enter (two tmux calls)."""
        self.tmux.tmux("send-keys", "-t", pane, "-l", text)
        self.tmux.tmux("send-keys", "-t", pane, "Enter")


# --- the owner event stream -------------------------------------------------------------------------


class EventListener:
    """Reads ``/api/events`` (SSE) in a thread; every item arrives with the wall time it was read."""

    def __init__(self, daemon: DaemonProcess) -> None:
        self.daemon = daemon
        self.items: queue.Queue[tuple[float, dict[str, Any]]] = queue.Queue()
        self._stop = threading.Event()
        self._connected = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._response: Any = None

    def __enter__(self) -> EventListener:
        self._thread.start()
        if not self._connected.wait(10):
            raise RuntimeError("the owner event stream did not connect")
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        response = self._response
        if response is not None:
            response.close()
        self._thread.join(5)

    def _run(self) -> None:
        headers = {"Authorization": f"Bearer {self.daemon.owner_token}"}
        with (
            httpx2.Client(base_url=self.daemon.base_url, headers=headers, timeout=None) as client,
            client.stream("GET", "/api/events") as response,
        ):
            self._response = response
            try:
                for line in response.iter_lines():
                    now = time.time()
                    if line.startswith(": connected"):
                        self._connected.set()
                    elif line.startswith("data: "):
                        self.items.put((now, json.loads(line[6:])))
                    if self._stop.is_set():
                        return
            except Exception:  # noqa: BLE001 - closed under us at exit
                if not self._stop.is_set():
                    raise

    def drain(self) -> None:
        while True:
            try:
                self.items.get_nowait()
            except queue.Empty:
                return

    def next_pane_event(self, pane: str, after: float, deadline: float) -> float | None:
        """Wall time of the first ``pane`` event for ``pane`` read at or after ``after``."""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            try:
                at, item = self.items.get(timeout=left)
            except queue.Empty:
                return None
            if item.get("topic") == "pane" and item.get("pane") == pane and at >= after:
                return at


# --- what the panes draw, timestamped ---------------------------------------------------------------

_OCTAL = re.compile(rb"\\([0-7]{3})")


@dataclass
class _Watch:
    marker: bytes
    found: threading.Event = field(default_factory=threading.Event)
    at: float = 0.0
    tail: bytes = b""


class ScreenObserver:
    """A read-only control-mode client (``tmux -C attach -f ignore-size,read-only``) that timestamps
    the moment tmux receives a pane's output holding a marker: the ground truth of "the screen turned
    idle", independent of both watchers under test."""

    def __init__(self, tmux: TmuxServer, session: str = "main") -> None:
        self.argv = [*tmux.argv, "-C", "attach-session", "-f", "ignore-size,read-only", "-t", session]
        self.env = tmux.env
        self._watches: dict[str, _Watch] = {}
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> ScreenObserver:
        self._proc = subprocess.Popen(
            self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=self.env
        )
        self._thread.start()
        time.sleep(0.3)
        return self

    def __exit__(self, *exc: object) -> None:
        proc = self._proc
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        self._thread.join(5)

    def expect(self, pane: str, marker: str) -> _Watch:
        watch = _Watch(marker.encode())
        with self._lock:
            self._watches[pane] = watch
        return watch

    def _run(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            if not line.startswith(b"%output "):
                continue
            now = time.time()
            _, pane_b, raw = (line.rstrip(b"\n").split(b" ", 2) + [b""])[:3]
            pane = pane_b.decode()
            with self._lock:
                watch = self._watches.get(pane)
            if watch is None or watch.found.is_set():
                continue
            data = _OCTAL.sub(lambda m: bytes([int(m[1], 8) & 0xFF]), raw)
            if watch.marker in watch.tail + data:
                watch.at = now
                watch.found.set()
            watch.tail = (watch.tail + data)[-256:]


@contextmanager
def timed(label: str) -> Iterator[Callable[[], float]]:
    start = time.monotonic()
    log(f"{label} ...")
    yield lambda: time.monotonic() - start
    log(f"{label}: {time.monotonic() - start:.1f} s")
