"""The person's pairing steps (a part of the pairing desk, :mod:`connectd.federation.desk`): ``pair
invite`` (and ``--revoke``), ``approve`` and ``decline`` on the inviter, ``accept`` on the invitee,
``remove`` and ``set`` on both, and the expiry tick. Each runs the core's step
(:mod:`connectcore.federation.pairing`) under the ledger's lock and commits it with the wires it owes
(:class:`~connectd.federation.ledger.PairLedger`); the rules are the core's.

- ``pair accept`` pins the inviter's keys from the code and owes a ``pair_request`` (sealed to the
  inviter, holding the code's secret), published again every ``resend`` seconds until an answer comes or
  the pairing ends. Accepting a code again returns the pairing it made (a repeat); a code whose
  invitation this box used with other keys is refused (the core's P13: ``check_code_not_own``,
  ``code_repeat``, ``accept_code``). The expiry tick settles the requests of the pairings it ended
  (``pairings_ended``, P15).
- ``pair approve`` / ``decline`` owe the ``pair_accept`` / ``pair_decline``.
- ``pair remove`` owes a signed ``unpair`` and puts a signed tombstone in its directory key for that
  box (the core's P18: ``removal_notice``; the put is the directory desk's,
  :meth:`connectd.federation.directory.RemoteDirectoryDesk.removed`).

What is queued across a pairing that ends, or whose messages are set off, ends through the engine's side
of message envelopes (``messages``: :class:`connectd.federation.flow.RemoteFlow`, a callable: it is
joined after the desk is built, and None on a desk joined to no engine), once the step is durable and
outside the lock.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from connectcore.federation import envelope as E
from connectcore.federation import pairing as P
from connectd.daemon.ids import EngineError
from connectd.federation.ledger import PairLedger
from connectd.federation.seal import LocalBox
from connectd.federation.views import PairingViews
from connectd.store.pair_records import Wire

if TYPE_CHECKING:
    from connectd.federation.settings import Settings

T = TypeVar("T")


def _named(find: Callable[[P.PairBook, str], T], book: P.PairBook, who: str) -> T:
    """What ``who`` names in the book, by the core's lookup (pairing.py, P11); a refusal is the engine's
    (a 400, or 409 ``ambiguous``, as the owner API has always answered it)."""
    try:
        return find(book, who)
    except P.PairingError as refused:
        raise EngineError(str(refused.reason), str(refused)) from None


class PairingSteps:
    """The person's steps on the book (one at a time, each durable before it shows), and the expiry tick."""

    def __init__(
        self,
        ledger: PairLedger,
        local: LocalBox,
        views: PairingViews,
        *,
        settings: Callable[[], Settings],
        messages: Callable[[], Any],
        directory: Callable[[], Any] = lambda: None,
    ) -> None:
        self.ledger, self.local, self.views, self.settings, self.messages = ledger, local, views, settings, messages
        self.directory = directory  # the directory across boxes (its tombstone on removal), once attached

    # --- the inviter ----------------------------------------------------------------------------

    async def invite(self, expires_in: float = P.DEFAULT_EXPIRES, *, actor: str = P.OWNER) -> dict[str, Any]:
        """A new invitation; the code (with its secret) is in this answer only. ``actor``, here and in
        every person's step below, is who took it, as the owner API resolved them (the audit actor)."""
        ledger = self.ledger
        secret = ledger.draw.token_bytes(P.SECRET_BYTES)
        async with ledger.lock:
            book, effects = P.invite(
                ledger.book, invitation_id=ledger.draw.token_hex(16), secret_hash=P.secret_hash(secret),
                now=ledger.clock(), expires_in=expires_in, actor=actor,
            )
            invitation = next(i for i in book.invitations.values() if i.id not in ledger.book.invitations)
            await ledger.commit(book, effects)
        code = P.Code(self.local.box_id, self.settings().name, self.local.keys, invitation.id, secret,
                      int(invitation.expires_at))
        return {"code": P.encode_code(code), "invitation": invitation.id, "expires_at": int(invitation.expires_at),
                **self.views.this_box()}

    async def revoke(self, invitation_id: str, *, actor: str = P.OWNER) -> dict[str, Any]:
        """Withdraw an open invitation (``pair invite --revoke ID``); its pending requests are refused."""
        ledger = self.ledger
        async with ledger.lock:
            book, effects = P.revoke_invitation(ledger.book, invitation_id, now=ledger.clock(), actor=actor)
            await ledger.commit(book, effects)
            invitation = book.invitations[invitation_id]
            return {"invitation": invitation.id, "state": str(invitation.state)}

    def answer_wire(self, book: P.PairBook, request: P.PairRequest) -> Wire | None:
        """The answer (``pair_accept`` / ``pair_decline``) the book owes ``request``, sealed; None if none yet."""
        answer = P.answer(book, request.id)
        if answer is None:
            return None
        kind = E.Kind(answer.kind)
        routing = E.Routing(kind, self.local.box_id, request.box_id, pairing=answer.pairing,
                            invitation=answer.invitation)
        return self.ledger.wire(f"answer:{request.id}", request, E.PairingInner(routing, (("at", answer.at),)))

    async def approve(self, who: str, *, name: str | None = None, actor: str = P.OWNER) -> dict[str, Any]:
        ledger = self.ledger
        async with ledger.lock:
            request = _named(P.pending_request, ledger.book, who)
            book, effects = P.approve(ledger.book, request.id, pairing_id=ledger.draw.token_hex(16),
                                      now=ledger.clock(), name=name, actor=actor)
            wire = self.answer_wire(book, request)
            await ledger.commit(book, effects, [wire] if wire else [])
            return self.views.pairing_view(book.pairings[request.invitation])

    async def decline(self, who: str, *, actor: str = P.OWNER) -> dict[str, Any]:
        ledger = self.ledger
        async with ledger.lock:
            request = _named(P.pending_request, ledger.book, who)
            book, effects = P.decline(ledger.book, request.id, now=ledger.clock(), actor=actor)
            wire = self.answer_wire(book, request)
            await ledger.commit(book, effects, [wire] if wire else [])
            return self.views.request_view(book.requests[request.id])

    # --- the invitee ----------------------------------------------------------------------------

    async def accept(self, text: str, *, name: str | None = None, actor: str = P.OWNER) -> dict[str, Any]:
        """Approval 1: pin the inviter's keys from the code and owe its pair_request. The same code
        again returns the pairing it made and changes nothing."""
        code = P.check_code_not_own(P.decode_code(text), self.local.box_id)
        ledger, views = self.ledger, self.views
        async with ledger.lock:
            made = P.code_repeat(ledger.book, code)
            if made is not None:
                return {**views.pairing_view(made), "repeat": True, "this_box": views.this_box()}
            book, effects = P.accept_code(
                ledger.book, invitation_id=code.invitation, keys=code.keys, name=code.name if name is None else name,
                expires_at=float(code.expires_at), now=ledger.clock(), actor=actor,
            )
            pairing = book.pairings[code.invitation]
            settings = self.settings()
            routing = E.Routing(E.Kind.PAIR_REQUEST, self.local.box_id, code.box, invitation=code.invitation)
            inner = E.PairingInner(routing, (("name", settings.name), ("secret", E.b64(code.secret))))
            wire = ledger.wire(f"request:{code.invitation}", pairing, inner, resend=settings.resend)
            await ledger.commit(book, effects, [wire])
            return {**views.pairing_view(pairing), "repeat": False, "this_box": views.this_box()}

    # --- both -----------------------------------------------------------------------------------

    async def remove(self, who: str, *, actor: str = P.OWNER) -> dict[str, Any]:
        """Remove a pairing for good, owe the other box a signed unpair and put a signed tombstone in
        this box's directory key for it (what the core's P18 says a removal owes)."""
        ledger = self.ledger
        async with ledger.lock:
            pairing = _named(P.pairing_named, ledger.book, who)
            now = ledger.clock()
            book, effects = P.remove(ledger.book, pairing.invitation, now=now, actor=actor)
            removed = book.pairings[pairing.invitation]
            wires = [Wire.settled(f"request:{pairing.invitation}")]  # nothing more to ask
            owed = P.removal_notice(removed)
            if owed is not None:
                routing = E.Routing(E.Kind.UNPAIR, self.local.box_id, pairing.box_id, pairing=owed)
                inner = E.PairingInner(routing, (("at", now), ("reason", "removed by its owner")))
                wires.append(ledger.wire(f"unpair:{owed}", pairing, inner))
            await ledger.commit(book, effects, wires)
        await self.removed(removed)
        directory = self.directory()
        if directory is not None:  # the tombstone (put now if the bus is there, else when its loop starts)
            await directory.removed(removed)
        return self.views.pairing_view(removed)

    async def removed(self, pairing: P.Pairing) -> None:
        """What is queued across a pairing the book removed ends (the hub's ``PairingRemoved``, under
        the send locks: :meth:`connectd.federation.flow.RemoteFlow.pairing_removed`), outside the desk's
        lock, once the removal is durable."""
        messages = self.messages()
        if messages is not None:
            await messages.pairing_removed(pairing)

    async def set_settings(self, who: str, words: Sequence[str], *, actor: str = P.OWNER) -> dict[str, Any]:
        """``pair set BOX KEY=VALUE...``: the pairing's settings (the core's step checks every word, all
        or none); what arrives from that box is judged with them from the next message on. ``messages=off``
        also cancels what this box holds from that box and has not started typing, under the send locks
        (:meth:`connectd.federation.flow.RemoteFlow.messages_off`), once the setting is durable and
        outside the desk's lock, as a removal."""
        ledger = self.ledger
        async with ledger.lock:
            pairing = _named(P.pairing_named, ledger.book, who)
            book, effects = P.set_settings(ledger.book, pairing.invitation, words, now=ledger.clock(), actor=actor)
            await ledger.commit(book, effects)
            updated = book.pairings[pairing.invitation]
        messages = self.messages()
        if messages is not None:  # it steps MessagesOff only if the core says one is owed
            await messages.messages_off(updated)
        return self.views.pairing_view(updated)

    async def tick(self) -> None:
        """Expire what is past its time (open invitations, requested pairings never answered)."""
        ledger = self.ledger
        async with ledger.lock:
            book, effects = P.expire(ledger.book, now=ledger.clock())
            if effects:
                ended = P.pairings_ended(ledger.book, book)
                await ledger.commit(book, effects, [Wire.settled(f"request:{p.invitation}") for p in ended])
