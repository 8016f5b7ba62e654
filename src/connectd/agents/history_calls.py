"""The agent calls that search past sessions (``find_sessions``, ``get_session``, ``resolve``), within
the repositories the core lets the caller read (:func:`connectcore.history.caller_repos`)."""

from __future__ import annotations

from typing import Any

from connectcore import grants
from connectcore import history as HI
from connectcore import reads as R
from connectcore import routing as RT
from connectd.agents.call_gate import GatedCalls
from connectd.daemon.ids import EngineError


class HistoryCalls(GatedCalls):
    async def resolve(self, token: str, history: Any | None, query: str, limit: int) -> list[dict[str, Any]]:
        """Live panes and past sessions for a free-text request (:func:`connectcore.routing.rank_request`):
        the caller's history search (its scope) joined with the live directory and, on a federated box,
        the agents the paired boxes share (what ``list_agents`` shows)."""
        async with self.call(token, "resolve", query) as admitted:
            HI.query_terms(query)  # a request with no searchable words is refused
            past: list[dict[str, Any]] = []
            if history is not None:
                allowed = await self.history_scope(admitted.principal, history)
                past = await self.run_sync(
                    lambda: history.find_sessions(query, limit=RT.RESOLVE_LIMIT_MAX, allowed_repos=allowed)
                )
            remote = self.remote.listing() if self.remote is not None else ()
            return RT.rank_request(query, self.watcher.directory.records(), past, limit=limit, remote=remote)

    async def find_sessions(
        self, token: str, history: Any | None, query: str, repo: str | None, limit: int, box: str | None = None
    ) -> list[dict[str, Any]]:
        if box is not None:  # another box's history, answered under that box's own setting for this pairing
            async with self.call(token, "find_sessions", f"{query} box={box}") as admitted:
                if self.remote is None:
                    raise EngineError("unknown_box", "this box is not federated: it has no paired box to ask")
                return await self.remote.find_sessions(
                    grants.actor_name(admitted.principal), box=box, query=query, repo=repo, limit=limit
                )
        async with self.call(token, "find_sessions", query) as admitted:
            service = _service(history)
            allowed = await self.history_scope(admitted.principal, service)
            found: list[dict[str, Any]] = await self.run_sync(
                lambda: service.find_sessions(query, repo=repo, limit=limit, allowed_repos=allowed)
            )
            return found

    async def get_session(
        self, token: str, history: Any | None, harness: str, session_id: str, box: str | None = None
    ) -> dict[str, Any]:
        if box is not None:  # another box's session, answered under that box's own setting for this pairing
            async with self.call(token, "get_session", f"{harness}:{session_id} box={box}") as admitted:
                if self.remote is None:
                    raise EngineError("unknown_box", "this box is not federated: it has no paired box to ask")
                return await self.remote.get_session(
                    grants.actor_name(admitted.principal), box=box, harness=harness, session_id=session_id
                )
        async with self.call(token, "get_session", f"{harness}:{session_id}") as admitted:
            service = _service(history)
            allowed = await self.history_scope(admitted.principal, service)
            found: dict[str, Any] = await self.run_sync(
                lambda: service.get_session(harness, session_id, allowed_repos=allowed)
            )
            return found

    async def history_scope(self, principal: grants.Principal, service: Any) -> frozenset[str]:
        """The repositories the caller may read (the core's rule), from its own pane's directory."""
        record = R.own_record(self.watcher.directory, self.core.hub.book, principal)
        cwd = record.cwd if record is not None else ""
        own: str | None = await self.run_sync(service.repo_of, cwd) if cwd else None
        return HI.caller_repos(own)


def _service(history: Any | None) -> Any:
    if history is None:
        raise EngineError("history_unavailable", "the session history index is not available on this daemon")
    return history
