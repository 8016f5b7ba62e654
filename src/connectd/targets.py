"""Where a target names, for every agent call and the delivery guard: the directory's rule
(:func:`connectcore.directory.resolve`), and for the ``control`` handle the hub's running control when
the directory does not mark control's pane itself (:func:`connectcore.hub_acts.control_pane`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from connectcore import directory as D
from connectcore import hub_acts

if TYPE_CHECKING:
    from connectd.engine import Engine


def resolve(engine: Engine, target: str) -> D.PaneRecord:
    """The one live pane ``target`` names, or :class:`connectcore.directory.TargetError`."""
    try:
        return D.resolve(engine.directory, target)
    except D.TargetError as exc:
        if exc.reason is not D.TargetRefusal.NO_PANE or D.handle_of(target) != str(D.Handle(D.HandleKind.CONTROL)):
            raise
        found = hub_acts.control_pane(engine.hub.book)
        record = engine.directory.panes.get(found[0]) if found else None
        if found is None or record is None or record.token != found[1]:
            raise
        return record
