"""A small stand-in agent for the demo fleet and the integration tests.

It renders a screen shaped like Claude Code's (a ``❯`` composer between two rules, "esc to interrupt"
while a turn runs, a numbered permission dialog), reads the terminal raw (bracketed paste included),
and appends every submitted prompt to ``$DEMO_AGENT_LOG`` as one JSON line, so a test can check
exactly what was typed and when. It is started through a wrapper named ``claude`` (``exec -a
claude``), accepts and ignores Claude Code's flags, and understands prompts of its own: ``/busy N``
(a turn of N seconds), ``/busy-while PATH`` (a turn that lasts while the file PATH exists, so a test
ends it when it means to, never at a fixed time), ``/dialog`` (a permission question) and ``/exit``.

With ``DEMO_AGENT_LOOK=codex`` (the ``codex`` wrapper of :func:`install_wrapper`) it draws a screen
shaped like Codex's instead (its session banner, a ``›`` composer with the placeholder, the status
line under a blank line, "Worked for Ns" at a turn's end). ``DEMO_AGENT_HOLD`` names a file it keeps
open (for appending) while it runs, as Codex holds its rollout file open; ``DEMO_AGENT_HOLD_READ`` names
one it keeps open read-only.

Its banner names the release it stands in for (``Claude Code v2.1.332``, ``OpenAI Codex (v0.171.0)``,
the pins whose screens it draws), so connectd reads it as that release; ``DEMO_AGENT_RELEASE`` names
another (an unverified one), and an empty value leaves the release out of the banner (unknown).
With ``DEMO_AGENT_BANNER_SCROLLS=1`` the banner is gone once a prompt was submitted, as a long
session's banner scrolls off the screen.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import sys
import termios
import time
import tty
from pathlib import Path

RULE = "─"
BUSY_DEFAULT = float(os.environ.get("DEMO_BUSY_SECONDS", "1.5"))
HELD_TURN = 24 * 3600.0  # a /busy-while turn's nominal length: it ends when its file is removed
PINS = {"claude": "2.1.332", "codex": "0.171.0"}  # the releases whose screens this stand-in draws


PASTE_START, PASTE_END = "\x1b[200~", "\x1b[201~"


class Agent:
    def __init__(self, argv: list[str]) -> None:
        self.argv = argv
        self.session = _flag(argv, "--session-id") or _flag(argv, "--resume") or "demo"
        self.connected = any(a.startswith("--mcp-config") for a in argv)
        self.name = os.environ.get("DEMO_AGENT_NAME", "demo agent")
        self.log = os.environ.get("DEMO_AGENT_LOG")
        self.transcript: list[str] = []
        self.composer = ""
        self.pasting, self.held = False, ""  # inside a bracketed paste; a read's tail that may be its end marker
        self.busy_until = 0.0
        self.busy_while: str | None = None  # a /busy-while turn's file: the turn lasts while it exists
        self.dialog: str | None = None
        self.pending_reply: str | None = None
        self.last_frame = ""
        self.look = os.environ.get("DEMO_AGENT_LOOK", "claude")
        self.release = os.environ.get("DEMO_AGENT_RELEASE", PINS.get(self.look, ""))

    # --- screen ---------------------------------------------------------------------------------

    def render(self) -> None:
        if self.look == "codex":
            self.render_codex()
            return
        width, height = shutil.get_terminal_size((80, 24))
        scrolled = os.environ.get("DEMO_AGENT_BANNER_SCROLLS") == "1" and bool(self.transcript)
        banner = f"Claude Code v{self.release} · " if self.release and not scrolled else ""
        head = [
            f" ▐▛███▜▌   {banner}Demo agent (claude-like) · {self.name}",
            f"▝▜█████▛▘  session {self.session} · connect {'on' if self.connected else 'off'}",
            f"  ▘▘ ▝▝    {os.getcwd()}",
            "",
        ]
        body = list(self.transcript)
        if self.dialog is not None:
            foot = [
                RULE * width,
                f" {self.dialog}",
                "",
                " Do you want to proceed?",
                " ❯ 1. Yes",
                "   2. No",
                "",
                " Esc to cancel",
            ]
        else:
            lines = self.composer.split("\n") or [""]
            composer = ["❯ " + lines[0]] + ["  " + line for line in lines[1:]]
            status = "  ⏵⏵ auto mode on (shift+tab to cycle)"
            foot = [RULE * width, *composer, RULE * width, status]
            if time.monotonic() < self.busy_until:  # the spinner sits just above the composer
                spinner = "✻✶✳✢·"[int(time.monotonic() * 4) % 5]
                left = int(self.busy_until - time.monotonic())
                foot = [f"{spinner} Working… ({left}s · esc to interrupt)", "", *foot]
        room = max(0, height - len(head) - len(foot))
        body = body[-room:] if room else []
        screen = head + body + [""] * (room - len(body)) + foot
        # Redraw in place, only when the frame changed: no blank intermediate frames, no idle output.
        out = "\x1b[H" + "\r\n".join(line[:width] + "\x1b[K" for line in screen[:height]) + "\x1b[J"
        if self.dialog is None:
            row = len(screen) - len(foot) + foot.index(composer[0]) + self.composer.count("\n")
            col = 2 + len(self.composer.split("\n")[-1])
            out += f"\x1b[{row + 1};{col + 1}H"
        self.draw(out)

    def render_codex(self) -> None:
        """Codex's shape: the banner, the transcript, a ``›`` composer (the placeholder when empty), a
        blank line and the status line; "• Working (Ns • esc to interrupt)" above it during a turn."""
        width, height = shutil.get_terminal_size((80, 24))
        head = [
            "╭──────────────────────────────────────────╮",
            f"│ >_ OpenAI Codex{f' (v{self.release})' if self.release else ''}".ljust(43) + " │",
            f"│ demo agent (codex-like) · {self.name[:14]:<14} │",
            "╰──────────────────────────────────────────╯",
            "",
        ]
        lines = self.composer.split("\n")
        shown = lines if self.composer else ["Ask Codex to do anything"]
        composer = ["› " + shown[0]] + ["  " + line for line in shown[1:]]
        foot = [*composer, "", "  ? for shortcuts"]
        if time.monotonic() < self.busy_until:
            left = int(self.busy_until - time.monotonic())
            foot = [f"• Working ({left}s • esc to interrupt)", "", *foot]
        room = max(0, height - len(head) - len(foot))
        body = self.transcript[-room:] if room else []
        screen = head + body + [""] * (room - len(body)) + foot
        out = "\x1b[H" + "\r\n".join(line[:width] + "\x1b[K" for line in screen[:height]) + "\x1b[J"
        row = len(screen) - len(foot) + foot.index(composer[0]) + (self.composer.count("\n") if self.composer else 0)
        col = 2 + (len(lines[-1]) if self.composer else 0)
        self.draw(out + f"\x1b[{row + 1};{col + 1}H")

    def draw(self, out: str) -> None:
        # Redraw only when the frame changed: no blank intermediate frames, no idle output.
        if out != self.last_frame:
            self.last_frame = out
            sys.stdout.write(out)
            sys.stdout.flush()

    # --- input ----------------------------------------------------------------------------------

    def submit(self) -> bool:
        prompt, self.composer = self.composer, ""
        if not prompt.strip():
            return True
        if self.log:
            with open(self.log, "a", encoding="utf-8") as fh:
                fh.write(json.dumps({"at": time.time(), "prompt": prompt, "session": self.session}) + "\n")
        mark = "› " if self.look == "codex" else "> "
        self.transcript += [(mark if i == 0 or self.look != "codex" else "  ") + line
                            for i, line in enumerate(prompt.split("\n"))] + [""]
        words = prompt.split()
        if words[0] == "/exit":
            time.sleep(float(os.environ.get("DEMO_EXIT_DELAY", "0")))  # a slow exit, for crash tests
            return False
        if words[0] == "/busy":
            seconds = float(words[1]) if len(words) > 1 else BUSY_DEFAULT
            self.busy_until = time.monotonic() + seconds
            self.pending_reply = f"⏺ Worked for {seconds:g}s."
        elif words[0] == "/busy-while" and len(words) > 1:
            self.busy_while = words[1]
            self.busy_until = time.monotonic() + HELD_TURN
            self.pending_reply = "⏺ Worked until released."
        elif words[0] == "/dialog":
            self.dialog = "Bash command: " + (" ".join(words[1:]) or "rm -rf build")
        else:
            self.busy_until = time.monotonic() + BUSY_DEFAULT
            self.pending_reply = f"⏺ Received {len(prompt)} characters."
        if self.look == "codex" and self.pending_reply:
            seconds = max(1, round(self.busy_until - time.monotonic()))
            self.pending_reply = "• " + self.pending_reply[2:] + f"\n\n─ Worked for {seconds}s " + "─" * 20
        return True

    def release_held_turn(self) -> None:
        """A /busy-while turn ends once its file is gone."""
        if self.busy_while is not None and not os.path.exists(self.busy_while):
            self.busy_while, self.busy_until = None, min(self.busy_until, time.monotonic())

    def _pasted(self, text: str) -> None:
        if self.dialog is None and time.monotonic() >= self.busy_until:
            self.composer += text.replace("\r\n", "\n").replace("\r", "\n")

    def feed(self, data: str) -> bool:
        """One read of the terminal. A bracketed paste may span several reads (a long one does): until
        its end marker, everything read is the paste's, newlines included."""
        data, self.held = self.held + data, ""
        i = 0
        while i < len(data):
            if not self.pasting and data.startswith(PASTE_START, i):
                self.pasting, i = True, i + len(PASTE_START)
                continue
            if not self.pasting and len(data) - i > 1 and PASTE_START.startswith(data[i:]):  # a cut start marker
                # (a lone Escape is a key: it is never held)
                self.held = data[i:]
                return True
            if self.pasting:
                end = data.find(PASTE_END, i)
                if end < 0:  # it goes on in the next read; keep what may be the start of the end marker
                    cut = next((k for k in range(len(PASTE_END) - 1, 0, -1) if data.endswith(PASTE_END[:k])), 0)
                    self.held = data[len(data) - cut :]
                    self._pasted(data[i : len(data) - cut])
                    return True
                self._pasted(data[i:end])
                self.pasting, i = False, end + len(PASTE_END)
                continue
            ch = data[i]
            i += 1
            if self.dialog is not None:
                if ch in "12\x1b":
                    self.transcript.append("⏺ " + ("Allowed." if ch == "1" else "Denied."))
                    self.dialog = None
                continue
            if time.monotonic() < self.busy_until:
                continue  # a running turn ignores typing in this stand-in
            if ch in "\r\n":
                if os.environ.get("DEMO_DROP_EXIT_ENTER") == "1" and self.composer.strip() == "/exit":
                    continue  # a harness that drops the Enter after an exit command (test-only)
                if not self.submit():
                    return False
            elif ch in "\x7f\b":
                self.composer = self.composer[:-1]
            elif ch == "\x03":
                return False
            elif ch >= " ":
                self.composer += ch
        return True


def _flag(argv: list[str], name: str) -> str | None:
    for i, arg in enumerate(argv):
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
        if arg == name and i + 1 < len(argv):
            return argv[i + 1]
    return None


def main() -> int:
    agent = Agent(sys.argv[1:])
    if agent.log and os.environ.get("DEMO_AGENT_REVEAL_TOKEN") == "1":  # test-only: act as this agent
        with open(agent.log, "a", encoding="utf-8") as fh:
            token = os.environ.get("CONNECT_TOKEN")
            fh.write(json.dumps({"start": time.time(), "token": token, "argv": sys.argv[1:], "pid": os.getpid()}) + "\n")
    held = [open(path, "a", encoding="utf-8") for path in os.environ.get("DEMO_AGENT_HOLD", "").split(os.pathsep) if path]  # noqa: SIM115 - held open for the agent's life
    held += [open(path, encoding="utf-8") for path in os.environ.get("DEMO_AGENT_HOLD_READ", "").split(os.pathsep) if path]  # noqa: SIM115
    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    tty.setraw(fd)
    sys.stdout.write("\x1b[?2004h")  # bracketed paste on, as agent TUIs do
    try:
        while True:
            agent.release_held_turn()
            agent.render()
            # Wake at the turn's end, not at the next quarter second: a 0.2 s turn lasts 0.2 s.
            wait = 0.25
            if agent.pending_reply:
                wait = min(wait, max(0.0, agent.busy_until - time.monotonic()))
            ready, _, _ = select.select([fd], [], [], wait)
            if agent.pending_reply and time.monotonic() >= agent.busy_until:
                agent.transcript += [*agent.pending_reply.split("\n"), ""]
                agent.pending_reply = None
            if ready:
                data = os.read(fd, 65536).decode("utf-8", errors="replace")
                if not data or not agent.feed(data):
                    return 0
    finally:
        sys.stdout.write("\x1b[?2004l\x1b[2J\x1b[H")
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)
        for fh in held:
            fh.close()


def install_wrapper(bin_dir: Path, name: str = "claude") -> Path:
    """A wrapper named ``name`` (``claude`` or ``codex``) that runs this stand-in with that harness's
    look (so tmux reports ``name`` as the command)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    wrapper = bin_dir / name
    script = Path(__file__).resolve()  # stdlib only: it runs whatever Python finds from argv[0]
    wrapper.write_text(f'#!/bin/bash\nDEMO_AGENT_LOOK={name} exec -a {name} "{sys.executable}" "{script}" "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


if __name__ == "__main__":
    sys.exit(main())
