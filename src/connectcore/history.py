"""Session history: the pure rules of the transcript index (the "history" scope).

An entry is one harness session: its identity, where it ran, its branches and PR links, its title and
the prompts that started or steered it. The index is routing, not memory: tool output is never an
entry field, and what the agent-facing tools return is an explicit allowlist (:data:`ALLOWED_FIELDS`)
that does not include prompts.

Everything here is pure. Time comes in as ``now`` (seconds since the epoch), the repository identity
of a directory comes in as a value (``connectd`` resolves worktrees from ``.git`` files), and the
corpus statistics the ranking needs come in as :class:`CorpusStats` (``connectd`` reads them from its
SQLite index). The layout follows h11's ``_state.py``: rules and tables first, then functions.

Ranking is BM25F: per-field term frequencies are length-normalised, weighted by field and summed
before the saturation, so a term in the title counts for more than the same term in a prompt. A
recency factor in ``[RECENCY_FLOOR, 1]`` then breaks near-ties toward recent sessions without ever
letting a recent irrelevant session beat a relevant one by more than that factor.

The scope filter (repos, headless runs, subagents) applies to the candidate set *before* ranking:
filtering a fleet-wide top-N afterwards would drop real in-repo matches.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import PurePath

from connectcore._machine import ConnectError
from connectcore.delivery import starts_with_provenance

# ---------------------------------------------------------------------------------------------------
# Vocabulary
# ---------------------------------------------------------------------------------------------------


class Harness(StrEnum):
    """Which program wrote the transcript. Session ids are unique only within one harness."""

    CLAUDE = "claude"
    CODEX = "codex"


class Entrypoint(StrEnum):
    """How the session was started. Headless runs and subagents are left out of search unless asked."""

    INTERACTIVE = "interactive"
    HEADLESS = "headless"
    SUBAGENT = "subagent"


class Liveness(StrEnum):
    """The only liveness routing needs. ``running_unknown`` when it cannot tell, never a guess."""

    RUNNING_IN_PANE = "running_in_pane"
    RUNNING_ELSEWHERE = "running_elsewhere"
    NOT_RUNNING = "not_running"
    RUNNING_UNKNOWN = "running_unknown"


class RecordTrust(StrEnum):
    """What a Claude Code registry record (``<claude root>/sessions/<pid>.json``) says, checked against
    the process its pid names now (:func:`record_trust`)."""

    TRUSTED = "trusted"  # the record is this process's: it runs the session
    UNVERIFIED = "unverified"  # a live process, but the record cannot be checked against it
    STALE = "stale"  # no live process holds it: the pid is gone, exited, or was reused by another


class Field(StrEnum):
    """The searchable fields of an entry, in the index's column order."""

    TITLE = "title"
    BRANCHES = "branches"
    PRS = "prs"
    PATH = "path"
    PROMPTS = "prompts"


class RestoreReason(StrEnum):
    """Why a session that was live in a pane is listed but not relaunched."""

    NOT_INDEXED = "not in the history index"
    SUBAGENT = "a subagent has no resume command"
    NO_RESUME_COMMAND = "no resume command"
    SOURCE_MISSING = "its transcript is gone"
    CWD_GONE = "its working directory is gone"
    ALREADY_RUNNING = "already running"
    DUPLICATE = "already listed for another pane"


# ---------------------------------------------------------------------------------------------------
# Rules as data
# ---------------------------------------------------------------------------------------------------

#: What the agent-facing tools (find_sessions, get_session) may return, and nothing else.
ALLOWED_FIELDS: tuple[str, ...] = (
    "harness",
    "session_id",
    "repo",
    "title",
    "cwd",
    "branches",
    "prs",
    "last_active",
    "matched_terms",
    "liveness",
    "pane",
)

#: BM25F field weights: title, branches and PR links weighted up.
FIELD_WEIGHTS: Mapping[Field, float] = {
    Field.TITLE: 4.0,
    Field.BRANCHES: 3.0,
    Field.PRS: 3.0,
    Field.PATH: 1.5,
    Field.PROMPTS: 1.0,
}

#: BM25F per-field length normalisation (0 = none, 1 = full).
FIELD_B: Mapping[Field, float] = {
    Field.TITLE: 0.5,
    Field.BRANCHES: 0.3,
    Field.PRS: 0.3,
    Field.PATH: 0.5,
    Field.PROMPTS: 0.75,
}

BM25_K1 = 1.2

#: A session this old has half the recency bonus of one active right now.
RECENCY_HALF_LIFE_S = 14 * 24 * 3600.0
#: The factor a very old (or undated) session's textual score is multiplied by; a fresh one gets 1.0.
RECENCY_FLOOR = 0.6

#: One prompt is clipped to this many characters; a session keeps at most this many prompt characters.
PROMPT_MAX_CHARS = 4_000
SESSION_PROMPT_MAX_CHARS = 64_000

#: Query bounds.
QUERY_MAX_TERMS = 16
TERM_MAX_CHARS = 64
LIMIT_DEFAULT = 10
LIMIT_MAX = 100

#: The resume command of a top-level session, by harness; the session id is appended.
RESUME_ARGV: Mapping[Harness, tuple[str, ...]] = {
    Harness.CLAUDE: ("claude", "--resume"),
    Harness.CODEX: ("codex", "resume"),
}

#: Title sources, weakest first. The strongest source seen wins; within one source the latest wins.
TITLE_RANK: Mapping[str, int] = {
    "none": 0,
    "summary": 1,  # Claude Code's compaction/resume summary line
    "ai-title": 2,  # Claude Code's generated title
    "agent-name": 3,  # Claude Code's --name / rename, mirrored
    "first-prompt": 1,  # the person's first prompt, for a Codex thread named after a delivered message
    "thread-name": 3,  # Codex's session_index.jsonl thread_name
    "custom-title": 4,  # Claude Code's /rename
}

#: Text a harness injects into the user role that the human did not type. A block whose stripped text
#: starts with one of these is not a prompt (slash-command wrappers, shell escapes, environment
#: context, AGENTS.md / CLAUDE.md instructions, reminders, interruption notes).
INJECTED_PREFIXES: tuple[str, ...] = (
    "<environment_context>",
    "<user_instructions>",
    "<permissions instructions>",
    "<user_shell_command>",
    "<turn_aborted>",
    "<INSTRUCTIONS>",
    "# AGENTS.md instructions for",
    "<command-name>",
    "<command-message>",
    "<command-args>",
    "<command-stdout>",
    "<local-command-stdout>",
    "<local-command-stderr>",
    "<local-command-caveat>",
    "<system-reminder>",
    "<bash-input>",
    "<bash-stdout>",
    "<bash-stderr>",
    "<task-notification>",
    "<user-prompt-submit-hook>",
    "Caveat: The messages below were generated by the user while running local commands",
    "[Request interrupted by user",
    "This session is being continued from a previous conversation",
)

#: A title taken from the person's first prompt is its first line, clipped to this many characters.
PROMPT_TITLE_MAX_CHARS = 80

#: Pull/merge request links (GitHub, GitLab, Gitea/Forgejo, Bitbucket).
PR_URL = re.compile(
    r"https?://[A-Za-z0-9.-]+(?::\d+)?/[\w.~-]+(?:/[\w.~-]+)*?/"
    r"(?:pull|pulls|-/merge_requests|merge_requests|pull-requests)/\d+"
)

#: How far a Claude Code registry record's ``startedAt`` may be from its process's start time (derived
#: from ``/proc``) and still be trusted, in seconds.
START_TOLERANCE_S = 10.0

#: A process whose name (``comm``) starts with this may run a Codex session: the ``codex`` launcher and
#: its native binary (``codex-<target>``, its name cut to 15 characters).
CODEX_PROCESS_PREFIX = "codex"

#: A Codex rollout file held open, anywhere in a descriptor's link target: the session id is the UUID
#: before ``.jsonl`` (compare :data:`connectcore.directory.ROLLOUT_NAME`, the stricter binding rule).
ROLLOUT_IN_PATH = re.compile(
    r"rollout-.*?([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})\.jsonl$"
)

_TOKEN = re.compile(r"[^\W_]+")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

# ---------------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------------


class HistoryError(ConnectError):
    """Bad input to the history rules; it names the problem and nothing has changed."""


class SessionNotFound(HistoryError):
    def __init__(self, harness: str, session_id: str) -> None:
        super().__init__(f"no {harness} session {session_id!r} in the history index")
        self.harness = harness
        self.session_id = session_id


class SessionRunning(HistoryError):
    """Expunge refused: the session is running (stop it first)."""

    def __init__(self, harness: str, session_id: str) -> None:
        super().__init__(f"{harness} session {session_id!r} is running; stop it before expunging it")


class OutOfScope(HistoryError):
    """The entry (or the repo asked for) is outside the repos the caller may read."""

    def __init__(self, what: str) -> None:
        super().__init__(f"{what} is outside the repositories this caller may read")
        self.what = what


# ---------------------------------------------------------------------------------------------------
# Values
# ---------------------------------------------------------------------------------------------------


def _check_id(what: str, value: str) -> None:
    if not isinstance(value, str) or not value.strip():
        raise HistoryError(f"{what} must be a non-empty string, got {value!r}")
    if len(value) > 200 or _CONTROL.search(value):
        raise HistoryError(f"{what} {value[:40]!r} is too long or holds control characters")


def parse_harness(value: str) -> Harness:
    """The harness named by ``value``, or a :class:`HistoryError` listing the known ones."""
    try:
        return Harness(value)
    except ValueError:
        known = ", ".join(h.value for h in Harness)
        raise HistoryError(f"unknown harness {value!r} (known: {known})") from None


@dataclass(frozen=True)
class TranscriptFacts:
    """What one transcript file said about its session (a parser's output, before the repo is known)."""

    harness: Harness
    session_id: str
    source_path: str
    cwd: str = ""
    parent_session_id: str | None = None
    entrypoint: Entrypoint = Entrypoint.INTERACTIVE
    branches: tuple[str, ...] = ()
    prs: tuple[str, ...] = ()
    title: str = ""
    title_rank: int = 0
    started: float | None = None
    last_active: float | None = None
    prompts: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _check_id("session_id", self.session_id)

    @property
    def key(self) -> tuple[Harness, str]:
        return (self.harness, self.session_id)


@dataclass(frozen=True)
class SessionEntry:
    """One session in the index."""

    harness: Harness
    session_id: str
    repo: str
    cwd: str
    title: str = ""
    branches: tuple[str, ...] = ()
    prs: tuple[str, ...] = ()
    started: float | None = None
    last_active: float | None = None
    entrypoint: Entrypoint = Entrypoint.INTERACTIVE
    parent_session_id: str | None = None
    prompts: tuple[str, ...] = ()
    resume_argv: tuple[str, ...] | None = None
    source_path: str = ""
    source_missing: bool = False

    def __post_init__(self) -> None:
        _check_id("session_id", self.session_id)
        if not isinstance(self.harness, Harness):
            raise HistoryError(f"harness must be a Harness, got {self.harness!r}")
        if not isinstance(self.entrypoint, Entrypoint):
            raise HistoryError(f"entrypoint must be an Entrypoint, got {self.entrypoint!r}")

    @property
    def key(self) -> tuple[Harness, str]:
        return (self.harness, self.session_id)


@dataclass(frozen=True)
class LivenessView:
    """Liveness as routing sees it: a state, and the pane id only for ``running_in_pane``."""

    state: Liveness = Liveness.RUNNING_UNKNOWN
    pane: str | None = None

    def __post_init__(self) -> None:
        if (self.state is Liveness.RUNNING_IN_PANE) != (self.pane is not None):
            raise HistoryError(
                f"a pane id goes with running_in_pane only (state {self.state}, pane {self.pane!r})"
            )
        if self.pane is not None and not re.fullmatch(r"%\d+", self.pane):
            raise HistoryError(f"pane id must look like %N, got {self.pane!r}")


def with_daemon_pane(view: LivenessView, daemon_pane: str | None) -> LivenessView:
    """Liveness as the history CLI shows it, given the pane the running daemon says holds the session
    (``None``: none of its panes). The CLI's own probe sees only the tmux server it can reach, so a
    session in the daemon's panes on another server (the demo's, a ``--tmux-socket``) reads as running
    elsewhere, or unknown: the daemon's pane names where it runs. A probe that finds the session's
    process gone, or finds it in a pane itself, is kept: what this machine shows now beats a binding."""
    if daemon_pane is None or view.state in (Liveness.NOT_RUNNING, Liveness.RUNNING_IN_PANE):
        return view
    return LivenessView(Liveness.RUNNING_IN_PANE, daemon_pane)


@dataclass(frozen=True)
class SearchScope:
    """Which entries a search may consider at all. ``repos=None`` means every repository."""

    repos: frozenset[str] | None = None
    include_headless: bool = False
    include_subagents: bool = False

    def admits(self, entry: SessionEntry) -> bool:
        if self.repos is not None and entry.repo not in self.repos:
            return False
        if entry.entrypoint is Entrypoint.HEADLESS and not self.include_headless:
            return False
        return not (entry.entrypoint is Entrypoint.SUBAGENT and not self.include_subagents)

    def entrypoints(self) -> tuple[Entrypoint, ...]:
        """The entrypoints admitted, for the daemon's SQL ``IN`` clause."""
        kept = [Entrypoint.INTERACTIVE]
        if self.include_headless:
            kept.append(Entrypoint.HEADLESS)
        if self.include_subagents:
            kept.append(Entrypoint.SUBAGENT)
        return tuple(kept)


def scope_for(
    repo: str | None, allowed_repos: frozenset[str] | None, *, include_headless: bool, include_subagents: bool
) -> SearchScope:
    """The search scope for a caller: ``repo`` narrows, ``allowed_repos`` (None = all) bounds.

    Asking for a repo outside the allowed set is refused rather than silently answered with nothing.
    """
    if repo is not None:
        if not repo:
            raise HistoryError("repo must be a non-empty path when given")
        if allowed_repos is not None and repo not in allowed_repos:
            raise OutOfScope(f"repo {repo!r}")
        repos: frozenset[str] | None = frozenset({repo})
    else:
        repos = allowed_repos
    return SearchScope(repos=repos, include_headless=include_headless, include_subagents=include_subagents)


def caller_repos(own_repo: str | None) -> frozenset[str]:
    """The repositories an agent's history reads may see: its own (the repository of its pane's
    directory, as the daemon names it), and none when it has no pane or directory (no grant widens it)."""
    return frozenset({own_repo}) if own_repo else frozenset()


def check_readable(entry: SessionEntry, allowed_repos: frozenset[str] | None) -> None:
    """``get_session`` checks the entry's repo against the caller's scope itself."""
    if allowed_repos is not None and entry.repo not in allowed_repos:
        raise OutOfScope(f"{entry.harness} session {entry.session_id!r}")


# ---------------------------------------------------------------------------------------------------
# Prompts, PR links, titles
# ---------------------------------------------------------------------------------------------------


def expunge_refusal(
    harness: str,
    session_id: str,
    *,
    running: bool,
    paths: Sequence[tuple[str, str]],
    roots: Iterable[str],
    sep: str = "/",
) -> HistoryError | None:
    """Why a session may not be expunged, or None: a running session is refused first; then any file or
    directory (``paths``: each as named and as its real path) whose real path is not strictly inside one
    of the transcript ``roots``. The service raises what this returns, before deleting anything."""
    if running:
        return SessionRunning(harness, session_id)
    roots = tuple(roots)
    for named, real in paths:
        if not any(real.startswith(root + sep) for root in roots):
            return HistoryError(f"refusing to delete {named!r}: it is outside the transcript roots")
    return None


class PathKind(StrEnum):
    """What a path is, as ``lstat`` says (a link is never followed): the facts an expunge plan reads."""

    DIRECTORY = "directory"
    LINK = "link"
    OTHER = "other"  # a file, or anything else that is not a directory


@dataclass(frozen=True)
class ExpungePlan:
    """What an expunge deletes: files, then directory trees, and the subagents whose entries go with it."""

    files: tuple[str, ...]
    dirs: tuple[str, ...]
    children: tuple[str, ...]

    @property
    def everything(self) -> tuple[str, ...]:
        return (*self.files, *self.dirs)


def expunge_dir_candidates(harness: Harness, session_id: str, transcripts: Iterable[str]) -> tuple[str, ...]:
    """The directories beside a session's ``transcripts`` an expunge deletes too, if each is a directory
    (:func:`expunge_plan`): for a Claude Code session, a transcript's path without its suffix when that
    is named by the session id (``<session id>/``: its subagents' transcripts and spilled tool results);
    none for another harness. The shell tells what each is (:class:`PathKind`)."""
    if harness is not Harness.CLAUDE:
        return ()
    return tuple(str(sibling) for p in transcripts if (sibling := PurePath(p).with_suffix("")).name == session_id)


def expunge_plan(
    harness: Harness,
    session_id: str,
    files_of: Mapping[str, Sequence[str]],
    children: Sequence[str],
    kinds: Mapping[str, PathKind],
) -> ExpungePlan:
    """What an expunge of ``session_id`` deletes, from what the index holds (``files_of``: the transcripts
    of the session and of each of its subagents, ``children``) and what the candidate directories are
    (``kinds``, for :func:`expunge_dir_candidates`; one not listed is not there): its transcripts; for a
    Claude Code session also each candidate that is a directory itself (never a link, nor what one points
    to) and its subagents' transcripts. The subagents' entries go with it either way
    (:func:`expunged_sessions`)."""
    own = tuple(files_of.get(session_id, ()))
    children = tuple(children)
    if harness is not Harness.CLAUDE:
        return ExpungePlan(own, (), children)
    dirs = tuple(d for d in expunge_dir_candidates(harness, session_id, own) if kinds.get(d) is PathKind.DIRECTORY)
    files = own + tuple(p for child in children for p in files_of.get(child, ()))
    return ExpungePlan(files, dirs, children)


def expunged_sessions(
    session_id: str, children: Sequence[str], files_of: Mapping[str, Iterable[str]], kept: Iterable[str]
) -> list[str]:
    """Whose entries an expunge removes, the session's first, then its subagents' in order: each one
    none of whose transcripts (``files_of``) was kept (``kept``: could not be deleted). An entry stays
    while a transcript of it is still there."""
    kept = set(kept)
    return [sid for sid in (session_id, *children) if not set(files_of.get(sid, ())) & kept]


def is_human_prompt(text: str) -> bool:
    """True for text the human (or, for a headless run or subagent, the caller) sent; False for
    injections, and for a message connect delivered (its provenance line first: a peer's text)."""
    stripped = text.lstrip()
    if not stripped:
        return False
    return not stripped.startswith(INJECTED_PREFIXES) and not starts_with_provenance(stripped)


def clip_prompt(text: str) -> str:
    text = text.strip()
    if len(text) <= PROMPT_MAX_CHARS:
        return text
    return text[: PROMPT_MAX_CHARS - 1] + "…"


def pr_links(text: str) -> tuple[str, ...]:
    """The pull/merge request URLs in ``text``, in order, without repeats."""
    return tuple(dict.fromkeys(m.group(0) for m in PR_URL.finditer(text)))


def append_prompts(existing: Sequence[str], new: Iterable[str]) -> tuple[str, ...]:
    """``existing`` plus each new human prompt not already there, within the session's character budget."""
    out = list(existing)
    seen = set(out)
    used = sum(len(p) for p in out)
    for raw in new:
        if not is_human_prompt(raw):
            continue
        prompt = clip_prompt(raw)
        if prompt in seen:
            continue
        if used + len(prompt) > SESSION_PROMPT_MAX_CHARS:
            break
        out.append(prompt)
        seen.add(prompt)
        used += len(prompt)
    return tuple(out)


def better_title(current: tuple[str, int], candidate: tuple[str, int]) -> tuple[str, int]:
    """Title precedence: a stronger source wins; an equal source seen later wins; empty never wins,
    and neither does connect's own provenance line (a harness that names a session after its first
    prompt names it after a delivered message: that is the peer's text, not the session's title)."""
    title, rank = candidate
    if starts_with_provenance(title):
        return current
    title = " ".join(title.split())
    if not title:
        return current
    return (title, rank) if rank >= current[1] else current


def prompt_title(prompts: Sequence[str]) -> tuple[str, int]:
    """The title the person's first prompt gives (its first line, clipped), or no title."""
    first = next((line.strip() for p in prompts[:1] for line in p.split("\n") if line.strip()), "")
    if len(first) > PROMPT_TITLE_MAX_CHARS:
        first = first[: PROMPT_TITLE_MAX_CHARS - 1] + "…"
    return (first, TITLE_RANK["first-prompt"]) if first else ("", 0)


def resume_argv_for(
    harness: Harness, session_id: str, entrypoint: Entrypoint, *, source_missing: bool
) -> tuple[str, ...] | None:
    """A top-level session whose transcript still exists resumes with its harness's command."""
    if entrypoint is Entrypoint.SUBAGENT or source_missing:
        return None
    return (*RESUME_ARGV[harness], session_id)


def build_entry(
    facts: Sequence[TranscriptFacts],
    repo: str,
    *,
    source_missing: bool = False,
    title_override: tuple[str, int] | None = None,
) -> SessionEntry:
    """Fold the facts of every transcript file of one session into its entry.

    Files are taken oldest first. ``title_override`` is a title from outside the transcript (Codex's
    session index) with its rank. Codex names a thread after its first prompt; when that prompt was a
    message connect delivered, the name is connect's provenance line and is refused
    (:func:`better_title`): the title is then what Codex would have made of the person's own first
    prompt, or none (a view shows the cwd).
    """
    if not facts:
        raise HistoryError("an entry needs at least one transcript")
    first = facts[0]
    if any(f.key != first.key for f in facts):
        raise HistoryError("facts of different sessions cannot form one entry")
    ordered = sorted(facts, key=lambda f: (f.started is None, f.started or 0.0, f.source_path))
    cwd = next((f.cwd for f in ordered if f.cwd), "")
    branches: dict[str, None] = {}
    prs: dict[str, None] = {}
    title: tuple[str, int] = ("", 0)
    prompts: tuple[str, ...] = ()
    for f in ordered:
        branches.update(dict.fromkeys(f.branches))
        prs.update(dict.fromkeys(f.prs))
        title = better_title(title, (f.title, f.title_rank))
        prompts = append_prompts(prompts, f.prompts)
    if title_override is not None:
        title = better_title(title, title_override)
        if starts_with_provenance(title_override[0]):
            title = better_title(title, prompt_title(prompts))
    starts = [f.started for f in ordered if f.started is not None]
    lasts = [f.last_active for f in ordered if f.last_active is not None]
    head = ordered[0]
    entrypoint = head.entrypoint
    return SessionEntry(
        harness=head.harness,
        session_id=head.session_id,
        repo=repo or cwd,
        cwd=cwd,
        title=title[0],
        branches=tuple(branches),
        prs=tuple(prs),
        started=min(starts) if starts else None,
        last_active=max(lasts) if lasts else (min(starts) if starts else None),
        entrypoint=entrypoint,
        parent_session_id=next((f.parent_session_id for f in ordered if f.parent_session_id), None),
        prompts=prompts,
        resume_argv=resume_argv_for(head.harness, head.session_id, entrypoint, source_missing=source_missing),
        source_path=head.source_path,
        source_missing=source_missing,
    )


# ---------------------------------------------------------------------------------------------------
# Text analysis
# ---------------------------------------------------------------------------------------------------


def tokens(text: str) -> list[str]:
    """Words as the index sees them: runs of letters and digits, lower-cased (FTS5 ``unicode61``).

    SQLite folds the micro sign into Greek mu, so this does too. Symbols Unicode assigned after 6.1
    (newer emoji) are token characters to SQLite and separators here: the only known difference.
    """
    return _TOKEN.findall(text.lower().replace("µ", "μ"))


def query_terms(query: str) -> tuple[str, ...]:
    """The distinct searchable words of a query, in order, bounded."""
    if not isinstance(query, str):
        raise HistoryError(f"query must be a string, got {type(query).__name__}")
    terms = tuple(dict.fromkeys(t for t in tokens(query) if len(t) <= TERM_MAX_CHARS))
    if not terms:
        raise HistoryError(f"query {query[:60]!r} has no searchable words")
    return terms[:QUERY_MAX_TERMS]


def field_texts(entry: SessionEntry) -> dict[Field, str]:
    """The text of each searchable field (what the index stores per column)."""
    path = entry.cwd if entry.repo in ("", entry.cwd) else f"{entry.cwd}\n{entry.repo}"
    return {
        Field.TITLE: entry.title,
        Field.BRANCHES: "\n".join(entry.branches),
        Field.PRS: "\n".join(entry.prs),
        Field.PATH: path,
        Field.PROMPTS: "\n\n".join(entry.prompts),
    }


def field_lengths(entry: SessionEntry) -> dict[Field, int]:
    return {f: len(tokens(text)) for f, text in field_texts(entry).items()}


# ---------------------------------------------------------------------------------------------------
# Ranking
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CorpusStats:
    """What BM25 needs to know about the whole index."""

    documents: int
    average_length: Mapping[Field, float]
    document_frequency: Mapping[str, int]


@dataclass(frozen=True)
class Candidate:
    """An entry with the query terms' frequency in each field and each field's length in words."""

    entry: SessionEntry
    term_frequency: Mapping[tuple[Field, str], int]
    field_length: Mapping[Field, int]


@dataclass(frozen=True)
class Ranked:
    entry: SessionEntry
    score: float
    matched_terms: tuple[str, ...]


def analyze(entry: SessionEntry, terms: Sequence[str]) -> Candidate:
    """A candidate computed from the entry's own text (the reference for what the index returns)."""
    wanted = set(terms)
    tf: dict[tuple[Field, str], int] = {}
    lengths: dict[Field, int] = {}
    for f, text in field_texts(entry).items():
        words = tokens(text)
        lengths[f] = len(words)
        for w in words:
            if w in wanted:
                tf[(f, w)] = tf.get((f, w), 0) + 1
    return Candidate(entry=entry, term_frequency=tf, field_length=lengths)


def corpus_stats(entries: Iterable[SessionEntry]) -> CorpusStats:
    """Statistics computed from entries directly (the reference for what the index keeps)."""
    n = 0
    totals = dict.fromkeys(Field, 0)
    df: dict[str, int] = {}
    for entry in entries:
        n += 1
        seen: set[str] = set()
        for f, text in field_texts(entry).items():
            words = tokens(text)
            totals[f] += len(words)
            seen.update(words)
        for w in seen:
            df[w] = df.get(w, 0) + 1
    avg = {f: (totals[f] / n if n else 0.0) for f in Field}
    return CorpusStats(documents=n, average_length=avg, document_frequency=df)


def idf(documents: int, document_frequency: int) -> float:
    """BM25's inverse document frequency, never negative."""
    return math.log(1.0 + (documents - document_frequency + 0.5) / (document_frequency + 0.5))


def bm25f(candidate: Candidate, terms: Sequence[str], stats: CorpusStats) -> float:
    score = 0.0
    for term in terms:
        weighted = 0.0
        for f in Field:
            tf = candidate.term_frequency.get((f, term), 0)
            if not tf:
                continue
            avg = stats.average_length.get(f, 0.0) or 1.0
            b = FIELD_B[f]
            norm = 1.0 - b + b * (candidate.field_length.get(f, 0) / avg)
            weighted += FIELD_WEIGHTS[f] * tf / max(norm, 1e-9)
        if weighted:
            df = max(stats.document_frequency.get(term, 1), 1)
            score += idf(max(stats.documents, df), df) * weighted / (BM25_K1 + weighted)
    return score


def recency(last_active: float | None, now: float) -> float:
    """A factor in ``[RECENCY_FLOOR, 1]``: 1 for a session active now, decaying by half-life."""
    if last_active is None:
        return RECENCY_FLOOR
    age = max(0.0, now - last_active)
    decay: float = math.pow(0.5, age / RECENCY_HALF_LIFE_S)
    return RECENCY_FLOOR + (1.0 - RECENCY_FLOOR) * decay


def check_limit(limit: int) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= LIMIT_MAX:
        raise HistoryError(f"limit must be an integer from 1 to {LIMIT_MAX}, got {limit!r}")
    return limit


def rank(
    candidates: Iterable[Candidate],
    terms: Sequence[str],
    stats: CorpusStats,
    *,
    scope: SearchScope,
    now: float,
    limit: int,
) -> tuple[Ranked, ...]:
    """The best ``limit`` candidates the scope admits, best first.

    The scope filter runs first, on the whole candidate set; only then are the survivors scored and
    cut to ``limit``. Ties go to the more recent session, then to harness and id (stable output).
    """
    check_limit(limit)
    scored: list[Ranked] = []
    for cand in candidates:
        if not scope.admits(cand.entry):
            continue
        matched = tuple(t for t in terms if any(cand.term_frequency.get((f, t), 0) for f in Field))
        if not matched:
            continue
        text_score = bm25f(cand, terms, stats)
        scored.append(Ranked(cand.entry, text_score * recency(cand.entry.last_active, now), matched))
    scored.sort(
        key=lambda r: (-r.score, -(r.entry.last_active or 0.0), r.entry.harness.value, r.entry.session_id)
    )
    return tuple(scored[:limit])


def search(
    entries: Iterable[SessionEntry],
    query: str,
    *,
    scope: SearchScope,
    now: float,
    limit: int = LIMIT_DEFAULT,
) -> tuple[Ranked, ...]:
    """Search entries held in memory: the reference semantics the SQLite-backed service reproduces."""
    terms = query_terms(query)
    pool = list(entries)
    stats = corpus_stats(pool)
    return rank((analyze(e, terms) for e in pool), terms, stats, scope=scope, now=now, limit=limit)


# ---------------------------------------------------------------------------------------------------
# The allowlist projection
# ---------------------------------------------------------------------------------------------------


def iso_utc(epoch: float | None) -> str | None:
    if epoch is None:
        return None
    return datetime.fromtimestamp(epoch, tz=UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def project(
    entry: SessionEntry, liveness: LivenessView, matched_terms: Sequence[str] = ()
) -> dict[str, object]:
    """The agent-facing view of an entry: exactly :data:`ALLOWED_FIELDS`, built field by field.

    Prompts, resume argv, entrypoint, parent, start time and source path are never copied.
    """
    view: dict[str, object] = {
        "harness": entry.harness.value,
        "session_id": entry.session_id,
        "repo": entry.repo,
        "title": entry.title,
        "cwd": entry.cwd,
        "branches": list(entry.branches),
        "prs": list(entry.prs),
        "last_active": iso_utc(entry.last_active),
        "matched_terms": list(matched_terms),
        "liveness": liveness.state.value,
        "pane": liveness.pane,
    }
    assert tuple(view) == ALLOWED_FIELDS
    return view


# ---------------------------------------------------------------------------------------------------
# Liveness: is a session running now, and in which pane
# ---------------------------------------------------------------------------------------------------
#
# The daemon reads the facts (Claude Code's registry files, ``/proc/<pid>/stat``, the names and open
# descriptors of processes, each claiming process's pane from its ancestry) and these rules decide.


@dataclass(frozen=True)
class Running:
    """A live process that claims a session: ``trusted`` False when its claim could not be verified."""

    pid: int
    trusted: bool


@dataclass(frozen=True)
class RegistryRecord:
    """One Claude Code registry record, parsed, with what ``/proc`` says about its pid now.

    ``proc_start`` is the record's numeric ``procStart`` (clock ticks after boot, field 22 of
    ``/proc/<pid>/stat``) and ``started_at_ms`` its numeric ``startedAt`` (epoch ms), None when absent
    or not a number. ``start_ticks`` is the start time of the process with that pid, None when there is
    none; ``exited`` that it is a zombie (exited, not yet reaped) or dead.
    """

    pid: int
    session_id: str
    proc_start: int | None
    started_at_ms: float | None
    start_ticks: int | None
    exited: bool = False


@dataclass(frozen=True)
class LivenessSnapshot:
    """Which sessions were running at one moment, by harness: the claims, whether that harness could be
    looked at all (``*_known`` False: every session of it not claimed is ``running_unknown``), and the
    pane each claiming pid runs in (``ancestry``: pid -> ``%N``, or None outside every pane)."""

    claude: Mapping[str, Running] = field(default_factory=dict)
    codex: Mapping[str, Running] = field(default_factory=dict)
    claude_known: bool = True
    codex_known: bool = True
    ancestry: Mapping[int, str | None] = field(default_factory=dict)

    def running(self, harness: Harness, session_id: str) -> Running | None:
        table = self.claude if harness is Harness.CLAUDE else self.codex
        return table.get(session_id)

    def known(self, harness: Harness) -> bool:
        return self.claude_known if harness is Harness.CLAUDE else self.codex_known

    def running_keys(self) -> frozenset[tuple[Harness, str]]:
        return frozenset(
            [(Harness.CLAUDE, s) for s in self.claude] + [(Harness.CODEX, s) for s in self.codex]
        )


def record_trust(record: RegistryRecord, boot: float | None, clk_tck: int) -> RecordTrust:
    """Whether a Claude Code registry record is its process's.

    No live process with its pid (gone, or exited and not yet reaped): stale. A numeric ``procStart``
    must equal the process's start time exactly, else the pid was reused: stale. Without one,
    ``startedAt`` is compared with the process start (``boot`` + ticks / ``clk_tck``) within
    :data:`START_TOLERANCE_S`; a mismatch there, or nothing to compare, is unverified (``startedAt`` may
    be when the session, not the process, started).
    """
    if record.start_ticks is None or record.exited:
        return RecordTrust.STALE
    if record.proc_start is not None:
        return RecordTrust.TRUSTED if record.proc_start == record.start_ticks else RecordTrust.STALE
    if record.started_at_ms is not None and boot is not None and clk_tck > 0:
        process_start = boot + record.start_ticks / clk_tck
        if abs(process_start - record.started_at_ms / 1000.0) <= START_TOLERANCE_S:
            return RecordTrust.TRUSTED
    return RecordTrust.UNVERIFIED


def claude_claims(records: Iterable[RegistryRecord], boot: float | None, clk_tck: int) -> dict[str, Running]:
    """The Claude Code sessions live processes claim, from the registry records in the order read.

    A stale record claims nothing. When two records claim one session, the first stands unless a later
    one is trusted and the first is not.
    """
    claims: dict[str, Running] = {}
    for record in records:
        trust = record_trust(record, boot, clk_tck)
        if trust is RecordTrust.STALE:
            continue
        prev = claims.get(record.session_id)
        trusted = trust is RecordTrust.TRUSTED
        if prev is None or (trusted and not prev.trusted):
            claims[record.session_id] = Running(record.pid, trusted)
    return claims


def may_run_codex(comm: str) -> bool:
    """Whether a process, by its name, is one whose open files :func:`codex_claims` looks at."""
    return comm.startswith(CODEX_PROCESS_PREFIX)


def codex_claims(
    processes: Iterable[tuple[int, Sequence[str] | None]], codex_root: str, sep: str = "/"
) -> tuple[dict[str, Running], bool]:
    """The Codex sessions live processes run, and whether that could be told for every session.

    ``processes`` are the processes :func:`may_run_codex` admits, each with the link targets of its open
    descriptors (None: they could not be read). Codex keeps its rollout file open while it runs: a
    target strictly inside ``codex_root`` (resolved) whose name is a rollout (:data:`ROLLOUT_IN_PATH`)
    means that process runs that session, a trusted claim. One process whose descriptors cannot be read
    makes the answer not known (every Codex session nobody claims is then ``running_unknown``).

    This is deliberately wider than :func:`connectcore.directory.rollout_session_id`, the rule for
    *binding* a pane to a session: any process named ``codex*``, any descriptor mode, the whole Codex
    root (archived sessions too), a rollout name anywhere in the path. Binding grants a pane a
    session's identity, so only Codex's own writing counts there; liveness decides whether a session
    may be expunged or relaunched, where a false "running" only refuses and a false "not running"
    deletes a live transcript or runs one conversation twice.
    """
    claims: dict[str, Running] = {}
    known = True
    inside = codex_root + sep
    for pid, targets in processes:
        if targets is None:
            known = False
            continue
        for target in targets:
            if not target.startswith(inside):
                continue
            m = ROLLOUT_IN_PATH.search(target)
            if m:
                claims[m.group(1)] = Running(pid, True)
    return claims, known


def liveness_view(snap: LivenessSnapshot, entry: SessionEntry) -> LivenessView:
    """An entry's liveness as routing sees it.

    A subagent runs inside its parent's process: while the parent is claimed (verified or not) it is
    ``running_unknown``, otherwise ``not_running`` (``running_unknown`` if the harness could not be
    looked at). A session nobody claims is ``not_running`` (or ``running_unknown``, likewise); an
    unverified claim is ``running_unknown``; a trusted one is ``running_in_pane`` with its pane when its
    process descends from a pane's process, else ``running_elsewhere``.
    """
    if entry.entrypoint is Entrypoint.SUBAGENT:
        parent = entry.parent_session_id
        if parent and snap.running(entry.harness, parent) is not None:
            return LivenessView(Liveness.RUNNING_UNKNOWN)
        if not snap.known(entry.harness):
            return LivenessView(Liveness.RUNNING_UNKNOWN)
        return LivenessView(Liveness.NOT_RUNNING)
    run = snap.running(entry.harness, entry.session_id)
    if run is None:
        return LivenessView(Liveness.NOT_RUNNING if snap.known(entry.harness) else Liveness.RUNNING_UNKNOWN)
    if not run.trusted:
        return LivenessView(Liveness.RUNNING_UNKNOWN)
    pane = snap.ancestry.get(run.pid)
    if pane is not None:
        return LivenessView(Liveness.RUNNING_IN_PANE, pane)
    return LivenessView(Liveness.RUNNING_ELSEWHERE)


def claimed(snap: LivenessSnapshot, keys: Iterable[tuple[Harness, str]]) -> frozenset[tuple[Harness, str]]:
    """Of ``keys``, the sessions a live process claims, verified or not: what restore leaves alone
    (relaunching it would run the same conversation twice) and expunge refuses (``running``)."""
    return frozenset(k for k in keys if snap.running(*k) is not None)


@dataclass(frozen=True)
class RegistryEvidence:
    """A Claude Code registry claim that binds a pane: the session, the pane and the claiming pid."""

    session_id: str
    pane_id: str
    pid: int


def registry_evidence(snap: LivenessSnapshot, panes: Iterable[str]) -> tuple[RegistryEvidence, ...]:
    """Which Claude Code registry claims are evidence binding a pane (the watcher's hand-started
    Claude panes): a trusted claim (:func:`record_trust`) whose process descends from the process of a
    pane the directory knows (``panes``). An unverified claim, or one outside every known pane, binds
    nothing (routing may still show it as running). In session id order."""
    known = frozenset(panes)
    found = []
    for session_id, run in sorted(snap.claude.items()):
        pane = snap.ancestry.get(run.pid)
        if run.trusted and pane and pane in known:
            found.append(RegistryEvidence(session_id, pane, run.pid))
    return tuple(found)


# ---------------------------------------------------------------------------------------------------
# Restore after a lost tmux server
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PaneBinding:
    """A pane the daemon last saw running a harness session (persisted before the server was lost)."""

    pane_id: str
    harness: Harness
    session_id: str

    def __post_init__(self) -> None:
        _check_id("pane_id", self.pane_id)
        _check_id("session_id", self.session_id)
        if not isinstance(self.harness, Harness):
            raise HistoryError(f"harness must be a Harness, got {self.harness!r}")


def restore_candidates(
    stored: Iterable[tuple[str, str, str]], live: Iterable[tuple[str, str]]
) -> tuple[PaneBinding, ...]:
    """Of the stored pane bindings ``(pane id, harness, session id)``, the ones restore considers: a
    session of a harness the history knows (Claude Code, Codex) that no live pane holds now (a
    session still running is not relaunched a second time). In the order stored."""
    running = set(live)
    known = {h.value for h in Harness}
    return tuple(
        PaneBinding(pane, Harness(harness), session)
        for pane, harness, session in stored
        if harness in known and (harness, session) not in running
    )


@dataclass(frozen=True)
class RestoreItem:
    pane_id: str
    harness: Harness
    session_id: str
    argv: tuple[str, ...]
    cwd: str
    title: str = ""


@dataclass(frozen=True)
class RestoreSkip:
    pane_id: str
    harness: Harness
    session_id: str
    reason: RestoreReason


@dataclass(frozen=True)
class RestorePlan:
    items: tuple[RestoreItem, ...] = ()
    skipped: tuple[RestoreSkip, ...] = ()


def select_restorable(
    bindings: Iterable[PaneBinding],
    entries: Mapping[tuple[Harness, str], SessionEntry],
    *,
    existing_dirs: frozenset[str],
    running: frozenset[tuple[Harness, str]],
) -> RestorePlan:
    """Which of the sessions that were live in panes can be relaunched, and why the rest cannot.

    Only resumable top-level sessions with a transcript and an existing cwd that are not already
    running are items; every other binding is listed with its reason. Each session is listed once.
    """
    items: list[RestoreItem] = []
    skipped: list[RestoreSkip] = []
    seen: set[tuple[Harness, str]] = set()
    for b in bindings:
        key = (b.harness, b.session_id)
        entry = entries.get(key)
        reason: RestoreReason | None = None
        if key in seen:
            reason = RestoreReason.DUPLICATE
        elif entry is None:
            reason = RestoreReason.NOT_INDEXED
        elif entry.entrypoint is Entrypoint.SUBAGENT:
            reason = RestoreReason.SUBAGENT
        elif entry.source_missing:
            reason = RestoreReason.SOURCE_MISSING
        elif not entry.resume_argv:
            reason = RestoreReason.NO_RESUME_COMMAND
        elif not entry.cwd or entry.cwd not in existing_dirs:
            reason = RestoreReason.CWD_GONE
        elif key in running:
            reason = RestoreReason.ALREADY_RUNNING
        seen.add(key)
        if reason is not None or entry is None or entry.resume_argv is None:
            skipped.append(
                RestoreSkip(b.pane_id, b.harness, b.session_id, reason or RestoreReason.NOT_INDEXED)
            )
            continue
        items.append(
            RestoreItem(b.pane_id, b.harness, b.session_id, entry.resume_argv, entry.cwd, entry.title)
        )
    return RestorePlan(items=tuple(items), skipped=tuple(skipped))


@dataclass(frozen=True)
class RestoreRefusal:
    """Why a restore is refused (``reason`` is the refusal code, ``problem`` the words for the person)."""

    reason: str
    problem: str


RESTORE_RUNNING = RestoreRefusal(
    "restore_running",
    "a restore is already running: this one was refused and changed nothing (each restore relaunches "
    "its whole plan, so a second one now would launch every session twice); once it has finished, the "
    "sessions it relaunched are no longer listed",
)


def restore_refusal(*, running: bool) -> RestoreRefusal | None:
    """Whether a restore may begin: never while another runs (``running``). A restore's plan leaves out
    only the sessions a live pane holds, and the sessions it is relaunching are not held yet, so a
    second restore begun meanwhile would relaunch them all again. It is refused, not joined: it
    returns at once, changes nothing and says why, and the request that launched the sessions is the
    one that reports (and audits) them. None: it may."""
    return RESTORE_RUNNING if running else None
