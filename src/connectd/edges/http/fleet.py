"""The owner API's fleet reads: the agents, what leaves this daemon with nothing to show, the event
stream and the session history's recent directories (``/api/agents``, ``/api/warnings``,
``/api/events``, ``/api/sessions/dirs``). Mounted by :class:`connectd.edges.http.routes.OwnerApi`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import anyio
from starlette.requests import Request

from connectcore import advice
from connectcore._machine import ConnectError
from connectd.cli import facts
from connectd.edges.http.bodies import MAX_LIMIT, Query, bad
from connectd.edges.http.events import AsResponse, EventStream

if TYPE_CHECKING:
    from connectd.agents.agent_calls import AgentCalls
    from connectd.daemon.parts import Subscribers
    from connectd.tmux.adapter import TmuxAdapter


class RecentDirs(Protocol):
    """What the owner API asks of the session history (:class:`connectd.history.service.HistoryService`)."""

    def recent_dirs(self, limit: int = 20) -> list[dict[str, object]]: ...


class FleetReads:
    """The handlers, each ``(request, actor) -> JSON-able``, given the few parts they read."""

    def __init__(
        self, *, calls: AgentCalls, tmux: TmuxAdapter, subscribers: Subscribers, history: RecentDirs | None,
        keepalive: float,
    ) -> None:
        self.calls, self.tmux, self.subscribers, self.history, self.keepalive = calls, tmux, subscribers, history, keepalive

    async def agents(self, request: Request, actor: str) -> Any:
        Query(request, set())
        return self.calls.agents()

    async def warnings(self, request: Request, actor: str) -> Any:
        """What leaves this daemon with nothing to show (no tmux server, no harness on PATH), each
        with its fix (:func:`connectcore.advice.fleet_warnings`); ``[]`` when nothing does."""
        Query(request, set())
        found = advice.fleet_warnings(
            tmux_server_running=await self.tmux.server_running(),
            harnesses_on_path=facts.harnesses_on_path(),
            cli=facts.cli_command(),
        )
        return [{"problem": a.problem, "fix": a.fix} for a in found]

    async def events(self, request: Request, actor: str) -> Any:
        Query(request, set())
        return AsResponse(EventStream(self.subscribers, self.keepalive))

    async def session_dirs(self, request: Request, actor: str) -> Any:
        query = Query(request, {"limit"})
        limit = query.integer("limit", default=20, low=1, high=MAX_LIMIT)
        assert limit is not None  # it has a default
        history = self.history
        if history is None:
            return []
        try:
            return await anyio.to_thread.run_sync(lambda: history.recent_dirs(limit))
        except ConnectError as exc:  # the history index's own refusals
            raise bad("history", str(exc)) from None
