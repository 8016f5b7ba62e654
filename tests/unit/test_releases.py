"""The release rule (connectcore.releases): a message is typed only into an agent on a verified
release; an unverified or unknown release waits, and says so; a release is read from the session
banner or from ``--version`` output that names the harness, never guessed."""

from __future__ import annotations

from pathlib import Path

import pytest

from connectcore import releases
from connectcore.releases import TRUSTED_NOTE, UNKNOWN_NOTE, UNVERIFIED_NOTE, ReleaseStatus
from connectd import verified as compat
from tests.support import harnesses as H

SCREENS = Path(__file__).resolve().parents[1] / "fixtures" / "screens"


def test_only_a_verified_release_may_receive() -> None:
    assert releases.status("claude", "2.1.332") is ReleaseStatus.VERIFIED
    assert releases.may_type("claude", "2.1.332") and releases.may_type("codex", "0.171.0")
    assert releases.note("claude", "2.1.332") == ""
    assert releases.ready_for_message(True, "codex", "0.160.0")
    assert releases.may_type("opencode", "1.18.33"), "the OpenCode pin passed make compat"


@pytest.mark.parametrize(("harness", "release"), [
    ("claude", "2.1.333"),  # newer than any verified: auto-updated overnight
    ("claude", "2.1.100"),  # older than the matrix
    ("codex", "0.155.0"),  # run by make compat, never read idle: not verified
    ("opencode", "1.18.34"),  # one past the verified pin
])
def test_an_unverified_release_waits_and_says_so(harness: str, release: str) -> None:
    assert releases.status(harness, release) is ReleaseStatus.UNVERIFIED
    assert not releases.may_type(harness, release)
    assert not releases.ready_for_message(True, harness, release), "the screen's idle is not enough"
    assert releases.note(harness, release) == UNVERIFIED_NOTE
    assert UNVERIFIED_NOTE == "unverified release: messages wait until its screens are read"


@pytest.mark.parametrize("harness", ["claude", "codex", "opencode"])
def test_an_unknown_release_waits_too(harness: str) -> None:
    assert releases.status(harness, None) is ReleaseStatus.UNKNOWN
    assert not releases.may_type(harness, None) and not releases.ready_for_message(True, harness, None)
    assert releases.note(harness, None) == UNKNOWN_NOTE


@pytest.mark.parametrize("harness", ["shell", "unknown"])
def test_a_pane_that_is_not_an_agent_has_no_release_and_no_mark(harness: str) -> None:
    assert releases.status(harness, None) is None and releases.note(harness, "5.2.15") == ""
    assert not releases.may_type(harness, "2.1.332")


def test_a_not_ready_screen_stays_not_ready_on_a_verified_release() -> None:
    assert not releases.ready_for_message(False, "claude", "2.1.332")


def test_the_pins_are_verified_and_doctor_reads_the_same_table() -> None:
    assert compat.VERIFIED is releases.VERIFIED
    for name in H.PINNED:
        assert releases.is_verified(name, H.pinned(name)), name


@pytest.mark.parametrize("program", ["claude", "codex"])
def test_the_banner_names_the_release_on_every_captured_release(program: str) -> None:
    for folder in sorted((SCREENS / program).iterdir()):
        shown = {releases.shown_on_screen(program, p.read_text()) for p in folder.glob("*.txt")}
        assert folder.name in shown, (program, folder.name, shown)
        assert shown <= {folder.name, None}, "a screen named another release"


def test_the_banner_of_another_harness_or_two_releases_tell_nothing() -> None:
    assert releases.shown_on_screen("codex", " ▐▛███▜▌   Claude Code v2.1.332") is None
    assert releases.shown_on_screen("claude", "Claude Code v2.1.300\n...\nClaude Code v2.1.332") is None
    assert releases.shown_on_screen("claude", "Claude Code v2.1.332\nClaude Code v2.1.332") == "2.1.332"
    assert releases.shown_on_screen("shell", "Claude Code v2.1.332") is None


def test_version_output_counts_only_when_it_names_the_harness() -> None:
    assert releases.from_version_output("claude", "2.1.332 (Claude Code)\n") == "2.1.332"
    assert releases.from_version_output("codex", "codex-cli 0.171.0\n") == "0.171.0"
    assert releases.from_version_output("codex", "WARNING: could not create PATH aliases\ncodex-cli 0.160.0\n") == "0.160.0"
    assert releases.from_version_output("claude", "Python 3.11.7\n") is None  # a wrapper's interpreter
    assert releases.from_version_output("claude", "codex-cli 0.171.0\n") is None
    assert releases.from_version_output("codex", "") is None
    # OpenCode prints its bare release (1.18.33): the executable's own name (opencode, opencode.exe; the
    # probe asks no other) names the harness; still one release line and nothing else
    assert releases.from_version_output("opencode", "1.18.33\n") == "1.18.33"
    assert releases.from_version_output("opencode", "Python 3.11.7\n") is None
    assert releases.from_version_output("opencode", "1.18.33\n1.18.34\n") is None
    assert releases.from_version_output("codex", "codex-cli 0.160.0\ncodex-cli 0.171.0\n") is None


def test_a_release_the_daemon_trusts_receives_and_is_marked_trusted_not_verified() -> None:
    trusted = {("codex", "0.175.0")}
    assert releases.status("codex", "0.175.0", trusted) is ReleaseStatus.TRUSTED
    assert releases.may_type("codex", "0.175.0", trusted) and releases.ready_for_message(True, "codex", "0.175.0", trusted)
    assert releases.note("codex", "0.175.0", trusted) == TRUSTED_NOTE
    assert releases.status("claude", "0.175.0", trusted) is ReleaseStatus.UNVERIFIED, "trusted per harness"
    assert releases.status("codex", None, trusted) is ReleaseStatus.UNKNOWN
    assert releases.status("codex", "0.171.0", trusted) is ReleaseStatus.VERIFIED


@pytest.mark.parametrize("spec", ["codex", "codex@", "codex@0.175", "shell@1.2.3", "@0.175.0", "codex@0.175.0 "])
def test_a_trusted_release_is_named_exactly(spec: str) -> None:
    with pytest.raises(ValueError):
        releases.parse_trusted(spec)
    assert releases.parse_trusted("codex@0.175.0") == ("codex", "0.175.0")
