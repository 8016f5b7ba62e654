"""What each harness's screen looks like, as data: one :class:`ScreenRules` table per harness.

Everything the reader (:mod:`connectcore.screen`) knows about a particular program lives here, so a
new harness version that moves a marker or renames a hint is an edit to these tables, re-checked by
the captured corpus (``make eval-screens``), not a change of logic. Patterns are matched against
plain text (no SGR attributes) after no-break spaces became spaces and trailing blanks were removed.

Verified against the releases in tests/fixtures/screens/ (the pins, Claude Code 2.1.332 and Codex
0.171.0, and every release of docs/compatibility.md that draws differently).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum


class Harness(StrEnum):
    CLAUDE = "claude"
    CODEX = "codex"
    OPENCODE = "opencode"
    SHELL = "shell"
    UNKNOWN = "unknown"


def _rx(*patterns: str) -> tuple[re.Pattern[str], ...]:
    """Patterns for single lines (``^``/``$`` are the line's ends)."""
    return tuple(re.compile(p) for p in patterns)


def _rx_text(*patterns: str) -> tuple[re.Pattern[str], ...]:
    """Patterns searched in the whole text (``^``/``$`` match at every line)."""
    return tuple(re.compile(p, re.M) for p in patterns)


class Frame(StrEnum):
    """How the composer sits at the bottom of the screen."""

    RULED = "ruled"  # between two full-width rule lines (Claude Code)
    GAP = "gap"  # a prompt line, a blank line, then a status footer (Codex)
    BOX = "box"  # rows behind a bar glyph, closed by a bottom line, the agent's status row last (OpenCode)


@dataclass(frozen=True)
class ScreenRules:
    """One harness's screen, as data. Every tuple of patterns is "any of these"."""

    harness: Harness
    # foreground command names (tmux ``pane_current_command``) that mean this harness for sure
    commands: frozenset[str]
    # markers that identify the harness on screen when the command is ambiguous (``node``)
    identity: tuple[re.Pattern[str], ...]
    frame: Frame
    # the composer's first line starts with one of these glyphs, then a space; continuation lines
    # are indented by ``prompt_width`` columns
    prompt_glyphs: tuple[str, ...]
    prompt_width: int
    # RULED: a rule line (the frame); GAP: the first footer line below the blank gap
    rule: re.Pattern[str] | None
    footer_first: tuple[re.Pattern[str], ...]
    max_footer_lines: int
    # a turn is running: searched in the status region (``status_lines`` above the composer) and
    # in the footer
    busy: tuple[re.Pattern[str], ...]
    status_lines: int
    # GAP harnesses only: idle needs positive evidence that the last turn ended (its last block
    # of output starts with one of these) or that no turn started since the session banner
    turn_end: tuple[re.Pattern[str], ...]
    session_banner: tuple[re.Pattern[str], ...]
    history_prompt: re.Pattern[str] | None  # a submitted prompt in the history
    ignore_above_composer: tuple[re.Pattern[str], ...]  # popup rows drawn over the history
    # hint text shown in an empty composer (full match of the composer's text)
    placeholders: tuple[re.Pattern[str], ...]
    # a menu or question waits for an answer: its key hints in the last lines (no composer)
    dialog_hints: tuple[re.Pattern[str], ...]
    dialog_hint_lines: int
    # known dialog questions (the prompt is the matched text); the selected option's line
    dialog_prompts: tuple[re.Pattern[str], ...]
    option_selector: re.Pattern[str]
    # parts of the screen that change while nothing changes for the reader: (pattern, replacement)
    volatile: tuple[tuple[re.Pattern[str], str], ...]
    # dialogs known by their text, for when a dialog taller than the pane pushes its key hints off
    # the screen: one of these below the last rule (RULED) with no composer under it is a dialog
    dialog_bodies: tuple[re.Pattern[str], ...] = ()
    # GAP: how many blank lines may separate the composer from its footer
    gap_lines: int = 1
    # BOX: the agent's status row, the box's last row under the composer
    box_status: re.Pattern[str] | None = None
    # what the composer shows instead of a long paste (searched in the composer's lines)
    pasted: tuple[re.Pattern[str], ...] = ()
    # the agent answered a prompt: one of these lines below the prompt (the reader's ``answered``).
    # Each is anchored where the harness never draws a line of a submitted prompt (Claude Code and
    # Codex indent a prompt's continuation lines, OpenCode draws them behind a bar), so no text of
    # the prompt itself can pass for its answer; none (an unknown layout): never answered
    answer: tuple[re.Pattern[str], ...] = ()


CLAUDE = ScreenRules(
    harness=Harness.CLAUDE,
    commands=frozenset({"claude"}),
    identity=_rx_text(
        r"Claude Code v\d",
        r"^─{20,}\n❯",
        r"⏵⏵ .* mode",
        r"shift\+tab to cycle",
        r"Do you want to use this API key\?",
        r"Claude Code'll be able to",
        r"Auto mode can't check actions",
        r"We're changing auto mode to no longer charge",
    ),
    frame=Frame.RULED,
    prompt_glyphs=("❯", ">"),
    prompt_width=2,
    rule=re.compile(r"^─{20,}$"),
    footer_first=(),
    max_footer_lines=3,
    busy=_rx(
        r"esc to interrupt",
        r"^\s*[·✢✳✶✻✽*] \S.*… \(",  # the spinner line: "✶ Caramelizing… (14s · ↓ 58 tokens)"
        r"^\s*[·✢✳✶✻✽*] \S.*…$",
        r"retrying in \d+",
        r"attempt \d+/\d+",
    ),
    status_lines=5,
    turn_end=(),
    session_banner=(),
    history_prompt=None,
    ignore_above_composer=(),
    placeholders=_rx(
        r'Try "[^"]*"',  # Try "fix lint errors"
        r'Try "[^"]*…',  # the same, cut short by a narrow pane
        r"Press up to (edit|select) (a )?queued messages?.*",
        r"Message @\S+…?",
    ),
    dialog_hints=_rx(
        r"Enter to confirm",
        r"Esc to cancel",
        r"Tab to amend",
        r"Enter to select",
        r"Esc to (go back|exit|close)",
        r"↑/↓ to (navigate|select)",
    ),
    dialog_hint_lines=3,
    dialog_prompts=_rx(
        r"Do you want to use this API key\?",
        r"(Quick safety check: )?Is this a project you created or one you trust\?",
        r"Do you want to proceed\?",
        r"Do you want to (make this edit to|create|overwrite) .*\?",
        r"Auto mode can't check actions in this session",
        r"Do you trust the files in this folder\?",
    ),
    option_selector=re.compile(r"^\s*❯ \S"),
    volatile=(
        (re.compile(r"^[·✢✳✶✻✽*] \S.*….*$"), "<spinner>"),
        (re.compile(r"retrying in \d+s · attempt \d+/\d+"), "retrying"),
        (re.compile(r"· done \d{1,2}:\d{2}( ?[AP]M)?"), "· done <clock>"),
    ),
    # 2.1.300's auto-mode billing notice: 14 lines and more, its hints below an 80x24 pane's bottom
    dialog_bodies=_rx(r"We're changing auto mode to no longer charge"),
    pasted=_rx(r"\[Pasted text #\d+"),  # [Pasted text #1 +13 lines]
    # a block of the agent's output ("● The project has ..."; '⏺' before 2.1 and in the stand-ins)
    answer=_rx(r"^[●⏺] \S"),
)

CODEX = ScreenRules(
    harness=Harness.CODEX,
    commands=frozenset({"codex", "codex-linux-x64", "codex-x86_64-unknown-linux-musl"}),
    identity=_rx_text(
        r">_ OpenAI Codex \(v",
        r"Ask Codex to do anything",
        r"Worked for [^\n]* • \d{1,2}:\d{2}",
        r"^[•◦] (Working|Reconnecting)",
        r"enter/esc confirm · (\^c|ctrl\+c) quit",
        r"Back to Agent Command Center",
        r"You approved codex to",
        r"tell Codex what to do differently",
        # 0.160.0 to 0.166.0's folder trust dialog
        r"Trust this folder\? Codex can read",
        r"enter continue · esc quit",
    ),
    frame=Frame.GAP,
    prompt_glyphs=("›",),
    prompt_width=2,
    rule=None,
    # the status line under the composer: "  GPT-5.5 default · /path · title" (model, effort)
    # or, before the status line is drawn, the key hints
    footer_first=_rx(
        r"^  [\w.-]+ (default|minimal|low|medium|high|xhigh|max)\b.* · \S",
        r"^  (← for agents · )?\? for shortcuts",
        # 0.149.0: the slash-command popup drawn under the composer, and the draft-while-busy hint
        r"^  /[\w-]+\s{2,}\S",
        r"^  tab to queue message\b",
    ),
    max_footer_lines=4,
    busy=_rx(
        r"esc to interrupt",
        r"^[•◦] (Working|Reconnecting|Thinking)",
        r"Reconnecting\.\.\. \d+/\d+",
    ),
    status_lines=6,
    # Codex hides its "Working" line while answer text streams: idle needs the turn's end on screen
    # (exact shapes: a model's own paragraph "Worked for the team..." must not end a turn)
    turn_end=_rx(
        r"^\s*(─+ )?Worked for <?\d+[hms]( \d+[hms])*( • \d{1,2}:\d{2})?( ─+)?$",
        r"^■ ",
    ),
    session_banner=_rx(r">_ OpenAI Codex \(v"),
    history_prompt=re.compile(r"^› "),
    ignore_above_composer=_rx(r"^[› ] /\S+\s{2,}\S"),  # the slash-command popup
    placeholders=_rx(
        r"Ask Codex to do anything",
        r"Ask a follow-up question",
        r"Explain this codebase",
        r"Summarize recent commits",
        r"Implement \{feature\}",
        r"Find and fix a bug in @filename",
        r"Write tests for @filename",
        r"Improve documentation in @filename",
        r"Run /review on my current changes",
        r"Use /skills to list available skills",
    ),
    dialog_hints=_rx(
        r"Press enter to confirm",
        r"enter (to )?(continue|confirm|select|submit)",
        r"enter/esc confirm",
        r"esc (to )?(cancel|back|dismiss|close)",
        r"\^c quit",
    ),
    dialog_hint_lines=3,
    dialog_prompts=_rx(
        r"Would you like to run the following command\?",
        r"Would you like to make the following edits\?",
        r"Allow the \S+ MCP server to run tool .*\?",
        r"Trust this folder\?",
        r"Do you trust the contents of this directory\?",
        r"Meet \S.*",
        r"Warnings(?= · \d+ of \d+)",
    ),
    option_selector=re.compile(r"^\s*› \d+\. \S"),
    volatile=(
        (re.compile(r"^[•◦] (Working|Reconnecting)\b.*$"), "<status>"),
        (re.compile(r"Worked for .* • \d{1,2}:\d{2}"), "Worked for <time>"),
    ),
    gap_lines=2,  # 0.166.0 draws its first composer two blank lines above '? for shortcuts'
    pasted=_rx(r"\[Pasted Content \d+ chars\]"),
    # a block of the agent's output ("• The project has ..."), or a turn that ended in an error
    # ("■ We're currently experiencing ..."); not "Worked for", which Codex indents as it does a
    # prompt's continuation lines
    answer=_rx(r"^• \S", r"^■ \S"),
)

# OpenCode 1.18.33 (tests/fixtures/screens/opencode/): a full-screen TUI; the composer is a box of
# rows behind '┃', closed by '╹▀▀▀', with the agent's status row ("Build · <model> <provider>") last;
# the line under the box shows "esc interrupt" while a turn runs.
OPENCODE = ScreenRules(
    harness=Harness.OPENCODE,
    commands=frozenset({"opencode", ".opencode"}),
    identity=_rx_text(
        r"tab agents\s+ctrl\+p commands",
        r"ctrl\+p commands$",
        r"esc interrupt\s+tab agents",
        r"△ Permission required",
    ),
    frame=Frame.BOX,
    prompt_glyphs=("┃",),
    prompt_width=3,  # the text starts three columns right of the bar
    rule=re.compile(r"^\s*╹▀{10,}$"),
    footer_first=(),
    max_footer_lines=2,
    busy=_rx(r"esc (to )?interrupt"),
    status_lines=5,
    turn_end=(),
    session_banner=(),
    history_prompt=None,
    ignore_above_composer=(),
    placeholders=_rx(
        r'Ask anything…( ".*"?)?',
    ),
    dialog_hints=_rx(
        r"Allow once\s+Allow always\s+Reject",
        r"△ Permission required",
        r"⇆ select\s+enter con",
    ),
    dialog_hint_lines=3,
    dialog_prompts=_rx(r"Permission required"),
    option_selector=re.compile(r"(?!)"),
    volatile=(),
    box_status=re.compile(r"^(Build|Plan|[A-Z]\w*) · \S"),
    # the turn's closing line, with its duration ("▣  Build · Claude Sonnet 4.5 (latest) · 16.7s");
    # while the turn runs the same line has no duration
    answer=_rx(r"^ *▣ +\S.* · \d+(\.\d+)?(ms|s|m|h)( \d+(\.\d+)?(ms|s|m|h))*$"),
)

AGENTS: tuple[ScreenRules, ...] = (CLAUDE, CODEX, OPENCODE)
RULES: dict[Harness, ScreenRules] = {rules.harness: rules for rules in AGENTS}


# Shells: command names, and how a prompt ends ("user@host:~/dir$ ", "% ", "❯ ", "➜  dir ").
SHELL_COMMANDS = frozenset({"bash", "-bash", "zsh", "-zsh", "sh", "-sh", "dash", "fish", "ksh", "mksh",
                            "tcsh", "csh", "nu", "xonsh", "elvish", "ash", "busybox"})
SHELL_PROMPT_END = re.compile(r"^(?P<prompt>.*?[$#%>❯➜»λ])(?: (?P<typed>.*))?$")

# Commands that may run any of the agents (Claude Code's npm build runs as ``node``, Codex's npm
# wrapper too; a native Claude Code install shows its version, "2.1.332"): the screen decides.
AMBIGUOUS_COMMANDS = frozenset({"node", "nodejs", "bun", "deno", "npx", ""})
VERSION_COMMAND = re.compile(r"^\d+(\.\d+)+$")

# Volatile parts of any screen, after the harness's own: clocks, elapsed times, token counts.
GENERIC_VOLATILE: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\b\d{1,2}:\d{2}(:\d{2})?( ?[AP]M)?\b"), "<clock>"),
    (re.compile(r"[↑↓] ?[\d.,]+k? tokens"), "<tokens>"),
    (re.compile(r"\b[\d.,]+k? tokens\b"), "<tokens>"),
    (re.compile(r"<?\b\d+(\.\d+)?(ms|s|m|h)\b( \d+(ms|s|m|h)\b)*"), "<elapsed>"),
)
