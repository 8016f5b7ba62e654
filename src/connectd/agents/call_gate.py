"""The gate every agent call passes: the core's gate first, then one audit record per call.

:class:`GatedCalls` is the base of :class:`connectd.agents.agent_calls.AgentCalls` and of each of its
tool groups (:mod:`connectd.agents.directory_calls`, :mod:`connectd.agents.history_calls`,
:mod:`connectd.agents.message_calls`): every call passes :func:`connectcore.reads.gate` (a live token
and the call's scope) before anything is looked up, and gets one audit record when its outcome is
known (:meth:`GatedCalls.call`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from connectcore import grants
from connectcore import hub as H
from connectcore import reads as R
from connectd.daemon.ids import hash_token

if TYPE_CHECKING:
    from connectd.daemon.parts import Engine


class GatedCalls:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def principal_for(self, token: str) -> grants.Principal | None:
        """The principal a bearer token names, even a revoked one (the transport lets it in, so its
        calls are told "not connected")."""
        record = self.engine.hub.book.tokens.get(hash_token(token))
        if record is None:
            return None
        return self.engine.hub.book.principals[grants.canonical(self.engine.hub.book, record.principal)]

    async def gate(self, token: str, action: str, target: str = "", message_id: str | None = None) -> R.Admitted:
        """The core's gate; a refusal is audited (with the actor the core names) and raised."""
        engine = self.engine
        try:
            return R.gate(
                engine.hub, token_hash=hash_token(token), action=action, now=engine.clock(), target=target, message_id=message_id
            )
        except H.CallRefused as refused:
            await engine.audit(refused.audit)
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
            await self.engine.audit(admitted.refused(f"{detail} {reason}" if detail else reason))
            raise
        allowed = admitted.allowed()
        if allowed is not None:
            await self.engine.audit(allowed)
