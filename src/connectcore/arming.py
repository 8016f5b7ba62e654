"""Pane arming: when a pane may take the next message (specification 000, "Delivery").

A message goes in "only when the recipient appears to be waiting for input", at "the next idle
transition". The hub keeps one :class:`PaneView` per watched pane and moves it along :data:`TABLE`.

Rules:

- A *reading* is one look at the pane: ``ready`` (an agent pane, idle, composer empty), the screen's
  fingerprint, and ``read_at``, when it was read. Every reading that reaches the hub (the watcher's,
  the guard's, the confirmation's) carries its ``read_at``; a reading older than the newest one the
  view holds changes nothing: an older reading never overwrites a newer one.
- Not ready (a turn, a draft, a menu) is ``busy``. A ready reading after a busy one, or the first
  reading of a pane, is an idle transition: the pane is ``armed``. A ready pane stays armed while
  its screen changes; the guard decides whether the screen is still the one it saw.
- The guard uses the armed idle. Its fresh reading passes only when the view is armed on that same
  screen: the pane is ``typing``. A changed screen disarms it (``busy``: the next ready reading arms
  it again; the daemon reports the guard's reading as the pane's next one). A guard that may not type
  for another reason (the message's handle no longer resolves to this pane) leaves the idle ``used``:
  a busy reading, or the quiet rule, arms it again; an unchanged screen does not.
- While ``typing``, readings are kept (the newest wins) but arm nothing: the screen may show the
  daemon's own paste.
- When the typing is observed (delivered or unconfirmed), the newest reading decides, be it the
  confirming one or a watcher's read after it: not ready is ``busy`` (the turn, or a draft); ready on
  a screen other than the one typed into and the confirming one, or ready after a confirming reading
  that was not, is the next idle (``armed``); ready on the confirming screen when that reading shows
  the agent's answer below the typed message (``answered``) is the next idle too (``armed``);
  otherwise ``awaiting_turn``: the screen typed into and the confirming screen are stale, they are
  not the next idle (a turn too quick to be seen). In ``awaiting_turn`` a busy reading is the turn,
  and a ready reading on a screen that is not stale is the next idle.
- Why ``answered`` is sound: a ready confirming screen is stale because it may show the message
  submitted while the agent has not yet started its turn (no spinner yet): arming there could type
  the next message into the turn about to start. That screen shows nothing of the agent's below the
  message. ``answered`` (:mod:`connectcore.screen`, rule 6, from the confirmation's capture and the
  typed text's marker) needs a line of the agent's own output below the marker's last showing, in a
  place where the harness never draws the message itself, on a ready screen: the turn the message
  started has begun (the agent wrote) and ended (no busy marker, by the same reading every idle
  transition relies on). An unknown layout, no marker, or nothing below it: not answered, the rule above
  applies. Only the confirmation can tell it (the watcher does not know what was typed); a watcher's
  later reading of the same screen is the same answer. Not chosen: arming a confirming screen that
  stays unchanged for a while, or after the pane drew again. An agent may take any time to start its
  turn, and a redraw says nothing of whether it started, so both would arm the dangerous screen.
- After a restart: a pane a message was being typed into when the daemon stopped starts ``used``
  (:func:`typed_before_restart`), not unseen. The paste may have been submitted by the Enter the tmux
  server owed it, and the first look then shows the message submitted with the turn not yet started
  (the dangerous screen above); with no confirmation to tell it from the next idle, only a busy reading
  (the turn) and a ready one after it, or the quiet rule, arm the pane (seed 4469).
- Quiet: a pane whose newest reading is ready and that has not been armed for ``rearm_after``
  seconds since its view last changed phase (``awaiting_turn``, ``used``, or ``busy`` after a guard
  whose reading was not reported) is armed by the clock; the guard still rechecks it. So a pane that
  sits ready is never left unarmed for good.
- Quiet, awaited: while a consented message waits for the pane, the clock arms it after
  ``rearm_after`` even when its newest reading is not ready. That reading may be wrong: a reading is
  stamped before its capture runs, so under load a watcher's reading of the idle screen can carry an
  earlier ``read_at`` than a busy confirmation taken before it and be dropped as older (issue 25, the
  ten-daemon stall: messages stayed ``ready`` behind an idle pane). The watcher, told so (:func:`older`),
  reads the pane again at its next capture round; this rule is the bound if that look is lost too. The guard cannot pass on a reading that is not ready (:func:`guard_passes` needs the
  armed reading ready too); its fresh reading disarms the pane (``busy``) and, reported as the pane's
  next reading, arms it if the pane is idle. A pane that really is busy is looked at once per
  ``rearm_after`` while a message waits.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum

from connectcore._machine import Table


class Arming(StrEnum):
    UNSEEN = "unseen"  # no reading yet
    BUSY = "busy"  # not waiting for input (a turn, a draft, a menu), or disarmed by a changed screen
    ARMED = "armed"  # an idle transition waits to be used by the next message
    USED = "used"  # still idle, but its idle transition was used by a guard that did not type
    TYPING = "typing"  # a message is being typed and confirmed
    AWAITING_TURN = "awaiting_turn"  # typed; the turn it started has not been seen yet


_A = Arming
TABLE: Table[Arming] = Table(
    name="arming",
    initial=_A.UNSEEN,
    finals=frozenset(),
    edges=(
        (_A.UNSEEN, "busy", _A.BUSY),
        (_A.UNSEEN, "idle", _A.ARMED),
        (_A.BUSY, "busy", _A.BUSY),
        (_A.BUSY, "idle", _A.ARMED),
        (_A.BUSY, "quiet", _A.ARMED),
        (_A.BUSY, "guard_wait", _A.BUSY),
        (_A.BUSY, "guard_hold", _A.BUSY),
        (_A.ARMED, "busy", _A.BUSY),
        (_A.ARMED, "idle", _A.ARMED),
        (_A.ARMED, "guard_pass", _A.TYPING),
        (_A.ARMED, "guard_wait", _A.BUSY),
        (_A.ARMED, "guard_hold", _A.USED),
        (_A.USED, "busy", _A.BUSY),
        (_A.USED, "idle", _A.USED),
        (_A.USED, "quiet", _A.ARMED),
        (_A.USED, "guard_wait", _A.BUSY),
        (_A.USED, "guard_hold", _A.USED),
        (_A.TYPING, "busy", _A.TYPING),
        (_A.TYPING, "idle", _A.TYPING),
        (_A.TYPING, "stale_idle", _A.TYPING),
        (_A.TYPING, "typed", _A.AWAITING_TURN),
        (_A.TYPING, "typed_busy", _A.BUSY),
        (_A.TYPING, "typed_idle", _A.ARMED),
        (_A.TYPING, "typed_answered", _A.ARMED),
        (_A.AWAITING_TURN, "busy", _A.BUSY),
        (_A.AWAITING_TURN, "idle", _A.ARMED),
        (_A.AWAITING_TURN, "stale_idle", _A.AWAITING_TURN),
        (_A.AWAITING_TURN, "quiet", _A.ARMED),
        (_A.AWAITING_TURN, "guard_wait", _A.BUSY),
        (_A.AWAITING_TURN, "guard_hold", _A.AWAITING_TURN),
    ),
)

QUIET = frozenset({_A.BUSY, _A.USED, _A.AWAITING_TURN})  # where the clock may arm a ready pane
_KEEPS_STALE = frozenset({_A.TYPING, _A.AWAITING_TURN})


@dataclass(frozen=True)
class Seen:
    """One reading of a pane."""

    ready: bool  # an agent pane, idle, composer empty
    fingerprint: str
    read_at: float  # when it was read (the daemon's clock, before the step)
    answered: bool = False  # ready, and the agent's answer shows below the typed message (confirmation only)


@dataclass(frozen=True)
class PaneView:
    """What the hub holds of a pane: its arming, and the newest reading it heard."""

    incarnation: str
    arming: Arming
    seen: Seen
    since: float  # when ``arming`` last changed
    stale: tuple[str, ...] = ()  # screens that are not the next idle (typing, awaiting the turn)

    @property
    def armed(self) -> bool:
        return self.arming is Arming.ARMED

    @property
    def ready(self) -> bool:
        return self.seen.ready

    @property
    def fingerprint(self) -> str:
        return self.seen.fingerprint


def _move(view: PaneView, event: str, seen: Seen, now: float, stale: tuple[str, ...] | None = None) -> PaneView:
    arming = TABLE.next(view.arming, event)
    newest = seen if seen.read_at >= view.seen.read_at else view.seen
    kept = view.stale if stale is None else stale
    return replace(
        view,
        arming=arming,
        seen=newest,
        since=now if arming is not view.arming else view.since,
        stale=kept if arming in _KEEPS_STALE else (),
    )


def _reading_event(view: PaneView, seen: Seen) -> str:
    if not seen.ready:
        return "busy"
    return "stale_idle" if seen.fingerprint in view.stale else "idle"


def first(incarnation: str, seen: Seen, now: float) -> PaneView:
    """The view of a pane at its first reading."""
    unseen = PaneView(incarnation, Arming.UNSEEN, Seen(False, "", float("-inf")), now)
    return observe(unseen, seen, now)


def typed_before_restart(incarnation: str, now: float) -> PaneView:
    """The view, at a daemon's start, of a pane a message was being typed into when it stopped: its
    idle was used by that typing; no reading yet."""
    return PaneView(incarnation, Arming.USED, Seen(False, "", float("-inf")), now)


def older(view: PaneView | None, incarnation: str, read_at: float) -> bool:
    """A reading of ``incarnation`` read at ``read_at`` is older than the newest one the view holds: it
    changes nothing (:func:`observe`). The watcher, told so of a reading it reported, reads the pane
    again at its next capture round instead of taking that screen as told: the screen may be the
    pane's newest after all (its capture ran after the newer reading was taken), and the pane may draw
    nothing more."""
    return view is not None and view.incarnation == incarnation and read_at < view.seen.read_at


def observe(view: PaneView, seen: Seen, now: float) -> PaneView:
    """A reading of the pane (the watcher's, or the guard's once reported)."""
    if older(view, view.incarnation, seen.read_at):
        return view  # read before the newest reading: it arrived late and says nothing new
    return _move(view, _reading_event(view, seen), seen, now)


def guard_passes(view: PaneView | None, incarnation: str | None, seen: Seen) -> bool:
    """The guard's fresh reading shows the armed idle screen, of the same incarnation."""
    return (
        view is not None
        and view.arming is Arming.ARMED
        and view.incarnation == incarnation
        and view.seen.ready
        and seen.ready
        and seen.fingerprint == view.seen.fingerprint
    )


def typing(view: PaneView, seen: Seen, now: float) -> PaneView:
    """The guard passed: typing starts on the screen it saw."""
    return _move(view, "guard_pass", seen, now, stale=(view.seen.fingerprint,))


def guard_wait(view: PaneView, seen: Seen, now: float) -> PaneView:
    """The guard saw the screen change: disarmed until the next ready reading."""
    return _move(view, "guard_wait", seen, now)


def guard_hold(view: PaneView, seen: Seen, now: float) -> PaneView:
    """The guard may not type for a reason other than the screen: this idle is used."""
    return _move(view, "guard_hold", seen, now)


def typed(view: PaneView, confirming: Seen | None, now: float) -> PaneView:
    """The typing was observed (delivered or unconfirmed); ``confirming`` is its last reading."""
    stale = view.stale
    newest = view.seen
    confirmation_newest = confirming is not None and confirming.read_at >= view.seen.read_at
    if confirming is not None:
        if confirming.ready:
            stale = (*stale, confirming.fingerprint)
        if confirmation_newest:
            newest = confirming
    if not newest.ready:
        event = "typed_busy"
    elif confirming is not None and not confirming.ready:
        event = "typed_idle"  # the confirmation saw the pane not ready, and a ready reading came after
    elif newest.fingerprint not in stale:
        event = "typed_idle"
    elif confirming is not None and confirming.answered and newest.fingerprint == confirming.fingerprint:
        event = "typed_answered"  # the confirming screen shows the turn it started, ended
    else:
        event = "typed"
    return _move(view, event, newest, now, stale=stale)


def quiet(view: PaneView, now: float, rearm_after: float, *, awaited: bool = False) -> PaneView | None:
    """The view armed by the clock, or None when the quiet rule does not apply. ``awaited``: a
    consented message waits for this pane; then a view whose newest reading is not ready is armed
    too, so that the guard looks afresh (it cannot pass on that reading: :func:`guard_passes`)."""
    if view.arming in QUIET and (view.seen.ready or awaited) and now - view.since >= rearm_after:
        return _move(view, "quiet", view.seen, now)
    return None


__all__ = [
    "TABLE",
    "Arming",
    "PaneView",
    "Seen",
    "first",
    "guard_hold",
    "guard_passes",
    "guard_wait",
    "observe",
    "quiet",
    "typed",
    "typed_before_restart",
    "typing",
]
