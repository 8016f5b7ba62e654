"""The directory's routing facts, read cheaply: a pane's repository and branch (its ``.git`` files),
its bound session's title and PR links (the history index entry), and the PR links in its title.

Each source is read again only when what it depends on changed: the git facts on a change of the
pane's incarnation or cwd, the history entry on a change of incarnation or binding, or when the index
rewrote that session's entry (its version moved: a session names a PR or gets its title as it goes on),
and, while the index has no entry for the session yet, at most once per ``retry`` seconds. Parsing the
pane title is pure and cheap, so it is joined at every poll. The rules are :mod:`connectcore.routing`'s.

The cache is the watcher's, given what it uses (issue 24), not the engine: ``run_sync`` (git files and
the index are read off the event loop), ``clock`` and ``history`` (a callable: the session index the
daemon serves, or None).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from connectcore import directory as D
from connectcore import routing as RT
from connectcore.history import Harness
from connectd.history.repos import git_facts

if TYPE_CHECKING:
    from connectd.daemon.runner import RunSync

GitKey = tuple[str, str]  # (incarnation, cwd)
EntryKey = tuple[str, str, str]  # (incarnation, harness, session id)


@dataclass
class _Entry:
    key: EntryKey
    title: str = ""
    prs: tuple[str, ...] = ()
    found: bool = False
    at: float = 0.0
    version: int = 0  # the index's version of the session's entry when it was read


class FactsCache:
    def __init__(
        self, *, run_sync: RunSync, clock: Callable[[], float], history: Callable[[], Any | None], retry: float = 5.0
    ) -> None:
        self.run_sync, self.clock, self.history, self.retry = run_sync, clock, history, retry
        self.git: dict[str, tuple[GitKey, tuple[str | None, str | None]]] = {}
        self.entries: dict[str, _Entry] = {}
        self.reads = 0  # file and index reads done, for the test that they are not per poll

    def cached(self, pane_id: str, token: str, title: str) -> RT.Facts:
        """The facts known for this incarnation, joined with its current title (no I/O)."""
        git = self.git.get(pane_id)
        repo, branch = git[1] if git is not None and git[0][0] == token else (None, None)
        entry = self.entries.get(pane_id)
        if entry is None or entry.key[0] != token:
            entry = _Entry(("", "", ""))
        return RT.facts_for(repo=repo, branch=branch, title=title, entry_title=entry.title, entry_prs=entry.prs)

    async def refresh(self, directory: D.Directory) -> D.Directory:
        """Read what changed for each live pane and return the directory with its facts."""
        for pane_id in [p for p in self.git if p not in directory.panes]:
            del self.git[pane_id]
        for pane_id in [p for p in self.entries if p not in directory.panes]:
            del self.entries[pane_id]
        for record in directory.records():
            await self._git(record)
            await self._entry(record)
            facts = self.cached(record.pane_id, record.token, record.title)
            directory = D.note_facts(
                directory, record.pane_id, record.token, repo=facts.repo, branch=facts.branch,
                session_title=facts.session_title, pr_links=facts.pr_links,
            )
        return directory

    async def _git(self, record: D.PaneRecord) -> None:
        key = (record.token, record.cwd)
        held = self.git.get(record.pane_id)
        if held is not None and held[0] == key:
            return
        self.reads += 1
        self.git[record.pane_id] = (key, await self.run_sync(git_facts, record.cwd))

    async def _entry(self, record: D.PaneRecord) -> None:
        binding = record.binding
        if not isinstance(binding, D.SessionBinding):
            key: EntryKey = (record.token, "", "")
        else:
            key = (record.token, binding.harness, binding.session_id)
        held = self.entries.get(record.pane_id)
        now = self.clock()
        history: Any | None = self.history() if key[1] in {h.value for h in Harness} else None
        version = history.index.version(Harness(key[1]), key[2]) if history is not None else 0
        if (
            held is not None
            and held.key == key
            and held.version == version
            and (held.found or not key[1] or now - held.at < self.retry)
        ):
            return
        entry = _Entry(key, at=now, version=version)
        if history is not None:
            self.reads += 1
            found = await self.run_sync(lambda: history.index.get(Harness(key[1]), key[2]))
            if found is not None:
                entry = _Entry(key, found.title, tuple(found.prs), True, now, version)
        self.entries[record.pane_id] = entry
