"""Remote history search, the daemon's side (docs/federation.md, "Directory and history across boxes:
reads"): answering the history queries paired boxes ask of this box, and asking another box for
``find_sessions box=NAME``. The rules are the core's (:mod:`connectcore.federation.remote_history`,
H1 to H8); this module only sequences them.

- **Answering** (:meth:`RemoteHistoryDesk.answer_loop`, a :data:`connectd.daemon.supervisor.Kind.BUS`
  service started with the pump's): each request on ``connect.<this box>.history`` (``Bus.requests``)
  is judged by the envelope judgement under ``connect.<this box>.history.<its outer's from>``
  (``remote_history.query_subject``) and ``remote_history.admit`` (the per-pairing rate held in memory:
  a restart forgets it). A refused query is not answered (``over_rate`` is: a signed ``refused``) and
  is audited (``federation.history``, at most once a minute per box and reason). An admitted one is
  answered under the pairing's ``history`` setting (:func:`history_setting`): ``not_shared``, or a
  search of this box's history index within the repositories listed for that pairing by name
  (:func:`history_repos`; the index's repositories with those names: :meth:`RemoteHistoryDesk._known`), shaped by the core,
  sealed to the asking box and signed; each answered query is audited.
- **Asking** (:meth:`RemoteHistoryDesk.ask`; ``get_session box=`` too, asking for one session, which
  the box asked reads with ``HistoryService.get_session`` within the same repositories): the query for the box an active pairing's name names,
  sealed and signed, sent as a request (``Bus.request``, :data:`remote_history.TIMEOUT`); the answer
  judged under ``connect.<this box>.history.<the box asked>`` and ``remote_history.receive_answer``.
  No answer, or an answer not taken: ``no answer from box laptop within 5 s``. Not stored, not retried.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import anyio

from connectcore.effects import Audit
from connectcore.federation import envelope as E
from connectcore.federation import pairing as P
from connectcore.federation import remote_history as RH
from connectcore.history import HistoryError
from connectcore.ports import BusRefused, BusRequest, BusUnavailable
from connectd.daemon.supervisor import Group, Kind, Supervisor
from connectd.federation.seal import receive, seal

if TYPE_CHECKING:
    from connectd.daemon.runner import Core
    from connectd.federation.desk import PairingDesk

log = logging.getLogger("connectd.federation")

KNOWN_DIRS = 1000  # session directories read to find the repositories a pairing's names list


def history_setting(pairing: P.Pairing) -> RH.Setting:
    """The pairing's ``history`` setting (H4; ``connectd pair set BOX history=index``)."""
    return RH.setting_of(pairing.settings.history)


def history_repos(pairing: P.Pairing) -> tuple[str, ...]:
    """The repositories the owner listed for the pairing, by name (``history_repos``)."""
    return pairing.settings.history_repos


class RemoteHistoryDesk:
    """This box's answers to the history queries of its pairings, and its own queries to them."""

    def __init__(self, desk: PairingDesk, *, core: Core, history: Callable[[], Any | None]) -> None:
        """``core``: the core runner (audit records); ``history``: the session index now, or None (a
        daemon that serves none), read at each query."""
        self.core, self.history = core, history
        self.desk = desk
        self.limiter = RH.Limiter()
        self._audited: E.RefusalAudits = {}  # (box, reason) -> when last audited, how many left out since

    def _active(self, box_id: str, pairing_id: str | None) -> P.Pairing | None:
        return self.desk.book.active_in(box_id, pairing_id)

    # --- answering --------------------------------------------------------------------------------

    async def answer_loop(self, bus: Any = None) -> None:
        """Each request addressed to this box, answered or refused (``bus``: the pump's, connected,
        unless a test hands one)."""
        bus = bus if bus is not None else await self.desk.pump._connected()
        async for request in bus.requests():
            with anyio.CancelScope(shield=True):  # one query answered or refused, whole (a stop waits for it)
                await self.answer_one(bus, request)

    async def answer_one(self, bus: Any, request: BusRequest) -> bytes | None:
        """One request: the answer sent (its wire), or None (refused unanswered)."""
        wire = await self.answered(request.data)
        if wire is not None:
            try:
                await bus.answer(request, wire)
            except (BusRefused, BusUnavailable) as exc:
                log.warning("federation: history answer not sent: %s", exc)
        return wire

    async def answered(self, data: bytes) -> bytes | None:
        """The answer to the query ``data`` (sealed, signed), or None when it is refused unanswered."""
        own = self.desk.local.box_id
        now = self.desk.clock()
        verdict = receive(self.desk.local, RH.query_subject(own, data), data, self.desk.view())
        try:
            inner, self.limiter = RH.admit(verdict, self.limiter, now=now)
        except RH.QueryRefused as refused:
            await self._refused(verdict, refused, now)
            if not refused.answer or not isinstance(verdict.inner, E.HistoryQueryInner):
                return None
            pairing = self._active(verdict.inner.routing.sender, verdict.inner.routing.pairing)
            if pairing is None:
                return None
            return self._seal(pairing, verdict.inner, RH.Outcome.REFUSED, now, reason=f"{refused.reason}: {refused}")
        self.desk.heard[inner.routing.sender] = now  # a verified envelope: that box is heard
        pairing = self._active(inner.routing.sender, inner.routing.pairing)
        if pairing is None:  # (the judgement checked the pairing is active: a guard)
            return None
        names = history_repos(pairing)
        search = RH.plan(inner, history_setting(pairing), names, await self._known() if names else ())
        results: tuple[dict[str, Any], ...]
        reason = ""
        if search is None:
            outcome, results, reason = RH.Outcome.NOT_SHARED, (), RH.NOT_SHARED_REASON
        elif self.history() is None:  # shared, but this daemon serves no history index (--no-history)
            outcome, results, reason = RH.Outcome.REFUSED, (), "history_unavailable: this box serves no history index"
        else:
            outcome, results = RH.Outcome.RESULTS, RH.shape_results(await self._search(search), search)
        event, detail = RH.audit_outcome(outcome, len(results), inner.asker)
        await self.core.audit(Audit(verdict.actor, RH.AUDIT_EVENT, event,
                                      detail=f"{detail} (pairing {pairing.name}, query {inner.id})", at=now))
        return self._seal(pairing, inner, outcome, now, results=results, reason=reason)

    def _seal(self, pairing: P.Pairing, inner: E.HistoryQueryInner, outcome: RH.Outcome, now: float, *,
              results: Sequence[dict[str, Any]] = (), reason: str = "") -> bytes:
        routing = E.Routing(E.Kind.HISTORY_ANSWER, self.desk.local.box_id, pairing.box_id, pairing=pairing.id)
        made = RH.answer(routing, inner, outcome, now=now, results=results, reason=reason)
        return seal(self.desk.local, pairing.keys, made, secrets.token_bytes(E.NONCE_BYTES))

    async def _known(self) -> tuple[str, ...]:
        """The repositories this box's history index knows (``HistoryService.recent_dirs``: those of
        top-level sessions whose directory still exists, at most :data:`KNOWN_DIRS` directories)."""
        service = self.history()
        if service is None:
            return ()
        dirs: list[dict[str, Any]] = await self.desk.run_sync(lambda: service.recent_dirs(KNOWN_DIRS))
        return tuple(dict.fromkeys(str(d["repo"]) for d in dirs if d.get("repo")))

    async def _search(self, search: RH.Search) -> list[dict[str, Any]]:
        service = self.history()
        if service is None or not search.repos:
            return []
        if search.session is not None:  # get_session box=: that one session, if its repository is allowed
            harness, session_id = search.session

            def one() -> list[dict[str, Any]]:
                try:
                    return [service.get_session(harness, session_id, allowed_repos=search.repos)]
                except HistoryError:  # none by that id, or out of the allowed repositories: the same answer
                    return []

            sessions: list[dict[str, Any]] = await self.desk.run_sync(one)
            return sessions
        found: list[dict[str, Any]] = await self.desk.run_sync(
            lambda: service.find_sessions(search.text, limit=search.limit, allowed_repos=search.repos)
        )
        return found

    async def _refused(self, verdict: E.Verdict, refused: RH.QueryRefused, now: float) -> None:
        key = (verdict.actor, refused.reason)
        log.info("federation: history query from %s refused: %s: %s", verdict.actor, refused.reason, refused)
        due, left_out, self._audited = E.refusal_audit_due(self._audited, *key, now)  # one a minute per box and reason
        if not due:
            return
        await self.core.audit(Audit(verdict.actor, RH.AUDIT_EVENT, "refused", at=now,
                                      detail=f"{refused.reason}: {refused}{E.refusal_count_words(left_out)}"))

    # --- asking -----------------------------------------------------------------------------------

    async def ask(self, pairing: P.Pairing, *, asker: str, text: str, repo: str | None, limit: int,
                  session: tuple[str, str] | None = None) -> list[dict[str, Any]]:
        """``find_sessions`` on the box of ``pairing`` (active): its results with their box, or
        :class:`connectcore.federation.remote_history.RemoteHistoryRefused` (not shared, refused, no answer).
        With ``session`` (``get_session box=``): at most that session."""
        own, now = self.desk.local.box_id, self.desk.clock()
        routing = E.Routing(E.Kind.HISTORY_QUERY, own, pairing.box_id, pairing=pairing.id)
        query_id = secrets.token_hex(8)
        inner = RH.query(routing, id=query_id, asker=asker, text=text, repo=repo, limit=limit, now=now, session=session)
        wire = seal(self.desk.local, pairing.keys, inner, secrets.token_bytes(E.NONCE_BYTES))
        pump = self.desk.pump
        if pump is None:
            raise RH.no_answer(pairing.name)
        try:
            # the pump's bus, connected by its loops (not yet, or NATS away: BusUnavailable, no answer)
            data = await pump.bus.request(pairing.box_id, wire, timeout=RH.TIMEOUT)
        except (BusRefused, BusUnavailable) as exc:
            log.info("federation: history query to box %s not sent: %s", pairing.box_id, exc)
            raise RH.no_answer(pairing.name) from None
        if data is None:
            raise RH.no_answer(pairing.name)
        verdict = receive(self.desk.local, RH.answer_subject(own, pairing.box_id), data, self.desk.view())
        try:
            results = RH.receive_answer(verdict, query_id, session)
        except RH.AnswerRefused as refused:
            log.warning("federation: history answer from box %s refused: %s: %s", pairing.box_id, refused.reason, refused)
            await self.core.audit(Audit(verdict.actor, RH.AUDIT_EVENT, "refused",
                                          detail=f"answer {refused.reason}: {refused}", at=self.desk.clock()))
            raise RH.no_answer(pairing.name) from None
        finally:
            if verdict.decision is not E.Decision.REFUSED:
                self.desk.heard[pairing.box_id] = self.desk.clock()
        fingerprint = pairing.keys.fingerprint.replace(" ", "")[:8]
        return RH.shown(results, {"name": pairing.name, "id": pairing.box_id, "fingerprint": fingerprint})

    def start(self, supervisor: Supervisor | Group) -> None:
        """The answering loop, as a bus service (started in the pump's group)."""
        supervisor.spawn(Kind.BUS, self.answer_loop, name="federation history answer")


def attach(desk: PairingDesk, *, core: Core, history: Callable[[], Any | None]) -> RemoteHistoryDesk:
    """The remote history of a federated box (``desk.history``)."""
    remote = RemoteHistoryDesk(desk, core=core, history=history)
    desk.history = remote
    return remote
