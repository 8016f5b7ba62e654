"""An agent's release from its program, when its screen shows no banner: ``<executable> --version``.

The watcher reads an agent's release from its session banner first (:func:`connectcore.releases.
shown_on_screen`: the running process's own word, right even when the program on disk was updated
since). A pane whose banner scrolled away (a long session, a daemon started later) is asked here,
once per incarnation: the executable of the harness's process in the pane's tree (``/proc/<pid>/exe``,
named like the harness: ``claude``, ``claude.exe``, ``codex``, or a native install's version number)
is run with ``--version``, and its output counts only if it names the harness
(:func:`connectcore.releases.from_version_output`). An executable replaced on disk since the process
started (``(deleted)``) is not asked: its answer would be the new release, not the running one.
Answers are kept per executable (path, inode, mtime).

The program is asked in a throwaway home: ``codex --version`` writes helper binaries under
``$CODEX_HOME/tmp`` (seen on 0.171.0), and nothing of the person's own state may change because
connectd asked. It gets ``HOME``, ``CODEX_HOME`` and ``CLAUDE_CONFIG_DIR`` inside a temporary folder
(removed afterwards), ``PATH`` and a locale, and nothing else of the daemon's environment.
"""

from __future__ import annotations

import logging
import os
import subprocess
import tempfile
from pathlib import Path

from connectcore import releases
from connectcore.screen_harnesses import RULES, VERSION_COMMAND, Harness
from connectd.tmux import procfs

log = logging.getLogger("connectd.release")

TIMEOUT = 10.0


def executables(root_pid: int, harness: str) -> list[str]:
    """The executables of the processes in ``root_pid``'s tree that are named like ``harness``."""
    try:
        commands = RULES[Harness(harness)].commands
    except (KeyError, ValueError):
        return []
    found: list[str] = []
    for pid in [root_pid, *procfs.descendants(root_pid)]:
        try:
            exe = os.readlink(procfs.PROC / str(pid) / "exe")
        except OSError:
            continue
        if exe.endswith(" (deleted)") or exe in found:
            continue
        name = Path(exe).name.removesuffix(".exe")
        if name in commands or VERSION_COMMAND.match(name):
            found.append(exe)
    return found


class ReleaseProbe:
    def __init__(self) -> None:
        self._answers: dict[tuple[str, int, int, int], str | None] = {}

    def release(self, root_pid: int, harness: str) -> str | None:
        """The release the harness's program in this pane tree names, or None."""
        for exe in executables(root_pid, harness):
            try:
                st = os.stat(exe)
            except OSError:
                continue
            key = (exe, st.st_dev, st.st_ino, st.st_mtime_ns)
            if key not in self._answers:
                self._answers[key] = self._ask(exe, harness)
            if self._answers[key] is not None:
                return self._answers[key]
        return None

    @staticmethod
    def _ask(exe: str, harness: str) -> str | None:
        with tempfile.TemporaryDirectory(prefix="connectd-version-") as home:
            env = {
                "HOME": home,
                "CODEX_HOME": os.path.join(home, ".codex"),
                "CLAUDE_CONFIG_DIR": os.path.join(home, ".claude"),
                "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
                "LANG": "C.UTF-8",
            }
            try:
                proc = subprocess.run([exe, "--version"], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                      timeout=TIMEOUT, cwd=home, env=env, check=False)
            except (OSError, subprocess.SubprocessError) as exc:
                log.info("%s --version: %s", exe, exc)
                return None
        return releases.from_version_output(harness, proc.stdout)


class NoProbe(ReleaseProbe):
    """Asks nothing (the simulation: its panes' processes are not real)."""

    def release(self, root_pid: int, harness: str) -> str | None:
        return None
