"""A stand-in for OpenCode's own server, run as the pane's process. Two ways to start it:

- ``python -m tests.support.fake_opencode_server PORT PASSWORD DIRECTORY``: listens on 127.0.0.1:PORT
  and prints each request it served (``create ses_...``, ``select ses_...``) so a test can read them
  off the screen;
- as connectd launches OpenCode, through a wrapper named ``opencode`` (:func:`install_wrapper`):
  ``opencode --port=P --hostname=127.0.0.1 --mdns=false ...``, the password from
  ``OPENCODE_SERVER_PASSWORD``, the directory its cwd. It draws OpenCode 1.18.33's idle screen (the
  corpus' ``01_idle_empty_80``, cursor in the composer) so connectd reads the pane as OpenCode
  idle, and appends each request it served to ``$FAKE_OPENCODE_LOG`` (one JSON line). A selection
  redraws the screen as a shown session (no home-screen placeholder) unless
  ``FAKE_OPENCODE_STAY_HOME=1``. With ``FAKE_OPENCODE_LISTEN=0`` it draws the screen but listens
  nowhere.

Either way it demands basic auth ``opencode:PASSWORD`` (401 otherwise, as OpenCode 1.18.33 does),
answers ``POST /session`` with a root session for DIRECTORY and ``POST /tui/select-session`` with
``true``."""

from __future__ import annotations

import base64
import json
import os
import sys
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

SESSION_ID = "ses_fake0000000000000000000001"
SCREEN = Path(__file__).resolve().parents[1] / "fixtures" / "screens" / "opencode" / "1.18.33" / "01_idle_empty_80"


def serve(port: int, password: str, directory: str, say: Callable[[str, str], None]) -> None:
    expected = "Basic " + base64.b64encode(f"opencode:{password}".encode()).decode()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the http.server API
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            if self.headers.get("Authorization") != expected:
                say("refused", self.path)
                return self._answer(401, "Unauthorized")
            if self.path.startswith("/session?"):
                say("create", SESSION_ID)
                return self._answer(200, {"id": SESSION_ID, "directory": directory, "title": "New session"})
            if self.path.startswith("/tui/select-session?"):
                say("select", json.loads(body)["sessionID"])
                return self._answer(200, True)
            return self._answer(404, "not found")

        def _answer(self, status: int, value: object) -> None:
            data = json.dumps(value).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    HTTPServer(("127.0.0.1", port), Handler).serve_forever()


def as_opencode(argv: list[str]) -> None:
    """Started as connectd starts OpenCode: draw its idle screen, serve on ``--port=P``."""
    port = next((int(a.split("=", 1)[1]) for a in argv if a.startswith("--port=")), None)
    log = os.environ.get("FAKE_OPENCODE_LOG", "")

    lines = SCREEN.with_suffix(".txt").read_text().rstrip("\n").split("\n")
    x, y = json.loads(SCREEN.with_suffix(".json").read_text())["cursor"]

    def draw(rows: list[str]) -> None:
        sys.stdout.write("\x1b[H\x1b[2J" + "\r\n".join(rows) + f"\x1b[{y + 1};{x + 1}H")
        sys.stdout.flush()

    def say(what: str, value: str) -> None:
        if log:
            with open(log, "a") as f:
                f.write(json.dumps({"request": what, "value": value, "at": time.time()}) + "\n")
        if what == "select" and os.environ.get("FAKE_OPENCODE_STAY_HOME") != "1":
            # the selected session is shown: its empty composer has no placeholder, the logo is gone
            draw([row[: row.index("┃") + 1] if "Ask anything" in row else "" if "█" in row or "▄" in row else row
                  for row in lines])

    draw(lines)
    if port is None or os.environ.get("FAKE_OPENCODE_LISTEN") == "0":
        while True:
            time.sleep(3600)
    serve(port, os.environ.get("OPENCODE_SERVER_PASSWORD", ""), os.getcwd(), say)


def install_wrapper(bin_dir: Path, root: Path) -> Path:
    """A wrapper named ``opencode`` that runs this stand-in (so tmux reports ``opencode``)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    wrapper = bin_dir / "opencode"
    wrapper.write_text(
        f'#!/bin/bash\nexport PYTHONPATH="{root}"\n'
        f'exec -a opencode "{sys.executable}" -m tests.support.fake_opencode_server "$@"\n'
    )
    wrapper.chmod(0o755)
    return wrapper


def main() -> None:
    if any(a.startswith("--port") for a in sys.argv[1:]) or len(sys.argv) != 4:
        as_opencode(sys.argv[1:])
        return
    port, password, directory = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    print("listening", flush=True)
    serve(port, password, directory, lambda what, value: print(f"{what} {value}", flush=True))


if __name__ == "__main__":
    main()
