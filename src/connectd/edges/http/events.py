"""``/api/events``: the owner event stream (Server-Sent Events)."""

from __future__ import annotations

from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from connectd.daemon.parts import Subscribers
from connectd.edges.http.errors import _dumps

EVENT_BUFFER = 256
KEEPALIVE_SECONDS = 15.0
SSE_RETRY_MS = 2000


class EventStream:
    """``/api/events``: every dict the engine publishes, as ``data: <json>``, until the client goes.

    The subscription is registered for exactly the life of the response: it is discarded when the
    client disconnects, when the server stops the response, or when the engine dropped it because
    its buffer overflowed (then an ``overflow`` event tells the page to refetch; EventSource
    reconnects by itself).
    """

    def __init__(self, subscribers: Subscribers, keepalive: float) -> None:
        self.subscribers = subscribers
        self.keepalive = keepalive

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        subscribers = self.subscribers.owner
        sender, events = anyio.create_memory_object_stream[dict[str, Any]](EVENT_BUFFER)
        subscribers.add(sender)
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [
                        (b"content-type", b"text/event-stream; charset=utf-8"),
                        (b"cache-control", b"no-store"),
                        (b"x-accel-buffering", b"no"),
                        (b"x-content-type-options", b"nosniff"),
                    ],
                }
            )
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._until_disconnect, receive, tg.cancel_scope)
                await self._stream(sender, events, send)
                tg.cancel_scope.cancel()
        except OSError:  # the client went away mid-write
            pass
        finally:
            subscribers.discard(sender)
            sender.close()
            events.close()

    async def _stream(
        self,
        sender: MemoryObjectSendStream[dict[str, Any]],
        events: MemoryObjectReceiveStream[dict[str, Any]],
        send: Send,
    ) -> None:
        subscribers = self.subscribers.owner
        await self._write(send, f"retry: {SSE_RETRY_MS}\n: connected\n\n")
        while True:
            try:
                item: dict[str, Any] | None = events.receive_nowait()
            except anyio.WouldBlock:
                if sender not in subscribers:
                    await self._write(send, 'event: overflow\ndata: {"topic":"overflow"}\n\n', more=False)
                    return
                item = None
                with anyio.move_on_after(self.keepalive):
                    item = await events.receive()
            await self._write(send, ": keep-alive\n\n" if item is None else f"data: {_dumps(item)}\n\n")

    @staticmethod
    async def _write(send: Send, text: str, *, more: bool = True) -> None:
        await send({"type": "http.response.body", "body": text.encode("utf-8"), "more_body": more})

    @staticmethod
    async def _until_disconnect(receive: Receive, scope: anyio.CancelScope) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                scope.cancel()
                return


class AsResponse(Response):
    """Wrap a raw ASGI app (the event stream) as a Starlette response."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._app(scope, receive, send)

