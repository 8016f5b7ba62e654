"""Reading Linux /proc: process start time, ancestry, children and open files.

Every reader returns None (or an empty result) for a process that is gone or unreadable: processes
vanish between any two reads, and the caller decides what a vanished process means.

The incarnation key uses `process_start_time` (field 22 of /proc/<pid>/stat, clock ticks since boot):
together with the pid it names one process for the life of the machine, where a pid alone is reused.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")

# Field numbers of /proc/<pid>/stat as proc(5) counts them (1-based). Fields 1 and 2 (pid and comm)
# are parsed apart because comm may hold spaces and parentheses; every later field follows the LAST ')'.
STAT_FIELD_STATE = 3
STAT_FIELD_PPID = 4
STAT_FIELD_PGRP = 5
STAT_FIELD_STARTTIME = 22


class ProcStatError(ValueError):
    """A /proc/<pid>/stat line that does not have the documented shape."""


@dataclass(frozen=True)
class ProcStat:
    """The fields of /proc/<pid>/stat that connect uses."""

    pid: int
    comm: str
    state: str
    ppid: int
    pgrp: int
    start_time: int  # clock ticks after boot (field 22)

    @property
    def exited(self) -> bool:
        """A zombie (exited, not yet reaped) or dead process: it keeps its pid and start time in /proc
        but runs nothing and holds nothing open."""
        return self.state in ("Z", "X")


def parse_stat(line: str) -> ProcStat:
    """Parse one /proc/<pid>/stat line; comm is everything between the first '(' and the last ')'."""
    open_paren = line.find("(")
    close_paren = line.rfind(")")
    if open_paren < 0 or close_paren < open_paren:
        raise ProcStatError(f"stat line has no '(comm)': {line[:80]!r}")
    head = line[:open_paren].strip()
    rest = line[close_paren + 1 :].split()
    # rest[0] is field 3, so field n is rest[n - 3].
    if not head.isdigit() or len(rest) < STAT_FIELD_STARTTIME - 2:
        raise ProcStatError(f"stat line is too short or has no pid: {line[:80]!r}")
    try:
        return ProcStat(
            pid=int(head),
            comm=line[open_paren + 1 : close_paren],
            state=rest[STAT_FIELD_STATE - 3],
            ppid=int(rest[STAT_FIELD_PPID - 3]),
            pgrp=int(rest[STAT_FIELD_PGRP - 3]),
            start_time=int(rest[STAT_FIELD_STARTTIME - 3]),
        )
    except ValueError as exc:
        raise ProcStatError(f"stat line has a non-numeric field: {line[:80]!r}") from exc


def read_stat(pid: int) -> ProcStat | None:
    """The parsed stat of a live process, or None if it is gone or unreadable."""
    try:
        text = (PROC / str(pid) / "stat").read_text(encoding="utf-8", errors="surrogateescape")
    except OSError:  # gone (ENOENT, ESRCH) or not ours to read
        return None
    return parse_stat(text)


def alive(pid: int) -> bool:
    """The process exists and has not exited (a zombie waiting to be reaped has)."""
    stat = read_stat(pid)
    return stat is not None and not stat.exited


def process_start_time(pid: int) -> int | None:
    """Field 22 of /proc/<pid>/stat (clock ticks after boot), or None if the process is gone."""
    stat = read_stat(pid)
    return None if stat is None else stat.start_time


def parent_pid(pid: int) -> int | None:
    """The parent's pid (0 for the init process), or None if the process is gone."""
    stat = read_stat(pid)
    return None if stat is None else stat.ppid


def ancestry(pid: int) -> list[int]:
    """`pid` followed by its parent, grandparent, ... up to the root; empty if `pid` is gone."""
    chain: list[int] = []
    current: int | None = pid
    while current and current not in chain:
        stat = read_stat(current)
        if stat is None:
            break
        chain.append(current)
        current = stat.ppid
    return chain


def all_pids() -> list[int]:
    """Every pid currently listed in /proc."""
    return sorted(int(name) for name in os.listdir(PROC) if name.isdigit())


def children(pid: int) -> list[int]:
    """Direct children of `pid`."""
    return sorted(p for p, parent in _parent_map().items() if parent == pid)


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (children, grandchildren, ...), breadth first; `pid` not included."""
    by_parent: dict[int, list[int]] = {}
    for child, parent in _parent_map().items():
        by_parent.setdefault(parent, []).append(child)
    found: list[int] = []
    frontier = [pid]
    while frontier:
        nxt: list[int] = []
        for parent in frontier:
            for child in sorted(by_parent.get(parent, [])):
                if child not in found and child != pid:
                    found.append(child)
                    nxt.append(child)
        frontier = nxt
    return found


def _parent_map() -> dict[int, int]:
    parents: dict[int, int] = {}
    for p in all_pids():
        stat = read_stat(p)
        if stat is not None:
            parents[p] = stat.ppid
    return parents


def open_files(pid: int) -> list[str]:
    """Targets of /proc/<pid>/fd/* that are paths in the file system (no pipes, sockets, anon inodes)."""
    fd_dir = PROC / str(pid) / "fd"
    try:
        names = os.listdir(fd_dir)
    except OSError:
        return []
    paths: set[str] = set()
    for name in names:
        try:
            target = os.readlink(fd_dir / name)
        except OSError:
            continue
        if target.startswith("/"):
            paths.add(target.removesuffix(" (deleted)"))
    return sorted(paths)


_SOCKET_PREFIX = "socket:["


def tree_socket_inodes(pid: int) -> frozenset[int]:
    """Inodes of the sockets `pid` and its descendants hold open (``/proc/<p>/fd/* -> socket:[N]``)."""
    inodes: set[int] = set()
    for p in [pid, *descendants(pid)]:
        fd_dir = PROC / str(p) / "fd"
        try:
            names = os.listdir(fd_dir)
        except OSError:
            continue
        for name in names:
            try:
                target = os.readlink(fd_dir / name)
            except OSError:
                continue
            if target.startswith(_SOCKET_PREFIX) and target.endswith("]") and target[8:-1].isdigit():
                inodes.add(int(target[8:-1]))
    return frozenset(inodes)


def tcp_listeners() -> dict[int, frozenset[int]]:
    """{local port: inodes of the sockets listening on it} from ``/proc/net/tcp`` and ``tcp6`` (this
    network namespace), on any local address."""
    found: dict[int, set[int]] = {}
    for table in ("tcp", "tcp6"):
        try:
            lines = (PROC / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] != "0A":  # 0A: LISTEN
                continue
            _, _, port = fields[1].rpartition(":")
            try:
                found.setdefault(int(port, 16), set()).add(int(fields[9]))
            except ValueError:
                continue
    return {port: frozenset(inodes) for port, inodes in found.items()}


def tree_open_files(pid: int) -> dict[int, list[str]]:
    """Open files of `pid` and each of its descendants, keyed by pid (processes with none omitted)."""
    result: dict[int, list[str]] = {}
    for p in [pid, *descendants(pid)]:
        files = open_files(p)
        if files:
            result[p] = files
    return result


@dataclass(frozen=True)
class OpenFile:
    """One file a process holds open: its resolved path and whether it was opened for writing
    (``O_WRONLY`` or ``O_RDWR`` in ``/proc/<pid>/fdinfo/<fd>``'s ``flags``)."""

    pid: int
    path: str
    writable: bool


def _fd_writable(pid: int, fd: str) -> bool:
    try:
        text = (PROC / str(pid) / "fdinfo" / fd).read_text()
    except OSError:
        return False
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name == "flags":
            try:
                return int(value.strip(), 8) & os.O_ACCMODE in (os.O_WRONLY, os.O_RDWR)
            except ValueError:
                return False
    return False


def open_files_with_modes(pid: int) -> list[OpenFile]:
    """The files in the file system `pid` holds open, each with its open mode (see :class:`OpenFile`)."""
    fd_dir = PROC / str(pid) / "fd"
    try:
        names = os.listdir(fd_dir)
    except OSError:
        return []
    found: dict[str, bool] = {}
    for name in names:
        try:
            target = os.readlink(fd_dir / name)
        except OSError:
            continue
        if target.startswith("/") and not target.endswith(" (deleted)"):
            found[target] = found.get(target, False) or _fd_writable(pid, name)
    return [OpenFile(pid, path, writable) for path, writable in sorted(found.items())]


def environ_value(pid: int, name: str) -> str | None:
    """One variable of a process's environment (as it was at exec), or None."""
    try:
        raw = (PROC / str(pid) / "environ").read_bytes()
    except OSError:
        return None
    prefix = name.encode() + b"="
    for entry in raw.split(b"\0"):
        if entry.startswith(prefix):
            return entry[len(prefix):].decode("utf-8", "surrogateescape")
    return None


def cmdline(pid: int) -> list[str] | None:
    """The argv of a process, or None if it is gone (an empty list for kernel threads and zombies)."""
    try:
        raw = (PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return None
    return [part.decode("utf-8", "surrogateescape") for part in raw.split(b"\0")[:-1]] if raw else []


def cwd(pid: int) -> str | None:
    """The working directory of a process, or None if it is gone or unreadable."""
    try:
        return os.readlink(PROC / str(pid) / "cwd")
    except OSError:
        return None


def clock_ticks_per_second() -> int:
    return os.sysconf("SC_CLK_TCK")


def boot_time() -> int:
    """The boot time in seconds since the epoch (`btime` of /proc/stat)."""
    for line in (PROC / "stat").read_text().splitlines():
        if line.startswith("btime "):
            return int(line.split()[1])
    raise ProcStatError("/proc/stat has no btime line")


def process_start_epoch(pid: int) -> float | None:
    """When a process started, in seconds since the epoch, or None if it is gone."""
    ticks = process_start_time(pid)
    return None if ticks is None else boot_time() + ticks / clock_ticks_per_second()
