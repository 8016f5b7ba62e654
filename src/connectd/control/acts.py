"""Control's acts on real panes: the guard under the send lock, then the one effect that executes it.

The core decides (:mod:`connectcore.hub.acts`): whether an act may run, on which pane, and what it
does. This module takes the target pane's send lock, reads the pane afresh (its incarnation and the
question on screen) and reports ``ActGuarded`` while holding it; once that step returned, the execution
effect it emitted (``PressKeys``, ``TypeShellText``, ``ClosePane``, ``HandOff``) runs here, still under
the same lock, and ``ActExecuted`` is stepped after it: no step runs inside another (issue 24; the
delivery guard does the same). An act that opens a window has no pane to lock. Every execution is answered with
``ActExecuted``: done, or failed with the error (never retried: an act runs at most once).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import anyio

from connectcore import directory as D
from connectcore import grants
from connectcore import hub as H
from connectcore.control import QuestionShown
from connectcore.effects import (
    CheckActGuard,
    ClosePane,
    Effect,
    HandOff,
    OpenWindow,
    PressKeys,
    TypeShellText,
)
from connectcore.grants import Preset
from connectcore.screen import read_screen

if TYPE_CHECKING:
    from connectcore import launchers as L
    from connectd.agents.launch import Launches
    from connectd.daemon.ids import Ids
    from connectd.daemon.parts import Timing
    from connectd.daemon.runner import Core
    from connectd.tmux.adapter import TmuxAdapter
    from connectd.tmux.watcher import Watcher

log = logging.getLogger("connectd.acts")

SCROLLBACK_LINES = 200
# The effects that execute an act (connectcore.hub.acts.execution): run by the act's guard after its step.
EXECUTIONS = (PressKeys, TypeShellText, ClosePane, OpenWindow, HandOff)


class ActsIO:
    def __init__(
        self,
        *,
        core: Core,
        clock: Callable[[], float],
        ids: Ids,
        tmux: TmuxAdapter,
        watcher: Watcher,
        timing: Timing,
        launches: Launches,
        launchers: Mapping[str, L.Launcher],
    ) -> None:
        self.core, self.clock, self.ids, self.tmux, self.watcher = core, clock, ids, tmux, watcher
        self.timing, self.launches, self.launchers = timing, launches, launchers

    async def guard(self, check: CheckActGuard) -> None:
        """Read the act's pane afresh under its send lock and report; then run what that step says."""
        if not check.pane_id:  # it opens a window: nothing on screen to check
            await self._run_stepped(check, await self.core.step(H.ActGuarded(self.clock(), check.act, "")))
            return
        async with self.tmux.pane_lock(check.pane_id):
            info, incarnation = await self.watcher.fresh_incarnation(check.pane_id)
            question: QuestionShown | None = None
            at_empty_prompt = False
            if info is not None:
                capture = await self.tmux.capture(check.pane_id, SCROLLBACK_LINES)
                reading = read_screen(capture.text, info.current_command, capture.cursor, height=capture.height)
                if reading.question is not None:
                    question = (reading.question.prompt, reading.question.options, reading.question.subject,
                                reading.question.selected)
                at_empty_prompt = reading.ready_for_command
            effects = await self.core.step(H.ActGuarded(self.clock(), check.act, incarnation, question, at_empty_prompt))
            await self._run_stepped(check, effects)

    async def _run_stepped(self, check: CheckActGuard, effects: tuple[Effect, ...]) -> None:
        """The act's execution, if the guard's step emitted one (else it ended the act): once, shielded
        from cancellation so that it is always answered."""
        for effect in effects:
            if isinstance(effect, EXECUTIONS) and effect.act == check.act:
                with anyio.CancelScope(shield=True):
                    await self.execute(effect)

    async def guard_failed(self, check: CheckActGuard, exc: Exception) -> None:
        """The pane could not be read: the core hears it gone (the act is cancelled, nothing runs)."""
        log.info("act %s: guard failed: %s", check.act, exc)
        await self.core.step(H.ActGuarded(self.clock(), check.act, None))

    async def execute(self, effect: PressKeys | TypeShellText | ClosePane | OpenWindow | HandOff) -> None:
        """Run one act's effect and report its outcome (any failure is the act's, never the daemon's)."""
        act_id = effect.act
        try:
            detail = await self._run(effect)
        except Exception as exc:  # noqa: BLE001 - reported to the core as the act's failure
            log.info("act %s failed: %s", act_id, exc)
            await self.core.step(H.ActExecuted(self.clock(), act_id, error=f"{type(exc).__name__}: {exc}"[:500]))
            return
        await self.core.step(H.ActExecuted(self.clock(), act_id, detail=detail))

    async def _run(self, effect: PressKeys | TypeShellText | ClosePane | OpenWindow | HandOff) -> str:
        tmux, settle = self.tmux, self.timing.settle
        if isinstance(effect, PressKeys):
            await tmux.send_named_keys(effect.pane_id, effect.keys)
            return f"pressed {' '.join(effect.keys)}"
        if isinstance(effect, TypeShellText):
            await tmux.paste_text(effect.pane_id, effect.text, submit_after=settle)
            await anyio.sleep(settle)
            return "typed and submitted"
        if isinstance(effect, ClosePane):
            await tmux.kill_pane(effect.pane_id)
            await self.watcher.poll()
            return f"closed {effect.pane_id}"
        if isinstance(effect, HandOff):
            return await self._hand_off(effect.act, effect.pane_id, effect.incarnation, effect.text)
        assert isinstance(effect, OpenWindow)
        return await self._open(effect)

    async def _open(self, effect: OpenWindow) -> str:
        opened = await self.launches.launch(
            effect.launcher, preset=Preset(effect.preset), cwd=effect.cwd, session=effect.session
        )
        pane, address = opened["pane"], opened["address"]
        if not effect.handoff:
            return f"opened {address}"
        incarnation = address.split("@", 1)[1]
        harness = self.launchers[effect.launcher].harness  # not yet read: the launcher says what runs
        sent = await self._hand_off(effect.act, pane, incarnation, effect.handoff, harness)
        return f"opened {address}; {sent}"

    async def _hand_off(self, act_id: str, pane_id: str, incarnation: str, text: str, harness: str = "") -> str:
        """Control's message to the pane, through the delivery machine (approved on the act's card)."""
        act = self.core.hub.acts[act_id]
        token_hash = grants.sending_token(self.core.hub.book, act.principal)
        if token_hash is None:
            raise RuntimeError("control is no longer connected")
        state = self.watcher.panes.get(pane_id)
        record = self.watcher.directory.panes.get(pane_id)
        kind = D.recipient_harness(
            state.reading.harness.value if state and state.reading else None,
            launched=harness, recorded=record.harness if record is not None else "",
        )
        message_id = f"handoff-{act_id}"
        await self.core.step(
            H.Submit(
                self.clock(), token_hash, message_id, text, H.Recipient(pane_id, incarnation, kind),
                self.ids.new_id("msg"), self.ids.new_id("card"), act=act_id,
            )
        )
        return f"message {message_id} queued for {pane_id}"
