"""The daemon's listening socket: every accepted connection has Nagle off (``TCP_NODELAY``).

With Nagle on, a response written as headers then body waits for the client's delayed ACK before the
body leaves (about 40 ms per 2026-07-28 MCP call on Linux); asyncio sets ``TCP_NODELAY`` only on a
connection whose socket names its protocol, which :func:`connectd.daemon.app.bind_socket` does.
"""

from __future__ import annotations

import asyncio
import socket

import pytest

from connectd.daemon.app import bind_socket


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_accepted_connections_have_nagle_off(host: str) -> None:
    async def main() -> int:
        seen: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        class Probe(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                sock = transport.get_extra_info("socket")
                seen.set_result(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
                transport.close()

        sock = bind_socket(host, 0)
        server = await asyncio.get_running_loop().create_server(Probe, sock=sock)
        async with server:
            _reader, writer = await asyncio.open_connection(*sock.getsockname()[:2])
            value = await seen
            writer.close()
        return value

    assert asyncio.run(main()) != 0


def test_the_socket_names_tcp() -> None:
    with bind_socket("127.0.0.1", 0) as sock:
        assert sock.proto == socket.IPPROTO_TCP
