"""The hub's one action path at its edges: the exact effects, reasons and timestamps of each step.

Effects are frozen dataclasses, so whole tuples are compared; each test names the rule it pins.
"""

from __future__ import annotations

import pytest

from connectcore import arming
from connectcore import hub as H
from connectcore._machine import ConnectError
from connectcore.arming import Arming, Seen
from connectcore.consent import Card, CardState, Decision
from connectcore.delivery import SUBMIT_SETTLE, MessageState
from connectcore.effects import (
    Audit,
    CheckGuard,
    ConfirmTyping,
    EndSubscriptions,
    Notify,
    Persist,
    TypeText,
)
from connectcore.grants import PRESET_SCOPES, Preset, Scope, TokenState
from connectcore.screen import Activity, Composer
from tests.unit.hubkit import Agent, World


@pytest.fixture
def w() -> World:
    return World()


def actor(w: World, agent: Agent) -> str:
    return H.grants.actor_name(w.hub.book.principals[agent.principal])


def final_effects(w: World, key: tuple[str, str], outcome: str, reason: str) -> tuple[object, ...]:
    """What _finalize emits for a message with no open card: persist, audit, wake the sender."""
    done = w.message(key)
    assert done.outcome == outcome and done.reason == reason and done.final_at == w.now
    return (
        Persist("message", key, done),
        Audit(
            actor=done.sender_actor,
            action="send_message",
            outcome=outcome,
            scope="message",
            target=f"{done.recipient_pane}@{done.recipient_incarnation}",
            message_id=key[1],
            detail=reason,
            at=w.now,
        ),
        Notify("message", key, principal=key[0], payload={"outcome": outcome}),
    )


def guarding(
    w: World, a: Agent, b: Agent, decision: Decision = Decision.APPROVE_PAIR, **kw: object
) -> tuple[str, str]:
    """A consented message to b whose guard is out (CheckGuard emitted)."""
    key = w.send(a, b, **kw)
    w.decide(key, decision)
    assert [type(e) for e in w.idle(b)] == [CheckGuard]
    assert w.message(key).state is MessageState.GUARDING
    return key


# --- authorize ----------------------------------------------------------------------------------------


def test_authorize_refusal_for_an_unknown_token_is_audited_as_an_unknown_agent(w: World) -> None:
    with pytest.raises(H.CallRefused) as err:
        H.authorize(w.hub, token_hash="nope", scope=Scope.READ, action="list_agents", now=7.0, target="t")
    assert err.value.reason == "not_connected" and str(err.value) == "not connected"
    assert err.value.audit == Audit(
        actor="agent:unknown",
        action="list_agents",
        outcome="refused",
        scope="read",
        target="t",
        detail="not_connected",
        at=7.0,
    )


def test_authorize_scope_refusal_names_the_actor_and_scope(w: World) -> None:
    a = w.launch("a", Preset.OBSERVE)
    with pytest.raises(H.CallRefused) as err:
        H.authorize(w.hub, token_hash=a.token, scope=Scope.MESSAGE, action="send_message", now=8.0, target="%9")
    assert err.value.reason == "scope_denied"
    assert str(err.value) == f"{actor(w, a)} lacks the 'message' scope for this call"
    assert err.value.audit == Audit(
        actor=actor(w, a),
        action="send_message",
        outcome="refused",
        scope="message",
        target="%9",
        detail="scope_denied",
        at=8.0,
    )


def test_authorize_allowed_returns_the_principal_and_an_allowed_audit(w: World) -> None:
    a = w.launch("a")
    principal, audit = H.authorize(w.hub, token_hash=a.token, scope=Scope.READ, action="read_pane", now=9.0)
    assert principal.id == a.principal
    assert audit == Audit(actor=actor(w, a), action="read_pane", outcome="allowed", scope="read", target="", at=9.0)


# --- submit -------------------------------------------------------------------------------------------


def test_submit_stores_the_message_and_emits_persist_card_and_queued_audit(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    effects = w.step(H.Submit(w.now, a.token, "m1", "hi", H.Recipient(b.pane, b.incarnation, "claude", "h"), "r1", "c1"))
    message = w.message((a.principal, "m1"))
    assert message.sender == a.principal and message.ref == "r1" and message.card == "c1"
    assert message.recipient_principal == b.principal and message.recipient_kind == "claude"
    assert message.handle == "h" and message.conversation == "r1" and message.hop == 1
    assert message.created_at == w.now and message.expires_at == w.now + 3600 and message.final_at is None
    assert message.in_reply_to is None and message.reason == ""
    card = w.hub.cards["c1"]
    assert card == Card(
        id="c1",
        message=(a.principal, "m1"),
        sender=a.principal,
        sender_actor=actor(w, a),
        recipient_pane=b.pane,
        recipient_incarnation=b.incarnation,
        recipient_actor=actor(w, b),
        text="hi",
        hop=1,
        created_at=w.now,
        expires_at=w.now + 900,
    )
    assert effects == (
        Persist("message", message.key, message),
        Persist("card", ("c1",), card),
        Notify("card", ("c1",), payload={"state": "pending"}),
        Audit(
            actor=actor(w, a),
            action="send_message",
            outcome="queued",
            scope="message",
            target=f"{b.pane}@{b.incarnation}",
            message_id="m1",
            detail="",
            at=w.now,
        ),
    )
    assert w.hub.refs == {"r1": message.key}
    assert w.hub.sent == {a.principal: (w.now,)}
    assert w.hub.pair_sent == {(a.principal, b.incarnation): (w.now,)}


def test_submit_to_an_approved_pair_is_ready_and_armed_pane_starts_the_guard(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    first = w.send(a, b)
    w.decide(first)
    w.deliver(first, b)
    w.idle(b, "busy", ready=False)
    w.idle(b, "fp-2")
    effects = w.step(H.Submit(w.now, a.token, "m2", "again", H.Recipient(b.pane, b.incarnation, "claude"), "r2", "c2"))
    key = (a.principal, "m2")
    ready = w.message(key)
    assert ready.state is MessageState.GUARDING and ready.card is None and "c2" not in w.hub.cards
    assert effects[0].record.state is MessageState.READY  # type: ignore[attr-defined]
    assert effects[0].record.reason == "pair_approved"  # type: ignore[attr-defined]
    assert effects[1] == Audit(
        actor=actor(w, a),
        action="send_message",
        outcome="queued",
        scope="message",
        target=f"{b.pane}@{b.incarnation}",
        message_id="m2",
        detail="pair_approved",
        at=w.now,
    )
    assert effects[2:] == (CheckGuard(b.pane, b.incarnation, key),)
    assert w.hub.attempts == {b.pane: key}


def test_submit_refusal_audit_names_sender_target_and_id(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    with pytest.raises(H.CallRefused) as err:
        w.step(H.Submit(3.0, a.token, "m1", "bad\x1b", H.Recipient(b.pane, b.incarnation, "claude"), "r", "c"))
    assert err.value.audit == Audit(
        actor=actor(w, a),
        action="send_message",
        outcome="refused",
        scope="message",
        target=f"{b.pane}@{b.incarnation}",
        message_id="m1",
        detail="control_character",
        at=3.0,
    )


def test_refusal_messages_name_the_problem(w: World) -> None:
    a, b = w.launch("a"), w.launch("b", Preset.OBSERVE)
    with pytest.raises(H.CallRefused) as err:
        w.send(a, b)
    assert str(err.value) == f"{b.pane} cannot receive peer messages (not reachable)"
    with pytest.raises(H.CallRefused) as err:
        w.send(a, a)
    assert str(err.value) == "an agent cannot message its own pane"
    c = w.launch("c")
    with pytest.raises(H.CallRefused) as err:
        w.send(b, c, in_reply_to="r-x")
    assert err.value.reason == "scope_denied"
    with pytest.raises(H.CallRefused) as err:
        w.send(c, a, in_reply_to="r-none")
    assert err.value.reason == "bad_reply" and str(err.value) == "in_reply_to 'r-none' names no message this agent received"


def test_duplicate_id_message_names_its_outcome(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    w.send(a, b, message_id="dup")
    with pytest.raises(H.CallRefused) as err:
        w.send(a, b, message_id="dup")
    assert err.value.reason == "duplicate_id"
    assert str(err.value) == "message_id 'dup' was already used (outcome: queued); it is never typed twice"


def test_a_reused_ref_is_a_loud_daemon_bug(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    w.step(H.Submit(w.now, a.token, "m1", "hi", H.Recipient(b.pane, b.incarnation, "claude"), "r1", "c1"))
    with pytest.raises(ConnectError, match="message ref r1 was already used"):
        w.step(H.Submit(w.now, a.token, "m2", "hi", H.Recipient(b.pane, b.incarnation, "claude"), "r1", "c2"))
    with pytest.raises(ConnectError, match="card id c1 was already used"):
        w.step(H.Submit(w.now, a.token, "m3", "hi", H.Recipient(b.pane, b.incarnation, "claude"), "r3", "c1"))


def test_limits_are_inclusive_at_the_boundary() -> None:
    w = World()
    a, b, c = w.launch("a"), w.launch("b"), w.launch("c")

    def typed_size(sender: Agent, ref: str, text: str) -> int:
        line = H.delivery.provenance_line(
            ref=ref, sender_actor=actor(w, sender), sender_pane=sender.pane, sender_incarnation=sender.incarnation
        )
        return len(H.delivery.compose(line, text).encode())

    def send(sender: Agent, to: Agent, ref: str, text: str) -> None:
        w.step(H.Submit(w.now, sender.token, ref, text, H.Recipient(to.pane, to.incarnation, "claude"), ref, "c" + ref))

    size = typed_size(a, "r1", "x" * 10)
    assert typed_size(a, "r2", "x" * 10) == typed_size(c, "r3", "x" * 10) == size
    w.hub = H.replace(  # type: ignore[attr-defined]
        w.hub,
        limits=H.Limits(max_message_bytes=size, queued_bytes_per_recipient=size, queued_bytes_total=2 * size),
    )
    send(a, b, "r1", "x" * 10)  # exactly the byte cap and exactly the recipient's budget
    with pytest.raises(H.CallRefused) as err:
        send(a, b, "r2", "x" * 11)
    assert err.value.reason == "too_large" and str(err.value) == (
        f"message is {size + 1} bytes with its provenance line; at most {size}"
    )
    with pytest.raises(H.CallRefused) as err:
        send(a, b, "r2", "y" * 10)
    assert err.value.reason == "queue_full" and str(err.value) == f"{b.pane} already has {size} bytes queued"
    send(a, c, "r2", "x" * 10)  # exactly the total budget
    with pytest.raises(H.CallRefused) as err:
        send(c, a, "r3", "x" * 10)
    assert str(err.value) == f"the daemon already has {2 * size} bytes queued"


def test_id_cap_message_counts_the_whole_merge_group() -> None:
    w = World.with_limits(live_ids_per_principal=2)
    a = w.launch("a", harness="codex", session=("codex", "s1"))
    b = w.launch("b")
    w.send(a, b)
    w.step(H.PaneGone(w.now, a.pane, a.incarnation))
    again = w.launch("again", harness="codex", pane="%7")
    w.send(again, b)
    w.step(H.BindSession(w.now, again.principal, ("codex", "s1")))
    with pytest.raises(H.CallRefused) as err:
        w.send(again, b)
    assert err.value.reason == "id_cap"
    assert str(err.value) == "2 message ids are reserved (at most 2 per hour)"


def test_rate_limit_messages_name_the_limit_and_window() -> None:
    w = World.with_limits(sender_per_window=1, pair_per_window=5)
    a, b = w.launch("a"), w.launch("b")
    w.send(a, b)
    with pytest.raises(H.CallRefused) as err:
        w.send(a, b)
    assert str(err.value) == "sender rate limit: at most 1 messages per 60 s"
    w.now += 59.9
    with pytest.raises(H.CallRefused):
        w.send(a, b)
    w.now += 0.1
    w.send(a, b)  # exactly the window later the old send no longer counts
    assert w.hub.sent[a.principal] == (w.now,)


def test_a_reply_joins_the_conversation_and_is_audited_with_its_reply(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    k1 = w.send(a, b)
    w.decide(k1)
    w.deliver(k1, b)
    ref = w.message(k1).ref
    assert w.hub.last_received == {b.principal: (ref, 1, w.now)}
    back = w.send(b, a, in_reply_to=ref)
    assert w.message(back).in_reply_to == ref and w.message(back).conversation == ref
    assert w.message(back).hop == 2


def test_message_for_searches_the_merge_group(w: World) -> None:
    a = w.launch("a", harness="codex", session=("codex", "s1"))
    b = w.launch("b")
    key = w.send(a, b, message_id="old")
    w.step(H.PaneGone(w.now, a.pane, a.incarnation))
    again = w.launch("again", harness="codex", pane="%7")
    w.step(H.BindSession(w.now, again.principal, ("codex", "s1")))
    assert H.message_for(w.hub, again.principal, "old") == w.message(key)
    assert H.message_for(w.hub, again.principal, "none") is None


# --- decide -------------------------------------------------------------------------------------------


def test_decide_approve_pair_records_the_card_audit_pairs_and_ready_message(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b, message_id="m1")
    card_id = w.card_of(key)
    w.now += 5
    effects = w.step(H.Decide(w.now, card_id, Decision.APPROVE_PAIR))
    card = w.hub.cards[card_id]
    assert card.state is CardState.APPROVED_PAIR and card.answered_by == "owner" and card.answered_at == w.now
    ready = w.message(key)
    assert ready.state is MessageState.READY and ready.reason == "approved_pair" and ready.final_at is None
    assert effects == (
        Persist("card", (card_id,), card),
        Audit(actor="owner", action="consent", outcome="approved_pair", target=actor(w, a), message_id="m1",
              detail=f"from {a.pane}@{a.incarnation} to {b.pane}@{b.incarnation}", at=w.now),
        Notify("card", (card_id,), payload={"state": "approved_pair"}),
        Persist("pairs", (), ((a.principal, b.incarnation),)),
        Persist("message", key, ready),
    )
    assert w.hub.pairs == {(a.principal, b.incarnation)}


def test_decide_approve_once_by_someone_adds_no_pair_and_may_start_the_guard(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b, message_id="m1")
    w.idle(b)
    card_id = w.card_of(key)
    effects = w.step(H.Decide(w.now, card_id, Decision.APPROVE_ONCE, by="phone"))
    assert effects[1] == Audit(
        actor="phone", action="consent", outcome="approved_once", target=actor(w, a), message_id="m1",
        detail=f"from {a.pane}@{a.incarnation} to {b.pane}@{b.incarnation}", at=w.now,
    )
    assert w.hub.cards[card_id].answered_by == "phone"
    assert effects[3].record.reason == "approved_once"  # type: ignore[attr-defined]
    assert effects[4:] == (CheckGuard(b.pane, b.incarnation, key),)
    assert w.hub.pairs == frozenset()


def test_decline_finalizes_with_the_person_s_reason(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b)
    card_id = w.card_of(key)
    effects = w.step(H.Decide(w.now, card_id, Decision.DECLINE))
    card = w.hub.cards[card_id]
    assert effects[:3] == (
        Persist("card", (card_id,), card),
        Audit(actor="owner", action="consent", outcome="declined", target=actor(w, a), message_id=key[1],
              detail=f"from {a.pane}@{a.incarnation} to {b.pane}@{b.incarnation}", at=w.now),
        Notify("card", (card_id,), payload={"state": "declined"}),
    )
    assert effects[3:] == final_effects(w, key, "declined", "declined by the person")


def test_decide_refusals_carry_reasons(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b)
    with pytest.raises(H.UnknownItem) as err:
        w.step(H.Decide(w.now, "card-x", Decision.DECLINE))
    assert err.value.reason == "unknown_card" and str(err.value) == "no card card-x"
    w.decide(key, Decision.DECLINE)
    with pytest.raises(H.UnknownItem) as err:
        w.decide(key, Decision.DECLINE)
    assert err.value.reason == "card_closed"
    assert str(err.value) == f"card {w.card_of(key)} was already answered (declined)"


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


# --- typing observed ------------------------------------------------------------------------------


def test_typing_landed_is_delivered_wakes_the_recipient_s_inbox_and_records_the_reply_window(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    key = guarding(w, a, b)
    w.guard(key, b)
    w.now += 3
    effects = w.typed(key, fingerprint="fp-done")
    message = w.message(key)
    assert effects == (
        *final_effects(w, key, "delivered", "typed and submitted"),
        Notify("inbox", key, principal=b.principal, payload={"ref": message.ref}),
    )
    assert w.hub.last_received == {b.principal: (message.conversation, 1, w.now)}
    assert w.hub.panes[b.pane] == H.PaneView(
        b.incarnation, Arming.AWAITING_TURN, Seen(True, "fp-done", w.now), w.now, ("fp-idle", "fp-done")
    )
    assert w.hub.attempts == {}


def test_a_typing_failure_becomes_the_reason_whatever_the_reading(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    key = guarding(w, a, b)
    w.guard(key, b)
    reading = H.delivery.AfterTyping(True, Activity.BUSY, Composer.EMPTY, False, "fp-busy", w.now)
    w.step(H.TypingObserved(w.now, key, reading, failure="paste failed"))
    assert w.message(key).outcome == "unconfirmed" and w.message(key).reason == "paste failed"
    w2 = World()
    a2, b2 = w2.launch("a"), w2.launch("b")
    k2 = guarding(w2, a2, b2)
    w2.guard(k2, b2)
    w2.step(H.TypingObserved(w2.now, k2, None))
    assert w2.message(k2).reason == "no reading after typing"
    assert w2.hub.panes[b2.pane].stale == ("fp-idle",)  # no confirming screen: nothing added


def test_typing_not_landed_is_unconfirmed_and_wakes_no_inbox(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    key = guarding(w, a, b)
    w.guard(key, b)
    effects = w.typed(key, False, fingerprint="fp-x")
    assert effects == final_effects(w, key, "unconfirmed", "the typed text is not visible")
    assert w.hub.last_received == {}
    w2 = World()
    a2, b2 = w2.launch("a"), w2.launch("b")
    k2 = guarding(w2, a2, b2)
    w2.guard(k2, b2)
    w2.step(H.TypingObserved(w2.now, k2, None, failure="paste lost"))
    assert w2.message(k2).reason == "paste lost"


def test_typing_after_the_busy_screen_was_seen_adds_no_stale_screen(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    key = guarding(w, a, b)
    w.guard(key, b)
    w.now += 1
    w.idle(b, "busy", ready=False)  # read after the confirmation below: the turn
    assert w.hub.panes[b.pane].arming is Arming.TYPING
    w.typed(key, fingerprint="fp-late", read_at=w.now - 0.5)
    assert w.hub.panes[b.pane].stale == () and w.hub.panes[b.pane].arming is Arming.BUSY


def test_typing_into_a_pane_with_no_principal_records_no_inbox(w: World) -> None:
    control = w.launch("ctl", Preset.OFF, control=True)
    key = w.step(H.Submit(w.now, control.token, "m", "hi", H.Recipient("%9", "inc-p", "claude"), "r", "c")) and (
        control.principal,
        "m",
    )
    w.decide(key)
    w.step(H.PaneObserved(w.now, "%9", "inc-p", True, "fp", w.now))
    w.step(H.GuardObserved(w.now, key, "inc-p", True, "fp", w.now))
    effects = w.typed(key)
    assert not [e for e in effects if isinstance(e, Notify) and e.topic == "inbox"]
    assert w.hub.last_received == {}


def test_typing_observed_for_an_unknown_message_names_the_reason(w: World) -> None:
    with pytest.raises(H.UnknownItem) as err:
        w.typed(("p", "m"))
    assert err.value.reason == "unknown_message" and str(err.value) == "no message ('p', 'm')"


# --- pane observed / gone ----------------------------------------------------------------------------


def test_pane_gone_cancels_what_was_addressed_to_it_ends_tokens_and_lapses_pairs(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    k1 = w.send(a, b)
    w.decide(k1)
    w.idle(b, ready=False)
    k2 = w.send(a, b)  # ready (pair approved)
    effects = w.step(H.PaneGone(w.now, b.pane, b.incarnation))
    token = w.hub.book.tokens[b.token]
    assert token.state is TokenState.ENDED
    assert effects == (
        *final_effects(w, k1, "cancelled", "recipient incarnation ended"),
        *final_effects(w, k2, "cancelled", "recipient incarnation ended"),
        Persist("token", (b.token,), token),
        EndSubscriptions(b.principal),
        Persist("pairs", (), ()),
    )
    assert w.hub.pairs == frozenset() and b.pane not in w.hub.panes


def test_pane_gone_closes_an_open_card_as_the_daemon(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b)
    card_id = w.card_of(key)
    effects = w.step(H.PaneGone(w.now, b.pane, b.incarnation))
    card = w.hub.cards[card_id]
    assert card.state is CardState.CANCELLED and card.answered_by == "daemon" and card.answered_at == w.now
    assert effects[:4] == (
        Persist("message", key, w.message(key)),
        final_effects(w, key, "cancelled", "recipient incarnation ended")[1],
        Persist("card", (card_id,), card),
        Notify("card", (card_id,)),
    )


def test_pane_gone_spares_typing_another_incarnation_s_view_and_unrelated_pairs(w: World) -> None:
    a, b, c = w.launch("a"), w.launch("b"), w.launch("c")
    pre = w.send(a, c)
    w.decide(pre)
    key = guarding(w, a, b)
    w.guard(key, b)
    effects = w.step(H.PaneGone(w.now, b.pane, "inc-older"))
    assert effects == () and w.message(key).state is MessageState.TYPING
    assert b.pane in w.hub.panes and w.hub.pairs == {(a.principal, c.incarnation), (a.principal, b.incarnation)}
    effects = w.step(H.PaneGone(w.now, b.pane, b.incarnation))
    assert w.message(key).state is MessageState.TYPING  # its outcome comes from the typing observation
    assert effects[-1] == Persist("pairs", (), ((a.principal, c.incarnation),))


def test_a_new_incarnation_in_a_watched_pane_ends_the_old_one_first(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b)
    w.idle(b)
    effects = w.step(H.PaneObserved(w.now, b.pane, "inc-new", True, "fp", w.now))
    assert effects[:3] == (
        Persist("message", key, w.message(key)),
        final_effects(w, key, "cancelled", "recipient incarnation ended")[1],
        Persist("card", (w.card_of(key),), w.hub.cards[w.card_of(key)]),
    )
    assert w.hub.panes[b.pane] == H.PaneView("inc-new", Arming.ARMED, Seen(True, "fp", w.now), w.now)


def test_pane_views_track_readiness_and_arming(w: World) -> None:
    b = w.launch("b")
    w.idle(b, "f1", ready=False)
    assert w.hub.panes[b.pane] == H.PaneView(b.incarnation, Arming.BUSY, Seen(False, "f1", w.now), w.now)
    w.now += 1
    w.idle(b, "f2")
    assert w.hub.panes[b.pane] == H.PaneView(b.incarnation, Arming.ARMED, Seen(True, "f2", w.now), w.now)
    w.now += 1
    w.idle(b, "f3")  # still ready: stays armed
    assert w.hub.panes[b.pane] == H.PaneView(b.incarnation, Arming.ARMED, Seen(True, "f3", w.now), w.now - 1)
    w.idle(b, "f0", ready=False, read_at=w.now - 2)  # read before the newest reading: changes nothing
    assert w.hub.panes[b.pane].seen == Seen(True, "f3", w.now)


# --- revoke / grants / disconnect ---------------------------------------------------------------------


def test_revoke_records_the_grant_effects_then_cancels_and_drops_pairs(w: World) -> None:
    a, b, c = w.launch("a"), w.launch("b"), w.launch("c")
    k1 = w.send(a, b)
    w.decide(k1)
    k2 = w.send(c, a)
    w.decide(k2)
    kept = w.send(c, b)
    w.decide(kept)
    effects = w.step(H.Revoke(w.now, a.principal, by="policy"))
    token = w.hub.book.tokens[a.token]
    assert token.state is TokenState.REVOKED
    assert effects == (
        Persist("token", (a.token,), token),
        Persist("grant", ("principal", a.principal), frozenset()),
        EndSubscriptions(a.principal),
        Audit(actor="policy", action="revoke", outcome="revoked", target=actor(w, a), at=w.now),
        Notify("grant", (a.principal,)),
        *final_effects(w, k1, "cancelled", "revoked"),
        *final_effects(w, k2, "cancelled", "revoked"),
        Persist("pairs", (), ((c.principal, b.incarnation),)),
    )
    assert w.message(kept).state is MessageState.READY
    assert w.hub.pairs == {(c.principal, b.incarnation)}


def test_revoke_spares_typing_and_emits_no_pairs_record_when_none_lapse(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b)
    w.decide(key, Decision.APPROVE_ONCE)
    w.idle(b)
    w.guard(key, b)
    effects = w.step(H.Revoke(w.now, a.principal))
    assert w.message(key).state is MessageState.TYPING
    assert not [e for e in effects if isinstance(e, Persist) and e.kind in ("pairs", "message")]
    assert effects[3] == Audit(actor="owner", action="revoke", outcome="revoked", target=actor(w, a), at=w.now)


def test_revoke_unknown_principal_names_the_reason(w: World) -> None:
    with pytest.raises(H.UnknownItem) as err:
        w.step(H.Revoke(w.now, "p-none"))
    assert err.value.reason == "unknown_principal" and str(err.value) == "no principal p-none"
    with pytest.raises(H.UnknownItem) as err:
        w.step(H.BindSession(w.now, "p-none", ("claude", "s")))
    assert err.value.reason == "unknown_principal" and str(err.value) == "no principal p-none"


def test_bind_through_the_hub_returns_the_book_s_effects(w: World) -> None:
    a = w.launch("a")
    effects = w.step(H.BindSession(5.0, a.principal, ("claude", "s1")))
    assert w.hub.book.principals[a.principal].session == ("claude", "s1")
    assert effects[-1] == Audit(
        actor="agent:claude:s1", action="rebind", outcome="bound", target="agent:claude:pane:%1:4000", at=5.0
    )


def test_set_grant_off_revokes_each_principal_of_the_session_as_the_same_person(w: World) -> None:
    a = w.launch("a", session=("claude", "s1"))
    b = w.launch("b")
    key = w.send(a, b)
    effects = w.step(H.SetGrant(w.now, ("claude", "s1"), frozenset(), by="phone"))
    token = w.hub.book.tokens[a.token]
    assert effects[:3] == (
        Persist("grant", ("session", "claude", "s1"), frozenset()),
        Audit(actor="phone", action="grant", outcome="set", target="agent:claude:s1", detail="off", at=w.now),
        Notify("grant", ("claude", "s1")),
    )
    assert effects[3:8] == (
        Persist("token", (a.token,), token),
        Persist("grant", ("session", "claude", "s1"), frozenset()),
        EndSubscriptions(a.principal),
        Audit(actor="phone", action="revoke", outcome="revoked", target="agent:claude:s1", at=w.now),
        Notify("grant", (a.principal,)),
    )
    assert w.message(key).state is MessageState.CANCELLED and w.message(key).reason == "revoked"
    assert token.state is TokenState.REVOKED


def test_set_grant_off_for_an_unknown_session_only_records_the_grant(w: World) -> None:
    effects = w.step(H.SetGrant(w.now, ("claude", "nobody"), frozenset()))
    assert effects == (
        Persist("grant", ("session", "claude", "nobody"), frozenset()),
        Audit(actor="owner", action="grant", outcome="set", target="agent:claude:nobody", detail="off", at=w.now),
        Notify("grant", ("claude", "nobody")),
    )
    assert w.hub.book.grants == {("session", "claude", "nobody"): frozenset()}


def test_narrowing_a_grant_revokes_nothing(w: World) -> None:
    a = w.launch("a", session=("claude", "s1"))
    effects = w.step(H.SetGrant(w.now, ("claude", "s1"), frozenset({Scope.READ})))
    assert effects == (
        Persist("grant", ("session", "claude", "s1"), frozenset({Scope.READ})),
        Audit(actor="owner", action="grant", outcome="set", target="agent:claude:s1", detail="read", at=w.now),
        Notify("grant", ("claude", "s1")),
    )
    assert w.hub.book.tokens[a.token].state is TokenState.LIVE


def test_disconnect_all_revokes_each_agent_then_audits_once(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    w.launch("ctl", Preset.OFF, control=True)
    effects = w.step(H.DisconnectAll(w.now, by="phone"))
    revokes = [e for e in effects if isinstance(e, Audit) and e.action == "revoke"]
    assert [(x.actor, x.target) for x in revokes] == [("phone", actor(w, a)), ("phone", actor(w, b))]
    assert effects[-1] == Audit(actor="phone", action="disconnect_all", outcome="done", at=w.now)
    empty = World()
    assert empty.step(H.DisconnectAll(3.0)) == (
        Audit(actor="owner", action="disconnect_all", outcome="done", at=3.0),
    )


def test_panes_to_lock_ignores_final_messages_and_includes_recipients_of_received(w: World) -> None:
    a, b, c = w.launch("a"), w.launch("b"), w.launch("c")
    k = w.send(c, b)
    w.decide(k, Decision.DECLINE)
    w.send(b, a)
    assert H.panes_to_lock(w.hub, [c.principal]) == (c.pane,)
    assert H.panes_to_lock(w.hub, [a.principal]) == (a.pane,)
    assert H.panes_to_lock(w.hub, [b.principal, c.principal]) == (a.pane, b.pane, c.pane)


# --- tick / recover -----------------------------------------------------------------------------------


def test_card_expiry_at_its_exact_time_records_card_then_message(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b)
    card_id = w.card_of(key)
    w.now += 900
    effects = w.step(H.Tick(w.now))
    card = w.hub.cards[card_id]
    assert card.state is CardState.EXPIRED and card.answered_at == w.now and card.answered_by is None
    assert effects == (
        Persist("card", (card_id,), card),
        Notify("card", (card_id,), payload={"state": "expired"}),
        *final_effects(w, key, "expired", "card expired unanswered"),
    )


def test_the_id_hour_expires_queued_messages_at_its_exact_end_and_releases_them(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b)
    w.decide(key)
    ref = w.message(key).ref
    w.now += 3599.5
    assert w.step(H.Tick(w.now)) == ()
    w.now += 0.5
    done = None
    effects = w.step(H.Tick(w.now))
    done = effects[0].record  # type: ignore[attr-defined]
    assert done.state is MessageState.EXPIRED and done.reason == "not delivered within the id's hour"
    assert done.final_at == w.now
    assert [type(e) for e in effects] == [Persist, Audit, Notify]
    assert key not in w.hub.messages and ref not in w.hub.refs


def test_guarding_and_typing_messages_outlive_the_hour_until_their_outcome(w: World) -> None:
    a, b, c = w.launch("a"), w.launch("b"), w.launch("c")
    k1 = guarding(w, a, b)
    k2 = guarding(w, a, c)
    w.guard(k2, c)
    w.now += 4000
    assert w.step(H.Tick(w.now)) == ()
    assert w.message(k1).state is MessageState.GUARDING and w.message(k2).state is MessageState.TYPING
    w.typed(k2)
    w.tick()
    assert k2 not in w.hub.messages and k1 in w.hub.messages


def test_tick_prunes_rate_windows_and_closed_cards_no_message_refers_to(w: World) -> None:
    a, b, c = w.launch("a"), w.launch("b"), w.launch("c")
    k1 = w.send(a, b)
    w.decide(k1, Decision.DECLINE)
    w.now += 30
    k2 = w.send(a, c)
    w.tick(30)  # 60 s after the first send, 30 after the second
    assert w.hub.sent == {a.principal: (w.now - 30,)}
    assert w.hub.pair_sent == {(a.principal, c.incarnation): (w.now - 30,)}
    assert set(w.hub.cards) == {w.card_of(k1), w.card_of(k2)}
    w.tick(3600)
    assert w.hub.sent == {} and w.hub.pair_sent == {} and w.hub.cards == {}


def test_tick_keeps_open_cards_and_closed_ones_of_live_messages(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    k1 = w.send(a, b)
    k2 = w.send(a, b)
    w.decide(k2, Decision.APPROVE_ONCE)
    w.tick(1)
    assert set(w.hub.cards) == {w.card_of(k1), w.card_of(k2)}


def test_recover_types_nothing_again_and_puts_guards_back_to_wait(w: World) -> None:
    a, b, c = w.launch("a"), w.launch("b"), w.launch("c")
    k1 = guarding(w, a, b)
    w.guard(k1, b)
    k2 = guarding(w, a, c)
    w.now += 4
    effects = w.step(H.Recover(w.now))
    waiting = w.message(k2)
    assert waiting.state is MessageState.READY and waiting.reason == "daemon restarted before typing"
    assert effects == (
        *final_effects(w, k1, "unconfirmed", "daemon restarted while typing"),
        Notify("needs", (b.pane,), payload={"state": "open", "ref": w.message(k1).ref}),
        Persist("message", k2, waiting),
    )
    # every view is forgotten but that of the pane typed into, whose idle the typing used (seed 4469)
    assert w.hub.attempts == {} and w.hub.panes == {b.pane: arming.typed_before_restart(b.incarnation, w.now)}
    assert w.hub.panes[b.pane].arming is arming.Arming.USED
    assert w.hub.drafts == {b.pane: H.LeftDraft(b.pane, b.incarnation, k1, w.message(k1).ref, w.now, "the daemon restarted while typing")}


def test_recover_also_runs_the_clock(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b)
    w.now += 3600
    effects = w.step(H.Recover(w.now))
    assert w.hub.messages == {} and any(isinstance(e, Audit) and e.outcome == "expired" for e in effects)
    assert key not in w.hub.messages


# --- restore --------------------------------------------------------------------------------------


def test_restore_rebuilds_refs_cards_and_pairs(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b)
    message = w.message(key)
    card = w.hub.cards[w.card_of(key)]
    hub = H.restore(w.hub.book, [message], [card], [(a.principal, b.incarnation)])
    assert hub == H.Hub(
        book=w.hub.book,
        messages={key: message},
        refs={message.ref: key},
        cards={card.id: card},
        pairs=frozenset({(a.principal, b.incarnation)}),
    )
    assert hub.limits == H.DEFAULT_LIMITS


# --- ordering and accumulation ------------------------------------------------------------------------


def test_revoke_cancels_open_messages_listed_after_final_ones(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    done = w.send(a, b)
    w.decide(done, Decision.DECLINE)
    open_one = w.send(a, b)
    w.step(H.Revoke(w.now, a.principal))
    assert w.message(done).state is MessageState.DECLINED
    assert w.message(open_one).state is MessageState.CANCELLED


def test_disconnect_all_stamps_each_revocation_with_its_time(w: World) -> None:
    w.launch("a")
    w.launch("b")
    effects = w.step(H.DisconnectAll(77.0))
    assert [e.at for e in effects if isinstance(e, Audit)] == [77.0, 77.0, 77.0]


def test_narrowing_names_who_set_the_grant(w: World) -> None:
    w.launch("a", session=("claude", "s1"))
    effects = w.step(H.SetGrant(w.now, ("claude", "s1"), frozenset({Scope.READ}), by="phone"))
    assert effects[1].actor == "phone"  # type: ignore[attr-defined]


def test_an_idle_screen_seen_while_typing_is_used_up_by_the_typing(w: World) -> None:
    """The pane answered before the typing was confirmed: that idle does not also start the next message."""
    a, b = w.launch("a"), w.launch("b")
    k1, k2 = w.send(a, b), w.send(a, b)
    w.decide(k1)
    w.decide(k2, Decision.APPROVE_ONCE)
    w.idle(b)
    w.guard(k1, b)
    assert w.idle(b, "fp-answered") == ()  # the slot is taken by k1's typing
    assert w.hub.panes[b.pane].arming is Arming.TYPING
    w.typed(k1, fingerprint="fp-answered")
    assert w.hub.panes[b.pane] == H.PaneView(
        b.incarnation, Arming.AWAITING_TURN, Seen(True, "fp-answered", w.now), w.now, ("fp-idle", "fp-answered")
    )
    assert w.idle(b, "fp-answered") == ()
    assert w.message(k2).state is MessageState.READY
    w.idle(b, "busy", ready=False)
    assert [e.message for e in w.idle(b, "fp-3") if isinstance(e, CheckGuard)] == [k2]


def test_recover_records_every_typing_message(w: World) -> None:
    a, b, c = w.launch("a"), w.launch("b"), w.launch("c")
    k1 = guarding(w, a, b)
    w.guard(k1, b)
    k2 = guarding(w, a, c)
    w.guard(k2, c)
    effects = w.step(H.Recover(w.now))
    assert effects == (
        *final_effects(w, k1, "unconfirmed", "daemon restarted while typing"),
        Notify("needs", (b.pane,), payload={"state": "open", "ref": w.message(k1).ref}),
        *final_effects(w, k2, "unconfirmed", "daemon restarted while typing"),
        Notify("needs", (c.pane,), payload={"state": "open", "ref": w.message(k2).ref}),
    )


def test_reroute_to_an_approved_pair_persists_the_moved_message(w: World) -> None:
    a, b, c = w.launch("a"), w.launch("b"), w.launch("c")
    pre = w.send(a, c)
    w.decide(pre)
    key = guarding(w, a, b, handle="h")
    effects = w.guard(key, b, handle=H.Recipient(c.pane, c.incarnation, "claude"))
    assert effects == (Persist("message", key, w.message(key)),)
    assert w.message(key).state is MessageState.READY


def test_two_cards_expiring_in_one_tick_are_both_recorded(w: World) -> None:
    a, b, c = w.launch("a"), w.launch("b"), w.launch("c")
    k1, k2 = w.send(a, b), w.send(a, c)
    effects = w.tick(900)
    expired = [e.key for e in effects if isinstance(e, Notify) and e.topic == "card"]
    assert expired == [(w.card_of(k1),), (w.card_of(k2),)]
    assert [e.message_id for e in effects if isinstance(e, Audit)] == [k1[1], k2[1]]


def test_two_messages_reaching_their_hour_in_one_tick_are_both_recorded(w: World) -> None:
    a, b, c = w.launch("a"), w.launch("b"), w.launch("c")
    k1, k2 = w.send(a, b), w.send(a, c)
    w.decide(k1)
    w.decide(k2)
    effects = w.tick(3600)
    assert [(e.message_id, e.outcome) for e in effects if isinstance(e, Audit)] == [
        (k1[1], "expired"),
        (k2[1], "expired"),
    ]


def test_the_hour_is_judged_per_message_whatever_the_store_order(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    early = w.send(a, b)
    w.decide(early, Decision.APPROVE_ONCE)
    w.now += 100
    late = w.send(a, b)
    w.decide(late, Decision.APPROVE_ONCE)
    hub = H.restore(w.hub.book, [w.message(late), w.message(early)], list(w.hub.cards.values()), [])
    hub, effects = H.step(hub, H.Tick(w.message(early).expires_at))
    assert early not in hub.messages and late in hub.messages
    assert [e.message_id for e in effects if isinstance(e, Audit)] == [early[1]]


def test_restore_keeps_the_configured_limits(w: World) -> None:
    limits = H.Limits(hop_limit=2)
    assert H.restore(w.hub.book, [], [], [], limits).limits == limits


# --- submit: the gate and the configured limits -----------------------------------------------------


def test_submit_from_an_unknown_token_is_refused_with_the_send_audit(w: World) -> None:
    b = w.launch("b")
    with pytest.raises(H.CallRefused) as err:
        w.step(H.Submit(6.0, "tok-none", "m1", "hi", H.Recipient(b.pane, b.incarnation, "claude"), "r", "c"))
    assert err.value.audit == Audit(
        actor="agent:unknown",
        action="send_message",
        outcome="refused",
        scope="message",
        target=b.pane,
        detail="not_connected",
        at=6.0,
    )


def test_the_total_queue_budget_refusal_is_queue_full() -> None:
    w = World.with_limits(queued_bytes_total=400)
    a, b, c = w.launch("a"), w.launch("b"), w.launch("c")
    w.send(a, b, "x")
    with pytest.raises(H.CallRefused) as err:
        w.send(a, c, "x" * 100)
    assert err.value.reason == "queue_full" and str(err.value) == "the daemon already has 400 bytes queued"


def test_submit_judges_ids_and_replies_by_the_configured_limits() -> None:
    w = World.with_limits(max_id_length=3, reply_window=10)
    a, b = w.launch("a"), w.launch("b")
    with pytest.raises(H.CallRefused) as err:
        w.send(a, b, message_id="abcd")
    assert err.value.reason == "bad_message_id"
    k1 = w.send(a, b, message_id="abc")
    w.decide(k1)
    w.deliver(k1, b)
    w.now += 20  # past the 10 s reply window, well within the default 300 s
    assert w.message(w.send(b, a, message_id="k2")).hop == 1


def test_a_card_for_a_pane_with_no_principal_names_the_pane(w: World) -> None:
    control = w.launch("ctl", Preset.OFF, control=True)
    w.step(H.Submit(w.now, control.token, "m", "hi", H.Recipient("%9", "inc-p", "claude"), "r", "c9"))
    assert w.hub.cards["c9"].recipient_actor == "pane:%9"


def test_submit_to_an_approved_pair_persists_the_ready_message(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    w.decide(w.send(a, b))
    effects = w.step(H.Submit(w.now, a.token, "m2", "again", H.Recipient(b.pane, b.incarnation, "claude"), "r2", "c2"))
    ready = w.message((a.principal, "m2"))
    assert ready.state is MessageState.READY and ready.reason == "pair_approved"
    assert effects[0] == Persist("message", (a.principal, "m2"), ready)


def test_launch_through_the_hub_stamps_the_time(w: World) -> None:
    effects = w.step(
        H.Launch(55.0, "tok-x", "p-x", "claude", "%5", 9, "inc-x", PRESET_SCOPES[Preset.OBSERVE])
    )
    principal = w.hub.book.principals["p-x"]
    assert principal.created_at == 55.0 and w.hub.book.tokens["tok-x"].issued_at == 55.0
    assert effects[-1].at == 55.0  # type: ignore[attr-defined]


# --- after typing: a seen turn, and a quiet pane ------------------------------------------------------


def test_a_confirmation_that_saw_the_turn_resets_the_view_to_wait_for_the_next_idle(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    key = guarding(w, a, b)
    w.guard(key, b)
    w.now += 1
    w.typed(key, fingerprint="fp-busy", busy=True)
    assert w.hub.panes[b.pane] == H.PaneView(b.incarnation, Arming.BUSY, Seen(False, "fp-busy", w.now), w.now)


def test_a_quiet_pane_rearms_exactly_rearm_after_seconds_after_the_typing() -> None:
    w = World.with_limits(rearm_after=10.0)
    a, b = w.launch("a"), w.launch("b")
    k1, k2 = w.send(a, b), w.send(a, b)
    w.decide(k1)
    w.decide(k2, Decision.APPROVE_ONCE)
    w.idle(b)
    w.guard(k1, b)
    typed_at = w.now
    w.typed(k1, fingerprint="fp-idle")
    w.idle(b, "fp-idle")  # the same idle screen: not yet the next idle
    assert w.tick(9.5) == ()
    assert w.hub.panes[b.pane].arming is Arming.AWAITING_TURN
    effects = w.tick(0.5)
    assert effects == (CheckGuard(b.pane, b.incarnation, k2),)
    assert w.hub.panes[b.pane] == H.PaneView(b.incarnation, Arming.ARMED, Seen(True, "fp-idle", typed_at), w.now)


def test_a_busy_or_settled_pane_is_not_rearmed_by_the_clock(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    key = guarding(w, a, b)
    w.guard(key, b)
    w.typed(key, fingerprint="fp-idle")
    w.idle(b, "busy", ready=False)
    before = w.hub.panes[b.pane]
    assert w.tick(60) == () and w.hub.panes[b.pane] == before


def test_a_seen_turn_disarms_a_pane_that_looked_idle_during_the_typing(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    key = guarding(w, a, b)
    w.guard(key, b)
    w.idle(b, "fp-answered", read_at=w.now - 0.1)  # seen idle during the typing, before the confirmation
    assert (w.hub.panes[b.pane].ready, w.hub.panes[b.pane].arming) == (True, Arming.TYPING)
    w.typed(key, fingerprint="fp-busy", busy=True)
    view = w.hub.panes[b.pane]
    assert (view.ready, view.arming, view.stale) == (False, Arming.BUSY, ())


def test_every_quiet_pane_rearms_in_one_tick() -> None:
    w = World.with_limits(rearm_after=10.0)
    a, b, c = w.launch("a"), w.launch("b"), w.launch("c")
    keys = {}
    for to in (b, c):
        k1, k2 = w.send(a, to), w.send(a, to)
        w.decide(k1)
        w.decide(k2, Decision.APPROVE_ONCE)
        w.idle(to)
        w.guard(k1, to)
        w.typed(k1, fingerprint="fp-idle")
        w.idle(to, "fp-idle")
        keys[to.pane] = k2
    effects = w.tick(10)
    assert effects == (CheckGuard(b.pane, b.incarnation, keys[b.pane]), CheckGuard(c.pane, c.incarnation, keys[c.pane]))


def test_the_paste_settles_as_long_as_the_recipients_harness_needs(w: World) -> None:
    """Claim: the Enter after a message's paste is due after the settle measured for the recipient's
    harness (docs/delivery.md), and after the most cautious one for a harness never measured."""
    from connectcore.delivery import UNMEASURED_SETTLE, submit_settle

    a = w.launch("a")
    for harness, pane in (("claude", "%7"), ("codex", "%8")):
        b = w.launch(f"b-{harness}", harness=harness, pane=pane)
        key = guarding(w, a, b)
        w.now += 2
        (typed,) = [e for e in w.guard(key, b) if isinstance(e, TypeText)]
        assert typed.settle == SUBMIT_SETTLE[harness] == submit_settle(harness)
    assert SUBMIT_SETTLE["claude"] != SUBMIT_SETTLE["codex"]  # the harness decides, not one constant
    assert submit_settle("opencode") == submit_settle("a-harness-never-measured") == UNMEASURED_SETTLE


def test_every_event_type_has_exactly_one_handler_and_an_unknown_one_is_refused_loudly(w: World) -> None:
    """Claim: ``step`` dispatches through one table (issue 24): each event type of ``H.Event`` has its
    handler, nothing else is in the table, and an event the table does not name raises instead of
    being ignored (a subclass too: the table keys on the exact type)."""
    import typing

    assert set(H.HANDLERS) == set(typing.get_args(H.Event))

    class NotAnEvent:
        now = 0.0

    with pytest.raises(ConnectError, match="unknown event NotAnEvent"):
        H.step(w.hub, NotAnEvent())  # type: ignore[arg-type]

    class TickLike(H.Tick):
        pass

    with pytest.raises(ConnectError, match="unknown event TickLike"):
        H.step(w.hub, TickLike(1.0))


def test_a_revocation_that_cancels_a_guarded_message_leaves_the_next_one_for_the_guards_answer(w: World) -> None:
    """Claim (pins why the state-triggered step is not yet derived once after every event, issue 24):
    a revocation that cancels a message under its guard frees the armed pane, but starts no guard in
    its own step; the next consented message for the pane is tried when the stale guard answers."""
    a, c, b = w.launch("a"), w.launch("c"), w.launch("b")
    first = guarding(w, a, b)
    second = w.send(c, b)
    w.decide(second)
    assert w.message(second).state is MessageState.READY
    effects = w.step(H.Revoke(w.now, a.principal))
    assert w.message(first).state is MessageState.CANCELLED and not w.hub.attempts
    assert w.hub.panes[b.pane].arming is Arming.ARMED
    assert not [e for e in effects if isinstance(e, CheckGuard)]
    assert w.guard(first, b) == (CheckGuard(b.pane, b.incarnation, second),)
