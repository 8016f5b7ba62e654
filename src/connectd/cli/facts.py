"""What this machine looks like, for the advice of :mod:`connectcore.advice`: how connectd was run,
whether a tmux server runs, which harnesses are on PATH, who holds a port. Reads only; decides nothing.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import platformdirs

from connectcore import advice
from connectd.tmux import procfs


def default_data_dir() -> Path:
    """The data directory a command uses when none is named: ``CONNECT_DATA_DIR``, else the platform's."""
    return Path(os.environ.get("CONNECT_DATA_DIR") or platformdirs.user_data_dir("connect"))


def cli_command() -> str:
    """How to run connectd again, as a command printed to the person (``connectd`` when that is on
    PATH; else this script's path, e.g. ``.venv/bin/connectd`` from a checkout, made absolute)."""
    on_path = shutil.which("connectd")
    return advice.cli_command(
        running=os.path.realpath(sys.argv[0]) if sys.argv and sys.argv[0] else "",
        on_path=os.path.realpath(on_path) if on_path else None,
        python=sys.executable,
    )


def tmux_server_running(argv: tuple[str, ...] = ("tmux",)) -> bool:
    """A tmux server answers on the socket ``argv`` names (default: the one a bare ``tmux`` reaches:
    ``$TMUX`` inside a pane, else the default socket under ``$TMUX_TMPDIR``)."""
    if shutil.which(argv[0]) is None:
        return False
    return subprocess.run([*argv, "list-sessions"], capture_output=True).returncode == 0


def harnesses_on_path() -> frozenset[str]:
    return frozenset(name for name in advice.HARNESSES if shutil.which(name))


def port_taken(port: int) -> bool:
    """Something listens on 127.0.0.1:``port`` (a bind there fails)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def connectd_serving(port: int) -> str | None:
    """The data directory of the connectd of ours that listens on ``port`` (Linux ``/proc``): the
    process that holds the listening socket and a ``daemon.lock``. None when there is none, or off Linux."""
    inodes = procfs.tcp_listeners().get(port)
    if not inodes:
        return None
    uid = os.getuid()
    for pid in procfs.all_pids():
        fd_dir = procfs.PROC / str(pid) / "fd"
        try:
            if fd_dir.parent.stat().st_uid != uid:
                continue
            names = os.listdir(fd_dir)
        except OSError:
            continue
        holds = False
        for name in names:
            try:
                target = os.readlink(fd_dir / name)
            except OSError:
                continue
            if target.startswith("socket:[") and target.endswith("]") and target[8:-1].isdigit() and int(target[8:-1]) in inodes:
                holds = True
                break
        if holds:
            lock = next((p for p in procfs.open_files(pid) if p.endswith("/daemon.lock")), None)
            return str(Path(lock).parent) if lock else None
    return None
