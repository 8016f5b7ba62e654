"""The watcher's routing facts are read on a change of cwd or binding, or of the bound session's history
entry, never per poll."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio

from connectcore.directory import (
    Directory,
    Evidence,
    EvidenceSource,
    Incarnation,
    PaneObservation,
    note_evidence,
    observe,
)
from connectcore.history import Harness
from connectd.tmux.repo_facts import FactsCache


class _Index:
    def __init__(self) -> None:
        self.entries: dict[tuple[Harness, str], Any] = {}
        self.versions: dict[tuple[Harness, str], int] = {}

    def get(self, harness: Harness, session_id: str) -> Any:
        return self.entries.get((harness, session_id))

    def version(self, harness: Harness, session_id: str) -> int:
        return self.versions.get((harness, session_id), 0)

    def write(self, harness: Harness, session_id: str, entry: Any) -> None:
        self.entries[(harness, session_id)] = entry
        self.versions[(harness, session_id)] = self.version(harness, session_id) + 1


def _cache(now: list[float], index: _Index) -> FactsCache:
    async def run_sync(fn: Any, *args: Any) -> Any:
        return fn(*args)

    history = SimpleNamespace(index=index)
    return FactsCache(run_sync=run_sync, clock=lambda: now[0], history=lambda: history, retry=5.0)


def _dir(cwd: str, title: str = "") -> Directory:
    inc = Incarnation(1, 2, "%1", 100, 5)
    return observe(Directory(), [PaneObservation(incarnation=inc, harness="claude", cwd=cwd, title=title)])


def _repo(path: Path, branch: str) -> Path:
    (path / ".git").mkdir(parents=True)
    (path / ".git" / "HEAD").write_text(f"ref: refs/heads/{branch}\n")
    return path


def test_facts_are_read_once_per_cwd_and_binding_and_the_title_is_joined_each_time(tmp_path: Path) -> None:
    a, b = _repo(tmp_path / "a", "main"), _repo(tmp_path / "b", "feat")
    now, index = [0.0], _Index()
    cache = _cache(now, index)

    async def go() -> None:
        d = await cache.refresh(_dir(str(a)))
        assert (d.panes["%1"].repo, d.panes["%1"].branch) == (str(a), "main")
        reads = cache.reads
        for _ in range(5):  # polls with nothing changed read nothing
            d = await cache.refresh(_dir(str(a), title="PR #7 review"))
        assert cache.reads == reads and d.panes["%1"].pr_links == ("#7",)
        d = await cache.refresh(_dir(str(b)))  # cwd changed: git read again
        assert d.panes["%1"].branch == "feat" and cache.reads == reads + 1
        bound = note_evidence(_dir(str(b)), Evidence("%1", d.panes["%1"].token, EvidenceSource.REGISTRY, "claude", "s1"))
        d = await cache.refresh(bound)  # binding changed: the index is asked; no entry yet
        assert cache.reads == reads + 2 and d.panes["%1"].session_title == ""
        await cache.refresh(bound)
        assert cache.reads == reads + 2  # the miss is retried only after `retry` seconds
        index.write(Harness.CLAUDE, "s1", SimpleNamespace(title="Billing", prs=("https://github.com/o/r/pull/3",)))
        now[0] = 6.0
        d = await cache.refresh(bound)
        assert (d.panes["%1"].session_title, d.panes["%1"].pr_links) == ("Billing", ("https://github.com/o/r/pull/3",))
        await cache.refresh(bound)
        assert cache.reads == reads + 3

    anyio.run(go)


def test_a_bound_sessions_entry_is_read_again_when_the_index_rewrote_it(tmp_path: Path) -> None:
    """Seen live: a real Codex session named PR 12 in its second prompt, after connectd had read its entry;
    the pane's facts never showed the PR. The entry is read again when its index version moves, and
    only then."""
    a = _repo(tmp_path / "a", "main")
    now, index = [0.0], _Index()
    cache = _cache(now, index)
    index.write(Harness.CLAUDE, "s1", SimpleNamespace(title="Start", prs=()))

    async def go() -> None:
        d = await cache.refresh(_dir(str(a)))
        bound = note_evidence(_dir(str(a)), Evidence("%1", d.panes["%1"].token, EvidenceSource.REGISTRY, "claude", "s1"))
        d = await cache.refresh(bound)
        assert (d.panes["%1"].session_title, d.panes["%1"].pr_links) == ("Start", ())
        reads = cache.reads
        now[0] = 100.0
        await cache.refresh(bound)
        assert cache.reads == reads  # found and unchanged: not read again, however long
        index.write(Harness.CLAUDE, "s1", SimpleNamespace(title="PR 12", prs=("https://github.com/o/r/pull/12",)))
        d = await cache.refresh(bound)
        assert d.panes["%1"].pr_links == ("https://github.com/o/r/pull/12",) and cache.reads == reads + 1
        await cache.refresh(bound)
        assert cache.reads == reads + 1

    anyio.run(go)
