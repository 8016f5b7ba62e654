"""What the watcher holds of the panes it watches (:class:`Watched`: the directory and each pane's
state), shared by its parts (:mod:`connectd.tmux.watcher`, :mod:`connectd.tmux.pane_poll`,
:mod:`connectd.tmux.captures`), and a listed pane's incarnation."""

from __future__ import annotations

from dataclasses import dataclass, field

from connectcore import directory as D
from connectcore.screen import Reading
from connectd.tmux.adapter import Capture, PaneInfo


@dataclass
class PaneState:
    info: PaneInfo
    record: D.PaneRecord
    reading: Reading | None = None
    capture: Capture | None = None
    release: str | None = None  # the agent's release, once its banner or its program named it
    probed: bool = False  # its program was asked (once per incarnation)
    retell: bool = False  # tell the core this pane's next reading even if unchanged (its release came)
    release_kept: bool = False  # its release is in the store (kept across a daemon restart)


@dataclass
class Watched:
    """The directory as the last poll (and the readings since) left it, and each live pane's state."""

    directory: D.Directory = field(default_factory=D.Directory)
    panes: dict[str, PaneState] = field(default_factory=dict)


def incarnation_of(info: PaneInfo) -> D.Incarnation:
    return D.Incarnation(
        server_pid=info.server_pid,
        server_start=info.server_start_time,
        pane_id=info.pane_id,
        pane_pid=info.pane_pid or 0,
        process_start=info.process_start_time or 0,
    )


def token_of(info: PaneInfo) -> str:
    return D.incarnation_token(incarnation_of(info))


def alive(info: PaneInfo) -> bool:
    """The listed pane has a live incarnation (the core's :func:`connectcore.directory.pane_live`)."""
    return D.pane_live(dead=info.dead, pane_pid=info.pane_pid, process_start=info.process_start_time)
