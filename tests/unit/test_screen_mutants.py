"""The screen reader: rules the fourth mutation run (stop 34) found unpinned. Each test names the
mutants of connectcore.screen it kills (docs/survivors/screen.md has the verdicts of the others).

The reader's one-sided rule is "anything it is not sure of is NOT idle-and-empty"; several of these
tests pin a case where a mutant read a pane as ready (idle, empty composer) that is not."""

from __future__ import annotations

import hashlib

from connectcore.screen import (
    Activity,
    Composer,
    Draft,
    Harness,
    Question,
    composer_draft,
    harness_from_command,
    read_screen,
)
from tests.unit.test_screen import RULE, claude_screen, codex_screen, composer_row, read

CLAUDE_FOOT = "  ⏵⏵ auto mode on (shift+tab to cycle)"
CODEX_STATUS = "  GPT-5.5 default · ~/proj"
CODEX_HINT = "  Press enter to confirm or esc to cancel"


def lines_of(text: str) -> list[str]:
    return text.split("\n")[:-1] if text.endswith("\n") else text.split("\n")


# --------------------------------------------------------------------------------------------------
# composer_draft
# --------------------------------------------------------------------------------------------------


def test_a_screen_read_as_a_dialog_has_no_composer_draft_even_with_a_composer_frame_on_it() -> None:
    """Dialog key hints in the last lines make the screen a dialog for the paste check too (an early
    Enter into a dialog would answer it), whether or not a dialog body shows. Kills composer_draft 9
    (``or`` -> ``and`` between hints and body)."""
    text = claude_screen(["[connect] message m1"], footer="  Enter to confirm · Esc to cancel")
    assert read(text).activity is Activity.DIALOG
    assert composer_draft(text, "claude") is None
    assert composer_draft(claude_screen(["[connect] message m1"]), "claude") == Draft(("[connect] message m1",), False)


def test_a_draft_s_continuation_rows_lose_their_indentation_and_only_it() -> None:
    """The composer's rows after the first lose the ``prompt_width`` columns of indentation, a row
    not indented keeps every character. Kills _strip_prompt 11, 15 (indentation kept) and 12 (two
    characters cut from every row)."""
    codex = codex_screen("first line").replace("› first line\n", "› first line\n  second line\n")
    assert composer_draft(codex, "codex") == Draft(("first line", "second line"), False)
    claude = "\n".join([RULE, "❯ first", "second", RULE, CLAUDE_FOOT]) + "\n"
    assert composer_draft(claude, "claude") == Draft(("first", "second"), False)


# --------------------------------------------------------------------------------------------------
# The cursor
# --------------------------------------------------------------------------------------------------


def test_a_cursor_above_the_visible_screen_or_left_of_it_is_in_no_composer() -> None:
    """A cursor row above the visible screen (tmux never reports one; a negative row is not trusted)
    or a negative column is outside the text, even when the row it would name holds the composer.
    Kills _cursor_in_text 10, 11 (the ``or``s of the range check made ``and``)."""
    text = claude_screen([""])
    row = composer_row(text)
    height = len(lines_of(text)) - row - 1  # the visible screen: the rule below the composer, the footer
    assert read_screen(text, "claude", (2, 0), height=height + 1).ready_for_message  # on screen, row 0: ready
    above = read_screen(text, "claude", (2, -1), height=height)
    assert above.activity is Activity.UNKNOWN and not above.ready_for_message
    left = read(text, cursor=(-1, row))
    assert (left.activity, left.composer) == (Activity.UNKNOWN, Composer.EMPTY)


def test_the_cursor_s_row_decides_whether_it_is_in_the_composer_its_column_whether_at_the_start() -> None:
    """Column 0 of the composer's row is in the composer but not at its text's start: an idle draft,
    not unknown. Kills _cursor_in_text 12, 13 (``x < 0`` -> ``x <= 0``, ``x < 1``)."""
    text = claude_screen([""])
    reading = read(text, cursor=(0, composer_row(text)))
    assert (reading.activity, reading.composer) == (Activity.IDLE, Composer.DRAFT)


def test_a_shell_prompt_on_the_screen_s_first_row_is_ready_for_a_command() -> None:
    """After ``clear`` the prompt is on row 0 and the cursor there. Kills _cursor_in_text 14, 15
    (``y < 0`` -> ``y <= 0``, ``y < 1``), 17, 18 (``0 <= row`` -> ``1 <= row``, ``0 < row``)."""
    reading = read_screen("user@box:~$ \n", "bash", (12, 0))
    assert (reading.activity, reading.composer) == (Activity.IDLE, Composer.EMPTY)
    assert reading.ready_for_command


def test_a_composer_frame_at_the_capture_s_top_is_read_and_an_out_of_range_cursor_is_in_no_row_of_it() -> None:
    """A frame whose top rule is the first row is a frame (kills _ruled_composer 11: the rules looked
    for from row 1); a cursor outside the text is in no composer, not even one on row 1 (kills
    _cursor_in_text 22: the outside cursor made (-1, +1))."""
    text = "\n".join([RULE, "❯ ", RULE, CLAUDE_FOOT]) + "\n"
    assert read(text).ready_for_message
    assert read(text, cursor=(2, 1)).ready_for_message
    outside = read(text, cursor=(2, 500))
    assert (outside.activity, outside.composer) == (Activity.UNKNOWN, Composer.EMPTY)


def test_an_empty_composer_with_the_focus_elsewhere_is_unknown_and_still_empty() -> None:
    """The cursor outside the composer makes the activity unknown; the composer is still read from
    its frame (empty here, a draft when it holds text). Kills _read_agent 74 (always a draft)."""
    text = claude_screen([""])
    reading = read(text, cursor=(0, 0))
    assert (reading.activity, reading.composer) == (Activity.UNKNOWN, Composer.EMPTY)


# --------------------------------------------------------------------------------------------------
# The harness
# --------------------------------------------------------------------------------------------------


def test_identity_markers_anchored_at_a_line_s_start_or_end_are_found_on_any_line() -> None:
    """For an ambiguous command, a marker anchored at a line's start (Codex's "• Working") or end
    (OpenCode's "ctrl+p commands") or spanning two lines (Claude's rule over '❯') counts on any line
    of the screen. Kills _harness_from_screen 3 (lines joined with "XX\\nXX") and, active at import,
    screen_harnesses _rx_text 5 (the patterns compiled without re.M)."""
    assert harness_from_command("node", ["some output", "• Working (3s • esc to interrupt)"]) is Harness.CODEX
    assert harness_from_command("node", ["some output", "               ctrl+p commands", ""]) is Harness.OPENCODE
    assert harness_from_command("node", ["some output", RULE, "❯ "]) is Harness.CLAUDE


# --------------------------------------------------------------------------------------------------
# Fingerprint
# --------------------------------------------------------------------------------------------------


def test_the_fingerprint_is_the_sha256_of_the_normalised_rows_joined_by_newlines_for_a_dialog_too() -> None:
    """Kills _read_agent 14 (a dialog's fingerprint None) and _fingerprint 26 (rows joined by "XX\\nXX")."""
    rows = [RULE, " Pick a color", " ❯ Red", "   Blue", "", " Esc to cancel"]
    reading = read("\n".join(rows) + "\n")
    assert reading.activity is Activity.DIALOG
    assert reading.fingerprint == hashlib.sha256("\n".join(rows).encode()).hexdigest()
    assert read_screen("hello\nworld\n", "vim").fingerprint == hashlib.sha256(b"hello\nworld").hexdigest()


def test_volatile_parts_are_normalised_on_the_first_row_of_a_screen_without_a_composer() -> None:
    """Kills _fingerprint 12 (row 0 kept verbatim when there is no frame)."""
    first = read_screen("build started 10:01\nuser@box:~$ \n", "bash")
    later = read_screen("build started 10:02\nuser@box:~$ \n", "bash")
    assert first.fingerprint == later.fingerprint
    assert read_screen("build started 10:01\nuser@box:~$ x\n", "bash").fingerprint != first.fingerprint


# --------------------------------------------------------------------------------------------------
# OpenCode's box
# --------------------------------------------------------------------------------------------------

BAR = "   ┃"
STATUS = BAR + "  Build · Claude Sonnet 4.5 (latest) Anthropic"
BOTTOM = "   ╹" + "▀" * 60
OC_FOOT = "                                   tab agents  ctrl+p commands"


def box(rows: list[str], *, above: tuple[str, ...] = ("  earlier output", ""), footer: tuple[str, ...] = (OC_FOOT,),
        inner: tuple[str, ...] | None = None) -> str:
    """An OpenCode screen: a padding row, the composer's rows, a padding row, the status row, the bottom line."""
    box_rows = inner if inner is not None else (BAR, *(f"{BAR}  {r}" if r else BAR for r in rows), BAR, STATUS)
    return "\n".join([*above, *box_rows, BOTTOM, *footer]) + "\n"


def box_row(text: str) -> int:
    """The composer's first row: the one under the box's top padding row."""
    return next(i for i, line in enumerate(lines_of(text)) if line.startswith(BAR)) + 1


def test_an_opencode_box_with_nothing_below_its_bottom_line_is_read() -> None:
    """The bottom line may be the last row. Kills _box_composer 8 (the search starts a row above the
    bottom) and 32 (the walk up checks the row below its top: past the text's end)."""
    text = box([""], footer=())
    assert lines_of(text)[-1] == BOTTOM
    reading = read_screen(text, "opencode", (6, box_row(text)))
    assert (reading.activity, reading.composer) == (Activity.IDLE, Composer.EMPTY)


def test_an_opencode_box_at_the_capture_s_top_is_read() -> None:
    """A short pane: the box's top padding row is row 0. Kills _box_composer 26 (``top > 0`` -> ``top > 1``)."""
    text = box(["fix it"], above=())
    assert lines_of(text)[0] == BAR
    reading = read_screen(text, "opencode")
    assert (reading.activity, reading.composer) == (Activity.IDLE, Composer.DRAFT)
    assert composer_draft(text, "opencode") == Draft(("fix it",), False)


def test_an_opencode_draft_of_two_rows_is_a_draft() -> None:
    """Kills _box_composer 40 (the walk up two rows a step: past the box, onto a row without the bar)."""
    text = box(["first line", "second line"])
    assert composer_draft(text, "opencode") == Draft(("first line", "second line"), False)
    assert read_screen(text, "opencode").composer is Composer.DRAFT


def test_an_opencode_draft_holding_the_bar_glyph_is_a_draft_never_empty() -> None:
    """A person may type '┃': the row's text starts after the first bar. Kills _box_composer 51 (after
    the last bar: "see ┃" read as an EMPTY composer, a ready pane over a draft) and 35 (the walk up
    stops at a row with two bars: no frame)."""
    text = box(["see ┃"])
    reading = read_screen(text, "opencode")
    assert (reading.activity, reading.composer) == (Activity.IDLE, Composer.DRAFT)
    assert not reading.ready_for_message
    assert composer_draft(text, "opencode") == Draft(("see ┃",), False)


def test_an_opencode_box_whose_top_or_bottom_padding_row_holds_text_is_not_a_composer() -> None:
    """The rows around the composer are blank padding; a bar row with text right above the box, or
    text between the composer and the status row, means the box is not read as a composer (unknown,
    never ready). Kills _box_composer 71, 72 (``or`` -> ``and`` in the padding check) and 74 (the
    row checked is above the composer's last row: an empty first row above a text row read as EMPTY,
    a ready pane over text)."""
    joined = box([""], above=("  earlier output", f"{BAR}  a message row drawn behind a bar"))
    reading = read_screen(joined, "opencode")
    assert (reading.activity, reading.composer) == (Activity.UNKNOWN, Composer.ABSENT)
    unpadded = box([], inner=(BAR, BAR, f"{BAR}  text above the status row", STATUS))
    reading = read_screen(unpadded, "opencode")
    assert (reading.activity, reading.composer) == (Activity.UNKNOWN, Composer.ABSENT) and not reading.ready_for_message


def test_an_opencode_box_without_a_composer_row_is_not_a_composer() -> None:
    """A padding row right above the status row, nothing else: no composer. Kills _box_composer 72
    (``last < first`` no longer refuses alone)."""
    reading = read_screen(box([], inner=(BAR, STATUS)), "opencode")
    assert (reading.activity, reading.composer) == (Activity.UNKNOWN, Composer.ABSENT)


def test_an_opencode_box_cut_off_above_its_status_row_is_no_composer() -> None:
    """A very short pane shows only the box's status row and bottom line: no composer, read without
    failing. Kills _box_composer 46 (the bar's column taken from the row above the status row: here
    the last row, which holds no bar)."""
    text = "\n".join([STATUS, BOTTOM, OC_FOOT]) + "\n"
    reading = read_screen(text, "opencode")
    assert (reading.harness, reading.activity, reading.composer) == (Harness.OPENCODE, Activity.UNKNOWN, Composer.ABSENT)
    assert composer_draft(text, "opencode") is None


# --------------------------------------------------------------------------------------------------
# Claude Code's ruled frame
# --------------------------------------------------------------------------------------------------


def test_a_rule_in_the_history_above_the_frame_does_not_hide_the_composer() -> None:
    """The frame is the last two rules. Kills _ruled_composer 20 (``rule_rows[-1]`` -> ``[+1]``)."""
    text = claude_screen([""], body=("● Hi.", RULE, "● More.", "", "✻ Cooked for 3s · done 6:27 PM"))
    assert read(text).ready_for_message


def test_the_frame_s_rules_are_looked_for_in_the_last_60_rows() -> None:
    """A rule 61 rows above the bottom is not the frame's top: one rule in the last 60 rows frames
    nothing. Kills _ruled_composer 5 (the whole text searched) and 13 (61 rows searched)."""
    rows = [RULE, "❯ an old prompt", *(f"  output {i}" for i in range(57)), RULE, CLAUDE_FOOT]
    assert len(rows) == 61
    reading = read("\n".join(rows) + "\n")
    assert (reading.activity, reading.composer) == (Activity.UNKNOWN, Composer.ABSENT)
    framed = [RULE, "❯ ", *(f"  {i}" for i in range(56)), RULE, CLAUDE_FOOT]  # the top rule 60 rows up
    assert read("\n".join(framed) + "\n").composer is Composer.DRAFT


# --------------------------------------------------------------------------------------------------
# Codex's gap frame
# --------------------------------------------------------------------------------------------------


def test_codex_footer_of_four_lines_is_a_frame_but_five_is_not() -> None:
    """Kills _gap_composer 17, 18 (one more blank row searched: a five-line footer)."""
    four = codex_screen("", footer=(CODEX_STATUS, "  a", "  b", "  c"))
    five = codex_screen("", footer=(CODEX_STATUS, "  a", "  b", "  c", "  d"))
    assert read(four, "codex").ready_for_message
    reading = read(five, "codex")
    assert (reading.activity, reading.composer) == (Activity.UNKNOWN, Composer.ABSENT)


def test_a_prompt_line_above_a_blank_and_a_line_that_is_not_codex_s_status_is_no_composer() -> None:
    """Only a known first footer line under the gap makes a frame. Kills _gap_composer 25 (the footer
    check's ``or`` made ``and``: any line under a blank taken for the footer, and an empty '›' line
    above it read ready)."""
    text = codex_screen("", footer=("  random output of a program",))
    reading = read(text, "codex")
    assert (reading.activity, reading.composer) == (Activity.UNKNOWN, Composer.ABSENT)
    assert not reading.ready_for_message


def test_the_footer_may_hold_a_blank_row_below_its_status_line() -> None:
    """The blank rows are tried from the bottom up until one has the status line under it. Kills
    _gap_composer 32 (``continue`` -> ``break`` after the first blank whose next line is not a
    status line)."""
    text = codex_screen("", footer=(CODEX_STATUS, "", "  1 background terminal running"))
    assert read(text, "codex").ready_for_message


def test_codex_gap_of_two_blank_rows_is_a_frame_but_three_is_not() -> None:
    """Codex 0.166.0 leaves two blank rows between the composer and its footer (``gap_lines``).
    Kills _gap_composer 39, 40, 43, 45, 46, 47 (two rows no longer read, or read as the wrong rows)
    and 38, 41 (three rows read)."""
    two = codex_screen("", footer=("", CODEX_STATUS))
    three = codex_screen("", footer=("", "", CODEX_STATUS))
    reading = read(two, "codex", (2, composer_row(two)))
    assert (reading.activity, reading.composer) == (Activity.IDLE, Composer.EMPTY)
    reading = read(three, "codex")
    assert (reading.activity, reading.composer) == (Activity.UNKNOWN, Composer.ABSENT)


def test_a_codex_composer_on_the_capture_s_first_row_is_read() -> None:
    """Kills _gap_composer 62, 63 (``first < 0`` -> ``<= 0``, ``< 1``)."""
    reading = read("› hello\n\n" + CODEX_STATUS + "\n", "codex")
    assert reading.composer is Composer.DRAFT
    assert composer_draft("› hello\n\n" + CODEX_STATUS + "\n", "codex") == Draft(("hello",), False)


def test_indented_rows_up_to_the_top_with_no_prompt_line_are_no_composer() -> None:
    """Kills _gap_composer 61 (``first < 0 or`` -> ``and``: the reader fails on such a screen)."""
    reading = read("  indented output\n  more of it\n\n" + CODEX_STATUS + "\n", "codex")
    assert (reading.activity, reading.composer) == (Activity.UNKNOWN, Composer.ABSENT)


def test_a_cursor_on_the_gap_below_a_codex_composer_is_outside_it() -> None:
    """Kills _gap_composer 79 (the frame's last row one too low: the gap taken for the composer)."""
    text = codex_screen("")
    reading = read(text, "codex", (2, composer_row(text) + 1))
    assert reading.activity is Activity.UNKNOWN and not reading.ready_for_message


# --------------------------------------------------------------------------------------------------
# Activity
# --------------------------------------------------------------------------------------------------


def test_a_spinner_on_the_capture_s_first_row_above_the_frame_is_busy() -> None:
    """A short pane: the spinner line is row 0. Kills _activity 6 (the status region from row 1:
    a busy pane read ready)."""
    reading = read("\n".join(["✶ Caramelizing… (3s)", RULE, "❯ ", RULE, CLAUDE_FOOT]) + "\n")
    assert reading.activity is Activity.BUSY and not reading.ready_for_message


def test_the_status_region_is_the_five_rows_above_the_frame_s_top_rule() -> None:
    """Claude's ``status_lines`` = 5: a spinner 5 rows above the top rule is busy, 6 rows above is
    history. Kills _activity 8 (3 rows) and 9 (6 rows)."""
    def above(blanks: int) -> str:  # ``blanks`` blank rows between the spinner and the top rule
        return claude_screen([""], body=("● Hi.", "", "✶ Caramelizing… (3s)", *([""] * (blanks - 1))))
    text = above(4)
    assert lines_of(text)[composer_row(text) - 6].startswith("✶")
    assert read(text).activity is Activity.BUSY
    assert read(above(5)).activity is Activity.IDLE


def test_a_submitted_prompt_quoting_codex_s_banner_counts_as_a_prompt_after_it() -> None:
    """The banner and a prompt on one row: the prompt is not before the banner, so the turn it
    started must end on screen before the pane is idle. Kills _turn_state 26 (``<`` -> ``<=``: idle,
    ready while the turn runs)."""
    text = codex_screen("", body=("› what does >_ OpenAI Codex (v0.171.0) mean?", "", "• It is the banner"))
    reading = read(text, "codex")
    assert reading.activity is Activity.BUSY and not reading.ready_for_message


# --------------------------------------------------------------------------------------------------
# Dialogs
# --------------------------------------------------------------------------------------------------


def test_a_dialog_title_right_above_its_options_is_its_question() -> None:
    """The block fallback reads a block that runs up to the options. Kills _blocks 6 (the last block,
    one not closed by a blank row, lost)."""
    text = "\n".join([RULE, " Pick a color", " ❯ Red", "   Blue", "", " Enter to confirm · Esc to cancel"]) + "\n"
    assert read(text).question == Question("Pick a color", ("Red", "Blue"), ("Pick a color",), 0)


def test_a_codex_dialog_whose_question_is_on_the_first_row_is_read() -> None:
    """Kills _question 8 (the dialog read from row 1)."""
    text = "\n".join(["  Would you like to run the following command?", "", "› 1. Yes", "  2. No", "",
                      CODEX_HINT]) + "\n"
    assert read(text, "codex").question == Question("Would you like to run the following command?", ("Yes", "No"), (), 0)


def test_a_codex_dialog_whose_selected_option_is_on_the_first_row_is_read() -> None:
    """Kills _question 45 (the walk up for sibling options passes row 0, onto the last row)."""
    text = "\n".join(["› 1. Yes", "  2. No", "", CODEX_HINT]) + "\n"
    assert read(text, "codex").question == Question("", ("Yes", "No"), (), 0)


def test_a_dialog_whose_options_reach_the_last_row_is_read() -> None:
    """A dialog taller than the pane: its key hints pushed off, its options on the last rows. Kills
    _question 32 (the last row not searched for the selected option), 59, 61 (the walk down past the
    text's end) and 60 (the last row not taken as an option)."""
    body = " We're changing auto mode to no longer charge for usage"
    last = "\n".join([RULE, body, "", "   1. Tell me more", " ❯ 2. Got it"]) + "\n"
    reading = read(last)
    assert reading.activity is Activity.DIALOG
    assert reading.question is not None
    assert (reading.question.options, reading.question.selected) == (("Tell me more", "Got it"), 1)
    before = "\n".join([RULE, body, "", " ❯ 1. Got it", "   2. Tell me more"]) + "\n"
    question = read(before).question
    assert question is not None and (question.options, question.selected) == (("Got it", "Tell me more"), 0)


def test_the_question_is_the_nearest_line_with_a_question_mark_cut_at_its_first_one() -> None:
    """Kills _question 131 (the row right above the options skipped) and 149 (cut at the last '?')."""
    text = "\n".join([RULE, " Title", " Which one? Or the other? Think.", " ❯ A", "   B", "", " Esc to cancel"]) + "\n"
    question = read(text).question
    assert question is not None and question.prompt == "Which one?"


def test_a_dialog_with_nothing_below_its_last_rule_has_no_question() -> None:
    """Key hints above the last rule and nothing under it: a dialog, no question to show. Kills
    _question 182 (an empty Question instead of None)."""
    reading = read("\n".join(["● Working on it", " Esc to cancel", RULE]) + "\n")
    assert (reading.activity, reading.question) == (Activity.DIALOG, None)


def test_a_dialog_is_read_from_its_last_40_rows() -> None:
    """A known question or a selected option 41 rows above the bottom is not the dialog's. Kills
    _question 10 (41 rows read) and 34 (the row above them searched for the selected option)."""
    tall = ["  Would you like to run the following command?", *(["filler"] * 5), "› 1. Yes", "  2. No",
            *(["filler"] * 31), "", CODEX_HINT]
    assert len(tall) == 41
    question = read("\n".join(tall) + "\n", "codex").question
    assert question is not None and question.prompt == "filler" and question.options == ("Yes", "No")
    selected = ["› 1. Old option", *(["filler"] * 38), "", CODEX_HINT]
    assert len(selected) == 41
    question = read("\n".join(selected) + "\n", "codex").question
    assert question is not None and (question.options, question.selected) == ((), None)


def test_the_question_is_looked_for_in_the_30_rows_above_the_options() -> None:
    """Kills _question 89 (31 rows)."""
    def dialog(rows: int) -> str:
        return "\n".join(["  Would you like to run the following command?", *(f"      $ step {i}" for i in range(rows)),
                          "› 1. Yes", "  2. No", "", CODEX_HINT]) + "\n"
    near = read(dialog(29), "codex").question
    assert near is not None and near.prompt == "Would you like to run the following command?"
    far = read(dialog(30), "codex").question
    assert far is not None and far.prompt == "$ step 0"


def test_a_codex_dialog_s_subject_is_every_row_between_the_question_and_the_options() -> None:
    """Without a known prompt or a '?', the first row is the question and the subject is the window
    (kills _subject 8: the fallback's no-question case fails); the row right under a known prompt is
    part of the subject (kills _subject 10)."""
    title = "\n".join(["  Choose a model", "", "› 1. gpt-5.5", "  2. gpt-5.4", "", CODEX_HINT]) + "\n"
    assert read(title, "codex").question == Question("Choose a model", ("gpt-5.5", "gpt-5.4"), ("Choose a model",), 0)
    command = "\n".join(["  Would you like to run the following command?", "  $ touch x", "", "› 1. Yes", "  2. No", "",
                         CODEX_HINT]) + "\n"
    question = read(command, "codex").question
    assert question is not None and question.subject == ("$ touch x",)


# --------------------------------------------------------------------------------------------------
# Shells
# --------------------------------------------------------------------------------------------------


def test_a_shell_prompt_without_a_space_is_ready_with_the_cursor_right_after_it() -> None:
    """Kills _read_shell 24 (the cursor right after the prompt's last character taken as inside it)."""
    reading = read_screen("user@box:~$\n", "bash", (11, 0))
    assert reading.ready_for_command
    assert not read_screen("user@box:~$\n", "bash", (10, 0)).ready_for_command


# --------------------------------------------------------------------------------------------------
# Blank screens, the text's last row, dialogs known by their text (survivors that appeared at 19:15)
# --------------------------------------------------------------------------------------------------


def test_a_blank_pane_is_read_as_unknown_by_every_harness() -> None:
    """A cleared pane: nothing to read, no failure. Kills _bottom 3 (``end > 0`` -> ``>= 0``: the
    search for the last non-blank row runs past the first row)."""
    for command in ("claude", "codex", "opencode", "bash", "vim"):
        for text in ("", "\n", "\n\n\n"):
            reading = read_screen(text, command)
            assert (reading.activity, reading.composer) == (Activity.UNKNOWN, Composer.ABSENT), (command, text)


def test_a_last_row_of_blanks_without_a_final_newline_is_a_row() -> None:
    """The cursor's row counts from the text's last row, blank or not: only the newline ending the
    text ends no row. Kills _lines 11 (a last row of blanks dropped too: the cursor one row off)."""
    rows = [RULE, "❯ ", RULE, CLAUDE_FOOT, "   "]
    reading = read_screen("\n".join(rows), "claude", (2, 1), height=len(rows))
    assert reading.ready_for_message


BODY = " We're changing auto mode to no longer charge for usage"


def test_a_known_dialog_text_counts_from_the_capture_s_first_row() -> None:
    """A dialog taller than the pane, its rule and key hints off screen, its text on row 0. Kills
    _has_dialog_body 10 (the text looked for from row 1)."""
    reading = read("\n".join([BODY, "", " ❯ 1. Got it", "   2. Tell me more"]) + "\n")
    assert reading.activity is Activity.DIALOG


def test_a_known_dialog_text_counts_in_the_last_40_rows_only() -> None:
    """Kills _has_dialog_body 12 (41 rows)."""
    near = read("\n".join([BODY, *(["filler"] * 39)]) + "\n")
    far = read("\n".join([BODY, *(["filler"] * 40)]) + "\n")
    assert (near.activity, far.activity) == (Activity.DIALOG, Activity.UNKNOWN)


def test_a_known_dialog_text_above_the_last_rule_is_history_not_a_dialog() -> None:
    """Only the text below the last rule is the dialog's. Kills _has_dialog_body 13 (``is not None``
    -> ``is None``), 14 (the rule's limit dropped), 16 (the limit a row above the rule) and 21 (the
    rules looked for above the window only)."""
    reading = read("\n".join([BODY, RULE, " something else", " ❯ 1. A"]) + "\n")
    assert reading.activity is Activity.UNKNOWN


def test_dialog_key_hints_count_only_in_the_last_three_non_blank_rows() -> None:
    """Kills _has_dialog_hints 4 (``[-3:]`` -> ``[+3:]``: hints anywhere below the third row)."""
    body = ("● a", "", "● b", "", "● c", "", "● The dialog said: Esc to cancel", "", "● Done.", "",
            "✻ Cooked for 3s · done 6:27 PM")
    reading = read(claude_screen([""], body=body))
    assert reading.activity is Activity.IDLE and reading.ready_for_message
