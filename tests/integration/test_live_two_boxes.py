"""Live acceptance across two boxes (issue 25, "Live"; docs/federation.md, build order item 9): a real
Claude Code on box A messages a real Codex on box B through their two daemons and NATS, with the card
on the Codex box.

Each box is the one-box live rig (tests/support/live.py's :class:`LiveFleet`): its own ``connectd
serve`` subprocess, data directory, HOME, private tmux server and scripted model server, the agents the
pinned npm releases (tests/support/harnesses.py) run offline, each in a private HOME. Between them one
real ``nats-server`` (tests/support/nats.py: ``sync_interval: always``, a user per box holding exactly
that box's permission block), provisioned by its admin; each box gets its keys and name
(``laptop``, ``devbox``) and is pointed at the server by the real ``connectd federate --nats``, and
the two are paired by the real CLI (invite on A, accept on B, approve on A).

The flow: ``connectd launch`` starts Claude Code (collaborate) on A and Codex (collaborate, so
reachable) on B. A's scripted model calls ``list_agents`` until it sees B's Codex among the remote
agents (box ``devbox``, its id and A's view of B's short fingerprint, the address qualified by the
box), then ``send_message`` to that qualified address (``queued``, to box devbox) and ``get_message``
with a wait. On B the card names the agent on box laptop with A's fingerprint; nothing is typed
before B's owner approves it through B's owner API; then the text is typed once into Codex's pane
under the provenance line naming box laptop, Codex's model reads it, and A's ``get_message`` learns
``delivered`` from B's signed receipt. Codex's model answers with ``send_message`` to A's address
qualified by ``laptop``, ``in_reply_to`` the ref its provenance line named (R9): the reply's card is on
A, naming Codex on box devbox with B's fingerprint; approved through A's owner API it is typed once
into Claude's pane, and A's ``get_message`` correlates it with its own message.

    pytest -m live -s tests/integration/test_live_two_boxes.py     # with step timings

Every step has a deadline; on a timeout the failure shows each agent's screen, each daemon's readings
and log, and the NATS server's log.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from connectd.federation import keys as K
from connectd.federation.seal import LocalBox
from tests.integration.test_pair_cli import run
from tests.support import harnesses as H
from tests.support.live import (
    CLAUDE_PREFIX,
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
from tests.support.nats import NatsServer, box_password

pytestmark = pytest.mark.live

MESSAGE = "Please run the parser tests on devbox and tell me if they pass (live-check 2b5d)."
MESSAGE_ID = "live-x1"
REPLY = "All parser tests pass on devbox (live-check 6e0a)."
REPLY_ID = "live-x1-reply"


class LiveBox:
    """One box of the run: a :class:`LiveFleet` (its daemon, data directory, HOME, tmux server and
    model server) with federation keys and a name, pointed at the NATS server before it starts."""

    def __init__(self, root: Path, name: str) -> None:
        self.name = name
        self.fleet = LiveFleet(root)
        self.local = LocalBox.from_secrets(K.init(self.fleet.data_dir, name))

    @property
    def box_id(self) -> str:
        return self.local.box_id

    @property
    def fingerprint(self) -> str:
        return self.local.keys.fingerprint

    def federate(self, server: NatsServer) -> None:
        """``connectd federate --nats URL --user box-<id> --password-file FILE`` as the owner runs it."""
        password = self.fleet.root / "nats-password"
        password.write_text(box_password(self.box_id))
        password.chmod(0o600)
        done = run("federate", "--nats", server.url, "--user", f"box-{self.box_id}", "--password-file",
                   str(password), "--data-dir", str(self.fleet.data_dir), home=self.fleet.person_home)
        assert done.returncode == 0, done.stderr

    def pairings(self) -> list[dict[str, Any]]:
        return list(self.fleet.cli("pair", "list"))

    def audit(self) -> list[dict[str, Any]]:
        return self.fleet.audit()

    def describe(self) -> str:
        f = self.fleet
        return (f"=== box {self.name} ({self.box_id}) ===\n{f.screens()}\n--- connectd's readings ---\n"
                f"{readings(f)}\n--- connectd log ---\n{f.daemon_log(4000)}")


def pair(a: LiveBox, b: LiveBox, steps: Steps) -> str:
    """Invite on A, accept on B (A's fingerprint shown), approve on A: both sides active, one id."""
    code = a.fleet.cli("pair", "invite")["code"]
    accepted = b.fleet.cli("pair", "accept", code, "--yes")
    assert accepted["state"] == "requested", accepted
    steps.wait(lambda: a.fleet.cli("pair", "requests"), "the pair request on A")
    approved = a.fleet.cli("pair", "approve", b.box_id)
    assert (approved["state"], approved["fingerprint"]) == ("active", b.fingerprint), approved
    on_b = steps.wait(lambda: [p for p in b.pairings() if p["state"] == "active"], "the pairing active on B")
    assert [(p["box"], p["fingerprint"], p["name"]) for p in on_b] == [(a.box_id, a.fingerprint, a.name)]
    return str(approved["pairing"])


def remote_codex(fleet: LiveFleet, agent: Agent, call_id: str, codex: Agent) -> dict[str, Any] | None:
    """B's Codex as A's model saw it in the ``list_agents`` result ``call_id`` (None: not listed)."""
    found = result(fleet, agent, call_id)
    if found is None:
        return None
    rows = payload(found)["data"]
    return next((r for r in rows if r.get("remote") and r.get("pane") == codex.pane), None)


# --------------------------------------------------------------------------------------------------


@pytest.mark.timeout(900)
def test_real_claude_on_box_a_messages_real_codex_on_box_b_through_nats_with_the_card_on_b(
    tmp_path: Path,
) -> None:
    steps = Steps()
    with steps.step("install the pinned harnesses (skipped when present)", 900):
        for name in H.PINNED:
            H.install(name)
    person = home_snapshot()
    a = LiveBox(tmp_path / "box-a", "laptop")
    b = LiveBox(tmp_path / "box-b", "devbox")
    (tmp_path / "nats").mkdir()
    server = NatsServer(tmp_path / "nats", [a.box_id, b.box_id])

    def describe() -> str:
        nats_log = server.log.read_text(errors="replace")[-1500:] if server.log.exists() else ""
        return f"{a.describe()}\n{b.describe()}\n=== nats-server log ===\n{nats_log}"

    steps.describe = describe
    logs: dict[str, str] = {}
    try:
        with steps.step("start nats-server, provision it, federate both boxes, start both rigs", 60):
            server.start()
            anyio.run(server.provision)
            for box in (a, b):
                box.federate(server)
                box.fleet.start(install=False)
        with steps.step("pair the boxes: invite on A, accept on B, approve on A", 45):
            pair(a, b, steps)
        run_two_boxes(a, b, steps)
        logs = {box.name: box.fleet.daemon_log(10**7) for box in (a, b)}
    finally:
        for box in (a, b):
            box.fleet.close()
        server.stop()
    for name, log in logs.items():
        assert "Traceback" not in log and " ERROR " not in log, f"connectd on {name} logged an error:\n{log[-6000:]}"
    assert home_snapshot() == person, "the run touched the person's own ~/.claude, ~/.claude.json or ~/.codex"
    print(f"[live] two boxes total {steps.total:.1f}s: "
          + ", ".join(f"{name} {seconds:.1f}s" for name, seconds in steps.timings), flush=True)


def run_two_boxes(a: LiveBox, b: LiveBox, steps: Steps) -> None:
    fa, fb = a.fleet, b.fleet
    claude = fa.prepare("claude-a", "claude")
    codex = fb.prepare("codex-b", "codex")

    with steps.step("launch Claude Code on A and Codex on B (collaborate, so reachable)", 60):
        fa.launch(claude, "collaborate")
        fb.launch(codex, "collaborate")
        steps.wait(lambda: fa.ready(claude), "Claude on A idle with an empty composer")
        steps.wait(lambda: fb.ready(codex), "Codex on B idle with an empty composer")
    assert claude.actor == f"agent:claude:{claude.session}"
    qualified = f"{codex.address}@{b.name}"

    with steps.step("A's model sees connect's tools (deferred behind ToolSearch or offered up front)", 60):
        first, tries = ask_until_connect_is_listed(fa, steps, claude, "Are you ready?", "Ready")
    print(f"[live] A's model saw connect's tools from prompt {tries}", flush=True)

    # A's model lists the agents until B's entry has come over NATS (published on change, or read by a
    # direct get every 5 s): what A's model sees is what counts
    with steps.step("A's list_agents shows B's Codex with box devbox, through the directory across boxes", 90):
        turns = load_tools(first, "list_agents", "send_message", "get_message", id="toolu_x_search")
        attempt = 0
        listed = None
        while listed is None:
            attempt += 1
            call_id = f"toolu_x_list_{attempt}"
            fa.script(claude, [*turns, Turn.tool(call("list_agents", id=call_id)), Turn.reply(f"Listed ({attempt}).")])
            turns = []
            fa.type_prompt(claude, "Which agents can you reach?")
            steps.wait(lambda c=call_id: result(fa, claude, c), "A's list_agents result")
            steps.wait(lambda n=attempt: f"Listed ({n})." in fa.screen(claude) and fa.ready(claude), "A idle")
            listed = remote_codex(fa, claude, call_id, codex)
    print(f"[live] A's model saw B's Codex from list_agents call {attempt}", flush=True)
    assert listed["address"] == qualified and listed["harness"] == "codex", listed
    assert listed["box"] == {"name": b.name, "id": b.box_id, "fingerprint": b.fingerprint.replace(" ", "")[:8]}
    assert listed["reachable"] is True and listed["freshness"] == "fresh" and "cwd" not in listed, listed

    with steps.step("A sends to B's qualified address (queued, to box devbox); the card appears on B", 60):
        before = len(fa.requests(claude))
        fa.script(claude, [
            Turn.tool(call("send_message", {"to": qualified, "text": MESSAGE, "message_id": MESSAGE_ID},
                           id="toolu_x_send")),
            Turn.tool(call("get_message", {"message_id": MESSAGE_ID, "wait": 120}, id="toolu_x_wait")),
            Turn.reply("Codex on devbox has my message."),
        ])
        fa.type_prompt(claude, "Ask the Codex agent on devbox to run the parser tests.")
        sent = payload(steps.wait(lambda: result(fa, claude, "toolu_x_send"), "A's send_message result"))
        card = steps.wait(lambda: next(iter(fb.cards()), None), "the consent card on B")
    assert CLAUDE_PREFIX + "send_message" in fa.requests(claude)[before].tool_names
    # the answer for a message to another box is its outbox row (docs/federation.md, item 5): no text echoed
    print(f"[live] A's send_message answered {sent}", flush=True)
    assert (sent["message_id"], sent["outcome"], sent["to_box"]) == (MESSAGE_ID, "queued", b.name), sent
    assert not fa.cards(), "the card is on the recipient's box, never the sender's"
    # the card names the agent on box laptop with A's fingerprint, for Codex's pane
    shown = f" on box {a.name} ({' '.join(a.fingerprint.split(' ')[:2])} …)"
    assert (card["recipient_pane"], card["text"], card["message_id"]) == (codex.pane, MESSAGE, MESSAGE_ID), card
    assert (card["sender_box"], card["sender_fingerprint"]) == (a.name, a.fingerprint), card
    assert card["sender_name"].startswith("agent:") and card["sender_name"].endswith(shown), card
    assert card["sender"] == f"box:{a.box_id}/{claude.actor}", card
    listed_cards = fb.cli("cards")
    assert [c["id"] for c in listed_cards] == [card["id"]], listed_cards
    assert requests_with(fb, codex, MESSAGE) == [] and MESSAGE not in fb.screen(codex), "typed before consent"

    # B's copy has B's own ref, the one its provenance line names: Codex's model answers with it (R9)
    ref = str((message_row(fb, MESSAGE_ID) or {}).get("ref"))
    fb.script(codex, [
        Turn.tool(call("send_message", {"to": f"{claude.address}@{a.name}", "text": REPLY,
                                        "message_id": REPLY_ID, "in_reply_to": ref}, id="call_x_reply")),
        Turn.reply("Answered laptop."),
    ])
    with steps.step("B's owner approves; typed once into Codex's pane; A's get_message learns delivered", 90):
        approved = fb.api("POST", f"/api/cards/{card['id']}/approve", {"pair": False})
        assert approved["state"] == "approved_once", approved
        steps.wait(lambda: (message_row(fb, MESSAGE_ID) or {}).get("outcome") == "delivered", "delivered on B")
        got = steps.wait(lambda: requests_with(fb, codex, MESSAGE), "Codex's model reading the message")
        waited = payload(steps.wait(lambda: result(fa, claude, "toolu_x_wait"), "A's get_message(wait) result"))
        steps.wait(lambda: "Codex on devbox has my message." in fa.screen(claude) and fa.ready(claude), "A idle")
    assert waited["message_id"] == MESSAGE_ID and waited["outcome"] == "delivered", waited
    prompt = next(t for t in got[0].user_texts if MESSAGE in t)
    provenance, text = prompt.split("\n", 1)
    short = a.fingerprint.replace(" ", "")[:8]
    assert provenance.startswith(f"[connect] message {ref} "), (ref, provenance)
    assert f" from {claude.actor} (pane {claude.pane} on box {a.name}, {short}). " in provenance, provenance
    assert f"Reply: send_message to={claude.address}@{a.name} in_reply_to=" in provenance, provenance
    assert text == MESSAGE, "the text follows the provenance line, unchanged"
    assert got[0].text.count(MESSAGE) == 1, "the text reached Codex's model exactly once"
    # each box's record names the other box
    mine = message_row(fa, MESSAGE_ID)
    assert mine and (mine["to_box"], mine["outcome"]) == (b.name, "delivered"), mine
    theirs = message_row(fb, MESSAGE_ID)
    assert theirs and (theirs["from_box"], theirs["outcome"]) == (a.name, "delivered"), theirs
    # both boxes' audit records carry the same message identity (sender box / sender principal / id)
    a_rows = [(r["actor"], r["action"], r["outcome"], r.get("message_id")) for r in a.audit()]
    b_rows = [(r["actor"], r["action"], r["outcome"], r.get("message_id")) for r in b.audit()]
    (identity,) = {m for _, action, outcome, m in a_rows if (action, outcome) == ("federation.outbox", "queued")}
    assert identity.startswith(f"{a.box_id}/") and identity.endswith(f"/{MESSAGE_ID}"), identity
    remote_actor = f"box:{a.box_id}/{claude.actor}"
    for row in ((claude.actor, "send_message", "queued", MESSAGE_ID),  # the call, under its actor
                ("connectd", "federation.outbox", "published", identity),
                ("connectd", "federation.outbox", "accepted", identity),
                ("connectd", "federation.outbox", "delivered", identity),
                (claude.actor, "list_agents", "allowed", None),
                (claude.actor, "get_message", "allowed", None)):
        assert row in a_rows, (row, a_rows)
    for row in ((f"box:{a.box_id}", "federation.inbox", "accepted", identity),
                (remote_actor, "send_message", "queued", MESSAGE_ID),
                ("owner", "consent", "approved_once", MESSAGE_ID),
                (remote_actor, "send_message", "delivered", MESSAGE_ID),
                ("connectd", "federation.inbox", "delivered", identity)):
        assert row in b_rows, (row, b_rows)
    assert [r for r in b_rows if r[1] == "send_message" and r[2] == "delivered"] == [
        (remote_actor, "send_message", "delivered", MESSAGE_ID)], "typed once"

    # Codex's reply goes back across the boxes in reply to B's ref: a card on A naming the agent on box
    # devbox; approved through A's owner API, typed once into Claude's pane; A's get_message correlates it
    with steps.step("Codex's reply goes back to A: a card on A, approved, typed once into Claude's pane", 90):
        reply_sent = payload(steps.wait(lambda: result(fb, codex, "call_x_reply"), "Codex's send_message result"))
        reply_card = steps.wait(lambda: next(iter(fa.cards()), None), "the reply's card on A")
        steps.wait(lambda: "Answered laptop." in fb.screen(codex) and fb.ready(codex), "Codex idle after its answer")
        fa.script(claude, [Turn.tool(call("get_message", {"message_id": MESSAGE_ID}, id="toolu_x_correlate")),
                           Turn.reply("Codex on devbox says the parser tests pass.")])
        fa.api("POST", f"/api/cards/{reply_card['id']}/approve", {"pair": False})
        correlated = payload(steps.wait(lambda: result(fa, claude, "toolu_x_correlate"), "A's get_message"))
        steps.wait(lambda: (message_row(fa, REPLY_ID) or {}).get("outcome") == "delivered", "the reply delivered on A")
        steps.wait(lambda: (message_row(fb, REPLY_ID) or {}).get("outcome") == "delivered",
                   "B's get of the reply's outcome: delivered")
        steps.wait(lambda: fa.ready(claude), "A idle")
    print(f"[live] B's reply answered {reply_sent}; A's get_message {correlated}", flush=True)
    assert (reply_sent["message_id"], reply_sent["outcome"], reply_sent["to_box"]) == (REPLY_ID, "queued", a.name)
    # Codex's first prompt here is the message itself, so its rollout file (what binds its session) appears
    # only with that turn; B's watcher looks for it once per bind interval: wait for it, never assume it
    with steps.step("B binds Codex's session from the rollout file it holds open", 60):
        bound = steps.wait(lambda: (a := (fb.view(codex) or {}).get("actor", "")) and ":pane:" not in a and a,
                           "Codex's actor bound from its rollout")
    assert bound.startswith("agent:codex:"), bound
    assert (reply_card["recipient_pane"], reply_card["text"], reply_card["message_id"]) == (
        claude.pane, REPLY, REPLY_ID), reply_card
    assert (reply_card["sender_box"], reply_card["sender_fingerprint"]) == (b.name, b.fingerprint), reply_card
    # Codex's first prompt is the message itself: its reply may leave before connectd binds its session
    # from the rollout (the launch's actor) or after (the session's); either is Codex on B, never another
    names = {codex.actor, bound}
    assert reply_card["sender"] in {f"box:{b.box_id}/{n}" for n in names}, (reply_card, names)
    sender_actor = reply_card["sender"].split("/", 1)[1]
    assert not fb.cards(), "no card on B for B's own reply"
    replies = requests_with(fa, claude, REPLY)
    assert replies and replies[0].text.count(REPLY) == 1, "the reply reached Claude's model exactly once"
    reply_prompt = next(t for t in replies[0].user_texts if REPLY in t)
    first, rest = reply_prompt.split("\n", 1)
    assert first.startswith("[connect] message ") and rest == REPLY, reply_prompt
    b_short = b.fingerprint.replace(" ", "")[:8]
    assert f" from {sender_actor} (pane {codex.pane} on box {b.name}, {b_short}). " in first, first
    assert correlated["outcome"] == "delivered" and len(correlated["replies"]) == 1, correlated
    (answer,) = correlated["replies"]
    # Claude's get_message runs on the turn the reply's typing started: the daemon may not yet have
    # confirmed that typing (then the reply is still queued there); its delivery is waited for above
    assert answer["outcome"] in ("queued", "delivered") and answer["from"] == reply_card["sender"], correlated
    assert answer["ref"] == first.split(" ")[2], (answer, first)
    for box in (a, b):
        failed = [r for r in box.audit() if r["action"] == "task.bus" and r["outcome"] == "failed"]
        assert not failed, json.dumps(failed)
