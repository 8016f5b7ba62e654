"""Remote history search: rules the 2026-12-06 (second) mutation run found unpinned (docs/quality.md
names the mutants each test kills). The module's own tests are in test_federation_remote_history.py;
these are kept apart so that file stays its owners'."""

from __future__ import annotations

from typing import Any

import pytest

from connectcore.federation import envelope as E
from connectcore.federation import remote_history as RH
from tests.unit.test_federation_envelope import NOW, PAIRING, A, B, C
from tests.unit.test_federation_remote_history import ASKER, _answer, a_query, judged, q_routing, result

SEARCH = RH.Search("login", frozenset({"/home/me/app"}), 50)


def query_refused(text: Any = "login bug", repo: Any = None, limit: Any = 10) -> tuple[str, str]:
    with pytest.raises(RH.QueryRefused) as error:
        RH.check_query(text, repo, limit)
    return error.value.reason, str(error.value)


def admitted(inner: E.HistoryQueryInner, limiter: RH.Limiter | None = None, *, now: float = NOW) -> RH.Limiter:
    return RH.admit(E.Verdict(E.Decision.HISTORY, f"box:{A}", inner=inner), limiter or RH.Limiter(), now=now)[1]


def admit_refused(inner: E.Inner, decision: E.Decision = E.Decision.HISTORY, *, now: float = NOW) -> tuple[str, str]:
    with pytest.raises(RH.QueryRefused) as error:
        RH.admit(E.Verdict(decision, f"box:{A}", inner=inner), RH.Limiter(), now=now)
    return error.value.reason, str(error.value)


def answer_inner(outcome: str = "results", reason: str = "", results: Any = ()) -> E.HistoryAnswerInner:
    return E.HistoryAnswerInner(E.Routing(E.Kind.HISTORY_ANSWER, B, A, pairing=PAIRING), "q-1", NOW, outcome, reason,
                                tuple(results))


def answer_refused(inner: E.Inner, query_id: str = "q-1") -> tuple[str, str]:
    with pytest.raises(RH.AnswerRefused) as error:
        RH.receive_answer(E.Verdict(E.Decision.HISTORY, f"box:{B}", inner=inner), query_id)
    return error.value.reason, str(error.value)


# --- H1: the query -----------------------------------------------------------------------------------


def test_a_query_s_words_repository_and_limit_are_bounded_inclusively() -> None:
    """H1: the words are one printable line of at most MAX_QUERY characters; the repository a name of
    1 to 200 printable characters with no path; the limit an integer from 1 to MAX_RESULTS (never a
    bool). Each refusal is ``malformed_query`` with its words."""
    RH.check_query(("login " * 86)[: RH.MAX_QUERY], "r" * 200, 1)
    RH.check_query("login", None, RH.MAX_RESULTS)
    line = ("malformed_query", "a query is one printable line of at most 512 characters")
    assert query_refused(("login " * 86)[: RH.MAX_QUERY] + "s") == line
    assert query_refused("login\nbug") == line
    assert query_refused("  ")[0] == "malformed_query"  # no searchable words (connectcore.history's words)
    by_name = ("malformed_query", "repo names a repository by its name (no path)")
    for repo in ("", "a\nb", "r" * 201, "me/app"):
        assert query_refused(repo=repo) == by_name
    for limit in (0, RH.MAX_RESULTS + 1, True, "7"):
        assert query_refused(limit=limit) == ("malformed_query", f"limit is an integer from 1 to 50, got {limit!r}")


def test_a_query_with_a_limit_that_is_no_integer_is_refused_not_lowered() -> None:
    """H1: only an integer limit is lowered to MAX_RESULTS; anything else is the query's refusal."""
    with pytest.raises(RH.QueryRefused, match="limit is an integer"):
        a_query(limit="7")
    with pytest.raises(ValueError, match="a history query travels as a history_query envelope, not a directory"):
        RH.query(E.Routing(E.Kind.DIRECTORY, A, B, pairing=PAIRING), id="q", asker=ASKER, text="x", repo=None,
                 limit=1, now=NOW)


def test_an_answer_is_judged_under_the_asked_box_s_answer_subject() -> None:
    """H6: the answer from box ``asked`` to this box travels on ``connect.<own>.history_answer.<asked>``
    (the envelope's subject for that kind)."""
    assert RH.answer_subject(A, B) == E.subject_for(E.Kind.HISTORY_ANSWER, B, A)
    assert RH.answer_subject(A, B) == f"connect.{A}.{E.SUBJECT_TOKEN[E.Kind.HISTORY_ANSWER]}.{B}"


# --- H2, H3: admitting a query -------------------------------------------------------------------------


def test_admission_checks_the_query_s_repository_and_the_age_bound_inclusively() -> None:
    """H2: the box asked checks the repository too (a path is refused), and a query exactly
    QUERY_MAX_AGE old is admitted; older is stale, its words saying by how much."""
    pathed = E.HistoryQueryInner(q_routing(), "q-1", NOW, ASKER, "login", "/home/me/app", 10)
    assert admit_refused(pathed) == ("malformed_query", "repo names a repository by its name (no path)")
    admitted(E.HistoryQueryInner(q_routing(), "q-1", NOW - RH.QUERY_MAX_AGE, ASKER, "login", None, 10))
    stale = E.HistoryQueryInner(q_routing(), "q-1", NOW - 40, ASKER, "login", None, 10)
    assert admit_refused(stale) == (
        "stale_query", "created 40 s from now (the bound is 30 s): a replay or a clock far off")


def test_only_a_history_verdict_carrying_a_query_is_admitted() -> None:
    assert admit_refused(a_query(), E.Decision.ENTRY) == ("not_a_query", "a entry verdict is not a history query's")
    bad = E.HistoryQueryInner(q_routing(), "q 1", NOW, ASKER, "login", None, 10)
    assert admit_refused(bad) == ("malformed_query", "a query's id or asker is not one")
    with pytest.raises(RH.QueryRefused) as error:
        RH.admit(E.Verdict(E.Decision.REFUSED, f"box:{A}", E.Refusal.UNPAIRED, "who?"), RH.Limiter(), now=NOW)
    assert (error.value.reason, str(error.value)) == ("unpaired", "who?")


def test_each_pairing_keeps_its_own_rate_while_another_asks() -> None:
    """H3: a query of one pairing neither resets nor counts toward another pairing's rate; the refusals
    say why."""
    limiter = RH.Limiter()
    for n in range(RH.RATE):
        limiter = admitted(E.HistoryQueryInner(q_routing(), f"q-{n}", NOW, ASKER, "login", None, 10), limiter)
    other = E.Routing(E.Kind.HISTORY_QUERY, C, B, pairing="pairing-c")
    limiter = admitted(E.HistoryQueryInner(other, "q-c", NOW + 1, ASKER, "login", None, 10), limiter, now=NOW + 1)
    assert len(limiter.asked[PAIRING]) == RH.RATE
    with pytest.raises(RH.QueryRefused) as over:
        admitted(E.HistoryQueryInner(q_routing(), "q-x", NOW + 2, ASKER, "login", None, 10), limiter, now=NOW + 2)
    assert (over.value.reason, str(over.value)) == ("over_rate", "more than 10 history queries a minute from this pairing")
    with pytest.raises(RH.QueryRefused) as again:
        admitted(E.HistoryQueryInner(q_routing(), "q-3", NOW + 2, ASKER, "login", None, 10), limiter, now=NOW + 2)
    assert (again.value.reason, str(again.value)) == ("replayed", "query q-3 was asked already")


# --- H4, H5: the answer --------------------------------------------------------------------------------


def test_a_known_repository_is_searched_by_its_last_name() -> None:
    """H4: the repositories the index knows are matched to the listed names by their last path
    component (a trailing slash ignored; a bare name is its own)."""
    inner = a_query()
    known = ["/home/me/app/", "/src/FLEX/", "tools", "/home/me/secret"]
    search = RH.plan(inner, "index", ["app", "FLEX", "tools"], known)
    assert search is not None and search.repos == {"/home/me/app/", "/src/FLEX/", "tools"}


def test_a_result_is_shared_with_its_fields_shaped() -> None:
    """H5: last_active and pane may be null and stay so (a pane that is set stays); any other missing
    text is empty, never ``None``; each text and list item is cut to its bound, each list to its
    count."""
    shaped = RH.shape(result("/home/me/" + "c" * 2000, title=None, pane=None, last_active=None,
                             branches=["b" * 300] * 25, prs=None))
    assert (shaped["title"], shaped["pane"], shaped["last_active"], shaped["prs"]) == ("", None, None, [])
    assert shaped["branches"] == ["b" * 200] * 20 and "cwd" not in shaped
    assert shaped["repo"] == "c" * RH.TEXT_FIELDS["repo"], "the repository by its name, cut to its bound; never its path"
    assert RH.shape(result(pane="%4"))["pane"] == "%4"
    assert RH.shape(result())["matched_terms"] == ["login"]
    RH.check_result(shaped)


def test_a_result_of_a_repository_not_searched_is_skipped_not_the_end() -> None:
    kept = RH.shape_results([result("/srv/other"), result()], SEARCH)
    assert [r["repo"] for r in kept] == ["app"]  # the one searched, by its name


def test_the_results_fill_the_budget_to_the_byte_and_no_further() -> None:
    """H5: the results kept are the longest prefix whose canonical sizes (each with one byte for its
    separator) add up to at most RESULTS_BUDGET bytes."""
    repo = "/r/" + "x" * 100
    search = RH.Search("login", frozenset({repo}), 50)

    def rows_of(width: int) -> list[dict[str, Any]]:  # results of one size: branches of ``width`` characters
        return [result(repo, session_id=f"s-{n:02}", title="t" * 300, branches=["b" * width] * 20) for n in range(50)]

    for width in range(200, 0, -1):  # a size whose first result past the budget overflows it by under 300 bytes
        rows = rows_of(width)
        sizes = [len(E.canonical(RH.shape(r))) + 1 for r in rows]
        fit = next((k for k in range(len(sizes)) if sum(sizes[: k + 1]) > RH.RESULTS_BUDGET), None)
        if fit is not None and -300 < RH.RESULTS_BUDGET - sum(sizes[:fit]) - sizes[fit] < 0:
            break
    assert fit is not None
    grow = RH.RESULTS_BUDGET - sum(sizes[:fit]) - sizes[fit]
    assert -300 < grow < 0
    rows[fit] = result(repo, session_id=f"s-{fit:02}", title="t" * (300 + grow), branches=["b" * width] * 20)
    assert len(RH.shape_results(rows, search)) == fit + 1  # exactly the budget: kept
    rows[fit] = result(repo, session_id=f"s-{fit:02}", title="t" * (301 + grow), branches=["b" * width] * 20)
    assert len(RH.shape_results(rows, search)) == fit  # one byte over: left out


def test_an_answer_goes_back_to_the_asking_box_only_and_carries_results_only_with_results() -> None:
    assert _answer(RH.Outcome.NOT_SHARED).reason == ""  # no reason unless given
    inner = a_query()
    elsewhere = E.Routing(E.Kind.HISTORY_ANSWER, B, C, pairing=PAIRING)
    with pytest.raises(ValueError) as error:
        RH.answer(elsewhere, inner, RH.Outcome.RESULTS, now=NOW)
    assert str(error.value) == "a history answer goes back to the asking box as a history_answer envelope"
    with pytest.raises(ValueError, match="^a not_shared answer carries no results$"):
        _answer(RH.Outcome.NOT_SHARED, results=[result()])


def test_the_box_asked_audits_results_by_their_count_and_the_others_by_their_outcome() -> None:
    """H8."""
    assert RH.audit_outcome(RH.Outcome.RESULTS, 3, ASKER) == ("answered", f"3 result(s) for {ASKER}")
    assert RH.audit_outcome(RH.Outcome.NOT_SHARED, 0, ASKER) == ("not_shared", f"for {ASKER}")
    assert RH.audit_outcome(RH.Outcome.REFUSED, 0, ASKER) == ("refused", f"for {ASKER}")


# --- H6, H7: the asking box ----------------------------------------------------------------------------


def test_an_arriving_result_is_checked_field_by_field_to_the_last() -> None:
    """H6: a null is allowed only in last_active and pane, and does not end the check of the fields
    after it; lists hold at most their count of printable lines within their bound."""
    good = RH.shape(result())  # as it arrives: shaped by the box asked
    RH.check_result(good)
    RH.check_result({**good, "branches": ["b"] * 20})

    def words(row: dict[str, Any]) -> str:
        with pytest.raises(RH.AnswerRefused) as error:
            RH.check_result(row)
        assert error.value.reason == "malformed_answer"
        return str(error.value)

    assert words({**good, "title": None}) == "a result's title is not one printable line of at most 300 characters"
    assert words({**good, "pane": "%4\n"}) == "a result's pane is not one printable line of at most 16 characters"
    assert words({**good, "last_active": None, "liveness": "a\nb"}).startswith("a result's liveness")
    branches = "a result's branches are not at most 20 printable lines of 200 characters"
    assert words({**good, "branches": ["b"] * 21}) == branches
    assert words({**good, "branches": ["a\nb"]}) == branches
    crowded = {**good, **{f"extra{n:02}": 1 for n in range(15)}}
    assert words(crowded) == f"a result's fields are {sorted(crowded)[:20]}, not {sorted(RH.FIELDS)}"


def test_an_answer_is_taken_only_with_a_known_outcome_and_its_bounds_inclusive() -> None:
    """H6: outcome results, not_shared or refused, a printable reason of at most 300 characters, at
    most MAX_RESULTS results and only with outcome results; each refusal with its words."""
    assert len(RH.receive_answer(E.Verdict(E.Decision.HISTORY, f"box:{B}", inner=answer_inner(
        reason="r" * 300, results=[RH.shape(result())] * RH.MAX_RESULTS)), "q-1")) == RH.MAX_RESULTS
    outcome = ("malformed_answer", "an answer's outcome is results, not_shared or refused, with a printable reason")
    assert answer_refused(answer_inner("maybe")) == outcome
    assert answer_refused(answer_inner(reason="r" * 301)) == outcome
    assert answer_refused(answer_inner("not_shared", results=[result()])) == (
        "malformed_answer", "an answer carries at most 50 results, and only with outcome results")
    assert answer_refused(answer_inner(), "q-2") == ("wrong_query", "the answer names another query")
    assert answer_refused(a_query()) == ("not_an_answer", "a history verdict is not a history answer's")
    with pytest.raises(RH.AnswerRefused) as error:
        RH.receive_answer(E.Verdict(E.Decision.REFUSED, f"box:{B}", E.Refusal.UNPAIRED, "who?"), "q-1")
    assert (error.value.reason, str(error.value)) == ("unpaired", "who?")


def test_what_the_asking_agent_is_told_when_the_box_shares_nothing_refuses_or_is_silent() -> None:
    """H6, H7."""
    with pytest.raises(RH.RemoteHistoryRefused) as not_shared:
        RH.receive_answer(judged(_answer(RH.Outcome.NOT_SHARED, reason="not shared")), "q-1")
    assert (not_shared.value.reason, str(not_shared.value)) == ("not_shared", "not shared")
    assert RH.refused_words(not_shared.value, "laptop") == (
        "box laptop: not shared (its owner shares no session history with this box)")
    with pytest.raises(RH.RemoteHistoryRefused) as refused:
        RH.receive_answer(judged(_answer(RH.Outcome.REFUSED, reason="over_rate: too many")), "q-1")
    assert (refused.value.reason, str(refused.value)) == ("refused", "refused: over_rate: too many")
    assert RH.refused_words(refused.value, "laptop") == "box laptop: refused: over_rate: too many"
    silent = RH.no_answer("laptop")
    assert silent.reason == "no_answer"
    assert RH.refused_words(silent, "laptop") == "no answer from box laptop within 5 s"


# --- the fourth mutation run (2026-12-06, stop 33) --------------------------------------------------


def session_refused(session: Any, text: str = "", repo: str | None = None, limit: int = 1) -> tuple[str, str]:
    with pytest.raises(RH.QueryRefused) as error:
        RH.check_session(session, text, repo, limit)
    return error.value.reason, str(error.value)


def test_a_session_is_exactly_a_tuple_of_two_strings() -> None:
    """H1: a list, a string of two characters, three strings or a non-string id is not a session, refused
    ``malformed_query`` with its words. Kills check_session's ``and`` -> ``or`` (mutmut_2: any two strings
    pass; mutmut_3: any tuple, or a list, passes) and the refusal's reason and words (mutmut_7 to 14)."""
    RH.check_session(("claude", "s-1"), "", None, 1)
    for bad in (["claude", "s-1"], "ab", ("claude", "s-1", "x"), ("claude", 1)):
        assert session_refused(bad) == ("malformed_query", "a session is a harness and a session id")


def test_a_bad_session_s_refusal_quotes_its_harness_and_id_clipped() -> None:
    """A session whose harness or id is not of the allowed characters is refused quoting the first 16
    characters of the harness and the first 40 of the id; one with words, a repository or another limit
    is refused with its own words. Kills the clips' bounds (check_session mutmut_27, mutmut_28) and
    mutmut_42."""
    reason, words = session_refused(("H" * 20, "s" * 50))
    assert reason == "malformed_query"
    assert words == (
        "a session is a harness and a session id (letters, digits, . _ : -), not " + repr("H" * 16) + " " + repr("s" * 40)
    )
    assert session_refused(("claude", "s-1"), text="login") == (
        "malformed_query", "a query for one session has no words, no repository and a limit of 1")


def test_the_query_subject_reads_the_sender_within_the_first_1024_bytes_after_the_signature() -> None:
    """The outer part's ``from`` is looked for in the 1024 bytes after the signature only (a bound on the
    work done on bytes nobody has checked yet): one ending on the 1024th byte is read, one a byte later is
    not (the subject is then ``unknown``, judged malformed). Kills the window's end 1024 -> 1025
    (query_subject mutmut_12)."""
    sender = b'"from":"' + A.encode() + b'"'

    def subject(pad: int) -> str:
        return RH.query_subject(B, bytes(E.SIGNATURE_BYTES) + b" " * pad + sender)

    assert subject(1024 - len(sender)) == f"connect.{B}.history.{A}"
    assert subject(1025 - len(sender)) == f"connect.{B}.history.unknown"


def test_an_arriving_result_s_repo_is_a_name_without_slash_or_backslash() -> None:
    """H5, H6: a result whose repo holds ``/`` or ``\\`` is a path, refused with those words. Kills the
    backslash test's mutant (check_result mutmut_31) and the words' (mutmut_35, 36, 37)."""
    good = RH.shape(result())
    RH.check_result(good)
    for repo in ("me/app", "me\\app"):
        with pytest.raises(RH.AnswerRefused) as error:
            RH.check_result({**good, "repo": repo})
        assert (error.value.reason, str(error.value)) == (
            "malformed_answer", "a result's repo is a path, not a repository's name")


def test_an_answer_for_one_session_carrying_another_is_refused_in_words() -> None:
    """H6: the words of an answer for one session that carries another. Kills receive_answer mutmut_70, 75,
    76."""
    other = RH.shape(result(session_id="s-8"))
    with pytest.raises(RH.AnswerRefused) as error:
        RH.receive_answer(judged(_answer(results=(other,))), "q-1", ("claude", "s-9"))
    assert (error.value.reason, str(error.value)) == (
        "malformed_answer", "an answer for one session carries that session only")


# ------------------------------------------------------------------------------------- stop 34


def test_only_the_repository_is_shared_by_its_name_other_texts_keep_their_slashes() -> None:
    """H5: ``repo`` is shared by its last name; the other texts (a title naming a path) keep their
    slashes whole. Kills shape mutmut_4 (``and`` -> ``or``: every text cut to its last path component)."""
    shaped = RH.shape(result(title="port src/app/main.py to the new API", liveness="not_running"))
    assert shaped["title"] == "port src/app/main.py to the new API"
    assert shaped["repo"] == "app"


def test_the_root_directory_as_a_repository_is_shared_with_an_empty_name() -> None:
    """A session whose repository is the root directory (``/``) is shared with an empty name, never a
    made-up one and never its path. Kills _name mutmut_16 (the empty name -> ``"XXXX"``)."""
    assert RH.shape(result("/"))["repo"] == ""
    assert RH.shape(result("///"))["repo"] == ""
