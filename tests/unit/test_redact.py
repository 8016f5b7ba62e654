"""The screen-tail policy and the credential redaction (issue 11, item 1), pure."""

from __future__ import annotations

import secrets

import pytest

from connectcore.redact import AGENT_PANE_HARNESSES, redact, screen_tail, tail_policy


def urlsafe(n: int) -> str:
    while True:  # a value with upper, lower and digits, as token_urlsafe gives nearly always
        value = secrets.token_urlsafe(n)
        if any(c.isupper() for c in value) and any(c.islower() for c in value) and any(c.isdigit() for c in value):
            return value


CREDENTIALS = [
    ("agent token", lambda: "ct_" + urlsafe(32)),
    ("login code", lambda: "cl_" + urlsafe(18)),
    ("owner token", lambda: "co_" + urlsafe(32)),
    ("secret", lambda: urlsafe(32)),  # an unprefixed 256-bit secret (older owner token, tunnel secret)
]


@pytest.mark.parametrize(("kind", "mint"), CREDENTIALS)
def test_every_kind_of_credential_is_cut_out_and_named(kind: str, mint: object) -> None:
    value = mint()  # type: ignore[operator]
    out = redact(f"before {value} after")
    assert value not in out and f"[redacted {kind}]" in out
    assert out.startswith("before ") and out.endswith(" after")


def test_a_login_url_loses_its_code_whatever_the_code_looks_like() -> None:
    code = secrets.token_urlsafe(18)  # an unprefixed code, as older daemons minted
    out = redact(f"owner page: http://127.0.0.1:7878/login?code={code}  (one-time, 5 min)")
    assert code not in out and "login?code=[redacted login code]" in out


def test_a_credential_the_terminal_wrapped_over_two_lines_is_cut_out_whole() -> None:
    token = "ct_" + urlsafe(32)
    out = redact(f"export CONNECT_TOKEN={token[:20]}\n{token[20:]}\n$ ")
    assert token[:20] not in out and token[20:] not in out
    assert out.count("\n") == 2  # the screen keeps its lines


def test_bearer_values_are_cut_out() -> None:
    out = redact("curl -H 'Authorization: Bearer hunter2hunter2' http://127.0.0.1:1/api/agents")
    assert "hunter2hunter2" not in out and "[redacted bearer token]" in out


def test_ordinary_text_hashes_and_words_are_left_alone() -> None:
    text = "commit 0123456789abcdef0123456789abcdef01234567 is fine; ct_ and cl_x are short\nrun the tests"
    assert redact(text) == text


def test_the_tail_is_the_last_lines_redacted() -> None:
    token = "ct_" + urlsafe(32)
    screen = "\n".join(f"line {i}" for i in range(50)) + f"\nmy token is {token}\n\n\n"
    tail = screen_tail(screen, 3)
    assert tail.split("\n") == ["line 48", "line 49", "my token is [redacted agent token]"]
    assert screen_tail(screen, 0) == ""


def test_a_shell_pane_or_an_unknown_program_never_shows_its_text() -> None:
    for harness in ("shell", "unknown", "vim"):
        for connected in (True, False):
            for control in (True, False):
                policy = tail_policy(harness=harness, target_connected=connected, caller_is_control=control)
                assert not policy.shown and policy.reason in {"shell_pane", "not_an_agent"}


def test_an_off_agent_shows_its_screen_to_control_only() -> None:
    for harness in sorted(AGENT_PANE_HARNESSES):
        assert tail_policy(harness=harness, target_connected=True, caller_is_control=False).shown
        off = tail_policy(harness=harness, target_connected=False, caller_is_control=False)
        assert not off.shown and off.reason == "agent_off"
        assert tail_policy(harness=harness, target_connected=False, caller_is_control=True).shown
