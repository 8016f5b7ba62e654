"""Grants: rules the fourth 2026-12-06 mutation run found unpinned (docs/survivors/grants.md names the
mutants each test kills)."""

from __future__ import annotations

import pytest

from connectcore import grants
from connectcore.grants import PRESET_SCOPES, GrantBook, GrantError, Preset


def test_the_pane_toggle_s_refusals_say_why_naming_the_pane() -> None:
    """Off for a pane with neither a principal nor a session, a preset for a pane with no session: each
    refused naming the pane and what to do."""
    book = GrantBook()
    with pytest.raises(GrantError) as off:
        grants.pane_toggle(book, "%9", "inc-none", None, frozenset())
    assert (off.value.reason, str(off.value)) == ("not_connected", "%9 is not connected")
    with pytest.raises(GrantError) as none:
        grants.pane_toggle(book, "%9", "inc-none", None, PRESET_SCOPES[Preset.COLLABORATE])
    assert (none.value.reason, str(none.value)) == (
        "ambiguous_binding", "%9 holds no unambiguously bound agent session: connect it at launch instead")

