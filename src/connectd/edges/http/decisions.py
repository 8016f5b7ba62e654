"""The owner API's cards and acts: what waits for the person and their answers (``/api/cards``,
``/api/needs``, ``/api/acts``, their approve and decline, ``/api/control/stop``). Mounted by
:class:`connectd.edges.http.routes.OwnerApi`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.requests import Request

from connectcore.consent import Decision
from connectd.edges.http import bodies as B
from connectd.edges.http.bodies import Query, parse_body

if TYPE_CHECKING:
    from connectd.person import PersonCalls


class Decisions:
    """The handlers, each ``(request, actor) -> JSON-able``; the person's calls decide."""

    def __init__(self, *, person: PersonCalls) -> None:
        self.person = person

    async def cards(self, request: Request, actor: str) -> Any:
        query = Query(request, {"all"})
        return self.person.cards(include_closed=query.flag("all"))

    async def needs(self, request: Request, actor: str) -> Any:
        Query(request, set())
        return self.person.needs_you()

    async def approve(self, request: Request, actor: str) -> Any:
        body = await parse_body(request, B.Approve)
        decision = Decision.APPROVE_PAIR if body.pair else Decision.APPROVE_ONCE
        return await self.person.decide(request.path_params["card_id"], decision, by=actor)

    async def decline(self, request: Request, actor: str) -> Any:
        await parse_body(request, B.Empty)
        return await self.person.decide(request.path_params["card_id"], Decision.DECLINE, by=actor)

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
