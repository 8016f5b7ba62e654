"""A loopback TCP proxy that can be cut and healed: a partition of one box from its NATS server
(docs/federation.md, "Test plan": faults; tests/integration/test_federation_partition.py).

The proxy listens on a free loopback port and forwards each connection to ``target`` (the NATS
server's port), byte for byte, on two threads per connection. A box pointed at ``proxy.url`` instead of
the server's reaches NATS only through it, so cutting it partitions that box alone: the server and the
other boxes' connections go on.

- ``cut("refuse")``: every live connection is reset (an RST to both sides, ``SO_LINGER`` 0) and the
  port is closed: a new connection is refused by the kernel (``ECONNREFUSED``, at once);
- ``cut("blackhole")``: every live connection is reset, and a new one is accepted and then held
  silent: nothing is forwarded, nothing answered (a NATS client waits for the server's ``INFO`` until
  its connect timeout, as across a link that drops every packet); ``held`` counts them;
- ``cut("stall")``: every live connection stays open and silent: what either side sends is held (up
  to what the sockets buffer) and nothing is forwarded; a new one is held silent too. Neither side
  sees anything wrong (a NATS client notices only when its pings go unanswered, minutes later): a
  link that drops every packet while TCP retransmits, or a frozen middlebox;
- ``heal()``: the same port forwards new connections again (the held ones are reset: their clients
  gave up on them); after a stall, what was held is forwarded, in order.

``forwarded`` counts the connections forwarded so far, ``live()`` those open now, ``sent`` the bytes
forwarded (either way).

    with TcpProxy(server.port) as proxy:
        ... connect to proxy.url ...
        proxy.cut("blackhole")
        ...
        proxy.heal()
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from typing import Literal

Mode = Literal["refuse", "blackhole", "stall"]
_RST = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends an RST, not a FIN


def _reset(sock: socket.socket) -> None:
    """Close ``sock`` with an RST. ``SHUT_RD`` first wakes a thread blocked reading it (Linux), and
    sends nothing to the peer."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RST)
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RD)
    with contextlib.suppress(OSError):
        sock.close()


def _close(sock: socket.socket) -> None:
    """Close ``sock`` in order (a FIN), waking a thread blocked reading it."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()


class TcpProxy:
    """Forwards ``127.0.0.1:<port>`` to ``host:target``; :meth:`cut` and :meth:`heal` (see the module)."""

    def __init__(self, target: int, host: str = "127.0.0.1") -> None:
        self.target = (host, target)
        self._lock = threading.Condition()
        self._listener: socket.socket | None = self._listen(0)
        self.port: int = self._listener.getsockname()[1]
        self._mode: Mode | None = None
        self._pairs: set[tuple[socket.socket, socket.socket]] = set()
        self._held: list[socket.socket] = []
        self._closed = False
        self.forwarded = 0
        self.held = 0
        self.sent = 0
        self._sending = 0  # pumps between their check and the end of their send
        self._thread = threading.Thread(target=self._accept_loop, name=f"tcp-proxy-{self.port}", daemon=True)

    @staticmethod
    def _listen(port: int) -> socket.socket:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        s.listen(64)
        s.settimeout(0.05)
        return s

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self) -> TcpProxy:
        self._thread.start()
        return self

    def __enter__(self) -> TcpProxy:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # --- the partition ----------------------------------------------------------------------------

    def cut(self, mode: Mode = "refuse") -> None:
        """Partition: reset every live connection, or stall it; a new one is refused or held silent
        (``mode``, see the module). When this returns, no byte crosses the proxy until :meth:`heal`."""
        assert mode in ("refuse", "blackhole", "stall"), mode
        with self._lock:
            self._mode = mode
            if mode == "stall":
                while self._sending:  # a send already under way ends first
                    self._lock.wait()
                return
            pairs, self._pairs = self._pairs, set()
            self._lock.notify_all()  # (pumps stalled before: they end)
            listener = self._listener if mode == "refuse" else None
            if listener is not None:
                self._listener = None
        if listener is not None:
            _close(listener)
        for client, upstream in pairs:
            _reset(client)
            _reset(upstream)

    def heal(self) -> None:
        """New connections are forwarded again, on the same port; the ones held silent are reset."""
        with self._lock:
            self._mode = None
            self._lock.notify_all()  # stalled pumps go on
            held, self._held = self._held, []
            if self._listener is None:
                self._listener = self._listen(self.port)
        for sock in held:
            _reset(sock)

    def live(self) -> int:
        """Connections forwarded and open now."""
        with self._lock:
            return len(self._pairs)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._lock.notify_all()
            pairs, self._pairs = self._pairs, set()
            held, self._held = self._held, []
            listener, self._listener = self._listener, None
        for client, upstream in pairs:
            _reset(client)
            _reset(upstream)
        for sock in held:
            _reset(sock)
        if self._thread.is_alive():
            self._thread.join(5)
        if listener is not None:
            _close(listener)

    # --- the threads ------------------------------------------------------------------------------

    def _accept_loop(self) -> None:
        while not self._closed:
            with self._lock:
                listener = self._listener
            if listener is None:  # cut, refusing: the port is closed
                time.sleep(0.05)
                continue
            try:
                client, _ = listener.accept()
            except (TimeoutError, OSError):  # (OSError: closed under us by a cut)
                continue
            with self._lock:
                mode = self._mode
                if mode is not None:  # a black hole (or a cut that came just now): hold it silent
                    self.held += 1
                    self._held.append(client)
            if mode is None:
                self._forward(client)

    def _forward(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(self.target, timeout=5)
        except OSError:
            _reset(client)  # the server is away: the client sees its connection end, as it would
            return
        upstream.settimeout(None)
        client.settimeout(None)
        pair = (client, upstream)
        with self._lock:
            cut = self._mode is not None or self._closed  # cut while connecting upstream
            if not cut:
                self._pairs.add(pair)
                self.forwarded += 1
        if cut:
            _reset(client)
            _reset(upstream)
            return
        for src, dst in (pair, (upstream, client)):
            threading.Thread(target=self._pump, args=(src, dst, pair), daemon=True,
                             name=f"tcp-proxy-{self.port}-pump").start()

    def _pump(self, src: socket.socket, dst: socket.socket, pair: tuple[socket.socket, socket.socket]) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                with self._lock:
                    while self._mode == "stall" and pair in self._pairs and not self._closed:
                        self._lock.wait()  # stalled: hold what was read until the heal
                    if pair not in self._pairs:
                        break
                    self._sending += 1
                done = False
                try:
                    dst.sendall(data)
                    done = True
                finally:
                    with self._lock:
                        self._sending -= 1
                        self.sent += len(data) if done else 0
                        self._lock.notify_all()
        except OSError:
            pass
        with self._lock:
            mine = pair in self._pairs
            self._pairs.discard(pair)
        if mine:  # one side ended on its own: end the other in order (a cut has reset both already)
            _close(src)
            _close(dst)
