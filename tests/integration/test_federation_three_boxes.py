"""Three real daemons federate over one real NATS server (docs/federation.md, "Test plan": integration
on real parts, "two (and three) connectd serve daemons"; issue 25).

Boxes A (laptop), B (devbox) and C (server), each a ``connectd serve`` with its own data directory,
HOME and private tmux server, one ``nats-server`` with a user per box (tests/support/federation.py).
Each pair of boxes paired by the real CLI with both approvals; each box lists the other two boxes'
agents (``list_agents``, qualified by the box's name). A stand-in agent on each box sends to the one
on each other box (six messages): each card on the recipient's box naming the sender's box, approved
(the card only: every later message needs its own), typed once under its provenance line, and the
sender learns ``delivered``; B's agent replies to A's message with the ``in_reply_to`` its provenance
line gave it, and A's sender sees the reply correlated. Revoking a recipient on its own box (C) ends
the message queued to it ``cancelled`` on the sender's box (A), never typed. Removing the pairing A-C
(on A) reaches C; a send from A to C is then refused ``unknown_box`` with the box's name and changes
nothing on either box, while A-B and B-C still deliver.
"""

from __future__ import annotations

import re
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.integration.test_daemon_e2e import get_message, send
from tests.support.daemon import AgentHandle, call, mcp_agent, wait_for
from tests.support.federation import Box, federated_boxes, pair
from tests.support.nats import NatsServer

QUICK = {"DEMO_BUSY_SECONDS": "0.3"}
REF = re.compile(r"^\[connect\] message (\S+) from .* on box (\S+), ")


@pytest.fixture
def three(tmp_path: Path) -> Iterator[tuple[list[Box], NatsServer]]:
    with federated_boxes(tmp_path, ["laptop", "devbox", "server"]) as made:
        yield made


def listed(box: Box, agent: AgentHandle) -> list[dict[str, Any]]:
    async def ask() -> Any:
        async with mcp_agent(box.daemon.mcp_url, agent.token or "") as client:
            return await call(client, "list_agents")

    err, payload = anyio.run(ask)
    assert not err, payload
    return list(payload["data"])


def sent(box: Box, sender: AgentHandle, to: str, text: str, mid: str) -> None:
    err, answer = anyio.run(send, box.daemon, sender, to, text, mid)
    assert not err and answer["outcome"] == "queued", answer  # type: ignore[index]


def outcome(box: Box, sender: AgentHandle, mid: str) -> str:
    return str(anyio.run(get_message, box.daemon, sender, mid)["outcome"])


def approve_card(box: Box, recipient: AgentHandle, sender_box: str, text: str) -> dict[str, Any]:
    """The card for ``text`` on ``box``: for ``recipient``'s pane, naming the sender's box; approved
    (this message only)."""
    card = wait_for(lambda: next((c for c in box.daemon.cards() if c["text"] == text), None), 30,
                    f"the card for {text!r} on {box.name}")
    assert card["recipient_pane"] == recipient.pane and card["sender_box"] == sender_box, card
    box.daemon.api("POST", f"/api/cards/{card['id']}/approve", {"pair": False})
    return dict(card)


MESSAGE_TABLES = ("messages", "outbox", "inbox", "cards", "pairs", "pairings", "pair_requests", "pair_invitations")


def store(box: Box) -> dict[str, list[tuple[object, ...]]]:
    """The message and pairing tables of ``box``'s store (what a refused send must leave as it was; the
    pairing wires' attempts, the directory and the audit log move on their own)."""
    db = sqlite3.connect(box.daemon.data_dir / "connect.db")
    try:
        return {t: sorted(db.execute(f"SELECT * FROM {t}").fetchall(), key=repr) for t in MESSAGE_TABLES}
    finally:
        db.close()


def test_three_boxes_pair_list_deliver_reply_revoke_and_remove_one_pairing(
    three: tuple[list[Box], NatsServer],
) -> None:
    (a, b, c), _server = three
    boxes = {"laptop": a, "devbox": b, "server": c}

    # each pair of boxes paired with both approvals
    pair(a, b)
    pair(b, c)
    pair(a, c)
    for box in (a, b, c):
        assert sorted(p["name"] for p in box.pairings() if p["state"] == "active") == sorted(set(boxes) - {box.name})

    # an agent on each box (and one more on C, to be revoked there)
    agents = {name: box.daemon.launch(f"agent-{name}", env=QUICK) for name, box in boxes.items()}
    doomed = c.daemon.launch("doomed", env=QUICK)
    for name, agent in agents.items():
        boxes[name].daemon.wait_ready(agent)
    c.daemon.wait_ready(doomed)

    # each box lists the other boxes' agents, qualified by the name it paired them under
    for name, box in boxes.items():
        wanted = {f"{agents[other].address}@{other}" for other in boxes if other != name}
        wait_for(lambda box=box, name=name, wanted=wanted: wanted <= {
            x["address"] for x in listed(box, agents[name]) if x.get("remote")}, 45,
            f"the other boxes' agents in {name}'s list_agents")

    # each agent sends to the one on each other box: a card on the recipient's box, typed once there
    flows = [(s, r) for s in boxes for r in boxes if s != r]
    for s, r in flows:
        sent(boxes[s], agents[s], f"{agents[r].address}@{r}", f"from {s} to {r}", f"m-{s}-{r}")
    for s, r in flows:
        approve_card(boxes[r], agents[r], s, f"from {s} to {r}")
    for s, r in flows:
        wait_for(lambda s=s, r=r: outcome(boxes[s], agents[s], f"m-{s}-{r}") == "delivered", 60,
                 f"m-{s}-{r} delivered on {s}")
    time.sleep(1.0)  # anything that would come twice comes now
    refs: dict[tuple[str, str], str] = {}
    for r, agent in agents.items():
        prompts = agent.prompts()
        assert sorted(p.split("\n", 1)[1] for p in prompts) == sorted(f"from {s} to {r}" for s in boxes if s != r), prompts
        for p in prompts:
            head, text = p.split("\n", 1)
            found = REF.match(head)
            assert found is not None, head
            assert text == f"from {found.group(2)} to {r}", (head, text)  # the provenance names the sender's box
            refs[(found.group(2), r)] = found.group(1)

    # the reply: B's agent answers A's message with the ref its provenance line gave; A's sender sees it
    b.daemon.wait_ready(agents["devbox"], 20)
    err, reply = anyio.run(lambda: send(b.daemon, agents["devbox"], f"{agents['laptop'].address}@laptop",
                                        "the answer from devbox", "r-devbox-laptop",
                                        in_reply_to=refs[("laptop", "devbox")]))
    assert not err and reply["outcome"] == "queued", reply  # type: ignore[index]
    approve_card(a, agents["laptop"], "devbox", "the answer from devbox")
    answered = wait_for(lambda: [p for p in agents["laptop"].prompts() if p.endswith("\nthe answer from devbox")], 30,
                        "the reply typed on A")
    assert len(answered) == 1 and "on box devbox" in answered[0].split("\n", 1)[0]
    got = wait_for(lambda: (m := anyio.run(get_message, a.daemon, agents["laptop"], "m-laptop-devbox"))["replies"] and m,
                   30, "the reply correlated on A")
    assert len(got["replies"]) == 1 and got["replies"][0]["from"].startswith(f"box:{b.local.box_id}/"), got
    wait_for(lambda: outcome(b, agents["devbox"], "r-devbox-laptop") == "delivered", 30, "the reply delivered on B")

    # revoke the recipient on its own box: the message queued to it ends cancelled on the sender's box
    sent(a, agents["laptop"], f"{doomed.address}@server", "to be revoked on arrival", "m-revoked")
    wait_for(lambda: [x for x in c.daemon.cards() if x["text"] == "to be revoked on arrival"], 30, "its card on C")
    c.text("revoke", doomed.pane)
    wait_for(lambda: not c.daemon.cards(), 30, "C's card withdrawn")
    wait_for(lambda: outcome(a, agents["laptop"], "m-revoked") == "cancelled", 30, "m-revoked cancelled on A")
    (row,) = [m for m in c.run("messages")["items"] if m["message_id"] == "m-revoked"]
    assert (row["from_box"], row["outcome"]) == ("laptop", "cancelled"), row
    assert doomed.prompts() == []

    # remove the pairing A-C (on A): it reaches C
    a.run("pair", "remove", "server", "--yes")
    wait_for(lambda: [p for p in c.daemon.api("GET", "/api/pairing/pairings")
                      if p["box"] == a.local.box_id and p["state"] == "removed"], 30, "the removal on C")
    time.sleep(1.0)  # nothing else in flight: the stores as the refusal must leave them
    before_a, before_c, typed_c = store(a), store(c), agents["server"].prompts()

    # a send from A to C is then refused, naming the box, and changes nothing
    err, refusal = anyio.run(send, a.daemon, agents["laptop"], f"{agents['server'].address}@server", "after removal",
                          "m-after-removal")
    assert err and "unknown_box" in str(refusal) and "server" in str(refusal), refusal
    time.sleep(1.0)
    assert store(a) == before_a and store(c) == before_c
    assert agents["server"].prompts() == typed_c and c.daemon.cards() == []
    assert not [m for m in a.run("messages")["items"] if m["message_id"] == "m-after-removal"]

    # A-B and B-C still deliver
    for s, r in (("laptop", "devbox"), ("devbox", "server")):
        sent(boxes[s], agents[s], f"{agents[r].address}@{r}", f"again from {s} to {r}", f"m2-{s}-{r}")
        approve_card(boxes[r], agents[r], s, f"again from {s} to {r}")
        wait_for(lambda s=s, r=r: outcome(boxes[s], agents[s], f"m2-{s}-{r}") == "delivered", 60,
                 f"m2-{s}-{r} delivered on {s}")
        assert [p for p in agents[r].prompts() if p.endswith(f"\nagain from {s} to {r}")], agents[r].prompts()

    for box in (a, b, c):
        assert not [x for x in box.audit("failed") if x["action"] == "task.bus"], box.daemon.log_text()
