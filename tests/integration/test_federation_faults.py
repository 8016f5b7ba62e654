"""Faults on real processes (docs/federation.md, "Test plan": faults; "Build order", item 8).

Two real daemons (``connectd serve``, each with its own data directory, HOME and tmux server) paired
over one real ``nats-server`` (``sync_interval: always``, a user per box holding exactly its permission
block): the setup of test_federation_pairing_e2e and test_federation_messages_e2e, reused. Each test
breaks one real process with a signal while messages cross from box A (laptop) to box B (devbox):

- (a) ``kill -9`` the NATS server mid-flow, messages sent before and while it is down, restarted on the
  same store;
- (b) ``kill -9`` the receiving daemon while its card is open (it accepted: A holds its receipt), and a
  message sent while it is dead; restarted;
- (c) ``kill -9`` the sending daemon after it published and before any receipt came (B stopped with
  ``SIGSTOP`` meanwhile); restarted, its outbox publishes again under the same identity (the stream
  holds two copies of one envelope), B types once;
- (d) NATS stopped (``SIGSTOP``) for longer than B's card life (``[limits] card_ttl`` in B's
  policy.toml): the card expires on B, the ``expired`` receipt reaches A once NATS runs again, and
  nothing is typed late;
- the server restarted on an empty store (what JetStream acknowledged lost): A's outbox publishes again;
- ``kill -9`` the receiving daemon with its card open and leave it down longer than the card's life:
  its recovery expires the card and A learns ``expired`` at once (the receipt waits for the bus loops);
- (e) a three-node JetStream cluster (tests/support/nats.py ``NatsCluster``), the stream's leader node
  killed between two bursts.

Either daemon killed at seeded random moments: test_federation_kills.py (its own file, so the two run on
separate workers).

Every test ends with :func:`settled`: never typed twice (the prompts in B's pane), every message A
admitted exactly one final outcome on A (its audit records and ``get_message``), and every message B
accepted present in B's store with that same outcome (nothing B acknowledged lost).
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import nats
import nats.js.errors
import pytest

from tests.integration.test_daemon_e2e import get_message, send
from tests.integration.test_federation_messages_e2e import _pair
from tests.integration.test_federation_pairing_e2e import Box, boxes  # noqa: F401 - the fixture
from tests.support.daemon import AgentHandle, DaemonProcess, wait_for
from tests.support.federation import federated_boxes
from tests.support.nats import ADMIN, NatsCluster, NatsServer

FINALS = frozenset({"delivered", "declined", "refused", "cancelled", "expired", "unconfirmed"})
QUICK = {"DEMO_BUSY_SECONDS": "0.3"}  # the stand-in's turn: short, so a burst is typed quickly


# --- helpers ------------------------------------------------------------------------------------------


def audit(box: Box, action: str) -> list[dict[str, Any]]:
    """Every audit record of ``action`` on ``box``, newest first (all pages: a fault's failed loops
    write many records of their own)."""
    rows: list[dict[str, Any]] = []
    url = "/api/audit?limit=1000"
    while True:
        page = box.daemon.http().get(url)
        assert page.status_code == 200, page.text
        rows += [r for r in page.json() if r["action"] == action]
        before = page.headers.get("X-Next-Before")
        if before is None:
            return rows
        url = f"/api/audit?limit=1000&before={before}"


def finals_on_a(a: Box) -> dict[str, list[str]]:
    """Message id -> every final outcome A's outbox recorded for it (the audit trail: one per row that
    ended, so two would be an outcome that changed)."""
    out: dict[str, list[str]] = {}
    for r in audit(a, "federation.outbox"):
        if r["outcome"] in FINALS:
            out.setdefault(r["message_id"].rsplit("/", 1)[-1], []).append(r["outcome"])
    return out


def outbox_states(a: Box, state: str) -> set[str]:
    return {r["message_id"].rsplit("/", 1)[-1] for r in audit(a, "federation.outbox") if r["outcome"] == state}


def typed(recipient: AgentHandle) -> Counter[str]:
    """How many times each text was typed into B's pane (the part under the provenance line)."""
    return Counter(p.split("\n", 1)[1] if p.startswith("[connect] message ") else p for p in recipient.prompts())


def story(a: Box, b: Box, recipient: AgentHandle) -> str:
    """What each box recorded, for a failure's message."""
    lines = ["A:"] + [f"  {r['action']} {r['outcome']} {r['message_id']} {r.get('detail', '')}"
                      for r in audit(a, "federation.outbox")]
    lines += ["B:"] + [f"  {r['action']} {r['outcome']} {r['message_id']} {r.get('detail', '')}"
                       for action in ("federation.inbox", "federation.envelope", "send_message")
                       for r in audit(b, action)]
    lines += [f"typed: {dict(typed(recipient))}", "A's log:", a.daemon.log_text()[-3000:],
              "B's log:", b.daemon.log_text()[-3000:]]
    return "\n".join(lines)


def sent_ok(a: Box, sender: AgentHandle, to: str, text: str, message_id: str) -> None:
    err, answer = anyio.run(send, a.daemon, sender, to, text, message_id)
    assert not err and answer["outcome"] == "queued", answer  # type: ignore[index]


def settled(a: Box, b: Box, sender: AgentHandle, recipient: AgentHandle, expected: dict[str, tuple[str, str]],
            timeout: float = 60.0) -> None:
    """Wait until every message in ``expected`` (id -> (text, outcome)) has its final outcome on A, then
    check the three invariants: never typed twice; exactly one final outcome on A, the expected one,
    which A's sender reads with get_message; whatever B accepted is in B's store with that outcome."""
    try:
        wait_for(lambda: set(expected) <= set(finals_on_a(a)), timeout, "a final outcome on A for each", every=0.5)
    except AssertionError as missing:
        raise AssertionError(f"{missing}: {sorted(expected)}\n{story(a, b, recipient)}") from None
    time.sleep(1.5)  # anything that would come twice comes now
    finals = finals_on_a(a)
    for mid, (_text, outcome) in expected.items():
        assert finals[mid] == [outcome], (mid, finals[mid])
        assert anyio.run(get_message, a.daemon, sender, mid)["outcome"] == outcome, mid
    counts = typed(recipient)
    assert all(n == 1 for n in counts.values()), counts  # never typed twice
    for mid, (text, outcome) in expected.items():
        assert counts[text] == (1 if outcome == "delivered" else 0), (mid, counts)
    accepted = {r["message_id"].rsplit("/", 1)[-1] for r in audit(b, "federation.inbox") if r["outcome"] == "accepted"}
    held = {m["message_id"]: m["outcome"] for m in b.run("messages")["items"] if m["from_box"] == "laptop"}
    for mid in accepted:
        assert mid in held, (mid, held)  # nothing B acknowledged lost
        assert held[mid] == finals[mid][0], (mid, held[mid], finals[mid])


def agents(a: Box, b: Box) -> tuple[AgentHandle, AgentHandle]:
    sender = a.daemon.launch("sender", env=QUICK)
    recipient = b.daemon.launch("recipient", env=QUICK)
    a.daemon.wait_ready(sender)
    b.daemon.wait_ready(recipient)
    return sender, recipient


def approved_pair(a: Box, b: Box, sender: AgentHandle, recipient: AgentHandle) -> dict[str, tuple[str, str]]:
    """A first message, its card on B approved as a pair: later ones are typed without a card."""
    sent_ok(a, sender, f"{recipient.address}@devbox", "first, to approve the pair", "m-0")
    card = b.daemon.wait_card(30)
    b.daemon.api("POST", f"/api/cards/{card['id']}/approve", {"pair": True})
    wait_for(lambda: "m-0" in finals_on_a(a), 30, "m-0 delivered on A", every=0.3)
    return {"m-0": ("first, to approve the pair", "delivered")}


def restart(box: Box, sig: int = signal.SIGKILL, policy: str | None = None) -> None:
    """Stop ``box``'s daemon with ``sig`` (SIGKILL: a crash) and start it again on the same data
    directory and tmux server (its agents' panes live on)."""
    box.daemon.stop(sig)
    if policy is not None:
        (box.daemon.data_dir / "policy.toml").write_text(policy)
    box.daemon.start()


async def stream_copies(server: NatsServer, subject: str) -> list[bytes]:
    """The envelopes the stream holds on ``subject`` (as the operator reads them)."""
    nc = await nats.connect(server.url, user=ADMIN[0], password=ADMIN[1])
    try:
        js = nc.jetstream()
        info = await js.stream_info("CONNECT", subjects_filter=subject)
        out: list[bytes] = []
        if not info.state.messages:
            return out
        for seq in range(info.state.first_seq, info.state.last_seq + 1):
            try:
                msg = await js.get_msg("CONNECT", seq)
            except nats.js.errors.NotFoundError:
                continue
            if msg.subject == subject and msg.data is not None:
                out.append(msg.data)
        return out
    finally:
        await nc.close()


# --- the faults -------------------------------------------------------------------------------------


def test_nats_killed_mid_flow_and_restarted_every_message_delivered_once(
    boxes: tuple[Box, Box, NatsServer],  # noqa: F811
) -> None:
    """(a) A burst from A to B; ``kill -9`` the server right after it, more messages while it is down
    (A answers ``queued``: they wait in its outbox); the server restarted on the same store: each is
    typed once on B and A learns ``delivered`` once."""
    a, b, server = boxes
    _pair(a, b)
    sender, recipient = agents(a, b)
    expected = approved_pair(a, b, sender, recipient)
    to = f"{recipient.address}@devbox"
    for i in range(1, 4):
        sent_ok(a, sender, to, f"burst before the kill {i}", f"m-a{i}")
        expected[f"m-a{i}"] = (f"burst before the kill {i}", "delivered")
    server.kill()
    for i in range(4, 7):
        sent_ok(a, sender, to, f"sent while NATS is dead {i}", f"m-a{i}")
        expected[f"m-a{i}"] = (f"sent while NATS is dead {i}", "delivered")
    time.sleep(2.0)
    assert not {"m-a4", "m-a5", "m-a6"} & set(typed(recipient))
    server.start()
    settled(a, b, sender, recipient, expected, timeout=40)


def test_receiving_daemon_killed_with_its_card_open_neither_loses_nor_retypes(
    boxes: tuple[Box, Box, NatsServer],  # noqa: F811
) -> None:
    """(b) B accepted (its card open, A holds the ``accepted`` receipt); ``kill -9`` B; A sends another
    while B is dead; B restarted: both cards are there, approved each is typed once, A learns
    ``delivered`` once for each."""
    a, b, _server = boxes
    _pair(a, b)
    sender, recipient = agents(a, b)
    to = f"{recipient.address}@devbox"
    sent_ok(a, sender, to, "held on a card across a crash", "m-b1")
    b.daemon.wait_card(30)
    wait_for(lambda: "m-b1" in outbox_states(a, "accepted"), 30, "B's accepted receipt on A")
    restart(b)
    sent_ok(a, sender, to, "sent while the receiver is dead", "m-b2")
    cards = wait_for(lambda: len(b.daemon.cards()) == 2 and b.daemon.cards(), 60, "both cards on B after its restart")
    assert recipient.prompts() == []
    for card in cards:
        b.daemon.api("POST", f"/api/cards/{card['id']}/approve", {"pair": False})
    settled(a, b, sender, recipient, {"m-b1": ("held on a card across a crash", "delivered"),
                                      "m-b2": ("sent while the receiver is dead", "delivered")}, timeout=60)


def test_sending_daemon_killed_after_it_published_republishes_the_same_envelope_typed_once(
    boxes: tuple[Box, Box, NatsServer],  # noqa: F811
) -> None:
    """(c) B stopped (``SIGSTOP``), so no receipt comes; A publishes, then ``kill -9`` A; restarted, A's
    outbox publishes the same envelope again (the stream holds two copies, byte for byte the same);
    B continued: typed once, the copy answered as a duplicate, A learns ``delivered`` once."""
    a, b, server = boxes
    _pair(a, b)
    sender, recipient = agents(a, b)
    expected = approved_pair(a, b, sender, recipient)
    assert b.daemon.proc is not None
    subject = f"connect.{b.local.box_id}.inbox.{a.local.box_id}"
    os.kill(b.daemon.proc.pid, signal.SIGSTOP)
    try:
        sent_ok(a, sender, f"{recipient.address}@devbox", "published, then the sender crashed", "m-c")
        wait_for(lambda: "m-c" in outbox_states(a, "published"), 15, "m-c published on A")
        wait_for(lambda: anyio.run(stream_copies, server, subject), 15, "the first copy in the stream")
        a.daemon.stop(signal.SIGKILL)
        before = len(anyio.run(stream_copies, server, subject))  # what A published before it died
        a.daemon.start()
        copies = wait_for(lambda: (c := anyio.run(stream_copies, server, subject)) and len(c) > before and c, 40,
                          "A's outbox to publish m-c again after its restart", every=0.5)
        assert len(set(copies)) == 1, "every copy is the same envelope (the same identity, nonce, signature)"
    finally:
        os.kill(b.daemon.proc.pid, signal.SIGCONT)
    expected["m-c"] = ("published, then the sender crashed", "delivered")
    settled(a, b, sender, recipient, expected, timeout=60)
    duplicates = [r for r in audit(b, "federation.envelope") if r["outcome"] == "duplicate"]
    assert any(r["message_id"].endswith("/m-c") for r in duplicates), duplicates


def test_nats_restarted_on_an_empty_store_every_message_still_reaches_its_outcome(
    boxes: tuple[Box, Box, NatsServer],  # noqa: F811
) -> None:
    """The loss ``sync_interval`` allows, at its worst: B paused (``SIGSTOP``) so three messages wait in
    the stream, acknowledged by JetStream; the server killed and restarted on an empty store, the
    stream, bucket and consumers provisioned again: what JetStream acknowledged is gone, yet A's outbox
    publishes each row again (a publish acknowledgement is never acceptance) and each is typed once on B
    and ``delivered`` once on A."""
    a, b, server = boxes
    _pair(a, b)
    sender, recipient = agents(a, b)
    expected = approved_pair(a, b, sender, recipient)
    assert b.daemon.proc is not None
    subject = f"connect.{b.local.box_id}.inbox.{a.local.box_id}"
    os.kill(b.daemon.proc.pid, signal.SIGSTOP)
    try:
        for i in range(1, 4):
            sent_ok(a, sender, f"{recipient.address}@devbox", f"acknowledged by JetStream, then lost {i}", f"m-f{i}")
            expected[f"m-f{i}"] = (f"acknowledged by JetStream, then lost {i}", "delivered")
        wait_for(lambda: len(anyio.run(stream_copies, server, subject)) >= 3, 15, "the three in the stream")
        server.kill()
        shutil.rmtree(server.store)
        server.start()
        anyio.run(server.provision)
        assert anyio.run(stream_copies, server, subject) == []  # lost
    finally:
        os.kill(b.daemon.proc.pid, signal.SIGCONT)
    settled(a, b, sender, recipient, expected, timeout=60)


@pytest.mark.parametrize("stop", ["sigstop", "kill"])
def test_nats_stopped_longer_than_the_card_life_ends_expired_never_typed_late(
    boxes: tuple[Box, Box, NatsServer], stop: str,  # noqa: F811
) -> None:
    """(d) B's card life shortened to 6 s; B accepted (card open, A holds ``accepted``); NATS stopped
    for longer than the card's life, paused (``SIGSTOP``: the connections stay open) or killed
    (``kill -9``, restarted on its store): the card expires on B, its message ``expired`` there, and
    once NATS runs again A learns ``expired`` (the receiver's word, by its signed receipt), once; nothing
    is typed, and the expired card cannot be approved. Killed, B's ``expired`` receipt could not be
    published then: A learns it because its bus coming back makes its accepted row due (outbox O5),
    which B answers with the receipt it holds, and because B's bus loop tries the receipt again (before
    both: only at A's 300 s poll, and this test failed)."""
    a, b, server = boxes
    restart(b, signal.SIGTERM, policy="[limits]\ncard_ttl = 6.0\n")
    _pair(a, b)
    sender, recipient = agents(a, b)
    sent_ok(a, sender, f"{recipient.address}@devbox", "waits on a card that outlives no outage", "m-d")
    card = b.daemon.wait_card(30)
    wait_for(lambda: "m-d" in outbox_states(a, "accepted"), 30, "B's accepted receipt on A")
    assert server.proc is not None
    if stop == "sigstop":
        server.proc.send_signal(signal.SIGSTOP)
    else:
        server.kill()
    try:
        wait_for(lambda: not b.daemon.cards(), 20, "the card expired on B")
        wait_for(lambda: [m for m in b.run("messages")["items"] if m["message_id"] == "m-d"
                          and m["outcome"] == "expired"], 10, "m-d expired on B")
        time.sleep(1.0)
        assert "m-d" not in finals_on_a(a)  # A cannot know yet: it says queued, accepted by box devbox
        late = b.daemon.http().post(f"/api/cards/{card['id']}/approve", json={"pair": True})
        assert late.status_code >= 400, late.text  # an expired card is answered no more
    finally:
        if stop == "sigstop":
            server.proc.send_signal(signal.SIGCONT)
        else:
            server.start()
    settled(a, b, sender, recipient, {"m-d": ("waits on a card that outlives no outage", "expired")}, timeout=60)


@pytest.fixture
def short_cards(tmp_path: Path) -> Iterator[tuple[Box, Box, NatsServer]]:
    """The two boxes, B's card life 6 s from its start (``[limits] card_ttl`` in its policy.toml)."""
    def make(root: Path, tmux: Any) -> DaemonProcess:
        return DaemonProcess(root, tmux, policy="[limits]\ncard_ttl = 6.0\n" if root.name == "b" else "")

    with federated_boxes(tmp_path, ["laptop", "devbox"], make_daemon=make) as (made, server):
        yield made[0], made[1], server  # type: ignore[misc]


def test_receiving_daemon_down_longer_than_the_card_life_its_expired_receipt_reaches_a_at_once(
    short_cards: tuple[Box, Box, NatsServer],
) -> None:
    """B's card life 6 s; B accepted (its card open, A holds ``accepted``); ``kill -9`` B and leave it
    down for longer than the card's life; restarted, B's recovery expires the card, and A learns
    ``expired`` at once (nothing typed). Before: the recovery ran before the bus loops existed, so its
    ``expired`` receipt was dropped and A learned it only from its 300 s poll (this test failed)."""
    a, b, _server = short_cards
    _pair(a, b)
    sender, recipient = agents(a, b)
    sent_ok(a, sender, f"{recipient.address}@devbox", "its card outlives the receiver's crash", "m-g")
    b.daemon.wait_card(30)
    wait_for(lambda: "m-g" in outbox_states(a, "accepted"), 30, "B's accepted receipt on A")
    b.daemon.stop(signal.SIGKILL)
    time.sleep(7.0)  # longer than the card's life: it ends at B's recovery
    b.daemon.start()
    settled(a, b, sender, recipient, {"m-g": ("its card outlives the receiver's crash", "expired")}, timeout=40)


@pytest.fixture
def cluster_boxes(tmp_path: Path) -> Iterator[tuple[Box, Box, NatsCluster]]:
    with federated_boxes(tmp_path, ["laptop", "devbox"], make_server=NatsCluster) as (made, server):
        yield made[0], made[1], server  # type: ignore[misc]


def test_the_stream_leader_of_a_three_node_cluster_killed_mid_flow_every_message_delivered_once(
    cluster_boxes: tuple[Box, Box, NatsCluster],
) -> None:
    """(e) Three nodes, stream replicas 3, both daemons given the first node's URL (they learn the
    others from it); the node leading the stream ``CONNECT`` (made another than the daemons' node, so
    their connections stay up) killed (``kill -9``) between two bursts: while a new leader is elected
    publishes are refused ``no stream takes``, and B's receipts refused then are tried again by its bus
    loop (before: dropped, and A waited for its 300 s poll: this test failed); every message typed once,
    ``delivered`` once on A; the node restarted on its store, nothing comes twice."""
    a, b, cluster = cluster_boxes
    _pair(a, b)
    sender, recipient = agents(a, b)
    expected = approved_pair(a, b, sender, recipient)
    to = f"{recipient.address}@devbox"
    leader = anyio.run(cluster.leader_not, 0)  # the daemons' node stays: their connections stay up
    for i in range(1, 4):
        sent_ok(a, sender, to, f"before the leader died {i}", f"m-e{i}")
        expected[f"m-e{i}"] = (f"before the leader died {i}", "delivered")
    cluster.node(leader).kill()
    for i in range(4, 7):
        sent_ok(a, sender, to, f"after the leader died {i}", f"m-e{i}")
        expected[f"m-e{i}"] = (f"after the leader died {i}", "delivered")
    settled(a, b, sender, recipient, expected, timeout=60)
    cluster.node(leader).start()
    time.sleep(3.0)
    settled(a, b, sender, recipient, expected, timeout=10)

