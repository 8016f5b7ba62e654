"""The owner API's routes under ``/api/``: the person's reads and decisions, one table over its parts
(:mod:`~connectd.edges.http.fleet`, :mod:`~connectd.edges.http.listings`,
:mod:`~connectd.edges.http.decisions`, :mod:`~connectd.edges.http.access`,
:mod:`~connectd.edges.http.launching`), and the catch-all that answers 404 or 405.

Every route runs through :func:`connectd.edges.http.owner_auth.owner_endpoint` (who is asking), takes its
body as a pydantic model from :mod:`connectd.edges.http.bodies` (nothing is called before the whole request
passed) and sits behind :class:`connectd.edges.http.loopback.LoopbackGuard`, like every other route.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.routing import BaseRoute, Match, Route

from connectcore.effects import Audit
from connectd.edges.http.access import Access
from connectd.edges.http.decisions import Decisions
from connectd.edges.http.errors import Problem
from connectd.edges.http.events import KEEPALIVE_SECONDS
from connectd.edges.http.fleet import FleetReads, RecentDirs
from connectd.edges.http.launching import Launching
from connectd.edges.http.listings import Listings
from connectd.edges.http.owner_auth import Handler, OwnerAuth, owner_endpoint

if TYPE_CHECKING:
    from connectcore import launchers as L
    from connectd.agents.agent_calls import AgentCalls
    from connectd.agents.launch import Launches
    from connectd.agents.launch_here import HereLaunches
    from connectd.agents.restart_to_connect import Restarts
    from connectd.daemon.parts import Subscribers
    from connectd.daemon.runner import Core
    from connectd.person import PersonCalls
    from connectd.tmux.adapter import TmuxAdapter

__all__ = ["OwnerApi", "RecentDirs", "owner_routes"]


class OwnerApi:
    """The owner API, by surface, each part given only what it uses: the fleet's reads (``fleet``:
    :class:`connectd.edges.http.fleet.FleetReads`), the paged listings (``listings``:
    :class:`connectd.edges.http.listings.Listings`), cards and acts (``decisions``:
    :class:`connectd.edges.http.decisions.Decisions`), grants and revocations (``access``:
    :class:`connectd.edges.http.access.Access`), launches and restarts (``launching``:
    :class:`connectd.edges.http.launching.Launching`). Their handlers are ``(request, actor) -> JSON-able``;
    :meth:`routes` mounts them in one table."""

    def __init__(
        self,
        *,
        calls: AgentCalls,
        core: Core,
        clock: Callable[[], float],
        tmux: TmuxAdapter,
        store: Any,
        subscribers: Subscribers,
        launchers: Mapping[str, L.Launcher],
        person: PersonCalls,
        launches: Launches,
        here: HereLaunches,
        restarts: Restarts,
        auth: OwnerAuth,
        history: RecentDirs | None,
        keepalive: float = KEEPALIVE_SECONDS,
        federation: Callable[[], Any] = lambda: None,
    ) -> None:
        self.calls, self.core, self.clock, self.auth = calls, core, clock, auth
        self.fleet = FleetReads(calls=calls, tmux=tmux, subscribers=subscribers, history=history, keepalive=keepalive)
        # federation: the pairing desk now, or None (a box that does not federate)
        self.listings = Listings(calls=calls, store=store, federation=federation)
        self.decisions = Decisions(person=person)
        self.access = Access(core=core, person=person, auth=auth, record=self.record)
        self.launching = Launching(launchers=launchers, launches=launches, here=here, restarts=restarts, record=self.record)

    async def record(self, actor: str, action: str, outcome: str, target: str | None = None, detail: str = "") -> None:
        await self.core.audit(Audit(actor=actor, action=action, outcome=outcome, target=target, detail=detail, at=self.clock()))

    # --- the table ----------------------------------------------------------------------------

    def routes(self) -> list[BaseRoute]:
        get, post = ["GET"], ["POST"]
        table: list[tuple[str, Handler, list[str]]] = [
            ("/api/agents", self.fleet.agents, get),
            ("/api/warnings", self.fleet.warnings, get),
            ("/api/cards", self.decisions.cards, get),
            ("/api/needs", self.decisions.needs, get),
            ("/api/cards/{card_id}/approve", self.decisions.approve, post),
            ("/api/cards/{card_id}/decline", self.decisions.decline, post),
            ("/api/grants", self.access.set_grant, post),
            ("/api/panes/{pane}/connect", self.access.pane_connect, post),
            ("/api/revoke", self.access.revoke, post),
            ("/api/disconnect-all", self.access.disconnect_all, post),
            ("/api/owner-token/rotate", self.access.rotate_owner_token, post),
            ("/api/launch", self.launching.launch, post),
            ("/api/launch/here", self.launching.launch_here, post),
            ("/api/launch/here/started", self.launching.here_started, post),
            ("/api/launch/here/next", self.launching.here_next, post),
            ("/api/launchers", self.launching.launchers, get),
            ("/api/restart", self.launching.restart, post),
            ("/api/acts", self.decisions.acts, get),
            ("/api/acts/{act_id}/approve", self.decisions.approve_act, post),
            ("/api/acts/{act_id}/decline", self.decisions.decline_act, post),
            ("/api/control/stop", self.decisions.stop_control, post),
            ("/api/messages", self.listings.messages, get),
            ("/api/audit", self.listings.audit, get),
            ("/api/events", self.fleet.events, get),
            ("/api/sessions/dirs", self.fleet.session_dirs, get),
        ]
        routes = [Route(path, owner_endpoint(self.calls, self.auth, fn), methods=methods) for path, fn, methods in table]

        async def not_found(request: Request, actor: str) -> Any:
            allowed = sorted(
                {m for route in routes if route.matches(request.scope)[0] is Match.PARTIAL for m in route.methods or ()}
            )
            if allowed:
                raise Problem(
                    405, "method_not_allowed", f"{request.url.path} takes {' or '.join(allowed)}, not {request.method}"
                )
            raise Problem(404, "not_found", f"no owner API route {request.method} {request.url.path}")

        catch_all = Route(
            "/api/{rest:path}",
            owner_endpoint(self.calls, self.auth, not_found),
            methods=["GET", "POST", "PUT", "PATCH", "DELETE"],
        )
        return [*routes, catch_all]


def owner_routes(api: OwnerApi) -> list[BaseRoute]:
    """The owner API's routes (mount them before ``/mcp``; wrap the whole app in ``LoopbackGuard``)."""
    return api.routes()
