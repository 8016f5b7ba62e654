"""Both boxes moved to another NATS server with messages in flight, without a restart
(docs/federation.md, "Moving a running bus"): two real daemons paired over one real ``nats-server``
(the setup of test_federation_faults), a second real server on loopback provisioned for both, and each
box moved by the real ``connectd federate --nats URL ...`` (``POST /api/pairing/reload``: its bus loops
stopped between deliveries and started again on the new server).

m-1 is published on the first server while B is paused (``SIGSTOP``), then A moves: m-1 waits for its
receipt. m-2 is published on the new server before B is there. B wakes on the first server, takes m-1
there and answers where A no longer listens, then moves. Each ends with one final outcome on A,
``delivered``, typed once on B: A's outbox publishes m-1 again on the new server under the same
identity, and B answers the copy with the receipt it holds (the end-to-end receipts make the switch
safe); m-2 waited in the new server's stream for B."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import anyio
import nats
import nats.js.errors
import pytest

from connectd.federation.bus import BUCKET
from tests.integration.test_federation_faults import (
    agents,
    approved_pair,
    audit,
    outbox_states,
    sent_ok,
    settled,
)
from tests.support.daemon import wait_for
from tests.support.federation import Box, cli, federated_boxes, pair
from tests.support.nats import ADMIN, NatsServer


@pytest.fixture
def two_servers(tmp_path: Path) -> Iterator[tuple[Box, Box, NatsServer, NatsServer]]:
    with federated_boxes(tmp_path, ["laptop", "devbox"]) as ((a, b), server):
        (tmp_path / "nats2").mkdir()
        other = NatsServer(tmp_path / "nats2", [a.local.box_id, b.local.box_id])
        other.start()
        try:
            anyio.run(other.provision)
            yield a, b, server, other
        finally:
            other.stop()


async def entries(server: NatsServer, keys: list[str]) -> list[str]:
    """Which of ``keys`` (``<publisher box>.<reader box>``) the server's directory bucket holds."""
    nc = await nats.connect(server.url, user=ADMIN[0], password=ADMIN[1])
    try:
        kv = await nc.jetstream().key_value(BUCKET)
        held = []
        for key in keys:
            try:
                await kv.get(key)
            except nats.js.errors.KeyNotFoundError:
                continue
            held.append(key)
        return held
    finally:
        await nc.close()


def move(box: Box, server: NatsServer) -> None:
    """``connectd federate --nats URL ...`` on ``box``: taken by its running daemon, connected there."""
    password = box.daemon.data_dir.parent / "nats-password"
    answer = box.run("federate", "--nats", server.url, "--user", f"box-{box.local.box_id}", "--password-file",
                     str(password))
    assert (answer["picked_up"], answer["restart_needed"]) == (True, False), answer
    wait_for(lambda: [s for s in [box.daemon.api("GET", "/api/pairing/status")]
                      if s["connected"] and s["nats"] == server.url], 20, f"box {box.name} connected to the new server")


def test_both_boxes_moved_to_another_server_with_messages_in_flight_each_ends_once_typed_once(
    two_servers: tuple[Box, Box, NatsServer, NatsServer],
) -> None:
    a, b, _server, other = two_servers
    pair(a, b)
    sender, recipient = agents(a, b)
    expected = approved_pair(a, b, sender, recipient)
    to = f"{recipient.address}@devbox"
    assert b.daemon.proc is not None
    os.kill(b.daemon.proc.pid, signal.SIGSTOP)
    try:
        sent_ok(a, sender, to, "published on the first server", "m-1")
        wait_for(lambda: "m-1" in outbox_states(a, "published"), 15, "m-1 published on A")
        move(a, other)  # m-1 in flight: published, no receipt
        sent_ok(a, sender, to, "published on the new server", "m-2")
        wait_for(lambda: "m-2" in outbox_states(a, "published"), 15, "m-2 published on A")
    finally:
        os.kill(b.daemon.proc.pid, signal.SIGCONT)
    wait_for(lambda: [r for r in audit(b, "federation.inbox") if r["outcome"] == "accepted"
                      and r["message_id"].endswith("/m-1")], 30, "B to take m-1 on the first server")
    move(b, other)
    expected["m-1"] = ("published on the first server", "delivered")
    expected["m-2"] = ("published on the new server", "delivered")
    settled(a, b, sender, recipient, expected, timeout=120)
    # m-1's receipt reached A on the new server: a copy A published there, answered as a duplicate
    duplicates = [r for r in audit(b, "federation.envelope") if r["outcome"] == "duplicate"]
    assert any(r["message_id"].endswith("/m-1") for r in duplicates), duplicates
    # each box's directory entry for the other is put on the new server at once, not at its next refresh
    keys = [f"{a.local.box_id}.{b.local.box_id}", f"{b.local.box_id}.{a.local.box_id}"]
    wait_for(lambda: anyio.run(entries, other, keys) == keys, 10, "both directory entries on the new server")
    for box in (a, b):
        moved = [r for r in audit(box, "federation.settings") if r["outcome"] == "picked_up"]
        assert len(moved) == 1 and f"-> {other.url}: the bus loops moved" in moved[0]["detail"], moved
        checks = {c["name"]: c for c in json.loads(cli(box.daemon, "doctor", "--json", home=box.home).stdout)["checks"]}
        assert checks["federation"]["status"] == "ok", checks["federation"]
        assert checks["federation"]["detail"].endswith(f"NATS {other.url}: connected"), checks["federation"]
        assert not [r for r in audit(box, "task.bus") if r["outcome"] == "failed"], box.daemon.log_text()[-3000:]
