"""HistoryService on real files: find/get with scope, liveness from real processes, expunge and restore."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from connectcore.history import (
    ALLOWED_FIELDS,
    Harness,
    HistoryError,
    OutOfScope,
    PaneBinding,
    RestoreReason,
    SessionNotFound,
)
from connectd.history.service import HistoryService, SessionRunning
from connectd.tmux import procfs
from tests.fixtures.history.transcripts import Claude, Codex, claude_subagent, make_repo
from tests.support.tmux_server import TmuxServer

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "history"
MAIN = "0f8e2d6a-3b1c-4e5f-9a7b-2c4d6e8f0a1b"
CODEX_MAIN = "019bce9f-0a40-79e2-8351-8818e8487fb6"
NOW = time.time()


@pytest.fixture
def roots(tmp_path: Path):
    claude, codex = tmp_path / "claude", tmp_path / "codex"
    shutil.copytree(FIXTURES / "claude", claude)
    shutil.copytree(FIXTURES / "codex", codex)
    return tmp_path, claude, codex


@pytest.fixture
def service(roots):
    tmp, claude, codex = roots
    svc = HistoryService(tmp / "data", claude, codex, pane_pids=dict, catch_up_interval=0.0)
    yield svc
    svc.close()


def spawn(code: str, *args: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == b"ready"
    return proc


SLEEPER = "import sys, time; print('ready', flush=True); time.sleep(120)"
# A process named "codex" (PR_SET_NAME) holding a rollout open, as the real binary does.
FAKE_CODEX = (
    "import ctypes, sys, time\n"
    "ctypes.CDLL(None).prctl(15, b'codex', 0, 0, 0)\n"
    "f = open(sys.argv[1], 'a')\n"
    "print('ready', flush=True)\n"
    "time.sleep(120)\n"
)


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.kill()
    proc.wait(timeout=10)


def register_claude(claude: Path, pid: int, session_id: str, **fields: object) -> Path:
    record = {
        "pid": pid,
        "sessionId": session_id,
        "cwd": "/home/dev/widget",
        "kind": "interactive",
        "entrypoint": "cli",
    }
    record.update(fields)
    path = claude / "sessions" / f"{pid}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))
    return path


# ---------------------------------------------------------------------------------------------------
# find_sessions / get_session
# ---------------------------------------------------------------------------------------------------


def test_results_are_the_allowlist_and_never_prompts(service):
    results = service.find_sessions("websocket toggle dark", include_headless=True, include_subagents=True)
    assert results
    for view in results:
        assert tuple(view) == ALLOWED_FIELDS
    blob = json.dumps(results)
    assert "flaky on CI" not in blob and "localStorage" not in blob  # prompt text
    assert "--resume" not in blob and "rollout-" not in blob  # resume argv, source path
    got = service.get_session("claude", MAIN)
    assert tuple(got) == ALLOWED_FIELDS
    assert got["prs"] == ["https://github.com/acme/widget/pull/4955"]
    assert got["matched_terms"] == []


def test_repo_filter_applies_before_ranking_in_sql(tmp_path):
    claude, codex = tmp_path / "claude", tmp_path / "codex"
    repo_a = make_repo(tmp_path / "a")
    repo_b = make_repo(tmp_path / "b")
    for i in range(6):
        s = Claude(f"3e0c2b7a-0000-4000-8000-00000000a{i:03d}", str(repo_a))
        s.prompt("rewrite the parser for speed").title("custom-title", "parser rewrite").write(claude)
    old = Claude(
        "3e0c2b7a-0000-4000-8000-00000000b001",
        str(repo_b),
        base=Claude("x", "/").base.replace(year=2024),
    )
    old.prompt("many words about other things and the parser only once in a long rambling prompt").write(
        claude
    )
    with HistoryService(tmp_path / "data", claude, codex, pane_pids=dict) as svc:
        fleet = svc.find_sessions("parser", limit=3)
        assert len(fleet) == 3 and all(v["repo"] == str(repo_a) for v in fleet)
        scoped = svc.find_sessions("parser", repo=str(repo_b), limit=3)
        assert [v["session_id"] for v in scoped] == ["3e0c2b7a-0000-4000-8000-00000000b001"]
        granted = svc.find_sessions("parser", limit=3, allowed_repos=frozenset({str(repo_b)}))
        assert [v["repo"] for v in granted] == [str(repo_b)]
        with pytest.raises(OutOfScope):
            svc.find_sessions("parser", repo=str(repo_a), allowed_repos=frozenset({str(repo_b)}))


def test_get_session_takes_harness_and_id_and_checks_scope(tmp_path):
    claude, codex = tmp_path / "claude", tmp_path / "codex"
    same = "019bcea4-0000-7000-8000-000000000001"
    Claude(same, str(tmp_path / "one")).prompt("claude side").write(claude)
    Codex(same, str(tmp_path / "two")).prompt("codex side").write(codex)
    with HistoryService(tmp_path / "data", claude, codex, pane_pids=dict) as svc:
        assert svc.get_session("claude", same)["cwd"] == str(tmp_path / "one")
        assert svc.get_session(Harness.CODEX, same)["cwd"] == str(tmp_path / "two")
        with pytest.raises(OutOfScope):
            svc.get_session("claude", same, allowed_repos=frozenset({str(tmp_path / "two")}))
        assert (
            svc.get_session("claude", same, allowed_repos=frozenset({str(tmp_path / "one")}))["harness"]
            == "claude"
        )
        with pytest.raises(SessionNotFound):
            svc.get_session("codex", "no-such-session")
        with pytest.raises(HistoryError, match="unknown harness"):
            svc.get_session("omp", same)
        with pytest.raises(HistoryError, match="session_id"):
            svc.get_session("claude", "  ")


def test_search_catches_up_with_new_transcripts(service, roots):
    _, claude, _ = roots
    assert service.find_sessions("kubernetes") == []
    Claude("3e0c2b7a-0000-4000-8000-0000000000e1", "/home/dev/widget").prompt("deploy to kubernetes").write(
        claude
    )
    assert [v["session_id"] for v in service.find_sessions("kubernetes")] == [
        "3e0c2b7a-0000-4000-8000-0000000000e1"
    ]


def test_recent_dirs_most_recent_first_existing_only(tmp_path):
    claude, codex = tmp_path / "claude", tmp_path / "codex"
    older, newer = tmp_path / "older", tmp_path / "newer"
    older.mkdir()
    newer.mkdir()
    base = Claude("x", "/").base
    Claude("3e0c2b7a-0000-4000-8000-0000000000f1", str(older), base=base.replace(month=1)).prompt("a").write(
        claude
    )
    Codex("019bcea5-0000-7000-8000-0000000000f2", str(newer), base=base.replace(month=3)).prompt("b").write(
        codex
    )
    Claude(
        "3e0c2b7a-0000-4000-8000-0000000000f3", str(tmp_path / "deleted"), base=base.replace(month=6)
    ).prompt("c").write(claude)
    with HistoryService(tmp_path / "data", claude, codex, pane_pids=dict) as svc:
        assert [d["cwd"] for d in svc.recent_dirs()] == [str(newer), str(older)]
        assert [d["cwd"] for d in svc.recent_dirs(1)] == [str(newer)]
        with pytest.raises(HistoryError):
            svc.recent_dirs(0)


# ---------------------------------------------------------------------------------------------------
# Liveness from real processes
# ---------------------------------------------------------------------------------------------------


def test_claude_registry_trusted_only_when_start_time_matches(service, roots):
    _, claude, _ = roots
    assert service.get_session("claude", MAIN)["liveness"] == "running_unknown"  # no registry at all
    (claude / "sessions").mkdir()
    assert service.get_session("claude", MAIN)["liveness"] == "not_running"
    proc = spawn(SLEEPER)
    try:
        start = procfs.process_start_time(proc.pid)
        reg = register_claude(claude, proc.pid, MAIN, procStart=str(start), startedAt=int(NOW * 1000))
        me = {os.getpid(): "%7"}
        assert service.get_session("claude", MAIN, pane_pids=me)[("liveness")] == "running_in_pane"
        assert service.get_session("claude", MAIN, pane_pids=me)["pane"] == "%7"
        assert service.get_session("claude", MAIN, pane_pids={})["liveness"] == "running_elsewhere"
        # Its subagent runs inside it: we cannot tell more.
        assert service.get_session("claude", "a4c2e9f1b3d5e7a9b")["liveness"] == "running_unknown"
        # A reused pid: the recorded start time is another process's.
        register_claude(claude, proc.pid, MAIN, procStart=str(start + 1))
        assert service.get_session("claude", MAIN)["liveness"] == "not_running"
        # No procStart: startedAt is compared with the process start within the tolerance.
        started = procfs.process_start_epoch(proc.pid)
        register_claude(claude, proc.pid, MAIN, startedAt=int(started * 1000) + 500)
        assert service.get_session("claude", MAIN, pane_pids={})["liveness"] == "running_elsewhere"
        register_claude(claude, proc.pid, MAIN, startedAt=int(started * 1000) - 3_600_000)
        assert service.get_session("claude", MAIN)["liveness"] == "running_unknown"
        register_claude(claude, proc.pid, MAIN)
        assert service.get_session("claude", MAIN)["liveness"] == "running_unknown"
    finally:
        stop(proc)
    register_claude(claude, proc.pid, MAIN, procStart=str(start))
    assert service.get_session("claude", MAIN)["liveness"] == "not_running"  # the process is gone
    reg.unlink()


def test_a_session_whose_process_exited_unreaped_is_not_running(service, roots):
    """A zombie (exited, its parent not yet reaping it) keeps its pid and start time in /proc but holds
    no session: after a lost tmux server the agents it held are orphans until init reaps them, and
    restore must list their sessions meanwhile."""
    _, claude, _ = roots
    (claude / "sessions").mkdir()
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        start = procfs.process_start_time(proc.pid)
        reg = register_claude(claude, proc.pid, MAIN, procStart=str(start), startedAt=int(NOW * 1000))
        assert service.get_session("claude", MAIN, pane_pids={})["liveness"] == "running_elsewhere"
        assert proc.stdin is not None
        proc.stdin.close()  # it exits; nobody waits for it yet
        deadline = time.monotonic() + 10
        while (st := procfs.read_stat(proc.pid)) is not None and st.state != "Z":
            assert time.monotonic() < deadline, "the child did not exit"
            time.sleep(0.01)
        assert st is not None and st.state == "Z"
        assert service.get_session("claude", MAIN, pane_pids={})["liveness"] == "not_running"
        reg.unlink()
    finally:
        proc.wait(10)


def test_codex_liveness_from_the_open_rollout(service, roots):
    _, _, codex = roots
    rollout = next((codex / "sessions").rglob(f"*{CODEX_MAIN}.jsonl"))
    assert service.get_session("codex", CODEX_MAIN)["liveness"] == "not_running"
    proc = spawn(FAKE_CODEX, str(rollout))
    try:
        view = service.get_session("codex", CODEX_MAIN, pane_pids={os.getpid(): "%3"})
        assert (view["liveness"], view["pane"]) == ("running_in_pane", "%3")
        assert service.get_session("codex", CODEX_MAIN, pane_pids={})["liveness"] == "running_elsewhere"
        assert (
            service.get_session("codex", "019bcea0-1b51-7af3-9462-9929f9598a07")["liveness"] == "not_running"
        )
    finally:
        stop(proc)
    assert service.get_session("codex", CODEX_MAIN)["liveness"] == "not_running"


def test_pane_found_through_a_real_tmux_server(service, roots):
    _, _, codex = roots
    rollout = next((codex / "sessions").rglob(f"*{CODEX_MAIN}.jsonl"))
    script = roots[0] / "fake_codex.py"
    script.write_text(FAKE_CODEX.replace("print('ready', flush=True)\n", ""))
    from connectd.history.liveness import tmux_pane_pids

    with TmuxServer("connect-history") as tmux:
        pane = tmux.new_session("h", [sys.executable, str(script), str(rollout)])
        deadline = time.monotonic() + 10
        view = {}
        while time.monotonic() < deadline:
            view = service.get_session("codex", CODEX_MAIN, pane_pids=tmux_pane_pids(tmux.socket_name))
            if view["liveness"] == "running_in_pane":
                break
            time.sleep(0.1)
        assert (view["liveness"], view["pane"]) == ("running_in_pane", pane)


# ---------------------------------------------------------------------------------------------------
# Expunge
# ---------------------------------------------------------------------------------------------------


def test_expunge_deletes_transcripts_and_entries_after_auditing(service, roots):
    _, claude, _ = roots
    main = next((claude / "projects").rglob(f"{MAIN}.jsonl"))
    folder = main.with_suffix("")
    audited: list[dict] = []

    def audit(record):
        assert main.exists() and folder.exists()  # the audit line comes first
        audited.append(dict(record))

    service.update()
    result = service.expunge("claude", MAIN, audit=audit)
    assert not main.exists() and not folder.exists()
    assert result.entries_removed == 2 and result.subagents == ("a4c2e9f1b3d5e7a9b",)
    assert audited[0]["action"] == "history.expunge" and str(main) in audited[0]["paths"]
    with pytest.raises(SessionNotFound):
        service.get_session("claude", MAIN)
    with pytest.raises(SessionNotFound):
        service.get_session("claude", "a4c2e9f1b3d5e7a9b")
    assert service.find_sessions("websocket", include_subagents=True) == []
    assert service.index.files_of(Harness.CLAUDE, MAIN) == []


def test_expunge_codex_rollout(service, roots):
    _, _, codex = roots
    rollout = next((codex / "sessions").rglob(f"*{CODEX_MAIN}.jsonl"))
    result = service.expunge("codex", CODEX_MAIN, audit=lambda r: None)
    assert result.deleted == (str(rollout),) and not rollout.exists()
    with pytest.raises(SessionNotFound):
        service.get_session("codex", CODEX_MAIN)
    service.update()  # the next pass does not bring it back
    with pytest.raises(SessionNotFound):
        service.get_session("codex", CODEX_MAIN)


def test_expunge_writes_nothing_when_the_audit_fails(service, roots):
    _, claude, _ = roots
    main = next((claude / "projects").rglob(f"{MAIN}.jsonl"))

    def broken(record):
        raise OSError("audit log is full")

    with pytest.raises(OSError):
        service.expunge("claude", MAIN, audit=broken)
    assert main.exists()
    assert service.get_session("claude", MAIN)["session_id"] == MAIN


def test_expunge_refuses_a_running_session(service, roots):
    _, claude, _ = roots
    proc = spawn(SLEEPER)
    try:
        register_claude(claude, proc.pid, MAIN, procStart=str(procfs.process_start_time(proc.pid)))
        with pytest.raises(SessionRunning):
            service.expunge("claude", MAIN, audit=lambda r: None)
    finally:
        stop(proc)
    assert next((claude / "projects").rglob(f"{MAIN}.jsonl")).exists()


# ---------------------------------------------------------------------------------------------------
# Restore
# ---------------------------------------------------------------------------------------------------


def test_restorable_lists_resumable_sessions_and_reasons(tmp_path):
    claude, codex = tmp_path / "claude", tmp_path / "codex"
    alive_dir = make_repo(tmp_path / "proj")
    top = Claude("3e0c2b7a-0000-4000-8000-0000000000a1", str(alive_dir)).prompt("work")
    top.write(claude)
    claude_subagent(claude, top, "b1b2b3", "a task")
    Codex("019bcea6-0000-7000-8000-0000000000a2", str(alive_dir)).prompt("more work").write(codex)
    Codex("019bcea6-0000-7000-8000-0000000000a3", str(tmp_path / "removed")).prompt("old").write(codex)
    bindings = [
        PaneBinding("%1", Harness.CLAUDE, top.session_id),
        PaneBinding("%2", Harness.CODEX, "019bcea6-0000-7000-8000-0000000000a2"),
        PaneBinding("%3", Harness.CODEX, "019bcea6-0000-7000-8000-0000000000a3"),
        PaneBinding("%4", Harness.CLAUDE, "b1b2b3"),
        PaneBinding("%5", Harness.CLAUDE, "never-indexed"),
    ]
    with HistoryService(tmp_path / "data", claude, codex, pane_pids=dict) as svc:
        plan = svc.restorable(bindings)
    assert [(i.pane_id, i.argv, i.cwd) for i in plan.items] == [
        ("%1", ("claude", "--resume", top.session_id), str(alive_dir)),
        ("%2", ("codex", "resume", "019bcea6-0000-7000-8000-0000000000a2"), str(alive_dir)),
    ]
    assert {s.pane_id: s.reason for s in plan.skipped} == {
        "%3": RestoreReason.CWD_GONE,
        "%4": RestoreReason.SUBAGENT,
        "%5": RestoreReason.NOT_INDEXED,
    }


def test_repo_argument_may_be_any_path_inside_the_repository(tmp_path):
    from tests.fixtures.history.transcripts import make_worktree

    claude, codex = tmp_path / "claude", tmp_path / "codex"
    main = make_repo(tmp_path / "main")
    wt = make_worktree(main, tmp_path / "wt", "wt")
    (main / "src").mkdir()
    Claude("3e0c2b7a-0000-4000-8000-0000000000d9", str(wt)).prompt("refactor the scheduler").write(claude)
    with HistoryService(tmp_path / "data", claude, codex, pane_pids=dict) as svc:
        for path in (str(main), str(main / "src"), str(wt)):
            assert [v["repo"] for v in svc.find_sessions("scheduler", repo=path)] == [str(main)]
        with pytest.raises(HistoryError, match="repo"):
            svc.find_sessions("scheduler", repo="  ")


def test_restorable_leaves_a_session_that_is_still_running(tmp_path):
    claude, codex = tmp_path / "claude", tmp_path / "codex"
    proj = make_repo(tmp_path / "proj")
    s = Claude("3e0c2b7a-0000-4000-8000-0000000000a9", str(proj)).prompt("work")
    s.write(claude)
    proc = spawn(SLEEPER)
    try:
        # Unverifiable (no start time recorded) but a live process claims it: not relaunched.
        register_claude(claude, proc.pid, s.session_id)
        with HistoryService(tmp_path / "data", claude, codex, pane_pids=dict) as svc:
            plan = svc.restorable([PaneBinding("%1", Harness.CLAUDE, s.session_id)])
        assert plan.items == ()
        assert [k.reason for k in plan.skipped] == [RestoreReason.ALREADY_RUNNING]
    finally:
        stop(proc)
