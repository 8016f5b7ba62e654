"""Redaction and the screen-tail policy: rules the 2026-12-06 (fourth) mutation run found unpinned
(docs/survivors/redact.md / docs/quality.md name the mutants each test kills). Fixed values, no randomness:
each case is built to have exactly the character classes it names."""

from __future__ import annotations

import pytest

from connectcore.redact import (
    AGENT_PANE_HARNESSES,
    WITHHELD_WORDS,
    TailPolicy,
    redact,
    screen_tail,
    tail_policy,
)

# 43 URL-safe characters each (the length of an unprefixed 256-bit secret), by character classes.
UPPER_LOWER_DIGITS = "Qx7vR2mK9pLw4ZtB8nYc3HdF6gJs1aUe5oVi0XkNq_-"
LOWER_DIGITS = "0123456789abcdef0123456789abcdef0123456789a"  # hex-like
UPPER_LOWER = "QxvRmKpLwZtBnYcHdFgJsaUeoViXkNqMrTuWyEzAbCd"  # a run of letters only
UPPER_DIGITS = "QX7VR2MK9PLW4ZTB8NYC3HDF6GJS1AUE5OVI0XKNQ12"


def test_a_bare_run_is_a_secret_only_with_upper_lower_and_digits() -> None:
    """A bare 43-character run is cut out only when it has upper case, lower case and digits; lacking any
    one of the three it is a word, a hash or a constant, and is left as it is. Kills ``_looks_random``'s
    ``and`` -> ``or`` at either place (mutmut_1, mutmut_2)."""
    for run in (UPPER_LOWER_DIGITS, LOWER_DIGITS, UPPER_LOWER, UPPER_DIGITS):
        assert len(run) == 43
    assert redact(f"secret: {UPPER_LOWER_DIGITS} end") == "secret: [redacted secret] end"
    for run in (LOWER_DIGITS, UPPER_LOWER, UPPER_DIGITS):
        assert redact(f"value: {run} end") == f"value: {run} end"


def test_a_wrapped_credential_becomes_its_label_then_one_marker_per_wrapped_line() -> None:
    """A credential the terminal wrapped is replaced by its label on its first line and exactly ``[...]``
    on each line it ran onto: the screen keeps its lines and nothing else is added. Kills ``_replace``'s
    joiner and marker mutants (mutmut_7, mutmut_8)."""
    token = "ct_" + UPPER_LOWER_DIGITS[:32]
    out = redact(f"export CONNECT_TOKEN={token[:20]}\n{token[20:]}\n$ ")
    assert out == "export CONNECT_TOKEN=[redacted agent token]\n[...]\n$ "
    three = redact(f"token {token[:10]}\n{token[10:20]}\n{token[20:]} done")
    assert three == "token [redacted agent token]\n[...]\n[...] done"


def test_a_login_code_wrapped_right_after_code_equals_keeps_the_screen_s_lines() -> None:
    """When the terminal wraps a login URL just after ``code=``, the whole code (on the next line) is
    cut out and that line stays, as ``[...]``: the screen keeps its line count. Kills ``_replace``
    splitting on any whitespace (mutmut_2: the leading line break would vanish, and a line with it)."""
    code = "Ab3dEf6hIj9kLm2nOp5q"
    out = redact(f"open http://127.0.0.1:7878/login?code=\n{code}  (one-time, 5 min)\n$ ")
    assert out == "open http://127.0.0.1:7878/login?code=[redacted login code]\n[...]  (one-time, 5 min)\n$ "
    assert code not in out


def test_every_withheld_tail_says_false_and_why() -> None:
    """A withheld tail's policy is exactly ``shown=False`` with its reason (the agent detail puts
    ``shown`` into its JSON: false, not null); a shell pane's reason is ``shell_pane``, whatever the
    scopes, and its words are the shell's. Kills ``"shell"`` -> other spellings (mutmut_2, mutmut_3:
    a shell would be refused as ``not_an_agent``) and ``False`` -> ``None`` (mutmut_4, 12, 22)."""
    for connected in (True, False):
        for control in (True, False):
            shell = tail_policy(harness="shell", target_connected=connected, caller_is_control=control)
            assert shell == TailPolicy(False, "shell_pane")
            assert shell.shown is False
            assert WITHHELD_WORDS[shell.reason] == "a shell pane's text is never shown to agents"
            other = tail_policy(harness="vim", target_connected=connected, caller_is_control=control)
            assert other == TailPolicy(False, "not_an_agent")
            assert other.shown is False
    for harness in sorted(AGENT_PANE_HARNESSES):
        off = tail_policy(harness=harness, target_connected=False, caller_is_control=False)
        assert off == TailPolicy(False, "agent_off")
        assert off.shown is False
        assert tail_policy(harness=harness, target_connected=True, caller_is_control=False) == TailPolicy(
            True
        )


def test_a_one_line_tail_is_the_last_line() -> None:
    """``lines=1`` gives the last non-blank line; only 0 or fewer lines give nothing. Kills
    ``lines <= 0`` -> ``lines <= 1`` (mutmut_2)."""
    screen = "first\nsecond\n> ready\n\n"
    assert screen_tail(screen, 1) == "> ready"
    assert screen_tail(screen, 0) == ""
    assert screen_tail(screen, -1) == ""


@pytest.mark.parametrize(
    ("screen", "lines", "tail"),
    [
        ("$ ls\nREADME  src\n> \n\n", 2, "README  src\n> "),  # the prompt's trailing space is screen text
        ("build\nstatus: FIX\n\n", 1, "status: FIX"),  # a last line ending in X keeps its X
        ("build\nstatus: FIX", 1, "status: FIX"),
    ],
)
def test_only_trailing_line_breaks_are_dropped_from_the_tail(screen: str, lines: int, tail: str) -> None:
    """The tail drops trailing empty lines (line breaks) only; the last line's own text, trailing spaces
    and letters included, is kept as captured. Kills ``rstrip("\\n")`` -> ``rstrip(None)`` (mutmut_6)
    and -> ``rstrip("XX\\nXX")`` (mutmut_8)."""
    assert screen_tail(screen, lines) == tail
