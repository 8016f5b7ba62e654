"""hub.federation: rules the 2026-12-06 (fourth) mutation run found unpinned (docs/survivors/hub_federation.md
names the mutants each test aims at, and which of them check.sh showed killed)."""

from __future__ import annotations

from typing import Any

import pytest

from connectcore import hub as H
from connectcore._machine import ConnectError
from connectcore.delivery import Limits, MessageState
from connectcore.federation import envelope as E
from connectcore.federation import inbox as I
from connectcore.federation import outbox as O
from connectcore.grants import Preset
from tests.unit.hubkit import Agent, World, actor
from tests.unit.test_hub_federation import NOW, PAIRING, REMOTE, A, B, arrive, message, submit


@pytest.fixture
def sender_box() -> World:
    return World(hub=H.Hub(outbox=O.Outbox(own=A)), now=NOW)


def test_a_refused_remote_send_carries_its_reason_message_and_full_refusal_record(sender_box: World) -> None:
    """A remote send the box's own rules refuse raises ``CallRefused`` with the rule's reason and
    message and the record the daemon writes: ``send_message`` ``refused`` under the sender's actor,
    scope ``message``, the qualified target, the message id, the reason as detail, at the event's time
    (aims at ``_refused`` 2, 3, 7-13 and the rest of the record's fields)."""
    w = sender_box
    me = w.launch("me")
    w.now += 3.0
    with pytest.raises(H.CallRefused) as refused:
        submit(w, me, "bad id!", "hi")
    exc = refused.value
    assert exc.reason == "bad_message_id"
    assert str(exc).startswith("message_id may hold only letters")
    a = exc.audit
    assert (a.actor, a.action, a.outcome, a.scope, a.target, a.message_id, a.detail, a.at) == (
        actor(w, me), "send_message", "refused", "message", "%4@51d7a9c03e6f2b18@devbox", "bad id!",
        "bad_message_id", w.now)


@pytest.fixture
def world() -> World:
    """Box B, which receives from box A."""
    return World(hub=H.Hub(inbox=I.Inbox(own=B)), now=NOW)


@pytest.fixture
def both() -> World:
    """Box B with an inbox and an outbox: it receives from box A and answers to it."""
    return World(hub=H.Hub(inbox=I.Inbox(own=B), outbox=O.Outbox(own=B)), now=NOW)


def _row_inner(w: World, agent: Agent, mid: str) -> E.MessageInner:
    assert w.hub.outbox is not None
    row = w.hub.outbox.rows[E.Identity(B, agent.principal, mid)]
    routing, plain, nonce = O.to_seal(row, E.Kind.MESSAGE)
    inner = E.parse_inner(plain, E.Outer(routing, nonce, b"x"))
    assert isinstance(inner, E.MessageInner)
    return inner


def test_a_reply_to_a_message_from_the_other_box_travels_as_that_message_s_identity(both: World) -> None:
    """R9 on the sending box: ``in_reply_to`` the ref of a message this agent received from box A goes
    out as A's identity of that message (box, A's principal, A's id) (aims at ``_reply_to`` 2-8, 10, 11,
    13-14, 16-24: the ref not looked up, the original lost, the identity's parts swapped or missing)."""
    w = both
    me = w.launch("me")
    arrive(w, me, ref="r-in")
    submit(w, me, "m-9", "re: hello", box=A, box_name="laptop", in_reply_to="r-in")
    assert _row_inner(w, me, "m-9").in_reply_to == E.Identity(A, "p-7", "m-1")


def test_a_reply_naming_no_received_message_is_refused_bad_reply_and_stores_nothing(both: World) -> None:
    """A ref naming no message, or one another agent received, is ``bad_reply``; so is a message that
    came from another box than the one the reply goes to (aims at ``_reply_to`` 9, 12, 15 and the
    box of ``reply_identity`` swapped)."""
    w = both
    me, other = w.launch("me"), w.launch("other")
    arrive(w, other, ref="r-other")
    arrive(w, me, message("m-2"), ref="r-mine")
    for ref, box in (("r-none", A), ("r-other", A), ("r-mine", B)):
        before = w.snapshot()
        with pytest.raises(H.CallRefused) as refused:
            submit(w, me, w.fresh("m"), "re", box=box, box_name="laptop", in_reply_to=ref)
        assert refused.value.reason == "bad_reply", ref
        assert w.hub.outbox == before.outbox and w.hub.sent == before.sent


def _outbox_world(**limits: Any) -> World:
    return World(hub=H.Hub(outbox=O.Outbox(own=A), limits=Limits(**limits)), now=NOW)


def _sent_inner(w: World, agent: Agent, mid: str) -> E.MessageInner:
    assert w.hub.outbox is not None
    row = w.hub.outbox.rows[E.Identity(A, agent.principal, mid)]
    routing, plain, nonce = O.to_seal(row, E.Kind.MESSAGE)
    inner = E.parse_inner(plain, E.Outer(routing, nonce, b"x"))
    assert isinstance(inner, E.MessageInner)
    return inner


def test_a_box_without_an_outbox_refuses_a_remote_send_saying_so() -> None:
    """(aims at ``remote_submit`` 3-5: the error's words.)"""
    w = World(now=NOW)
    me = w.launch("me")
    with pytest.raises(ConnectError, match=r"^this box is not federated: it has no outbox$"):
        submit(w, me)


def test_the_gate_s_refusal_of_a_remote_send_is_recorded_as_a_send_message_to_the_qualified_target() -> None:
    """An agent whose preset has no message scope is refused at the gate, and the gate's record names
    the call (``send_message``), the target as ``<target>@<box name>``, at the event's time (aims at
    ``remote_submit`` 9-12, 18-20)."""
    w = _outbox_world()
    quiet = w.launch("quiet", Preset.OFF)
    w.now += 2.0
    with pytest.raises(H.CallRefused) as refused:
        submit(w, quiet)
    a = refused.value.audit
    assert refused.value.reason == "not_connected"
    assert (a.action, a.outcome, a.target, a.at) == ("send_message", "refused", "%4@51d7a9c03e6f2b18@devbox", w.now)


def test_an_admitted_remote_send_s_own_record_has_the_message_scope_and_the_event_s_time() -> None:
    """(aims at ``remote_submit`` 207, 210, 214, 217.)"""
    w = _outbox_world()
    me = w.launch("me")
    w.now += 2.0
    effects = submit(w, me)
    (called,) = [e for e in effects if isinstance(e, H.Audit) and e.action == "send_message"]
    assert (called.actor, called.outcome, called.scope, called.at) == (actor(w, me), "queued", "message", w.now)


def test_a_remote_send_reusing_an_id_is_duplicate_id_wherever_the_first_went() -> None:
    """A remote send may not reuse the id of the sender's local message, nor of its earlier message to
    another box; the second is refused ``duplicate_id`` by the box's rule, saying where the first went
    (aims at ``remote_submit`` 37, 38, 42, 43, 49, 54)."""
    w = _outbox_world()
    me, other = w.launch("me"), w.launch("other")
    w.send(me, other, message_id="m-local")
    submit(w, me, "m-remote")
    with pytest.raises(H.CallRefused) as local:
        submit(w, me, "m-local")
    assert local.value.reason == "duplicate_id" and "m-local" in str(local.value)
    with pytest.raises(H.CallRefused) as remote_:
        submit(w, me, "m-remote")
    assert remote_.value.reason == "duplicate_id"
    assert str(remote_.value) == "message_id 'm-remote' was already used (sent to another box)"


def test_a_remote_send_reusing_a_ref_is_a_loud_error() -> None:
    """(aims at ``remote_submit`` 113: the error's words.)"""
    w = _outbox_world()
    me, other = w.launch("me"), w.launch("other")
    used = w.message(w.send(me, other)).ref
    with pytest.raises(ConnectError, match=rf"^message ref {used} was already used$"):
        submit(w, me, "m-2", ref=used)


def test_the_box_s_limits_apply_to_a_remote_send_not_the_defaults() -> None:
    """The id length, the live-id cap (local messages and reserved outbox rows together), the sender's
    and the pair's rate: each is the hub's limit, and a refusal names which rate (aims at ``remote_submit``
    36, 72, 74, 80, 83, 84, 89, 90, 98, 104, 105, 110, 111, 31, 231, 232, 239)."""
    w = _outbox_world(max_id_length=8)
    me = w.launch("me")
    with pytest.raises(H.CallRefused) as long_id:
        submit(w, me, "m-123456789")
    assert long_id.value.reason == "bad_message_id"

    w = _outbox_world(live_ids_per_principal=3)
    me, other = w.launch("me"), w.launch("other")
    w.send(me, other, message_id="m-l1")
    submit(w, me, "m-r1")
    submit(w, me, "m-r2")
    with pytest.raises(H.CallRefused) as cap:
        submit(w, me, "m-r3")
    assert cap.value.reason == "id_cap" and str(cap.value).startswith("3 message ids are reserved")

    w = _outbox_world(sender_per_window=2, rate_window=30.0)
    me = w.launch("me")
    submit(w, me, "m-1", target=("address", "%4@aa"))
    submit(w, me, "m-2", target=("address", "%5@bb"))
    with pytest.raises(H.CallRefused) as sender:
        submit(w, me, "m-3", target=("address", "%6@cc"))
    assert sender.value.reason == "rate_limited"
    assert str(sender.value) == "sender rate limit: at most 2 messages per 30 s"

    w = _outbox_world(pair_per_window=2, rate_window=30.0)
    me = w.launch("me")
    submit(w, me, "m-1")
    submit(w, me, "m-2", target=("address", "%5@bb"))  # another pair
    submit(w, me, "m-3")
    with pytest.raises(H.CallRefused) as pair:
        submit(w, me, "m-4")
    assert pair.value.reason == "rate_limited"
    assert str(pair.value) == "pair rate limit: at most 2 messages per 30 s"
    w.now += 31.0  # past the window: the pair may send again
    submit(w, me, "m-5")


def test_a_remote_send_continues_the_conversation_the_sender_last_received_within_the_reply_window() -> None:
    """The hop and conversation of a remote send follow what the sender last received, within the
    box's reply window, not the default one (aims at ``remote_submit`` 124, 126, 127, 131, 133)."""
    w = _outbox_world(reply_window=10.0)
    me, other = w.launch("me"), w.launch("other")
    key = w.send(other, me)
    w.decide(key)
    w.deliver(key, me)
    got = w.message(key)
    submit(w, me, "m-1", ref="r-new1")
    inner = _sent_inner(w, me, "m-1")
    assert (inner.conversation, inner.hop) == (got.conversation, got.hop + 1)
    w.now += 20.0
    submit(w, me, "m-2", ref="r-new2")
    inner = _sent_inner(w, me, "m-2")
    assert (inner.conversation, inner.hop) == ("r-new2", 1)


def test_a_remote_send_carries_the_sender_s_control_flag_and_its_row_the_event_s_time() -> None:
    """(aims at ``remote_submit`` 174, 179.)"""
    w = _outbox_world()
    boss = w.launch("boss", control=True)
    w.now += 2.0
    submit(w, boss)
    assert w.hub.outbox is not None
    (row,) = w.hub.outbox.rows.values()
    assert _sent_inner(w, boss, "m-1").sender.control is True
    assert row.created_at == w.now


def test_an_outbox_refusal_of_a_remote_send_is_a_call_refusal_with_its_reason_and_record() -> None:
    """A nonce of the wrong size is refused by the outbox; the call is refused with the outbox's reason
    and words and the refusal record under the sender's actor (aims at ``remote_submit`` 184-193)."""
    w = _outbox_world()
    me = w.launch("me")
    with pytest.raises(H.CallRefused) as refused:
        submit(w, me, nonce=b"short")
    exc = refused.value
    assert exc.reason == "bad_nonce" and str(exc) == "a message's nonce is 24 bytes"
    assert (exc.audit.actor, exc.audit.outcome, exc.audit.detail, exc.audit.target) == (
        actor(w, me), "refused", "bad_nonce", "%4@51d7a9c03e6f2b18@devbox")
    assert w.hub.outbox is not None and not w.hub.outbox.rows


def test_only_the_sender_group_s_rows_within_the_id_hour_hold_ids_against_its_cap() -> None:
    """The live-id cap counts the group's own outbox rows, and only while their id is reserved: a row
    is released at exactly ``id_ttl`` after it was made; another agent's rows never count (aims at
    ``_sent_rows`` 1-6)."""
    w = _outbox_world(live_ids_per_principal=2, id_ttl=100.0)
    me, other = w.launch("me"), w.launch("other")
    submit(w, other, "m-o1", target=("address", "%7@aa"))
    submit(w, other, "m-o2", target=("address", "%8@bb"))
    submit(w, me, "m-1")
    submit(w, me, "m-2")
    with pytest.raises(H.CallRefused) as cap:
        submit(w, me, "m-3")
    assert cap.value.reason == "id_cap"
    w.now += 99.0
    with pytest.raises(H.CallRefused):
        submit(w, me, "m-3")
    w.now += 1.0  # exactly the id hour: released
    submit(w, me, "m-3")


@pytest.mark.parametrize(
    ("event", "reason"),
    [
        (H.PairingRemoved, "pairing with box laptop removed"),
        (H.MessagesOff, "messages from box laptop turned off here"),
    ],
    ids=["pairing removed", "messages off"],
)
def test_a_removed_pairing_or_messages_off_cancels_the_held_messages_at_the_step_s_time_saying_why(
    world: World, event: Any, reason: str
) -> None:
    """(aims at ``pairing_removed`` 60, 61 and ``messages_off`` 14: the final's time and reason.)"""
    w = world
    me = w.launch("me")
    arrive(w, me, message("m-2"))
    w.now += 7.0
    w.step(event(w.now, PAIRING, "laptop"))
    got = w.hub.messages[(REMOTE, "m-2")]
    assert got.state is MessageState.CANCELLED and got.final_at == w.now
    assert got.reason == reason


def test_a_connected_agent_without_the_message_scope_may_not_send_to_another_box() -> None:
    """An observer is connected but lacks ``message``: its remote send is refused at the gate and
    stores nothing (aims at ``remote_submit`` 9: the gate asked for no scope)."""
    w = _outbox_world()
    observer = w.launch("observer", Preset.OBSERVE)
    with pytest.raises(H.CallRefused):
        submit(w, observer)
    assert w.hub.outbox is not None and not w.hub.outbox.rows


def test_a_box_that_does_not_federate_refuses_a_removal_or_messages_off_saying_what_it_lacks() -> None:
    """(aims at ``pairing_removed`` 5, ``messages_off`` 3: the errors' words.)"""
    w = World(now=NOW)
    with pytest.raises(ConnectError, match=r"^this box is not federated: it has no inbox nor outbox$"):
        w.step(H.PairingRemoved(w.now, PAIRING, "laptop"))
    with pytest.raises(ConnectError, match=r"^this box is not federated: it has no inbox$"):
        w.step(H.MessagesOff(w.now, PAIRING, "laptop"))
