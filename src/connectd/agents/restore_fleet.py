"""Restore after a lost tmux server or a reboot: "restore N sessions?".

The daemon records which agent session each pane held as it sees the bindings. When the panes are gone,
the resumable top-level sessions that were live in them are listed (the history index decides which are
resumable and why the rest are not) and, once the person confirms, relaunched in their cwd with their
resume argv through the harness's structured launcher. Grants are kept: they are keyed by
(harness, session id), so a restored session comes back with the scope it had.

One restore at a time (issue 24): a restore requested while one runs (a double click, the CLI and the
page at once) is refused with 409 ``restore_running`` and changes nothing; the rule is
:func:`connectcore.history.restore_refusal`, the flag is :attr:`FleetRestore.running`.

:class:`FleetRestore` is given the collaborators it uses (issue 24), not the engine: the core runner
as ``core`` (the book, the audit record), ``clock``, ``store`` (the recorded bindings), ``watcher``
(the live bindings, the pane processes), ``launches`` and ``history`` (a callable: the session index
the daemon serves, set after the parts are built, or None). Its route (:func:`restore_routes`)
authenticates the owner with ``calls``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
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
    from connectd.agents.agent_calls import AgentCalls
    from connectd.agents.launch import Launches
    from connectd.daemon.runner import Core
    from connectd.edges.http import OwnerAuth
    from connectd.tmux.watcher import Watcher


class FleetRestore:
    """The sessions a lost tmux server held, listed (:meth:`plan`) and relaunched (:meth:`restore`)."""

    def __init__(
        self,
        *,
        core: Core,
        clock: Callable[[], float],
        store: Any,
        watcher: Watcher,
        launches: Launches,
        history: Callable[[], Any | None],
    ) -> None:
        self.core, self.clock, self.store, self.watcher = core, clock, store, watcher
        self.launches, self.history = launches, history
        self.running = False  # a restore runs: another is refused meanwhile

    def _plan(self) -> Any:
        from connectcore.history import restore_candidates
        from connectd.daemon.ids import EngineError

        history = self.history()
        if history is None:
            raise EngineError("no_history", "restore needs the session history index (serve without --no-history)")
        bindings = restore_candidates(
            ((row.pane_id, row.harness, row.session_id) for row in self.store.bindings()),
            D.bound_sessions(self.watcher.directory),
        )
        return history.restorable(bindings, pane_pids=self.watcher.pane_pids())

    async def plan(self) -> dict[str, Any]:
        """What a restore would relaunch, and each session it would not, with the reason."""
        plan = await anyio.to_thread.run_sync(self._plan)
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

    async def restore(self, by: str = "owner") -> dict[str, Any]:
        """Relaunch every restorable session with the grant it had. One restore at a time: while one runs,
        another is refused before it looks at anything (:func:`connectcore.history.restore_refusal`); the
        flag is set and read with no await between, so two requests cannot both pass."""
        from connectcore.history import restore_refusal
        from connectd.daemon.ids import EngineError

        refusal = restore_refusal(running=self.running)
        if refusal is not None:
            raise EngineError(refusal.reason, refusal.problem)
        self.running = True
        try:
            return await self._restore(by)
        finally:
            self.running = False

    async def _restore(self, by: str) -> dict[str, Any]:
        plan = await self.plan()
        launched = []
        for item in plan["items"]:
            session = (item["harness"], item["session_id"])
            book = self.core.hub.book
            preset = grants.restored_preset(book, session)
            control = hub_acts.control_to_restore(book, session)  # a lost control comes back as control
            result = await self.launches.launch(
                item["harness"], preset=preset, cwd=item["cwd"], session=item["session_id"], control=control
            )
            launched.append(result)
            await self.core.audit(
                Audit(by, "restore", "launched", target=f"agent:{session[0]}:{session[1]}", at=self.clock())
            )
        return {"launched": launched, "skipped": plan["skipped"]}


def restore_routes(restores: FleetRestore, calls: AgentCalls, auth: OwnerAuth) -> list[BaseRoute]:
    """``/api/restore``: GET the plan, POST to restore; the owner only (``calls`` authenticates)."""
    from connectd.daemon.ids import EngineError
    from connectd.edges.http import Problem, authenticate

    async def handle(request: Request) -> Response:
        try:
            by = authenticate(request, calls, auth)
            payload = await (restores.restore(by) if request.method == "POST" else restores.plan())
            return Response(json.dumps(payload), media_type="application/json")
        except Problem as problem:
            body = {"error": problem.error, "message": str(problem)}
            return Response(json.dumps(body), status_code=problem.status, media_type="application/json")
        except EngineError as exc:
            body = {"error": exc.reason, "message": str(exc)}
            return Response(json.dumps(body), status_code=409, media_type="application/json")

    return [Route("/api/restore", handle, methods=["GET", "POST"])]
