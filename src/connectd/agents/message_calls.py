"""The agent calls about messages (``send_message``, ``get_message``, ``list_messages``) and what a
sender is told about its message (:func:`message_view`)."""

from __future__ import annotations

from typing import Any

import anyio

from connectcore import directory as D
from connectcore import grants
from connectcore import hub as H
from connectcore import reads as R
from connectcore.delivery import Message
from connectd.agents.call_gate import GatedCalls
from connectd.daemon.ids import hash_token
from connectd.delivery import targets


class MessageCalls(GatedCalls):
    async def send_message(
        self, token: str, *, to: str, text: str, message_id: str, in_reply_to: str | None = None
    ) -> dict[str, Any]:
        """Admit a message (answer ``queued`` or a final outcome) or refuse it before admission."""
        core = self.core
        async with self.call(token, "send_message", str(to), message_id) as admitted:
            if self.remote is not None:
                sent = await self.remote.send(
                    token, admitted.principal.id, to=to, text=text, message_id=message_id, in_reply_to=in_reply_to
                )
                if not isinstance(sent, str):  # to an agent on another box: its outbox row's view
                    return sent
                to = sent  # this box's (a qualification by its own name dropped)
            record = targets.resolve_in(self.watcher.directory, core.hub.book, to)
            recipient = H.Recipient(record.pane_id, record.token, self.watcher.harness_of(record), D.handle_of(to))
            submit = H.Submit(
                self.clock(), hash_token(token), message_id, text, recipient,
                self.ids.new_id("msg"), self.ids.new_id("card"), in_reply_to,
            )
            await core.step(submit)
            message = H.message_for(core.hub, admitted.principal.id, message_id)
            assert message is not None
            return message_view(message, R.sender_reason(core.hub, message))

    async def get_message(self, token: str, message_id: str, wait: float = 0.0) -> dict[str, Any]:
        """The message's current outcome; with ``wait``, wait for it to be final, returning early when
        a message arrives for the caller (:func:`connectcore.reads.wait_over`)."""
        async with self.call(token, "get_message", message_id) as admitted:
            remote = None if self.remote is None else await self.remote.get(
                admitted.principal.id, message_id, wait, lambda: self.gate(token, "get_message", message_id)
            )
            return remote or await self._await_outcome(token, admitted.principal.id, message_id, wait)

    async def _await_outcome(self, token: str, principal_id: str, message_id: str, wait: float) -> dict[str, Any]:
        core = self.core
        deadline = anyio.current_time() + R.bounded_wait(wait)
        woken = False
        while True:
            message = H.message_for(core.hub, principal_id, message_id)
            if message is None:
                return await self._stored(principal_id, message_id)
            inbox = R.inbox(core.hub, principal_id, self.clock())
            if R.wait_over(message, inbox, timed_out=anyio.current_time() >= deadline, woken=woken):
                return message_view(message, R.sender_reason(core.hub, message)) | {
                    "inbox": [{"ref": m.ref, "from": m.sender_actor, "in_reply_to": m.in_reply_to} for m in inbox],
                    "replies": [
                        {"ref": m.ref, "from": m.sender_actor, "outcome": m.outcome} for m in R.replies(core.hub, message.ref)
                    ],
                }
            event = anyio.Event()
            self.subscribers.waits.setdefault(principal_id, set()).add(event)
            with anyio.move_on_after(deadline - anyio.current_time()):
                await event.wait()
            woken = True
            await self.gate(token, "get_message", message_id)  # revoked meanwhile: refused, audited

    async def _stored(self, principal_id: str, message_id: str) -> dict[str, Any]:
        stored = await self.run_sync(self.store.message, principal_id, message_id)
        if stored is None:
            return {"message_id": message_id, "outcome": "unknown", "note": "no such message id for this agent; treat it as unconfirmed"}
        return message_view(stored)

    async def list_messages(self, token: str) -> list[dict[str, Any]]:
        async with self.call(token, "list_messages") as admitted:
            members = grants.group(self.core.hub.book, admitted.principal.id)
            rows = await self.run_sync(lambda: self.store.messages(principal=members, limit=200))
            return [message_view(m, R.sender_reason(self.core.hub, m)) for m in rows]


def message_view(message: Message, reason: str | None = None) -> dict[str, Any]:
    """What a sender is told about its message (its own text is not echoed back); ``reason`` is
    :func:`connectcore.reads.sender_reason`'s (the stored reason when the hub no longer holds it)."""
    return {
        "message_id": message.id,
        "ref": message.ref,
        "outcome": message.outcome,
        "reason": message.reason if reason is None else reason,
        "to": f"{message.recipient_pane}@{message.recipient_incarnation}",
        "from": message.sender_actor,
        "hop": message.hop,
        "conversation": message.conversation,
        "in_reply_to": message.in_reply_to,
        "created_at": message.created_at,
        "final_at": message.final_at,
    }
