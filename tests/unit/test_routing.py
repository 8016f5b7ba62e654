"""Directory facts for routing: handles (pr, title, repo, control), refusals with counts, the facts
read from .git text, and the resolve ranking."""

from __future__ import annotations

import pytest

from connectcore import routing as RT
from connectcore.directory import (
    Directory,
    Evidence,
    EvidenceSource,
    Incarnation,
    PaneObservation,
    TargetError,
    TargetRefusal,
    note_evidence,
    note_facts,
    observe,
    parse_target,
    resolve,
    resolves_to,
)

SERVER = (4242, 1_700_000_000)


def inc(pane: int) -> Incarnation:
    return Incarnation(SERVER[0], SERVER[1], f"%{pane}", 5000 + pane, 1000)


def fleet(*rows: dict[str, object]) -> Directory:
    return observe(Directory(), [PaneObservation(incarnation=inc(i + 1), harness="claude", **row) for i, row in enumerate(rows)])  # type: ignore[arg-type]


# --- handles ----------------------------------------------------------------------------------------


def test_repo_handle_resolves_by_name_or_path_and_refuses_ambiguity_with_the_count() -> None:
    d = fleet({"repo": "/src/connect"}, {"repo": "/src/other"}, {"repo": "/work/other"}, {})
    assert resolve(d, "repo:connect").pane_id == "%1"
    assert resolve(d, "repo:CONNECT").pane_id == "%1"
    assert resolve(d, "repo:/src/other").pane_id == "%2"
    with pytest.raises(TargetError) as err:
        resolve(d, "repo:other")
    assert err.value.reason is TargetRefusal.AMBIGUOUS and err.value.candidates == 2
    assert "matches 2 live panes" in str(err.value)
    with pytest.raises(TargetError) as none:
        resolve(d, "repo:nowhere")
    assert none.value.reason is TargetRefusal.NO_PANE and none.value.candidates == 0
    assert resolves_to(d, "repo:other") is None and resolves_to(d, "repo:connect") == "%1"


def test_pr_handle_resolves_from_entry_links_and_the_pane_title() -> None:
    facts = RT.facts_for(repo="/r", branch="b", title="fixing login · PR #12", entry_prs=["https://github.com/o/r/pull/7"])
    d = fleet({"title": "fixing login · PR #12", "pr_links": facts.pr_links}, {"pr_links": ("#13",)})
    assert resolve(d, "pr:12").pane_id == "%1"
    assert resolve(d, "pr:7").pane_id == "%1"
    assert resolve(d, "pr:https://github.com/o/r/pull/7").pane_id == "%1"
    assert resolve(d, "pr:#13").pane_id == "%2"
    with pytest.raises(TargetError) as err:
        resolve(d, "pr:99")
    assert err.value.reason is TargetRefusal.NO_PANE


def test_pr_handle_held_by_two_panes_is_refused_with_the_count_never_guessed() -> None:
    d = fleet({"pr_links": ("#12",)}, {"pr_links": ("https://github.com/o/r/pull/12",)}, {"pr_links": ("#12",)})
    with pytest.raises(TargetError) as err:
        resolve(d, "pr:12")
    assert err.value.reason is TargetRefusal.AMBIGUOUS and err.value.candidates == 3


def test_title_handle_matches_the_session_title_and_control_the_control_pane() -> None:
    d = fleet({"session_title": "Fix  the Login loop"}, {"is_control": True}, {"title": "fix the login loop"})
    with pytest.raises(TargetError) as err:
        resolve(d, "title:fix the login loop")
    assert err.value.candidates == 2
    assert resolve(d, "control").pane_id == "%2"
    two = fleet({"is_control": True}, {"is_control": True})
    with pytest.raises(TargetError) as both:
        resolve(two, "control")
    assert both.value.reason is TargetRefusal.AMBIGUOUS and both.value.candidates == 2


def test_repo_handle_needs_a_value_and_the_error_names_every_form() -> None:
    with pytest.raises(TargetError) as err:
        parse_target("repo:")
    assert err.value.reason is TargetRefusal.BAD_TARGET
    with pytest.raises(TargetError) as bad:
        parse_target("branch:main")
    assert "repo:<name>" in str(bad.value)


def test_note_facts_replaces_a_pane_s_facts_and_ignores_a_stale_incarnation() -> None:
    d = fleet({})
    token = d.panes["%1"].token
    d2 = note_facts(d, "%1", token, repo="/src/x", branch="main", session_title="t", pr_links=["#4"])
    rec = d2.panes["%1"]
    assert (rec.repo, rec.branch, rec.session_title, rec.pr_links) == ("/src/x", "main", "t", ("#4",))
    assert note_facts(d, "%1", "0" * 16, repo="/y", branch=None, session_title="", pr_links=()) is d
    assert note_facts(d, "%9", token, repo="/y", branch=None, session_title="", pr_links=()) is d
    assert resolve(d2, "repo:x").pane_id == "%1"


# --- facts from .git text ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "branch"),
    [
        ("ref: refs/heads/main\n", "main"),
        ("ref: refs/heads/feature/login-fix\n", "feature/login-fix"),
        ("ref:refs/heads/x", "x"),
        ("3f786850e387550fdab836ed7e6dc881de23001b\n", None),  # detached
        ("ref: refs/remotes/origin/main\n", None),
        ("ref: refs/heads/\n", None),
        ("", None),
        ("garbage", None),
    ],
)
def test_parse_head(text: str, branch: str | None) -> None:
    assert RT.parse_head(text) == branch


def test_parse_gitfile_and_commondir() -> None:
    assert RT.parse_gitfile("gitdir: /src/main/.git/worktrees/wt\n") == "/src/main/.git/worktrees/wt"
    assert RT.parse_gitfile("gitdir: ../.git/modules/sub") == "../.git/modules/sub"
    assert RT.parse_gitfile("nothing here") is None
    assert RT.parse_gitfile("gitdir:   \n") is None
    assert RT.parse_commondir("../..\n") == "../.."
    assert RT.parse_commondir("") is None


def test_title_pr_links_and_merging() -> None:
    assert RT.title_pr_links("login fix — PR #12 (see https://github.com/o/r/pull/12)") == ("https://github.com/o/r/pull/12",)
    assert RT.title_pr_links("pr 40 and MR !41") == ("#40", "#41")
    assert RT.title_pr_links("prefix 12, version 1.2") == ()
    assert RT.merge_pr_links(["#3", "not a link"], ["#3", "https://gitlab.com/a/b/-/merge_requests/9"]) == (
        "#3",
        "https://gitlab.com/a/b/-/merge_requests/9",
    )
    assert RT.repo_name("/src/connect/") == "connect" and RT.repo_name(None) == ""


# --- resolve ranking ----------------------------------------------------------------------------------


def _bound(d: Directory, pane: str, session: str) -> Directory:
    return note_evidence(d, Evidence(pane, d.panes[pane].token, EvidenceSource.LAUNCH, "claude", session))


def test_resolve_ranks_a_pr_holder_first_then_word_matches_then_past_sessions() -> None:
    d = fleet(
        {"repo": "/src/web", "branch": "login-fix", "session_title": "fix login redirect"},
        {"repo": "/src/api", "pr_links": ("#12",)},
        {"repo": "/src/docs", "title": "docs"},
    )
    past = [{"harness": "claude", "session_id": "old-1", "title": "login work", "prs": [], "liveness": "not_running"}]
    found = RT.rank_request("who has PR 12 for login", d.records(), past)
    assert [f.get("pane") or f["session_id"] for f in found] == ["%2", "%1", "old-1"]
    assert found[0]["matched"] == ["pr:12"] and found[0]["kind"] == "live"
    assert "title:login" in found[1]["matched"] and "branch:login" in found[1]["matched"]
    assert found[2]["kind"] == "past" and found[2]["score"] == 1.0


def test_resolve_joins_a_past_session_to_the_live_pane_that_holds_it() -> None:
    d = _bound(fleet({"repo": "/src/a"}, {"repo": "/src/b"}), "%2", "s-live")
    past = [
        {"harness": "claude", "session_id": "s-live", "title": "billing"},
        {"harness": "claude", "session_id": "s-old", "title": "billing v1"},
    ]
    found = RT.rank_request("billing", d.records(), past)
    assert [f.get("pane") or f["session_id"] for f in found] == ["%2", "s-old"]  # not listed twice
    assert found[0]["matched"] == ["history"] and found[0]["session"] == {"harness": "claude", "session_id": "s-live"}
    assert found[0]["score"] == RT.WEIGHTS["history"]


def test_resolve_ties_break_by_pane_order_and_limit_applies() -> None:
    d = fleet({"repo": "/x/app"}, {"repo": "/y/app"}, {"repo": "/z/app"})
    found = RT.rank_request("app", d.records(), [], limit=2)
    assert [f["pane"] for f in found] == ["%1", "%2"]
    assert RT.rank_request("nothing matches", d.records(), []) == []
    with pytest.raises(RT.ResolveError):
        RT.rank_request("app", d.records(), [], limit=0)


def _shared(pane: str, box: str, **fields: object) -> dict[str, object]:
    """An agent a paired box shares, as ``remote_directory.listing`` lists it."""
    entry: dict[str, object] = {"pane": pane, "address": f"{pane}@tok@{box}", "harness": "codex", "title": "",
                                "repo": None, "branch": None, "pr_links": [], "scopes": ["reachable"]}
    entry.update(fields)
    return {**entry, "box": {"name": box, "id": f"id-{box}", "fingerprint": "ab12"}, "age": 7, "freshness": "fresh",
            "stale": False, "reachable": True, "remote": True}


def test_resolve_ranks_the_agents_paired_boxes_share_with_the_live_panes_each_with_its_box() -> None:
    d = fleet({"repo": "/src/web", "branch": "login-fix"}, {"repo": "/src/docs"})
    remote = [
        _shared("%4", "laptop", pr_links=["https://github.com/o/web/pull/12"], repo="web"),
        _shared("%1", "devbox", title="nothing here"),
        _shared("%2", "builder", branch="login-fix"),
    ]
    found = RT.rank_request("who has PR 12 on login-fix", d.records(), [], remote=remote)
    assert [(f["pane"], f.get("box", {}).get("name")) for f in found] == [("%4", "laptop"), ("%1", None), ("%2", "builder")]
    top = found[0]
    assert top["matched"] == ["pr:12"] and top["address"] == "%4@tok@laptop" and top["remote"] is True
    assert top["box"] == {"name": "laptop", "id": "id-laptop", "fingerprint": "ab12"} and top["age"] == 7
    assert top["session"] is None and top["repo"] == "web"
    # a tie: this box's pane first, then by box name and pane
    assert found[1]["score"] == found[2]["score"] and "box" not in found[1]
    # a shared agent that matches nothing is left out, as a live pane is; the limit counts it
    assert [f["pane"] for f in RT.rank_request("login", d.records(), [], remote=remote, limit=1)] == ["%1"]
    assert RT.rank_request("docs", d.records(), [], remote=remote)[0]["pane"] == "%2"
    # without remote agents, the ranking as before
    assert RT.rank_request("login", d.records(), []) == RT.rank_request("login", d.records(), [], remote=())
