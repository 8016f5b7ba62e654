"""Routing: rules the 2026-12-06 (fourth) mutation run found unpinned (docs/survivors/routing.md lists the
mutants left as equivalent; each test names the mutants it kills)."""

from __future__ import annotations

from typing import Any

import pytest

from connectcore import routing as RT
from connectcore.directory import Directory
from tests.unit.test_routing import _bound, _shared, fleet


def test_repo_name_strips_only_slashes_from_the_end() -> None:
    """The repository's name is the last path component as it is: only trailing ``/`` are dropped
    (kills ``rstrip("/")`` -> ``rstrip("XX/XX")``)."""
    assert RT.repo_name("/src/BOX") == "BOX"
    assert RT.repo_name("/src/mux/") == "mux"


def test_facts_without_a_history_entry_have_no_session_title() -> None:
    """``facts_for`` with no history entry named: no session title, only the title's PR links
    (kills the ``entry_title`` default ``""`` -> ``"XXXX"``)."""
    assert RT.facts_for(repo="/r", branch=None, title="PR #3") == RT.Facts("/r", None, "", ("#3",))


def test_a_fact_the_agent_does_not_have_matches_no_word() -> None:
    """No branch, no title, no repository: nothing to match, whatever the request says (kills
    ``text or ""`` -> ``text or "XXXX"`` in the word set)."""
    assert RT.score_facts("xxxx", "", "", None, ()) == (0.0, ())
    assert RT.score_facts("xxxx", "", "", "xxxx", ()) == (RT.WEIGHTS["branch"], ("branch:xxxx",))


def test_a_pr_number_inside_a_word_of_either_case_is_not_a_pr_number() -> None:
    """``v12``, ``X12``, ``12a``, ``12B`` name no PR: a number counts only standing alone (or after ``#``)
    (kills the look-around classes losing ``A-Z`` or ``a-z``)."""
    held = ["#12"]
    for query in ("v12", "X12", "12a", "12B"):
        assert RT.score_facts(query, "", "", None, held) == (0.0, ()), query
    assert RT.score_facts("#12", "", "", None, held) == (RT.WEIGHTS["pr"], ("pr:12",))


def test_every_pr_a_request_names_and_the_agent_holds_adds_its_weight_in_number_order() -> None:
    """Two held PRs named: twice the PR weight, and the reasons in number order (9 before 10, not as
    text) (kills ``score +=`` -> ``score =`` and ``sorted(key=int)`` -> no key / ``key=None``)."""
    score, why = RT.score_facts("PR 10 or PR 9", "", "", None, ["#9", "https://github.com/o/r/pull/10"])
    assert score == 2 * RT.WEIGHTS["pr"]
    assert why == ("pr:9", "pr:10")


def _repo(path: str) -> dict[str, object]:
    return {"repo": path}


def test_resolve_lists_at_most_ten_by_default() -> None:
    """Kills the ``limit`` default 10 -> 11."""
    d = fleet(*(_repo(f"/x{i}/app") for i in range(12)))
    assert len(RT.rank_request("app", d.records(), [])) == 10


def test_resolve_s_limit_is_an_integer_from_1_to_50_and_the_refusal_says_so() -> None:
    """50 is allowed, 51 and 0 are not; ``True`` and ``"3"`` are not integers here, refused
    ``bad_request`` with the rule's words (kills ``<=`` -> ``<`` at 50, the ``or`` -> ``and`` that
    lets a bool through and breaks on a string, and the message dropped)."""
    d = fleet(*(_repo(f"/x{i}/app") for i in range(3)))
    assert len(RT.rank_request("app", d.records(), [], limit=50)) == 3
    for bad in (51, 0, True, "3"):
        with pytest.raises(RT.ResolveError) as caught:
            RT.rank_request("app", d.records(), [], limit=bad)  # type: ignore[arg-type]
        assert caught.value.reason == "bad_request"
        assert str(caught.value) == f"limit must be an integer from 1 to 50, got {bad!r}"


def _past(*sessions: str) -> list[dict[str, Any]]:
    return [{"harness": "claude", "session_id": s, "title": f"work {s}"} for s in sessions]


def test_past_sessions_score_down_from_1_by_their_rank_to_3_places() -> None:
    """A past session's score is its history rank, 1 for the first and falling by 1/n, rounded to 3
    places (kills ``len(past) - i`` -> ``+ i`` and the rounding changed to none or to 4 places)."""
    found = RT.rank_request("anything", (), _past("a", "b", "c"))
    assert [(f["session_id"], f["score"]) for f in found] == [("a", 1.0), ("b", 0.667), ("c", 0.333)]
    found = RT.rank_request("anything", (), _past("a", "b", "c", "d"))
    assert [f["score"] for f in found] == [1.0, 0.75, 0.5, 0.25]


def test_a_live_pane_matched_only_by_a_low_history_rank_is_listed_with_that_small_score() -> None:
    """The pane holding the 5th of 5 past sessions gets 4 x 1/5 = 0.8: listed (any score above 0
    lists), with 0.8, not a floor of 1 (kills ``> 0`` -> ``> 1`` and the bonus's ``get(pane, 0.0)``
    -> ``1.0``)."""
    d = _bound(fleet({"repo": "/src/a"}), "%1", "e")
    found = RT.rank_request("nothing", d.records(), _past("a", "b", "c", "d", "e"))
    assert found[0]["pane"] == "%1"
    assert found[0]["score"] == 0.8 and found[0]["matched"] == ["history"]


def test_a_live_pane_s_history_bonus_is_rounded_to_3_places() -> None:
    """The 2nd of 3: 4 x 2/3 = 2.667 (kills the live score's rounding to none or to 4 places)."""
    d = _bound(fleet({"repo": "/src/a"}), "%1", "b")
    found = RT.rank_request("nothing", d.records(), _past("a", "b", "c"))
    assert found[0]["pane"] == "%1" and found[0]["score"] == 2.667


def test_a_session_listed_twice_gives_its_pane_the_better_rank() -> None:
    """Of two listings of the session a pane holds, the pane keeps the higher bonus, not the last one
    seen (kills ``max(history_bonus.get(pane, 0.0), ...)`` -> ``get(None, 0.0)``)."""
    d = _bound(fleet({"repo": "/src/a"}), "%1", "s")
    found = RT.rank_request("nothing", d.records(), _past("s", "x", "s", "y"))
    assert [f.get("pane") or f["session_id"] for f in found] == ["%1", "x", "y"]
    assert found[0]["score"] == RT.WEIGHTS["history"]


def test_on_a_tie_this_box_s_pane_comes_first_then_the_boxes_by_name() -> None:
    """Same score: this box's %5 before a shared %1 of box ``0lab`` (a name that sorts before any
    stand-in text), and box ``alpha``'s %9 before box ``beta``'s %1 (kills the box name left out of
    the key, its ``"box" in v`` test misspelt, and this box's key ``""`` -> ``"XXXX"``)."""
    d = fleet(*({} for _ in range(4)), {"repo": "/src/app"})
    remote = [_shared("%1", "beta", repo="app"), _shared("%9", "alpha", repo="app"), _shared("%1", "0lab", repo="app")]
    found = RT.rank_request("app", d.records(), [], remote=remote)
    assert [(f["pane"], f.get("box", {}).get("name")) for f in found] == [
        ("%5", None), ("%1", "0lab"), ("%9", "alpha"), ("%1", "beta")
    ]


def test_a_shared_agent_matches_by_its_title_and_repository_name() -> None:
    """A paired box's agent scores by its title's words and its repository's last component, as a
    live pane does (kills the remote title or repo passed as None, ``str(None)``, ``and ""``, or read
    under a wrong key)."""
    remote = [_shared("%3", "laptop", title="billing export", repo="/src/ledger")]
    [view] = RT.rank_request("billing ledger", (), [], remote=remote)
    assert view["matched"] == ["title:billing", "repo:ledger"]
    assert view["score"] == RT.WEIGHTS["title"] + RT.WEIGHTS["repo"]


def test_a_shared_agent_with_no_title_matches_no_title_word() -> None:
    """No title: no title match, whatever the request (kills ``title or ""`` -> ``or "XXXX"`` and
    ``str(None)``)."""
    for title in (None, ""):
        remote = [_shared("%3", "laptop", title=title)]
        assert RT.rank_request("xxxx none", (), [], remote=remote) == []


def test_a_shared_agent_s_view_carries_its_entry_s_fields() -> None:
    """The whole view of a shared agent: kind, pane, address, harness, title, repo, branch, PR links,
    no session, its box, age and staleness, remote, score and reasons (kills every key or field
    name of the remote view misspelt)."""
    remote = [_shared("%3", "laptop", title="billing", repo="/src/ledger", branch="main",
                      pr_links=["#7"]) | {"stale": True}]
    [view] = RT.rank_request("billing", (), [], remote=remote)
    assert view == {
        "kind": "live", "pane": "%3", "address": "%3@tok@laptop", "harness": "codex", "title": "billing",
        "repo": "/src/ledger", "branch": "main", "pr_links": ["#7"], "session": None,
        "box": {"name": "laptop", "id": "id-laptop", "fingerprint": "ab12"}, "age": 7, "stale": True,
        "remote": True, "score": RT.WEIGHTS["title"], "matched": ["title:billing"],
    }


def test_a_live_pane_s_view_carries_its_record_s_fields() -> None:
    """The whole view of a live pane: its address, harness, title (the pane's own before the
    session's), repo, branch, PR links (kills every key misspelt, ``str(None)`` for the address and
    ``title or session_title`` -> ``and``)."""
    d = fleet({"title": "billing", "session_title": "export work", "repo": "/src/ledger", "branch": "main",
               "pr_links": ("#7",)})
    [view] = RT.rank_request("billing", d.records(), [])
    record = d.records()[0]
    assert view == {
        "kind": "live", "pane": "%1", "address": str(record.address), "harness": "claude", "title": "billing",
        "repo": "/src/ledger", "branch": "main", "pr_links": ["#7"], "session": None,
        "score": RT.WEIGHTS["title"], "matched": ["title:billing"],
    }
    assert view["address"].startswith("%1@")
    d = fleet({"session_title": "export work"})
    assert RT.rank_request("export", d.records(), [])[0]["title"] == "export work"


def test_a_past_session_s_view_carries_its_entry_s_fields() -> None:
    """The whole view of a past session: harness, session, title (``""`` when the entry has none),
    repo, cwd, PR links (the entry's ``prs``), liveness, and its matched terms (kills every key or
    field name of the past view misspelt and the title's default changed)."""
    entry = {"harness": "codex", "session_id": "s1", "title": "billing", "repo": "/src/ledger", "cwd": "/src/ledger/x",
             "prs": ["#7"], "liveness": "not_running", "matched_terms": ["billing"]}
    [view] = RT.rank_request("billing", (), [entry])
    assert view == {
        "kind": "past", "harness": "codex", "session_id": "s1", "title": "billing", "repo": "/src/ledger",
        "cwd": "/src/ledger/x", "pr_links": ["#7"], "liveness": "not_running", "score": 1.0, "matched": ["billing"],
    }
    [bare] = RT.rank_request("billing", Directory().records(), [{"harness": "codex", "session_id": "s2"}])
    assert bare["title"] == "" and bare["pr_links"] == [] and bare["matched"] == []
