"""The naive watcher, the baseline of the watch benchmark: one ``tmux capture-pane -p`` process for
every pane, four times a second, and nothing else. To measure how fast it would see an agent go idle
it also looks for the busy marker ("esc to interrupt") in each capture and prints a line when a
pane's state flips: ``<wall time> <pane> busy|idle``.

    python naive_watcher.py --socket NAME --seconds 60 %1 %2 ...

It stops by itself after ``--seconds`` (or on SIGTERM), then prints ``rounds <n> captures <n>``.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import time

BUSY_MARKER = "esc to interrupt"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", required=True, help="tmux -L socket name")
    ap.add_argument("--hz", type=float, default=4.0)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("panes", nargs="+")
    args = ap.parse_args(argv)
    stop = False

    def on_term(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    tmux = ["tmux", "-u", "-L", args.socket, "-f", "/dev/null"]
    period = 1.0 / args.hz
    busy: dict[str, bool] = {}
    start = time.monotonic()
    rounds = captures = 0
    while not stop and time.monotonic() - start < args.seconds:
        for pane in args.panes:
            proc = subprocess.run([*tmux, "capture-pane", "-p", "-t", pane], capture_output=True)
            captures += 1
            now_busy = BUSY_MARKER in proc.stdout.decode("utf-8", "replace")
            if busy.get(pane) != now_busy:
                busy[pane] = now_busy
                print(f"{time.time():.6f} {pane} {'busy' if now_busy else 'idle'}", flush=True)
        rounds += 1
        next_round = start + rounds * period
        delay = next_round - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    print(f"rounds {rounds} captures {captures} seconds {time.monotonic() - start:.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
