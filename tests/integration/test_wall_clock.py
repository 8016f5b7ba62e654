"""Issue 22 (2): a wall clock stepped inside the daemon's life stalls nothing.

The daemon runs with ``time.time`` offset by a file the test writes (a ``sitecustomize`` on its
path; the monotonic clock untouched), as NTP or a person setting the clock would step it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import anyio
import pytest

from tests.integration.test_daemon_e2e import send
from tests.support.daemon import ROOT, DaemonProcess, wait_for
from tests.support.tmux_server import TmuxServer

HOOK = '''
import os, time
_path = os.environ.get("CONNECT_TEST_WALL_OFFSET_FILE")
if _path:
    _real = time.time
    def _offset_time():
        try:
            with open(_path) as fh:
                return _real() + float(fh.read().strip() or 0)
        except (OSError, ValueError):
            return _real()
    time.time = _offset_time
'''


@pytest.mark.parametrize("step", [-120.0, -7200.0, 3600.0])
def test_a_wall_clock_step_does_not_stall_delivery_to_an_idle_recipient(
    tmp_path: Path, tmux: TmuxServer, step: float
) -> None:
    """Before: after the wall clock stepped back 120 s, the next messages to an idle recipient waited
    about 125 s (readings stamped with wall time, and a reading older than the newest one ignored)."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(HOOK)
    offset = tmp_path / "offset"
    offset.write_text("0")
    d = DaemonProcess(tmp_path / "d", tmux)
    d.env_extra = {
        "PYTHONPATH": os.pathsep.join([str(hook), str(ROOT / "src"), str(ROOT)]),
        "CONNECT_TEST_WALL_OFFSET_FILE": str(offset),
    }
    d.start()
    try:
        a, b = d.launch("stepper-a"), d.launch("stepper-b")
        d.wait_ready(a)
        d.wait_ready(b)
        err, sent = anyio.run(send, d, a, b.address, "first", "m-1")
        assert not err, sent
        card = d.wait_card()
        d.api("POST", f"/api/cards/{card['id']}/approve", {"pair": True})
        wait_for(lambda: len(b.prompts()) == 1, 15, "the first message")
        time.sleep(1.5)  # the recipient idle again, read on the unstepped clock
        offset.write_text(str(step))
        time.sleep(0.5)
        for n, text in ((2, "second"), (3, "third")):
            err, sent = anyio.run(send, d, a, b.address, text, f"m-{n}")
            assert not err, sent
            wait_for(lambda n=n: len(b.prompts()) == n, 20, f"message {n} after a wall-clock step of {step} s")
            time.sleep(1.0)
    finally:
        d.stop()
