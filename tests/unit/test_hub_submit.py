"""The hub's submit at its edges: who may call (authorize), what a sent message stores and emits, and
which limits refuse it, with their exact reasons.

Effects are frozen dataclasses, so whole tuples are compared; each test names the rule it pins.
"""

from __future__ import annotations

import pytest

from connectcore import hub as H
from connectcore._machine import ConnectError
from connectcore.consent import Card
from connectcore.delivery import MessageState
from connectcore.effects import (
    Audit,
    CheckGuard,
    Notify,
    Persist,
)
from connectcore.grants import PRESET_SCOPES, Preset, Scope
from tests.unit.hubkit import Agent, World, actor

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


def test_the_hop_reads_the_merge_group_s_latest_received_message_by_its_time() -> None:
    """A resumed agent is one merge group of two principals; what it received last is the newest by time,
    whichever principal recorded it and whatever its conversation's name (it sets the next hop)."""
    w = World()
    first = w.launch("a", harness="codex", session=("codex", "s-a"))
    w.step(H.PaneGone(w.now, first.pane, first.incarnation))
    again = w.launch("a-again", harness="codex", pane="%7")
    w.step(H.BindSession(w.now, again.principal, ("codex", "s-a")))  # merged into a's principal
    members = sorted(H.grants.group(w.hub.book, again.principal))
    assert len(members) == 2
    for newest, older in (members, members[::-1]):
        received = {newest: ("r-a", 3, 20.0), older: ("r-z", 1, 10.0)}
        hub = H.replace(w.hub, last_received=received)
        assert H.last_received(hub, first.principal) == H.last_received(hub, again.principal) == ("r-a", 3, 20.0)
