"""The history watcher on real directories: files written, grown and deleted under watched roots.

Every wait below is a bounded poll for an outcome (so a broken watcher fails instead of hanging), never
a claim about how fast it happened: speed is measured by scripts/bench_history.py.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from connectcore.history import Harness
from connectd.history.service import HistoryService
from connectd.history.watch import HistoryWatcher, classify
from tests.fixtures.history.transcripts import Claude, Codex, append_jsonl, codex_titles

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "history"
CODEX_MAIN = "019bce9f-0a40-79e2-8351-8818e8487fb6"
NEW = "3e0c2b7a-0000-4000-8000-00000000fe01"

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def roots(tmp_path: Path) -> tuple[Path, Path, Path]:
    claude, codex = tmp_path / "claude", tmp_path / "codex"
    shutil.copytree(FIXTURES / "claude", claude)
    shutil.copytree(FIXTURES / "codex", codex)
    return tmp_path, claude, codex


@asynccontextmanager
async def watching(svc: HistoryService, **kw: float) -> AsyncIterator[HistoryWatcher]:
    watcher = HistoryWatcher(svc, **kw)  # type: ignore[arg-type]
    async with anyio.create_task_group() as tg:
        tg.start_soon(watcher.run)
        await until(lambda: svc.watching)
        yield watcher
        tg.cancel_scope.cancel()
    assert not svc.watching  # stopped: searches catch up by scanning again


async def until(cond: Callable[[], object], limit: float = 20.0) -> None:
    with anyio.fail_after(limit):
        while not cond():
            await anyio.sleep(0.01)


def found(svc: HistoryService, query: str) -> list[str]:
    return [str(r["session_id"]) for r in svc.find_sessions(query, pane_pids={}, include_subagents=True)]


class NoScans:
    """Counts full scans (updates without ``paths``) of a service's index."""

    def __init__(self, svc: HistoryService) -> None:
        self.scans = 0
        real = svc.index.update

        def update(*args: object, **kw: object):  # type: ignore[no-untyped-def]
            if kw.get("paths") is None:
                self.scans += 1
            return real(*args, **kw)  # type: ignore[arg-type]

        svc.index.update = update  # type: ignore[method-assign]


async def test_a_new_transcript_in_a_new_directory_becomes_searchable(roots):
    tmp, claude, codex = roots
    with HistoryService(tmp / "data", claude, codex, pane_pids=dict) as svc:
        async with watching(svc) as watcher:
            counter = NoScans(svc)
            assert found(svc, "zeppelin") == []
            Claude(NEW, "/home/dev/airship").prompt("tune the zeppelin ballast").write(claude)  # a new project dir
            await until(lambda: found(svc, "zeppelin") == [NEW])
            assert counter.scans == 0  # from the event alone: no scan of the roots
            assert watcher.batches >= 1


async def test_a_grown_transcript_is_read_from_its_offset_and_searchable(roots):
    tmp, claude, codex = roots
    with HistoryService(tmp / "data", claude, codex, pane_pids=dict) as svc:
        s = Claude(NEW, "/home/dev/airship").prompt("first prompt about hangars")
        path = s.write(claude)
        async with watching(svc):
            assert found(svc, "hangars") == [NEW]
            more = Claude(NEW, "/home/dev/airship")
            more.minute = 10
            more.prompt("now the mooring mast")
            append_jsonl(path, more.records)
            await until(lambda: found(svc, "mooring") == [NEW])
            entry = svc.get_entry(Harness.CLAUDE, NEW)
            assert entry.prompts == ("first prompt about hangars", "now the mooring mast")
            report = svc.index.update(claude, codex, paths=[(Harness.CLAUDE, str(path))])
            assert report.files_read == 0  # already read up to its end


async def test_a_deleted_transcript_marks_its_entry_missing_and_a_rewrite_replaces_it(roots):
    tmp, claude, codex = roots
    with HistoryService(tmp / "data", claude, codex, pane_pids=dict) as svc:
        path = Claude(NEW, "/home/dev/airship").prompt("gondola wiring").write(claude)
        async with watching(svc):
            assert svc.get_entry(Harness.CLAUDE, NEW).source_missing is False
            path.unlink()
            await until(lambda: svc.get_entry(Harness.CLAUDE, NEW).source_missing)
            assert svc.get_entry(Harness.CLAUDE, NEW).resume_argv is None
            Claude(NEW, "/home/dev/airship").prompt("rudder cables instead").write(claude)
            await until(lambda: found(svc, "rudder") == [NEW])
            assert found(svc, "gondola") == []  # the rewritten file replaced the old prompts
            assert not svc.get_entry(Harness.CLAUDE, NEW).source_missing


async def test_codex_rollouts_and_thread_names_are_followed(roots):
    tmp, claude, codex = roots
    with HistoryService(tmp / "data", claude, codex, pane_pids=dict) as svc:
        async with watching(svc):
            sid = "019bcea9-0000-7000-8000-00000000fe02"
            Codex(sid, "/home/dev/airship").prompt("calibrate the altimeter").write(codex)
            await until(lambda: found(svc, "altimeter") == [sid])
            codex_titles(codex, [(CODEX_MAIN, "Blimp telemetry")])
            await until(lambda: svc.get_entry(Harness.CODEX, CODEX_MAIN).title == "Blimp telemetry")


async def test_a_root_that_appears_later_is_watched_after_a_scan(tmp_path):
    claude, codex = tmp_path / "claude", tmp_path / "codex"
    codex.mkdir()
    with HistoryService(tmp_path / "data", claude, codex, pane_pids=dict) as svc:
        async with watching(svc, recheck=0.05):
            Claude(NEW, "/home/dev/airship").prompt("envelope pressure").write(claude)  # creates projects/
            await until(lambda: found(svc, "envelope") == [NEW])
            other = "3e0c2b7a-0000-4000-8000-00000000fe03"
            Claude(other, "/home/dev/airship").prompt("envelope seams").write(claude)
            await until(lambda: sorted(found(svc, "envelope")) == sorted([NEW, other]))


async def test_a_search_finds_a_transcript_in_a_root_that_appeared_before_the_watcher_looked_again(tmp_path):
    """Claim: a transcript written in a root that did not exist when the watch began is found by the next
    search, not a recheck later (CI stop 17: a person's first Claude session, searched seconds after it
    ended, was not found while only ``~/.codex`` was watched)."""
    claude, codex = tmp_path / "claude", tmp_path / "codex"
    codex.mkdir()
    with HistoryService(tmp_path / "data", claude, codex, pane_pids=dict, catch_up_interval=0) as svc:
        async with watching(svc, recheck=3600):
            Claude(NEW, "/home/dev/airship").prompt("envelope pressure").write(claude)  # creates projects/
            assert found(svc, "envelope") == [NEW]


async def test_a_removed_project_directory_is_noticed(roots):
    tmp, claude, codex = roots
    with HistoryService(tmp / "data", claude, codex, pane_pids=dict) as svc:
        path = Claude(NEW, "/home/dev/airship").prompt("ballonet valves").write(claude)
        async with watching(svc):
            moved = tmp / "elsewhere"
            os.rename(path.parent, moved)  # one event for the directory, none per file
            await until(lambda: svc.get_entry(Harness.CLAUDE, NEW).source_missing)


def test_classify_follows_the_discovered_layout(tmp_path):
    claude, codex = tmp_path / "c", tmp_path / "x"
    p = str(claude / "projects")
    assert classify(claude, codex, f"{p}/-w/{NEW}.jsonl") is Harness.CLAUDE
    assert classify(claude, codex, f"{p}/-w/{NEW}/subagents/agent-a1.jsonl") is Harness.CLAUDE
    assert classify(claude, codex, f"{p}/-w/{NEW}/subagents/agent-acompact-1.jsonl") is None
    assert classify(claude, codex, f"{p}/-w/{NEW}/tool-results/x.jsonl") is None
    assert classify(claude, codex, f"{p}/{NEW}.jsonl") is None
    assert classify(claude, codex, f"{p}/-w/{NEW}.json") is None
    s = str(codex / "sessions")
    assert classify(claude, codex, f"{s}/2026/01/15/rollout-2026-01-15T10-00-00-{CODEX_MAIN}.jsonl") is Harness.CODEX
    assert classify(claude, codex, f"{codex}/archived_sessions/rollout-x-{CODEX_MAIN}.jsonl") is Harness.CODEX
    assert classify(claude, codex, f"{s}/2026/01/15/notes.jsonl") is None
    assert classify(claude, codex, f"{codex}/history.jsonl") is None
