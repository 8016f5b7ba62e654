"""The harness releases and the tmux version connect is verified on (docs/compatibility.md).

``connectd doctor`` compares what is installed against these; the test suite's pins
(``tests/support/harnesses.py``) must be among them (a unit test checks it).
"""

from __future__ import annotations

import re

#: Harness -> (its npm package, the releases verified by ``make compat``, newest last): the live
#: acceptance passed and no captured screen was read ready-for-message falsely (docs/compatibility.md,
#: run 2026-12-03). Codex 0.149.0 and 0.155.0 are not here: connectd never reads them idle.
VERIFIED: dict[str, tuple[str, tuple[str, ...]]] = {
    "claude": ("@anthropic-ai/claude-code", ("2.1.243", "2.1.277", "2.1.300", "2.1.321", "2.1.332")),
    "codex": ("@openai/codex", ("0.160.0", "0.166.0", "0.171.0")),
}

#: The oldest tmux connectd supports (control-mode client flags such as ``ignore-size``) and the one
#: every test ran on.
TMUX_MINIMUM = (3, 2)
TMUX_TESTED = "3.3a"

_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?([a-z]?)")


def parse_version(text: str) -> str | None:
    """The first dotted version in a ``--version`` banner (``2.1.332 (Claude Code)``, ``codex-cli 0.171.0``,
    ``tmux 3.3a``, ``tmux next-3.6``)."""
    match = _VERSION.search(text)
    return match.group(0) if match else None


def version_tuple(version: str) -> tuple[int, ...]:
    match = _VERSION.search(version)
    if not match:
        return ()
    return tuple(int(part) for part in match.groups()[:3] if part is not None)


def is_verified(harness: str, version: str) -> bool:
    return harness in VERIFIED and version in VERIFIED[harness][1]
