"""Issue 23 item 5: a card says in words what each answer allows, names panes where a person finds
them (``%N (session:window)``), explains its hop, and a reply card quotes the message it answers."""

from __future__ import annotations

from connectcore import consent
from connectcore import directory as D
from connectcore import reads as R
from connectcore.consent import Decision
from tests.unit.hubkit import World


def _record(pane: int, **kw: object) -> D.PaneRecord:
    inc = D.Incarnation(server_pid=1, server_start=1, pane_id=f"%{pane}", pane_pid=10 + pane, process_start=100 + pane)
    fields = {"harness": "codex", **kw}
    return D.observe(D.Directory(), [D.PaneObservation(inc, **fields)]).panes[f"%{pane}"]  # type: ignore[arg-type]


def test_a_pane_is_placed_by_its_tmux_session_and_window_beside_its_id() -> None:
    assert D.window_name("main", 1) == "main:1"
    assert D.pane_place("%3", "main:1") == "%3 (main:1)"
    assert D.pane_place("%3") == "%3"


def test_a_pane_is_named_by_its_title_else_its_cwd_never_a_raw_actor() -> None:
    assert D.pane_label(_record(3, title="fix login", cwd="/w/app"), "%3", "main:1") == "%3 (main:1) · codex · fix login"
    assert D.pane_label(_record(3, cwd="/w/app"), "%3", "main:1") == "%3 (main:1) · codex · /w/app"
    assert D.pane_label(None, "%3", "work:2") == "%3 (work:2)"


def test_each_answer_says_what_it_allows() -> None:
    w = World()
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b)
    view = R.card_view(w.hub, D.Directory(), w.hub.cards[w.card_of(key)], {a.pane: "main:0", b.pane: "main:1"})
    assert view.words.approve_once == "Approve once: this message only"
    assert view.words.approve_pair == (
        f"Approve pair: every message from {a.pane} (main:0) to {b.pane} (main:1) until {b.pane} (main:1) ends"
    )
    assert view.words.decline.startswith("Decline: nothing is typed")
    assert view.words.hop == "Starts a conversation (hop 1)."
    assert view.words.answers is None and view.in_reply_to is None
    assert (view.sender_pane, view.sender_name, view.recipient_name) == (a.pane, f"{a.pane} (main:0)", f"{b.pane} (main:1)")


def test_a_reply_card_quotes_the_message_it_answers_bounded() -> None:
    w = World()
    a, b = w.launch("a"), w.launch("b")
    question = "Which branch holds the login fix? " + "x" * 400
    first = w.send(a, b, text=question)
    w.decide(first, Decision.APPROVE_ONCE)
    w.deliver(first, b)
    reply = w.send(b, a, text="feat/login", in_reply_to=w.message(first).ref)
    view = R.card_view(w.hub, D.Directory(), w.hub.cards[w.card_of(reply)], {})
    assert view.in_reply_to == w.message(first).ref
    assert view.words.answers is not None
    assert view.words.answers.startswith("Which branch holds the login fix?")
    assert len(view.words.answers) == consent.QUOTE_MAX_CHARS and view.words.answers.endswith("…")
    assert view.words.hop.startswith("Reply 1 in a back-and-forth between agents (hop 2)")


def test_the_hop_words_say_when_every_message_needs_a_person() -> None:
    assert "past 4 hops a person approves every message" in consent.hop_words(2, 4)
    assert consent.hop_words(5, 4).startswith("Reply 4 in a back-and-forth between agents (hop 5): past 4 hops")
    assert consent.quote("  short  ") == "short"


def test_a_pane_or_address_in_a_row_gets_its_window_beside_it_and_other_text_is_left_alone() -> None:
    token = "0" * D.TOKEN_HEX
    windows = {"%3": "main:1"}
    assert D.placed("%3", windows) == "%3 (main:1)"
    assert D.placed(f"%3@{token}", windows) == f"%3@{token} (main:1)"
    assert D.placed("%4", windows) == "%4"  # gone: no window known
    assert D.placed("agent:claude:abc", windows) == "agent:claude:abc"
    assert D.placed("%3 and more", windows) == "%3 and more"


def test_the_cli_prints_a_cards_names_with_control_characters_escaped() -> None:
    """A pane's name holds an agent's title: the CLI never writes a terminal control sequence from it."""
    from connectd.cli import _card_lines

    words = {"approve_once": "Approve once: this message only", "approve_pair": "Approve pair: \x1b[2J", "decline": "Decline", "hop": "hop"}
    card = {"id": "card-1", "sender_name": "%1 (main:0) · codex · \x1b]0;owned\x07", "recipient_name": "%2 (main:1)",
            "words": words, "answers": None, "text": "hi", "expires_in": 10}
    shown = _card_lines(card)
    assert "\x1b" not in shown and "\x07" not in shown
    assert "from %1 (main:0) · codex · \\x1b]0;owned\\x07" in shown
