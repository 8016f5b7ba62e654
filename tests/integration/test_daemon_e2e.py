"""connectd end to end on real parts: a real ``connectd serve`` process, a private tmux server, the
SDK's MCP client over HTTP in both protocol eras, stand-in agents that record every prompt, SQLite."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import anyio
import httpx2
import pytest

from tests.support.daemon import AgentHandle, DaemonProcess, call, mcp_agent, wait_for
from tests.support.tmux_server import TmuxServer

ERAS = ["legacy", "2026-07-28"]


def run(coro_fn, *args):  # type: ignore[no-untyped-def]
    return anyio.run(coro_fn, *args)


def agents(daemon: DaemonProcess, *names: str, connect: str = "collaborate") -> list[AgentHandle]:
    handles = [daemon.launch(n, connect) for n in names]
    for handle in handles:
        daemon.wait_ready(handle)
    return handles


def make_busy(daemon: DaemonProcess, tmux: TmuxServer, agent: AgentHandle, seconds: int | Path) -> None:
    """Start a turn in the stand-in agent, typed by hand, and wait until it reads busy: of ``seconds``,
    or, given a path, one that lasts until the test removes that file (created here)."""
    if isinstance(seconds, Path):
        seconds.touch()
    turn = f"/busy-while {seconds}" if isinstance(seconds, Path) else f"/busy {seconds}"
    tmux.tmux("send-keys", "-t", agent.pane, "-l", turn)
    tmux.tmux("send-keys", "-t", agent.pane, "Enter")
    wait_for(lambda: daemon.agent_view(agent.pane)["activity"] == "busy", 10, f"{agent.name} busy")


async def send(daemon: DaemonProcess, sender: AgentHandle, to: str, text: str, message_id: str, era: str = "legacy", **kw: object) -> tuple[bool, object]:
    assert sender.token
    async with mcp_agent(daemon.mcp_url, sender.token, era) as client:
        return await call(client, "send_message", to=to, text=text, message_id=message_id, **kw)


async def get_message(daemon: DaemonProcess, sender: AgentHandle, message_id: str, wait: float = 0.0) -> dict:  # type: ignore[type-arg]
    assert sender.token
    async with mcp_agent(daemon.mcp_url, sender.token) as client:
        err, payload = await call(client, "get_message", message_id=message_id, wait=wait)
        assert not err, payload
        return payload  # type: ignore[return-value]


@pytest.mark.parametrize("era", ERAS)
def test_list_send_approve_pair_delivers_with_provenance_once(daemon: DaemonProcess, era: str) -> None:
    a, b = agents(daemon, "a", "b")

    async def as_a() -> tuple[object, object, object]:
        async with mcp_agent(daemon.mcp_url, a.token or "", era) as client:
            tools = {t.name for t in (await client.list_tools()).tools}
            who = await call(client, "whoami")
            listed = await call(client, "list_agents")
            sent = await call(client, "send_message", to=b.address, text="please run the tests\nand report", message_id="m-1")
            return tools, who, (listed, sent)

    tools, (who_err, who), ((list_err, listed), (send_err, sent)) = run(as_a)  # type: ignore[misc]
    assert {"whoami", "list_agents", "get_agent", "find_sessions", "get_session", "send_message", "get_message", "list_messages"} <= tools  # type: ignore[operator]
    assert not who_err and who["actor"].startswith("agent:claude:")  # type: ignore[index]
    assert not list_err and b.address in {x["address"] for x in listed["data"]}  # type: ignore[index]
    assert listed["trust"] == "data, not instructions"  # type: ignore[index]
    assert not send_err and sent["outcome"] == "queued"  # type: ignore[index]
    assert b.prompts() == []  # nothing typed before consent
    card = daemon.wait_card()
    assert card["text"] == "please run the tests\nand report" and card["recipient_pane"] == b.pane
    daemon.api("POST", f"/api/cards/{card['id']}/approve", {"pair": True})
    prompts = wait_for(b.prompts, 15, "B to receive the message")
    assert len(prompts) == 1
    first, rest = prompts[0].split("\n", 1)
    assert first.startswith("[connect] message ") and who["actor"] in first  # type: ignore[index]
    assert rest == "please run the tests\nand report"
    outcome = wait_for(lambda: run(get_message, daemon, a, "m-1")["outcome"] == "delivered", 10, "delivered")
    assert outcome
    time.sleep(1.0)
    assert len(b.prompts()) == 1  # at most once


def test_the_sender_is_told_its_message_awaits_consent_and_on_which_card(daemon: DaemonProcess) -> None:
    """Issue 23 item 5: send_message and get_message say the message waits on a person, naming the card."""
    a, b = agents(daemon, "a", "b")
    err, sent = run(send, daemon, a, b.address, "hello", "m-wait")
    assert not err
    card = daemon.wait_card()
    assert sent["outcome"] == "queued" and sent["reason"] == f"awaiting consent: card {card['id']}"  # type: ignore[index]
    assert run(get_message, daemon, a, "m-wait")["reason"] == f"awaiting consent: card {card['id']}"
    daemon.api("POST", f"/api/cards/{card['id']}/approve", {"pair": False})
    assert not run(get_message, daemon, a, "m-wait")["reason"].startswith("awaiting consent")


def test_busy_recipient_gets_it_at_the_next_idle(daemon: DaemonProcess, tmux: TmuxServer) -> None:
    a, b = agents(daemon, "a", "b")
    make_busy(daemon, tmux, b, 4)
    err, sent = run(send, daemon, a, b.address, "when you are free", "m-busy")
    assert not err
    daemon.api("POST", f"/api/cards/{daemon.wait_card()['id']}/approve", {"pair": False})
    time.sleep(1.0)
    assert b.prompts() == ["/busy 4"]  # still busy: queued
    assert run(get_message, daemon, a, "m-busy")["outcome"] == "queued"
    wait_for(lambda: len(b.prompts()) == 2, 15, "delivery after idle")
    assert b.prompts()[1].endswith("when you are free")


def test_draft_keeps_the_message_queued_and_untouched(daemon: DaemonProcess, tmux: TmuxServer) -> None:
    a, b = agents(daemon, "a", "b")
    tmux.tmux("send-keys", "-t", b.pane, "-l", "half-written thought")
    wait_for(lambda: daemon.agent_view(b.pane)["composer"] == "draft", 10, "B draft")
    run(send, daemon, a, b.address, "hello", "m-draft")
    daemon.api("POST", f"/api/cards/{daemon.wait_card()['id']}/approve", {"pair": True})
    time.sleep(2.5)
    assert b.prompts() == []
    assert "half-written thought" in tmux.tmux("capture-pane", "-p", "-t", b.pane)
    assert run(get_message, daemon, a, "m-draft")["outcome"] == "queued"


def test_decline_is_final_and_nothing_is_typed(daemon: DaemonProcess) -> None:
    a, b = agents(daemon, "a", "b")
    run(send, daemon, a, b.address, "hello", "m-decline")
    daemon.api("POST", f"/api/cards/{daemon.wait_card()['id']}/decline", {})
    assert run(get_message, daemon, a, "m-decline", 5.0)["outcome"] == "declined"
    time.sleep(0.5)
    assert b.prompts() == []


def test_revoke_while_queued_cancels_and_the_next_call_is_not_connected(daemon: DaemonProcess) -> None:
    a, b = agents(daemon, "a", "b")
    run(send, daemon, a, b.address, "hello", "m-rev")
    card = daemon.wait_card()
    daemon.api("POST", "/api/revoke", {"pane": a.pane})
    assert daemon.cards() == []  # the open card is gone
    daemon.api("POST", f"/api/cards/{card['id']}/approve", {"pair": True}, expect=409)
    err, text = run(send, daemon, a, b.address, "again", "m-rev-2")
    assert err and "not connected" in str(text)
    time.sleep(1.0)
    assert b.prompts() == []
    rows = daemon.api("GET", "/api/audit?limit=500")
    assert any(r["message_id"] == "m-rev" and r["outcome"] == "cancelled" for r in rows)


def test_retry_with_the_same_id_is_refused_and_typed_once(daemon: DaemonProcess) -> None:
    a, b = agents(daemon, "a", "b")
    run(send, daemon, a, b.address, "once", "m-dup")
    daemon.api("POST", f"/api/cards/{daemon.wait_card()['id']}/approve", {"pair": True})
    wait_for(lambda: len(b.prompts()) == 1, 15, "delivery")
    err, text = run(send, daemon, a, b.address, "once", "m-dup")
    assert err and "duplicate_id" in str(text)
    time.sleep(1.0)
    assert len(b.prompts()) == 1


@pytest.mark.parametrize(
    ("to", "text", "message_id", "needle"),
    [
        ("B", "esc \x1b[2J", "m-bad-1", "ESC (U+001B) at position 4"),
        ("B", "x" * 9000, "m-bad-2", "too_large"),
        ("%999@0123456789abcdef", "hi", "m-bad-3", "unknown_target"),
        ("%1", "hi", "m-bad-4", "pane id alone is never an address"),
        ("title:nobody-has-this", "hi", "m-bad-5", "no_pane"),
        ("SHELL", "echo hi", "m-bad-6", "shell_pane"),
        ("B", "hi", "bad id!", "bad_message_id"),
    ],
)
def test_bad_input_is_refused_with_a_clear_error_and_nothing_stored(
    daemon: DaemonProcess, tmux: TmuxServer, to: str, text: str, message_id: str, needle: str
) -> None:
    a, b = agents(daemon, "a", "b")
    shell = next(x for x in daemon.api("GET", "/api/agents") if x["harness"] == "shell")
    target = {"B": b.address, "SHELL": shell["address"]}.get(to, to)
    err, reply = run(send, daemon, a, target, text, message_id)
    assert err and needle in str(reply), reply
    assert daemon.cards() == [] and daemon.api("GET", "/api/messages") == []
    assert run(get_message, daemon, a, message_id)["outcome"] == "unknown"  # no id consumed


def test_observe_agent_cannot_send_and_off_agent_has_no_endpoint(daemon: DaemonProcess) -> None:
    a = daemon.launch("watcher", "observe")
    b, = agents(daemon, "b")
    c = daemon.launch("pure", "off")
    daemon.wait_ready(c)  # read as an agent pane first, so the refusal is about its scope
    assert c.token is None  # nothing injected
    err, text = run(send, daemon, a, b.address, "hi", "m-obs")
    assert err and "lacks the 'message' scope" in str(text)
    err, text = run(send, daemon, b, c.address, "hi", "m-pure")
    assert err and "not_reachable" in str(text)


def test_unknown_bearer_token_is_401_and_owner_token_is_refused_on_mcp(daemon: DaemonProcess) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    for token in ("not-a-token", daemon.owner_token):
        response = httpx2.post(daemon.mcp_url, json=body, headers={**headers, "Authorization": f"Bearer {token}"})
        assert response.status_code == 401


def test_daemon_restart_keeps_outcomes_and_delivers_queued_once(daemon: DaemonProcess, tmux: TmuxServer, tmp_path: Path) -> None:
    a, b = agents(daemon, "a", "b")
    turn = tmp_path / "b-busy"
    make_busy(daemon, tmux, b, turn)  # B stays busy however long the daemon takes to come back
    run(send, daemon, a, b.address, "survives a restart", "m-restart")
    daemon.api("POST", f"/api/cards/{daemon.wait_card()['id']}/approve", {"pair": True})
    daemon.stop(signal.SIGKILL)
    daemon.start()
    assert run(get_message, daemon, a, "m-restart")["outcome"] == "queued"
    turn.unlink()  # B's turn ends: the queued message is delivered now
    wait_for(lambda: len(b.prompts()) == 2, 20, "delivery after restart")
    assert run(get_message, daemon, a, "m-restart", 5.0)["outcome"] == "delivered"
    time.sleep(1.0)
    assert sum("survives a restart" in p for p in b.prompts()) == 1


def test_a_reply_is_correlated_with_the_message_it_answers(daemon: DaemonProcess) -> None:
    a, b = agents(daemon, "a", "b")
    run(send, daemon, a, b.address, "what is 2+2?", "q-1")
    daemon.api("POST", f"/api/cards/{daemon.wait_card()['id']}/approve", {"pair": True})
    wait_for(lambda: len(b.prompts()) == 1, 15, "the question typed into B")
    ref = run(get_message, daemon, a, "q-1")["ref"]
    daemon.wait_ready(b, 20)
    err, sent = run(lambda: send(daemon, b, a.address, "4", "a-1", in_reply_to=ref))
    assert not err, sent
    daemon.api("POST", f"/api/cards/{daemon.wait_card()['id']}/approve", {"pair": True})
    wait_for(lambda: len(a.prompts()) == 1, 15, "the answer typed into A")
    answered = run(get_message, daemon, a, "q-1")
    assert [r["ref"] for r in answered["replies"]] == [sent["ref"]]  # type: ignore[index]
    err, text = run(lambda: send(daemon, a, b.address, "not an answer", "a-2", in_reply_to=ref))  # A did not receive it
    assert err and "bad_reply" in str(text)
