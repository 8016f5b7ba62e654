"""Issue 21.1 on real tmux: which open files bind a hand-started Codex pane to a session.

A file name is written by whoever creates the file, so only Codex's own rollout counts: named like
one, under a Codex sessions directory, held open for writing by the harness process itself. Each
attacking pane below holds a file named after a session id in some other way and must stay unbound,
while a pane that holds its rollout the way Codex does is bound (so the scan did run). (A file held by
a child of the harness is refused by the core rule, tests/unit/test_directory.py.)
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from tests.integration.test_directory_routing import daemon, roots  # noqa: F401 - fixtures
from tests.support.daemon import DaemonProcess, wait_for
from tests.support.tmux_server import TmuxServer

GOOD = "019a2b3c-4d5e-7f60-8a9b-0c1d2e3f4a00"


def _sid(n: int) -> str:
    return f"019a2b3c-4d5e-7f60-8a9b-0c1d2e3f4a{n:02d}"


def _rollout(directory: Path, sid: str) -> Path:
    path = directory / f"rollout-2026-12-03T17-00-00-{sid}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch()
    return path


def _pane(daemon: DaemonProcess, tmux: TmuxServer, command: str) -> str:  # noqa: F811
    pane = tmux.tmux("new-window", "-d", "-P", "-F", "#{pane_id}", "-c", str(daemon.workdir)).strip()
    tmux.tmux("send-keys", "-t", pane, "-l", command)
    tmux.tmux("send-keys", "-t", pane, "Enter")
    return pane


def _codex_holding(path: Path, mode: str) -> str:
    """A process whose argv[0] is ``codex`` that holds ``path`` open in ``mode``."""
    holder = f"import time; f = open({str(path)!r}, {mode!r}); print('codex stand-in'); time.sleep(600)"
    return f'bash -c "exec -a codex {sys.executable} -c \\"{holder}\\""'


def test_only_a_rollout_codex_itself_writes_in_its_sessions_directory_binds(
    daemon: DaemonProcess, tmux: TmuxServer, roots: tuple[Path, Path], tmp_path: Path  # noqa: F811
) -> None:
    sessions = roots[1] / "sessions" / "2026" / "12" / "03"
    elsewhere = tmp_path / "elsewhere"
    read_only = _pane(daemon, tmux, _codex_holding(_rollout(sessions, _sid(1)), "r"))
    outside = _pane(daemon, tmux, _codex_holding(_rollout(elsewhere, _sid(2)), "a"))
    target = elsewhere / "notes.jsonl"
    target.touch()
    link = sessions / f"rollout-2026-12-03T17-00-00-{_sid(4)}.jsonl"
    os.symlink(target, link)
    symlinked = _pane(daemon, tmux, _codex_holding(link, "a"))
    attackers = {read_only: "read-only", outside: "outside sessions", symlinked: "symlink"}
    time.sleep(1.0)
    good = _pane(daemon, tmux, _codex_holding(_rollout(sessions, GOOD), "a"))
    view = wait_for(lambda: (v := daemon.agent_view(good)).get("session") and v, 20, "the genuine rollout binding")
    assert view["session"] == {"harness": "codex", "session_id": GOOD}
    time.sleep(3.0)  # several more bind rounds
    for pane, why in attackers.items():
        view = daemon.agent_view(pane)
        assert view["harness"] == "codex", (why, view)
        assert view.get("session") is None, (why, view)
