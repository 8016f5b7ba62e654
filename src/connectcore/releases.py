"""Harness releases: the ones connect is verified on, and what a message to an agent on any other does.

The screen reader's one-sided bar (nothing read ready-for-message that is not) is proven per release,
by ``make compat`` on the captured screens and the live acceptance (docs/compatibility.md). On a
release outside that matrix the reader may meet a screen it has never seen, and typing into a
misread screen steers a running turn or answers a menu. So the rule, here and nowhere else:

- an agent whose release is **verified** receives as its screen allows;
- an agent on an **unverified** release, or whose release is **unknown** (no banner, no answer to
  ``--version``), never has a message typed into it: a consented message stays queued ("messages
  wait until its screens are read"), and ends as any queued message does (expired after its hour,
  cancelled when the agent ends or its grant goes). Nothing is refused for it, nothing pretends: the
  page, ``connectd agents`` and ``list_agents`` show the release and this note.

A release becomes verified by running ``make compat`` on it and adding it to :data:`VERIFIED` (its
screens read without a false ready, the live acceptance passed). That run has to deliver messages to
the release it verifies, so a daemon may be told to **trust** named releases (``connectd serve
--trust-release codex@0.175.0``): they receive as a verified one does, and are marked as trusted, not
verified, wherever the release is shown. Where an agent's release comes from
is the daemon's business (its banner on screen, else its program's ``--version``); this module reads
those texts (:func:`shown_on_screen`, :func:`from_version_output`) and decides.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from enum import StrEnum

#: Harness -> (its npm package, the releases verified by ``make compat``, newest last): the live
#: acceptance passed and no captured screen was read ready-for-message falsely (docs/compatibility.md,
#: runs 2026-12-03 and, for OpenCode, 2026-12-04). Codex 0.149.0 and 0.155.0 are not here: connectd
#: never reads them idle.
VERIFIED: Mapping[str, tuple[str, tuple[str, ...]]] = {
    "claude": ("@anthropic-ai/claude-code", ("2.1.243", "2.1.277", "2.1.300", "2.1.321", "2.1.332")),
    "codex": ("@openai/codex", ("0.160.0", "0.166.0", "0.171.0")),
    "opencode": ("opencode-ai", ("1.18.33",)),
}

#: The harnesses whose panes are agents (a shell or an unknown program has no release to check).
AGENT_HARNESSES = frozenset({"claude", "codex", "opencode"})

UNVERIFIED_NOTE = "unverified release: messages wait until its screens are read"
UNKNOWN_NOTE = "unknown release: messages wait until its release is known and its screens are read"
TRUSTED_NOTE = "unverified release, trusted by this daemon (--trust-release): messages are typed as on a verified one"

Trusted = Collection[tuple[str, str]]  # (harness, release) pairs a daemon was told to trust

_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?([a-z]?)")

#: The banner each harness draws at the top of a session (its release in group 1).
_BANNERS: Mapping[str, re.Pattern[str]] = {
    "claude": re.compile(r"Claude Code v(\d+\.\d+\.\d+)\b"),
    "codex": re.compile(r">_ OpenAI Codex \(v(\d+\.\d+\.\d+)\)"),
}
#: What each harness's ``--version`` prints (release in group 1): the harness must name itself, so a
#: wrapper's or an interpreter's version is never taken for the agent's.
_VERSION_OUTPUT: Mapping[str, re.Pattern[str]] = {
    "claude": re.compile(r"^\s*(\d+\.\d+\.\d+) \(Claude Code\)\s*$"),
    "codex": re.compile(r"^\s*codex(?:-cli)? (\d+\.\d+\.\d+)\s*$"),
    # OpenCode 1.18.33 prints only its release; the probe asks only an executable named like the
    # harness (opencode, opencode.exe), so that name is what names it
    "opencode": re.compile(r"^\s*(\d+\.\d+\.\d+)\s*$"),
}


class ReleaseStatus(StrEnum):
    VERIFIED = "verified"
    TRUSTED = "trusted"  # not verified; this daemon was told to type into it (make compat)
    UNVERIFIED = "unverified"
    UNKNOWN = "unknown"


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


def status(harness: str, release: str | None, trusted: Trusted = ()) -> ReleaseStatus | None:
    """The release status of an agent pane; None for a pane that is not an agent."""
    if harness not in AGENT_HARNESSES:
        return None
    if release is None:
        return ReleaseStatus.UNKNOWN
    if is_verified(harness, release):
        return ReleaseStatus.VERIFIED
    return ReleaseStatus.TRUSTED if (harness, release) in trusted else ReleaseStatus.UNVERIFIED


def may_type(harness: str, release: str | None, trusted: Trusted = ()) -> bool:
    """Whether a message may be typed into an agent of this harness and release at all (its screen
    must still be read ready-for-message): only on a verified release, or one the daemon trusts."""
    return status(harness, release, trusted) in (ReleaseStatus.VERIFIED, ReleaseStatus.TRUSTED)


def ready_for_message(reading_ready: bool, harness: str, release: str | None, trusted: Trusted = ()) -> bool:
    """What the daemon tells the core of a pane's readiness: the screen reader's
    ``ready_for_message``, on a release whose screens are read."""
    return reading_ready and may_type(harness, release, trusted)


def note(harness: str, release: str | None, trusted: Trusted = ()) -> str:
    """The mark the page, ``connectd agents`` and ``list_agents`` show for the pane ("" when none)."""
    found = status(harness, release, trusted)
    notes = {
        ReleaseStatus.UNVERIFIED: UNVERIFIED_NOTE,
        ReleaseStatus.UNKNOWN: UNKNOWN_NOTE,
        ReleaseStatus.TRUSTED: TRUSTED_NOTE,
    }
    return notes.get(found, "") if found is not None else ""


def parse_trusted(spec: str) -> tuple[str, str]:
    """``codex@0.175.0`` -> ``("codex", "0.175.0")``: an agent harness and a whole release."""
    harness, sep, release = spec.partition("@")
    if not sep or harness not in AGENT_HARNESSES or not re.fullmatch(r"\d+\.\d+\.\d+", release):
        raise ValueError(f"not HARNESS@X.Y.Z with HARNESS one of {', '.join(sorted(AGENT_HARNESSES))}: {spec!r}")
    return harness, release


def shown_on_screen(harness: str, text: str) -> str | None:
    """The release a harness's session banner shows in ``text`` (a pane's capture), if it shows one.
    Two different releases on one screen (one session's banner quoted in another's) tell nothing."""
    pattern = _BANNERS.get(harness)
    if pattern is None:
        return None
    found = set(pattern.findall(text))
    return found.pop() if len(found) == 1 else None


def from_version_output(harness: str, output: str) -> str | None:
    """The release in a program's ``--version`` output (its standard output), if exactly one line of
    it names this harness and a release."""
    pattern = _VERSION_OUTPUT.get(harness)
    if pattern is None:
        return None
    found = {m.group(1) for line in output.splitlines() if (m := pattern.match(line))}
    return found.pop() if len(found) == 1 else None
