"""Is a session running now, and in which pane? Best effort, and ``running_unknown`` when unsure.

Rules (documented in docs/history.md):

* Claude Code keeps a registry of its live processes, ``<claude root>/sessions/<pid>.json`` with
  ``pid``, ``sessionId``, ``cwd``, ``startedAt`` (epoch ms) and, on Linux, ``procStart`` (the process
  start time in clock ticks since boot, field 22 of ``/proc/<pid>/stat``). A record is trusted only
  when that process exists and its start time matches ``procStart`` exactly. A record without a
  numeric ``procStart`` is compared by ``startedAt`` against the process start derived from
  ``/proc/<pid>/stat`` and the boot time, within :data:`START_TOLERANCE_S`; a mismatch there is
  ``running_unknown`` (``startedAt`` may be when the session, not the process, started), while a
  ``procStart`` mismatch means the pid was reused: not running. No registry directory at all (an older
  Claude Code) makes every Claude session ``running_unknown``.
* Codex keeps its rollout file open while it runs: a process whose name starts with ``codex`` holding
  ``rollout-…-<id>.jsonl`` open (a link in ``/proc/<pid>/fd``) runs session ``<id>``. A codex process
  whose descriptors cannot be read makes every Codex session not found ``running_unknown``.
* The pane is found from the process's ancestry: walking parent pids up to a pane's root process
  (the caller passes the ``pane_pid -> %N`` map) gives ``running_in_pane``; a live process outside
  every pane is ``running_elsewhere``.
* A subagent runs inside its parent's process: while the parent runs it is ``running_unknown``,
  otherwise ``not_running``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from connectcore.history import Entrypoint, Harness, Liveness, LivenessView, SessionEntry
from connectd.tmux.procfs import ProcStat, ProcStatError, parse_stat

#: How far a registry's ``startedAt`` may be from the process start time and still be trusted.
START_TOLERANCE_S = 10.0
_MAX_ANCESTRY = 64
_ROLLOUT_ID = re.compile(
    r"rollout-.*?([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})\.jsonl$"
)


class ProcFS:
    """The few facts read from ``/proc`` (root overridable for tests)."""

    def __init__(self, root: Path = Path("/proc")) -> None:
        self.root = Path(root)
        try:
            self.clk_tck = int(os.sysconf("SC_CLK_TCK"))
        except (ValueError, OSError):
            self.clk_tck = 100

    def available(self) -> bool:
        return (self.root / "self" / "stat").exists() or (self.root / "stat").exists()

    def stat(self, pid: int) -> ProcStat | None:
        try:
            raw = (self.root / str(pid) / "stat").read_text(encoding="utf-8", errors="surrogateescape")
            return parse_stat(raw)
        except (OSError, ProcStatError):
            return None

    def boot_time(self) -> float | None:
        try:
            for line in (self.root / "stat").read_text().splitlines():
                if line.startswith("btime "):
                    return float(line.split()[1])
        except (OSError, ValueError, IndexError):
            return None
        return None

    def comm(self, pid: int) -> str | None:
        """The process's name (``comm``): one small read of ``/proc/<pid>/comm``, else from its stat."""
        try:
            fd = os.open(f"{self.root}/{pid}/comm", os.O_RDONLY)
        except FileNotFoundError:
            st = self.stat(pid)
            return st.comm if st is not None else None
        except OSError:
            return None
        try:
            return os.read(fd, 64).decode("utf-8", "surrogateescape").rstrip("\n")
        except OSError:
            return None
        finally:
            os.close(fd)

    def pids(self) -> list[int]:
        try:
            return [int(n) for n in os.listdir(self.root) if n.isdigit()]
        except OSError:
            return []

    def fd_targets(self, pid: int) -> Iterator[str]:
        """Link targets of the process's descriptors; raises PermissionError if unreadable."""
        fd_dir = self.root / str(pid) / "fd"
        try:
            names = os.listdir(fd_dir)
        except FileNotFoundError:
            return
        for name in names:
            with contextlib.suppress(OSError):
                yield os.readlink(fd_dir / name)


@dataclass(frozen=True)
class Running:
    pid: int
    trusted: bool  # False: the registry could not be verified


@dataclass
class LivenessSnapshot:
    """Which sessions were running at one moment; answers :meth:`view` per entry."""

    claude: dict[str, Running] = field(default_factory=dict)
    codex: dict[str, Running] = field(default_factory=dict)
    claude_known: bool = True  # False: no registry, every Claude session is running_unknown
    codex_known: bool = True
    ancestry: Mapping[int, str | None] = field(default_factory=dict)  # pid -> pane (or None)

    def running(self, harness: Harness, session_id: str) -> Running | None:
        table = self.claude if harness is Harness.CLAUDE else self.codex
        return table.get(session_id)

    def known(self, harness: Harness) -> bool:
        return self.claude_known if harness is Harness.CLAUDE else self.codex_known

    def view(self, entry: SessionEntry) -> LivenessView:
        if entry.entrypoint is Entrypoint.SUBAGENT:
            parent = entry.parent_session_id
            if parent and self.running(entry.harness, parent) is not None:
                return LivenessView(Liveness.RUNNING_UNKNOWN)
            if not self.known(entry.harness):
                return LivenessView(Liveness.RUNNING_UNKNOWN)
            return LivenessView(Liveness.NOT_RUNNING)
        run = self.running(entry.harness, entry.session_id)
        if run is None:
            return LivenessView(
                Liveness.NOT_RUNNING if self.known(entry.harness) else Liveness.RUNNING_UNKNOWN
            )
        if not run.trusted:
            return LivenessView(Liveness.RUNNING_UNKNOWN)
        pane = self.ancestry.get(run.pid)
        if pane is not None:
            return LivenessView(Liveness.RUNNING_IN_PANE, pane)
        return LivenessView(Liveness.RUNNING_ELSEWHERE)

    def running_keys(self) -> frozenset[tuple[Harness, str]]:
        return frozenset(
            [(Harness.CLAUDE, s) for s in self.claude] + [(Harness.CODEX, s) for s in self.codex]
        )


class LivenessProbe:
    """Reads the Claude registry and ``/proc`` to build a :class:`LivenessSnapshot`."""

    def __init__(self, claude_root: Path, codex_root: Path, *, proc: ProcFS | None = None) -> None:
        self.claude_root = Path(claude_root)
        self.codex_root = Path(codex_root)
        self.proc = proc or ProcFS()

    def snapshot(self, pane_pids: Mapping[int, str] | None = None, *, codex: bool = True) -> LivenessSnapshot:
        snap = LivenessSnapshot()
        if not self.proc.available():
            snap.claude_known = snap.codex_known = False
            return snap
        self._claude(snap)
        if codex:
            self._codex(snap)
        else:
            snap.codex_known = False
        pids = {r.pid for r in snap.claude.values()} | {r.pid for r in snap.codex.values()}
        snap.ancestry = {pid: self.pane_of(pid, pane_pids or {}) for pid in pids}
        return snap

    def pane_of(self, pid: int, pane_pids: Mapping[int, str]) -> str | None:
        cur = pid
        for _ in range(_MAX_ANCESTRY):
            if cur in pane_pids:
                return pane_pids[cur]
            st = self.proc.stat(cur)
            if st is None or st.ppid <= 1:
                return None
            cur = st.ppid
        return None

    def _claude(self, snap: LivenessSnapshot) -> None:
        registry = self.claude_root / "sessions"
        if not registry.is_dir():
            snap.claude_known = False
            return
        boot = self.proc.boot_time()
        try:
            files = sorted(registry.glob("*.json"))
        except OSError:
            snap.claude_known = False
            return
        for path in files:
            try:
                record = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError, UnicodeDecodeError):
                continue
            if not isinstance(record, dict):
                continue
            pid = record.get("pid")
            sid = record.get("sessionId")
            if not isinstance(pid, int) or isinstance(pid, bool) or not isinstance(sid, str) or not sid:
                continue
            st = self.proc.stat(pid)
            if st is None or st.exited:
                continue  # a stale record: the process is gone (or exited, not yet reaped)
            verdict = verify_claude_record(record, st, boot, self.proc.clk_tck)
            if verdict is None:
                continue  # the pid was reused by another process
            prev = snap.claude.get(sid)
            if prev is None or (verdict and not prev.trusted):
                snap.claude[sid] = Running(pid, verdict)

    def _codex(self, snap: LivenessSnapshot) -> None:
        sessions_root = os.path.realpath(self.codex_root)
        for pid in self.proc.pids():
            comm = self.proc.comm(pid)  # every process is looked at: the cheapest read that names it
            if comm is None or not comm.startswith("codex"):
                continue
            try:
                targets = list(self.proc.fd_targets(pid))
            except PermissionError:
                snap.codex_known = False
                continue
            for target in targets:
                if not target.startswith(sessions_root + os.sep):
                    continue
                m = _ROLLOUT_ID.search(target)
                if m:
                    snap.codex[m.group(1)] = Running(pid, True)


def verify_claude_record(
    record: Mapping[str, object], st: ProcStat, boot: float | None, clk_tck: int
) -> bool | None:
    """True: the record is this process's; False: cannot tell; None: it is not (the pid was reused)."""
    proc_start = record.get("procStart")
    if isinstance(proc_start, int | str) and not isinstance(proc_start, bool):
        text = str(proc_start).strip()
        if text.isdigit():
            return True if int(text) == st.start_time else None
    started = record.get("startedAt")
    if (
        isinstance(started, int | float)
        and not isinstance(started, bool)
        and boot is not None
        and clk_tck > 0
    ):
        process_start = boot + st.start_time / clk_tck
        return abs(process_start - float(started) / 1000.0) <= START_TOLERANCE_S
    return False


def tmux_pane_pids(socket_name: str | None = None) -> dict[int, str]:
    """``pane_pid -> %N`` for every pane of a tmux server (empty if there is none)."""
    cmd = ["tmux"]
    if socket_name:
        cmd += ["-L", socket_name]
    cmd += ["list-panes", "-a", "-F", "#{pane_pid} #{pane_id}"]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return {}
    panes: dict[int, str] = {}
    for line in out.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0].isdigit() and re.fullmatch(r"%\d+", parts[1]):
            panes[int(parts[0])] = parts[1]
    return panes
