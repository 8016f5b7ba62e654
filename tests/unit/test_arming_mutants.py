"""Arming: rules the 2026-12-06 (fourth) mutation run found unpinned (docs/survivors/arming.md lists the
mutants left as equivalent; each test names the mutants it kills)."""

from __future__ import annotations

from connectcore import arming as A


def test_a_pane_typed_into_before_a_restart_is_not_armed_by_the_clock_until_it_is_read() -> None:
    """At the daemon's start a pane a message was being typed into has no reading yet: it is not
    ready, so the quiet rule does not arm it however long it stays quiet (unless a message awaits it),
    and any reading at all is newer than none (kills the placeholder reading made ready)."""
    view = A.typed_before_restart("inc-1", 100.0)
    assert view.arming is A.Arming.USED and not view.ready
    assert A.quiet(view, 100.0 + 3600, rearm_after=10.0) is None
    armed = A.quiet(view, 100.0 + 10, rearm_after=10.0, awaited=True)
    assert armed is not None and armed.armed and not armed.ready
    assert not A.older(view, "inc-1", -1e300)
