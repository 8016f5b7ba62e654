"""Control: the one orchestrator agent that holds the ``act`` scope, under risk tiers.

Rules (specification: shared/seeds/000, "Consent", "Scopes", "Build order" step 4; issue 13):

- At most one control runs at a time. It is started by the person (a structured launcher with
  ``--control``) and holds ``act`` plus the Collaborate scopes under its charter, without a grant.
  ``act`` is never grantable to any other agent (:func:`connectcore.grants.check_grantable`).
- Every tool control may call has a tier (``TOOL_TIER``, one table), and every tier one consent rule
  (``TIER_RULES``):

  ====  =====================================================  ==============================
  tier  tools                                                  consent
  ====  =====================================================  ==============================
  0     every read; ``resolve``                                at once, audited
  1     ``message`` to any agent pane, pure (Off) ones too     one-tap card unless the person
                                                               approved control for that pane
  2     ``send_keys``, ``launch_agent``, ``resume_session``,    a card every time, never
        ``handoff``                                            pair-approvable
  3     ``shell_text`` (text into a shell pane: it runs as a   a card every time showing the
        command), ``close_pane``, ``close_window``             exact text, never pair-approvable
  ====  =====================================================  ==============================

- Reach: control's message reaches every agent pane, the one exception to "both ends opt in"
  (:func:`connectcore.consent.may_receive`); a shell pane is reached only by ``shell_text``.
- ``send_keys`` presses only named keys (``NAMED_KEYS``), and only into an agent pane that shows a
  question or menu. The card shows that question; under the pane's send lock the guard checks that the
  same question is still on screen (its fingerprint) before anything is pressed: a stale question is
  never answered.
- ``launch_agent`` takes a preset at most the person's cap.
- A ``handoff`` to a session messages the live pane bound to that session; a session no live pane is
  bound to is resumed in a new window first, then messaged (:func:`handoff_pane`).
- An act's card expires like a message card; revocation of control or stopping control cancels every
  act not yet executed.

Tier 1 rides the delivery machine (:mod:`connectcore.delivery`, with provenance naming control); the
acts of tiers 2 and 3 are :class:`Act` values stepped through ``ACT_TABLE``.
"""

from __future__ import annotations

import hashlib
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from connectcore._machine import ConnectError, Table
from connectcore.consent import AGENT_KINDS
from connectcore.directory import PaneRecord
from connectcore.grants import PRESET_SCOPES, Preset
from connectcore.redact import redact


class Tool(StrEnum):
    READ = "read"  # list_agents, get_agent, find_sessions, get_session, whoami
    RESOLVE = "resolve"
    MESSAGE = "message"
    SEND_KEYS = "send_keys"
    LAUNCH_AGENT = "launch_agent"
    RESUME_SESSION = "resume_session"
    HANDOFF = "handoff"
    SHELL_TEXT = "shell_text"
    CLOSE_PANE = "close_pane"
    CLOSE_WINDOW = "close_window"


class Consent(StrEnum):
    AT_ONCE = "at_once"  # audited, no card
    CARD_UNLESS_PAIR = "card_unless_pair"  # a card unless the person approved control for the pane
    CARD_ALWAYS = "card_always"  # a card every time
    CARD_EXACT_TEXT = "card_exact_text"  # a card every time, showing the exact text to be typed


@dataclass(frozen=True)
class TierRule:
    consent: Consent
    pair_approvable: bool

    @property
    def needs_card(self) -> bool:
        return self.consent is not Consent.AT_ONCE


TIER_RULES: Mapping[int, TierRule] = MappingProxyType(
    {
        0: TierRule(Consent.AT_ONCE, pair_approvable=False),
        1: TierRule(Consent.CARD_UNLESS_PAIR, pair_approvable=True),
        2: TierRule(Consent.CARD_ALWAYS, pair_approvable=False),
        3: TierRule(Consent.CARD_EXACT_TEXT, pair_approvable=False),
    }
)

TOOL_TIER: Mapping[Tool, int] = MappingProxyType(
    {
        Tool.READ: 0,
        Tool.RESOLVE: 0,
        Tool.MESSAGE: 1,
        Tool.SEND_KEYS: 2,
        Tool.LAUNCH_AGENT: 2,
        Tool.RESUME_SESSION: 2,
        Tool.HANDOFF: 2,
        Tool.SHELL_TEXT: 3,
        Tool.CLOSE_PANE: 3,
        Tool.CLOSE_WINDOW: 3,
    }
)

# The keys send_keys may press, as tmux names them; nothing else is ever sent.
NAMED_KEYS: frozenset[str] = frozenset(
    {"Enter", "Escape", "Up", "Down", "Left", "Right", "Tab", "Space", "y", "n", *"123456789"}
)
MAX_KEYS = 8  # one answer to one question: a few presses at most
MAX_SHELL_TEXT = 4096


class ActRefused(ConnectError):
    """An act refused before anything is stored or shown: ``reason`` is the code to report."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def tier_of(tool: Tool) -> int:
    return TOOL_TIER[tool]


def rule_of(tool: Tool) -> TierRule:
    return TIER_RULES[TOOL_TIER[tool]]


def needs_card(tool: Tool, *, pair_approved: bool) -> bool:
    """Whether the person must tap before this act happens (a pair approval counts only in tier 1)."""
    rule = rule_of(tool)
    return rule.needs_card and not (rule.pair_approvable and pair_approved)


def may_start_control(running_controls: int) -> None:
    """At most one control at a time."""
    if running_controls > 0:
        raise ActRefused("control_running", "a control agent is already running; stop it before starting another")


def check_keys(keys: Sequence[str]) -> tuple[str, ...]:
    """The named keys to press, in order; anything else is refused naming the first bad key."""
    if isinstance(keys, str) or not keys:
        raise ActRefused("bad_keys", "keys must be a non-empty list of named keys")
    if len(keys) > MAX_KEYS:
        raise ActRefused("bad_keys", f"{len(keys)} keys: at most {MAX_KEYS} presses answer one question")
    for i, key in enumerate(keys):
        if key not in NAMED_KEYS:
            allowed = ", ".join(sorted(NAMED_KEYS))
            raise ActRefused("bad_key", f"keys[{i}] {key!r} is not a named key (allowed: {allowed})")
    return tuple(keys)


def check_key_target(*, recipient_kind: str, question_fingerprint: str | None) -> str:
    """send_keys only into an agent pane that shows a question or menu: the fingerprint of that question."""
    if recipient_kind not in AGENT_KINDS:
        raise ActRefused("not_an_agent", f"send_keys presses keys only in agent panes, not a {recipient_kind} pane")
    if not question_fingerprint:
        raise ActRefused("no_question", "the pane shows no question or menu: there is nothing to answer")
    return question_fingerprint




def check_act_args(tool: Tool, args: Mapping[str, Any]) -> None:
    """No act argument holds a control character (C0, DEL, C1) or an invisible format character (a bidi
    override, a zero-width character, a line separator): a card's text can never move the cursor,
    rewrite another card or read other than it is. A handoff's text (one message, several lines) and send_keys' keys have their own rules."""
    for name, value in args.items():
        if (tool, name) in ((Tool.HANDOFF, "text"), (Tool.SEND_KEYS, "keys")):
            continue  # their own rules: delivery.check_text, check_keys
        for item in value if isinstance(value, (list, tuple)) else (value,):
            if isinstance(item, str) and (at := _hidden_at(item)) is not None:
                raise ActRefused(
                    "control_character",
                    f"{tool.value}'s {name} holds a control character at offset {at} ({item[at]!r})",
                )


# Cc: C0, DEL, C1 (a terminal acts on these). Cf: bidi overrides and isolates, zero-width characters,
# the BOM. Zl, Zp: the line and paragraph separators. Each moves, reorders or hides what a card shows.
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp"})


def _hidden_at(text: str) -> int | None:
    """The offset of the first character of ``text`` that is not shown as itself, or None."""
    return next((i for i, ch in enumerate(text) if unicodedata.category(ch) in _HIDDEN_CATEGORIES), None)


def check_shell_text(*, recipient_kind: str, text: str) -> str:
    """Text for a shell pane: one printable command line (it runs as a command when Enter is pressed)."""
    if recipient_kind != "shell":
        raise ActRefused("not_a_shell", f"shell_text types only into shell panes, not a {recipient_kind} pane")
    if not text.strip():
        raise ActRefused("empty_text", "shell_text needs a command")
    if len(text.encode("utf-8")) > MAX_SHELL_TEXT:
        raise ActRefused("too_long", f"shell_text is at most {MAX_SHELL_TEXT} bytes")
    for i, ch in enumerate(text):
        if not ch.isprintable():
            raise ActRefused("control_character", f"shell_text holds a control character at offset {i} ({ch!r})")
    return text


def handoff_pane(bound: Mapping[tuple[str, str], PaneRecord], harness: str, session_id: str) -> str | None:
    """Where a hand-off to the session ``harness:session_id`` goes: the address of the live pane bound
    to it (``bound``: :func:`connectcore.directory.bound_sessions`), messaged as a hand-off to that
    pane; None: no pane is, so the hand-off resumes the session in a new window first."""
    record = bound.get((harness, session_id))
    return str(record.address) if record is not None else None


def check_launch_preset(preset: Preset, cap: Preset) -> Preset:
    """launch_agent's preset is at most the person's cap (Off is always allowed)."""
    if not PRESET_SCOPES[preset] <= PRESET_SCOPES[cap]:
        raise ActRefused("above_cap", f"preset {preset.value} is above the person's cap ({cap.value})")
    return preset


# --- the act machine (tiers 2 and 3) ------------------------------------------------------------------


class ActState(StrEnum):
    AWAITING_CONSENT = "awaiting_consent"
    APPROVED = "approved"  # the person tapped; waits for the guard under the pane's send lock
    GUARDING = "guarding"
    EXECUTING = "executing"  # the guard passed: the daemon is pressing, typing or opening (once)
    DONE = "done"
    STALE = "stale"  # the guard saw another screen than the card showed: nothing was pressed or typed
    FAILED = "failed"  # executing it failed (tmux); what happened is in the detail
    DECLINED = "declined"
    EXPIRED = "expired"
    CANCELLED = "cancelled"  # control revoked or stopped, the target gone


ACT_TABLE: Table[ActState] = Table(
    name="act",
    initial=ActState.AWAITING_CONSENT,
    finals=frozenset(
        {ActState.DONE, ActState.STALE, ActState.FAILED, ActState.DECLINED, ActState.EXPIRED, ActState.CANCELLED}
    ),
    edges=(
        (ActState.AWAITING_CONSENT, "approve", ActState.APPROVED),
        (ActState.AWAITING_CONSENT, "decline", ActState.DECLINED),
        (ActState.AWAITING_CONSENT, "expire", ActState.EXPIRED),
        (ActState.AWAITING_CONSENT, "cancel", ActState.CANCELLED),
        (ActState.APPROVED, "attempt", ActState.GUARDING),
        (ActState.APPROVED, "cancel", ActState.CANCELLED),
        (ActState.GUARDING, "guard_pass", ActState.EXECUTING),
        (ActState.GUARDING, "guard_stale", ActState.STALE),
        (ActState.GUARDING, "guard_gone", ActState.CANCELLED),
        (ActState.GUARDING, "cancel", ActState.CANCELLED),  # its guard's answer then runs nothing
        (ActState.GUARDING, "failed", ActState.FAILED),
        (ActState.EXECUTING, "executed", ActState.DONE),
        # executing failed, or the daemon stopped while executing: never run a second time
        (ActState.EXECUTING, "failed", ActState.FAILED),
    ),
)


@dataclass(frozen=True)
class Act:
    """One act of control that waits for a person (tiers 2 and 3). ``shown`` is what the card shows:
    exactly what will happen, on which pane."""

    id: str
    tool: Tool
    principal: str  # control's principal
    pane_id: str
    incarnation: str
    shown: str
    args: Mapping[str, Any] = field(default_factory=dict)
    question_fingerprint: str = ""  # send_keys: the question the card showed
    created_at: float = 0.0
    expires_at: float = 0.0
    state: ActState = ActState.AWAITING_CONSENT
    detail: str = ""
    final_at: float | None = None

    @property
    def tier(self) -> int:
        return tier_of(self.tool)

    @property
    def is_final(self) -> bool:
        return self.state in ACT_TABLE.finals


def propose(
    *, act_id: str, tool: Tool, principal: str, pane_id: str, incarnation: str, shown: str,
    args: Mapping[str, Any], question_fingerprint: str = "", now: float, card_ttl: float,
) -> Act:
    """A new act of tier 2 or 3, waiting on its card."""
    if not rule_of(tool).needs_card or rule_of(tool).pair_approvable:
        raise ActRefused("not_an_act", f"{tool.value} is tier {tier_of(tool)}: it is not an act with a card of its own")
    if tool is Tool.SEND_KEYS and not question_fingerprint:
        raise ActRefused("no_question", "send_keys needs the question the card shows")
    return Act(
        id=act_id, tool=tool, principal=principal, pane_id=pane_id, incarnation=incarnation, shown=shown,
        args=MappingProxyType(dict(args)), question_fingerprint=question_fingerprint,
        created_at=now, expires_at=now + card_ttl,
    )


def advance(act: Act, event: str, *, now: float, detail: str = "") -> Act:
    """Step an act through ACT_TABLE (``TransitionNotAllowed`` for an event its state does not allow)."""
    state = ACT_TABLE.next(act.state, event)
    final_at = now if state in ACT_TABLE.finals else act.final_at
    return replace(act, state=state, detail=detail or act.detail, final_at=final_at)


def guard(act: Act, *, incarnation: str | None, question_fingerprint: str | None,
          at_empty_prompt: bool = False) -> str:
    """The event for the guard's fresh reading under the send lock: the pane must be the same
    incarnation; for send_keys show the same question the card showed; for shell_text have the shell
    as its foreground process, waiting at its prompt with an empty command line (else the text would
    join a draft, or go to another program's stdin)."""
    if incarnation != act.incarnation:
        return "guard_gone"
    if act.tool is Tool.SEND_KEYS and question_fingerprint != act.question_fingerprint:
        return "guard_stale"
    if act.tool is Tool.SHELL_TEXT and not at_empty_prompt:
        return "guard_stale"
    return "guard_pass"


QuestionShown = tuple[str, tuple[str, ...], tuple[str, ...], int | None]
"""A dialog as the pane shows it: (prompt, options, subject rows, highlighted option's index)."""


def question_text(question: QuestionShown) -> str:
    """The dialog as the card shows it: the subject, the question and the options, the highlighted
    one marked, redacted like a screen tail (as text: the caller escapes it for its medium)."""
    prompt, options, subject, selected = question
    highlighted = options[selected] if selected is not None and 0 <= selected < len(options) else "none read"
    about = " | ".join(subject)
    return redact(f"{prompt} [{' / '.join(options)}] (highlighted: {highlighted})" + (f" about: {about}" if about else ""))


def question_fingerprint(prompt: str, options: Sequence[str], subject: Sequence[str] = (),
                         selected: int | None = None) -> str:
    """The fingerprint of a question as shown (prompt, options, the subject it asks about and the
    highlighted option): what the card shows and the guard compares, so a question that changed (was
    answered and replaced, asks about another command, or has another option highlighted) is never
    answered."""
    text = "\n".join([prompt.strip(), *(o.strip() for o in options), "\x00subject", *(r.strip() for r in subject),
                      "\x00selected", "" if selected is None else str(selected)])
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]
