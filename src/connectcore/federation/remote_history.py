"""Remote history search: the query another box's agent asks of this box, the answer this box gives
under the pairing's ``history`` setting, and how the asking box judges that answer (docs/federation.md,
"Directory and history across boxes: reads").

Rules (H1 to H8):

- **H1 The query.** ``find_sessions`` with ``box=laptop`` makes a ``history_query`` envelope
  (:class:`connectcore.federation.envelope.HistoryQueryInner`: signed by the asking box, sealed to the
  box asked, in the active pairing) with a fresh ``id``, ``created_at``, the asking agent's actor, the
  query (its searchable words checked here first, :func:`connectcore.history.query_terms`), an
  optional repository name to narrow to, and a ``limit`` of 1 to :data:`MAX_RESULTS`
  (:func:`query`). It goes as a NATS request on ``connect.<laptop>.history``; not stored, not retried.
  ``get_session`` with ``box=laptop`` is the same request asking for one ``session`` (harness and
  id: :func:`check_session`) instead of words: no query words, no repository, a limit of 1; it is
  judged, rated, planned and shaped as any query (H2 to H5), and answered with that session when the
  pairing's setting shares it, else with none (the asker cannot tell a session that does not exist
  from one in a repository not listed: ``unknown_session``, :func:`session_result`).
- **H2 Judging a query** (:func:`admit`), the first that holds deciding, each refusal changing
  nothing and answering nothing (there is no one to answer but an unauthenticated sender): the
  envelope judgement's own refusals (``unpaired``, ``removed``, ``bad_signature``, ``bad_seal``,
  ``bad_binding``, ``clock_ahead``, ...); ``not_a_query`` (a verdict of another kind);
  ``malformed_query`` (an id, actor, query, repository or limit outside H1's shapes); ``stale_query``
  (created more than :data:`QUERY_MAX_AGE` seconds from now, either way); ``replayed`` (an id seen from
  that pairing within :data:`WINDOW`). Then the **rate** (H3).
- **H3 Rate.** At most :data:`RATE` queries a pairing per :data:`WINDOW` seconds (sliding): past it
  the query is refused ``over_rate`` and answered ``refused`` (signed: the box asked is known), changing
  nothing (a refused query does not count).
- **H4 The answer under the setting** (:func:`plan`). The pairing's ``history`` setting on the box
  asked: ``none`` (the default: answered ``not_shared``), or ``index`` (a search of this box's history
  index, limited to the repositories the owner listed for that pairing by name (``history_repos``):
  the repositories this box's index knows whose name is listed, narrowed to the query's repository
  name if it gives one). ``index`` with no repository listed shares nothing: answered ``not_shared``.
  An unknown setting shares nothing.
- **H5 The allowlist and caps** (:func:`shape_results`): each result only :data:`FIELDS`, the fields a
  local history read returns (:data:`connectcore.history.ALLOWED_FIELDS`) less the working directory
  (``cwd``), and its repository by its **name** (as ``history_repos`` lists it), never its path: no
  absolute path of the box asked (its home, its data directory) leaves it, as the directory shares
  names only (D2). Each text is one printable line within its bound, and only results whose repository
  is one the pairing may read are kept (checked again here, whatever the search gave); at most
  :data:`MAX_RESULTS` results and :data:`RESULTS_BUDGET` bytes of them, so the sealed answer stays
  within an envelope's 64 KiB.
- **H6 Judging an answer** (:func:`receive_answer`) on the asking box: the envelope judgement's
  refusals (under ``connect.<own>.history.<the box asked>``: an answer signed by another box is
  ``bad_binding`` or ``bad_signature``); ``not_an_answer``; ``wrong_query`` (it answers another query
  id); ``malformed_answer`` (an outcome not H4's, more than :data:`MAX_RESULTS` results, a result
  with fields other than H5's, text not one printable line, or a repository that is a path, not a
  name: text from another machine is data).
  ``not_shared`` and ``refused`` are the caller's refusals (:class:`RemoteHistoryRefused`); results are
  shown with their box (:func:`shown`).
- **H7 No answer.** None within :data:`TIMEOUT` seconds (the box is offline, not listening, or chose
  not to answer): the caller is told ``no answer from box laptop within 5 s`` (:func:`no_answer`).
- **H8 Audit.** Both boxes audit each query (:data:`AUDIT_EVENT`): the asking box as the
  ``find_sessions`` call's record, the box asked with the outcome (:func:`audit_outcome`).

Pure: the shell seals, signs, opens, verifies, searches and keeps the clock; it hands :func:`admit` and
:func:`receive_answer` the envelope judgement's verdicts.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from connectcore import history as HI
from connectcore._machine import ConnectError, freeze
from connectcore.federation import envelope as E

TIMEOUT = 5.0  # seconds the asking box waits for an answer (H7)
RATE = 10  # queries a pairing may ask per window (H3)
WINDOW = 60.0  # seconds
QUERY_MAX_AGE = 30.0  # seconds a query's created_at may differ from now (H2)
MAX_RESULTS = 50  # results in one answer (H5)
#: The most canonical JSON the results may take: sealed and base64url'd, the answer stays within an
#: envelope's 64 KiB (the results past it are left out, lowest ranked first).
RESULTS_BUDGET = 44 * 1024
MAX_QUERY = 512  # characters of a query
AUDIT_EVENT = "federation.history"


class Setting(StrEnum):
    """A pairing's ``history`` setting on the box asked (``connectd pair set BOX history=...``)."""

    NONE = "none"
    INDEX = "index"


DEFAULT_SETTING = Setting.NONE


class Outcome(StrEnum):
    RESULTS = "results"
    NOT_SHARED = "not_shared"
    REFUSED = "refused"


#: The text fields of a result and their bounds (characters); ``last_active`` and ``pane`` may be None.
#: ``repo`` is the repository's name (H5).
TEXT_FIELDS: Mapping[str, int] = {
    "harness": 16, "session_id": 128, "repo": 100, "title": 300, "last_active": 40, "liveness": 32, "pane": 16,
}
#: The list fields of a result: (at most how many, of at most how many characters each).
LIST_FIELDS: Mapping[str, tuple[int, int]] = {"branches": (20, 200), "prs": (20, 300), "matched_terms": (16, 64)}
#: The fields not shared with another box: paths of the box asked (H5).
WITHHELD = frozenset({"cwd"})
#: Every field of a shared result: a local history read's, less :data:`WITHHELD` (H5).
FIELDS = frozenset(HI.ALLOWED_FIELDS) - WITHHELD
_NULLABLE = frozenset({"last_active", "pane"})
_ID_RE = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_ACTOR_RE = re.compile(r"(agent|control):[a-z0-9_-]{1,32}:[A-Za-z0-9._:%-]{1,128}")
_HARNESS_RE = re.compile(r"[a-z][a-z0-9_-]{0,15}")


class QueryRefused(ConnectError):
    """A query this box does not take (H2, H3); ``reason`` names the rule, ``answer`` whether a signed
    ``refused`` answer goes back (only to a query whose box is known: ``over_rate``). Nothing changed."""

    def __init__(self, reason: str, message: str, *, answer: bool = False) -> None:
        super().__init__(message)
        self.reason = reason
        self.answer = answer


class AnswerRefused(ConnectError):
    """An arriving answer the asking box does not take (H6); ``reason`` names the rule."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class RemoteHistoryRefused(ConnectError):
    """What the asking agent is told when the other box shares nothing (``not_shared``), refused the
    query (``refused``) or did not answer (``no_answer``)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


# --------------------------------------------------------------------------------------------------
# H1: the query
# --------------------------------------------------------------------------------------------------


def _printable_line(value: str, bound: int) -> bool:
    return len(value) <= bound and value.isprintable()


def check_query(text: str, repo: str | None, limit: int) -> None:
    """The query's words, repository name and limit as H1 says, or :class:`QueryRefused`
    (``malformed_query``); the words as :func:`connectcore.history.query_terms` reads them."""
    if not isinstance(text, str) or not _printable_line(text, MAX_QUERY):
        raise QueryRefused("malformed_query", f"a query is one printable line of at most {MAX_QUERY} characters")
    try:
        HI.query_terms(text)
    except HI.HistoryError as exc:
        raise QueryRefused("malformed_query", str(exc)) from None
    if repo is not None and (not isinstance(repo, str) or not repo or not _printable_line(repo, 200) or "/" in repo):
        raise QueryRefused("malformed_query", "repo names a repository by its name (no path)")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_RESULTS:
        raise QueryRefused("malformed_query", f"limit is an integer from 1 to {MAX_RESULTS}, got {limit!r}")


def check_session(session: object, text: str, repo: str | None, limit: int) -> None:
    """A query for one session (H1, ``get_session box=``): a harness and a session id, with no words,
    no repository and a limit of 1; or :class:`QueryRefused` (``malformed_query``)."""
    if not (isinstance(session, tuple) and len(session) == 2 and all(isinstance(v, str) for v in session)):
        raise QueryRefused("malformed_query", "a session is a harness and a session id")
    harness, session_id = session
    if not _HARNESS_RE.fullmatch(harness) or not _ID_RE.fullmatch(session_id):
        raise QueryRefused("malformed_query", f"a session is a harness and a session id (letters, digits, . _ : -), "
                                              f"not {harness[:16]!r} {session_id[:40]!r}")
    if text != "" or repo is not None or limit != 1:
        raise QueryRefused("malformed_query", "a query for one session has no words, no repository and a limit of 1")


def query(
    routing: E.Routing, *, id: str, asker: str, text: str, repo: str | None, limit: int, now: float,
    session: tuple[str, str] | None = None,
) -> E.HistoryQueryInner:
    """The query to seal for ``routing`` (a ``history_query`` from this box to the box asked), or
    :class:`QueryRefused` before anything is sent (H1). A limit above :data:`MAX_RESULTS` is lowered to it.
    With ``session`` (harness, session id): the query for that one session (``text`` "", ``repo`` None,
    ``limit`` 1)."""
    if routing.kind is not E.Kind.HISTORY_QUERY:
        raise ValueError(f"a history query travels as a history_query envelope, not a {routing.kind}")
    limit = min(limit, MAX_RESULTS) if isinstance(limit, int) and not isinstance(limit, bool) else limit
    if session is not None:
        check_session(session, text, repo, limit)
    else:
        check_query(text, repo, limit)
    return E.HistoryQueryInner(routing, id, now, asker, text, repo, limit, session)


def query_subject(own: str, wire: bytes) -> str:
    """The subject a query arriving on ``connect.<own>.history`` is judged under:
    ``connect.<own>.history.<the outer part's from>`` (the NATS subject names no sender; the signature
    with the keys pinned for that box binds it). An outer part without a readable ``from`` gives a
    subject the judgement refuses ``malformed``."""
    sender = "unknown"
    found = re.search(rb'"from":"([a-z2-7]{16})"', wire[E.SIGNATURE_BYTES:E.SIGNATURE_BYTES + 1024])
    if found is not None:
        sender = found.group(1).decode("ascii")
    return f"connect.{own}.{E.SUBJECT_TOKEN[E.Kind.HISTORY_QUERY]}.{sender}"


def answer_subject(own: str, asked: str) -> str:
    """The subject an answer from the box ``asked`` is judged under (H6)."""
    return E.subject_for(E.Kind.HISTORY_ANSWER, asked, own)


# --------------------------------------------------------------------------------------------------
# H2, H3: judging a query, the rate
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Limiter:
    """Per pairing: when its admitted queries were asked within the window, and their ids (H2, H3).
    Held in memory by the box asked; a restart forgets it (queries are not stored)."""

    asked: Mapping[str, tuple[tuple[float, str], ...]] = field(default_factory=dict)


def _recent(limiter: Limiter, pairing: str, now: float) -> tuple[tuple[float, str], ...]:
    return tuple((at, qid) for at, qid in limiter.asked.get(pairing, ()) if now - at < WINDOW)


def admit(verdict: E.Verdict, limiter: Limiter, *, now: float) -> tuple[E.HistoryQueryInner, Limiter]:
    """The query ``verdict`` judged (H2) and counted (H3): the query and the limiter with it; or
    :class:`QueryRefused`, changing nothing."""
    if verdict.decision is E.Decision.REFUSED:
        raise QueryRefused(str(verdict.reason), verdict.detail)
    inner = verdict.inner
    if verdict.decision is not E.Decision.HISTORY or not isinstance(inner, E.HistoryQueryInner):
        raise QueryRefused("not_a_query", f"a {verdict.decision} verdict is not a history query's")
    if not _ID_RE.fullmatch(inner.id) or not _ACTOR_RE.fullmatch(inner.asker):
        raise QueryRefused("malformed_query", "a query's id or asker is not one")
    if inner.session is not None:
        check_session(inner.session, inner.query, inner.repo, inner.limit)
    else:
        check_query(inner.query, inner.repo, inner.limit)
    if abs(now - inner.created_at) > QUERY_MAX_AGE:
        raise QueryRefused("stale_query", f"created {now - inner.created_at:.0f} s from now (the bound is "
                                          f"{QUERY_MAX_AGE:.0f} s): a replay or a clock far off")
    pairing = inner.routing.pairing
    assert pairing is not None  # a history query names its pairing (the judgement checked it is active)
    recent = _recent(limiter, pairing, now)
    if any(qid == inner.id for _at, qid in recent):
        raise QueryRefused("replayed", f"query {inner.id} was asked already")
    if len(recent) >= RATE:
        raise QueryRefused("over_rate", f"more than {RATE} history queries a minute from this pairing", answer=True)
    asked = {**{p: q for p, q in limiter.asked.items() if _recent(limiter, p, now)}, pairing: (*recent, (now, inner.id))}
    return inner, replace(limiter, asked=freeze(asked.items()))


# --------------------------------------------------------------------------------------------------
# H4, H5: the answer
# --------------------------------------------------------------------------------------------------


def setting_of(value: object) -> Setting:
    """A pairing's ``history`` setting from what the settings hold; anything unknown shares nothing."""
    try:
        return Setting(str(value))
    except ValueError:
        return Setting.NONE


def _name(repo: str) -> str:
    stripped = repo.rstrip("/")
    return stripped.rsplit("/", 1)[-1] if stripped else ""


@dataclass(frozen=True)
class Search:
    """What the box asked searches (H4): the query's words, the repositories it may read (as this box
    names them), at most ``limit`` results; or, with ``session``, that one session (harness, id), if
    it is in one of those repositories."""

    text: str
    repos: frozenset[str]
    limit: int
    session: tuple[str, str] | None = None


def plan(
    inner: E.HistoryQueryInner, setting: Setting | str, names: Sequence[str], known: Sequence[str]
) -> Search | None:
    """The search the pairing's setting allows for ``inner`` (H4), or None: answered ``not_shared``.
    ``names``: the repositories the owner listed for that pairing (``history_repos``, by name);
    ``known``: the repositories this box's history index knows (as it names them: paths)."""
    listed = frozenset(n for n in names if n)
    if setting_of(setting) is not Setting.INDEX or not listed:
        return None
    if inner.repo is not None:
        listed &= {inner.repo}
    return Search(inner.query, frozenset(r for r in known if r and _name(r) in listed), inner.limit, inner.session)


def _one_line(value: object, bound: int) -> str:
    return "".join(ch if ch.isprintable() else " " for ch in str(value))[:bound]


def shape(result: Mapping[str, Any]) -> dict[str, Any]:
    """One local result (as ``find_sessions`` gives it) as it is shared: :data:`FIELDS` only (never its
    ``cwd``), its repository by its name, each text one printable line within its bound (H5)."""
    shaped: dict[str, Any] = {}
    for name, bound in TEXT_FIELDS.items():
        value = result.get(name)
        if name == "repo" and isinstance(value, str):
            value = _name(value)
        shaped[name] = None if value is None and name in _NULLABLE else _one_line("" if value is None else value, bound)
    for name, (count, bound) in LIST_FIELDS.items():
        shaped[name] = [_one_line(v, bound) for v in list(result.get(name) or ())[:count]]
    return shaped


def shape_results(results: Sequence[Mapping[str, Any]], search: Search) -> tuple[dict[str, Any], ...]:
    """What the answer carries of ``results`` (H5): only those whose repository ``search`` may read,
    shaped, at most ``search.limit`` (and :data:`MAX_RESULTS`) and :data:`RESULTS_BUDGET` bytes."""
    kept: list[dict[str, Any]] = []
    size = 0
    for result in results:
        if len(kept) >= min(search.limit, MAX_RESULTS):
            break
        if result.get("repo") not in search.repos:
            continue
        shaped = shape(result)
        size += len(E.canonical(shaped)) + 1
        if size > RESULTS_BUDGET:
            break
        kept.append(shaped)
    return tuple(kept)


def answer(
    routing: E.Routing, inner: E.HistoryQueryInner, outcome: Outcome, *, now: float,
    results: Sequence[Mapping[str, Any]] = (), reason: str = "",
) -> E.HistoryAnswerInner:
    """The answer to seal for ``routing`` (a ``history_answer`` to the asking box) to ``inner``."""
    if routing.kind is not E.Kind.HISTORY_ANSWER or routing.to != inner.routing.sender:
        raise ValueError("a history answer goes back to the asking box as a history_answer envelope")
    if outcome is not Outcome.RESULTS and results:
        raise ValueError(f"a {outcome} answer carries no results")
    return E.HistoryAnswerInner(routing, inner.id, now, str(outcome), reason, tuple(dict(r) for r in results))


NOT_SHARED_REASON = "not shared"


def audit_outcome(outcome: Outcome, count: int, asker: str) -> tuple[str, str]:
    """The box asked's audit record's outcome and detail (H8)."""
    if outcome is Outcome.RESULTS:
        return "answered", f"{count} result(s) for {asker}"
    return str(outcome), f"for {asker}"


# --------------------------------------------------------------------------------------------------
# H6, H7: the asking box
# --------------------------------------------------------------------------------------------------


def check_result(result: Mapping[str, Any]) -> None:
    """An arriving result is exactly what :func:`shape` makes, or :class:`AnswerRefused`
    (``malformed_answer``) (H6)."""

    def bad(what: str) -> AnswerRefused:
        return AnswerRefused("malformed_answer", f"a result's {what}")

    if set(result) != FIELDS:
        raise bad(f"fields are {sorted(result)[:20]}, not {sorted(FIELDS)}")
    for name, bound in TEXT_FIELDS.items():
        value = result[name]
        if value is None and name in _NULLABLE:
            continue
        if not isinstance(value, str) or not _printable_line(value, bound):
            raise bad(f"{name} is not one printable line of at most {bound} characters")
    if "/" in result["repo"] or "\\" in result["repo"]:
        raise bad("repo is a path, not a repository's name")
    for name, (count, bound) in LIST_FIELDS.items():
        values = result[name]
        if not isinstance(values, list) or len(values) > count or not all(
            isinstance(v, str) and _printable_line(v, bound) for v in values
        ):
            raise bad(f"{name} are not at most {count} printable lines of {bound} characters")


def receive_answer(
    verdict: E.Verdict, query_id: str, session: tuple[str, str] | None = None
) -> tuple[dict[str, Any], ...]:
    """The results of the answer ``verdict`` judged (H6), or :class:`AnswerRefused` (the answer is not
    taken), or :class:`RemoteHistoryRefused` (the box answered ``not_shared`` or ``refused``). For a
    query for one ``session``, at most that session (another one, or two, is ``malformed_answer``)."""
    if verdict.decision is E.Decision.REFUSED:
        raise AnswerRefused(str(verdict.reason), verdict.detail)
    inner = verdict.inner
    if verdict.decision is not E.Decision.HISTORY or not isinstance(inner, E.HistoryAnswerInner):
        raise AnswerRefused("not_an_answer", f"a {verdict.decision} verdict is not a history answer's")
    if inner.query != query_id:
        raise AnswerRefused("wrong_query", "the answer names another query")
    if inner.outcome not in set(Outcome) or not _printable_line(inner.reason, 300):
        raise AnswerRefused("malformed_answer", "an answer's outcome is results, not_shared or refused, with a "
                                                "printable reason")
    if len(inner.results) > MAX_RESULTS or (inner.outcome != Outcome.RESULTS and inner.results):
        raise AnswerRefused("malformed_answer", f"an answer carries at most {MAX_RESULTS} results, and only "
                                                "with outcome results")
    for result in inner.results:
        check_result(result)
    if session is not None and (len(inner.results) > 1 or any(
        (r["harness"], r["session_id"]) != session for r in inner.results
    )):
        raise AnswerRefused("malformed_answer", "an answer for one session carries that session only")
    if inner.outcome == Outcome.NOT_SHARED:
        raise RemoteHistoryRefused("not_shared", NOT_SHARED_REASON)
    if inner.outcome == Outcome.REFUSED:
        raise RemoteHistoryRefused("refused", f"refused: {inner.reason}")
    return tuple(dict(r) for r in inner.results)


def refused_words(refused: RemoteHistoryRefused, box_name: str) -> str:
    """What the asking agent is told (H6)."""
    if refused.reason == "not_shared":
        return f"box {box_name}: not shared (its owner shares no session history with this box)"
    if refused.reason in ("no_answer", "unknown_session"):
        return str(refused)
    return f"box {box_name}: {refused}"


def session_result(results: Sequence[Mapping[str, Any]], session: tuple[str, str], box_name: str) -> dict[str, Any]:
    """The one session a ``get_session box=`` answer holds (:func:`receive_answer` checked it is that
    one), or :class:`RemoteHistoryRefused` ``unknown_session``: the box shares no such session with this
    box (none by that id, or one in a repository not listed for the pairing: the same answer)."""
    if not results:
        raise RemoteHistoryRefused(
            "unknown_session",
            f"box {box_name}: no {session[0]} session {session[1]!r} that it shares with this box",
        )
    return dict(results[0])


def no_answer(box_name: str) -> RemoteHistoryRefused:
    """H7: the box asked did not answer in time."""
    return RemoteHistoryRefused("no_answer", f"no answer from box {box_name} within {TIMEOUT:.0f} s")


def shown(results: Sequence[Mapping[str, Any]], box: Mapping[str, str]) -> list[dict[str, Any]]:
    """The results the asking agent sees: each with the box it came from (``name``, ``id``,
    ``fingerprint``) and ``remote``; its text is that box's, data to the reader."""
    return [{**r, "box": dict(box), "remote": True} for r in results]
