"""The owner API's pairing routes under ``/api/pairing/`` (docs/federation.md, "Pairing"): what
``connectd pair ...`` calls. The pairing desk (:mod:`connectd.federation.desk`) does the work; a box not
set up for federation answers 409 ``not_federated`` with the command that sets it up.

- ``POST /api/pairing/invitations`` ``{"expires": seconds}``: a new invitation and its code (shown once);
  ``POST /api/pairing/invitations/{id}/revoke``: withdraw an open one;
- ``POST /api/pairing/accept`` ``{"code": ..., "name": ...}``: approval 1 on the invitee;
- ``GET /api/pairing/requests[?all=1]``: pending requests with both boxes' fingerprints;
- ``POST /api/pairing/requests/{who}/approve`` ``{"name": ...}`` and ``.../decline``: approval 2 (``who``: the
  request id, the requester's box id or its name);
- ``GET /api/pairing/pairings`` (each with its settings and when its box was last heard);
  ``GET /api/pairing/pairings/{who}`` (the one ``who`` names: :func:`connectcore.federation.pairing.pairing_named`);
  ``POST /api/pairing/pairings/{who}/remove``;
- ``POST /api/pairing/pairings/{who}/settings`` ``{"set": ["messages=off", ...]}``: set the pairing's
  settings (``KEY=VALUE`` words, checked by the core all or none);
- ``POST /api/pairing/reload``: ``federation.toml`` read again (``connectd federate --nats`` and ``--off``
  ask it): the bus loops started, moved to the server the file now names, or stopped (no NATS); another
  name answers ``restart_needed`` and changes nothing (:meth:`connectd.federation.desk.PairingDesk.reload`);
- ``GET /api/pairing/agents``: the agents the paired boxes share (their directory entries as held now,
  each with its box, its qualified address and the entry's age: what ``list_agents`` adds), read-only;
  none on a box not set up for federation (``connectd agents``, the page's fleet);
- ``GET /api/pairing/status[?checks=1]``: this box, its NATS server and whether the bus is connected
  (``connectd doctor``, the page's pairings panel); with ``checks``, the bus's read-only checks too (the
  server's version, JetStream, this box's consumer: what ``connectd doctor`` prints).

Every route runs through :func:`connectd.edges.http.owner_auth.owner_endpoint`; mount them before the owner
API's catch-all. Each step is audited as who took it, the actor that wrapper resolved
(:func:`connectcore.login.owner_actor`): ``owner`` for the owner token (the CLI), ``owner:page:<id>`` for
the page session, ``owner:tunnel:<user>`` through the tunnel.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydantic import Field
from starlette.requests import Request
from starlette.routing import BaseRoute, Route

from connectcore.federation.pairing import DEFAULT_EXPIRES
from connectd.cli import facts
from connectd.edges.http import bodies as B
from connectd.edges.http.bodies import Query, parse_body
from connectd.edges.http.errors import Problem
from connectd.edges.http.owner_auth import Handler, OwnerAuth, owner_endpoint

if TYPE_CHECKING:
    from connectd.agents.agent_calls import AgentCalls
    from connectd.federation.desk import PairingDesk


class Invite(B.Body):
    expires: float = Field(default=DEFAULT_EXPIRES)


class Accept(B.Body):
    code: B.Text
    name: B.Text | None = None


class Approve(B.Body):
    name: B.Text | None = None


class SetSettings(B.Body):
    set: list[B.Text] = Field(max_length=16)


class PairingApi:
    """The pairing routes' handlers, each ``(request, actor) -> JSON-able``, by what they touch:
    invitations, requests, pairings, and this box's federation (status, agents, reload).
    ``federation``: the pairing desk, once the box federates (read at each request), else None."""

    def __init__(self, federation: Callable[[], PairingDesk | None]) -> None:
        self.federation = federation

    def desk(self) -> PairingDesk:
        found = self.federation()
        if found is None:
            raise Problem(
                409, "not_federated", "this box is not set up for federation",
                fix=f"{facts.cli_command()} federate init --name NAME, then restart the daemon",
            )
        return found

    # --- invitations (approval 1 on the invitee) ----------------------------------------------

    async def invite(self, request: Request, actor: str) -> Any:
        body = await parse_body(request, Invite)
        return await self.desk().invite(body.expires, actor=actor)

    async def revoke(self, request: Request, actor: str) -> Any:
        await parse_body(request, B.Empty)
        return await self.desk().revoke(request.path_params["invitation"], actor=actor)

    async def accept(self, request: Request, actor: str) -> Any:
        body = await parse_body(request, Accept)
        return await self.desk().accept(body.code, name=body.name, actor=actor)

    # --- requests (approval 2) ----------------------------------------------------------------

    async def requests(self, request: Request, actor: str) -> Any:
        query = Query(request, {"all"})
        return self.desk().requests(include_decided=query.flag("all"))

    async def approve(self, request: Request, actor: str) -> Any:
        body = await parse_body(request, Approve)
        return await self.desk().approve(request.path_params["who"], name=body.name, actor=actor)

    async def decline(self, request: Request, actor: str) -> Any:
        await parse_body(request, B.Empty)
        return await self.desk().decline(request.path_params["who"], actor=actor)

    # --- pairings -----------------------------------------------------------------------------

    async def pairings(self, request: Request, actor: str) -> Any:
        Query(request, set())
        return self.desk().pairings()

    async def pairing(self, request: Request, actor: str) -> Any:
        Query(request, set())
        return self.desk().pairing(request.path_params["who"])

    async def remove(self, request: Request, actor: str) -> Any:
        await parse_body(request, B.Empty)
        return await self.desk().remove(request.path_params["who"], actor=actor)

    async def settings(self, request: Request, actor: str) -> Any:
        body = await parse_body(request, SetSettings)
        return await self.desk().set_settings(request.path_params["who"], body.set, actor=actor)

    # --- this box's federation ----------------------------------------------------------------

    async def reload(self, request: Request, actor: str) -> Any:
        await parse_body(request, B.Empty)
        return await self.desk().reload(actor=actor)

    async def agents(self, request: Request, actor: str) -> Any:
        Query(request, set())
        found = self.federation()
        return [] if found is None else found.remote_agents()

    async def status(self, request: Request, actor: str) -> Any:
        query = Query(request, {"checks"})
        return await self.desk().checked_status() if query.flag("checks") else self.desk().status()

    def table(self) -> list[tuple[str, Handler, list[str]]]:
        get, post = ["GET"], ["POST"]
        return [
            ("/api/pairing/invitations", self.invite, post),
            ("/api/pairing/invitations/{invitation}/revoke", self.revoke, post),
            ("/api/pairing/accept", self.accept, post),
            ("/api/pairing/requests", self.requests, get),
            ("/api/pairing/requests/{who}/approve", self.approve, post),
            ("/api/pairing/requests/{who}/decline", self.decline, post),
            ("/api/pairing/pairings", self.pairings, get),
            ("/api/pairing/pairings/{who}", self.pairing, get),
            ("/api/pairing/pairings/{who}/remove", self.remove, post),
            ("/api/pairing/pairings/{who}/settings", self.settings, post),
            ("/api/pairing/status", self.status, get),
            ("/api/pairing/agents", self.agents, get),
            ("/api/pairing/reload", self.reload, post),
        ]


def federation_routes(
    federation: Callable[[], PairingDesk | None], calls: AgentCalls, auth: OwnerAuth
) -> list[BaseRoute]:
    """The routes; ``federation``: the pairing desk, once the box federates (read at each request), else None;
    ``calls``: what authenticates the owner (:func:`connectd.edges.http.owner_auth.owner_endpoint`)."""
    table = PairingApi(federation).table()
    return [Route(path, owner_endpoint(calls, auth, fn), methods=methods) for path, fn, methods in table]
