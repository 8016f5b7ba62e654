"""The owner API's paged listings: ``/api/messages`` (this box's messages and its outbox, in one order)
and ``/api/audit``. Mounted by :class:`connectd.edges.http.routes.OwnerApi`."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio
from starlette.requests import Request

from connectcore import reads as R
from connectcore.delivery import Message
from connectcore.federation import outbox as O
from connectd.edges.http.bodies import Query, parse_pane
from connectd.edges.http.errors import owner_message_view, owner_sent_across_view
from connectd.edges.http.paging import (
    audit_cursor,
    encode_message_cursor,
    message_cursor,
    newest_first,
    page_response,
)
from connectd.store.remote_messages import listing_ref

if TYPE_CHECKING:
    from connectd.agents.agent_calls import AgentCalls


def _listing_place(m: Message | O.Row) -> tuple[float, str]:
    """Where a message or an outbox row sits in ``/api/messages``' order (its cursor)."""
    return (m.created_at, listing_ref(m.identity)) if isinstance(m, O.Row) else (m.created_at, m.ref)


class Listings:
    """The handlers, each ``(request, actor) -> JSON-able``; ``federation``: the pairing desk now, or None
    (a box that does not federate), read at each request for the names of other boxes."""

    def __init__(self, *, calls: AgentCalls, store: Any, federation: Callable[[], Any]) -> None:
        self.calls, self.store, self.federation = calls, store, federation

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
