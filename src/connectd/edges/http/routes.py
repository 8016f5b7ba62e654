"""The owner API's routes under ``/api/``: the person's reads and decisions.

Every route runs through :func:`connectd.edges.http.owner_auth.owner_endpoint` (who is asking), takes its
body as a pydantic model from :mod:`connectd.edges.http.bodies` (nothing is called before the whole request
passed) and sits behind :class:`connectd.edges.http.loopback.LoopbackGuard`, like every other route.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import anyio
from starlette.requests import Request
from starlette.routing import BaseRoute, Match, Route

from connectcore import advice, grants
from connectcore import reads as R
from connectcore._machine import ConnectError
from connectcore.consent import Decision
from connectcore.delivery import Message
from connectcore.effects import Audit
from connectcore.federation import outbox as O
from connectcore.grants import Preset
from connectd.cli import facts
from connectd.daemon.ids import EngineError
from connectd.edges.http import bodies as B
from connectd.edges.http.bodies import MAX_LIMIT, Query, bad, parse_body, parse_pane
from connectd.edges.http.errors import Problem, owner_message_view, owner_sent_across_view, refusal
from connectd.edges.http.events import KEEPALIVE_SECONDS, AsResponse, EventStream
from connectd.edges.http.owner_auth import Handler, OwnerAuth, owner_endpoint
from connectd.edges.http.paging import (
    audit_cursor,
    encode_message_cursor,
    message_cursor,
    newest_first,
    page_response,
)
from connectd.store.remote_messages import listing_ref

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


class RecentDirs(Protocol):
    """What the owner API asks of the session history (:class:`connectd.history.service.HistoryService`)."""

    def recent_dirs(self, limit: int = 20) -> list[dict[str, object]]: ...


def _listing_place(m: Message | O.Row) -> tuple[float, str]:
    """Where a message or an outbox row sits in ``/api/messages``' order (its cursor)."""
    return (m.created_at, listing_ref(m.identity)) if isinstance(m, O.Row) else (m.created_at, m.ref)


class OwnerApi:
    """The handlers, each ``(request, actor) -> JSON-able``; :meth:`routes` mounts them."""

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
        self.calls, self.core, self.clock, self.tmux, self.store = calls, core, clock, tmux, store
        self.subscribers, self.launcher_table, self.person, self.launches = subscribers, launchers, person, launches
        self.here, self.restarts = here, restarts
        self.auth = auth
        self.history = history
        self.keepalive = keepalive
        self.federation = federation  # the pairing desk now, or None (a box that does not federate)

    async def record(self, actor: str, action: str, outcome: str, target: str | None = None, detail: str = "") -> None:
        await self.core.audit(Audit(actor=actor, action=action, outcome=outcome, target=target, detail=detail, at=self.clock()))

    # --- reads --------------------------------------------------------------------------------

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

    async def cards(self, request: Request, actor: str) -> Any:
        query = Query(request, {"all"})
        return self.person.cards(include_closed=query.flag("all"))

    async def needs(self, request: Request, actor: str) -> Any:
        Query(request, set())
        return self.person.needs_you()

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

    async def messages(self, request: Request, actor: str) -> Any:
        query = Query(request, {"pane", "principal", "limit", "before", "after", "order"})
        pane = query.text("pane")
        pane = parse_pane(pane) if pane is not None else None
        principal, limit, newest = query.text("principal"), query.limit(), newest_first(query)
        before, after = message_cursor(query, "before"), message_cursor(query, "after")
        store = self.store

        def read() -> list[Message | O.Row]:
            """This box's messages and its outbox (messages to other boxes, which have no local row),
            in one order: (created_at, the message's ref or the row's listing_ref)."""
            window = {"pane": pane, "principal": principal, "limit": limit + 1, "before": before, "after": after,
                      "newest_first": newest}
            found: list[Message | O.Row] = [*store.messages(**window), *store.outbox_listing(**window)]
            found.sort(key=_listing_place, reverse=newest)
            return found[: limit + 1]

        rows = await anyio.to_thread.run_sync(read)
        desk = self.federation()
        book = None if desk is None else desk.book

        def view(m: Message | O.Row) -> Any:
            if isinstance(m, O.Row):
                return owner_sent_across_view(R.sent_across(m, book))
            return owner_message_view(m, self.calls.waits_for(m), R.from_box(m, book))

        return page_response(
            request, rows, limit, newest=newest, cursor=lambda m: encode_message_cursor(*_listing_place(m)), view=view,
        )

    async def audit(self, request: Request, actor: str) -> Any:
        query = Query(request, {"actor", "pane", "outcome", "since", "until", "after", "before", "order", "limit"})
        pane = query.text("pane")
        limit, newest = query.limit(), newest_first(query)
        filters = {
            "actor": query.text("actor"),
            "pane": parse_pane(pane) if pane is not None else None,
            "outcome": query.text("outcome"),
            "since": query.number("since"),
            "until": query.number("until"),
            "after_id": audit_cursor(query, "after") or 0,
            "before_id": audit_cursor(query, "before"),
            "limit": limit + 1,
            "newest_first": newest,
        }
        store = self.store
        rows = await anyio.to_thread.run_sync(lambda: store.audit(**filters))
        return page_response(request, rows, limit, newest=newest, cursor=lambda row: str(row.id))

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

    # --- the person's decisions ---------------------------------------------------------------

    async def approve(self, request: Request, actor: str) -> Any:
        body = await parse_body(request, B.Approve)
        decision = Decision.APPROVE_PAIR if body.pair else Decision.APPROVE_ONCE
        return await self.person.decide(request.path_params["card_id"], decision, by=actor)

    async def decline(self, request: Request, actor: str) -> Any:
        await parse_body(request, B.Empty)
        return await self.person.decide(request.path_params["card_id"], Decision.DECLINE, by=actor)

    async def set_grant(self, request: Request, actor: str) -> Any:
        body = await parse_body(request, B.SetGrant)
        preset = Preset(body.preset)
        session = (body.harness, body.session_id)
        touched = grants.principals_of_session(self.core.hub.book, session)
        await self.person.set_grant(session, preset, by=actor)
        result: dict[str, Any] = {"session": {"harness": body.harness, "session_id": body.session_id},
                                  "connect": preset.value}
        if preset is Preset.OFF:  # a revocation: its answer names what other boxes have not confirmed
            result["cancels_unconfirmed"] = self.person.cancels_unconfirmed(touched)
        return result

    async def pane_connect(self, request: Request, actor: str) -> Any:
        pane = parse_pane(request.path_params["pane"], "the pane in the path")
        body = await parse_body(request, B.PanePreset)
        return await self.person.set_pane_preset(pane, Preset(body.preset), by=actor)

    async def revoke(self, request: Request, actor: str) -> Any:
        body = await parse_body(request, B.Revoke)
        if body.pane is not None:
            return await self.person.revoke_pane(body.pane, by=actor)
        principal_id = str(body.principal)
        await self.person.revoke_principals([principal_id], by=actor)  # the core refuses an unknown principal
        root = self.core.hub.book.principals[grants.canonical(self.core.hub.book, principal_id)]
        return {"revoked": grants.actor_name(root), "principal": root.id,
                "cancels_unconfirmed": self.person.cancels_unconfirmed([principal_id])}

    async def disconnect_all(self, request: Request, actor: str) -> Any:
        body = await parse_body(request, B.DisconnectAll)
        result: dict[str, Any] = await self.person.disconnect_all(by=actor)
        if body.end_page_sessions:
            sessions = self.auth.sessions
            ended = sessions.end_all() if sessions is not None else []
            for session in ended:
                await self.record(actor, "page_session_end", "done", session.actor, "disconnect-all")
            result["page_sessions_ended"] = len(ended)
        return result

    async def rotate_owner_token(self, request: Request, actor: str) -> Any:
        await parse_body(request, B.Empty)
        self.auth.rotate_owner_token()
        await self.record(actor, "owner_token_rotate", "done")
        return {"rotated": True, "file": "owner_token"}

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

    async def acts(self, request: Request, actor: str) -> Any:
        query = Query(request, {"all"})
        return self.person.acts(include_closed=query.flag("all"))

    async def approve_act(self, request: Request, actor: str) -> Any:
        await parse_body(request, B.Empty)
        return await self.person.decide_act(request.path_params["act_id"], True, by=actor)

    async def decline_act(self, request: Request, actor: str) -> Any:
        await parse_body(request, B.Empty)
        return await self.person.decide_act(request.path_params["act_id"], False, by=actor)

    async def stop_control(self, request: Request, actor: str) -> Any:
        await parse_body(request, B.Empty)
        return await self.person.stop_control(by=actor)

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

    # --- the table ----------------------------------------------------------------------------

    def routes(self) -> list[BaseRoute]:
        get, post = ["GET"], ["POST"]
        table: list[tuple[str, Handler, list[str]]] = [
            ("/api/agents", self.agents, get),
            ("/api/warnings", self.warnings, get),
            ("/api/cards", self.cards, get),
            ("/api/needs", self.needs, get),
            ("/api/cards/{card_id}/approve", self.approve, post),
            ("/api/cards/{card_id}/decline", self.decline, post),
            ("/api/grants", self.set_grant, post),
            ("/api/panes/{pane}/connect", self.pane_connect, post),
            ("/api/revoke", self.revoke, post),
            ("/api/disconnect-all", self.disconnect_all, post),
            ("/api/owner-token/rotate", self.rotate_owner_token, post),
            ("/api/launch", self.launch, post),
            ("/api/launch/here", self.launch_here, post),
            ("/api/launch/here/started", self.here_started, post),
            ("/api/launch/here/next", self.here_next, post),
            ("/api/launchers", self.launchers, get),
            ("/api/restart", self.restart, post),
            ("/api/acts", self.acts, get),
            ("/api/acts/{act_id}/approve", self.approve_act, post),
            ("/api/acts/{act_id}/decline", self.decline_act, post),
            ("/api/control/stop", self.stop_control, post),
            ("/api/messages", self.messages, get),
            ("/api/audit", self.audit, get),
            ("/api/events", self.events, get),
            ("/api/sessions/dirs", self.session_dirs, get),
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
