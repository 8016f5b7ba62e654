"""The control role end to end: a real ``connectd serve``, a private tmux server, stand-in agents, the
SDK's MCP client as control. Each act tool, each tier, each refusal."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio

from tests.support.daemon import ROOT, AgentHandle, DaemonProcess, call, mcp_agent, wait_for
from tests.support.tmux_server import TmuxServer


def control_and_pure(daemon: DaemonProcess) -> tuple[AgentHandle, AgentHandle]:
    ctl = daemon.launch("ctl", "off", control=True)
    pure = daemon.launch("pure", "off")
    for agent in (ctl, pure):
        daemon.wait_ready(agent)
    assert ctl.token
    return ctl, pure


def act_tool(daemon: DaemonProcess, agent: AgentHandle, tool: str, **args: Any) -> tuple[bool, Any]:
    async def go() -> tuple[bool, Any]:
        async with mcp_agent(daemon.mcp_url, agent.token or "") as client:
            return await call(client, tool, **args)

    return anyio.run(go)


def approve_and_wait(daemon: DaemonProcess, ctl: AgentHandle, act_id: str, decision: str = "approve") -> dict[str, Any]:
    daemon.api("POST", f"/api/acts/{act_id}/{decision}", {})
    err, outcome = act_tool(daemon, ctl, "get_act", act_id=act_id, wait=20)
    assert not err, outcome
    return outcome  # type: ignore[no-any-return]


def show_dialog(daemon: DaemonProcess, tmux: TmuxServer, agent: AgentHandle, command: str = "") -> None:
    tmux.tmux("send-keys", "-t", agent.pane, "-l", f"/dialog {command}".strip())
    tmux.tmux("send-keys", "-t", agent.pane, "Enter")
    wait_for(lambda: daemon.agent_view(agent.pane)["activity"] == "dialog", 10, "a dialog")


def screen(tmux: TmuxServer, pane: str) -> str:
    return tmux.tmux("capture-pane", "-p", "-t", pane)


def audit(daemon: DaemonProcess) -> list[dict[str, Any]]:
    page = daemon.api("GET", "/api/audit?limit=200")
    return page["items"] if isinstance(page, dict) else page  # type: ignore[no-any-return]


def test_send_keys_answers_the_question_on_its_card_after_the_person_taps(daemon: DaemonProcess, tmux: TmuxServer) -> None:
    ctl, pure = control_and_pure(daemon)
    show_dialog(daemon, tmux, pure)
    err, act = act_tool(daemon, ctl, "send_keys", to=pure.address, keys=["1"])
    assert not err, act
    assert act["state"] == "awaiting_consent" and act["tier"] == 2 and "Do you want to proceed?" in act["shown"]
    assert "[Yes / No]" in act["shown"]
    pending = daemon.api("GET", "/api/acts")
    assert [a["act_id"] for a in pending] == [act["act_id"]] and pending[0]["tier"] == 2
    assert "Allowed." not in screen(tmux, pure.pane)  # nothing before the tap
    outcome = approve_and_wait(daemon, ctl, act["act_id"])
    assert outcome["state"] == "done", outcome
    wait_for(lambda: "Allowed." in screen(tmux, pure.pane), 10, "the answer on screen")
    rows = [r for r in audit(daemon) if r["action"] == "send_keys"]
    assert {r["outcome"] for r in rows} >= {"awaiting_consent", "done"}
    assert all("role=control" in r["detail"] and "tier=2" in r["detail"] for r in rows)


def test_a_question_answered_meanwhile_is_never_answered_again(daemon: DaemonProcess, tmux: TmuxServer) -> None:
    ctl, pure = control_and_pure(daemon)
    show_dialog(daemon, tmux, pure)
    err, act = act_tool(daemon, ctl, "send_keys", to=pure.address, keys=["1"])
    assert not err, act
    tmux.tmux("send-keys", "-t", pure.pane, "2")  # the person answers by hand first
    wait_for(lambda: "Denied." in screen(tmux, pure.pane), 10, "the hand answer")
    outcome = approve_and_wait(daemon, ctl, act["act_id"])
    assert outcome["state"] == "stale", outcome
    assert "Allowed." not in screen(tmux, pure.pane)


def test_the_same_question_about_another_command_is_never_answered(daemon: DaemonProcess, tmux: TmuxServer) -> None:
    """Issue 21 item 2: the card shows the dialog's subject; the dialog replaced by the same question
    about another command ends the act stale and presses nothing."""
    ctl, pure = control_and_pure(daemon)
    show_dialog(daemon, tmux, pure, "echo harmless")
    err, act = act_tool(daemon, ctl, "send_keys", to=pure.address, keys=["1"])
    assert not err, act
    assert "echo harmless" in act["shown"] and "highlighted: Yes" in act["shown"], act["shown"]
    tmux.tmux("send-keys", "-t", pure.pane, "2")  # the dialog goes away ...
    wait_for(lambda: "Denied." in screen(tmux, pure.pane), 10, "the first dialog answered")
    show_dialog(daemon, tmux, pure, "rm -rf ~/important-project")  # ... and the same question comes back
    outcome = approve_and_wait(daemon, ctl, act["act_id"])
    assert outcome["state"] == "stale", outcome
    assert "Allowed." not in screen(tmux, pure.pane)


def test_send_keys_refusals(daemon: DaemonProcess, tmux: TmuxServer) -> None:
    ctl, pure = control_and_pure(daemon)
    err, text = act_tool(daemon, ctl, "send_keys", to=pure.address, keys=["1"])
    assert err and "no_question" in text
    show_dialog(daemon, tmux, pure)
    err, text = act_tool(daemon, ctl, "send_keys", to=pure.address, keys=["C-c"])
    assert err and "bad_key" in text
    err, text = act_tool(daemon, ctl, "send_keys", to=ctl.address, keys=["1"])
    assert err and ("self" in text or "no_question" in text)
    assert daemon.api("GET", "/api/acts") == []


def test_an_ordinary_agent_has_no_act_tool_and_act_is_never_grantable(daemon: DaemonProcess, tmux: TmuxServer) -> None:
    ctl, pure = control_and_pure(daemon)
    peer = daemon.launch("peer", "collaborate")
    daemon.wait_ready(peer)
    act_tools = {"send_keys", "launch_agent", "resume_session", "handoff", "shell_text", "close_pane", "get_act"}

    async def listed(agent: AgentHandle, era: str) -> set[str]:
        async with mcp_agent(daemon.mcp_url, agent.token or "", era) as client:
            return {t.name for t in (await client.list_tools()).tools}

    for era in ("legacy", "2026-07-28"):  # the tool list is per caller in both protocol eras
        assert act_tools <= anyio.run(listed, ctl, era)
        peer_tools = anyio.run(listed, peer, era)
        assert not act_tools & peer_tools and "send_message" in peer_tools
    for tool, args in [("send_keys", {"to": pure.address, "keys": ["1"]}), ("close_pane", {"to": pure.address}),
                       ("launch_agent", {"launcher": "demo", "cwd": str(daemon.workdir)}), ("get_act", {"act_id": "x"})]:
        err, text = act_tool(daemon, peer, tool, **args)
        assert err and "act" in text, (tool, text)
    for path, body in [
        ("/api/grants", {"harness": "claude", "session_id": "s", "preset": "act"}),
        (f"/api/panes/{peer.pane}/connect", {"preset": "act"}),
        ("/api/launch", {"launcher": "demo", "connect": "act", "cwd": str(daemon.workdir)}),
        ("/api/restart", {"pane": peer.pane, "preset": "act"}),
        ("/api/launch", {"launcher": "demo", "connect": "off", "cwd": str(daemon.workdir), "control": True}),
    ]:
        response = daemon.http().post(path, json=body)
        assert 400 <= response.status_code < 500, (path, response.text)
    assert "control_running" in daemon.http().post("/api/launch", json={"launcher": "demo", "connect": "off", "cwd": str(daemon.workdir), "control": True}).text
    cli = subprocess.run(
        [sys.executable, "-m", "connectd.cli", "launch", "demo", "--connect", "act", "--data-dir", str(daemon.data_dir)],
        capture_output=True, text=True, env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"},
    )
    assert cli.returncode == 2 and "invalid choice" in cli.stderr
    agents = {a["pane"]: a for a in daemon.api("GET", "/api/agents")}
    assert agents[ctl.pane]["control"] and not agents[peer.pane]["control"] and "act" not in agents[peer.pane]["scopes"]


def test_shell_text_types_the_exact_command_after_its_card(daemon: DaemonProcess, tmux: TmuxServer, tmp_path: Path) -> None:
    ctl, pure = control_and_pure(daemon)
    shell = tmux.tmux("new-window", "-P", "-F", "#{pane_id}", "-t", "main", "bash --norc --noprofile").strip()
    # shell_text is refused until the daemon has read the pane as a shell (its kind comes from the screen)
    wait_for(lambda: any(a["pane"] == shell and a["harness"] == "shell" for a in daemon.api("GET", "/api/agents")), 10, "the shell pane read as a shell")
    address = next(a["address"] for a in daemon.api("GET", "/api/agents") if a["pane"] == shell)
    err, text = act_tool(daemon, ctl, "shell_text", to=pure.address, text="ls")
    assert err and "not_a_shell" in text
    target = tmp_path / "from-control.txt"
    err, act = act_tool(daemon, ctl, "shell_text", to=address, text=f"echo hello > {target}")
    assert not err, act
    assert act["tier"] == 3 and f"echo hello > {target}" in act["shown"]
    assert approve_and_wait(daemon, ctl, act["act_id"])["state"] == "done"
    wait_for(target.exists, 10, "the command ran")
    err, declined = act_tool(daemon, ctl, "shell_text", to=address, text=f"rm {target}")
    assert approve_and_wait(daemon, ctl, declined["act_id"], "decline")["state"] == "declined"
    assert target.exists()


def test_shell_text_is_stale_after_a_draft_or_with_a_program_in_the_foreground(
        daemon: DaemonProcess, tmux: TmuxServer, tmp_path: Path) -> None:
    """Issue 21 item 4: a half-typed draft after the prompt, or python3 started in the shell after the
    card, ends the act stale; nothing is typed."""
    ctl, _ = control_and_pure(daemon)
    shell = tmux.tmux("new-window", "-P", "-F", "#{pane_id}", "-t", "main", "bash --norc --noprofile").strip()
    wait_for(lambda: any(a["pane"] == shell and a["harness"] == "shell" for a in daemon.api("GET", "/api/agents")), 10, "the shell pane read as a shell")
    address = next(a["address"] for a in daemon.api("GET", "/api/agents") if a["pane"] == shell)
    target = tmp_path / "card.txt"
    err, act = act_tool(daemon, ctl, "shell_text", to=address, text=f"echo CARD-TEXT > {target}")
    assert not err, act
    tmux.tmux("send-keys", "-t", shell, "-l", "echo DRAFT-PREFIX-")  # a half-typed draft
    wait_for(lambda: "DRAFT-PREFIX-" in screen(tmux, shell), 10, "the draft")
    assert approve_and_wait(daemon, ctl, act["act_id"])["state"] == "stale"
    assert not target.exists() and "CARD-TEXT" not in screen(tmux, shell)
    tmux.tmux("send-keys", "-t", shell, "C-u")
    err, act = act_tool(daemon, ctl, "shell_text", to=address, text=f"echo CARD-TEXT > {target}")
    assert not err, act
    tmux.tmux("send-keys", "-t", shell, "-l", "python3 -q")
    tmux.tmux("send-keys", "-t", shell, "Enter")
    wait_for(lambda: ">>>" in screen(tmux, shell), 10, "python3 in the foreground")
    assert approve_and_wait(daemon, ctl, act["act_id"])["state"] == "stale"
    assert not target.exists() and "CARD-TEXT" not in screen(tmux, shell)


def test_launch_agent_and_close_pane(daemon: DaemonProcess, tmux: TmuxServer) -> None:
    ctl, pure = control_and_pure(daemon)
    before = {a["pane"] for a in daemon.api("GET", "/api/agents")}
    err, act = act_tool(daemon, ctl, "launch_agent", launcher="demo", cwd=str(daemon.workdir), preset="off")
    assert not err, act
    outcome = approve_and_wait(daemon, ctl, act["act_id"])
    assert outcome["state"] == "done" and "opened" in outcome["detail"], outcome
    wait_for(lambda: len({a["pane"] for a in daemon.api("GET", "/api/agents")} - before) == 1, 10, "the new window")
    err, text = act_tool(daemon, ctl, "launch_agent", launcher="nope", cwd=str(daemon.workdir))
    assert err and "unknown_launcher" in text
    assert ("refused", "role=control tier=2 unknown_launcher") in {(r["outcome"], r["detail"]) for r in audit(daemon) if r["action"] == "launch_agent"}
    err, act = act_tool(daemon, ctl, "close_pane", to=pure.address)
    assert not err and act["tier"] == 3
    assert approve_and_wait(daemon, ctl, act["act_id"])["state"] == "done"
    wait_for(lambda: pure.pane not in {a["pane"] for a in daemon.api("GET", "/api/agents")}, 10, "the pane closed")


def test_control_messages_a_pure_agent_and_hands_off(daemon: DaemonProcess, tmux: TmuxServer) -> None:
    ctl, pure = control_and_pure(daemon)

    async def send() -> tuple[bool, Any]:
        async with mcp_agent(daemon.mcp_url, ctl.token or "") as client:
            return await call(client, "send_message", to=pure.address, text="from control", message_id="c-1")

    err, sent = anyio.run(send)
    assert not err and sent["outcome"] == "queued", sent
    card = daemon.wait_card()
    daemon.api("POST", f"/api/cards/{card['id']}/approve", {"pair": False})
    wait_for(lambda: any("from control" in p for p in pure.prompts()), 20, "control's message typed")
    actor = daemon.agent_view(ctl.pane)["actor"]
    assert any(f"from {actor} (control agent, pane {ctl.pane})" in p for p in pure.prompts())  # provenance names control
    err, act = act_tool(daemon, ctl, "handoff", text="please take over the release", to=pure.address)
    assert not err and act["tier"] == 2, act
    assert approve_and_wait(daemon, ctl, act["act_id"])["state"] == "done"
    wait_for(lambda: any("take over the release" in p for p in pure.prompts()), 20, "the handoff typed")


def test_stopping_control_cancels_its_pending_acts_and_its_calls(daemon: DaemonProcess, tmux: TmuxServer) -> None:
    ctl, pure = control_and_pure(daemon)
    err, act = act_tool(daemon, ctl, "close_pane", to=pure.address)
    assert not err
    stopped = daemon.api("POST", "/api/control/stop", {})
    assert len(stopped["stopped"]) == 1
    acts = {a["act_id"]: a for a in daemon.api("GET", "/api/acts?all=1")}
    assert acts[act["act_id"]]["state"] == "cancelled"
    err, text = act_tool(daemon, ctl, "close_pane", to=pure.address)
    assert err
    daemon.api("POST", "/api/control/stop", {}, expect=400)
    again = daemon.launch("ctl2", "off", control=True)  # none running now: a new control may start
    assert again.token


def test_resume_session_reopens_a_past_session_in_its_own_cwd_with_its_resume_argv(tmp_path: Path, tmux: TmuxServer) -> None:
    from tests.fixtures.history.transcripts import Claude, make_repo

    session = "5c1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
    claude_root, codex_root = tmp_path / "claude", tmp_path / "codex"
    work = make_repo(tmp_path / "past-work")
    Claude(session, str(work), branch="main").prompt("ship the release notes").write(claude_root)
    elsewhere_session = "5c1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4e"
    elsewhere = make_repo(tmp_path / "another-repo")
    Claude(elsewhere_session, str(elsewhere), branch="main").prompt("private plans").write(claude_root)
    d = DaemonProcess(tmp_path, tmux, history_roots=(claude_root, codex_root)).start()
    try:
        ctl = d.launch("ctl", "off", control=True, cwd=str(work))  # control reads and resumes its own repository's sessions
        d.wait_ready(ctl)
        err, text = act_tool(d, ctl, "resume_session", harness="claude", session_id="no-such-session")
        assert err, text
        # issue 21 (also seen): one rule for get_session and resume_session: outside control's repository
        # both are refused, no card is made and the other session's directory is not shown
        err, got = act_tool(d, ctl, "get_session", harness="claude", session_id=elsewhere_session)
        assert err and "outside the repositories this caller may read" in str(got), got
        err, text = act_tool(d, ctl, "resume_session", harness="claude", session_id=elsewhere_session)
        assert err and "outside the repositories this caller may read" in str(text), text
        assert str(elsewhere) not in str(text)
        assert d.api("GET", "/api/acts?all=1") == []
        err, act = act_tool(d, ctl, "resume_session", harness="claude", session_id=session)
        assert not err, act
        assert act["tier"] == 2 and session in act["shown"] and str(work) in act["shown"]
        outcome = approve_and_wait(d, ctl, act["act_id"])
        assert outcome["state"] == "done", outcome
        view = wait_for(
            lambda: next((a for a in d.api("GET", "/api/agents") if (a["session"] or {}).get("session_id") == session), None),
            20, "the resumed pane",
        )
        assert view["cwd"] == str(work) and view["connect"] == "off"
        pid = tmux.tmux("display-message", "-p", "-t", view["pane"], "#{pane_pid}").strip()
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        assert argv[-3:-1] == [b"--resume", session.encode()]
        rows = [r for r in audit(d) if r["action"] == "resume_session"]
        assert rows and all(r["actor"].startswith("agent:claude:") and "role=control" in r["detail"] for r in rows)
    finally:
        d.stop()


def test_restore_brings_a_lost_control_back_as_control(tmp_path: Path, tmux: TmuxServer) -> None:
    from tests.fixtures.history.transcripts import Claude, make_repo

    session = "6d1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
    claude_root, codex_root = tmp_path / "claude", tmp_path / "codex"
    work = make_repo(tmp_path / "ctl-work")
    Claude(session, str(work), branch="main").prompt("orchestrate").write(claude_root)
    d = DaemonProcess(tmp_path, tmux, history_roots=(claude_root, codex_root)).start()
    try:
        ctl = d.launch("ctl", "off", control=True, session=session)
        d.wait_ready(ctl)
        assert d.agent_view(ctl.pane)["control"]
        tmux.kill()
        tmux.new_session("main", width=160, height=40)
        wait_for(lambda: d.api("GET", "/api/restore")["items"], 20, "the lost control listed")
        [launched] = d.api("POST", "/api/restore", {})["launched"]
        assert launched["control"] is True
        view = wait_for(lambda: d.agent_view(launched["pane"]) if d.agent_view(launched["pane"])["address"] else None, 20, "restored")
        assert view["control"] and "act" in view["scopes"]
    finally:
        d.stop()


def test_the_cli_lists_and_answers_acts_and_stops_control(daemon: DaemonProcess, tmux: TmuxServer) -> None:
    import json
    import os

    ctl, pure = control_and_pure(daemon)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}

    def cli(*args: str) -> str:
        out = subprocess.run(
            [sys.executable, "-m", "connectd.cli", *args, "--data-dir", str(daemon.data_dir), "--port", str(daemon.port)],
            capture_output=True, text=True, env=env, timeout=60,
        )
        assert out.returncode == 0, out.stderr
        return out.stdout

    err, act = act_tool(daemon, ctl, "close_pane", to=pure.address)
    assert not err, act
    assert "tier 3" in cli("acts")
    [listed] = json.loads(cli("acts", "--json"))
    assert listed["act_id"] == act["act_id"] and listed["tier"] == 3
    assert "declined" in cli("acts", "decline", act["act_id"])
    assert "stopped control" in cli("control", "stop")
    assert "act" not in daemon.agent_view(ctl.pane)["scopes"]


def test_the_control_handle_names_the_running_control(daemon: DaemonProcess, tmux: TmuxServer) -> None:
    ctl, _pure = control_and_pure(daemon)
    peer = daemon.launch("peer", "collaborate")
    daemon.wait_ready(peer)

    async def ask() -> tuple[tuple[bool, Any], tuple[bool, Any]]:
        async with mcp_agent(daemon.mcp_url, peer.token or "") as client:
            found = await call(client, "get_agent", target="control")
            sent = await call(client, "send_message", to="control", text="status report for control", message_id="to-ctl")
            return found, sent

    (err, found), (sent_err, sent) = anyio.run(ask)
    assert not err and found["data"]["pane"] == ctl.pane, found
    assert not sent_err and sent["to"] == ctl.address, sent
    card = daemon.wait_card()
    daemon.api("POST", f"/api/cards/{card['id']}/approve", {"pair": False})
    wait_for(lambda: any("status report for control" in p for p in ctl.prompts()), 20, "delivered to control")
    daemon.api("POST", "/api/control/stop", {})

    async def again() -> tuple[bool, Any]:
        async with mcp_agent(daemon.mcp_url, peer.token or "") as client:
            return await call(client, "get_agent", target="control")

    err, text = anyio.run(again)
    assert err and "no_pane" in text


def test_an_act_card_survives_a_daemon_restart_and_expires_like_a_message_card(tmp_path: Path, tmux: TmuxServer) -> None:
    d = DaemonProcess(tmp_path, tmux, policy="cap = \"observe\"\n[limits]\ncard_ttl = 6.0\n").start()
    try:
        ctl = d.launch("ctl", "off", control=True)
        pure = d.launch("pure", "off")
        for agent in (ctl, pure):
            d.wait_ready(agent)
        err, text = act_tool(d, ctl, "launch_agent", launcher="demo", cwd=str(d.workdir), preset="collaborate")
        assert err and "above_cap" in text  # the person's cap binds control's launches
        err, act = act_tool(d, ctl, "close_pane", to=pure.address)
        assert not err, act
        d.stop()
        d.start()  # the card is still there after a restart, and still answerable
        assert [a["act_id"] for a in d.api("GET", "/api/acts")] == [act["act_id"]]
        err, outcome = act_tool(d, ctl, "get_act", act_id=act["act_id"], wait=10)
        assert not err and outcome["state"] == "expired", outcome
        assert d.api("GET", "/api/acts") == []
        assert pure.pane in {a["pane"] for a in d.api("GET", "/api/agents")}  # nothing ran
        # too late: an expired card cannot be approved
        assert d.http().post(f"/api/acts/{act['act_id']}/approve", json={}).status_code >= 400
    finally:
        d.stop()


def test_handoff_to_a_session_no_pane_holds_resumes_it_then_messages_it(tmp_path: Path, tmux: TmuxServer) -> None:
    from tests.fixtures.history.transcripts import Claude, make_repo

    session = "7e1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
    claude_root, codex_root = tmp_path / "claude", tmp_path / "codex"
    work = make_repo(tmp_path / "handoff-work")
    Claude(session, str(work), branch="main").prompt("the flaky test").write(claude_root)
    d = DaemonProcess(tmp_path, tmux, history_roots=(claude_root, codex_root)).start()
    try:
        ctl = d.launch("ctl", "off", control=True, cwd=str(work))  # a session of its own repository
        d.wait_ready(ctl)
        err, act = act_tool(d, ctl, "handoff", session=f"claude:{session}", text="please finish the flaky test fix")
        assert not err, act
        assert act["target"] == "new window" and "please finish the flaky test fix" in act["shown"]
        outcome = approve_and_wait(d, ctl, act["act_id"])
        assert outcome["state"] == "done" and "queued" in outcome["detail"], outcome["detail"]
        view = wait_for(
            lambda: next((a for a in d.api("GET", "/api/agents") if (a["session"] or {}).get("session_id") == session), None),
            20, "the resumed pane",
        )
        err, message = act_tool(d, ctl, "get_message", message_id=f"handoff-{act['act_id']}", wait=30)
        assert not err and message["outcome"] == "delivered", message
        assert message["to"].startswith(view["pane"] + "@")
    finally:
        d.stop()


def test_an_act_argument_with_control_characters_is_refused_over_mcp_and_nothing_is_carded(
    daemon: DaemonProcess, tmux: TmuxServer
) -> None:
    """Issue 21 item 5, end to end: a cwd holding cursor movement or a bidi override (which redrew one
    card over another in a terminal) is refused at proposal with a tool error naming it; no card, no act
    id consumed, and `connectd acts` afterwards shows none."""
    ctl, _pure = control_and_pure(daemon)
    for bad in (f"{daemon.workdir}\x1b[2K\x1b[1A", f"{daemon.workdir}/\u202egnp.txt", f"{daemon.workdir}\rls -la"):
        err, text = act_tool(daemon, ctl, "launch_agent", launcher="demo", cwd=bad)
        assert err and "control" in str(text).lower(), (bad, text)
        assert "\x1b" not in str(text) and "\u202e" not in str(text), text  # the refusal shows it escaped
    assert daemon.api("GET", "/api/acts") == []
    err, act = act_tool(daemon, ctl, "launch_agent", launcher="demo", cwd=str(daemon.workdir), preset="off")
    assert not err and act["act_id"], act  # the refusals consumed nothing: the next proposal is carded


def test_an_act_argument_with_a_control_or_bidi_character_is_refused_and_a_card_shows_them_escaped(
    daemon: DaemonProcess, tmux: TmuxServer
) -> None:
    """Issue 21 item 5 end to end: control's launch_agent with a cwd holding an erase-line escape or a
    right-to-left override is a tool error naming the argument and the character, and leaves no act
    (nothing stored, audited as refused); a card whose shown text holds such characters (a dialog's
    subject read off the screen) shows them as escapes, and so does `connectd acts`, never raw."""
    import json
    import os

    ctl, pure = control_and_pure(daemon)
    for cwd, shown in ((f"{daemon.workdir}/x\x1b[2K", "'\\x1b'"), (f"{daemon.workdir}/x\r", "'\\r'"),
                       (f"{daemon.workdir}/\u202etxt.exe", "'\\u202e'")):
        err, text = act_tool(daemon, ctl, "launch_agent", launcher="demo", cwd=cwd)
        assert err and "control_character" in text and "launch_agent's cwd" in text and shown in text, text
    assert daemon.api("GET", "/api/acts?all=1") == []
    refused = [r for r in audit(daemon) if r["action"] == "launch_agent"]
    assert len(refused) == 3 and all(r["outcome"] != "awaiting_consent" for r in refused), refused

    show_dialog(daemon, tmux, pure, "echo \u202eharmless\u200b")
    err, act = act_tool(daemon, ctl, "send_keys", to=pure.address, keys=["1"])
    assert not err, act
    assert "harmless" in act["shown"] and not any(ch in act["shown"] for ch in "\u202e\u200b"), act["shown"]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    out = subprocess.run(
        [sys.executable, "-m", "connectd.cli", "acts", "--data-dir", str(daemon.data_dir), "--port", str(daemon.port)],
        capture_output=True, text=True, env=env, timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert "\\u202eharmless\\u200b" in out.stdout, out.stdout
    assert not any(ch in out.stdout for ch in "\x1b\u202e\u200b"), out.stdout
    assert [a["act_id"] for a in json.loads(subprocess.run(
        [sys.executable, "-m", "connectd.cli", "acts", "--json", "--data-dir", str(daemon.data_dir), "--port", str(daemon.port)],
        capture_output=True, text=True, env=env, timeout=60, check=True).stdout)] == [act["act_id"]]


def test_review_a_pane_titled_control_is_not_control_and_control_stop_ends_every_card_and_token(
    daemon: DaemonProcess, tmux: TmuxServer
) -> None:
    """Issue 21's review, redone: (1) a pane titled ``control`` (as any process can, OSC 2) is not what
    the ``control`` handle names and gains nothing; (2) an act card still awaiting consent when
    ``control stop`` runs is cancelled and can no longer be approved into an action; (3) control's old token, reused
    after the stop, proposes nothing and lists no act tool."""
    ctl, pure = control_and_pure(daemon)
    peer = daemon.launch("peer", "collaborate")
    daemon.wait_ready(peer)
    # (1) the mimic: an ordinary agent pane whose title reads "control"
    tmux.tmux("select-pane", "-t", peer.pane, "-T", "control")
    wait_for(lambda: daemon.agent_view(peer.pane)["title"] == "control", 10, "the mimic's title")

    async def ask() -> tuple[bool, Any]:
        async with mcp_agent(daemon.mcp_url, peer.token or "") as client:
            return await call(client, "get_agent", target="control")

    err, found = anyio.run(ask)
    assert not err and found["data"]["pane"] == ctl.pane, found
    mimic = daemon.agent_view(peer.pane)
    assert not mimic["control"] and "act" not in mimic["scopes"], mimic

    # (2) a card awaiting consent, then control stop, then the person taps approve
    err, act = act_tool(daemon, ctl, "close_pane", to=pure.address)
    assert not err and act["state"] == "awaiting_consent", act
    daemon.api("POST", "/api/control/stop", {})
    response = daemon.http().post(f"/api/acts/{act['act_id']}/approve", json={})
    time.sleep(1.0)
    assert daemon.agent_view(pure.pane)["activity"] != "gone", (response.status_code, response.text)
    assert not [a for a in daemon.api("GET", "/api/acts") if a["state"] == "awaiting_consent"]
    states = {a["act_id"]: a["state"] for a in daemon.api("GET", "/api/acts?all=1")}
    assert states[act["act_id"]] == "cancelled", states
    assert response.status_code == 409 and "card_closed" in response.text, response.text

    # (3) the old token after the stop
    async def reuse() -> tuple[set[str], tuple[bool, Any]]:
        async with mcp_agent(daemon.mcp_url, ctl.token or "") as client:
            tools = {t.name for t in (await client.list_tools()).tools}
            return tools, await call(client, "close_pane", to=pure.address)

    tools, (err, text) = anyio.run(reuse)
    assert not {"close_pane", "launch_agent", "send_keys"} & tools, tools
    assert err and "not_connected" in text, text
    assert daemon.api("GET", "/api/acts") == []
    assert daemon.agent_view(pure.pane)["activity"] != "gone"


def test_review_proposals_racing_control_stop_leave_no_card_to_approve(daemon: DaemonProcess, tmux: TmuxServer) -> None:
    """Review: control proposes close_pane over and over while the person runs ``control stop``; once the
    stop has answered, no act awaits consent, none is done, and the pane is still there."""
    ctl, pure = control_and_pure(daemon)

    async def race() -> list[tuple[bool, Any]]:
        results: list[tuple[bool, Any]] = []
        stopped = anyio.Event()

        async def propose(client: Any) -> None:
            # until the stop has answered, and twice after it (bounded): however slow the machine, the
            # race has proposals on both sides of the stop
            after = 0
            for _ in range(400):
                results.append(await call(client, "close_pane", to=pure.address))
                after += stopped.is_set()
                if after >= 2:
                    return

        async with mcp_agent(daemon.mcp_url, ctl.token or "") as client, anyio.create_task_group() as tg:
            tg.start_soon(propose, client)
            await anyio.sleep(0.05)
            await anyio.to_thread.run_sync(lambda: daemon.api("POST", "/api/control/stop", {}))
            stopped.set()
        return results

    results = anyio.run(race)
    refused = [i for i, (err, _) in enumerate(results) if err]
    assert refused and refused == list(range(refused[0], len(results))), results  # none accepted after a refusal
    assert all("not_connected" in str(text) for _, text in results[refused[0]:]), results
    assert daemon.api("GET", "/api/acts") == []
    states = {a["state"] for a in daemon.api("GET", "/api/acts?all=1")}
    assert states <= {"cancelled"}, states
    time.sleep(1.0)
    assert daemon.agent_view(pure.pane)["activity"] != "gone"
    assert "act" not in daemon.agent_view(ctl.pane)["scopes"]

