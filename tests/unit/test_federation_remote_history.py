"""Remote history search, the core's rules (connectcore.federation.remote_history, H1 to H8): the
query and answer envelopes judged by the envelope judgement, a query admitted or refused (forged,
unpaired, removed pairing, stale, replayed, over the rate: each changing nothing), the answer under
the pairing's setting (not shared by default; the listed repositories only), the allowlist and caps,
and the asking box's judgement of an answer (another query's, malformed, not shared)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from connectcore import history as HI
from connectcore.federation import envelope as E
from connectcore.federation import remote_history as RH
from tests.unit.test_federation_envelope import KA, KB, NOW, PAIRING, A, B, facts, view

ASKER = "agent:claude:s-1"


def q_routing(**over: Any) -> E.Routing:
    values: dict[str, Any] = {"pairing": PAIRING}
    values.update(over)
    return E.Routing(E.Kind.HISTORY_QUERY, A, B, **values)


def a_query(**over: Any) -> E.HistoryQueryInner:
    values: dict[str, Any] = {"id": "q-1", "asker": ASKER, "text": "login bug", "repo": None, "limit": 10, "now": NOW}
    values.update(over)
    return RH.query(q_routing(), **values)


def judged(inner: E.Inner, **kw: Any) -> E.Verdict:
    """The receiving box's verdict on ``inner`` (a query to B, an answer to A)."""
    v = view(**kw.pop("view", {})) if inner.routing.to == B else view(own=A, peers={B: E.Peer(KB, PAIRING, frozenset({PAIRING}))})
    return E.judge(facts(inner, **kw), v)


def result(repo: str = "/home/me/app", **over: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "harness": "claude", "session_id": "s-9", "repo": repo, "title": "fix the login bug", "cwd": repo,
        "branches": ["login"], "prs": [], "last_active": "2026-12-05T10:00:00Z", "matched_terms": ["login"],
        "liveness": "not_running", "pane": None,
    }
    row.update(over)
    return row


# --- H1: the query envelope -----------------------------------------------------------------------


def test_a_query_is_a_history_query_envelope_judged_in_the_active_pairing() -> None:
    inner = a_query()
    data = E.encode_inner(inner)
    assert E.parse_inner(data, E.Outer(inner.routing, bytes(24), b"x")) == inner
    assert json.loads(data)["kind"] == "history_query"
    verdict = judged(inner)
    assert verdict.decision is E.Decision.HISTORY and verdict.inner == inner
    assert E.subject_for(E.Kind.HISTORY_QUERY, A, B) == f"connect.{B}.history.{A}"


def test_a_query_is_checked_before_it_is_sent() -> None:
    with pytest.raises(RH.QueryRefused, match="no searchable words"):
        a_query(text="  ")
    with pytest.raises(RH.QueryRefused, match="by its name"):
        a_query(repo="/home/me/app")
    with pytest.raises(RH.QueryRefused, match="limit"):
        a_query(limit=0)
    assert a_query(limit=500).limit == RH.MAX_RESULTS  # lowered to the cap
    with pytest.raises(ValueError):
        RH.query(E.Routing(E.Kind.DIRECTORY, A, B, pairing=PAIRING), id="q", asker=ASKER, text="x", repo=None,
                 limit=1, now=NOW)


def test_the_query_subject_takes_the_outer_s_sender_and_a_garbled_one_is_malformed() -> None:
    inner = a_query()
    wire = bytes(64) + E.Outer(inner.routing, bytes(24), b"x").encode()
    assert RH.query_subject(B, wire) == f"connect.{B}.history.{A}"
    assert RH.query_subject(B, bytes(64) + b"{}") == f"connect.{B}.history.unknown"
    assert E.parse_subject(RH.query_subject(B, b"junk")) is None  # judged malformed


# --- H2, H3: judging a query ----------------------------------------------------------------------


def test_an_admitted_query_counts_against_its_pairing() -> None:
    inner, limiter = RH.admit(judged(a_query()), RH.Limiter(), now=NOW)
    assert inner.id == "q-1" and [qid for _at, qid in limiter.asked[PAIRING]] == ["q-1"]


@pytest.mark.parametrize(
    ("kw", "reason"),
    [
        ({"signature_ok": False}, "bad_signature"),  # forged: not signed by the paired box
        ({"view": {"peers": {}}}, "unpaired"),  # a box this box is not paired with
        ({"view": {"peers": {A: E.Peer(KA, None, frozenset({PAIRING}))}}}, "removed"),  # the pairing removed
        ({"opened": None}, "bad_seal"),
    ],
)
def test_a_query_the_envelope_judgement_refuses_is_refused_unanswered_changing_nothing(kw: dict[str, Any], reason: str) -> None:
    limiter = RH.Limiter()
    with pytest.raises(RH.QueryRefused) as refused:
        RH.admit(judged(a_query(), **kw), limiter, now=NOW)
    assert refused.value.reason == reason and refused.value.answer is False
    assert limiter == RH.Limiter()


def test_a_stale_or_replayed_or_malformed_query_is_refused_unanswered() -> None:
    with pytest.raises(RH.QueryRefused, match="clock far off") as stale:
        RH.admit(judged(a_query(now=NOW - 31)), RH.Limiter(), now=NOW)
    assert stale.value.reason == "stale_query"
    _inner, limiter = RH.admit(judged(a_query()), RH.Limiter(), now=NOW)
    with pytest.raises(RH.QueryRefused) as replay:
        RH.admit(judged(a_query()), limiter, now=NOW + 1)
    assert replay.value.reason == "replayed" and replay.value.answer is False
    bad = E.HistoryQueryInner(q_routing(), "q-2", NOW, "someone", "login", None, 10)  # an asker that is no actor
    with pytest.raises(RH.QueryRefused) as malformed:
        RH.admit(judged(bad), RH.Limiter(), now=NOW)
    assert malformed.value.reason == "malformed_query"
    entry = E.DirectoryInner(E.Routing(E.Kind.DIRECTORY, A, B, pairing=PAIRING), 1, NOW, ())
    with pytest.raises(RH.QueryRefused) as other:
        RH.admit(judged(entry), RH.Limiter(), now=NOW)
    assert other.value.reason == "not_a_query"


def test_over_the_rate_a_query_is_refused_answered_and_not_counted_then_the_window_slides() -> None:
    limiter = RH.Limiter()
    for n in range(RH.RATE):
        _inner, limiter = RH.admit(judged(a_query(id=f"q-{n}", now=NOW + n)), limiter, now=NOW + n)
    with pytest.raises(RH.QueryRefused) as over:
        RH.admit(judged(a_query(id="q-x", now=NOW + 20)), limiter, now=NOW + 20)
    assert over.value.reason == "over_rate" and over.value.answer is True
    assert len(limiter.asked[PAIRING]) == RH.RATE  # the refused one did not count
    # a minute after the first, one more is admitted
    _inner, limiter = RH.admit(judged(a_query(id="q-y", now=NOW + RH.WINDOW)), limiter, now=NOW + RH.WINDOW)
    assert len(limiter.asked[PAIRING]) == RH.RATE


# --- H4, H5: the answer under the setting ---------------------------------------------------------


KNOWN = ["/home/me/app", "/srv/tools", "/home/me/secret"]


def test_by_default_nothing_is_shared() -> None:
    inner = a_query()
    assert RH.plan(inner, RH.DEFAULT_SETTING, ["app"], KNOWN) is None
    assert RH.plan(inner, "index", [], KNOWN) is None  # index with no repository listed shares nothing
    assert RH.plan(inner, "everything", ["app"], KNOWN) is None  # an unknown setting shares nothing
    assert RH.setting_of(None) is RH.Setting.NONE


def test_index_searches_the_listed_repositories_narrowed_by_name() -> None:
    search = RH.plan(a_query(), "index", ["app", "tools"], KNOWN)
    assert search == RH.Search("login bug", frozenset({"/home/me/app", "/srv/tools"}), 10)
    narrowed = RH.plan(a_query(repo="tools"), "index", ["app", "tools"], KNOWN)
    assert narrowed is not None and narrowed.repos == frozenset({"/srv/tools"})
    unlisted = RH.plan(a_query(repo="secret"), "index", ["app"], KNOWN)  # known here, not listed
    assert unlisted is not None and unlisted.repos == frozenset()


def test_results_are_the_allowlist_only_of_listed_repositories_capped() -> None:
    search = RH.Search("login", frozenset({"/home/me/app"}), 50)
    leaked = {**result(), "prompts": ["the secret prompt"], "title": "two\nlines\x1b[31m"}
    shaped = RH.shape_results([leaked, result("/home/me/private")], search)
    assert len(shaped) == 1  # the result of a repository not listed is dropped, whatever the search gave
    assert set(shaped[0]) == set(HI.ALLOWED_FIELDS) - {"cwd"} == set(RH.TEXT_FIELDS) | set(RH.LIST_FIELDS)
    assert "prompts" not in shaped[0] and shaped[0]["repo"] == "app"
    assert shaped[0]["title"] == "two lines [31m"  # one printable line
    many = [result(session_id=f"s-{n}") for n in range(80)]
    assert len(RH.shape_results(many, search)) == RH.MAX_RESULTS
    assert len(RH.shape_results(many, RH.Search("login", search.repos, 3))) == 3
    big = [result(session_id=f"s-{n}", title="t" * 300, branches=["b" * 200] * 20) for n in range(50)]
    kept = RH.shape_results(big, RH.Search("login", frozenset({"/home/me/app"}), 50))
    assert 0 < len(kept) < 50 and sum(len(E.canonical(r)) + 1 for r in kept) <= RH.RESULTS_BUDGET


def test_no_path_of_the_box_asked_is_shared_only_the_repository_s_name() -> None:
    """H5: the answer shares the session's id, harness, the repository's name (as ``history_repos``
    lists it), title and times, never the working directory or any absolute path of the box asked."""
    home = "/home/me"
    search = RH.Search("login", frozenset({f"{home}/src/app", f"{home}/src/tools/"}), 50)
    local = [result(f"{home}/src/app", cwd=f"{home}/src/app/server"), result(f"{home}/src/tools/", session_id="s-8")]
    shaped = RH.shape_results(local, search)
    assert [(r["session_id"], r["repo"]) for r in shaped] == [("s-9", "app"), ("s-8", "tools")]
    assert all("cwd" not in r for r in shaped) and home not in json.dumps(shaped)
    assert RH.receive_answer(judged(_answer(results=shaped)), "q-1") == shaped  # and the asker takes them


def _answer(outcome: RH.Outcome = RH.Outcome.RESULTS, results: Any = (), **kw: Any) -> E.HistoryAnswerInner:
    routing = E.Routing(E.Kind.HISTORY_ANSWER, B, A, pairing=PAIRING)
    return RH.answer(routing, a_query(), outcome, now=NOW, results=results, **kw)


def test_a_sealed_answer_fits_an_envelope() -> None:
    big = [result(session_id=f"s-{n}", title="t" * 300, branches=["b" * 200] * 20) for n in range(50)]
    kept = RH.shape_results(big, RH.Search("login", frozenset({"/home/me/app"}), 50))
    plain = E.encode_inner(_answer(results=kept))
    sealed = len(plain) + 16  # crypto_box's tag
    outer = E.Outer(E.Routing(E.Kind.HISTORY_ANSWER, B, A, pairing=PAIRING), bytes(24), bytes(sealed)).encode()
    assert E.SIGNATURE_BYTES + len(outer) <= E.MAX_WIRE_BYTES


# --- H6, H7: the asking box -----------------------------------------------------------------------


def test_the_asker_takes_the_results_of_its_own_query_with_their_box() -> None:
    found = RH.receive_answer(judged(_answer(results=[RH.shape(result())])), "q-1")
    assert found == (RH.shape(result()),)
    (row,) = RH.shown(found, {"name": "laptop", "id": B, "fingerprint": "3f9a12c0"})
    assert row["box"]["name"] == "laptop" and row["remote"] is True


def test_not_shared_and_refused_answers_are_the_caller_s_refusals() -> None:
    with pytest.raises(RH.RemoteHistoryRefused) as not_shared:
        RH.receive_answer(judged(_answer(RH.Outcome.NOT_SHARED, reason="not shared")), "q-1")
    assert not_shared.value.reason == "not_shared"
    assert "not shared" in RH.refused_words(not_shared.value, "laptop")
    with pytest.raises(RH.RemoteHistoryRefused, match="over_rate"):
        RH.receive_answer(judged(_answer(RH.Outcome.REFUSED, reason="over_rate: too many")), "q-1")
    assert str(RH.no_answer("laptop")) == "no answer from box laptop within 5 s"


def test_an_answer_to_another_query_forged_or_malformed_is_refused() -> None:
    with pytest.raises(RH.AnswerRefused) as other:
        RH.receive_answer(judged(_answer(results=[RH.shape(result())])), "q-2")
    assert other.value.reason == "wrong_query"
    with pytest.raises(RH.AnswerRefused) as forged:
        RH.receive_answer(judged(_answer(), signature_ok=False), "q-1")
    assert forged.value.reason == "bad_signature"
    # a result with a field beyond the allowlist (a working directory too), markup across lines, or a
    # repository given as a path: text from another box is data, and no path of it is taken
    shared = RH.shape(result())
    for bad in ({**shared, "prompts": ["x"]}, {**shared, "title": "a\nb"}, {**shared, "branches": "main"}, result(),
                {**shared, "cwd": "/home/me/app"}, {**shared, "repo": "/home/me/app"}, {**shared, "repo": "me/app"}):
        routing = E.Routing(E.Kind.HISTORY_ANSWER, B, A, pairing=PAIRING)
        inner = E.HistoryAnswerInner(routing, "q-1", NOW, "results", "", (bad,))
        with pytest.raises(RH.AnswerRefused) as malformed:
            RH.receive_answer(judged(inner), "q-1")
        assert malformed.value.reason == "malformed_answer"
    routing = E.Routing(E.Kind.HISTORY_ANSWER, B, A, pairing=PAIRING)
    too_many = E.HistoryAnswerInner(routing, "q-1", NOW, "results", "", tuple(RH.shape(result()) for _ in range(51)))
    with pytest.raises(RH.AnswerRefused, match="at most 50"):
        RH.receive_answer(judged(too_many), "q-1")
    with pytest.raises(RH.AnswerRefused) as not_answer:
        RH.receive_answer(judged(a_query()), "q-1")
    assert not_answer.value.reason == "not_an_answer"


# --- get_session box=: a query for one session ----------------------------------------------------


def test_a_query_for_one_session_travels_in_the_same_envelope_and_a_plain_one_is_unchanged() -> None:
    plain = E.encode_inner(a_query())
    assert b"session" not in plain  # a query without one is byte for byte what it was
    one = a_query(text="", limit=1, session=("claude", "s-9"))
    data = E.encode_inner(one)
    assert json.loads(data)["session"] == {"harness": "claude", "id": "s-9"}
    assert E.parse_inner(data, E.Outer(one.routing, bytes(24), b"x")) == one
    verdict = judged(one)
    assert verdict.decision is E.Decision.HISTORY and verdict.inner == one
    inner, limiter = RH.admit(verdict, RH.Limiter(), now=NOW)
    assert inner.session == ("claude", "s-9") and len(limiter.asked[PAIRING]) == 1  # rated as any query
    search = RH.plan(inner, "index", ["app"], ["/home/me/app", "/home/me/private"])
    assert search == RH.Search("", frozenset({"/home/me/app"}), 1, ("claude", "s-9"))
    assert RH.plan(inner, "none", ["app"], ["/home/me/app"]) is None  # not shared by default


@pytest.mark.parametrize(("over", "words"), [
    ({"session": ("Claude!", "s-9")}, "harness and a session id"),
    ({"session": ("claude", "s 9")}, "harness and a session id"),
    ({"session": ("claude", "s-9"), "text": "login"}, "no words"),
    ({"session": ("claude", "s-9"), "repo": "app"}, "no words"),
    ({"session": ("claude", "s-9"), "limit": 2}, "limit of 1"),
])
def test_a_malformed_query_for_one_session_is_refused_before_it_is_sent_and_when_it_arrives(
    over: dict[str, Any], words: str
) -> None:
    values: dict[str, Any] = {"text": "", "limit": 1}
    values.update(over)
    with pytest.raises(RH.QueryRefused, match=words) as refused:
        a_query(**values)
    assert refused.value.reason == "malformed_query"
    # the same, sent by a box that skipped the check: refused on arrival, changing nothing
    raw = E.HistoryQueryInner(q_routing(), "q-1", NOW, ASKER, values["text"], values.get("repo"), values["limit"],
                              values["session"])
    limiter = RH.Limiter()
    with pytest.raises(RH.QueryRefused) as arrived:
        RH.admit(judged(raw), limiter, now=NOW)
    assert arrived.value.reason == "malformed_query" and limiter == RH.Limiter()


def test_an_answer_for_one_session_is_that_session_or_none() -> None:
    session = ("claude", "s-9")
    routing = E.Routing(E.Kind.HISTORY_ANSWER, B, A, pairing=PAIRING)
    one = RH.shape(result())

    def answered(*results: dict[str, Any]) -> E.Verdict:
        return judged(E.HistoryAnswerInner(routing, "q-1", NOW, "results", "", results))

    found = RH.receive_answer(answered(one), "q-1", session)
    assert RH.session_result(found, session, "laptop") == one
    for bad in ((RH.shape(result(session_id="s-8")),), (one, one)):  # another session, or two
        with pytest.raises(RH.AnswerRefused) as malformed:
            RH.receive_answer(answered(*bad), "q-1", session)
        assert malformed.value.reason == "malformed_answer"
    with pytest.raises(RH.RemoteHistoryRefused) as none:
        RH.session_result(RH.receive_answer(answered(), "q-1", session), session, "laptop")
    assert none.value.reason == "unknown_session"
    assert RH.refused_words(none.value, "laptop") == "box laptop: no claude session 's-9' that it shares with this box"


def test_the_session_field_is_a_history_query_s_only_and_shaped() -> None:
    one = a_query(text="", limit=1, session=("claude", "s-9"))
    row = json.loads(E.encode_inner(one))
    outer = E.Outer(one.routing, bytes(24), b"x")
    for bad in ("claude:s-9", {"harness": "claude"}, {"harness": "claude", "id": "s-9", "x": 1}, None):
        with pytest.raises(E.EnvelopeError) as refused:
            E.parse_inner(E.canonical({**row, "session": bad}), outer)
        assert refused.value.reason is E.Refusal.BAD_BINDING
    answer = _answer()
    answer_row = json.loads(E.encode_inner(answer))
    with pytest.raises(E.EnvelopeError, match="unknown fields"):
        E.parse_inner(E.canonical({**answer_row, "session": {"harness": "claude", "id": "s-9"}}),
                      E.Outer(answer.routing, bytes(24), b"x"))
