"""Restore on real parts (issue 24): a private tmux server, a real SQLite store, the real history index
over a Claude transcript, the engine over them, and the owner's ``/api/restore`` route called in-process
through ``httpx2.ASGITransport`` (the CLI's ``connectd restore`` posts to the same route).

The one stand-in is a gate on the engine's launch call: the first restore's first launch waits there
until the test lets it go, so the second request arrives while the first one runs, every time (no
timing involved).
"""

from __future__ import annotations

from pathlib import Path

import anyio
import httpx2
import pytest
from starlette.applications import Starlette

from connectcore.launchers import Launcher
from connectd.agents.restore_fleet import restore_routes
from connectd.daemon.parts import Engine
from connectd.edges.http import OwnerAuth
from connectd.history.service import HistoryService
from connectd.store.store import Store
from tests.fixtures.history.transcripts import Claude, make_repo
from tests.support.fixtures import tmux_session
from tests.support.tmux_server import TmuxServer

pytestmark = pytest.mark.timeout(60)

SESSION = "7a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"


def _stand_in(tmp_path: Path) -> Launcher:
    """The built-in "claude" launcher (restore relaunches by harness), pointed at a script that waits."""
    script = tmp_path / "fake-claude"
    script.write_text("#!/bin/sh\nexec cat\n")
    script.chmod(0o755)
    return Launcher(name="claude", harness="claude", argv=(str(script),), resume_argv=(str(script), "--resume", "{session_id}"))


def test_a_second_restore_while_one_runs_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    """Two restore requests at once (a double click, the page and the CLI): each would relaunch the
    whole plan, so every lost session came back twice. The second is refused with 409
    ``restore_running`` and launches nothing; the first launches each session once."""
    claude_root, codex_root, data = tmp_path / "claude", tmp_path / "codex", tmp_path / "data"
    work = make_repo(tmp_path / "work")
    Claude(SESSION, str(work), branch="main").prompt("keep the release notes current").write(claude_root)

    async def body(tmux: TmuxServer) -> None:
        store = Store.open(data)
        engine = Engine(store, tmux.adapter(), endpoint_url="http://127.0.0.1:9/mcp", launchers={"claude": _stand_in(tmp_path)})
        # the session a lost tmux server held in %90 (the daemon records a pane's binding as it sees it)
        store.record_binding("%90", harness="claude", session_id=SESSION, cwd=str(work), updated_at=engine.clock())
        await engine.watcher.poll()
        auth = OwnerAuth.load_or_create(data)
        owner = {"Authorization": f"Bearer {auth.owner_token}"}
        launch, entered, release = engine.launches.launch, anyio.Event(), anyio.Event()

        async def gated(*args: object, **kwargs: object) -> dict[str, object]:  # the first launch waits
            if not entered.is_set():
                entered.set()
                await release.wait()
            return await launch(*args, **kwargs)  # type: ignore[arg-type]

        engine.launches.launch = gated  # type: ignore[method-assign]
        app = Starlette(routes=restore_routes(engine.restore, engine.calls, auth))
        transport = httpx2.ASGITransport(app=app)
        with HistoryService(data, claude_root, codex_root, pane_pids=engine.watcher.pane_pids) as history:
            engine.history = history
            async with httpx2.AsyncClient(transport=transport, base_url="http://127.0.0.1:9") as client:
                plan = (await client.get("/api/restore", headers=owner)).json()
                before = set(tmux.tmux("list-panes", "-a", "-F", "#{pane_id}").split())
                assert [(i["harness"], i["session_id"]) for i in plan["items"]] == [("claude", SESSION)]
                first: list[httpx2.Response] = []

                async def restore_first() -> None:
                    first.append(await client.post("/api/restore", json={}, headers=owner))

                async with anyio.create_task_group() as tg:
                    tg.start_soon(restore_first)
                    await entered.wait()  # the first restore runs: its launch waits at the gate
                    panes = tmux.tmux("list-panes", "-a", "-F", "#{pane_id}")
                    second = await client.post("/api/restore", json={}, headers=owner)
                    unchanged = tmux.tmux("list-panes", "-a", "-F", "#{pane_id}") == panes
                    release.set()
        [done] = first
        opened = set(tmux.tmux("list-panes", "-a", "-F", "#{pane_id}").split()) - before
        restores = [r.action for r in store.audit(limit=100) if r.action == "restore"]
        seen = {
            "second": (second.status_code, second.json().get("error")),
            "second opened a window": not unchanged,
            "first": (done.status_code, len(done.json().get("launched", []))),
            "windows opened": len(opened),
            "restore audit lines": len(restores),
        }
        assert seen == {
            "second": (409, "restore_running"),
            "second opened a window": False,
            "first": (200, 1),
            "windows opened": 1,  # the session came back once
            "restore audit lines": 1,
        }, second.text
        assert "a restore is already running" in second.json()["message"]
        store.close()

    with tmux_session("connect-restore") as tmux:
        anyio.run(body, tmux)
