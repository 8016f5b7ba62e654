"""What of a pane's screen an agent may read, and the credentials cut out of whatever it reads.

Rules (specification: shared/seeds/000, "Scopes" (read: the fleet directory and pane detail, limited
to the panes the human sees) and "Default: pure"; issue 11, item 1):

- A screen tail is shown only for an *agent* pane (claude, codex, opencode). A shell pane, or a pane
  whose program is not recognised, never has its text shown: a shell is where the person runs
  ``connectd serve`` and ``connectd token``, and where their login codes, tokens and commands sit.
- An agent that is Off (holds no scope) has not opted in: its screen is withheld from every reader
  but control, whose act scope reaches every agent pane, pure ones included. Its reading (idle,
  busy, dialog, draft) is still given; only the text is withheld.
- Every tail that is shown has anything that looks like a connect credential cut out first: agent
  tokens (``ct_...``), login codes (``cl_...``, and any ``code=`` value of a login URL), owner tokens
  (``co_...``), ``Bearer`` values, and bare 43-character URL-safe runs of mixed case and digits (the
  shape of an unprefixed 256-bit secret: older owner tokens and the tunnel secret). The redaction
  names what it removed, so a reader sees that something was there.

Pure functions: no I/O, no clock.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: Harnesses whose panes are agents (the screen reader's names).
AGENT_PANE_HARNESSES: frozenset[str] = frozenset({"claude", "codex", "opencode"})

#: How a credential of each kind is minted (the daemon's own prefixes).
AGENT_TOKEN_PREFIX = "ct_"
LOGIN_CODE_PREFIX = "cl_"
OWNER_TOKEN_PREFIX = "co_"

REDACTED = "[redacted {kind}]"

_URLSAFE = r"[A-Za-z0-9_-]"
#: A credential's characters, which may run on over a screen line the terminal wrapped.
_RUN = r"(?:[A-Za-z0-9_-]|\n(?=[A-Za-z0-9_-]))"
#: (kind, pattern) in the order they are applied; each match is replaced by ``[redacted <kind>]``.
_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("login code", re.compile(rf"(?<=code=){_RUN}{{8,64}}")),
    ("bearer token", re.compile(r"(?<=Bearer )[ \t]*[^\s\"']{8,}", re.IGNORECASE)),
    ("agent token", re.compile(rf"(?<!{_URLSAFE}){AGENT_TOKEN_PREFIX}{_RUN}{{16,64}}")),
    ("login code", re.compile(rf"(?<!{_URLSAFE}){LOGIN_CODE_PREFIX}{_RUN}{{16,64}}")),
    ("owner token", re.compile(rf"(?<!{_URLSAFE}){OWNER_TOKEN_PREFIX}{_RUN}{{16,64}}")),
    ("secret", re.compile(rf"(?<!{_URLSAFE}){_URLSAFE}{{43}}(?!{_URLSAFE})")),
)


def _looks_random(run: str) -> bool:
    """A bare run is a secret only with upper case, lower case and digits (not a word, not hex)."""
    return any(c.isupper() for c in run) and any(c.islower() for c in run) and any(c.isdigit() for c in run)


def _replace(match: re.Match[str], label: str) -> str:
    """The label in place of the credential; a piece wrapped onto later lines becomes ``[...]``, so
    the screen keeps its lines."""
    pieces = match.group(0).split("\n")
    return "\n".join([label, *("[...]" for _ in pieces[1:])])


def redact(text: str) -> str:
    """``text`` with every connect credential in it replaced by ``[redacted <kind>]``."""
    for kind, pattern in _PATTERNS:
        label = REDACTED.format(kind=kind)

        def substitute(match: re.Match[str], label: str = label, kind: str = kind) -> str:
            if kind == "secret":
                return label if _looks_random(match.group(0)) else match.group(0)
            return _replace(match, label)

        text = pattern.sub(substitute, text)
    return text


@dataclass(frozen=True)
class TailPolicy:
    """Whether a tail is shown, and why not when it is withheld."""

    shown: bool
    reason: str = ""  # "shell_pane", "not_an_agent", "agent_off" when withheld


def tail_policy(*, harness: str, target_connected: bool, caller_is_control: bool) -> TailPolicy:
    """May a reader see the screen text of a pane running ``harness``?

    ``target_connected``: the pane's agent holds any scope (is not Off). ``caller_is_control``: the
    reader holds control's act scope.
    """
    if harness == "shell":
        return TailPolicy(False, "shell_pane")
    if harness not in AGENT_PANE_HARNESSES:
        return TailPolicy(False, "not_an_agent")
    if not target_connected and not caller_is_control:
        return TailPolicy(False, "agent_off")
    return TailPolicy(True)


WITHHELD_WORDS: dict[str, str] = {
    "shell_pane": "a shell pane's text is never shown to agents",
    "not_an_agent": "this pane runs no recognised agent, so its text is not shown to agents",
    "agent_off": "this agent is Off (it has not opted in), so its screen is not shown",
}


def screen_tail(text: str, lines: int) -> str:
    """The last ``lines`` lines of a captured screen, trailing blank lines dropped, redacted."""
    if lines <= 0:
        return ""
    rows = text.rstrip("\n").split("\n")
    return redact("\n".join(rows[-lines:]))
