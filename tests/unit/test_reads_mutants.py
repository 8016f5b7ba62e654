"""Reads: rules the 2026-12-06 (fourth) mutation run found unpinned (docs/survivors/reads.md lists the
mutants left as equivalent; each test names the mutants it kills)."""

from __future__ import annotations

from dataclasses import replace

from connectcore import consent
from connectcore import directory as D
from connectcore import hub as H
from connectcore import reads as R
from connectcore.consent import Decision
from connectcore.federation import outbox as O
from connectcore.federation import pairing as P
from connectcore.hub import MessageState
from tests.unit import test_federation_outbox as TO
from tests.unit import test_federation_pairing as TP
from tests.unit.hubkit import Agent, World, guarding


class EmptyReason(Exception):
    reason = ""


class NumberedReason(Exception):
    reason = 7


def test_a_refusal_without_a_usable_reason_code_is_named_by_its_kind() -> None:
    """Only a non-empty text ``reason`` is the audit's reason; an empty one or one that is not text
    gives the error's kind in snake case (kills ``isinstance(reason, str) and reason`` -> ``or``)."""
    assert R.refusal_reason(EmptyReason("x")) == "empty_reason"
    assert R.refusal_reason(NumberedReason("x")) == "numbered_reason"


def test_a_message_moved_to_a_new_recipient_tells_its_sender_the_card_and_why() -> None:
    """A handle that resolved elsewhere at the guard opens a new card: the sender is told the new card
    and, in brackets, why it was opened (kills the bracketed reason dropped)."""
    w = World()
    a, b, c = w.launch("a"), w.launch("b"), w.launch("c")
    key = guarding(w, a, b, Decision.APPROVE_ONCE, handle="h")
    w.guard(key, b, handle=H.Recipient(c.pane, c.incarnation, "claude"))
    message = w.message(key)
    assert message.state is MessageState.AWAITING_CONSENT
    assert R.sender_reason(w.hub, message) == f"awaiting consent: card {message.card} (handle moved; needs consent)"


def test_a_message_is_said_to_await_consent_only_while_it_waits_on_its_open_card() -> None:
    """Both must hold: the message awaits consent and its card is open. Awaiting with its card no longer
    open (or with no card), it is told its own reason; not awaiting, an open card does not make it so
    (kills ``and`` -> ``or`` between the state and the card)."""
    w = World()
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b)
    waiting = w.message(key)
    assert consent.is_open(w.hub.cards[waiting.card])  # type: ignore[index]
    moved_on = replace(waiting, state=MessageState.GUARDING, reason="approved_once")
    assert R.sender_reason(w.hub, moved_on) == "approved_once"
    no_card = replace(waiting, card=None, reason="no card")
    assert R.sender_reason(w.hub, no_card) == "no card"
    w.decide(key, Decision.DECLINE)
    closed = replace(waiting, reason="its card was answered")
    assert not consent.is_open(w.hub.cards[waiting.card])  # type: ignore[index]
    assert R.sender_reason(w.hub, closed) == "its card was answered"


def _row_to_devbox(state: O.OutboxState | None = None) -> O.Row:
    """A row of this box's outbox to box B (``TO.B``), which :func:`_book` calls ``devbox``."""
    outbox, _ = O.admit(O.Outbox(own=TO.A), TO.message("x-1"), nonce=TO.NONCE, now=TO.T0)
    row = outbox.rows[TO.message("x-1").identity]
    return row if state is None else replace(row, state=state)


def _book() -> P.PairBook:
    """A pairing book that names box B ``devbox``."""
    book, _ = P.approve(TP.requested(("r1", TO.KB, "devbox")), "r1", pairing_id="pa1", now=TP.T0 + 2)
    return book


def test_a_message_sent_across_names_its_box_by_this_box_s_name_for_it() -> None:
    """With a pairing book, the box is shown by its pairing's name, in ``to_box`` and in the words of
    what it waits for; the row itself is kept (kills the name taken from the id when a book is given,
    ``box_name`` called without the book or the id, and ``row=None``)."""
    row = _row_to_devbox()
    assert row.to == TO.B and P.box_name(_book(), TO.B) == "devbox"
    sent = R.sent_across(row, _book())
    assert sent.to_box == "devbox" and sent.row is row
    assert sent.reason == sent.waits_for == "until box devbox accepts it"
    assert R.sent_across(row, None).to_box == TO.B


def test_a_message_sent_across_is_listed_queued_until_final_whatever_its_interim_state() -> None:
    """Published or accepted by the other box, the person's list still says ``queued`` (the agent's
    word), not the interim state's name (kills ``listed`` always ``str(row.state)``)."""
    for state in (O.OutboxState.PUBLISHED, O.OutboxState.ACCEPTED):
        assert R.sent_across(_row_to_devbox(state), None).listed == "queued", state


# --- the card in a person's words (card_view) ----------------------------------------------------------


def _shown(w: World, *agents: Agent, titles: tuple[str, ...] = ()) -> D.Directory:
    """A directory showing each agent's pane with the agent's incarnation (its token) and a title."""
    observed = D.observe(D.Directory(), [
        D.PaneObservation(D.Incarnation(1, 1, agent.pane, 10 + i, 100 + i), harness="claude", title=title)
        for i, (agent, title) in enumerate(zip(agents, titles, strict=True))
    ])
    return D.Directory(panes={a.pane: replace(observed.panes[a.pane], token=a.incarnation) for a in agents})


def test_a_card_names_each_live_pane_by_its_label_only_while_that_incarnation_is_shown() -> None:
    """Sender and recipient shown in the directory with the incarnations the card names: each named by
    its place, program and title; a pane now holding another incarnation: by its place alone (kills
    ``_live``'s record dropped, looked up by None, its test forced either way or inverted, and
    ``name`` called with no record, no pane or no incarnation)."""
    w = World()
    a, b = w.launch("a"), w.launch("b")
    card_id = w.card_of(w.send(a, b))
    card = w.hub.cards[card_id]
    windows = {a.pane: "main:0", b.pane: "main:1"}
    view = R.card_view(w.hub, _shown(w, a, b, titles=("asking", "answering")), card, windows)
    assert view.sender_name == f"{a.pane} (main:0) · claude · asking"
    assert view.recipient_name == f"{b.pane} (main:1) · claude · answering"
    moved = _shown(w, a, b, titles=("asking", "answering"))
    moved = D.Directory(panes={**moved.panes, b.pane: replace(moved.panes[b.pane], token="another-incarnation")})
    view = R.card_view(w.hub, moved, card, windows)
    assert view.sender_name == f"{a.pane} (main:0) · claude · asking"
    assert view.recipient_name == f"{b.pane} (main:1)"


def test_a_card_of_panes_with_no_known_window_names_them_by_id_alone() -> None:
    """No window known: ``%N``, nothing in brackets, in the names and the answers' words (kills the
    window's default ``""`` -> ``"XXXX"`` in ``name`` and ``place``)."""
    w = World()
    a, b = w.launch("a"), w.launch("b")
    card_id = w.card_of(w.send(a, b))
    card = w.hub.cards[card_id]
    view = R.card_view(w.hub, _shown(w, a, b, titles=("", "")), card, {})
    assert (view.sender_name, view.recipient_name) == (f"{a.pane} · claude", f"{b.pane} · claude")
    assert view.words.approve_pair == f"Approve pair: every message from {a.pane} to {b.pane} until {b.pane} ends"


def test_a_card_s_state_is_in_words_with_a_withdrawn_card_s_reason() -> None:
    """Open: ``open``; declined: ``declined``; withdrawn because its sender was revoked: the words and
    the message's final reason; and a sender with no live token left is named by its actor (kills
    ``state`` None or left to its default, the final reason dropped or asked of a missing message,
    and the gone sender's name None)."""
    w = World()
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b)
    card_id = w.card_of(key)
    assert R.card_view(w.hub, D.Directory(), w.hub.cards[card_id], {}).state == "open"
    w.decide(key, Decision.DECLINE)
    assert R.card_view(w.hub, D.Directory(), w.hub.cards[card_id], {}).state == "declined by owner"
    other = w.send(a, b)
    card = w.hub.cards[w.card_of(other)]
    w.step(H.Revoke(w.now, a.principal))
    card = w.hub.cards[card.id]
    view = R.card_view(w.hub, D.Directory(), card, {})
    assert view.state == "withdrawn before an answer (revoked)"
    assert view.sender_pane is None and view.sender_name == card.sender_actor and card.sender_actor


def test_a_card_whose_message_is_no_longer_held_is_still_shown() -> None:
    """The card's message released from the hub: the card still shows, answering nothing, its state
    without a reason (kills ``in_reply_to`` read of a missing message)."""
    w = World()
    a, b = w.launch("a"), w.launch("b")
    card_id = w.card_of(w.send(a, b))
    card = w.hub.cards[card_id]
    view = R.card_view(replace(w.hub, messages={}), D.Directory(), card, {})
    assert view.in_reply_to is None and view.words.answers is None and view.state == "open"


def test_a_reply_card_whose_question_is_no_longer_held_says_so() -> None:
    """A reply to a message the hub no longer holds quotes ``(no longer held)`` (kills that text
    dropped or changed)."""
    w = World()
    a, b = w.launch("a"), w.launch("b")
    first = w.send(a, b, text="which branch?")
    w.decide(first, Decision.APPROVE_ONCE)
    w.deliver(first, b)
    reply = w.send(b, a, text="feat/login", in_reply_to=w.message(first).ref)
    hub = replace(w.hub, messages={k: m for k, m in w.hub.messages.items() if k != first})
    view = R.card_view(hub, D.Directory(), w.hub.cards[w.card_of(reply)], {})
    assert view.in_reply_to == w.message(first).ref
    assert view.words.answers == "(no longer held)"


def test_the_inbox_holds_a_delivery_to_the_end_of_the_reply_window_inclusive() -> None:
    """Delivered exactly ``reply_window`` seconds ago: still in the inbox (kills ``<=`` -> ``<``)."""
    w = World()
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b)
    w.decide(key)
    w.deliver(key, b)
    final_at = w.message(key).final_at
    assert final_at is not None
    assert [m.key for m in R.inbox(w.hub, b.principal, final_at + w.hub.limits.reply_window)] == [key]
    assert R.inbox(w.hub, b.principal, final_at + w.hub.limits.reply_window + 0.001) == ()


def test_a_message_awaiting_consent_without_an_open_card_waits_for_its_card_in_general_words() -> None:
    """``waits_for``: awaiting consent, with no open card to name (none, or answered), the words say
    the person answers its card (kills those words changed and ``card is not None and open`` -> ``or``)."""
    w = World()
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b)
    waiting = w.message(key)
    assert R.waits_for(w.hub, waiting, R.Recipient()) == f"until the person answers card {waiting.card}"
    assert R.waits_for(w.hub, replace(waiting, card=None), R.Recipient()) == "until the person answers its card"


def test_a_message_to_a_handle_waits_for_the_handle_only_when_it_names_no_single_pane() -> None:
    """Sent to a handle, approved, the pane unread: it waits for its screen, not for its handle (kills
    ``handle is not None and NO_SINGLE_PANE in reason`` -> ``or``)."""
    w = World()
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b, handle="pr:1")
    w.decide(key)
    message = w.message(key)
    assert message.handle == "pr:1" and not message.is_final
    assert R.waits_for(w.hub, message, R.Recipient()) == "until its screen is read"


def test_a_view_of_another_incarnation_is_no_reading_of_the_recipient() -> None:
    """The hub's view of the pane holds another process's reading: the message waits for its own
    recipient's screen to be read, whatever the screen shows (kills ``incarnation != … or arming is
    UNSEEN`` -> ``and``)."""
    from connectcore import arming as A
    from connectcore.screen import Activity

    w = World()
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b)
    w.decide(key)
    message = w.message(key)
    other = A.first("another-incarnation", A.Seen(True, "fp", w.now), w.now)
    hub = replace(w.hub, panes={**w.hub.panes, b.pane: other})
    assert R.waits_for(hub, message, R.Recipient(activity=Activity.BUSY)) == "until its screen is read"
