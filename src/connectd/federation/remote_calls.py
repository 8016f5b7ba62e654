"""The agent calls about a message to an agent on another box (docs/federation.md, "On the sending
box"), as hooks of :mod:`connectd.agents.message_calls`: ``send_message`` to a target qualified by an
active pairing's name (``%4@<token>@devbox``, ``pr:12@devbox``), and ``get_message`` for such a
message. The rules are the core's: which box a target names (:func:`connectcore.federation.boxes.place`,
the ambiguity rule, weighing this box's directory and the entries the paired boxes share,
:meth:`connectd.federation.directory.RemoteDirectoryDesk.matches`: an unqualified handle naming panes
on more than one box is refused ``ambiguous``, one naming a pane on one paired box only goes there),
and the sending box's own rules with the outbox row (:class:`~connectcore.hub.RemoteSubmit`).
``list_agents`` shows the paired boxes' agents after this box's (:meth:`RemoteCalls.agents`), and
``get_agent`` answers for an agent on a paired box from that box's entry (:meth:`RemoteCalls.agent`).

- :func:`send` answers None when the target is this box's (the local send goes on, unchanged), and
  raises the core's refusal otherwise (``unknown_box``, ``ambiguous``, ``bad_target``, the gate's and
  the sending rules' ``CallRefused``), each changing nothing. A box that does not federate never gets
  here: its targets are read as ever.
- What the sender is told (:func:`row_view`): ``queued`` until the other box's final receipt, with
  what it waits for in words (:func:`connectcore.federation.outbox.waits_for`), then the receiver's
  outcome; :func:`get` waits for it as ``get_message`` waits for a local one.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio

from connectcore import directory as D
from connectcore import hub as H
from connectcore import reads as R
from connectcore._machine import ConnectError
from connectcore.federation import boxes as B
from connectcore.federation import envelope as E
from connectcore.federation import outbox as O
from connectcore.federation import pairing as P
from connectcore.federation import remote_history as RH
from connectd.daemon.ids import hash_token
from connectd.delivery import targets

if TYPE_CHECKING:
    from connectcore import grants
    from connectd.daemon.ids import Ids
    from connectd.daemon.parts import Subscribers
    from connectd.daemon.runner import Core
    from connectd.tmux.watcher import Watcher


class RemoteCallError(ConnectError):
    """A call about another box that this version does not make (``reason``); nothing changed."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def _active(desk: Any) -> dict[str, P.Pairing]:
    return {p.name: p for p in desk.book.active()}


def _here(directory: D.Directory, book: grants.GrantBook, target: D.Target) -> int:
    """How many live panes of this box an unqualified target names (what ``place`` weighs)."""
    try:
        targets.resolve_in(directory, book, str(target))
    except D.TargetError as refused:
        return refused.candidates
    return 1


def placed(desk: Any, directory: D.Directory, book: grants.GrantBook, to: str) -> tuple[B.Placed, P.Pairing | None]:
    """The box ``to`` names, by the core's rule, and its active pairing (None: this box); ``directory``
    and ``book``: this box's directory and grant book now."""
    active = _active(desk)
    found = B.readings(to, own_name=desk.settings.name, paired_names=active)
    remote = desk.directory  # the paired boxes' entries (connectd.federation.directory; slice 7)
    matches: dict[str, dict[str | None, int]] = {
        str(r.target): {None: _here(directory, book, r.target), **(remote.matches(r.target) if remote else {})}
        for r in found if not r.qualified
    }
    where = B.place(to, own_name=desk.settings.name, paired_names=active, matches=matches)
    return where, None if where.box is None else active[where.box]


def row_view(hub: H.Hub, row: O.Row, box_name: str) -> dict[str, Any]:
    """What a sender is told about its message to another box (:func:`connectcore.reads.sent_view`:
    the shape of a local message's answer, its own text not echoed back)."""
    return R.sent_view(hub, row, box_name)


def _row(hub: H.Hub, principal: str, message_id: str) -> O.Row | None:
    outbox: O.Outbox | None = hub.outbox
    if outbox is None:
        return None
    return outbox.rows.get(E.Identity(outbox.own, principal, message_id))


def _box_name(desk: Any, box: str) -> str:
    """What this box calls ``box`` (:func:`connectcore.federation.pairing.box_name`, one rule)."""
    return P.box_name(desk.book, box) if desk is not None else box


class RemoteCalls:
    """The agent calls' way to other boxes (``send_message`` and ``get_message`` to a target qualified
    by a pairing's name), given to :class:`connectd.agents.call_gate.GatedCalls` as ``remote`` when
    the box federates. It is given what it uses (issue 24): ``federation`` (a callable: the pairing desk
    now, or None), the core runner as ``core`` (the hub, ``step``), ``clock``, ``ids``, ``subscribers``
    (a ``get_message`` wait) and the ``watcher`` (this box's directory, for the ambiguity rule)."""

    def __init__(
        self, *, federation: Callable[[], Any], core: Core, clock: Callable[[], float], ids: Ids,
        subscribers: Subscribers, watcher: Watcher,
    ) -> None:
        self.federation, self.core, self.clock, self.ids = federation, core, clock, ids
        self.subscribers, self.watcher = subscribers, watcher

    def placed(self, to: str) -> tuple[B.Placed, P.Pairing | None]:
        """The box ``to`` names and its active pairing (:func:`placed`, on this box's directory now)."""
        return placed(self.federation(), self.watcher.directory, self.core.hub.book, to)

    def agents(self, view: tuple[dict[str, Any], ...]) -> tuple[dict[str, Any], ...]:
        """``list_agents``: this box's directory ``view``, then the agents the paired boxes share
        (:meth:`connectd.federation.directory.RemoteDirectoryDesk.listed`)."""
        directory = getattr(self.federation(), "directory", None)
        return view if directory is None else directory.listed(view)

    def listing(self) -> tuple[dict[str, Any], ...]:
        """The agents the paired boxes share now, as ``list_agents`` lists them (``resolve`` ranks them)."""
        directory = getattr(self.federation(), "directory", None)
        return () if directory is None else directory.listing()

    def agent(self, target: str) -> dict[str, Any] | str:
        """``get_agent`` for a target on a paired box (qualified by its name, or an unqualified handle
        naming panes there only, by the ambiguity rule of ``send_message``): the agent from that box's
        directory entry as this box holds it (``remote_directory.detail``, D9: read only, no screen,
        never a working directory). When the target is this box's, the target as this box resolves it
        (a qualification by this box's own name dropped). Refused as a local ``get_agent`` is
        (:class:`connectcore.directory.TargetError`: ``ambiguous`` across boxes, ``unknown_target``,
        ``no_pane``), changing nothing."""
        desk = self.federation()
        if desk is None:
            return target
        where, pairing = self.placed(target)
        if pairing is None or where.box is None:
            return str(where.target) if where.qualified else target
        directory = desk.directory
        if directory is None:  # (a federated box always has its directory desk: a guard)
            raise D.TargetError(D.TargetRefusal.UNKNOWN_TARGET, f"box {where.box} shares no agent now")
        found: dict[str, Any] = directory.detail(where.box, where.target)
        return found

    async def find_sessions(
        self, actor: str, *, box: str, query: str, repo: str | None, limit: int
    ) -> list[dict[str, Any]]:
        """``find_sessions`` with ``box=NAME``: asked of the box an active pairing's name names
        (:meth:`connectd.federation.history.RemoteHistoryDesk.ask`), its results with their box; or
        refused (``unknown_box``, ``not_shared``, ``refused``, ``no_answer``, a malformed query)."""
        desk = self.federation()
        pairing = _active(desk).get(box) if desk is not None else None
        if pairing is None or desk.history is None:
            raise RemoteCallError("unknown_box", f"no active pairing with a box named {box[:64]!r}")
        try:
            found: list[dict[str, Any]] = await desk.history.ask(pairing, asker=actor, text=query, repo=repo,
                                                                 limit=limit)
        except RH.RemoteHistoryRefused as refused:
            raise RemoteCallError(refused.reason, RH.refused_words(refused, pairing.name)) from None
        except RH.QueryRefused as refused:
            raise RemoteCallError(refused.reason, str(refused)) from None
        return found

    async def get_session(self, actor: str, *, box: str, harness: str, session_id: str) -> dict[str, Any]:
        """``get_session`` with ``box=NAME``: that one session asked of the box an active pairing's name
        names, through the same history request and under the same per-pairing setting as
        :meth:`find_sessions`; the session with its box, or refused (``unknown_box``, ``not_shared``,
        ``refused``, ``no_answer``, ``unknown_session``, a malformed harness or id)."""
        desk = self.federation()
        pairing = _active(desk).get(box) if desk is not None else None
        if pairing is None or desk.history is None:
            raise RemoteCallError("unknown_box", f"no active pairing with a box named {box[:64]!r}")
        session = (harness, session_id)
        try:
            found = await desk.history.ask(pairing, asker=actor, text="", repo=None, limit=1, session=session)
            return RH.session_result(found, session, pairing.name)
        except RH.RemoteHistoryRefused as refused:
            raise RemoteCallError(refused.reason, RH.refused_words(refused, pairing.name)) from None
        except RH.QueryRefused as refused:
            raise RemoteCallError(refused.reason, str(refused)) from None

    async def send(
        self, token: str, principal: str, *, to: str, text: str, message_id: str, in_reply_to: str | None
    ) -> dict[str, Any] | str:
        """``send_message`` to another box: its outbox row's view. When ``to`` is this box's, nothing is
        sent and the answer is the target as this box resolves it (a qualification by this box's own
        name dropped: ``boxes.place``)."""
        desk, core = self.federation(), self.core
        if desk is None or core.hub.outbox is None:
            return to
        where, pairing = self.placed(to)
        if pairing is None:
            return str(where.target) if where.qualified else to
        assert pairing.id is not None  # an active pairing has its id
        kind = "address" if isinstance(where.target, D.PaneAddress) else "handle"
        await core.step(H.RemoteSubmit(
            self.clock(), hash_token(token), message_id, text, (kind, str(where.target)), pairing.box_id, pairing.id,
            pairing.name, self.ids.new_id("msg"), secrets.token_bytes(E.NONCE_BYTES),
            bus_up=desk.messages.bus_up() if desk.messages is not None else False,
            in_reply_to=in_reply_to,
        ))
        row = _row(core.hub, principal, message_id)
        assert row is not None  # admitted: the step stored it
        return row_view(core.hub, row, pairing.name)

    async def get(
        self, principal: str, message_id: str, wait: float, gate: Callable[[], Awaitable[Any]]
    ) -> dict[str, Any] | None:
        """``get_message`` for a message to another box (None: the id names none here); with ``wait``,
        until its outcome is final, woken by each change of its row (``gate`` again after each wait)."""
        core = self.core
        if H.message_for(core.hub, principal, message_id) is not None:
            return None  # a local message of that id (ids are never shared while either lives)
        deadline = anyio.current_time() + R.bounded_wait(wait)
        while True:
            row = _row(core.hub, principal, message_id)
            if row is None:
                return None
            if row.is_final or anyio.current_time() >= deadline:
                return row_view(core.hub, row, _box_name(self.federation(), row.to)) | {"replies": [
                    {"ref": m.ref, "from": m.sender_actor, "outcome": m.outcome}
                    for m in R.replies(core.hub, str(row.identity))
                ]}
            event = anyio.Event()
            self.subscribers.waits.setdefault(principal, set()).add(event)
            with anyio.move_on_after(deadline - anyio.current_time()):
                await event.wait()
            await gate()
