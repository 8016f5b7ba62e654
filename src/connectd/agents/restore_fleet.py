"""Restore after a lost tmux server or a reboot: "restore N sessions?".

The daemon records which agent session each pane held as it sees the bindings. When the panes are gone,
the resumable top-level sessions that were live in them are listed (the history index decides which are
resumable and why the rest are not) and, once the person confirms, relaunched in their cwd with their
resume argv through the harness's structured launcher. Grants are kept: they are keyed by
(harness, session id), so a restored session comes back with the scope it had.

One restore at a time (issue 24): a restore requested while one runs (a double click, the CLI and the
page at once) is refused with 409 ``restore_running`` and changes nothing; the rule is
:func:`connectcore.history.restore_refusal`, the flag is the engine's ``restoring``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import anyio
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from connectcore import directory as D
from connectcore import grants
from connectcore.effects import Audit
from connectcore.hub import acts as hub_acts

if TYPE_CHECKING:
    from connectd.daemon.parts import Engine
    from connectd.edges.http import OwnerAuth


def _plan(engine: Engine) -> Any:
    from connectcore.history import restore_candidates
    from connectd.daemon.ids import EngineError

    if engine.history is None:
        raise EngineError("no_history", "restore needs the session history index (serve without --no-history)")
    bindings = restore_candidates(
        ((row.pane_id, row.harness, row.session_id) for row in engine.store.bindings()),
        D.bound_sessions(engine.watcher.directory),
    )
    return engine.history.restorable(bindings, pane_pids=engine.watcher.pane_pids())


async def restore_plan(engine: Engine) -> dict[str, Any]:
    plan = await anyio.to_thread.run_sync(_plan, engine)
    return {
        "items": [
            {"pane": i.pane_id, "harness": i.harness.value, "session_id": i.session_id, "cwd": i.cwd, "title": i.title}
            for i in plan.items
        ],
        "skipped": [
            {"pane": s.pane_id, "harness": s.harness.value, "session_id": s.session_id, "reason": s.reason.value}
            for s in plan.skipped
        ],
    }


async def restore(engine: Engine, by: str = "owner") -> dict[str, Any]:
    """Relaunch every restorable session with the grant it had. One restore at a time: while one runs,
    another is refused before it looks at anything (:func:`connectcore.history.restore_refusal`); the
    flag is set and read with no await between, so two requests cannot both pass."""
    from connectcore.history import restore_refusal
    from connectd.daemon.ids import EngineError

    refusal = restore_refusal(running=engine.restoring)
    if refusal is not None:
        raise EngineError(refusal.reason, refusal.problem)
    engine.restoring = True
    try:
        return await _restore(engine, by)
    finally:
        engine.restoring = False


async def _restore(engine: Engine, by: str) -> dict[str, Any]:
    plan = await restore_plan(engine)
    launched = []
    for item in plan["items"]:
        session = (item["harness"], item["session_id"])
        preset = grants.restored_preset(engine.hub.book, session)
        control = hub_acts.control_to_restore(engine.hub.book, session)  # a lost control comes back as control
        result = await engine.launches.launch(
            item["harness"], preset=preset, cwd=item["cwd"], session=item["session_id"], control=control
        )
        launched.append(result)
        await engine.audit(Audit(by, "restore", "launched", target=f"agent:{session[0]}:{session[1]}", at=engine.clock()))
    return {"launched": launched, "skipped": plan["skipped"]}


def restore_routes(engine: Engine, auth: OwnerAuth) -> list[BaseRoute]:
    from connectd.daemon.ids import EngineError
    from connectd.edges.http import Problem, authenticate

    async def handle(request: Request) -> Response:
        try:
            by = authenticate(request, engine.calls, auth)
            payload = await (restore(engine, by) if request.method == "POST" else restore_plan(engine))
            return Response(json.dumps(payload), media_type="application/json")
        except Problem as problem:
            body = {"error": problem.error, "message": str(problem)}
            return Response(json.dumps(body), status_code=problem.status, media_type="application/json")
        except EngineError as exc:
            body = {"error": exc.reason, "message": str(exc)}
            return Response(json.dumps(body), status_code=409, media_type="application/json")

    return [Route("/api/restore", handle, methods=["GET", "POST"])]
