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


# --- merging two principals carries counters, pair approvals and hop state ---------------------------


def merged_pair(w: World) -> tuple[object, object, object]:
    """``a`` holds session s1; ``again`` (the same agent resumed by hand, session unknown at launch)
    gets its own principal until its binding merges it into a's; ``b`` is a recipient."""
    a = w.launch("a", harness="codex", session=("codex", "s1"))
    again = w.launch("again", harness="codex")
    b = w.launch("b")
    return a, again, b


def sent(w: World, key: tuple[str, str]) -> H.Message:
    """The message by its sender's id, whichever principal of the merge group it is stored under."""
    found = H.message_for(w.hub, key[0], key[1])
    assert found is not None
    return found


def merge(w: World, again: object) -> None:
    w.step(H.BindSession(w.now, again.principal, ("codex", "s1")))  # type: ignore[attr-defined]


def test_a_merge_keeps_the_sender_rate_limited() -> None:
    w = World.with_limits(sender_per_window=2)
    a, again, b = merged_pair(w)
    w.send(again, b, message_id="m1")
    w.send(again, b, message_id="m2")
    merge(w, again)
    with pytest.raises(H.CallRefused) as err:
        w.send(again, b, message_id="m3")
    assert err.value.reason == "rate_limited"
    with pytest.raises(H.CallRefused) as err:  # the merged agent's other token too: one agent, one budget
        w.send(a, b, message_id="m4")
    assert err.value.reason == "rate_limited"


def test_a_merge_keeps_the_pair_rate_limited() -> None:
    w = World.with_limits(pair_per_window=1)
    _a, again, b = merged_pair(w)
    w.send(again, b, message_id="m1")
    merge(w, again)
    with pytest.raises(H.CallRefused) as err:
        w.send(again, b, message_id="m2")
    assert err.value.reason == "rate_limited" and "pair" in str(err.value)


def test_a_merge_keeps_the_pair_approved() -> None:
    w = World()
    _a, again, b = merged_pair(w)
    w.decide(w.send(again, b, message_id="m1"))
    merge(w, again)
    key = w.send(again, b, message_id="m2")
    assert sent(w, key).card is None and sent(w, key).state.value == "ready"


def test_a_card_opened_before_a_merge_and_approved_after_it_approves_the_merged_agent() -> None:
    w = World()
    _a, again, b = merged_pair(w)
    first = w.send(again, b, message_id="m1")
    merge(w, again)
    w.decide(first)
    key = w.send(again, b, message_id="m2")
    assert sent(w, key).card is None


def test_a_merge_keeps_the_hop_count() -> None:
    w = World()
    _a, again, b = merged_pair(w)
    received = w.send(b, again, message_id="q1")
    w.decide(received)
    w.deliver(received, again)
    merge(w, again)
    key = w.send(again, b, message_id="answer")
    assert sent(w, key).hop == 2
    assert sent(w, key).conversation == w.message(received).conversation


def test_a_message_received_by_the_old_principal_after_the_merge_still_counts_for_the_hop() -> None:
    w = World()
    _a, again, b = merged_pair(w)
    received = w.send(b, again, message_id="q1")
    w.decide(received)
    merge(w, again)
    w.deliver(received, again)  # addressed to again's old principal, delivered after the merge
    key = w.send(again, b, message_id="answer")
    assert sent(w, key).hop == 2


def test_a_resume_through_a_launch_with_the_session_keeps_every_counter() -> None:
    w = World.with_limits(sender_per_window=1)
    a = w.launch("a", session=("claude", "s1"))
    b = w.launch("b")
    w.decide(w.send(a, b, message_id="m1"))
    w.step(H.PaneGone(w.now, a.pane, a.incarnation))
    resumed = w.launch("a2", session=("claude", "s1"), pane=a.pane)
    with pytest.raises(H.CallRefused) as err:
        w.send(resumed, b, message_id="m2")
    assert err.value.reason == "rate_limited"
    assert H.pair_approved(w.hub, resumed.principal, b.incarnation)
