"""The owner API's access: who may act, and the person's ways to take it back (``/api/grants``,
``/api/panes/{pane}/connect``, ``/api/revoke``, ``/api/disconnect-all``, ``/api/owner-token/rotate``).
Mounted by :class:`connectd.edges.http.routes.OwnerApi`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from starlette.requests import Request

from connectcore import grants
from connectcore.grants import Preset
from connectd.edges.http import bodies as B
from connectd.edges.http.bodies import parse_body, parse_pane

if TYPE_CHECKING:
    from connectd.daemon.runner import Core
    from connectd.edges.http.owner_auth import OwnerAuth
    from connectd.person import PersonCalls


class Access:
    """The handlers, each ``(request, actor) -> JSON-able``; ``record``: an audit record of the person's
    step (:meth:`connectd.edges.http.routes.OwnerApi.record`)."""

    def __init__(
        self, *, core: Core, person: PersonCalls, auth: OwnerAuth, record: Callable[..., Awaitable[None]]
    ) -> None:
        self.core, self.person, self.auth, self.record = core, person, auth, record

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
