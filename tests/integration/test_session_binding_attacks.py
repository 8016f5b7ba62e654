"""Issue 21.1 on real tmux: which open files bind a hand-started Codex pane to a session.

A file name is written by whoever creates the file, so only Codex's own rollout counts: named like
one, under a Codex sessions directory, held open for writing by the harness process itself. Each
attacking pane below holds a file named after a session id in some other way and must stay unbound,
while a pane that holds its rollout the way Codex does is bound (so the scan did run). (A file held by
a child of the harness is refused by the core rule, tests/unit/test_directory.py.)
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from tests.integration.test_directory_routing import daemon, roots  # noqa: F401 - fixtures
from tests.support.daemon import DaemonProcess, wait_for
from tests.support.tmux_server import TmuxServer

GOOD = "019a2b3c-4d5e-7f60-8a9b-0c1d2e3f4a00"


def _sid(n: int) -> str:
    return f"019a2b3c-4d5e-7f60-8a9b-0c1d2e3f4a{n:02d}"


def _rollout(directory: Path, sid: str) -> Path:
    path = directory / f"rollout-2026-12-03T17-00-00-{sid}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch()
    return path


def _pane(daemon: DaemonProcess, tmux: TmuxServer, command: str) -> str:  # noqa: F811
    pane = tmux.tmux("new-window", "-d", "-P", "-F", "#{pane_id}", "-c", str(daemon.workdir)).strip()
    tmux.tmux("send-keys", "-t", pane, "-l", command)
    tmux.tmux("send-keys", "-t", pane, "Enter")
    return pane


def _codex_holding(path: Path, mode: str) -> str:
    """A process whose argv[0] is ``codex`` that holds ``path`` open in ``mode``."""
    holder = f"import time; f = open({str(path)!r}, {mode!r}); print('codex stand-in'); time.sleep(600)"
    return f'bash -c "exec -a codex {sys.executable} -c \\"{holder}\\""'


def test_only_a_rollout_codex_itself_writes_in_its_sessions_directory_binds(
    daemon: DaemonProcess, tmux: TmuxServer, roots: tuple[Path, Path], tmp_path: Path  # noqa: F811
) -> None:
    sessions = roots[1] / "sessions" / "2026" / "12" / "03"
    elsewhere = tmp_path / "elsewhere"
    read_only = _pane(daemon, tmux, _codex_holding(_rollout(sessions, _sid(1)), "r"))
    outside = _pane(daemon, tmux, _codex_holding(_rollout(elsewhere, _sid(2)), "a"))
    target = elsewhere / "notes.jsonl"
    target.touch()
    link = sessions / f"rollout-2026-12-03T17-00-00-{_sid(4)}.jsonl"
    os.symlink(target, link)
    symlinked = _pane(daemon, tmux, _codex_holding(link, "a"))
    attackers = {read_only: "read-only", outside: "outside sessions", symlinked: "symlink"}
    time.sleep(1.0)
    good = _pane(daemon, tmux, _codex_holding(_rollout(sessions, GOOD), "a"))
    view = wait_for(lambda: (v := daemon.agent_view(good)).get("session") and v, 20, "the genuine rollout binding")
    assert view["session"] == {"harness": "codex", "session_id": GOOD}
    time.sleep(3.0)  # several more bind rounds
    for pane, why in attackers.items():
        view = daemon.agent_view(pane)
        assert view["harness"] == "codex", (why, view)
        assert view.get("session") is None, (why, view)


CONTROL = "019a2b3c-4d5e-7f60-8a9b-0c1d2e3f4aff"
ACT_TOOLS = {"send_keys", "launch_agent", "resume_session", "handoff", "shell_text", "close_pane", "get_act"}


def test_an_observe_codex_holding_a_rollout_named_after_control_never_gains_act(
    daemon: DaemonProcess, tmux: TmuxServer, roots: tuple[Path, Path]  # noqa: F811
) -> None:
    """Issue 21 item 1, the attack as the review ran it, end to end: a running control Codex holds its
    rollout; an Observe stand-in Codex that connect launched holds open, for writing, in the Codex
    sessions directory, a file named after control's session. Before, its token became control's
    principal with `act` and got a launch_agent card; also once control's pane closed. Now its scopes
    stay Observe's (read, history) while control runs and after it is gone, it lists no act tool, and
    launch_agent is refused with no card (as the wire says: an unknown tool)."""
    import anyio

    from connectd.cli.demo_agent import install_wrapper
    from tests.support.daemon import call, mcp_agent

    codex = install_wrapper(daemon.tmp / "bin", "codex")
    with (daemon.data_dir / "launchers.toml").open("a") as f:
        f.write(f'[launchers.cx]\nharness = "codex"\nargv = ["{codex}"]\nresume = ["{codex}", "resume", "{{session_id}}"]\n')
    daemon.stop()
    daemon.start()
    sessions = roots[1] / "sessions" / "2026" / "12" / "03"
    ctl_rollout = _rollout(sessions, CONTROL)
    ctl = daemon.launch("ctl", "collaborate", launcher="cx", control=True, env={"DEMO_AGENT_HOLD": str(ctl_rollout)})
    wait_for(lambda: (daemon.agent_view(ctl.pane).get("session") or {}).get("session_id") == CONTROL, 20, "control bound")
    forged = _rollout(roots[1] / "sessions" / "2026" / "12" / "04", CONTROL)  # another file, control's session id
    spy = daemon.launch("spy", "observe", launcher="cx", env={"DEMO_AGENT_HOLD": str(forged)})
    assert spy.token

    async def what_it_holds() -> tuple[set[str], dict[str, object], tuple[bool, object]]:
        async with mcp_agent(daemon.mcp_url, spy.token or "") as client:
            tools = {t.name for t in (await client.list_tools()).tools}
            err, who = await call(client, "whoami")
            assert not err, who
            launched = await call(client, "launch_agent", launcher="cx", cwd=str(daemon.workdir))
            return tools, who, launched  # type: ignore[return-value]

    def check(when: str) -> None:
        time.sleep(3)  # several watcher polls: the forged file has been seen
        tools, who, (refused, said) = anyio.run(what_it_holds)
        assert not tools & ACT_TOOLS, (when, tools)
        assert sorted(who["scopes"]) == ["history", "read"], (when, who)  # type: ignore[call-overload]
        assert who["actor"] != f"agent:codex:{CONTROL}" or sorted(who["scopes"]) == ["history", "read"], (when, who)
        assert refused, (when, said)
        assert daemon.api("GET", "/api/acts") == [], (when, "an act card was opened")

    check("while control runs")
    tmux.tmux("kill-pane", "-t", ctl.pane)
    wait_for(lambda: all(a["pane"] != ctl.pane for a in daemon.api("GET", "/api/agents")), 15, "control's pane gone")
    check("after control's pane closed")


CLAUDE_CONTROL = "5c3a6e44-1c3e-4d52-9d6c-2f7e5c1d9aff"


def test_a_claude_registry_record_forged_for_control_s_session_never_raises_a_grant(
    daemon: DaemonProcess, tmux: TmuxServer, roots: tuple[Path, Path]  # noqa: F811
) -> None:
    """Issue 21 item 1, Claude's registry: any process running as the person can write
    `<claude root>/sessions/<its pid>.json` naming any session, with its own pid and start time (so the
    record is "trusted"). A hand-started Claude stand-in writes one naming the running control's
    session. While control runs the record binds nothing (its session is held); once control's pane
    closed it binds, and connecting the pane in place is refused (before: the pane joined control's
    principal and was listed as control with act)."""
    from connectd.cli.demo_agent import install_wrapper

    ctl = daemon.launch("ctl", "collaborate", control=True, session=CLAUDE_CONTROL)
    wait_for(lambda: daemon.agent_view(ctl.pane).get("control"), 15, "control running")
    claude = install_wrapper(daemon.tmp / "bin", "claude")
    registry = roots[0] / "sessions"
    registry.mkdir(parents=True, exist_ok=True)
    forge = daemon.tmp / "forge.py"  # writes a registry record for its parent (the shell about to exec claude)
    forge.write_text(
        "import json, os, sys, time\n"
        "pid = os.getppid()\n"
        "start = int(open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()[19])\n"
        "record = {'pid': pid, 'sessionId': sys.argv[2], 'cwd': os.getcwd(),\n"
        "          'startedAt': int(time.time() * 1000), 'procStart': start}\n"
        "json.dump(record, open(os.path.join(sys.argv[1], f'{pid}.json'), 'w'))\n"
    )
    # bash writes the record for its own pid (through a child), then becomes the stand-in (same pid)
    pane = _pane(daemon, tmux, f"bash -c '{sys.executable} {forge} {registry} {CLAUDE_CONTROL} && exec {claude}'")
    try:
        wait_for(lambda: daemon.agent_view(pane).get("harness") == "claude", 15, "the stand-in drawn")
    except AssertionError:
        raise AssertionError(tmux.tmux("capture-pane", "-p", "-t", pane)) from None
    wait_for(lambda: any(registry.glob("*.json")), 10, "the forged record")
    time.sleep(3)  # several binding scans
    # while control runs its session is held: the forged record binds nothing, so Connect is refused
    refused = daemon.http().post(f"/api/panes/{pane}/connect", json={"preset": "observe"})
    assert refused.status_code == 409 and refused.json()["error"] == "ambiguous_binding", refused.text
    view = daemon.agent_view(pane)
    assert view["connect"] == "off" and not view.get("control") and not view.get("session"), view
    tmux.tmux("kill-pane", "-t", ctl.pane)
    wait_for(lambda: all(a["pane"] != ctl.pane for a in daemon.api("GET", "/api/agents")), 15, "control's pane gone")
    # once no live process holds it, the record binds the pane to that session; connecting it in place
    # would join control's principal (act): refused, naming why, nothing changed (before: the pane was
    # listed as control, with act, message, reachable)
    wait_for(lambda: (daemon.agent_view(pane).get("session") or {}).get("session_id") == CLAUDE_CONTROL, 15, "bound")
    answer = daemon.http().post(f"/api/panes/{pane}/connect", json={"preset": "observe"})
    assert answer.status_code == 400 and answer.json()["error"] == "control_session", answer.text
    time.sleep(2)
    view = daemon.agent_view(pane)
    assert view["connect"] == "off" and not view.get("control"), (answer.text, {k: view.get(k) for k in ("connect", "control", "actor", "scopes")})
    assert daemon.api("GET", "/api/acts") == []
