"""``connectd history`` run in-process and as ``python -m connectd.history.cli``, with no daemon."""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from connectcore.history import ALLOWED_FIELDS
from connectd.history import cli as history_cli
from tests.fixtures.history.transcripts import Claude, make_repo, write_jsonl

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "history"
MAIN = "0f8e2d6a-3b1c-4e5f-9a7b-2c4d6e8f0a1b"


@pytest.fixture
def env(tmp_path: Path) -> list[str]:
    shutil.copytree(FIXTURES / "claude", tmp_path / "claude")
    shutil.copytree(FIXTURES / "codex", tmp_path / "codex")
    return [
        "--data-dir",
        str(tmp_path / "data"),
        "--claude-root",
        str(tmp_path / "claude"),
        "--codex-root",
        str(tmp_path / "codex"),
    ]


def run(capsys, *argv: str) -> tuple[int, str, str]:
    status = history_cli.main(["history", *argv])
    out, err = capsys.readouterr()
    return status, out, err


def test_register_adds_the_history_group_to_another_cli():
    parser = argparse.ArgumentParser(prog="connectd")
    sub = parser.add_subparsers(dest="command")
    history_cli.register(sub)
    args = parser.parse_args(["history", "search", "a", "b", "--all", "--limit", "3"])
    assert args.func is history_cli.cmd_search
    assert (args.query, args.all, args.limit) == (["a", "b"], True, 3)
    with pytest.raises(SystemExit):
        parser.parse_args(["history", "search", "x", "--all", "--repo", "/r"])


def test_index_then_search_all(capsys, env):
    status, out, _ = run(capsys, "index", *env)
    assert status == 0 and "6 transcripts: 6 read" in out
    status, out, _ = run(capsys, "search", "websocket", "--all", *env)
    assert status == 0
    assert MAIN in out and "ws reconnect fix" in out and "pull/4955" in out


def test_search_json_is_the_allowlist(capsys, env):
    status, out, _ = run(capsys, "search", "dark", "mode", "--all", "--json", *env)
    results = json.loads(out)
    assert status == 0 and results
    assert all(tuple(r) == ALLOWED_FIELDS for r in results)
    assert results[0]["title"] == "Dark mode settings toggle"


def test_search_defaults_to_the_current_directory_repo(capsys, tmp_path, env, monkeypatch):
    repo = make_repo(tmp_path / "here")
    (repo / "sub").mkdir()
    Claude("3e0c2b7a-0000-4000-8000-0000000000c9", str(repo)).prompt("websocket work here").write(
        tmp_path / "claude"
    )
    monkeypatch.chdir(repo / "sub")
    status, out, _ = run(capsys, "search", "websocket", "--json", *env)
    assert status == 0
    assert [r["session_id"] for r in json.loads(out)] == ["3e0c2b7a-0000-4000-8000-0000000000c9"]
    status, out, err = run(capsys, "search", "websocket", "--repo", str(tmp_path), *env)
    assert status == 1 and "no sessions in" in err


def test_get_default_view_and_owner_prompts(capsys, env):
    status, out, _ = run(capsys, "get", "claude", MAIN, "--json", *env)
    assert status == 0 and tuple(json.loads(out)) == ALLOWED_FIELDS
    status, out, _ = run(capsys, "get", "claude", MAIN, "--prompts", *env)
    assert status == 0
    assert "The websocket reconnect test is flaky on CI" in out
    assert f"claude --resume {MAIN}" in out
    status, out, _ = run(capsys, "get", "claude", MAIN, "--prompts", "--json", *env)
    owner = json.loads(out)["owner"]
    assert owner["prompts"][-1] == "Rebase on main and push" and owner["entrypoint"] == "interactive"


def test_bad_input_is_refused_with_a_message(capsys, env):
    status, _, err = run(capsys, "get", "gemini", MAIN, *env)
    assert status == 2 and "unknown harness 'gemini'" in err
    status, _, err = run(capsys, "get", "codex", MAIN, *env)
    assert status == 1 and "no codex session" in err
    status, _, err = run(capsys, "search", "!!!", "--all", *env)
    assert status == 2 and "no searchable words" in err
    status, _, err = run(capsys, "search", "x", "--all", "--limit", "0", *env)
    assert status == 2 and "limit" in err


def test_dirs(capsys, tmp_path, env):
    live = tmp_path / "live"
    live.mkdir()
    Claude("3e0c2b7a-0000-4000-8000-0000000000ca", str(live)).prompt("x").write(tmp_path / "claude")
    status, out, _ = run(capsys, "dirs", "--json", *env)
    assert status == 0 and [d["cwd"] for d in json.loads(out)] == [str(live)]


def test_expunge_asks_and_audits(capsys, tmp_path, env, monkeypatch):
    transcript = next((tmp_path / "claude" / "projects").rglob(f"{MAIN}.jsonl"))
    monkeypatch.setattr(sys, "stdin", io.StringIO("n\n"))
    status, _, err = run(capsys, "expunge", "claude", MAIN, *env)
    assert status == 1 and "[y/N]" in err and transcript.exists()
    monkeypatch.setattr(sys, "stdin", io.StringIO("yes\n"))
    status, out, _ = run(capsys, "expunge", "claude", MAIN, *env)
    assert status == 0 and not transcript.exists() and "2 index entries removed" in out
    audit = tmp_path / "data" / "audit.jsonl"
    assert stat.S_IMODE(audit.stat().st_mode) == 0o600
    line = json.loads(audit.read_text().splitlines()[-1])
    assert (line["action"], line["session_id"], line["actor"]) == ("history.expunge", MAIN, "owner")
    status, _, err = run(capsys, "expunge", "claude", MAIN, "--yes", *env)
    assert status == 1 and "no claude session" in err


def test_progress_bar_on_a_long_build(capsys, tmp_path):
    claude = tmp_path / "claude"
    for i in range(250):
        write_jsonl(
            claude / "projects" / "-w" / f"3e0c2b7a-0000-4000-8000-{i:012d}.jsonl",
            [{"type": "user", "cwd": "/w", "message": {"role": "user", "content": f"p{i}"}}],
        )
    argv = [
        "--data-dir",
        str(tmp_path / "d"),
        "--claude-root",
        str(claude),
        "--codex-root",
        str(tmp_path / "c"),
    ]
    status, out, err = run(capsys, "index", "--progress", *argv)
    shown = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", err)  # rich's bar, forced on: drop its colours
    assert status == 0 and "indexing" in shown and "250/250 transcripts" in shown
    status, out, err = run(capsys, "index", "--full", "--json", *argv)
    report = json.loads(out)
    assert (report["files_read"], report["entries"]) == (250, 250) and err == ""  # not a terminal: no bar


def test_standalone_module_works_without_a_daemon(tmp_path, env):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "connectd.history.cli",
            "history",
            "search",
            "reconnect",
            "--all",
            "--json",
            *env,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "HOME": str(tmp_path)},
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert [r["session_id"] for r in json.loads(proc.stdout)] == [MAIN]


def test_data_dir_defaults_follow_the_daemon(tmp_path, monkeypatch):
    from connectd.history.service import default_claude_root, default_codex_root, default_data_dir

    monkeypatch.setenv("CONNECT_DATA_DIR", str(tmp_path / "d"))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "c"))
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "x"))
    assert (default_data_dir(), default_claude_root(), default_codex_root()) == (
        tmp_path / "d",
        tmp_path / "c",
        tmp_path / "x",
    )
    monkeypatch.delenv("CONNECT_DATA_DIR")
    monkeypatch.delenv("CLAUDE_CONFIG_DIR")
    monkeypatch.delenv("CODEX_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "share"))
    assert default_data_dir() == tmp_path / "share" / "connect"
    assert default_claude_root() == tmp_path / ".claude"
    assert default_codex_root() == tmp_path / ".codex"
