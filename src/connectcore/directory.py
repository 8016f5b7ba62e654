"""The fleet directory: which live pane is which agent, and how a target names exactly one of them.

Rules first, as data; then the values; then pure functions. The daemon polls ``tmux list-panes -a``
(the source of truth), reads each pane process's start time from ``/proc/<pid>/stat`` (field 22) and
the screen reader's harness, and hands the poll to :func:`observe`. Evidence of which session a pane
holds arrives separately through :func:`note_evidence`. Nothing here reads a file or a clock.

Addressing (the specification's words): a target is a pane id together with the incarnation token
the directory issued, or a workstream handle (a PR, a title, the control role) that resolves to
exactly one live pane. Ambiguity is refused, never guessed. A pane id alone is never an address, nor
is a window index.

An incarnation is the pane's process life: tmux server pid and start time, pane id, pane pid and the
process start time. A pane whose process was respawned, or a recycled ``%N`` on a new server, is a
new incarnation with a new token and inherits nothing: not its title, not its PRs, not its evidence.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

from connectcore._machine import ConnectError
from connectcore.delivery import starts_with_provenance

# --------------------------------------------------------------------------------------------------
# Rules as data
# --------------------------------------------------------------------------------------------------

#: Harness names the directory knows. The screen reader reports one of these (plain strings, so this
#: module does not depend on the reader).
HARNESSES: frozenset[str] = frozenset({"claude", "codex", "opencode", "shell", "unknown"})

#: Harnesses that can hold an agent session (the others never bind).
SESSION_HARNESSES: frozenset[str] = frozenset({"claude", "codex", "opencode"})

#: Length, in hex digits, of an incarnation token (64 bits of sha256).
TOKEN_HEX = 16

PANE_ID_RE = re.compile(r"%(0|[1-9][0-9]{0,9})")
TOKEN_RE = re.compile(rf"[0-9a-f]{{{TOKEN_HEX}}}")
ADDRESS_RE = re.compile(rf"(%(?:0|[1-9][0-9]{{0,9}}))@([0-9a-f]{{{TOKEN_HEX}}})")
SESSION_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
PR_NUMBER_RE = re.compile(r"#?([1-9][0-9]{0,9})")
#: A pull request link: ``https://<host>/<owner>/<repo>/pull/<n>`` (GitHub), ``.../pulls/<n>`` or
#: ``.../-/merge_requests/<n>`` (GitLab), with anything after the number ignored.
PR_URL_RE = re.compile(
    r"https?://([A-Za-z0-9.-]+(?::[0-9]+)?)/([^/\s]+)/([^/\s]+)/(?:-/)?(?:pull|pulls|merge_requests)/"
    r"([1-9][0-9]{0,9})(?:[/?#]\S*)?"
)
MAX_HANDLE_TEXT = 256


class HandleKind(StrEnum):
    """The workstream handles a sender may use instead of an address."""

    PR = "pr"  # pr:<number> or pr:<URL>, from the session's PR links (or its branch's PR)
    TITLE = "title"  # title:<text>, the self-published pane title or the harness's session title
    REPO = "repo"  # repo:<name>, the repository's name (last path component) or its whole path
    CONTROL = "control"  # the control role


class TargetRefusal(StrEnum):
    """Why :func:`resolve` refused a target (the ``reason`` of :class:`TargetError`)."""

    BAD_TARGET = "bad_target"  # malformed: not an address, not a handle (incl. a bare %N or window index)
    UNKNOWN_TARGET = "unknown_target"  # an address whose pane id is not live
    STALE_INCARNATION = "stale_incarnation"  # the pane id is live but holds another incarnation
    AMBIGUOUS = "ambiguous"  # a handle matched more than one live pane
    NO_PANE = "no_pane"  # a handle matched no live pane


#: Codex's rollout file name: ``rollout-<time>-<session id>.jsonl``.
ROLLOUT_NAME = re.compile(r"rollout-[0-9T:-]+-([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\.jsonl")


@dataclass(frozen=True)
class HeldRollout:
    """A fact the daemon gathered about one file a process of a Codex pane holds open.

    ``path`` is the resolved path (``/proc/<pid>/fd`` resolves symlinks), ``writable`` whether the
    descriptor was opened for writing, ``program`` the base name of the holder's ``argv[0]``, and
    ``sessions_dirs`` the resolved Codex sessions directories that process may write
    (``$CODEX_HOME/sessions`` from its environment, else ``$HOME/.codex/sessions``; and the daemon's
    own Codex root).
    """

    pid: int
    path: str
    writable: bool
    program: str
    sessions_dirs: tuple[str, ...]


def rollout_session_id(held: HeldRollout) -> str | None:
    """The Codex session id one open file is evidence for, or None when it is no evidence.

    A file name is written by whoever creates the file, so only Codex's own writing counts: the
    file must be named like a rollout, lie under a Codex sessions directory, be held open for
    writing, and be held by the harness process itself (``argv[0]`` ``codex``), not a child (a tool
    command the agent runs) or another program.
    """
    name = held.path.rpartition("/")[2]
    match = ROLLOUT_NAME.fullmatch(name)
    if match is None or not held.writable or held.program != "codex":
        return None
    if not any(d and held.path.startswith(d.rstrip("/") + "/") for d in held.sessions_dirs):
        return None
    return match.group(1)


def rollout_binding(held: Iterable[HeldRollout]) -> str | None:
    """The one session a Codex pane's open files bind it to, or None (none, or more than one)."""
    ids = {sid for h in held if (sid := rollout_session_id(h)) is not None}
    return next(iter(ids)) if len(ids) == 1 else None


class EvidenceSource(StrEnum):
    """Where the daemon found that a pane holds a (harness, session id)."""

    LAUNCH = "launch"  # connectd launched it with a preset session id (Claude --session-id)
    REGISTRY = "registry"  # Claude's process registry ~/.claude/sessions/<pid>.json
    SCREEN = "screen"  # the session id shown on the pane's screen (Codex status bar)
    TRANSCRIPT = "transcript"  # a transcript file held open by the pane's process tree


class Unbound(StrEnum):
    """Why a pane's session binding is unknown (the ``reason`` of :class:`Unknown`)."""

    NO_PANE = "no_pane"  # no such live pane
    NO_EVIDENCE = "no_evidence"  # nothing says which session it holds
    CONFLICTING_EVIDENCE = "conflicting_evidence"  # sources disagree for this pane
    SHARED_SESSION = "shared_session"  # another live pane claims the same (harness, session id)
    HARNESS_MISMATCH = "harness_mismatch"  # the pane runs another harness than the evidence names


# --------------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------------


class TargetError(ConnectError):
    """A target that does not name exactly one live pane. Nothing was resolved."""

    def __init__(self, reason: TargetRefusal, message: str, *, candidates: int = 0) -> None:
        super().__init__(message)
        self.reason = reason
        self.candidates = candidates


class DirectoryError(ConnectError):
    """A malformed observation or evidence value (a bug in the caller). The directory is unchanged."""


# --------------------------------------------------------------------------------------------------
# Values
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Incarnation:
    """One process life of one pane, the key every record and token derives from."""

    server_pid: int  # tmux #{pid}
    server_start: int  # tmux #{start_time}
    pane_id: str  # %N
    pane_pid: int  # #{pane_pid}
    process_start: int  # field 22 of /proc/<pane_pid>/stat (clock ticks after boot)

    def __post_init__(self) -> None:
        if not PANE_ID_RE.fullmatch(self.pane_id):
            raise DirectoryError(f"pane id must look like %N, got {self.pane_id!r}")
        for name in ("server_pid", "server_start", "pane_pid", "process_start"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise DirectoryError(f"incarnation {name} must be a non-negative int, got {value!r}")

    @property
    def token(self) -> str:
        return incarnation_token(self)


def pane_live(*, dead: bool, pane_pid: int | None, process_start: int | None) -> bool:
    """A pane tmux lists has a live incarnation: tmux does not keep it dead (remain-on-exit), it lists
    the pane's process, and that process has a start time of its own (not gone, and the server's
    child). The watcher's test of which panes live, and what :func:`connectcore.restart.pane_dead` is
    built from."""
    return not dead and bool(pane_pid) and bool(process_start)


def incarnation_token(incarnation: Incarnation) -> str:
    """The opaque token the directory issues for ``incarnation``: deterministic, so replay is stable."""
    key = (
        f"connect-incarnation-v1:{incarnation.server_pid}:{incarnation.server_start}:"
        f"{incarnation.pane_id}:{incarnation.pane_pid}:{incarnation.process_start}"
    )
    return hashlib.sha256(key.encode()).hexdigest()[:TOKEN_HEX]


@dataclass(frozen=True)
class PaneAddress:
    """A pane id with its incarnation token; ``str()`` gives the wire form ``%5@<token>``."""

    pane_id: str
    incarnation: str

    def __post_init__(self) -> None:
        if not PANE_ID_RE.fullmatch(self.pane_id) or not TOKEN_RE.fullmatch(self.incarnation):
            raise TargetError(
                TargetRefusal.BAD_TARGET,
                f"malformed address {self.pane_id!r}@{self.incarnation!r}: "
                f"expected %N@<{TOKEN_HEX} hex digits>",
            )

    def __str__(self) -> str:
        return f"{self.pane_id}@{self.incarnation}"


@dataclass(frozen=True)
class Handle:
    """A workstream handle. ``str()`` gives the wire form (``pr:123``, ``title:fix login``, ``control``)."""

    kind: HandleKind
    value: str = ""

    def __str__(self) -> str:
        return str(self.kind) if self.kind is HandleKind.CONTROL else f"{self.kind}:{self.value}"


Target = PaneAddress | Handle


@dataclass(frozen=True)
class SessionBinding:
    """The pane holds this agent session; ``sources`` are the evidence that agree on it."""

    harness: str
    session_id: str
    sources: tuple[EvidenceSource, ...]


@dataclass(frozen=True)
class Unknown:
    """The directory cannot say which session a pane holds, and says why instead of guessing."""

    reason: Unbound
    detail: str = ""


@dataclass(frozen=True)
class PaneObservation:
    """One row of the daemon's ``list-panes -a`` poll, joined with what it knows of that pane.

    ``title`` is only a self-published pane title (the daemon leaves tmux's default hostname title
    out); ``session_title`` is the harness's own session title; ``pr_links`` are the PRs the session
    is associated with (its transcript's links, or its branch's PR), as URLs or ``#N``. ``launcher``
    names the launcher connectd started the pane from, and ``is_control`` marks the control role;
    both come from the daemon's own launch records keyed by this incarnation.
    """

    incarnation: Incarnation
    harness: str = "unknown"
    foreground: str = ""
    title: str = ""
    session_title: str = ""
    cwd: str = ""
    repo: str | None = None
    branch: str | None = None
    pr_links: tuple[str, ...] = ()
    launcher: str | None = None
    is_control: bool = False


@dataclass(frozen=True)
class Evidence:
    """One source's current claim that a pane holds (harness, session id).

    A later claim from the same source for the same pane replaces the earlier one; ``session_id=None``
    withdraws it. ``pid``/``process_start`` name the process the claim came from (for a Claude
    registry entry, its pid and start time); a claim about the pane's root process that does not
    match the pane's incarnation is stale and ignored.
    """

    pane_id: str
    incarnation: str
    source: EvidenceSource
    harness: str
    session_id: str | None
    pid: int | None = None
    process_start: int | None = None


@dataclass(frozen=True)
class PaneRecord:
    """What the directory knows of one live pane incarnation."""

    incarnation: Incarnation
    token: str
    harness: str
    foreground: str
    title: str
    session_title: str
    cwd: str
    repo: str | None
    branch: str | None
    pr_links: tuple[str, ...]
    binding: SessionBinding | Unknown
    launcher: str | None
    is_control: bool

    @property
    def pane_id(self) -> str:
        return self.incarnation.pane_id

    @property
    def address(self) -> PaneAddress:
        return PaneAddress(self.incarnation.pane_id, self.token)


@dataclass(frozen=True)
class Directory:
    """The fleet directory. Treat the mappings as read-only; every update returns a new value.

    ``panes`` maps pane id to its live record; ``evidence`` maps (pane id, source) to the current
    claim for that pane's current incarnation.
    """

    panes: Mapping[str, PaneRecord] = field(default_factory=dict)
    evidence: Mapping[tuple[str, EvidenceSource], Evidence] = field(default_factory=dict)

    def records(self) -> tuple[PaneRecord, ...]:
        """Every live record, in pane id order (%2 before %10)."""
        return tuple(self.panes[p] for p in sorted(self.panes, key=lambda p: int(p[1:])))


# --------------------------------------------------------------------------------------------------
# Updates
# --------------------------------------------------------------------------------------------------


def observe(directory: Directory, panes: Sequence[PaneObservation]) -> Directory:
    """The directory after a full ``list-panes -a`` poll.

    Panes missing from the poll are gone. A pane whose incarnation changed is a new record with a new
    token and none of the old one's evidence. Refuses (:class:`DirectoryError`, nothing changed) a poll
    that lists one pane id twice or names an unknown harness.
    """
    seen: set[str] = set()
    for pane in panes:
        pane_id = pane.incarnation.pane_id
        if pane_id in seen:
            raise DirectoryError(f"the poll lists pane {pane_id} twice")
        seen.add(pane_id)
        if pane.harness not in HARNESSES:
            raise DirectoryError(
                f"pane {pane_id}: unknown harness {pane.harness!r} (expected one of {sorted(HARNESSES)})"
            )
    tokens = {pane.incarnation.pane_id: pane.incarnation.token for pane in panes}
    evidence = {
        key: claim for key, claim in directory.evidence.items() if tokens.get(key[0]) == claim.incarnation
    }
    records = {pane.incarnation.pane_id: _record(pane) for pane in panes}
    return _rebind(records, evidence)


def note_evidence(directory: Directory, claim: Evidence) -> Directory:
    """The directory with one source's claim about a pane's session recorded (or withdrawn).

    A claim for a pane that is gone or now holds another incarnation is a race with the poll, not an
    error: it is ignored and the directory returned unchanged. A malformed claim is refused with
    :class:`DirectoryError`.
    """
    if claim.harness not in SESSION_HARNESSES:
        raise DirectoryError(
            f"evidence for {claim.pane_id}: harness {claim.harness!r} cannot hold a session "
            f"(expected one of {sorted(SESSION_HARNESSES)})"
        )
    if claim.session_id is not None and not SESSION_ID_RE.fullmatch(claim.session_id):
        raise DirectoryError(f"evidence for {claim.pane_id}: malformed session id {claim.session_id!r}")
    record = directory.panes.get(claim.pane_id)
    if record is None or record.token != claim.incarnation:
        return directory
    inc = record.incarnation
    if claim.pid == inc.pane_pid and claim.process_start not in (None, inc.process_start):
        return directory
    key = (claim.pane_id, claim.source)
    evidence = dict(directory.evidence)
    if claim.session_id is None:
        if key not in evidence:
            return directory
        del evidence[key]
    else:
        if evidence.get(key) == claim:
            return directory
        evidence[key] = claim
    return _rebind(dict(directory.panes), evidence)


def _record(pane: PaneObservation) -> PaneRecord:
    inc = pane.incarnation
    return PaneRecord(
        incarnation=inc,
        token=inc.token,
        harness=pane.harness,
        foreground=pane.foreground,
        # connect's provenance line is never a title (a harness that titles itself after the text typed
        # into it, or a program imitating connect): the pane is listed as untitled instead.
        title="" if starts_with_provenance(pane.title) else pane.title,
        session_title=pane.session_title,
        cwd=pane.cwd,
        repo=pane.repo,
        branch=pane.branch,
        pr_links=tuple(pane.pr_links),
        binding=Unknown(Unbound.NO_EVIDENCE),
        launcher=pane.launcher,
        is_control=pane.is_control,
    )


def _rebind(
    records: dict[str, PaneRecord], evidence: Mapping[tuple[str, EvidenceSource], Evidence]
) -> Directory:
    """Recompute every record's binding from the evidence (conflicts can span panes)."""
    claims: dict[str, list[Evidence]] = {}
    for (pane_id, _source), claim in sorted(evidence.items()):
        claims.setdefault(pane_id, []).append(claim)
    holders: dict[tuple[str, str], set[str]] = {}
    for pane_id, pane_claims in claims.items():
        for claim in pane_claims:
            assert claim.session_id is not None
            holders.setdefault((claim.harness, claim.session_id), set()).add(pane_id)
    rebound = {
        pane_id: replace(record, binding=_binding(record, claims.get(pane_id, []), holders))
        for pane_id, record in records.items()
    }
    return Directory(panes=rebound, evidence=dict(evidence))


def _binding(
    record: PaneRecord, claims: Sequence[Evidence], holders: Mapping[tuple[str, str], set[str]]
) -> SessionBinding | Unknown:
    if not claims:
        return Unknown(Unbound.NO_EVIDENCE, f"nothing says which session {record.pane_id} holds")
    sessions = sorted({(c.harness, c.session_id or "") for c in claims})
    if len(sessions) > 1:
        said = ", ".join(f"{c.source}: {c.harness}:{c.session_id}" for c in claims)
        return Unknown(Unbound.CONFLICTING_EVIDENCE, f"{record.pane_id}: sources disagree ({said})")
    harness, session_id = sessions[0]
    # The pane's program by the one rule (:func:`recipient_harness`): an incarnation connect launched
    # (its launch record is evidence) shows its launcher script's shell until the script execs the
    # agent; that shell is the launched agent starting, not a mismatch. Read as one, a pane connect
    # had just launched or restored was unbound for a moment, and restore offered its live session.
    launched = next((c.harness for c in claims if c.source is EvidenceSource.LAUNCH), "")
    running = recipient_harness(None if record.harness == "unknown" else record.harness, launched=launched)
    if running not in ("unknown", harness):
        return Unknown(
            Unbound.HARNESS_MISMATCH,
            f"{record.pane_id} runs {running} but the evidence names a {harness} session",
        )
    others = sorted(holders[(harness, session_id)] - {record.pane_id}, key=lambda p: int(p[1:]))
    if others:
        return Unknown(
            Unbound.SHARED_SESSION,
            f"{harness} session {session_id} is also claimed by {', '.join(others)}",
        )
    return SessionBinding(harness, session_id, tuple(sorted(c.source for c in claims)))


def note_facts(
    directory: Directory,
    pane_id: str,
    incarnation: str,
    *,
    repo: str | None,
    branch: str | None,
    session_title: str,
    pr_links: Sequence[str],
) -> Directory:
    """The directory with one pane's routing facts (repo, branch, session title, PR links) replaced.

    Facts for a pane that is gone or now holds another incarnation are a race with the poll: ignored.
    """
    record = directory.panes.get(pane_id)
    if record is None or record.token != incarnation:
        return directory
    new = replace(record, repo=repo, branch=branch, session_title=session_title, pr_links=tuple(pr_links))
    if new == record:
        return directory
    return replace(directory, panes={**directory.panes, pane_id: new})


# --------------------------------------------------------------------------------------------------
# Queries
# --------------------------------------------------------------------------------------------------


def self_published_title(title: str, hostname: str) -> str:
    """The pane title a program set, or "": tmux's default pane title is the host name, and only a
    title the program published counts (for the ``title:`` handle and the directory)."""
    title = title.strip()
    return "" if title in {hostname, ""} else title


def window_name(session_name: str, window_index: int) -> str:
    """The tmux ``session:window`` a person switches to (``main:1``), from what ``list-panes`` read."""
    return f"{session_name}:{window_index}"


def pane_place(pane_id: str, window: str = "") -> str:
    """Where a person finds a pane: its id with its tmux ``session:window`` beside it (``%3 (main:1)``),
    or the id alone when the window is not known (the pane is gone)."""
    return f"{pane_id} ({window})" if window else pane_id


def placed(text: str, windows: Mapping[str, str]) -> str:
    """A pane id or address (``%3``, ``%3@<token>``) with its ``session:window`` beside it when known
    (``%3@<token> (main:1)``); any other text as it is."""
    pane = text if PANE_ID_RE.fullmatch(text) else None
    if pane is None and (m := ADDRESS_RE.fullmatch(text)) is not None:
        pane = m.group(1)
    window = windows.get(pane, "") if pane is not None else ""
    return f"{text} ({window})" if window else text


_PANE_OR_ADDRESS = re.compile(rf"(?<![\w%])(%(?:0|[1-9][0-9]{{0,9}}))(?:@[0-9a-f]{{{TOKEN_HEX}}})?(?![\w@])")


def placed_in(text: str, windows: Mapping[str, str]) -> str:
    """Every pane id or address standing on its own in ``text`` (an audit record's detail) with its
    ``session:window`` beside it when known, as :func:`placed` does for a whole text."""
    return _PANE_OR_ADDRESS.sub(
        lambda m: f"{m.group(0)} ({windows[m.group(1)]})" if windows.get(m.group(1)) else m.group(0), text
    )


def pane_label(record: PaneRecord | None, pane_id: str, window: str = "") -> str:
    """A pane named for a person: its place, its program, and its title, else the directory it works
    in (a pane with neither, or one that is gone, is named by its place alone)."""
    if record is None:
        return pane_place(pane_id, window)
    bits = [pane_place(pane_id, window), record.harness]
    if record.is_control:
        bits.append("control")
    about = record.title or record.session_title or record.cwd
    if about:
        bits.append(about)
    return " · ".join(bits)


def binding(directory: Directory, pane_id: str) -> SessionBinding | Unknown:
    """Which (harness, session id) the live pane ``pane_id`` holds, or :class:`Unknown` with the reason."""
    record = directory.panes.get(pane_id)
    if record is None:
        return Unknown(Unbound.NO_PANE, f"no live pane {pane_id!r}")
    return record.binding


def bound_sessions(directory: Directory) -> dict[tuple[str, str], PaneRecord]:
    """Each (harness, session id) a live pane holds unambiguously, with that pane (the first in pane
    order when two claim one session)."""
    held: dict[tuple[str, str], PaneRecord] = {}
    for r in directory.records():
        if isinstance(r.binding, SessionBinding):
            held.setdefault((r.binding.harness, r.binding.session_id), r)
    return held


def recipient_harness(read: str | None, *, launched: str = "", recorded: str = "") -> str:
    """Which harness a pane runs, as a recipient (its kind, for :func:`connectcore.consent.may_receive`
    and the submit settle): the screen's reading when it names one; else the harness connect itself
    just launched there (``launched``: its screen not read yet, or still naming none); else, with no
    reading at all, the directory's record; else ``"unknown"`` (not an agent: it receives nothing).
    A reading that names no harness wins over the record: a stale record must not make a pane an
    agent recipient while its screen shows none. A shell reading does not win over ``launched``: a
    window connect just opened shows its launcher script's shell until the script execs the agent
    (control's hand-off read it so under load and refused its own message); the guard still types
    only into an agent that waits for input."""
    if read is not None and read not in ("unknown", "shell"):
        return read
    if launched:
        return launched
    if read is not None:
        return read
    return recorded or "unknown"


def pane_session(
    bound: SessionBinding | Unknown, *recorded: tuple[str, str | None] | None
) -> tuple[str, str] | None:
    """The (harness, session id) to act on for a pane: its unambiguous binding when it has one, else
    the first session connect itself recorded for it (``recorded``, in order: the launch record's for a
    restart; the connected principal's, then the launch record's, for the per-pane toggle), else None.
    A recorded session without an id (or with an empty one) is none: nothing is guessed. The binding
    wins because it is what the pane holds now; a record can be stale (the agent started another
    session in the same pane). The launch record answers before the watcher's next poll has bound
    the pane from it (a grant right after `connectd launch ... --connect off`)."""
    if isinstance(bound, SessionBinding):
        return (bound.harness, bound.session_id)
    for record in recorded:
        if record is not None and record[1]:
            return (record[0], record[1])
    return None


def panes_holding(directory: Directory, harness: str, session_id: str) -> tuple[str, ...]:
    """The live panes unambiguously bound to (harness, session id): zero or one pane id."""
    return tuple(
        r.pane_id
        for r in directory.records()
        if isinstance(r.binding, SessionBinding)
        and (r.binding.harness, r.binding.session_id) == (harness, session_id)
    )


def parse_target(text: str) -> Target:
    """The address or handle ``text`` names, or :class:`TargetError` (``bad_target``) saying why not.

    Forms: ``%5@<token>``, ``pr:123``, ``pr:#123``, ``pr:<PR URL>``, ``title:<text>``, ``repo:<name>``,
    ``control``.
    """
    if not isinstance(text, str):
        raise TargetError(TargetRefusal.BAD_TARGET, f"a target is a string, got {type(text).__name__}")
    stripped = text.strip()
    if not stripped:
        raise TargetError(TargetRefusal.BAD_TARGET, "empty target")
    if stripped.startswith("%"):
        match = ADDRESS_RE.fullmatch(stripped)
        if match:
            return PaneAddress(match.group(1), match.group(2))
        if PANE_ID_RE.fullmatch(stripped):
            raise TargetError(
                TargetRefusal.BAD_TARGET,
                f"a pane id alone is never an address: use {stripped}@<incarnation token> "
                "as the directory lists it",
            )
        raise TargetError(
            TargetRefusal.BAD_TARGET,
            f"malformed address {stripped!r}: expected %N@<{TOKEN_HEX} hex digits>",
        )
    if stripped == HandleKind.CONTROL:
        return Handle(HandleKind.CONTROL)
    kind, sep, value = stripped.partition(":")
    if not sep or kind not in {k.value for k in HandleKind}:
        raise TargetError(
            TargetRefusal.BAD_TARGET,
            f"unrecognised target {stripped[:80]!r}: expected %N@<token>, pr:<number or URL>, "
            "title:<text>, repo:<name> or control (window indices are never addresses)",
        )
    return _handle(HandleKind(kind), value)


def handle_of(text: str) -> str | None:
    """The handle ``text`` names, in its wire form, or ``None`` for an address; a message sent to a
    handle keeps it, so the guard can check the handle still names the same pane (bad: ``bad_target``)."""
    parsed = parse_target(text)
    return str(parsed) if isinstance(parsed, Handle) else None


def _handle(kind: HandleKind, value: str) -> Handle:
    value = value.strip()
    if kind is HandleKind.CONTROL:
        if value:
            raise TargetError(TargetRefusal.BAD_TARGET, "the control handle takes no value")
        return Handle(kind)
    if not value:
        raise TargetError(TargetRefusal.BAD_TARGET, f"{kind}: handle needs a value")
    if len(value) > MAX_HANDLE_TEXT:
        raise TargetError(
            TargetRefusal.BAD_TARGET, f"{kind}: handle longer than {MAX_HANDLE_TEXT} characters"
        )
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in value):
        raise TargetError(TargetRefusal.BAD_TARGET, f"{kind}: handle contains a control character")
    if kind is HandleKind.PR and _pr_key(value) is None:
        raise TargetError(
            TargetRefusal.BAD_TARGET,
            f"pr: handle {value[:80]!r} is neither a PR number nor a pull request URL",
        )
    return Handle(kind, value)


def _pr_key(link: str) -> tuple[str, ...] | None:
    """A PR link's comparable key: ``(number,)`` for ``#N``, ``(number, host, owner, repo)`` for a URL."""
    link = link.strip()
    match = PR_NUMBER_RE.fullmatch(link)
    if match:
        return (match.group(1),)
    match = PR_URL_RE.fullmatch(link)
    if match:
        host, owner, repo, number = match.groups()
        return (number, host.lower(), owner.lower(), repo.lower().removesuffix(".git"))
    return None


def _pr_matches(wanted: tuple[str, ...], links: Iterable[str]) -> bool:
    for link in links:
        key = _pr_key(link)
        if key is None:
            continue
        # A bare number matches that number in any repo; a URL must match the URL's repo too.
        if key[0] == wanted[0] and (len(wanted) == 1 or len(key) == 1 or key == wanted):
            return True
    return False


def _norm_title(text: str) -> str:
    return " ".join(text.split()).casefold()


def _repo_matches(wanted: str, repo: str | None) -> bool:
    """``repo:<name>`` names a repository by its whole path or by its last path component."""
    if not repo:
        return False
    wanted = wanted.rstrip("/") or wanted
    if wanted.startswith("/"):
        return wanted == repo.rstrip("/")
    return wanted.casefold() == repo.rstrip("/").rsplit("/", 1)[-1].casefold()


def _matches(handle: Handle, record: PaneRecord) -> bool:
    if handle.kind is HandleKind.CONTROL:
        return record.is_control
    if handle.kind is HandleKind.PR:
        wanted = _pr_key(handle.value)
        return wanted is not None and _pr_matches(wanted, record.pr_links)
    if handle.kind is HandleKind.REPO:
        return _repo_matches(handle.value, record.repo)
    wanted_title = _norm_title(handle.value)
    return any(t and _norm_title(t) == wanted_title for t in (record.title, record.session_title))


def candidates(directory: Directory, handle: Handle | str) -> tuple[PaneRecord, ...]:
    """Every live pane ``handle`` matches, in pane id order (resolution needs exactly one)."""
    parsed = parse_target(handle) if isinstance(handle, str) else handle
    if not isinstance(parsed, Handle):
        raise TargetError(TargetRefusal.BAD_TARGET, f"{parsed} is an address, not a handle")
    return tuple(r for r in directory.records() if _matches(parsed, r))


def resolve(directory: Directory, target: Target | str) -> PaneRecord:
    """The one live pane ``target`` names, or :class:`TargetError` with the reason code."""
    parsed = parse_target(target) if isinstance(target, str) else target
    if isinstance(parsed, PaneAddress):
        record = directory.panes.get(parsed.pane_id)
        if record is None:
            raise TargetError(TargetRefusal.UNKNOWN_TARGET, f"no live pane {parsed.pane_id}")
        if record.token != parsed.incarnation:
            raise TargetError(
                TargetRefusal.STALE_INCARNATION,
                f"{parsed.pane_id} now holds another process (incarnation {parsed.incarnation} "
                "is gone); list agents again for its current address",
            )
        return record
    if not isinstance(parsed, Handle):
        raise TargetError(TargetRefusal.BAD_TARGET, f"not a target: {parsed!r}")
    found = candidates(directory, parsed)
    if not found:
        raise TargetError(TargetRefusal.NO_PANE, f"no live pane matches {parsed}")
    if len(found) > 1:
        raise TargetError(
            TargetRefusal.AMBIGUOUS,
            f"{parsed} matches {len(found)} live panes; address one as %N@<token> instead",
            candidates=len(found),
        )
    return found[0]


def resolve_control(directory: Directory, control: tuple[str, str] | None) -> PaneRecord:
    """The pane the ``control`` handle names: the running control's live token's (pane, incarnation)
    (``control``, from :func:`connectcore.hub.acts.control_pane`), only while the directory shows
    that very incarnation in that pane; else :class:`TargetError` ``no_pane`` (a control stopped a
    moment ago, or a pane that now runs another process, is never named)."""
    record = directory.panes.get(control[0]) if control is not None else None
    if control is None or record is None or record.token != control[1]:
        raise TargetError(TargetRefusal.NO_PANE, "no control agent is running")
    return record


def resolves_to(directory: Directory, handle: Handle | str) -> str | None:
    """The pane id ``handle`` resolves to now, or ``None`` when it names no pane or several.

    The delivery guard calls this under the send lock to check a handle still names the same pane.
    """
    try:
        found = candidates(directory, handle)
    except TargetError:
        return None
    return found[0].pane_id if len(found) == 1 else None
