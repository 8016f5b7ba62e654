"""Keeping the history index current as transcripts are written: watch the transcript directories.

:class:`HistoryWatcher` is a service-shaped task of the daemon (``Kind.HISTORY_WATCH``; the supervisor
starts it again after a backoff if it fails). Each time it starts it:

1. puts inotify watches (``watchfiles``' Rust notifier) on ``<claude root>/projects`` and on the Codex
   root (its ``sessions/``, ``archived_sessions/`` and ``session_index.jsonl``), those that exist;
2. runs one incremental update that stats every transcript (the safety net: whatever changed while
   nobody watched is found here, and a change from now on is seen by the watch);
3. then, for each group of changes, updates the index from the changed paths alone: a new or grown
   transcript is read from its stored offset, a deleted one is marked missing, a new directory is
   listed (its files may predate its watch), and Codex's title file is re-read. No stat scan.

While it runs, searches do not catch up by scanning (:attr:`HistoryService.watching`); if it fails or
stops they do again. A root that does not exist yet is checked every ``recheck`` seconds and watched
(after a scan) once it appears; until then a search that finds it there scans
(:attr:`HistoryService.unwatched`).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
from watchfiles import Change
from watchfiles._rust_notify import RustNotify

from connectcore.history import Harness

log = logging.getLogger("connectd.history.watch")

RunSync = Callable[..., Awaitable[Any]]

#: Changes are grouped for at most this long once one is seen (ms); a quiet ``STEP_MS`` ends a group.
DEBOUNCE_MS = 50
STEP_MS = 20
#: How often a missing root is looked for (s).
RECHECK_S = 5.0


def classify(claude_root: Path, codex_root: Path, path: str) -> Harness | None:
    """The harness whose transcript ``path`` would be, by the layout :func:`index.discover` walks."""
    name = os.path.basename(path)
    if not name.endswith(".jsonl") or name.startswith("agent-acompact"):
        return None
    parts = _under(path, claude_root / "projects")
    if parts is not None:
        if len(parts) == 2:
            return Harness.CLAUDE
        if len(parts) == 4 and parts[2] == "subagents" and name.startswith("agent-"):
            return Harness.CLAUDE
        return None
    if not name.startswith("rollout-"):
        return None
    for top in ("sessions", "archived_sessions"):
        parts = _under(path, codex_root / top)
        if parts is not None and 1 <= len(parts) <= 5:
            return Harness.CODEX
    return None


def _under(path: str, root: Path) -> list[str] | None:
    base = str(root) + os.sep
    if not path.startswith(base):
        return None
    return path[len(base) :].split(os.sep)


class HistoryWatcher:
    """Watches the transcript roots of one :class:`~connectd.history.HistoryService`."""

    def __init__(
        self,
        service: Any,
        *,
        run_sync: RunSync | None = None,
        debounce_ms: int = DEBOUNCE_MS,
        step_ms: int = STEP_MS,
        recheck: float = RECHECK_S,
    ) -> None:
        self.service = service
        self.run_sync: RunSync = run_sync or anyio.to_thread.run_sync
        self.debounce_ms = debounce_ms
        self.step_ms = step_ms
        self.recheck = recheck
        self.batches = 0  # change groups applied (tests and the page may read it)

    @property
    def claude_root(self) -> Path:
        return Path(self.service.claude_root)

    @property
    def codex_root(self) -> Path:
        return Path(self.service.codex_root)

    def _targets(self) -> tuple[list[str], list[str]]:
        wanted = [str(self.claude_root / "projects"), str(self.codex_root)]
        present = [p for p in wanted if os.path.isdir(p)]
        return present, [p for p in wanted if p not in present]

    async def run(self) -> None:
        """Watch until cancelled; raises (for the supervisor's backoff) if the notifier fails."""
        try:
            while True:
                present, missing = self._targets()
                if not present:
                    self.service.watching = False
                    await self.run_sync(self.service.update)
                    await anyio.sleep(self.recheck)
                    continue
                await self._watch(present, missing)
        finally:
            self.service.watching = False
            self.service.unwatched = ()

    async def _watch(self, present: list[str], missing: list[str]) -> None:
        stop = threading.Event()
        notify = RustNotify(present, False, False, 50, True, True)
        try:
            # The watch is in place: whatever changed before it is found by one scan.
            report = await self.run_sync(self.service.update)
            log.info("history index: %s", report.as_dict() if hasattr(report, "as_dict") else report)
            self.service.unwatched = tuple(missing)
            self.service.watching = True
            timeout_ms = int(self.recheck * 1000) if missing else 0
            while True:
                try:
                    # A thread that waits in Rust (the GIL released); cancelling sets ``stop``, which the
                    # notifier checks every step.
                    got = await anyio.to_thread.run_sync(
                        notify.watch, self.debounce_ms, self.step_ms, timeout_ms, stop, abandon_on_cancel=True
                    )
                except BaseException:
                    stop.set()
                    raise
                if got == "timeout":
                    if any(os.path.isdir(p) for p in missing):
                        return  # a root appeared: watch it too (after a scan)
                    continue
                if not isinstance(got, set):
                    return  # "signal" or "stop": start again
                await self.apply(got)
        finally:
            stop.set()
            notify.close()

    async def apply(self, changes: Iterable[tuple[int, str]]) -> None:
        """Update the index from one group of changes (off the event loop)."""
        paths, scan = self.changed_paths(changes)
        self.batches += 1
        await self.run_sync(lambda: self.service.apply_changes(paths, rescan=scan))

    def changed_paths(self, changes: Iterable[tuple[int, str]]) -> tuple[list[tuple[Harness, str]], bool]:
        """The transcripts a group of changes touched, and whether a scan is needed (a directory went)."""
        claude, codex = self.claude_root, self.codex_root
        out: dict[str, Harness] = {}
        scan = False
        titles = str(codex / "session_index.jsonl")
        for change, path in changes:
            harness = classify(claude, codex, path)
            if harness is not None:
                out[path] = harness
                continue
            if path == titles:
                continue  # every update re-reads it when it changed
            if change == Change.added and os.path.isdir(path) and not os.path.islink(path):
                # A new directory: files written into it before its watch existed are found here.
                for found in _walk(path):
                    h = classify(claude, codex, found)
                    if h is not None:
                        out[found] = h
            elif change == Change.deleted and not path.endswith(".jsonl"):
                scan = scan or _inside_roots(path, claude, codex)
        return [(h, p) for p, h in out.items()], scan


def _walk(top: str, depth: int = 5) -> Iterable[str]:
    stack = [(top, 0)]
    while stack:
        d, level = stack.pop()
        try:
            with os.scandir(d) as it:
                items = list(it)
        except OSError:
            continue
        for item in items:
            if item.is_dir(follow_symlinks=False):
                if level < depth:
                    stack.append((item.path, level + 1))
            elif item.is_file(follow_symlinks=False):
                yield item.path


def _inside_roots(path: str, claude: Path, codex: Path) -> bool:
    return any(
        _under(path, root) is not None
        for root in (claude / "projects", codex / "sessions", codex / "archived_sessions")
    )
