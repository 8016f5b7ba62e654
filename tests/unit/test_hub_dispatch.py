"""The hub's one funnel: ``step`` dispatches every event through one table (issue 24)."""

from __future__ import annotations

import typing

import pytest

from connectcore import hub as H
from connectcore._machine import ConnectError
from tests.unit.hubkit import World


def test_every_event_type_has_exactly_one_handler_and_an_unknown_one_is_refused_loudly(w: World) -> None:
    """Claim: ``step`` dispatches through one table (issue 24): each event type of ``H.Event`` has its
    handler, nothing else is in the table, and an event the table does not name raises instead of
    being ignored (a subclass too: the table keys on the exact type)."""
    assert set(H.HANDLERS) == set(typing.get_args(H.Event))

    class NotAnEvent:
        now = 0.0

    with pytest.raises(ConnectError, match="unknown event NotAnEvent"):
        H.step(w.hub, NotAnEvent())  # type: ignore[arg-type]

    class TickLike(H.Tick):
        pass

    with pytest.raises(ConnectError, match="unknown event TickLike"):
        H.step(w.hub, TickLike(1.0))
