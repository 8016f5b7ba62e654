"""The watcher's capture schedule (:class:`connectd.tmux.watcher.Watcher`'s part ``captures``): which panes
drew and are due to be read, at what pace, and who waits for a pane to draw.

- The control-mode reader marks panes that produced output (:meth:`CaptureSchedule.mark_output`); they
  are captured within ``timing.capture`` (``timing.capture_awaited`` while a consented message waits
  for the pane, :func:`connectcore.hub.awaited_panes`; the first output after a quiet spell at once).
  Its structure notices (:meth:`CaptureSchedule.mark_structure`) make the next round poll.
- :meth:`CaptureSchedule.drawn` wakes whoever waits for a pane to draw (the delivery guard's reads).

It is given what it uses: the core runner as ``core`` (the hub's awaited panes), ``timing``, the
watched panes (``watched``), and the watcher's ``observe`` (capture and read one pane) and ``poll``
(list-panes), as callables, so the watcher's own are called.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio

from connectcore import hub as H

if TYPE_CHECKING:
    from connectd.daemon.parts import Timing
    from connectd.daemon.runner import Core
    from connectd.tmux.watched import Watched


class CaptureSchedule:
    """Which panes are due to be captured, and the waiters for a pane's next output."""

    def __init__(
        self,
        *,
        core: Core,
        timing: Timing,
        watched: Watched,
        observe: Callable[[str], Awaitable[Any]],
        poll: Callable[[], Awaitable[Any]],
    ) -> None:
        self.core, self.timing, self.watched, self.observe, self.poll = core, timing, watched, observe, poll
        self.dirty: set[str] = set()  # panes that drew (or must be read again) since they were captured
        self._drew: dict[str, anyio.Event] = {}  # pane -> set at its next %output (delivery waits on it)
        self.output_at: dict[str, float] = {}  # pane -> when its last %output came (anyio's clock)
        self._news = anyio.Event()  # a pane drew that was not waiting to be captured, or the layout changed
        self.read_at: dict[str, float] = {}  # pane -> when it was last captured (anyio's clock)
        self._structure = False  # a structure notice came: list-panes at the next capture round
        self._awaited_for: object = None  # the hub state ``_awaited_panes`` was computed from
        self._awaited_panes: frozenset[str] = frozenset()

    def mark_output(self, pane_id: str) -> None:
        """This pane drew: capture it at the next round, and wake whoever waits for it to draw."""
        self.output_at[pane_id] = anyio.current_time()
        if pane_id not in self.dirty:
            self.dirty.add(pane_id)
            self._news.set()
        if (drew := self._drew.pop(pane_id, None)) is not None:
            drew.set()

    async def drawn(self, pane_id: str, within: float, *, since: float | None = None) -> None:
        """Return once this pane produces output, or after ``within`` seconds (a lost notice, or no
        control mode: the caller reads anyway); at once if it produced output after ``since`` (anyio's
        clock), so output that came before the caller began to wait is not missed."""
        if since is not None and self.output_at.get(pane_id, float("-inf")) > since:
            return
        drew = self._drew.setdefault(pane_id, anyio.Event())
        with anyio.move_on_after(within):
            await drew.wait()

    def mark_structure(self) -> None:
        """Panes, windows or sessions came, went or moved: poll at the next round."""
        self._structure = True
        self._news.set()

    def forget(self, pane_id: str) -> None:
        """A pane's incarnation went: its capture times with it."""
        self.read_at.pop(pane_id, None)
        self.output_at.pop(pane_id, None)

    async def capture_dirty(self) -> None:
        """One round: capture the panes that drew, each at most once per ``timing.capture`` (a pane
        that keeps drawing is read at that pace, or at ``timing.capture_awaited`` while a consented
        message waits for it; the first output after a quiet spell is read at once); then, if a
        structure notice came, poll (its new panes are read at the next round).
        With nothing due, wait for news (a pane that drew, a structure notice) or for the next pane
        to come due, at most ``timing.capture``."""
        timing, now = self.timing, anyio.current_time()
        pace, awaited = timing.capture, self.awaited() if self.dirty else frozenset()
        due_at = {
            p: self.read_at.get(p, float("-inf")) + (timing.capture_awaited if p in awaited else pace)
            for p in self.dirty
        }
        due = sorted(p for p, at in due_at.items() if at <= now)
        if not due and not self._structure:
            self._news = anyio.Event()
            with anyio.move_on_after(min([*due_at.values(), now + pace]) - now):
                await self._news.wait()
            return
        self.dirty.difference_update(due)
        for pane_id in due:
            if pane_id in self.watched.panes:
                await self.observe(pane_id)
        if self._structure:
            self._structure = False
            await self.poll()

    def awaited(self) -> frozenset[str]:
        """The core's awaited panes (:func:`connectcore.hub.awaited_panes`), once per state of the hub."""
        hub = self.core.hub
        if self._awaited_for is not hub:
            self._awaited_for, self._awaited_panes = hub, H.awaited_panes(hub)
        return self._awaited_panes

    async def sweep(self) -> None:
        """Read every pane (in case a notice was lost)."""
        for pane_id in sorted(self.watched.panes):
            await self.observe(pane_id)
