"""Where a target names, for every agent call and the delivery guard: the directory's rule
(:func:`connectcore.directory.resolve`), and for the ``control`` handle the core's running control
(:func:`connectcore.hub.acts.control_pane`: the one control's live token), read at the moment of the
call, so a control that was stopped a moment ago is never named by a directory snapshot."""

from __future__ import annotations

from connectcore import directory as D
from connectcore import grants
from connectcore.hub import acts as hub_acts

CONTROL = str(D.Handle(D.HandleKind.CONTROL))


def resolve_in(directory: D.Directory, book: grants.GrantBook, target: str) -> D.PaneRecord:
    """The one live pane ``target`` names in ``directory`` (``book``: the grant book now), or
    :class:`connectcore.directory.TargetError`."""
    if D.handle_of(target) != CONTROL:
        return D.resolve(directory, target)
    return D.resolve_control(directory, hub_acts.control_pane(book))
