"""The rest of the daemon's scenarios on real parts: expiry, revocation racing delivery, a respawned
recipient, a crash mid-typing, restart-to-connect (and a crash inside it), history over MCP, the CLI."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from connectcore.delivery import MessageState
from connectcore.effects import Persist
from connectd.store.store import Store
from tests.fixtures.history.transcripts import Claude, make_repo
from tests.integration.test_daemon_e2e import agents, get_message, make_busy, run, send
from tests.support.daemon import ROOT, DaemonProcess, call, mcp_agent, wait_for
from tests.support.fixtures import running_daemon as running
from tests.support.tmux_server import TmuxServer


def test_an_unanswered_card_expires_and_the_sender_learns_it(tmp_path: Path, tmux: TmuxServer) -> None:
    with running(tmp_path, tmux, policy="[limits]\ncard_ttl = 2.0\n") as d:
        a, b = agents(d, "a", "b")
        run(send, d, a, b.address, "hello", "m-exp")
        d.wait_card()
        assert run(get_message, d, a, "m-exp", 8.0)["outcome"] == "expired"
        assert d.cards() == [] and b.prompts() == []


def test_revocation_racing_delivery_never_types_after_revoke_returns(daemon: DaemonProcess) -> None:
    (b,) = agents(daemon, "b")
    for round_ in range(4):
        a = daemon.launch(f"a{round_}")
        daemon.wait_ready(a)
        # pair-approve a first message so the racing one needs no card
        run(send, daemon, a, b.address, "warm-up", f"w{round_}")
        daemon.api("POST", f"/api/cards/{daemon.wait_card()['id']}/approve", {"pair": True})
        wait_for(lambda n=round_: sum(p.endswith("warm-up") for p in b.prompts()) >= n + 1, 15, f"warm-up {round_}: {len(b.prompts())} prompts")
        daemon.wait_ready(b, 20)
        returned: list[float] = []

        def revoke(pane: str = a.pane, returned: list[float] = returned) -> None:
            daemon.api("POST", "/api/revoke", {"pane": pane})
            returned.append(time.time())

        racer = threading.Thread(target=revoke)
        err, _ = run(send, daemon, a, b.address, f"race {round_}", f"r{round_}")
        racer.start()
        racer.join(30)
        assert returned, "revoke did not return"
        time.sleep(2.0)
        rows = [json.loads(x) for x in b.log.read_text().splitlines() if x.strip()]
        typed = [r for r in rows if r.get("prompt", "").endswith(f"race {round_}")]
        assert len(typed) <= 1
        if typed:
            assert typed[0]["at"] <= returned[0] + 0.05, "typed after the revocation returned"
        outcome = next(m for m in daemon.api("GET", "/api/messages") if m["message_id"] == f"r{round_}")["outcome"]
        assert outcome in ({"delivered", "unconfirmed"} if typed else {"cancelled"}), (outcome, typed)


def test_a_respawned_recipient_cancels_the_message(daemon: DaemonProcess, tmux: TmuxServer) -> None:
    a, b = agents(daemon, "a", "b")
    make_busy(daemon, tmux, b, 30)
    run(send, daemon, a, b.address, "to the old process", "m-respawn")
    daemon.api("POST", f"/api/cards/{daemon.wait_card()['id']}/approve", {"pair": True})
    tmux.tmux("respawn-pane", "-k", "-t", b.pane, "cat")
    assert wait_for(lambda: run(get_message, daemon, a, "m-respawn")["outcome"] == "cancelled", 10, "cancelled")
    assert "to the old process" not in tmux.tmux("capture-pane", "-p", "-t", b.pane)


def test_a_crash_after_typing_started_is_unconfirmed_and_never_retyped(daemon: DaemonProcess, tmux: TmuxServer) -> None:
    a, b = agents(daemon, "a", "b")
    make_busy(daemon, tmux, b, 8)
    run(send, daemon, a, b.address, "mid-typing", "m-crash")
    daemon.api("POST", f"/api/cards/{daemon.wait_card()['id']}/approve", {"pair": True})
    daemon.stop(signal.SIGKILL)
    # The crash point: "typing started" was committed, then the daemon died before it could confirm.
    with Store.open(daemon.data_dir) as store:
        message = next(m for m in store.messages() if m.id == "m-crash")
        typing = dataclasses.replace(message, state=MessageState.TYPING, reason="typing started")
        store.apply([Persist("message", typing.key, typing)])
    daemon.start()
    assert run(get_message, daemon, a, "m-crash")["outcome"] == "unconfirmed"
    time.sleep(8.0)  # B goes idle again: the message must not be typed
    assert not any("mid-typing" in p for p in b.prompts())


def _restart_option(tmux: TmuxServer, pane: str) -> str:
    return tmux.tmux("show-options", "-p", "-v", "-t", pane, "remain-on-exit", check=False).strip()


def test_restart_to_connect_relaunches_onto_the_same_session_connected(daemon: DaemonProcess, tmux: TmuxServer) -> None:
    c = daemon.launch("c", "off", session="5b3a6e44-1c3e-4d52-9d6c-2f7e5c1d9a01")
    daemon.wait_ready(c)
    assert c.token is None
    before = daemon.agent_view(c.pane)
    daemon.api("POST", "/api/restart", {"pane": c.pane, "preset": "observe"})
    line = wait_for(lambda: next((r for r in _log_rows(c) if r.get("token")), None), 45, "the connected relaunch")
    assert "--resume" in line["argv"] and "5b3a6e44-1c3e-4d52-9d6c-2f7e5c1d9a01" in line["argv"]
    assert any(a.startswith("--mcp-config") for a in line["argv"])
    after = wait_for(lambda: (v := daemon.agent_view(c.pane))["connect"] == "observe" and v, 30, "connected")
    assert after["pane"] == before["pane"] and after["address"] != before["address"]  # same pane, new process
    # the new process is connected from its start (the respawn binds its token); the restart goes on
    # to restore the pane's option and closes only once that is done
    closed = wait_for(lambda: [r["outcome"] for r in daemon.api("GET", "/api/audit?limit=1000")
                               if r["action"] == "restart.close"], 30, "the restart closed")
    assert closed == ["restarted"]
    assert _restart_option(tmux, c.pane) == ""  # the pane's own remain-on-exit (unset) is back

    async def whoami() -> tuple[bool, object]:
        async with mcp_agent(daemon.mcp_url, line["token"]) as client:
            return await call(client, "whoami")

    err, who = run(whoami)
    assert not err and who["actor"] == "agent:claude:5b3a6e44-1c3e-4d52-9d6c-2f7e5c1d9a01"  # type: ignore[index]


def test_a_restart_is_audited_under_the_person_who_asked_for_it(daemon: DaemonProcess, tmux: TmuxServer) -> None:
    """Issue 24: the route dropped its actor for restart-to-connect (a getattr/inspect shim found no
    ``by``), so a restart asked through the tunnel was audited as the bare owner token's."""
    c = daemon.launch("c", "off", session="6c4b7f55-2d4f-4e63-8e7d-3f8e6d2e0b12")
    daemon.wait_ready(c)
    secret = (daemon.data_dir / "tunnel_secret").read_text().strip()
    response = daemon.http().post(
        "/api/restart",
        json={"pane": c.pane, "preset": "observe"},
        headers={"Authorization": "", "X-Tunnel-User": "alice", "X-Tunnel-Secret": secret},
    )
    assert response.status_code == 200, response.text
    rows = wait_for(
        lambda: [r for r in daemon.api("GET", "/api/audit") if r["action"].startswith(("restart", "grant"))], 10, "audited"
    )
    assert [r["actor"] for r in rows if r["action"] == "grant"] == ["owner:tunnel:alice"], rows
    assert "owner" not in {r["actor"] for r in rows}, rows  # (restart.begin is the daemon's own: connectd)


def test_restart_is_refused_for_a_pane_connectd_did_not_launch(daemon: DaemonProcess, tmux: TmuxServer) -> None:
    shell = next(x for x in daemon.api("GET", "/api/agents") if x["harness"] == "shell")
    response = daemon.http().post("/api/restart", json={"pane": shell["pane"], "preset": "observe"})
    assert response.status_code in (400, 409) and "not started by connectd" in response.text


def test_revoke_of_a_pane_cancels_a_pending_restart_of_an_off_agent(daemon: DaemonProcess, tmux: TmuxServer) -> None:
    """Issue 22.3: `revoke %N` says "no" to an open restart-to-connect of an agent launched Off (it held
    no connected agent, and the route answered 409 while the restart went on to connect it)."""
    c = daemon.launch("c", "off", session="3c4d5e6f-7a8b-4c9d-8e0f-1a2b3c4d5e6f")
    daemon.wait_ready(c)
    refused = daemon.http().post("/api/revoke", json={"pane": c.pane})  # nothing to revoke yet
    assert (refused.status_code, refused.json()["error"]) == (409, "not_connected"), refused.text
    busy = daemon.data_dir / "c-busy"
    make_busy(daemon, tmux, c, busy)  # the restart waits for idle: it is open, nothing touched yet
    daemon.api("POST", "/api/restart", {"pane": c.pane, "preset": "collaborate"})
    response = daemon.http().post("/api/revoke", json={"pane": c.pane})
    assert response.status_code == 200, response.text

    def closes() -> list[str]:
        rows = daemon.api("GET", "/api/audit?limit=1000")
        return [r["outcome"] for r in rows if r["action"] in ("restart.cancel", "restart.close")]

    assert wait_for(closes, 15, "the restart closed") == ["cancelled"]
    busy.unlink()  # the busy turn ends only now, however slow the machine: the restart was open until the revoke
    wait_for(lambda: daemon.agent_view(c.pane)["activity"] == "idle", 15, "c idle again")
    time.sleep(4.0)  # idle: a restart still open would relaunch the agent now
    assert not any(r.get("token") for r in _log_rows(c)), "the relaunched agent got a token"
    assert daemon.agent_view(c.pane)["connect"] == "off"
    assert closes() == ["cancelled"]


@pytest.mark.parametrize("agent_exits_before_recovery", [False, True])
def test_a_crash_during_restart_is_recovered(tmp_path: Path, tmux: TmuxServer, agent_exits_before_recovery: bool) -> None:
    with running(tmp_path, tmux) as d:
        c = d.launch("c", "off", session="0d8c1a2b-3e4f-4a5b-8c6d-7e8f9a0b1c2d", env={"DEMO_EXIT_DELAY": "3"})
        pane = c.pane
        d.wait_ready(c)
        d.api("POST", "/api/restart", {"pane": pane, "preset": "observe"})
        wait_for(lambda: _restart_option(tmux, pane) == "on", 30, "remain-on-exit set (exit under way)")
        time.sleep(0.5)
        d.stop(signal.SIGKILL)  # the daemon dies while the agent is exiting
        if agent_exits_before_recovery:
            time.sleep(4.0)  # the pane is dead now (remain-on-exit kept it)
        d.start()
        wait_for(lambda: _restart_option(tmux, pane) == "", 45, "the original option restored")
        live = tmux.tmux("display-message", "-p", "-t", pane, "#{pane_dead}").strip()
        assert live == "0"  # the pane is live either way: left alone, or respawned as planned
        rows = d.api("GET", "/api/audit?limit=1000")
        assert any(r["action"].startswith("restart") for r in rows)


def _log_rows(agent) -> list[dict]:  # type: ignore[no-untyped-def,type-arg]
    if not agent.log.exists():
        return []
    return [json.loads(x) for x in agent.log.read_text().splitlines() if x.strip().endswith("}")]


def test_history_tools_over_mcp_are_scoped_to_the_agent_s_repo(tmp_path: Path, tmux: TmuxServer) -> None:
    claude_root, codex_root = tmp_path / "claude", tmp_path / "codex"
    work = make_repo(tmp_path / "work")
    other = make_repo(tmp_path / "other")
    Claude("11111111-1111-4111-8111-111111111111", str(work), branch="fix-login").prompt("fix the login redirect loop").write(claude_root)
    Claude("22222222-2222-4222-8222-222222222222", str(other), branch="fix-login").prompt("fix the login page colours").write(claude_root)
    with running(tmp_path, tmux, history_roots=(claude_root, codex_root)) as d:
        a, b = agents(d, "a", "b")
        url, token = d.mcp_url, a.token or ""

        async def search() -> tuple[object, object, object, object]:
            async with mcp_agent(url, token) as client:
                found = await call(client, "find_sessions", query="login")
                got = await call(client, "get_session", harness="claude", session_id="22222222-2222-4222-8222-222222222222")
                mine = await call(client, "get_session", harness="claude", session_id="11111111-1111-4111-8111-111111111111")
                theirs = await call(client, "find_sessions", query="login", repo=str(other))
                return found, got, mine, theirs

        (err, found), (got_err, got), (mine_err, mine), (theirs_err, theirs) = run(search)  # type: ignore[misc]
        assert theirs_err and "refused (out_of_scope)" in str(theirs), theirs
        assert not err, found
        ids = [s["session_id"] for s in found["data"]]  # type: ignore[index]
        assert ids == ["11111111-1111-4111-8111-111111111111"]  # the other repo's session is out of scope
        assert set(found["data"][0]) <= {"harness", "session_id", "repo", "title", "cwd", "branches", "prs", "last_active", "matched_terms", "liveness", "pane"}  # type: ignore[index]
        assert got_err and "outside the repositories this caller may read" in str(got)
        assert not mine_err
        actor = d.agent_view(a.pane)["actor"]
        rows = [(r["action"], r["outcome"], r["detail"]) for r in d.api("GET", f"/api/audit?actor={actor}&limit=100&order=oldest")]
        assert [r for r in rows if r[0] in ("find_sessions", "get_session")] == [
            ("find_sessions", "allowed", ""),
            ("get_session", "refused", "out_of_scope"),  # before: audited allowed
            ("get_session", "allowed", ""),
            ("find_sessions", "refused", "out_of_scope"),
        ]


def _cli(daemon: DaemonProcess, *args: str) -> str:
    """``connectd ARGS`` against ``daemon``; it must succeed; its stdout."""
    out = subprocess.run(
        [sys.executable, "-m", "connectd.cli", *args, "--data-dir", str(daemon.data_dir), "--port", str(daemon.port)],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_cli_reads_and_decides_against_the_running_daemon(daemon: DaemonProcess) -> None:
    a, b = agents(daemon, "a", "b")
    run(send, daemon, a, b.address, "via the cli", "m-cli")
    daemon.wait_card()
    def cli(*args: str) -> str:
        return _cli(daemon, *args)

    cards = json.loads(cli("cards", "--json"))
    assert cards[0]["text"] == "via the cli"
    cli("approve", cards[0]["id"], "--pair")
    wait_for(lambda: any(p.endswith("via the cli") for p in b.prompts()), 15, "delivery")
    listed = json.loads(cli("agents", "--json"))
    assert {x["pane"] for x in listed} >= {a.pane, b.pane}
    audit = cli("audit")
    assert "send_message" in audit and "consent" in audit
    assert "delivered" in cli("messages")


def test_cli_cards_say_what_each_answer_allows_and_every_pane_has_its_session_window(daemon: DaemonProcess) -> None:
    """Issue 23 item 5 in the CLI: cards, messages, audit and the fleet list put session:window beside %N."""
    a, b = agents(daemon, "a", "b")
    run(send, daemon, a, b.address, "via the cli, in words", "m-words")
    daemon.wait_card()
    def cli(*args: str) -> str:
        return _cli(daemon, *args)

    where = {x.pane: daemon.tmux.tmux("display-message", "-p", "-t", x.pane, "#{session_name}:#{window_index}").strip() for x in (a, b)}
    at_a, at_b = f"{a.pane} ({where[a.pane]})", f"{b.pane} ({where[b.pane]})"
    cards = cli("cards")
    card_id = json.loads(cli("cards", "--json"))[0]["id"]
    assert f"{card_id}  from {at_a} · claude" in cards and f"to {at_b} · claude" in cards
    assert "Starts a conversation (hop 1)." in cards
    dd = f"--data-dir {daemon.data_dir}"
    lines = cards.splitlines()
    assert any(f"approve {card_id} {dd}" in line and line.rstrip().endswith("Approve once: this message only") for line in lines), cards
    assert any(f"approve {card_id} --pair {dd}" in line and line.rstrip().endswith(f"Approve pair: every message from {at_a} to {at_b} until {at_b} ends") for line in lines), cards
    assert any(f"decline {card_id} {dd}" in line and "Decline: nothing is typed" in line for line in lines), cards
    cli("approve", card_id)
    wait_for(lambda: any(p.endswith("via the cli, in words") for p in b.prompts()), 15, "delivery")
    assert f"-> {b.address} ({where[b.pane]}) m-words:" in cli("messages")
    assert f"target={b.address} ({where[b.pane]})" in cli("audit", "--all")
    header, *rows = cli("agents").splitlines()
    assert "WINDOW" in header.split()
    assert where[a.pane] in next(r for r in rows if r.startswith(a.address)).split()


def test_restore_relaunches_the_sessions_a_lost_tmux_server_held(tmp_path: Path, tmux: TmuxServer) -> None:
    session = "7a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
    claude_root, codex_root = tmp_path / "claude", tmp_path / "codex"
    work = make_repo(tmp_path / "work")
    Claude(session, str(work), branch="main").prompt("keep the release notes current").write(claude_root)
    with running(tmp_path, tmux, history_roots=(claude_root, codex_root)) as d:
        first = d.launch("restored", "collaborate", session=session)
        d.wait_ready(first)
        assert d.api("GET", "/api/restore")["items"] == []  # still live: nothing to restore
        tmux.kill()  # a stray kill-server
        tmux.new_session("main", width=160, height=40)
        last: dict[str, Any] = {}

        def listed() -> Any:
            last.update(d.api("GET", "/api/restore"))
            return last["items"]

        try:
            plan = wait_for(listed, 20, "the lost session listed")
        except AssertionError as exc:  # say why it was not listed (the skipped reasons)
            raise AssertionError(f"{exc}; the last plan: {last}") from None
        assert [(i["harness"], i["session_id"], i["cwd"]) for i in plan] == [("claude", session, str(work))]
        result = d.api("POST", "/api/restore", {})
        [launched] = result["launched"]
        assert launched["connect"] == "collaborate"  # the grant is kept: it is keyed by the session
        # the agent's own screen read: its launcher script has exec'd it (its argv is the agent's, not sh's)
        view = wait_for(lambda: (v := d.agent_view(launched["pane"]))["harness"] == "claude" and v, 20, "the relaunched agent")
        assert view["session"] == {"harness": "claude", "session_id": session}
        assert view["connect"] == "collaborate" and view["cwd"] == str(work)
        pid = tmux.tmux("display-message", "-p", "-t", launched["pane"], "#{pane_pid}").strip()
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        assert argv[-3:-1] == [b"--resume", session.encode()]
        assert d.api("GET", "/api/restore")["items"] == []


async def _whoami(daemon: DaemonProcess, token: str) -> tuple[bool, object]:
    async with mcp_agent(daemon.mcp_url, token) as client:
        return await call(client, "whoami")


def test_an_agent_that_died_while_the_daemon_was_down_is_ended_at_start(daemon: DaemonProcess, tmux: TmuxServer) -> None:
    """Startup reconciles with the world: a dead incarnation's token no longer answers, and a message
    queued for it is cancelled at once (not left to expire within the hour), its card closed."""
    a, b = agents(daemon, "a", "b")
    assert b.token
    run(send, daemon, a, b.address, "for a pane that will die", "m-dead")
    daemon.wait_card()
    daemon.stop()
    tmux.tmux("kill-pane", "-t", b.pane)
    daemon.start()
    err, payload = run(_whoami, daemon, b.token)
    assert err and "not connected" in str(payload), payload
    assert run(get_message, daemon, a, "m-dead")["outcome"] == "cancelled"
    assert daemon.cards() == []
    err, payload = run(_whoami, daemon, a.token)  # the live agent is untouched
    assert not err, payload


def test_a_cap_lowered_in_policy_binds_existing_grants_after_a_restart(daemon: DaemonProcess) -> None:
    a, b = agents(daemon, "a", "b")
    daemon.stop()
    (daemon.data_dir / "policy.toml").write_text('cap = "observe"\n')
    daemon.start()

    async def as_a() -> tuple[tuple[bool, object], tuple[bool, object]]:
        async with mcp_agent(daemon.mcp_url, a.token or "") as client:
            sent = await call(client, "send_message", to=b.address, text="hi", message_id="m-capped")
            listed = await call(client, "list_agents")
            return sent, listed

    (sent_err, sent), (list_err, listed) = run(as_a)
    assert sent_err and "scope_denied" in str(sent) and "lacks the 'message' scope" in str(sent)
    assert not list_err, listed
    shown = {x["pane"]: x for x in listed["data"]}  # type: ignore[index]
    assert shown[b.pane]["scopes"] == ["history", "read"] and shown[b.pane]["connect"] == "observe"
    assert shown[b.pane]["reachable"] is False
    assert daemon.cards() == [] and b.prompts() == []


def test_an_agent_connected_in_place_is_still_receive_only_after_a_daemon_restart(daemon: DaemonProcess) -> None:
    """Issue 24 (the in-place mark was only in the shell's memory): an agent launched Off and then
    connected with the per-pane toggle receives but holds no endpoint; after `serve` restarts on the
    same data directory the view still says its tools come at its next launch (it failed before: the
    note was gone, the agent shown as if it held its tools)."""
    c = daemon.launch("c", "off", session="4d3c2b1a-0f9e-4d8c-b7a6-5f4e3d2c1b0a")
    daemon.wait_ready(c)
    granted = daemon.api("POST", f"/api/panes/{c.pane}/connect", {"preset": "collaborate"})
    assert granted["needs_restart"] is True and granted["note"]
    assert daemon.agent_view(c.pane)["note"] == granted["note"]
    daemon.stop()
    daemon.start()
    view = wait_for(lambda: (v := daemon.agent_view(c.pane)).get("connect") == "collaborate" and v, 30, "the agent seen again")
    assert view["note"] == granted["note"]
