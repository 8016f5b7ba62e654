"""The core's liveness rules (connectcore.history, section "Liveness"): registry trust, which claim
stands, which processes and files count as Codex running a session, an entry's liveness, and what
restore and expunge count as running. The daemon only reads the facts (tests/integration/
test_history_service.py runs them on real processes)."""

from __future__ import annotations

import pytest

from connectcore import directory as D
from connectcore.history import (
    START_TOLERANCE_S,
    Entrypoint,
    Harness,
    Liveness,
    LivenessSnapshot,
    LivenessView,
    RecordTrust,
    RegistryEvidence,
    RegistryRecord,
    Running,
    SessionEntry,
    claimed,
    claude_claims,
    codex_claims,
    liveness_view,
    may_run_codex,
    record_trust,
    registry_evidence,
)

BOOT = 1_700_000_000.0
TCK = 100
TICKS = 123_456  # the process started at BOOT + 1234.56 s
PROCESS_START_MS = (BOOT + TICKS / TCK) * 1000.0
SID = "0f8e2d6a-3b1c-4e5f-9a7b-2c4d6e8f0a1b"
CODEX_SID = "019bce9f-0a40-79e2-8351-8818e8487fb6"
ROOT = "/home/dev/.codex"
ROLLOUT = f"{ROOT}/sessions/2025/01/02/rollout-2025-01-02T10-00-00-{CODEX_SID}.jsonl"


def record(
    *,
    proc_start: int | None = None,
    started_at_ms: float | None = None,
    start_ticks: int | None = TICKS,
    exited: bool = False,
    pid: int = 4242,
    session_id: str = SID,
) -> RegistryRecord:
    return RegistryRecord(pid, session_id, proc_start, started_at_ms, start_ticks, exited)


# ---------------------------------------------------------------------------------------------------
# Claude Code's registry: is a record its process's?
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rec", "trust", "why"),
    [
        (record(proc_start=TICKS), RecordTrust.TRUSTED, "procStart equals the process start"),
        (record(proc_start=TICKS + 1), RecordTrust.STALE, "procStart differs by one tick: the pid was reused"),
        (record(proc_start=TICKS - 1), RecordTrust.STALE, "procStart differs by one tick: the pid was reused"),
        (
            record(proc_start=TICKS + 1, started_at_ms=PROCESS_START_MS),
            RecordTrust.STALE,
            "a numeric procStart decides; startedAt is not looked at",
        ),
        (
            record(proc_start=TICKS, started_at_ms=0.0),
            RecordTrust.TRUSTED,
            "a matching procStart wins over a startedAt far off",
        ),
        (record(started_at_ms=PROCESS_START_MS), RecordTrust.TRUSTED, "startedAt equals the process start"),
        (
            record(started_at_ms=PROCESS_START_MS + START_TOLERANCE_S * 1000),
            RecordTrust.TRUSTED,
            "startedAt exactly the tolerance later",
        ),
        (
            record(started_at_ms=PROCESS_START_MS - START_TOLERANCE_S * 1000),
            RecordTrust.TRUSTED,
            "startedAt exactly the tolerance earlier",
        ),
        (
            record(started_at_ms=PROCESS_START_MS + START_TOLERANCE_S * 1000 + 10),
            RecordTrust.UNVERIFIED,
            "startedAt just past the tolerance: the session may have started later than the process",
        ),
        (
            record(started_at_ms=PROCESS_START_MS - START_TOLERANCE_S * 1000 - 10),
            RecordTrust.UNVERIFIED,
            "startedAt just before the tolerance",
        ),
        (record(), RecordTrust.UNVERIFIED, "nothing to compare"),
        (record(proc_start=TICKS, start_ticks=None), RecordTrust.STALE, "no process with that pid"),
        (record(proc_start=TICKS, exited=True), RecordTrust.STALE, "the process exited, not yet reaped"),
        (record(started_at_ms=PROCESS_START_MS, exited=True), RecordTrust.STALE, "exited, by startedAt too"),
        (record(exited=True), RecordTrust.STALE, "exited, nothing to compare"),
    ],
)
def test_a_registry_record_is_trusted_only_when_its_process_start_matches(
    rec: RegistryRecord, trust: RecordTrust, why: str
) -> None:
    assert record_trust(rec, BOOT, TCK) is trust, why


def test_startedat_needs_the_boot_time_and_the_clock_tick() -> None:
    rec = record(started_at_ms=PROCESS_START_MS)
    assert record_trust(rec, BOOT, TCK) is RecordTrust.TRUSTED
    assert record_trust(rec, None, TCK) is RecordTrust.UNVERIFIED
    assert record_trust(rec, BOOT, 0) is RecordTrust.UNVERIFIED
    # the tick length matters: at 1000 ticks a second the same ticks are another start time
    assert record_trust(rec, BOOT, 1000) is RecordTrust.UNVERIFIED
    assert record_trust(record(proc_start=TICKS), None, 0) is RecordTrust.TRUSTED  # procStart needs neither


def test_the_tolerance_is_ten_seconds() -> None:
    assert START_TOLERANCE_S == 10.0


# ---------------------------------------------------------------------------------------------------
# Which claim stands
# ---------------------------------------------------------------------------------------------------


def test_stale_records_claim_nothing() -> None:
    assert claude_claims([record(proc_start=TICKS + 1), record(start_ticks=None)], BOOT, TCK) == {}


def test_the_first_claim_stands_unless_a_later_one_is_trusted_and_it_is_not() -> None:
    unverified_a, unverified_b = record(pid=1), record(pid=2)
    trusted_c, trusted_d = record(pid=3, proc_start=TICKS), record(pid=4, proc_start=TICKS)
    assert claude_claims([unverified_a, unverified_b], BOOT, TCK) == {SID: Running(1, False)}
    assert claude_claims([unverified_a, trusted_c], BOOT, TCK) == {SID: Running(3, True)}
    assert claude_claims([trusted_c, unverified_a], BOOT, TCK) == {SID: Running(3, True)}
    assert claude_claims([trusted_c, trusted_d], BOOT, TCK) == {SID: Running(3, True)}
    assert claude_claims([record(pid=9, proc_start=TICKS + 1), unverified_a], BOOT, TCK) == {SID: Running(1, False)}


def test_each_session_has_its_own_claim() -> None:
    other = "3e0c2b7a-0000-4000-8000-000000000001"
    claims = claude_claims([record(pid=1, proc_start=TICKS), record(pid=2, session_id=other)], BOOT, TCK)
    assert claims == {SID: Running(1, True), other: Running(2, False)}


# ---------------------------------------------------------------------------------------------------
# Codex: a process named codex* holding a rollout open under the Codex root
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("comm", "looked_at"),
    [
        ("codex", True),
        ("codex-x86_64-u", True),  # the native binary, its name cut to 15 characters
        ("node", False),
        ("xcodex", False),
        ("coder", False),
        ("Codex", False),
        ("", False),
    ],
)
def test_only_processes_named_codex_are_looked_at(comm: str, looked_at: bool) -> None:
    assert may_run_codex(comm) is looked_at


@pytest.mark.parametrize(
    ("target", "session"),
    [
        (ROLLOUT, CODEX_SID),
        (ROLLOUT.replace("/sessions/", "/archived_sessions/"), CODEX_SID),  # the whole root counts
        (ROLLOUT.replace(CODEX_SID, CODEX_SID.upper()), CODEX_SID.upper()),
        (f"{ROOT}/rollout-x-{CODEX_SID}.jsonl", CODEX_SID),  # any name around the id
        (f"{ROOT}/sessions/{CODEX_SID}.jsonl", None),  # not a rollout
        (f"{ROOT}/sessions/rollout-2025-01-02T10-00-00-{CODEX_SID}.json", None),
        (f"{ROOT}/sessions/rollout-2025-01-02T10-00-00-{CODEX_SID}.jsonl.bak", None),
        (f"/tmp/rollout-2025-01-02T10-00-00-{CODEX_SID}.jsonl", None),  # outside the root
        (f"{ROOT}2/sessions/rollout-2025-01-02T10-00-00-{CODEX_SID}.jsonl", None),  # a sibling, not inside
        (ROOT, None),
        ("socket:[12345]", None),
    ],
)
def test_a_codex_process_runs_the_rollout_it_holds_open_under_the_root(target: str, session: str | None) -> None:
    claims, known = codex_claims([(77, ["/dev/null", target])], ROOT)
    assert known
    assert claims == ({session: Running(77, True)} if session else {})


def test_codex_claims_use_the_separator_given() -> None:
    claims, _ = codex_claims([(7, [ROLLOUT.replace("/", "\\")])], ROOT.replace("/", "\\"), "\\")
    assert claims == {CODEX_SID: Running(7, True)}
    assert codex_claims([(7, [ROLLOUT])], ROOT, "\\")[0] == {}


def test_unreadable_descriptors_make_codex_unknown_but_keep_what_was_read() -> None:
    claims, known = codex_claims([(5, None), (6, [ROLLOUT])], ROOT)
    assert not known
    assert claims == {CODEX_SID: Running(6, True)}
    assert codex_claims([], ROOT) == ({}, True)


def test_liveness_counts_more_than_binding_does() -> None:
    """The two Codex rules differ on purpose (codex_claims' docstring): a read-only descriptor, held by
    a process whose argv[0] is not codex, is no binding evidence but does make the session running."""
    held = D.HeldRollout(6, ROLLOUT, writable=False, program="node", sessions_dirs=(f"{ROOT}/sessions",))
    assert D.rollout_session_id(held) is None
    assert codex_claims([(6, [held.path])], ROOT)[0] == {CODEX_SID: Running(6, True)}


# ---------------------------------------------------------------------------------------------------
# An entry's liveness
# ---------------------------------------------------------------------------------------------------


def entry(
    harness: Harness = Harness.CLAUDE, session_id: str = SID, *, parent: str | None = None
) -> SessionEntry:
    return SessionEntry(
        harness=harness,
        session_id=session_id,
        cwd="/home/dev/widget",
        repo="/home/dev/widget",
        entrypoint=Entrypoint.SUBAGENT if parent else Entrypoint.INTERACTIVE,
        parent_session_id=parent,
        source_path="/x.jsonl",
    )


SUB = "a4c2e9f1b3d5e7a9b"


@pytest.mark.parametrize(
    ("snap", "e", "view", "why"),
    [
        (LivenessSnapshot(), entry(), LivenessView(Liveness.NOT_RUNNING), "no claim"),
        (LivenessSnapshot(claude_known=False), entry(), LivenessView(Liveness.RUNNING_UNKNOWN), "not looked at"),
        (
            LivenessSnapshot(codex_known=False),
            entry(),
            LivenessView(Liveness.NOT_RUNNING),
            "the other harness's knowledge does not matter",
        ),
        (
            LivenessSnapshot(claude={SID: Running(5, False)}, ancestry={5: "%1"}),
            entry(),
            LivenessView(Liveness.RUNNING_UNKNOWN),
            "an unverified claim, even in a pane",
        ),
        (
            LivenessSnapshot(claude={SID: Running(5, True)}, ancestry={5: "%1"}),
            entry(),
            LivenessView(Liveness.RUNNING_IN_PANE, "%1"),
            "trusted, its process in a pane",
        ),
        (
            LivenessSnapshot(claude={SID: Running(5, True)}, ancestry={5: None}),
            entry(),
            LivenessView(Liveness.RUNNING_ELSEWHERE),
            "trusted, outside every pane",
        ),
        (
            LivenessSnapshot(claude={SID: Running(5, True)}),
            entry(),
            LivenessView(Liveness.RUNNING_ELSEWHERE),
            "trusted, ancestry unknown",
        ),
        (
            LivenessSnapshot(codex={SID: Running(5, True)}, ancestry={5: "%2"}),
            entry(),
            LivenessView(Liveness.NOT_RUNNING),
            "a Codex claim is not a Claude session's",
        ),
        (
            LivenessSnapshot(codex={CODEX_SID: Running(5, True)}, ancestry={5: "%2"}),
            entry(Harness.CODEX, CODEX_SID),
            LivenessView(Liveness.RUNNING_IN_PANE, "%2"),
            "Codex",
        ),
        (
            LivenessSnapshot(codex_known=False),
            entry(Harness.CODEX, CODEX_SID),
            LivenessView(Liveness.RUNNING_UNKNOWN),
            "Codex not looked at",
        ),
        # A subagent runs inside its parent's process.
        (
            LivenessSnapshot(claude={SID: Running(5, True)}, ancestry={5: "%1"}),
            entry(session_id=SUB, parent=SID),
            LivenessView(Liveness.RUNNING_UNKNOWN),
            "its parent runs",
        ),
        (
            LivenessSnapshot(claude={SID: Running(5, False)}),
            entry(session_id=SUB, parent=SID),
            LivenessView(Liveness.RUNNING_UNKNOWN),
            "its parent is claimed, unverified",
        ),
        (
            LivenessSnapshot(),
            entry(session_id=SUB, parent=SID),
            LivenessView(Liveness.NOT_RUNNING),
            "its parent does not run",
        ),
        (
            LivenessSnapshot(claude_known=False),
            entry(session_id=SUB, parent=SID),
            LivenessView(Liveness.RUNNING_UNKNOWN),
            "not looked at",
        ),
        (
            LivenessSnapshot(claude={SUB: Running(5, True)}, ancestry={5: "%1"}),
            entry(session_id=SUB, parent=SID),
            LivenessView(Liveness.NOT_RUNNING),
            "a claim on the subagent's own id is not its parent's",
        ),
    ],
)
def test_liveness_view(snap: LivenessSnapshot, e: SessionEntry, view: LivenessView, why: str) -> None:
    assert liveness_view(snap, e) == view, why


def test_restore_and_expunge_count_any_claim_verified_or_not() -> None:
    snap = LivenessSnapshot(
        claude={SID: Running(5, False)}, codex={CODEX_SID: Running(6, True)}, claude_known=False
    )
    keys = [(Harness.CLAUDE, SID), (Harness.CODEX, CODEX_SID), (Harness.CLAUDE, SUB), (Harness.CODEX, SID)]
    assert claimed(snap, keys) == {(Harness.CLAUDE, SID), (Harness.CODEX, CODEX_SID)}
    assert claimed(LivenessSnapshot(claude_known=False, codex_known=False), keys) == frozenset()


def test_only_a_trusted_registry_claim_in_a_known_pane_binds() -> None:
    """Claim (issue 24: was ``if not running.trusted or record is None`` in connectd/tmux/watcher.py
    ``_claude_evidence``): a Claude registry claim is binding evidence for a pane only when it is
    trusted and its process runs inside a pane the directory knows; the rest bind nothing."""
    other, third, fourth = SID.replace("0f8e", "1f8e"), SID.replace("0f8e", "2f8e"), SID.replace("0f8e", "3f8e")
    snap = LivenessSnapshot(
        claude={
            fourth: Running(8, True),  # in a pane the directory does not know (gone, or not looked at)
            other: Running(6, False),  # unverified: may be running, but never binds
            SID: Running(5, True),
            third: Running(7, True),  # outside every pane
        },
        ancestry={5: "%1", 6: "%1", 7: None, 8: "%9"},
    )
    assert registry_evidence(snap, ["%1", "%2"]) == (RegistryEvidence(SID, "%1", 5),)
    assert registry_evidence(snap, {"%1": 0, "%9": 0}) == (  # any collection of pane ids; session id order
        RegistryEvidence(SID, "%1", 5), RegistryEvidence(fourth, "%9", 8),
    )
    assert registry_evidence(snap, []) == ()
    assert registry_evidence(LivenessSnapshot(claude={SID: Running(5, True)}), ["%1"]) == ()  # no ancestry read
