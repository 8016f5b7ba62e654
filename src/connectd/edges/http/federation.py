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


def federation_routes(
    federation: Callable[[], PairingDesk | None], calls: AgentCalls, auth: OwnerAuth
) -> list[BaseRoute]:
    """The routes; ``federation``: the pairing desk, once the box federates (read at each request), else None;
    ``calls``: what authenticates the owner (:func:`connectd.edges.http.owner_auth.owner_endpoint`)."""

    def desk() -> PairingDesk:
        found = federation()
        if found is None:
            raise Problem(
                409, "not_federated", "this box is not set up for federation",
                fix=f"{facts.cli_command()} federate init --name NAME, then restart the daemon",
            )
        return found

    async def invite(request: Request, actor: str) -> Any:
        body = await parse_body(request, Invite)
        return await desk().invite(body.expires, actor=actor)

    async def revoke(request: Request, actor: str) -> Any:
        await parse_body(request, B.Empty)
        return await desk().revoke(request.path_params["invitation"], actor=actor)

    async def accept(request: Request, actor: str) -> Any:
        body = await parse_body(request, Accept)
        return await desk().accept(body.code, name=body.name, actor=actor)

    async def requests(request: Request, actor: str) -> Any:
        query = Query(request, {"all"})
        return desk().requests(include_decided=query.flag("all"))

    async def approve(request: Request, actor: str) -> Any:
        body = await parse_body(request, Approve)
        return await desk().approve(request.path_params["who"], name=body.name, actor=actor)

    async def decline(request: Request, actor: str) -> Any:
        await parse_body(request, B.Empty)
        return await desk().decline(request.path_params["who"], actor=actor)

    async def pairings(request: Request, actor: str) -> Any:
        Query(request, set())
        return desk().pairings()

    async def pairing(request: Request, actor: str) -> Any:
        Query(request, set())
        return desk().pairing(request.path_params["who"])

    async def reload(request: Request, actor: str) -> Any:
        await parse_body(request, B.Empty)
        return await desk().reload(actor=actor)

    async def agents(request: Request, actor: str) -> Any:
        Query(request, set())
        found = federation()
        return [] if found is None else found.remote_agents()

    async def status(request: Request, actor: str) -> Any:
        query = Query(request, {"checks"})
        return await desk().checked_status() if query.flag("checks") else desk().status()

    async def remove(request: Request, actor: str) -> Any:
        await parse_body(request, B.Empty)
        return await desk().remove(request.path_params["who"], actor=actor)

    async def settings(request: Request, actor: str) -> Any:
        body = await parse_body(request, SetSettings)
        return await desk().set_settings(request.path_params["who"], body.set, actor=actor)

    get, post = ["GET"], ["POST"]
    table: list[tuple[str, Handler, list[str]]] = [
        ("/api/pairing/invitations", invite, post),
        ("/api/pairing/invitations/{invitation}/revoke", revoke, post),
        ("/api/pairing/accept", accept, post),
        ("/api/pairing/requests", requests, get),
        ("/api/pairing/requests/{who}/approve", approve, post),
        ("/api/pairing/requests/{who}/decline", decline, post),
        ("/api/pairing/pairings", pairings, get),
        ("/api/pairing/pairings/{who}", pairing, get),
        ("/api/pairing/pairings/{who}/remove", remove, post),
        ("/api/pairing/pairings/{who}/settings", settings, post),
        ("/api/pairing/status", status, get),
        ("/api/pairing/agents", agents, get),
        ("/api/pairing/reload", reload, post),
    ]
    return [Route(path, owner_endpoint(calls, auth, fn), methods=methods) for path, fn, methods in table]
