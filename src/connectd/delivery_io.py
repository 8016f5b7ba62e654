"""Delivery I/O: the guard, the typing and its confirmation, on real panes.

The core decides whether a message may be typed (``GuardObserved``) and whether it landed
(``TypingObserved``); this module only takes the recipient's send lock, reads the pane afresh and
reports what it saw. The effects of the guard's step (``Persist`` typing started, ``TypeText``,
``PressEnter``, ``ConfirmTyping``) are executed by the interpreter inside that step, so they run while
the lock is held: the send lock is the linearization point of delivery, revocation and restarts.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import anyio

from connectcore import directory as D
from connectcore import hub as H
from connectcore.delivery import MessageKey, MessageState
from connectcore.effects import CheckGuard, ConfirmTyping, PressEnter
from connectcore.screen import Activity, Composer, Reading, read_screen

if TYPE_CHECKING:
    from connectd.engine import Engine

log = logging.getLogger("connectd.delivery")

SCROLLBACK_LINES = 200
CONFIRM_EVERY = 0.2  # between confirming re-reads


class Delivery:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    async def guard(self, check: CheckGuard) -> None:
        """Recheck under the recipient's send lock and report; typing follows inside the same step."""
        engine = self.engine
        async with engine.tmux.pane_lock(check.pane_id):
            info, incarnation = await engine.watcher.fresh_incarnation(check.pane_id)
            ready, fingerprint = False, ""
            reading: Reading | None = None
            if info is not None:
                capture = await engine.tmux.capture(check.pane_id, SCROLLBACK_LINES)
                reading = read_screen(capture.text, info.current_command, capture.cursor, height=capture.height)
                ready, fingerprint = reading.ready_for_message, reading.fingerprint
            message = engine.hub.messages.get(check.message)
            handle_target = self._handle_target(message.handle) if message is not None else None
            effects = await engine.step(
                H.GuardObserved(
                    engine.clock(), check.message, incarnation, ready, fingerprint, handle_target,
                    card_id=engine.ids.new_id("card"),
                )
            )
        if any(isinstance(e, ConfirmTyping) for e in effects):
            return
        after = engine.hub.messages.get(check.message)
        if after is not None and after.state is MessageState.READY and reading is not None and incarnation:
            # The screen changed under the guard: its fresh reading is the pane's next observation.
            # Report it (paced like the watcher), or a pane that then stays still would never re-arm.
            await anyio.sleep(engine.timing.capture)
            engine.watcher.remember_reading(check.pane_id, incarnation, reading)
            await engine.step(H.PaneObserved(engine.clock(), check.pane_id, incarnation, ready, fingerprint))

    async def guard_failed(self, check: CheckGuard, exc: Exception) -> None:
        """The guard could not read the pane (it exited between two tmux calls, tmux failed): the core
        hears a reading that is not ready, so the message waits for the next idle (or, if typing had
        already started, that it was not confirmed)."""
        engine = self.engine
        message = engine.hub.messages.get(check.message)
        if message is not None and message.state is MessageState.TYPING:
            await self.unconfirmed(check.message, f"typing failed: {exc}")
            return
        await engine.step(H.GuardObserved(engine.clock(), check.message, check.incarnation, False, ""))
        engine.watcher.look_again(check.pane_id)  # its next reading is news to the core, even if unchanged

    def _handle_target(self, handle: str | None) -> H.Recipient | None:
        if handle is None:
            return None
        try:
            record = D.resolve(self.engine.watcher.directory, handle)
        except D.TargetError:
            return None
        return H.Recipient(record.pane_id, record.token, record.harness, handle)

    async def press_enter(self, effect: PressEnter) -> None:
        """Enter, once the paste has settled (agent TUIs read a Return inside a paste as a newline)."""
        await anyio.sleep(self.engine.timing.settle)
        await self.engine.tmux.press_enter(effect.pane_id)

    async def confirm(self, effect: ConfirmTyping) -> None:
        """Re-read the pane until the text shows submitted or the deadline passes; report it."""
        engine = self.engine
        typed = engine.hub.messages[effect.message].typed
        marker = typed.split("\n", 1)[0][:60]
        deadline = anyio.current_time() + engine.timing.confirm
        last = "no reading after typing"
        while anyio.current_time() < deadline:
            await anyio.sleep(CONFIRM_EVERY)
            capture = await engine.tmux.capture(effect.pane_id, SCROLLBACK_LINES)
            reading = read_screen(capture.text, engine.watcher.command_of(effect.pane_id), capture.cursor, height=capture.height)
            seen = marker in _unwrap(capture.text)
            if reading.composer is Composer.DRAFT:
                last = "the text is still in the composer"
                continue
            if reading.activity is Activity.BUSY or (seen and reading.composer is Composer.EMPTY):
                busy = reading.activity is Activity.BUSY
                await engine.step(H.TypingObserved(engine.clock(), effect.message, True, "typed and submitted", reading.fingerprint, busy))
                return
            last = "the typed text is not visible"
        await self.unconfirmed(effect.message, last)

    async def unconfirmed(self, key: MessageKey, detail: str) -> None:
        engine = self.engine
        await engine.step(H.TypingObserved(engine.clock(), key, False, detail))


def _unwrap(text: str) -> str:
    return " ".join(line.strip() for line in text.split("\n"))
