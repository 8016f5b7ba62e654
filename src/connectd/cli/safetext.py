"""Agent-, pane- and transcript-supplied text made safe to show: it is data, never terminal control,
rich markup or a trick of direction (issue 21 items 5, 6, 7).

`visible` turns every character a terminal or a reader could be fooled by into its escape, as Python
writes it: C0 and C1 controls and DEL (cursor movement, erase, OSC 8 links), and the invisible format
characters (bidi overrides and isolates, zero-width spaces and joiners, the BOM) plus the line and
paragraph separators. What is stored stays as it was sent; only its showing changes. `cell` is the
same text as a rich `Text`, so a table never parses it as markup.
"""

from __future__ import annotations

import unicodedata
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.text import Text

# Cc: C0, DEL, C1. Cf: bidi embeddings/overrides/isolates/marks, zero-width space/joiners, BOM, soft
# hyphen. Zl, Zp: U+2028, U+2029 (a line break to some viewers). A backslash is kept as it is.
_HIDDEN = frozenset({"Cc", "Cf", "Zl", "Zp"})


def _escape(ch: str) -> str:
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def visible(value: Any, *, lines: bool = False) -> str:
    """`value` as text with every control, bidi and zero-width character shown as its escape; with
    `lines`, newlines and tabs are kept (a multi-line prompt shown as several lines)."""
    text = value if isinstance(value, str) else str(value)
    keep = "\n\t" if lines else ""
    return "".join(_escape(ch) if unicodedata.category(ch) in _HIDDEN and ch not in keep else ch for ch in text)


def cell(value: Any) -> Text:
    """A table cell: `visible` text as a rich `Text` (never parsed as markup)."""
    from rich.text import Text  # rich loads only when a table is drawn

    return Text(visible(value))
