"""Faults at the tmux boundary, on real parts: a ``tmux`` wrapper first on the daemon's PATH fails one
call of a chosen kind, once, at the moment that matters. The daemon keeps serving, and every message
and restart ends as the core says.

The wrapper reads ``$CONNECTD_TEST_FAULTS/<tmux subcommand>``: when that file exists, the first call
of that subcommand whose arguments contain the file's text (a pane id, or anything when empty) takes
the file away atomically and fails with tmux's own kind of error. ``after-<subcommand>`` holding
``<other subcommand> <text>`` arms that second fault when the first subcommand runs (a fault at the
moment right after a paste, say). ``kill-<subcommand>`` is the same with a harder fault: the wrapper
SIGKILLs its caller (the daemon) and the call never reaches tmux. Only the daemon has the variable.
"""

from __future__ import annotations

import os
import signal
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.integration.test_daemon_e2e import agents, get_message, make_busy, run, send
from tests.integration.test_daemon_scenarios import _restart_option, _whoami
from tests.support.daemon import DaemonProcess, wait_for
from tests.support.tmux_server import TmuxServer

WRAPPER = r"""#!/bin/bash
args=("$@"); i=0; sub=""
while [ $i -lt ${#args[@]} ]; do
  case "${args[$i]}" in -L|-S|-f) i=$((i+2));; -*) i=$((i+1));; *) sub="${args[$i]}"; break;; esac
done
f="$CONNECTD_TEST_FAULTS/$sub"
chain="$CONNECTD_TEST_FAULTS/after-$sub"
if [ -n "$sub" ] && [ -e "$chain" ]; then
  read -r next want < "$chain" && mv "$chain" "$chain.fired" 2>/dev/null && printf '%s' "$want" > "$CONNECTD_TEST_FAULTS/$next"
fi
if [ -n "$sub" ] && [ -e "$f" ]; then
  want=$(cat "$f" 2>/dev/null)
  if [ -z "$want" ] || [[ " $* " == *" $want "* ]]; then
    if mv "$f" "$f.fired" 2>/dev/null; then echo "injected fault: $sub failed" >&2; exit 1; fi
  fi
fi
k="$CONNECTD_TEST_FAULTS/kill-$sub"
if [ -n "$sub" ] && [ -e "$k" ]; then
  want=$(cat "$k" 2>/dev/null)
  if [ -z "$want" ] || [[ " $* " == *" $want "* ]]; then
    if mv "$k" "$k.fired" 2>/dev/null; then kill -9 "$PPID"; exit 1; fi
  fi
fi
exec REAL "$@"
"""


class Faults:
    def __init__(self, root: Path) -> None:
        self.dir = root / "faults"
        self.dir.mkdir()
        self.bin = root / "fault-bin"
        self.bin.mkdir()
        real = next(p for p in ("/usr/bin/tmux", "/usr/local/bin/tmux") if os.path.exists(p))
        wrapper = self.bin / "tmux"
        wrapper.write_text(WRAPPER.replace("REAL", real))
        wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)

    def arm(self, subcommand: str, match: str = "") -> None:
        (self.dir / subcommand).write_text(match)

    def arm_after(self, trigger: str, subcommand: str, match: str = "") -> None:
        (self.dir / f"after-{trigger}").write_text(f"{subcommand} {match}\n")

    def fired(self, subcommand: str) -> bool:
        return (self.dir / f"{subcommand}.fired").exists()


@contextmanager
def faulty_daemon(tmp_path: Path, tmux: TmuxServer) -> Iterator[tuple[DaemonProcess, Faults]]:
    faults = Faults(tmp_path)
    saved = dict(os.environ)
    os.environ["PATH"] = f"{faults.bin}{os.pathsep}{os.environ['PATH']}"
    os.environ["CONNECTD_TEST_FAULTS"] = str(faults.dir)
    try:
        daemon = DaemonProcess(tmp_path, tmux).start()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    try:
        yield daemon, faults
    finally:
        code = daemon.stop()
        assert code == 0, f"the daemon did not end cleanly ({code}):\n{daemon.log_text()}"


def _still_serving(daemon: DaemonProcess) -> None:
    assert daemon.proc is not None and daemon.proc.poll() is None, daemon.log_text()
    assert daemon.http().get("/api/agents").status_code == 200


def test_a_capture_that_fails_inside_the_guard_makes_the_message_wait(tmp_path: Path, tmux: TmuxServer) -> None:
    with faulty_daemon(tmp_path, tmux) as (d, faults):
        a, b = agents(d, "a", "b")
        run(send, d, a, b.address, "after a failed guard", "m-guard")
        card = d.wait_card()
        faults.arm("capture-pane", b.pane)  # b is idle and still: the next capture of b is the guard's
        d.api("POST", f"/api/cards/{card['id']}/approve", {"pair": True})
        wait_for(lambda: faults.fired("capture-pane"), 10, "the fault")
        assert run(get_message, d, a, "m-guard", 20.0)["outcome"] == "delivered"
        assert sum("after a failed guard" in p for p in b.prompts()) == 1
        _still_serving(d)


# A message's paste and its owed Enter are one tmux call (load-buffer; paste-buffer; set-option; run-shell
# -b -C -d 'if-shell ... send-keys Enter'): the early Enter (if-shell) may fail, the fallback still comes.
@pytest.mark.parametrize(("subcommand", "detail"), [("load-buffer", "send failed partway")])
def test_typing_that_fails_partway_is_unconfirmed_and_the_daemon_serves_on(
    tmp_path: Path, tmux: TmuxServer, subcommand: str, detail: str
) -> None:
    with faulty_daemon(tmp_path, tmux) as (d, faults):
        a, b, c = agents(d, "a", "b", "c")
        faults.arm(subcommand, b.pane)
        run(send, d, a, b.address, "typed into a failing pane", "m-type")
        d.api("POST", f"/api/cards/{d.wait_card()['id']}/approve", {"pair": True})
        view = wait_for(lambda: (m := run(get_message, d, a, "m-type"))["outcome"] != "queued" and m, 20, "an outcome")
        assert view["outcome"] == "unconfirmed" and detail in view["reason"], view
        # the daemon still delivers elsewhere
        run(send, d, a, c.address, "to c after the fault", "m-c")
        d.api("POST", f"/api/cards/{d.wait_card()['id']}/approve", {"pair": True})
        assert run(get_message, d, a, "m-c", 20.0)["outcome"] == "delivered"
        _still_serving(d)


def test_a_failed_list_panes_is_retried_and_the_fleet_stays_connected(tmp_path: Path, tmux: TmuxServer) -> None:
    with faulty_daemon(tmp_path, tmux) as (d, faults):
        (a,) = agents(d, "a")
        faults.arm("run-shell", "list-panes")  # list_panes is `run-shell true ; list-panes ...` (it reaps first)
        wait_for(lambda: faults.fired("run-shell"), 10, "the fault")
        time.sleep(1.5)  # a poll round or two after the failure
        assert a.token
        err, payload = run(_whoami, d, a.token)
        assert not err, payload
        _still_serving(d)


def test_a_capture_that_fails_right_after_the_enter_leaves_one_outcome(tmp_path: Path, tmux: TmuxServer) -> None:
    """Whichever capture the fault hits (the confirming re-read or the watcher's), the daemon serves on,
    the message reaches exactly one final outcome, and it is typed at most once."""
    with faulty_daemon(tmp_path, tmux) as (d, faults):
        a, b = agents(d, "a", "b")
        make_busy(d, tmux, b, 2)
        run(send, d, a, b.address, "confirm me", "m-confirm")
        faults.arm_after("load-buffer", "capture-pane", b.pane)  # the paste and Enter arm a capture fault for b
        d.api("POST", f"/api/cards/{d.wait_card()['id']}/approve", {"pair": True})
        wait_for(lambda: faults.fired("capture-pane"), 30, "the fault")
        view = wait_for(lambda: (m := run(get_message, d, a, "m-confirm"))["outcome"] != "queued" and m, 30, "an outcome")
        assert view["outcome"] in {"delivered", "unconfirmed"}, view
        assert run(get_message, d, a, "m-confirm")["outcome"] == view["outcome"]  # final: it never changes
        assert sum("confirm me" in p for p in b.prompts()) == 1
        _still_serving(d)


@pytest.mark.parametrize("subcommand", ["set-option", "respawn-pane"])
def test_a_restart_step_that_fails_ends_in_recovery_with_the_pane_alive(
    tmp_path: Path, tmux: TmuxServer, subcommand: str
) -> None:
    with faulty_daemon(tmp_path, tmux) as (d, faults):
        c = d.launch("c", "off", session="1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d")
        d.wait_ready(c)
        faults.arm(subcommand, c.pane)
        d.api("POST", "/api/restart", {"pane": c.pane, "preset": "observe"})
        wait_for(lambda: faults.fired(subcommand), 30, "the fault")

        def closed() -> bool:
            rows = d.api("GET", "/api/audit?limit=1000")
            return any(r["action"] == "restart.close" for r in rows)

        wait_for(closed, 60, "the restart closed")
        assert _restart_option(tmux, c.pane) == ""  # the temporary remain-on-exit is gone
        assert tmux.tmux("display-message", "-p", "-t", c.pane, "#{pane_dead}").strip() == "0"  # not left dead
        _still_serving(d)


@pytest.mark.parametrize("early_enter", ["send-keys", "if-shell"])
def test_an_exit_command_whose_enter_fails_is_still_submitted(tmp_path: Path, tmux: TmuxServer, early_enter: str) -> None:
    """Issue 22.1: the exit command's Enter is owed by the tmux server like a message's, so a failing
    early Enter (or a daemon gone before it) never leaves ``/exit`` as a draft: the restart completes."""
    with faulty_daemon(tmp_path, tmux) as (d, faults):
        c = d.launch("c", "off", session="6f5e4d3c-2b1a-4c0d-9e8f-7a6b5c4d3e2f")
        d.wait_ready(c)
        faults.arm_after("load-buffer", early_enter, c.pane)  # the exit command's paste arms its Enter's fault
        d.api("POST", "/api/restart", {"pane": c.pane, "preset": "observe"})

        def closed() -> list[str]:
            return [r["outcome"] for r in d.api("GET", "/api/audit?limit=1000") if r["action"] == "restart.close"]

        assert wait_for(closed, 60, "the restart closed") == ["restarted"]
        assert "/exit" not in tmux.tmux("capture-pane", "-p", "-t", c.pane)
        assert wait_for(lambda: d.agent_view(c.pane)["connect"] == "observe", 30, "connected")
        _still_serving(d)


def test_a_daemon_killed_between_the_exit_command_and_its_enter_leaves_no_draft(
    tmp_path: Path, tmux: TmuxServer
) -> None:
    """Issue 22.1: the daemon SIGKILLed after pasting the exit command, as it presses its Enter; `serve`
    again on the same data directory: the exit command is not left as a draft (the server's owed Enter
    submitted it), the restart closes `restarted`, and the next message to that pane is delivered."""
    faults = Faults(tmp_path)
    saved = dict(os.environ)
    os.environ["PATH"] = f"{faults.bin}{os.pathsep}{os.environ['PATH']}"
    os.environ["CONNECTD_TEST_FAULTS"] = str(faults.dir)
    try:
        d = DaemonProcess(tmp_path, tmux).start()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    try:
        (a,) = agents(d, "a")
        c = d.launch("c", "off", session="7a6b5c4d-3e2f-4a1b-8c0d-9e8f7a6b5c4d")
        d.wait_ready(c)
        # the exit command's paste (the only paste) arms the kill at the daemon's own Enter for it
        faults.arm_after("load-buffer", "kill-if-shell", c.pane)
        d.api("POST", "/api/restart", {"pane": c.pane, "preset": "collaborate"})
        assert d.proc is not None
        d.proc.wait(30)
        assert faults.fired("kill-if-shell") and d.stop() == -signal.SIGKILL, d.log_text()
    except BaseException:
        d.stop(signal.SIGKILL)
        raise
    d.start()  # serve again, on the same data directory, with the real tmux
    try:

        def closed() -> list[str]:
            return [r["outcome"] for r in d.api("GET", "/api/audit?limit=1000") if r["action"] == "restart.close"]

        assert wait_for(closed, 60, "the restart closed") == ["restarted"], d.log_text()
        steps = [(r["action"], r["outcome"]) for r in reversed(d.api("GET", "/api/audit?limit=1000"))]
        assert [s for s in steps if s[0].startswith("restart.")] == [
            ("restart.begin", "waiting_idle"), ("restart.exit", "exit_sent"),
            ("restart.respawn", "process_ended"), ("restart.close", "restarted"),
        ], steps
        assert "/exit" not in tmux.tmux("capture-pane", "-p", "-t", c.pane)
        ready = lambda: (v := d.agent_view(c.pane))["connect"] == "collaborate" and v["composer"] == "empty" and v  # noqa: E731
        view = wait_for(ready, 30, "connected, its composer empty")
        err, sent = run(send, d, a, view["address"], "after the restart", "m-after")
        assert not err, sent
        d.api("POST", f"/api/cards/{d.wait_card()['id']}/approve", {"pair": True})
        assert run(get_message, d, a, "m-after", 30.0)["outcome"] == "delivered"
        assert c.prompts() == ["/exit"]  # the first agent: its exit command submitted once, by the Enter owed
        # the relaunched agent (its environment not kept, so no log) shows the message it took, once
        wait_for(lambda: "after the restart" in tmux.tmux("capture-pane", "-p", "-t", c.pane), 10, "the message shown")
        assert tmux.tmux("capture-pane", "-p", "-S", "-200", "-t", c.pane).count("after the restart") == 1
        _still_serving(d)
    finally:
        assert d.stop() == 0, d.log_text()


def test_an_exit_command_a_harness_leaves_in_its_composer_is_told_to_the_person(tmp_path: Path, tmux: TmuxServer) -> None:
    """Issue 22.1 (recovery): a harness that drops the exit command's Enter keeps ``/exit`` as a draft;
    the restart gives up waiting for the exit, leaves the agent alone, and Needs you names the exit
    command until the composer is empty again (it failed before: nothing in Needs you)."""
    with faulty_daemon(tmp_path, tmux) as (d, _faults):
        c = d.launch("c", "off", session="5e4d3c2b-1a0f-4e9d-8c7b-6a5f4e3d2c1b", env={"DEMO_DROP_EXIT_ENTER": "1"})
        d.wait_ready(c)
        d.api("POST", "/api/restart", {"pane": c.pane, "preset": "observe"})

        def closed() -> list[str]:
            return [r["outcome"] for r in d.api("GET", "/api/audit?limit=1000") if r["action"] == "restart.close"]

        assert wait_for(closed, 90, "the restart closed") == ["left_alone"]
        assert "/exit" in tmux.tmux("capture-pane", "-p", "-t", c.pane)  # the harness kept it as a draft
        needs = wait_for(lambda: d.api("GET", "/api/needs"), 30, "a Needs you item")
        assert [(n["pane"], n["message_id"]) for n in needs] == [(c.pane, None)]
        assert "exit command" in needs[0]["summary"] and "'/exit'" in needs[0]["why"]
        tmux.tmux("send-keys", "-t", c.pane, "BSpace", "BSpace", "BSpace", "BSpace", "BSpace")  # the person clears it
        assert wait_for(lambda: d.api("GET", "/api/needs") == [], 30, "the item closed")
        assert c.prompts() == []  # nothing was submitted
        _still_serving(d)
