"""Is a session running now, and in which pane? The facts, read from ``/proc`` and Claude Code's registry.

The rules are the core's (:mod:`connectcore.history`, section "Liveness"; documented in
docs/history.md): :func:`~connectcore.history.record_trust` and
:func:`~connectcore.history.claude_claims` for Claude Code's registry of live processes
(``<claude root>/sessions/<pid>.json``), :func:`~connectcore.history.may_run_codex` and
:func:`~connectcore.history.codex_claims` for Codex's open rollout files, and
:func:`~connectcore.history.liveness_view` for what an entry's liveness is. This module only reads:
the registry files (parsed into :class:`~connectcore.history.RegistryRecord`), each process's stat,
name and descriptor links, the boot time, and each claiming process's pane, found by walking parent
pids up to a pane's root process (the caller passes the ``pane_pid -> %N`` map). No registry
directory at all (an older Claude Code), or no ``/proc``, is a harness not known.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path

from connectcore.history import (
    LivenessSnapshot,
    RecordTrust,
    RegistryRecord,
    Running,
    claude_claims,
    codex_claims,
    may_run_codex,
    record_trust,
)
from connectd.tmux.procfs import ProcStat, ProcStatError, parse_stat

__all__ = ["LivenessProbe", "LivenessSnapshot", "ProcFS", "Running", "tmux_pane_pids", "verify_claude_record"]

_MAX_ANCESTRY = 64


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


class LivenessProbe:
    """Reads the Claude registry and ``/proc`` to build a :class:`LivenessSnapshot`."""

    def __init__(self, claude_root: Path, codex_root: Path, *, proc: ProcFS | None = None) -> None:
        self.claude_root = Path(claude_root)
        self.codex_root = Path(codex_root)
        self.proc = proc or ProcFS()

    def snapshot(self, pane_pids: Mapping[int, str] | None = None, *, codex: bool = True) -> LivenessSnapshot:
        if not self.proc.available():
            return LivenessSnapshot(claude_known=False, codex_known=False)
        records = self._registry()
        claude = claude_claims(records, self.proc.boot_time(), self.proc.clk_tck) if records is not None else {}
        codex_running, codex_known = (
            codex_claims(self._codex_processes(), os.path.realpath(self.codex_root), os.sep) if codex else ({}, False)
        )
        pids = {r.pid for r in claude.values()} | {r.pid for r in codex_running.values()}
        return LivenessSnapshot(
            claude=claude,
            codex=codex_running,
            claude_known=records is not None,
            codex_known=codex_known,
            ancestry={pid: self.pane_of(pid, pane_pids or {}) for pid in pids},
        )

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

    def _registry(self) -> list[RegistryRecord] | None:
        """Claude Code's registry records, parsed, with their processes' stat (None: no registry)."""
        registry = self.claude_root / "sessions"
        if not registry.is_dir():
            return None
        try:
            files = sorted(registry.glob("*.json"))
        except OSError:
            return None
        records: list[RegistryRecord] = []
        for path in files:
            try:
                raw = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError, UnicodeDecodeError):
                continue
            if not isinstance(raw, dict):
                continue
            pid = raw.get("pid")
            sid = raw.get("sessionId")
            if not isinstance(pid, int) or isinstance(pid, bool) or not isinstance(sid, str) or not sid:
                continue
            records.append(_registry_record(raw, pid, sid, self.proc.stat(pid)))
        return records

    def _codex_processes(self) -> Iterator[tuple[int, list[str] | None]]:
        """The processes that may run Codex, each with its descriptors' link targets (None: unreadable)."""
        for pid in self.proc.pids():
            comm = self.proc.comm(pid)  # every process is looked at: the cheapest read that names it
            if comm is None or not may_run_codex(comm):
                continue
            try:
                yield pid, list(self.proc.fd_targets(pid))
            except PermissionError:
                yield pid, None


def _registry_record(raw: Mapping[str, object], pid: int, session_id: str, st: ProcStat | None) -> RegistryRecord:
    """A registry file's fields as plain values: a numeric ``procStart`` (an int, or a string of
    digits) and a numeric ``startedAt``, else None; and the stat of the process with its pid."""
    proc_start: int | None = None
    value = raw.get("procStart")
    if isinstance(value, int | str) and not isinstance(value, bool):
        text = str(value).strip()
        if text.isdigit():
            proc_start = int(text)
    started = raw.get("startedAt")
    started_at_ms = float(started) if isinstance(started, int | float) and not isinstance(started, bool) else None
    return RegistryRecord(
        pid,
        session_id,
        proc_start,
        started_at_ms,
        st.start_time if st is not None else None,
        st.exited if st is not None else False,
    )


def verify_claude_record(
    record: Mapping[str, object], st: ProcStat, boot: float | None, clk_tck: int
) -> bool | None:
    """True: the record is this process's; False: cannot tell; None: it is not (the pid was reused, or
    the process exited). The core's :func:`~connectcore.history.record_trust` on the parsed record."""
    pid = st.pid
    trust = record_trust(_registry_record(record, pid, "", st), boot, clk_tck)
    return {RecordTrust.TRUSTED: True, RecordTrust.UNVERIFIED: False, RecordTrust.STALE: None}[trust]


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
