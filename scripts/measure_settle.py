#!/usr/bin/env python3
"""How long each real harness needs between the end of a bracketed paste and its Enter (issue 12).

    python scripts/measure_settle.py                          # claude, codex, demo; 12 trials per rung
    python scripts/measure_settle.py --harness codex --trials 5 --delays 0,0.01,0.1
    make measure-settle                                       # the same, after `make harnesses`

connect types a message with one tmux call: a bracketed paste, and the server presses Enter
``submit_after`` seconds later (``connectd.tmux.adapter.SyncTmux.paste_text``; the daemon passes
``Timing.settle``, 0.4 s). This script finds out what each harness really needs. For each harness
(the pinned Claude Code and Codex of tests/support/harnesses.py, and the stand-in
``connectd.cli.demo_agent``) it:

- starts the program in its own private tmux server (``tmux -L connect-settle-...``), offline against
  the scripted model server (tests/support/model_server.py) in a private HOME, exactly as the live
  acceptance does (the same home builders, the same pinned binaries);
- attaches a control-mode client (``connectd.tmux.control_mode.ControlModeReader``) to the pane's session
  before the program starts, so every byte the pane draws is seen with the time it arrived;
- waits until the daemon's own screen reader (``connectcore.screen.read_screen``) reads the pane idle
  with an empty composer, and the screen has been still for a moment;
- for each delay of the ladder (in a shuffled order each round) and each text (one line, three lines
  shaped like a delivered message, and a long paste that the harnesses fold into a placeholder),
  calls ``paste_text(pane, text, submit_after=delay)`` exactly as the daemon does, then classifies:

  ``submitted``  the model server (the stand-in: its prompt log) got the text as one user message,
                 unchanged (trailing spaces and CR/LF aside), and nothing else with the trial's tag;
  ``draft``      nothing was sent; the composer still holds the text (the Enter was read as a
                 newline inside the paste, or was swallowed);
  ``lost``       nothing was sent and the composer is empty;
  ``split``      something with the trial's tag was sent, but not the text as one message;
  ``other``      anything else (a screen the reader does not read as idle, a timeout).

  The rung ``echo`` is the alternative strategy: paste without Enter, watch control mode until the
  pane's output shows the whole paste (its last line, or the harness's pasted-text placeholder), then
  press Enter at once (``SyncTmux.press_enter``).

- between trials it lets the turn end (the scripted model answers "OK." at once) or clears a left-over
  draft (``C-e C-u BSpace`` until the reader sees the composer empty; the stand-in: ``BSpace``), and
  checks the pane is idle and empty again before the next trial.

For every trial it also records, from control mode, the time from the paste call to the pane's first
output, to the first output showing the paste's first line, and to the output showing all of it
(the last line or the placeholder): whether "press Enter as soon as the output shows the pasted text"
is a usable rule.

The raw results go to docs/data/settle.json (``--out``); a summary table is printed at the end (the
one docs/delivery.md shows). Every harness runs on the real binaries, one after the other; the run
records the load average as it went, because the machine is shared.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import random
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "src"), str(REPO)]

import anyio  # noqa: E402
import anyio.from_thread  # noqa: E402

from connectcore.screen import Activity, Composer, Reading, read_screen  # noqa: E402
from connectd.cli.demo_agent import install_wrapper  # noqa: E402
from connectd.tmux.adapter import SyncTmux  # noqa: E402
from connectd.tmux.control_mode import ControlModeReader, PaneOutput  # noqa: E402
from tests.support import harnesses as H  # noqa: E402
from tests.support.model_server import ModelServer  # noqa: E402
from tests.support.tmux_server import TmuxServer  # noqa: E402

DEFAULT_DELAYS = (0.0, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.4)
ECHO = "echo"  # the rung that presses Enter when the output shows the paste
HARNESSES = ("claude", "codex", "demo")
KINDS = ("oneline", "multiline", "long", "max")
WIDTH, HEIGHT = 120, 40
SCROLLBACK = 200  # what the daemon's guard captures
GRACE = 3.0  # after the Enter was due: an idle screen still holding the text by then is a draft
STILL = 0.6  # a screen counts as settled once it stayed ready this long
TRIAL_TIMEOUT = 25.0
PLACEHOLDER = re.compile(r"\[Pasted (text|Content)")


# --------------------------------------------------------------------------------------------------
# The texts
# --------------------------------------------------------------------------------------------------


def tag_token(tag: str, line: int) -> str:
    """A word unique to one line of one trial, e.g. ``q7k2x9L3``."""
    return f"{tag}L{line}"


def make_text(kind: str, tag: str) -> tuple[str, list[str]]:
    """The text of one trial and the tokens of its lines (first and last are what echo looks for)."""
    if kind == "oneline":
        return f"Settle probe {tag_token(tag, 1)}: please run the parser tests and report back.", [tag_token(tag, 1)]
    if kind == "multiline":  # the shape of a delivered message: provenance line, then the text
        lines = [
            f"[connect] message ref-{tag_token(tag, 1)} from agent:claude:probe (pane %0).",
            f"Please run the parser tests {tag_token(tag, 2)} and tell me if they pass.",
            f"Reply with send_message when done {tag_token(tag, 3)}.",
        ]
        return "\n".join(lines), [tag_token(tag, i) for i in (1, 2, 3)]
    if kind == "long":  # about 1.6 KB over 20 lines: both harnesses fold it into a placeholder
        lines = [f"line {i:02d} {tag_token(tag, i)} of a long pasted log: value={i * 7} status=ok and more text"
                 for i in range(1, 21)]
        return "\n".join(lines), [tag_token(tag, i) for i in range(1, 21)]
    if kind == "max":  # connect's largest message (max_message_bytes, 8 KiB): more than one read of the pty
        lines = [f"line {i:03d} {tag_token(tag, i)} of the largest message connect sends: v={i * 7:04d} "
                 "status=ok, done" for i in range(1, 101)]
        text = "\n".join(lines)
        assert 7800 < len(text) <= 8 * 1024, len(text)
        return text, [tag_token(tag, i) for i in range(1, 101)]
    raise ValueError(kind)


def normalised(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")).strip()


# --------------------------------------------------------------------------------------------------
# Control mode: every %output of the pane, with the time it arrived
# --------------------------------------------------------------------------------------------------


class OutputLog:
    """A control-mode client on one session, in a background event loop: the arrival time of every
    ``%output`` of each pane (control mode sends the pane's bytes as they come; the screen they make is
    read with capture-pane, since a renderer that redraws only changed cells never sends the text whole)."""

    def __init__(self, tmux_argv: tuple[str, ...], session: str) -> None:
        self.tmux_argv, self.session = tmux_argv, session
        self.outputs: list[tuple[float, str, int]] = []  # (arrival, pane, bytes)
        self.changed = threading.Condition()
        self.attached = threading.Event()
        self._stack = contextlib.ExitStack()

    def start(self) -> OutputLog:
        portal = self._stack.enter_context(anyio.from_thread.start_blocking_portal())
        self._future = portal.start_task_soon(self._read)
        if not self.attached.wait(15):
            raise RuntimeError("the control-mode client did not attach")
        return self

    def stop(self) -> None:
        self._future.cancel()
        self._stack.close()

    async def _read(self) -> None:
        async with ControlModeReader(self.tmux_argv, self.session) as reader:
            async for note in reader:
                self.attached.set()  # the attach reply (%begin/%end) comes first
                if isinstance(note, PaneOutput):
                    now = time.monotonic()
                    with self.changed:
                        self.outputs.append((now, note.pane_id, len(note.data)))
                        self.changed.notify_all()

    def since(self, t0: float, pane: str) -> list[float]:
        """Arrival times of the pane's outputs from ``t0`` on."""
        with self.changed:
            return [t for t, p, _ in self.outputs if t >= t0 and p == pane]

    def wait_after(self, t: float, pane: str, timeout: float) -> float | None:
        """The arrival of the pane's first output after ``t`` (waiting up to ``timeout``), or None."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while True:
                later = [a for a, p, _ in self.outputs if a > t and p == pane]
                if later:
                    return later[-1]
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.changed.wait(left)


# --------------------------------------------------------------------------------------------------
# One harness in its own tmux server
# --------------------------------------------------------------------------------------------------


@dataclass
class Subject:
    name: str  # claude | codex | demo
    release: str
    root: Path
    model: ModelServer | None = None
    key: str = ""
    tmux: TmuxServer | None = None
    sync: SyncTmux | None = None
    pane: str = ""
    log: OutputLog | None = None
    prompt_log: Path | None = None
    command: str = ""
    argv: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    seen_requests: int = 0  # requests before the current trial (only later ones are searched)

    # --- life ---------------------------------------------------------------------------------------

    def start(self) -> None:
        home, cwd = self.root / "home", self.root / "work"
        cwd.mkdir(parents=True)
        (cwd / "notes.txt").write_text("A scratch project for the settle measurement.\n")
        self.key = f"sk-connect-settle-{self.name}-" + "0" * 20 + secrets.token_hex(6)
        if self.name in ("claude", "codex"):
            self.model = ModelServer()
            url = self.model.start()
        if self.name == "claude":
            env = H.claude_home(home, cwd, url, api_key=self.key)
            argv = [str(H.install("claude"))]
        elif self.name == "codex":
            env = H.codex_home(home, cwd, url, api_key=self.key)
            argv = [str(H.install("codex")), *H.CODEX_IN_PROCESS]
        else:
            env = H.base_env(home)
            (home / "tmp").mkdir(parents=True, exist_ok=True)
            self.prompt_log = self.root / "prompts.jsonl"
            env.update({"DEMO_AGENT_LOG": str(self.prompt_log), "DEMO_AGENT_NAME": "settle probe",
                        "DEMO_BUSY_SECONDS": "0.3"})
            argv = [str(install_wrapper(self.root / "bin"))]
        # a private tmux server whose own environment is private too (as the live rig's)
        self.tmux = TmuxServer(f"connect-settle-{self.name}")
        self.tmux.env = H.base_env(self.root / "tmux-home")
        (self.root / "tmux-home" / "tmp").mkdir(parents=True, exist_ok=True)
        if os.environ.get("TMUX_TMPDIR"):
            self.tmux.env["TMUX_TMPDIR"] = os.environ["TMUX_TMPDIR"]
        # the session first (a placeholder process), the control client on it, then the program in
        # the same pane: control mode sees everything the program ever draws
        self.pane = self.tmux.new_session("settle", ["sleep", "100000"], width=WIDTH, height=HEIGHT, cwd=str(cwd))
        self.sync = SyncTmux(self.tmux.socket_name, config_file="/dev/null", launcher_dir=self.root / "launch")
        self.log = OutputLog(self.sync.argv, "settle").start()
        self.argv, self.env, self.cwd = argv, env, cwd
        self.restart()

    def restart(self) -> None:
        """(Re)start the program in the pane: each round runs a fresh process, so a conversation never
        grows past one round's prompts."""
        assert self.sync is not None and self.cwd is not None
        self.sync.respawn(self.pane, self.argv, str(self.cwd), self.env, kill=True)

    def close(self) -> None:
        """Stop everything; returns once the program is gone (Claude Code writes its ``.claude.json``
        as it exits, which would otherwise land in a home already removed)."""
        program = None
        if self.tmux is not None and self.pane:
            with contextlib.suppress(Exception):
                program = self.tmux.pane_pid(self.pane)
        if self.log is not None:
            with contextlib.suppress(Exception):
                self.log.stop()
        if self.tmux is not None:
            self.tmux.kill()
        if self.model is not None:
            self.model.stop()
        H.reap(self.root)
        deadline = time.monotonic() + 10
        while program is not None and Path(f"/proc/{program}").exists() and time.monotonic() < deadline:
            time.sleep(0.1)

    # --- reading ------------------------------------------------------------------------------------

    def read(self) -> tuple[Reading, str]:
        assert self.sync is not None
        capture = self.sync.capture(self.pane, SCROLLBACK)
        command = self.sync.run("display-message", "-p", "-t", self.pane, "#{pane_current_command}").strip()
        self.command = command
        return read_screen(capture.text, command, capture.cursor, height=capture.height), capture.text

    def wait_ready(self, timeout: float = 60.0, still: float = STILL) -> bool:
        """Idle with an empty composer (as the daemon reads it), the screen unchanged for ``still``."""
        deadline = time.monotonic() + timeout
        since, fingerprint = None, None
        while time.monotonic() < deadline:
            reading, _ = self.read()
            if reading.ready_for_message and reading.fingerprint == fingerprint and since is not None:
                if time.monotonic() - since >= still:
                    return True
            elif reading.ready_for_message:
                since, fingerprint = time.monotonic(), reading.fingerprint
            else:
                since, fingerprint = None, None
            time.sleep(0.1)
        return False

    def mark(self) -> None:
        """Remember how many requests came so far: :meth:`received` looks only at later ones."""
        if self.model is not None:
            self.seen_requests = len(self.model.requests)

    def received(self, tag: str) -> list[str]:
        """Every prompt text the program sent on since :meth:`mark` that carries the trial's tag."""
        if self.prompt_log is not None:
            if not self.prompt_log.exists():
                return []
            rows = [json.loads(line) for line in self.prompt_log.read_text().splitlines() if line.strip()]
            return [r["prompt"] for r in rows if tag in r.get("prompt", "")]
        assert self.model is not None
        found: list[str] = []
        for request in self.model.requests[self.seen_requests:]:
            if request.harness != self.name or not request.scripted or request.api_key != self.key:
                continue
            texts = [t for t in request.user_texts if tag in t]
            if texts:
                # a harness resends the whole conversation: count a prompt once, by its text
                found += [t for t in texts if t not in found]
        return found

    # --- input --------------------------------------------------------------------------------------

    def clear(self) -> bool:
        """Remove a left-over draft the harness's way; True once the reader sees the composer empty."""
        assert self.sync is not None
        for _ in range(60):
            reading, _ = self.read()
            if reading.composer is Composer.EMPTY:
                return self.wait_ready(timeout=10)
            if self.name == "demo":  # the stand-in knows Backspace only
                self.sync.run("send-keys", "-t", self.pane, "-N", "400", "BSpace")
            else:
                self.sync.run("send-keys", "-t", self.pane, "C-e", "C-u", "BSpace")
            time.sleep(0.15)
        return False


# --------------------------------------------------------------------------------------------------
# One trial
# --------------------------------------------------------------------------------------------------


def composer_excerpt(screen: str, lines: int = 14) -> str:
    rows = [row.rstrip() for row in screen.rstrip("\n").split("\n")]
    return "\n".join(rows[-lines:])


def shown(screen: str, reading: Reading, last_token: str) -> bool:
    """The pane shows the whole paste in its composer: the composer is a draft (it was empty) and the
    paste's last line, or the harness's pasted-text placeholder, is on the bottom of the screen."""
    if reading.composer is not Composer.DRAFT:
        return False
    bottom = composer_excerpt(screen, 30)
    return last_token in bottom or PLACEHOLDER.search(composer_excerpt(screen, 12)) is not None


def cursor_below(subject: Subject, last_token: str) -> bool | None:
    """Whether the cursor sits on a line below the draft's last line (or placeholder): the Enter was
    read as a newline. None when the draft's last line is not on screen."""
    assert subject.sync is not None
    capture = subject.sync.capture(subject.pane)
    rows = capture.text.split("\n")
    found = [i for i, row in enumerate(rows) if last_token in row or PLACEHOLDER.search(row)]
    return capture.cursor[1] > found[-1] if found else None


def wait_shown(subject: Subject, t0: float, last_token: str, timeout: float) -> tuple[float, float] | None:
    """Paste echo as a daemon could see it: on each new ``%output`` of the pane, capture it and read it.
    Returns (arrival of the output after which the capture showed the paste, time of that capture)."""
    assert subject.log is not None
    deadline, checked = time.monotonic() + timeout, t0
    while True:
        arrival = subject.log.wait_after(checked, subject.pane, max(0.0, deadline - time.monotonic()))
        if arrival is None:
            return None
        reading, screen = subject.read()
        captured = time.monotonic()
        if shown(screen, reading, last_token):
            return arrival, captured
        checked = arrival


def trial(subject: Subject, kind: str, delay: float | str, round_no: int, method: str = "paste") -> dict[str, Any]:
    """One paste (or, for the control experiment, ``method="typed"``: the same text typed with
    ``send-keys -l``) and its Enter ``delay`` seconds later from the tmux server; the outcome."""
    assert subject.sync is not None and subject.log is not None
    tag = "".join(random.choice("bcdfghjkmnpqrstvwxz") for _ in range(4)) + secrets.token_hex(2)
    text, tokens = make_text(kind, tag)
    record: dict[str, Any] = {"harness": subject.name, "release": subject.release, "method": method, "kind": kind,
                              "delay": delay, "round": round_no, "tag": tag, "chars": len(text),
                              "lines": text.count("\n") + 1, "load": os.getloadavg()[0],
                              "wall": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")}
    subject.mark()
    t0 = time.monotonic()
    if delay == ECHO:
        subject.sync.paste_text(subject.pane, text)
        t1 = time.monotonic()
        seen = wait_shown(subject, t0, tokens[-1], timeout=10.0)
        if seen is not None:
            subject.sync.press_enter(subject.pane)
            record["echo_output_s"] = round(seen[0] - t0, 4)
            record["echo_capture_s"] = round(seen[1] - t0, 4)
        enter_due = time.monotonic()
        record["enter_after_paste_s"] = round(enter_due - t0, 4) if seen is not None else None
    elif method == "typed":
        assert isinstance(delay, float) and kind == "oneline"
        # the same single-call shape as paste_text, with the text typed instead of pasted
        subject.sync.run("send-keys", "-t", subject.pane, "-l", "--", text, ";", "run-shell", "-b", "-C", "-d",
                         f"{delay:.3f}", f"send-keys -t {subject.pane} Enter")
        t1 = time.monotonic()
        enter_due = t1 + delay
    else:
        assert isinstance(delay, float)
        subject.sync.paste_text(subject.pane, text, submit_after=delay)
        t1 = time.monotonic()
        enter_due = t1 + delay
    record["paste_call_s"] = round(t1 - t0, 4)

    # the outcome
    outcome, detail = "other", ""
    draft_since: tuple[float, str] | None = None
    deadline = t0 + TRIAL_TIMEOUT
    while True:
        time.sleep(0.1)
        if subject.received(tag):
            time.sleep(0.8)  # a split prompt sends its second half right after the first
            got = subject.received(tag)
            if len(got) == 1 and normalised(text) in normalised(got[0]):
                outcome = "submitted"
                record["as_sent"] = "same" if normalised(got[0]) == normalised(text) else "wrapped"
                if record["as_sent"] == "wrapped":
                    record["wrapping"] = got[0].replace(text, "<TEXT>")[:300]
            else:
                outcome, detail = "split", json.dumps(got)[:3000]
            break
        reading, _ = subject.read()
        now = time.monotonic()
        if now >= enter_due + GRACE and reading.activity is not Activity.BUSY:
            # a draft: the text still in the composer, the screen still (the reader may not call the
            # screen idle: a cursor on a new empty composer line reads as unknown)
            if reading.composer is Composer.DRAFT:
                if draft_since is not None and draft_since[1] == reading.fingerprint and now - draft_since[0] >= 0.5:
                    outcome = "draft"
                    record["enter_became_newline"] = cursor_below(subject, tokens[-1])
                    break
                if draft_since is None or draft_since[1] != reading.fingerprint:
                    draft_since = (now, reading.fingerprint)
            elif reading.composer is Composer.EMPTY and reading.activity is Activity.IDLE:
                outcome = "lost"
                break
        if now > deadline:
            outcome, detail = "other", f"timeout: reading {reading.activity}/{reading.composer}"
            break
    record["outcome"] = outcome
    if detail:
        record["detail"] = detail
    if outcome != "submitted":
        record["screen"] = composer_excerpt(subject.read()[1])

    # what control mode saw: when the pane drew after the paste call (relative to its start)
    outputs = [round(t - t0, 4) for t in subject.log.since(t0, subject.pane)]
    record["first_output_s"] = outputs[0] if outputs else None
    record["outputs_s"] = [t for t in outputs if t <= 1.0][:40]

    # back to idle and empty for the next trial
    if outcome in ("draft", "other", "split"):
        record["cleared"] = subject.clear()
    ready = subject.wait_ready(timeout=60)
    if not ready:
        subject.clear()
        ready = subject.wait_ready(timeout=30)
    record["ready_after"] = ready
    if outcome in ("draft", "lost") and subject.received(tag):
        record["outcome"], record["detail"] = "other", "sent after it was read as not sent: " + json.dumps(
            subject.received(tag))[:2000]
    return record


# --------------------------------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------------------------------


def release_of(name: str) -> str:
    if name == "demo":
        head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True).stdout.strip()
        return f"connectd.cli.demo_agent@{head or 'unknown'}"
    return H.version(name)


def measure(name: str, delays: list[float | str], kinds: list[str], trials: int, typed_trials: int,
            progress: Callable[[str], None]) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix=f"connect-settle-{name}-"))
    subject = Subject(name, release_of(name), root)
    started = time.monotonic()
    result: dict[str, Any] = {"harness": name, "release": subject.release, "trials": [],
                              "load_start": list(os.getloadavg())}
    try:
        subject.start()
        result["warmups"] = []

        def fresh(round_no: int) -> None:
            """A fresh process, idle and empty, and one warm-up prompt with a generous settle, not
            counted (first-prompt effects)."""
            if round_no > 1:
                subject.restart()
            begun = time.monotonic()
            if not subject.wait_ready(timeout=90, still=2.0):
                raise RuntimeError(f"{name} never read idle with an empty composer:\n{subject.read()[1]}")
            warm = trial(subject, "oneline", 1.0, round_no)
            # ready_s: from the (re)start until the pane read idle and empty for 2 s AND the warm-up was answered
            result["warmups"].append({"round": round_no, "ready_s": round(time.monotonic() - begun, 1),
                                      "outcome": warm["outcome"]})
            result["command"] = subject.command
            progress(f"{name} {subject.release}: round {round_no}: ready and warmed up after "
                     f"{result['warmups'][-1]['ready_s']}s; warm-up {warm['outcome']}")

        for round_no in range(1, trials + 1):
            fresh(round_no)
            order = [(d, k) for d in delays for k in kinds]
            random.shuffle(order)
            for delay, kind in order:
                record = trial(subject, kind, delay, round_no)
                result["trials"].append(record)
                progress(f"{name} r{round_no} {kind:9} delay={delay!s:6} {record['outcome']:9} "
                         f"first output {record['first_output_s']} echo {record.get('echo_output_s', '-')} "
                         f"load {record['load']:.2f}")
                if not record["ready_after"]:
                    raise RuntimeError(f"{name}: the pane did not come back to idle and empty:\n{subject.read()[1]}")
        # the control experiment: the same one-line text typed (send-keys -l), not pasted
        typed_delays = [d for d in delays if d != ECHO]
        for round_no in range(1, typed_trials + 1):
            if round_no == 1 or round_no % 3 == 1:
                fresh(trials + round_no)
            order = list(typed_delays)
            random.shuffle(order)
            for delay in order:
                record = trial(subject, "oneline", delay, round_no, method="typed")
                result["trials"].append(record)
                progress(f"{name} typed r{round_no} delay={delay!s:6} {record['outcome']:9} load {record['load']:.2f}")
                if not record["ready_after"]:
                    raise RuntimeError(f"{name}: the pane did not come back to idle and empty:\n{subject.read()[1]}")
    except Exception as exc:  # noqa: BLE001 - recorded: a harness that cannot be driven says why
        result["error"] = f"{type(exc).__name__}: {exc}"
        progress(f"{name}: stopped: {result['error'][:2000]}")
    finally:
        result["load_end"] = list(os.getloadavg())
        result["minutes"] = round((time.monotonic() - started) / 60, 1)
        subject.close()
        shutil.rmtree(root, ignore_errors=True)
    return result


def summarise(results: list[dict[str, Any]], delays: list[float | str]) -> dict[str, Any]:
    """Per harness: counts per (delay, kind) and per delay, the smallest delay from which every trial
    of every larger delay too was submitted, and echo latencies."""
    out: dict[str, Any] = {}
    for result in results:
        for method in ("paste", "typed"):
            rows = [r for r in result["trials"] if r.get("method", "paste") == method]
            if rows:
                out.setdefault(result["harness"], {"release": result["release"]})[method] = _summary(rows, delays)
        if "error" in result:
            out.setdefault(result["harness"], {"release": result["release"]})["error"] = result["error"]
    return out


def _summary(rows: list[dict[str, Any]], delays: list[float | str]) -> dict[str, Any]:
    outcomes = ("submitted", "draft", "lost", "split", "other")
    table = []
    for delay in delays:
        at = [r for r in rows if r["delay"] == delay]
        if not at:
            continue
        counts = {o: sum(1 for r in at if r["outcome"] == o) for o in outcomes}
        per_kind = {k: {o: sum(1 for r in at if r["kind"] == k and r["outcome"] == o) for o in outcomes}
                    for k in KINDS if any(r["kind"] == k for r in at)}
        table.append({"delay": delay, "trials": len(at), **counts, "by_kind": per_kind})
    numeric = [row for row in table if not isinstance(row["delay"], str)]
    smallest = next((row["delay"] for i, row in enumerate(numeric)
                     if all(r["submitted"] == r["trials"] for r in numeric[i:])), None)

    def spread(key: str, kind: str | None = None) -> dict[str, float | int] | None:
        return quantiles(sorted(r[key] for r in rows if r.get(key) is not None and kind in (None, r["kind"])))

    # trials whose Enter was due before the pane drew anything after the paste: the harness had not
    # redrawn (not even started to) when the Enter came
    early = [r for r in rows if not isinstance(r["delay"], str) and r.get("first_output_s") is not None
             and r["paste_call_s"] + r["delay"] < r["first_output_s"]]
    drafts = [r for r in rows if r["outcome"] == "draft"]
    return {"table": table, "smallest_all_submitted": smallest,
            "echo_output_s": spread("echo_output_s"),
            "echo_output_s_by_kind": {k: spread("echo_output_s", k) for k in KINDS},
            "first_output_s": spread("first_output_s"),
            "enter_before_first_output": {"trials": len(early),
                                          "submitted": sum(1 for r in early if r["outcome"] == "submitted")},
            "as_sent_by_kind": {k: {a: sum(1 for r in rows if r["kind"] == k and r.get("as_sent") == a)
                                    for a in ("same", "wrapped")} for k in KINDS if any(r["kind"] == k for r in rows)},
            "wrapping_examples": sorted({r["wrapping"][:120] for r in rows if r.get("wrapping")})[:3],
            "drafts_with_enter_as_newline": {"drafts": len(drafts),
                                             "newline": sum(1 for r in drafts if r.get("enter_became_newline"))},
            "load_1min": {"min": round(min(r["load"] for r in rows), 2), "max": round(max(r["load"] for r in rows), 2)}}


def quantiles(values: list[float]) -> dict[str, float | int] | None:
    if not values:
        return None

    def q(p: float) -> float:
        return values[min(len(values) - 1, int(round(p * (len(values) - 1))))]

    return {"n": len(values), "min": values[0], "p50": q(0.5), "p95": q(0.95), "max": values[-1]}


def markdown(summary: dict[str, Any], method: str = "paste") -> str:
    lines = ["| Harness | Release | Delay | Trials | Submitted | Left as draft | Other |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for name, per_harness in summary.items():
        for row in (per_harness.get(method) or {}).get("table", ()):
            delay = row["delay"] if isinstance(row["delay"], str) else f"{row['delay'] * 1000:g} ms"
            other = row["lost"] + row["split"] + row["other"]
            lines.append(f"| {name} | {per_harness['release']} | {delay} | {row['trials']} | {row['submitted']} | "
                         f"{row['draft']} | {other} |")
    return "\n".join(lines)


def git_head() -> str:
    return subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()


def dump(data: dict[str, Any]) -> str:
    """The results file: indented, except one line per trial (about 1,300 of them in a full run)."""
    head = json.dumps({k: v for k, v in data.items() if k != "results"}, indent=1, ensure_ascii=False)
    parts = []
    for result in data["results"]:
        meta = json.dumps({k: v for k, v in result.items() if k != "trials"}, ensure_ascii=False)
        trials = ",\n".join("   " + json.dumps(t, ensure_ascii=False) for t in result["trials"])
        parts.append(f'  {meta[:-1]}, "trials": [\n{trials}\n  ]}}')
    return head[:-2] + ',\n "results": [\n' + ",\n".join(parts) + "\n ]\n}\n"


def report(summary: dict[str, Any]) -> None:
    for method in ("paste", "typed"):
        if any(method in per_harness for per_harness in summary.values()):
            print(f"\n{method}:\n" + markdown(summary, method))
    for name, per_harness in summary.items():
        for method in ("paste", "typed"):
            if method in per_harness:
                m = per_harness[method]
                print(f"{name} {method}: smallest delay from which every trial was submitted: "
                      f"{m['smallest_all_submitted']}; paste shown after {m['echo_output_s']}; Enter before "
                      f"the first redraw: {m['enter_before_first_output']}")


def parse_delays(text: str) -> list[float | str]:
    out: list[float | str] = []
    for part in text.split(","):
        part = part.strip()
        if part:
            out.append(ECHO if part == ECHO else float(part))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--harness", action="append", choices=HARNESSES,
                        help="a harness to measure (repeat); default: all three")
    parser.add_argument("--trials", type=int, default=12, help="trials per delay and text (default 12)")
    parser.add_argument("--delays", default=",".join(f"{d:g}" for d in DEFAULT_DELAYS) + f",{ECHO}",
                        help=f"comma-separated seconds, and '{ECHO}' (default: %(default)s)")
    parser.add_argument("--kinds", default=",".join(KINDS), help="texts: %(default)s")
    parser.add_argument("--typed-trials", type=int, default=6,
                        help="trials per delay of the control experiment (the one-line text typed with "
                             "send-keys -l instead of pasted); 0 skips it (default 6)")
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "data" / "settle.json")
    parser.add_argument("--seed", type=int, default=None, help="shuffle seed (default: random)")
    parser.add_argument("--summarise", type=Path, metavar="JSON",
                        help="measure nothing: recompute the summary of a results file (e.g. after changing "
                             "what the summary holds) and print the tables")
    args = parser.parse_args(argv)
    if args.summarise:
        data = json.loads(args.summarise.read_text())
        data["summary"] = summarise(data["results"], data["method"]["delays"])
        data["summary_by"] = f"scripts/measure_settle.py --summarise at {git_head()}"
        args.summarise.write_text(dump(data))
        report(data["summary"])
        return 0
    if args.trials < 0 or args.typed_trials < 0 or args.trials + args.typed_trials == 0:
        parser.error("--trials and --typed-trials must not be negative, and not both 0")
    delays = parse_delays(args.delays)
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    if any(k not in KINDS for k in kinds):
        parser.error(f"--kinds: choose from {', '.join(KINDS)}")
    seed = args.seed if args.seed is not None else secrets.randbelow(10**6)
    random.seed(seed)
    names = args.harness or list(HARNESSES)
    started = dt.datetime.now(dt.UTC)

    def progress(line: str) -> None:
        print(f"[settle {time.strftime('%H:%M:%S')}] {line}", flush=True)

    progress(f"harnesses {names}, delays {delays}, texts {kinds}, {args.trials} trials each, seed {seed}; "
             f"load {os.getloadavg()}")
    results = [measure(name, delays, kinds, args.trials, args.typed_trials, progress) for name in names]
    summary = summarise(results, delays)
    head = git_head()
    tmux_version = subprocess.run(["tmux", "-V"], capture_output=True, text=True).stdout.strip()
    data = {
        "generated_by": "scripts/measure_settle.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "started": started.isoformat(timespec="seconds"),
        "finished": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "commit": head,
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "python": platform.python_version(),
                    "tmux": tmux_version},
        "method": {"delays": delays, "kinds": kinds, "trials_per_delay_and_kind": args.trials,
                   "typed_trials_per_delay": args.typed_trials, "seed": seed,
                   "grace_s": GRACE, "pane": [WIDTH, HEIGHT],
                   "paste": "connectd.tmux.adapter.SyncTmux.paste_text(pane, text, submit_after=delay)",
                   "echo": "paste without submit; on each %output of the pane capture it; Enter "
                           "(SyncTmux.press_enter) once the composer reads as a draft showing the last line "
                           "or a pasted-text placeholder"},
        "summary": summary,
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(dump(data))
    report(summary)
    print(f"\nwrote {args.out}")
    return 1 if any("error" in r for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
