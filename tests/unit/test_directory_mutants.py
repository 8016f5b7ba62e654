"""Directory: rules the 2026-12-06 (fourth) mutation run found unpinned (docs/survivors/directory.md lists
the mutants left as equivalent; each test names the mutants it kills)."""

from __future__ import annotations

from collections.abc import Callable

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


# --- read at stop 34 (docs/survivors/directory.md, "Read at stop 34") ---------------------------------


def _error(exc: type[Exception], fn: Callable[..., object], *args: object) -> Exception:
    with pytest.raises(exc) as caught:
        fn(*args)
    return caught.value


def test_a_malformed_incarnation_or_address_is_refused_naming_the_bad_value() -> None:
    """``Incarnation.__post_init__`` 3, 22 and ``PaneAddress.__post_init__`` 7: the refusals' words."""
    assert str(_error(D.DirectoryError, D.Incarnation, 1, 2, "5", 3, 4)) == "pane id must look like %N, got '5'"
    assert str(_error(D.DirectoryError, D.Incarnation, 1, 2, "%5", -3, 4)) == (
        "incarnation pane_pid must be a non-negative int, got -3"
    )
    bad = _error(D.TargetError, D.PaneAddress, "%5", "xyz")
    assert isinstance(bad, D.TargetError) and bad.reason is D.TargetRefusal.BAD_TARGET
    assert str(bad) == "malformed address '%5'@'xyz': expected %N@<16 hex digits>"


def _claim(d: D.Directory, pane: str, source: D.EvidenceSource, session: str | None, harness: str = "claude") -> D.Directory:
    return D.note_evidence(d, D.Evidence(pane, d.panes[pane].token, source, harness, session))


def test_malformed_evidence_is_refused_naming_the_bad_value() -> None:
    """``note_evidence`` 2, 8: the refusals' words."""
    d = fleet({})
    assert str(_error(D.DirectoryError, _claim, d, "%1", D.EvidenceSource.SCREEN, "s-1", "shell")) == (
        "evidence for %1: harness 'shell' cannot hold a session (expected one of ['claude', 'codex', 'opencode'])"
    )
    assert str(_error(D.DirectoryError, _claim, d, "%1", D.EvidenceSource.SCREEN, "-bad")) == (
        "evidence for %1: malformed session id '-bad'"
    )


def test_a_repeated_claim_returns_the_very_same_directory() -> None:
    """A claim already recorded changes nothing: the same directory value comes back, not a copy (the
    listing's cache, ``connectd.agents.directory_calls``, is keyed on the directory's identity; kills
    ``note_evidence`` 23, ``evidence.get(key)`` -> ``evidence.get(None)``)."""
    d = _claim(fleet({}), "%1", D.EvidenceSource.REGISTRY, "s-1")
    assert _claim(d, "%1", D.EvidenceSource.REGISTRY, "s-1") is d
    assert _claim(d, "%1", D.EvidenceSource.REGISTRY, "s-2") is not d


def test_a_record_keeps_the_foreground_program_the_poll_read() -> None:
    """``_record`` 5 (the foreground dropped)."""
    assert fleet({"foreground": "vim"}).panes["%1"].foreground == "vim"


def test_conflicting_evidence_names_each_source_s_claim() -> None:
    """``_binding`` 14: the conflict's detail lists the claims, comma-separated."""
    d = _claim(_claim(fleet({}), "%1", D.EvidenceSource.REGISTRY, "s-1"), "%1", D.EvidenceSource.SCREEN, "s-2")
    assert d.panes["%1"].binding == D.Unknown(
        D.Unbound.CONFLICTING_EVIDENCE, "%1: sources disagree (registry: claude:s-1, screen: claude:s-2)"
    )


def test_a_shared_session_names_the_other_panes_in_pane_order() -> None:
    """The panes also claiming a session are listed by number (%2 before %10), comma-separated (kills
    ``_binding`` 47, 49: sorted as text; 51: no key, a TypeError; 55, 57: no detail; 59: the separator)."""
    d = fleet(*({} for _ in range(10)))
    for pane in ("%1", "%10", "%2"):
        d = _claim(d, pane, D.EvidenceSource.REGISTRY, "s-1")
    assert d.panes["%1"].binding == D.Unknown(D.Unbound.SHARED_SESSION, "claude session s-1 is also claimed by %2, %10")


def test_no_live_pane_has_no_binding_and_says_which() -> None:
    """``binding`` 5, 7: the detail names the pane."""
    assert D.binding(fleet({}), "%9") == D.Unknown(D.Unbound.NO_PANE, "no live pane '%9'")


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (7, "a target is a string, got int"),
        ("  ", "empty target"),
        ("%5", "a pane id alone is never an address: use %5@<incarnation token> as the directory lists it"),
        ("%5@zz", "malformed address '%5@zz': expected %N@<16 hex digits>"),
        ("control:x", "the control handle takes no value"),
        ("title:", "title: handle needs a value"),
        ("title:" + "t" * 257, "title: handle longer than 256 characters"),
        ("title:a\tb", "title: handle contains a control character"),
        ("pr:abc", "pr: handle 'abc' is neither a PR number nor a pull request URL"),
    ],
)
def test_each_bad_target_is_refused_bad_target_in_its_words(text: object, words: str) -> None:
    """``parse_target`` 2-6, 10, 13, 14, 32, 33, 35; ``_handle`` 4, 7, 8, 12, 17, 29, 37: the reason and
    the words of each refusal (a non-string is a ``TargetError``, not a ``TypeError``)."""
    bad = _error(D.TargetError, D.parse_target, text)
    assert isinstance(bad, D.TargetError) and bad.reason is D.TargetRefusal.BAD_TARGET
    assert str(bad) == words


def test_an_unrecognised_target_is_quoted_to_80_characters() -> None:
    """``parse_target`` 51 (81 characters quoted), 52 (the words)."""
    bad = _error(D.TargetError, D.parse_target, "w" * 100)
    assert str(bad) == (
        f"unrecognised target {'w' * 80!r}: expected %N@<token>, pr:<number or URL>, "
        "title:<text>, repo:<name> or control (window indices are never addresses)"
    )


def test_a_bad_pr_handle_is_quoted_to_80_characters() -> None:
    """``_handle`` 40 (81 characters quoted)."""
    assert str(_error(D.TargetError, D.parse_target, "pr:" + "q" * 100)) == (
        f"pr: handle {'q' * 80!r} is neither a PR number nor a pull request URL"
    )


def test_control_with_an_empty_value_is_the_control_handle() -> None:
    """``control:`` (nothing after the colon) names control (kills ``_handle`` 9, ``Handle(kind)`` ->
    ``Handle(None)``)."""
    assert D.parse_target("control:") == D.Handle(D.HandleKind.CONTROL)
    assert D.handle_of("control: ") == "control"


def test_a_handle_of_exactly_the_most_characters_is_taken() -> None:
    """MAX_HANDLE_TEXT characters is a handle, one more is not (kills ``_handle`` 15, ``>`` -> ``>=``)."""
    most = "t" * D.MAX_HANDLE_TEXT
    assert D.parse_target(f"title:{most}") == D.Handle(D.HandleKind.TITLE, most)
    assert _error(D.TargetError, D.parse_target, f"title:{most}t")


def test_a_handle_holding_del_is_refused() -> None:
    """DEL (0x7f) is a control character (kills ``_handle`` 27, ``0x7F`` -> ``128``)."""
    bad = _error(D.TargetError, D.parse_target, "title:fix\x7flogin")
    assert str(bad) == "title: handle contains a control character"


def test_an_address_is_not_a_handle_to_list_candidates_of() -> None:
    """``candidates`` 6, 7: the reason and the words."""
    d = fleet({})
    address = str(d.panes["%1"].address)
    bad = _error(D.TargetError, D.candidates, d, address)
    assert isinstance(bad, D.TargetError) and bad.reason is D.TargetRefusal.BAD_TARGET
    assert str(bad) == f"{address} is an address, not a handle"


def test_resolve_s_refusals_say_why_in_words() -> None:
    """``resolve`` 17, 18 (a stale incarnation's words), 21 (a value that is no target), 31 (no pane
    matches)."""
    d = fleet({})
    stale = "%1@" + "0" * D.TOKEN_HEX
    assert str(_error(D.TargetError, D.resolve, d, stale)) == (
        f"%1 now holds another process (incarnation {'0' * D.TOKEN_HEX} is gone); "
        "list agents again for its current address"
    )
    bad = _error(D.TargetError, D.resolve, d, 5)
    assert isinstance(bad, D.TargetError) and bad.reason is D.TargetRefusal.BAD_TARGET
    assert str(bad) == "not a target: 5"
    nothing = _error(D.TargetError, D.resolve, d, "pr:12")
    assert isinstance(nothing, D.TargetError) and nothing.reason is D.TargetRefusal.NO_PANE
    assert str(nothing) == "no live pane matches pr:12"
