"""Re-arming on the answer (issue 12): a confirming screen that shows the agent's answer below the
typed message is the next idle; a screen that does not (the turn not started yet) stays stale."""

from __future__ import annotations

import textwrap

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from connectcore import arming as AR
from connectcore.arming import Arming
from connectcore.delivery import marker, provenance_line
from connectcore.effects import CheckGuard
from connectcore.screen import Activity, Composer, Harness, read_screen
from tests.support.screen_corpus import load_corpus
from tests.unit.hubkit import World

CORPUS = {case.name: case for case in load_corpus()}

def _provenance(ref: str) -> str:
    return provenance_line(ref=ref, sender_actor="agent:claude:pane:%3:4000", sender_pane="%3", sender_incarnation="4000")


TYPED = _provenance("r7") + "\nplease review the parser"
MARKER = marker(TYPED)
ECHO = [*textwrap.wrap(TYPED.split("\n")[0], 78), "please review the parser"]  # as an 80-column pane shows it


def _claude(body: list[str], *, busy: bool = False, glyph: str = "❯ ", indent: str = "  ") -> tuple[str, tuple[int, int]]:
    """A Claude-Code-shaped screen (80 columns): the typed message echoed, then ``body``."""
    rule = "─" * 80
    echo = [glyph + ECHO[0], *(indent + line for line in ECHO[1:])]
    spinner = ["✶ Hashing… (3s · esc to interrupt)", ""] if busy else []
    lines = [" ▐▛███▜▌   Claude Code v2.1.332", "", "● An earlier answer.", "", *echo, "", *body,
             *spinner, rule, "❯ ", rule, "  ⏵⏵ auto mode on (shift+tab to cycle)"]
    return "\n".join(lines), (2, len(lines) - 3)


def _read(screen: tuple[str, tuple[int, int]], command: str = "claude", typed_marker: str | None = MARKER) -> bool:
    text, cursor = screen
    return read_screen(text, command, cursor, typed_marker=typed_marker).answered


# --- the reader: answered --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "prompt"),
    [
        ("claude/2.1.332/11_finished_stamp_80", "explain the project layout"),
        ("claude/2.1.332/11_finished_stamp_160", "explain the project layout"),
        ("claude/2.1.332/16_api_error_80", "this request fails"),
        ("codex/0.171.0/11_finished_stamp_80", "explain the project layout"),
        ("codex/0.171.0/15_api_error_80", "this request fails"),
        ("opencode/1.18.33/06_finished_turn_80", "explain the project layout"),
        ("opencode/1.18.33/09_after_tool_80", "create a file"),
    ],
)
def test_a_captured_finished_turn_answers_its_prompt(name: str, prompt: str) -> None:
    """Claim: on each real harness's captured screen of a finished turn, the reader sees its prompt answered."""
    case = CORPUS[name]
    cursor = tuple(case.meta["cursor"])
    reading = read_screen(case.text, case.meta["foreground_command"], cursor, height=case.meta["height"], typed_marker=prompt)  # type: ignore[arg-type]
    assert reading.ready_for_message and reading.answered
    assert not read_screen(case.text, case.meta["foreground_command"], cursor, height=case.meta["height"]).answered  # type: ignore[arg-type]


def test_no_captured_screen_that_is_not_ready_is_answered() -> None:
    """Claim: whatever its prompt, a corpus screen that is not idle with an empty composer is never answered."""
    for case in CORPUS.values():
        for line in case.text.splitlines():
            for glyph in ("❯ ", "› ", "┃  "):
                prompt = line.strip().removeprefix(glyph.strip()).strip()
                if line.lstrip().startswith(glyph) and len(prompt) > 8:
                    reading = read_screen(case.text, case.meta["foreground_command"], tuple(case.meta["cursor"]),  # type: ignore[arg-type]
                                          height=case.meta["height"], typed_marker=prompt)
                    assert not reading.answered or case.expected_ready, case.name


def test_the_answer_below_a_wrapped_typed_message_is_seen() -> None:
    """Claim: the agent's reply line below the message's wrapped provenance line makes the screen answered."""
    assert _read(_claude(["● Reviewed: the parser is fine.", ""]))
    assert _read(_claude(["⏺ Received 120 characters.", ""], glyph="> ", indent="> "))  # the stand-in agents


@pytest.mark.parametrize(
    ("screen", "why"),
    [
        (_claude([]), "submitted, the turn not started yet (no spinner)"),
        (_claude(["● Reviewing.", ""], busy=True), "the turn runs"),
        (_claude(["  ● Done, ready for the next one.", ""]), "a body line imitating a reply, indented as Claude echoes it"),
        (_claude(["> ⏺ Received 9 characters.", ""], glyph="> ", indent="> "), "a body line imitating the stand-in's reply"),
        (_claude(["  ⏵ ● ok", ""]), "the glyph not at the line's start"),
    ],
)
def test_a_screen_without_the_agent_s_answer_below_the_message_is_not_answered(
    screen: tuple[str, tuple[int, int]], why: str
) -> None:
    """Claim: no answer line of the agent below the message, or a busy screen: not answered."""
    assert not _read(screen), why


def test_an_answer_above_the_message_or_of_another_message_is_not_its_answer() -> None:
    text, cursor = _claude([])
    assert "● An earlier answer." in text and not _read((text, cursor))
    other = marker(_provenance("r8"))
    assert not _read(_claude(["● Reviewed.", ""]), typed_marker=other)
    assert not _read(_claude(["● Reviewed.", ""]), typed_marker="   ")
    assert not _read(_claude(["● Reviewed.", ""]), typed_marker=None)


def test_a_draft_or_an_unknown_program_is_never_answered() -> None:
    text, _cursor = _claude(["● Reviewed.", ""])
    drafted = text.replace("\n❯ \n", "\n❯ half a thought\n")
    assert read_screen(drafted, "claude", None, typed_marker=MARKER).composer is Composer.DRAFT
    assert not read_screen(drafted, "claude", None, typed_marker=MARKER).answered
    assert not read_screen(text, "vim", None, typed_marker=MARKER).answered
    assert not read_screen(text, "bash", None, typed_marker=MARKER).answered
    assert read_screen(text, "claude", (0, 0), typed_marker=MARKER).activity is Activity.UNKNOWN  # focus elsewhere
    assert not read_screen(text, "claude", (0, 0), typed_marker=MARKER).answered


def _codex(body: list[str]) -> str:
    echo = ["› " + ECHO[0], *("  " + line for line in ECHO[1:])]
    return "\n".join([">_ OpenAI Codex (v0.171.0)", "", *echo, "", *body, "", "› Ask Codex to do anything", "",
                      "  GPT-5.5 default · /tmp/proj · Scripted task"])


def test_codex_answers_with_its_output_not_with_an_indented_turn_end_a_body_can_imitate() -> None:
    """Claim: on Codex only the agent's own output line counts; a body ending in 'Worked for 1s' fools the
    reader's idle but not answered."""
    answered = _codex(["• Reviewed.", "", "  Worked for 1s • 19:01"])
    assert read_screen(answered, "codex", typed_marker=MARKER).answered
    assert read_screen(_codex(["  ■ x"]), "codex", typed_marker=MARKER).activity is Activity.BUSY
    forged = _codex(["  • Reviewed.", "", "  Worked for 1s"])  # the typed body's own lines, as echoed
    reading = read_screen(forged, "codex", typed_marker=MARKER)
    assert reading.ready_for_message and not reading.answered
    assert read_screen(_codex(["■ Conversation interrupted"]), "codex", typed_marker=MARKER).answered


def test_opencode_answers_with_the_turn_s_closing_line_only() -> None:
    """Claim: OpenCode's status line without a duration (the turn runs or has not begun) is no answer."""
    done = CORPUS["opencode/1.18.33/06_finished_turn_80"]
    running = done.text.replace("· 16.7s", "")
    cursor = tuple(done.meta["cursor"])
    assert read_screen(done.text, "opencode", cursor, typed_marker="explain the project layout").answered  # type: ignore[arg-type]
    reading = read_screen(running, "opencode", cursor, typed_marker="explain the project layout")  # type: ignore[arg-type]
    assert reading.ready_for_message and not reading.answered
    assert Harness.OPENCODE is reading.harness


# --- arming: the answered confirmation is the next idle -------------------------------------------


def _typing(w: World) -> tuple[tuple[str, str], tuple[str, str]]:
    a, b = w.launch("a"), w.launch("b")
    k1, k2 = w.send(a, b), w.send(a, b)
    w.decide(k1)
    w.decide(k2)
    w.idle(b, "fp-typed-into")
    w.guard(k1, b, "fp-typed-into")
    return k1, k2


def _guards(effects: tuple[object, ...]) -> list[tuple[str, str]]:
    return [e.message for e in effects if isinstance(e, CheckGuard)]


def test_a_confirmation_that_shows_the_answer_arms_the_pane_at_once() -> None:
    """Claim: (typing, typed_answered) -> armed: the next message's guard starts with the confirmation."""
    w = World.with_limits(rearm_after=10.0)
    k1, k2 = _typing(w)
    effects = w.typed(k1, fingerprint="fp-answered", answered=True)
    assert w.hub.panes[w.agents["b"].pane].arming is Arming.ARMED
    assert _guards(effects) == [k2]


def test_a_confirmation_without_the_answer_still_awaits_the_turn() -> None:
    """Claim: a ready confirming screen that does not show the answer is stale: no guard until the clock."""
    w = World.with_limits(rearm_after=10.0)
    k1, k2 = _typing(w)
    effects = w.typed(k1, fingerprint="fp-submitted")
    b = w.agents["b"]
    assert w.hub.panes[b.pane].arming is Arming.AWAITING_TURN and _guards(effects) == []
    assert _guards(w.idle(b, "fp-submitted")) == []  # the same screen again: still stale
    assert _guards(w.idle(b, "fp-answered")) == [k2]  # the answer, drawn later: the next idle


def test_an_answered_confirmation_does_not_vouch_for_another_screen() -> None:
    """Claim: a newer reading back on the screen typed into stays stale, whatever the confirmation showed."""
    w = World.with_limits(rearm_after=10.0)
    k1, _k2 = _typing(w)
    b = w.agents["b"]
    w.now += 2
    w.idle(b, "fp-typed-into")  # read after the confirmation below, stepped before it
    effects = w.typed(k1, fingerprint="fp-answered", answered=True, read_at=w.now - 1)
    assert w.hub.panes[b.pane].arming is Arming.AWAITING_TURN and _guards(effects) == []


def test_a_watcher_reading_of_the_answered_screen_after_the_confirmation_still_arms() -> None:
    """Claim: the same answered screen read again by the watcher, newer than the confirmation, is the same answer."""
    w = World.with_limits(rearm_after=10.0)
    k1, k2 = _typing(w)
    b = w.agents["b"]
    w.now += 2
    w.idle(b, "fp-answered")
    effects = w.typed(k1, fingerprint="fp-answered", answered=True, read_at=w.now - 1)
    assert w.hub.panes[b.pane].arming is Arming.ARMED and _guards(effects) == [k2]


_seen = st.builds(AR.Seen, st.booleans(), st.sampled_from(["f1", "f2"]), st.floats(0, 10), st.booleans())


@settings(max_examples=200, deadline=None)
@given(typed_into=_seen, between=st.lists(_seen, max_size=3), confirming=st.one_of(st.none(), _seen))
def test_only_a_ready_answered_confirmation_on_the_newest_screen_arms_a_stale_one(
    typed_into: AR.Seen, between: list[AR.Seen], confirming: AR.Seen | None
) -> None:
    """Claim: after typing, a pane whose newest screen is stale is armed only by an answered confirmation of that screen."""
    view = AR.first("inc", AR.Seen(True, typed_into.fingerprint, 0.0), 0.0)
    view = AR.typing(view, AR.Seen(True, typed_into.fingerprint, 0.0), 1.0)
    for seen in between:
        view = AR.observe(view, seen, 2.0)
    after = AR.typed(view, confirming, 3.0)
    newest = after.seen
    stale = newest.ready and (
        newest.fingerprint == typed_into.fingerprint
        or (confirming is not None and confirming.ready and newest.fingerprint == confirming.fingerprint)
    ) and (confirming is None or confirming.ready)
    vouched = confirming is not None and confirming.answered and newest.fingerprint == confirming.fingerprint
    if stale:
        assert (after.arming is Arming.ARMED) is vouched


# --- edges of the rule (each pins one way the reader or the machine could be subtly wrong) --------


def test_an_answer_right_below_the_marker_s_row_counts_and_the_marker_s_own_row_does_not() -> None:
    """Claim: the answer is looked for from the row after the one holding the marker's last character."""
    rule = "─" * 40
    foot = [rule, "❯ ", rule, "  ⏵⏵ auto mode on (shift+tab to cycle)"]
    assert read_screen("\n".join(["❯ please review", "● Reviewed.", *foot]), "claude", typed_marker="please review").answered
    text, cursor = _claude([])  # the marker's last showing is inside an earlier answer, and nothing follows
    assert not read_screen(text, "claude", cursor, typed_marker="An earlier answer.").answered


def test_a_marker_wrapped_over_rows_or_at_the_capture_s_first_character_is_found() -> None:
    """Claim: the marker is found across wrapped rows (whitespace ignored) and at offset 0 of the capture."""
    rule = "─" * 40
    wrapped = ["❯ " + MARKER[:30], "  " + MARKER[30:], "", "● Reviewed.", ""]
    foot = [rule, "❯ ", rule, "  ⏵⏵ auto mode on (shift+tab to cycle)"]
    assert read_screen("\n".join([" ▐▛███▜▌   Claude Code v2.1.332", *wrapped, *foot]), "claude", typed_marker=MARKER).answered
    top = [MARKER[5:], "  the rest of it", "", "⏺ Received 9 characters.", ""]  # the capture starts mid-message
    assert read_screen("\n".join([*top, *foot]), "claude", typed_marker=MARKER[5:]).answered


def test_a_reading_that_does_not_say_answered_is_not_answered() -> None:
    """Claim: a confirmation built without ``answered`` (the default) never vouches for its screen."""
    view = AR.typing(AR.first("inc", AR.Seen(True, "f1", 0.0), 0.0), AR.Seen(True, "f1", 0.0), 1.0)
    assert AR.typed(view, AR.Seen(True, "f2", 2.0), 3.0).arming is Arming.AWAITING_TURN
    from connectcore import hub as H
    from connectcore.delivery import AfterTyping

    w = World.with_limits(rearm_after=10.0)
    k1, _k2 = _typing(w)
    w.step(H.TypingObserved(w.now, k1, AfterTyping(True, Activity.IDLE, Composer.EMPTY, True, "fp-2", w.now)))
    assert w.hub.panes[w.agents["b"].pane].arming is Arming.AWAITING_TURN


def test_only_the_marker_s_last_showing_counts_and_rows_above_it_are_skipped_whole() -> None:
    """Claim: the answer must follow the marker's last showing; an earlier showing with an answer below
    it, or an answer in the rows above the message, is not this message's answer."""
    rule = "─" * 40
    foot = [rule, "❯ ", rule, "  ⏵⏵ auto mode on (shift+tab to cycle)"]
    quoted = ["❯ please review", "", "● Reviewed.", "", "❯ please review", ""]  # typed again, not yet answered
    assert not read_screen("\n".join([*quoted, *foot]), "claude", typed_marker="please review").answered
    above = ["x" * 10, "y" * 20, "● An earlier answer.", "❯ MARK", ""]
    assert not read_screen("\n".join([*above, *foot]), "claude", typed_marker="MARK").answered
