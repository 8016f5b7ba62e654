"""The hub's guard at its edges: pass, wait, cancel or refuse, and a handle rerouted to another pane.

Effects are frozen dataclasses, so whole tuples are compared; each test names the rule it pins.
"""

from __future__ import annotations

import pytest

from connectcore import hub as H
from connectcore.arming import Arming, Seen
from connectcore.consent import Decision
from connectcore.delivery import SUBMIT_SETTLE, MessageState
from connectcore.effects import (
    CheckGuard,
    ConfirmTyping,
    Notify,
    Persist,
    TypeText,
)
from connectcore.grants import PRESET_SCOPES, Preset
from tests.unit.hubkit import World, actor, final_effects, guarding

# --- guard --------------------------------------------------------------------------------------------


def test_guard_for_an_unknown_message_is_refused_by_reason(w: World) -> None:
    with pytest.raises(H.UnknownItem) as err:
        w.step(H.GuardObserved(w.now, ("p", "m"), "inc", True, "fp", w.now))
    assert err.value.reason == "unknown_message" and str(err.value) == "no message ('p', 'm')"


def test_guard_for_a_message_no_longer_guarding_changes_nothing(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b)
    before = w.hub
    hub, effects = H.step(w.hub, H.GuardObserved(w.now, key, b.incarnation, True, "fp-idle", w.now))
    assert hub is before and effects == ()


def test_guard_pass_persists_typing_then_types_and_submits_in_one_effect_and_confirms(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    key = guarding(w, a, b)
    w.now += 2
    effects = w.guard(key, b)
    typing = w.message(key)
    assert typing.state is MessageState.TYPING and typing.reason == "typing started" and typing.final_at is None
    assert effects == (
        Persist("message", key, typing),
        TypeText(b.pane, b.incarnation, typing.typed, key, submit=True, settle=SUBMIT_SETTLE["claude"]),
        ConfirmTyping(b.pane, b.incarnation, key),
    )
    assert w.hub.panes[b.pane] == H.PaneView(b.incarnation, Arming.TYPING, Seen(True, "fp-idle", w.now), w.now, ("fp-idle",))
    assert w.hub.attempts == {b.pane: key}  # the slot stays taken until the typing is observed


def test_guard_wait_returns_to_ready_disarms_and_frees_the_slot(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    key = guarding(w, a, b)
    effects = w.guard(key, b, "fp-other")
    waiting = w.message(key)
    assert effects == ()
    assert waiting.state is MessageState.READY and waiting.reason == "screen changed before typing"
    assert w.hub.panes[b.pane] == H.PaneView(b.incarnation, Arming.BUSY, Seen(True, "fp-other", w.now), w.now)
    assert w.hub.attempts == {}
    # The daemon reports the guard's reading as the pane's next one: an idle transition.
    assert [e.message for e in w.idle(b, "fp-other") if isinstance(e, CheckGuard)] == [key]


def test_guard_with_no_view_of_the_pane_waits(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    key = guarding(w, a, b)
    w.hub = H.replace(w.hub, panes={})  # type: ignore[attr-defined]
    assert w.guard(key, b) == ()
    assert w.message(key).state is MessageState.READY and w.hub.panes == {}


def test_guard_on_a_changed_incarnation_cancels_with_its_reason(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    key = guarding(w, a, b)
    effects = w.guard(key, b, incarnation="inc-other")
    assert effects == final_effects(w, key, "cancelled", "recipient incarnation changed")
    assert w.hub.attempts == {}


def test_guard_on_a_gone_pane_cancels(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    key = guarding(w, a, b)
    assert w.guard(key, b, incarnation=None) == final_effects(w, key, "cancelled", "recipient incarnation changed")


def test_guard_cancels_when_the_sender_s_process_ended(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    key = guarding(w, a, b)
    w.step(H.PaneGone(w.now, a.pane, a.incarnation))
    assert w.message(key).state is MessageState.GUARDING
    effects = w.guard(key, b)
    assert effects == final_effects(w, key, "cancelled", "sender no longer connected")


def test_guard_refuses_when_the_sender_lost_the_message_scope(w: World) -> None:
    a, b = w.launch("a", session=("claude", "sa")), w.launch("b")
    key = guarding(w, a, b)
    w.step(H.SetGrant(w.now, ("claude", "sa"), PRESET_SCOPES[Preset.OBSERVE]))
    effects = w.guard(key, b)
    assert effects == final_effects(w, key, "refused", "sender lost the message scope")


def test_guard_refuses_when_the_recipient_is_no_longer_reachable(w: World) -> None:
    a, b = w.launch("a"), w.launch("b", session=("claude", "sb"))
    key = guarding(w, a, b)
    w.step(H.SetGrant(w.now, ("claude", "sb"), PRESET_SCOPES[Preset.OBSERVE]))
    effects = w.guard(key, b)
    assert effects == final_effects(w, key, "refused", "recipient can no longer receive (not_reachable)")


def test_control_s_message_passes_the_guard_into_a_pane_that_is_not_reachable(w: World) -> None:
    control = w.launch("ctl", Preset.OFF, control=True)
    b = w.launch("b", Preset.OBSERVE)
    key = guarding(w, control, b)
    assert [type(e) for e in w.guard(key, b)] == [Persist, TypeText, ConfirmTyping]


@pytest.mark.parametrize(
    ("handle", "target", "moves"),
    [
        (None, "other", False),  # no handle: the target is the pane itself
        ("h", None, False),  # the daemon could not resolve the handle: never typed, it waits
        ("h", "ambiguous", False),  # several panes match: never guessed, it waits
        ("h", "same", False),  # still resolves here
        ("h", "same-pane-new-inc", True),
        ("h", "other-pane-same-inc", True),
        ("h", "other", True),
    ],
)
def test_guard_moves_a_handle_only_when_it_resolves_elsewhere(
    w: World, handle: str | None, target: str | None, moves: bool
) -> None:
    a, b, c = w.launch("a"), w.launch("b"), w.launch("c")
    key = guarding(w, a, b, Decision.APPROVE_ONCE, handle=handle)
    where = {
        None: None,
        "ambiguous": H.Unresolved("ambiguous"),
        "same": H.Recipient(b.pane, b.incarnation, "claude"),
        "same-pane-new-inc": H.Recipient(b.pane, c.incarnation, "claude"),
        "other-pane-same-inc": H.Recipient(c.pane, b.incarnation, "claude"),
        "other": H.Recipient(c.pane, c.incarnation, "claude"),
    }[target]
    w.guard(key, b, handle=where)
    message = w.message(key)
    if moves:
        assert message.state is MessageState.AWAITING_CONSENT and message.reason == "handle moved; needs consent"
        assert w.hub.attempts == {}
    elif handle is not None and not isinstance(where, H.Recipient):
        assert message.state is MessageState.READY and message.recipient_pane == b.pane
        assert message.reason == f"handle h names no single pane ({'ambiguous' if where else 'unresolved'})"
        assert w.hub.panes[b.pane].arming is Arming.USED and w.hub.attempts == {}
    else:
        assert message.state is MessageState.TYPING and message.recipient_pane == b.pane


def test_reroute_to_a_new_recipient_opens_a_card_for_it(w: World) -> None:
    a, b, c = w.launch("a"), w.launch("b"), w.launch("c")
    key = guarding(w, a, b, handle="title:x")
    w.now += 10
    effects = w.step(
        H.GuardObserved(w.now, key, b.incarnation, True, "fp-idle", w.now, H.Recipient(c.pane, c.incarnation, "codex"), "card-new")
    )
    moved = w.message(key)
    assert moved.recipient_pane == c.pane and moved.recipient_incarnation == c.incarnation
    assert moved.recipient_principal == c.principal and moved.recipient_kind == "codex"
    assert moved.card == "card-new" and moved.handle == "title:x"
    card = w.hub.cards["card-new"]
    assert card.recipient_actor == actor(w, c) and card.recipient_pane == c.pane
    assert card.created_at == w.now and card.expires_at == w.now + 900
    assert effects == (
        Persist("message", key, moved),
        Persist("card", ("card-new",), card),
        Notify("card", ("card-new",), payload={"state": "pending"}),
    )
    assert w.hub.attempts == {}


def test_a_card_never_outlives_its_message_s_hour(w: World) -> None:
    a, b, c = w.launch("a"), w.launch("b"), w.launch("c")
    key = guarding(w, a, b, handle="h")
    created = w.message(key).created_at
    w.now += 3000
    w.guard(key, b, handle=H.Recipient(c.pane, c.incarnation, "claude"))
    assert w.hub.cards[w.card_of(key)].expires_at == created + 3600


def test_reroute_to_an_approved_pair_is_ready_and_guards_an_armed_pane(w: World) -> None:
    a, b, c = w.launch("a"), w.launch("b"), w.launch("c")
    pre = w.send(a, c)
    w.decide(pre)
    w.deliver(pre, c)
    w.idle(c, "busy", ready=False)
    key = guarding(w, a, b, handle="h")
    w.idle(c, "fp-c")
    effects = w.guard(key, b, handle=H.Recipient(c.pane, c.incarnation, "claude"))
    persisted = effects[0]
    assert isinstance(persisted, Persist) and persisted.key == key
    assert persisted.record.state is MessageState.READY and persisted.record.reason == "handle moved; pair approved"
    assert effects[1:] == (CheckGuard(c.pane, c.incarnation, key),)
    assert w.message(key).state is MessageState.GUARDING and w.hub.attempts == {c.pane: key}


def test_reroute_past_the_hop_limit_needs_a_card_even_for_an_approved_pair() -> None:
    w = World.with_limits(hop_limit=1)
    a, b, c = w.launch("a"), w.launch("b"), w.launch("c")
    pre = w.send(a, c)
    w.decide(pre)
    w.deliver(pre, c)  # c received hop 1
    w.decide(w.send(c, b))  # past the limit: b's message still needs a card
    k = w.send(c, a, handle="h")  # c replies: hop 2
    assert w.message(k).hop == 2
    w.decide(k)
    w.idle(a)
    w.step(H.PaneObserved(w.now, b.pane, b.incarnation, False, "x", w.now))
    assert (c.principal, b.incarnation) in w.hub.pairs
    w.guard(k, a, handle=H.Recipient(b.pane, b.incarnation, "claude"))
    assert w.message(k).state is MessageState.AWAITING_CONSENT


def test_reroute_to_a_pane_that_cannot_receive_is_refused_with_why(w: World) -> None:
    a, b, c = w.launch("a"), w.launch("b"), w.launch("c")
    key = guarding(w, a, b, handle="h")
    effects = w.guard(key, b, handle=H.Recipient(c.pane, c.incarnation, "shell"))
    assert effects == final_effects(w, key, "refused", "handle moved to a pane that cannot receive (shell_pane)")
    assert w.hub.attempts == {}


def test_control_reroute_to_a_pane_with_no_principal_has_no_recipient_principal(w: World) -> None:
    control = w.launch("ctl", Preset.OFF, control=True)
    b = w.launch("b")
    key = guarding(w, control, b, handle="h")
    w.guard(key, b, handle=H.Recipient("%9", "inc-pure", "claude"))
    moved = w.message(key)
    assert moved.recipient_principal is None and moved.recipient_pane == "%9"
    assert w.hub.cards[w.card_of(key)].recipient_actor == "pane:%9"


# --- ordering and accumulation ------------------------------------------------------------------------


def test_reroute_to_an_approved_pair_persists_the_moved_message(w: World) -> None:
    a, b, c = w.launch("a"), w.launch("b"), w.launch("c")
    pre = w.send(a, c)
    w.decide(pre)
    key = guarding(w, a, b, handle="h")
    effects = w.guard(key, b, handle=H.Recipient(c.pane, c.incarnation, "claude"))
    assert effects == (Persist("message", key, w.message(key)),)
    assert w.message(key).state is MessageState.READY


def test_a_failed_guard_is_the_core_s_to_judge(w: World) -> None:
    """Claim (issue 24: was decided in connectd/delivery/guard.py): a guard that failed before typing is a
    reading that is not ready (the message waits, the pane's idle unused); one that failed after typing
    began asks for one last look answered with the failure (unconfirmed follows); a message the hub no
    longer holds gets nothing."""
    a, b = w.launch("a"), w.launch("b")
    key = guarding(w, a, b)
    w.now += 1
    effects = w.step(H.GuardFailed(w.now, key, b.incarnation, "typing failed: can't find pane"))
    assert effects == () and w.message(key).state is MessageState.READY
    assert w.message(key).reason == "screen changed before typing"
    # the failure is the pane's newest reading, not ready and of no screen, from the failure's time
    assert w.hub.panes[b.pane] == H.PaneView(b.incarnation, Arming.BUSY, Seen(False, "", w.now), w.now)
    assert w.hub.guards == {} and w.hub.attempts == {}
    w.now += 1
    w.idle(b, fingerprint="fp-again")  # the pane read again: guarded anew
    assert w.message(key).state is MessageState.GUARDING
    typed = w.guard(key, b, fingerprint="fp-again")
    assert any(isinstance(e, ConfirmTyping) for e in typed) and w.message(key).state is MessageState.TYPING
    (confirm,) = w.step(H.GuardFailed(w.now, key, b.incarnation, "typing failed: server exited"))
    assert confirm == ConfirmTyping(b.pane, b.incarnation, key, "typing failed: server exited")
    assert w.message(key).state is MessageState.TYPING  # unconfirmed comes with the last look's answer
    assert w.step(H.GuardFailed(w.now, ("p-none", "m-none"), b.incarnation, "x")) == ()


def test_the_guard_s_reading_counts_as_the_pane_s_next_observation_only_while_its_message_waits(w: World) -> None:
    """Claim (issue 24: was an `if` in connectd/delivery/guard.py): after a guard that typed nothing, its
    reading is also the pane's next observation while the message it checked is ready; not once it
    is typing or final, nor for a message the hub does not hold."""
    a, b = w.launch("a"), w.launch("b")
    key = guarding(w, a, b)
    assert not H.guard_reading_counts(w.hub, key)  # guarding
    w.guard(key, b, ready=False)  # the pane was busy under the lock: the message waits again
    assert w.message(key).state is MessageState.READY and H.guard_reading_counts(w.hub, key)
    assert not H.guard_reading_counts(w.hub, ("p-none", "m-none"))
    w.step(H.Revoke(w.now, a.principal))
    assert not H.guard_reading_counts(w.hub, key)


def test_a_guard_that_fails_after_its_message_was_pruned_still_frees_the_pane(w: World) -> None:
    """The sender revoked under the guard (the message cancelled, its guard still out), the message
    pruned past its hour: the guard's failure, when it comes, takes the guard out of flight."""
    a, b = w.launch("a"), w.launch("b")
    key = guarding(w, a, b)
    w.step(H.Revoke(w.now, a.principal))
    w.now += 7200
    w.step(H.Tick(w.now))
    assert key not in w.hub.messages and w.hub.guards == {b.pane: key}
    assert w.step(H.GuardFailed(w.now, key, b.incarnation, "typing failed: can't find pane")) == ()
    assert w.hub.guards == {}
