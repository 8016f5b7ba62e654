"""Directory facts for routing and hand-started agents, on a real daemon and a real tmux server.

- A launched agent in a git repository shows its repo, branch, session title and PR links; the
  handles ``pr:``, ``repo:`` and ``title:`` resolve to it, or are refused with the candidates' count;
  ``resolve`` ranks it first for "who has PR 12".
- A stand-in agent typed into a shell (hand-started) is bound from a session registry file written the
  way Claude Code writes it, granted by the person, and then receives a consented message.
- A Codex-shaped stand-in typed into a shell is bound from the rollout file it holds open, granted by
  the person, and receives a consented message: typed with its provenance line, the outcome delivered.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from connectd.cli.demo_agent import install_wrapper
from connectd.tmux import procfs
from tests.fixtures.history.transcripts import Claude, Codex, make_repo
from tests.integration.test_daemon_e2e import agents, get_message, run, send
from tests.support.daemon import DaemonProcess, call, mcp_agent, wait_for
from tests.support.fixtures import running_daemon
from tests.support.tmux_server import TmuxServer

SESSION = "7c0f3d52-9a61-4b8e-a1d2-3e4f5a6b7c8d"
TYPED = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"


def hand_started_note(harness: str, session: str) -> str:
    """What a hand-started agent's grant says (issue 23 item 7): not restart-to-connect, which refuses a
    pane connect did not start, but launch --here in its pane, resuming its session."""
    return ("connected: receives now; connect did not start it, so its tools arrive once it runs under connect: "
            f"quit it and run `connectd launch --here {harness} --session {session}` in its pane")


@pytest.fixture
def roots(tmp_path: Path) -> tuple[Path, Path]:
    return tmp_path / "claude", tmp_path / "codex"


@pytest.fixture
def daemon(tmp_path: Path, tmux: TmuxServer, roots: tuple[Path, Path]) -> Iterator[DaemonProcess]:
    (roots[0] / "sessions").mkdir(parents=True)
    web = make_repo(tmp_path / "web")
    (web / ".git" / "HEAD").write_text("ref: refs/heads/login-fix\n")
    Claude(SESSION, str(web), branch="login-fix").prompt("fix the login redirect loop").title(
        "custom-title", "Fix login redirect"
    ).pr_link(12).write(roots[0])
    with running_daemon(tmp_path, tmux, history_roots=roots) as d:
        yield d


async def _calls(d: DaemonProcess, token: str, *calls: tuple[str, dict[str, object]]) -> list[tuple[bool, object]]:
    async with mcp_agent(d.mcp_url, token) as client:
        return [await call(client, tool, **args) for tool, args in calls]


def test_facts_show_and_handles_resolve_or_are_refused_with_the_count(daemon: DaemonProcess, tmp_path: Path) -> None:
    web = str(tmp_path / "web")
    (a,) = agents(daemon, "a")
    c = daemon.launch("c", "off", session=SESSION, cwd=web)
    view = wait_for(lambda: (v := daemon.agent_view(c.pane))["session_title"] and v, 20, "the session title")
    assert view["repo"] == os.path.realpath(web) and view["branch"] == "login-fix"
    assert view["session_title"] == "Fix login redirect"
    assert view["pr_links"] == ["https://github.com/acme/widget/pull/12"]

    assert a.token
    (e1, by_pr), (e2, by_repo), (e3, by_title), (e4, found) = run(
        _calls, daemon, a.token,
        ("get_agent", {"target": "pr:12"}),
        ("get_agent", {"target": "repo:web"}),
        ("get_agent", {"target": "title:fix login redirect"}),
        ("resolve", {"query": "who has PR 12"}),
    )
    assert not (e1 or e2 or e3 or e4), (by_pr, by_repo, by_title, found)
    assert by_pr["data"]["pane"] == by_repo["data"]["pane"] == by_title["data"]["pane"] == c.pane  # type: ignore[index]
    first = found["data"][0]  # type: ignore[index]
    assert (first["kind"], first["pane"], first["matched"][0]) == ("live", c.pane, "pr:12")

    d2 = daemon.launch("d", "off", cwd=web)
    wait_for(lambda: daemon.agent_view(d2.pane)["repo"] == os.path.realpath(web), 15, "the second pane's repo")
    ((err, text),) = run(_calls, daemon, a.token, ("get_agent", {"target": "repo:web"}))
    assert err and "refused (ambiguous)" in str(text) and "matches 2 live panes" in str(text)


def _register(claude_root: Path, pid: int, session_id: str, cwd: str) -> None:
    """A session registry entry as Claude Code writes it (``<root>/sessions/<pid>.json``)."""
    start = procfs.process_start_time(pid)
    record = {
        "pid": pid, "sessionId": session_id, "cwd": cwd, "startedAt": int(time.time() * 1000),
        "procStart": str(start), "version": "2.1.332", "kind": "interactive", "entrypoint": "cli", "status": "idle",
    }
    (claude_root / "sessions" / f"{pid}.json").write_text(json.dumps(record, separators=(",", ":")))


def test_a_hand_started_agent_is_bound_from_the_registry_granted_and_receives(
    daemon: DaemonProcess, tmux: TmuxServer, roots: tuple[Path, Path]
) -> None:
    (a,) = agents(daemon, "a")
    log = daemon.tmp / "typed.jsonl"
    pane = tmux.tmux("new-window", "-d", "-P", "-F", "#{pane_id}", "-c", str(daemon.workdir)).strip()
    shell_pid = int(tmux.tmux("display-message", "-p", "-t", pane, "#{pane_pid}").strip())
    tmux.tmux("send-keys", "-t", pane, "-l", f"DEMO_AGENT_LOG={log} {daemon.tmp / 'bin' / 'claude'}")
    tmux.tmux("send-keys", "-t", pane, "Enter")
    agent_pid = wait_for(lambda: _demo_child(shell_pid), 10, "the typed agent's process")
    view = wait_for(lambda: (v := daemon.agent_view(pane)).get("harness") == "claude" and v, 10, "the typed agent read")
    assert view["session"] is None and view["launcher"] is None  # no launch record: nothing binds it yet

    _register(roots[0], agent_pid, TYPED, str(daemon.workdir))
    bound = wait_for(lambda: (v := daemon.agent_view(pane)).get("session") and v, 15, "the registry binding")
    assert bound["session"] == {"harness": "claude", "session_id": TYPED} and bound["connect"] == "off"

    granted = daemon.api("POST", f"/api/panes/{pane}/connect", {"preset": "collaborate"})
    assert granted["note"] == hand_started_note("claude", TYPED)
    view = daemon.agent_view(pane)
    assert view["connect"] == "collaborate" and view["reachable"] and view["note"] == granted["note"]

    err, queued = run(send, daemon, a, view["address"], "hello typed agent", "m-typed")
    assert not err, queued
    card = daemon.wait_card()
    assert card["recipient"] == f"agent:claude:{TYPED}"
    daemon.api("POST", f"/api/cards/{card['id']}/approve", {})
    wait_for(lambda: any("hello typed agent" in p for p in _prompts(log)), 15, "the message typed into the agent")


def _demo_child(shell_pid: int) -> int | None:
    for pid in procfs.children(shell_pid):
        argv = procfs.cmdline(pid) or []
        if any(a.endswith("demo_agent.py") for a in argv) and procfs.process_start_time(pid):
            return pid
    return None


def _prompts(log: Path) -> list[str]:
    if not log.exists():
        return []
    return [json.loads(x).get("prompt", "") for x in log.read_text().splitlines() if x.strip().endswith("}")]


CODEX_SESSION = "019a2b3c-4d5e-7f60-8a9b-0c1d2e3f4a5b"


def test_a_hand_started_codex_is_bound_from_the_rollout_file_it_holds_open(daemon: DaemonProcess, tmux: TmuxServer, roots: tuple[Path, Path]) -> None:
    rollout = roots[1] / "sessions" / "2026" / "12" / "03" / f"rollout-2026-12-03T17-00-00-{CODEX_SESSION}.jsonl"
    rollout.parent.mkdir(parents=True)
    rollout.write_text("")
    holder = f"import time; f = open({str(rollout)!r}, 'a'); print('codex stand-in'); time.sleep(600)"
    pane = tmux.tmux("new-window", "-d", "-P", "-F", "#{pane_id}", "-c", str(daemon.workdir)).strip()
    tmux.tmux("send-keys", "-t", pane, "-l", f'bash -c "exec -a codex {sys.executable} -c \\"{holder}\\""')
    tmux.tmux("send-keys", "-t", pane, "Enter")
    view = wait_for(lambda: (v := daemon.agent_view(pane)).get("session") and v, 20, "the rollout binding")
    assert view["session"] == {"harness": "codex", "session_id": CODEX_SESSION} and view["launcher"] is None


def test_a_hand_started_codex_is_bound_granted_and_receives_a_consented_message(
    daemon: DaemonProcess, tmux: TmuxServer, roots: tuple[Path, Path]
) -> None:
    (a,) = agents(daemon, "a")
    rollout = Codex(CODEX_SESSION, str(daemon.workdir)).prompt("look at the parser").write(roots[1])
    codex = install_wrapper(daemon.tmp / "bin", "codex")
    log = daemon.tmp / "typed-codex.jsonl"
    pane = tmux.tmux("new-window", "-d", "-P", "-F", "#{pane_id}", "-c", str(daemon.workdir)).strip()
    tmux.tmux("send-keys", "-t", pane, "-l", f"DEMO_AGENT_LOG={log} DEMO_AGENT_HOLD={rollout} {codex}")
    tmux.tmux("send-keys", "-t", pane, "Enter")
    view = wait_for(lambda: (v := daemon.agent_view(pane)).get("session") and v, 20, "the rollout binding")
    assert view["harness"] == "codex" and view["launcher"] is None and view["connect"] == "off"
    assert view["session"] == {"harness": "codex", "session_id": CODEX_SESSION}
    wait_for(lambda: (v := daemon.agent_view(pane))["activity"] == "idle" and v["composer"] == "empty", 15,
             "the typed Codex idle with an empty composer")

    granted = daemon.api("POST", f"/api/panes/{pane}/connect", {"preset": "collaborate"})
    assert granted["note"] == hand_started_note("codex", CODEX_SESSION)
    view = daemon.agent_view(pane)
    assert view["connect"] == "collaborate" and view["reachable"] and view["note"] == granted["note"], view
    assert view["actor"] == f"agent:codex:{CODEX_SESSION}"

    err, queued = run(send, daemon, a, view["address"], "please run the parser tests", "m-typed-codex")
    assert not err, queued
    assert queued["outcome"] == "queued"  # type: ignore[index]
    card = daemon.wait_card()
    assert (card["recipient"], card["recipient_pane"]) == (f"agent:codex:{CODEX_SESSION}", pane)
    assert _prompts(log) == [], "nothing is typed before the person approves"
    daemon.api("POST", f"/api/cards/{card['id']}/approve", {})
    typed = wait_for(lambda: [p for p in _prompts(log) if "please run the parser tests" in p], 15,
                     "the message typed into the Codex stand-in")
    assert len(typed) == 1
    provenance, text = typed[0].split("\n", 1)
    sender = daemon.agent_view(a.pane)["actor"]
    assert provenance.startswith(f"[connect] message {queued['ref']} from {sender} (pane {a.pane}).")  # type: ignore[index]
    assert text == "please run the parser tests"
    outcome = wait_for(lambda: (m := run(get_message, daemon, a, "m-typed-codex"))["outcome"] != "queued" and m, 15,
                       "the outcome")
    assert outcome["outcome"] == "delivered", outcome

