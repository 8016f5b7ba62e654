"""Live acceptance on the real programs (issue 7): real Claude Code and Codex agents, connected by a
real ``connectd`` with ``connectd launch``, talk through the MCP endpoint; and the screen capture of
the screen-reader corpus re-run against the pinned versions, read without a miss.

Nothing here is a stand-in: the agents are the pinned npm releases (tests/support/harnesses.py), run
offline against the scripted model server, each in a private HOME, in a private tmux server watched
by a ``connectd serve`` subprocess. Only the models are scripted; every tool call goes from the real
harness to connect's endpoint, and every message is typed into the real recipient's pane.

    make live                     # pytest -q -m live tests/integration
    pytest -m live -s tests/integration/test_live.py     # with step timings

Every step has a deadline; on a timeout the failure shows every agent's screen and the daemon's log.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.support import harnesses as H
from tests.support.live import (
    CLAUDE_PREFIX,
    Agent,
    LiveFleet,
    Steps,
    agent_pid,
    argv_holding,
    ask_until_connect_is_listed,
    call,
    deferred,
    home_snapshot,
    load_tools,
    message_row,
    payload,
    proc_argv,
    readings,
    requests_with,
    result,
)
from tests.support.model_server import Gate, Turn

pytestmark = pytest.mark.live

ROOT = Path(__file__).resolve().parents[2]
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")

MESSAGE = "Please run the parser tests and tell me if they pass (live-check 7f3a)."
REPLY = "All parser tests pass (live-check 9c1e)."
OPTIONAL_SCREENS = ("16_dialog_warnings_",)
COLLABORATE = ["history", "message", "reachable", "read"]
OBSERVE = ["history", "read"]


def proc_env(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
    return dict(item.split("=", 1) for item in raw.split("\0") if "=" in item)




# --------------------------------------------------------------------------------------------------


@pytest.mark.timeout(900)  # a first run installs both programs from npm (about 800 MB) inside this test
def test_real_claude_and_codex_agents_connect_and_talk_through_the_endpoint() -> None:
    steps = Steps()
    with steps.step("install the pinned harnesses (skipped when present)", 900):
        for name in H.PINNED:
            H.install(name)
    person = home_snapshot()
    fleet = LiveFleet()
    steps.describe = lambda: (fleet.screens() + "\n--- connectd's readings ---\n" + readings(fleet)
                              + "\n--- connectd log ---\n" + fleet.daemon_log(4000))
    try:
        with steps.step("start the model server, a private tmux server and connectd", 30):
            fleet.start()
        run_acceptance(fleet, steps)
        log = fleet.daemon_log(10**7)
    finally:
        fleet.close()
    assert "Traceback" not in log and " ERROR " not in log, f"connectd logged an error:\n{log[-6000:]}"
    assert home_snapshot() == person, "the run touched the person's own ~/.claude, ~/.claude.json or ~/.codex"
    print(f"[live] acceptance total {steps.total:.1f}s: "
          + ", ".join(f"{name} {seconds:.1f}s" for name, seconds in steps.timings), flush=True)


def run_acceptance(fleet: LiveFleet, steps: Steps) -> None:
    a = fleet.prepare("a", "claude")
    b = fleet.prepare("b", "codex")
    c = fleet.prepare("c", "claude")

    # 3. connectd launch: A and B Collaborate, C Off; the token only in the agents' environment
    with steps.step("launch A (Claude, collaborate), B (Codex, collaborate), C (Claude, off)", 60):
        fleet.launch(a, "collaborate")
        fleet.launch(b, "collaborate")
        fleet.launch(c, "off")
        for agent in (a, b, c):
            steps.wait(lambda agent=agent: fleet.ready(agent), f"{agent.name} idle with an empty composer")
    assert a.launch["connect"] == "collaborate" and a.session and UUID.fullmatch(a.session)
    assert a.actor == f"agent:claude:{a.session}"
    assert b.launch["connect"] == "collaborate" and b.actor and b.actor.startswith(f"agent:codex:pane:{b.pane}:")
    assert c.launch["connect"] == "off" and c.actor is None
    assert c.session and UUID.fullmatch(c.session), "a Claude launched off still gets a preset session id"
    a_argv, c_argv = proc_argv(agent_pid(fleet, a)), proc_argv(agent_pid(fleet, c))
    mcp_config = next(arg for arg in a_argv if arg.startswith("--mcp-config="))
    assert "Bearer ${CONNECT_TOKEN}" in mcp_config and fleet.mcp_url in mcp_config
    assert "--allowedTools=mcp__connect" in a_argv and f"--session-id={a.session}" in a_argv
    assert not any(arg.startswith("--mcp-config") for arg in c_argv) and f"--session-id={c.session}" in c_argv
    tokens = {agent.name: proc_env(agent_pid(fleet, agent)).get("CONNECT_TOKEN") for agent in (a, b, c)}
    assert tokens["a"] and tokens["b"] and tokens["a"] != tokens["b"] and tokens["c"] is None
    for name in ("a", "b"):
        assert argv_holding(tokens[name]) == [], f"{name}'s token is on a command line"  # type: ignore[arg-type]

    # 4. A's model: whoami, list_agents, a refused send to C, a send to B; the card is the person's
    with steps.step("A's model sees connect's tools (deferred behind ToolSearch or offered up front)", 45):
        first, tries = ask_until_connect_is_listed(fleet, steps, a, "Are you ready?", "Ready")
    print(f"[live] A's model saw connect's tools from prompt {tries}; "
          f"{'deferred behind ToolSearch' if deferred(first) else 'offered up front'}", flush=True)
    loading = load_tools(first, "whoami", "list_agents", "send_message", "get_message", id="toolu_search")
    with steps.step("A calls whoami, list_agents, send_message (to C refused, to B queued)", 60):
        before = len(fleet.requests(a))
        fleet.script(a, [
            *loading,
            Turn.tool(call("whoami", id="toolu_whoami")),
            Turn.tool(call("list_agents", id="toolu_list")),
            Turn.tool(call("send_message", {"to": c.address, "text": "hello C", "message_id": "live-to-c"},
                           id="toolu_send_c")),
            Turn.tool(call("send_message", {"to": b.address, "text": MESSAGE, "message_id": "live-1"},
                           id="toolu_send_b")),
            Turn.tool(call("get_message", {"message_id": "live-1", "wait": 60}, id="toolu_wait")),
            Turn.reply("Codex has my message."),
        ])
        fleet.type_prompt(a, "Ask the Codex agent to run the parser tests.")
        sent = payload(steps.wait(lambda: result(fleet, a, "toolu_send_b"), "A's send_message result"))
        card = steps.wait(lambda: next(iter(fleet.cards()), None), "the consent card")
    # the request that called whoami offered it (after ToolSearch loaded it, or from the start)
    assert {CLAUDE_PREFIX + t for t in ("whoami", "send_message")} <= set(
        fleet.requests(a)[before + len(loading)].tool_names)
    who = payload(result(fleet, a, "toolu_whoami"))  # type: ignore[arg-type]
    assert who["actor"] == a.actor and who["pane"] == a.pane and who["scopes"] == COLLABORATE
    listed = {row["address"]: row for row in payload(result(fleet, a, "toolu_list"))["data"]}  # type: ignore[arg-type]
    assert listed[b.address]["reachable"] and listed[b.address]["harness"] == "codex"
    assert not listed[c.address]["reachable"] and listed[c.address]["connect"] == "off"
    refused = result(fleet, a, "toolu_send_c")
    assert refused and refused["error"] and "not_reachable" in refused["text"], refused
    assert sent["outcome"] == "queued" and sent["from"] == a.actor and sent["to"] == b.address
    ref = sent["ref"]
    assert (card["sender"], card["recipient_pane"], card["text"], card["message_id"]) == (
        a.actor, b.pane, MESSAGE, "live-1")
    assert requests_with(fleet, b, MESSAGE) == [] and MESSAGE not in fleet.screen(b)

    # 5. approved while B is busy: nothing is typed until B waits for input with an empty composer
    gate = Gate()
    with steps.step("B busy in its own turn; approve the card through the owner API", 30):
        fleet.script(b, [Turn.held(gate, "The long task finished.")])
        fleet.type_prompt(b, "Run the long task.")
        steps.wait(lambda: gate.reached.is_set() and (fleet.view(b) or {}).get("activity") == "busy", "B busy")
        approved = fleet.api("POST", f"/api/cards/{card['id']}/approve", {"pair": False})
        assert approved["state"] == "approved_once"
        held_until = time.monotonic() + 3.0
        while time.monotonic() < held_until:  # B stays busy: the message must wait
            row = message_row(fleet, "live-1")
            assert row and row["outcome"] == "queued", row
            assert MESSAGE not in fleet.screen(b), "typed into a running turn"
            time.sleep(0.3)
    with steps.step("B idle: the message is typed once, B's model reads it and replies", 60):
        fleet.script(b, [
            Turn.tool(call("send_message", {"to": a.address, "text": REPLY, "message_id": "live-reply-1",
                                            "in_reply_to": ref}, id="call_reply")),
            Turn.reply("Answered A."),
        ])
        gate.release()
        steps.wait(lambda: (message_row(fleet, "live-1") or {}).get("outcome") == "delivered", "delivered to B")
        reply_sent = payload(steps.wait(lambda: result(fleet, b, "call_reply"), "B's send_message result"))
        reply_card = steps.wait(lambda: next(iter(fleet.cards()), None), "the reply's consent card")
        waited = payload(steps.wait(lambda: result(fleet, a, "toolu_wait"), "A's get_message(wait) result"))
    b_requests = fleet.requests(b)
    got = requests_with(fleet, b, MESSAGE)
    assert got, "B's model never received the message"
    prompt = next(t for t in got[0].user_texts if MESSAGE in t)
    provenance = f"[connect] message {ref} from {a.actor} (pane {a.pane})."
    assert prompt.startswith(provenance), prompt
    assert prompt.split("\n", 1)[1] == MESSAGE, "the text follows the provenance line, unchanged"
    assert got[0].text.count(MESSAGE) == 1, "the text reached B's model exactly once"
    assert b_requests.index(got[0]) > 0 and b_requests[0].user_texts[-1] == "Run the long task.", \
        "the message came after B's own turn, not into it"
    assert waited["message_id"] == "live-1" and waited["outcome"] == "delivered"
    assert reply_sent["outcome"] == "queued" and reply_sent["in_reply_to"] == ref
    # Codex reports its session id only after launch: connectd binds it from the rollout file B holds open
    bound = fleet.view(b)["actor"]
    assert bound.startswith("agent:codex:") and ":pane:" not in bound, bound
    launch_actor, b.actor = b.actor, bound
    rebinds = [r for r in fleet.audit() if r["action"] == "rebind" and r["actor"] == bound]
    assert rebinds and rebinds[0]["target"] == launch_actor, "the rebinding is itself an audit record"
    assert reply_sent["from"] == b.actor and reply_sent["to"] == a.address
    assert (reply_card["sender"], reply_card["recipient_pane"], reply_card["text"]) == (b.actor, a.pane, REPLY)

    # 6. the reply reaches A, and A's get_message correlates it with its own message
    with steps.step("B's reply reaches A; A's get_message correlates it", 60):
        fleet.script(a, [Turn.tool(call("get_message", {"message_id": "live-1"}, id="toolu_correlate")),
                         Turn.reply("Codex says the tests pass.")])
        fleet.api("POST", f"/api/cards/{reply_card['id']}/approve", {"pair": False})
        correlated = payload(steps.wait(lambda: result(fleet, a, "toolu_correlate"), "A's get_message"))
        steps.wait(lambda: (message_row(fleet, "live-reply-1") or {}).get("outcome") == "delivered",
                   "the reply delivered")
        steps.wait(lambda: fleet.ready(a), "A idle")
    reply_prompt = next(t for t in requests_with(fleet, a, REPLY)[0].user_texts if REPLY in t)
    assert reply_prompt.startswith(f"[connect] message {reply_sent['ref']} from {b.actor} (pane {b.pane}).")
    assert correlated["outcome"] == "delivered"
    assert {"ref": reply_sent["ref"], "from": b.actor, "in_reply_to": ref} in correlated["inbox"], correlated

    # 7. C (off) talks to its model, which never sees connect's tools
    with steps.step("C (off) answers its person; its model never sees connect", 30):
        fleet.script(c, [Turn.reply("Noted: the word is mango.")])
        fleet.type_prompt(c, "Remember the word mango.")
        steps.wait(lambda: "Noted: the word is mango." in fleet.screen(c) and fleet.ready(c), "C's answer")
    c_before = fleet.requests(c, scripted_only=False)
    assert c_before and not any("mcp__connect" in r.text or "connect" in " ".join(r.tool_names)
                                for r in c_before), "C's model saw connect's tools while C was off"

    # 8. revoke A: its next call fails with "not connected"; the audit names every call's actor
    with steps.step("revoke A; A's next tool call fails with not connected", 45):
        revoked = fleet.cli("revoke", a.pane)
        assert revoked["revoked"] == a.actor
        fleet.script(a, [Turn.tool(call("whoami", id="toolu_whoami_revoked")), Turn.reply("I am disconnected.")])
        fleet.type_prompt(a, "Check whether you are still connected.")
        refused_after = steps.wait(lambda: result(fleet, a, "toolu_whoami_revoked"), "A's whoami after revoke")
        steps.wait(lambda: fleet.ready(a), "A idle")
    assert refused_after["error"] and "not connected" in refused_after["text"], refused_after
    check_audit(fleet, a, b, c, ref)

    # 9. restart-to-connect C (observe) while idle: same pane, same session, its model sees connect
    pid_before = agent_pid(fleet, c)
    with steps.step("restart-to-connect C (observe): exit, --resume the same session, connected", 90):
        started = fleet.cli("restart-to-connect", c.pane, "observe")
        assert started["pane"] == c.pane and started["session"] == ["claude", c.session]
        steps.wait(lambda: agent_pid(fleet, c) != pid_before and (fleet.view(c) or {}).get("connect") == "observe",
                   "C relaunched and connected")
        steps.wait(lambda: fleet.ready(c), "C idle after the restart")
        restarted = [r for r in fleet.audit() if r["action"] == "restart.close"]
        assert restarted and restarted[-1]["outcome"] == "restarted", restarted
    view = fleet.view(c)
    assert view and view["session"] == {"harness": "claude", "session_id": c.session}
    assert view["actor"] == f"agent:claude:{c.session}" and view["scopes"] == OBSERVE
    new_argv = proc_argv(agent_pid(fleet, c))
    assert "--resume" in new_argv and new_argv[new_argv.index("--resume") + 1] == c.session
    assert any(arg.startswith("--mcp-config=") for arg in new_argv)
    assert proc_env(agent_pid(fleet, c)).get("HOME") == str(c.home), "the relaunch kept C's own environment"
    exits = [r for r in fleet.audit() if r["action"] == "restart.exit"]
    assert exits and exits[-1]["outcome"] == "exit_sent"
    with steps.step("C's model sees connect's tools and the conversation kept", 45):
        after, tries = ask_until_connect_is_listed(fleet, steps, c, "Which word did I ask you to remember?",
                                                   "The word is mango")
    print(f"[live] after the restart C's model saw connect's tools from prompt {tries}", flush=True)
    assert any("Remember the word mango." in t for t in after.user_texts), "the conversation was kept"
    assert "Noted: the word is mango." in after.text
    with steps.step("C (observe) calls whoami as the same session", 45):
        c_loading = load_tools(after, "whoami", "list_agents", id="toolu_c_search")
        fleet.script(c, [
            *c_loading,
            Turn.tool(call("whoami", id="toolu_c_whoami")),
            Turn.reply("I am connected."),
        ])
        count = len(fleet.requests(c))
        fleet.type_prompt(c, "Who are you to connect now?")
        c_who = payload(steps.wait(lambda: result(fleet, c, "toolu_c_whoami"), "C's whoami"))
    assert CLAUDE_PREFIX + "whoami" in fleet.requests(c)[count + len(c_loading)].tool_names
    assert c_who["actor"] == f"agent:claude:{c.session}" and c_who["pane"] == c.pane and c_who["scopes"] == OBSERVE


def check_audit(fleet: LiveFleet, a: Agent, b: Agent, c: Agent, ref: str) -> None:
    """Every call above is in the audit, under the actor that made it."""
    rows = fleet.audit()
    seen = [(r["actor"], r["action"], r["outcome"], r.get("message_id") or r.get("target"), r.get("detail"))
            for r in rows]

    def has(actor: str, action: str, outcome: str, subject: str | None = None, detail: str | None = None) -> bool:
        return any(s[0] == actor and s[1] == action and s[2] == outcome
                   and (subject is None or s[3] == subject) and (detail is None or s[4] == detail) for s in seen)

    expected = [
        (a.actor, "whoami", "allowed", None, None),
        (a.actor, "list_agents", "allowed", None, None),
        (a.actor, "send_message", "refused", "live-to-c", "not_reachable"),
        (a.actor, "send_message", "queued", "live-1", None),
        (a.actor, "get_message", "allowed", "live-1", None),
        (a.actor, "send_message", "delivered", "live-1", None),
        ("owner", "consent", "approved_once", "live-1", None),
        (b.actor, "send_message", "queued", "live-reply-1", None),
        ("owner", "consent", "approved_once", "live-reply-1", None),
        (b.actor, "send_message", "delivered", "live-reply-1", None),
        ("owner", "revoke", "revoked", a.actor, None),
        (a.actor, "whoami", "refused", None, "not_connected"),
    ]
    missing = [e for e in expected if not has(*e)]  # type: ignore[arg-type]
    assert not missing, f"missing from the audit: {missing}\naudit:\n" + "\n".join(map(str, seen))
    assert sum(1 for s in seen if s[:3] == (a.actor, "get_message", "allowed")) == 2
    launches = [s for s in seen if s[:3] == ("owner", "launch", "done")]
    assert [s[3] for s in launches] == [a.pane, b.pane, c.pane]
    # no call of an agent under another's name, and C (off) made none at all
    for message_id, actor in (("live-to-c", a.actor), ("live-1", a.actor), ("live-reply-1", b.actor)):
        assert {s[0] for s in seen if s[1] == "send_message" and s[3] == message_id} == {actor}
    assert not any(s[0].startswith(f"agent:claude:{c.session}") for s in seen)


# --------------------------------------------------------------------------------------------------


def _script(name: str) -> Any:
    """Import scripts/<name>.py (the scripts folder is not a package)."""
    spec = importlib.util.spec_from_file_location(f"live_{name}", ROOT / "scripts" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.mark.timeout(420)
def test_screen_capture_of_the_releases_under_test_is_read_without_a_miss(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """scripts/capture_screens.py drives both programs (and bash) into every corpus state again, into
    a temporary folder (the committed fixtures are left alone), and every screen must be read right,
    with zero false idle-and-empty: a harness upgrade that changes its screens fails here first.
    The releases are the pins unless CONNECT_CLAUDE_VERSION / CONNECT_CODEX_VERSION name others
    (make compat); only the pin must draw every state."""
    capture, evaluate = _script("capture_screens"), _script("eval_screens")
    launch = H.Tmux.launch

    def launch_keeping_the_server(self: H.Tmux, *args: Any, **kwargs: Any) -> str:
        # The capture closes each program's only pane before starting the next; tmux then exits
        # with its last session, and a new-session racing that exit fails with "server exited
        # unexpectedly" (1 in 40 here). exit-empty off keeps the private server until kill-server.
        self.run("start-server", ";", "set-option", "-s", "exit-empty", "off", check=False)
        return launch(self, *args, **kwargs)

    kill = H.Tmux.kill

    def kill_and_unlink(self: H.Tmux) -> None:
        # kill-server leaves the socket file behind; remove it, as tests/support/tmux_server.py does
        kill(self)
        tmpdir = os.environ.get("TMUX_TMPDIR", "/tmp")
        Path(tmpdir, f"tmux-{os.getuid()}", self.socket).unlink(missing_ok=True)

    monkeypatch.setattr(H.Tmux, "launch", launch_keeping_the_server)
    monkeypatch.setattr(H.Tmux, "kill", kill_and_unlink)
    screens, transcripts = tmp_path / "screens", tmp_path / "transcripts"
    started = time.monotonic()
    # the three captures are independent (each its own model server, tmux server and homes) and
    # mostly wait on screens: run them side by side
    args = ["--out", str(screens), "--transcripts-out", str(transcripts)]
    programs = ("claude", "codex", "shell")
    with ThreadPoolExecutor(max_workers=3) as pool:
        runs = [pool.submit(capture.main, ["--harness", harness, *args, "--report", str(tmp_path / f"{harness}.json")])
                for harness in programs]
        assert [run.result() for run in runs] == [0, 0, 0]
    committed = ROOT / "tests" / "fixtures" / "screens"
    for program, version in (("claude", H.version("claude")), ("codex", H.version("codex"))):
        # the release's own corpus when it has one, else the pin's states
        folder = committed / program / version
        if not folder.is_dir():
            folder = committed / program / H.pinned(program)
        want = {p.name for p in folder.glob("*.json")}
        got = {p.name for p in (screens / program / version).glob("*.json")}
        # Codex's warnings panel exists only when it has startup warnings (no bubblewrap on PATH); a
        # release that does not draw a state (a dialog it lacks) says so in the capture's report
        not_drawn = {f"_{item['state']}_{item['width']}.json" for item in
                     json.loads((tmp_path / f"{program}.json").read_text())["not_drawn"]}
        if H.is_pinned(program):
            assert not not_drawn, f"{program} {version} (the pin) did not draw {sorted(not_drawn)}"
        missing = {name for name in want - got if not name.startswith(OPTIONAL_SCREENS)
                   and not any(name.endswith(suffix) for suffix in not_drawn)}
        assert not missing, f"{program} {version}: these corpus states were not captured: {sorted(missing)}"
    cases = evaluate.load_corpus(screens)
    least = 80 if H.is_pinned("claude") and H.is_pinned("codex") else 60
    assert len(cases) >= least, f"only {len(cases)} screens captured"
    wrong = {case.name: evaluate.misses(case, case.read()) for case in cases}
    blind = [case.name for case in cases if case.read(with_cursor=False).ready_for_message and not case.expected_ready]
    assert evaluate.main(["--corpus", str(screens)]) == (1 if any(wrong.values()) or blind else 0)
    print(f"[live] screen capture and evaluation {time.monotonic() - started:.1f}s, {len(cases)} screens")
    misread = {name: m for name, m in wrong.items() if m}
    assert not misread, f"screens misread: {misread}"
    assert not blind, f"read as idle-and-empty without the cursor: {blind}"
