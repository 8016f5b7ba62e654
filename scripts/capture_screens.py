#!/usr/bin/env python3
"""Capture real screens of Claude Code, Codex, bash and full-screen programs as reader fixtures.

    python scripts/capture_screens.py                      # everything, widths 80 and 160
    python scripts/capture_screens.py --harness codex --width 80 --keep

Installs the pinned harness versions (tests/support/harnesses.py) into .cache/harnesses/ when
missing, starts the scripted model server on 127.0.0.1, runs each program in a private tmux server
with a private temporary HOME, drives it into each state and saves

    tests/fixtures/screens/<harness>/<version>/NN_<state>_<width>.txt   (capture-pane -p, with scrollback)
    tests/fixtures/screens/<harness>/<version>/NN_<state>_<width>.json  (expected reading + capture facts)

The expected reading in the .json is what this script drove the program into, written here in the
state table, never taken from the reader. It also copies the transcripts the real runs wrote into
tests/fixtures/transcripts/{claude,codex}/<version>/ (one short session per harness: two prompts and
one tool call). Nothing secret is involved: the API key is a dummy and every home is temporary.

A step that does not reach its screen in time fails with the last screen shown: after a harness
upgrade that is the first sign its screens changed (see docs/screen-reader.md).

The script adapts to the release it drives (``CONNECT_CLAUDE_VERSION`` / ``CONNECT_CODEX_VERSION``
select one; tests/support/harnesses.py): a state some releases never draw (a startup dialog, the
auto-mode notice, a retry line the release recovers from too fast to show) is waited for together
with the screen that follows it; when the release moves on without drawing it, the state is recorded
as not drawn (``--report``) instead of failing. A dialog whose wording differs from the pinned
release's is still saved as a dialog, but its expected question is left out (noted in the fixture):
the expected reading is never taken from the reader.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support import harnesses as H  # noqa: E402
from tests.support.model_server import Gate, ModelServer, ToolCall, Turn  # noqa: E402

SCREENS = REPO / "tests" / "fixtures" / "screens"
TRANSCRIPTS = REPO / "tests" / "fixtures" / "transcripts"
SIZES = {80: 24, 160: 45}  # width -> height
SCROLLBACK = 30  # history lines saved above the visible screen (the daemon passes "some scrollback")
LONG_SCROLLBACK = 400

Pred = Callable[[H.Capture], bool]


def plain(cap: H.Capture) -> str:
    """The screen with no-break spaces as spaces (Claude Code draws its prompt as '❯' + NBSP)."""
    return cap.text.replace("\u00a0", " ")


def has(*needles: str) -> Pred:
    return lambda cap: all(n in plain(cap) for n in needles)


def has_re(pattern: str) -> Pred:
    rx = re.compile(pattern, re.M)
    return lambda cap: rx.search(plain(cap)) is not None


def both(*preds: Pred) -> Pred:
    return lambda cap: all(p(cap) for p in preds)


def lacks(*needles: str) -> Pred:
    return lambda cap: not any(n in plain(cap) for n in needles)


def dump_json(value: object) -> str:
    """Indented JSON with short lists (cursor, options) kept on one line."""
    text = json.dumps(value, indent=2, ensure_ascii=False)
    return re.sub(r"\[\n\s*([^\[\]{}]*?)\n\s*\]",
                  lambda m: "[" + re.sub(r",\n\s*", ", ", m.group(1)) + "]", text) + "\n"


def expect(harness: str, activity: str, composer: str, question: dict[str, object] | None = None) -> dict[str, object]:
    return {"harness": harness, "activity": activity, "composer": composer, "question": question}


# --------------------------------------------------------------------------------------------------
# The rig: one tmux server, one model server, fixture writing
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reached:
    """A state a wait saw: its predicate, name and settling, and the capture (with ``scrollback``
    lines of history) it held in."""

    pred: Pred
    what: str
    settle: bool
    scrollback: int
    capture: H.Capture


@dataclass
class Pane:
    rig: Rig
    pane: str
    harness_dir: str  # fixture folder: claude, codex, shell
    version: str
    width: int
    height: int
    # the state the last wait reached, until a save has saved it or input was sent
    reached: Reached | None = field(default=None, repr=False)

    def cap(self, scrollback: int = 0) -> H.Capture:
        return self.rig.tmux.capture(self.pane, scrollback=scrollback)

    def wait(self, pred: Pred, what: str, timeout: float = 30.0, settle: bool = True,
             scrollback: int = SCROLLBACK) -> H.Capture:
        """Poll until ``pred`` holds; with ``settle``, also until the screen stops changing. Returns
        the visible screen; each capture is taken with ``scrollback`` lines of history (``pred`` sees
        the visible screen alone), and the one the state was seen in is kept for :meth:`save`."""
        deadline = time.monotonic() + timeout
        last: H.Capture | None = None
        self.reached = None
        while True:
            full = self.cap(scrollback=scrollback)
            cap = visible(full)
            if pred(cap):
                if not settle or (last is not None and last.text == full.text and last.cursor == full.cursor):
                    self.reached = Reached(pred, what, settle, scrollback, full)
                    return cap
                last = full
                time.sleep(0.35)
                continue
            last = None
            if time.monotonic() > deadline:
                raise TimeoutError(f"[{self.harness_dir} {self.width}] waiting for {what}; last screen:\n{cap.text}")
            time.sleep(0.15)

    def optional(self, state: str, pred: Pred, past: Pred, what: str, timeout: float = 30.0,
                 settle: bool = True, hold: float = 0.0) -> H.Capture | None:
        """Wait for ``pred`` (the state) or ``past`` (the screen after it): the capture when the
        release drew the state, None (recorded as not drawn) when it went straight past it. With
        ``hold``, ``past`` must last that long (a startup dialog can come after a first composer)."""
        drawn = self.wait(lambda cap: pred(cap) or past(cap), f"{what} (or the screen after it)",
                          timeout=timeout, settle=settle)
        until = time.monotonic() + hold
        while not pred(drawn) and time.monotonic() < until:
            time.sleep(0.2)
            drawn = self.cap()
        if pred(drawn):
            return self.wait(pred, what, timeout=timeout, settle=settle)
        self.reached = None
        reason = f"{what}: not drawn by {self.harness_dir} {self.version} (it went straight past)"
        self.rig.not_drawn.append({"state": state, "width": self.width, "reason": reason})
        print(f"  not drawn: {state} ({reason})", flush=True)
        return None

    def type(self, text: str) -> None:
        self.reached = None  # the screen is about to change
        self.rig.tmux.type(self.pane, text)

    def keys(self, *keys: str) -> None:
        self.reached = None
        self.rig.tmux.keys(self.pane, *keys)

    def submit(self, text: str) -> None:
        self.type(text)
        time.sleep(0.4)
        self.keys("Enter")

    def paste(self, text: str) -> None:
        self.reached = None
        self.rig.tmux.paste(self.pane, text)

    def save(self, number: int, state: str, expected: dict[str, object], note: str,
             scrollback: int = SCROLLBACK) -> None:
        """Write NN_<state>_<width>.txt/.json from the very capture the last wait saw its state
        (settled) in, never one taken after it (a program redrawing, or a frame half drawn on a
        loaded machine); for moving screens pass ``settle=False`` to the wait. A save with more
        scrollback than the wait took waits for the state again with it; one after input with no
        wait (none here) captures the screen as it is."""
        reached = self.reached
        if reached is not None and reached.scrollback != scrollback:
            self.wait(reached.pred, reached.what, settle=reached.settle, scrollback=scrollback)
            reached = self.reached
        full = reached.capture if reached is not None else self.cap(scrollback=scrollback)
        self.reached = None
        lines = full.text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        history = len(lines) - full.height
        if history < 0:
            raise RuntimeError(f"capture has {len(lines)} lines for a {full.height}-line pane")
        folder = self.rig.screens / self.harness_dir / self.version
        folder.mkdir(parents=True, exist_ok=True)
        stem = f"{number:02d}_{state}_{self.width}"
        question = expected.get("question")
        if isinstance(question, dict) and self.version != H.pinned(self.harness_dir):
            # the dialog questions (prompt and options, in order) are the pinned release's; another
            # release may word, order or add options differently: there only the reading is checked
            expected = {**expected, "question": None}
            note += f" (question not checked: release {self.version}, the pin is {H.pinned(self.harness_dir)})"
        elif isinstance(question, dict):
            screen = full.text.replace("\u00a0", " ")
            words = [str(question["prompt"]), *map(str, question["options"])]  # type: ignore[call-overload]
            if not all(word in screen for word in words):
                # this release words its dialog differently from the pinned one: still a dialog
                # (the script drove it there), but the question is not checked
                expected = {**expected, "question": None}
                note += (f" (this release words the dialog differently from {self.harness_dir} "
                         "pinned release; its question is not checked)")
        (folder / f"{stem}.txt").write_text(full.text)
        meta = {
            "state": state,
            "note": note,
            "program": self.harness_dir,
            "version": self.version,
            "width": full.width,
            "height": full.height,
            "history_lines": history,
            "foreground_command": full.command,
            # as tmux reports it: (column, row from the top of the visible screen, which is the
            # last `height` lines of the text); read_screen(text, command, cursor, height=height)
            "cursor": list(full.cursor),
            "expected": expected,
        }
        (folder / f"{stem}.json").write_text(dump_json(meta))
        self.rig.saved.append(folder / f"{stem}.txt")
        print(f"  saved {self.harness_dir}/{self.version}/{stem}", flush=True)

    def close(self) -> None:
        self.rig.tmux.run("kill-pane", "-t", self.pane, check=False)


class Rig:
    def __init__(self, keep: bool, screens: Path = SCREENS, transcripts: Path = TRANSCRIPTS) -> None:
        self.keep = keep
        self.screens = screens
        self.transcripts = transcripts
        self.root = Path(tempfile.mkdtemp(prefix="connect-capture-"))
        self.server = ModelServer()
        self.url = self.server.start()
        self.tmux = H.Tmux("capture")
        self.homes: list[Path] = []
        self.saved: list[Path] = []
        self.not_drawn: list[dict[str, object]] = []
        self._n = 0

    def place(self, name: str, git: bool = False) -> tuple[Path, Path]:
        """A fresh private home and project folder."""
        self._n += 1
        base = self.root / f"{self._n:02d}-{name}"
        home, cwd = base / "home", base / "proj"
        cwd.mkdir(parents=True)
        (cwd / "notes.txt").write_text("Scratch notes for the capture run.\n")
        if git:
            subprocess.run(["git", "init", "-q", str(cwd)], check=True)
        self.homes.append(home)
        return home, cwd

    def launch(self, harness_dir: str, version: str, argv: list[str], env: dict[str, str], cwd: Path,
               width: int) -> Pane:
        self._n += 1
        name = f"s{self._n}"
        pane = self.tmux.launch(name, argv, env, cwd, width=width, height=SIZES[width])
        return Pane(self, pane, harness_dir, version, width, SIZES[width])

    def close(self) -> None:
        self.tmux.kill()
        self.server.stop()
        for home in self.homes:
            H.reap(home)
        if self.keep:
            print(f"kept {self.root}")
        else:
            shutil.rmtree(self.root, ignore_errors=True)


def visible(cap: H.Capture) -> H.Capture:
    """A capture with scrollback cut to its visible screen (the last ``height`` lines)."""
    lines = cap.text.removesuffix("\n").split("\n")
    return replace(cap, text="\n".join(lines[-cap.height:]) + "\n")


def clear_composer(p: Pane, empty: Pred, what: str, settle: bool = True) -> H.Capture:
    """Delete whatever is in the composer (end of line, kill line, join with the previous line)."""
    for _ in range(40):
        cap = p.cap()
        if empty(cap):
            return p.wait(empty, what, settle=settle)
        p.keys("C-e", "C-u", "BSpace")
        time.sleep(0.15)
    return p.wait(empty, what, timeout=5, settle=settle)


@contextmanager
def step(title: str) -> Iterator[None]:
    started = time.monotonic()
    print(f"- {title}", flush=True)
    yield
    print(f"  ({time.monotonic() - started:.1f}s)", flush=True)


PASTE = "\n".join(f"log line {i}: value={i * 7} status=ok" for i in range(14))
LONG_REPLY = ("This is a long scripted answer that fills the scrollback. " * 9).strip()
# several lines: Codex shows streamed text a whole line at a time
STREAM_REPLY = "\n".join(f"Streaming a scripted answer slowly, line {i}." for i in range(1, 9))


# --------------------------------------------------------------------------------------------------
# Claude Code
# --------------------------------------------------------------------------------------------------

CLAUDE = "claude"
STAMP = r"for (\d+m )?\d+s"


def claude_composer_empty(cap: H.Capture) -> bool:
    lines = cap.text.rstrip("\n").split("\n")
    rules = [i for i, line in enumerate(lines) if line.startswith("────")]
    if len(rules) < 2:
        return False
    top, bottom = rules[-2], rules[-1]
    return bottom == top + 2 and lines[top + 1].rstrip() == "❯"


def claude_idle(cap: H.Capture) -> bool:
    return claude_composer_empty(cap) and "esc to interrupt" not in cap.text


def claude_launch(rig: Rig, width: int, tag: str, **home_kw: object) -> tuple[Pane, Path, Path]:
    home, cwd = rig.place(f"claude-{tag}-{width}")
    env = H.claude_home(home, cwd, rig.url, **home_kw)  # type: ignore[arg-type]
    p = rig.launch(CLAUDE, H.version(CLAUDE), [str(H.binary(CLAUDE))], env, cwd, width)
    return p, home, cwd


def capture_claude(rig: Rig, width: int) -> None:
    v = H.version(CLAUDE)
    srv = rig.server
    c = CLAUDE

    with step(f"claude {v} @{width}: API key dialog"):
        p, _, _ = claude_launch(rig, width, "apikey", approve_key=False)
        if p.optional("startup_apikey", has("Do you want to use this API key?"), claude_idle, "API key dialog",
                      hold=8):
            p.save(1, "startup_apikey", expect(c, "dialog", "absent", {
                "prompt": "Do you want to use this API key?", "options": ["Yes", "No (recommended)"]}),
                "fresh home without customApiKeyResponses: Claude asks whether to use ANTHROPIC_API_KEY")
        p.close()

    with step(f"claude {v} @{width}: trust dialog"):
        p, _, _ = claude_launch(rig, width, "trust", trust=False)
        if p.optional("startup_trust", has("Yes, I trust this folder"), claude_idle, "trust dialog", hold=8):
            p.save(2, "startup_trust", expect(c, "dialog", "absent", {
                "prompt": "Quick safety check: Is this a project you created or one you trust?",
                "options": ["No, exit", "Yes, I trust this folder"]}),
                "project not marked trusted in .claude.json: the workspace trust dialog")
        p.close()

    with step(f"claude {v} @{width}: main session"):
        p, _, _ = claude_launch(rig, width, "main", allow=["Bash(sleep:*)"])
        p.wait(claude_idle, "idle composer")
        p.save(3, "idle_empty", expect(c, "idle", "empty"), "fresh start, onboarding done, composer empty")

        p.type("fix the failing test in parser.py")
        p.wait(has("❯ fix the failing test in parser.py"), "one-line draft")
        p.save(4, "draft_oneline", expect(c, "idle", "draft"), "typed one line, not submitted")

        p.keys("C-a")
        p.wait(lambda cap: cap.cursor[0] == 2 and "parser.py" in cap.text, "cursor at start of draft")
        p.save(5, "draft_cursor_home", expect(c, "idle", "draft"),
               "same draft with the cursor moved to its start (cursor alone must not mean empty)")
        clear_composer(p, claude_composer_empty, "cleared composer")

        p.type("first line of a longer prompt")
        p.keys("M-Enter")
        p.type("second line")
        p.keys("M-Enter")
        p.type("third line")
        p.wait(has("third line"), "multi-line draft")
        p.save(6, "draft_multiline", expect(c, "idle", "draft"), "three lines typed with Meta-Enter")
        clear_composer(p, claude_composer_empty, "cleared composer")

        p.paste(PASTE)
        p.wait(has("[Pasted text #"), "pasted-text placeholder")
        p.save(7, "draft_pasted", expect(c, "idle", "draft"), "14 lines pasted: shown as [Pasted text #1 +13 lines]")
        clear_composer(p, claude_composer_empty, "cleared composer")

        p.type("/cle")
        p.wait(has("/clear"), "slash-command menu")
        p.save(8, "draft_slash_menu", expect(c, "idle", "draft"), "'/cle' typed: the command menu is open")
        clear_composer(p, claude_composer_empty, "cleared composer")
        p.wait(claude_idle, "idle again")

        gate = Gate()
        srv.script("claude", [Turn.held(gate, "The project has a parser and its tests.")])
        p.submit("explain the project layout")
        p.wait(has("esc to interrupt"), "busy (held request)", settle=False)
        assert gate.reached.wait(20)
        p.wait(both(has("esc to interrupt"), has_re(r"\(\d+s")), "spinner with timer", settle=False)
        p.save(9, "busy_waiting", expect(c, "busy", "empty"), "request held open by the model server: spinner, esc to interrupt")

        p.type("and then run the tests")
        p.wait(has("❯ and then run the tests"), "draft while busy", settle=False)
        p.save(10, "busy_with_draft", expect(c, "busy", "draft"), "typed (not submitted) while the turn runs")
        clear_composer(p, claude_composer_empty, "cleared composer while busy", settle=False)
        gate.release()
        p.wait(both(claude_idle, has_re(STAMP)), "finished-turn stamp")
        p.save(11, "finished_stamp", expect(c, "idle", "empty"), "turn done: '✻ <verb> for Ns · done <clock>'")

        srv.script("claude", [Turn.reply(STREAM_REPLY, chunk_delay=0.2, chunk_chars=6)])
        p.submit("write a short summary")
        p.wait(both(has("esc to interrupt"), has("Streaming a scripted")), "streaming text", settle=False)
        p.save(12, "busy_streaming", expect(c, "busy", "empty"), "answer streaming slowly")
        p.wait(both(claude_idle, has_re(STAMP)), "idle after streaming", timeout=60)

        srv.script("claude", [Turn.disconnect(times=3), Turn.reply("Recovered after the dropped connections.")])
        p.submit("try once more")
        if p.optional("busy_retrying", has("retrying in"), has("Recovered after"), "retrying screen", settle=False):
            p.save(13, "busy_retrying", expect(c, "busy", "empty"),
                   "connection dropped: 'retrying in Ns · attempt n/10'")
        p.wait(both(claude_idle, has("Recovered after")), "idle after retries", timeout=60)

        srv.script("claude", [
            # outside the project, so auto mode wants its (unreachable) server-side check
            Turn.tool(ToolCall("Bash", {"command": "ls /tmp", "description": "List the temporary folder"}),
                      text="Let me look."),
            Turn.reply("Listed the temporary folder."),
        ])
        p.submit("what is in /tmp?")
        # 2.1.332 says "Auto mode can't check actions in this session"; 2.1.300 "We're changing auto
        # mode ..." (both dismissed with Enter); older releases go straight to the permission dialog
        automode = lambda cap: has("Auto mode can't check actions")(cap) or has("changing auto mode")(cap)  # noqa: E731
        if p.optional("dialog_automode", automode, has("Do you want to proceed?"), "auto-mode notice dialog"):
            p.save(14, "dialog_automode", expect(c, "dialog", "absent", {
                "prompt": "Auto mode can't check actions in this session", "options": []}),
                "Bash call without an allow rule, offline: auto mode's check cannot run")
            p.keys("Enter")
        # 2.1.300's auto mode runs the call without asking once its notice is dismissed
        if p.optional("dialog_permission", has("Do you want to proceed?"),
                      both(claude_idle, has("Listed the temporary folder.")), "Bash permission dialog"):
            p.save(15, "dialog_permission", expect(c, "dialog", "absent", {
                "prompt": "Do you want to proceed?", "options": ["No", "Yes"]}),
                "tool-permission dialog for the Bash call")
            p.keys("Down")
            time.sleep(0.3)
            p.keys("Enter")
        p.wait(both(claude_idle, has("Listed the temporary folder.")), "idle after tool call")

        srv.script("claude", [Turn.tool(ToolCall("Bash", {"command": "sleep 6", "description": "Wait six seconds"})),
                              Turn.reply("Waited six seconds.")])
        p.submit("wait six seconds")
        p.wait(both(has("esc to interrupt"), has("sleep 6")), "tool running", settle=False)
        p.save(19, "busy_tool_running", expect(c, "busy", "empty"),
               "an allowed Bash call (sleep 6) running; the foreground command stays claude")
        p.wait(both(claude_idle, has("Waited six seconds.")), "idle after the tool ran")

        srv.script("claude", [Turn.fail(400, "scripted invalid request", times=40)])
        p.submit("this request fails")
        p.wait(both(claude_idle, has("API Error")), "API error shown")
        p.save(16, "api_error", expect(c, "idle", "empty"), "HTTP 400 every time: 'API Error: 400 ...' then the prompt")
        srv.clear_script("claude")

        for i in range(6):
            srv.script("claude", [Turn.reply(f"Part {i + 1}. {LONG_REPLY}")])
            p.submit(f"tell me part {i + 1}")
            p.wait(both(claude_idle, has(f"Part {i + 1}.")), f"long reply {i + 1}")
        p.save(17, "long_scrollback", expect(c, "idle", "empty"), "six long answers: hundreds of lines of history",
               scrollback=LONG_SCROLLBACK)

        p.submit("/clear")
        p.wait(both(claude_idle, lacks("Part 6.")), "cleared conversation")
        p.save(18, "after_clear", expect(c, "idle", "empty"), "/clear: new session, empty composer")
        p.close()


def transcript_claude(rig: Rig) -> None:
    v = H.version(CLAUDE)
    with step(f"claude {v}: transcript session"):
        p, home, _ = claude_launch(rig, 80, "transcript", allow=["Bash(ls)", "Bash(ls:*)"])
        p.wait(claude_idle, "idle composer")
        rig.server.script("claude", [
            Turn.reply("Hello! I am ready to help with this project."),
            Turn.tool(ToolCall("Bash", {"command": "ls", "description": "List files in the project"}),
                      text="I will list the files."),
            Turn.reply("The project holds one file, notes.txt."),
        ])
        p.submit("hello, who are you?")
        p.wait(both(claude_idle, has("ready to help")), "first answer")
        p.submit("which files are in this project?")
        p.wait(both(claude_idle, has("holds one file")), "answer after the tool call")
        time.sleep(1.0)
        out = rig.transcripts / CLAUDE / v
        shutil.rmtree(out, ignore_errors=True)
        claude_dir = home / ".claude"
        files = [f for f in claude_dir.glob("projects/*/*.jsonl")]
        files += list(claude_dir.glob("sessions/*.json")) + list(claude_dir.glob("history.jsonl"))
        for f in files:
            dest = out / f.relative_to(claude_dir)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, dest)
            print(f"  copied {dest}")
        p.close()


# --------------------------------------------------------------------------------------------------
# Codex
# --------------------------------------------------------------------------------------------------

CODEX = "codex"
CODEX_PLACEHOLDER = "Ask Codex to do anything"


# the placeholder hints an empty Codex composer shows (0.149.0 picks one at random)
CODEX_HINTS = re.compile(r"^› (Ask Codex to do anything|Ask a follow-up question|Explain this codebase|"
                         r"Summarize recent commits|Implement \{feature\}|Find and fix a bug in @filename|"
                         r"Write tests for @filename|Improve documentation in @filename|"
                         r"Run /review on my current changes|Use /skills to list available skills)?\s*$")


CODEX_STATUS = re.compile(r"^  [\w.-]+ (default|minimal|low|medium|high|xhigh|max)\b.* · \S")


def codex_composer_empty(cap: H.Capture) -> bool:
    """0.171.0 shows '? for shortcuts' under an empty composer; 0.149.0 its status line only, so
    there the composer line itself must be empty or a placeholder."""
    lines = [line for line in plain(cap).rstrip().split("\n") if line.strip()]
    if "? for shortcuts" in "\n".join(lines[-3:]):
        return True
    return (len(lines) >= 2 and CODEX_HINTS.match(lines[-2]) is not None
            and CODEX_STATUS.match(lines[-1]) is not None)


def codex_idle(cap: H.Capture) -> bool:
    return codex_composer_empty(cap) and "esc to interrupt" not in cap.text


def codex_launch(rig: Rig, width: int, tag: str, git: bool = False, **home_kw: object) -> tuple[Pane, Path, Path]:
    home, cwd = rig.place(f"codex-{tag}-{width}", git=git)
    env = H.codex_home(home, cwd, rig.url, **home_kw)  # type: ignore[arg-type]
    p = rig.launch(CODEX, H.version(CODEX), [str(H.binary(CODEX)), *H.CODEX_IN_PROCESS], env, cwd, width)
    return p, home, cwd


def capture_codex(rig: Rig, width: int) -> None:
    v = H.version(CODEX)
    srv = rig.server
    c = CODEX

    with step(f"codex {v} @{width}: model-upgrade dialog"):
        p, _, _ = codex_launch(rig, width, "notice", notices_seen=False)
        if p.optional("startup_model_notice", has("Try new model"), codex_idle, "model upgrade dialog", hold=8):
            p.save(1, "startup_model_notice", expect(c, "dialog", "absent", {
                "prompt": "Meet GPT-6 Sol", "options": ["Try new model", "Use existing model"]}),
                "first start with gpt-5.5: Codex offers its newer model")
        p.close()

    with step(f"codex {v} @{width}: trust dialog"):
        p, _, _ = codex_launch(rig, width, "trust", git=True, trust=False)
        trust = lambda cap: has("Trust this folder?")(cap) or has("Do you trust the contents of this directory?")(cap)  # noqa: E731
        if p.optional("startup_trust", trust, codex_idle, "trust dialog", hold=8):
            p.save(2, "startup_trust", expect(c, "dialog", "absent", {
                "prompt": "Trust this folder?", "options": ["Trust and continue", "Back to Agent Command Center"]}),
                "untrusted git repository: the folder trust dialog")
        p.close()

    with step(f"codex {v} @{width}: main session"):
        p, _, _ = codex_launch(rig, width, "main", retries=3, approval_policy="on-request")
        p.wait(both(codex_idle, has(CODEX_PLACEHOLDER)), "idle composer with placeholder")
        p.save(3, "idle_empty", expect(c, "idle", "empty"),
               f"fresh start: the composer shows the dim placeholder '{CODEX_PLACEHOLDER}'")

        p.type("fix the failing test in parser.py")
        p.wait(has("› fix the failing test in parser.py"), "one-line draft")
        p.save(4, "draft_oneline", expect(c, "idle", "draft"), "typed one line, not submitted")

        p.keys("C-a")
        p.wait(lambda cap: cap.cursor[0] == 2 and "parser.py" in cap.text, "cursor at start of draft")
        p.save(5, "draft_cursor_home", expect(c, "idle", "draft"),
               "same draft with the cursor moved to its start (cursor alone must not mean empty)")
        clear_composer(p, codex_composer_empty, "cleared composer")

        p.type("first line of a longer prompt")
        p.keys("C-j")
        p.type("second line")
        p.keys("C-j")
        p.type("third line")
        p.wait(has("third line"), "multi-line draft")
        p.save(6, "draft_multiline", expect(c, "idle", "draft"), "three lines typed with Ctrl-J")
        clear_composer(p, codex_composer_empty, "cleared composer")

        p.paste("\n".join(f"log line {i}: value={i * 7} status=ok, padded past Codex's paste limit"
                           for i in range(40)))
        p.wait(has("[Pasted Content"), "pasted-content placeholder")
        p.save(7, "draft_pasted", expect(c, "idle", "draft"), "a long paste: shown as [Pasted Content N chars]")
        clear_composer(p, codex_composer_empty, "cleared composer")

        p.type("/cle")
        p.wait(has("/clear"), "slash-command menu")
        p.save(8, "draft_slash_menu", expect(c, "idle", "draft"), "'/cle' typed: the command menu is open")
        clear_composer(p, codex_composer_empty, "cleared composer")
        p.wait(codex_idle, "idle again")

        gate = Gate()
        srv.script("codex", [Turn.held(gate, "The project has a parser and its tests.")])
        p.submit("explain the project layout")
        p.wait(has("esc to interrupt"), "busy (held request)", settle=False)
        assert gate.reached.wait(20)
        p.save(9, "busy_waiting", expect(c, "busy", "empty"), "request held open: 'Working (Ns • esc to interrupt)'")

        p.type("and then run the tests")
        p.wait(has("› and then run the tests"), "draft while busy", settle=False)
        p.save(10, "busy_with_draft", expect(c, "busy", "draft"), "typed (not submitted) while the turn runs")
        clear_composer(p, codex_composer_empty, "cleared composer while busy", settle=False)
        gate.release()
        # 0.149.0 ends a short turn without a "Worked for" stamp
        if p.optional("finished_stamp", both(codex_idle, has("Worked for")),
                      both(codex_idle, has("The project has a parser")), "finished-turn stamp", timeout=60):
            p.save(11, "finished_stamp", expect(c, "idle", "empty"), "turn done: 'Worked for Ns • HH:MM'")

        srv.script("codex", [Turn.reply(STREAM_REPLY, chunk_delay=0.2, chunk_chars=6)])
        p.submit("write a short summary")
        # Codex hides its "Working (esc to interrupt)" line while text streams: only the missing
        # end-of-turn stamp tells this screen from an idle one
        p.wait(both(has("line 2."), lacks("line 8.")), "streaming text", settle=False)
        p.save(12, "busy_streaming", expect(c, "busy", "empty"),
               "answer streaming slowly; no busy line on screen, no 'Worked for' stamp yet")
        p.wait(both(codex_idle, has("line 8.")), "idle after streaming", timeout=60)

        gate = Gate()
        srv.script("codex", [Turn.cut_off(times=2), Turn.held(gate, "Recovered after the broken streams.")])
        p.submit("try once more")
        if p.optional("busy_retrying", has("Reconnecting..."),
                      lambda cap: gate.reached.is_set() and "esc to interrupt" in cap.text,
                      "reconnecting screen", settle=False):
            assert gate.reached.wait(20)
            p.wait(has("Reconnecting..."), "reconnecting screen (held)", settle=False)
            p.save(13, "busy_retrying", expect(c, "busy", "empty"), "stream broken twice: 'Reconnecting... n/3'")
        gate.release()
        p.wait(both(codex_idle, has("Recovered after")), "idle after reconnecting")

        srv.script("codex", [
            Turn.tool(ToolCall("exec_command", {"cmd": "touch created.txt", "sandbox_permissions": "require_escalated",
                                                "justification": "Create a file in the project?"}),
                      text="I will create the file."),
            Turn.reply("Created created.txt."),
        ])
        p.submit("create a file")
        p.wait(has("Would you like to run the following command?"), "permission dialog")
        p.save(14, "dialog_permission", expect(c, "dialog", "absent", {
            "prompt": "Would you like to run the following command?",
            "options": ["Yes, proceed (y)",
                        "Yes, and don't ask again for commands that start with `touch created.txt` (p)",
                        "No, and tell Codex what to do differently (esc)"]}),
            "exec_command asking for escalation under approval_policy on-request")
        p.keys("y")
        p.wait(both(codex_idle, has("Created created.txt.")), "idle after tool call")

        srv.script("codex", [Turn.tool(ToolCall("exec_command", {"cmd": "sleep 6"})), Turn.reply("Waited six seconds.")])
        p.submit("wait six seconds")
        p.wait(both(has("esc to interrupt"), has("background terminal running")), "tool running", settle=False)
        p.save(19, "busy_tool_running", expect(c, "busy", "empty"),
               "exec_command (sleep 6) running in the sandbox; the foreground command stays node")
        p.wait(both(codex_idle, has("Waited six seconds.")), "idle after the tool ran")

        srv.script("codex", [Turn.fail(500, "scripted server failure", times=60)])
        p.submit("this request fails")
        p.wait(both(codex_idle, has("■")), "error shown")
        p.save(15, "api_error", expect(c, "idle", "empty"), "HTTP 500 past the retries: an error line, then the prompt")
        srv.clear_script("codex")

        if "f2 to view" in p.cap().text:
            p.keys("F2")
            p.wait(has("esc dismiss"), "warnings panel")
            p.save(16, "dialog_warnings", expect(c, "dialog", "absent", {
                "prompt": "Warnings", "options": []}), "F2: the retained-warnings panel")
            p.keys("Escape")
            p.wait(codex_idle, "idle after warnings")

        for i in range(6):
            srv.script("codex", [Turn.reply(f"Part {i + 1}. {LONG_REPLY}")])
            p.submit(f"tell me part {i + 1}")
            p.wait(both(codex_idle, has(f"Part {i + 1}.")), f"long reply {i + 1}")
        p.save(17, "long_scrollback", expect(c, "idle", "empty"), "six long answers: hundreds of lines of history",
               scrollback=LONG_SCROLLBACK)

        p.submit("/clear")
        p.wait(both(codex_idle, lacks("Part 6.")), "cleared conversation")
        p.save(18, "after_clear", expect(c, "idle", "empty"), "/clear: terminal cleared, new chat")
        p.close()


def transcript_codex(rig: Rig) -> None:
    v = H.version(CODEX)
    with step(f"codex {v}: transcript session"):
        p, home, _ = codex_launch(rig, 80, "transcript")
        p.wait(codex_idle, "idle composer")
        rig.server.script("codex", [
            Turn.reply("Hello! I am ready to help with this project."),
            Turn.tool(ToolCall("exec_command", {"cmd": "ls"}), text="I will list the files."),
            Turn.reply("The project holds one file, notes.txt."),
        ])
        p.submit("hello, who are you?")
        p.wait(both(codex_idle, has("ready to help")), "first answer")
        p.submit("which files are in this project?")
        p.wait(both(codex_idle, has("holds one file")), "answer after the tool call")
        time.sleep(1.0)
        out = rig.transcripts / CODEX / v
        shutil.rmtree(out, ignore_errors=True)
        codex_dir = home / ".codex"
        files = list(codex_dir.glob("sessions/**/rollout-*.jsonl"))
        files += [f for f in (codex_dir / "session_index.jsonl", codex_dir / "history.jsonl") if f.exists()]
        for f in files:
            dest = out / f.relative_to(codex_dir)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, dest)
            print(f"  copied {dest}")
        p.close()


# --------------------------------------------------------------------------------------------------
# OpenCode
# --------------------------------------------------------------------------------------------------

OPENCODE = "opencode"
OPENCODE_BOTTOM = re.compile(r"^\s*╹▀{10,}$", re.M)


def opencode_composer(cap: H.Capture) -> str | None:
    """The text of OpenCode's composer box (None when no box is at the bottom): the rows behind
    '┃' between the padding row under the box's top and the padding row above its status row."""
    lines = plain(cap).rstrip().split("\n")
    bottoms = [i for i, line in enumerate(lines) if OPENCODE_BOTTOM.match(line)]
    if not bottoms or sum(1 for line in lines[bottoms[-1] + 1:] if line.strip()) > 2:
        return None
    rows = []
    for line in reversed(lines[:bottoms[-1]]):
        if not line.lstrip().startswith("┃"):
            break
        rows.append(line.split("┃", 1)[1].strip())
    rows.reverse()
    return "\n".join(rows[1:-2]).strip() if len(rows) >= 4 else None


def opencode_idle(cap: H.Capture) -> bool:
    text = opencode_composer(cap)
    return text is not None and (text == "" or text.startswith("Ask anything")) and "esc interrupt" not in cap.text


def capture_opencode(rig: Rig, width: int) -> None:
    v = H.version(OPENCODE)
    srv = rig.server
    c = OPENCODE
    with step(f"opencode {v} @{width}: session"):
        home, cwd = rig.place(f"opencode-{width}")
        env = H.opencode_home(home, cwd, rig.url)
        p = rig.launch(OPENCODE, v, [str(H.binary(OPENCODE))], env, cwd, width)
        # a first start creates its database: slow on a loaded machine
        p.wait(both(opencode_idle, has("Ask anything")), "idle composer with placeholder", timeout=120)
        p.save(1, "idle_empty", expect(c, "idle", "empty"), "fresh start: the composer box shows 'Ask anything… \"<tip>\"'")

        p.type("fix the failing test in parser.py")
        p.wait(lambda cap: opencode_composer(cap) == "fix the failing test in parser.py", "one-line draft")
        p.save(2, "draft_oneline", expect(c, "idle", "draft"), "typed one line, not submitted")
        p.keys("C-a")
        p.wait(lambda cap: opencode_composer(cap) == "fix the failing test in parser.py"
               and any(line.find("┃  fix the failing") + 3 == cap.cursor[0] for line in plain(cap).split("\n")),
               "cursor at start of draft")
        p.save(3, "draft_cursor_home", expect(c, "idle", "draft"),
               "same draft with the cursor moved to its start (cursor alone must not mean empty)")
        p.keys("C-e", "C-u")
        p.wait(opencode_idle, "cleared composer")

        gate = Gate()
        srv.script("claude", [Turn.held(gate, "The project has a parser and its tests.")])
        p.submit("explain the project layout")
        p.wait(has("esc interrupt"), "busy (held request)", settle=False)
        assert gate.reached.wait(30)
        p.wait(has("esc interrupt"), "busy (held request)")
        p.save(4, "busy_waiting", expect(c, "busy", "empty"), "request held open by the model server: 'esc interrupt'")
        p.type("and then run the tests")
        p.wait(both(has("esc interrupt"), lambda cap: opencode_composer(cap) == "and then run the tests"),
               "draft while busy", settle=False)
        p.save(5, "busy_with_draft", expect(c, "busy", "draft"), "typed (not submitted) while the turn runs")
        p.keys("C-e", "C-u")
        p.wait(lambda cap: opencode_composer(cap) in ("", None) or "Ask anything" in (opencode_composer(cap) or ""),
               "cleared composer while busy", settle=False)
        gate.release()
        p.wait(both(opencode_idle, has("The project has a parser"), lacks("esc interrupt")), "idle after the turn")
        p.save(6, "finished_turn", expect(c, "idle", "empty"), "turn done: the footer shows tokens and cost")

        srv.script("claude", [Turn.reply(STREAM_REPLY, chunk_delay=0.2, chunk_chars=6)])
        p.submit("write a short summary")
        p.wait(both(has("esc interrupt"), has("Streaming a scripted")), "streaming text", settle=False)
        p.save(7, "busy_streaming", expect(c, "busy", "empty"), "answer streaming slowly")
        p.wait(both(opencode_idle, has("line 8.")), "idle after streaming", timeout=60)

        srv.script("claude", [Turn.tool(ToolCall("bash", {"command": "touch created.txt",
                                                          "description": "Create a file"})),
                              Turn.reply("Created created.txt.")])
        p.submit("create a file")
        p.wait(has("Permission required"), "permission dialog")
        p.save(8, "dialog_permission", expect(c, "dialog", "absent", {"prompt": "Permission required", "options": []}),
               "the bash tool asks (permission bash = ask): Allow once / Allow always / Reject")
        p.keys("Enter")
        p.wait(both(opencode_idle, has("Created created.txt.")), "idle after the tool call", timeout=60)
        p.save(9, "after_tool", expect(c, "idle", "empty"), "the allowed tool ran, the answer shown")
        p.close()


# --------------------------------------------------------------------------------------------------
# bash and non-agent programs
# --------------------------------------------------------------------------------------------------


def bash_version() -> str:
    out = subprocess.run(["bash", "--version"], capture_output=True, text=True, check=True).stdout
    match = re.search(r"version (\d+\.\d+\.\d+)", out)
    return f"bash-{match.group(1) if match else 'unknown'}"


def capture_shell(rig: Rig, width: int) -> None:
    v = bash_version()
    unknown = expect("unknown", "unknown", "absent")
    with step(f"shell {v} @{width}"):
        home, cwd = rig.place(f"shell-{width}")
        home.mkdir(parents=True, exist_ok=True)
        env = H.base_env(home)
        env["PS1"] = r"\u@devbox:\w\$ "
        (home / "tmp").mkdir(exist_ok=True)
        p = rig.launch("shell", v, ["bash", "--norc", "--noprofile", "-i"], env, cwd, width)
        prompt = has_re(r"devbox:.*[$#]$")
        p.wait(prompt, "bash prompt")
        p.submit("ls -la")
        p.wait(both(prompt, has("notes.txt")), "ls output and prompt")
        p.save(1, "bash_prompt_empty", expect("shell", "idle", "empty"), "interactive bash at its prompt")
        p.type("git status --short")
        p.wait(has("git status --short"), "typed command")
        p.save(2, "bash_prompt_typed", expect("shell", "idle", "draft"), "a command typed, not run")
        p.keys("C-u")
        p.wait(prompt, "prompt cleared")

        p.submit("sleep 300")
        p.wait(lambda cap: cap.command == "sleep", "sleep in the foreground")
        p.save(3, "foreground_sleep", unknown, "a plain command running in the foreground (sleep)")
        p.keys("C-c")
        p.wait(both(prompt, lambda cap: cap.command == "bash"), "prompt back")

        (cwd / "README.txt").write_text("\n".join(f"Line {i}: the quick brown fox jumps over the lazy dog."
                                                  for i in range(200)) + "\n")
        p.submit("less README.txt")
        p.wait(both(has("Line 0:"), lambda cap: cap.command == "less"), "less")
        p.save(4, "less", unknown, "less, a full-screen pager")
        p.keys("q")
        p.wait(both(prompt, lambda cap: cap.command == "bash"), "prompt back")

        p.submit("vim -u NONE -N README.txt")
        p.wait(both(has("Line 0:"), lambda cap: cap.command == "vim"), "vim")
        p.save(5, "vim", unknown, "vim, a full-screen editor")
        p.keys("Escape")
        p.type(":q!")
        p.keys("Enter")
        p.wait(both(prompt, lambda cap: cap.command == "bash"), "prompt back")

        p.submit("node")
        p.wait(both(has_re(r"^>$"), lambda cap: cap.command == "node"), "node REPL")
        p.save(6, "node_repl", unknown,
               "node's REPL: foreground 'node' like Claude Code or Codex, but no agent on screen")
        p.close()


# --------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--harness", choices=["claude", "codex", "opencode", "shell", "all"], default="all")
    parser.add_argument("--width", type=int, action="append", choices=sorted(SIZES))
    parser.add_argument("--no-transcripts", action="store_true")
    parser.add_argument("--keep", action="store_true", help="keep the temporary homes")
    parser.add_argument("--out", type=Path, default=SCREENS,
                        help="screens folder (default tests/fixtures/screens; a temp folder to verify)")
    parser.add_argument("--transcripts-out", type=Path, default=TRANSCRIPTS)
    parser.add_argument("--report", type=Path,
                        help="write what was captured and which states the release did not draw (JSON)")
    args = parser.parse_args(argv)
    widths = args.width or sorted(SIZES)
    chosen = ["claude", "codex", "opencode", "shell"] if args.harness == "all" else [args.harness]
    for name in chosen:
        if name in H.PACKAGES:
            print(f"installing {name} {H.version(name)} (skipped when present) ...", flush=True)
            H.install(name)
    started = time.monotonic()
    rig = Rig(keep=args.keep, screens=args.out, transcripts=args.transcripts_out)
    try:
        for name in chosen:
            if name in H.PACKAGES:
                folder = args.out / name / H.version(name)
                for width in widths:
                    for old in folder.glob(f"*_{width}.*"):
                        old.unlink()
            for width in widths:
                {"claude": capture_claude, "codex": capture_codex, "opencode": capture_opencode,
                 "shell": capture_shell}[name](rig, width)
            if not args.no_transcripts:
                if name == "claude":
                    transcript_claude(rig)
                elif name == "codex":
                    transcript_codex(rig)
    finally:
        rig.close()
        if args.report:
            args.report.parent.mkdir(parents=True, exist_ok=True)
            args.report.write_text(dump_json({
                "versions": {name: H.version(name) for name in chosen if name in H.PACKAGES},
                "saved": [str(path.relative_to(args.out)) for path in rig.saved],
                "not_drawn": rig.not_drawn,
            }))
    print(f"{len(rig.saved)} screens in {time.monotonic() - started:.0f}s"
          + (f"; not drawn by this release: {len(rig.not_drawn)}" if rig.not_drawn else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
