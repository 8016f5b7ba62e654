"""Harness releases: rules the 2026-12-06 (fourth) mutation run found unpinned.

Each test states one rule of :mod:`connectcore.releases` through its public functions; its docstring
names the mutants it kills (docs/survivors/releases.md lists the ones left as equivalent, with reasons).
"""

from __future__ import annotations

import pytest

from connectcore import releases


def test_a_version_reads_as_its_numbers_two_or_three_and_nothing_when_there_is_none() -> None:
    """``version_tuple`` (``doctor``'s tmux minimum compares it): the dotted numbers of the first
    version in the text, a letter suffix dropped; no version, nothing. Kills x_version_tuple 1 (no
    match ever), 3 (``if not match`` -> ``if match``) and 7 (``part is not None`` -> ``is None``)."""
    assert releases.version_tuple("tmux 3.3a") == (3, 3)
    assert releases.version_tuple("codex-cli 0.171.0") == (0, 171, 0)
    assert releases.version_tuple("2.1.332 (Claude Code)") == (2, 1, 332)
    assert releases.version_tuple("tmux master") == ()


@pytest.mark.parametrize("spec", ["codex", "shell@1.2.3", "codex@0.175"])
def test_a_malformed_trusted_release_is_refused_in_words_naming_it(spec: str) -> None:
    """``--trust-release`` refuses a spec that is not HARNESS@X.Y.Z with the harnesses it takes and
    the spec as given. Kills x_parse_trusted 15 (``ValueError(None)``) and 17 (the harnesses' list)."""
    with pytest.raises(ValueError) as refused:
        releases.parse_trusted(spec)
    assert str(refused.value) == f"not HARNESS@X.Y.Z with HARNESS one of claude, codex, opencode: {spec!r}"


def test_a_version_banner_gives_its_first_whole_dotted_version() -> None:
    """``parse_version`` (``doctor`` reads tmux's and the harnesses' ``--version`` with it): the first
    dotted version, whole, letter suffix included; None when there is none. Kills x_parse_version 1-6
    (no test ran them: no match, ``search(None)``, the branches forced, ``group(None)``, ``group(1)``)."""
    assert releases.parse_version("tmux 3.3a") == "3.3a"
    assert releases.parse_version("tmux next-3.6") == "3.6"
    assert releases.parse_version("2.1.332 (Claude Code)") == "2.1.332"
    assert releases.parse_version("tmux master") is None
