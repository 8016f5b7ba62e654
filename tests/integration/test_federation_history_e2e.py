"""Two real daemons, remote history search over a real NATS server (docs/federation.md, build order
slice 7; the setup is test_federation_pairing_e2e's: each ``connectd serve`` with its own data
directory, HOME and tmux server, one ``nats-server`` with exactly the documented permissions per box,
so the query goes as a core NATS request on ``connect.<A>.history`` and the answer through
``allow_responses``). Box A serves a history index with a session in each of two repositories, ``app``
and ``private``. Paired by the real CLI, B's agent calls ``find_sessions box=laptop``: by default A
answers ``not shared``, audited on both boxes; once A's owner sets ``history=index
history_repos=app`` for that pairing, the answer is A's ``app`` session only, with its box; a box
name no pairing has is refused ``unknown_box``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from connectd.federation import keys as K
from tests.fixtures.history.transcripts import Claude, make_repo
from tests.integration.test_federation_pairing_e2e import ROGUE
from tests.integration.test_pair_cli import run
from tests.support.daemon import AgentHandle, DaemonProcess, call, mcp_agent
from tests.support.federation import Box
from tests.support.federation import pair as _pair
from tests.support.federation import prepare_box as _prepare
from tests.support.fixtures import tmux_session
from tests.support.nats import NatsServer, box_password

APP_SESSION, PRIVATE_SESSION = "11111111-1111-4111-8111-111111111111", "22222222-2222-4222-8222-222222222222"


@pytest.fixture
def boxes(tmp_path: Path) -> Iterator[tuple[Box, Box, NatsServer]]:
    """test_federation_pairing_e2e's two boxes, A serving a history index (two sessions about a login)."""
    (tmp_path / "nats").mkdir()
    a_data, a_local = _prepare(tmp_path / "a", "laptop")
    b_data, b_local = _prepare(tmp_path / "b", "devbox")
    claude_root, codex_root = tmp_path / "a" / "claude", tmp_path / "a" / "codex"
    app, private = make_repo(tmp_path / "a" / "app"), make_repo(tmp_path / "a" / "private")
    Claude(APP_SESSION, str(app), branch="fix-login").prompt("fix the login redirect loop").write(claude_root)
    Claude(PRIVATE_SESSION, str(private), branch="login").prompt("rotate the login secrets").write(claude_root)
    server = NatsServer(tmp_path / "nats", [a_local.box_id, b_local.box_id, ROGUE.box_id])
    server.start()
    try:
        anyio.run(server.provision)
        for data, local in ((a_data, a_local), (b_data, b_local)):
            password = data.parent / "nats-password"
            password.write_text(box_password(local.box_id))
            with (data / K.FEDERATION_FILE).open("a") as fh:
                fh.write("resend = 1.0\n")
            done = run("federate", "--nats", server.url, "--user", f"box-{local.box_id}", "--password-file",
                       str(password), "--data-dir", str(data))
            assert done.returncode == 0, done.stderr
        with tmux_session("connect-ha") as tmux_a, tmux_session("connect-hb") as tmux_b:
            made: list[DaemonProcess] = []
            try:
                out = []
                for root, tmux, local, name, roots in (
                    (tmp_path / "a", tmux_a, a_local, "laptop", (claude_root, codex_root)),
                    (tmp_path / "b", tmux_b, b_local, "devbox", None),
                ):
                    d = DaemonProcess(root, tmux, history_roots=roots)
                    d.env_extra["HOME"] = str(root / "home")
                    made.append(d.start())
                    out.append(Box(name, d, local, root / "home"))
                yield out[0], out[1], server
            finally:
                for d in made:
                    d.stop()
    finally:
        server.stop()


def _find(on: Box, agent: AgentHandle, **args: Any) -> tuple[bool, Any]:
    async def ask() -> Any:
        async with mcp_agent(on.daemon.mcp_url, agent.token or "") as client:
            return await call(client, "find_sessions", query="login", **args)

    return anyio.run(ask)


def _asker(a: Box, b: Box) -> AgentHandle:
    _pair(a, b)
    asker = b.daemon.launch("asker")
    b.daemon.wait_ready(asker)
    return asker


def _history_audit(box: Box) -> list[dict[str, Any]]:
    rows = box.daemon.api("GET", "/api/audit?limit=1000&order=oldest")
    return [r for r in rows if r["action"] == "federation.history"]


def test_find_sessions_on_another_box_is_not_shared_by_default(boxes: tuple[Box, Box, NatsServer]) -> None:
    a, b, _server = boxes
    asker = _asker(a, b)
    err, text = _find(b, asker, box="laptop")
    assert err and "refused (not_shared): box laptop: not shared" in str(text), text
    err, text = _find(b, asker, box="nowhere")
    assert err and "refused (unknown_box)" in str(text), text
    # audited on both boxes: the call on B, the answer on A (naming B's box and the asking agent)
    calls = [r for r in b.daemon.api("GET", "/api/audit?limit=1000&order=oldest") if r["action"] == "find_sessions"]
    assert [(r["outcome"], r["detail"]) for r in calls] == [("refused", "not_shared"), ("refused", "unknown_box")]
    (answered,) = _history_audit(a)
    assert answered["actor"] == f"box:{b.local.box_id}" and answered["outcome"] == "not_shared"
    # and B's own history is not served at all (--no-history): the local call is unchanged
    err, text = _find(b, asker)
    assert err and "history_unavailable" in str(text)


def test_once_a_s_owner_shares_an_index_b_finds_the_listed_repository_s_sessions_only(
    boxes: tuple[Box, Box, NatsServer],
) -> None:
    a, b, _server = boxes
    asker = _asker(a, b)
    a.run("pair", "set", "devbox", "history=index", "history_repos=app")
    err, found = _find(b, asker, box="laptop")
    assert not err, found
    rows = found["data"]
    assert [r["session_id"] for r in rows] == [APP_SESSION]  # not the private repository's session
    fingerprint = a.local.keys.fingerprint.replace(" ", "")[:8]
    assert rows[0]["box"] == {"name": "laptop", "id": a.local.box_id, "fingerprint": fingerprint}
    assert "prompts" not in rows[0] and rows[0]["remote"] is True
    assert "another machine" in found["source"]
    err, none = _find(b, asker, box="laptop", repo="private")  # a repository not listed: nothing
    assert not err and none["data"] == []
    assert [r["outcome"] for r in _history_audit(a)] == ["answered", "answered"]
