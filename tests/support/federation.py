"""Boxes that federate, on real parts, for the federation e2e tests and the federation benchmarks
(``scripts/benchlib/federation.py``): each box a real ``connectd serve`` with its own data directory,
HOME and private tmux server, all on one real ``nats-server`` (tests/support/nats.py:
``sync_interval: always``, an admin user who provisions, a user per box holding exactly its
permission block), each pointed at it by the real ``connectd federate --nats URL --user ...
--password-file ...``. The person's side is the real CLI (:func:`cli`, :class:`Box`), and
:func:`pair` pairs two boxes with both approvals as a person does.

    with federated_boxes(tmp, ["laptop", "devbox"]) as (boxes, server):
        a, b = boxes
        pair(a, b)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from connectd.federation import keys as K
from connectd.federation.seal import LocalBox
from tests.support.daemon import ROOT, DaemonProcess, wait_for
from tests.support.fixtures import tmux_session
from tests.support.nats import NatsServer, box_password
from tests.support.tmux_server import TmuxServer


def cli(d: DaemonProcess, *args: str, home: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``connectd ARGS`` against daemon ``d`` (its data directory and port)."""
    return run(*args, "--data-dir", str(d.data_dir), "--port", str(d.port), home=home)


def run(*args: str, home: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``connectd ARGS`` in a subprocess (this checkout's sources; ``home``: its HOME)."""
    env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE")}
    env["PYTHONPATH"] = f"{ROOT / 'src'}{os.pathsep}{ROOT}"
    if home is not None:
        env["HOME"] = str(home)
    return subprocess.run(
        [sys.executable, "-m", "connectd.cli", *args],
        capture_output=True, text=True, env=env, timeout=60, stdin=subprocess.DEVNULL,
    )


@dataclass
class Box:
    name: str
    daemon: DaemonProcess
    local: LocalBox
    home: Path

    def run(self, *args: str) -> Any:
        done = cli(self.daemon, *args, "--json", home=self.home)
        assert done.returncode == 0, (args, done.stdout, done.stderr, self.daemon.log_text())
        return json.loads(done.stdout)

    def text(self, *args: str) -> str:
        done = cli(self.daemon, *args, home=self.home)
        assert done.returncode == 0, (args, done.stdout, done.stderr)
        return done.stdout

    def pairings(self) -> list[dict[str, Any]]:
        return list(self.run("pair", "list"))

    def audit(self, outcome: str) -> list[dict[str, Any]]:
        return list(self.daemon.api("GET", f"/api/audit?outcome={outcome}&limit=1000"))


def prepare_box(root: Path, name: str) -> tuple[Path, LocalBox]:
    """A box's data directory with its keys (named ``name``) and an empty HOME beside it."""
    data = root / "data"
    local = LocalBox.from_secrets(K.init(data, name))
    (root / "home").mkdir(parents=True)
    return data, local


@contextmanager
def federated_boxes(
    root: Path,
    names: Sequence[str],
    *,
    extra_boxes: Sequence[str] = (),
    resend: float | None = 1.0,
    make_daemon: Callable[[Path, TmuxServer], DaemonProcess] = DaemonProcess,
    make_server: Callable[[Path, list[str]], NatsServer] = NatsServer,
) -> Iterator[tuple[list[Box], NatsServer]]:
    """One NATS server (a user for each box, and for each of ``extra_boxes``' ids) and a running daemon
    per name, each box's directory ``root/<a, b, ...>``. ``resend``: written to each box's
    ``federation.toml`` (no option for it: the tests' quick resend of a pair request); None leaves the
    default. ``make_server``: the server (its root, the box ids it has users for), e.g. a
    ``NatsCluster``. Everything started here is stopped on exit, the server last."""
    (root / "nats").mkdir()
    letters = [chr(ord("a") + i) for i in range(len(names))]
    prepared = [prepare_box(root / letter, name) for letter, name in zip(letters, names, strict=True)]
    server = make_server(root / "nats", [local.box_id for _, local in prepared] + list(extra_boxes))
    server.start()
    try:
        anyio.run(server.provision)
        for data, local in prepared:
            password = data.parent / "nats-password"
            password.write_text(box_password(local.box_id))
            if resend is not None:
                with (data / K.FEDERATION_FILE).open("a") as fh:
                    fh.write(f"resend = {resend}\n")
            done = run("federate", "--nats", server.url, "--user", f"box-{local.box_id}", "--password-file",
                       str(password), "--data-dir", str(data))
            assert done.returncode == 0, done.stderr
        with ExitStack() as stack:
            tmuxes = [stack.enter_context(tmux_session(f"connect-p{letter}")) for letter in letters]
            made: list[DaemonProcess] = []
            try:
                out = []
                for letter, tmux, (_, local), name in zip(letters, tmuxes, prepared, names, strict=True):
                    d = make_daemon(root / letter, tmux)
                    d.env_extra["HOME"] = str(root / letter / "home")
                    made.append(d.start())
                    out.append(Box(name, d, local, root / letter / "home"))
                yield out, server
            finally:
                for d in made:
                    d.stop()
    finally:
        server.stop()


def pair(a: Box, b: Box) -> None:
    """Pair ``a`` and ``b`` as people do: invite on A, accept on B, approve on A (the real CLI); active on
    both. The waits between read the owner API the CLI reads (``pair requests``, ``pair list``), not a
    CLI process per look."""
    code = a.run("pair", "invite")["code"]
    b.text("pair", "accept", code, "--yes")
    wait_for(lambda: [r for r in a.daemon.api("GET", "/api/pairing/requests") if r["box"] == b.local.box_id], 20,
             "the pair request on A")
    a.run("pair", "approve", b.local.box_id)
    wait_for(lambda: [p for p in b.daemon.api("GET", "/api/pairing/pairings")
                      if p["state"] == "active" and p["box"] == a.local.box_id], 20, "the pairing active on B")
