"""``connectd history``: index, search, get, dirs and expunge, with no daemon running.

The lead's main CLI calls :func:`register` with its subparsers; each leaf command sets
``func=<handler>`` (``handler(args) -> int`` exit status). Standalone:
``python -m connectd.history.cli history search QUERY``.

Exit status: 0 success, 1 nothing found / declined, 2 bad input or refused.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO, TypeAlias

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from connectcore.advice import counted
from connectcore.history import (
    LIMIT_DEFAULT,
    LIMIT_MAX,
    HistoryError,
    Liveness,
    LivenessView,
    SessionNotFound,
    iso_utc,
    parse_harness,
    with_daemon_pane,
)
from connectd.cli.safetext import visible
from connectd.history.index import IndexReport
from connectd.history.service import (
    HistoryService,
    default_claude_root,
    default_codex_root,
    default_data_dir,
    jsonl_audit,
)

#: A build that visits at least this many transcripts shows a progress bar on a terminal.
PROGRESS_MIN_FILES = 200
AUDIT_FILE = "audit.jsonl"


def _common() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--data-dir", default=argparse.SUPPRESS,
        help="where history.db lives (default: $CONNECT_DATA_DIR, else the platform's data directory)"
    )
    common.add_argument(
        "--claude-root", type=Path, default=None, help="Claude Code's directory (default ~/.claude)"
    )
    common.add_argument("--codex-root", type=Path, default=None, help="Codex's directory (default ~/.codex)")
    return common


Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def register(subparsers: Subparsers) -> None:
    """Add the ``history`` command group to a CLI's subparsers: one ``_add_*`` call per subcommand, in
    the order ``--help`` lists them."""
    common = _common()
    group = subparsers.add_parser(
        "history",
        help="search the index of Claude Code and Codex sessions",
        description="Search and manage the index of past Claude Code and Codex sessions (no daemon needed).",
    )
    sub = group.add_subparsers(dest="history_command", metavar="COMMAND", required=True)
    _add_index(sub, common)
    _add_search(sub, common)
    _add_get(sub, common)
    _add_dirs(sub, common)
    _add_expunge(sub, common)


def _add_index(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    """``history index``."""
    p = sub.add_parser("index", parents=[common], help="update the index (incremental; --full rebuilds)")
    p.add_argument("--full", action="store_true", help="rebuild from the transcripts")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument(
        "--progress", action="store_true", help="show the progress bar even when stderr is not a terminal"
    )
    p.set_defaults(func=cmd_index)


def _add_search(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    """``history search``."""
    p = sub.add_parser("search", parents=[common], help="find sessions by topic, branch or PR")
    p.add_argument("query", nargs="+", help="words to look for")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--repo", help="search this repository (a path; default: the current directory's)")
    where.add_argument("--all", action="store_true", help="search every repository")
    p.add_argument("--limit", type=int, default=LIMIT_DEFAULT, help=f"at most this many (1-{LIMIT_MAX})")
    p.add_argument("--headless", action="store_true", help="include headless runs")
    p.add_argument("--subagents", action="store_true", help="include subagent transcripts")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_search)


def _add_get(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    """``history get``."""
    p = sub.add_parser("get", parents=[common], help="show one session (harness and id together)")
    p.add_argument("harness", help="claude or codex")
    p.add_argument("session_id")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument(
        "--prompts",
        action="store_true",
        help="owner view: also show the prompts, entrypoint, start time, resume command and transcript path",
    )
    p.set_defaults(func=cmd_get)


def _add_dirs(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    """``history dirs``."""
    p = sub.add_parser("dirs", parents=[common], help="recent session directories, most recent first")
    p.add_argument("--limit", type=int, default=20)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_dirs)


def _add_expunge(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    """``history expunge``."""
    p = sub.add_parser("expunge", parents=[common], help="delete a session's transcript and its entry")
    p.add_argument("harness", help="claude or codex")
    p.add_argument("session_id")
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    p.set_defaults(func=cmd_expunge)


def _service(args: argparse.Namespace) -> HistoryService:
    return HistoryService(
        data_dir=Path(args.data_dir) if getattr(args, "data_dir", None) else default_data_dir(),
        claude_root=args.claude_root or default_claude_root(),
        codex_root=args.codex_root or default_codex_root(),
    )


# ---------------------------------------------------------------------------------------------------
# Progress
# ---------------------------------------------------------------------------------------------------


class ProgressBar:
    """A progress bar on stderr (``rich``), for long first builds: shown on a terminal (or with
    ``--progress``) once a build visits at least :data:`PROGRESS_MIN_FILES` transcripts."""

    def __init__(self, stream: TextIO, *, force: bool = False) -> None:
        self.stream = stream
        self.enabled = force or stream.isatty()
        self.shown = False
        self._progress: Progress | None = None
        self._task: TaskID | None = None

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled or total < PROGRESS_MIN_FILES:
            return
        if self._progress is None:
            console = Console(file=self.stream, force_terminal=True if self.enabled else None)
            self._progress = Progress(
                TextColumn("indexing"), BarColumn(), MofNCompleteColumn(), TextColumn("transcripts"),
                TimeElapsedColumn(), console=console, refresh_per_second=8,
            )
            self._task = self._progress.add_task("indexing", total=total)
            self._progress.start()
            self.shown = True
        assert self._task is not None
        self._progress.update(self._task, completed=done, total=total)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()  # draws the final state and ends the line
            self._progress = None


# ---------------------------------------------------------------------------------------------------
# Commands
# ---------------------------------------------------------------------------------------------------


def _fail(message: str, status: int = 2) -> int:
    print(f"connectd history: {message}", file=sys.stderr)
    return status


def _print_report(report: IndexReport, service: HistoryService) -> None:
    d = report.as_dict()
    print(
        f"{counted(d['files_seen'], 'transcript')}: {d['files_read']} read ({d['files_resumed']} resumed from their offset),"
        f" {d['files_missing']} gone; {counted(d['entries_written'], 'entry', 'entries')} written, {service.index.count()} in the index;"
        f" {counted(d['bytes_read'], 'byte')} in {d['seconds']:.2f}s"
    )
    counts = report.skip_counts()
    if counts:
        print("skipped: " + ", ".join(f"{n} {reason}" for reason, n in sorted(counts.items())))
        for skip in report.skips[:10]:
            print(visible(f"  {skip.reason}: {skip.path}" + (f" at byte {skip.offset}" if skip.offset else "")))


def cmd_index(args: argparse.Namespace) -> int:
    bar = ProgressBar(sys.stderr, force=args.progress)
    with _service(args) as service:
        try:
            report = service.update(full=args.full, progress=bar)
        finally:
            bar.close()
        if args.json:
            out = report.as_dict()
            out["entries"] = service.index.count()
            print(json.dumps(out, indent=2))
        else:
            _print_report(report, service)
    return 0


def _liveness_text(view: dict[str, object], windows: dict[str, str] | None = None) -> str:
    from connectcore.directory import placed

    state = view["liveness"]
    if state == "running_in_pane":
        return f"running in pane {placed(str(view['pane']), windows or {})}"
    return str(state).replace("_", " ")


def daemon_panes(args: argparse.Namespace) -> tuple[dict[tuple[str, str], str], dict[str, str]]:
    """Which sessions the running daemon of this data directory says its panes run, and each pane's
    tmux ``session:window``, asked through its owner API as the other client commands ask it (the
    listener is checked before the owner token is sent). No daemon, or one that does not answer:
    nothing, and the local probe's liveness stands."""
    from connectd.cli.main import Client

    data_dir = Path(args.data_dir) if getattr(args, "data_dir", None) else default_data_dir()
    if not (data_dir / "daemon.json").exists():
        return {}, {}
    try:
        agents = Client(data_dir, None).call("GET", "/api/agents")
    except (SystemExit, OSError, ValueError):
        return {}, {}
    sessions: dict[tuple[str, str], str] = {}
    windows: dict[str, str] = {}
    for agent in agents if isinstance(agents, list) else ():
        pane, session = str(agent.get("pane") or ""), agent.get("session")
        windows[pane] = str(agent.get("window") or "")
        if isinstance(session, dict) and session.get("harness") and session.get("session_id"):
            sessions[(str(session["harness"]), str(session["session_id"]))] = pane
    return sessions, windows


def _with_daemon(views: list[dict[str, Any]], args: argparse.Namespace) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The views with the running daemon's panes taken into account (:func:`connectcore.history.with_daemon_pane`)."""
    if all(v["liveness"] in (Liveness.NOT_RUNNING.value, Liveness.RUNNING_IN_PANE.value) for v in views):
        return views, {}
    sessions, windows = daemon_panes(args)
    shown = []
    for view in views:
        said = with_daemon_pane(
            LivenessView(Liveness(view["liveness"]), view["pane"]), sessions.get((view["harness"], view["session_id"]))
        )
        shown.append({**view, "liveness": said.state.value, "pane": said.pane})
    return shown, windows


def _print_view(view: dict[str, object], out: TextIO, windows: dict[str, str] | None = None) -> None:
    title = view["title"] or "(untitled)"
    print(visible(f"{view['harness']} {view['session_id']}  {title}"), file=out)
    branches = view["branches"]
    assert isinstance(branches, list)
    line = f"    {view['cwd']}"
    if branches:
        line += f"  [{', '.join(str(b) for b in branches)}]"
    line += f"  last active {view['last_active'] or 'unknown'}  {_liveness_text(view, windows)}"
    print(visible(line), file=out)
    prs = view["prs"]
    assert isinstance(prs, list)
    for pr in prs:
        print(visible(f"    {pr}"), file=out)
    terms = view.get("matched_terms")
    if terms:
        assert isinstance(terms, list)
        print(visible(f"    matched: {', '.join(str(t) for t in terms)}"), file=out)


def cmd_search(args: argparse.Namespace) -> int:
    query = " ".join(args.query)
    with _service(args) as service:
        try:
            repo = None if args.all else service.repo_of(os.path.abspath(args.repo or os.getcwd()))
            results = service.find_sessions(
                query,
                repo=repo,
                limit=args.limit,
                include_headless=args.headless,
                include_subagents=args.subagents,
            )
        except HistoryError as exc:
            return _fail(str(exc))
    results, windows = _with_daemon(results, args)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        if not results:
            where = "any repository" if repo is None else repo
            print(f"no sessions in {where} match {query!r}", file=sys.stderr)
        for view in results:
            _print_view(view, sys.stdout, windows)
    return 0 if results else 1


def cmd_get(args: argparse.Namespace) -> int:
    with _service(args) as service:
        try:
            harness = parse_harness(args.harness)
            view = service.get_session(harness, args.session_id)
            out: dict[str, Any] = dict(view)
            if args.prompts:
                entry = service.get_entry(harness, args.session_id, catch_up=False)
                out["owner"] = {
                    "entrypoint": entry.entrypoint.value,
                    "parent_session_id": entry.parent_session_id,
                    "started": iso_utc(entry.started),
                    "resume_argv": list(entry.resume_argv) if entry.resume_argv else None,
                    "source_path": entry.source_path,
                    "source_missing": entry.source_missing,
                    "prompts": list(entry.prompts),
                }
        except SessionNotFound as exc:
            return _fail(str(exc), 1)
        except HistoryError as exc:
            return _fail(str(exc))
    (shown,), windows = _with_daemon([dict(view)], args)
    out.update(liveness=shown["liveness"], pane=shown["pane"])
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    _print_view(shown, sys.stdout, windows)
    owner = out.get("owner")
    if owner:
        print(f"    entrypoint {owner['entrypoint']}, started {owner['started']}")
        if owner["parent_session_id"]:
            print(visible(f"    parent session {owner['parent_session_id']}"))
        if owner["resume_argv"]:
            print(visible(f"    resume: (cd {view['cwd']} && {' '.join(owner['resume_argv'])})"))
        print(visible(f"    transcript {owner['source_path']}" + (" (gone)" if owner["source_missing"] else "")))
        for i, prompt in enumerate(owner["prompts"], 1):
            print(f"\n--- prompt {i} ---\n{visible(prompt, lines=True)}")
    return 0


def cmd_dirs(args: argparse.Namespace) -> int:
    with _service(args) as service:
        try:
            dirs = service.recent_dirs(args.limit)
        except HistoryError as exc:
            return _fail(str(exc))
    if args.json:
        print(json.dumps(dirs, indent=2))
    else:
        for d in dirs:
            print(visible(f"{d['cwd']}  {d['last_active'] or ''}"))
    return 0


def cmd_expunge(args: argparse.Namespace, *, stdin: TextIO | None = None) -> int:
    stdin = stdin or sys.stdin
    with _service(args) as service:
        try:
            harness = parse_harness(args.harness)
            entry = service.get_entry(harness, args.session_id)
            if not args.yes:
                title = entry.title or "(untitled)"
                sys.stderr.write(
                    f"Delete the transcript of {harness.value} session {entry.session_id} ({title}, {entry.cwd})"
                    " and its history entry? This cannot be undone. [y/N] "
                )
                sys.stderr.flush()
                answer = stdin.readline().strip().lower()
                if answer not in ("y", "yes"):
                    print("not deleted", file=sys.stderr)
                    return 1
            audit = jsonl_audit(service.data_dir / AUDIT_FILE)
            result = service.expunge(harness, args.session_id, audit=audit)
        except SessionNotFound as exc:
            return _fail(str(exc), 1)
        except HistoryError as exc:
            return _fail(str(exc))
    for path in result.deleted:
        print(f"deleted {path}")
    for err in result.errors:
        print(f"could not delete {err}", file=sys.stderr)
    print(f"{counted(result.entries_removed, 'index entry', 'index entries')} removed")
    return 0 if not result.errors else 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="connectd", description="connect daemon tools")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Standalone entry: ``python -m connectd.history.cli history ...``."""
    parser = build_parser()
    args = parser.parse_args(argv)
    func = args.func
    status: int = func(args)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
