"""Watch cost and idle-transition latency: connectd vs a naive 4 Hz capture loop, on the same panes.

One fleet serves every measure, in this order (the daemon and the naive loop never run together):

1. connectd with N1 idle agents: CPU over a window, then idle-transition latency;
2. more agents up to N2: the same two measures, then (hook) the memory measures at N2;
3. the daemon stopped, the naive loop over the same N2 panes, then over the first N1 panes.

CPU is process CPU seconds (utime + stime from /proc/<pid>/stat, children included: the tmux
commands each watcher runs) per minute of wall time. The tmux server's own CPU is reported beside
it: a watcher that captures more makes the server work more.

Idle-transition latency: a stand-in agent gets ``/busy 1.0x`` (a turn of about a second). A separate
read-only control-mode client timestamps the moment tmux receives the agent's idle frame (the first
output holding "Worked for 1.0xs."); connectd has seen it when its owner event stream publishes a
``pane`` event for that pane; the naive loop has seen it when it prints the pane idle.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchlib.common import (
    AgentHandle,
    EventListener,
    Fleet,
    ScreenObserver,
    log,
    measure_cpu,
    pct,
)

NAIVE = Path(__file__).resolve().with_name("naive_watcher.py")


@dataclass
class WatchPoint:
    panes: int
    connectd_cpu: float = 0.0  # CPU s per minute, connectd and its children
    connectd_tmux: float = 0.0  # tmux server CPU s per minute while connectd watched
    naive_cpu: float = 0.0
    naive_tmux: float = 0.0
    naive_rate: float = 0.0  # captures per second the naive loop achieved
    connectd_latency: list[float] = field(default_factory=list)  # seconds
    naive_latency: list[float] = field(default_factory=list)
    naive_missed: int = 0  # idle frames the naive loop never saw (it cannot keep up with that many panes)
    busy_events: int = 0  # connectd pane events between typing and the idle frame (expected: the busy edge)
    window: float = 0.0

    def row(self) -> dict[str, Any]:
        return {
            "panes": self.panes,
            "connectd_cpu_s_per_min": round(self.connectd_cpu, 3),
            "connectd_tmux_server_cpu_s_per_min": round(self.connectd_tmux, 3),
            "naive_cpu_s_per_min": round(self.naive_cpu, 3),
            "naive_tmux_server_cpu_s_per_min": round(self.naive_tmux, 3),
            "naive_captures_per_s": round(self.naive_rate, 1),
            "connectd_latency_ms": [round(x * 1000, 1) for x in self.connectd_latency],
            "naive_latency_ms": [round(x * 1000, 1) for x in self.naive_latency],
            "naive_missed": self.naive_missed,
        }


class _Seq:
    """Unique turn lengths (1.01 s, 1.02 s, ...) so every idle frame has its own marker."""

    def __init__(self) -> None:
        self.n = 0

    def next(self) -> str:
        self.n = self.n % 98 + 1
        return f"{1 + self.n / 100:g}"


def _rounds(
    fleet: Fleet,
    observer: ScreenObserver,
    panes: list[str],
    rounds: int,
    per_round: int,
    seq: _Seq,
    settle: float,
) -> list[tuple[str, float, float]]:
    """Make ``per_round`` agents go busy then idle, ``rounds`` times; (pane, typed at, idle frame at)."""
    out: list[tuple[str, float, float]] = []
    for r in range(rounds):
        chosen = [panes[(r * per_round + i) % len(panes)] for i in range(per_round)]
        watches = []
        for pane in chosen:
            seconds = seq.next()
            watch = observer.expect(pane, f"Worked for {seconds}s.")
            typed = time.time()
            fleet.type(pane, f"/busy {seconds}")
            watches.append((pane, typed, watch))
            time.sleep(0.15)
        for pane, typed, watch in watches:
            if not watch.found.wait(15):
                raise RuntimeError(f"{pane} never drew its idle frame")
            out.append((pane, typed, watch.at))
        time.sleep(settle)  # both watchers have had time to see it
    return out


def connectd_measures(
    fleet: Fleet, agents: list[AgentHandle], point: WatchPoint, *, seconds: float, rounds: int, per_round: int, seq: _Seq
) -> None:
    time.sleep(3.0)  # launches settled
    window = measure_cpu({"connectd": (fleet.pid, True), "tmux": (fleet.server_pid, False)}, seconds)
    point.connectd_cpu = window.per_minute("connectd")
    point.connectd_tmux = window.per_minute("tmux")
    point.window = window.wall
    log(f"connectd at {point.panes} panes: {point.connectd_cpu:.3f} CPU s/min (tmux server {point.connectd_tmux:.3f})")
    with EventListener(fleet.d) as events, ScreenObserver(fleet.tmux) as observer:
        trials = _rounds(fleet, observer, [a.pane for a in agents], rounds, per_round, seq, settle=1.5)
        seen: list[tuple[float, dict[str, Any]]] = []
        while not events.items.empty():
            seen.append(events.items.get_nowait())
    for pane, typed, idle_at in trials:
        pane_events = [at for at, item in seen if item.get("topic") == "pane" and item.get("pane") == pane]
        point.busy_events += sum(1 for at in pane_events if typed <= at < idle_at)
        after = [at for at in pane_events if at >= idle_at]
        if not after:
            raise RuntimeError(f"connectd published no pane event for {pane} after its idle frame")
        point.connectd_latency.append(min(after) - idle_at)
    fleet.wait_idle(agents)
    log(
        f"connectd idle transition at {point.panes} panes: p50 {pct(point.connectd_latency, 50) * 1000:.0f} ms, "
        f"p95 {pct(point.connectd_latency, 95) * 1000:.0f} ms ({len(point.connectd_latency)} trials)"
    )


class NaiveWatcher:
    """The naive loop as a child process; its state flips are read from its stdout."""

    def __init__(self, fleet: Fleet, panes: list[str], seconds: float) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(NAIVE), "--socket", fleet.tmux.socket_name, "--seconds", str(seconds), *panes],
            stdout=subprocess.PIPE,
            text=True,
            env=fleet.tmux.env,
        )
        self.flips: list[tuple[float, str, str]] = []
        self.summary: dict[str, float] = {}
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            parts = line.split()
            if parts and parts[0] == "rounds":
                self.summary = {parts[i]: float(parts[i + 1]) for i in range(0, len(parts), 2)}
            elif len(parts) == 3:
                self.flips.append((float(parts[0]), parts[1], parts[2]))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
        self.proc.wait(30)
        self._thread.join(5)


def naive_measures(
    fleet: Fleet, panes: list[str], point: WatchPoint, *, seconds: float, rounds: int, per_round: int, seq: _Seq
) -> None:
    naive = NaiveWatcher(fleet, panes, seconds + 120)
    try:
        time.sleep(1.0)
        window = measure_cpu({"naive": (naive.proc.pid, True), "tmux": (fleet.server_pid, False)}, seconds)
        point.naive_cpu = window.per_minute("naive")
        point.naive_tmux = window.per_minute("tmux")
        with ScreenObserver(fleet.tmux) as observer:
            trials = _rounds(fleet, observer, panes, rounds, per_round, seq, settle=1.0)
    finally:
        naive.stop()
    point.naive_rate = naive.summary.get("captures", 0) / max(naive.summary.get("seconds", 1), 1e-9)
    for pane, _typed, idle_at in trials:
        after = [at for at, p, state in naive.flips if p == pane and state == "idle" and at >= idle_at]
        if not after:
            point.naive_missed += 1  # counted and reported, not a failure of the section
            continue
        point.naive_latency.append(min(after) - idle_at)
    log(
        f"naive at {point.panes} panes: {point.naive_cpu:.3f} CPU s/min (tmux server {point.naive_tmux:.3f}), "
        f"{point.naive_rate:.0f} captures/s; idle seen in {len(point.naive_latency)} of {len(trials)} trials"
    )


def run(
    tmp: Path,
    *,
    counts: tuple[int, int] = (10, 50),
    seconds: float = 30.0,
    rounds: int = 4,
    per_round: int = 4,
    policy: str = "",
    at_start: Callable[[Fleet], None] | None = None,
    at_full: Callable[[Fleet, list[AgentHandle]], None] | None = None,
) -> list[WatchPoint]:
    small, large = counts
    seq = _Seq()
    points = [WatchPoint(small), WatchPoint(large)]
    with Fleet(tmp, "watch", policy=policy) as fleet:
        fleet.start_daemon()
        if at_start is not None:
            at_start(fleet)
        log(f"launching {small} stand-in agents")
        agents = fleet.launch_many(small)
        connectd_measures(fleet, agents, points[0], seconds=seconds, rounds=rounds, per_round=per_round, seq=seq)
        log(f"launching {large - small} more")
        agents += fleet.launch_many(large - small)
        connectd_measures(fleet, agents, points[1], seconds=seconds, rounds=rounds, per_round=per_round, seq=seq)
        if at_full is not None:
            at_full(fleet, agents)
        fleet.stop_daemon()
        naive_measures(fleet, [a.pane for a in agents], points[1], seconds=seconds, rounds=rounds, per_round=per_round, seq=seq)
        for extra in agents[small:]:
            fleet.tmux.tmux("kill-pane", "-t", extra.pane)
        naive_measures(fleet, [a.pane for a in agents[:small]], points[0], seconds=seconds, rounds=rounds, per_round=per_round, seq=seq)
    return points
