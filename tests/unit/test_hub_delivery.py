"""Each delivery rule of the specification, and each refusal reason, through the hub."""

from __future__ import annotations

import pytest

from connectcore import hub as H
from connectcore._machine import TransitionNotAllowed
from connectcore.consent import Decision
from connectcore.delivery import MessageState
from connectcore.effects import Audit, CheckGuard, ConfirmTyping, Persist, TypeText
from connectcore.grants import Preset
from tests.unit.hubkit import World


def kinds(effects: tuple[object, ...]) -> list[str]:
    return [type(e).__name__ for e in effects]


def test_first_message_opens_a_card_and_waits(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b, "please review")
    message = w.message(key)
    assert message.state is MessageState.AWAITING_CONSENT and message.outcome == "queued"
    card = w.hub.cards[w.card_of(key)]
    assert card.text == "please review" and card.recipient_pane == b.pane
    w.idle(b)
    assert w.message(key).state is MessageState.AWAITING_CONSENT  # no typing without consent


def test_approve_pair_then_delivery_types_provenance_and_text_once(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b, "line one\nline two")
    w.decide(key, Decision.APPROVE_PAIR)
    effects = w.idle(b)
    assert [type(e) for e in effects] == [CheckGuard]
    effects = w.guard(key, b)
    assert kinds(effects) == ["Persist", "TypeText", "ConfirmTyping"]
    persisted = effects[0]
    assert isinstance(persisted, Persist) and persisted.record.state is MessageState.TYPING
    typed = effects[1]
    assert isinstance(typed, TypeText)
    first, rest = typed.text.split("\n", 1)
    assert first.startswith("[connect] message ") and a.pane in first and "agent:claude:pane:" in first
    assert rest == "line one\nline two"
    w.typed(key)
    assert w.message(key).state is MessageState.DELIVERED
    all_typed = [e for e in w.effects if isinstance(e, TypeText)]
    assert len(all_typed) == 1


def test_approved_pair_skips_the_card_for_later_messages(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    first = w.send(a, b)
    w.decide(first)
    w.deliver(first, b)
    second = w.send(a, b)
    assert w.message(second).state is MessageState.READY and w.message(second).card is None


def test_approve_once_does_not_approve_the_pair(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    first = w.send(a, b)
    w.decide(first, Decision.APPROVE_ONCE)
    w.deliver(first, b)
    second = w.send(a, b)
    assert w.message(second).state is MessageState.AWAITING_CONSENT


def test_a_pane_is_awaited_only_while_a_consented_message_waits_for_it(w: World) -> None:
    """Claim: awaited_panes holds a recipient from consent until its message is typed, never before
    consent (the message waits for a person) nor after its outcome."""
    a, b, c = w.launch("a"), w.launch("b"), w.launch("c")
    key, other = w.send(a, b), w.send(a, c)
    assert H.awaited_panes(w.hub) == frozenset()  # both await consent
    w.decide(key)
    w.decide(other, Decision.DECLINE)
    w.idle(b, ready=False)
    assert H.awaited_panes(w.hub) == {b.pane}
    w.deliver(key, b)
    assert w.message(key).state is MessageState.DELIVERED
    assert H.awaited_panes(w.hub) == frozenset()


def test_decline_is_final_and_types_nothing(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b)
    w.decide(key, Decision.DECLINE)
    w.idle(b)
    assert w.message(key).state is MessageState.DECLINED
    assert not [e for e in w.effects if isinstance(e, TypeText)]


def test_a_card_is_answered_once(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b)
    w.decide(key, Decision.DECLINE)
    with pytest.raises(H.UnknownItem, match="already answered"):
        w.decide(key, Decision.APPROVE_PAIR)
    with pytest.raises(H.UnknownItem, match="no card"):
        w.step(H.Decide(w.now, "card-nope", Decision.APPROVE_ONCE))


def test_busy_recipient_keeps_the_message_queued_until_idle(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b)
    w.decide(key)
    assert w.idle(b, ready=False) == ()
    assert w.message(key).state is MessageState.READY
    assert kinds(w.idle(b)) == ["CheckGuard"]


def test_a_changed_screen_under_the_lock_is_transient(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b)
    w.decide(key)
    w.idle(b, "fp-1")
    assert w.guard(key, b, "fp-2") == ()  # screen changed: wait, type nothing
    assert w.message(key).state is MessageState.READY
    assert w.guard(key, b, "fp-2") == ()  # no new reading yet: the guard compares with the old one
    assert kinds(w.idle(b, "fp-2")) == ["CheckGuard"]  # the next idle reading arms the pane again
    assert kinds(w.guard(key, b, "fp-2"))[1] == "TypeText"


def test_a_draft_keeps_the_message_queued(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b)
    w.decide(key)
    w.idle(b)
    assert w.guard(key, b, ready=False) == ()  # draft appeared: composer no longer empty
    assert w.message(key).state is MessageState.READY


def test_a_changed_incarnation_cancels_at_once(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b)
    w.decide(key)
    w.idle(b)
    w.guard(key, b, incarnation="inc-other")
    assert w.message(key).state is MessageState.CANCELLED


def test_pane_gone_cancels_messages_and_cards_addressed_to_it(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b)
    w.step(H.PaneGone(w.now, b.pane, b.incarnation))
    assert w.message(key).state is MessageState.CANCELLED
    assert w.hub.cards[w.card_of(key)].state.value == "cancelled"


def test_respawned_pane_observed_with_new_incarnation_cancels(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b)
    w.decide(key)
    w.idle(b, ready=False)
    w.step(H.PaneObserved(w.now, b.pane, "inc-new", True, "fp", w.now))
    assert w.message(key).state is MessageState.CANCELLED


def test_unconfirmed_typing_keeps_the_id_used(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b, message_id="m-1")
    w.decide(key)
    w.idle(b)
    w.guard(key, b)
    w.typed(key, landed=False)
    assert w.message(key).state is MessageState.UNCONFIRMED
    with pytest.raises(H.CallRefused) as err:
        w.send(a, b, message_id="m-1")
    assert err.value.reason == "duplicate_id" and "unconfirmed" in str(err.value)


def test_retried_id_is_refused_and_typed_once(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b, message_id="same")
    w.decide(key)
    w.deliver(key, b)
    before = dict(w.hub.messages)
    with pytest.raises(H.CallRefused, match="already used"):
        w.send(a, b, message_id="same")
    assert w.hub.messages == before
    assert len([e for e in w.effects if isinstance(e, TypeText)]) == 1


def test_ids_are_scoped_to_the_sender(w: World) -> None:
    a, b, c = w.launch("a"), w.launch("b"), w.launch("c")
    w.send(a, c, message_id="shared")
    w.send(b, c, message_id="shared")  # another principal's id space
    assert (a.principal, "shared") in w.hub.messages and (b.principal, "shared") in w.hub.messages


@pytest.mark.parametrize(
    ("text", "reason", "needle"),
    [
        ("", "empty_text", "empty"),
        ("   \n ", "empty_text", "empty"),
        ("hi\x1b[2J", "control_character", "ESC (U+001B) at position 2"),
        ("a\rb", "control_character", "CR (U+000D) at position 1"),
        ("tab\there", "control_character", "TAB (U+0009) at position 3"),
        ("del\x7f", "control_character", "DEL (U+007F) at position 3"),
        ("c1\x9b", "control_character", "(U+009B) at position 2"),
        ("nul\x00", "control_character", "NUL (U+0000)"),
        ("bidi\u202e", "control_character", "U+202E"),
        ("sep\u2028", "control_character", "U+2028"),
    ],
)
def test_text_refusals_name_the_problem_and_store_nothing(w: World, text: str, reason: str, needle: str) -> None:
    a, b = w.launch("a"), w.launch("b")
    before = w.snapshot()
    with pytest.raises(H.CallRefused) as err:
        w.send(a, b, text, message_id="m-x")
    assert err.value.reason == reason and needle in str(err.value)
    assert w.hub == before  # nothing stored, no id consumed
    w.send(a, b, "fine now", message_id="m-x")  # the same id is judged afresh
    assert (a.principal, "m-x") in w.hub.messages


def test_unicode_and_newlines_are_allowed(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b, "héllo 👩‍💻 世界\n- list item")
    assert w.message(key).text.endswith("list item")


@pytest.mark.parametrize("bad_id", ["", "-starts-with-dash", "has space", "x" * 129, "semi;colon"])
def test_bad_message_ids_are_refused(w: World, bad_id: str) -> None:
    a, b = w.launch("a"), w.launch("b")
    with pytest.raises(H.CallRefused) as err:
        w.send(a, b, message_id=bad_id) if bad_id else w.step(
            H.Submit(w.now, a.token, "", "hi", H.Recipient(b.pane, b.incarnation, "claude"), "r", "c")
        )
    assert err.value.reason == "bad_message_id"
    assert not w.hub.messages


def test_size_cap_counts_the_provenance_line() -> None:
    w = World.with_limits(max_message_bytes=300)
    a, b = w.launch("a"), w.launch("b")
    provenance_size = 300 - 50
    with pytest.raises(H.CallRefused) as err:
        w.send(a, b, "x" * provenance_size)
    assert err.value.reason == "too_large" and "with its provenance line" in str(err.value)
    w.send(a, b, "x" * 20)


def test_multibyte_text_counts_bytes_not_characters() -> None:
    w = World.with_limits(max_message_bytes=400)
    a, b = w.launch("a"), w.launch("b")
    with pytest.raises(H.CallRefused, match="bytes"):
        w.send(a, b, "世" * 100)  # 300 bytes of text plus the provenance line


def test_sender_rate_limit_then_window_passes() -> None:
    w = World.with_limits(sender_per_window=3, pair_per_window=100)
    a, b, c = w.launch("a"), w.launch("b"), w.launch("c")
    for target in (b, c, b):
        w.send(a, target)
    with pytest.raises(H.CallRefused) as err:
        w.send(a, c)
    assert err.value.reason == "rate_limited" and "sender" in str(err.value)
    w.tick(61)
    w.send(a, c)


def test_pair_rate_limit_is_separate_from_sender_limit() -> None:
    w = World.with_limits(sender_per_window=100, pair_per_window=2)
    a, b, c = w.launch("a"), w.launch("b"), w.launch("c")
    w.send(a, b)
    w.send(a, b)
    with pytest.raises(H.CallRefused, match="pair rate limit"):
        w.send(a, b)
    w.send(a, c)


def test_id_cap_refuses_new_messages_and_never_evicts() -> None:
    w = World.with_limits(live_ids_per_principal=2, sender_per_window=100, pair_per_window=100)
    a, b = w.launch("a"), w.launch("b")
    k1 = w.send(a, b)
    k2 = w.send(a, b)
    with pytest.raises(H.CallRefused) as err:
        w.send(a, b)
    assert err.value.reason == "id_cap"
    assert k1 in w.hub.messages and k2 in w.hub.messages  # never evicted
    w.tick(3601)  # the hour passes: expired first, then released
    assert k1 not in w.hub.messages
    w.send(a, b)


def test_queued_bytes_per_recipient_and_total() -> None:
    probe = World()
    pa, pb = probe.launch("a"), probe.launch("b")
    size = probe.message(probe.send(pa, pb, "x" * 150)).typed_bytes
    w = World.with_limits(
        queued_bytes_per_recipient=2 * size + 10, queued_bytes_total=3 * size, sender_per_window=100, pair_per_window=100
    )
    a, b, c = w.launch("a"), w.launch("b"), w.launch("c")
    w.send(a, b, "x" * 150)
    w.send(a, b, "x" * 150)
    with pytest.raises(H.CallRefused, match="bytes queued") as err:
        w.send(a, b, "x" * 150)
    assert err.value.reason == "queue_full"
    with pytest.raises(H.CallRefused, match="the daemon already has"):
        w.send(a, c, "x" * 250)
    w.send(a, c, "x" * 100)


def test_unreachable_recipient_shell_pane_and_self_are_refused(w: World) -> None:
    a, b = w.launch("a"), w.launch("b", Preset.OBSERVE)
    with pytest.raises(H.CallRefused) as err:
        w.send(a, b)
    assert err.value.reason == "not_reachable"
    c = w.launch("c")
    with pytest.raises(H.CallRefused) as err:
        w.send(a, c, kind="shell")
    assert err.value.reason == "shell_pane"
    with pytest.raises(H.CallRefused) as err:
        w.send(a, c, kind="unknown")
    assert err.value.reason == "not_an_agent"
    with pytest.raises(H.CallRefused) as err:
        w.send(a, a)
    assert err.value.reason == "self"
    assert not w.hub.messages


def test_pure_pane_without_principal_is_not_reachable(w: World) -> None:
    a = w.launch("a")
    with pytest.raises(H.CallRefused, match="not reachable"):
        w.step(H.Submit(w.now, a.token, "m", "hi", H.Recipient("%9", "inc-pure", "codex"), "r", "c"))


def test_observe_cannot_send_and_unknown_token_is_not_connected(w: World) -> None:
    a, b = w.launch("a", Preset.OBSERVE), w.launch("b")
    with pytest.raises(H.CallRefused) as err:
        w.send(a, b)
    assert err.value.reason == "scope_denied" and err.value.audit.outcome == "refused"
    with pytest.raises(H.CallRefused) as err:
        w.step(H.Submit(w.now, "tok-bogus", "m", "hi", H.Recipient(b.pane, b.incarnation, "claude"), "r", "c"))
    assert err.value.reason == "not_connected" and str(err.value) == "not connected"


def test_control_reaches_a_pure_agent_pane(w: World) -> None:
    control = w.launch("control", Preset.OFF, control=True)
    b = w.launch("b", Preset.OBSERVE)
    key = w.send(control, b)
    assert w.message(key).state is MessageState.AWAITING_CONSENT


def test_every_admitted_message_is_audited_queued_then_final(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b)
    w.decide(key)
    w.deliver(key, b)
    audits = [e for e in w.effects if isinstance(e, Audit) and e.message_id == key[1] and e.action == "send_message"]
    assert [x.outcome for x in audits] == ["queued", "delivered"]
    assert all(x.actor.startswith("agent:claude:pane:") for x in audits)


def test_card_expiry_expires_the_message(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b)
    w.tick(899)
    assert w.message(key).state is MessageState.AWAITING_CONSENT
    w.tick(1)
    assert w.message(key).state is MessageState.EXPIRED and w.message(key).reason == "card expired unanswered"


def test_queued_message_expires_with_its_id_hour_before_release(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b, message_id="hour")
    w.decide(key)
    effects = w.tick(3600)
    assert any(isinstance(e, Audit) and e.outcome == "expired" and e.message_id == "hour" for e in effects)
    assert key not in w.hub.messages  # recorded expired first, released in the same tick after
    w.send(a, b, message_id="hour")  # the id is free again after its hour


def test_final_outcome_stays_until_the_hour_ends(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b)
    w.decide(key, Decision.DECLINE)
    w.tick(3599)
    assert w.message(key).outcome == "declined"
    w.tick(1)
    assert key not in w.hub.messages


def test_revocation_of_sender_cancels_queued_and_cards(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    k1 = w.send(a, b)
    k2 = w.send(a, b)
    w.decide(k2, Decision.APPROVE_ONCE)
    w.step(H.Revoke(w.now, a.principal))
    assert w.message(k1).state is MessageState.CANCELLED and w.message(k2).state is MessageState.CANCELLED
    assert w.hub.cards[w.card_of(k1)].state.value == "cancelled"
    w.idle(b)
    assert not [e for e in w.effects if isinstance(e, (TypeText, ConfirmTyping))]
    with pytest.raises(H.CallRefused, match="not connected"):
        w.send(a, b)


def test_revocation_of_recipient_cancels_what_it_would_receive(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b)
    w.step(H.Revoke(w.now, b.principal))
    assert w.message(key).state is MessageState.CANCELLED


def test_guard_after_revocation_types_nothing(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b)
    w.decide(key)
    assert kinds(w.idle(b)) == ["CheckGuard"]
    w.step(H.Revoke(w.now, a.principal))  # took the lock first
    assert w.guard(key, b) == ()
    assert w.message(key).state is MessageState.CANCELLED


def test_narrowed_recipient_scope_is_refused_at_the_guard(w: World) -> None:
    a, b = w.launch("a", session=("claude", "sa")), w.launch("b", session=("claude", "sb"))
    key = w.send(a, b)
    w.decide(key)
    w.idle(b)
    w.step(H.SetGrant(w.now, ("claude", "sb"), frozenset({H.Scope.READ})))
    w.guard(key, b)
    assert w.message(key).state is MessageState.REFUSED and "no longer receive" in w.message(key).reason


def test_hop_count_rises_on_replies_and_needs_a_card_past_the_limit() -> None:
    w = World.with_limits(hop_limit=2)
    a, b = w.launch("a"), w.launch("b")
    k1 = w.send(a, b)
    w.decide(k1)
    w.deliver(k1, b)
    back = w.send(b, a, in_reply_to=w.message(k1).ref)
    assert w.message(back).hop == 2 and w.message(back).conversation == w.message(k1).conversation
    w.decide(back)
    w.deliver(back, a)
    k3 = w.send(a, b)  # a "new" conversation within the reply window is still a reply
    assert w.message(k3).hop == 3
    assert w.message(k3).state is MessageState.AWAITING_CONSENT  # past the hop limit: a card even for the pair


def test_hop_resets_only_after_the_reply_window(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    k1 = w.send(a, b)
    w.decide(k1)
    w.deliver(k1, b)
    w.tick(301)
    assert w.message(w.send(b, a)).hop == 1


def test_in_reply_to_must_name_a_message_the_sender_received(w: World) -> None:
    a, b, c = w.launch("a"), w.launch("b"), w.launch("c")
    k1 = w.send(a, b)
    with pytest.raises(H.CallRefused) as err:
        w.send(c, a, in_reply_to=w.message(k1).ref)
    assert err.value.reason == "bad_reply"
    with pytest.raises(H.CallRefused):
        w.send(b, a, in_reply_to="r-unknown")


def test_messages_to_one_pane_go_one_per_idle_transition_in_order(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    k1, k2 = w.send(a, b), w.send(a, b)
    w.decide(k1)
    w.decide(k2, Decision.APPROVE_ONCE)
    effects = w.idle(b)
    assert [e.message for e in effects if isinstance(e, CheckGuard)] == [k1]
    w.guard(k1, b)
    w.typed(k1, fingerprint="fp-submitted")
    assert w.idle(b, "fp-idle") == ()  # the old idle screen is not the next idle
    assert w.idle(b, "fp-submitted") == ()  # nor is the screen the confirmation saw
    w.idle(b, "busy", ready=False)
    assert [e.message for e in w.idle(b, "fp-2") if isinstance(e, CheckGuard)] == [k2]


def test_a_turn_seen_busy_during_confirmation_counts(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    k1, k2 = w.send(a, b), w.send(a, b)
    w.decide(k1)
    w.decide(k2, Decision.APPROVE_ONCE)
    w.idle(b)
    w.guard(k1, b)
    w.idle(b, "busy", ready=False)  # the agent went busy before the typing was confirmed
    w.typed(k1, fingerprint="busy")
    assert [e.message for e in w.idle(b, "fp-answered") if isinstance(e, CheckGuard)] == [k2]


def test_a_turn_too_quick_to_be_seen_busy_counts_once_the_screen_moves_on(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    k1, k2 = w.send(a, b), w.send(a, b)
    w.decide(k1)
    w.decide(k2, Decision.APPROVE_ONCE)
    w.idle(b)
    w.guard(k1, b)
    w.typed(k1, fingerprint="fp-submitted")
    assert w.idle(b, "fp-submitted") == ()
    assert [e.message for e in w.idle(b, "fp-answered") if isinstance(e, CheckGuard)] == [k2]


def test_handle_that_moved_needs_consent_for_the_new_pane(w: World) -> None:
    a, b, c = w.launch("a"), w.launch("b"), w.launch("c")
    key = w.send(a, b, handle="title:review")
    w.decide(key)
    w.idle(b)
    w.guard(key, b, handle=H.Recipient(c.pane, c.incarnation, "claude", "title:review"))
    message = w.message(key)
    assert message.state is MessageState.AWAITING_CONSENT and message.recipient_pane == c.pane
    w.decide(key)
    w.idle(c)
    w.guard(key, c, handle=H.Recipient(c.pane, c.incarnation, "claude", "title:review"))
    w.typed(key)
    assert w.message(key).state is MessageState.DELIVERED


def test_handle_moved_to_an_approved_pair_needs_no_new_card(w: World) -> None:
    a, b, c = w.launch("a"), w.launch("b"), w.launch("c")
    pre = w.send(a, c)
    w.decide(pre)
    w.deliver(pre, c)
    key = w.send(a, b, handle="pr:12")
    w.decide(key)
    w.idle(b)
    w.step(H.PaneObserved(w.now, c.pane, c.incarnation, False, "busy", w.now))
    w.guard(key, b, handle=H.Recipient(c.pane, c.incarnation, "claude", "pr:12"))
    assert w.message(key).state is MessageState.READY and w.message(key).recipient_pane == c.pane


def test_recover_makes_typing_unconfirmed_and_guards_wait(w: World) -> None:
    a, b, c = w.launch("a"), w.launch("b"), w.launch("c")
    k1, k2 = w.send(a, b), w.send(a, c)
    w.decide(k1)
    w.decide(k2)
    w.idle(b)
    w.guard(k1, b)
    w.idle(c)
    w.step(H.Recover(w.now))
    assert w.message(k1).state is MessageState.UNCONFIRMED
    assert w.message(k2).state is MessageState.READY
    assert not w.hub.attempts


def test_typing_observed_in_wrong_state_is_a_loud_error(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b)
    with pytest.raises(TransitionNotAllowed, match="not allowed in state 'awaiting_consent'"):
        w.typed(key)
    with pytest.raises(H.UnknownItem):
        w.typed(("nobody", "nothing"))


def test_panes_to_lock_covers_own_panes_and_recipients(w: World) -> None:
    a, b, c = w.launch("a"), w.launch("b"), w.launch("c")
    w.send(a, b)
    w.send(c, a)
    assert H.panes_to_lock(w.hub, [a.principal]) == tuple(sorted({a.pane, b.pane}))


def test_disconnect_all_revokes_every_agent_but_control(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    control = w.launch("ctl", Preset.OFF, control=True)
    key = w.send(a, b)
    w.step(H.DisconnectAll(w.now))
    assert w.message(key).state is MessageState.CANCELLED
    for agent in (a, b):
        with pytest.raises(H.grants.NotConnected):
            H.grants.authenticate(w.hub.book, agent.token)
    H.grants.authenticate(w.hub.book, control.token)


def test_replay_gives_the_same_states_and_effects() -> None:
    def run() -> tuple[H.Hub, list[object]]:
        w = World()
        a, b = w.launch("a"), w.launch("b")
        key = w.send(a, b)
        w.decide(key)
        w.deliver(key, b)
        w.tick(10)
        return w.hub, list(w.effects)

    assert run() == run()


def test_a_turn_seen_busy_by_the_confirmation_ends_the_wait_for_busy(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    k1, k2 = w.send(a, b), w.send(a, b)
    w.decide(k1)
    w.decide(k2, Decision.APPROVE_ONCE)
    w.idle(b)
    w.guard(k1, b)
    w.typed(k1, fingerprint="fp-busy", busy=True)
    assert [e.message for e in w.idle(b, "fp-idle") if isinstance(e, CheckGuard)] == [k2]


def test_a_quiet_pane_is_rearmed_after_rearm_after_seconds() -> None:
    """A turn too quick to be seen, then one unchanging idle screen: the pane waits again after the bound."""
    w = World.with_limits(rearm_after=10.0)
    a, b = w.launch("a"), w.launch("b")
    k1, k2 = w.send(a, b), w.send(a, b)
    w.decide(k1)
    w.decide(k2, Decision.APPROVE_ONCE)
    w.idle(b)
    w.guard(k1, b)
    w.typed(k1, fingerprint="fp-final")  # the confirmation already saw the final idle screen
    assert w.idle(b, "fp-final") == ()
    assert w.tick(9.0) == ()
    assert [e.message for e in w.tick(1.0) if isinstance(e, CheckGuard)] == [k2]


def test_after_a_restart_that_caught_typing_the_first_idle_screen_is_not_the_next_idle(w: World) -> None:
    """Seed 4469: the daemon was killed right after a paste; the server's owed Enter submitted it, and
    the restarted daemon's first look showed the submitted message on an idle screen (the turn not
    started yet). It read that as an idle transition and typed the next message into the turn about to
    start. Claim: after Recover, a pane a message was being typed into takes the next message only after
    a busy reading (the turn) and a new idle, or once it sat ready for rearm_after (the clock)."""
    from connectcore.effects import CheckGuard

    a, b = w.launch("a"), w.launch("b")
    k1 = w.send(a, b)
    w.decide(k1)
    w.idle(b)
    w.guard(k1, b)  # typing started; the daemon is killed after the paste
    w.step(H.Recover(w.now))
    w.send(a, b, text="the next one")  # the pair is approved: no card
    w.now += 1
    effects = w.idle(b, "fp-submitted")  # the restarted daemon's first look: idle, composer empty
    assert not [e for e in effects if isinstance(e, CheckGuard)], "armed by the screen of the turn about to start"
    w.now += 1
    w.idle(b, "fp-turn", ready=False)  # the turn
    w.now += 1
    effects = w.idle(b, "fp-answered")  # its end: the next idle
    assert [e for e in effects if isinstance(e, CheckGuard)]


def test_after_a_restart_that_caught_typing_the_clock_still_arms_a_pane_that_sits_ready(w: World) -> None:
    """Claim: the quiet rule still arms such a pane once it sat ready rearm_after seconds (never left unarmed)."""
    from connectcore.effects import CheckGuard

    a, b = w.launch("a"), w.launch("b")
    k1 = w.send(a, b)
    w.decide(k1)
    w.idle(b)
    w.guard(k1, b)
    w.step(H.Recover(w.now))
    w.send(a, b, text="the next one")  # the pair is approved: no card
    w.idle(b, "fp-submitted")
    w.now += w.hub.limits.rearm_after + 1
    effects = w.step(H.Tick(w.now))
    assert [e for e in effects if isinstance(e, CheckGuard)]
