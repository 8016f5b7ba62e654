"""``connectd federate --nats URL ...`` and ``connectd federate --off`` as a person runs them (the real
CLI in a subprocess): the NATS settings written into ``federation.toml`` (paths, never a secret) and read
back by the daemon's :class:`~connectd.federation.desk.Settings`; ``--off`` clears them and keeps the
name; every refusal one line naming the problem, exit 1, the file byte for byte unchanged (or still
absent); with a daemon running, it takes the change without a restart (``POST /api/pairing/reload``):
its first server, another server (its bus loops moved) and ``--off`` (its loops stopped; local delivery
goes on); a daemon started before ``federate init`` is told to restart (docs/federation.md, "Where the
code goes", Configuration), and doctor says so until it is. The daemon picking the settings up at start, over a real
nats-server, is tests/integration/test_federation_pairing_e2e.py (its boxes are set up by this command)."""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from connectd.federation import keys as K
from connectd.federation.desk import Settings
from connectd.federation.seal import LocalBox
from tests.integration.test_daemon_e2e import send
from tests.integration.test_pair_cli import cli, run
from tests.support.daemon import DaemonProcess, wait_for
from tests.support.fixtures import running_daemon
from tests.support.nats import NatsServer, box_password
from tests.support.tmux_server import TmuxServer


def federate(data: Path, *args: str) -> tuple[int, str, str]:
    done = run("federate", *args, "--data-dir", str(data))
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, done.stdout, done.stderr


def snapshot(data: Path) -> bytes | None:
    path = data / K.FEDERATION_FILE
    return path.read_bytes() if path.exists() else None


def refused(data: Path, *args: str, says: str) -> None:
    before = snapshot(data)
    status, _out, err = federate(data, *args)
    assert status == 1 and says in err, (status, err)
    assert len([line for line in err.splitlines() if line.startswith("connectd:")]) == 1, err
    assert snapshot(data) == before


@pytest.fixture
def box(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    K.init(data, "laptop")
    return data


def test_nats_settings_are_written_read_back_and_cleared_by_off(box: Path, tmp_path: Path) -> None:
    password = tmp_path / "nats-password"
    password.write_text("s3cret-never-in-the-file\n")
    status, out, err = federate(box, "--nats", "nats://127.0.0.1:4222", "--user", "box-x", "--password-file", str(password))
    assert status == 0, err
    assert "nats://127.0.0.1:4222" in out and "reads it when it starts" in out
    text = (box / K.FEDERATION_FILE).read_text()
    assert "s3cret" not in text
    assert (box / K.FEDERATION_FILE).stat().st_mode & 0o777 == 0o600
    settings = Settings.read(box)
    assert settings is not None
    assert (settings.name, settings.nats, settings.user, settings.password_file, settings.creds) == (
        "laptop", "nats://127.0.0.1:4222", "box-x", str(password.resolve()), None)
    assert settings.password() == "s3cret-never-in-the-file"

    # --creds replaces the user and password; a resend written by hand stays
    with (box / K.FEDERATION_FILE).open("a") as fh:
        fh.write("resend = 2.5\n")
    creds = tmp_path / "box.creds"
    creds.write_text("-----BEGIN NATS USER JWT-----\n")
    status, out, err = federate(box, "--nats", "tls://nats.example:4443", "--creds", str(creds), "--json")
    assert status == 0, err
    assert json.loads(out)["nats"]["creds"] == str(creds.resolve())
    settings = Settings.read(box)
    assert settings is not None
    assert (settings.nats, settings.creds, settings.user, settings.password_file, settings.resend) == (
        "tls://nats.example:4443", str(creds.resolve()), None, None, 2.5)

    status, out, err = federate(box, "--off")
    assert status == 0 and "federation off" in out, err
    settings = Settings.read(box)
    assert settings is not None
    assert (settings.name, settings.nats, settings.creds, settings.resend) == ("laptop", None, None, 2.5)
    status, out, _ = federate(box, "--off")
    assert status == 0 and "nothing changed" in out


def test_every_refusal_names_the_problem_and_changes_nothing(box: Path, tmp_path: Path) -> None:
    password = tmp_path / "pw"
    password.write_text("pw\n")
    good = ("--user", "box-x", "--password-file", str(password))
    refused(box, "--nats", "http://127.0.0.1:4222", *good, says="is not a NATS server URL")
    refused(box, "--nats", "nats://", *good, says="is not a NATS server URL")
    refused(box, "--nats", "nats://box:pw@127.0.0.1:4222", *good, says="secrets do not go into federation.toml")
    refused(box, "--nats", "nats://127.0.0.1:99999", *good, says="is not a URL")
    refused(box, "--nats", "nats://127.0.0.1:4222", "--creds", str(tmp_path / "missing.creds"), says="missing.creds: no such file")
    refused(box, "--nats", "nats://127.0.0.1:4222", "--user", "u", "--password-file", str(tmp_path / "nope"), says="nope: no such file")
    refused(box, "--nats", "nats://127.0.0.1:4222", "--user", "u", says="--user and --password-file go together")
    refused(box, "--nats", "nats://127.0.0.1:4222", "--creds", str(password), *good, says="do not go together")
    refused(box, "--nats", "nats://127.0.0.1:4222", "--creds", str(tmp_path), says="not a regular file")
    refused(box, "--nats", "nats://127.0.0.1:4222", "--tls-cert", str(password), says="--tls-cert and --tls-key go together")
    refused(box, "--off", "--nats", "nats://127.0.0.1:4222", says="do not go together")
    refused(box, says="federate needs what to do")

    # a box without `federate init`: refused, and no federation.toml appears
    bare = tmp_path / "bare"
    bare.mkdir()
    refused(bare, "--nats", "nats://127.0.0.1:4222", *good, says="not set up for federation")
    refused(bare, "--off", says="not set up for federation")
    assert not (bare / K.FEDERATION_FILE).exists()


def test_tls_files_are_checked_written_and_make_the_daemon_s_context(box: Path, tmp_path: Path) -> None:
    openssl = shutil.which("openssl")
    assert openssl, "the TLS test needs the openssl command: apt-get install -y openssl"
    ca, cert, key = tmp_path / "ca.pem", tmp_path / "client.pem", tmp_path / "client.key"
    subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=connect-test-ca",
                    "-keyout", str(tmp_path / "ca.key"), "-out", str(ca)], check=True, capture_output=True)
    subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=box",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    refused(box, "--nats", "tls://127.0.0.1:4443", "--tls-ca", str(garbage), says="the TLS files do not load")
    refused(box, "--nats", "tls://127.0.0.1:4443", "--tls-ca", str(ca), "--tls-cert", str(cert), "--tls-key", str(ca),
            says="the TLS files do not load")

    status, _out, err = federate(box, "--nats", "tls://127.0.0.1:4443", "--tls-ca", str(ca), "--tls-cert", str(cert),
                                 "--tls-key", str(key))
    assert status == 0, err
    settings = Settings.read(box)
    assert settings is not None
    assert (settings.tls_ca, settings.tls_cert, settings.tls_key) == (str(ca.resolve()), str(cert.resolve()), str(key.resolve()))
    context = settings.tls()
    assert isinstance(context, ssl.SSLContext) and context.verify_mode is ssl.CERT_REQUIRED
    assert [dict(x[0] for x in c["subject"]) for c in context.get_ca_certs()] == [{"commonName": "connect-test-ca"}]
    federate(box, "--off")
    settings = Settings.read(box)
    assert settings is not None and settings.tls() is None and settings.tls_ca is None


@pytest.fixture
def running(tmp_path: Path, tmux: TmuxServer) -> Iterator[DaemonProcess]:
    K.init(tmp_path / "data", "laptop")
    with running_daemon(tmp_path, tmux) as d:
        yield d


def test_a_running_daemon_picks_up_its_first_nats_server_moves_to_another_and_turns_off_without_a_restart(
    running: DaemonProcess, tmp_path: Path
) -> None:
    """Started with no NATS server, the daemon starts its bus loops when ``federate --nats`` names one
    (``POST /api/pairing/reload``), connects and says so; moved to another server while its bus runs, its
    loops stop and start again there (connected, doctor at ease, audited); ``--off`` stops them: no NATS
    at all, doctor says so with no warning, and local delivery goes on. Before: moving and ``--off``
    answered ``restart_needed`` and doctor warned until a restart."""
    local = LocalBox.from_secrets(K.read(running.data_dir))
    servers = []
    for name in ("nats", "nats2"):
        (tmp_path / name).mkdir()
        servers.append(NatsServer(tmp_path / name, [local.box_id]))
    server, other = servers
    try:
        for s in servers:
            s.start()
            anyio.run(s.provision)
        password = tmp_path / "nats-password"
        password.write_text(box_password(local.box_id))
        assert running.api("GET", "/api/pairing/status")["connected"] is None  # no bus: no NATS named at start
        done = cli(running, "federate", "--nats", server.url, "--user", f"box-{local.box_id}", "--password-file",
                   str(password))
        assert done.returncode == 0, done.stderr
        assert f"picked it up: its bus connects to {server.url} now" in done.stdout, done.stdout
        status = wait_for(lambda: [s for s in [running.api("GET", "/api/pairing/status")] if s["connected"]], 20,
                          "the bus connected without a restart")[0]
        assert status["nats"] == server.url
        checks = {c["name"]: c for c in json.loads(cli(running, "doctor", "--json").stdout)["checks"]}
        assert checks["federation"]["detail"] == f"configured: box laptop; NATS {server.url}: connected", checks
        assert checks["consumer"]["status"] == "ok"
        (record,) = [r for r in running.api("GET", "/api/audit?limit=100") if r["action"] == "federation.settings"]
        assert (record["actor"], record["outcome"]) == ("owner", "picked_up")

        # another server while the bus runs: its loops move there, no restart
        moved = cli(running, "federate", "--nats", other.url, "--user", f"box-{local.box_id}", "--password-file",
                    str(password), "--json")
        assert moved.returncode == 0, moved.stderr
        answer = json.loads(moved.stdout)
        assert (answer["picked_up"], answer["restart_needed"]) == (True, False), answer
        status = wait_for(lambda: [s for s in [running.api("GET", "/api/pairing/status")]
                                   if s["connected"] and s["nats"] == other.url], 20, "the bus moved")[0]
        checks = {c["name"]: c for c in json.loads(cli(running, "doctor", "--json").stdout)["checks"]}
        assert checks["federation"]["detail"] == f"configured: box laptop; NATS {other.url}: connected", checks
        assert checks["federation"]["status"] == "ok" and checks["consumer"]["status"] == "ok", checks
        records = [r for r in running.api("GET", "/api/audit?limit=100") if r["action"] == "federation.settings"]
        assert f"NATS {server.url} -> {other.url}: the bus loops moved" in records[0]["detail"], records
        server.stop()  # the old server gone changes nothing now
        time.sleep(1.0)
        assert running.api("GET", "/api/pairing/status")["connected"] is True

        # --off: the bus stops; the daemon serves its own fleet with no NATS
        off = cli(running, "federate", "--off")
        assert off.returncode == 0, off.stderr
        assert "its bus stopped; it serves its own fleet with no NATS" in off.stdout, off.stdout
        status = running.api("GET", "/api/pairing/status")
        assert (status["nats"], status["connected"]) == (None, None), status
        checks = {c["name"]: c for c in json.loads(cli(running, "doctor", "--json").stdout)["checks"]}
        assert checks["federation"]["status"] == "ok", checks["federation"]
        assert checks["federation"]["detail"] == "configured: box laptop; no NATS server named (pairing waits in the store)"
        assert "consumer" not in checks
        records = [r for r in running.api("GET", "/api/audit?limit=100") if r["action"] == "federation.settings"]
        assert "the bus loops stopped" in records[0]["detail"] and len(records) == 3, records
        other.stop()
        time.sleep(1.0)
        failed = [r for r in running.api("GET", "/api/audit?outcome=failed&limit=100") if r["action"] == "task.bus"]
        assert not failed, failed  # no loop failed: neither the moves nor a server gone after them

        # local delivery goes on
        sender, recipient = running.launch("sender"), running.launch("recipient")
        running.wait_ready(sender)
        running.wait_ready(recipient)
        err, sent = anyio.run(send, running, sender, recipient.address, "still here", "m-local")
        assert not err, sent
        card = running.wait_card(30)
        running.api("POST", f"/api/cards/{card['id']}/approve", {"pair": False})
        prompts = wait_for(recipient.prompts, 30, "the local message typed")
        assert prompts[0].endswith("still here") and len(prompts) == 1, prompts
    finally:
        for s in servers:
            s.stop()


def test_a_daemon_started_before_federate_init_is_told_to_restart(tmp_path: Path, tmux: TmuxServer) -> None:
    """A daemon that started with no federation.toml has no pairing desk to read it again: the command
    says to restart it, and doctor says so until it is."""
    with running_daemon(tmp_path, tmux) as running:
        K.init(running.data_dir, "laptop")
        creds = tmp_path / "box.creds"
        creds.write_text("x\n")
        done = cli(running, "federate", "--nats", "nats://127.0.0.1:4222", "--creds", str(creds))
        assert done.returncode == 0, done.stderr
        assert f"the running daemon (pid {running.proc.pid if running.proc else ''}) needs a restart to use it" in done.stdout
        assert "systemctl --user restart connectd" in done.stdout
        checks = {c["name"]: c for c in json.loads(cli(running, "doctor", "--json").stdout)["checks"]}
        assert checks["federation"]["status"] == "warn", checks["federation"]
        assert "restart the daemon" in checks["federation"]["fix"]
