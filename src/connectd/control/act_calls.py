"""Control's act tools, as the MCP endpoint calls them: each looks up what the core needs (the target
pane, what it shows, a past session's directory) and steps ``ActProposed``; the core decides.

Every tool passes the gate first with the ``act`` scope (:data:`connectcore.reads.CALL_SCOPES`): only
the control role holds it. The proposal's step writes the call's audit record (tier, target, outcome).
Each answers the act's id, its state and what its card shows; ``get_act`` reads the outcome.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

import anyio

from connectcore import control as C
from connectcore import directory as D
from connectcore import grants
from connectcore import history as HI
from connectcore import hub as H
from connectcore import reads as R
from connectcore.hub import acts as hub_acts
from connectd.daemon.ids import EngineError, hash_token
from connectd.delivery import targets

if TYPE_CHECKING:
    from connectcore import launchers as L
    from connectd.agents.agent_calls import AgentCalls
    from connectd.daemon.ids import Ids
    from connectd.daemon.runner import Core, RunSync
    from connectd.tmux.watcher import Watcher

Prepare = Callable[[grants.Principal], Awaitable[dict[str, Any]]]  # given the admitted caller


def act_view(act: C.Act) -> dict[str, Any]:
    return {
        "act_id": act.id,
        "tool": act.tool.value,
        "tier": act.tier,
        "state": act.state.value,
        "shown": act.shown,
        "target": f"{act.pane_id}@{act.incarnation}" if act.pane_id else "new window",
        "detail": act.detail,
        "created_at": act.created_at,
        "expires_at": act.expires_at,
        "final_at": act.final_at,
    }


class ActCalls:
    def __init__(
        self,
        *,
        calls: AgentCalls,
        core: Core,
        clock: Callable[[], float],
        ids: Ids,
        run_sync: RunSync,
        store: Any,
        watcher: Watcher,
        launchers: Mapping[str, L.Launcher],
        history: Any | None,
    ) -> None:
        self.calls, self.core, self.clock, self.ids, self.run_sync = calls, core, clock, ids, run_sync
        self.store, self.watcher, self.launchers, self.history = store, watcher, launchers, history

    def _target(self, to: str) -> tuple[H.Recipient, C.QuestionShown | None]:
        """The pane ``to`` names now, and the question it shows (if any)."""
        record = targets.resolve_in(self.watcher.directory, self.core.hub.book, to)
        state = self.watcher.panes.get(record.pane_id)
        reading = state.reading if state is not None else None
        kind = D.recipient_harness(reading.harness.value if reading is not None else None, recorded=record.harness)
        question = ((reading.question.prompt, reading.question.options, reading.question.subject, reading.question.selected)
                    if reading and reading.question else None)
        return H.Recipient(record.pane_id, record.token, kind, D.handle_of(to)), question

    async def _propose(
        self, token: str, tool: C.Tool, to: str | None, args: Mapping[str, Any] | Prepare, where: str = ""
    ) -> dict[str, Any]:
        """Past the gate (a refusal after it, e.g. an unknown launcher or session, is audited as the
        call's outcome), look up what the core needs and step the proposal."""
        role = f"role=control tier={C.tier_of(tool)}"  # a refusal after the gate names them too
        async with self.calls.call(token, tool.value, where or str(to or "new window"), detail=role) as admitted:
            if callable(args):
                args = await args(admitted.principal)
            target, question = self._target(to) if to else (None, None)
            act_id = self.ids.new_id("act")
            await self.core.step(H.ActProposed(self.clock(), hash_token(token), act_id, tool, target, args, question))
            return act_view(self.core.hub.acts[act_id])

    async def send_keys(self, token: str, to: str, keys: list[str]) -> dict[str, Any]:
        return await self._propose(token, C.Tool.SEND_KEYS, to, {"keys": keys})

    async def shell_text(self, token: str, to: str, text: str) -> dict[str, Any]:
        return await self._propose(token, C.Tool.SHELL_TEXT, to, {"text": text})

    async def close_pane(self, token: str, to: str) -> dict[str, Any]:
        return await self._propose(token, C.Tool.CLOSE_PANE, to, {})

    async def launch_agent(self, token: str, launcher: str, cwd: str, preset: str = "off") -> dict[str, Any]:
        async def args(_caller: grants.Principal) -> dict[str, Any]:
            if launcher not in self.launchers:
                known = ", ".join(sorted(self.launchers))
                raise EngineError("unknown_launcher", f"no launcher named {launcher!r} (known: {known})")
            return {"launcher": launcher, "cwd": cwd, "preset": preset}

        return await self._propose(token, C.Tool.LAUNCH_AGENT, None, args, launcher)

    async def resume_session(self, token: str, harness: str, session_id: str) -> dict[str, Any]:
        async def args(caller: grants.Principal) -> dict[str, Any]:
            return {"harness": harness, "session_id": session_id, "cwd": await self._session_cwd(caller, harness, session_id)}

        return await self._propose(token, C.Tool.RESUME_SESSION, None, args, f"{harness}:{session_id}")

    async def handoff(self, token: str, text: str, to: str | None = None, session: str | None = None) -> dict[str, Any]:
        """Message the pane ``to`` names, or the pane holding ``session`` (``harness:id``); a session no pane
        holds is resumed in a new window first."""
        if (to is None) == (session is None):
            raise EngineError("bad_target", "handoff takes either to (a pane) or session (harness:session_id)")
        if session is not None:
            harness, _, session_id = session.partition(":")
            live = C.handoff_pane(D.bound_sessions(self.watcher.directory), harness, session_id)
            if live is None:
                async def args(caller: grants.Principal) -> dict[str, Any]:
                    cwd = await self._session_cwd(caller, harness, session_id)
                    return {"harness": harness, "session_id": session_id, "cwd": cwd, "text": text}

                return await self._propose(token, C.Tool.HANDOFF, None, args, session)
            to = live
        return await self._propose(token, C.Tool.HANDOFF, to, {"text": text})

    async def _session_cwd(self, caller: grants.Principal, harness: str, session_id: str) -> str:
        """The past session's directory, if the caller may read that session: the same rule as
        ``get_session`` (:func:`connectcore.history.check_readable` on the caller's repositories), so
        a session control cannot read is one it cannot resume nor see the directory of."""
        history = self.history
        if history is None:
            raise EngineError("history_unavailable", "the session history index is not available on this daemon")
        entry = await self.run_sync(lambda: history.get_entry(harness, session_id))
        HI.check_readable(entry, await self.calls.history_scope(caller, history))
        return str(entry.cwd)

    async def get_act(self, token: str, act_id: str, wait: float = 0.0) -> dict[str, Any]:
        """An act control asked for, by id; with ``wait`` (seconds, at most 60) until it is final."""
        core = self.core
        async with self.calls.call(token, "get_act", act_id) as admitted:
            with anyio.move_on_after(R.bounded_wait(wait)):
                while (act := core.hub.acts.get(act_id)) is not None and not act.is_final:
                    await anyio.sleep(0.2)
            stored: list[C.Act] = []
            if act_id not in core.hub.acts:  # the hub keeps a final act an hour; the store for good
                stored = await self.run_sync(lambda: self.store.acts(limit=1000))
            found = hub_acts.act_for(core.hub, admitted.principal.id, act_id, stored)
            if found is None:
                return {"act_id": act_id, "state": "unknown", "note": "no such act for this agent"}
            return act_view(found)
