"""The owner API's launches and restarts: the launchers, a launch, ``connectd launch --here``'s plan
and its steps, restart-to-connect (``/api/launchers``, ``/api/launch``, ``/api/launch/here...``,
``/api/restart``). Mounted by :class:`connectd.edges.http.routes.OwnerApi`."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from starlette.requests import Request

from connectcore._machine import ConnectError
from connectcore.grants import Preset
from connectd.daemon.ids import EngineError
from connectd.edges.http import bodies as B
from connectd.edges.http.bodies import Query, bad, parse_body
from connectd.edges.http.errors import refusal

if TYPE_CHECKING:
    from connectcore import launchers as L
    from connectd.agents.launch import Launches
    from connectd.agents.launch_here import HereLaunches
    from connectd.agents.restart_to_connect import Restarts


class Launching:
    """The handlers, each ``(request, actor) -> JSON-able``; ``record``: an audit record of the person's
    step (:meth:`connectd.edges.http.routes.OwnerApi.record`)."""

    def __init__(
        self,
        *,
        launchers: Mapping[str, L.Launcher],
        launches: Launches,
        here: HereLaunches,
        restarts: Restarts,
        record: Callable[..., Awaitable[None]],
    ) -> None:
        self.launcher_table, self.launches, self.here, self.restarts = launchers, launches, here, restarts
        self.record = record

    async def launchers(self, request: Request, actor: str) -> Any:
        Query(request, set())
        return [
            {
                "name": launcher.name,
                "harness": launcher.harness,
                "opaque": launcher.opaque is not None,
                "connectable": launcher.connectable,
                "reason": launcher.unconnectable_reason,
                "restartable": launcher.restartable,
                "restart_refusal": launcher.restart_refusal,
            }
            for launcher in sorted(self.launcher_table.values(), key=lambda item: item.name)
        ]

    async def launch(self, request: Request, actor: str) -> Any:
        body = await parse_body(request, B.Launch)
        if not os.path.isabs(body.cwd) or not os.path.isdir(body.cwd):
            raise bad("bad_cwd", f"cwd must be an existing absolute directory, not {body.cwd[:256]!r}", field="cwd")
        preset = Preset(body.connect)
        try:
            result = await self.launches.launch(
                body.launcher, preset=preset, cwd=body.cwd, session=body.session, extra_env=dict(body.env),
                control=body.control,
            )
        except (EngineError, ConnectError) as exc:
            problem = refusal(exc)
            await self.record(actor, "launch", "refused", body.launcher[:128], problem.error)
            raise problem from None
        detail = f"launcher={body.launcher} connect={result.get('connect')}" + (" role=control" if body.control else "")
        await self.record(actor, "launch", "done", result.get("pane"), detail)
        return result

    async def launch_here(self, request: Request, actor: str) -> Any:
        """``connectd launch --here``: the plan (argv, environment with the token) for the supervisor."""
        body = await parse_body(request, B.LaunchHere)
        if not os.path.isabs(body.cwd) or not os.path.isdir(body.cwd):
            raise bad("bad_cwd", f"cwd must be an existing absolute directory, not {body.cwd[:256]!r}", field="cwd")
        try:
            return await self.here.plan(
                body.launcher, Preset(body.connect), cwd=body.cwd, pane_id=body.pane, supervisor=body.pid,
                session=body.session, extra_env=dict(body.env),
            )
        except (EngineError, ConnectError) as exc:
            problem = refusal(exc)
            await self.record(actor, "launch", "refused", body.launcher[:128], problem.error)
            raise problem from None

    async def here_started(self, request: Request, actor: str) -> Any:
        body = await parse_body(request, B.HereStarted)
        try:
            result = await self.here.started(body.pane, body.pid, body.child)
        except (EngineError, ConnectError) as exc:
            problem = refusal(exc)
            await self.record(actor, "launch", "refused", body.pane, problem.error)
            raise problem from None
        await self.record(actor, "launch", "done", body.pane, f"launcher={result['launcher']} connect={result['connect']} here")
        return result

    async def here_next(self, request: Request, actor: str) -> Any:
        body = await parse_body(request, B.HereNext)
        try:
            return await self.here.next_plan(body.pane, body.pid)
        except (EngineError, ConnectError) as exc:
            raise refusal(exc) from None

    async def restart(self, request: Request, actor: str) -> Any:
        body = await parse_body(request, B.Restart)
        preset = Preset(body.preset)
        return await self.restarts.begin(body.pane, preset, by=actor)
