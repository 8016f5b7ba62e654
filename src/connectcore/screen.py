"""The screen reader: who is in a pane and whether it waits for input, from its text alone.

Pure and deterministic (no model, no I/O): the daemon passes the captured pane text (visible screen,
optionally with scrollback above it), the pane's foreground command and the cursor, and gets a
:class:`Reading`. The delivery machine types a message only on ``reading.ready_for_message``:
an agent harness, idle, with an empty composer. Typing into a running turn steers it, typing into a
menu answers it, typing into a draft submits someone's half-written prompt, so the rule is one-sided:

    anything the reader is not sure of is NOT idle-and-empty.

How it decides (details in docs/screen-reader.md):

1. Harness: the foreground command first (``claude``, ``codex``, shells ...); for commands that may
   run any agent (``node``, a bare version number) the screen's identity markers decide; any other
   program is ``unknown``.
2. Agents: find the composer frame at the bottom (Claude Code: a ``❯`` line between two rules;
   Codex: a ``›`` line, a blank line, its status line). No frame: a dialog if its key hints are in
   the last lines (the question and options are extracted), else unknown.
3. Composer: empty when it holds nothing or exactly a known placeholder hint with the cursor at its
   start; anything else (text, more lines, a pasted-content placeholder) is a draft. A cursor
   outside the composer means something else has focus: unknown.
4. Activity: busy when a busy marker shows near the composer; for Codex, which hides its busy line
   while text streams, idle also needs the end of the last turn (or the session banner) on screen.
5. Fingerprint: sha256 of the text with volatile parts (spinner lines, clocks, timers, token counts)
   normalised and the cursor left out, so "is this still the screen I saw?" survives a ticking timer
   but not a changed composer.
6. Answered (only when asked, after connect typed a message: ``typed_marker``, the start of its
   provenance line): the pane is ready, the marker's last showing is above the composer, and below it
   a line of the harness's ``answer`` patterns: the agent took the message and answered it, so its
   turn started and (by 4) ended. A screen where the message was submitted but the turn has not yet
   started shows no answer below it. No marker, no such line, or a harness without ``answer``
   patterns: not answered.

Harness-specific knowledge is data, in :mod:`connectcore.screen_harnesses`.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from enum import StrEnum

from connectcore.screen_harnesses import (
    AMBIGUOUS_COMMANDS,
    GENERIC_VOLATILE,
    RULES,
    SHELL_COMMANDS,
    SHELL_PROMPT_END,
    VERSION_COMMAND,
    Frame,
    Harness,
    ScreenRules,
)

__all__ = [
    "Activity",
    "Composer",
    "Draft",
    "Harness",
    "Question",
    "Reading",
    "composer_draft",
    "harness_from_command",
    "read_screen",
]

AGENT_HARNESSES = frozenset({Harness.CLAUDE, Harness.CODEX, Harness.OPENCODE})


class Activity(StrEnum):
    IDLE = "idle"  # waiting for input
    BUSY = "busy"  # a turn is running (streaming, tools, retries, compaction)
    DIALOG = "dialog"  # a menu, permission or question prompt waits for an answer
    UNKNOWN = "unknown"


class Composer(StrEnum):
    EMPTY = "empty"
    DRAFT = "draft"  # any text the user typed, one line or many, pasted-content placeholders too
    ABSENT = "absent"  # no composer on screen (dialog, full-screen program, unknown)


@dataclass(frozen=True)
class Question:
    """A dialog's question and its options, as shown (``options`` may be empty); ``subject`` what it
    asks about (the command, file or tool and its arguments, as the dialog shows them, bounded) and
    ``selected`` the highlighted option's index (None: no highlight read)."""

    prompt: str
    options: tuple[str, ...]
    subject: tuple[str, ...] = ()
    selected: int | None = None


@dataclass(frozen=True)
class Reading:
    harness: Harness
    activity: Activity
    composer: Composer
    question: Question | None
    fingerprint: str
    answered: bool = False  # ready, and the agent's answer shows below ``typed_marker`` (rule 6)

    @property
    def ready_for_message(self) -> bool:
        """An agent harness, idle, with an empty composer: the one state a message may be typed in."""
        return (
            self.harness in AGENT_HARNESSES
            and self.activity is Activity.IDLE
            and self.composer is Composer.EMPTY
        )

    @property
    def ready_for_command(self) -> bool:
        """The pane's foreground process is the shell (the harness comes from tmux's
        ``pane_current_command``: the name of the tty's foreground process group's leader, so a
        ``python3`` or ``cat`` started in the shell is not the shell) and it waits at its prompt with an
        empty command line (no draft after the prompt): the one state a shell_text act may type in."""
        return self.harness is Harness.SHELL and self.activity is Activity.IDLE and self.composer is Composer.EMPTY


@dataclass(frozen=True)
class Draft:
    """What an agent's composer holds, for telling whether a paste has been drawn there."""

    lines: tuple[str, ...]  # the composer's rows, without prompt glyph and indentation
    folded: bool  # one of them is the harness's placeholder for a long paste ("[Pasted text #1 ...]")


# --------------------------------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------------------------------


def read_screen(
    text: str,
    foreground_command: str,
    cursor: tuple[int, int] | None = None,
    *,
    height: int | None = None,
    typed_marker: str | None = None,
) -> Reading:
    """Read one pane.

    ``text``: ``capture-pane -p`` output, plain (no ``-e``), optionally with scrollback above the
    visible screen. ``cursor``: ``(#{cursor_x}, #{cursor_y})`` as tmux reports them, the row counted
    from the top of the visible screen, which is the last ``height`` lines of ``text``; ``height``
    defaults to the whole text (no scrollback). With scrollback, pass ``height=#{pane_height}``.
    ``typed_marker``: the marker of a message just typed into the pane; the reading then says
    whether the agent answered it (``answered``, rule 6).
    """
    lines = _lines(text)
    row_cursor = _cursor_in_text(lines, cursor, height)
    harness = harness_from_command(foreground_command, lines)
    rules = RULES.get(harness)
    if rules is not None:
        return _read_agent(rules, lines, row_cursor, typed_marker)
    if harness is Harness.SHELL:
        activity, composer = _read_shell(lines, row_cursor)
        return Reading(harness, activity, composer, None, _fingerprint(lines, (), None))
    return Reading(Harness.UNKNOWN, Activity.UNKNOWN, Composer.ABSENT, None, _fingerprint(lines, (), None))


def is_news(told: Reading | None, reading: Reading, *, retell: bool = False) -> bool:
    """Whether the core hears this reading of a pane (``PaneObserved``): the first, one whose
    fingerprint or readiness differs from the reading last told, or any once ``retell`` asks (the
    harness release just became known, and readiness depends on it)."""
    if retell or told is None:
        return True
    return (told.fingerprint, told.ready_for_message) != (reading.fingerprint, reading.ready_for_message)


def composer_draft(text: str, foreground_command: str) -> Draft | None:
    """The composer of an agent's screen (``text`` as for :func:`read_screen`), or None when there is
    none to read: not an agent, a dialog, no composer frame at the bottom."""
    lines = _lines(text)
    rules = RULES.get(harness_from_command(foreground_command, lines))
    if rules is None or _has_dialog_hints(rules, lines) or _has_dialog_body(rules, lines):
        return None
    frame = _find_composer(rules, lines)
    if frame is None:
        return None
    return Draft(frame.texts, any(p.search(row) for p in rules.pasted for row in frame.texts))


def harness_from_command(foreground_command: str, lines: list[str] | None = None) -> Harness:
    """The harness a pane runs: by command name; for ambiguous commands by the screen ``lines``."""
    command = foreground_command.strip().rsplit("/", 1)[-1]
    for rules in RULES.values():
        if command in rules.commands:
            return rules.harness
    if command in SHELL_COMMANDS:
        return Harness.SHELL
    if (command in AMBIGUOUS_COMMANDS or VERSION_COMMAND.match(command)) and lines is not None:
        return _harness_from_screen(lines)
    return Harness.UNKNOWN


# --------------------------------------------------------------------------------------------------
# Text preparation
# --------------------------------------------------------------------------------------------------


def _lines(text: str) -> list[str]:
    """Lines with no-break spaces as spaces (Claude Code's prompt is '❯' + NBSP) and no trailing
    blanks. Line numbers are kept: line i of the result is line i of the text."""
    lines = [line.replace("\u00a0", " ").rstrip() for line in text.split("\n")]
    if lines and lines[-1] == "" and text.endswith("\n"):
        lines.pop()
    return lines


def _cursor_in_text(lines: list[str], cursor: tuple[int, int] | None,
                    height: int | None) -> tuple[int, int] | None:
    """(column, line index in ``lines``); None when not given; (-1, -1), which lies in no
    composer and on no prompt, when given but outside the text."""
    if cursor is None:
        return None
    x, y = cursor
    screen = len(lines) if height is None else height
    row = len(lines) - screen + y
    if x < 0 or y < 0 or not 0 <= row < len(lines):
        return -1, -1
    return x, row


def _bottom(lines: list[str]) -> int:
    """Index one past the last non-blank line."""
    end = len(lines)
    while end > 0 and not lines[end - 1].strip():
        end -= 1
    return end


def _harness_from_screen(lines: list[str]) -> Harness:
    text = "\n".join(lines)
    found = [rules.harness for rules in RULES.values()
             if rules.identity and any(p.search(text) for p in rules.identity)]
    if len(found) == 1:
        return found[0]
    if len(found) > 1:  # both seen (e.g. one agent's screen quoted in the other's scrollback):
        # the agent whose composer or dialog frame is at the bottom wins, else nobody
        at_bottom = [h for h in found if _find_composer(RULES[h], lines) is not None]
        return at_bottom[0] if len(at_bottom) == 1 else Harness.UNKNOWN
    return Harness.UNKNOWN


# --------------------------------------------------------------------------------------------------
# Agents
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Frame:
    first: int  # line index of the composer's first line
    last: int  # line index of its last line
    footer: tuple[int, int]  # [start, end) of the footer lines
    texts: tuple[str, ...]  # the composer's lines without prompt glyph and indentation
    column: int | None = None  # where its text starts, when not at ``prompt_width`` (BOX)


def _read_agent(rules: ScreenRules, lines: list[str], cursor: tuple[int, int] | None,
                typed_marker: str | None = None) -> Reading:
    if _has_dialog_hints(rules, lines) or _has_dialog_body(rules, lines):
        return Reading(rules.harness, Activity.DIALOG, Composer.ABSENT, _question(rules, lines),
                       _fingerprint(lines, rules.volatile, None))
    frame = _find_composer(rules, lines)
    if frame is None:
        return Reading(rules.harness, Activity.UNKNOWN, Composer.ABSENT, None,
                       _fingerprint(lines, rules.volatile, None))
    fingerprint = _fingerprint(lines, rules.volatile, frame)
    composer = _composer(rules, frame, cursor)
    if composer is None:  # the cursor is outside the composer: something else has the focus
        return Reading(rules.harness, Activity.UNKNOWN, Composer.DRAFT if any(frame.texts) else Composer.EMPTY,
                       None, fingerprint)
    activity = _activity(rules, lines, frame)
    answered = (
        typed_marker is not None
        and activity is Activity.IDLE
        and composer is Composer.EMPTY
        and _answered(rules, lines[:frame.first], typed_marker)
    )
    return Reading(rules.harness, activity, composer, None, fingerprint, answered)


def _answered(rules: ScreenRules, above: list[str], typed_marker: str) -> bool:
    """Below the last showing of the marker (found as :func:`connectcore.delivery.marker_seen` finds
    it: whitespace ignored, so wrapped), a line of the agent's answer."""
    marker = "".join(typed_marker.split())
    if not marker:
        return False
    compact = ["".join(line.split()) for line in above]
    at = "".join(compact).rfind(marker)
    if at < 0:
        return False
    end = at + len(marker)  # one past the marker's last character: find the line that holds it
    row = 0
    while end > len(compact[row]):
        end -= len(compact[row])
        row += 1
    return any(p.match(line) for p in rules.answer for line in above[row + 1:])


def _find_composer(rules: ScreenRules, lines: list[str]) -> _Frame | None:
    end = _bottom(lines)
    if end == 0 or not rules.prompt_glyphs:
        return None
    if rules.frame is Frame.RULED:
        return _ruled_composer(rules, lines, end)
    if rules.frame is Frame.BOX:
        return _box_composer(rules, lines, end)
    return _gap_composer(rules, lines, end)


def _box_composer(rules: ScreenRules, lines: list[str], end: int) -> _Frame | None:
    """OpenCode: a box of rows behind a bar glyph ('┃'), closed by a bottom line ('╹▀▀▀'), then at
    most a few footer lines. Inside: a padding row, the composer's rows, a padding row, the agent's
    status row ('Build · <model> <provider>')."""
    assert rules.rule is not None and rules.box_status is not None
    glyph = rules.prompt_glyphs[0]
    # the footer: at most max_footer_lines non-blank lines (OpenCode's start screen centres its
    # box and keeps the folder and version on the last line)
    bottom = end - 1
    while bottom >= 0 and not rules.rule.match(lines[bottom]):
        if sum(1 for line in lines[bottom:end] if line.strip()) > rules.max_footer_lines:
            return None
        bottom -= 1
    if bottom < 0:
        return None
    top = bottom
    while top > 0 and lines[top - 1].lstrip().startswith(glyph) and not lines[top - 1][:lines[top - 1].index(glyph)].strip():
        top -= 1
    if top == bottom:
        return None
    bar = lines[bottom - 1].index(glyph)
    # the box ends where its bottom line ends (a wide pane draws a sidebar beside it)
    right = len(lines[bottom].rstrip())
    contents = {i: lines[i][lines[i].index(glyph) + 1:right].strip() for i in range(top, bottom)}
    status = [i for i in range(top, bottom) if rules.box_status.match(contents[i])]
    if not status:
        return None
    first, last = top + 1, status[-1] - 2
    if last < first or contents[top] or contents[last + 1]:
        return None
    return _Frame(first, last, (bottom + 1, end), tuple(contents[i] for i in range(first, last + 1)), column=bar + rules.prompt_width)


def _ruled_composer(rules: ScreenRules, lines: list[str], end: int) -> _Frame | None:
    """Claude Code: rule, '❯ text', continuation lines, rule, then at most a few footer lines."""
    assert rules.rule is not None
    rule_rows = [i for i in range(max(0, end - 60), end) if rules.rule.match(lines[i])]
    if len(rule_rows) < 2:
        return None
    top, bottom = rule_rows[-2], rule_rows[-1]
    if end - bottom - 1 > rules.max_footer_lines or bottom - top < 2:
        return None
    texts = _strip_prompt(rules, lines[top + 1:bottom])
    if texts is None:
        return None
    return _Frame(top + 1, bottom - 1, (bottom + 1, end), texts)


def _gap_composer(rules: ScreenRules, lines: list[str], end: int) -> _Frame | None:
    """Codex: '› text', continuation lines, one blank line (at most ``gap_lines``), a status line,
    a few hint lines."""
    for blank in range(end - 1, max(0, end - rules.max_footer_lines - 1) - 1, -1):
        if lines[blank].strip():
            continue
        footer = (blank + 1, end)
        if footer[0] >= end or not any(p.match(lines[footer[0]]) for p in rules.footer_first):
            continue
        top = blank  # the gap's first blank line (0.166.0 leaves two)
        while top > 0 and blank - top + 1 < rules.gap_lines and not lines[top - 1].strip():
            top -= 1
        first = top - 1
        while first >= 0 and lines[first].startswith(" " * rules.prompt_width) and lines[first].strip():
            first -= 1
        if first < 0 or not lines[first].strip():
            return None
        texts = _strip_prompt(rules, lines[first:top])
        if texts is None:
            return None
        return _Frame(first, top - 1, footer, texts)
    return None


def _strip_prompt(rules: ScreenRules, block: list[str]) -> tuple[str, ...] | None:
    """The composer's lines without the prompt glyph (first line) and indentation (the rest)."""
    head = block[0]
    for glyph in rules.prompt_glyphs:
        if head == glyph or head.startswith(glyph + " "):
            texts = [head[len(glyph):].strip()]
            texts += [line[rules.prompt_width:] if line.startswith(" " * rules.prompt_width) else line
                      for line in block[1:]]
            return tuple(texts)
    return None


def _composer(rules: ScreenRules, frame: _Frame, cursor: tuple[int, int] | None) -> Composer | None:
    """EMPTY, DRAFT, or None when the cursor is not in the composer at all."""
    texts = frame.texts
    column = rules.prompt_width if frame.column is None else frame.column
    at_start = cursor is None or cursor == (column, frame.first)
    if cursor is not None and not frame.first <= cursor[1] <= frame.last:
        return None
    if len(texts) == 1 and (not texts[0] or _is_placeholder(rules, texts[0])):
        return Composer.EMPTY if at_start else Composer.DRAFT
    return Composer.DRAFT


def _is_placeholder(rules: ScreenRules, text: str) -> bool:
    return any(p.fullmatch(text) for p in rules.placeholders)


def _activity(rules: ScreenRules, lines: list[str], frame: _Frame) -> Activity:
    status = lines[max(0, frame.first - 1 - rules.status_lines):frame.first]
    footer = lines[frame.footer[0]:frame.footer[1]]
    if any(p.search(line) for p in rules.busy for line in (*status, *footer)):
        return Activity.BUSY
    if not rules.turn_end:
        return Activity.IDLE
    return _turn_state(rules, lines[:frame.first])


def _turn_state(rules: ScreenRules, above: list[str]) -> Activity:
    """GAP harnesses: idle only when the last block of output is a turn's end, or when the session
    banner shows and no prompt was submitted after it."""
    rows = [line for line in above if not any(p.match(line) for p in rules.ignore_above_composer)]
    blocks = _blocks(rows)
    if blocks and any(p.match(blocks[-1][0]) for p in rules.turn_end):
        return Activity.IDLE
    prompts = [i for i, line in enumerate(rows) if rules.history_prompt and rules.history_prompt.match(line)]
    banners = [i for i, line in enumerate(rows) if any(p.search(line) for p in rules.session_banner)]
    if banners and (not prompts or prompts[-1] < banners[-1]):
        return Activity.IDLE
    return Activity.BUSY if prompts else Activity.UNKNOWN


def _blocks(rows: list[str]) -> list[list[str]]:
    """Runs of non-blank lines."""
    blocks: list[list[str]] = []
    current: list[str] = []
    for line in rows:
        if line.strip():
            current.append(line)
        elif current:
            blocks.append(current)
            current = []
    if current:
        blocks.append(current)
    return blocks


# --------------------------------------------------------------------------------------------------
# Dialogs
# --------------------------------------------------------------------------------------------------


def _has_dialog_hints(rules: ScreenRules, lines: list[str]) -> bool:
    end = _bottom(lines)
    tail = [line for line in lines[:end] if line.strip()][-rules.dialog_hint_lines:]
    return any(p.search(line) for p in rules.dialog_hints for line in tail)


def _has_dialog_body(rules: ScreenRules, lines: list[str]) -> bool:
    """A known dialog text below the last rule line and no composer under it: a dialog whose key
    hints were pushed off a short pane."""
    if not rules.dialog_bodies:
        return False
    end = _bottom(lines)
    start = max(0, end - 40)
    if rules.rule is not None:
        start = max([start, *(i + 1 for i in range(start, end) if rules.rule.match(lines[i]))])
    if not any(p.search(line) for p in rules.dialog_bodies for line in lines[start:end]):
        return False
    return _find_composer(rules, lines) is None


def _question(rules: ScreenRules, lines: list[str]) -> Question | None:
    """The dialog's question (a known prompt, else the nearest line ending in '?' above the options,
    else the first line of the dialog) and its options (the block around the selected one)."""
    end = _bottom(lines)
    start = max(0, end - 40)
    if rules.rule is not None:  # a ruled harness draws its dialogs below a rule line
        start = max([start, *(i + 1 for i in range(start, end) if rules.rule.match(lines[i]))])
    selected = next((i for i in range(end - 1, start - 1, -1) if rules.option_selector.match(lines[i])), None)
    options: tuple[str, ...] = ()
    top = end
    if selected is not None:
        column = _option_column(lines[selected])
        first, last = selected, selected
        while first > start and _is_option_line(lines[first - 1], column, below=False):
            first -= 1
        while last + 1 < end and _is_option_line(lines[last + 1], column, below=True):
            last += 1
        options = _options(lines[first:last + 1])
        highlight = len(_options(lines[first:selected + 1])) - 1
        top = first
    else:
        highlight = None
    low = max(start, top - 30)
    window = lines[low:top]
    for i in range(len(window) - 1, -1, -1):
        for pattern in rules.dialog_prompts:
            match = pattern.search(window[i])
            if match:
                return Question(match.group(0).strip(), options,
                                _subject(rules, window, i, low == start), highlight)
    for i in range(len(window) - 1, -1, -1):
        line = window[i].strip()
        if "?" in line:
            return Question(line[: line.index("?") + 1], options, _subject(rules, window, i, low == start), highlight)
    blocks = _blocks(window)
    if blocks:
        return Question(blocks[0][0].strip(), options, _subject(rules, window, None, low == start), highlight)
    return Question("", options, _subject(rules, window, None, low == start), highlight) if options else None


SUBJECT_LINES = 12  # the subject's rows the card shows and the fingerprint covers, at most
SUBJECT_WIDTH = 200
_DECORATION = re.compile(r"^[\s─━╌╍┄┅┈┉═│┃▀▄█╹╻]*$")


def _subject(rules: ScreenRules, window: list[str], question: int | None, dialog_top: bool) -> tuple[str, ...]:
    """What the dialog asks about: for a ruled harness (its dialog starts below a rule) every row of
    the dialog above the options except the question; otherwise the rows between the question and the
    options. Decoration-only rows are dropped; the rows kept are the last SUBJECT_LINES (nearest the
    options), each cut at SUBJECT_WIDTH. Whatever else the window holds changes the fingerprint too."""
    if rules.rule is not None and dialog_top:
        rows = [line for i, line in enumerate(window) if i != question]
    else:
        rows = window[question + 1:] if question is not None else window
    kept = [row.strip()[:SUBJECT_WIDTH] for row in rows if not _DECORATION.match(row)]
    return tuple(kept[-SUBJECT_LINES:])


OPTION_NUMBER = re.compile(r"^(\d+)\.\s+")
SELECTOR_GLYPHS = ("❯", "›", ">")


def _option_column(selected: str) -> int:
    """Where the options' text starts: after the selector glyph and its space on the selected line."""
    return len(selected) - len(selected.lstrip()) + 2


def _is_option_line(line: str, column: int, *, below: bool) -> bool:
    """A sibling option: its text at the selected option's column, or, below it, a deeper-indented
    continuation of a wrapped option."""
    if not line.strip():
        return False
    indent = len(line) - len(line.lstrip())
    return indent == column or (below and indent > column)


def _options(block: list[str]) -> tuple[str, ...]:
    items: list[str] = []
    numbered = any(OPTION_NUMBER.match(_unselect(line)) for line in block)
    for line in block:
        text = _unselect(line)
        match = OPTION_NUMBER.match(text)
        if match:
            items.append(text[match.end():])
        elif numbered and items:
            items[-1] = f"{items[-1]} {text}"
        else:
            items.append(text)
    return tuple(items)


def _unselect(line: str) -> str:
    text = line.strip()
    for glyph in SELECTOR_GLYPHS:
        if text.startswith(glyph + " "):
            return text[len(glyph) + 1:].strip()
    return text


# --------------------------------------------------------------------------------------------------
# Shells
# --------------------------------------------------------------------------------------------------


def _read_shell(lines: list[str], cursor: tuple[int, int] | None) -> tuple[Activity, Composer]:
    """A prompt on the last non-blank line (and the cursor on it, when known): idle; text after the
    prompt's end is a draft. Anything else (a command's output) is unknown."""
    end = _bottom(lines)
    if end == 0:
        return Activity.UNKNOWN, Composer.ABSENT
    last = end - 1
    if cursor is not None and cursor[1] != last:
        return Activity.UNKNOWN, Composer.ABSENT
    match = SHELL_PROMPT_END.match(lines[last])
    if match is None:
        return Activity.UNKNOWN, Composer.ABSENT
    typed = match.group("typed") or ""
    if cursor is not None and cursor[0] < len(match.group("prompt")):
        return Activity.UNKNOWN, Composer.ABSENT
    return Activity.IDLE, Composer.DRAFT if typed.strip() else Composer.EMPTY


# --------------------------------------------------------------------------------------------------
# Fingerprint
# --------------------------------------------------------------------------------------------------


def _fingerprint(lines: list[str], volatile: tuple[tuple[re.Pattern[str], str], ...],
                 frame: _Frame | None) -> str:
    """sha256 of the screen with volatile parts normalised; composer lines are kept verbatim."""
    keep = range(frame.first, frame.last + 1) if frame is not None else range(0)
    out = []
    for i, line in enumerate(lines[:_bottom(lines)]):
        if i not in keep:
            for pattern, replacement in (*volatile, *GENERIC_VOLATILE):
                line = pattern.sub(replacement, line)
        out.append(line)
    return hashlib.sha256("\n".join(out).encode("utf-8")).hexdigest()
