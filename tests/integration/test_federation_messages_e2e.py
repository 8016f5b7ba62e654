"""Two real daemons send a message across boxes over a real NATS server (docs/federation.md, build
order slice 5; the setup is test_federation_pairing_e2e's: each ``connectd serve`` with its own data
directory, HOME and tmux server, one ``nats-server`` with a user per box). Paired by the real CLI, an
agent on box A sends to an agent on box B by its address qualified with B's name: A answers ``queued``;
the card appears on B naming the remote agent on box laptop with A's short fingerprint (API and
CLI) for B's pane; B's owner approves the pair; the text is typed once in B's pane under its
provenance line naming box A; A's sender learns ``delivered`` from B's signed receipt. ``connectd
messages`` on either box shows the other side's box (A's outbox row to box devbox; B's copy from box
laptop), and ``pair list`` when each box last heard the other. And cancels across boxes: the sender
revoked on A while B's card is open, the card withdrawn on B, A's row cancelled."""

from __future__ import annotations

import time

import anyio

from tests.integration.test_daemon_e2e import get_message, send
from tests.integration.test_federation_pairing_e2e import Box, boxes  # noqa: F401 - the fixture
from tests.support.daemon import wait_for
from tests.support.federation import pair as _pair
from tests.support.nats import NatsServer


def test_an_agent_on_box_a_reaches_an_agent_on_box_b_once_with_consent_and_learns_delivered(
    boxes: tuple[Box, Box, NatsServer],  # noqa: F811
) -> None:
    a, b, _server = boxes
    _pair(a, b)
    sender = a.daemon.launch("sender")
    recipient = b.daemon.launch("recipient")
    a.daemon.wait_ready(sender)
    b.daemon.wait_ready(recipient)

    err, sent = anyio.run(send, a.daemon, sender, f"{recipient.address}@devbox", "please run the tests\nand report",
                          "m-x")
    assert not err, sent
    assert sent["outcome"] == "queued" and sent["to_box"] == "devbox"  # type: ignore[index]

    card = b.daemon.wait_card(30)
    assert card["recipient_pane"] == recipient.pane and card["text"] == "please run the tests\nand report"
    # the remote agent, on box A by the name B paired it under and A's fingerprint (short), never only the box id
    fp = a.local.keys.fingerprint
    shown = f" on box laptop ({' '.join(fp.split(' ')[:2])} …)"
    assert (card["sender_box"], card["sender_fingerprint"]) == ("laptop", fp), card
    assert card["sender_name"].startswith("agent:") and card["sender_name"].endswith(shown), card
    assert card["words"]["approve_pair"].startswith(f"Approve pair: every message from {card['sender_name']} to ")
    assert card["sender"].startswith(f"box:{a.local.box_id}/agent:")  # for the record: the audit actor
    assert shown in b.text("cards")
    assert recipient.prompts() == []  # nothing typed before consent
    b.daemon.api("POST", f"/api/cards/{card['id']}/approve", {"pair": True})

    prompts = wait_for(recipient.prompts, 30, "B's agent to receive the message")
    first, rest = prompts[0].split("\n", 1)
    assert first.startswith("[connect] message ") and "on box laptop" in first
    assert rest == "please run the tests\nand report"

    def outcome() -> str:
        return str(anyio.run(get_message, a.daemon, sender, "m-x")["outcome"])

    wait_for(lambda: outcome() == "delivered", 60, "delivered on A")
    time.sleep(1.0)
    assert len(recipient.prompts()) == 1  # typed once
    for box in (a, b):
        assert not [r for r in box.audit("failed") if r["action"] == "task.bus"], box.daemon.log_text()
    # connectd messages on either box names the other side's box: A's row (its outbox) to box devbox
    # with its outcome, B's copy from box laptop
    (mine,) = [m for m in a.run("messages")["items"] if m["message_id"] == "m-x"]
    assert (mine["to_box"], mine["from_box"], mine["outcome"]) == ("devbox", None, "delivered"), mine
    assert mine["to"] == recipient.address and mine["text"] == "please run the tests\nand report"
    assert f"-> {recipient.address} on box devbox m-x: delivered" in a.text("messages")
    (theirs,) = [m for m in b.run("messages")["items"] if m["message_id"] == "m-x"]
    assert (theirs["from_box"], theirs["to_box"], theirs["outcome"]) == ("laptop", None, "delivered"), theirs
    assert " (box laptop) -> " in b.text("messages")
    # and each box heard the other lately (pair list's last heard)
    for box in (a, b):
        (pairing,) = box.pairings()
        assert pairing["heard_at"] is not None and time.time() - pairing["heard_at"] < 120, pairing
        assert " ago " in box.text("pair", "list")


def test_revoking_the_sender_on_box_a_withdraws_b_s_card_and_a_s_row_ends_cancelled(
    boxes: tuple[Box, Box, NatsServer],  # noqa: F811
) -> None:
    """Cancels across boxes on real parts: A's revoke answers at once, naming the message box devbox has
    not yet confirmed cancelled; B's card is withdrawn and its message cancelled, never typed; B's
    cancelled receipt ends A's row cancelled."""
    a, b, _server = boxes
    _pair(a, b)
    sender = a.daemon.launch("sender")
    recipient = b.daemon.launch("recipient")
    a.daemon.wait_ready(sender)
    b.daemon.wait_ready(recipient)
    err, sent = anyio.run(send, a.daemon, sender, f"{recipient.address}@devbox", "a message to withdraw", "m-c")
    assert not err and sent["outcome"] == "queued", sent  # type: ignore[index]
    card = b.daemon.wait_card(30)
    wait_for(lambda: [r for r in a.audit("accepted") if r["action"] == "federation.outbox"], 30, "accepted on A")

    revoked = a.text("revoke", sender.pane).splitlines()  # the CLI's sentence, from the owner API's answer
    assert len(revoked) == 2 and revoked[0].endswith("Connect is off (revoked: its next call fails; its queued "
                                                     "messages and open cards are cancelled)"), revoked
    assert revoked[1].endswith(": 1 message: box devbox has not yet confirmed it is cancelled"), revoked

    wait_for(lambda: not b.daemon.api("GET", "/api/cards"), 30, "B's card withdrawn")
    cancelled = wait_for(lambda: [r for r in b.audit("cancelled") if r["action"] == "send_message"], 30,
                         "the message cancelled on B")
    assert cancelled[0]["message_id"] == "m-c", cancelled
    closed = [c for c in b.daemon.api("GET", "/api/cards?all=true") if c["id"] == card["id"]]
    assert not closed or closed[0]["state"] == "cancelled", closed
    row = wait_for(lambda: [r for r in a.audit("cancelled") if r["action"] == "federation.outbox"], 30,
                   "A's row cancelled by B's receipt")
    assert row[0]["message_id"].endswith("/m-c"), row
    time.sleep(1.0)
    assert recipient.prompts() == []  # never typed
    for box in (a, b):
        assert not [r for r in box.audit("failed") if r["action"] == "task.bus"], box.daemon.log_text()
