"""When the recipient's composer shows a paste (the early Enter), on captured screens of the real
harnesses (tests/fixtures/screens/) and on the simulated agent's screen."""

from __future__ import annotations

import pytest

from connectcore.delivery import PASTE_TAIL_CHARS, paste_shown
from connectcore.screen import Draft, composer_draft
from tests.support.screen_corpus import Case, load_corpus

CORPUS = {case.name: case for case in load_corpus()}
MULTILINE = "first line of a longer prompt\nsecond line\nthird line"  # what 06_draft_multiline holds
ONELINE = "fix the failing test in parser.py"  # what 04_draft_oneline (02 on OpenCode) holds


def draft(name: str) -> Draft | None:
    case: Case = CORPUS[name]
    return composer_draft(case.text, case.meta["foreground_command"])


DRAFTS = [
    *(f"claude/{release}/06_draft_multiline_{w}" for release in ("2.1.300", "2.1.321", "2.1.332") for w in (80, 160)),
    *(f"codex/{release}/06_draft_multiline_{w}" for release in ("0.160.0", "0.171.0") for w in (80, 160)),
]


@pytest.mark.parametrize("name", [n for n in DRAFTS if n in CORPUS])
def test_a_composer_holding_the_whole_text_shows_the_paste(name: str) -> None:
    assert paste_shown(MULTILINE, draft(name))


@pytest.mark.parametrize("name", [n for n in DRAFTS if n in CORPUS])
def test_a_composer_holding_part_of_the_text_does_not(name: str) -> None:
    # the paste has more after what the composer shows (it is still arriving), or other text
    assert not paste_shown(MULTILINE + "\nfourth line", draft(name))
    assert not paste_shown("something else entirely", draft(name))


@pytest.mark.parametrize(
    "name",
    ["claude/2.1.332/04_draft_oneline_80", "codex/0.171.0/04_draft_oneline_160", "opencode/1.18.33/02_draft_oneline_80"],
)
def test_one_line_drafts_on_every_harness(name: str) -> None:
    assert paste_shown(ONELINE, draft(name))
    assert not paste_shown(ONELINE + " and report", draft(name))


@pytest.mark.parametrize(
    "name",
    ["claude/2.1.332/07_draft_pasted_80", "claude/2.1.243/07_draft_pasted_80", "codex/0.171.0/07_draft_pasted_160",
     "codex/0.160.0/07_draft_pasted_80"],
)
def test_the_harness_placeholder_for_a_long_paste_shows_it(name: str) -> None:
    found = draft(name)
    assert found is not None and found.folded
    assert paste_shown("any long text\n" * 20, found)


@pytest.mark.parametrize(
    "name",
    ["claude/2.1.332/03_idle_empty_80", "codex/0.171.0/03_idle_empty_80", "opencode/1.18.33/01_idle_empty_80",
     "claude/2.1.332/15_dialog_permission_80", "codex/0.171.0/14_dialog_permission_80",
     "claude/2.1.332/02_startup_trust_80", "shell/bash-5.2.15/01_bash_prompt_empty_80"],
)
def test_no_paste_shows_on_an_empty_composer_a_dialog_or_a_shell(name: str) -> None:
    found = draft(name)
    assert not paste_shown(ONELINE, found)
    assert found is None or not found.folded


def test_a_wrapped_last_line_still_shows_whitespace_aside() -> None:
    typed = "[connect] message m1 from agent:a (pane %1).\n" + "word " * 30 + "end."
    rule = "─" * 80
    rows = ["", rule, "❯ [connect] message m1 from agent:a (pane %1).", "  " + "word " * 15,
            "  " + "word " * 15 + "end.", rule, "  ⏵⏵ auto mode on (shift+tab to cycle)"]
    shown = composer_draft("\n".join(rows), "claude")
    assert shown is not None and paste_shown(typed, shown)
    cut = composer_draft("\n".join(rows).replace(" end.", ""), "claude")
    assert not paste_shown(typed, cut)


def test_the_tail_spans_a_short_last_line_and_the_line_before() -> None:
    typed = "a long first line of the message, longer than the tail\nok"
    assert len("".join(typed.split())) > PASTE_TAIL_CHARS
    assert paste_shown(typed, Draft(("a long first line of the message, longer than the tail", "ok"), False))
    assert not paste_shown(typed, Draft(("ok",), False))  # an "ok" alone is not this paste
    assert not paste_shown(typed, None)
