"""The history index and liveness on transcripts written by the real, pinned Claude Code and Codex.

Each program runs interactively in a private tmux server against the scripted model server on
127.0.0.1, with a private HOME. Two prompts are typed (the first makes the model call a shell tool
whose output carries a marker), then the index is built from the private homes: the prompts are the
human's, the marker is nowhere, the PR link and Codex's own thread title are there, and liveness
names the real pane while the program runs (Claude through its ``sessions/<pid>.json`` registry
checked against ``/proc``, Codex through the rollout it holds open), and ``not_running`` after.

Skips, saying so, when a pinned program is not installed (see tests/support/harnesses.py).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from connectd.history.liveness import tmux_pane_pids
from connectd.history.service import HistoryService
from tests.support import harnesses as H
from tests.support.model_server import ModelServer, ToolCall, Turn

pytestmark = pytest.mark.live

MARKER = "TOOLOUTPUT-7f3a9c"
FIRST = "please check the websocket reconnect handling"
SECOND = "now tidy the parser module"


def need(name: str) -> Path:
    path = H.binary(name)
    if not path.exists():
        pytest.skip(f"{name} {H.version(name)} is not installed under {H.install_dir(name)}")
    return path


def wait(predicate, timeout: float = 30.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not met in {timeout}s")
        time.sleep(0.2)


@pytest.fixture
def model() -> Iterator[ModelServer]:
    with ModelServer() as server:
        yield server


def prompt(tm: H.Tmux, pane: str, text: str) -> None:
    tm.type(pane, text)
    time.sleep(0.4)
    tm.keys(pane, "Enter")


def transcript_has(root: Path, pattern: str, text: str) -> bool:
    return any(text in p.read_text(errors="replace") for p in root.rglob(pattern))


def test_real_claude_code_session(tmp_path, model):
    claude = need("claude")
    cwd = tmp_path / "proj"
    cwd.mkdir()
    home = tmp_path / "home"
    env = H.claude_home(home, cwd, model.url, allow=["Bash"])
    model.script(
        "claude",
        [
            Turn.tool(ToolCall("Bash", {"command": f"echo {MARKER}", "description": "echo"})),
            Turn.reply("Opened https://github.com/acme/widget/pull/77"),
            Turn.reply("Tidied."),
        ],
    )
    tm = H.Tmux("hist")
    svc = HistoryService(
        tmp_path / "data", home / ".claude", home / ".codex", pane_pids=dict, catch_up_interval=0
    )
    try:
        pane = tm.launch("c", [str(claude)], env, cwd)
        tm.wait_for(pane, lambda cap: "❯" in cap.text, timeout=30)
        prompt(tm, pane, FIRST)
        wait(lambda: transcript_has(home / ".claude" / "projects", "*.jsonl", "pull/77"), what="first answer")
        prompt(tm, pane, SECOND)
        wait(
            lambda: transcript_has(home / ".claude" / "projects", "*.jsonl", "Tidied."), what="second answer"
        )
        report = svc.update()
        assert report.skips == []
        [entry] = svc.index.entries()
        full = svc.get_entry("claude", entry.session_id)
        assert full.prompts == (FIRST, SECOND)
        assert full.cwd == str(cwd) and full.prs == ("https://github.com/acme/widget/pull/77",)
        assert full.resume_argv == ("claude", "--resume", entry.session_id)
        assert MARKER not in repr(full)
        for name in os.listdir(tmp_path / "data"):
            assert MARKER.encode() not in (tmp_path / "data" / name).read_bytes()
        view = svc.get_session("claude", entry.session_id, pane_pids=tmux_pane_pids(tm.socket))
        assert (view["liveness"], view["pane"]) == ("running_in_pane", pane)
        hits = svc.find_sessions("websocket", pane_pids={})
        assert [(h["session_id"], h["liveness"]) for h in hits] == [(entry.session_id, "running_elsewhere")]
    finally:
        tm.kill()
        H.reap(home)
    wait(lambda: svc.get_session("claude", entry.session_id)["liveness"] == "not_running", what="claude exit")
    svc.close()


def test_real_codex_session(tmp_path, model):
    codex = need("codex")
    cwd = tmp_path / "proj"
    cwd.mkdir()
    home = tmp_path / "home"
    env = H.codex_home(home, cwd, model.url, approval_policy="never")
    model.script(
        "codex",
        [
            Turn.tool(ToolCall("shell_command", {"command": f"echo {MARKER}"})),
            Turn.reply("Opened https://github.com/acme/gadget/pull/9"),
            Turn.reply("Tidied."),
        ],
    )
    tm = H.Tmux("hist")
    svc = HistoryService(
        tmp_path / "data", home / ".claude", home / ".codex", pane_pids=dict, catch_up_interval=0
    )
    sessions = home / ".codex" / "sessions"
    try:
        pane = tm.launch("x", [str(codex), *H.CODEX_IN_PROCESS], env, cwd)
        tm.wait_for(pane, lambda cap: "›" in cap.text, timeout=30)
        prompt(tm, pane, FIRST)
        wait(lambda: transcript_has(sessions, "rollout-*.jsonl", "pull/9"), what="first answer")
        prompt(tm, pane, SECOND)
        wait(lambda: transcript_has(sessions, "rollout-*.jsonl", "Tidied."), what="second answer")
        wait(lambda: (home / ".codex" / "session_index.jsonl").exists(), what="thread title")
        report = svc.update()
        assert report.skips == []
        [entry] = svc.index.entries()
        full = svc.get_entry("codex", entry.session_id)
        assert full.prompts == (FIRST, SECOND)
        assert full.cwd == str(cwd) and full.prs == ("https://github.com/acme/gadget/pull/9",)
        assert full.title  # Codex's own thread name, from session_index.jsonl
        assert full.resume_argv == ("codex", "resume", entry.session_id)
        assert MARKER not in repr(full)
        view = svc.get_session("codex", entry.session_id, pane_pids=tmux_pane_pids(tm.socket))
        assert (view["liveness"], view["pane"]) == ("running_in_pane", pane)
    finally:
        tm.kill()
        H.reap(home)
    wait(lambda: svc.get_session("codex", entry.session_id)["liveness"] == "not_running", what="codex exit")
    svc.close()
