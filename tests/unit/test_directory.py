"""Fleet directory: incarnations and tokens, addressing, handles, refusals and session binding."""

from __future__ import annotations

import dataclasses

import pytest

from connectcore import directory as D
from connectcore.directory import (
    Directory,
    DirectoryError,
    Evidence,
    EvidenceSource,
    Handle,
    HandleKind,
    Incarnation,
    PaneAddress,
    PaneObservation,
    SessionBinding,
    TargetError,
    TargetRefusal,
    Unbound,
    Unknown,
    binding,
    candidates,
    incarnation_token,
    note_evidence,
    observe,
    panes_holding,
    parse_target,
    resolve,
    resolves_to,
)

SERVER = (4242, 1_700_000_000)


def inc(
    pane: int, pid: int | None = None, start: int = 1000, server: tuple[int, int] = SERVER
) -> Incarnation:
    return Incarnation(server[0], server[1], f"%{pane}", pid if pid is not None else 5000 + pane, start)


def obs(pane: int, **kw: object) -> PaneObservation:
    incarnation = kw.pop("incarnation", None) or inc(pane)
    return PaneObservation(incarnation=incarnation, **kw)  # type: ignore[arg-type]


def fleet(*panes: PaneObservation) -> Directory:
    return observe(Directory(), panes)


def claim(
    d: Directory,
    pane: int,
    source: EvidenceSource,
    session: str | None,
    harness: str = "claude",
    **kw: object,
) -> Directory:
    token = d.panes[f"%{pane}"].token
    return note_evidence(d, Evidence(f"%{pane}", token, source, harness, session, **kw))  # type: ignore[arg-type]


def refusal(d: Directory, target: object) -> TargetError:
    with pytest.raises(TargetError) as info:
        resolve(d, target)  # type: ignore[arg-type]
    return info.value


# ---------------------------------------------------------------------------------------------- tokens


def test_token_is_deterministic_short_hex_and_differs_per_key_part() -> None:
    base = inc(1)
    assert incarnation_token(base) == incarnation_token(inc(1)) == base.token
    assert len(base.token) == 16 and int(base.token, 16) >= 0
    variants = [
        dataclasses.replace(base, server_pid=1),
        dataclasses.replace(base, server_start=2),
        dataclasses.replace(base, pane_id="%2"),
        dataclasses.replace(base, pane_pid=3),
        dataclasses.replace(base, process_start=4),
    ]
    assert len({v.token for v in variants} | {base.token}) == 6


@pytest.mark.parametrize(
    "kw",
    [
        {"pane_id": "5"},
        {"pane_id": "%"},
        {"pane_id": "%05"},
        {"pane_id": "main:1.0"},
        {"pane_pid": -1},
        {"process_start": "7"},
        {"server_pid": True},
    ],
)
def test_malformed_incarnation_is_refused(kw: dict[str, object]) -> None:
    fields = {"server_pid": 1, "server_start": 2, "pane_id": "%1", "pane_pid": 3, "process_start": 4, **kw}
    with pytest.raises(DirectoryError):
        Incarnation(**fields)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------- observe


def test_observe_records_each_pane_with_its_token_and_facts() -> None:
    d = fleet(
        obs(
            1,
            harness="claude",
            title="fix login",
            cwd="/src/a",
            repo="o/a",
            branch="fix",
            pr_links=["https://github.com/o/a/pull/7"],
            launcher="claude",
        ),  # type: ignore[arg-type]
        obs(2, harness="shell"),
    )
    r = d.panes["%1"]
    assert r.token == inc(1).token and r.harness == "claude" and r.title == "fix login"
    assert r.pr_links == ("https://github.com/o/a/pull/7",) and r.launcher == "claude"
    assert r.address == PaneAddress("%1", inc(1).token) and str(r.address) == f"%1@{inc(1).token}"
    assert [x.pane_id for x in d.records()] == ["%1", "%2"]


def test_a_pane_titled_with_connects_provenance_line_is_listed_untitled() -> None:
    """A pane title that is (or imitates) connect's provenance line is never the pane's title."""
    d = fleet(obs(1, harness="codex", title="[connect] message msg-1 from agent:3f1c (pane %2). Peer text"))
    assert d.panes["%1"].title == ""
    assert fleet(obs(1, harness="codex", title="review [connect] docs")).panes["%1"].title == "review [connect] docs"


def test_records_are_ordered_numerically() -> None:
    d = fleet(obs(10), obs(2), obs(1))
    assert [r.pane_id for r in d.records()] == ["%1", "%2", "%10"]


def test_vanished_pane_is_gone() -> None:
    d = observe(fleet(obs(1), obs(2)), [obs(2)])
    assert set(d.panes) == {"%2"}
    assert refusal(d, f"%1@{inc(1).token}").reason is TargetRefusal.UNKNOWN_TARGET


def test_respawned_pane_is_a_new_incarnation_that_inherits_nothing() -> None:
    d = fleet(
        obs(1, harness="claude", title="old work", pr_links=("#9",), launcher="claude", is_control=True)
    )
    d = claim(d, 1, EvidenceSource.REGISTRY, "s-old")
    assert isinstance(binding(d, "%1"), SessionBinding)
    new = inc(1, pid=9999)
    d2 = observe(d, [obs(1, incarnation=new, harness="claude")])
    r = d2.panes["%1"]
    assert r.token == new.token != inc(1).token
    assert (r.title, r.pr_links, r.launcher, r.is_control) == ("", (), None, False)
    assert binding(d2, "%1") == Unknown(Unbound.NO_EVIDENCE, "nothing says which session %1 holds")
    assert d2.evidence == {}
    assert refusal(d2, f"%1@{inc(1).token}").reason is TargetRefusal.STALE_INCARNATION
    assert resolve(d2, f"%1@{new.token}") is r


def test_same_pid_new_start_time_is_a_new_incarnation() -> None:
    d = observe(fleet(obs(1)), [obs(1, incarnation=inc(1, start=2000))])
    assert d.panes["%1"].token != inc(1).token


def test_new_tmux_server_recycling_pane_ids_is_a_new_incarnation() -> None:
    d = observe(fleet(obs(0)), [obs(0, incarnation=inc(0, server=(777, 1_800_000_000)))])
    assert refusal(d, f"%0@{inc(0).token}").reason is TargetRefusal.STALE_INCARNATION


def test_unchanged_incarnation_keeps_token_and_evidence_across_polls() -> None:
    d = claim(fleet(obs(1, harness="claude")), 1, EvidenceSource.REGISTRY, "s1")
    d2 = observe(d, [obs(1, harness="claude", title="now titled")])
    assert d2.panes["%1"].token == d.panes["%1"].token
    assert d2.panes["%1"].title == "now titled"
    assert binding(d2, "%1") == SessionBinding("claude", "s1", (EvidenceSource.REGISTRY,))


def test_observe_refuses_duplicate_pane_ids_and_unknown_harness_and_changes_nothing() -> None:
    d = fleet(obs(1))
    with pytest.raises(DirectoryError, match="twice"):
        observe(d, [obs(1), obs(1, incarnation=inc(1, pid=1))])
    with pytest.raises(DirectoryError, match="unknown harness 'vim'"):
        observe(d, [obs(2, harness="vim")])
    assert set(d.panes) == {"%1"}


# ------------------------------------------------------------------------------------------ addresses


def test_resolve_by_address_string_and_value() -> None:
    d = fleet(obs(5), obs(6))
    token = inc(5).token
    assert resolve(d, f"%5@{token}").pane_id == "%5"
    assert resolve(d, f"  %5@{token} ").pane_id == "%5"
    assert resolve(d, PaneAddress("%5", token)).pane_id == "%5"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "%5",
        "5",
        "main:1.0",
        "1",
        "%5@",
        "%5@xyz",
        "%5@ABCDEF0123456789",
        "%5@0123",
        "@0123456789abcdef",
        "window:1",
        "pr:",
        "pr:   ",
        "pr:abc",
        "pr:#0",
        "title:",
        "title:a\x1bb",
        "control:x",
        "pane:%5",
        "%x@0123456789abcdef",
        "title:" + "x" * 300,
    ],
)
def test_malformed_target_is_refused_as_bad_target(text: str) -> None:
    d = fleet(obs(5))
    err = refusal(d, text)
    assert err.reason is TargetRefusal.BAD_TARGET
    assert str(err)


def test_bare_pane_id_says_it_is_never_an_address() -> None:
    err = refusal(fleet(obs(5)), "%5")
    assert "never an address" in str(err) and "%5@<incarnation token>" in str(err)


def test_non_string_target_is_refused() -> None:
    assert refusal(fleet(obs(5)), 5).reason is TargetRefusal.BAD_TARGET


def test_malformed_address_value_is_refused() -> None:
    with pytest.raises(TargetError) as info:
        PaneAddress("5", "0123456789abcdef")
    assert info.value.reason is TargetRefusal.BAD_TARGET


def test_unknown_pane_address_is_unknown_target() -> None:
    err = refusal(fleet(obs(5)), f"%6@{inc(6).token}")
    assert err.reason is TargetRefusal.UNKNOWN_TARGET and "%6" in str(err)


def test_wrong_token_for_live_pane_is_stale_incarnation() -> None:
    err = refusal(fleet(obs(5)), "%5@0123456789abcdef")
    assert err.reason is TargetRefusal.STALE_INCARNATION and "%5" in str(err)


# -------------------------------------------------------------------------------------------- handles


def test_parse_handles() -> None:
    assert parse_target("control") == Handle(HandleKind.CONTROL)
    assert parse_target("pr:12") == Handle(HandleKind.PR, "12")
    assert parse_target("title:  Fix login ") == Handle(HandleKind.TITLE, "Fix login")
    assert str(Handle(HandleKind.PR, "12")) == "pr:12" and str(Handle(HandleKind.CONTROL)) == "control"


def test_pr_handle_by_number_and_url() -> None:
    d = fleet(
        obs(1, pr_links=("https://github.com/Org/Repo/pull/12/files",)),
        obs(2, pr_links=("https://github.com/org/other/pull/13",)),
        obs(3, pr_links=("#14", "not a link")),
    )
    assert resolve(d, "pr:12").pane_id == "%1"
    assert resolve(d, "pr:#12").pane_id == "%1"
    assert resolve(d, "pr:https://github.com/org/repo/pull/12").pane_id == "%1"
    assert resolve(d, "pr:https://github.com/org/other/pull/13/").pane_id == "%2"
    assert resolve(d, "pr:https://github.com/org/x/pull/14").pane_id == "%3"  # a bare #14 link matches
    assert refusal(d, "pr:https://github.com/org/other/pull/12").reason is TargetRefusal.NO_PANE
    assert refusal(d, "pr:99").reason is TargetRefusal.NO_PANE


def test_title_handle_matches_pane_title_or_session_title_normalised() -> None:
    d = fleet(obs(1, title="Fix   Login"), obs(2, session_title="refactor db"), obs(3))
    assert resolve(d, "title:fix login").pane_id == "%1"
    assert resolve(d, "title:Refactor DB").pane_id == "%2"
    assert refusal(d, "title:nothing").reason is TargetRefusal.NO_PANE


def test_ambiguous_handle_is_refused_with_the_candidate_count() -> None:
    d = fleet(obs(1, title="build"), obs(2, session_title="Build"), obs(3, title="build"), obs(4))
    err = refusal(d, "title:build")
    assert err.reason is TargetRefusal.AMBIGUOUS and err.candidates == 3 and "3 live panes" in str(err)
    d2 = fleet(obs(1, pr_links=("#5",)), obs(2, pr_links=("https://github.com/o/r/pull/5",)))
    err2 = refusal(d2, "pr:5")
    assert err2.reason is TargetRefusal.AMBIGUOUS and err2.candidates == 2


def test_control_handle() -> None:
    assert resolve(fleet(obs(1), obs(2, is_control=True)), "control").pane_id == "%2"
    assert refusal(fleet(obs(1)), "control").reason is TargetRefusal.NO_PANE
    err = refusal(fleet(obs(1, is_control=True), obs(2, is_control=True)), Handle(HandleKind.CONTROL))
    assert err.reason is TargetRefusal.AMBIGUOUS and err.candidates == 2


def test_a_pane_that_calls_itself_control_is_not_what_the_control_handle_names() -> None:
    """The control handle names only the pane the person made control, never one whose title, session
    title, launcher, foreground command or repository reads ``control`` (any process can set those)."""
    mimic = obs(1, title="control", session_title="Control", launcher="control", foreground="control", repo="/r/control")
    assert refusal(fleet(mimic), "control").reason is TargetRefusal.NO_PANE
    assert resolve(fleet(mimic, obs(2, is_control=True)), "control").pane_id == "%2"
    assert resolve(fleet(mimic, obs(2, is_control=True)), "title:control").pane_id == "%1"  # a title handle, not the role
    assert not resolve(fleet(mimic), "title:control").is_control

def test_resolves_to_for_the_delivery_guard() -> None:
    d = fleet(obs(1, title="a"), obs(2, title="b"), obs(3, title="b"))
    assert resolves_to(d, "title:a") == "%1"
    assert resolves_to(d, Handle(HandleKind.TITLE, "a")) == "%1"
    assert resolves_to(d, "title:b") is None  # ambiguous
    assert resolves_to(d, "title:c") is None  # nothing
    assert resolves_to(d, "garbage") is None
    assert resolves_to(d, f"%1@{inc(1).token}") is None  # an address is not a handle
    moved = observe(d, [obs(1), obs(2, title="a"), obs(3, title="b")])
    assert resolves_to(moved, "title:a") == "%2"


def test_candidates_refuses_an_address() -> None:
    with pytest.raises(TargetError):
        candidates(fleet(obs(1)), f"%1@{inc(1).token}")


# ------------------------------------------------------------------------------------- session binding


def test_binding_unknown_without_evidence_and_for_missing_pane() -> None:
    d = fleet(obs(1, harness="claude"))
    assert binding(d, "%1").reason is Unbound.NO_EVIDENCE  # type: ignore[union-attr]
    assert binding(d, "%9").reason is Unbound.NO_PANE  # type: ignore[union-attr]


def test_agreeing_sources_bind() -> None:
    d = fleet(obs(1, harness="codex"))
    d = claim(d, 1, EvidenceSource.SCREEN, "019a-aa", harness="codex")
    d = claim(d, 1, EvidenceSource.TRANSCRIPT, "019a-aa", harness="codex")
    b = binding(d, "%1")
    assert b == SessionBinding("codex", "019a-aa", (EvidenceSource.SCREEN, EvidenceSource.TRANSCRIPT))
    assert d.panes["%1"].binding == b
    assert panes_holding(d, "codex", "019a-aa") == ("%1",)


def test_conflicting_sources_give_unknown_never_a_guess() -> None:
    d = fleet(obs(1, harness="claude"))
    d = claim(d, 1, EvidenceSource.REGISTRY, "s1")
    d = claim(d, 1, EvidenceSource.TRANSCRIPT, "s2")
    b = binding(d, "%1")
    assert isinstance(b, Unknown) and b.reason is Unbound.CONFLICTING_EVIDENCE and "s1" in b.detail
    assert panes_holding(d, "claude", "s1") == ()


def test_same_session_claimed_by_two_panes_is_unknown_for_both() -> None:
    d = fleet(obs(1, harness="claude"), obs(2, harness="claude"))
    d = claim(d, 1, EvidenceSource.REGISTRY, "s1")
    d = claim(d, 2, EvidenceSource.TRANSCRIPT, "s1")
    for pane in ("%1", "%2"):
        b = binding(d, pane)
        assert isinstance(b, Unknown) and b.reason is Unbound.SHARED_SESSION
    # the other pane leaves: the remaining one binds again
    d2 = observe(d, [obs(1, harness="claude")])
    assert binding(d2, "%1") == SessionBinding("claude", "s1", (EvidenceSource.REGISTRY,))


def test_same_id_in_two_harnesses_is_not_a_conflict() -> None:
    d = fleet(obs(1, harness="claude"), obs(2, harness="codex"))
    d = claim(d, 1, EvidenceSource.REGISTRY, "same")
    d = claim(d, 2, EvidenceSource.SCREEN, "same", harness="codex")
    assert isinstance(binding(d, "%1"), SessionBinding) and isinstance(binding(d, "%2"), SessionBinding)


def test_evidence_naming_another_harness_than_the_pane_runs_is_unknown() -> None:
    d = claim(fleet(obs(1, harness="shell")), 1, EvidenceSource.REGISTRY, "s1")
    b = binding(d, "%1")
    assert isinstance(b, Unknown) and b.reason is Unbound.HARNESS_MISMATCH
    # an unknown harness reading does not contradict the evidence
    d2 = claim(fleet(obs(1, harness="unknown")), 1, EvidenceSource.REGISTRY, "s1")
    assert isinstance(binding(d2, "%1"), SessionBinding)


def test_a_pane_connect_launched_stays_bound_while_its_launcher_script_shows_a_shell() -> None:
    """A launched incarnation reads as a shell until its launcher script execs the agent (under load,
    for a second): its launch record is not contradicted by that, so the pane stays bound and restore
    does not offer its live session (it offered it: integration test_restore_relaunches_..., 1 in 4).
    A reading naming another agent still contradicts it, and a shell still contradicts other evidence."""
    from connectcore.history import restore_candidates

    stored = [("%1", "claude", "s1")]  # the session restore would relaunch
    for harness in ("unknown", "shell", "claude"):  # the launched window, read, as it starts
        d = claim(fleet(obs(1, harness=harness)), 1, EvidenceSource.LAUNCH, "s1")
        assert binding(d, "%1") == SessionBinding("claude", "s1", (EvidenceSource.LAUNCH,)), harness
        assert restore_candidates(stored, D.bound_sessions(d)) == ()
    d = claim(fleet(obs(1, harness="codex")), 1, EvidenceSource.LAUNCH, "s1")
    b = binding(d, "%1")
    assert isinstance(b, Unknown) and b.reason is Unbound.HARNESS_MISMATCH and "runs codex" in b.detail
    d = claim(fleet(obs(1, harness="shell")), 1, EvidenceSource.TRANSCRIPT, "s1")  # a hand-started agent exited
    b = binding(d, "%1")
    assert isinstance(b, Unknown) and b.reason is Unbound.HARNESS_MISMATCH and "runs shell" in b.detail
    assert len(restore_candidates(stored, D.bound_sessions(d))) == 1


def test_later_claim_from_same_source_replaces_and_none_withdraws() -> None:
    d = fleet(obs(1, harness="claude"))
    d = claim(d, 1, EvidenceSource.REGISTRY, "s1")
    d = claim(d, 1, EvidenceSource.REGISTRY, "s2")  # /clear started a new session in the same process
    assert binding(d, "%1") == SessionBinding("claude", "s2", (EvidenceSource.REGISTRY,))
    d = claim(d, 1, EvidenceSource.REGISTRY, None)
    assert binding(d, "%1").reason is Unbound.NO_EVIDENCE  # type: ignore[union-attr]
    assert claim(d, 1, EvidenceSource.REGISTRY, None) is d  # withdrawing nothing changes nothing


def test_stale_evidence_is_ignored() -> None:
    d = fleet(obs(1, harness="claude"))
    assert note_evidence(d, Evidence("%1", "0123456789abcdef", EvidenceSource.REGISTRY, "claude", "s")) is d
    assert note_evidence(d, Evidence("%7", inc(7).token, EvidenceSource.REGISTRY, "claude", "s")) is d
    # a registry entry for the pane's own pid but another process start time is a recycled pid
    root = inc(1)
    stale = Evidence(
        "%1", root.token, EvidenceSource.REGISTRY, "claude", "s", pid=root.pane_pid, process_start=1
    )
    assert note_evidence(d, stale) is d
    fresh = dataclasses.replace(stale, process_start=root.process_start)
    assert isinstance(binding(note_evidence(d, fresh), "%1"), SessionBinding)
    child = dataclasses.replace(stale, pid=root.pane_pid + 1)  # a descendant the daemon checked
    assert isinstance(binding(note_evidence(d, child), "%1"), SessionBinding)


@pytest.mark.parametrize(
    ("harness", "session"),
    [("shell", "s1"), ("unknown", "s1"), ("claude", "-rf"), ("claude", ""), ("codex", "a b")],
)
def test_malformed_evidence_is_refused(harness: str, session: str) -> None:
    d = fleet(obs(1))
    with pytest.raises(DirectoryError):
        note_evidence(d, Evidence("%1", inc(1).token, EvidenceSource.SCREEN, harness, session))


# --- Codex rollout evidence (issue 21.1) ------------------------------------------------------------

_SID = "019a2b3c-4d5e-7f60-8a9b-0c1d2e3f4a5b"
_SESSIONS = "/home/u/.codex/sessions"
_ROLLOUT = f"{_SESSIONS}/2026/12/03/rollout-2026-12-03T17-00-00-{_SID}.jsonl"


def _held(path: str = _ROLLOUT, *, writable: bool = True, program: str = "codex",
          dirs: tuple[str, ...] = (_SESSIONS,)) -> D.HeldRollout:
    return D.HeldRollout(7, path, writable, program, dirs)


def test_a_rollout_codex_itself_writes_under_its_sessions_directory_binds() -> None:
    assert D.rollout_session_id(_held()) == _SID
    assert D.rollout_binding([_held(), _held()]) == _SID


@pytest.mark.parametrize(
    ("held", "why"),
    [
        (_held(f"/tmp/rollout-2026-12-03T17-00-00-{_SID}.jsonl"), "outside any Codex sessions directory"),
        (_held(f"/home/u/.codex/sessions-x/rollout-2026-12-03T17-00-00-{_SID}.jsonl"), "a sibling named like it"),
        (_held(writable=False), "opened read-only"),
        (_held(program="python3"), "held by a child process, not the harness"),
        (_held(program="bash"), "held by another program"),
        (_held(dirs=()), "no sessions directory known"),
        (_held(f"{_SESSIONS}/rollout-x-{_SID}.jsonl"), "not a rollout name"),
        (_held(f"{_SESSIONS}/rollout-2026-12-03T17-00-00-{_SID}.jsonl.bak"), "a rollout name with a suffix"),
    ],
)
def test_a_file_codex_did_not_write_there_is_no_evidence(held: D.HeldRollout, why: str) -> None:
    assert D.rollout_session_id(held) is None, why
    assert D.rollout_binding([held]) is None


def test_two_sessions_held_bind_neither() -> None:
    other = _ROLLOUT.replace(_SID, "019a2b3c-4d5e-7f60-8a9b-0c1d2e3f4a5c")
    assert D.rollout_binding([_held(), _held(other)]) is None
    assert D.rollout_binding([_held(), _held(other, writable=False)]) == _SID


def test_pane_session_prefers_the_binding_over_what_connect_recorded() -> None:
    """The pane's session is its unambiguous binding; the recorded session (launch or grant) is only the
    fallback, and a record without an id gives none (issue 24: one rule for restarter and person)."""
    bound = SessionBinding("claude", "now", (EvidenceSource.REGISTRY,))
    unknown = Unknown(Unbound.NO_PANE, "no live pane")
    assert D.pane_session(bound, ("claude", "recorded")) == ("claude", "now")
    assert D.pane_session(bound, None) == ("claude", "now")
    assert D.pane_session(unknown, ("codex", "recorded")) == ("codex", "recorded")
    assert D.pane_session(unknown, ("codex", None)) is None
    assert D.pane_session(unknown, ("codex", "")) is None
    assert D.pane_session(unknown, None) is None
    # several records: the first with an id (the toggle: the principal's, then the launch record's)
    assert D.pane_session(unknown, None, ("codex", "launched")) == ("codex", "launched")
    assert D.pane_session(unknown, ("claude", "granted"), ("codex", "launched")) == ("claude", "granted")
    assert D.pane_session(unknown, ("claude", None), ("codex", "launched")) == ("codex", "launched")
    assert D.pane_session(bound, None, ("codex", "launched")) == ("claude", "now")


def test_recipient_harness_is_the_reading_then_the_launch_then_the_record() -> None:
    """A recipient's harness is the screen's when it names one; else the harness connect launched there;
    else, with no reading at all, the directory's record; else unknown. A reading that names none beats
    the record (issue 24: one rule for agent_calls, act_calls, acts_io and watcher)."""
    assert D.recipient_harness("codex", launched="claude", recorded="opencode") == "codex"
    assert D.recipient_harness("shell", launched="claude") == "claude"  # the launcher script, before its exec
    assert D.recipient_harness("shell", recorded="claude") == "shell"
    assert D.recipient_harness("unknown", launched="claude", recorded="opencode") == "claude"
    assert D.recipient_harness(None, launched="claude", recorded="opencode") == "claude"
    assert D.recipient_harness(None, recorded="opencode") == "opencode"
    assert D.recipient_harness("unknown", recorded="claude") == "unknown"
    assert D.recipient_harness(None) == "unknown"
    assert D.recipient_harness(None, recorded="") == "unknown"


def test_the_control_handle_names_control_s_pane_only_while_that_incarnation_is_shown_there() -> None:
    """Claim: ``control`` resolves to the pane of control's live token only while the directory shows
    that same incarnation there; no control, a pane gone, or another process in it: ``no_pane``
    (issue 24: was an `if` in connectd/delivery/targets.py)."""
    d = fleet(obs(1), obs(2))
    token = d.panes["%2"].token
    assert D.resolve_control(d, ("%2", token)).pane_id == "%2"
    for control in (None, ("%3", token), ("%2", "another-incarnation")):
        with pytest.raises(TargetError) as info:
            D.resolve_control(d, control)
        assert info.value.reason is D.TargetRefusal.NO_PANE


def test_only_a_title_the_program_set_counts() -> None:
    """Claim: tmux's default pane title (the host name) and a blank title count as no title; any
    other title is kept, stripped (issue 24: was an `if` in connectd/tmux/watcher.py)."""
    assert D.self_published_title("box1", "box1") == ""
    assert D.self_published_title("  box1 ", "box1") == ""
    assert D.self_published_title("   ", "box1") == ""
    assert D.self_published_title(" reviewer ", "box1") == "reviewer"
    assert D.self_published_title("box1-agent", "box1") == "box1-agent"


def test_bound_sessions_names_each_session_a_live_pane_holds_the_first_pane_first() -> None:
    """Claim: each session a live pane holds unambiguously is named with its pane, and nothing else is
    (issue 24: was a loop in connectd/control/act_calls.py and connectd/agents/restore_fleet.py)."""
    d = fleet(obs(1, harness="claude"), obs(2, harness="claude"), obs(3, harness="claude"))
    d = claim(d, 1, EvidenceSource.REGISTRY, "s-1")
    d = claim(d, 3, EvidenceSource.REGISTRY, "s-3")
    held = D.bound_sessions(d)
    assert {k: r.pane_id for k, r in held.items()} == {("claude", "s-1"): "%1", ("claude", "s-3"): "%3"}
    both = claim(d, 2, EvidenceSource.REGISTRY, "s-1")  # two panes claiming one session: neither is bound
    assert {k: r.pane_id for k, r in D.bound_sessions(both).items()} == {("claude", "s-3"): "%3"}
    assert D.bound_sessions(fleet(obs(1))) == {}


@pytest.mark.parametrize(
    ("dead", "pane_pid", "start", "live"),
    [
        (False, 100, 5, True),  # a live process with a start time of its own
        (True, 100, 5, False),  # tmux keeps it dead (remain-on-exit)
        (False, None, 5, False),  # no process listed
        (False, 0, 5, False),
        (False, 100, None, False),  # no start time of its own: gone, or not the server's child
        (False, 100, 0, False),
    ],
)
def test_a_listed_pane_lives_by_one_rule(dead: bool, pane_pid: int | None, start: int | None, live: bool) -> None:
    """Claim (issue 24: was ``alive()`` in connectd/tmux/watcher.py, a third copy of the dead-pane
    rule): which listed panes have a live incarnation is :func:`D.pane_live`, and a restart's dead pane
    (:func:`connectcore.restart.pane_dead`) is its negation when no ``--here`` agent exited."""
    from connectcore.restart import pane_dead

    assert D.pane_live(dead=dead, pane_pid=pane_pid, process_start=start) is live
    assert pane_dead(dead=dead, pane_pid=pane_pid, process_start=start, agent_exited_here=False) is (not live)
    assert pane_dead(dead=dead, pane_pid=pane_pid, process_start=start, agent_exited_here=True) is True
