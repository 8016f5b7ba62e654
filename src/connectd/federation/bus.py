"""NatsBus: the ``Bus`` port (``connectcore.ports``) on nats-py and JetStream (docs/federation.md, "NATS").

One connection per box, as the user ``box-<id>`` whose permissions the server holds
(``connectd.federation.provision.permissions``): replies on ``_INBOX.<id>.>`` (the ``inbox_prefix``),
envelopes published with ``Nats-Msg-Id``, fetched from the durable pull consumer ``box-<id>`` of the
stream ``CONNECT`` and acknowledged (double acknowledgement: the server confirms), the directory bucket
``connect_dir`` built with ``direct=True`` here (``js.key_value()`` would ask for the stream's information,
which a box may not read, and a bucket without direct get answers ``no responders``), history queries as
core NATS requests on ``connect.<id>.history``.

Two facts of the client shape the errors (both seen on nats-server 2.15.1 with nats-py 2.16.0): a
publish the permissions refuse raises nothing at the call (the server sends ``-ERR 'Permissions
Violation for Publish to "..."'``, the client hands it, lowercased, to the error callback, and the
request times out),
so the error callback wakes the call waiting on that subject with :class:`BusRefused`; and while the
connection is down nats-py buffers what is published and sends it after the reconnect, so a publish
while not connected raises :class:`BusUnavailable` at once and sends nothing. Only ``BusUnavailable``
and ``BusRefused`` leave this module.

A third shapes the long poll: a fetch in flight when the connection drops is unknown to the server the
client reconnects to (a restarted one never heard of it), and nats-py waits out its whole timeout (30 s
in the daemon) while deliveries wait. So a reconnection ends it (``fetch`` answers nothing) and the
next fetch binds a new pull subscription: after a cancelled fetch the old one was seen holding a
delivery it never handed over (nats-py 2.16.0); a delivery so stranded is not acknowledged and comes
again after ``ack_wait``.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import ssl
from collections.abc import AsyncIterator, Awaitable, Sequence
from typing import Any, TypeVar

import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.client import JetStreamContext
from nats.js.kv import KeyValue

from connectcore.ports import BusRefused, BusRequest, BusUnavailable, Delivery, PublishAck

STREAM = "CONNECT"
BUCKET = "connect_dir"
_VIOLATION = re.compile(r'permissions violation for (publish|subscription) to "([^"]+)"', re.IGNORECASE)
T = TypeVar("T")


def consumer_name(box_id: str) -> str:
    return f"box-{box_id}"


class NatsBus:
    """The bus of box ``box_id`` on a NATS server; :meth:`connect` before use, :meth:`close` after.
    ``consumer`` is this box's consumer (``box-<id>``; a test names another box's to see it refused)."""

    def __init__(self, box_id: str, *, consumer: str | None = None, call_timeout: float = 5.0) -> None:
        self.box_id = box_id
        self.consumer = consumer or consumer_name(box_id)
        self.call_timeout = call_timeout
        self._nc: Client | None = None
        self._js: JetStreamContext | None = None
        self._kv: KeyValue | None = None
        self._pull: JetStreamContext.PullSubscription | None = None
        self._waiting: dict[str, set[asyncio.Future[None]]] = {}
        self._polls: set[asyncio.Future[None]] = set()  # long polls to end when the connection comes back
        self.errors: list[str] = []  # what the error callback heard, for doctor and the tests

    # --- connection -------------------------------------------------------------------------------

    async def connect(
        self, servers: str | list[str], *, user: str | None = None, password: str | None = None,
        user_credentials: str | None = None, reconnect_time_wait: float = 0.5, tls: ssl.SSLContext | None = None,
    ) -> None:
        """Connect (retrying for ever after a drop: the bus is down, not gone)."""
        try:
            self._nc = await nats.connect(
                servers, user=user, password=password, user_credentials=user_credentials, tls=tls,
                inbox_prefix=f"_INBOX.{self.box_id}", error_cb=self._on_error, name=f"connectd {self.box_id}",
                allow_reconnect=True, max_reconnect_attempts=-1, reconnect_time_wait=reconnect_time_wait,
                connect_timeout=self.call_timeout, reconnected_cb=self._on_reconnected,
            )
        except (nats.errors.Error, OSError) as e:
            raise BusUnavailable(f"cannot connect to {servers}: {e}") from e
        self._js = self._nc.jetstream(timeout=self.call_timeout)
        self._kv = KeyValue(name=BUCKET, stream=f"KV_{BUCKET}", pre=f"$KV.{BUCKET}.", js=self._js, direct=True)

    @property
    def connected(self) -> bool:
        return self._nc is not None and self._nc.is_connected

    @property
    def reconnecting(self) -> bool:
        """Connected once and not closed, but not connected now: nats-py is bringing it back."""
        return self._nc is not None and not self._nc.is_closed and not self._nc.is_connected

    async def health(self) -> dict[str, Any]:
        """Read-only checks for ``connectd doctor``: the server's version and whether it has JetStream on
        (from the server's ``INFO``), and whether this box's consumer is there (``CONSUMER.INFO`` on it, the
        one JetStream read the permission block allows). ``consumer``: True, False (the server says it
        or the stream is not found), None (not asked: no JetStream, or no answer; ``problem`` says why)."""
        nc, js = self._client()
        info = getattr(nc, "_server_info", {}) or {}
        found: dict[str, Any] = {"server_version": info.get("version"), "jetstream": bool(info.get("jetstream")),
                                 "stream": STREAM, "consumer_name": self.consumer, "consumer": None, "problem": None}
        subject = f"$JS.API.CONSUMER.INFO.{STREAM}.{self.consumer}"
        try:
            await self._call(subject, js.consumer_info(STREAM, self.consumer))
        except BusRefused as e:
            cause = e.__cause__
            if isinstance(cause, nats.js.errors.NotFoundError):
                found.update(consumer=False, problem=cause.description or str(e))
            elif isinstance(cause, (nats.errors.NoRespondersError, nats.js.errors.ServiceUnavailableError)):
                found.update(jetstream=False, problem="JetStream does not answer")
            else:
                found.update(problem=str(e))
        except BusUnavailable as e:
            found.update(problem=str(e))
        else:
            found.update(jetstream=True, consumer=True)
        return found

    async def close(self) -> None:
        """Close the connection (not drain: every call here waits for its own answer, so nothing is
        owed, and a drain waits out its 30 s timeout on the long polls' and the streams' subscriptions)."""
        if self._nc is not None and not self._nc.is_closed:
            await self._nc.close()
        self._pull = None

    async def _on_reconnected(self) -> None:
        """A long poll sent before the drop is gone with it (a restarted server never heard of it, and
        nats-py would wait out its whole timeout): end it, so the fetch loop polls again at once."""
        for poll in self._polls:
            if not poll.done():
                poll.set_result(None)

    async def _on_error(self, error: Exception) -> None:
        self.errors.append(str(error))
        found = _VIOLATION.search(str(error))
        if found is None:
            return
        subject = found.group(2)
        for waiting, futures in self._waiting.items():
            if _matches(waiting, subject):
                for future in futures:
                    if not future.done():
                        future.set_exception(BusRefused(f"permissions violation: {found.group(1)} to {subject}"))

    def _client(self) -> tuple[Client, JetStreamContext]:
        if self._nc is None or self._js is None or not self._nc.is_connected:
            raise BusUnavailable("not connected")
        return self._nc, self._js

    async def _call(self, subject: str, call: Awaitable[T]) -> T:
        """Run ``call`` (which publishes on ``subject``), returning early with BusRefused if the server
        reports a permissions violation for that subject; the client's errors mapped to the port's."""
        refused: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(subject, set()).add(refused)
        task = asyncio.ensure_future(call)
        try:
            waiters: set[asyncio.Future[Any]] = {task, refused}
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
            if refused.done():
                task.cancel()
                # wait for the cancelled call to end and take its outcome: left pending, it ends later
                # (perhaps with ConnectionClosedError once the bus is closed) as an exception nobody
                # retrieved (seen under load in test_federation_bus's permission test)
                await asyncio.gather(task, return_exceptions=True)
                refused.result()  # raises BusRefused
            return task.result()
        except (BusRefused, BusUnavailable):
            raise
        except nats.js.errors.NoStreamResponseError as e:
            raise BusRefused(f"no stream takes {subject}") from e
        except nats.js.errors.APIError as e:
            raise BusRefused(f"{subject}: {e} (code {e.code}, error {e.err_code})") from e
        except (nats.errors.TimeoutError, TimeoutError) as e:
            raise BusUnavailable(f"{subject}: no answer in time") from e
        except nats.errors.NoRespondersError as e:
            raise BusRefused(f"{subject}: no responders") from e
        except (nats.errors.Error, OSError) as e:
            raise BusUnavailable(f"{subject}: {e}") from e
        finally:
            futures = self._waiting.get(subject)
            if futures is not None:
                futures.discard(refused)
                if not futures:
                    del self._waiting[subject]
            if not refused.done():
                refused.cancel()

    # --- the port -------------------------------------------------------------------------------------

    async def publish(self, subject: str, data: bytes, *, msg_id: str) -> PublishAck:
        _, js = self._client()
        ack = await self._call(subject, js.publish(subject, data, headers={"Nats-Msg-Id": msg_id}))
        return PublishAck(ack.stream, ack.seq, bool(ack.duplicate))

    async def fetch(self, *, batch: int, timeout: float) -> Sequence[Delivery]:
        _, js = self._client()
        if self._pull is None:
            self._pull = await self._call(
                "_INBOX", js.pull_subscribe_bind(durable=self.consumer, stream=STREAM)
            )
        pull = self._pull
        subject = f"$JS.API.CONSUMER.MSG.NEXT.{STREAM}.{self.consumer}"
        lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._polls.add(lost)
        task = asyncio.ensure_future(self._call(subject, pull.fetch(batch, timeout=timeout)))
        try:
            either: set[asyncio.Future[Any]] = {task, lost}
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
            if not task.done():  # reconnected meanwhile: this poll is lost (what it held comes again)
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                self._pull = None  # and its subscription with it: the next poll binds a new one
                with contextlib.suppress(nats.errors.Error, OSError):
                    await pull.unsubscribe()
                return []
            msgs = task.result()
        except BusUnavailable:
            if self.connected:
                return []  # the long poll ended with nothing
            raise
        finally:
            self._polls.discard(lost)
            if not task.done():  # (cancelled from outside: take the call down with it)
                task.cancel()
        return [Delivery(m.subject, m.data, m.metadata.num_delivered, handle=m) for m in msgs]

    async def ack(self, delivery: Delivery) -> None:
        self._client()
        msg = delivery.handle
        if not isinstance(msg, Msg):
            raise BusRefused("not a delivery of this bus")
        await self._call(msg.reply, msg.ack_sync(timeout=self.call_timeout))

    async def put_entry(self, reader_box: str, data: bytes) -> int:
        self._client()
        assert self._kv is not None
        key = f"{self.box_id}.{reader_box}"
        return await self._call(f"$KV.{BUCKET}.{key}", self._kv.put(key, data))

    async def get_entry(self, publisher_box: str) -> bytes | None:
        self._client()
        kv = self._kv
        assert kv is not None
        key = f"{publisher_box}.{self.box_id}"

        async def get() -> bytes | None:
            try:
                return (await kv.get(key)).value
            except (nats.js.errors.KeyNotFoundError, nats.js.errors.NotFoundError):
                return None

        return await self._call(f"$JS.API.DIRECT.GET.KV_{BUCKET}.$KV.{BUCKET}.{key}", get())

    async def entry_updates(self) -> AsyncIterator[tuple[str, bytes]]:
        async for msg in self._subscription(f"connect.{self.box_id}.directory.*"):
            yield msg.subject.rsplit(".", 1)[1], msg.data

    async def answer(self, request: BusRequest, data: bytes) -> None:
        nc, _ = self._client()
        msg = request.handle
        if not isinstance(msg, Msg) or not msg.reply:
            raise BusRefused("not a request of this bus")
        await self._call(msg.reply, nc.publish(msg.reply, data))

    async def request(self, box: str, data: bytes, *, timeout: float) -> bytes | None:
        nc, _ = self._client()
        subject = f"connect.{box}.history"
        try:
            reply = await self._call(subject, nc.request(subject, data, timeout=timeout))
        except BusUnavailable:
            if self.connected:
                return None  # no answer within the timeout
            raise
        except BusRefused as e:
            if isinstance(e.__cause__, nats.errors.NoRespondersError):
                return None  # nobody listens: the box is offline
            raise
        return reply.data

    async def requests(self) -> AsyncIterator[BusRequest]:
        async for msg in self._subscription(f"connect.{self.box_id}.history"):
            yield BusRequest(msg.data, handle=msg)

    async def _subscription(self, subject: str) -> AsyncIterator[Msg]:
        nc, _ = self._client()
        sub = await nc.subscribe(subject)
        try:
            await self._call(subject, nc.flush(timeout=max(1, round(self.call_timeout))))  # a refused subscription shows here
            async for msg in sub.messages:
                yield msg
        finally:
            with contextlib.suppress(nats.errors.Error):
                await sub.unsubscribe()


def _matches(pattern: str, subject: str) -> bool:
    """A subject a call waits on against the one a violation names (``_INBOX`` stands for the replies).
    nats-py lowercases the server's error text, so subjects are compared without case (connect's own
    subject tokens are lowercase; ``CONNECT``, ``$JS.API`` and ``KV_connect_dir`` are fixed)."""
    pattern, subject = pattern.lower(), subject.lower()
    return subject == pattern or (pattern == "_inbox" and subject.startswith("_inbox."))
