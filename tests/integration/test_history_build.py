"""A full build (``connectd history index --full``): the same index as incremental passes, built in a
new file and copied in whole, so a build that stops or is killed midway leaves the previous index."""

from __future__ import annotations

import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import connectd.history.index as index_module
from connectcore.history import Harness
from connectd.history.index import BUILD_SUFFIX, DB_NAME, HistoryIndex
from connectd.history.reader import Readers
from connectd.history.service import HistoryService
from tests.fixtures.history.transcripts import Claude, Codex, append_jsonl, claude_subagent, make_repo

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "history"
WORDS = [
    "websocket",
    "reconnect",
    "billing",
    "invoice",
    "oauth",
    "token",
    "refresh",
    "flaky",
    "fixture",
    "deadlock",
    "mutex",
    "kubernetes",
    "deploy",
    "canary",
    "rollout",
    "parser",
    "schema",
    "migration",
    "grpc",
    "csrf",
    "cookie",
    "straße",
    "naïve",
    "café",
    "東京",
    "データ",
    "x2y",
]
QUERIES = [
    "websocket",
    "oauth token refresh",
    "flaky fixture",
    "café",
    "データ",
    "canary rollout x2y",
    "main",
]
NOW = 1.77e9


def corpus(root: Path, sessions: int, seed: int = 5) -> tuple[Path, Path]:
    """The hand-made fixtures plus ``sessions`` generated ones: Claude Code sessions with titles, PR
    links, subagents and an injected or meta prompt now and then; Codex rollouts, some named in
    ``session_index.jsonl``; one Codex session with two rollouts (live and archived); a transcript with
    bad lines; a file with no session in it."""
    claude, codex = root / "claude", root / "codex"
    shutil.copytree(FIXTURES / "claude", claude)
    shutil.copytree(FIXTURES / "codex", codex)
    rng = random.Random(seed)
    repos = [make_repo(root / "work" / f"repo{i}") for i in range(3)]

    def text(n: int) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(n))

    titles = []
    for i in range(sessions):
        cwd = str(rng.choice(repos) / ("pkg" if i % 4 == 0 else ""))
        if i % 5 == 4:
            sid = f"019bcea0-0000-7000-8000-{i:012d}"
            s = Codex(sid, cwd, branch=rng.choice(["main", f"feat/{rng.choice(WORDS)}", None]))
            for _ in range(rng.randint(1, 4)):
                s.prompt(text(rng.randint(1, 30))).say(text(5)).tool("ls", "TOOLSECRET " + text(20))
            s.write(codex)
            if i % 3 == 0:
                titles.append({"id": sid, "thread_name": text(3), "updated_at": "2026-01-15T10:00:00.000Z"})
            continue
        sid = f"3e0c2b7a-0000-4000-8000-{i:012d}"
        s = Claude(sid, cwd, branch=rng.choice(["main", "HEAD", f"fix/{rng.choice(WORDS)}"]))
        for _ in range(rng.randint(1, 5)):
            s.prompt(text(rng.randint(1, 40))).say(text(8)).tool("Bash", {"command": "ls"}, text(30))
        if i % 7 == 0:
            s.title("ai-title", text(3))
        if i % 11 == 0:
            s.pr_link(i)
        if i % 13 == 0:
            s.meta("<command-name>/clear</command-name>")
        s.write(claude)
        if i % 9 == 0:
            claude_subagent(claude, s, f"a{i:016x}", text(12), tool_output="TOOLSECRET")
    append_jsonl(codex / "session_index.jsonl", titles)
    # One Codex session in two rollouts: the archived copy holds a prompt the live one does not.
    twice = Codex("019bcea9-0000-7000-8000-00000000beef", str(repos[0])).prompt("archived websocket plan")
    twice.write(codex)
    later = twice.path(codex)
    twice.prompt("later billing question")
    archived = codex / "archived_sessions" / later.name
    archived.parent.mkdir(parents=True)
    archived.write_text("\n".join(json.dumps(r) for r in twice.records) + "\n")
    bad = Claude("3e0c2b7a-0000-4000-8000-0000000000b1", str(repos[1])).prompt("still indexed websocket")
    path = bad.write(claude)
    with open(path, "ab") as f:
        f.write(b"{oops\n\xff\xfe\n" + b'{"type":"user","message":{"role":"user","content":"cut')
    (claude / "projects" / "-empty").mkdir()
    (claude / "projects" / "-empty" / "3e0c2b7a-0000-4000-8000-0000000000e1.jsonl").write_text(
        '{"type":"x"}\n'
    )
    return claude, codex


def dump(data: Path) -> dict[str, Any]:
    """Everything an index holds, with entries named by (harness, session id) instead of row ids."""
    db = sqlite3.connect(data / DB_NAME)
    try:
        cols = [r[1] for r in db.execute("PRAGMA table_info(entries)") if r[1] != "id"]
        keys = {r[0]: (r[1], r[2]) for r in db.execute("SELECT id, harness, session_id FROM entries")}
        return {
            "entries": sorted(db.execute(f"SELECT {', '.join(cols)} FROM entries")),
            "postings": sorted((t, keys[d], *rest) for t, d, *rest in db.execute("SELECT * FROM postings")),
            "files": sorted(db.execute("SELECT * FROM files")),
            "totals": db.execute("SELECT * FROM totals").fetchall(),
            "codex_titles": sorted(db.execute("SELECT * FROM codex_titles")),
            "meta": sorted(db.execute("SELECT * FROM meta")),
            "tables": sorted(db.execute("SELECT type, name, sql FROM sqlite_master")),
        }
    finally:
        db.close()


def searches(data: Path, claude: Path, codex: Path) -> list[Any]:
    with HistoryService(data, claude, codex, pane_pids=dict) as svc:
        return [
            svc.find_sessions(q, repo=repo, limit=limit, include_subagents=True, catch_up=False, now=NOW)
            for q in QUERIES
            for repo in (None, str(claude.parent / "work" / "repo1"))
            for limit in (3, 50)
        ]


@pytest.mark.parametrize("workers", [1, 2])
def test_a_full_build_stores_what_an_incremental_pass_stores(tmp_path, workers):
    """Row for row (entries, postings, files with their parser states, totals, titles), and the same
    search results: in this process (workers=1) and with reader processes (230 transcripts)."""
    claude, codex = corpus(tmp_path, 220)
    with HistoryIndex(tmp_path / "incremental") as ix:
        step = ix.update(claude, codex, workers=workers)
    with HistoryIndex(tmp_path / "full") as ix:
        full = ix.update(claude, codex, full=True, workers=workers)
        assert ix.count() == len(full.changed) == full.entries_written
        # The session with two rollouts was built again from both.
        twice = ix.get(Harness.CODEX, "019bcea9-0000-7000-8000-00000000beef", with_prompts=True)
        assert twice is not None and twice.prompts == ("archived websocket plan", "later billing question")
    assert (full.files_seen, full.files_read, full.bytes_read, full.skip_counts()) == (
        step.files_seen,
        step.files_read,
        step.bytes_read,
        step.skip_counts(),
    )
    assert full.files_seen > Readers(workers).workers * 100
    incremental, built = dump(tmp_path / "incremental"), dump(tmp_path / "full")
    assert built == incremental
    found = searches(tmp_path / "full", claude, codex)
    assert found == searches(tmp_path / "incremental", claude, codex)
    assert all(found[:4]), "every query found something"
    assert not (tmp_path / "full" / (DB_NAME + BUILD_SUFFIX)).exists()


def test_a_full_build_over_an_index_replaces_it_whole(tmp_path):
    """What was indexed before and is gone now is dropped; what changed is read again; readers of an
    entry see its version move, whether it was rewritten or dropped; the file stays in WAL mode."""
    claude, codex = corpus(tmp_path, 30)
    with HistoryIndex(tmp_path / "data") as ix:
        ix.update(claude, codex)
        gone = next((claude / "projects").rglob("3e0c2b7a-0000-4000-8000-000000000001.jsonl"))
        gone.unlink()
        grown = next((claude / "projects").rglob("3e0c2b7a-0000-4000-8000-000000000002.jsonl"))
        s = Claude("3e0c2b7a-0000-4000-8000-000000000002", "/elsewhere")
        s.minute = 90
        append_jsonl(grown, s.prompt("appended kubernetes question").records)
        before = {k: ix.version(*k) for k in [(Harness.CLAUDE, "3e0c2b7a-0000-4000-8000-000000000001")]}
        report = ix.update(claude, codex, full=True)
        assert report.entries_removed == 1
        assert all(ix.version(*k) > v for k, v in before.items())
        assert ix.get(Harness.CLAUDE, "3e0c2b7a-0000-4000-8000-000000000001") is None
    with HistoryIndex(tmp_path / "fresh") as ix:
        ix.update(claude, codex)
    assert dump(tmp_path / "data") == dump(tmp_path / "fresh")
    with sqlite3.connect(tmp_path / "data" / DB_NAME) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    for name in os.listdir(tmp_path / "data"):
        assert os.stat(tmp_path / "data" / name).st_mode & 0o077 == 0, name


def test_searches_see_the_previous_index_until_a_full_build_is_complete(tmp_path, monkeypatch):
    claude, codex = corpus(tmp_path, 40)
    monkeypatch.setattr(index_module, "_BATCH_FILES", 5)
    new = "3e0c2b7a-0000-4000-8000-0000000000f1"
    with HistoryIndex(tmp_path / "data") as ix:
        ix.update(claude, codex)
        count = ix.count()
        Claude(new, "/new").prompt("websocket again").write(claude)
        seen: list[tuple[int, bool]] = []
        ix.update(
            claude,
            codex,
            full=True,
            progress=lambda d, t: seen.append((ix.count(), ix.get(Harness.CLAUDE, new) is None)),
        )
        assert len(seen) > 3 and set(seen[:-1]) == {(count, True)}
        assert seen[-1] == (count + 1, False)


def test_a_full_build_that_fails_midway_leaves_the_previous_index(tmp_path, monkeypatch):
    claude, codex = corpus(tmp_path, 40)
    monkeypatch.setattr(index_module, "_BATCH_FILES", 5)
    with HistoryIndex(tmp_path / "data") as ix:
        ix.update(claude, codex)
    before, found = dump(tmp_path / "data"), searches(tmp_path / "data", claude, codex)
    Claude("3e0c2b7a-0000-4000-8000-0000000000f1", "/new").prompt("websocket again").write(claude)

    def stop(done: int, total: int) -> None:
        if done >= 10:
            raise KeyboardInterrupt

    with HistoryIndex(tmp_path / "data") as ix:
        with pytest.raises(KeyboardInterrupt):
            ix.update(claude, codex, full=True, progress=stop)
        assert not (tmp_path / "data" / (DB_NAME + BUILD_SUFFIX)).exists()
        assert dump(tmp_path / "data") == before
        assert searches(tmp_path / "data", claude, codex) == found
        ix.update(claude, codex, full=True)  # and the next one completes
        assert ix.get(Harness.CLAUDE, "3e0c2b7a-0000-4000-8000-0000000000f1") is not None


# Run a full build in a child process and kill it (SIGKILL) at a chosen point: while it reads
# ("reading": after the first batch), or while it copies the finished file into the index ("copying":
# halfway through the copy, with a page cache so small that the copy has already spilled uncommitted
# pages into the index's WAL).
KILLED_BUILD = """
import os, signal, sqlite3, sys
from pathlib import Path
import connectd.history.index as index_module

stage, data, claude, codex = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4])


def die(*_):
    os.kill(os.getpid(), signal.SIGKILL)


class Killing(sqlite3.Connection):
    def backup(self, target, **kw):
        def progress(status, remaining, total):
            if remaining < total // 2:
                die()

        super().backup(target, pages=1, progress=progress)


real = sqlite3.connect
sqlite3.connect = lambda *a, **k: real(*a, factory=Killing, **k)
index_module._BATCH_FILES = 5
ix = index_module.HistoryIndex(data)
ix._db.execute("PRAGMA cache_size=4")
ix.update(claude, codex, full=True, workers=1, progress=die if stage == "reading" else None)
print("not killed", flush=True)
"""


@pytest.mark.parametrize("stage", ["reading", "copying"])
def test_a_killed_full_build_leaves_the_previous_index_usable(tmp_path, stage):
    claude, codex = corpus(tmp_path, 40)
    data = tmp_path / "data"
    with HistoryIndex(data) as ix:
        ix.update(claude, codex)
    before, found = dump(data), searches(data, claude, codex)
    Claude("3e0c2b7a-0000-4000-8000-0000000000f1", "/new").prompt("websocket again").write(claude)
    wal = data / (DB_NAME + "-wal")
    wal_before = wal.stat().st_size if wal.exists() else 0
    proc = subprocess.run(
        [sys.executable, "-c", KILLED_BUILD, stage, str(data), str(claude), str(codex)],
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == -9, proc.stderr.decode()
    build = data / (DB_NAME + BUILD_SUFFIX)
    assert build.exists()  # left behind; the next full build starts it again
    if stage == "copying":
        assert wal.stat().st_size > wal_before + 8 * 4096, (
            wal.stat().st_size
        )  # the copy had reached the WAL, uncommitted
    with sqlite3.connect(data / DB_NAME) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert dump(data) == before
    assert searches(data, claude, codex) == found
    with HistoryIndex(data) as ix:
        ix.update(claude, codex, full=True)
        assert ix.get(Harness.CLAUDE, "3e0c2b7a-0000-4000-8000-0000000000f1") is not None
    assert not build.exists()
