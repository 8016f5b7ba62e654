"""Repository identity of a working directory (I/O: reads ``.git`` files).

The identity of a repository is the absolute, symlink-resolved path of its main worktree. A linked
worktree (``git worktree add``) folds into its main repository: its ``.git`` is a file saying
``gitdir: <main>/.git/worktrees/<name>``, and that directory's ``commondir`` names the main ``.git``.
A submodule (a ``gitdir:`` without ``commondir``) is its own repository. A directory outside any
repository is its own identity. A directory that no longer exists cannot be resolved: the caller
keeps what it knew before, or falls back to the directory itself.
"""

from __future__ import annotations

import os
from pathlib import Path


def _read_gitdir(dotgit: Path) -> Path | None:
    try:
        text = dotgit.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("gitdir:"):
            target = Path(line[len("gitdir:") :].strip())
            if not target.is_absolute():
                target = dotgit.parent / target
            return target
    return None


def repo_of(cwd: str) -> str | None:
    """The repository identity of ``cwd``, or None when ``cwd`` is not an existing absolute directory."""
    if not cwd or not os.path.isabs(cwd):
        return None
    try:
        start = Path(os.path.realpath(cwd))
        if not start.is_dir():
            return None
    except OSError:
        return None
    for d in (start, *start.parents):
        dotgit = d / ".git"
        try:
            if dotgit.is_dir():
                return str(d)
            if not dotgit.is_file():
                continue
        except OSError:
            continue
        gitdir = _read_gitdir(dotgit)
        if gitdir is None:
            return str(d)
        try:
            common_text = (gitdir / "commondir").read_text(encoding="utf-8").strip()
        except OSError:
            return str(d)  # a submodule or a plain gitfile: its own repository
        common = Path(common_text)
        if not common.is_absolute():
            common = gitdir / common
        common = Path(os.path.realpath(common))
        if common.name == ".git":
            return str(common.parent)
        return str(common)  # a bare repository with linked worktrees
    return str(start)


class RepoResolver:
    """``repo_of`` with a cache for one indexing pass."""

    def __init__(self) -> None:
        self._cache: dict[str, str | None] = {}

    def __call__(self, cwd: str) -> str | None:
        if cwd not in self._cache:
            self._cache[cwd] = repo_of(cwd)
        return self._cache[cwd]


def git_facts(cwd: str) -> tuple[str | None, str | None]:
    """(repository, branch) of ``cwd``: the repository identity (:func:`repo_of`, None outside git)
    and the branch of the worktree's own ``HEAD`` (None when detached). Reads files only, no ``git``."""
    from connectcore.routing import parse_gitfile, parse_head

    if not cwd or not os.path.isabs(cwd):
        return None, None
    try:
        start = Path(os.path.realpath(cwd))
    except OSError:
        return None, None
    for d in (start, *start.parents):
        dotgit = d / ".git"
        try:
            if dotgit.is_dir():
                gitdir: Path | None = dotgit
            elif dotgit.is_file():
                pointed = parse_gitfile(dotgit.read_text(encoding="utf-8", errors="replace"))
                gitdir = (d / pointed) if pointed else None
            else:
                continue
            head = (gitdir / "HEAD").read_text(encoding="utf-8", errors="replace") if gitdir else ""
        except OSError:
            head = ""
        return repo_of(str(d)), parse_head(head)
    return None, None
