"""``connectd pair ...`` and ``connectd federate provision`` as a person runs them, against a real
daemon (its owner API, its store): the invitation printed once with this box's fingerprint; the code's
fingerprint shown before it is pinned; and every refusal one clear line naming the problem, exit 1,
with nothing changed (the pairing tables and the owed wires compared before and after)
(docs/federation.md, "Pairing")."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from connectd.federation import keys as K
from connectd.federation.seal import LocalBox
from tests.support.daemon import DaemonProcess
from tests.support.federation import cli, run
from tests.support.fixtures import running_daemon
from tests.support.nats import ADMIN, NatsServer
from tests.support.tmux_server import TmuxServer


def refused(d: DaemonProcess, *args: str, says: str, status: int = 1) -> str:
    """The command fails naming the problem (status 1; 2: argparse's usage error), and the pairing
    tables are unchanged."""
    before = tables(d)
    done = cli(d, *args)
    assert done.returncode == status, (done.returncode, done.stdout, done.stderr)
    assert says in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert tables(d) == before
    return done.stderr


def tables(d: DaemonProcess) -> dict[str, list[tuple[object, ...]]]:
    db = sqlite3.connect(d.data_dir / "connect.db")
    try:
        return {t: sorted(db.execute(f"SELECT * FROM {t}").fetchall())
                for t in ("pair_invitations", "pair_requests", "pairings", "pair_wires")}
    finally:
        db.close()


@pytest.fixture
def box(tmp_path: Path, tmux: TmuxServer) -> Iterator[DaemonProcess]:
    """A daemon set up for federation (keys, name) but with no NATS server named."""
    data = tmp_path / "data"
    K.init(data, "laptop")
    with running_daemon(tmp_path, tmux) as d:
        yield d


def test_invite_prints_the_code_once_with_this_box_s_fingerprint(box: DaemonProcess) -> None:
    local = LocalBox.from_secrets(K.read(box.data_dir))
    done = cli(box, "pair", "invite", "--expires", "10m")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    code = next(line for line in lines if line.startswith("connect-invite-1:"))
    assert local.keys.fingerprint in done.stdout and "expires in 10 min" in done.stdout
    rows = tables(box)
    assert len(rows["pair_invitations"]) == 1
    assert code.split(":", 1)[1] not in json.dumps(rows)  # the secret is not stored (its hash is)


def test_each_refusal_names_the_problem_and_changes_nothing(box: DaemonProcess, tmp_path: Path) -> None:
    own = cli(box, "pair", "invite", "--json")
    code = json.loads(own.stdout)["code"]
    refused(box, "pair", "accept", "connect-invite-1:garbage", "--yes", says="not an invitation code")
    refused(box, "pair", "accept", "hello", "--yes", says="does not start with 'connect-invite-1:'")
    refused(box, "pair", "accept", code, "--yes", says="a box cannot pair with itself")
    # without a terminal and without --yes nobody confirmed the fingerprint: nothing is pinned
    other = LocalBox.from_secrets(K.BoxSecrets(bytes([7]) * 32, bytes([8]) * 32))
    from connectcore.federation import pairing as P

    foreign = P.encode_code(P.Code(other.box_id, "devbox", other.keys, "inv-x", b"s" * 32, 4_000_000_000))
    stderr = refused(box, "pair", "accept", foreign, says="no terminal to confirm on")
    assert "--yes" in stderr
    refused(box, "pair", "accept", P.encode_code(P.Code(other.box_id, "devbox", other.keys, "inv-y", b"s" * 32, 1)),
            "--yes", says="expired; ask for a new one")
    refused(box, "pair", "approve", "nobody", says="no pending pair request from 'nobody'")
    refused(box, "pair", "decline", "nobody", says="no pending pair request from 'nobody'")
    refused(box, "pair", "remove", "nobody", "--yes", says="no pairing with 'nobody'")
    refused(box, "pair", "invite", "--expires", "25h", says="at most 86400 s (24 h)")
    # an invitation withdrawn: done once, and refused again naming its state
    invitation = json.loads(own.stdout)["invitation"]
    withdrawn = cli(box, "pair", "invite", "--revoke", invitation)
    assert withdrawn.returncode == 0 and "revoked" in withdrawn.stdout, withdrawn.stderr
    refused(box, "pair", "invite", "--revoke", invitation, says="is revoked, not open")
    refused(box, "pair", "invite", "--revoke", "no-such", says="no invitation 'no-such' on this box")
    refused(box, "pair", "invite", "--expires", "soon", says="a duration is a number of seconds", status=2)
    refused(box, "pair", "accept", foreign, "--yes", "--name", "Bad Name!", says="box name")
    # a pairing removed is removed for good: removing it again is refused, naming its state
    done = cli(box, "pair", "accept", foreign, "--yes", "--name", "dev")
    assert done.returncode == 0, done.stderr
    assert other.keys.fingerprint in done.stdout  # shown before it was pinned, and after
    assert cli(box, "pair", "remove", "dev", "--yes").returncode == 0
    refused(box, "pair", "remove", "dev", "--yes", says="is removed: nothing to remove")
    refused(box, "pair", "accept", foreign, "--yes", says="already used on this box")


def test_pair_set_sets_a_pairing_s_settings_and_pair_list_shows_them(box: DaemonProcess) -> None:
    from connectcore.federation import pairing as P

    other = LocalBox.from_secrets(K.BoxSecrets(bytes([7]) * 32, bytes([8]) * 32))
    code = P.encode_code(P.Code(other.box_id, "devbox", other.keys, "inv-s", b"s" * 32, 4_000_000_000))
    assert cli(box, "pair", "accept", code, "--yes", "--name", "dev").returncode == 0
    listed = cli(box, "pair", "list")
    assert listed.returncode == 0, listed.stderr
    assert "HEARD" in listed.stdout and "SETTINGS" in listed.stdout
    assert ("messages=on per_window=60 live_ids=2000 queued_bytes=1048576 directory=reachable history=none"
            " history_repos=") in listed.stdout
    done = cli(box, "pair", "set", "dev", "messages=off", "per_window=30", "directory=connected", "history=index",
               "history_repos=connect,site")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        f"box dev ({other.box_id}): messages=off per_window=30 live_ids=2000 queued_bytes=1048576"
        " directory=connected history=index history_repos=connect,site"
    )
    (row,) = json.loads(cli(box, "pair", "list", "--json").stdout)
    assert row["settings"] == {"messages": False, "per_window": 30, "live_ids": 2000, "queued_bytes": 1048576,
                               "directory": "connected", "history": "index", "history_repos": ["connect", "site"]}
    assert row["heard_at"] is None  # never heard since the daemon started (no NATS here)
    assert "messages=off per_window=30" in cli(box, "pair", "list").stdout
    assert "directory=connected history=index history_repos=connect,site" in cli(box, "pair", "list").stdout
    db = sqlite3.connect(box.data_dir / "connect.db")
    try:
        audited = db.execute("SELECT actor, action, outcome, detail FROM audit WHERE action = 'pair.set'").fetchall()
    finally:
        db.close()
    assert audited == [("owner", "pair.set", "set",
                        f"box {other.box_id} (dev): messages on -> off; per_window 60 -> 30; directory reachable"
                        " -> connected; history none -> index; history_repos  -> connect,site")]
    # every refusal: one line naming the problem, exit 1, nothing changed
    for words, says in [
        (["colour=red"], "no setting 'colour'"),
        (["messages=maybe"], "messages is on or off, not 'maybe'"),
        (["per_window=lots"], "per_window is a whole number from 1 to 600"),
        (["per_window=0"], "per_window=0 is out of range: from 1 to 600"),
        (["queued_bytes=999999999999"], "queued_bytes=999999999999 is out of range"),
        (["messages"], "'messages' is not KEY=VALUE"),
        (["messages=on", "live_ids=0"], "live_ids=0 is out of range"),  # all or none
        (["directory=everyone"], "directory is reachable or connected or none, not 'everyone'"),
        (["history=all"], "history is none or index, not 'all'"),
        (["history_repos=~/src/connect"], "history_repos is repository names"),
    ]:
        stderr = refused(box, "pair", "set", "dev", *words, says=says)
        assert len(stderr.strip().splitlines()) == 1, stderr
    refused(box, "pair", "set", "nobody", "messages=off", says="no pairing with 'nobody'")
    refused(box, "pair", "set", "dev", says="the following arguments are required", status=2)
    assert cli(box, "pair", "remove", "dev", "--yes").returncode == 0
    refused(box, "pair", "set", "dev", "messages=on", says="is removed: its settings no longer matter")


def test_a_box_not_set_up_for_federation_says_how_to_set_it_up(daemon: DaemonProcess) -> None:
    done = cli(daemon, "pair", "list")
    assert done.returncode == 1
    assert "this box is not set up for federation" in done.stderr and "federate init --name NAME" in done.stderr


def test_federate_provision_makes_the_stream_and_consumer_and_prints_the_block(tmp_path: Path) -> None:
    from connectd.federation.provision import permissions

    box_id = LocalBox.from_secrets(K.BoxSecrets(bytes([9]) * 32, bytes([10]) * 32)).box_id
    (tmp_path / "nats").mkdir()
    server = NatsServer(tmp_path / "nats", [box_id])
    server.start()
    try:
        (tmp_path / "admin-pw").write_text(ADMIN[1])
        (tmp_path / "wrong-pw").write_text("nope")
        base = ("--nats", server.url, "--user", ADMIN[0], "--data-dir", str(tmp_path / "d"))
        for args, says in (
            (("not-a-box", "--password-file", str(tmp_path / "admin-pw")), "a box id is 16 characters"),
            ((box_id, "--password-file", str(tmp_path / "missing")), "cannot read the password file"),
            ((box_id, "--password-file", str(tmp_path / "wrong-pw")), f"cannot connect to {server.url} as the operator"),
        ):
            done = run("federate", "provision", *args, *base)
            assert done.returncode == 1 and says in done.stderr and "Traceback" not in done.stderr, done.stderr
        done = run("federate", "provision", box_id, "--password-file", str(tmp_path / "admin-pw"), *base)
        assert done.returncode == 0, done.stderr
        printed = json.loads(done.stdout)
        assert printed == {"user": f"box-{box_id}", "permissions": permissions(box_id)}
        again = run("federate", "provision", box_id, "--password-file", str(tmp_path / "admin-pw"), *base)  # idempotent
        assert again.returncode == 0 and json.loads(again.stdout) == printed
    finally:
        server.stop()


def test_the_pairing_routes_check_their_bodies_and_change_nothing(box: DaemonProcess) -> None:
    before = tables(box)
    for path, body, error in (
        ("/api/pairing/invitations", {"expires": "soon"}, "wrong_type"),
        ("/api/pairing/invitations", {"expires": 600, "extra": 1}, "unknown_field"),
        ("/api/pairing/accept", {}, "missing_field"),
        ("/api/pairing/accept", {"code": ""}, "empty_field"),
        ("/api/pairing/requests/x/decline", {"name": "n"}, "unknown_field"),
    ):
        assert box.api("POST", path, body, expect=400)["error"] == error, (path, body)
    assert box.api("GET", "/api/pairing/requests?bogus=1", expect=400)["error"] == "unknown_parameter"
    assert tables(box) == before
    made = box.api("POST", "/api/pairing/invitations", {"expires": 600})  # whole seconds are a number too
    assert abs(made["expires_at"] - time.time() - 600) < 30 and made["code"].startswith("connect-invite-1:")
