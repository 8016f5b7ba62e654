"""Reproduce tmux 3.3a's crash on ``respawn-pane`` under a lagging control-mode client (docs/compatibility.md,
"Known gaps"): usage ``python scripts/tmux_respawn_crash.py [--detach]``; exit status 1 if the server died
(on tmux 3.3a, 2026-12-07: 7 runs of 8; with ``--detach``, none of the 6 runs that reached the respawn).

A pane prints 100 KB (for at most 2 s: a client that lags far enough stops tmux reading the pane) and
exits (``remain-on-exit on``) while a control client attached to its session does not read its output;
the pane is then respawned with a command that prints one byte. tmux 3.3a keeps the
pane's offsets into its old output buffer across the respawn, so the control client's lag becomes a length
that underflows at the new process's first output and the server reads past its buffer (a segfault in its
input parser; fixed upstream by tmux commit 4714f478f, GitHub issue 5498, in no release Debian ships).
With ``--detach`` the control client is detached before the respawn: the server lives. Runs its own tmux
server on a private socket and kills it at the end.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time


def main() -> int:
    tmux = ["tmux", "-L", f"respawn-crash-{os.getpid()}", "-f", "/dev/null"]

    def run(*args: str) -> str:
        done = subprocess.run([*tmux, *args], capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"tmux {' '.join(args)}: {done.stderr.strip() or 'failed'}")
        return done.stdout.strip()

    run("new-session", "-d", "-s", "s", "-x", "80", "-y", "24", "sleep 1000")
    run("set-option", "-g", "remain-on-exit", "on")
    prints = "sleep 0.5; timeout 2 sh -c \"head -c 100000 /dev/zero | tr '\\\\0' x\""
    pane = run("new-window", "-d", "-P", "-F", "#{pane_id}", prints)
    attach = [*tmux, "-C", "attach-session", "-t", "s"]
    reader = subprocess.Popen(attach, stdin=subprocess.PIPE, stdout=subprocess.PIPE)  # never read: it lags
    try:
        deadline = time.monotonic() + 20
        while run("display-message", "-p", "-t", pane, "#{pane_dead}") != "1":
            if time.monotonic() > deadline:
                print("the pane never ended", file=sys.stderr)
                return 2
            time.sleep(0.05)
        if "--detach" in sys.argv:
            reader.kill()
            reader.wait()
            time.sleep(0.3)
        run("respawn-pane", "-k", "-t", pane, "printf y; sleep 3")
        time.sleep(0.5)
        alive = subprocess.run([*tmux, "list-panes", "-a"], capture_output=True).returncode == 0
        print("the tmux server lives" if alive else "the tmux server crashed")
        return 0 if alive else 1
    finally:
        reader.kill()
        subprocess.run([*tmux, "kill-server"], capture_output=True)


if __name__ == "__main__":
    sys.exit(main())
