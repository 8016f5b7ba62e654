"""Delivery I/O: the guard, the typing and its confirmation, on real panes.

The core decides whether a message may be typed (``GuardObserved``, or ``GuardFailed`` when the
guard could not finish), whether the guard's reading also counts as the pane's next observation
(:func:`connectcore.hub.guard_reading_counts`), and whether it landed
(``TypingObserved``, :func:`connectcore.delivery.landed`); this module only takes the recipient's
send lock, reads the pane afresh, resolves the message's handle again and reports what it saw, each
reading with when it was read. Under the lock, in one flat sequence: read, step ``GuardObserved``
(the runner commits its ``Persist``, typing started), then, if the step's effects say to type
(``TypeText`` with its Enter, ``ConfirmTyping``), paste (shielded), confirm and step ``TypingObserved``;
no step runs nested inside another, and the send lock is the linearization point of delivery,
revocation and restarts. The paste call also makes the tmux server owe the paste its Enter (a fallback it
presses after the settle, so a daemon that dies after the paste still submits it); the daemon presses
that same Enter earlier, as soon as the pane shows the paste, and tmux presses it exactly once.

:class:`Delivery` is given the collaborators it uses (issue 24), not the engine: the core runner as
``core`` (the hub, ``step``), ``clock``, ``ids`` (a card's id), ``tmux``, ``watcher`` (the poll, a
pane's incarnation, readiness, harness and drawing) and ``timing`` (the capture pace, the
confirmation's deadline).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import anyio

from connectcore import delivery as M
from connectcore import directory as D
from connectcore import hub as H
from connectcore.delivery import AfterTyping, Landing, MessageKey
from connectcore.effects import CheckGuard, ConfirmTyping, TypeText
from connectcore.screen import Reading, composer_draft, read_screen
from connectd.daemon.interpreter import IO_ERRORS
from connectd.delivery import targets
from connectd.store.store import STORE_ERRORS
from connectd.tmux.adapter import TmuxError

if TYPE_CHECKING:
    from connectd.daemon.ids import Ids
    from connectd.daemon.parts import Timing
    from connectd.daemon.runner import Core
    from connectd.tmux.adapter import TmuxAdapter
    from connectd.tmux.watcher import Watcher

log = logging.getLogger("connectd.delivery")

SCROLLBACK_LINES = 200
CONFIRM_EVERY = 0.2  # the longest wait between confirming re-reads (each is taken as the pane draws)
STORE_RETRY, STORE_RETRY_MAX = 0.5, 30.0  # a store that failed the outcome: the first wait, and where doubling stops


class Delivery:
    def __init__(
        self, *, core: Core, clock: Callable[[], float], ids: Ids, tmux: TmuxAdapter, watcher: Watcher, timing: Timing
    ) -> None:
        self.core, self.clock, self.ids, self.tmux, self.watcher, self.timing = core, clock, ids, tmux, watcher, timing
        self._typed_at: dict[str, float] = {}  # pane -> when its paste began (anyio's clock)

    async def guard(self, check: CheckGuard) -> None:
        """Recheck under the recipient's send lock and report (``GuardObserved``); if the core moved the
        message to typing (its step's ``TypeText`` and ``ConfirmTyping``), type and confirm it, still
        under the lock. Nothing runs nested inside the step."""
        core, watcher = self.core, self.watcher
        async with self.tmux.pane_lock(check.pane_id):
            message = core.hub.messages.get(check.message)
            listed = None
            if message is not None and message.handle is not None:
                listed = await watcher.poll()  # the handle is checked against what tmux says now (titles)
            info, incarnation = await watcher.fresh_incarnation(check.pane_id, listed)
            read_at = self.clock()
            reading: Reading | None = None
            if info is not None:
                capture = await self.tmux.capture(check.pane_id, SCROLLBACK_LINES)
                reading = read_screen(capture.text, info.current_command, capture.cursor, height=capture.height)
            ready, fingerprint = (
                (watcher.ready(check.pane_id, incarnation, reading), reading.fingerprint) if reading else (False, "")
            )
            handle = self.resolve(message.handle) if message is not None else None
            guard = H.GuardObserved(
                self.clock(), check.message, incarnation, ready, fingerprint, read_at, handle,
                card_id=self.ids.new_id("card"),
            )
            effects = await core.step(guard)
            mine = [e for e in effects if getattr(e, "message", None) == check.message]
            typing = next((e for e in mine if isinstance(e, TypeText)), None)
            confirm = next((e for e in mine if isinstance(e, ConfirmTyping)), None)
            if typing is not None and confirm is not None:  # the core let it be typed: still under the lock
                await self._type_and_confirm(typing, confirm)
        if reading is not None and incarnation and H.guard_reading_counts(core.hub, check.message):
            # The guard's fresh reading is the pane's next observation (the core's rule). Report it
            # (paced like the watcher): a pane whose screen changed under the guard and then stays still re-arms.
            await anyio.sleep(self.timing.capture)
            watcher.remember_reading(check.pane_id, incarnation, reading)
            await core.step(H.PaneObserved(self.clock(), check.pane_id, incarnation, ready, fingerprint, read_at))

    async def _type_and_confirm(self, typing: TypeText, confirm: ConfirmTyping) -> None:
        """The guard's typing, after its step and under its lock: paste and submit (shielded from
        cancellation: a stop in that window would leave connect's own text as a draft in a composer),
        then the confirmation, which steps the outcome (``TypingObserved``). An I/O error on the way
        is the outcome unconfirmed, naming which part failed, after one last look at the pane."""
        assert typing.message is not None
        try:
            with anyio.CancelScope(shield=True):
                await self.type_text(typing)
        except IO_ERRORS as exc:
            await self.unconfirmed(typing.message, f"send failed partway: {exc}", typing.pane_id)
            return
        try:
            await self.confirm(confirm)
        except IO_ERRORS as exc:
            await self.unconfirmed(confirm.message, f"confirming re-read failed: {exc}", confirm.pane_id)

    async def guard_failed(self, check: CheckGuard, exc: Exception) -> None:
        """The guard could not finish (the pane exited between two tmux calls, tmux failed, the typing
        it ran failed partway): the core hears why and decides (``GuardFailed``); the pane is read
        again at the next capture round, even if unchanged."""
        await self.core.step(H.GuardFailed(self.clock(), check.message, check.incarnation, f"typing failed: {exc}"))
        self.watcher.look_again(check.pane_id)

    def resolve(self, handle: str | None) -> H.HandleResolution | None:
        """Where the message's handle names now: one pane, or why not (no pane, several)."""
        if handle is None:
            return None
        try:
            record = targets.resolve_in(self.watcher.directory, self.core.hub.book, handle)
        except D.TargetError as exc:
            return H.Unresolved(exc.reason.value)
        return H.Recipient(record.pane_id, record.token, self.watcher.harness_of(record), handle)

    async def type_text(self, effect: TypeText) -> None:
        """Paste. With ``submit`` the same tmux call has the server owe the paste its Enter, pressed
        ``effect.settle`` later (the fallback, which needs nothing more from this daemon); press it
        earlier, as soon as the pane's output shows the paste in its composer (the core's
        :func:`connectcore.delivery.paste_shown`). Return once it is pressed or due."""
        pane = effect.pane_id
        self._typed_at[pane] = anyio.current_time()  # the confirmation reads output from here on
        submit_after = effect.settle if effect.submit else None
        token = await self.tmux.paste_text(pane, effect.text, submit_after=submit_after)
        if submit_after is None or token is None:
            return
        due = anyio.current_time() + submit_after
        try:
            if await self._enter_early(pane, effect.text, token, due):
                return
        except TmuxError as exc:  # the fallback still presses the Enter; the confirmation reads the pane
            log.info("no early Enter for %s: %s", pane, exc)
        await anyio.sleep_until(due)

    async def _enter_early(self, pane: str, typed: str, token: str, due: float) -> bool:
        """Read the pane's composer at once, then each time the pane draws before ``due``; once it
        shows the paste, press the paste's Enter (``enter_once``: tmux presses it once, whether this
        or the fallback comes first), make the confirmation read the output from then on, and answer
        True."""
        since: float | None = None
        reads, start = 0, anyio.current_time()
        while (left := due - anyio.current_time()) > 0:
            if since is not None:
                await self.watcher.drawn(pane, within=left, since=since)
            since = anyio.current_time()
            if since >= due:
                break
            capture = await self.tmux.capture(pane)
            reads += 1
            if M.paste_shown(typed, composer_draft(capture.text, self.watcher.command_of(pane))):
                self._typed_at[pane] = anyio.current_time()
                await self.tmux.enter_once(pane, token)
                log.debug("early Enter for %s %.0f ms after the paste call returned, %d reads", pane, (since - start) * 1000, reads)
                return True
        log.debug("the Enter for %s is left to the fallback, %d reads", pane, reads)
        return False

    async def confirm(self, effect: ConfirmTyping) -> None:
        """Re-read the pane each time it draws (at least every ``CONFIRM_EVERY``) until the core says
        the text landed, or the deadline passes; report the last reading (the core decides delivered
        or unconfirmed from it)."""
        typed = self.core.hub.messages[effect.message].typed
        deadline = anyio.current_time() + self.timing.confirm
        since = self._typed_at.pop(effect.pane_id, None)  # output since the paste began is news
        while True:
            # Read as soon as it draws: at once if it drew since the paste (first) or the last read began.
            await self.watcher.drawn(effect.pane_id, within=CONFIRM_EVERY, since=since)
            since = anyio.current_time()
            reading = await self.read_after_typing(effect.pane_id, typed)
            verdict, _why = M.landed(reading, last=anyio.current_time() >= deadline)
            if verdict is not Landing.LOOKING:
                break
        await self._step_outcome(effect.message, reading)

    async def read_after_typing(self, pane_id: str, typed: str) -> AfterTyping:
        read_at = self.clock()
        capture = await self.tmux.capture(pane_id, SCROLLBACK_LINES)
        reading = read_screen(
            capture.text, self.watcher.command_of(pane_id), capture.cursor, height=capture.height,
            typed_marker=M.marker(typed),
        )
        return AfterTyping(
            M.marker_seen(typed, capture.text),
            reading.activity,
            reading.composer,
            reading.ready_for_message,
            reading.fingerprint,
            read_at,
            answered=reading.answered,
        )

    async def unconfirmed(self, key: MessageKey, detail: str, pane_id: str | None = None) -> None:
        """Typing failed partway: unconfirmed, with one last look at the pane if it can still be read
        (so the core sees a draft the daemon may have left in the composer)."""
        message = self.core.hub.messages.get(key)
        reading: AfterTyping | None = None
        if pane_id is not None and message is not None:
            try:
                reading = await self.read_after_typing(pane_id, message.typed)
            except (TmuxError, OSError) as exc:
                log.info("no reading of %s after a failed typing: %s", pane_id, exc)
        await self._step_outcome(key, reading, detail)

    async def _step_outcome(self, key: MessageKey, reading: AfterTyping | None, failure: str = "") -> None:
        """Tell the core what the typing came to, until the store takes it: a commit that fails rolls
        the step back (connectd.daemon.runner), and the message would stay ``typing`` until the next start
        (found by the simulation: the confirmation's commit and then the unconfirmed one both failed).
        The same backoff as the restart driver's; a daemon stopping meanwhile leaves it to recovery."""
        wait = STORE_RETRY
        while True:
            try:
                await self.core.step(H.TypingObserved(self.clock(), key, reading, failure=failure))
                return
            except STORE_ERRORS as exc:
                log.warning("the outcome of %s: the store failed (%s); stepping it again in %.1fs", key[1], exc, wait)
                await anyio.sleep(wait)
                wait = min(wait * 2, STORE_RETRY_MAX)
