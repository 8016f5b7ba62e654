"""hub.messages: rules the 2026-12-06 (fourth) mutation run found unpinned (docs/survivors/hub_messages.md
names the mutants each test kills)."""

from __future__ import annotations

from dataclasses import replace

from connectcore.delivery import MessageState
from connectcore.effects import CheckGuard
from connectcore.hub import messages as hub_messages
from tests.unit.hubkit import World


def test_every_armed_pane_takes_its_consented_message_in_one_pass() -> None:
    """attempt_armed: each pane that can attempt starts the guard of its message, and the pass returns
    every pane's CheckGuard, not only the last one's (kills ``attempt_armed`` 10, ``effects += more`` ->
    ``=``). The hub is built by hand (two armed panes, each with a consented message not yet attempted):
    stepped events arm and approve one pane at a time."""
    w = World()
    a, b, c = w.launch("a"), w.launch("b"), w.launch("c")
    w.idle(b)
    w.idle(c)  # both armed, nothing to attempt yet
    keys = [w.send(a, b), w.send(a, c)]  # awaiting consent
    ready = {k: replace(m, state=MessageState.READY) if k in keys else m for k, m in w.hub.messages.items()}
    hub, effects = hub_messages.attempt_armed(replace(w.hub, messages=ready), w.now)
    assert {e.message for e in effects if isinstance(e, CheckGuard)} == set(keys)
    assert all(hub.messages[k].state is MessageState.GUARDING for k in keys)
