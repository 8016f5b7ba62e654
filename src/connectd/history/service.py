"""The history service: what the daemon's MCP tools, its owner API and the CLI call.

Agent-facing reads (:meth:`HistoryService.find_sessions`, :meth:`HistoryService.get_session`) return
only ``connectcore.history.ALLOWED_FIELDS``; the caller's scope comes in as ``allowed_repos``
(``None`` = every repository) and is applied before ranking. Owner-facing calls
(:meth:`HistoryService.get_entry`, :meth:`HistoryService.recent_dirs`, :meth:`HistoryService.expunge`,
:meth:`HistoryService.restorable`) see more. Nothing here needs the daemon to be running.
"""

from __future__ import annotations

import os
import shutil
import stat
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from connectcore.history import (
    LIMIT_DEFAULT,
    ExpungePlan,
    Harness,
    HistoryError,
    LivenessSnapshot,
    LivenessView,
    PaneBinding,
    PathKind,
    RestorePlan,
    SessionEntry,
    SessionNotFound,
    check_limit,
    check_readable,
    claimed,
    expunge_dir_candidates,
    expunge_plan,
    expunge_refusal,
    expunged_sessions,
    iso_utc,
    liveness_view,
    parse_harness,
    project,
    query_terms,
    rank,
    scope_for,
    select_restorable,
)
from connectcore.history import SessionRunning as SessionRunning  # re-exported: the core decides it
from connectd.history.index import HistoryIndex, IndexReport, Progress
from connectd.history.liveness import LivenessProbe, ProcFS, tmux_pane_pids
from connectd.history.parsers import MAX_LINE_BYTES
from connectd.history.repos import repo_of

#: A search re-scans the transcript roots first unless it did so this recently (seconds).
CATCH_UP_INTERVAL_S = 1.0

AuditSink = Callable[[Mapping[str, Any]], None]


def default_data_dir() -> Path:
    """``$CONNECT_DATA_DIR``, else ``platformdirs.user_data_dir("connect")`` (as the daemon's CLI)."""
    env = os.environ.get("CONNECT_DATA_DIR")
    if env:
        return Path(env)
    import platformdirs

    return Path(platformdirs.user_data_dir("connect"))


def default_claude_root() -> Path:
    env = os.environ.get("CLAUDE_CONFIG_DIR")
    return Path(env) if env else Path.home() / ".claude"


def default_codex_root() -> Path:
    env = os.environ.get("CODEX_HOME")
    return Path(env) if env else Path.home() / ".codex"


@dataclass(frozen=True)
class ExpungeResult:
    harness: Harness
    session_id: str
    deleted: tuple[str, ...]
    entries_removed: int
    subagents: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "harness": self.harness.value,
            "session_id": self.session_id,
            "deleted": list(self.deleted),
            "entries_removed": self.entries_removed,
            "subagents": list(self.subagents),
            "errors": list(self.errors),
        }


@dataclass
class _CatchUp:
    last: float = -1e18
    report: IndexReport | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


class HistoryService:
    """One history index over one pair of transcript roots."""

    def __init__(
        self,
        data_dir: Path | None = None,
        claude_root: Path | None = None,
        codex_root: Path | None = None,
        *,
        clock: Callable[[], float] = time.time,
        proc: ProcFS | None = None,
        pane_pids: Callable[[], Mapping[int, str]] = tmux_pane_pids,
        max_line_bytes: int = MAX_LINE_BYTES,
        catch_up_interval: float = CATCH_UP_INTERVAL_S,
    ) -> None:
        self.data_dir = Path(data_dir) if data_dir is not None else default_data_dir()
        self.claude_root = Path(claude_root) if claude_root is not None else default_claude_root()
        self.codex_root = Path(codex_root) if codex_root is not None else default_codex_root()
        self.clock = clock
        self.index = HistoryIndex(self.data_dir, max_line_bytes=max_line_bytes)
        self.probe = LivenessProbe(self.claude_root, self.codex_root, proc=proc)
        self._pane_pids = pane_pids
        self._catch_up = _CatchUp()
        self.catch_up_interval = catch_up_interval
        #: True while a :class:`~connectd.history.watch.HistoryWatcher` keeps the index current: searches
        #: then do not catch up by scanning the transcript roots.
        self.watching = False
        #: Roots that watcher could not watch because they did not exist when it began: once one appears,
        #: searches catch up by scanning again until the watcher watches it too (it looks every few
        #: seconds), so a transcript written in a new root is found at once, not a recheck later.
        self.unwatched: tuple[str, ...] = ()

    def close(self) -> None:
        self.index.close()

    def __enter__(self) -> HistoryService:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- indexing ----------------------------------------------------------------------------------

    def update(self, *, full: bool = False, progress: Progress | None = None) -> IndexReport:
        """Bring the index up to date (``full``: rebuild it from the transcripts)."""
        with self._catch_up.lock:
            report = self.index.update(self.claude_root, self.codex_root, full=full, progress=progress)
            self._catch_up.last = time.monotonic()
            self._catch_up.report = report
            return report

    def catch_up(self) -> IndexReport | None:
        """An incremental update, unless one ran within ``catch_up_interval`` seconds or a watcher
        keeps the index current."""
        if self.watching and not any(os.path.isdir(root) for root in self.unwatched):
            return None
        if time.monotonic() - self._catch_up.last < self.catch_up_interval:
            return None
        return self.update()

    def apply_changes(self, paths: Iterable[tuple[Harness, str]], *, rescan: bool = False) -> IndexReport:
        """Update the index from transcripts known to have changed (the watcher's events), without a
        scan of the roots; ``rescan``: a directory went away, so scan them after all."""
        if rescan:
            return self.update()
        with self._catch_up.lock:
            return self.index.update(self.claude_root, self.codex_root, paths=list(paths))

    # -- identity ----------------------------------------------------------------------------------

    @staticmethod
    def repo_of(path: str) -> str:
        """The repository identity of a directory (a worktree folds into its main repository)."""
        return repo_of(path) or os.path.realpath(path)

    def _liveness(
        self, entries: Iterable[SessionEntry], pane_pids: Mapping[int, str] | None
    ) -> LivenessSnapshot:
        entries = list(entries)
        panes = pane_pids if pane_pids is not None else self._pane_pids()
        codex = any(e.harness is Harness.CODEX for e in entries)
        return self.probe.snapshot(panes, codex=codex)

    # -- agent-facing reads ------------------------------------------------------------------------

    def find_sessions(
        self,
        query: str,
        *,
        repo: str | None = None,
        limit: int = LIMIT_DEFAULT,
        include_headless: bool = False,
        include_subagents: bool = False,
        allowed_repos: frozenset[str] | None = None,
        pane_pids: Mapping[int, str] | None = None,
        now: float | None = None,
        catch_up: bool = True,
    ) -> list[dict[str, object]]:
        """Ranked sessions matching ``query``, projected onto the allowlist.

        ``repo`` narrows to one repository: any path inside it (a linked worktree folds into its main
        repository); ``allowed_repos`` (None = all) is the caller's scope, as repository identities
        (:meth:`repo_of`). Both apply in the SQL that selects candidates, before ranking.
        """
        terms = query_terms(query)
        check_limit(limit)
        if repo is not None:
            if not isinstance(repo, str) or not repo.strip():
                raise HistoryError(f"repo must be a non-empty path, got {repo!r}")
            repo = self.repo_of(os.path.abspath(repo))
        scope = scope_for(
            repo, allowed_repos, include_headless=include_headless, include_subagents=include_subagents
        )
        if catch_up:
            self.catch_up()
        stats = self.index.stats(terms)
        now = self.clock() if now is None else now
        # The index returns the few candidates that can make the top ``limit`` (scored in SQL); the
        # reference ranking orders them exactly.
        candidates = self.index.top_candidates(terms, scope, stats, now=now, limit=limit)
        ranked = rank(candidates, terms, stats, scope=scope, now=now, limit=limit)
        if not ranked:
            return []
        found = [
            (self.index.get(r.entry.harness, r.entry.session_id) or r.entry, r.matched_terms) for r in ranked
        ]
        snap = self._liveness((e for e, _ in found), pane_pids)
        return [project(e, liveness_view(snap, e), terms) for e, terms in found]

    def get_session(
        self,
        harness: str | Harness,
        session_id: str,
        *,
        allowed_repos: frozenset[str] | None = None,
        pane_pids: Mapping[int, str] | None = None,
        catch_up: bool = True,
    ) -> dict[str, object]:
        """One session by harness and id, projected onto the allowlist, if its repo is in scope."""
        entry = self._entry(harness, session_id, catch_up=catch_up)
        check_readable(entry, allowed_repos)
        snap = self._liveness([entry], pane_pids)
        return project(entry, liveness_view(snap, entry))

    # -- owner-facing ------------------------------------------------------------------------------

    def get_entry(self, harness: str | Harness, session_id: str, *, catch_up: bool = True) -> SessionEntry:
        """The whole entry, prompts included (owner only: the CLI's ``get --prompts``)."""
        return self._entry(harness, session_id, catch_up=catch_up, with_prompts=True)

    def liveness_of(self, entry: SessionEntry, pane_pids: Mapping[int, str] | None = None) -> LivenessView:
        return liveness_view(self._liveness([entry], pane_pids), entry)

    def _entry(
        self, harness: str | Harness, session_id: str, *, catch_up: bool, with_prompts: bool = False
    ) -> SessionEntry:
        h = harness if isinstance(harness, Harness) else parse_harness(harness)
        if not isinstance(session_id, str) or not session_id.strip():
            raise HistoryError(f"session_id must be a non-empty string, got {session_id!r}")
        if catch_up:
            self.catch_up()
        entry = self.index.get(h, session_id, with_prompts=with_prompts)
        if entry is None:
            raise SessionNotFound(h.value, session_id)
        return entry

    def recent_dirs(self, limit: int = 20, *, catch_up: bool = True) -> list[dict[str, object]]:
        """Directories of top-level sessions, most recent first, existing ones only (for launching)."""
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise HistoryError(f"limit must be a positive integer, got {limit!r}")
        if catch_up:
            self.catch_up()
        out: list[dict[str, object]] = []
        for cwd, repo, last in self.index.recent_dirs():
            if len(out) >= limit:
                break
            if os.path.isdir(cwd):
                out.append({"cwd": cwd, "repo": repo, "last_active": iso_utc(last)})
        return out

    def expunge(
        self,
        harness: str | Harness,
        session_id: str,
        *,
        audit: AuditSink,
        actor: str = "owner",
        pane_pids: Mapping[int, str] | None = None,
    ) -> ExpungeResult:
        """Delete a session's transcript(s) and its entry; the one write path into the index.

        The audit line is written first; if it cannot be written nothing is deleted. A running session
        is refused. For a Claude Code session its ``<session>/`` directory (subagent transcripts and
        spilled tool results) goes too, with the subagents' entries.
        """
        entry = self._entry(harness, session_id, catch_up=True)
        running = entry.key in claimed(self._liveness([entry], pane_pids), [entry.key])
        doomed = self._doomed(entry)
        self._check_expungeable(entry, doomed, running=running)
        audit(self._expunge_record(entry, doomed, actor))
        deleted, errors = _delete(doomed.files, doomed.dirs)
        removed = self._unindex(entry, doomed, deleted)
        return ExpungeResult(
            harness=entry.harness,
            session_id=entry.session_id,
            deleted=tuple(deleted),
            entries_removed=removed,
            subagents=tuple(doomed.children),
            errors=tuple(errors),
        )

    def _check_expungeable(self, entry: SessionEntry, doomed: ExpungePlan, *, running: bool) -> None:
        """Raise the core's refusal (:func:`connectcore.history.expunge_refusal`), if it has one."""
        refusal = expunge_refusal(
            entry.harness.value,
            entry.session_id,
            running=running,
            paths=[(p, os.path.realpath(p)) for p in doomed.everything],
            roots=self._transcript_roots(),
            sep=os.sep,
        )
        if refusal is not None:
            raise refusal

    def _expunge_record(self, entry: SessionEntry, doomed: ExpungePlan, actor: str) -> dict[str, Any]:
        """The audit line an expunge writes before it deletes anything."""
        return {
            "action": "history.expunge",
            "actor": actor,
            "harness": entry.harness.value,
            "session_id": entry.session_id,
            "paths": list(doomed.everything),
            "subagents": list(doomed.children),
            "at": self.clock(),
        }

    def _unindex(self, entry: SessionEntry, doomed: ExpungePlan, deleted: list[str]) -> int:
        """Remove from the index the sessions the core says are gone (no transcript of theirs kept) and
        the deleted files; the number of entries removed."""
        kept = set(doomed.files) - set(deleted)
        files_of = {sid: self.index.files_of(entry.harness, sid) for sid in (entry.session_id, *doomed.children)}
        gone = expunged_sessions(entry.session_id, doomed.children, files_of, kept)
        files = set(doomed.files)
        return self.index.remove(entry.harness, gone, [p for p in deleted if p in files])

    def _doomed(self, entry: SessionEntry) -> ExpungePlan:
        """What an expunge of ``entry`` deletes (the core's :func:`connectcore.history.expunge_plan`): the
        index's transcripts of the session and its subagents, and what each candidate directory is."""
        children = tuple(self.index.children(entry.harness, entry.session_id))
        files_of = {sid: list(self.index.files_of(entry.harness, sid)) for sid in (entry.session_id, *children)}
        candidates = expunge_dir_candidates(entry.harness, entry.session_id, files_of[entry.session_id])
        kinds = {path: kind for path in candidates if (kind := _path_kind(path)) is not None}
        return expunge_plan(entry.harness, entry.session_id, files_of, children, kinds)

    def _transcript_roots(self) -> tuple[str, ...]:
        return tuple(
            os.path.realpath(p)
            for p in (
                self.claude_root / "projects",
                self.codex_root / "sessions",
                self.codex_root / "archived_sessions",
            )
        )

    def restorable(
        self, bindings: Iterable[PaneBinding], *, pane_pids: Mapping[int, str] | None = None
    ) -> RestorePlan:
        """Of the sessions last bound to panes, which can be relaunched (argv, cwd) and why not the rest."""
        bindings = list(bindings)
        self.catch_up()
        entries: dict[tuple[Harness, str], SessionEntry] = {}
        for b in bindings:
            e = self.index.get(b.harness, b.session_id)
            if e is not None:
                entries[e.key] = e
        existing = frozenset(e.cwd for e in entries.values() if e.cwd and os.path.isdir(e.cwd))
        snap = self._liveness(entries.values(), pane_pids)
        running = claimed(snap, entries)
        return select_restorable(bindings, entries, existing_dirs=existing, running=running)


def _path_kind(path: str) -> PathKind | None:
    """What ``path`` is, by ``lstat`` (a link is not followed); None when it is not there."""
    try:
        mode = os.lstat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None
    if stat.S_ISDIR(mode):
        return PathKind.DIRECTORY
    return PathKind.LINK if stat.S_ISLNK(mode) else PathKind.OTHER


def _delete(files: Iterable[str], dirs: Iterable[str]) -> tuple[list[str], list[str]]:
    """Delete files, then directory trees: (deleted, errors). One already gone counts as deleted."""
    deleted: list[str] = []
    errors: list[str] = []
    removals: list[tuple[str, Callable[[str], None]]] = [(f, os.unlink) for f in files]
    removals += [(d, shutil.rmtree) for d in dirs]
    for path, remove in removals:
        try:
            remove(path)
            deleted.append(path)
        except FileNotFoundError:
            deleted.append(path)
        except OSError as exc:
            errors.append(f"{path}: {exc.strerror or exc}")
    return deleted, errors


def jsonl_audit(path: Path) -> AuditSink:
    """An audit sink appending one JSON line per record to ``path`` (0600): the CLI's fallback."""
    import json

    def write(record: Mapping[str, Any]) -> None:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, (json.dumps(dict(record), sort_keys=True) + "\n").encode("utf-8"))
            os.fsync(fd)
        finally:
            os.close(fd)

    return write
