"""Effects: what must happen, as plain data the daemon executes in order.

The core never performs I/O. A ``step`` returns its new state and a tuple of these values; the
daemon's engine runs them in the order given (a :class:`Persist` before the :class:`TypeText` that
follows it is committed before the first byte is pasted) and feeds any observation back in as an
event. Every effect is a frozen dataclass with only plain values inside, so effects compare, hash
and replay.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Effect:
    """Base class, so the daemon can dispatch on type."""


@dataclass(frozen=True)
class Persist(Effect):
    """Write one record durably before any later effect runs.

    ``kind`` names the store table (``message``, ``card``, ``principal``, ``restart`` ...), ``key``
    its primary key and ``record`` the frozen value to store (``None`` deletes it).
    """

    kind: str
    key: tuple[Any, ...]
    record: Any


@dataclass(frozen=True)
class Audit(Effect):
    """One audit line. ``actor`` is named as :func:`connectcore.grants.actor_name` names it."""

    actor: str
    action: str
    outcome: str
    scope: str | None = None
    target: str | None = None
    message_id: str | None = None
    detail: str = ""
    at: float = 0.0


@dataclass(frozen=True)
class Notify(Effect):
    """Tell listeners something changed: the owner page's event stream, a sender's long poll.

    ``topic`` is ``card``, ``message``, ``grant``, ``restart`` ...; ``principal`` names whose waits
    this wakes (``None``: only the owner's stream).
    """

    topic: str
    key: tuple[Any, ...] = ()
    principal: str | None = None
    payload: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CheckGuard(Effect):
    """Ask the daemon to take ``pane_id``'s send lock, read the pane afresh and answer with the
    delivery machine's ``GuardObserved`` event while still holding the lock."""

    pane_id: str
    incarnation: str
    message: tuple[str, str]


@dataclass(frozen=True)
class TypeText(Effect):
    """Paste ``text`` literally into the pane (bracketed paste; newlines stay inside the turn).

    With ``submit``, the paste's Enter is owed from the paste on, as part of the same operation: the
    tmux server presses it ``settle`` seconds later (:data:`connectcore.delivery.SUBMIT_SETTLE`) unless
    the daemon pressed it first, as soon as the composer showed the paste
    (:func:`connectcore.delivery.paste_shown`); exactly one Enter, and nothing the daemon does or fails
    to do after the paste can leave the text unsubmitted (a message is typed this way)."""

    pane_id: str
    incarnation: str
    text: str
    message: tuple[str, str] | None = None
    submit: bool = False
    settle: float = 0.4


@dataclass(frozen=True)
class ConfirmTyping(Effect):
    """Ask the daemon to re-read the pane after typing and answer with ``TypingObserved``. With
    ``failure`` (typing failed partway: the guard that ran it failed), one last look only, answered
    with that failure (the outcome is unconfirmed; the look tells whether a draft was left)."""

    pane_id: str
    incarnation: str
    message: tuple[str, str]
    failure: str = ""


@dataclass(frozen=True)
class SetPaneOption(Effect):
    """Set (or with ``value=None`` unset) a tmux pane option such as ``remain-on-exit``."""

    pane_id: str
    option: str
    value: str | None


@dataclass(frozen=True)
class ExitAgent(Effect):
    """Ask the agent to quit through its own exit command (``/exit``), so it flushes its transcript."""

    pane_id: str
    command: str


@dataclass(frozen=True)
class Respawn(Effect):
    """``respawn-pane`` the same pane with ``argv`` in ``cwd`` under ``env``."""

    pane_id: str
    argv: tuple[str, ...]
    cwd: str
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class EndSubscriptions(Effect):
    """Close every open long poll and subscription held by ``principal`` (revocation)."""

    principal: str


# --- control's acts (connectcore.hub.acts) -----------------------------------------------------------
# Each names its act; the daemon answers every one of them with ``ActExecuted`` (or, for the guard,
# ``ActGuarded``). The pane effects come out of the guard's step, taken under the pane's send lock.


@dataclass(frozen=True)
class CheckActGuard(Effect):
    """Take ``pane_id``'s send lock (none for an act that opens a window), read the pane afresh and
    answer ``ActGuarded`` while holding it."""

    act: str
    pane_id: str
    incarnation: str


@dataclass(frozen=True)
class PressKeys(Effect):
    """Press these named keys (tmux key names, already checked by the core), in order."""

    act: str
    pane_id: str
    incarnation: str
    keys: tuple[str, ...]


@dataclass(frozen=True)
class TypeShellText(Effect):
    """Type one command line literally into a shell pane and press Enter (it runs as a command)."""

    act: str
    pane_id: str
    incarnation: str
    text: str


@dataclass(frozen=True)
class OpenWindow(Effect):
    """Open a new window running the structured ``launcher`` in ``cwd`` (with ``session``: resumed
    onto that session with the launcher's resume argv), connected at ``preset``."""

    act: str
    launcher: str
    cwd: str
    preset: str
    session: str | None = None
    handoff: str = ""  # the text control sends the new pane once it runs (a handoff), if any


@dataclass(frozen=True)
class ClosePane(Effect):
    """Kill the pane (and its process)."""

    act: str
    pane_id: str
    incarnation: str


@dataclass(frozen=True)
class HandOff(Effect):
    """Control's message to a live pane, approved on the act's card: the daemon submits it through
    the delivery machine (``Submit`` with ``act`` set)."""

    act: str
    pane_id: str
    incarnation: str
    text: str
