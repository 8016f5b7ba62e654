"""Hand-started real agents receive a consented message (issue 14): a real Claude Code and a real Codex,
typed into a shell in a tmux pane by the person (not launched by connect), are bound to their
sessions, granted by the person, and receive a message a connect-launched Claude Code sends them.

- Claude Code is bound from its session registry (``<HOME>/.claude/sessions/<pid>.json``, checked
  against /proc): the hand-started agents share the HOME connectd runs with, as a person's own
  agents do.
- Codex is bound from the rollout file its process holds open, which it opens at its first prompt:
  the person uses it once before granting it.
- Each one's release is read from its banner (and its program's ``--version`` names the same).
- Granted, each is reachable at once; its model never sees connect's tools (they arrive when connect
  relaunches it). The sender's message waits for the person's approval, then is typed into its
  composer after one provenance line, and its outcome is ``delivered``.

Same rig as tests/integration/test_live.py (tests/support/live.py): the pinned releases, offline
against the scripted model server, a private tmux server, a real ``connectd serve``. Nothing is
skipped: a step that cannot happen fails with what connectd read and what the program wrote.

    pytest -m live -s tests/integration/test_live_hand_started.py
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from connectcore import releases
from connectd.tmux import procfs
from connectd.tmux.release_probe import ReleaseProbe
from tests.support import harnesses as H
from tests.support.live import (
    Agent,
    LiveFleet,
    Steps,
    ask_until_connect_is_listed,
    call,
    home_snapshot,
    load_tools,
    message_row,
    payload,
    readings,
    requests_with,
    result,
)
from tests.support.model_server import Turn

pytestmark = pytest.mark.live

TO_CLAUDE = "Please check the lint report (hand-check 41c2)."
TO_CODEX = "Please check the release notes (hand-check 8d07)."


def granted_note(harness: str, session: str) -> str:
    """What a hand-started agent's grant says: connect did not start it, so launch --here (issue 23 item 7)."""
    return ("connected: receives now; connect did not start it, so its tools arrive once it runs under connect: "
            f"quit it and run `connectd launch --here {harness} --session {session}` in its pane")


def why_unbound(fleet: LiveFleet, agent: Agent) -> str:
    """What connectd could have bound ``agent`` from: the pane's process tree, the Claude registry,
    the files the tree holds open (for a failure's message)."""
    lines = [f"--- why {agent.name} ({agent.harness}, {agent.pane}) is not bound ---", readings(fleet)]
    try:
        root = fleet.tmux.pane_pid(agent.pane)
    except Exception as exc:  # noqa: BLE001 - only a diagnostic
        return "\n".join([*lines, f"(no pane pid: {exc})"])
    files = procfs.tree_open_files(root)
    for pid, paths in sorted(files.items()):
        lines.append(f"pid {pid} {procfs.cmdline(pid)}: "
                     + ", ".join(p for p in paths if "/.codex/" in p or "/.claude/" in p))
    registry = fleet.person_home / ".claude" / "sessions"
    entries = sorted(registry.glob("*.json")) if registry.is_dir() else []
    lines.append(f"{registry}: " + (", ".join(f"{p.name}={p.read_text()[:300]}" for p in entries) or "(none)"))
    return "\n".join(lines)


def registry_session(fleet: LiveFleet, agent: Agent) -> str | None:
    """The session id Claude Code's registry holds for the hand-started process in ``agent``'s pane."""
    shell = fleet.tmux.pane_pid(agent.pane)
    pids = set(procfs.children(shell))
    for path in (fleet.person_home / ".claude" / "sessions").glob("*.json"):
        record = json.loads(path.read_text())
        if record.get("pid") in pids:
            return str(record["sessionId"])
    return None


def open_rollouts(fleet: LiveFleet, agent: Agent) -> set[str]:
    files = procfs.tree_open_files(fleet.tmux.pane_pid(agent.pane))
    return {os.path.basename(p) for paths in files.values() for p in paths if "/rollout-" in p}


@pytest.mark.timeout(900)  # a first run installs both programs from npm (about 800 MB) inside this test
def test_hand_started_real_claude_and_codex_are_bound_granted_and_receive() -> None:
    steps = Steps()
    with steps.step("install the pinned harnesses (skipped when present)", 900):
        for name in H.PINNED:
            H.install(name)
    person = home_snapshot()
    fleet = LiveFleet()
    extra: list[Agent] = []
    steps.describe = lambda: (fleet.screens() + "\n--- connectd's readings ---\n" + readings(fleet)
                              + "".join("\n" + why_unbound(fleet, agent) for agent in extra)
                              + "\n--- connectd log ---\n" + fleet.daemon_log(4000))
    try:
        with steps.step("start the model server, a private tmux server and connectd", 30):
            fleet.start()
        run_hand_started(fleet, steps, extra)
        log = fleet.daemon_log(10**7)
    finally:
        fleet.close()
    assert "Traceback" not in log and " ERROR " not in log, f"connectd logged an error:\n{log[-6000:]}"
    assert home_snapshot() == person, "the run touched the person's own ~/.claude, ~/.claude.json or ~/.codex"
    print(f"[live] hand-started total {steps.total:.1f}s: "
          + ", ".join(f"{name} {seconds:.1f}s" for name, seconds in steps.timings), flush=True)


def run_hand_started(fleet: LiveFleet, steps: Steps, extra: list[Agent]) -> None:
    a = fleet.prepare("a", "claude")
    h = fleet.prepare("h", "claude", home=fleet.person_home)
    x = fleet.prepare("x", "codex", home=fleet.person_home)

    with steps.step("launch A (Claude, collaborate); the person types claude and codex into two shells", 90):
        fleet.launch(a, "collaborate")
        fleet.start_by_hand(h)
        fleet.start_by_hand(x, *H.CODEX_IN_PROCESS)  # one -c override keeps Codex in-process
        extra += [h, x]
        for agent in (a, h, x):
            steps.wait(lambda agent=agent: fleet.ready(agent), f"{agent.name} idle with an empty composer")
    for agent in (h, x):
        view = fleet.view(agent)
        assert view and view["harness"] == agent.harness and view["launcher"] is None, view
        assert view["connect"] == "off" and not view["reachable"], view
        # its release, read from its banner; its program's --version (the fallback) names the same one
        assert view["release"] == H.version(agent.harness), view
        status = "verified" if releases.is_verified(agent.harness, view["release"]) else "trusted"
        assert view["release_status"] == status and (view["release_note"] == "") == (status == "verified"), view
        assert ReleaseProbe().release(fleet.tmux.pane_pid(agent.pane), agent.harness) == H.version(agent.harness)

    # Claude Code writes its registry at startup: connectd binds the pane from it
    with steps.step("the hand-started Claude is bound from its session registry", 30):
        h_view = steps.wait(lambda: (v := fleet.view(h)) and v.get("session") and v, "H's registry binding")
    h.session = registry_session(fleet, h)
    assert h.session, "no registry entry for the hand-started Claude's process"
    assert h_view["session"] == {"harness": "claude", "session_id": h.session}

    # Codex opens its rollout file at its first prompt: the person uses it once
    with steps.step("the person's first prompt to the hand-started Codex; bound from its rollout", 60):
        fleet.script(x, [Turn.reply("Hello from the hand-started Codex.")])
        fleet.type_prompt(x, "Say hello.")
        steps.wait(lambda: "Hello from the hand-started Codex." in fleet.screen(x) and fleet.ready(x), "X answered")
        x_view = steps.wait(lambda: (v := fleet.view(x)) and v.get("session") and v, "X's rollout binding")
    x.session = x_view["session"]["session_id"]
    assert x_view["session"]["harness"] == "codex"
    assert any(name.endswith(f"-{x.session}.jsonl") for name in open_rollouts(fleet, x)), open_rollouts(fleet, x)

    with steps.step("the person grants both (owner API): reachable at once", 30):
        for agent in (h, x):
            granted = fleet.api("POST", f"/api/panes/{agent.pane}/connect", {"preset": "collaborate"})
            note = granted_note(agent.harness, str(agent.session))
            assert granted["note"] == note, granted
            view = fleet.view(agent)
            assert view and view["connect"] == "collaborate" and view["reachable"] and view["note"] == note, view
            agent.actor, agent.address = view["actor"], view["address"]
            assert agent.actor == f"agent:{agent.harness}:{agent.session}"

    with steps.step("A's model sees connect's tools", 45):
        first, tries = ask_until_connect_is_listed(fleet, steps, a, "Are you ready?", "Ready")
    print(f"[live] A's model saw connect's tools from prompt {tries}", flush=True)
    loading = load_tools(first, "send_message", "get_message", id="toolu_search")
    with steps.step("A sends to both hand-started agents; each waits for its card", 60):
        fleet.script(a, [
            *loading,
            Turn.tool(call("send_message", {"to": h.address, "text": TO_CLAUDE, "message_id": "hand-h"}, id="toolu_h")),
            Turn.tool(call("send_message", {"to": x.address, "text": TO_CODEX, "message_id": "hand-x"}, id="toolu_x")),
            Turn.reply("Both asked."),
        ])
        fleet.type_prompt(a, "Ask the two other agents to check their reports.")
        sent_h = payload(steps.wait(lambda: result(fleet, a, "toolu_h"), "A's send to H"))
        sent_x = payload(steps.wait(lambda: result(fleet, a, "toolu_x"), "A's send to X"))
        cards = steps.wait(lambda: (c := fleet.cards()) and len(c) == 2 and c, "two consent cards")
    assert sent_h["outcome"] == sent_x["outcome"] == "queued", (sent_h, sent_x)
    by_message = {card["message_id"]: card for card in cards}
    assert (by_message["hand-h"]["recipient"], by_message["hand-h"]["recipient_pane"]) == (h.actor, h.pane)
    assert (by_message["hand-x"]["recipient"], by_message["hand-x"]["recipient_pane"]) == (x.actor, x.pane)
    for agent, text in ((h, TO_CLAUDE), (x, TO_CODEX)):
        assert not requests_with(fleet, agent, text) and text not in fleet.screen(agent), "typed before approval"

    with steps.step("the person approves; typed into each with its provenance line; delivered", 60):
        fleet.script(h, [Turn.reply("Lint report checked.")])
        fleet.script(x, [Turn.reply("Release notes checked.")])
        for card in cards:
            assert fleet.api("POST", f"/api/cards/{card['id']}/approve", {"pair": False})["state"] == "approved_once"
        for message_id in ("hand-h", "hand-x"):
            steps.wait(lambda m=message_id: (message_row(fleet, m) or {}).get("outcome") == "delivered",
                       f"{message_id} delivered")
        for agent, text in ((h, TO_CLAUDE), (x, TO_CODEX)):
            steps.wait(lambda agent=agent, text=text: requests_with(fleet, agent, text), f"{agent.name}'s model got it")
    for agent, text, sent in ((h, TO_CLAUDE, sent_h), (x, TO_CODEX, sent_x)):
        got = requests_with(fleet, agent, text)
        prompt = next(t for t in got[0].user_texts if text in t)
        assert prompt.startswith(f"[connect] message {sent['ref']} from {a.actor} (pane {a.pane})."), prompt
        assert prompt.split("\n", 1)[1] == text, "the text follows the provenance line, unchanged"
        assert got[0].text.count(text) == 1, "typed exactly once"
        everything = fleet.requests(agent, scripted_only=False)
        assert not any("mcp__connect" in r.text for r in everything), \
            f"{agent.name} was never relaunched by connect, yet its model saw connect's tools"
    check_audit(fleet.audit(), a, h, x)


def check_audit(rows: list[dict[str, Any]], a: Agent, h: Agent, x: Agent) -> None:
    seen = {(r["actor"], r["action"], r["outcome"], r.get("message_id") or r.get("target")) for r in rows}
    expected = {
        ("owner", "grant", "set", h.actor),
        ("owner", "grant", "set", x.actor),
        (a.actor, "send_message", "queued", "hand-h"),
        (a.actor, "send_message", "queued", "hand-x"),
        ("owner", "consent", "approved_once", "hand-h"),
        ("owner", "consent", "approved_once", "hand-x"),
        (a.actor, "send_message", "delivered", "hand-h"),
        (a.actor, "send_message", "delivered", "hand-x"),
    }
    missing = expected - seen
    assert not missing, f"missing from the audit: {sorted(map(str, missing))}\naudit:\n" + "\n".join(map(str, sorted(map(str, seen))))
