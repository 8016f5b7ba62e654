"""The owner API and the loopback guard on real parts: a private tmux server, a real SQLite store, the
engine over them, the routes behind ``LoopbackGuard`` in a Starlette app (with the real MCP endpoint
mounted at ``/mcp``), served by uvicorn on a pre-bound 127.0.0.1 socket or called in-process through
``httpx2.ASGITransport`` for the fast cases.

Agents that the tests need as senders and recipients are either launched for real (a stand-in harness
script in a tmux window) or issued by stepping the core's ``Launch`` through ``Engine.step`` with
fabricated incarnations, which is enough for cards, grants and revocation (nothing is typed).
"""

from __future__ import annotations

import json
import os
import socket
import stat
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.routing import Mount

from connectcore import directory as D
from connectcore import grants
from connectcore import hub as H
from connectcore.grants import PRESET_SCOPES, Preset
from connectcore.launchers import Launcher
from connectd.daemon.app import owner_api
from connectd.daemon.ids import hash_token
from connectd.daemon.parts import Engine, Subscribers
from connectd.edges.http import (
    EVENT_BUFFER,
    MAX_BODY_BYTES,
    OWNER_TOKEN_FILE,
    TUNNEL_SECRET_FILE,
    EventStream,
    LoopbackGuard,
    OwnerAuth,
    owner_routes,
)
from connectd.edges.mcp import build_mcp
from connectd.store.store import Store
from tests.support.fixtures import tmux_session
from tests.support.tmux_server import TmuxServer

pytestmark = pytest.mark.timeout(60)

AGENT_TOKEN = "ct_agent-a-token-for-tests-0000000000000"
OTHER_TOKEN = "ct_agent-b-token-for-tests-0000000000000"


@pytest.fixture(scope="module")
def tmux() -> Iterator[TmuxServer]:
    """One private tmux server for the module; its first pane runs a plain `cat` (no agent)."""
    with tmux_session("connect-owner-api", ["sh", "-c", "exec cat"], width=120, height=30) as server:
        yield server


def fake_harness(tmp_path: Path) -> Path:
    """A stand-in harness: ignores the injected flags and waits on its input."""
    script = tmp_path / "fake-agent"
    script.write_text("#!/bin/sh\nexec cat\n")
    script.chmod(0o755)
    return script


@dataclass
class Rig:
    engine: Engine
    store: Store
    auth: OwnerAuth
    client: httpx2.AsyncClient
    port: int
    data_dir: Path

    @property
    def owner(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.auth.owner_token}"}

    def tunnel(self, user: str) -> dict[str, str]:
        secret = (self.data_dir / TUNNEL_SECRET_FILE).read_text().strip()
        return {"X-Tunnel-User": user, "X-Tunnel-Secret": secret}

    async def get(self, path: str, **kw: Any) -> httpx2.Response:
        return await self.client.get(path, headers=kw.pop("headers", self.owner), **kw)

    async def post(self, path: str, body: Any = None, **kw: Any) -> httpx2.Response:
        headers = kw.pop("headers", self.owner)
        if body is None:
            return await self.client.post(path, headers=headers, **kw)
        return await self.client.post(path, json=body, headers=headers, **kw)

    def audit_rows(self, **filters: Any) -> list[Any]:
        return list(self.store.audit(limit=1000, **filters))


@asynccontextmanager
async def rig(
    tmp_path: Path,
    tmux: TmuxServer,
    *,
    serve: bool = False,
    history: object | None = None,
    keepalive: float = 15.0,
    launchers: dict[str, Launcher] | None = None,
) -> AsyncIterator[Rig]:
    """Store + engine + owner routes + the MCP endpoint, behind LoopbackGuard; uvicorn if ``serve``."""
    data_dir = tmp_path / "data"
    store = Store.open(data_dir)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    port = int(sock.getsockname()[1])
    engine = Engine(store, tmux.adapter(), endpoint_url=f"http://127.0.0.1:{port}/mcp", launchers=launchers)
    await engine.watcher.poll()
    auth = OwnerAuth.load_or_create(data_dir)
    mcp = build_mcp(engine.calls, engine.act_calls(None), engine.runner, engine.clock)
    mcp_app = mcp.streamable_http_app(streamable_http_path="/mcp")

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        async with mcp.session_manager.run():
            yield

    app = Starlette(
        routes=[*owner_routes(owner_api(engine, auth, history, keepalive)), Mount("/", app=mcp_app)],
        lifespan=lifespan,
    )
    app.add_middleware(LoopbackGuard, port=port)
    base = f"http://127.0.0.1:{port}"
    try:
        if not serve:
            async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url=base) as client:
                yield Rig(engine, store, auth, client, port, data_dir)
            return
        server = uvicorn.Server(
            uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=1)
        )
        server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: server.serve(sockets=[sock]))
            await until(lambda: server.started, "uvicorn to start")
            async with httpx2.AsyncClient(base_url=base, timeout=10) as client:
                yield Rig(engine, store, auth, client, port, data_dir)
            server.should_exit = True
    finally:
        sock.close()
        store.close()


async def until(probe: Callable[[], Any], what: str, timeout: float = 10.0) -> Any:
    with anyio.fail_after(timeout):
        while True:
            value = probe()
            if value:
                return value
            await anyio.sleep(0.01)


def run(fn: Callable[[], Awaitable[None]]) -> None:
    anyio.run(fn)


# --- fabricated agents (the pure parts: cards, grants, revocation) ---------------------------------


def incarnation(pane: str, pid: int) -> str:
    return D.incarnation_token(
        D.Incarnation(server_pid=1, server_start=1, pane_id=pane, pane_pid=pid, process_start=pid)
    )


async def issue(
    engine: Engine, token: str, principal: str, pane: str, pid: int, preset: Preset = Preset.COLLABORATE
) -> str:
    """Issue an agent token as a launch would, in a pane that does not exist (nothing is typed)."""
    inc = incarnation(pane, pid)
    session = ("claude", f"session-{principal}")
    await engine.step(
        H.Launch(
            engine.clock(),
            hash_token(token),
            principal,
            "claude",
            pane,
            pid,
            inc,
            PRESET_SCOPES[preset],
            session,
        )
    )
    return inc


async def two_agents_and_a_card(
    engine: Engine, message_id: str = "m-1", text: str = "please run the tests"
) -> str:
    """Agents A and B (Collaborate); A sends to B; the message waits on a card. Returns the card id."""
    if "principal-a" not in engine.hub.book.principals:
        await issue(engine, AGENT_TOKEN, "principal-a", "%901", 4101)
        await issue(engine, OTHER_TOKEN, "principal-b", "%902", 4102)
    recipient = H.Recipient("%902", incarnation("%902", 4102), "claude")
    card = f"card-{message_id}"
    await engine.step(
        H.Submit(
            engine.clock(), hash_token(AGENT_TOKEN), message_id, text, recipient, f"ref-{message_id}", card
        )
    )
    assert engine.hub.cards[card].state.value == "pending"
    return card


# --- owner credentials ------------------------------------------------------------------------------


def test_owner_credentials_are_created_once_private_and_checked_in_constant_time(tmp_path: Path) -> None:
    data = tmp_path / "data"
    auth = OwnerAuth.load_or_create(data)
    token_file, secret_file = data / OWNER_TOKEN_FILE, data / TUNNEL_SECRET_FILE
    for path in (token_file, secret_file):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(data.stat().st_mode) == 0o700
    secret = secret_file.read_text().strip()
    assert auth.owner_token == token_file.read_text().strip()
    assert len(auth.owner_token) >= 40 and secret != auth.owner_token
    assert OwnerAuth.load_or_create(data).owner_token == auth.owner_token  # kept across starts

    assert auth.check_bearer(f"Bearer {auth.owner_token}")
    assert auth.check_bearer(f"bearer {auth.owner_token}")
    for header in (
        None,
        "",
        auth.owner_token,
        f"Basic {auth.owner_token}",
        f"Bearer {auth.owner_token}x",
        f"Bearer {secret}",
    ):
        assert not auth.check_bearer(header), header
    assert auth.check_tunnel("alice", secret)
    for user, given in (
        ("alice", None),
        (None, secret),
        ("alice", auth.owner_token),
        ("al ice", secret),
        ("", secret),
        ("bob\n", secret),
    ):
        assert not auth.check_tunnel(user, given), (user, given)


def test_loose_secret_files_are_tightened_and_unusable_ones_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    OwnerAuth.load_or_create(data)
    (data / OWNER_TOKEN_FILE).chmod(0o644)
    OwnerAuth.load_or_create(data)
    assert stat.S_IMODE((data / OWNER_TOKEN_FILE).stat().st_mode) == 0o600
    (data / TUNNEL_SECRET_FILE).write_text("short\n")
    with pytest.raises(ValueError, match="tunnel_secret does not hold a usable secret"):
        OwnerAuth.load_or_create(data)
    (data / TUNNEL_SECRET_FILE).unlink()
    os.symlink(data / OWNER_TOKEN_FILE, data / TUNNEL_SECRET_FILE)
    with pytest.raises(OSError):
        OwnerAuth.load_or_create(data)  # never follows a planted symlink


def test_loopback_guard_refuses_a_bad_port() -> None:
    for port in (0, 70000, True, "7878"):
        with pytest.raises(ValueError, match="port must be 1-65535"):
            LoopbackGuard(lambda *a: None, port=port)  # type: ignore[arg-type]


# --- who may call ---------------------------------------------------------------------------------


def test_only_the_owner_token_or_a_tunnel_with_its_secret_is_let_in(tmp_path: Path, tmux: TmuxServer) -> None:
    async def body() -> None:
        async with rig(tmp_path, tmux) as r:
            await issue(r.engine, AGENT_TOKEN, "principal-a", "%901", 4101)
            secret = (r.data_dir / TUNNEL_SECRET_FILE).read_text().strip()

            refused = {
                "no token": ({}, 401, "unauthorized"),
                "wrong owner token": ({"Authorization": "Bearer not-the-owner-token"}, 401, "unauthorized"),
                "basic auth": ({"Authorization": f"Basic {r.auth.owner_token}"}, 401, "unauthorized"),
                "agent token": ({"Authorization": f"Bearer {AGENT_TOKEN}"}, 403, "agent_token"),
                "spoofed tunnel user": ({"X-Tunnel-User": "alice"}, 401, "unauthorized"),
                "tunnel user, wrong secret": (
                    {"X-Tunnel-User": "alice", "X-Tunnel-Secret": "guess"},
                    401,
                    "unauthorized",
                ),
                "tunnel user, owner token as secret": (
                    {"X-Tunnel-User": "alice", "X-Tunnel-Secret": r.auth.owner_token},
                    401,
                    "unauthorized",
                ),
                "bad tunnel user name": (
                    {"X-Tunnel-User": "al ice", "X-Tunnel-Secret": secret},
                    401,
                    "unauthorized",
                ),
                "spoofed tunnel user beside the owner token": (
                    {"X-Tunnel-User": "alice", **r.owner},
                    401,
                    "unauthorized",
                ),
            }
            for what, (headers, status, error) in refused.items():
                for path in ("/api/agents", "/api/cards", "/api/events", "/api/nowhere"):
                    resp = await r.client.get(path, headers=headers)
                    assert resp.status_code == status, (what, path, resp.text)
                    assert resp.json()["error"] == error, (what, path)
                resp = await r.client.post("/api/disconnect-all", headers=headers)
                assert resp.status_code == status, what
            agent = await r.client.get("/api/agents", headers={"Authorization": f"Bearer {AGENT_TOKEN}"})
            assert agent.json()["message"] == "agent tokens are not valid on the owner API"
            assert (await r.client.get("/api/agents")).headers["www-authenticate"].startswith("Bearer")
            assert r.engine.subscribers.owner == set()  # a refused /api/events registered nothing
            assert (
                r.engine.hub.book.tokens[hash_token(AGENT_TOKEN)].state.value == "live"
            )  # disconnect-all never ran

            assert (await r.get("/api/agents")).status_code == 200
            assert (
                await r.get("/api/agents", headers={"Authorization": f"bearer   {r.auth.owner_token}"})
            ).status_code == 200
            assert (await r.get("/api/agents", headers=r.tunnel("alice@example.com"))).status_code == 200
            missing = await r.get("/api/nowhere")
            assert missing.status_code == 404 and missing.json()["error"] == "not_found"
            wrong = await r.get("/api/revoke")
            assert wrong.status_code == 405 and wrong.json()["error"] == "method_not_allowed"
            assert "POST" in wrong.json()["message"]
            assert (
                await r.client.get("/api/revoke")
            ).status_code == 401  # the method is told only to the owner

    run(body)


def test_tunnel_actions_are_audited_as_owner_tunnel_user(tmp_path: Path, tmux: TmuxServer) -> None:
    async def body() -> None:
        async with rig(tmp_path, tmux) as r:
            resp = await r.post(
                "/api/grants",
                {"harness": "claude", "session_id": "s-1", "preset": "observe"},
                headers=r.tunnel("alice"),
            )
            assert resp.status_code == 200, resp.text
            assert resp.json() == {
                "session": {"harness": "claude", "session_id": "s-1"},
                "connect": "observe",
            }
            rows = r.audit_rows(actor="owner:tunnel:alice")
            assert [(row.action, row.target, row.detail) for row in rows] == [
                ("grant", "agent:claude:s-1", "history,read")
            ]
            assert r.audit_rows(actor="owner") == []
            off = await r.post("/api/grants", {"harness": "claude", "session_id": "s-1", "preset": "off"})
            assert off.json() == {"session": {"harness": "claude", "session_id": "s-1"}, "connect": "off",
                                  "cancels_unconfirmed": []}  # Off is a revocation: its answer as revoke's
            assert [row.detail for row in r.audit_rows(actor="owner")] == ["off"]
            listed = await r.get("/api/audit", params={"actor": "owner:tunnel:alice"})
            assert [row["actor"] for row in listed.json()] == ["owner:tunnel:alice"]

    run(body)


def test_foreign_host_and_origin_are_refused_on_every_route_over_real_http(
    tmp_path: Path, tmux: TmuxServer
) -> None:
    async def body() -> None:
        async with rig(tmp_path, tmux, serve=True) as r:
            port = r.port
            for path in ("/api/agents", "/mcp", "/", "/api/events"):
                for host in (
                    "evil.example",
                    f"evil.example:{port}",
                    f"127.0.0.1:{port + 1}",
                    "127.0.0.1",
                    f"0.0.0.0:{port}",
                ):
                    resp = await r.client.get(path, headers={**r.owner, "Host": host})
                    assert resp.status_code == 421, (path, host, resp.text)
                    assert resp.json()["error"] == "foreign_host" and resp.json()["host"] == host
                    assert host in resp.json()["message"]
                for origin in (
                    "http://evil.example",
                    f"http://evil.example:{port}",
                    "null",
                    f"https://127.0.0.1:{port}",
                    f"http://127.0.0.1:{port + 1}",
                ):
                    resp = await r.client.post(path, headers={**r.owner, "Origin": origin}, json={})
                    assert resp.status_code == 403, (path, origin, resp.text)
                    assert resp.json()["error"] == "foreign_origin" and resp.json()["origin"] == origin
            resp = await r.client.post(
                "/api/disconnect-all", headers={**r.owner, "Origin": "http://evil.example"}
            )
            assert resp.status_code == 403
            assert r.audit_rows(actor="owner") == []  # nothing reached the engine

            for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", f"LOCALHOST:{port}"):
                resp = await r.client.get("/api/agents", headers={**r.owner, "Host": host})
                assert resp.status_code == 200, (host, resp.text)
            for origin in (f"http://127.0.0.1:{port}", f"http://localhost:{port}", f"http://[::1]:{port}"):
                resp = await r.client.get("/api/agents", headers={**r.owner, "Origin": origin})
                assert resp.status_code == 200, (origin, resp.text)
            # The owner token opens nothing on /mcp: only agent tokens do.
            mcp = await r.client.post(
                "/mcp",
                headers={**r.owner, "Accept": "application/json, text/event-stream"},
                json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            )
            assert mcp.status_code == 401

    run(body)


# --- bad input changes nothing --------------------------------------------------------------------

BAD_REQUESTS: list[tuple[str, str, Any, int, str]] = [
    # (method, path, body (a str is sent raw as JSON content), status, error)
    ("POST", "/api/grants", "{not json", 400, "bad_json"),
    ("POST", "/api/grants", "[1, 2]", 400, "bad_json"),
    ("POST", "/api/grants", '{"harness": "claude", "session_id": "s", "preset": NaN}', 400, "bad_json"),
    ("POST", "/api/grants", {"session_id": "s", "preset": "observe"}, 400, "missing_field"),
    ("POST", "/api/grants", {"harness": "claude", "preset": "observe"}, 400, "missing_field"),
    ("POST", "/api/grants", {"harness": "claude", "session_id": "s"}, 400, "missing_field"),
    ("POST", "/api/grants", {"harness": "claude", "session_id": 7, "preset": "observe"}, 400, "wrong_type"),
    ("POST", "/api/grants", {"harness": "claude", "session_id": "", "preset": "observe"}, 400, "empty_field"),
    (
        "POST",
        "/api/grants",
        {"harness": "claude", "session_id": "s\x1b[2J", "preset": "observe"},
        400,
        "bad_field",
    ),
    (
        "POST",
        "/api/grants",
        {"harness": "claude", "session_id": "s", "preset": "admin"},
        400,
        "unknown_preset",
    ),
    (
        "POST",
        "/api/grants",
        {"harness": "claude", "session_id": "s", "preset": ["observe"]},
        400,
        "wrong_type",
    ),
    (
        "POST",
        "/api/grants",
        {"harness": "claude", "session_id": "s", "presets": "observe"},
        400,
        "unknown_field",
    ),
    ("POST", "/api/cards/card-m-1/approve", {"pair": "yes"}, 400, "wrong_type"),
    ("POST", "/api/cards/card-m-1/approve", {"pair": True, "forever": True}, 400, "unknown_field"),
    ("POST", "/api/cards/card-m-1/decline", {"reason": "no"}, 400, "unknown_field"),
    ("POST", "/api/panes/%25abc/connect", {"preset": "observe"}, 400, "bad_pane"),
    ("POST", "/api/panes/%251/connect", {}, 400, "missing_field"),
    ("POST", "/api/panes/%251/connect", {"preset": "everything"}, 400, "unknown_preset"),
    ("POST", "/api/revoke", {}, 400, "missing_field"),
    ("POST", "/api/revoke", {"principal": "principal-a", "pane": "%901"}, 400, "missing_field"),
    ("POST", "/api/revoke", {"pane": "901; rm -rf"}, 400, "bad_pane"),
    ("POST", "/api/revoke", {"principal": 3}, 400, "wrong_type"),
    ("POST", "/api/disconnect-all", {"now": True}, 400, "unknown_field"),
    ("POST", "/api/launch", {"launcher": "fake", "connect": "off"}, 400, "missing_field"),
    ("POST", "/api/launch", {"launcher": "fake", "cwd": "/tmp"}, 400, "missing_field"),
    ("POST", "/api/launch", {"launcher": "fake", "connect": "root", "cwd": "/tmp"}, 400, "unknown_preset"),
    ("POST", "/api/launch", {"launcher": "fake", "connect": "off", "cwd": "relative/dir"}, 400, "bad_cwd"),
    ("POST", "/api/launch", {"launcher": "fake", "connect": "off", "cwd": "/no/such/dir"}, 400, "bad_cwd"),
    (
        "POST",
        "/api/launch",
        {"launcher": "fake", "connect": "off", "cwd": "/tmp", "env": ["A=1"]},
        400,
        "wrong_type",
    ),
    (
        "POST",
        "/api/launch",
        {"launcher": "fake", "connect": "off", "cwd": "/tmp", "env": {"A": 1}},
        400,
        "wrong_type",
    ),
    (
        "POST",
        "/api/launch",
        {"launcher": "fake", "connect": "off", "cwd": "/tmp", "session": 5},
        400,
        "wrong_type",
    ),
    (
        "POST",
        "/api/launch",
        {"launcher": "fake", "connect": "off", "cwd": "/tmp", "argv": ["sh"]},
        400,
        "unknown_field",
    ),
    ("POST", "/api/restart", {"preset": "collaborate"}, 400, "missing_field"),
    ("POST", "/api/restart", {"pane": "%1", "preset": "max"}, 400, "unknown_preset"),
    ("POST", "/api/restart", {"pane": "one", "preset": "observe"}, 400, "bad_pane"),
    ("GET", "/api/cards?all=maybe", None, 400, "bad_parameter"),
    ("GET", "/api/agents?verbose=1", None, 400, "unknown_parameter"),
    ("GET", "/api/audit?limit=0", None, 400, "bad_parameter"),
    ("GET", "/api/audit?limit=100000", None, 400, "bad_parameter"),
    ("GET", "/api/audit?limit=ten", None, 400, "bad_parameter"),
    ("GET", "/api/audit?since=yesterday", None, 400, "bad_parameter"),
    ("GET", "/api/audit?until=inf", None, 400, "bad_parameter"),
    ("GET", "/api/audit?after=-3", None, 400, "bad_parameter"),
    ("GET", "/api/audit?actor=a&actor=b", None, 400, "repeated_parameter"),
    ("GET", "/api/audit?who=owner", None, 400, "unknown_parameter"),
    ("GET", "/api/messages?pane=xyz", None, 400, "bad_pane"),
    ("GET", "/api/messages?limit=-1", None, 400, "bad_parameter"),
    ("GET", "/api/audit?before=-1", None, 400, "bad_parameter"),
    ("GET", "/api/audit?before=abc", None, 400, "bad_parameter"),
    ("GET", "/api/audit?order=sideways", None, 400, "bad_parameter"),
    ("GET", "/api/messages?before=not-a-cursor", None, 400, "bad_cursor"),
    ("GET", "/api/messages?after=W10", None, 400, "bad_cursor"),
    ("GET", "/api/messages?order=up", None, 400, "bad_parameter"),
]


def test_each_bad_request_gets_a_400_naming_the_problem_and_changes_nothing(
    tmp_path: Path, tmux: TmuxServer
) -> None:
    async def body() -> None:
        async with rig(
            tmp_path,
            tmux,
            launchers={"fake": Launcher(name="fake", harness="claude", argv=(str(fake_harness(tmp_path)),))},
        ) as r:
            await two_agents_and_a_card(r.engine)
            hub, audit_count, windows = r.engine.hub, len(r.audit_rows()), tmux.tmux("list-panes", "-a")
            for method, path, payload, status, error in BAD_REQUESTS:
                if isinstance(payload, str):
                    resp = await r.client.request(
                        method, path, content=payload, headers={**r.owner, "Content-Type": "application/json"}
                    )
                else:
                    resp = await r.client.request(method, path, json=payload, headers=r.owner)
                assert resp.status_code == status, (method, path, payload, resp.text)
                answer = resp.json()
                assert answer["error"] == error, (method, path, payload, answer)
                assert answer["message"], (method, path)
                if error in {"wrong_type", "unknown_field", "empty_field", "bad_field", "unknown_preset"}:
                    field = answer.get("field", "")  # the pydantic models name the field
                    assert field and field.split("[")[0] in answer["message"], (method, path, answer)
            form = await r.client.post(
                "/api/grants",
                content="harness=claude",
                headers={**r.owner, "Content-Type": "application/x-www-form-urlencoded"},
            )
            assert form.status_code == 415 and form.json()["error"] == "bad_content_type"
            huge = await r.client.post(
                "/api/grants",
                content=b"{" + b" " * MAX_BODY_BYTES + b"}",
                headers={**r.owner, "Content-Type": "application/json"},
            )
            assert huge.status_code == 413 and huge.json()["error"] == "body_too_large"
            assert r.engine.hub is hub  # the core was never stepped
            assert len(r.audit_rows()) == audit_count
            assert tmux.tmux("list-panes", "-a") == windows  # nothing launched

    run(body)


# --- cards ------------------------------------------------------------------------------------------


def test_cards_are_listed_approved_and_declined_and_answered_cards_refused(
    tmp_path: Path, tmux: TmuxServer
) -> None:
    async def body() -> None:
        async with rig(tmp_path, tmux) as r:
            first = await two_agents_and_a_card(r.engine, "m-1", "please run the tests")
            second = await two_agents_and_a_card(r.engine, "m-2", "<script>alert(1)</script>")
            third = await two_agents_and_a_card(r.engine, "m-3", "and the linter")

            cards = (await r.get("/api/cards")).json()
            assert {c["id"] for c in cards} == {first, second, third}
            by_id = {c["id"]: c for c in cards}
            assert by_id[first]["text"] == "please run the tests"
            assert (
                by_id[second]["text"] == "<script>alert(1)</script>"
            )  # data, returned verbatim as JSON text
            assert by_id[first]["state"] == "pending" and by_id[first]["recipient_pane"] == "%902"
            assert by_id[first]["sender"] == "agent:claude:session-principal-a"

            once = await r.post(f"/api/cards/{first}/approve")
            assert once.status_code == 200 and once.json() == {"id": first, "state": "approved_once"}
            pair = await r.post(f"/api/cards/{third}/approve", {"pair": True})
            assert pair.json() == {"id": third, "state": "approved_pair"}
            assert ("principal-a", incarnation("%902", 4102)) in r.engine.hub.pairs
            declined = await r.post(f"/api/cards/{second}/decline", {})
            assert declined.json() == {"id": second, "state": "declined"}

            assert (await r.get("/api/cards")).json() == []
            everything = {
                c["id"]: c["state"] for c in (await r.get("/api/cards", params={"all": "1"})).json()
            }
            assert everything == {first: "approved_once", second: "declined", third: "approved_pair"}

            again = await r.post(f"/api/cards/{second}/approve", {"pair": False})
            assert again.status_code == 409 and again.json()["error"] == "card_closed"
            again = await r.post(f"/api/cards/{first}/decline")
            assert again.status_code == 409 and again.json()["error"] == "card_closed"
            unknown = await r.post("/api/cards/card-nope/approve")
            assert unknown.status_code == 404 and unknown.json()["error"] == "unknown_card"
            assert r.engine.hub.cards[second].state.value == "declined"  # the refusals changed nothing

            consent = [
                (row.outcome, row.message_id)
                for row in r.audit_rows(actor="owner")
                if row.action == "consent"
            ]
            assert sorted(consent) == [
                ("approved_once", "m-1"),
                ("approved_pair", "m-3"),
                ("declined", "m-2"),
            ]

            sent = (await r.get("/api/messages", params={"principal": "principal-a"})).json()
            assert {m["message_id"]: m["outcome"] for m in sent}["m-2"] == "declined"
            assert {m["text"] for m in sent} == {
                "please run the tests",
                "<script>alert(1)</script>",
                "and the linter",
            }
            to_b = (await r.get("/api/messages", params={"pane": "%902", "limit": "2"})).json()
            assert len(to_b) == 2
            everything = [row.id for row in r.audit_rows(actor="owner")]  # oldest first
            first = await r.get("/api/audit", params={"actor": "owner", "limit": "2"})
            page = first.json()
            assert [row["id"] for row in page] == everything[::-1][:2]  # newest first by default
            assert first.headers["X-More"] == "true" and first.headers["X-Next-Before"] == str(page[-1]["id"])
            assert f"before={page[-1]['id']}" in first.headers["Link"] and 'rel="next"' in first.headers["Link"]
            last = await r.get("/api/audit", params={"actor": "owner", "before": first.headers["X-Next-Before"]})
            rest = last.json()
            assert last.headers["X-More"] == "false" and "Link" not in last.headers
            assert [row["id"] for row in page + rest] == everything[::-1]
            forward = await r.get("/api/audit", params={"actor": "owner", "order": "oldest", "limit": "2"})
            assert [row["id"] for row in forward.json()] == everything[:2]
            tail = await r.get("/api/audit", params={"actor": "owner", "order": "oldest", "after": forward.headers["X-Next-After"]})
            assert [row["id"] for row in forward.json() + tail.json()] == everything
            window = await r.get("/api/audit", params={"actor": "owner", "after": str(everything[0]), "before": str(everything[-1])})
            assert [row["id"] for row in window.json()] == everything[1:-1][::-1]

            newest = await r.get("/api/messages", params={"limit": "1"})
            assert newest.headers["X-More"] == "true"
            older = await r.get("/api/messages", params={"limit": "1000", "before": newest.headers["X-Next-Before"]})
            assert older.headers["X-More"] == "false"
            listed = [m["message_id"] for m in newest.json() + older.json()]
            assert listed == [m["message_id"] for m in (await r.get("/api/messages")).json()]
            assert sorted(listed) == ["m-1", "m-2", "m-3"]
            oldest = await r.get("/api/messages", params={"order": "oldest", "limit": "1"})
            assert [m["message_id"] for m in oldest.json()] == listed[-1:]
            after = await r.get("/api/messages", params={"order": "oldest", "after": oldest.headers["X-Next-After"]})
            assert [m["message_id"] for m in after.json()] == listed[-2::-1]

    run(body)


# --- grants, revocation, disconnect-all ------------------------------------------------------------


def test_grants_revocation_and_disconnect_all(tmp_path: Path, tmux: TmuxServer) -> None:
    async def body() -> None:
        async with rig(tmp_path, tmux) as r:
            card = await two_agents_and_a_card(r.engine)
            book = lambda: r.engine.hub.book  # noqa: E731
            live = lambda token: grants.authenticate_or_none(book(), hash_token(token)) is not None  # noqa: E731

            resp = await r.post(
                "/api/grants", {"harness": "claude", "session_id": "session-principal-b", "preset": "observe"}
            )
            assert resp.status_code == 200
            assert grants.scopes_of(book(), "principal-b") == PRESET_SCOPES[Preset.OBSERVE]

            # Revoking the sender cancels its open card's message: nothing will be typed.
            resp = await r.post("/api/revoke", {"principal": "principal-a"})
            assert resp.json() == {"revoked": "agent:claude:session-principal-a", "principal": "principal-a",
                                   "cancels_unconfirmed": []}  # (a box that does not federate owes none)
            assert not live(AGENT_TOKEN) and live(OTHER_TOKEN)
            assert r.engine.hub.cards[card].state.value == "cancelled"
            assert [row.target for row in r.audit_rows(actor="owner") if row.action == "revoke"] == [
                "agent:claude:session-principal-a"
            ]
            unknown = await r.post("/api/revoke", {"principal": "principal-zzz"})
            assert unknown.status_code == 404 and unknown.json()["error"] == "unknown_principal"
            gone = await r.post("/api/revoke", {"pane": "%999"})
            assert gone.status_code == 404 and gone.json()["error"] == "unknown_target"

            resp = await r.post("/api/disconnect-all")
            assert resp.status_code == 200 and resp.json() == {"disconnected": 1, "cancels_unconfirmed": []}
            assert not live(OTHER_TOKEN)
            assert (await r.post("/api/disconnect-all", {})).json() == {"disconnected": 0, "cancels_unconfirmed": []}

            r.engine.hub = replace(r.engine.hub, book=grants.with_cap(book(), Preset.OBSERVE))
            before = r.engine.hub
            capped = await r.post(
                "/api/grants", {"harness": "claude", "session_id": "s-9", "preset": "collaborate"}
            )
            assert capped.status_code == 403 and capped.json()["error"] == "over_cap"
            assert "policy caps grants at observe" in capped.json()["message"]
            assert r.engine.hub is before

    run(body)


def test_launch_pane_toggle_and_pane_revocation_on_real_tmux(tmp_path: Path, tmux: TmuxServer) -> None:
    script = fake_harness(tmp_path)
    launchers = {
        "fake": Launcher(
            name="fake",
            harness="claude",
            argv=(str(script),),
            exit_command="/exit",
            resume_argv=(str(script), "--resume", "{session_id}"),
        ),
        "plain": Launcher(name="plain", harness="mytool", argv=(str(script),)),
        "opaque": Launcher(name="opaque", harness="claude", opaque=f"{script}"),
    }

    async def body() -> None:
        async with rig(tmp_path, tmux, launchers=launchers) as r:
            cat_pane = next(a["pane"] for a in (await r.get("/api/agents")).json())
            work = str(tmp_path)

            launched = await r.post(
                "/api/launch",
                {"launcher": "fake", "connect": "collaborate", "cwd": work, "env": {"CONNECT_TEST": "1"}},
            )
            assert launched.status_code == 200, launched.text
            result = launched.json()
            pane = result["pane"]
            assert result["connect"] == "collaborate" and result["actor"].startswith("agent:claude:")
            assert (
                "token" not in result and "ct_" not in launched.text
            )  # the token stays in the agent's environment
            assert tmux.display(pane, "#{pane_current_path}") == work
            agents = {a["pane"]: a for a in (await r.get("/api/agents")).json()}
            assert agents[pane]["connect"] == "collaborate" and agents[pane]["launcher"] == "fake"
            assert agents[cat_pane]["connect"] == "off"
            launches = [row for row in r.audit_rows(actor="owner") if row.action == "launch"]
            assert [(row.outcome, row.target) for row in launches] == [("done", pane)]

            # The pane toggle: a shortcut for the one bound session in the pane.
            toggled = await r.post(f"/api/panes/{pane.replace('%', '%25')}/connect", {"preset": "observe"})
            assert toggled.status_code == 200, toggled.text
            assert toggled.json()["connect"] == "observe"
            assert {a["pane"]: a for a in (await r.get("/api/agents")).json()}[pane]["connect"] == "observe"
            bare = await r.post(f"/api/panes/{pane[1:]}/connect", {"preset": "collaborate"})
            assert bare.status_code == 200 and bare.json()["connect"] == "collaborate"
            # A pane with no agent session bound in it cannot be toggled: the engine's reason is shown.
            unbound = await r.post(
                f"/api/panes/{cat_pane.replace('%', '%25')}/connect", {"preset": "observe"}
            )
            assert unbound.status_code == 409 and unbound.json()["error"] == "ambiguous_binding"
            off = await r.post(f"/api/panes/{cat_pane.replace('%', '%25')}/connect", {"preset": "off"})
            assert off.status_code == 409 and off.json()["error"] == "not_connected"
            missing = await r.post("/api/panes/%25999/connect", {"preset": "observe"})
            assert missing.status_code == 404 and missing.json()["error"] == "unknown_target"

            revoked = await r.post("/api/revoke", {"pane": pane})
            assert revoked.status_code == 200 and revoked.json()["revoked"] == result["actor"]
            assert {a["pane"]: a for a in (await r.get("/api/agents")).json()}[pane]["connect"] == "off"
            nobody = await r.post("/api/revoke", {"pane": cat_pane})
            assert nobody.status_code == 409 and nobody.json()["error"] == "not_connected"

            plain = await r.post("/api/launch", {"launcher": "plain", "connect": "off", "cwd": work})
            assert plain.status_code == 200 and plain.json()["connect"] == "off"
            for name, connect, status, error in (
                ("nope", "off", 404, "unknown_launcher"),
                ("plain", "observe", 409, "unconnectable"),
                ("opaque", "collaborate", 409, "unconnectable"),
            ):
                before = tmux.tmux("list-panes", "-a")
                resp = await r.post("/api/launch", {"launcher": name, "connect": connect, "cwd": work})
                assert resp.status_code == status and resp.json()["error"] == error, (name, resp.text)
                assert tmux.tmux("list-panes", "-a") == before
            refusals = [
                (row.target, row.detail)
                for row in r.audit_rows(actor="owner")
                if row.action == "launch" and row.outcome == "refused"
            ]
            assert refusals == [
                ("nope", "unknown_launcher"),
                ("plain", "unconnectable"),
                ("opaque", "unconnectable"),
            ]

            listed = {entry["name"]: entry for entry in (await r.get("/api/launchers")).json()}
            assert listed["fake"]["connectable"] and listed["fake"]["restartable"]
            assert not listed["opaque"]["connectable"] and "opaque" in listed["opaque"]["reason"]
            assert not listed["plain"]["connectable"] and "mytool" in listed["plain"]["reason"]

            for window in (pane, plain.json()["pane"]):
                tmux.tmux("kill-pane", "-t", window)

    run(body)


def test_restart_route_maps_the_engines_refusals(
    tmp_path: Path, tmux: TmuxServer
) -> None:
    async def body() -> None:
        async with rig(tmp_path, tmux) as r:
            cat_pane = r.engine.calls.agents()[0]["pane"]
            for payload, status, error in (
                ({"pane": "%999", "preset": "collaborate"}, 404, "unknown_target"),
                ({"pane": cat_pane, "preset": "off"}, 400, "bad_preset"),
                ({"pane": cat_pane, "preset": "observe"}, 409, "not_restartable"),
            ):
                resp = await r.post("/api/restart", payload)
                assert resp.status_code == status and resp.json()["error"] == error, (payload, resp.text)
            assert tmux.display(cat_pane, "#{pane_current_command}") == "cat"  # untouched
            # (the route calls the engine directly now: no getattr shim, no 501 for a daemon without it)

    run(body)


def test_session_dirs_come_from_the_history_when_given(tmp_path: Path, tmux: TmuxServer) -> None:
    class History:
        def __init__(self) -> None:
            self.asked: list[int] = []

        def recent_dirs(self, limit: int = 20) -> list[dict[str, object]]:
            self.asked.append(limit)
            return [{"cwd": "/home/dev/widget", "repo": "widget", "last_active": 1.0}]

    history = History()

    async def body() -> None:
        async with rig(tmp_path, tmux) as r:
            assert (await r.get("/api/sessions/dirs")).json() == []
        async with rig(tmp_path, tmux, history=history) as r:
            assert (await r.get("/api/sessions/dirs", params={"limit": "5"})).json()[0][
                "cwd"
            ] == "/home/dev/widget"
            assert history.asked == [5]

    run(body)


# --- the owner event stream -----------------------------------------------------------------------


def test_events_stream_delivers_a_card_and_unregisters_on_disconnect(
    tmp_path: Path, tmux: TmuxServer
) -> None:
    async def body() -> None:
        async with rig(tmp_path, tmux, serve=True, keepalive=0.2) as r:
            subscribers = r.engine.subscribers.owner
            assert subscribers == set()
            seen: list[str] = []
            async with r.client.stream("GET", "/api/events", headers=r.owner) as resp:
                assert resp.status_code == 200
                assert resp.headers["content-type"].startswith("text/event-stream")
                lines = resp.aiter_lines()
                await until(lambda: len(subscribers) == 1, "the stream to register")
                card = await two_agents_and_a_card(r.engine)
                with anyio.fail_after(10):
                    async for line in lines:
                        seen.append(line)
                        if line.startswith("data: ") and json.loads(line[6:]).get("topic") == "card":
                            break
                event = json.loads(seen[-1][6:])
                assert event["key"] == [card] and event["state"] == "pending"
                with anyio.fail_after(10):
                    async for line in lines:
                        if line == ": keep-alive":
                            break
            await until(lambda: len(subscribers) == 0, "the stream to unregister after the client left")
            assert ": connected" in seen

    run(body)


def test_an_event_stream_the_engine_dropped_ends_with_overflow() -> None:
    """A subscriber the engine dropped (its buffer overflowed) gets what it had, then `overflow`, then EOF."""

    subscribers = Subscribers()

    async def body() -> None:
        stream = EventStream(subscribers, keepalive=30)
        sent: list[dict[str, Any]] = []
        disconnect = anyio.Event()

        async def receive() -> dict[str, Any]:
            await disconnect.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)
            if len(sent) == 2:  # headers and the greeting went out: the engine publishes, then drops us
                (sender,) = subscribers.owner
                for n in range(EVENT_BUFFER + 5):
                    try:
                        sender.send_nowait({"topic": "pane", "n": n})
                    except anyio.WouldBlock:
                        subscribers.owner.discard(sender)
                        break

        with anyio.fail_after(10):
            await stream({"type": "http"}, receive, send)  # type: ignore[arg-type]
        bodies = [m["body"].decode() for m in sent[1:]]
        data = [b for b in bodies if b.startswith("data: ")]
        assert len(data) == EVENT_BUFFER and json.loads(data[-1][6:])["n"] == EVENT_BUFFER - 1
        assert bodies[-1].startswith("event: overflow") and sent[-1]["more_body"] is False
        assert subscribers.owner == set()

    run(body)


# --- issue 11, item 6: deeply nested JSON -----------------------------------------------------------


def test_deeply_nested_json_is_a_400_on_every_owner_route_not_a_500(tmp_path: Path, tmux: TmuxServer) -> None:
    """Attack: 30,000 nested arrays (Python's decoder recurses) on the owner API, and on /mcp for comparison."""

    async def body() -> None:
        async with rig(tmp_path, tmux, serve=True) as r:
            deep = "[" * 30_000 + "]" * 30_000
            nested_object = '{"env":' * 40 + "{}" + "}" * 40
            for path, payload in [
                ("/api/grants", deep),
                ("/api/disconnect-all", deep),
                ("/api/launch", nested_object),
            ]:
                resp = await r.client.post(path, content=payload, headers={**r.owner, "Content-Type": "application/json"})
                assert resp.status_code == 400, (path, resp.status_code, resp.text[:200])
                assert resp.json()["error"] == "bad_json" and "deeper" in resp.json()["message"]
            assert r.audit_rows() == []  # nothing happened

    run(body)
