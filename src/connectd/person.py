"""The person's calls (owner API, page, CLI): cards, decisions, grants, revocation, restarts.

Revocation takes every affected pane's send lock (``hub.panes_to_lock``) before it is stepped, so a
delivery either finished before the revocation returns or sees the revoked scope.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio

from connectcore import consent, grants
from connectcore import directory as D
from connectcore import hub as H
from connectcore import reads as R
from connectcore.advice import receive_only_note
from connectcore.consent import Decision
from connectcore.federation import outbox as O
from connectcore.grants import PRESET_SCOPES, Preset
from connectcore.hub import acts as hub_acts
from connectd.control.act_calls import act_view
from connectd.daemon.ids import EngineError, hash_token

if TYPE_CHECKING:
    from connectd.agents.launch import Launches
    from connectd.daemon.ids import Ids
    from connectd.daemon.runner import Core
    from connectd.tmux.adapter import TmuxAdapter
    from connectd.tmux.watcher import Watcher


class PersonCalls:
    def __init__(
        self, *, core: Core, clock: Callable[[], float], ids: Ids, tmux: TmuxAdapter, watcher: Watcher, launches: Launches
    ) -> None:
        self.core, self.clock, self.ids, self.tmux, self.watcher, self.launches = core, clock, ids, tmux, watcher, launches
        # this box's name for each other box, by box id (the pairing desk's, when the box federates)
        self.box_names: Callable[[], Mapping[str, str]] = dict

    def needs_you(self) -> list[dict[str, Any]]:
        """What needs the person besides cards: drafts connect may have left in a composer (the core
        opens and closes them, ``hub.drafts``), newest first."""
        hub = self.core.hub
        drafts = sorted(hub.drafts.values(), key=lambda d: d.at, reverse=True)
        items = []
        for d in drafts:
            message = hub.messages.get(d.message) if d.message is not None else None
            items.append(
                {
                    "kind": "left_draft",
                    "id": f"draft:{d.pane_id}",
                    "pane": d.pane_id,
                    "summary": d.summary,
                    "why": d.why,
                    "message_id": d.message[1] if d.message is not None else None,
                    "ref": d.ref,
                    "sender": message.sender_actor if message is not None else None,
                    "at": d.at,
                }
            )
        return items

    def windows(self) -> dict[str, str]:
        """Each live pane's tmux ``session:window``, as the last ``list-panes`` read it."""
        return {
            pane_id: D.window_name(state.info.session_name, state.info.window_index)
            for pane_id, state in self.watcher.panes.items()
        }

    def cards(self, include_closed: bool = False) -> list[dict[str, Any]]:
        now = self.clock()
        cards = sorted(self.core.hub.cards.values(), key=lambda c: c.created_at, reverse=True)
        windows = self.windows()
        views = [
            R.card_view(self.core.hub, self.watcher.directory, c, windows)
            for c in cards
            if include_closed or consent.is_open(c)
        ]
        return [
            {
                "id": v.card.id,
                "state": v.card.state.value,
                "state_words": v.state,
                "open": consent.is_open(v.card),
                "sender": v.card.sender_actor,
                "recipient": v.card.recipient_actor,
                "sender_pane": v.sender_pane,
                "sender_window": windows.get(v.sender_pane or "", ""),
                "recipient_pane": v.card.recipient_pane,
                "recipient_window": windows.get(v.card.recipient_pane, ""),
                "sender_name": v.sender_name,
                "sender_box": v.card.sender_box,  # a remote sender's: the pairing's name here, its fingerprint
                "sender_fingerprint": v.card.sender_fingerprint,
                "recipient_name": v.recipient_name,
                "text": v.card.text,
                "hop": v.card.hop,
                "in_reply_to": v.in_reply_to,
                "answers": v.words.answers,
                "words": {
                    "approve_once": v.words.approve_once,
                    "approve_pair": v.words.approve_pair,
                    "decline": v.words.decline,
                    "hop": v.words.hop,
                },
                "expires_in": max(0.0, v.card.expires_at - now),
                "message_id": v.card.message[1],
            }
            for v in views
        ]

    async def decide(self, card_id: str, decision: Decision, by: str = "owner") -> dict[str, Any]:
        await self.core.step(H.Decide(self.clock(), card_id, decision, by))
        card = self.core.hub.cards[card_id]
        return {"id": card.id, "state": card.state.value}

    def acts(self, include_closed: bool = False) -> list[dict[str, Any]]:
        """Control's acts, newest first: open ones (a card waiting, or running), or all the hub keeps."""
        acts = sorted(self.core.hub.acts.values(), key=lambda a: a.created_at, reverse=True)
        return [act_view(a) | {"actor": self._actor(a.principal)} for a in acts if include_closed or not a.is_final]

    def _actor(self, principal_id: str) -> str:
        book = self.core.hub.book
        principal = book.principals.get(grants.canonical(book, principal_id))
        return grants.actor_name(principal) if principal is not None else principal_id

    async def decide_act(self, act_id: str, approve: bool, by: str = "owner") -> dict[str, Any]:
        await self.core.step(H.ActDecided(self.clock(), act_id, approve, by))
        return act_view(self.core.hub.acts[act_id])

    async def stop_control(self, by: str = "owner") -> dict[str, Any]:
        """Stop control: revoke it (its acts not yet executed are cancelled); its pane keeps running."""
        controls = sorted(hub_acts.live_controls(self.core.hub.book))
        if not controls:
            raise EngineError("no_control", "no control agent is running")
        await self.revoke_principals(controls, by)
        return {"stopped": [self._actor(p) for p in controls]}

    async def revoke_principals(self, principal_ids: Iterable[str], by: str = "owner") -> None:
        """Turn Connect off: take every affected pane's send lock, then step the revocation."""
        ids = list(principal_ids)
        async with self.lock_panes(lambda: H.panes_to_lock(self.core.hub, ids)):
            for principal_id in ids:
                await self.core.step(H.Revoke(self.clock(), principal_id, by))

    def cancels_unconfirmed(self, principal_ids: Iterable[str]) -> list[str]:
        """What a revocation of these principals tells the person about their messages to other boxes:
        one line per box that has not yet confirmed the cancels (``outbox.pending_cancels_words``;
        none on a box that does not federate)."""
        counts = H.cancels_unconfirmed(self.core.hub, principal_ids)
        return list(O.pending_cancels_words(counts, self.box_names()))

    async def revoke_pane(self, pane_id: str, by: str = "owner") -> dict[str, Any]:
        """Revoke what a pane holds: its connected agent, and any open restart to connect it (the
        core's rule, :func:`connectcore.hub.revoke_pane_target`; this only asks and steps)."""
        record = self.watcher.directory.panes.get(pane_id)
        if record is None:
            raise EngineError("unknown_target", f"no live pane {pane_id}")
        principal_id, restart_id = H.revoke_pane_target(self.core.hub, pane_id, record.token)

        def which() -> tuple[str, ...]:
            principal = grants.principal_at(self.core.hub.book, record.token)
            return H.panes_to_lock(self.core.hub, [principal.id] if principal is not None else [])

        async with self.lock_panes(which):
            await self.core.step(H.RevokePane(self.clock(), pane_id, record.token, by))
        result: dict[str, Any] = {"pane": pane_id, "principal": principal_id, "restart": restart_id}
        if principal_id is not None:
            root = self.core.hub.book.principals[grants.canonical(self.core.hub.book, principal_id)]
            result |= {"revoked": grants.actor_name(root), "principal": root.id}
        else:
            result["revoked"] = pane_id
        result["cancels_unconfirmed"] = self.cancels_unconfirmed([principal_id] if principal_id is not None else [])
        return result

    @asynccontextmanager
    async def lock_panes(self, which: Callable[[], tuple[str, ...]]) -> AsyncIterator[None]:
        """Hold the send locks of ``which()`` (asked again until it is stable), in one global order."""
        tmux = self.tmux
        held: dict[str, anyio.Lock] = {}
        try:
            while True:
                wanted = sorted(set(which()) - set(held))
                if not wanted:
                    break
                if held and min(wanted) < max(held):
                    for lock in held.values():  # keep a global order: release and take them all again
                        lock.release()
                    held.clear()
                    wanted = sorted(set(which()))
                for pane_id in wanted:
                    lock = tmux.pane_lock(pane_id)
                    await lock.acquire()
                    held[pane_id] = lock
            yield
        finally:
            for lock in held.values():
                lock.release()

    async def set_grant(self, session: tuple[str, str], preset: Preset, by: str = "owner") -> None:
        scopes = PRESET_SCOPES[preset]
        principals = grants.principals_of_session(self.core.hub.book, session)
        async with self.lock_panes(lambda: H.panes_to_lock(self.core.hub, principals)):
            await self.core.step(H.SetGrant(self.clock(), session, scopes, by))

    async def set_pane_preset(self, pane_id: str, preset: Preset, by: str = "owner") -> dict[str, Any]:
        """The per-pane toggle: a shortcut for the one agent session bound in that pane."""
        record = self.watcher.directory.panes.get(pane_id)
        if record is None:
            raise EngineError("unknown_target", f"no live pane {pane_id}")
        principal = grants.principal_at(self.core.hub.book, record.token)
        launch = await self.launches.record_for(pane_id, record.token)
        session = D.pane_session(
            record.binding,
            principal.session if principal is not None else None,
            (launch.harness, launch.session_id) if launch is not None else None,
        )
        try:
            toggle = grants.pane_toggle(self.core.hub.book, pane_id, record.token, session, PRESET_SCOPES[preset])
        except grants.GrantError as exc:  # the core's rule: asked before anything changes
            raise EngineError(exc.reason, str(exc)) from exc
        touched = [
            *(grants.principals_of_session(self.core.hub.book, toggle.session) if toggle.session is not None else ()),
            *((toggle.revoke,) if toggle.revoke is not None else ()),
        ]
        if toggle.session is not None:
            await self.set_grant(toggle.session, preset, by)
        if toggle.revoke is not None:
            await self.revoke_principals([toggle.revoke], by)
        if preset is Preset.OFF:
            return {"pane": pane_id, "connect": "off", "cancels_unconfirmed": self.cancels_unconfirmed(touched)}
        session = toggle.session
        assert session is not None  # (pane_toggle refuses a preset without one)
        if toggle.connect_in_place:
            await self._connect_in_place(record, session, preset)
        in_place = self.receive_only(record.token, launched=record.launcher is not None)
        return {
            "pane": pane_id,
            "connect": preset.value,
            "session": list(session),
            "needs_restart": in_place,
            "note": (
                receive_only_note(started_by_connect=record.launcher is not None, harness=session[0], session_id=session[1])
                if in_place else ""
            ),
        }

    async def _connect_in_place(self, record: D.PaneRecord, session: tuple[str, str], preset: Preset) -> None:
        """A running agent connectd did not start connected (hand-started, or launched Off): give its
        pane incarnation a principal under the grant, so it can receive at once under the same consent.
        Its token is never revealed (the process has no endpoint); its tools arrive at its next launch
        by connect."""
        await self.core.step(
            H.Launch(
                self.clock(),
                hash_token(self.ids.new_token()),
                self.ids.new_id("principal"),
                session[0],
                record.pane_id,
                record.incarnation.pane_pid,
                record.token,
                PRESET_SCOPES[preset],
                session,
                in_place=True,
            )
        )

    def receive_only(self, incarnation: str, launched: bool) -> bool:
        """Connected, but its process holds no endpoint (the core's rule, :func:`connectcore.grants.receive_only`)."""
        return grants.receive_only(self.core.hub.book, incarnation, launched=launched)

    async def disconnect_all(self, by: str = "owner") -> dict[str, Any]:
        """Connect off for every agent: how many were connected, and (as a revocation's answer) the
        messages to other boxes whose cancels those boxes have not yet confirmed."""
        ids = list(grants.all_connected(self.core.hub.book))
        async with self.lock_panes(lambda: H.panes_to_lock(self.core.hub, ids)):
            await self.core.step(H.DisconnectAll(self.clock(), by))
        return {"disconnected": len(ids), "cancels_unconfirmed": self.cancels_unconfirmed(ids)}
