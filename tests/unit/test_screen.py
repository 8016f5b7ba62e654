"""The screen reader: 100% on the captured corpus, zero false idle-and-empty, and one case per rule."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from connectcore.control import question_fingerprint
from connectcore.screen import (
    Activity,
    Composer,
    Harness,
    Question,
    Reading,
    harness_from_command,
    read_screen,
)
from connectcore.screen_harnesses import CLAUDE as CLAUDE_RULES
from tests.support.screen_corpus import Case, load_corpus, misses

CORPUS = load_corpus()
RULE = "─" * 80

# --------------------------------------------------------------------------------------------------
# The corpus (captured from the real programs by scripts/capture_screens.py)
# --------------------------------------------------------------------------------------------------

REQUIRED_STATES = {
    "claude": {"startup_apikey", "startup_trust", "idle_empty", "draft_oneline", "draft_multiline", "draft_pasted",
               "busy_waiting", "busy_streaming", "busy_retrying", "dialog_permission", "api_error",
               "finished_stamp", "after_clear", "long_scrollback"},
    "codex": {"startup_trust", "idle_empty", "draft_oneline", "draft_multiline", "draft_pasted", "busy_waiting",
              "busy_streaming", "busy_retrying", "dialog_permission", "api_error", "finished_stamp",
              "after_clear", "long_scrollback"},
    "shell": {"bash_prompt_empty", "bash_prompt_typed", "less", "vim"},
}


def test_corpus_covers_every_required_state_at_both_widths() -> None:
    for program, states in REQUIRED_STATES.items():
        for width in (80, 160):
            have = {c.meta["state"] for c in CORPUS if c.meta["program"] == program and c.meta["width"] == width}
            assert states <= have, f"{program} @{width} lacks {sorted(states - have)}"


@pytest.mark.parametrize("case", CORPUS, ids=[c.name for c in CORPUS])
def test_corpus_screen_is_read_as_expected(case: Case) -> None:
    assert misses(case, case.read()) == []


def test_zero_false_ready_on_the_corpus_with_and_without_cursor() -> None:
    false_ready = [c.name for c in CORPUS for with_cursor in (True, False)
                   if c.read(with_cursor=with_cursor).ready_for_message and not c.expected_ready]
    assert false_ready == []
    assert sum(c.expected_ready for c in CORPUS) >= 10  # the corpus does hold ready screens


def test_corpus_expectations_are_independent_of_the_reader() -> None:
    """Every fixture states its own expectation (written by the capture script at capture time)."""
    for case in CORPUS:
        assert set(case.expected) == {"harness", "activity", "composer", "question"}, case.name
        assert case.meta["note"], case.name


# --------------------------------------------------------------------------------------------------
# Synthetic screens, shaped like the captured ones
# --------------------------------------------------------------------------------------------------


def claude_screen(composer: list[str], *, status: str = "", footer: str = "  ⏵⏵ auto mode on (shift+tab to cycle)",
                  body: tuple[str, ...] = ("❯ hello", "", "● Hi there.", "", "✻ Cooked for 3s · done 6:27 PM")) -> str:
    lines = [" ▐▛███▛█   Claude Code v2.1.332", "", *body, ""]
    if status:
        lines += [status]
    lines += [RULE, "❯\u00a0" + composer[0], *("  " + c for c in composer[1:]), RULE, footer]
    return "\n".join(lines) + "\n"


def composer_row(text: str) -> int:
    return next(i for i, line in enumerate(text.split("\n")) if line.startswith(("❯", "›")) and i > 3)


def codex_screen(composer: str, *, body: tuple[str, ...] = (), extra: tuple[str, ...] = (),
                 footer: tuple[str, ...] = ("  GPT-5.5 default · ~/proj", "  ← for agents · ? for shortcuts")) -> str:
    lines = ["", "  >_ OpenAI Codex (v0.171.0)", "     ~/proj", "", *body, "", *extra,
             f"› {composer}".rstrip(), "", *footer]
    return "\n".join(lines) + "\n"


def read(text: str, command: str = "claude", cursor: tuple[int, int] | None = None) -> Reading:
    return read_screen(text, command, cursor)


# --- placeholder vs draft -------------------------------------------------------------------------


def test_codex_placeholder_with_cursor_at_start_is_empty() -> None:
    text = codex_screen("Ask Codex to do anything")
    reading = read(text, "codex", (2, composer_row(text)))
    assert (reading.activity, reading.composer) == (Activity.IDLE, Composer.EMPTY)
    assert reading.ready_for_message


def test_placeholder_text_with_cursor_after_it_is_a_draft() -> None:
    text = codex_screen("Ask Codex to do anything")
    assert read(text, "codex", (26, composer_row(text))).composer is Composer.DRAFT


def test_claude_try_hint_is_empty_but_other_text_is_a_draft() -> None:
    hint = claude_screen(['Try "fix lint errors"'])
    assert read(hint, "claude", (2, composer_row(hint))).composer is Composer.EMPTY
    assert read(hint, "claude").composer is Composer.EMPTY  # no cursor: the known hint list decides
    typed = claude_screen(['Try "fix lint errors" and then the tests'])
    assert read(typed, "claude", (2, composer_row(typed))).composer is Composer.DRAFT


def test_draft_with_cursor_at_its_start_is_still_a_draft() -> None:
    text = claude_screen(["fix the failing test"])
    assert read(text, "claude", (2, composer_row(text))).composer is Composer.DRAFT


def test_spaces_typed_into_an_empty_composer_are_a_draft() -> None:
    text = claude_screen([""])
    reading = read(text, "claude", (5, composer_row(text)))  # cursor moved by three typed spaces
    assert reading.composer is Composer.DRAFT and not reading.ready_for_message


# --- multi-line and pasted drafts -----------------------------------------------------------------


@pytest.mark.parametrize("lines", [["first line", "second line"], ["", "text on the second line"], ["", ""]])
def test_multi_line_composer_is_a_draft(lines: list[str]) -> None:
    text = claude_screen(lines)
    assert read(text).composer is Composer.DRAFT


def test_codex_multi_line_draft() -> None:
    text = codex_screen("first line").replace("› first line\n", "› first line\n  second line\n")
    assert read(text, "codex").composer is Composer.DRAFT
    assert read(text, "codex", (13, composer_row(text) + 1)).composer is Composer.DRAFT


@pytest.mark.parametrize("placeholder", ["[Pasted text #1 +12 lines]", "[Pasted Content 2480 chars]"])
def test_pasted_content_placeholder_is_a_draft(placeholder: str) -> None:
    claude = claude_screen([placeholder])
    codex = codex_screen(placeholder)
    assert read(claude, "claude", (2, composer_row(claude))).composer is Composer.DRAFT
    assert read(codex, "codex", (2, composer_row(codex))).composer is Composer.DRAFT


# --- busy -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("status,footer", [
    ("✶ Caramelizing… (14s · ↓ 58 tokens)", "  ⏵⏵ auto mode on (shift+tab to cycle) · esc to interrupt"),
    ("✶ Caramelizing… (14s · ↓ 58 tokens)", "  ⏵⏵ auto mode on (shift+tab to cycle)"),
    ("✻ API error · retrying in 4s · attempt 3/10", "  ⏵⏵ auto mode on (shift+tab to cycle)"),
    ("", "  ⏵⏵ auto mode on (shift+tab to cycle) · esc to interrupt"),
])
def test_claude_busy_markers(status: str, footer: str) -> None:
    assert read(claude_screen([""], status=status, footer=footer)).activity is Activity.BUSY


def test_claude_finished_stamp_is_not_busy() -> None:
    text = claude_screen([""], status="✻ Cooked for 1m 7s · done 6:41 PM")
    assert read(text).activity is Activity.IDLE


def test_codex_streaming_without_busy_line_is_busy_until_the_turn_end_shows() -> None:
    streaming = codex_screen("Ask Codex to do anything", body=("› write a summary", "", "• Line one.", "  Line"))
    assert read(streaming, "codex").activity is Activity.BUSY
    done = codex_screen("Ask Codex to do anything",
                        body=("› write a summary", "", "• Line one.", "  Line two.", "", "  Worked for 12s • 18:48"))
    assert read(done, "codex").activity is Activity.IDLE
    failed = codex_screen("Ask Codex to do anything", body=("› write", "", "■ We’re currently experiencing high demand."))
    assert read(failed, "codex").activity is Activity.IDLE
    prose = codex_screen("Ask Codex to do anything",
                         body=("› write", "", "• First paragraph.", "", "  Worked for the team in 2024 • 10:30"))
    assert read(prose, "codex").activity is Activity.BUSY  # the model's words are not the turn's end


def test_codex_working_line_is_busy() -> None:
    text = codex_screen("Ask Codex to do anything", body=("› go",), extra=("• Working (3s • esc to interrupt)", "", ""))
    assert read(text, "codex").activity is Activity.BUSY


def test_codex_without_banner_prompt_or_turn_end_is_unknown() -> None:
    text = "\n".join(["some output of a slash command", "", "› Ask Codex to do anything", "",
                      "  GPT-5.5 default · ~/proj"]) + "\n"
    reading = read(text, "codex")
    assert reading.activity is Activity.UNKNOWN and not reading.ready_for_message


# --- dialogs --------------------------------------------------------------------------------------


def test_claude_dialog_question_and_numbered_options() -> None:
    text = "\n".join([
        "● Update(parser.py)", "", RULE, " Edit file", " parser.py", "", " Do you want to make this edit to parser.py?",
        " ❯ 1. Yes", "   2. Yes, allow all edits during this session (shift+tab)", "   3. No, and tell Claude what to",
        "      do differently (esc)", "", " Esc to cancel · Tab to amend"]) + "\n"
    reading = read(text)
    assert (reading.activity, reading.composer) == (Activity.DIALOG, Composer.ABSENT)
    assert reading.question == Question("Do you want to make this edit to parser.py?", (
        "Yes", "Yes, allow all edits during this session (shift+tab)",
        "No, and tell Claude what to do differently (esc)"), ("Edit file", "parser.py"), 0)


def test_dialog_question_falls_back_to_the_nearest_question_then_the_title() -> None:
    text = "\n".join([RULE, " Pick a color", "", " Which color do you like? Take your time.", "",
                      " ❯ Red", "   Blue", "", " Enter to confirm · Esc to cancel"]) + "\n"
    assert read(text).question == Question("Which color do you like?", ("Red", "Blue"), ("Pick a color",), 0)
    text = "\n".join([RULE, " Pick a color", "", " ❯ Red", "   Blue", "", " Enter to confirm · Esc to cancel"]) + "\n"
    assert read(text).question == Question("Pick a color", ("Red", "Blue"), ("Pick a color",), 0)


def test_codex_dialog_options_with_a_wrapped_option() -> None:
    text = "\n".join(["• Running touch x", "", "", "  Would you like to run the following command?", "",
                      "  Reason: is this fine?", "", "  $ touch x", "", "",
                      "› 1. Yes, proceed (y)", "  2. Yes, and don't ask again for commands that start with",
                      "     `touch x` (p)", "  3. No (esc)", "", "  Press enter to confirm or esc to cancel"]) + "\n"
    reading = read(text, "codex")
    assert reading.activity is Activity.DIALOG
    assert reading.question == Question("Would you like to run the following command?", (
        "Yes, proceed (y)", "Yes, and don't ask again for commands that start with `touch x` (p)", "No (esc)"),
        ("Reason: is this fine?", "$ touch x"), 0)


def test_a_history_prompt_above_a_dialog_is_not_an_option() -> None:
    text = "\n".join(["❯ what is in /tmp?", "", RULE, "  Auto mode can't check actions in this session", "",
                      "  Some explanation.", "", "  Enter to stay in auto mode · Esc to cancel"]) + "\n"
    assert read(text).question == Question("Auto mode can't check actions in this session", (), (
        "Some explanation.", "Enter to stay in auto mode · Esc to cancel"))


def test_options_exclude_a_deeper_indented_line_above_and_a_question_right_after_the_rule() -> None:
    text = "\n".join([RULE, " ❯ Yes", "   No", "", " Enter to confirm · Esc to cancel"]) + "\n"
    assert read(text).question == Question("", ("Yes", "No"), (), 0)
    text = "\n".join([RULE, " Run this?", "     $ rm -rf build", " ❯ Yes", "   No", "", " Esc to cancel"]) + "\n"
    assert read(text).question == Question("Run this?", ("Yes", "No"), ("$ rm -rf build",), 0)


def test_dialog_hints_in_the_history_above_a_composer_are_not_a_dialog() -> None:
    text = claude_screen([""], body=("● The dialog said: Enter to confirm · Esc to cancel", "", "● Done.",
                                     "", "✻ Cooked for 3s · done 6:27 PM"))
    assert read(text).activity is Activity.IDLE


def test_no_composer_and_no_dialog_hints_is_unknown() -> None:
    reading = read("Claude Code v2.1.332\n\nloading...\n")
    assert (reading.activity, reading.composer, reading.question) == (Activity.UNKNOWN, Composer.ABSENT, None)


# --- frame edges ----------------------------------------------------------------------------------


def test_claude_footer_of_three_lines_is_a_frame_but_four_is_not() -> None:
    three = claude_screen([""], footer="  a\n  b\n  c")
    four = claude_screen([""], footer="  a\n  b\n  c\n  d")
    assert read(three).ready_for_message
    reading = read(four)
    assert reading.activity is Activity.UNKNOWN and not reading.ready_for_message


def test_adjacent_rules_hold_no_composer() -> None:
    text = "\n".join(["● Hi.", "", RULE, RULE, "  ⏵⏵ auto mode on"]) + "\n"
    reading = read(text)
    assert (reading.activity, reading.composer) == (Activity.UNKNOWN, Composer.ABSENT)


def test_cursor_on_the_rule_below_the_composer_is_outside_it() -> None:
    text = claude_screen([""])
    reading = read(text, cursor=(2, composer_row(text) + 1))
    assert reading.activity is Activity.UNKNOWN and reading.harness is Harness.CLAUDE
    assert reading.fingerprint == read(text).fingerprint


def test_cursor_outside_the_composer_still_reports_a_draft() -> None:
    text = claude_screen(["half a prompt"])
    assert read(text, cursor=(0, 0)).composer is Composer.DRAFT


def test_busy_words_typed_in_the_composer_are_a_draft_not_a_busy_marker() -> None:
    text = claude_screen(["why does it say esc to interrupt"])
    reading = read(text)
    assert (reading.activity, reading.composer) == (Activity.IDLE, Composer.DRAFT)


def test_busy_words_far_up_in_the_history_do_not_make_it_busy() -> None:
    body = ("● It printed: esc to interrupt", *("  filler line" for _ in range(10)), "", "✻ Cooked for 3s · done 6:27 PM")
    assert read(claude_screen([""], body=body)).activity is Activity.IDLE


def test_codex_screen_wins_over_a_claude_screen_quoted_in_its_history() -> None:
    text = codex_screen("Ask Codex to do anything", body=("› what does Claude Code v2.1.332 show?", "",
                                                          "• It shows ⏵⏵ auto mode on.", "",
                                                          "  Worked for 2s • 18:00"))
    assert read(text, "node").harness is Harness.CODEX
    both = "Claude Code v2.1.332\n>_ OpenAI Codex (v0.171.0)\nnothing at the bottom\n"
    assert read(both, "node").harness is Harness.UNKNOWN


def test_every_reading_has_a_fingerprint() -> None:
    for text, command in (("user@box:~$ \n", "bash"), ("anything\n", "vim"), ("x\n", "opencode")):
        assert re.fullmatch(r"[0-9a-f]{64}", read(text, command).fingerprint)


# --- fingerprint ----------------------------------------------------------------------------------


def test_fingerprint_ignores_spinner_timer_tokens_and_clock() -> None:
    a = claude_screen([""], status="✶ Caramelizing… (14s · ↓ 58 tokens)", footer="  esc to interrupt")
    b = claude_screen([""], status="✻ Transfiguring… (1m 2s · ↑ 1.2k tokens)", footer="  esc to interrupt")
    assert read(a).fingerprint == read(b).fingerprint
    c = claude_screen([""], body=("● Hi.", "", "✻ Cooked for 3s · done 6:27 PM"))
    d = claude_screen([""], body=("● Hi.", "", "✻ Cooked for 4s · done 6:28 PM"))
    assert read(c).fingerprint == read(d).fingerprint
    e = codex_screen("Ask Codex to do anything", body=("› go",), extra=("• Working (3s • esc to interrupt)", ""))
    f = codex_screen("Ask Codex to do anything", body=("› go",), extra=("◦ Working (9s • esc to interrupt)", ""))
    assert read(e, "codex").fingerprint == read(f, "codex").fingerprint


def test_fingerprint_ignores_the_cursor() -> None:
    text = claude_screen([""])
    assert read(text, cursor=(2, composer_row(text))).fingerprint == read(text).fingerprint


def test_fingerprint_changes_with_the_composer_and_the_content() -> None:
    empty = read(claude_screen([""])).fingerprint
    assert read(claude_screen(["x"])).fingerprint != empty
    assert read(claude_screen(["wait 5m"])).fingerprint != read(claude_screen(["wait 6m"])).fingerprint
    assert read(claude_screen([""], body=("● Another answer.",))).fingerprint != empty


def test_fingerprint_is_a_sha256_hex() -> None:
    assert re.fullmatch(r"[0-9a-f]{64}", read("").fingerprint)


# --- harness --------------------------------------------------------------------------------------


@pytest.mark.parametrize("command,harness", [
    ("claude", Harness.CLAUDE), ("codex", Harness.CODEX), ("opencode", Harness.OPENCODE),
    ("bash", Harness.SHELL), ("-zsh", Harness.SHELL), ("/usr/bin/fish", Harness.SHELL), ("sh", Harness.SHELL),
    ("vim", Harness.UNKNOWN), ("less", Harness.UNKNOWN), ("python3", Harness.UNKNOWN),
])
def test_harness_from_command(command: str, harness: Harness) -> None:
    assert harness_from_command(command) is harness


def test_ambiguous_commands_are_decided_by_the_screen() -> None:
    claude = claude_screen([""])
    codex = codex_screen("Ask Codex to do anything")
    assert read(claude, "node").harness is Harness.CLAUDE
    assert read(claude, "2.1.332").harness is Harness.CLAUDE  # a native install shows its version
    assert read(codex, "node").harness is Harness.CODEX
    plain = read("Welcome to Node.js v20.20.2.\n> \n", "node")
    assert (plain.harness, plain.activity, plain.ready_for_message) == (Harness.UNKNOWN, Activity.UNKNOWN, False)


def test_a_known_non_agent_program_is_unknown_whatever_its_screen_shows() -> None:
    reading = read(claude_screen([""]), "less")
    assert reading.harness is Harness.UNKNOWN and not reading.ready_for_message


def test_opencode_is_recognised_but_never_ready() -> None:
    reading = read("anything\n> \n", "opencode")
    assert reading.harness is Harness.OPENCODE and not reading.ready_for_message


# --- cursor and scrollback ------------------------------------------------------------------------


def test_cursor_outside_the_composer_is_unknown() -> None:
    text = claude_screen([""])
    reading = read(text, cursor=(0, 0))
    assert reading.activity is Activity.UNKNOWN and not reading.ready_for_message


def test_scrollback_with_height_reads_the_same_as_the_screen_alone() -> None:
    screen = claude_screen([""])
    height = len(screen.split("\n")) - 1
    cursor = (2, composer_row(screen))
    history = "".join(f"old line {i}\n" for i in range(50))
    alone = read_screen(screen, "claude", cursor)
    with_history = read_screen(history + screen, "claude", cursor, height=height)
    assert alone.ready_for_message and with_history.ready_for_message
    # without the height, the cursor row points into the history: not trusted, never ready
    assert not read_screen(history + screen, "claude", cursor).ready_for_message


def test_out_of_range_cursor_is_ignored_as_unknown() -> None:
    text = claude_screen([""])
    assert not read(text, cursor=(2, 500)).ready_for_message
    assert read(text, cursor=(-1, 3)).activity is Activity.UNKNOWN


# --- shell ----------------------------------------------------------------------------------------


def test_shell_prompt_empty_and_typed() -> None:
    empty = "user@box:~/proj$ ls\nnotes.txt\nuser@box:~/proj$ \n"
    typed = "user@box:~/proj$ ls\nnotes.txt\nuser@box:~/proj$ git status\n"
    e = read(empty, "bash", (17, 2))
    t = read(typed, "bash", (27, 2))
    assert (e.harness, e.activity, e.composer) == (Harness.SHELL, Activity.IDLE, Composer.EMPTY)
    assert (t.activity, t.composer) == (Activity.IDLE, Composer.DRAFT)
    assert not e.ready_for_message  # a shell is not an agent: never typed into


def test_shell_running_output_is_unknown() -> None:
    assert read("user@box:~$ make\nbuilding...\n", "bash", (0, 2)).activity is Activity.UNKNOWN
    assert read("user@box:~$ \n", "zsh", (3, 0)).activity is Activity.UNKNOWN  # cursor inside the prompt


# --- the safety property --------------------------------------------------------------------------

TYPED = st.text(st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp")), min_size=1, max_size=40).filter(
    lambda s: s.strip() != "")


@given(TYPED)
def test_anything_typed_into_the_composer_is_never_ready(typed: str) -> None:
    """Whatever a person typed (not blank) keeps the pane from being ready, with or without cursor."""
    text = claude_screen([typed])
    row = composer_row(text)
    for cursor in (None, (2, row), (2 + len(typed), row)):
        reading = read(text, "claude", cursor)
        if reading.ready_for_message:
            # only an exact known hint, cursor at its start, may read as empty
            assert cursor != (2 + len(typed), row)
            assert any(p.fullmatch(typed.strip()) for p in CLAUDE_RULES.placeholders)


@given(st.lists(st.sampled_from(["✶ Caramelizing… (3s)", "esc to interrupt", "retrying in 2s · attempt 2/10",
                                 "Reconnecting... 1/3 (0s • esc to interrupt)"]), min_size=1, max_size=3))
def test_a_busy_marker_near_the_composer_is_never_ready(markers: list[str]) -> None:
    """A busy line above the composer or in its footer keeps it from being ready."""
    for i, marker in enumerate(markers):
        text = claude_screen([""], status=marker if i % 2 == 0 else "",
                             footer="  " + marker if i % 2 else "  ⏵⏵ auto mode on (shift+tab to cycle)")
        assert not read(text).ready_for_message


def test_a_blank_last_row_is_a_row_in_capture_panes_form_with_or_without_history() -> None:
    """``capture-pane -p`` ends every row with a newline, so a blank last row is a row (the tmux
    adapter once dropped the last newline: OpenCode's screens, whose last row is blank, were read one
    row off, the idle composer as unknown; after a restart the pane also holds history)."""
    folder = Path(__file__).resolve().parents[1] / "fixtures" / "screens" / "opencode" / "1.18.33"
    text = (folder / "01_idle_empty_80.txt").read_text()
    assert text.endswith("\n\n") and len(text.split("\n")) == 25  # 24 rows, the last blank
    cursor = tuple(json.loads((folder / "01_idle_empty_80.json").read_text())["cursor"])
    history = "".join(f"old line {i}\n" for i in range(5))
    for capture in (text, history + text):
        reading = read_screen(capture, "opencode", cursor, height=24)  # type: ignore[arg-type]
        assert (reading.activity, reading.composer) == (Activity.IDLE, Composer.EMPTY)


def fixture(name: str) -> str:
    return (Path(__file__).parent.parent / "fixtures" / "screens" / name).read_text(encoding="utf-8")


def test_fixture_dialogs_give_their_subject_and_highlighted_option() -> None:
    """The real permission dialogs: the subject is the command as shown, the highlight where the selector is."""
    claude = read(fixture("claude/2.1.332/15_dialog_permission_80.txt")).question
    assert claude is not None and claude.prompt == "Do you want to proceed?"
    assert "ls /tmp" in claude.subject and "Bash command" in claude.subject
    assert claude.options == ("No", "Yes") and claude.selected == 0  # this capture highlights No
    codex = read(fixture("codex/0.171.0/14_dialog_permission_80.txt"), "codex").question
    assert codex is not None and codex.prompt == "Would you like to run the following command?"
    assert codex.subject == ("Environment: local", "Reason: Create a file in the project?", "$ touch created.txt")
    assert codex.selected == 0


def test_only_the_subject_or_only_the_highlight_changing_changes_the_question_fingerprint() -> None:
    """Issue 21 item 2: the same question about another command, or with the highlight moved, is a
    different question for the guard."""
    def dialog(command: str, highlight: int) -> str:
        opts = [" 1. Yes", " 2. No"]
        rows = [(" ❯" if i == highlight else "  ") + o for i, o in enumerate(opts)]
        return "\n".join([RULE, " Bash command", "", f"   {command}", "", " Do you want to proceed?", *rows, "",
                          " Esc to cancel · Tab to amend"]) + "\n"
    def fp(text: str) -> str:
        q = read(text).question
        assert q is not None
        return question_fingerprint(q.prompt, q.options, q.subject, q.selected)
    base = fp(dialog("echo harmless", 0))
    assert fp(dialog("echo harmless", 0)) == base
    assert fp(dialog("rm -rf ~/important-project", 0)) != base
    assert fp(dialog("echo harmless", 1)) != base


def test_ready_for_command_needs_the_shell_in_the_foreground_at_an_empty_prompt() -> None:
    """Issue 21 item 4: only a shell (tmux's foreground command) at its prompt with nothing typed is
    ready for shell_text; a draft, another program, or a program printing a prompt imitation is not."""
    assert read_screen("user@host:~$ \n", "bash").ready_for_command
    assert not read_screen("user@host:~$ echo DRAFT-PREFIX-\n", "bash").ready_for_command
    assert not read_screen("user@host:~$ python3\n>>> \n", "python3").ready_for_command
    assert not read_screen("user@host:~$ cat prompt.txt\n$ \n", "cat").ready_for_command
    assert not read_screen("user@host:~$ ls\nfile.txt\n", "bash").ready_for_command


def test_a_reading_is_news_when_first_when_its_fingerprint_or_readiness_changed_or_when_retold() -> None:
    """Claim: the core hears the first reading, one whose fingerprint or readiness differs from the
    reading last told, and any reading while ``retell`` is set; an unchanged reading is not news
    (issue 24: was an `if` in connectd/tmux/watcher.py)."""
    from dataclasses import replace

    from connectcore.screen import is_news

    idle = read(codex_screen(""), "codex")
    assert idle.ready_for_message
    drafted = read(codex_screen("half a thought"), "codex")
    assert not drafted.ready_for_message
    assert is_news(None, idle)
    assert not is_news(idle, idle)
    assert is_news(idle, idle, retell=True)
    assert is_news(idle, replace(idle, fingerprint=idle.fingerprint + "x"))
    assert is_news(idle, replace(idle, composer=Composer.DRAFT))  # readiness alone
    assert is_news(idle, drafted)
    assert not is_news(idle, replace(idle, answered=True))  # nothing the core reads changed
