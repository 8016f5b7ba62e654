"""Issue 14, item 6: every list read pages (``--limit``, ``--before``/``--after``, newest first) and says
when it stopped short, on a real ``connectd serve`` driven through the real CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from connectcore.effects import Audit, Persist
from connectcore.federation import outbox as O
from connectd.store.store import Store
from tests.integration.test_store import HashedWorld
from tests.support.daemon import ROOT, DaemonProcess
from tests.support.fixtures import running_daemon, tmux_session
from tests.support.tmux_server import TmuxServer
from tests.unit import test_federation_outbox as TO

RECORDS = 250


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    tmp = tmp_path_factory.mktemp("paged")
    with Store.open(tmp / "data") as store:  # history from before this daemon: more than one page
        store.apply([Audit(actor=f"agent:claude:s{i % 3}", action="probe", outcome="allowed", at=1000.0 + i) for i in range(RECORDS)])
        w = HashedWorld()
        a, b = w.launch("a"), w.launch("b")
        for n in range(3):
            w.send(a, b, f"message {n}", message_id=f"m-{n}")
            w.now += 1
        store.apply(w.effects)
    with tmux_session("connect-paged", width=120, height=30) as tmux, running_daemon(tmp, tmux) as d:
        yield d


def cli(daemon: DaemonProcess, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [sys.executable, "-m", "connectd.cli", *args, "--data-dir", str(daemon.data_dir)],
        capture_output=True, text=True, env=env, timeout=60,
    )


def ok(daemon: DaemonProcess, *args: str) -> subprocess.CompletedProcess[str]:
    out = cli(daemon, *args)
    assert out.returncode == 0, out.stderr
    return out


def every_audit_id(daemon: DaemonProcess) -> list[int]:
    with Store.open(daemon.data_dir) as store:
        return [row.id for row in store.audit(limit=100_000)]


def test_audit_json_pages_newest_first_and_says_where_to_go_on(daemon: DaemonProcess) -> None:
    first = json.loads(ok(daemon, "audit", "--json").stdout)
    ids = [row["id"] for row in first["items"]]
    assert len(ids) == 100 and ids == sorted(ids, reverse=True)
    assert first["more"] is True and first["next"] == {"before": str(ids[-1])}
    second = json.loads(ok(daemon, "audit", "--json", "--before", first["next"]["before"]).stdout)
    assert [row["id"] for row in second["items"]][0] == ids[-1] - 1

    everything = json.loads(ok(daemon, "audit", "--json", "--all").stdout)
    assert everything["more"] is False and everything["next"] is None
    listed = [row["id"] for row in everything["items"]]
    assert len(listed) > RECORDS  # nothing silently cut at 500 or 100
    assert listed == sorted(listed, reverse=True) and listed[-1] == 1 and len(listed) == listed[0]  # every id once
    assert set(listed) <= set(every_audit_id(daemon))

    oldest = json.loads(ok(daemon, "audit", "--json", "--oldest-first", "--limit", "5").stdout)
    assert [row["id"] for row in oldest["items"]] == [1, 2, 3, 4, 5]
    assert oldest["next"] == {"after": "5"}
    window = json.loads(ok(daemon, "audit", "--json", "--after", "10", "--before", "14").stdout)
    assert [row["id"] for row in window["items"]] == [13, 12, 11] and window["more"] is False


def test_audit_text_says_on_stderr_when_it_stopped_short(daemon: DaemonProcess) -> None:
    out = ok(daemon, "audit", "--limit", "10", "--actor", "agent:claude:s1")
    assert len(out.stdout.splitlines()) == 10 and "agent:claude:s1" in out.stdout
    assert "more remain" in out.stderr and "--before" in out.stderr
    whole = ok(daemon, "audit", "--all", "--actor", "agent:claude:s1")
    assert len(whole.stdout.splitlines()) == RECORDS // 3 and whole.stderr == ""


def test_messages_page_with_opaque_cursors(daemon: DaemonProcess) -> None:
    first = json.loads(ok(daemon, "messages", "--json", "--limit", "1").stdout)
    assert [m["message_id"] for m in first["items"]] == ["m-2"] and first["more"] is True
    rest = json.loads(ok(daemon, "messages", "--json", "--before", first["next"]["before"]).stdout)
    assert [m["message_id"] for m in rest["items"]] == ["m-1", "m-0"] and rest["more"] is False
    every = json.loads(ok(daemon, "messages", "--json", "--all", "--limit", "1", "--oldest-first").stdout)
    assert [m["message_id"] for m in every["items"]] == ["m-0", "m-1", "m-2"]
    text = ok(daemon, "messages", "--limit", "2")
    assert len(text.stdout.splitlines()) == 2 and "more remain" in text.stderr


def test_messages_to_other_boxes_page_in_one_order_with_the_local_ones(tmp_path: Path) -> None:
    """The outbox rows (messages to agents on other boxes: no local row) are listed among the local
    messages in one (created_at, place) order, each page's cursor continuing past either kind; a row
    names the box it went to (``to_box``; this box keeps no pairing for it here: its id)."""
    with Store.open(tmp_path / "data") as store:
        w = HashedWorld()
        a, b = w.launch("a"), w.launch("b")
        start = w.now
        for n in range(2):
            w.send(a, b, f"message {n}", message_id=f"m-{n}")
            w.now += 2
        store.apply(w.effects)
        outbox = O.Outbox(own=TO.A)
        for n in range(2):  # one between the two local messages, one after both
            outbox, effects = O.admit(outbox, TO.message(f"x-{n}", f"p-x{n}", created=start + 1 + 2 * n),
                                      nonce=TO.NONCE, now=start + 1 + 2 * n)
            store.apply([e for e in effects if isinstance(e, Persist | Audit)])
        # x-0 left, then its sender was revoked: cancelling, box B has not confirmed
        x0 = TO.message("x-0", "p-x0").identity
        outbox, effects = O.publish_new(outbox, x0, now=start + 1, bus_up=True)
        store.apply([e for e in effects if isinstance(e, Persist | Audit)])
        outbox, effects = O.cancel(outbox, sender=x0.principal, now=start + 2, reason="the sender was revoked",
                                   nonces={x0: bytes([9]) * 24})
        store.apply([e for e in effects if isinstance(e, Persist | Audit)])
    with tmux_session("connect-paged-x", width=120, height=30) as tmux, running_daemon(tmp_path, tmux) as d:
        newest = json.loads(ok(d, "messages", "--json", "--all", "--limit", "1").stdout)["items"]
        assert [m["message_id"] for m in newest] == ["x-1", "m-1", "x-0", "m-0"]
        oldest = json.loads(ok(d, "messages", "--json", "--all", "--limit", "1", "--oldest-first").stdout)["items"]
        assert [m["message_id"] for m in oldest] == ["m-0", "x-0", "m-1", "x-1"]
        row = newest[0]
        assert (row["to_box"], row["from_box"], row["outcome"], row["to"]) == (TO.B, None, "queued", "%4@51d7a9c03e6f2b18")
        assert row["reason"] == row["waits_for"] == f"until box {TO.B} accepts it"
        assert (newest[1]["to_box"], newest[1]["from_box"]) == (None, None)  # a local message: no other box
        assert f"-> %4@51d7a9c03e6f2b18 on box {TO.B} x-1: queued" in ok(d, "messages").stdout
        # the person's list shows a cancelling row so, and says the other box has not yet confirmed it
        cancelling = newest[2]
        assert (cancelling["message_id"], cancelling["outcome"], cancelling["state"]) == ("x-0", "cancelling", "cancelling")
        assert cancelling["reason"] == f"box {TO.B} has not yet confirmed it is cancelled"
        assert (f"-> %4@51d7a9c03e6f2b18 on box {TO.B} x-0: cancelling box {TO.B} has not yet confirmed it is"
                " cancelled; waits cancelling:") in ok(d, "messages").stdout


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("audit", "--limit", "-1"), "--limit must be a whole number from 1 to 1000, not '-1'"),
        (("audit", "--limit", "0"), "--limit must be a whole number"),
        (("messages", "--limit", "5000"), "--limit must be a whole number"),
        (("audit", "--before", "abc"), "an audit cursor is a record id"),
        (("messages", "--before", "not-a-cursor"), "'before' is not a message cursor"),
        (("messages", "--after", "W10"), "'after' is not a message cursor"),
    ],
)
def test_bad_paging_input_is_an_error_naming_the_problem(daemon: DaemonProcess, args: tuple[str, ...], needle: str) -> None:
    out = cli(daemon, *args)
    assert out.returncode != 0 and needle in out.stderr, out.stderr
    assert out.stdout == ""


def test_the_owner_api_names_the_next_page_in_its_headers(daemon: DaemonProcess) -> None:
    response = daemon.http().get("/api/audit", params={"limit": "3", "actor": "agent:claude:s0"})
    rows = response.json()
    assert len(rows) == 3 and response.headers["X-More"] == "true"
    assert response.headers["X-Next-Before"] == str(rows[-1]["id"])
    link = response.headers["Link"]
    assert link.startswith("</api/audit?") and f"before={rows[-1]['id']}" in link and "actor=agent" in link
    following = daemon.http().get(link[1 : link.index(">")]).json()
    assert following[0]["id"] < rows[-1]["id"] and following[0]["actor"] == "agent:claude:s0"


def test_agents_text_is_a_table_and_json_is_unchanged(daemon: DaemonProcess) -> None:
    listed = json.loads(ok(daemon, "agents", "--json").stdout)
    assert isinstance(listed, list) and listed and {"address", "harness", "activity", "connect"} <= set(listed[0])
    lines = ok(daemon, "agents").stdout.splitlines()
    assert lines[0].split()[:4] == ["ADDRESS", "HARNESS", "READING", "CONNECT"]
    body = [line for line in lines[1:] if line.strip()]
    assert len(body) == len(listed)
    for agent, line in zip(listed, body, strict=True):
        assert line.split()[:4] == [agent["address"], agent["harness"], agent["activity"], agent["connect"]]


def test_audit_follow_prints_the_newest_then_each_new_record_oldest_first(daemon: DaemonProcess) -> None:
    env = {"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"}
    follow = subprocess.Popen(
        [sys.executable, "-m", "connectd.cli", "audit", "--follow", "--json", "--limit", "3", "--data-dir", str(daemon.data_dir)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    try:
        assert follow.stdout is not None
        first = [json.loads(follow.stdout.readline()) for _ in range(3)]
        ids = [row["id"] for row in first]
        assert ids == sorted(ids) and ids[-1] == max(every_audit_id(daemon))  # the newest three, oldest first
        daemon.api("POST", "/api/launch", {"launcher": "no-such", "connect": "off", "cwd": str(daemon.workdir)}, expect=404)
        new = json.loads(follow.stdout.readline())
        assert new["id"] > ids[-1] and (new["action"], new["outcome"]) == ("launch", "refused")
    finally:
        follow.kill()
        follow.wait(10)


# --- issue 21 items 6, 7: agent- and pane-supplied text is shown as text ---------------------------

HIDING = "\r\x1b[2K\x1b[99A\x1b[J"


def test_agents_shows_a_markup_title_as_text(daemon: DaemonProcess) -> None:
    """A pane title that is rich markup ([/x], [link=...]) neither crashes nor restyles `connectd agents`."""
    tmux = daemon.tmux
    pane = tmux.new_window("main", ["sleep", "600"])
    for title in ("[/x]", "[link=file:///etc/passwd]evil[/link]", "t\u202eitle\u200b"):  # tmux itself drops C0 from titles
        tmux.tmux("select-pane", "-t", pane, "-T", title)
        listed = wait_for_title(daemon, pane, title)
        assert listed["title"] == title  # the API holds what the pane set
        out = ok(daemon, "agents")
        shown = title.replace("\u202e", "\\u202e").replace("\u200b", "\\u200b")
        assert shown in out.stdout, out.stdout
        assert "\x1b" not in out.stdout and "\u202e" not in out.stdout and "\u200b" not in out.stdout
    tmux.tmux("kill-pane", "-t", pane)


def wait_for_title(daemon: DaemonProcess, pane: str, title: str) -> dict[str, object]:
    def found() -> dict[str, object] | None:
        return next((a for a in daemon.api("GET", "/api/agents") if a["pane"] == pane and a.get("title") == title), None)

    return TmuxServer.wait_for(found, what=f"title {title!r} listed")


def test_audit_shows_every_record_of_a_target_that_hides_lines(daemon: DaemonProcess) -> None:
    """An audited target of cursor-movement escapes is stored as sent and shown with its escapes visible."""
    with Store.open(daemon.data_dir) as store:
        store.apply([Audit(actor="agent:claude:hider", action="get_agent", outcome="allowed", target=HIDING, at=5000.0)])
        store.apply([Audit(actor="agent:claude:hider", action="send_message", outcome="allowed", target=f"%{i}", at=5001.0 + i)
                     for i in range(6)])
    stored = json.loads(ok(daemon, "audit", "--json", "--actor", "agent:claude:hider").stdout)["items"]
    assert [r["target"] for r in stored][-1] == HIDING  # the API holds what was sent
    out = ok(daemon, "audit", "--actor", "agent:claude:hider").stdout
    assert "\x1b" not in out and "\r" not in out
    assert "target=\\x0d\\x1b[2K\\x1b[99A\\x1b[J" in out
    assert len(out.strip().splitlines()) == 7
