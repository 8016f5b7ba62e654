"""Which transcripts there are: every Claude Code and Codex transcript under the two roots.

Claude Code: ``<claude root>/projects/<project>/<session>.jsonl`` and its subagents'
``<session>/subagents/agent-<id>.jsonl`` (not the ``agent-acompact*`` compaction files). Codex:
``rollout-*.jsonl`` in ``<codex root>/sessions`` or ``archived_sessions`` or up to four directory levels
below them. Links are not followed.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from connectcore.history import Harness


def _scandir(path: str) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(path) as it:
            return list(it)
    except OSError:
        return []


def _transcript(name: str, prefix: str = "") -> bool:
    return name.endswith(".jsonl") and name.startswith(prefix) and not name.startswith("agent-acompact")


def discover(claude_root: Path, codex_root: Path) -> Iterator[tuple[Harness, str]]:
    """Every transcript under the two roots, as (harness, path)."""
    yield from ((Harness.CLAUDE, path) for path in _claude_transcripts(claude_root))
    yield from ((Harness.CODEX, path) for path in _codex_transcripts(codex_root))


def _claude_transcripts(claude_root: Path) -> Iterator[str]:
    """``projects/<project>/<session>.jsonl``, and ``<session>/subagents/agent-<id>.jsonl``."""
    for project in _scandir(os.path.join(claude_root, "projects")):
        if not project.is_dir(follow_symlinks=False):
            continue
        for item in _scandir(project.path):
            if _transcript(item.name) and item.is_file(follow_symlinks=False):
                yield item.path
            elif item.is_dir(follow_symlinks=False):
                yield from _subagent_transcripts(item.path)


def _subagent_transcripts(session_dir: str) -> Iterator[str]:
    for sub in _scandir(os.path.join(session_dir, "subagents")):
        if _transcript(sub.name, "agent-") and sub.is_file(follow_symlinks=False):
            yield sub.path


def _codex_transcripts(codex_root: Path) -> Iterator[str]:
    """``rollout-*.jsonl`` in ``sessions`` and ``archived_sessions``, and up to four levels below them."""
    for top in ("sessions", "archived_sessions"):
        stack = [(os.path.join(codex_root, top), 0)]
        while stack:
            d, depth = stack.pop()
            for item in _scandir(d):
                if item.is_dir(follow_symlinks=False):
                    if depth < 4:
                        stack.append((item.path, depth + 1))
                elif item.name.startswith("rollout-") and item.name.endswith(".jsonl"):
                    yield item.path
