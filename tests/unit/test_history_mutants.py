"""History: rules the 2026-12-06 (fourth) mutation run found unpinned (docs/survivors/history.md /
docs/quality.md name the mutants each test kills)."""

from __future__ import annotations

import math
import os
import time

import pytest

from connectcore.history import (
    LIMIT_MAX,
    PROMPT_MAX_CHARS,
    PROMPT_TITLE_MAX_CHARS,
    SESSION_PROMPT_MAX_CHARS,
    TITLE_RANK,
    Candidate,
    CorpusStats,
    Entrypoint,
    Field,
    Harness,
    HistoryError,
    Liveness,
    LivenessView,
    OutOfScope,
    PaneBinding,
    RecordTrust,
    RegistryRecord,
    RestoreItem,
    RestoreReason,
    RestoreSkip,
    Running,
    SearchScope,
    SessionEntry,
    SessionNotFound,
    analyze,
    append_prompts,
    better_title,
    bm25f,
    build_entry,
    check_limit,
    check_readable,
    claude_claims,
    clip_prompt,
    corpus_stats,
    expunge_refusal,
    field_texts,
    idf,
    iso_utc,
    parse_harness,
    project,
    prompt_title,
    query_terms,
    recency,
    record_trust,
    scope_for,
    search,
    select_restorable,
    tokens,
)
from tests.unit.test_history_core import NOW, entry, facts, ids

# ---------------------------------------------------------------------------------------------------
# Words a person reads: refusals and errors
# ---------------------------------------------------------------------------------------------------


def test_parse_harness_names_the_harness_or_lists_the_known_ones() -> None:
    """A known name parses to its harness; an unknown one is refused naming the known ones, comma
    separated. Kills ``Harness(value)`` -> ``Harness(None)`` (parse_harness mutmut_1: every name refused)
    and the list's mutants (mutmut_2, mutmut_4)."""
    assert parse_harness("claude") is Harness.CLAUDE
    assert parse_harness("codex") is Harness.CODEX
    with pytest.raises(HistoryError) as refused:
        parse_harness("gemini")
    assert str(refused.value) == "unknown harness 'gemini' (known: claude, codex)"


def test_history_refusals_say_what_was_refused() -> None:
    """Each refusal's words name its subject: an empty repo (scope_for mutmut_4), the session outside
    the caller's repos (check_readable mutmut_4), the running session an expunge refuses
    (expunge_refusal mutmut_2, mutmut_3) and the session not in the index (SessionNotFound mutmut_1)."""
    with pytest.raises(HistoryError) as empty:
        scope_for("", None, include_headless=False, include_subagents=False)
    assert str(empty.value) == "repo must be a non-empty path when given"
    with pytest.raises(OutOfScope) as outside:
        check_readable(entry("s1", repo="/r/b"), frozenset({"/r/a"}))
    assert str(outside.value) == "claude session 's1' is outside the repositories this caller may read"
    running = expunge_refusal("codex", "s2", running=True, paths=(), roots=("/roots",))
    assert str(running) == "codex session 's2' is running; stop it before expunging it"
    assert str(SessionNotFound("claude", "s3")) == "no claude session 's3' in the history index"


def test_a_bad_pane_binding_is_refused_naming_the_bad_field() -> None:
    """A stored pane binding with an empty pane id or session id, or a harness that is not a Harness, is
    refused naming which. Kills the field names' mutants (PaneBinding.__post_init__ mutmut_1, 5, 6, 7,
    11, 12) and the harness message's (mutmut_14)."""
    with pytest.raises(HistoryError) as pane:
        PaneBinding("", Harness.CLAUDE, "s")
    assert str(pane.value) == "pane_id must be a non-empty string, got ''"
    with pytest.raises(HistoryError) as session:
        PaneBinding("%1", Harness.CLAUDE, " ")
    assert str(session.value) == "session_id must be a non-empty string, got ' '"
    with pytest.raises(HistoryError) as harness:
        PaneBinding("%1", "claude", "s")  # type: ignore[arg-type]
    assert str(harness.value) == "harness must be a Harness, got 'claude'"


# ---------------------------------------------------------------------------------------------------
# Scope
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("headless", [False, True])
@pytest.mark.parametrize("subagents", [False, True])
def test_the_scope_a_caller_asks_for_keeps_its_headless_and_subagent_choices(
    headless: bool, subagents: bool
) -> None:
    """``scope_for`` passes the caller's headless and subagent choices into the scope, which admits
    exactly the entrypoints asked for; the daemon's SQL ``IN`` clause lists the same ones, interactive
    first. Kills scope_for mutmut_14, 15, 17, 18 and SearchScope.entrypoints mutmut_1 to 4."""
    for repo in ("/r/a", None):
        scope = scope_for(repo, frozenset({"/r/a"}), include_headless=headless, include_subagents=subagents)
        head = entry("h", entrypoint=Entrypoint.HEADLESS)
        sub = entry("s", entrypoint=Entrypoint.SUBAGENT, parent_session_id="i")
        assert scope.admits(entry("i"))
        assert scope.admits(head) is headless
        assert scope.admits(sub) is subagents
        expected = [Entrypoint.INTERACTIVE]
        expected += [Entrypoint.HEADLESS] if headless else []
        expected += [Entrypoint.SUBAGENT] if subagents else []
        assert scope.entrypoints() == tuple(expected)


# ---------------------------------------------------------------------------------------------------
# A title from the first prompt
# ---------------------------------------------------------------------------------------------------


def test_a_prompt_title_is_the_first_prompt_s_first_line_clipped_past_80() -> None:
    """The title a first prompt gives is its first non-blank line, whole up to 80 characters and clipped
    with an ellipsis beyond; a later prompt never gives it, and no text gives no title at rank 0.
    Kills ``prompts[:1]`` -> ``[:2]`` (prompt_title mutmut_6), ``>`` -> ``>=`` (mutmut_10) and the empty
    case's rank (mutmut_17, mutmut_21)."""
    rank = TITLE_RANK["first-prompt"]
    exactly = "x" * PROMPT_TITLE_MAX_CHARS
    assert prompt_title([f"\n  {exactly}  \nmore"]) == (exactly, rank)
    assert prompt_title([exactly + "y"]) == ("x" * (PROMPT_TITLE_MAX_CHARS - 1) + "…", rank)
    assert prompt_title(["  \n ", "the second prompt"]) == ("", 0)
    assert prompt_title([]) == ("", 0)


# ---------------------------------------------------------------------------------------------------
# Text analysis and BM25F
# ---------------------------------------------------------------------------------------------------

A = entry("a", title="fix parser", branches=("fix/parser",), prompts=("parser crash on load",))
B = entry("b", repo="/r/b", cwd="/r/b/sub", prs=("https://github.com/o/r/pull/7",), prompts=("crash crash",))


def test_analyze_counts_each_query_word_per_field_and_each_field_s_length() -> None:
    """A candidate's term frequency is the number of times the word occurs in that field (fields without
    it absent), and its field lengths are the fields' word counts. Kills ``tf.get(..., 0) + 1``'s
    mutants (analyze mutmut_16, mutmut_17)."""
    a = analyze(A, ["parser", "crash", "absent"])
    assert a.term_frequency == {
        (Field.TITLE, "parser"): 1,
        (Field.BRANCHES, "parser"): 1,
        (Field.PROMPTS, "parser"): 1,
        (Field.PROMPTS, "crash"): 1,
    }
    assert a.field_length == {
        Field.TITLE: 2,
        Field.BRANCHES: 2,
        Field.PRS: 0,
        Field.PATH: 2,
        Field.PROMPTS: 4,
    }
    b = analyze(B, ["crash"])
    assert b.term_frequency == {(Field.PROMPTS, "crash"): 2}


def test_corpus_stats_count_documents_average_field_lengths_and_document_frequency() -> None:
    """The corpus statistics: how many entries, each field's mean length in words over them, and in how
    many entries each word occurs (once per entry, whatever the field); an empty corpus has no
    documents and zero averages. Kills corpus_stats mutmut_2, 8, 10, 12, 17, 26, 27, 29, 30, 31, 32."""
    # A: title 2 words, branches 2 (fix, parser), prs 0, path 2 (r, a), prompts 4.
    # B: title 0, branches 0, prs 7 (https github com o r pull 7), path 5 (r b sub r b), prompts 2.
    assert corpus_stats([A, B]) == CorpusStats(
        documents=2,
        average_length={Field.TITLE: 1.0, Field.BRANCHES: 1.0, Field.PRS: 3.5, Field.PATH: 3.5, Field.PROMPTS: 3.0},
        document_frequency={
            "fix": 1, "parser": 1, "r": 2, "a": 1, "crash": 2, "on": 1, "load": 1,
            "https": 1, "github": 1, "com": 1, "o": 1, "pull": 1, "7": 1, "b": 1, "sub": 1,
        },
    )  # fmt: skip
    assert corpus_stats([]) == CorpusStats(
        documents=0, average_length=dict.fromkeys(Field, 0.0), document_frequency={}
    )


def test_idf_is_bm25_s_plus_one_form() -> None:
    """``idf(N, n) = ln(1 + (N - n + 0.5) / (n + 0.5))``: positive even for a word in every document.
    Kills idf mutmut_3, 6, 7, 8, 9."""
    assert idf(20, 1) == pytest.approx(math.log(14.0), rel=1e-12)
    assert idf(20, 4) == pytest.approx(math.log(1 + 16.5 / 4.5), rel=1e-12)
    assert idf(10, 10) == pytest.approx(math.log(1 + 0.5 / 10.5), rel=1e-12)
    assert idf(10, 10) > 0


def _stats(average: dict[Field, float], df: dict[str, int]) -> CorpusStats:
    return CorpusStats(documents=20, average_length=average, document_frequency=df)


CAND = Candidate(
    entry=entry("c"),
    term_frequency={(Field.TITLE, "parser"): 1, (Field.PROMPTS, "parser"): 3, (Field.BRANCHES, "crash"): 2},
    field_length={Field.TITLE: 1, Field.BRANCHES: 4, Field.PRS: 0, Field.PATH: 2, Field.PROMPTS: 12},
)
AVERAGE = {Field.TITLE: 4.0, Field.BRANCHES: 2.0, Field.PRS: 1.0, Field.PATH: 3.0, Field.PROMPTS: 6.0}


def test_bm25f_sums_weighted_normalised_fields_before_saturating_each_term() -> None:
    """BM25F, worked by hand: per term, each field's frequency times its weight over its length norm
    ``1 - b + b * length / average`` (a field shorter than average is lifted, not clamped at 1), summed
    over the fields, saturated with k1 = 1.2, times the term's idf; the terms' scores add up; a query
    word the candidate lacks adds nothing. Kills bm25f mutmut_2, 4, 14, 15, 17, 24, 25, 27, 33, 41, 52,
    53."""
    w_parser = 4.0 * 1 / (0.5 + 0.5 * 1 / 4.0) + 1.0 * 3 / (
        0.25 + 0.75 * 12 / 6.0
    )  # title 0.625, prompts 1.75
    w_crash = 3.0 * 2 / (0.7 + 0.3 * 4 / 2.0)  # branches 1.3
    expected = math.log(14.0) * w_parser / (1.2 + w_parser) + math.log(1 + 16.5 / 4.5) * w_crash / (
        1.2 + w_crash
    )
    stats = _stats(AVERAGE, {"parser": 1, "crash": 4, "absent": 3})
    assert bm25f(CAND, ["parser", "crash", "absent"], stats) == pytest.approx(expected, rel=1e-12)
    assert bm25f(CAND, ["absent"], stats) == 0.0


def test_bm25f_without_a_term_s_frequency_or_a_field_s_average_counts_one() -> None:
    """Statistics that lack a query word's document frequency score it as held by one document, and a
    field whose average length is missing or zero is normalised as if it were one word long: the same
    defaults as the daemon's SQL scorer (``connectd.history.queries._score_sql``), whose top candidates
    ``rank`` re-scores with this function (its statistics are read before its candidates, so a word or
    a field's first words can arrive between the two). Kills bm25f mutmut_20, 48, 50, 51."""
    full = _stats(dict.fromkeys(Field, 1.0), {"parser": 1, "crash": 1})
    want = bm25f(CAND, ["parser", "crash"], full)
    assert want > 0
    assert bm25f(CAND, ["parser", "crash"], _stats({}, {})) == pytest.approx(want, rel=1e-12)
    assert bm25f(CAND, ["parser", "crash"], _stats(dict.fromkeys(Field, 0.0), {"parser": 1, "crash": 1})) == (
        pytest.approx(want, rel=1e-12)
    )


# ---------------------------------------------------------------------------------------------------
# Recency, limits and the ranking's order
# ---------------------------------------------------------------------------------------------------


def test_a_session_active_now_or_later_gets_the_full_recency_factor() -> None:
    """Recency is exactly 1 for a session active at ``now`` (or stamped after it). Kills ``max(0.0, ...)``
    -> ``max(1.0, ...)`` (recency mutmut_7)."""
    assert recency(NOW, NOW) == 1.0
    assert recency(NOW + 5.0, NOW) == 1.0
    assert recency(NOW - 1.0, NOW) < 1.0


def test_the_limit_runs_from_one_to_the_maximum_inclusive() -> None:
    """1 and LIMIT_MAX are limits; 0 and LIMIT_MAX + 1 are not. Kills check_limit mutmut_5, 6, 7."""
    assert check_limit(1) == 1
    assert check_limit(LIMIT_MAX) == LIMIT_MAX
    pool = [entry(f"e{i}", prompts=("deploy",)) for i in range(3)]
    assert len(search(pool, "deploy", scope=SearchScope(), now=NOW, limit=1)) == 1
    for bad in (0, LIMIT_MAX + 1):
        with pytest.raises(HistoryError, match="limit must be an integer from 1 to 100"):
            check_limit(bad)


def test_a_session_that_matches_nothing_does_not_end_the_search() -> None:
    """A session without any query word is passed over and the sessions after it are still ranked.
    Kills ``continue`` -> ``break`` (rank mutmut_15)."""
    pool = [entry("miss", prompts=("nothing here",)), entry("hit", prompts=("deploy the api",))]
    assert ids(search(pool, "deploy", scope=SearchScope(), now=NOW)) == ["hit"]


def test_recency_lets_a_fresh_session_beat_a_slightly_better_old_match() -> None:
    """The recency factor multiplies each session's own score by its own age: a session active now
    whose title match is a little weaker ("parser crash fix") is ranked above a year-old one whose title
    is just "parser", and its score is its text score itself. Kills recency's argument
    -> None (rank mutmut_31: every session scored as undated)."""
    old = entry("old", title="parser", age_days=365)
    fresh = entry("fresh", title="parser crash fix", age_days=0)
    results = search([old, fresh], "parser", scope=SearchScope(), now=NOW)
    assert ids(results) == ["fresh", "old"]
    stats = corpus_stats([old, fresh])
    assert results[0].score == pytest.approx(bm25f(analyze(fresh, ["parser"]), ["parser"], stats), rel=1e-12)


def test_equal_scores_go_to_the_later_session_before_harness_and_id() -> None:
    """Two sessions with equal text, both stamped after ``now`` (a transcript from a clock ahead of this
    one: both get the full recency factor, so equal scores), are ordered latest first, whatever their
    ids. Kills the tie-break's sign (rank mutmut_38) and ``or`` -> ``and`` (mutmut_39: by id only)."""
    earlier = entry("a", prompts=("deploy the api",), age_days=-1)
    later = entry("b", prompts=("deploy the api",), age_days=-2)
    results = search([earlier, later], "deploy", scope=SearchScope(), now=NOW)
    assert results[0].score == results[1].score
    assert ids(results) == ["b", "a"]


# ---------------------------------------------------------------------------------------------------
# Liveness and restore
# ---------------------------------------------------------------------------------------------------


def test_a_registry_record_whose_started_at_matches_its_process_is_a_trusted_claim() -> None:
    """Without ``procStart``, a record whose ``startedAt`` is within tolerance of its process's start
    (boot + ticks / clock rate) claims its session trusted. Kills the boot time and the clock rate not
    passed on (claude_claims mutmut_4, mutmut_5)."""
    boot, clk = 1_700_000_000.0, 100
    record = RegistryRecord(
        pid=42, session_id="s", proc_start=None, started_at_ms=(boot + 50.0 + 2.0) * 1000, start_ticks=5000
    )
    assert claude_claims([record], boot, clk) == {"s": Running(42, True)}


def test_a_restore_plan_names_each_pane_s_harness_session_and_title() -> None:
    """Each relaunched item carries its pane, harness, session, resume command, cwd and title; each
    skipped binding its pane, harness, session and reason. Kills select_restorable mutmut_31, 32, 42,
    43, 46, 52."""
    ok = entry(
        "ok",
        title="fix the parser",
        cwd="/w/ok",
        resume_argv=("codex", "resume", "ok"),
        harness=Harness.CODEX,
    )
    plan = select_restorable(
        [PaneBinding("%1", Harness.CODEX, "ok"), PaneBinding("%2", Harness.CLAUDE, "gone")],
        {ok.key: ok},
        existing_dirs=frozenset({"/w/ok"}),
        running=frozenset(),
    )
    assert plan.items == (
        RestoreItem("%1", Harness.CODEX, "ok", ("codex", "resume", "ok"), "/w/ok", "fix the parser"),
    )
    assert plan.skipped == (RestoreSkip("%2", Harness.CLAUDE, "gone", RestoreReason.NOT_INDEXED),)


def test_any_positive_clock_rate_converts_a_process_s_ticks() -> None:
    """The process start is boot + ticks / clock rate for any positive rate, 1 tick a second included;
    only a rate of 0 (unknown) leaves the record unverified. Kills ``clk_tck > 0`` -> ``> 1``
    (record_trust mutmut_12)."""
    boot = 1_700_000_000.0
    record = RegistryRecord(
        pid=7, session_id="s", proc_start=None, started_at_ms=(boot + 50.0) * 1000, start_ticks=50
    )
    assert record_trust(record, boot, 1) is RecordTrust.TRUSTED
    assert record_trust(record, boot, 0) is RecordTrust.UNVERIFIED


# ---------------------------------------------------------------------------------------------------
# Survivors reported after 16:20 UTC: entry building, the indexed field texts, query words
# ---------------------------------------------------------------------------------------------------


def test_an_equal_title_source_seen_later_wins() -> None:
    """Title precedence: of two titles from sources of equal rank the later one wins, and any title
    beats none, even one of rank 0. Kills ``rank >= current`` -> ``>`` (better_title mutmut_9) and the
    fold's start at rank 1 (build_entry mutmut_32)."""
    assert better_title(("first", 2), ("second", 2)) == ("second", 2)
    assert build_entry([facts(title="untitled source", title_rank=0)], "/r").title == "untitled source"


def test_build_entry_folds_every_fact_into_the_entry() -> None:
    """The entry keeps the facts' PR links, entrypoint, parent, source path and missing source; its repo is
    the one given, else its cwd; with no cwd anywhere its cwd is empty; with no activity time its last
    activity is its start. Kills build_entry mutmut_24, 26, 27, 79, 90, 93, 94, 97, 98, 99, 109, 111."""
    one = facts(
        source_path="/t/sub.jsonl",
        prs=("https://github.com/o/r/pull/7",),
        entrypoint=Entrypoint.HEADLESS,
        parent_session_id="p-1",
        started=100.0,
    )
    built = build_entry([one], "/r/named", source_missing=True)
    assert (built.repo, built.cwd, built.prs) == ("/r/named", "", ("https://github.com/o/r/pull/7",))
    assert (built.entrypoint, built.parent_session_id) == (Entrypoint.HEADLESS, "p-1")
    assert (built.source_path, built.source_missing) == ("/t/sub.jsonl", True)
    assert (built.started, built.last_active) == (100.0, 100.0)
    assert build_entry([facts(cwd="/w/x")], "").repo == "/w/x"


def test_build_entry_takes_files_oldest_first_undated_last() -> None:
    """Files are folded by start time whatever their path order, an undated file after the dated ones:
    the head (oldest) names the source path, and the first cwd found is the oldest file's. Kills the sort
    key's mutants (build_entry mutmut_19: undated first; mutmut_20: by path only)."""
    undated = facts(source_path="/t/0-undated", cwd="/w/undated")
    newer = facts(source_path="/t/1-newer", cwd="/w/newer", started=200.0)
    older = facts(source_path="/t/2-older", cwd="/w/older", started=100.0)
    built = build_entry([undated, newer, older], "/r")
    assert (built.source_path, built.cwd) == ("/t/2-older", "/w/older")


def test_build_entry_refusals_say_why() -> None:
    """Kills build_entry mutmut_4 and mutmut_11 (the refusals' words) and TranscriptFacts.__post_init__
    mutmut_1, 5, 6 (the field named)."""
    with pytest.raises(HistoryError) as none:
        build_entry([], "/r")
    assert str(none.value) == "an entry needs at least one transcript"
    with pytest.raises(HistoryError) as mixed:
        build_entry([facts("a"), facts("b")], "/r")
    assert str(mixed.value) == "facts of different sessions cannot form one entry"
    with pytest.raises(HistoryError) as empty:
        facts("")
    assert str(empty.value) == "session_id must be a non-empty string, got ''"


def test_the_indexed_text_of_each_field() -> None:
    """What the index stores per column: lines joined by a line break (prompts by a blank line), and the
    path is the cwd, followed by the repo on its own line only when the repo is another, non-empty path.
    Kills field_texts mutmut_2, 3, 4, 5, 7, 9, 11."""
    e = entry(
        "x",
        repo="/r/a",
        cwd="/r/a/sub",
        title="t",
        branches=("b1", "b2"),
        prs=("p1", "p2"),
        prompts=("one", "two"),
    )
    assert field_texts(e) == {
        Field.TITLE: "t",
        Field.BRANCHES: "b1\nb2",
        Field.PRS: "p1\np2",
        Field.PATH: "/r/a/sub\n/r/a",
        Field.PROMPTS: "one\n\ntwo",
    }
    assert field_texts(entry("y", repo="/r/a", cwd="/r/a"))[Field.PATH] == "/r/a"
    assert field_texts(entry("z", repo="", cwd="/w/z"))[Field.PATH] == "/w/z"


def test_query_words_up_to_64_characters_count_and_refusals_quote_60() -> None:
    """A 64-character word is a query word (65 is not); a query that is no string is refused naming its
    type; one without words is refused quoting its first 60 characters. Kills query_terms mutmut_2, 3, 8,
    11."""
    assert query_terms("w" * 64 + " " + "v" * 65) == ("w" * 64,)
    with pytest.raises(HistoryError) as typed:
        query_terms(7)  # type: ignore[arg-type]
    assert str(typed.value) == "query must be a string, got int"
    with pytest.raises(HistoryError) as wordless:
        query_terms("!" * 70)
    assert str(wordless.value) == f"query {'!' * 60!r} has no searchable words"


def test_the_micro_sign_is_read_as_greek_mu_as_sqlite_does() -> None:
    """The micro sign (U+00B5) is folded into Greek small mu (U+03BC), as SQLite's unicode61 does, so a
    query typed with either finds text written with the other. Kills tokens mutmut_7, 8, 9, 10."""
    assert tokens("5\u00b5s") == ["5\u03bcs"]
    assert tokens("5\u03bcs") == ["5\u03bcs"]
    written = entry("m", prompts=("latency under 5\u03bcs",))
    assert ids(search([written], "5\u00b5s", scope=SearchScope(), now=NOW)) == ["m"]


# ------------------------------------------------------------------------------------- stop 34


def test_a_session_id_is_at_most_200_characters_and_its_refusal_quotes_40() -> None:
    """A session id of 200 characters is an id, 201 is refused; the refusal quotes the first 40
    characters and names the field. Kills _check_id mutmut_6 (``>= 200``), 7 (``> 201``), 10 (41
    quoted) and SessionEntry.__post_init__ mutmut_5 (the field's name)."""
    assert entry("s" * 200).session_id == "s" * 200
    long = "0123456789" * 20 + "x"
    with pytest.raises(HistoryError) as info:
        entry(long)
    assert str(info.value) == f"session_id {long[:40]!r} is too long or holds control characters"
    with pytest.raises(HistoryError) as blank:
        entry(" ")
    assert str(blank.value) == "session_id must be a non-empty string, got ' '"


def test_a_session_entry_refuses_a_harness_or_entrypoint_of_the_wrong_type_in_words() -> None:
    """An entry's harness must be a Harness and its entrypoint an Entrypoint; the refusal names what
    it got. Kills SessionEntry.__post_init__ mutmut_8 and 10 (the message None)."""
    with pytest.raises(HistoryError) as harness:
        SessionEntry(harness="claude", session_id="s", repo="/r", cwd="/r")  # type: ignore[arg-type]
    assert str(harness.value) == "harness must be a Harness, got 'claude'"
    with pytest.raises(HistoryError) as point:
        SessionEntry(Harness.CLAUDE, "s", "/r", "/r", entrypoint="cli")  # type: ignore[arg-type]
    assert str(point.value) == "entrypoint must be an Entrypoint, got 'cli'"


def test_a_prompt_of_exactly_the_limit_is_kept_whole() -> None:
    """A prompt of exactly ``PROMPT_MAX_CHARS`` characters is kept whole; one longer is cut to the limit
    with an ellipsis. Kills clip_prompt mutmut_2 (``<=`` -> ``<``: the last character replaced by
    the ellipsis)."""
    exact = "p" * PROMPT_MAX_CHARS
    assert clip_prompt(exact) == exact
    assert clip_prompt(exact + "q") == "p" * (PROMPT_MAX_CHARS - 1) + "\u2026"


def test_a_prompt_that_fills_the_session_budget_exactly_is_kept() -> None:
    """A session keeps prompts while their characters stay within ``SESSION_PROMPT_MAX_CHARS``: a
    prompt that brings the total to exactly the budget is kept, the next is not. Kills append_prompts
    mutmut_15 (``>`` -> ``>=``: the prompt that fills the budget dropped)."""
    existing = tuple(f"{i:04d}" + "x" * (PROMPT_MAX_CHARS - 4) for i in range(SESSION_PROMPT_MAX_CHARS // PROMPT_MAX_CHARS - 1))
    filler = "y" * PROMPT_MAX_CHARS
    assert sum(map(len, existing)) + len(filler) == SESSION_PROMPT_MAX_CHARS
    assert append_prompts(existing, [filler, "one more"]) == (*existing, filler)


def test_a_time_is_shown_in_utc_with_a_z_whatever_the_local_zone() -> None:
    """``iso_utc`` writes an epoch as UTC, to the second, ending in ``Z``, whatever the machine's local
    zone; an agent's view of an entry shows its last activity so. Kills iso_utc mutmut_8, 10 (the
    local zone: another hour and ``+09:00``), 13, 14, 15 (``+00:00`` or another letter in place of ``Z``)
    and project mutmut_20 (last_active shown as None)."""
    saved = os.environ.get("TZ")
    os.environ["TZ"] = "Asia/Tokyo"
    time.tzset()
    try:
        assert iso_utc(86_400.0 + 3_600.5) == "1970-01-02T01:00:00Z"
        assert iso_utc(None) is None
        at = SessionEntry(Harness.CLAUDE, "t", "/r", "/r", last_active=1_000_000_000.0)
        view = project(at, LivenessView(Liveness.NOT_RUNNING))
        assert view["last_active"] == "2001-09-09T01:46:40Z"
    finally:
        if saved is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = saved
        time.tzset()
