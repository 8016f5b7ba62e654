"""Directory facts for routing, and the ``resolve`` ranking: pure rules, no I/O.

Facts (the shell reads the files, these functions read the text):

- **repo**: the git top level of a pane's cwd. A ``.git`` directory marks it; a ``.git`` file says
  ``gitdir: <path>`` (a linked worktree or a submodule) and its git directory may hold ``commondir``
  (a linked worktree: the main repository's ``.git``). The shell walks up from the cwd; the identity
  of a linked worktree is its main repository, as the history index counts it.
- **branch**: ``HEAD`` of the pane's own git directory: ``ref: refs/heads/<name>`` names a branch; a
  bare commit id is a detached HEAD (no branch).
- **session title** and **PR links**: from the history index entry of the pane's bound session, plus
  PR links the agent published in its pane title (a PR URL, or ``PR #N``).

The ``resolve`` ranking (:func:`rank_request`) joins the live directory with a history ranking: a live
pane scores by what its facts share with the request (a PR number it holds weighs most), plus the
history rank of the session it holds; a past session not running in a live pane follows the live
panes, in the history ranking's order. On a federated box the agents its paired boxes share (their
directory entries, as ``list_agents`` lists them) rank with the live panes by the same facts, each
with its box. No model call, no guess: every result says why it matched.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from connectcore import directory as D
from connectcore._machine import ConnectError
from connectcore.history import tokens

HEAD_REF_RE = re.compile(r"ref:\s*(\S+)")
COMMIT_RE = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
#: ``PR #12``, ``PR 12``, ``pr#12``, ``MR !12`` in a pane title (a URL counts anywhere).
TITLE_PR_RE = re.compile(r"\b(?:PR|MR)\s*[#!]?([1-9][0-9]{0,9})\b", re.IGNORECASE)
TITLE_PR_URL_RE = re.compile(D.PR_URL_RE.pattern.replace(r"(?:[/?#]\S*)?", ""))

#: Weights of the ``resolve`` ranking (one table, so the test reads the rule).
WEIGHTS: Mapping[str, float] = {
    "pr": 10.0,  # the request names a PR number this pane holds
    "title": 3.0,  # per request word in the pane's or its session's title
    "repo": 2.0,  # per request word in the repository's name
    "branch": 2.0,  # per request word in the branch name
    "history": 4.0,  # the session this pane holds ranks in the history search (scaled by its rank)
}
RESOLVE_LIMIT_MAX = 50


class ResolveError(ConnectError):
    """A malformed ``resolve`` request (reason ``bad_request``)."""

    reason = "bad_request"


@dataclass(frozen=True)
class Facts:
    """What routing knows of a pane beyond tmux: its repository, branch, session title and PRs."""

    repo: str | None = None
    branch: str | None = None
    session_title: str = ""
    pr_links: tuple[str, ...] = ()


# --------------------------------------------------------------------------------------------------
# Facts from the text of .git files
# --------------------------------------------------------------------------------------------------


def parse_gitfile(text: str) -> str | None:
    """The path a ``.git`` file points at (``gitdir: <path>``), or None when it says nothing usable."""
    for line in text.splitlines():
        if line.startswith("gitdir:"):
            path = line[len("gitdir:") :].strip()
            return path or None
    return None


def parse_head(text: str) -> str | None:
    """The branch ``HEAD`` names: ``ref: refs/heads/x`` → ``x``; a detached HEAD or junk → None."""
    first = text.strip().splitlines()[0].strip() if text.strip() else ""
    match = HEAD_REF_RE.fullmatch(first)
    if match is None:
        return None
    ref = match.group(1)
    if ref.startswith("refs/heads/") and len(ref) > len("refs/heads/"):
        return ref[len("refs/heads/") :]
    return None


def parse_commondir(text: str) -> str | None:
    """The path a worktree's ``commondir`` names (relative to that git directory), or None."""
    path = text.strip().splitlines()[0].strip() if text.strip() else ""
    return path or None


def repo_name(repo: str | None) -> str:
    """The last component of a repository path (``/src/connect`` → ``connect``)."""
    return (repo or "").rstrip("/").rsplit("/", 1)[-1]


def title_pr_links(title: str) -> tuple[str, ...]:
    """PR links an agent published in its pane title: URLs, then ``#N`` for ``PR #N`` / ``PR N``."""
    urls = [m.group(0) for m in TITLE_PR_URL_RE.finditer(title)]
    numbers = [f"#{m.group(1)}" for m in TITLE_PR_RE.finditer(title)]
    return merge_pr_links(urls, numbers)


def merge_pr_links(*groups: Iterable[str]) -> tuple[str, ...]:
    """Every PR link of ``groups``, in order, without repeats (a ``#N`` already named by a URL of the
    same number is dropped; links that are not PR links are dropped)."""
    out: list[str] = []
    keys: list[tuple[str, ...]] = []
    for group in groups:
        for link in group:
            key = D._pr_key(link)
            if key is None or key in keys or (len(key) == 1 and any(k[0] == key[0] for k in keys)):
                continue
            out.append(link.strip())
            keys.append(key)
    return tuple(out)


def facts_for(
    *, repo: str | None, branch: str | None, title: str, entry_title: str = "", entry_prs: Sequence[str] = ()
) -> Facts:
    """A pane's routing facts from what the shell read: its git facts, its history entry, its title."""
    return Facts(repo, branch, entry_title, merge_pr_links(entry_prs, title_pr_links(title)))


# --------------------------------------------------------------------------------------------------
# resolve: rank live panes and past sessions for a free-text request
# --------------------------------------------------------------------------------------------------


def _words(text: str | None) -> set[str]:
    return set(tokens(text or ""))


def _pr_numbers(query: str) -> set[str]:
    return {m.group(1) for m in re.finditer(r"(?<![0-9A-Za-z])#?([1-9][0-9]{0,9})(?![0-9A-Za-z])", query)}


def score_pane(query: str, record: D.PaneRecord) -> tuple[float, tuple[str, ...]]:
    """How well a live pane's facts match the request, and which facts matched."""
    return score_facts(query, f"{record.title} {record.session_title}", repo_name(record.repo), record.branch,
                       record.pr_links)


def score_facts(
    query: str, titles: str, repo: str, branch: str | None, pr_links: Iterable[str]
) -> tuple[float, tuple[str, ...]]:
    """How well one agent's facts (its titles, its repository's name, branch and PR links) match the
    request, and which matched: a pane of this box's, or an agent a paired box shares."""
    terms = _words(query)
    why: list[str] = []
    score = 0.0
    held = {k[0] for link in pr_links if (k := D._pr_key(link)) is not None}
    for number in sorted(_pr_numbers(query) & held, key=int):
        score += WEIGHTS["pr"]
        why.append(f"pr:{number}")
    for fact, text in (("title", titles), ("repo", repo), ("branch", branch)):
        shared = sorted(terms & _words(text))
        score += WEIGHTS[fact] * len(shared)
        why += [f"{fact}:{w}" for w in shared]
    return score, tuple(why)


def rank_request(
    query: str,
    records: Sequence[D.PaneRecord],
    past: Sequence[Mapping[str, Any]],
    *,
    limit: int = 10,
    remote: Sequence[Mapping[str, Any]] = (),
) -> list[dict[str, Any]]:
    """Live panes and past sessions for ``query``, best first (see the module's rule).

    ``past`` is the history search's answer for the same query, best first (projected entries: at
    least ``harness`` and ``session_id``). A past session held by a live pane adds to that pane's score
    and is not listed again. Live panes with no match are left out. ``remote``: the agents paired
    boxes share, as ``list_agents`` lists them (:func:`connectcore.federation.remote_directory.listing`),
    ranked with this box's live panes by the same facts (titles, the repository's name, branch, PR
    links), each with its box, address qualified by the box's name, and age; on a tie this box's pane
    first, then by box name and pane. (Another box's past sessions are not searched here: that is
    ``find_sessions box=``, under that box's own setting.)
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= RESOLVE_LIMIT_MAX:
        raise ResolveError(f"limit must be an integer from 1 to {RESOLVE_LIMIT_MAX}, got {limit!r}")
    held = {
        (r.binding.harness, r.binding.session_id): r.pane_id
        for r in records
        if isinstance(r.binding, D.SessionBinding)
    }
    history_bonus: dict[str, float] = {}
    rest: list[dict[str, Any]] = []
    for i, entry in enumerate(past):
        weight = WEIGHTS["history"] * (len(past) - i) / len(past)
        pane = held.get((str(entry.get("harness")), str(entry.get("session_id"))))
        if pane is not None:
            history_bonus[pane] = max(history_bonus.get(pane, 0.0), weight)
        else:
            rest.append(_past_view(entry, round(weight / WEIGHTS["history"], 3)))
    live = [_live_view(query, r, history_bonus.get(r.pane_id, 0.0)) for r in records]
    live += [_remote_view(query, entry) for entry in remote]
    live = [v for v in live if v["score"] > 0]
    live.sort(key=lambda v: (-v["score"], v["box"]["name"] if "box" in v else "", int(v["pane"][1:])))
    return (live + rest)[:limit]


def _remote_view(query: str, entry: Mapping[str, Any]) -> dict[str, Any]:
    """An agent a paired box shares, as ``resolve`` lists it (its entry's fields only: no session)."""
    pr_links = tuple(entry.get("pr_links") or ())
    score, why = score_facts(query, str(entry.get("title") or ""), repo_name(entry.get("repo")), entry.get("branch"),
                             pr_links)
    return {
        "kind": "live",
        "pane": entry["pane"],
        "address": entry["address"],
        "harness": entry.get("harness"),
        "title": entry.get("title"),
        "repo": entry.get("repo"),
        "branch": entry.get("branch"),
        "pr_links": list(pr_links),
        "session": None,
        "box": entry["box"],
        "age": entry.get("age"),
        "stale": entry.get("stale"),
        "remote": True,
        "score": round(score, 3),
        "matched": list(why),
    }


def _live_view(query: str, record: D.PaneRecord, bonus: float) -> dict[str, Any]:
    score, why = score_pane(query, record)
    if bonus:
        why = (*why, "history")
    binding = record.binding
    return {
        "kind": "live",
        "pane": record.pane_id,
        "address": str(record.address),
        "harness": record.harness,
        "title": record.title or record.session_title,
        "repo": record.repo,
        "branch": record.branch,
        "pr_links": list(record.pr_links),
        "session": (
            {"harness": binding.harness, "session_id": binding.session_id}
            if isinstance(binding, D.SessionBinding)
            else None
        ),
        "score": round(score + bonus, 3),
        "matched": list(why),
    }


def _past_view(entry: Mapping[str, Any], score: float) -> dict[str, Any]:
    return {
        "kind": "past",
        "harness": entry.get("harness"),
        "session_id": entry.get("session_id"),
        "title": entry.get("title", ""),
        "repo": entry.get("repo"),
        "cwd": entry.get("cwd"),
        "pr_links": list(entry.get("prs") or ()),
        "liveness": entry.get("liveness"),
        "score": score,
        "matched": list(entry.get("matched_terms") or ()),
    }
