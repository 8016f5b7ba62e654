"""Ports: what the core's effects need from the world, as Protocols.

The core never calls these (it returns effects as data); they describe, in the core's own terms, what
the daemon's adapters must offer to carry the effects out, so a reader can hold ``connectd`` against
the design. ``connectd.tmux.adapter.TmuxAdapter`` implements :class:`Panes` (its ``capture`` returns a
``connectd.tmux.adapter.Capture``, a :class:`PaneText`); the daemon's clock is ``time.time``.
``tests/unit/test_ports.py`` holds each implementation against these declarations, method by method
(``isinstance`` against a runtime-checkable Protocol only looks for names: ``print`` is a ``Clock``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable


@runtime_checkable
class Clock(Protocol):
    """Seconds since the epoch; the core receives its readings inside events as ``now``."""

    def __call__(self) -> float: ...


@runtime_checkable
class PaneText(Protocol):
    """One capture of a pane, as ``screen.read_screen`` takes it: text (scrollback, then the visible
    screen), the cursor within the visible screen, and the screen's size."""

    text: str
    cursor: tuple[int, int]
    width: int
    height: int


@runtime_checkable
class Panes(Protocol):
    """The pane operations behind ``TypeText``, ``SetPaneOption``, ``ExitAgent`` and
    ``Respawn``, plus the capture that feeds the screen reader. Pane ids only (``%N``)."""

    async def capture(self, pane_id: str, scrollback_lines: int = 0) -> PaneText: ...

    async def paste_text(self, pane_id: str, text: str, *, submit_after: float | None = None) -> str | None: ...

    async def enter_once(self, pane_id: str, token: str) -> None: ...

    async def press_enter(self, pane_id: str) -> None: ...

    async def send_exit_command(self, pane_id: str, command: str, *, settle: float = 0.4) -> None: ...

    async def get_pane_option(self, pane_id: str, name: str) -> str | None: ...

    async def set_pane_option(self, pane_id: str, name: str, value: str | None) -> None: ...

    async def respawn(
        self, pane_id: str, argv: Sequence[str], cwd: str, env: Mapping[str, str], *, kill: bool = False
    ) -> None: ...
