"""Two real daemons pair over a real NATS server (docs/federation.md, "Pairing", build order slice 4).

Each daemon (``connectd serve`` in a subprocess) has its own data directory, HOME and private tmux
server; one ``nats-server`` (tests/support/nats.py: ``sync_interval: always``, an admin user who
provisions, and a user per box holding exactly that box's permission block) carries the pairing
envelopes, sealed and signed; each box is pointed at it by ``connectd federate --nats URL --user ...
--password-file ...``. The person's side is the real CLI. Checked: invite on A, accept on B
(A's fingerprint shown); A's owner sees the request with both fingerprints and approves; both sides list
the pairing active with the other's keys pinned and the same pairing id; accepting the code again
returns that pairing and changes nothing; a conflicting request (a third box holding the code's secret,
over NATS) is refused ``invitation_used`` and changes nothing; removal on one side reaches the other
and is permanent (refused again, the code refused, across a restart); NATS going away ends neither
daemon, and what was owed meanwhile goes out once it is back (pairing again: a new pairing, a new id).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from connectcore.federation import envelope as E
from connectcore.federation import pairing as P
from connectd.federation import keys as K
from connectd.federation.bus import NatsBus
from connectd.federation.seal import LocalBox, seal
from tests.integration.test_pair_cli import tables
from tests.support.daemon import wait_for
from tests.support.federation import Box, cli, federated_boxes
from tests.support.nats import NatsServer

ROGUE = LocalBox.from_secrets(K.BoxSecrets(bytes([41]) * 32, bytes([42]) * 32))


@pytest.fixture
def boxes(tmp_path: Path) -> Iterator[tuple[Box, Box, NatsServer]]:
    with federated_boxes(tmp_path, ["laptop", "devbox"], extra_boxes=[ROGUE.box_id]) as (made, server):
        yield made[0], made[1], server


async def _publish_rogue_request(server: NatsServer, code: P.Code) -> None:
    """A third box holding the code (and so its secret) asks A over NATS, under its own id."""
    routing = E.Routing(E.Kind.PAIR_REQUEST, ROGUE.box_id, code.box, invitation=code.invitation)
    inner = E.PairingInner(routing, (("name", "rogue"), ("secret", E.b64(code.secret))))
    wire = seal(ROGUE, code.keys, inner, secrets.token_bytes(E.NONCE_BYTES))
    bus = await server.connect(NatsBus(ROGUE.box_id, call_timeout=5.0))
    try:
        await bus.publish(E.subject_for(E.Kind.PAIR_REQUEST, ROGUE.box_id, code.box), wire, msg_id="rogue-1")
    finally:
        await bus.close()


def doctor(box: Box) -> dict[str, dict[str, str]]:
    done = cli(box.daemon, "doctor", "--json", home=box.home)
    return {c["name"]: c for c in json.loads(done.stdout)["checks"]}


def test_two_daemons_pair_over_nats_with_two_approvals_and_remove_for_good(boxes: tuple[Box, Box, NatsServer]) -> None:
    a, b, server = boxes
    fp_a, fp_b = a.local.keys.fingerprint, b.local.keys.fingerprint

    # invite on A: the code, printed once, beside A's fingerprint
    invited = a.run("pair", "invite")
    assert invited["fingerprint"] == fp_a and invited["box"] == a.local.box_id
    code_text = invited["code"]
    code = P.decode_code(code_text)

    # accept on B: A's fingerprint shown before it is pinned; B's pairing waits, requested
    shown = b.text("pair", "accept", code_text, "--yes")
    assert fp_a in shown and fp_b in shown
    (requested,) = b.pairings()
    assert (requested["state"], requested["box"], requested["fingerprint"]) == ("requested", a.local.box_id, fp_a)

    # A's owner sees the request, with both fingerprints, once it came over NATS
    pending = wait_for(lambda: a.run("pair", "requests"), 20, "the pair request on A")
    (request,) = pending
    assert (request["box"], request["name"], request["fingerprint"]) == (b.local.box_id, "devbox", fp_b)
    assert request["this_box"]["fingerprint"] == fp_a
    listing = a.text("pair", "requests")
    assert fp_a in listing and fp_b in listing
    waiting = doctor(a)["pair request devbox"]
    assert waiting["status"] == "warn" and fp_b in waiting["detail"] and f"pair approve {b.local.box_id}" in waiting["fix"]

    # approval 2 on A: active at once on A, and on B once the pair_accept arrives
    approved = a.run("pair", "approve", b.local.box_id)
    assert (approved["state"], approved["fingerprint"]) == ("active", fp_b)
    pairing_id = approved["pairing"]
    on_b = wait_for(lambda: [p for p in b.pairings() if p["state"] == "active"], 20, "the pairing active on B")
    assert [(p["box"], p["fingerprint"], p["pairing"], p["name"]) for p in on_b] == [
        (a.local.box_id, fp_a, pairing_id, "laptop")]
    assert [(p["box"], p["fingerprint"], p["pairing"], p["state"]) for p in a.pairings()] == [
        (b.local.box_id, fp_b, pairing_id, "active")]
    assert a.run("pair", "requests") == []

    # doctor on A: the NATS server, connected as the daemon reports it; the pairing with B's fingerprint
    status = a.daemon.api("GET", "/api/pairing/status")
    assert (status["nats"], status["connected"], status["pairings"], status["pending_requests"]) == (server.url, True, 1, 0)
    checks = doctor(a)
    assert checks["federation"]["status"] == "ok", checks
    assert checks["federation"]["detail"] == f"configured: box laptop; NATS {server.url}: connected"
    assert checks["pairing devbox"]["detail"] == f"box {b.local.box_id}, fingerprint {fp_b}: active"

    # the same code accepted again returns the established pairing and changes nothing
    before_a, before_b = tables(a.daemon), tables(b.daemon)
    again = b.run("pair", "accept", code_text, "--yes")
    assert (again["repeat"], again["pairing"], again["state"]) == (True, pairing_id, "active")
    assert tables(b.daemon) == before_b

    # a conflicting request (another box with the same code) fails: refused, audited, nothing changed
    anyio.run(_publish_rogue_request, server, code)
    refusal = wait_for(
        lambda: [r for r in a.audit("refused") if r["actor"] == f"box:{ROGUE.box_id}"], 20, "the rogue's refusal on A")
    assert "invitation_used" in refusal[0]["detail"]
    after_a = tables(a.daemon)
    assert {k: v for k, v in after_a.items() if k != "pair_wires"} == {
        k: v for k, v in before_a.items() if k != "pair_wires"}
    assert [p["state"] for p in a.pairings()] == ["active"] and a.run("pair", "requests", "--all")[0]["state"] == "approved"

    # removal on B reaches A (its signed unpair) and is permanent on both sides
    removed = b.run("pair", "remove", "laptop", "--yes")
    assert removed["state"] == "removed"
    on_a = wait_for(lambda: [p for p in a.pairings() if p["state"] == "removed"], 20, "the removal on A")
    assert on_a[0]["removed_by"] == "peer" and on_a[0]["pairing"] == pairing_id
    again_b = cli(b.daemon, "pair", "remove", "laptop", "--yes", home=b.home)
    assert again_b.returncode == 1 and "is removed: nothing to remove" in again_b.stderr
    refused = cli(b.daemon, "pair", "accept", code_text, "--yes", home=b.home)
    assert refused.returncode == 1 and "already used on this box" in refused.stderr
    b.daemon.stop()
    b.daemon.start()
    assert [(p["state"], p["removed_by"]) for p in b.pairings()] == [("removed", "owner")]

    # no bus loop failed on the way (each failure is audited as task.bus)
    for box in (a, b):
        assert not [r for r in box.audit("failed") if r["action"] == "task.bus"], box.daemon.log_text()

    # NATS away ends neither daemon; both still answer their owners
    server.kill()
    anyio.run(anyio.sleep, 2.0)
    for box in (a, b):
        assert box.daemon.proc is not None and box.daemon.proc.poll() is None
        assert [p["state"] for p in box.pairings()] == ["removed"]
    away = wait_for(lambda: [c for c in [doctor(a)["federation"]] if "not connected" in c["detail"]], 20, "doctor: not connected")
    assert away[0]["status"] == "warn" and server.url in away[0]["detail"]
    invited_offline = a.run("pair", "invite")  # an invitation needs no bus
    accepted_offline = b.run("pair", "accept", invited_offline["code"], "--yes")  # its request waits in the store
    assert accepted_offline["state"] == "requested"

    # NATS back: what was owed goes out, and pairing again makes a new pairing with a new id
    server.start()
    pending = wait_for(lambda: a.run("pair", "requests"), 60, "the request sent once NATS is back")
    assert [r["box"] for r in pending] == [b.local.box_id]
    renewed = a.run("pair", "approve", "devbox")["pairing"]
    assert renewed != pairing_id
    wait_for(lambda: [p for p in b.pairings() if p["pairing"] == renewed and p["state"] == "active"], 60,
             "the new pairing active on B")
    assert sorted((p["pairing"], p["state"]) for p in a.pairings()) == sorted(
        [(pairing_id, "removed"), (renewed, "active")])
