"""Control: rules the fourth mutation run (stop 34) found unpinned; docs/survivors/control.md names the
mutants each test kills (numbers are mutmut's ``x_<function>__mutmut_<n>``)."""

from __future__ import annotations

from typing import Any

import pytest

from connectcore import control as C


def _refusal(fn: Any, /, *args: Any, **kwargs: Any) -> tuple[str, str]:
    with pytest.raises(C.ActRefused) as info:
        fn(*args, **kwargs)
    return info.value.reason, str(info.value)


# --- the refusals' words: control (an agent) reads them as the answer to its call ---------------------


def test_a_second_control_is_refused_in_words() -> None:
    """may_start_control 9."""
    assert _refusal(C.may_start_control, 1) == (
        "control_running", "a control agent is already running; stop it before starting another"
    )


def test_bad_keys_are_refused_in_words_naming_every_allowed_key() -> None:
    """check_keys 9 (the empty list's words), 20 and 22 (the allowed keys listed, comma-separated)."""
    assert _refusal(C.check_keys, []) == ("bad_keys", "keys must be a non-empty list of named keys")
    allowed = "1, 2, 3, 4, 5, 6, 7, 8, 9, Down, Enter, Escape, Left, Right, Space, Tab, Up, n, y"
    assert _refusal(C.check_keys, ["Up", "C-c"]) == (
        "bad_key", f"keys[1] 'C-c' is not a named key (allowed: {allowed})"
    )


def test_eight_presses_are_allowed_nine_are_not() -> None:
    """At most MAX_KEYS presses: exactly 8 is one answer (kills check_keys 11, ``>`` -> ``>=``)."""
    assert C.check_keys(["Down"] * 7 + ["Enter"]) == ("Down",) * 7 + ("Enter",)
    assert _refusal(C.check_keys, ["Down"] * 9) == ("bad_keys", "9 keys: at most 8 presses answer one question")


def test_a_key_target_is_refused_in_words() -> None:
    """check_key_target 3 (a shell pane's words), 10, 15, 16 (no question's words)."""
    assert _refusal(C.check_key_target, recipient_kind="shell", question_fingerprint="q1") == (
        "not_an_agent", "send_keys presses keys only in agent panes, not a shell pane"
    )
    assert _refusal(C.check_key_target, recipient_kind="claude", question_fingerprint="") == (
        "no_question", "the pane shows no question or menu: there is nothing to answer"
    )


def test_shell_text_is_refused_in_words() -> None:
    """check_shell_text 5, 12, 17, 18, 21, 29: each refusal's words."""
    shell = C.check_shell_text
    assert _refusal(shell, recipient_kind="codex", text="ls") == (
        "not_a_shell", "shell_text types only into shell panes, not a codex pane"
    )
    assert _refusal(shell, recipient_kind="shell", text=" \t") == ("empty_text", "shell_text needs a command")
    assert _refusal(shell, recipient_kind="shell", text="x" * 4097) == ("too_long", "shell_text is at most 4096 bytes")
    assert _refusal(shell, recipient_kind="shell", text="ls\x07") == (
        "control_character", "shell_text holds a control character at offset 2 ('\\x07')"
    )


def test_shell_text_of_exactly_the_most_bytes_is_typed() -> None:
    """MAX_SHELL_TEXT bytes is allowed, one more is not, counted in UTF-8 bytes (kills check_shell_text 19,
    ``>`` -> ``>=``)."""
    most = "echo " + "é" * ((C.MAX_SHELL_TEXT - 5) // 2) + "x" * ((C.MAX_SHELL_TEXT - 5) % 2)
    assert len(most.encode("utf-8")) == C.MAX_SHELL_TEXT
    assert C.check_shell_text(recipient_kind="shell", text=most) == most
    assert _refusal(C.check_shell_text, recipient_kind="shell", text=most + "x")[0] == "too_long"


def test_an_act_that_is_not_an_act_or_lacks_its_question_is_refused_in_words() -> None:
    """propose 7 (not an act's words), 17, 22, 23 (no question's words)."""
    base: dict[str, Any] = {
        "act_id": "a1", "principal": "ctl", "pane_id": "%1", "incarnation": "i1", "shown": "", "args": {},
        "now": 0.0, "card_ttl": 60.0,
    }
    assert _refusal(C.propose, tool=C.Tool.MESSAGE, **base) == (
        "not_an_act", "message is tier 1: it is not an act with a card of its own"
    )
    assert _refusal(C.propose, tool=C.Tool.SEND_KEYS, question_fingerprint="", **base) == (
        "no_question", "send_keys needs the question the card shows"
    )


# --- check_act_args: every argument, every item, but the two with rules of their own ------------------


def test_every_argument_after_a_handoff_s_text_is_still_checked() -> None:
    """The handoff text is skipped (its own rule), not the end of the check: an argument after it with
    a control character is refused (kills check_act_args 6, ``continue`` -> ``break``: a hidden character in
    a later argument would reach the card)."""
    with pytest.raises(C.ActRefused) as info:
        C.check_act_args(C.Tool.HANDOFF, {"text": "hi", "cwd": "/tmp/\u202eevil"})
    assert info.value.reason == "control_character"
    assert str(info.value) == "handoff's cwd holds a control character at offset 5 ('\\u202e')"


def test_a_handoff_s_lines_and_send_keys_keys_are_left_to_their_own_rules() -> None:
    """A handoff's text may span lines (delivery.check_text's rule); send_keys' keys are judged by
    check_keys, which names the bad key (kills check_act_args 2, 3, 4, 5: the exempt names garbled)."""
    C.check_act_args(C.Tool.HANDOFF, {"text": "first line\nsecond line", "session_id": "s-1"})
    C.check_act_args(C.Tool.SEND_KEYS, {"keys": ["Escape", "\x1b"]})
    # other tools' text and keys are not exempt
    assert _refusal(C.check_act_args, C.Tool.LAUNCH_AGENT, {"text": "a\nb"})[0] == "control_character"
    assert _refusal(C.check_act_args, C.Tool.CLOSE_PANE, {"keys": ["\x1b"]})[0] == "control_character"


def test_each_item_of_a_list_argument_is_checked_and_other_values_pass() -> None:
    """A list or tuple argument's items are each checked, naming the offset in the item (kills
    check_act_args 7: items not looked at; 8: a string iterated as characters, giving offset 0, and a
    number not iterable); a value that is not text (a number) passes."""
    with pytest.raises(C.ActRefused) as info:
        C.check_act_args(C.Tool.LAUNCH_AGENT, {"argv": ["claude", "--x\u200b"], "cwd": "/srv"})
    assert str(info.value) == "launch_agent's argv holds a control character at offset 3 ('\\u200b')"
    with pytest.raises(C.ActRefused) as info:
        C.check_act_args(C.Tool.RESUME_SESSION, {"session_id": "ses_1\x1b[2J"})
    assert str(info.value) == "resume_session's session_id holds a control character at offset 5 ('\\x1b')"
    C.check_act_args(C.Tool.LAUNCH_AGENT, {"cwd": "/srv", "rows": 40, "argv": ("claude", "-c")})


# --- an act's record -------------------------------------------------------------------------------


def _shell_act(**more: Any) -> C.Act:
    return C.propose(
        act_id="a2", tool=C.Tool.SHELL_TEXT, principal="ctl", pane_id="%5", incarnation="inc-5",
        shown="git status", args={"text": "git status"}, now=100.0, card_ttl=60.0, **more,
    )


def test_an_act_records_when_it_was_proposed_and_no_question_unless_given() -> None:
    """created_at is the proposal's time (kills propose 32, 42); an act given no question holds none, and
    send_keys given none is refused (kills propose 1, the default ``""`` -> ``"XXXX"``)."""
    act = _shell_act()
    assert (act.created_at, act.expires_at, act.question_fingerprint) == (100.0, 160.0, "")
    with pytest.raises(C.ActRefused) as info:
        C.propose(
            act_id="a3", tool=C.Tool.SEND_KEYS, principal="ctl", pane_id="%3", incarnation="inc-3", shown="",
            args={"keys": ["Enter"]}, now=0.0, card_ttl=60.0,
        )
    assert info.value.reason == "no_question"


def test_a_step_without_detail_keeps_the_detail_and_only_a_final_step_sets_final_at() -> None:
    """advance 1 (the default detail ``""`` -> ``"XXXX"``), 9 (final_at set on every step)."""
    act = C.advance(_shell_act(), "approve", now=101.0)
    assert (act.detail, act.final_at) == ("", None)
    act = C.advance(act, "attempt", now=102.0, detail="guarding")
    act = C.advance(act, "guard_pass", now=103.0)
    assert (act.state, act.detail, act.final_at) == (C.ActState.EXECUTING, "guarding", None)
    done = C.advance(act, "executed", now=104.0)
    assert (done.state, done.detail, done.final_at) == (C.ActState.DONE, "guarding", 104.0)


def test_the_shell_guard_fails_closed_unless_told_the_prompt_is_empty() -> None:
    """A guard reading that does not say the shell waits at an empty prompt types nothing (kills guard 1,
    the default ``at_empty_prompt=False`` -> ``True``)."""
    act = C.advance(C.advance(_shell_act(), "approve", now=101.0), "attempt", now=102.0)
    assert C.guard(act, incarnation="inc-5", question_fingerprint=None) == "guard_stale"


# --- the card's question -------------------------------------------------------------------------


def test_the_card_names_the_first_option_highlighted_and_none_past_the_last() -> None:
    """Index 0 is an option (kills question_text 7, 8); an index one past the options is none read, not
    an IndexError (kills 9)."""
    assert C.question_text(("Proceed?", ("Yes", "No"), (), 0)) == "Proceed? [Yes / No] (highlighted: Yes)"
    assert C.question_text(("Proceed?", ("Yes", "No"), (), 2)) == "Proceed? [Yes / No] (highlighted: none read)"
    assert C.question_text(("Proceed?", ("Yes", "No"), (), -1)) == "Proceed? [Yes / No] (highlighted: none read)"


def test_a_question_without_a_subject_shows_no_about() -> None:
    """question_text 20, 21: no subject rows, nothing appended."""
    assert C.question_text(("Trust this folder?", ("Yes", "No"), (), None)) == (
        "Trust this folder? [Yes / No] (highlighted: none read)"
    )
