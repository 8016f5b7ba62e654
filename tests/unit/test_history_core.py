"""The pure history rules: ranking, scope, entry building, restore selection and the allowlist."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from connectcore.delivery import provenance_line
from connectcore.history import (
    ALLOWED_FIELDS,
    LIMIT_MAX,
    QUERY_MAX_TERMS,
    RECENCY_FLOOR,
    SESSION_PROMPT_MAX_CHARS,
    TITLE_RANK,
    Entrypoint,
    Harness,
    HistoryError,
    Liveness,
    LivenessView,
    OutOfScope,
    PaneBinding,
    RestoreReason,
    SearchScope,
    SessionEntry,
    TranscriptFacts,
    append_prompts,
    better_title,
    build_entry,
    check_readable,
    is_human_prompt,
    parse_harness,
    pr_links,
    project,
    query_terms,
    recency,
    scope_for,
    search,
    select_restorable,
)

NOW = 1_800_000_000.0
DAY = 86400.0


def entry(
    sid: str,
    *,
    repo: str = "/r/a",
    title: str = "",
    prompts: tuple[str, ...] = (),
    age_days: float = 1.0,
    **kw,
):
    return SessionEntry(
        harness=kw.pop("harness", Harness.CLAUDE),
        session_id=sid,
        repo=repo,
        cwd=kw.pop("cwd", repo),
        title=title,
        prompts=prompts,
        last_active=NOW - age_days * DAY,
        **kw,
    )


def ids(results) -> list[str]:
    return [r.entry.session_id for r in results]


# ---------------------------------------------------------------------------------------------------
# Ranking
# ---------------------------------------------------------------------------------------------------


def test_repo_filter_applies_before_ranking():
    """A weak in-repo match survives even though a fleet-wide top 3 would not contain it."""
    strong = [
        entry(f"a{i}", repo="/r/a", title="parser rewrite", prompts=("rewrite the parser",)) for i in range(5)
    ]
    weak = entry(
        "b1",
        repo="/r/b",
        prompts=("a long prompt that mentions the parser once among many other words",),
        age_days=300,
    )
    pool = [*strong, weak]
    fleet_top3 = search(pool, "parser", scope=SearchScope(), now=NOW, limit=3)
    assert "b1" not in ids(fleet_top3)
    assert [r for r in fleet_top3 if r.entry.repo == "/r/b"] == []  # filtering afterwards loses it
    in_repo = search(pool, "parser", scope=SearchScope(repos=frozenset({"/r/b"})), now=NOW, limit=3)
    assert ids(in_repo) == ["b1"]


def test_title_beats_body_at_equal_age():
    in_title = entry("t", title="websocket reconnect", prompts=("fix it",))
    in_body = entry("p", title="misc", prompts=("fix the websocket reconnect",))
    assert ids(search([in_body, in_title], "websocket reconnect", scope=SearchScope(), now=NOW)) == ["t", "p"]


@pytest.mark.parametrize("field", ["branches", "prs"])
def test_branches_and_prs_beat_body(field):
    value = ("feature/oauth-login",) if field == "branches" else ("https://github.com/acme/w/pull/77",)
    term = "oauth" if field == "branches" else "77"
    weighted = entry("w", prompts=("hello",), **{field: value})
    body = entry("b", prompts=(f"look at {term} please",))
    assert ids(search([body, weighted], term, scope=SearchScope(), now=NOW))[0] == "w"


def test_length_normalisation_prefers_the_focused_prompt():
    focused = entry("short", prompts=("fix the cache",))
    rambling = entry("long", prompts=("fix the cache " + " ".join(f"word{i}" for i in range(80)),))
    assert ids(search([rambling, focused], "cache", scope=SearchScope(), now=NOW)) == ["short", "long"]


def test_a_rare_term_counts_more_than_a_common_one():
    pool = [entry(f"c{i}", prompts=("common words here",)) for i in range(8)]
    pool += [entry("rare", prompts=("zanzibar",)), entry("both", prompts=("common",))]
    results = search(pool, "common zanzibar", scope=SearchScope(), now=NOW, limit=3)
    assert ids(results)[0] == "rare"


def test_more_occurrences_score_higher_but_saturate():
    once = entry("once", prompts=("retry once then stop and move on to other work",))
    thrice = entry("thrice", prompts=("retry retry retry then stop and move on to work",))
    r = search([once, thrice], "retry", scope=SearchScope(), now=NOW)
    assert ids(r) == ["thrice", "once"]
    assert r[0].score < 3 * r[1].score


def test_recent_beats_old_at_equal_text():
    old = entry("old", prompts=("migrate the billing tables",), age_days=90)
    new = entry("new", prompts=("migrate the billing tables",), age_days=1)
    assert ids(search([old, new], "billing", scope=SearchScope(), now=NOW)) == ["new", "old"]


def test_recency_never_lifts_a_non_match_and_is_bounded():
    assert recency(NOW, NOW) == pytest.approx(1.0)
    assert recency(None, NOW) == RECENCY_FLOOR
    assert RECENCY_FLOOR < recency(NOW - 400 * DAY, NOW) < recency(NOW - 1 * DAY, NOW) < 1.0
    fresh_miss = entry("miss", prompts=("nothing relevant",), age_days=0)
    assert search([fresh_miss], "billing", scope=SearchScope(), now=NOW) == ()


def test_headless_and_subagents_left_out_unless_asked():
    pool = [
        entry("i", prompts=("deploy",)),
        entry("h", prompts=("deploy",), entrypoint=Entrypoint.HEADLESS),
        entry("s", prompts=("deploy",), entrypoint=Entrypoint.SUBAGENT, parent_session_id="i"),
    ]
    assert ids(search(pool, "deploy", scope=SearchScope(), now=NOW)) == ["i"]
    both = SearchScope(include_headless=True, include_subagents=True)
    assert sorted(ids(search(pool, "deploy", scope=both, now=NOW))) == ["h", "i", "s"]


def test_matched_terms_and_limit():
    pool = [entry(f"e{i}", prompts=("alpha beta",)) for i in range(5)] + [entry("g", prompts=("gamma",))]
    results = search(pool, "alpha gamma", scope=SearchScope(), now=NOW, limit=2)
    assert len(results) == 2
    assert {tuple(r.matched_terms) for r in results} <= {("alpha",), ("gamma",)}


def test_ties_are_broken_stably():
    pool = [entry(s, prompts=("same",), age_days=2) for s in ("b", "a", "c")]
    assert ids(search(pool, "same", scope=SearchScope(), now=NOW)) == ["a", "b", "c"]


# ---------------------------------------------------------------------------------------------------
# Bad input is refused with a clear error
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("query", ["", "   ", "!!! ???", "___"])
def test_query_without_words_is_refused(query):
    with pytest.raises(HistoryError, match="no searchable words"):
        query_terms(query)


def test_query_terms_are_distinct_lowercase_and_bounded():
    assert query_terms("Parser parser PR-4955 #12") == ("parser", "pr", "4955", "12")
    many = " ".join(f"w{i}" for i in range(40))
    assert len(query_terms(many)) == QUERY_MAX_TERMS


@pytest.mark.parametrize("limit", [0, -1, LIMIT_MAX + 1, True, 2.5, "3"])
def test_bad_limit_is_refused(limit):
    with pytest.raises(HistoryError, match="limit"):
        search([entry("x", prompts=("a",))], "a", scope=SearchScope(), now=NOW, limit=limit)


def test_scope_refuses_a_repo_outside_the_grant():
    with pytest.raises(OutOfScope, match="/r/b"):
        scope_for("/r/b", frozenset({"/r/a"}), include_headless=False, include_subagents=False)
    with pytest.raises(HistoryError, match="non-empty"):
        scope_for("", None, include_headless=False, include_subagents=False)
    assert scope_for(None, frozenset({"/r/a"}), include_headless=False, include_subagents=False).repos == {
        "/r/a"
    }
    assert scope_for("/r/a", None, include_headless=True, include_subagents=False).repos == {"/r/a"}


def test_get_checks_the_entry_repo():
    e = entry("x", repo="/r/b")
    check_readable(e, None)
    check_readable(e, frozenset({"/r/b"}))
    with pytest.raises(OutOfScope):
        check_readable(e, frozenset({"/r/a"}))


def test_unknown_harness_and_bad_ids_are_refused():
    with pytest.raises(HistoryError, match="unknown harness 'gemini'"):
        parse_harness("gemini")
    with pytest.raises(HistoryError, match="session_id"):
        entry("")
    with pytest.raises(HistoryError, match="control"):
        entry("a\nb")
    with pytest.raises(HistoryError, match="pane id"):
        LivenessView(Liveness.RUNNING_IN_PANE, "3")
    with pytest.raises(HistoryError, match="running_in_pane only"):
        LivenessView(Liveness.NOT_RUNNING, "%3")


# ---------------------------------------------------------------------------------------------------
# Prompts, PRs and entry building
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text,human",
    [
        ("fix the bug", True),
        ("  <environment_context>\n<cwd>/x</cwd></environment_context>", False),
        ("<command-name>/clear</command-name>", False),
        ("<system-reminder>x</system-reminder>", False),
        ("# AGENTS.md instructions for /x", False),
        ("[Request interrupted by user for tool use]", False),
        ("", False),
        ("   \n", False),
        ("please explain <command-name> tags", True),
    ],
)
def test_is_human_prompt(text, human):
    assert is_human_prompt(text) is human


def test_prompts_are_deduplicated_clipped_and_budgeted():
    long = "y" * 10_000
    out = append_prompts((), ["a", "a", long, "<system-reminder>no</system-reminder>", "b"])
    assert out[0] == "a" and out[2] == "b" and len(out) == 3
    assert len(out[1]) == 4000 and out[1].endswith("…")
    many = append_prompts((), [f"{i:06d}" + "z" * 994 for i in range(200)])
    assert sum(len(p) for p in many) <= SESSION_PROMPT_MAX_CHARS


def test_pr_links():
    text = "see https://github.com/a/b/pull/12 and https://gitlab.com/g/s/p/-/merge_requests/7, again https://github.com/a/b/pull/12."
    assert pr_links(text) == ("https://github.com/a/b/pull/12", "https://gitlab.com/g/s/p/-/merge_requests/7")
    assert pr_links("https://github.com/a/b/issues/12") == ()


def facts(sid="s", **kw) -> TranscriptFacts:
    return TranscriptFacts(
        harness=kw.pop("harness", Harness.CODEX),
        session_id=sid,
        source_path=kw.pop("source_path", "/t/1"),
        **kw,
    )


def test_build_entry_merges_files_of_one_session():
    a = facts(
        source_path="/t/1",
        cwd="/w",
        branches=("main",),
        prompts=("one",),
        started=10.0,
        last_active=20.0,
        title="x",
        title_rank=1,
    )
    b = facts(
        source_path="/t/2",
        cwd="/w2",
        branches=("dev", "main"),
        prompts=("two", "one"),
        started=30.0,
        last_active=40.0,
        prs=("https://github.com/a/b/pull/1",),
    )
    e = build_entry([b, a], "/w")
    assert (e.cwd, e.branches, e.prompts, e.started, e.last_active) == (
        "/w",
        ("main", "dev"),
        ("one", "two"),
        10.0,
        40.0,
    )
    assert e.resume_argv == ("codex", "resume", "s")
    assert e.title == "x"
    assert build_entry([a], "/w", title_override=("Thread", 3)).title == "Thread"
    assert build_entry([a], "/w", title_override=("", 3)).title == "x"


def test_build_entry_resume_argv_rules():
    top = facts(harness=Harness.CLAUDE, cwd="/w")
    assert build_entry([top], "/w").resume_argv == ("claude", "--resume", "s")
    assert build_entry([top], "/w", source_missing=True).resume_argv is None
    sub = facts(harness=Harness.CLAUDE, cwd="/w", entrypoint=Entrypoint.SUBAGENT, parent_session_id="p")
    assert build_entry([sub], "/w").resume_argv is None


def test_build_entry_refuses_nothing_or_mixed_sessions():
    with pytest.raises(HistoryError, match="at least one"):
        build_entry([], "/w")
    with pytest.raises(HistoryError, match="different sessions"):
        build_entry([facts("a"), facts("b")], "/w")


# ---------------------------------------------------------------------------------------------------
# Restore
# ---------------------------------------------------------------------------------------------------


def test_select_restorable_lists_every_binding_with_a_reason():
    ok = entry("ok", cwd="/w/ok", resume_argv=("claude", "--resume", "ok"))
    gone_dir = entry("gone", cwd="/w/gone", resume_argv=("claude", "--resume", "gone"))
    missing = entry("missing", cwd="/w/ok", source_missing=True)
    noresume = entry("nor", cwd="/w/ok")
    sub = entry("sub", cwd="/w/ok", entrypoint=Entrypoint.SUBAGENT)
    live = entry("live", cwd="/w/ok", resume_argv=("claude", "--resume", "live"))
    entries = {e.key: e for e in (ok, gone_dir, missing, noresume, sub, live)}
    bindings = [
        PaneBinding("%1", Harness.CLAUDE, "ok"),
        PaneBinding("%2", Harness.CLAUDE, "gone"),
        PaneBinding("%3", Harness.CLAUDE, "missing"),
        PaneBinding("%4", Harness.CLAUDE, "nor"),
        PaneBinding("%5", Harness.CLAUDE, "sub"),
        PaneBinding("%6", Harness.CLAUDE, "live"),
        PaneBinding("%7", Harness.CODEX, "ok"),
        PaneBinding("%8", Harness.CLAUDE, "ok"),
    ]
    plan = select_restorable(
        bindings, entries, existing_dirs=frozenset({"/w/ok"}), running=frozenset({(Harness.CLAUDE, "live")})
    )
    assert [(i.pane_id, i.argv, i.cwd) for i in plan.items] == [("%1", ("claude", "--resume", "ok"), "/w/ok")]
    assert {s.pane_id: s.reason for s in plan.skipped} == {
        "%2": RestoreReason.CWD_GONE,
        "%3": RestoreReason.SOURCE_MISSING,
        "%4": RestoreReason.NO_RESUME_COMMAND,
        "%5": RestoreReason.SUBAGENT,
        "%6": RestoreReason.ALREADY_RUNNING,
        "%7": RestoreReason.NOT_INDEXED,
        "%8": RestoreReason.DUPLICATE,
    }


def test_pane_binding_is_validated():
    with pytest.raises(HistoryError):
        PaneBinding("", Harness.CLAUDE, "s")
    with pytest.raises(HistoryError):
        PaneBinding("%1", "claude", "s")  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------------
# The allowlist
# ---------------------------------------------------------------------------------------------------

texts = st.text(max_size=30)
ids_ = st.text(alphabet="abcdef0123456789-", min_size=1, max_size=36)
epochs = st.none() | st.floats(min_value=0, max_value=4e9, allow_nan=False)
entries_st = st.builds(
    SessionEntry,
    harness=st.sampled_from(Harness),
    session_id=ids_,
    repo=texts,
    cwd=texts,
    title=texts,
    branches=st.lists(texts, max_size=3).map(tuple),
    prs=st.lists(texts, max_size=3).map(tuple),
    started=epochs,
    last_active=epochs,
    entrypoint=st.sampled_from(Entrypoint),
    parent_session_id=st.none() | ids_,
    prompts=st.lists(texts, max_size=4).map(tuple),
    resume_argv=st.none() | st.lists(texts, max_size=3).map(tuple),
    source_path=texts,
    source_missing=st.booleans(),
)
liveness_st = st.one_of(
    st.sampled_from([Liveness.RUNNING_ELSEWHERE, Liveness.NOT_RUNNING, Liveness.RUNNING_UNKNOWN]).map(
        LivenessView
    ),
    st.integers(0, 999).map(lambda n: LivenessView(Liveness.RUNNING_IN_PANE, f"%{n}")),
)


@settings(max_examples=300, deadline=None)
@given(entries_st, entries_st, liveness_st, st.lists(texts, max_size=3))
def test_projection_is_exactly_the_allowlist(e, other, live, terms):
    """Invariant: a result has exactly the allowlisted fields, and none of its values depends on a
    field outside the allowlist (prompts, resume argv, entrypoint, parent, start, source path)."""
    view = project(e, live, terms)
    assert tuple(view) == ALLOWED_FIELDS
    swapped = dataclasses.replace(
        e,
        prompts=other.prompts,
        resume_argv=other.resume_argv,
        entrypoint=other.entrypoint,
        parent_session_id=other.parent_session_id,
        started=other.started,
        source_path=other.source_path,
        source_missing=other.source_missing,
    )
    assert project(swapped, live, terms) == view
    json.dumps(view)  # plain JSON values only


# ---------------------------------------------------------------------------------------------------
# connect's own provenance line is neither a prompt of the person nor a title
# ---------------------------------------------------------------------------------------------------

DELIVERED = provenance_line(ref="msg-7", sender_actor="agent:3f1c", sender_pane="%4", sender_incarnation="tok") + (
    "\nplease rebase onto main"
)


def test_a_delivered_message_is_not_a_prompt_of_the_person():
    assert is_human_prompt(DELIVERED) is False
    assert is_human_prompt("  \n" + DELIVERED) is False
    assert append_prompts(("fix the login bug",), [DELIVERED]) == ("fix the login bug",)
    # A line that merely mentions connect later on is the person's own.
    assert is_human_prompt("why did [connect] refuse my message?") is True


def test_a_provenance_line_never_becomes_a_title():
    assert better_title(("", 0), (DELIVERED.split("\n")[0], 4)) == ("", 0)
    assert better_title(("ai name", 2), ("[Connect] message msg-1 from agent:x", 4)) == ("ai name", 2)


def test_a_codex_thread_named_after_a_delivered_message_takes_the_persons_first_prompt():
    f = facts(cwd="/w", prompts=("Add a dark mode toggle\nwith a second line", "and tests"))
    name = DELIVERED.split("\n")[0][:60]  # Codex clips the thread name
    e = build_entry([f], "/w", title_override=(name, TITLE_RANK["thread-name"]))
    assert e.title == "Add a dark mode toggle"
    # A real thread name still wins over the prompt.
    assert build_entry([f], "/w", title_override=("Dark mode", TITLE_RANK["thread-name"])).title == "Dark mode"


def test_a_codex_session_that_only_received_messages_has_no_title():
    """With no prompt of the person the title is empty: a view names the session by its cwd."""
    e = build_entry([facts(cwd="/w")], "/w", title_override=(DELIVERED, TITLE_RANK["thread-name"]))
    assert e.title == ""


def test_a_title_from_a_long_first_prompt_is_its_first_line_clipped():
    e = build_entry([facts(cwd="/w", prompts=("x" * 500,))], "/w", title_override=(DELIVERED, 3))
    assert len(e.title) == 80 and e.title.endswith("…")


def test_a_session_the_running_daemon_puts_in_its_pane_runs_in_that_pane_unless_its_process_is_gone() -> None:
    """Issue 23 item 8: `history search` outside tmux called sessions in the daemon's panes "running elsewhere"."""
    from connectcore.history import Liveness, LivenessView, with_daemon_pane

    elsewhere, unknown = LivenessView(Liveness.RUNNING_ELSEWHERE), LivenessView(Liveness.RUNNING_UNKNOWN)
    assert with_daemon_pane(elsewhere, "%3") == LivenessView(Liveness.RUNNING_IN_PANE, "%3")
    assert with_daemon_pane(unknown, "%3") == LivenessView(Liveness.RUNNING_IN_PANE, "%3")
    gone, here = LivenessView(Liveness.NOT_RUNNING), LivenessView(Liveness.RUNNING_IN_PANE, "%7")
    assert with_daemon_pane(gone, "%3") == gone  # the process is gone: a binding does not revive it
    assert with_daemon_pane(here, "%3") == here  # found in a pane by this machine's own probe
    assert with_daemon_pane(elsewhere, None) == elsewhere  # none of the daemon's panes runs it


def test_expunge_refusal_refuses_a_running_session_first_then_anything_outside_the_roots() -> None:
    """Expunge is refused for a running session (before any path is judged) and for any path whose real
    path is not strictly inside a transcript root; otherwise nothing is refused (issue 24: the rule
    moved from history/service.py into the core)."""
    from connectcore.history import HistoryError, SessionRunning, expunge_refusal

    inside = [("/t/a.jsonl", "/roots/claude/a.jsonl")]
    outside = [("/t/link.jsonl", "/etc/passwd")]
    running = expunge_refusal("claude", "s1", running=True, paths=outside, roots=["/roots/claude"])
    assert isinstance(running, SessionRunning) and "is running" in str(running)
    assert expunge_refusal("claude", "s1", running=False, paths=inside, roots=["/roots/claude"]) is None
    refused = expunge_refusal("claude", "s1", running=False, paths=[*inside, *outside], roots=["/roots/claude"])
    assert type(refused) is HistoryError and "'/t/link.jsonl'" in str(refused) and "outside the transcript roots" in str(refused)
    # the root itself and a sibling sharing its prefix are not inside it
    assert expunge_refusal("claude", "s1", running=False, paths=[("/r", "/roots/claude")], roots=["/roots/claude"]) is not None
    assert expunge_refusal("claude", "s1", running=False, paths=[("/r", "/roots/claude2/x")], roots=["/roots/claude"]) is not None


def test_an_expunged_entry_goes_only_when_none_of_its_transcripts_was_kept() -> None:
    """Expunge removes the session's entry and each subagent's (in that order) unless a transcript of it
    could not be deleted: an entry stays while its transcript is there (was in history/service.py)."""
    from connectcore.history import expunged_sessions

    files = {"s": ["/r/s.jsonl", "/r/s.old.jsonl"], "a1": ["/r/s/a1.jsonl"], "a2": ["/r/s/a2.jsonl"]}
    assert expunged_sessions("s", ["a1", "a2"], files, []) == ["s", "a1", "a2"]
    assert expunged_sessions("s", ["a1", "a2"], files, ["/r/s.old.jsonl"]) == ["a1", "a2"]
    assert expunged_sessions("s", ["a1", "a2"], files, ["/r/s/a2.jsonl", "/r/elsewhere"]) == ["s", "a1"]
    assert expunged_sessions("s", ["a2", "a1"], files, []) == ["s", "a2", "a1"]
    assert expunged_sessions("s", [], {}, ["/r/s.jsonl"]) == ["s"]  # no transcript rows: nothing holds it


def test_an_expunge_of_a_claude_session_takes_its_session_directory_beside_a_transcript() -> None:
    """For a Claude Code session the candidate directories are each transcript's path without its suffix
    when the session id names it; another harness has none (issue 24: was `_doomed`'s `if` in
    history/service.py)."""
    from connectcore.history import expunge_dir_candidates

    own = ["/p/proj/s1.jsonl", "/p/proj/s1.old.jsonl", "/p/other/x.jsonl", "/p/proj/s1"]
    assert expunge_dir_candidates(Harness.CLAUDE, "s1", own) == ("/p/proj/s1", "/p/proj/s1")
    assert expunge_dir_candidates(Harness.CODEX, "s1", own) == ()
    assert expunge_dir_candidates(Harness.CLAUDE, "s2", own) == ()


def test_an_expunge_plan_deletes_only_real_directories_and_a_claude_session_s_subagents() -> None:
    """What an expunge deletes: the session's transcripts; for Claude Code also each candidate directory
    that is one itself (never a link, a file or what is not there) and its subagents' transcripts; the
    subagents' entries are named either way."""
    from connectcore.history import ExpungePlan, PathKind, expunge_plan

    files = {"s1": ["/p/s1.jsonl"], "a1": ["/p/s1/subagents/a1.jsonl"], "a2": ["/p/s1/subagents/a2.jsonl"]}
    dir_ = {"/p/s1": PathKind.DIRECTORY}
    plan = expunge_plan(Harness.CLAUDE, "s1", files, ["a1", "a2"], dir_)
    assert plan == ExpungePlan(("/p/s1.jsonl", "/p/s1/subagents/a1.jsonl", "/p/s1/subagents/a2.jsonl"), ("/p/s1",),
                               ("a1", "a2"))
    assert plan.everything == (*plan.files, "/p/s1")
    for kinds in ({"/p/s1": PathKind.LINK}, {"/p/s1": PathKind.OTHER}, {}, {"/p/s2": PathKind.DIRECTORY}):
        assert expunge_plan(Harness.CLAUDE, "s1", files, ["a1", "a2"], kinds).dirs == ()
    codex = expunge_plan(Harness.CODEX, "s1", files, ["a1"], dir_)
    assert codex == ExpungePlan(("/p/s1.jsonl",), (), ("a1",))
    assert expunge_plan(Harness.CLAUDE, "s9", {}, [], {}) == ExpungePlan((), (), ())


def test_restore_considers_known_harnesses_whose_session_no_live_pane_holds() -> None:
    """Claim: restore's candidates are the stored bindings of Claude Code and Codex sessions that no
    live pane holds now, in the order stored (issue 24: was decided in connectd/agents/restore_fleet.py)."""
    from connectcore.history import Harness, PaneBinding, restore_candidates

    stored = [("%1", "claude", "s-1"), ("%2", "codex", "s-2"), ("%3", "opencode", "s-3"), ("%4", "claude", "s-4")]
    assert restore_candidates(stored, {("claude", "s-4")}) == (
        PaneBinding("%1", Harness.CLAUDE, "s-1"),
        PaneBinding("%2", Harness.CODEX, "s-2"),
    )
    assert restore_candidates([], set()) == ()


def test_a_restore_is_refused_while_another_runs() -> None:
    """Claim: a restore may begin only when none runs; the second is refused with ``restore_running``,
    in words that say a restore is already running and that this one changed nothing (issue 24: two
    restores at once launched every session twice)."""
    from connectcore.history import restore_refusal

    assert restore_refusal(running=False) is None
    refused = restore_refusal(running=True)
    assert refused is not None and refused.reason == "restore_running"
    assert refused.problem.startswith("a restore is already running") and "changed nothing" in refused.problem
