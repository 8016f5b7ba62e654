"""Live acceptance for OpenCode (issue 14 item 3): a real OpenCode (the pinned 1.18.33), launched
connected by a real ``connectd launch``, is bound to the session connectd created on its own server,
sees connect's MCP tools and calls them, and receives a message a real Claude Code agent sent once
the person approved it; and an OpenCode launched with connect Off (bound all the same, through its own
server) is restarted to connect onto the same session.

Offline and private as tests/integration/test_live.py: the scripted model server (OpenCode speaks
Anthropic Messages to it, on the ``claude`` queue under its own key), private HOMEs, a private tmux
server, a real ``connectd serve``. ``make compat OPENCODE=<release>`` runs this test per release (a
release not verified yet runs under ``--trust-release``, as the rig does for any release under test).

    pytest -m live -s tests/integration/test_live_opencode.py
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from connectcore import opencode_binding as OC
from tests.support import harnesses as H
from tests.support.live import (
    Agent,
    LiveFleet,
    Steps,
    agent_pid,
    argv_holding,
    ask_until_connect_is_listed,
    call,
    load_tools,
    message_row,
    payload,
    proc_argv,
    readings,
    requests_with,
    result,
)
from tests.support.model_server import Request, ToolCall, Turn

pytestmark = pytest.mark.live

MESSAGE = "Please check the parser on your side (live-check oc-4b2d)."
COLLABORATE = ["history", "message", "reachable", "read"]


def proc_env(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
    return dict(item.split("=", 1) for item in raw.split("\0") if "=" in item)


def connect_tool(request: Request, tool: str) -> str | None:
    """The name OpenCode offers connect's ``tool`` under (``connect_<tool>``), if it offers it."""
    return next((n for n in request.tool_names if n.startswith("connect") and n.endswith(tool)), None)


def ask_until_opencode_lists_connect(fleet: LiveFleet, steps: Steps, agent: Agent) -> tuple[Request, int]:
    """Prompt until a request offers connect's tools (OpenCode connects its MCP servers in the
    background while its composer is already up)."""
    return ask_until_connect_is_listed(fleet, steps, agent, "Are you ready?", "Ready",
                                       listed=lambda request: connect_tool(request, "list_agents") is not None)


@pytest.mark.timeout(900)
def test_a_connected_opencode_is_bound_uses_connects_tools_and_receives_a_consented_message() -> None:
    """(and restart-to-connect of an OpenCode launched Off)"""
    steps = Steps()
    with steps.step("install the pinned Claude Code and OpenCode (skipped when present)", 900):
        for name in H.PINNED:
            H.install(name)
        H.install("opencode")
    fleet = LiveFleet(trust=("opencode",))
    steps.describe = lambda: (fleet.screens() + "\n--- connectd's readings ---\n" + readings(fleet)
                              + "\n--- connectd log ---\n" + fleet.daemon_log(4000))
    try:
        with steps.step("start the model server, a private tmux server and connectd", 30):
            fleet.start()
        run(fleet, steps)
        log = fleet.daemon_log(10**7)
    finally:
        fleet.close()
    assert "Traceback" not in log and " ERROR " not in log, f"connectd logged an error:\n{log[-6000:]}"
    print(f"[live] OpenCode acceptance total {steps.total:.1f}s: "
          + ", ".join(f"{name} {seconds:.1f}s" for name, seconds in steps.timings), flush=True)


def run(fleet: LiveFleet, steps: Steps) -> None:
    o = fleet.prepare("o", "opencode")
    a = fleet.prepare("a", "claude")

    # 1. connectd launch: O is bound to the session connectd created on its own server
    with steps.step("launch O (OpenCode, collaborate) and A (Claude, collaborate); O bound", 300):
        fleet.launch(o, "collaborate")
        fleet.launch(a, "collaborate")
        assert o.launch["connect"] == "collaborate" and o.launch["session"] is None  # learnt after start
        view = steps.wait(  # the directory binds the pane, then the hub names the principal by its session
            lambda: (v := fleet.view(o)) and v["session"] and v["actor"] == f"agent:opencode:{v['session']['session_id']}" and v,
            "O bound to its session and its principal named by it",
        )
        steps.wait(lambda: fleet.ready(o), "O idle with an empty composer")
        steps.wait(lambda: fleet.ready(a), "A idle with an empty composer")
    sid = view["session"]["session_id"]
    assert view["session"]["harness"] == "opencode" and OC.SESSION_ID_RE.fullmatch(sid), view
    o.session, o.actor = sid, f"agent:opencode:{sid}"
    assert view["actor"] == o.actor and view["scopes"] == COLLABORATE and view["session_note"] == ""
    rows = fleet.audit()
    assert any(r["action"] == "opencode.bind" and r["outcome"] == "bound" and r["detail"] == sid for r in rows)
    assert any(r["action"] == "rebind" and r["actor"] == o.actor for r in rows)
    # the endpoint in its config (by OPENCODE_CONFIG_CONTENT), the server on connectd's port; no secret in argv
    pid = agent_pid(fleet, o)
    argv, env = proc_argv(pid), proc_env(pid)
    assert any(a.startswith("--port=") for a in argv) and "--hostname=127.0.0.1" in argv, argv
    assert fleet.mcp_url in env["OPENCODE_CONFIG_CONTENT"] and "{env:CONNECT_TOKEN}" in env["OPENCODE_CONFIG_CONTENT"]
    token, password = env["CONNECT_TOKEN"], env[OC.PASSWORD_ENV]
    assert argv_holding(token) == [] and argv_holding(password) == []

    # 2. O's model sees connect's tools and calls them, as the bound session
    with steps.step("O's model sees connect's tools", 120):
        first, tries = ask_until_opencode_lists_connect(fleet, steps, o)
    print(f"[live] O's model saw connect's tools from prompt {tries}: "
          f"{sorted(n for n in first.tool_names if n.startswith('connect'))}", flush=True)
    list_name, who_name = connect_tool(first, "list_agents"), connect_tool(first, "whoami")
    assert list_name and who_name, first.tool_names
    with steps.step("O calls whoami and list_agents", 90):
        fleet.script(o, [
            Turn.tool(ToolCall(who_name, {}, id="toolu_o_who")),
            Turn.tool(ToolCall(list_name, {}, id="toolu_o_list")),
            Turn.reply("I see the fleet."),
        ])
        fleet.type_prompt(o, "Who are you, and who else is connected?")
        listed = payload(steps.wait(lambda: result(fleet, o, "toolu_o_list"), "O's list_agents result"))
        steps.wait(lambda: "I see the fleet." in fleet.screen(o) and fleet.ready(o), "O done")
    who = payload(result(fleet, o, "toolu_o_who"))  # type: ignore[arg-type]
    assert who["actor"] == o.actor and who["pane"] == o.pane and who["scopes"] == COLLABORATE, who
    by_address = {row["address"]: row for row in listed["data"]}
    assert by_address[a.address]["harness"] == "claude" and by_address[a.address]["reachable"]
    assert by_address[o.address]["session"] == {"harness": "opencode", "session_id": sid}

    # 3. A (Claude) sends O a message; nothing is typed before the person approves; then O's model gets it
    with steps.step("A's model sees connect's tools", 60):
        first_a, _ = ask_until_connect_is_listed(fleet, steps, a, "Are you ready?", "Ready")
    loading = load_tools(first_a, "send_message", id="toolu_search")
    with steps.step("A sends O a message; the card", 60):
        fleet.script(a, [
            *loading,
            Turn.tool(call("send_message", {"to": o.address, "text": MESSAGE, "message_id": "oc-1"}, id="toolu_send_o")),
            Turn.reply("Sent it."),
        ])
        fleet.type_prompt(a, "Ask the OpenCode agent to check the parser.")
        sent = payload(steps.wait(lambda: result(fleet, a, "toolu_send_o"), "A's send_message result"))
        card = steps.wait(lambda: next(iter(fleet.cards()), None), "the consent card")
    assert sent["outcome"] == "queued" and sent["to"] == o.address
    assert (card["recipient_pane"], card["text"]) == (o.pane, MESSAGE)
    assert requests_with(fleet, o, MESSAGE) == [] and MESSAGE not in fleet.screen(o)
    with steps.step("approved: the message is typed into O once, O's model reads it", 90):
        fleet.script(o, [Turn.reply("Checked the parser.")])
        fleet.api("POST", f"/api/cards/{card['id']}/approve", {"pair": False})
        steps.wait(lambda: (message_row(fleet, "oc-1") or {}).get("outcome") == "delivered", "delivered to O")
        got = steps.wait(lambda: requests_with(fleet, o, MESSAGE), "O's model request with the message")
        steps.wait(lambda: "Checked the parser." in fleet.screen(o) and fleet.ready(o), "O answered")
    prompt = next(t for t in got[0].user_texts if MESSAGE in t)
    assert prompt.startswith(f"[connect] message {sent['ref']} from {a.actor} (pane {a.pane})."), prompt
    # the text follows the provenance line, unchanged but for one trailing space OpenCode 1.18.33 adds
    # to the prompt it submits (seen on the real binary; connectd pastes the text as it is)
    assert prompt.split("\n", 1)[1].removesuffix(" ") == MESSAGE and got[0].text.count(MESSAGE) == 1

    # every prompt went into the session connectd bound: O's database holds no other root session
    assert root_sessions(o) == [sid]

    restart_to_connect(fleet, steps)


def root_sessions(agent: Agent) -> list[str]:
    db = sqlite3.connect(f"file:{agent.home}/.local/share/opencode/opencode.db?mode=ro", uri=True)
    try:
        return [r[0] for r in db.execute("select id from session where parent_id is null")]
    finally:
        db.close()


def restart_to_connect(fleet: LiveFleet, steps: Steps) -> None:
    """P, launched Off, is bound all the same; restarted to connect (observe), it resumes the same
    session with connect's tools, and its conversation is kept."""
    p = fleet.prepare("p", "opencode")
    with steps.step("launch P (OpenCode, off); bound through its own server", 120):
        fleet.launch(p, "off")
        view = steps.wait(lambda: (v := fleet.view(p)) and v["session"] and v, "P bound to its session")
        steps.wait(lambda: fleet.ready(p), "P idle")
    sid = view["session"]["session_id"]
    assert view["connect"] == "off" and view["actor"] is None and OC.SESSION_ID_RE.fullmatch(sid)
    assert "OPENCODE_CONFIG_CONTENT" not in proc_env(agent_pid(fleet, p))  # Off: no endpoint
    with steps.step("P (off) answers its person; its model never sees connect", 60):
        fleet.script(p, [Turn.reply("Noted: the word is mango.")])
        fleet.type_prompt(p, "Remember the word mango.")
        steps.wait(lambda: "Noted: the word is mango." in fleet.screen(p) and fleet.ready(p), "P's answer")
    assert not any(connect_tool(r, "whoami") for r in fleet.requests(p, scripted_only=False))
    pid_before = agent_pid(fleet, p)
    with steps.step("restart-to-connect P (observe): /exit, --session the same session, connected", 120):
        started = fleet.cli("restart-to-connect", p.pane, "observe")
        assert started["pane"] == p.pane and started["session"] == ["opencode", sid]
        steps.wait(lambda: agent_pid(fleet, p) != pid_before and (fleet.view(p) or {}).get("connect") == "observe",
                   "P relaunched and connected")
        steps.wait(lambda: fleet.ready(p), "P idle after the restart")
        closed = [r for r in fleet.audit() if r["action"] == "restart.close"]
        assert closed and closed[-1]["outcome"] == "restarted", closed
    view = fleet.view(p)
    assert view and view["session"] == {"harness": "opencode", "session_id": sid}
    assert view["actor"] == f"agent:opencode:{sid}" and view["scopes"] == ["history", "read"]
    argv = proc_argv(agent_pid(fleet, p))
    assert "--session" in argv and argv[argv.index("--session") + 1] == sid, argv
    assert not any(a.startswith("--port") for a in argv), "a resume names its session: no server"
    with steps.step("P's model sees connect's tools and the conversation kept", 90):
        after, _ = ask_until_opencode_lists_connect(fleet, steps, p)
    assert any("Remember the word mango." in t for t in after.user_texts), "the conversation was kept"
    assert root_sessions(p) == [sid]
