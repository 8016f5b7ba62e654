"""Issue 10, the reads and grants part: merges carry counters, the cap binds every scope check, the
gate comes first, and the read rules live in the core (``connectcore.reads``)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from connectcore import consent, grants
from connectcore import hub as H
from connectcore.grants import PRESET_SCOPES, Preset, Scope
from tests.unit.hubkit import World

# --- the policy cap binds existing grants -----------------------------------------------------------


def capped(w: World, cap: Preset) -> None:
    """The daemon restarted with a lower cap in policy.toml (the stored grants are unchanged)."""
    w.hub = replace(w.hub, book=grants.with_cap(w.hub.book, cap))


def test_a_lowered_cap_binds_a_collaborate_grant_in_every_scope_check() -> None:
    w = World()
    a, b = w.launch("a", session=("claude", "sa")), w.launch("b", session=("claude", "sb"))
    capped(w, Preset.OBSERVE)
    assert grants.scopes_of(w.hub.book, a.principal) == PRESET_SCOPES[Preset.OBSERVE]
    with pytest.raises(grants.ScopeDenied):
        grants.require(w.hub.book, w.hub.book.principals[a.principal], Scope.MESSAGE)
    with pytest.raises(H.CallRefused) as err:
        H.authorize(w.hub, token_hash=a.token, scope=Scope.MESSAGE, action="send_message", now=w.now)
    assert err.value.reason == "scope_denied" and err.value.audit.outcome == "refused"
    with pytest.raises(H.CallRefused) as err:
        w.send(a, b, message_id="m1")
    assert err.value.reason == "scope_denied"
    assert not w.hub.messages
    # the stored grant is untouched: raising the cap again gives it back
    assert w.hub.book.grants[("session", "claude", "sa")] == PRESET_SCOPES[Preset.COLLABORATE]
    capped(w, Preset.COLLABORATE)
    assert grants.scopes_of(w.hub.book, a.principal) == PRESET_SCOPES[Preset.COLLABORATE]


def test_a_lowered_cap_makes_a_recipient_unreachable() -> None:
    w = World()
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b, message_id="before")
    w.decide(key)
    capped(w, Preset.OBSERVE)
    _principal, scopes = H._recipient_scopes(w.hub, b.incarnation)
    assert consent.may_receive(recipient_kind="claude", recipient_scopes=scopes, sender_scopes=frozenset({"message"})) is not None


def test_a_cap_of_off_disconnects_every_ordinary_agent_but_not_control() -> None:
    w = World()
    a = w.launch("a")
    c = w.launch("c", control=True, scopes=frozenset())
    capped(w, Preset.OFF)
    assert grants.authenticate_or_none(w.hub.book, a.token) is None
    assert grants.scopes_of(w.hub.book, grants.authenticate(w.hub.book, c.token).id) == grants.CONTROL_SCOPES
