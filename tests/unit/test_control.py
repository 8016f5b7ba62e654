"""Control's tiers, keys and input rules (connectcore.control): each rule, and each refusal naming its problem."""

from __future__ import annotations

import pytest

from connectcore import control as C
from connectcore import directory as D
from connectcore._machine import TransitionNotAllowed
from connectcore.directory import EvidenceSource
from connectcore.grants import Preset
from tests.unit.test_directory import claim, fleet, obs


def test_every_tool_has_exactly_one_tier_and_every_tier_one_rule() -> None:
    """Claim: the tier table covers every tool, and every tier used has a consent rule."""
    assert set(C.TOOL_TIER) == set(C.Tool)
    assert set(C.TOOL_TIER.values()) == set(C.TIER_RULES) == {0, 1, 2, 3}


@pytest.mark.parametrize(
    ("tool", "pair_approved", "card"),
    [
        (C.Tool.READ, False, False),
        (C.Tool.RESOLVE, False, False),
        (C.Tool.MESSAGE, False, True),
        (C.Tool.MESSAGE, True, False),  # tier 1: a pair approval spares the tap
        (C.Tool.SEND_KEYS, True, True),  # tier 2: never pair-approvable
        (C.Tool.LAUNCH_AGENT, True, True),
        (C.Tool.RESUME_SESSION, True, True),
        (C.Tool.HANDOFF, True, True),
        (C.Tool.SHELL_TEXT, True, True),  # tier 3: a card every time
        (C.Tool.CLOSE_PANE, True, True),
        (C.Tool.CLOSE_WINDOW, True, True),
    ],
)
def test_which_acts_need_a_card(tool: C.Tool, pair_approved: bool, card: bool) -> None:
    assert C.needs_card(tool, pair_approved=pair_approved) is card


def test_tier_three_shows_the_exact_text() -> None:
    assert C.rule_of(C.Tool.SHELL_TEXT).consent is C.Consent.CARD_EXACT_TEXT
    assert C.rule_of(C.Tool.SEND_KEYS).consent is C.Consent.CARD_ALWAYS


def test_at_most_one_control() -> None:
    C.may_start_control(0)
    with pytest.raises(C.ActRefused, match="already running") as info:
        C.may_start_control(1)
    assert info.value.reason == "control_running"


def test_named_keys_only() -> None:
    assert C.check_keys(["Down", "Enter"]) == ("Down", "Enter")
    assert C.check_keys(["1"]) == ("1",)


@pytest.mark.parametrize(
    ("keys", "reason", "names"),
    [
        ([], "bad_keys", "non-empty"),
        ("Enter", "bad_keys", "list"),
        (["Enter", "C-c"], "bad_key", "keys[1] 'C-c'"),
        (["0"], "bad_key", "keys[0] '0'"),
        (["ls\r"], "bad_key", "keys[0]"),
        (["Y"], "bad_key", "keys[0] 'Y'"),
        (["Enter"] * 9, "bad_keys", "9 keys"),
    ],
)
def test_other_keys_are_refused_naming_the_key(keys: list[str], reason: str, names: str) -> None:
    with pytest.raises(C.ActRefused) as info:
        C.check_keys(keys)
    assert info.value.reason == reason
    assert names in str(info.value)


def test_keys_only_into_an_agent_pane_that_shows_a_question() -> None:
    assert C.check_key_target(recipient_kind="codex", question_fingerprint="q1") == "q1"
    with pytest.raises(C.ActRefused) as info:
        C.check_key_target(recipient_kind="codex", question_fingerprint=None)
    assert info.value.reason == "no_question"
    with pytest.raises(C.ActRefused) as info:
        C.check_key_target(recipient_kind="shell", question_fingerprint="q1")
    assert info.value.reason == "not_an_agent"


def test_shell_text_is_one_printable_command_for_a_shell_pane() -> None:
    assert C.check_shell_text(recipient_kind="shell", text="git status") == "git status"
    for kind, text, reason in [
        ("claude", "git status", "not_a_shell"),
        ("shell", "   ", "empty_text"),
        ("shell", "ls\nrm -rf /", "control_character"),
        ("shell", "ls\x1b[A", "control_character"),
        ("shell", "x" * 5000, "too_long"),
    ]:
        with pytest.raises(C.ActRefused) as info:
            C.check_shell_text(recipient_kind=kind, text=text)
        assert info.value.reason == reason, (kind, text)


def test_launch_preset_at_most_the_cap() -> None:
    assert C.check_launch_preset(Preset.OBSERVE, Preset.COLLABORATE) is Preset.OBSERVE
    assert C.check_launch_preset(Preset.OFF, Preset.OFF) is Preset.OFF
    with pytest.raises(C.ActRefused, match="above the person's cap") as info:
        C.check_launch_preset(Preset.COLLABORATE, Preset.OBSERVE)
    assert info.value.reason == "above_cap"


def _keys_act(fingerprint: str = "q1") -> C.Act:
    return C.propose(
        act_id="a1", tool=C.Tool.SEND_KEYS, principal="ctl", pane_id="%3", incarnation="inc-3",
        shown="Allow the connect MCP server to run tool list_agents? -> Enter", args={"keys": ("Enter",)},
        question_fingerprint=fingerprint, now=10.0, card_ttl=900.0,
    )


def test_an_act_waits_for_its_card_and_expires_like_a_message_card() -> None:
    act = _keys_act()
    assert act.state is C.ActState.AWAITING_CONSENT and act.expires_at == 910.0 and act.tier == 2
    with pytest.raises(TransitionNotAllowed):
        C.advance(act, "attempt", now=11.0)  # nothing runs before the person taps
    expired = C.advance(act, "expire", now=910.0)
    assert expired.is_final and expired.final_at == 910.0


def test_reads_and_messages_are_not_acts_with_cards_of_their_own() -> None:
    for tool in (C.Tool.READ, C.Tool.RESOLVE, C.Tool.MESSAGE):
        with pytest.raises(C.ActRefused) as info:
            C.propose(act_id="a", tool=tool, principal="c", pane_id="%1", incarnation="i", shown="", args={}, now=0, card_ttl=1)
        assert info.value.reason == "not_an_act"


def test_send_keys_needs_the_question_its_card_shows() -> None:
    with pytest.raises(C.ActRefused) as info:
        _keys_act(fingerprint="")
    assert info.value.reason == "no_question"


def test_the_guard_never_answers_a_stale_question() -> None:
    act = C.advance(C.advance(_keys_act("q1"), "approve", now=11.0), "attempt", now=12.0)
    assert C.guard(act, incarnation="inc-3", question_fingerprint="q1") == "guard_pass"
    assert C.guard(act, incarnation="inc-3", question_fingerprint="q2") == "guard_stale"
    assert C.guard(act, incarnation="inc-3", question_fingerprint=None) == "guard_stale"
    assert C.guard(act, incarnation="inc-4", question_fingerprint="q1") == "guard_gone"
    assert C.advance(act, "guard_stale", now=13.0).state is C.ActState.STALE


def test_a_shell_act_checks_the_incarnation_and_the_empty_prompt() -> None:
    act = C.propose(
        act_id="a2", tool=C.Tool.SHELL_TEXT, principal="ctl", pane_id="%5", incarnation="inc-5",
        shown="git status", args={"text": "git status"}, now=0.0, card_ttl=60.0,
    )
    act = C.advance(C.advance(act, "approve", now=1.0), "attempt", now=2.0)
    assert C.guard(act, incarnation="inc-5", question_fingerprint=None, at_empty_prompt=True) == "guard_pass"
    assert C.guard(act, incarnation="inc-5", question_fingerprint=None, at_empty_prompt=False) == "guard_stale"
    assert C.guard(act, incarnation="inc-6", question_fingerprint=None, at_empty_prompt=True) == "guard_gone"


def test_the_card_s_question_text_shows_subject_and_highlight_redacted() -> None:
    """The card names the highlighted option and the subject, with connect credentials redacted."""
    text = C.question_text(("Do you want to proceed?", ("Yes", "No"), ("Bash command", "echo harmless"), 1))
    assert text == "Do you want to proceed? [Yes / No] (highlighted: No) about: Bash command | echo harmless"
    token = "cx_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    shown = C.question_text(("Proceed?", ("Yes",), (f"curl -H 'Authorization: Bearer {token}'",), None))
    assert "(highlighted: none read)" in shown and token not in shown and "[redacted bearer token]" in shown


def test_a_handoff_to_a_session_messages_its_bound_pane_else_resumes_it_in_a_new_window() -> None:
    """Claim: a hand-off to ``harness:session`` goes to the live pane bound to that session (its
    address); a session no pane is bound to (none, or two panes claiming it) is resumed instead
    (issue 24: was an `if` in connectd/control/act_calls.py)."""
    d = fleet(obs(1, harness="claude"), obs(2, harness="claude"), obs(3, harness="codex"))
    d = claim(d, 1, EvidenceSource.REGISTRY, "s-1")
    bound = D.bound_sessions(d)
    assert C.handoff_pane(bound, "claude", "s-1") == str(d.panes["%1"].address)
    assert C.handoff_pane(bound, "claude", "s-2") is None  # no pane holds it: resume
    assert C.handoff_pane(bound, "codex", "s-1") is None  # the same id under another harness
    both = D.bound_sessions(claim(d, 2, EvidenceSource.REGISTRY, "s-1"))
    assert C.handoff_pane(both, "claude", "s-1") is None  # two panes claim it: neither is bound
    assert C.handoff_pane({}, "claude", "s-1") is None
