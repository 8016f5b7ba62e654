"""hub.federation: rules the 2026-12-06 (fourth) mutation run found unpinned (docs/survivors/hub_federation.md
names the mutants each test aims at, and which of them check.sh showed killed)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from connectcore import hub as H
from connectcore._machine import ConnectError
from connectcore.delivery import Limits, MessageState
from connectcore.effects import Persist
from connectcore.federation import envelope as E
from connectcore.federation import inbox as I
from connectcore.federation import outbox as O
from connectcore.federation import remote as R
from connectcore.federation.effects import PublishReceipt
from connectcore.grants import Preset
from tests.unit.hubkit import Agent, World, actor
from tests.unit.test_hub_federation import (
    FP,
    KA,
    N1,
    NOW,
    PAIRING,
    REMOTE,
    SENDER,
    A,
    B,
    arrive,
    judged,
    message,
    submit,
)
from tests.unit.test_hub_federation import (
    _cancel as cancel_from_a,
)


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


def _row_inner(w: World, agent: Agent, mid: str, box: str = B) -> E.MessageInner:
    """The message of ``agent``'s outbox row ``mid`` on box ``box``, read back as the outbox reads it."""
    assert w.hub.outbox is not None
    return O.message_of(w.hub.outbox.rows[E.Identity(box, agent.principal, mid)])


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
    came from another box than the one the reply goes to, saying so (aims at ``_reply_to`` 9, 12, 15,
    19, 20 and the box of ``reply_identity`` swapped)."""
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
    # the refusal says which box the message came from (kills ``_reply_to`` 19, 20: the words' box and ref)
    assert str(refused.value) == (
        "in_reply_to 'r-mine' names a message that did not come from box laptop: answer it where it came from")


def _outbox_world(**limits: Any) -> World:
    return World(hub=H.Hub(outbox=O.Outbox(own=A), limits=Limits(**limits)), now=NOW)


def _sent_inner(w: World, agent: Agent, mid: str) -> E.MessageInner:
    return _row_inner(w, agent, mid, box=A)


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


def test_a_remote_send_carries_the_sender_s_control_flag_and_the_outbox_s_record_the_event_s_time() -> None:
    """The envelope says the sender is a control agent; the outbox's own ``queued`` record is at the
    event's time (kills ``remote_submit`` 174, 179; the row's ``created_at`` is the envelope's, which
    179 does not touch: checked at stop 34, the first version of this test missed it)."""
    w = _outbox_world()
    boss = w.launch("boss", control=True)
    w.now += 2.0
    effects = submit(w, boss)
    assert _sent_inner(w, boss, "m-1").sender.control is True
    queued = [e.at for e in effects if isinstance(e, H.Audit) and e.action == O.ACTION and e.outcome == "queued"]
    assert queued == [w.now]


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


# --- the receiving box: what remote.admit reads (``_here``) and the step around it (stop 34) ----------


def _inbox_world(**limits: Any) -> World:
    """Box B, which receives from box A, with these limits."""
    return World(hub=H.Hub(inbox=I.Inbox(own=B), limits=Limits(**limits)), now=NOW)


def _from(principal: str, mid: str, **over: Any) -> E.MessageInner:
    """A message of box A's principal ``principal``."""
    return message(mid, sender=replace(SENDER, principal=principal), **over)


def _receipt(effects: tuple[Any, ...]) -> E.ReceiptInner:
    (receipt,) = [e.inner for e in effects if isinstance(e, PublishReceipt)]
    return receipt


def _answers(w: World, arrivals: list[tuple[Agent, E.MessageInner]], **over: Any) -> list[str]:
    """Each arrival's receipt: its outcome, and for a refusal its reason with the words."""
    out = []
    for to, inner in arrivals:
        receipt = _receipt(arrive(w, to, inner, **over))
        out.append(receipt.outcome if receipt.outcome == "accepted" else receipt.reason)
    return out


def test_a_remote_principal_s_live_ids_count_only_its_own_messages_against_the_box_s_cap() -> None:
    """R5: the live-id cap of the box's limits, keyed on the remote principal: another principal of the
    same box does not count, each own message counts once (kills ``_here`` 8, 9, 12, 57, 60, 72, 73)."""
    w = _inbox_world(live_ids_per_principal=2)
    to = w.launch("codex", harness="codex")
    answers = _answers(w, [(to, _from("p-8", "o-1")), (to, _from("p-8", "o-2")),
                           (to, _from("p-7", "m-1")), (to, _from("p-7", "m-2")), (to, _from("p-7", "m-3"))])
    assert answers == ["accepted"] * 4 + ["id_cap: 2 message ids are reserved (at most 2 per hour)"]


@pytest.mark.parametrize(
    ("settings", "refusal"),
    [
        (R.PairingSettings(live_ids=2), "id_cap: box laptop holds 2 message ids reserved (at most 2)"),
        (R.PairingSettings(per_window=2), "rate_limited: box laptop rate limit: at most 2 messages per minute"),
    ],
    ids=["pairing live ids", "pairing rate"],
)
def test_the_pairing_s_live_ids_and_rate_count_every_principal_of_that_box(
    settings: R.PairingSettings, refusal: str
) -> None:
    """R5: the pairing's own caps count the messages of all the box's principals together, each
    arrival counted (kills ``_here`` 8, 9, 12, 63, 64; ``remote_message_arrived`` 114)."""
    w = _inbox_world()
    to = w.launch("codex", harness="codex")
    answers = _answers(w, [(to, _from("p-7", "m-1")), (to, _from("p-8", "o-1")), (to, _from("p-9", "q-1"))],
                       settings=settings)
    assert answers == ["accepted", "accepted", refusal]


def test_the_pairing_s_queued_bytes_count_every_principal_of_that_box() -> None:
    """R5: the pairing's queued-byte budget holds what any principal of the box queued here (one
    message is about 200 typed bytes) (kills ``_here`` 8, 9, 12, 67)."""
    w = _inbox_world()
    to = w.launch("codex", harness="codex")
    answers = _answers(w, [(to, _from("p-7", "m-1")), (to, _from("p-8", "o-1"))],
                       settings=R.PairingSettings(queued_bytes=300))
    assert answers == ["accepted", "queue_full: box laptop already has 300 bytes queued here"]


def test_a_remote_principal_s_sender_and_pair_rates_are_the_box_s_and_count_each_arrival() -> None:
    """R5: the sender rate and the pair rate of this box's limits, keyed on the remote principal (and
    the recipient's incarnation), each arrival counted with the ones before it in the window (kills
    ``_here`` 61, 62; ``remote_message_arrived`` 106, 114, 115, 122, 132)."""
    w = _inbox_world(sender_per_window=2)
    one, two, three = (w.launch(n, harness="codex") for n in ("one", "two", "three"))
    answers = _answers(w, [(one, message("m-1")), (two, message("m-2")), (three, message("m-3"))])
    assert answers == ["accepted", "accepted", "rate_limited: sender rate limit: at most 2 messages per 60 s"]

    w = _inbox_world(pair_per_window=2)
    to, other = w.launch("to", harness="codex"), w.launch("other", harness="codex")
    answers = _answers(w, [(to, message("m-1")), (other, message("m-2")), (to, message("m-3")),
                           (to, message("m-4"))])
    assert answers == ["accepted"] * 3 + ["rate_limited: pair rate limit: at most 2 messages per 60 s"]


def test_the_recipient_s_and_the_box_s_queued_bytes_count_against_an_arrival() -> None:
    """R5: the recipient's queued-byte budget counts what is queued to it (not to another pane) and
    the refusal names it; the daemon's budget counts everything (one message is about 200 typed
    bytes) (kills ``_here`` 24, 32, 65, 66)."""
    w = _inbox_world(queued_bytes_per_recipient=300)
    to, other = w.launch("to", harness="codex"), w.launch("other", harness="codex")
    answers = _answers(w, [(to, message("m-1")), (to, message("m-2")), (other, message("m-3"))])
    assert answers == ["accepted", f"queue_full: {to.pane} already has 300 bytes queued", "accepted"]

    w = _inbox_world(queued_bytes_total=300)
    to, other = w.launch("to", harness="codex"), w.launch("other", harness="codex")
    answers = _answers(w, [(to, message("m-1")), (other, message("m-2"))])
    assert answers == ["accepted", "queue_full: the daemon already has 300 bytes queued"]


def test_an_arrival_is_a_row_under_its_ref_handle_and_time_with_its_card_and_its_records(world: World) -> None:
    """A carded arrival: the row carries the event's ref (in its provenance line too, and in the hub's
    refs), the recipient's handle, the envelope's conversation, the event's time; it is persisted in
    the inbox's transaction; its card names the recipient's actor; the receipt says what it waits for,
    to whom, when; the outcome record is at the event's time (kills ``_here`` 33;
    ``remote_message_arrived`` 16, 69, 75, 78, 81, 113, 152, 162, 165, 166, 176, 177, 233)."""
    w = world
    to = w.launch("codex", harness="codex")
    w.now += 3.0
    effects = arrive(w, to, ref="r-in", recipient=H.Recipient(to.pane, to.incarnation, "codex", "pr:1"))
    row = w.hub.messages[(REMOTE, "m-1")]
    assert (row.ref, row.handle, row.conversation, row.created_at) == ("r-in", "pr:1", "c-1", w.now)
    assert row.typed.startswith("[connect] message r-in from agent:claude:s-1 ")
    assert w.hub.refs["r-in"] == row.key
    assert Persist("message", row.key, row) in effects
    assert row.card is not None and w.hub.cards[row.card].recipient_actor == actor(w, to)
    receipt = _receipt(effects)
    assert (receipt.outcome, receipt.reason, receipt.recipient, receipt.at) == (
        "accepted", "awaiting_consent", (actor(w, to), to.pane), w.now)
    (outcome,) = [e for e in effects if isinstance(e, H.Audit) and e.action == "send_message"]
    assert (outcome.message_id, outcome.outcome, outcome.at) == ("m-1", "queued", w.now)


def test_an_arrival_under_an_approved_pair_is_ready_because_of_the_pair_and_so_persisted(world: World) -> None:
    """Under an approved pair the row is ``ready`` with the reason ``pair_approved`` (its outcome
    record's detail), persisted once in the inbox's transaction, and the receipt says ``ready`` (kills
    ``remote_message_arrived`` 182, 186, 189, 190, 197, 198, 199, 203, 204, 206, 207, 233)."""
    w = world
    to = w.launch("codex", harness="codex")  # not idle: nothing is attempted in this step
    w.hub = H.replace(w.hub, pairs=w.hub.pairs | {(REMOTE, to.incarnation)})
    w.now += 3.0
    effects = arrive(w, to)
    row = w.hub.messages[(REMOTE, "m-1")]
    assert (row.state, row.reason) == (MessageState.READY, "pair_approved")
    assert [e for e in effects if isinstance(e, Persist) and e.kind == "message"] == [Persist("message", row.key, row)]
    assert _receipt(effects).reason == "ready"
    (outcome,) = [e for e in effects if isinstance(e, H.Audit) and e.action == "send_message"]
    assert (outcome.detail, outcome.at) == ("pair_approved", w.now)


def test_a_refused_arrival_is_receipted_at_the_step_s_time_naming_the_recipient_it_was_for(world: World) -> None:
    """The refusal's receipt names the recipient (its actor, or ``pane:<id>`` for a pane no principal
    holds) and the step's time (kills ``remote_message_arrived`` 16, 17, 46, 48, 55)."""
    w = world
    quiet = w.launch("quiet", Preset.OFF, harness="codex")  # not reachable
    w.now += 3.0
    receipt = _receipt(arrive(w, quiet))
    assert (receipt.outcome, receipt.recipient, receipt.at) == ("refused", (actor(w, quiet), quiet.pane), w.now)
    receipt = _receipt(arrive(w, quiet, message("m-2"), recipient=H.Recipient("%99", "inc-none", "codex")))
    assert (receipt.outcome, receipt.recipient) == ("refused", ("pane:%99", "%99"))


def test_an_arrival_reusing_an_id_held_here_is_refused_and_a_used_ref_is_a_loud_error(world: World) -> None:
    """A message whose identity the hub already holds as a row (its inbox record gone) is refused
    ``duplicate_id`` saying so; a ref already used is the daemon's bug, refused loudly (kills
    ``remote_message_arrived`` 34-39, 41)."""
    w = world
    to = w.launch("codex", harness="codex")
    arrive(w, to)
    w.hub = H.replace(w.hub, inbox=I.Inbox(own=B))  # the record no longer held; the row still here
    assert _receipt(arrive(w, to)).reason == "duplicate_id: message_id 'm-1' was already used here"
    a, b = w.launch("a"), w.launch("b")
    used = w.message(w.send(a, b)).ref
    with pytest.raises(ConnectError, match=rf"^message ref {used} was already used$"):
        arrive(w, to, message("m-2"), ref=used)


def test_a_remote_message_event_without_an_inbox_or_without_a_message_is_refused_loudly_saying_so(
    world: World,
) -> None:
    """(kills ``remote_message_arrived`` 4, 8-13: the errors' kind, reason and words.)"""
    w = World(now=NOW)
    to = w.launch("codex", harness="codex")
    with pytest.raises(ConnectError, match=r"^this box is not federated: it has no inbox$"):
        arrive_at = H.RemoteMessageArrived(NOW, judged(message(), I.Inbox(own=B)), H.Recipient(to.pane, to.incarnation,
                                           "codex"), "laptop", FP, "r-1", "card-1", N1)
        w.step(arrive_at)
    to = world.launch("codex", harness="codex")
    with pytest.raises(I.InboxError, match=r"^a remote message's verdict holds no message$") as refused:
        arrive(world, to, verdict=E.Verdict(E.Decision.NEW, f"box:{A}"))
    assert refused.value.reason is I.Refusal.WRONG_DECISION


def test_a_reply_to_a_message_this_box_sent_to_the_replying_box_is_known_and_kept(both: World) -> None:
    """R9 on the receiving box: a reply naming this box's outbox row to box A is accepted and the row
    keeps the identity's text; one naming a row this box never sent is ``bad_reply``, and so on a box
    with no outbox (kills ``_here`` 47, 68, 81, 82, 85, 86; ``_sent_to`` 1, 3-7, 9;
    ``remote_message_arrived`` 80)."""
    w = both
    me = w.launch("me", harness="codex")
    submit(w, me, "m-9", "hi", box=A, box_name="laptop")
    mine = E.Identity(B, me.principal, "m-9")
    assert _receipt(arrive(w, me, message("m-2", in_reply_to=mine))).outcome == "accepted"
    assert w.hub.messages[(REMOTE, "m-2")].in_reply_to == str(mine)
    never = E.Identity(B, me.principal, "m-8")
    assert _receipt(arrive(w, me, message("m-3", in_reply_to=never))).reason == (
        f"bad_reply: in_reply_to {never} names no message this box sent to box laptop")
    w = World(hub=H.Hub(inbox=I.Inbox(own=B)), now=NOW)  # receives only
    me = w.launch("me", harness="codex")
    assert _receipt(arrive(w, me, message("m-2", in_reply_to=mine))).reason.startswith("bad_reply: ")


def test_a_sender_box_cannot_reset_the_hop_of_a_reply_to_what_this_box_sent_it(both: World) -> None:
    """R6 (remote.py's docstring; docs/security.md: "the sender box cannot reset the hop"): box A's
    agent received this box's hop-2 reply, so its answer within the reply window is at least hop 3
    here, whatever hop its box writes. Failed before stop 34's fix (hop 1: ``hub.last_received`` only
    ever held local recipients, so ``_here``'s reckoning of a remote principal was always None; the
    fourth run's ``_here`` 34, 38, 59, 70 changed only that dead reckoning)."""
    w = both
    me = w.launch("me", harness="codex")
    w.hub = H.replace(w.hub, pairs=w.hub.pairs | {(REMOTE, me.incarnation)})
    w.idle(me)
    arrive(w, me, ref="r-in")  # m-1: conversation c-1, hop 1
    key = (REMOTE, "m-1")
    w.guard(key, me)
    w.typed(key)
    assert w.hub.messages[key].state is MessageState.DELIVERED
    submit(w, me, "m-9", "re: hello", box=A, box_name="laptop", in_reply_to="r-in")
    assert (_row_inner(w, me, "m-9").conversation, _row_inner(w, me, "m-9").hop) == ("c-1", 2)
    reset = message("m-2", hop=1, in_reply_to=E.Identity(B, me.principal, "m-9"))
    assert _receipt(arrive(w, me, reset)).outcome == "accepted"
    assert w.hub.messages[(REMOTE, "m-2")].hop >= 3


@pytest.mark.parametrize(("claimed", "later", "expected"), [(1, 3600.0, 3), (1, 0.0, 3), (5, 0.0, 5)])
def test_a_reply_to_this_box_s_message_is_one_hop_past_it_whenever_it_comes_and_never_lowered(
    both: World, claimed: int, later: float, expected: int
) -> None:
    """R6: a reply naming this box's message is at least one hop past it, even an hour later (no reply
    window ends an explicit reply), and an envelope's higher count is kept as it is."""
    w = both
    me = w.launch("me", harness="codex")
    w.hub = H.replace(w.hub, pairs=w.hub.pairs | {(REMOTE, me.incarnation)})
    w.idle(me)
    arrive(w, me, ref="r-in")  # m-1: conversation c-1, hop 1
    w.guard((REMOTE, "m-1"), me)
    w.typed((REMOTE, "m-1"))
    submit(w, me, "m-9", "re: hello", box=A, box_name="laptop", in_reply_to="r-in")  # hop 2
    w.now += later
    answer = message("m-2", hop=claimed, in_reply_to=E.Identity(B, me.principal, "m-9"))
    assert _receipt(arrive(w, me, answer)).outcome == "accepted"
    assert w.hub.messages[(REMOTE, "m-2")].hop == expected


def test_the_unconfirmed_cancels_count_every_principal_named_and_each_one_s_merged_group_per_box() -> None:
    """What a revocation's answer names: per other box, the cancelling rows of every principal named
    and of the principals merged with it, all added up (kills ``cancels_unconfirmed`` 4, 6, 12, 21)."""
    w = _outbox_world()
    first = w.launch("first", session=("claude", "s-1"))
    other = w.launch("other")
    submit(w, first, "m-1")
    w.step(H.PaneGone(w.now, first.pane, first.incarnation))  # m-1 cancelling: its process ended
    again = w.launch("again", pane=first.pane)  # resumed by hand: its session unknown at launch
    submit(w, again, "m-2")
    w.step(H.BindSession(w.now, again.principal, ("claude", "s-1")))  # merged into first
    assert H.grants.group(w.hub.book, again.principal) == {first.principal, again.principal}
    submit(w, other, "m-3")
    w.step(H.Revoke(w.now, first.principal))
    w.step(H.Revoke(w.now, other.principal))
    assert H.cancels_unconfirmed(w.hub, [again.principal]) == {B: 2}
    assert H.cancels_unconfirmed(w.hub, [again.principal, other.principal]) == {B: 3}


def test_a_removed_pairing_leaves_the_inbox_record_of_a_message_being_typed_to_its_outcome(both: World) -> None:
    """I7 through the hub: the removal hands the inbox the messages whose typing started, so their
    records stay ``accepted`` and later commit their real outcome; the others' records are cancelled
    at the step's time, and the outbox's rows across the pairing end at it too (kills
    ``pairing_removed`` 12, 33, 35, 38, 42, 47)."""
    w = both
    to = w.launch("codex", harness="codex")
    w.hub = H.replace(w.hub, pairs=w.hub.pairs | {(REMOTE, to.incarnation)})
    w.idle(to)
    arrive(w, to)
    typing = (REMOTE, "m-1")
    w.guard(typing, to)
    assert w.hub.messages[typing].state is MessageState.TYPING
    carded = w.launch("carded", harness="codex")
    arrive(w, carded, message("m-2"))
    submit(w, carded, "m-9", "hi", box=A, box_name="laptop")
    w.now += 7.0
    w.step(H.PairingRemoved(w.now, PAIRING, "laptop"))
    assert w.hub.inbox is not None and w.hub.outbox is not None
    records = w.hub.inbox.records
    assert records[message("m-1").identity].state is I.InboxState.ACCEPTED
    cancelled = records[message("m-2").identity]
    assert (cancelled.state, cancelled.receipt.at) == (I.InboxState.CANCELLED, w.now)
    (row,) = w.hub.outbox.rows.values()
    assert row.is_final and row.final_at == w.now
    w.typed(typing)
    assert w.hub.inbox.records[message("m-1").identity].state is I.InboxState.DELIVERED


def test_the_messages_held_across_a_pairing_are_found_whatever_other_pairings_records_come_first(
    world: World,
) -> None:
    """The send locks of a removal name every pane holding a message across the pairing, though the
    inbox holds a record of another pairing of the box before them (kills ``_from_pairing`` 5)."""
    w = world
    to = w.launch("codex", harness="codex")
    assert w.hub.inbox is not None
    old = message("m-0", routing=E.Routing(E.Kind.MESSAGE, A, B, pairing="pairing-0"))
    r = old.routing
    outer = E.Outer(r, bytes(24), b"sealed").encode()
    facts = E.Facts(E.subject_for(r.kind, r.sender, r.to), 64 + len(outer), True, outer, E.encode_inner(old))
    view = E.View(own=B, peers={A: E.Peer(KA, active="pairing-0", pairings=frozenset({"pairing-0"}))},
                  retained=w.hub.inbox.retained(), now=NOW)
    arrive(w, to, old, verdict=E.judge(facts, view))
    arrive(w, to)
    assert [i.id for i in w.hub.inbox.records] == ["m-0", "m-1"]
    assert H.pairing_panes(w.hub, PAIRING) == (to.pane,)


def _tombstone_verdict(w: World, inner: E.MessageInner) -> E.Verdict:
    """Box A's cancel of ``inner``, which this box never held, judged here (a tombstone)."""
    assert w.hub.inbox is not None
    cancel = E.CancelInner(E.Routing(E.Kind.CANCEL, A, B, pairing=PAIRING), inner.identity,
                           E.digest_of(E.encode_inner(inner)), inner.created_at, "sender revoked", NOW)
    return judged(cancel, w.hub.inbox)  # type: ignore[arg-type]


def test_what_the_inbox_settles_by_itself_is_committed_at_the_step_s_time_with_the_event_s_nonce(world: World) -> None:
    """A cancel of a message never held commits its tombstone with the event's nonce and the step's
    time; a message refused before the rules (no recipient here) is receipted at the step's time
    (kills ``remote_settled`` 18, 30, 31, 36)."""
    w = world
    w.now += 4.0
    verdict = _tombstone_verdict(w, message("m-5"))
    assert verdict.decision is E.Decision.TOMBSTONE
    w.step(H.RemoteSettled(w.now, verdict, nonce=N1, delivery="d-3"))
    assert w.hub.inbox is not None
    held = w.hub.inbox.records[message("m-5").identity]
    assert (held.tombstone, held.nonce, held.receipt.at) == (True, N1, w.now)
    w.step(H.RemoteSettled(w.now, judged(message(), w.hub.inbox), nonce=N1, refusal="no_pane: no live pane"))
    assert w.hub.inbox.records[message().identity].receipt.at == w.now


def test_a_cancel_from_the_sending_box_ends_the_held_message_and_its_record_at_the_step_s_time(world: World) -> None:
    """(kills ``remote_cancel_arrived`` 40, 53: the cancelled message's and its receipt's time.)"""
    w = world
    to = w.launch("codex", harness="codex")
    arrive(w, to)
    w.now += 4.0
    effects = cancel_from_a(w)
    done = w.hub.messages[(REMOTE, "m-1")]
    assert (done.state, done.final_at) == (MessageState.CANCELLED, w.now)
    assert [r.at for r in (e.inner for e in effects if isinstance(e, PublishReceipt))] == [w.now]


def test_federation_events_the_core_cannot_step_are_refused_loudly_with_their_kind_and_words(world: World) -> None:
    """A daemon's bug, said as such: a box without the inbox or the outbox the event needs; a verdict
    that is not a cancel, a cancel of nothing held, a verdict that is no receipt, a refusal without a
    nonce (kills ``remote_cancel_arrived`` 4, 10, 17-20; ``receipt_arrived`` 4-6, 10-13;
    ``remote_settled`` 4, 8, 12)."""
    bare = World(now=NOW)
    verdict = E.Verdict(E.Decision.NEW, f"box:{A}")
    for event, lacks in ((H.RemoteCancelArrived(NOW, verdict), "inbox"), (H.ReceiptArrived(NOW, verdict), "outbox"),
                         (H.RemoteSettled(NOW, verdict), "inbox")):
        with pytest.raises(ConnectError, match=rf"^this box is not federated: it has no {lacks}$"):
            bare.step(event)
    w = world
    with pytest.raises(I.InboxError, match=r"^a new verdict is not a cancel of a held message$") as wrong:
        w.step(H.RemoteCancelArrived(NOW, verdict))
    assert wrong.value.reason is I.Refusal.WRONG_DECISION
    nothing = message("m-5").identity
    with pytest.raises(I.InboxError, match=rf"^this box holds no {nothing}$") as unknown:
        w.step(H.RemoteCancelArrived(NOW, E.Verdict(E.Decision.CANCEL, f"box:{A}", identity=nothing)))
    assert unknown.value.reason is I.Refusal.UNKNOWN_MESSAGE
    assert w.hub.inbox is not None
    with pytest.raises(I.InboxError, match=r"^a refusal commits a receipt, which needs a nonce$") as no_nonce:
        w.step(H.RemoteSettled(NOW, judged(message(), w.hub.inbox), refusal="no_pane"))
    assert no_nonce.value.reason is I.Refusal.BAD_NONCE
    sender = _outbox_world()
    with pytest.raises(O.OutboxError, match=r"^a new verdict is no receipt$") as no_receipt:
        sender.step(H.ReceiptArrived(NOW, verdict))
    assert no_receipt.value.reason is O.Refusal.UNKNOWN_MESSAGE


# --- after every step: the final receipts and records of remote messages (read at stop 34, after the run) ---


def test_each_remote_message_a_step_made_final_gets_its_receipt_whatever_comes_before_it_in_the_step() -> None:
    """``finals_receipted`` goes through every message the step persisted: a remote sender's message
    with no inbox record here (sorted first), and one not final, are passed over, not the end of the
    round; the final one whose record is still accepted gets its final receipt (kills
    ``finals_receipted`` 21, 22: a message with no record read as having one, an AttributeError;
    26, 28: ``continue`` -> ``break``)."""
    w = _inbox_world()
    to = w.launch("codex", harness="codex")
    arrive(w, to, message("m-1"))
    arrive(w, to, message("m-2"))
    one, two = w.hub.messages[(REMOTE, "m-1")], w.hub.messages[(REMOTE, "m-2")]
    unknown = replace(one, id="m-0")  # a remote sender's message this inbox holds no record of
    assert unknown.key < one.key < two.key
    done = replace(two, state=MessageState.DELIVERED)
    effects = tuple(Persist("message", m.key, m) for m in (unknown, one, done))
    hub, receipts = H.federation.finals_receipted(w.hub, effects, w.now + 9)
    finals = [(r.inner.message.id, r.inner.outcome) for r in receipts if isinstance(r, PublishReceipt)]
    assert finals == [("m-2", "delivered")]
    assert hub.inbox is not None
    assert hub.inbox.records[message("m-2").identity].state is I.InboxState.DELIVERED
    assert hub.inbox.records[message("m-1").identity].state is I.InboxState.ACCEPTED


def test_a_message_to_another_box_made_final_is_recorded_with_the_message_scope_at_the_step_s_time() -> None:
    """``finals_audited``: the sending agent's outcome record of a remote message the step ended
    carries the message scope and the step's time (kills ``finals_audited`` 12, 20: no scope; 16, 24:
    no time)."""
    w = World(hub=H.Hub(outbox=O.Outbox(own=A)), now=NOW)
    me = w.launch("me")
    submit(w, me, "m-1", bus_up=False)
    w.now += 7.0
    effects = w.step(H.PairingRemoved(w.now, PAIRING, "devbox"))
    (record,) = [e for e in effects if isinstance(e, H.Audit) and e.action == "send_message" and e.message_id == "m-1"]
    assert (record.outcome, record.scope, record.target, record.at) == (
        "cancelled", "message", f"%4@51d7a9c03e6f2b18@{B}", w.now)
