"""The parsers on transcripts the real, pinned programs wrote (captured by scripts/capture_screens.py).

``tests/fixtures/transcripts/{claude,codex}/<version>/`` mirror a Claude Code root (``projects/``,
``sessions/<pid>.json``) and a Codex root (``sessions/YYYY/MM/DD/rollout-*.jsonl``,
``session_index.jsonl``). Each captured session is two typed prompts and one shell tool call listing
``notes.txt``. The oracle for the prompts is each program's own ``history.jsonl`` (what it recorded
as typed by the human), independent of the transcript the parser reads. Every captured version is
checked; a harness with no capture yet is skipped, saying so.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from connectcore.history import Entrypoint, Harness
from connectd.history.index import HistoryIndex
from connectd.history.liveness import verify_claude_record
from connectd.tmux.procfs import ProcStat

CAPTURES = Path(__file__).resolve().parents[1] / "fixtures" / "transcripts"
PROMPTS = ("hello, who are you", "which files are in this project?")  # as typed by the capture


def typed(root: Path, session_id: str) -> tuple[str, ...]:
    """The prompts the program itself recorded in its ``history.jsonl`` for this session."""
    out = []
    for line in (root / "history.jsonl").read_text().splitlines():
        row = json.loads(line)
        if row.get("sessionId", row.get("session_id")) == session_id:
            out.append(row.get("display", row.get("text")))
    return tuple(out)


def versions(harness: str) -> list[Path]:
    return sorted(p for p in (CAPTURES / harness).glob("*") if p.is_dir())


def params(harness: str) -> list[object]:
    found = versions(harness)
    if not found:
        return [
            pytest.param(
                None,
                marks=pytest.mark.skip(reason=f"no captured {harness} transcripts in {CAPTURES / harness}"),
            )
        ]
    return [pytest.param(p, id=p.name) for p in found]


def check_claude_root(root: Path, tmp_path: Path) -> None:
    with HistoryIndex(tmp_path / "data") as ix:
        report = ix.update(root, tmp_path / "no-codex")
        assert report.skips == [], report.skip_counts()
        [entry] = [e for e in ix.entries() if e.entrypoint is not Entrypoint.SUBAGENT]
        full = ix.get(Harness.CLAUDE, entry.session_id, with_prompts=True)
        assert full.prompts == typed(root, entry.session_id)
        assert [p.rstrip("?") for p in full.prompts] == [p.rstrip("?") for p in PROMPTS]
        assert full.entrypoint is Entrypoint.INTERACTIVE
        assert full.cwd and full.resume_argv == ("claude", "--resume", entry.session_id)
        assert full.last_active is not None and full.started is not None
        db = (tmp_path / "data" / "history.db").read_bytes()
        assert b"notes.txt" not in db  # the tool output (and the reply quoting it) is not indexed
    for registry in (root / "sessions").glob("*.json"):
        record = json.loads(registry.read_text())
        assert record["sessionId"] == entry.session_id
        ticks = int(record["procStart"])
        same = ProcStat(pid=record["pid"], comm="claude", state="S", ppid=1, pgrp=1, start_time=ticks)
        assert verify_claude_record(record, same, None, 100) is True
        reused = ProcStat(pid=record["pid"], comm="bash", state="S", ppid=1, pgrp=1, start_time=ticks + 1)
        assert verify_claude_record(record, reused, None, 100) is None


def check_codex_root(root: Path, tmp_path: Path) -> None:
    with HistoryIndex(tmp_path / "data") as ix:
        report = ix.update(tmp_path / "no-claude", root)
        assert report.skips == [], report.skip_counts()
        [entry] = ix.entries()
        full = ix.get(Harness.CODEX, entry.session_id, with_prompts=True)
        assert full.prompts == typed(root, entry.session_id)
        assert [p.rstrip("?") for p in full.prompts] == [p.rstrip("?") for p in PROMPTS]
        assert full.entrypoint is Entrypoint.INTERACTIVE
        assert full.resume_argv == ("codex", "resume", entry.session_id)
        if (root / "session_index.jsonl").exists():
            assert full.title  # Codex's own thread name
        db = (tmp_path / "data" / "history.db").read_bytes()
        assert b"notes.txt" not in db


@pytest.mark.parametrize("root", params("claude"))
def test_captured_claude_code_transcripts(root: Path, tmp_path: Path) -> None:
    check_claude_root(root, tmp_path)


@pytest.mark.parametrize("root", params("codex"))
def test_captured_codex_transcripts(root: Path, tmp_path: Path) -> None:
    check_codex_root(root, tmp_path)
