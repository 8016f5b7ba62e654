"""Ports: what the core's effects need from the world, as Protocols.

The core never calls these (it returns effects as data); they describe, in the core's own terms, what
the daemon's adapters must offer to carry the effects out, so a reader can hold ``connectd`` against
the design. ``connectd.tmux.adapter.TmuxAdapter`` implements :class:`Panes` (its ``capture`` returns a
``connectd.tmux.adapter.Capture``, a :class:`PaneText`); the daemon's clock is ``time.time``.
``tests/unit/test_ports.py`` holds each implementation against these declarations, method by method
(``isinstance`` against a runtime-checkable Protocol only looks for names: ``print`` is a ``Clock``).
:class:`Bus` is what a federated box publishes and receives envelopes through
(``connectd.federation.bus.NatsBus``; the simulation's ``SimBus``), with its value types and its two errors.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
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


class BusUnavailable(Exception):
    """The bus cannot take the call now: not connected, or no answer in time. Nothing is known about
    whether a publish reached a server; the same attempt may be published again (same ``msg_id``)."""


class BusRefused(Exception):
    """The bus refused the call: a permissions violation (a subject or consumer not this box's), a
    stream limit (a full subject), no such stream. Publishing the same again is refused again."""


@dataclass(frozen=True)
class PublishAck:
    """A publish acknowledgement: "this attempt reached a server", never acceptance
    (docs/federation.md). ``duplicate``: the server already held a message with that ``msg_id``
    (within its duplicate window) and stored nothing; ``sequence`` is then the first one's."""

    stream: str
    sequence: int
    duplicate: bool


@dataclass(frozen=True)
class Delivery:
    """One message fetched from this box's consumer: the subject it was published on, its bytes, how
    many times it has been delivered (1 the first time), and the adapter's handle to acknowledge it
    (opaque to the core; not compared)."""

    subject: str
    data: bytes
    delivered: int
    handle: object = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class BusRequest:
    """A request addressed to this box (a history query): its bytes, and the adapter's handle to
    answer it (``Bus.answer``; opaque to the core; not compared)."""

    data: bytes
    handle: object = field(default=None, compare=False, repr=False)


@runtime_checkable
class Bus(Protocol):
    """The envelopes' transport (docs/federation.md, "NATS"): JetStream in the daemon, in memory in the
    simulation. It may drop, duplicate, delay and reorder; a :class:`PublishAck` is not acceptance.
    Every method raises only :class:`BusUnavailable` or :class:`BusRefused`."""

    @property
    def connected(self) -> bool:
        """Whether the bus takes calls now."""
        ...

    @property
    def reconnecting(self) -> bool:
        """Whether a dropped connection is being brought back (the client not closed): the caller waits
        for it rather than connecting again; False while connected, and before a connection or after
        its close."""
        ...

    async def publish(self, subject: str, data: bytes, *, msg_id: str) -> PublishAck:
        """Store ``data`` on ``subject``; a copy with the same ``msg_id`` within the duplicate window is
        acknowledged ``duplicate`` and not stored again."""
        ...

    async def fetch(self, *, batch: int, timeout: float) -> Sequence[Delivery]:
        """Up to ``batch`` deliveries from this box's consumer, waiting at most ``timeout`` seconds for
        the first; empty when none came. An unacknowledged delivery comes again after the ack wait."""
        ...

    async def ack(self, delivery: Delivery) -> None:
        """Acknowledge ``delivery``: it is not delivered again (the work queue deletes it)."""
        ...

    async def put_entry(self, reader_box: str, data: bytes) -> int:
        """Put this box's directory entry for ``reader_box``; the bucket's revision."""
        ...

    async def get_entry(self, publisher_box: str) -> bytes | None:
        """The directory entry ``publisher_box`` put for this box (direct get), or None."""
        ...

    def entry_updates(self) -> AsyncIterator[tuple[str, bytes]]:
        """(publisher box id, entry) for each entry put for this box from now on (the republish)."""
        ...

    async def answer(self, request: BusRequest, data: bytes) -> None:
        """Answer ``request`` (a history query to this box)."""
        ...

    async def request(self, box: str, data: bytes, *, timeout: float) -> bytes | None:
        """Ask ``box`` (a history query); its answer, or None when none came within ``timeout``."""
        ...

    def requests(self) -> AsyncIterator[BusRequest]:
        """The requests addressed to this box from now on."""
        ...
