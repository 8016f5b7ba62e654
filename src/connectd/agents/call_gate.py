"""The gate every agent call passes: the core's gate first, then one audit record per call.

:class:`GatedCalls` is the base of :class:`connectd.agents.agent_calls.AgentCalls` and of each of its
tool groups (:mod:`connectd.agents.directory_calls`, :mod:`connectd.agents.history_calls`,
:mod:`connectd.agents.message_calls`): every call passes :func:`connectcore.reads.gate` (a live token
and the call's scope) before anything is looked up, and gets one audit record when its outcome is
known (:meth:`GatedCalls.call`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from connectcore import grants
from connectcore import hub as H
from connectcore import reads as R
from connectd.daemon.ids import hash_token

if TYPE_CHECKING:
    from connectcore import launchers as L
    from connectd.agents.launch import Launches
    from connectd.daemon.ids import Ids
    from connectd.daemon.parts import Subscribers
    from connectd.daemon.runner import Core, RunSync
    from connectd.federation.remote_calls import RemoteCalls
    from connectd.person import PersonCalls
    from connectd.tmux.watcher import Watcher


class GatedCalls:
    """The gate, and what the agent calls' tool groups look things up in (given by the composition
    root, :mod:`connectd.daemon.parts`)."""

    def __init__(
        self,
        *,
        core: Core,
        clock: Callable[[], float],
        run_sync: RunSync,
        store: Any,
        ids: Ids,
        watcher: Watcher,
        subscribers: Subscribers,
        launchers: Mapping[str, L.Launcher],
        trusted_releases: frozenset[tuple[str, str]],
        launches: Launches,
        person: PersonCalls,
    ) -> None:
        self.core, self.clock, self.run_sync, self.store, self.ids = core, clock, run_sync, store, ids
        self.watcher, self.subscribers, self.launches, self.person = watcher, subscribers, launches, person
        self.launchers, self.trusted_releases = launchers, trusted_releases
        #: The calls to agents on other boxes (:class:`connectd.federation.remote_calls.RemoteCalls`),
        #: set by the daemon when the box federates; None: every target is this box's.
        self.remote: RemoteCalls | None = None

    def principal_for(self, token: str) -> grants.Principal | None:
        """The principal a bearer token names, even a revoked one (the transport lets it in, so its
        calls are told "not connected")."""
        book = self.core.hub.book
        record = book.tokens.get(hash_token(token))
        if record is None:
            return None
        return book.principals[grants.canonical(book, record.principal)]

    async def gate(self, token: str, action: str, target: str = "", message_id: str | None = None) -> R.Admitted:
        """The core's gate; a refusal is audited (with the actor the core names) and raised."""
        try:
            return R.gate(
                self.core.hub, token_hash=hash_token(token), action=action, now=self.clock(), target=target, message_id=message_id
            )
        except H.CallRefused as refused:
            await self.core.audit(refused.audit)
            raise

    @asynccontextmanager
    async def call(
        self, token: str, action: str, target: str = "", message_id: str | None = None, detail: str = ""
    ) -> AsyncIterator[R.Admitted]:
        """Pass the gate, run the call's body, write the call's one audit record: ``allowed``, or
        ``refused`` with the reason the body raised (a refusal already audited passes through)."""
        admitted = await self.gate(token, action, target[:200], message_id)
        try:
            yield admitted
        except H.CallRefused:
            raise  # audited where it was refused: the gate again, or the runner for a step
        except Exception as exc:
            reason = R.refusal_reason(exc)
            await self.core.audit(admitted.refused(f"{detail} {reason}" if detail else reason))
            raise
        allowed = admitted.allowed()
        if allowed is not None:
            await self.core.audit(allowed)
