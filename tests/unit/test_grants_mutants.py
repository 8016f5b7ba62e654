"""Grants: rules the fourth 2026-12-06 mutation run found unpinned (docs/survivors/grants.md names the
mutants each test kills)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from connectcore import grants
from connectcore.effects import Audit, EndSubscriptions, Notify, Persist
from connectcore.grants import PRESET_SCOPES, GrantBook, GrantError, Preset
from tests.unit.test_grants_edges import launch


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



def test_revoking_control_is_one_whole_step_its_principal_stored_not_control() -> None:
    """Stopping control ends the role for good: its token revoked, the session's grant off, and the
    principal stored with ``control`` false, a bool (the store writes ``int(control)``; kills ``None``),
    its subscriptions ended, audited and the page told."""
    book = launch(GrantBook(), "hc", "pc", harness="codex", control=True, scopes=frozenset(), session=("codex", "sc"))
    new, effects = grants.revoke(book, now=3.0, principal_id="pc")
    principal = replace(book.principals["pc"], control=False)
    assert new.principals["pc"] == principal and new.principals["pc"].control is False
    assert effects == (
        Persist("token", ("hc",), new.tokens["hc"]),
        Persist("grant", ("session", "codex", "sc"), frozenset()),
        Persist("principal", ("pc",), principal),
        EndSubscriptions("pc"),
        Audit(actor="owner", action="revoke", outcome="revoked", target="agent:codex:sc", at=3.0),
        Notify("grant", ("pc",)),
    )
