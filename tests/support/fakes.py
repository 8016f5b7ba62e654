"""In-memory fakes of the core's ports (``connectcore.ports``), for tests of the pure core."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field


@dataclass
class FakeClock:
    """A clock that moves only when told to."""

    now: float = 1_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        self.now += seconds
        return self.now


@dataclass
class FakePane:
    text: str = ""
    typed: list[str] = field(default_factory=list)
    options: dict[str, str] = field(default_factory=dict)
    argv: tuple[str, ...] = ()
    alive: bool = True


@dataclass
class FakePanes:
    """Panes as plain records: what was pasted, submitted, set and respawned."""

    panes: dict[str, FakePane] = field(default_factory=dict)

    def pane(self, pane_id: str) -> FakePane:
        return self.panes.setdefault(pane_id, FakePane())

    async def capture(self, pane_id: str, scrollback_lines: int = 0) -> str:
        return self.pane(pane_id).text

    async def paste_text(self, pane_id: str, text: str, *, submit_after: float | None = None) -> None:
        self.pane(pane_id).text += text
        if submit_after is not None:
            await self.press_enter(pane_id)

    async def press_enter(self, pane_id: str) -> None:
        pane = self.pane(pane_id)
        pane.typed.append(pane.text)
        pane.text = ""

    async def send_exit_command(self, pane_id: str, command: str, *, settle: float = 0.4) -> None:
        self.pane(pane_id).alive = False

    async def get_pane_option(self, pane_id: str, name: str) -> str | None:
        return self.pane(pane_id).options.get(name)

    async def set_pane_option(self, pane_id: str, name: str, value: str | None) -> None:
        options = self.pane(pane_id).options
        if value is None:
            options.pop(name, None)
        else:
            options[name] = value

    async def respawn(
        self, pane_id: str, argv: Sequence[str], cwd: str, env: Mapping[str, str], *, kill: bool = False
    ) -> None:
        pane = self.pane(pane_id)
        pane.argv, pane.alive, pane.text = tuple(argv), True, ""
