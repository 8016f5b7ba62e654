"""procfs: /proc parsing on sample lines and on real processes of this machine."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from connectd.tmux import procfs

# A real-shaped stat line (from `cat /proc/self/stat`) with the comm replaced by one that holds
# spaces and the sequence ") (" that breaks naive parsers: fields 3.. follow the LAST ')'.
TRICKY = (
    "4242 (evil) (name 7 8) S 17 4242 2847 0 -1 4194304 99 0 0 0 0 0 0 0 20 0 1 0 97438 3133440 363 "
    "18446744073709551615 94188183162880 94188183182761 140732142919376 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0"
)


def test_parse_stat_with_parenthesised_comm() -> None:
    stat = procfs.parse_stat(TRICKY)
    assert stat == procfs.ProcStat(
        pid=4242, comm="evil) (name 7 8", state="S", ppid=17, pgrp=4242, start_time=97438
    )


def test_parse_stat_plain() -> None:
    line = "1 (systemd) S 0 1 1 0 -1 4194560 1 2 3 4 5 6 7 8 20 0 1 0 12 100 10 1 2 3"
    stat = procfs.parse_stat(line)
    assert (stat.pid, stat.comm, stat.ppid, stat.start_time) == (1, "systemd", 0, 12)


@pytest.mark.parametrize(
    "line, problem",
    [
        ("", "no '(comm)'"),
        ("12 cat R 1 2", "no '(comm)'"),
        ("(cat) R 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21", "no pid"),
        ("12 (cat) R 1 2 3", "too short"),
        ("12 (cat) R x 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21", "non-numeric"),
    ],
)
def test_parse_stat_refuses_malformed_lines(line: str, problem: str) -> None:
    with pytest.raises(procfs.ProcStatError, match=re.escape(problem)):
        procfs.parse_stat(line)


def test_current_process() -> None:
    me = os.getpid()
    stat = procfs.read_stat(me)
    assert stat is not None
    assert stat.pid == me
    assert stat.ppid == os.getppid()
    assert procfs.parent_pid(me) == os.getppid()
    start = procfs.process_start_time(me)
    assert start is not None and start > 0
    # Field 22 is the start time: this process started after boot and before now.
    started = procfs.process_start_epoch(me)
    assert started is not None
    assert procfs.boot_time() <= started <= time.time() + 1


def test_start_time_is_stable_and_distinguishes_processes() -> None:
    me = os.getpid()
    assert procfs.process_start_time(me) == procfs.process_start_time(me)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        child_start = procfs.process_start_time(child.pid)
        assert child_start is not None
        assert child_start >= (procfs.process_start_time(me) or 0)
    finally:
        child.kill()
        child.wait()
    assert procfs.process_start_time(child.pid) is None


def test_gone_process_reads_as_none() -> None:
    child = subprocess.Popen(["true"])
    child.wait()
    assert procfs.read_stat(child.pid) is None
    assert procfs.parent_pid(child.pid) is None
    assert procfs.ancestry(child.pid) == []
    assert procfs.cmdline(child.pid) is None
    assert procfs.cwd(child.pid) is None
    assert procfs.open_files(child.pid) == []


def test_ancestry_children_descendants(tmp_path: os.PathLike[str]) -> None:
    marker = os.path.join(tmp_path, "held-open")
    # A shell whose child holds a file open: me -> sh -> sleep (with fd 3 on the marker file).
    shell = subprocess.Popen(["sh", "-c", f"exec 3>'{marker}'; sleep 30 & sleep 30 3>&-; wait"])
    try:
        for _ in range(200):
            if len(procfs.children(shell.pid)) == 2:
                break
            time.sleep(0.01)
        kids = procfs.children(shell.pid)
        assert len(kids) == 2
        # Breadth first: the shell comes before its children. (The test process may have children of its
        # own, e.g. a browser driver under a pytest-xdist worker, so the shell need not come first.)
        mine = procfs.descendants(os.getpid())
        assert shell.pid in mine and all(mine.index(shell.pid) < mine.index(kid) for kid in kids)
        assert set(kids) <= set(procfs.descendants(os.getpid()))
        assert procfs.descendants(shell.pid) == kids
        for kid in kids:
            assert procfs.ancestry(kid)[:3] == [kid, shell.pid, os.getpid()]
            assert procfs.cmdline(kid) == ["sleep", "30"]
        assert (
            procfs.ancestry(os.getpid())[-1] == 1 or procfs.parent_pid(procfs.ancestry(os.getpid())[-1]) == 0
        )
        assert marker in procfs.open_files(shell.pid)
        tree = procfs.tree_open_files(shell.pid)
        holders = [pid for pid, files in tree.items() if marker in files]
        # The shell and the background sleep hold it; the foreground sleep closed it (3>&-).
        assert shell.pid in holders and len(holders) == 2
    finally:
        for kid in procfs.descendants(shell.pid):
            os.kill(kid, signal.SIGKILL)
        shell.kill()
        shell.wait()


def test_open_files_lists_paths_only(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(tmp_path, "f")
    with open(path, "w"):
        files = procfs.open_files(os.getpid())
    assert path in files
    assert all(f.startswith("/") for f in files)
    assert path not in procfs.open_files(os.getpid())


def test_cwd_and_cmdline_of_current_process() -> None:
    assert procfs.cwd(os.getpid()) == os.getcwd()
    argv = procfs.cmdline(os.getpid())
    assert argv is not None and argv[0]


def test_open_files_with_modes_tells_writing_from_reading(tmp_path: os.PathLike[str]) -> None:
    base = str(tmp_path)
    written, read, both = (os.path.join(base, n) for n in ("w.jsonl", "r.jsonl", "rw.jsonl"))
    for path in (written, read, both):
        open(path, "w").close()
    with open(written, "a"), open(read), open(both, "r+"):
        found = {f.path: f.writable for f in procfs.open_files_with_modes(os.getpid()) if f.path.startswith(base)}
    assert found == {written: True, read: False, both: True}
    assert procfs.open_files_with_modes(2**22 + 7) == []


def test_environ_value_reads_a_process_s_environment() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], env={"CODEX_HOME": "/x/y", "HOME": "/h"})
    try:
        time.sleep(0.2)
        assert procfs.environ_value(proc.pid, "CODEX_HOME") == "/x/y"
        assert procfs.environ_value(proc.pid, "HOME") == "/h"
        assert procfs.environ_value(proc.pid, "NOPE") is None
    finally:
        proc.kill()
        proc.wait()
    assert procfs.environ_value(proc.pid, "HOME") is None
