"""Where a target names, for every agent call and the delivery guard: the directory's rule
(:func:`connectcore.directory.resolve`), and for the ``control`` handle the core's running control
(:func:`connectcore.hub.acts.control_pane`: the one control's live token), read at the moment of the
call, so a control that was stopped a moment ago is never named by a directory snapshot."""

from __future__ import annotations

from typing import TYPE_CHECKING

from connectcore import directory as D
from connectcore.hub import acts as hub_acts

if TYPE_CHECKING:
    from connectd.daemon.parts import Engine

CONTROL = str(D.Handle(D.HandleKind.CONTROL))


def resolve(engine: Engine, target: str) -> D.PaneRecord:
    """The one live pane ``target`` names, or :class:`connectcore.directory.TargetError`."""
    if D.handle_of(target) != CONTROL:
        return D.resolve(engine.watcher.directory, target)
    return D.resolve_control(engine.watcher.directory, hub_acts.control_pane(engine.hub.book))
