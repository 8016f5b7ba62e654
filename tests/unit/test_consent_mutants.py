"""Consent: rules the 2026-12-06 (fourth) mutation run found unpinned (each test names the mutants it
kills)."""

from __future__ import annotations

from connectcore import consent as C


def test_a_quote_of_exactly_the_limit_is_kept_whole() -> None:
    """At most ``limit`` characters: exactly ``limit`` is not cut (kills ``<=`` -> ``<``)."""
    assert C.quote("abcde", 5) == "abcde"
    assert C.quote("x" * C.QUOTE_MAX_CHARS) == "x" * C.QUOTE_MAX_CHARS
    assert C.quote("abcdef", 5) == "abcd…"


def test_a_cut_quote_drops_the_blanks_before_its_ellipsis() -> None:
    """Cut where a word ends, the blanks before ``…`` go (kills ``rstrip`` -> ``lstrip``)."""
    assert C.quote("abc   defgh", 5) == "abc…"


def test_a_message_at_the_hop_limit_is_not_yet_past_it() -> None:
    """Hop 4 of a limit of 4 is within it: the words say what happens past it, not that it is past
    (kills ``hop > hop_limit`` -> ``>=``)."""
    assert C.hop_words(4, 4) == (
        "Reply 3 in a back-and-forth between agents (hop 4); past 4 hops a person approves every message."
    )
    assert C.hop_words(5, 4).endswith(": past 4 hops a person approves every message, even for an approved pair.")
