"""connectd.cli.safetext: agent-supplied text shown with its controls, bidi and zero-width characters visible."""

from __future__ import annotations

import io
import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console
from rich.table import Table

from connectd.cli.safetext import cell, visible


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("\r\x1b[2K\x1b[99A\x1b[J", "\\x0d\\x1b[2K\\x1b[99A\\x1b[J"),
        ("ls\n-la", "ls\\x0a-la"),
        ("a\x7fb\x9bc", "a\\x7fb\\x9bc"),
        ("evil\u202egnp.exe", "evil\\u202egnp.exe"),
        ("zero\u200bwidth\u2066x\u2069\ufeff", "zero\\u200bwidth\\u2066x\\u2069\\ufeff"),
        ("line\u2028para\u2029", "line\\u2028para\\u2029"),
        ("[/x] [link=file:///x]evil[/link] tïtle ✓", "[/x] [link=file:///x]evil[/link] tïtle ✓"),
    ],
)
def test_visible_escapes_what_could_fool_a_reader(raw: str, shown: str) -> None:
    assert visible(raw) == shown


@given(st.text())
def test_visible_output_has_no_hidden_character(raw: str) -> None:
    """Whatever the input, the shown text holds no control, format (bidi, zero-width) or separator character."""
    assert not any(unicodedata.category(ch) in {"Cc", "Cf", "Zl", "Zp"} for ch in visible(raw))


def test_a_cell_is_never_markup() -> None:
    out = io.StringIO()
    table = Table("TITLE")
    table.add_row(cell("[/x]"))
    table.add_row(cell("[link=file:///x]evil[/link]"))
    table.add_row(cell("[bold red]shout[/]"))
    Console(file=out, width=200, force_terminal=True, color_system="truecolor").print(table)
    text = out.getvalue()
    assert "[/x]" in text and "[link=file:///x]evil[/link]" in text and "[bold red]shout[/]" in text
    assert "\x1b]8;" not in text  # no OSC 8 hyperlink
