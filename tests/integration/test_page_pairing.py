"""The owner page's pairings on real parts (docs/page.md, "Pairings"; docs/federation.md, "Pairing"): a
real ``connectd serve`` set up for federation by ``connectd federate --nats ...`` against a real
nats-server, another box (its keys here, publishing over NATS as its own user) asking to pair with a
fresh invitation code, and Debian's chromium driving the page.

Also: the paired box's agents (its directory entry, put in the bucket as that box would) are
read-only rows under the fleet on the page and in ``connectd agents``, with their box and the entry's
age, their text (markup included) shown as text, no toggle.

Checked: the request is a Needs-you item, counted in the top bar, with both boxes' fingerprints and
Approve / Decline that call ``/api/pairing/requests/{id}/...`` with the CSRF token; approving makes the
pairing active in the Pairings panel (its fingerprint shown) and the item goes; the panel says the bus
is connected; the approval is audited as the page session (``owner:page:<id>``), the invitation made
with the owner token as ``owner``. A box name with markup never becomes a request (the core refuses it, audited, nothing
stored), and should the API ever carry one, the page shows it as text: the request list answered with a
crafted name (Playwright's route) renders it literally, with no element and no script from it.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from connectcore.federation import envelope as E
from connectcore.federation import pairing as P
from connectcore.federation import remote_directory as RD
from connectd.federation import keys as K
from connectd.federation.bus import NatsBus
from connectd.federation.seal import LocalBox, seal
from tests.integration.test_page import MARKUP, Page, browser, in_thread  # noqa: F401 (the module's browser fixture)
from tests.integration.test_pair_cli import run
from tests.support.daemon import DaemonProcess, wait_for
from tests.support.fixtures import running_daemon
from tests.support.nats import NatsServer, box_password
from tests.support.tmux_server import TmuxServer

pytestmark = pytest.mark.timeout(180)

PEER = LocalBox.from_secrets(K.BoxSecrets(bytes([51]) * 32, bytes([52]) * 32))


@pytest.fixture
def federated(tmp_path: Path, tmux: TmuxServer) -> Iterator[tuple[DaemonProcess, LocalBox, NatsServer]]:
    data = tmp_path / "data"
    local = LocalBox.from_secrets(K.init(data, "laptop"))
    (tmp_path / "nats").mkdir()
    server = NatsServer(tmp_path / "nats", [local.box_id, PEER.box_id])
    server.start()
    try:
        in_thread(server.provision)  # (a thread: Playwright holds this one's loop)
        password = tmp_path / "nats-password"
        password.write_text(box_password(local.box_id))
        done = run("federate", "--nats", server.url, "--user", f"box-{local.box_id}", "--password-file", str(password),
                   "--data-dir", str(data))
        assert done.returncode == 0, done.stderr
        with running_daemon(tmp_path, tmux) as d:
            yield d, local, server
    finally:
        server.stop()


async def _ask(server: NatsServer, code: P.Code, name: str, msg_id: str) -> None:
    """PEER, holding ``code``, asks to pair under ``name`` over NATS."""
    routing = E.Routing(E.Kind.PAIR_REQUEST, PEER.box_id, code.box, invitation=code.invitation)
    inner = E.PairingInner(routing, (("name", name), ("secret", E.b64(code.secret))))
    wire = seal(PEER, code.keys, inner, secrets.token_bytes(E.NONCE_BYTES))
    bus = await server.connect(NatsBus(PEER.box_id, call_timeout=5.0))
    try:
        await bus.publish(E.subject_for(E.Kind.PAIR_REQUEST, PEER.box_id, code.box), wire, msg_id=msg_id)
    finally:
        await bus.close()


def test_a_pair_request_is_a_needs_you_item_with_both_fingerprints_and_approving_it_pairs(
    browser: Any, federated: tuple[DaemonProcess, LocalBox, NatsServer]  # noqa: F811
) -> None:
    daemon, local, server = federated
    code = P.decode_code(daemon.api("POST", "/api/pairing/invitations", {})["code"])

    # a name with markup is refused by the core before anything is stored (audited)
    in_thread(_ask, server, code, MARKUP, "markup-1")
    wait_for(lambda: [r for r in daemon.api("GET", "/api/audit?outcome=refused&limit=100") if r["actor"] == f"box:{PEER.box_id}"],
             20, "the markup name refused")
    assert daemon.api("GET", "/api/pairing/requests") == []

    in_thread(_ask, server, code, "devbox", "devbox-1")
    (request,) = wait_for(lambda: daemon.api("GET", "/api/pairing/requests"), 20, "the pair request")
    assert (request["name"], request["box"], request["fingerprint"]) == ("devbox", PEER.box_id, PEER.keys.fingerprint)

    p = Page(browser, daemon)
    try:
        page = p.page
        item = page.locator('#pair-requests > li[data-testid="pair-request"]')
        item.wait_for()
        assert page.locator("#needs-count").text_content() == "1"
        assert item.locator(".box-name").text_content() == " Box devbox"
        assert item.locator('[data-testid="their-fingerprint"]').text_content() == PEER.keys.fingerprint
        assert item.locator('[data-testid="our-fingerprint"]').text_content() == local.keys.fingerprint
        assert page.locator("#pairings").is_visible()
        page.wait_for_selector('#federation-status[data-connected="true"]')
        assert server.url in (page.locator("#federation-status").text_content() or "")

        item.get_by_role("button", name="Approve").click()
        row = page.locator(f'#pairings-list > li[data-box="{PEER.box_id}"]')
        row.wait_for()
        assert row.get_attribute("data-state") == "active"
        assert row.locator(".fingerprint").text_content() == PEER.keys.fingerprint
        assert row.locator(".box-name").text_content() == "devbox"
        assert row.locator('[data-testid="pairing-settings"]').text_content() == (
            "messages=on per_window=60 live_ids=2000 queued_bytes=1048576 directory=reachable history=none"
            " history_repos="
        )
        assert "not since" not in (row.locator('[data-testid="pairing-heard"]').text_content() or "")  # its request
        # the directory's age: this peer publishes no entry, so none is held yet
        assert row.locator('[data-testid="pairing-directory"]').text_content() == "directory none yet · "
        page.locator("#pair-requests > li").first.wait_for(state="detached")
        assert page.locator("#needs-count").text_content() == "0"
        (pairing,) = daemon.api("GET", "/api/pairing/pairings")
        assert (pairing["state"], pairing["fingerprint"]) == ("active", PEER.keys.fingerprint)
        # audited as who took each step: the invitation by the owner token (the API), the approval by
        # this page session, not by "owner"
        audit = daemon.api("GET", "/api/audit?limit=200")
        assert [r["actor"] for r in audit if r["action"] == "pair.invite"] == ["owner"]
        (approval,) = [r for r in audit if r["action"] == "pair.approve"]
        assert approval["actor"].startswith("owner:page:") and len(approval["actor"]) > len("owner:page:")

        # should the API ever carry a box name with markup, the page shows it as text
        crafted = [{**request, "id": "req-crafted", "name": MARKUP, "state": "pending"}]
        page.route("**/api/pairing/requests", lambda route: route.fulfill(
            status=200, content_type="application/json", body=json.dumps(crafted)))
        page.reload()
        p.wait_live()
        shown = page.locator('#pair-requests > li[data-testid="pair-request"]')
        shown.wait_for()
        name = shown.locator(".box-name")
        assert "<img src=x" in (name.text_content() or "") and "<script>" in (name.text_content() or "")
        assert shown.locator("img, script, b, i").count() == 0
        assert page.evaluate("window.__pwned") is None
        assert not p.errors, p.errors
    finally:
        p.close()


async def _put_entry(server: NatsServer, local: LocalBox, pairing: str, agents: list[dict[str, Any]]) -> None:
    """PEER puts its directory entry for ``local`` in the bucket, as its daemon's publish loop does."""
    routing = E.Routing(E.Kind.DIRECTORY, PEER.box_id, local.box_id, pairing=pairing)
    inner = RD.entry(routing, RD.shared(agents, RD.Setting.CONNECTED), revision=int(time.time() * 1000), now=time.time())
    bus = await server.connect(NatsBus(PEER.box_id, call_timeout=5.0))
    try:
        await bus.put_entry(local.box_id, seal(PEER, local.keys, inner, secrets.token_bytes(E.NONCE_BYTES)))
    finally:
        await bus.close()


def test_a_paired_box_s_agents_are_read_only_rows_in_the_fleet_and_in_connectd_agents(
    browser: Any, federated: tuple[DaemonProcess, LocalBox, NatsServer]  # noqa: F811
) -> None:
    daemon, local, server = federated
    code = P.decode_code(daemon.api("POST", "/api/pairing/invitations", {})["code"])
    in_thread(_ask, server, code, "devbox", "devbox-agents")
    (request,) = wait_for(lambda: daemon.api("GET", "/api/pairing/requests"), 20, "the pair request")
    pairing = daemon.api("POST", f"/api/pairing/requests/{request['id']}/approve", {})["pairing"]
    assert daemon.api("GET", "/api/pairing/agents") == []  # paired, nothing heard from it yet
    agent = {"pane": "%7", "address": "%7@0123456789abcdef", "harness": "claude", "title": MARKUP.replace("\n", " "),
             "repo": "/home/peer/src/app", "branch": "main", "pr_links": [], "activity": "idle", "composer": "empty",
             "scopes": ["read", "message", "reachable"], "release": "2.1.0"}
    in_thread(_put_entry, server, local, pairing, [agent])
    (listed,) = wait_for(lambda: daemon.api("GET", "/api/pairing/agents"), 20, "the peer's agent on this box")
    short = PEER.keys.fingerprint.replace(" ", "")[:8]
    assert (listed["address"], listed["box"], listed["freshness"], listed["remote"]) == (
        "%7@0123456789abcdef@devbox", {"name": "devbox", "id": PEER.box_id, "fingerprint": short}, "fresh", True)
    assert listed["repo"] == "app"  # the repository's name, never the other box's path
    assert [a for a in daemon.api("GET", "/api/agents") if a.get("remote")] == []  # this box's list as before

    shown = run("agents", "--data-dir", str(daemon.data_dir), "--port", str(daemon.port))
    assert shown.returncode == 0, shown.stderr
    assert "on paired boxes (read-only" in shown.stdout
    row = next(line for line in shown.stdout.splitlines() if "%7@0123456789abcdef@devbox" in line)
    assert f"devbox ({short})" in row and "fresh" in row and "<img src=x" in row
    assert "%7@" not in run("agents", "--json", "--data-dir", str(daemon.data_dir), "--port", str(daemon.port)).stdout

    p = Page(browser, daemon)
    try:
        page = p.page
        item = page.locator('#remote-agents-list > li[data-testid="remote-agent"]')
        item.wait_for()
        assert page.locator("#remote-agents").is_visible()
        assert item.get_attribute("data-box") == PEER.box_id and item.get_attribute("data-stale") == "false"
        assert item.locator('[data-testid="remote-address"]').text_content() == "%7@0123456789abcdef@devbox"
        assert item.locator('[data-testid="remote-box"]').text_content() == f"box devbox ({short}) · fresh"
        assert "<img src=x" in (item.locator("strong").text_content() or "")  # another machine's text, as text
        assert item.locator("img, script, b, i, button, input").count() == 0  # no markup, no toggle
        assert page.evaluate("window.__pwned") is None
        assert page.locator('#agents > li[data-pane="%7"]').count() == 0  # not among this box's panes
        assert not p.errors, p.errors
    finally:
        p.close()
