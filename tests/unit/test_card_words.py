"""Issue 23 item 5: a card says in words what each answer allows, names panes where a person finds
them (``%N (session:window)``), explains its hop, and a reply card quotes the message it answers."""

from __future__ import annotations

import pytest

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
    from connectd.cli.main import _card_lines

    words = {"approve_once": "Approve once: this message only", "approve_pair": "Approve pair: \x1b[2J", "decline": "Decline", "hop": "hop"}
    card = {"id": "card-1", "sender_name": "%1 (main:0) · codex · \x1b]0;owned\x07", "recipient_name": "%2 (main:1)",
            "words": words, "answers": None, "text": "hi", "expires_in": 10}
    shown = "\n".join(_card_lines(card))
    assert "\x1b" not in shown and "\x07" not in shown
    assert "from %1 (main:0) · codex · \\x1b]0;owned\\x07" in shown


def test_an_answered_card_says_how_and_by_whom_and_an_open_one_is_open() -> None:
    """Issue 23 item 8: `cards --all` shows each answered card's state in words."""
    from dataclasses import replace as _replace

    from connectcore import consent as C

    card = C.Card("card-1", ("p-a", "m1"), "p-a", "agent:a", "%2", "inc-2", "agent:b", "hi", 1, 0.0, 900.0)
    assert C.state_words(card) == "open"
    assert C.state_words(C.decide(card, C.Decision.APPROVE_ONCE, now=1.0, by="owner")) == "approved once by owner"
    assert C.state_words(C.decide(card, C.Decision.APPROVE_PAIR, now=1.0, by="page:1")) == "approved for the pair by page:1"
    assert C.state_words(C.decide(card, C.Decision.DECLINE, now=1.0, by="owner")) == "declined by owner"
    assert C.state_words(C.expire(card, now=900.0)) == "expired unanswered"
    cancelled = C.cancel(card, now=2.0, by="daemon")
    assert C.state_words(cancelled, "revoked by owner") == "withdrawn before an answer (revoked by owner)"
    assert C.state_words(cancelled) == "withdrawn before an answer"
    assert C.state_words(_replace(card, answered_by=None, state=C.CardState.DECLINED)) == "declined"


def test_every_pane_standing_in_an_audit_detail_gets_its_session_window() -> None:
    """Issue 23 item 8: the consent row's detail names both panes, each placed as the rest of the audit."""
    token = "ab" * (D.TOKEN_HEX // 2)
    windows = {"%3": "main:1", "%12": "work:2"}
    assert D.placed_in(f"from %3@{token} to %12@{token}", windows) == (
        f"from %3@{token} (main:1) to %12@{token} (work:2)"
    )
    assert D.placed_in("tier=2 send_keys on %3", windows) == "tier=2 send_keys on %3 (main:1)"
    assert D.placed_in("%4 gone, %31 and 100%3x", windows) == "%4 gone, %31 and 100%3x"  # unknown or inside a word
    assert D.placed_in("agent:claude:pane:%3:99", {}) == "agent:claude:pane:%3:99"


def test_a_remote_senders_card_names_its_box_in_the_api_and_the_cli_prints_it_as_text(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue 25, R7: the owner API's card names a remote sender as the agent on the box this box paired
    with, by name and short fingerprint (the page shows ``sender_name`` as text); the CLI prints it as
    text, a name shaped as rich markup included (never parsed: the card lines are printed, not rendered)."""
    from types import SimpleNamespace

    from connectcore import hub as H
    from connectcore.federation import inbox as I
    from connectd.cli.main import _card_lines, _print_lines
    from connectd.person import PersonCalls
    from tests.unit import test_hub_federation as F

    w = World(hub=H.Hub(inbox=I.Inbox(own=F.B)), now=F.NOW)
    to = w.launch("codex", harness="codex")
    F.arrive(w, to, box_name="[bold red]lap[/bold red]")
    person = PersonCalls(
        core=SimpleNamespace(hub=w.hub), clock=lambda: w.now, ids=None, tmux=None,  # type: ignore[arg-type]
        watcher=SimpleNamespace(directory=D.Directory(), panes={}), launches=None,  # type: ignore[arg-type]
    )
    (card,) = person.cards()
    words = "agent:claude:s-1 on box [bold red]lap[/bold red] (3f9a 12c0 …)"
    assert card["sender_name"] == words
    assert (card["sender_box"], card["sender_fingerprint"]) == ("[bold red]lap[/bold red]", F.FP)
    assert card["words"]["approve_pair"].startswith(f"Approve pair: every message from {words} to ")
    _print_lines(_card_lines(card))
    shown = capsys.readouterr().out
    assert f"{card['id']}  from {words}\n" in shown
