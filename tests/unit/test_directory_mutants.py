"""Directory: rules the 2026-12-06 (fourth) mutation run found unpinned (docs/survivors/directory.md lists
the mutants left as equivalent; each test names the mutants it kills)."""

from __future__ import annotations

import pytest

from connectcore import directory as D
from tests.unit.test_routing import fleet

_SID = "019a2b3c-4d5e-7f60-8a9b-0c1d2e3f4a5b"
_NAME = f"rollout-2026-12-03T17-00-00-{_SID}.jsonl"


def _held(path: str, *dirs: str) -> D.HeldRollout:
    return D.HeldRollout(7, path, True, "codex", dirs)


def test_a_sessions_directory_counts_as_a_directory_with_or_without_its_trailing_slash() -> None:
    """A rollout under ``/home/u/.codex/sessions/`` (written with its slash) binds; the directory is
    cut only of its slashes, so a directory ending in ``X`` holds only what is under it (kills
    ``rstrip("/")`` -> ``rstrip(None)`` and -> ``rstrip("XX/XX")``)."""
    assert D.rollout_session_id(_held(f"/home/u/.codex/sessions/2026/{_NAME}", "/home/u/.codex/sessions/")) == _SID
    assert D.rollout_session_id(_held(f"/srv/X/{_NAME}", "/srv/X")) == _SID
    assert D.rollout_session_id(_held(f"/srv/other/{_NAME}", "/srv/X")) is None


def test_any_title_a_program_set_counts_whatever_it_says() -> None:
    """Only the host name and a blank title are no title (kills ``{hostname, ""}`` -> ``{hostname,
    "XXXX"}``)."""
    for title in ("XXXX", "login fix", "x"):
        assert D.self_published_title(f"  {title} ", "box1") == title
    assert D.self_published_title("   ", "box1") == ""


def test_an_address_standing_in_a_detail_is_kept_whole_when_its_window_is_unknown() -> None:
    """Only a known window is added; an address with none stays as written, its token too (kills the
    unmatched address replaced by its pane id alone)."""
    token = "ab" * (D.TOKEN_HEX // 2)
    assert D.placed_in(f"sent to %4@{token} from %3@{token}", {"%3": "main:1"}) == (
        f"sent to %4@{token} from %3@{token} (main:1)"
    )


def test_a_pr_handle_looks_past_links_that_are_not_pr_links() -> None:
    """A pane whose PR links start with one that is no PR link is still found by the PR it holds
    (kills the loop's ``continue`` -> ``break``)."""
    d = fleet({"pr_links": ("see the ticket", "https://github.com/o/r/pull/12")}, {"pr_links": ("#7",)})
    assert D.resolve(d, "pr:12").pane_id == "%1"


@pytest.mark.parametrize(
    ("handle", "repo"),
    [
        ("repo:/src/connect/", "/src/connect"),  # the handle's trailing slash
        ("repo:/src/connect", "/src/connect/"),  # the pane's
        ("repo:connect/", "/src/connect"),
        ("repo:connect", "/src/connect/"),
        ("repo:/src/LATEX", "/src/LATEX"),  # names ending in X: only slashes are cut
        ("repo:LATEX", "/src/LATEX"),
        ("repo:latex", "/src/LATEX/"),
    ],
)
def test_a_repo_handle_ignores_trailing_slashes_on_either_side_and_nothing_else(handle: str, repo: str) -> None:
    """``repo:`` names a repository by its whole path or its last component, a trailing ``/`` on the
    handle or on the pane's path making no difference (kills ``rstrip("/") or wanted`` -> ``and``,
    and each ``rstrip("/")`` -> ``rstrip(None)``, ``rstrip("XX/XX")`` or ``lstrip("/")``)."""
    d = fleet({"repo": repo}, {"repo": "/src/other"})
    assert D.resolve(d, handle).pane_id == "%1"


def test_a_repo_handle_ending_in_x_does_not_name_the_repository_without_it() -> None:
    """Kills the same ``rstrip("XX/XX")`` from the other side: ``/src/LATEX`` is not ``/src/LATE``."""
    d = fleet({"repo": "/src/LATE"})
    for handle in ("repo:/src/LATEX", "repo:LATEX"):
        assert D.resolves_to(d, handle) is None
    d = fleet({"repo": "/src/LATEX"})
    for handle in ("repo:/src/LATE", "repo:LATE"):
        assert D.resolves_to(d, handle) is None


def test_no_control_running_is_refused_in_those_words() -> None:
    """Kills the ``resolve_control`` refusal's words dropped or changed."""
    d = fleet({})
    for control in (None, ("%1", "another-incarnation")):
        with pytest.raises(D.TargetError) as caught:
            D.resolve_control(d, control)
        assert caught.value.reason is D.TargetRefusal.NO_PANE
        assert str(caught.value) == "no control agent is running"


def test_a_pr_url_names_the_same_pr_with_or_without_dot_git_on_its_repository() -> None:
    """``…/o/r.git/pull/12`` and ``…/O/R/pull/12`` are one PR (kills ``removesuffix(".git")`` ->
    ``removeprefix``, ``removesuffix("XX.gitXX")`` and ``removesuffix(".GIT")``)."""
    d = fleet({"pr_links": ("https://github.com/O/R/pull/12",)}, {"pr_links": ("https://github.com/o/other/pull/12",)})
    assert D.resolve(d, "pr:https://github.com/o/r.git/pull/12").pane_id == "%1"


def _record(**fields: object) -> D.PaneRecord:
    return fleet(fields).panes["%1"]


def test_a_pane_label_without_a_window_is_its_id_and_a_control_pane_says_control() -> None:
    """``pane_label`` with no window given: the id alone in front; control's pane has ``control`` after
    its program (kills the window's default ``""`` -> ``"XXXX"`` and the word ``control`` changed)."""
    assert D.pane_label(_record(title="fix login"), "%1") == "%1 · claude · fix login"
    assert D.pane_label(_record(title="fleet", is_control=True), "%1", "main:0") == "%1 (main:0) · claude · control · fleet"
