"""Restart-to-connect: relaunch a running agent onto the same conversation, this time connected.

Rules (specification: shared/seeds/000, "On a running agent, connecting means relaunching ..."):

R1  Never mid-turn, never over a draft. The agent is asked to exit only on an observation that shows
    the planned incarnation waiting for input with an empty composer, taken afresh after remain-on-exit
    is set, right before the exit command. Busy or drafting: keep waiting, until the idle deadline.
R2  Persist before touching. The restart record (pane, incarnation, original remain-on-exit, harness,
    session, launcher, exit command, resume argv, cwd, environment names) is persisted before the first
    effect that touches the pane, and again at every later step that touches it.
R3  The sequence: set remain-on-exit on; send the harness's own exit command; wait for the process to
    end; respawn the same pane with the resume argv in the indexed cwd under the launcher's environment
    plus the injection; confirm a new incarnation runs; restore the original option; close the record.
R4  Recovery. A timeout or failed step once the record is persisted, the planned agent changing under
    the machine, or a daemon restart finding an open record all take one path: inspect the pane. A dead
    pane is respawned as planned, a live pane is left alone, and either way the original option is
    restored and the record closed. A live pane left alone after the exit command was typed may hold
    that command unsent in its composer (:func:`left_exit_command`): the hub tells the person. A
    pane that is gone: the record is closed, nothing to restore. One
    exception: a record found at startup in ``exit_sent`` whose agent still runs was asked to exit, and
    may be exiting (the Enter the tmux server owed the exit command came after the daemon died): the
    machine waits for it to end, once, within the exit deadline, instead of restoring the option under
    an agent about to exit (which would close its pane for good; found by the simulation).
R5  Bounded. Every wait has a deadline (:class:`RestartLimits`). Before the record is persisted,
    giving up (timeout, owner cancel, agent changed, pane unreadable) touches nothing. A cancel while
    rechecking (the option is already on) takes the recovery path; later it is refused. After it, each
    entry into recovery is counted, and past ``limits.recoveries`` the machine gives up the restart,
    loudly, but never the option ("no pane keeps the temporary option", shared/seeds/000): it respawns
    nothing more and puts the pane's own remain-on-exit back (``giving_up``); a restore that fails is
    tried again every ``limits.retry_restore`` seconds (``retry_restore``), the owner told once with
    the tmux command that does it by hand (:func:`restore_command`), and the record closes ``gave_up``
    only once the option is restored (or the pane is gone). Found by the simulation (seed 4030): a
    machine that closed with the option on left the pane dead when its agent later exited.
R6  The hub (:mod:`connectcore.hub`) owns the connect: it feeds :class:`Cancel` when the agent's grant
    changes, marks the record ``connect_withdrawn`` (persisted), and gives the respawned process a token
    only with the grant stored then. This machine only carries the mark.
R7  The core invents nothing: ids, time, incarnations and the token-carrying environment arrive as
    values. Environment values are never persisted, only their names.

The daemon's engine runs each step's effects in order and answers: :class:`StepDone` once the effects
of a step in :data:`AWAITING_DONE` all ran (:class:`StepFailed` if one failed; it runs no later effect
of that step), :class:`PaneObserved` while the step is in :data:`OBSERVING`, :class:`Recover` while it
is :attr:`RestartStep.RECOVERING` (or for a record found open at startup), :class:`Timeout` once
``state.deadline`` passes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import PurePosixPath
from typing import Any

from connectcore import advice as A
from connectcore import directory as D
from connectcore import launchers as L
from connectcore._machine import ConnectError, Table
from connectcore.effects import Audit, Effect, ExitAgent, Notify, Persist, Respawn, SetPaneOption

# --------------------------------------------------------------------------------------------------
# Rules as data
# --------------------------------------------------------------------------------------------------


class RestartStep(StrEnum):
    PLANNED = "planned"  # the card was approved; nothing observed, nothing touched
    WAITING_IDLE = "waiting_idle"  # waiting for idle with an empty composer; nothing touched
    RECORD_PERSISTED = "record_persisted"  # Persist(record) issued; awaits StepDone
    REMAIN_ON_EXIT_SET = "remain_on_exit_set"  # SetPaneOption(on) issued; awaits StepDone
    RECHECKING_IDLE = "rechecking_idle"  # awaits a fresh idle-and-empty observation before the exit
    EXIT_SENT = "exit_sent"  # ExitAgent issued; awaits an observation of the process ended
    PROCESS_ENDED = "process_ended"  # Respawn issued; awaits StepDone
    RESPAWNED = "respawned"  # awaits an observation of a new incarnation running
    OPTION_RESTORED = "option_restored"  # SetPaneOption(original) issued; awaits StepDone
    GIVING_UP = "giving_up"  # past limits.recoveries: SetPaneOption(original) issued; awaits StepDone
    RETRY_RESTORE = "retry_restore"  # that restore failed: at its deadline the pane is inspected again
    RECOVERING = "recovering"  # InspectPane issued; awaits Recover
    CLOSED = "closed"  # the record is closed (final)
    CANCELLED = "cancelled"  # ended before anything was persisted or touched (final)


class RestartOutcome(StrEnum):
    RESTARTED = "restarted"  # a new incarnation runs the resumed session; option restored
    LEFT_ALONE = "left_alone"  # recovery found the agent running: left alone, option restored
    PANE_GONE = "pane_gone"  # recovery found no pane: nothing to restore
    GAVE_UP = "gave_up"  # more than limits.recoveries recoveries: the owner must look
    CANCELLED = "cancelled"  # nothing was touched


class PaneCondition(StrEnum):
    """What recovery finds when it inspects the pane."""

    GONE = "gone"  # no such pane any more
    DEAD = "dead"  # the pane remains but its process ended (remain-on-exit kept it)
    LIVE = "live"  # a process runs in the pane (the agent, or whatever replaced it)


_S = RestartStep

# Every step after the record is persisted and before it is closed: each may time out, fail, or be
# found open by a daemon restart, and each takes the recovery path (R4).
RECOVERABLE: frozenset[RestartStep] = frozenset(
    {
        _S.RECORD_PERSISTED,
        _S.REMAIN_ON_EXIT_SET,
        _S.RECHECKING_IDLE,
        _S.EXIT_SENT,
        _S.PROCESS_ENDED,
        _S.RESPAWNED,
        _S.OPTION_RESTORED,
        _S.RECOVERING,
    }
)
# Steps in which the daemon feeds PaneObserved (once at once, then whenever the pane changes).
OBSERVING: frozenset[RestartStep] = frozenset({_S.WAITING_IDLE, _S.RECHECKING_IDLE, _S.EXIT_SENT, _S.RESPAWNED})
# Steps whose effects the daemon confirms with StepDone (or reports with StepFailed).
AWAITING_DONE: frozenset[RestartStep] = frozenset(
    {_S.RECORD_PERSISTED, _S.REMAIN_ON_EXIT_SET, _S.PROCESS_ENDED, _S.OPTION_RESTORED, _S.GIVING_UP}
)
# Steps that wait for their deadline, then for the pane's condition: once the deadline passed the daemon
# inspects the pane and feeds Recover (StepFailed if it cannot).
WAITING: frozenset[RestartStep] = frozenset({_S.RETRY_RESTORE})
FINAL: frozenset[RestartStep] = frozenset({_S.CLOSED, _S.CANCELLED})

_ORDERED_RECOVERABLE = tuple(s for s in _S if s in RECOVERABLE)

TABLE: Table[RestartStep] = Table(
    name="restart",
    initial=_S.PLANNED,
    finals=FINAL,
    edges=(
        # Before the record is persisted: giving up touches nothing.
        (_S.PLANNED, "begin", _S.WAITING_IDLE),
        (_S.PLANNED, "cancel", _S.CANCELLED),
        (_S.WAITING_IDLE, "busy", _S.WAITING_IDLE),  # mid-turn, or a draft in the composer
        (_S.WAITING_IDLE, "idle", _S.RECORD_PERSISTED),  # idle, empty composer: persist the record
        (_S.WAITING_IDLE, "agent_changed", _S.CANCELLED),  # another incarnation, or none, runs there
        (_S.WAITING_IDLE, "timeout", _S.CANCELLED),
        (_S.WAITING_IDLE, "step_failed", _S.CANCELLED),  # the pane could not be observed
        (_S.WAITING_IDLE, "cancel", _S.CANCELLED),
        # The restart proper; the record is persisted from here on.
        (_S.RECORD_PERSISTED, "done", _S.REMAIN_ON_EXIT_SET),
        (_S.REMAIN_ON_EXIT_SET, "done", _S.RECHECKING_IDLE),
        (_S.RECHECKING_IDLE, "busy", _S.RECHECKING_IDLE),
        (_S.RECHECKING_IDLE, "idle", _S.EXIT_SENT),  # fresh idle, empty composer: send the exit command
        (_S.RECHECKING_IDLE, "agent_changed", _S.RECOVERING),
        (_S.RECHECKING_IDLE, "cancel", _S.RECOVERING),  # the option is on: restore it and close
        (_S.EXIT_SENT, "running", _S.EXIT_SENT),
        (_S.EXIT_SENT, "ended", _S.PROCESS_ENDED),  # the pane is dead: respawn it
        (_S.EXIT_SENT, "agent_changed", _S.RECOVERING),
        (_S.PROCESS_ENDED, "done", _S.RESPAWNED),
        (_S.RESPAWNED, "starting", _S.RESPAWNED),
        (_S.RESPAWNED, "started", _S.OPTION_RESTORED),  # a new incarnation runs: restore the option
        (_S.RESPAWNED, "respawn_died", _S.RECOVERING),
        (_S.OPTION_RESTORED, "done", _S.CLOSED),
        # Recovery from every persisted step: a timeout or failed step, or a Recover (daemon restart).
        *((s, "timeout", _S.RECOVERING) for s in _ORDERED_RECOVERABLE),
        *((s, "step_failed", _S.RECOVERING) for s in _ORDERED_RECOVERABLE),
        *((s, "give_up", _S.GIVING_UP) for s in _ORDERED_RECOVERABLE),  # past limits.recoveries
        *((s, "pane_dead", _S.PROCESS_ENDED) for s in _ORDERED_RECOVERABLE),  # respawn as planned
        # leave it alone; but a record found open at startup in exit_sent, its agent still running, was
        # asked to exit and may be exiting now (the Enter the server owed it came after the daemon died):
        # wait for it to end, once (its deadline's timeout then recovers and leaves it alone)
        *((s, "pane_live", _S.OPTION_RESTORED) for s in _ORDERED_RECOVERABLE if s is not _S.EXIT_SENT),
        (_S.EXIT_SENT, "pane_live", _S.EXIT_SENT),
        *((s, "pane_gone", _S.CLOSED) for s in _ORDERED_RECOVERABLE),  # nothing to restore
        # Given up (R5): no more respawns; the option is put back, however long tmux takes to let it.
        (_S.GIVING_UP, "done", _S.CLOSED),
        (_S.GIVING_UP, "step_failed", _S.RETRY_RESTORE),
        (_S.GIVING_UP, "timeout", _S.RETRY_RESTORE),
        (_S.RETRY_RESTORE, "pane_live", _S.GIVING_UP),  # try the restore again
        (_S.RETRY_RESTORE, "pane_dead", _S.GIVING_UP),
        (_S.RETRY_RESTORE, "pane_gone", _S.CLOSED),  # nothing to restore
        (_S.RETRY_RESTORE, "step_failed", _S.RETRY_RESTORE),  # tmux still failing: wait again
        # found at startup (the record is persisted giving_up): restore again, or the pane is gone
        (_S.GIVING_UP, "pane_live", _S.GIVING_UP),
        (_S.GIVING_UP, "pane_dead", _S.GIVING_UP),
        (_S.GIVING_UP, "pane_gone", _S.CLOSED),
    ),
)

_QUIET = frozenset({"busy", "running", "starting"})  # allowed, and nothing to do: keep waiting
_RECOVER_EVENT = {PaneCondition.GONE: "pane_gone", PaneCondition.DEAD: "pane_dead", PaneCondition.LIVE: "pane_live"}

REMAIN_ON_EXIT = "remain-on-exit"
REMAIN_ON_EXIT_VALUES = frozenset({"on", "off", "failed"})
STORE_KIND = "restart"  # Persist.kind of the restart record
TOPIC = "restart"  # Notify.topic of every progress notice
ACTOR = "connectd"  # the audit actor: the daemon does the restart the owner approved

_PANE_ID_RE = re.compile(r"%(0|[1-9][0-9]{0,9})")
_ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f]")


class RestartError(ConnectError):
    """Bad input to the restart machine (a malformed plan, an event that does not fit): the message
    names the problem, and nothing changes."""


# --------------------------------------------------------------------------------------------------
# Values
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class RestartLimits:
    """Every deadline of the machine, in seconds, and the recovery bound (R5)."""

    idle_wait: float = 600.0  # for idle with an empty composer, from Begin (also bounds the recheck)
    step: float = 10.0  # for a persist, an option change, a respawn-pane call, an inspection
    exit: float = 20.0  # for the agent's process to end after its exit command
    respawn: float = 30.0  # for the respawned agent to be seen running
    recoveries: int = 3  # entries into recovery before the machine gives up
    retry_restore: float = 30.0  # after giving up, between tries to restore the option (R5)

    def __post_init__(self) -> None:
        for name in ("idle_wait", "step", "exit", "respawn", "retry_restore"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise RestartError(f"restart limit {name} must be a positive number of seconds, got {value!r}")
        if isinstance(self.recoveries, bool) or not isinstance(self.recoveries, int) or self.recoveries < 1:
            raise RestartError(f"restart limit recoveries must be an int >= 1, got {self.recoveries!r}")


@dataclass(frozen=True, kw_only=True)
class RestartPlan:
    """What the daemon hands the machine once the owner approved "Restart this agent to connect it?".

    ``env`` is the whole respawn environment (the launcher's declared environment plus the injection,
    token included if the daemon passes it that way); it is held in memory and never persisted.
    """

    restart_id: str
    pane_id: str
    incarnation: str
    original_remain_on_exit: str | None  # the pane's own value; None: not set on the pane
    harness: str
    session_id: str
    launcher: str
    exit_command: str  # the harness's own, e.g. "/exit"
    resume_argv: tuple[str, ...]
    cwd: str  # the session's indexed cwd
    env: Mapping[str, str] = field(default_factory=dict, hash=False, repr=False)

    def __post_init__(self) -> None:
        for name in ("restart_id", "incarnation", "harness", "session_id", "launcher", "exit_command"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value or _CONTROL_RE.search(value):
                raise RestartError(f"restart plan {name} must be a non-empty single-line string, got {value!r}")
        if not isinstance(self.pane_id, str) or not _PANE_ID_RE.fullmatch(self.pane_id):
            raise RestartError(f"restart plan pane_id must look like %N, got {self.pane_id!r}")
        if self.original_remain_on_exit is not None and self.original_remain_on_exit not in REMAIN_ON_EXIT_VALUES:
            raise RestartError(
                f"restart plan original_remain_on_exit must be None, 'on', 'off' or 'failed', "
                f"got {self.original_remain_on_exit!r}"
            )
        if (
            not isinstance(self.resume_argv, tuple)
            or not self.resume_argv
            or not all(isinstance(arg, str) for arg in self.resume_argv)
            or not self.resume_argv[0]
        ):
            raise RestartError(f"restart plan resume_argv must be a non-empty tuple of strings, got {self.resume_argv!r}")
        if not isinstance(self.cwd, str) or not PurePosixPath(self.cwd).is_absolute():
            raise RestartError(f"restart plan cwd must be an absolute path, got {self.cwd!r}")
        for name, value in self.env.items():
            if not isinstance(name, str) or not _ENV_NAME_RE.fullmatch(name):
                raise RestartError(f"restart plan env name {name!r} is not a valid environment variable name")
            if not isinstance(value, str) or "\x00" in value:
                raise RestartError(f"restart plan env value of {name} must be a string without NUL")


@dataclass(frozen=True)
class RestartRecord:
    """The durable restart record (``Persist(kind="restart", key=(restart_id,))``): no env values."""

    restart_id: str
    pane_id: str
    incarnation: str
    original_remain_on_exit: str | None
    harness: str
    session_id: str
    launcher: str
    exit_command: str
    resume_argv: tuple[str, ...]
    cwd: str
    env_names: tuple[str, ...]
    step: RestartStep = RestartStep.PLANNED
    updated_at: float = 0.0  # ``now`` of the event that entered ``step``
    attempts: int = 0  # entries into recovery so far (R5)
    outcome: RestartOutcome | None = None
    new_incarnation: str | None = None  # the respawned agent's, once seen running
    # Why the connect this restart was to give was withdrawn while it was open (a revocation, a new
    # grant, disconnect-all; set by the hub, never by this machine): its respawn gets no token. "": not.
    connect_withdrawn: str = ""
    # The exit command was typed into the pane (EXIT_SENT, R3) and the agent has not been seen to end
    # since. A restart that then leaves the agent alone may have left that command unsent (R4).
    exit_typed: bool = False

    @property
    def open(self) -> bool:
        """A record the daemon must finish at startup (feed it a :class:`Recover`)."""
        return self.step not in FINAL


@dataclass(frozen=True)
class Restart:
    """The machine's whole state: the record, plus what is never persisted."""

    record: RestartRecord
    env: tuple[tuple[str, str], ...] | None = field(repr=False)  # None: unknown (resumed from a record)
    limits: RestartLimits = field(default_factory=RestartLimits)
    deadline: float | None = None  # when the daemon feeds Timeout; None in PLANNED and final steps
    idle_deadline: float = 0.0  # the wait-for-idle deadline set by Begin
    restore_told: bool = False  # the owner was told that a restore after giving up failed (R5, once)

    @property
    def step(self) -> RestartStep:
        return self.record.step

    @property
    def final(self) -> bool:
        return self.record.step in FINAL


# --------------------------------------------------------------------------------------------------
# Events (the daemon's answers) and the module's own effects (its questions)
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Begin:
    now: float


@dataclass(frozen=True, kw_only=True)
class Cancel:
    """The owner withdrew the restart (or revoked the agent): allowed until the exit command is sent."""

    now: float
    reason: str = "cancelled by the owner"


@dataclass(frozen=True, kw_only=True)
class PaneObserved:
    """A fresh read of the pane, taken at ``now`` (after the effects that asked for it ran)."""

    now: float
    pane_id: str
    incarnation: str  # of the process running in the pane (or that last ran in it, when dead)
    agent_running: bool  # the pane's process is the agent, alive
    idle: bool  # the agent waits for input (not mid-turn, no dialog)
    composer_empty: bool  # no unsent draft
    pane_dead: bool = False  # the process ended and remain-on-exit kept the pane

    @property
    def idle_and_empty(self) -> bool:
        return self.idle and self.composer_empty


@dataclass(frozen=True, kw_only=True)
class StepDone:
    """Every effect of ``step`` ran."""

    now: float
    step: RestartStep


@dataclass(frozen=True, kw_only=True)
class StepFailed:
    """An effect of ``step`` failed (the daemon ran no later effect of that step)."""

    now: float
    step: RestartStep
    reason: str


@dataclass(frozen=True, kw_only=True)
class Timeout:
    """``state.deadline`` passed."""

    now: float


@dataclass(frozen=True, kw_only=True)
class Recover:
    """The pane's condition, for recovery: the answer to :class:`InspectPane`, or fed at startup for a
    record found open. ``env`` is the respawn environment; needed only when the pane is dead and the
    state does not hold one (a record resumed after a daemon restart)."""

    now: float
    condition: PaneCondition
    env: Mapping[str, str] | None = None


RestartEvent = Begin | Cancel | PaneObserved | StepDone | StepFailed | Timeout | Recover


@dataclass(frozen=True)
class ObservePane(Effect):
    """Feed :class:`PaneObserved` for ``pane_id``: a fresh read once these effects ran, then again
    whenever the pane changes, until the restart leaves the step."""

    pane_id: str
    restart_id: str


@dataclass(frozen=True)
class InspectPane(Effect):
    """Find ``pane_id``'s :class:`PaneCondition` and feed :class:`Recover`."""

    pane_id: str
    restart_id: str


# --------------------------------------------------------------------------------------------------
# Pure functions
# --------------------------------------------------------------------------------------------------


def plan_restart(plan: RestartPlan, limits: RestartLimits | None = None) -> Restart:
    """The machine in ``planned``, ready for :class:`Begin`."""
    record = RestartRecord(
        restart_id=plan.restart_id,
        pane_id=plan.pane_id,
        incarnation=plan.incarnation,
        original_remain_on_exit=plan.original_remain_on_exit,
        harness=plan.harness,
        session_id=plan.session_id,
        launcher=plan.launcher,
        exit_command=plan.exit_command,
        resume_argv=plan.resume_argv,
        cwd=plan.cwd,
        env_names=tuple(sorted(plan.env)),
    )
    return Restart(record=record, env=tuple(sorted(plan.env.items())), limits=limits or RestartLimits())


def resume(record: RestartRecord, limits: RestartLimits | None = None) -> Restart:
    """A record found open at startup, as a state that accepts only :class:`Recover`."""
    return Restart(record=record, env=None, limits=limits or RestartLimits())


def step(state: Restart | RestartRecord, event: RestartEvent) -> tuple[Restart, tuple[Effect, ...]]:
    """Apply ``event``: the new state and the effects the daemon runs, in order.

    Raises :class:`TransitionNotAllowed` for an event the table does not allow in the current step, and
    :class:`RestartError` for one that does not fit (another pane, a stale read, a confirmation of
    another step, an early timeout). Either way nothing changes.
    """
    if isinstance(state, RestartRecord):
        if not isinstance(event, Recover):
            raise RestartError(
                f"restart {state.restart_id}: a record loaded at startup only takes Recover, got {type(event).__name__}"
            )
        state = resume(state)
    name = _classify(state, event)
    destination = TABLE.next(state.step, name)
    _check(state, event)
    cause = name
    if destination is _S.RECOVERING and state.record.attempts >= state.limits.recoveries:
        name, destination = "give_up", TABLE.next(state.step, "give_up")
    if name in _QUIET:
        return state, ()
    return _enter(state, event, name, destination, cause)


def _classify(state: Restart, event: RestartEvent) -> str:
    """The table event ``event`` is in ``state``."""
    if isinstance(event, PaneObserved):
        return _observed(state, event)
    if isinstance(event, Recover):
        return _RECOVER_EVENT[event.condition]
    if isinstance(event, Begin):
        return "begin"
    if isinstance(event, Cancel):
        return "cancel"
    if isinstance(event, StepDone):
        return "done"
    if isinstance(event, StepFailed):
        return "step_failed"
    if isinstance(event, Timeout):
        return "timeout"
    raise RestartError(f"not a restart event: {event!r}")


def _observed(state: Restart, obs: PaneObserved) -> str:
    record = state.record
    if state.step not in OBSERVING:
        return "observed"  # no edge: TransitionNotAllowed
    if obs.pane_id != record.pane_id:
        raise RestartError(f"restart {record.restart_id} is for pane {record.pane_id}, not {obs.pane_id}")
    if obs.now < record.updated_at:
        raise RestartError(
            f"restart {record.restart_id}: stale observation taken at {obs.now}, "
            f"before step {state.step} began at {record.updated_at}"
        )
    planned = obs.incarnation == record.incarnation
    if state.step is _S.EXIT_SENT:
        if obs.pane_dead:
            return "ended"
        return "running" if planned else "agent_changed"
    if state.step is _S.RESPAWNED:
        if obs.pane_dead:
            return "respawn_died"
        return "started" if obs.agent_running and not planned else "starting"
    # WAITING_IDLE, RECHECKING_IDLE: the planned agent, alive and idle with an empty composer (R1).
    if obs.pane_dead or not obs.agent_running or not planned:
        return "agent_changed"
    return "idle" if obs.idle_and_empty else "busy"


def moves(state: Restart, obs: PaneObserved) -> bool:
    """Whether an observation moves the machine; the others are its quiet self-loops (keep looking).
    Raises :class:`RestartError` for an observation that does not fit, as :func:`step` does."""
    return _observed(state, obs) not in _QUIET


def _check(state: Restart, event: RestartEvent) -> None:
    """Refuse an allowed event whose values do not fit this state."""
    record = state.record
    if isinstance(event, StepDone | StepFailed) and event.step != state.step:
        raise RestartError(
            f"restart {record.restart_id}: {type(event).__name__} for step {event.step} arrived in step {state.step}"
        )
    if state.step in WAITING and isinstance(event, Recover | StepFailed) and (
        state.deadline is None or event.now < state.deadline
    ):
        raise RestartError(
            f"restart {record.restart_id}: {type(event).__name__} at {event.now} before the deadline "
            f"{state.deadline} of step {state.step}"
        )
    if isinstance(event, Timeout) and (state.deadline is None or event.now < state.deadline):
        raise RestartError(
            f"restart {record.restart_id}: timeout at {event.now} before the deadline {state.deadline} of step {state.step}"
        )
    if (
        isinstance(event, Recover)
        and state.step not in (_S.GIVING_UP, _S.RETRY_RESTORE)  # they respawn nothing more
        and event.condition is PaneCondition.DEAD
        and event.env is None
        and state.env is None
    ):
        raise RestartError(f"restart {record.restart_id}: respawning the dead pane needs the respawn environment")


def _enter(
    state: Restart, event: RestartEvent, name: str, dst: RestartStep, cause: str
) -> tuple[Restart, tuple[Effect, ...]]:
    """Enter ``dst`` through table event ``name`` (``cause``: the event before a give-up replaced it)."""
    now = event.now
    rec = state.record
    lim = state.limits
    observe = ObservePane(rec.pane_id, rec.restart_id)
    if dst is _S.WAITING_IDLE:
        new = _advance(state, dst, now, deadline=now + lim.idle_wait, idle_deadline=now + lim.idle_wait)
        return new, (_audit(new, "begin", str(dst), now), _notify(new), observe)
    if dst is _S.CANCELLED:
        detail = _cancel_detail(state, event)
        new = _advance(state, dst, now, deadline=None, outcome=RestartOutcome.CANCELLED)
        return new, (_audit(new, "cancel", RestartOutcome.CANCELLED, now, detail), _notify(new, detail))
    if dst is _S.RECORD_PERSISTED:
        new = _advance(state, dst, now, deadline=now + lim.step)
        return new, (_persist(new), _notify(new))
    if dst is _S.REMAIN_ON_EXIT_SET:
        new = _advance(state, dst, now, deadline=now + lim.step)
        return new, (SetPaneOption(rec.pane_id, REMAIN_ON_EXIT, "on"), _notify(new))
    if dst is _S.RECHECKING_IDLE:
        new = _advance(state, dst, now, deadline=max(state.idle_deadline, now + lim.step))
        return new, (_notify(new), observe)
    if dst is _S.EXIT_SENT and name == "pane_live":  # found at startup: the exit asked for may be under way
        new = _advance(state, dst, now, deadline=now + lim.exit, exit_typed=True)  # (a record from before the field)
        detail = "recovery: the agent was asked to exit and still runs; waiting for it to end"
        return new, (_persist(new), _audit(new, "recover", str(dst), now, detail), _notify(new, detail), observe)
    if dst is _S.EXIT_SENT:
        new = _advance(state, dst, now, deadline=now + lim.exit, exit_typed=True)
        exit_agent = ExitAgent(rec.pane_id, rec.exit_command)
        return new, (_persist(new), exit_agent, _audit(new, "exit", str(dst), now), _notify(new), observe)
    if dst is _S.PROCESS_ENDED:
        env = state.env if not isinstance(event, Recover) or event.env is None else tuple(sorted(event.env.items()))
        # a respawn in flight: whatever an earlier run confirmed no longer describes the pane
        new = replace(  # (the agent ended: an exit command it was typed is used up)
            _advance(state, dst, now, deadline=now + lim.step, outcome=None, new_incarnation=None, exit_typed=False),
            env=env,
        )
        respawn = Respawn(rec.pane_id, rec.resume_argv, rec.cwd, dict(env or ()))
        detail = "recovery: the pane was dead" if name == "pane_dead" else ""
        return new, (_persist(new), respawn, _audit(new, "respawn", str(dst), now, detail), _notify(new, detail))
    if dst is _S.RESPAWNED:
        new = _advance(state, dst, now, deadline=now + lim.respawn)
        return new, (_notify(new), observe)
    if dst is _S.OPTION_RESTORED:
        incarnation: str | None
        if isinstance(event, PaneObserved):
            outcome, incarnation = RestartOutcome.RESTARTED, event.incarnation
        else:  # recovery found it running: left alone (a restart already confirmed stays restarted)
            outcome, incarnation = rec.outcome or RestartOutcome.LEFT_ALONE, rec.new_incarnation
        new = _advance(state, dst, now, deadline=now + lim.step, outcome=outcome, new_incarnation=incarnation)
        restore = SetPaneOption(rec.pane_id, REMAIN_ON_EXIT, rec.original_remain_on_exit)
        return new, (_persist(new), restore, _notify(new))
    if dst is _S.RECOVERING:
        detail = _trouble(state, event, cause)
        new = _advance(state, dst, now, deadline=now + lim.step, attempts=rec.attempts + 1)
        inspect = InspectPane(rec.pane_id, rec.restart_id)
        return new, (_audit(new, "recover", str(dst), now, detail), _notify(new, detail), inspect)
    if dst is _S.GIVING_UP:
        restore = SetPaneOption(rec.pane_id, REMAIN_ON_EXIT, rec.original_remain_on_exit)
        new = _advance(state, dst, now, deadline=now + lim.step, outcome=RestartOutcome.GAVE_UP)
        if state.step in (_S.RETRY_RESTORE, _S.GIVING_UP):  # another try (or the record found at startup)
            return new, (_persist(new), restore) if state.step is _S.GIVING_UP else (restore,)
        detail = (
            f"{_trouble(state, event, cause)}; gave up after {rec.attempts} recoveries; "
            f"restoring {REMAIN_ON_EXIT} on {rec.pane_id}"
        )
        return new, (_persist(new), restore, _audit(new, "give_up", str(dst), now, detail), _notify(new, detail))
    if dst is _S.RETRY_RESTORE:
        new = replace(_advance(state, dst, now, deadline=now + lim.retry_restore), restore_told=True)
        if state.restore_told:
            return new, ()
        detail = (
            f"{REMAIN_ON_EXIT} on {rec.pane_id} could not be restored ({_trouble(state, event, cause)}); "
            f"retrying every {lim.retry_restore:g}s; or run: {restore_command(rec)}"
        )
        return new, (_audit(new, "give_up", str(dst), now, detail), _notify(new, detail))
    # dst is CLOSED: after the option was restored, or the pane is gone, or the machine gave up.
    if state.step is _S.GIVING_UP and name == "done":
        outcome = RestartOutcome.GAVE_UP
        detail = f"gave up after {rec.attempts} recoveries; {REMAIN_ON_EXIT} restored"
    elif name == "pane_gone":
        outcome, detail = RestartOutcome.PANE_GONE, "the pane is gone; nothing to restore"
    else:
        outcome, detail = rec.outcome or RestartOutcome.RESTARTED, ""
        if left_exit_command(rec):
            detail = f"the agent did not exit; its exit command {rec.exit_command!r} may be left in the composer"
    new = _advance(state, dst, now, deadline=None, outcome=outcome)
    return new, (_persist(new), _audit(new, "close", outcome, now, detail), _notify(new, detail))


@dataclass(frozen=True)
class PlanRefusal:
    """Why restart-to-connect cannot be planned for a pane (``reason`` is the refusal code)."""

    reason: str
    problem: str
    fix: str = ""


def plan_refusal(
    pane_id: str,
    *,
    scopes_given: bool,
    pane_live: bool,
    launched: bool,
    launcher_name: str,
    launcher: L.Launcher | None,
    session: tuple[str, str] | None,
    read_harness: str | None = None,
    bound_session: str | None = None,
) -> PlanRefusal | None:
    """The restartability rule, before anything is touched or any id is taken (None: it may be
    planned). In order: a preset with no scope (``bad_preset``); no live pane ``pane_id``
    (``unknown_target``); a pane connect did not launch
    (``not_restartable``, with the advice to relaunch it by hand: ``read_harness`` and
    ``bound_session`` are what the pane shows); a launcher that is gone or cannot restart
    (``not_restartable``); no single session to resume (``ambiguous_binding``, ``session`` from
    :func:`connectcore.directory.pane_session`)."""
    if not scopes_given:
        return PlanRefusal("bad_preset", "restart-to-connect needs observe or collaborate")
    if not pane_live:
        return PlanRefusal("unknown_target", f"no live pane {pane_id}")
    if not launched:
        advice = A.hand_started_restart_refusal(pane_id, read_harness or None, bound_session)
        return PlanRefusal("not_restartable", advice.problem, advice.fix)
    if launcher is None:
        return PlanRefusal("not_restartable", f"launcher {launcher_name!r} is no longer configured")
    if not launcher.restartable:
        return PlanRefusal("not_restartable", launcher.restart_refusal)
    if session is None:
        return PlanRefusal("ambiguous_binding", f"{pane_id} holds no unambiguously bound session to resume")
    return None


def restart_cwd(launched_in: str | None, pane_cwd: str) -> str:
    """Where the resumed agent runs: the directory connect launched it in, else (none recorded) the
    pane's current directory."""
    return launched_in or pane_cwd


def pane_dead(*, dead: bool, pane_pid: int | None, process_start: int | None, agent_exited_here: bool) -> bool:
    """To a restart, the pane's agent process is dead: tmux keeps the pane dead (remain-on-exit), or it
    lists no process, or no start time of its own (gone, or a pid not the server's child), or a
    ``--here`` supervisor lives on in it but its agent child exited (``agent_exited_here``). The one
    definition for the step that observes the pane and for recovery's inspection; the first three
    tests are :func:`connectcore.directory.pane_live`, the watcher's."""
    return not D.pane_live(dead=dead, pane_pid=pane_pid, process_start=process_start) or agent_exited_here


def left_exit_command(rec: RestartRecord) -> bool:
    """R4: the machine typed the exit command, then left the agent running: the command may sit
    unsent in the composer (a harness that dropped the Enter), so the person is told."""
    return rec.exit_typed and rec.outcome is RestartOutcome.LEFT_ALONE


def restore_command(rec: RestartRecord) -> str:
    """The tmux command that puts the pane's own remain-on-exit back (what the person runs when the
    machine gave up before it could: R5)."""
    if rec.original_remain_on_exit is None:
        return f"tmux set-option -p -u -t {rec.pane_id} {REMAIN_ON_EXIT}"
    return f"tmux set-option -p -t {rec.pane_id} {REMAIN_ON_EXIT} {rec.original_remain_on_exit}"


def _advance(
    state: Restart, dst: RestartStep, now: float, *, deadline: float | None, idle_deadline: float | None = None,
    **changes: Any,
) -> Restart:
    record = replace(state.record, step=dst, updated_at=now, **changes)
    return replace(
        state,
        record=record,
        deadline=deadline,
        idle_deadline=state.idle_deadline if idle_deadline is None else idle_deadline,
    )


def _cancel_detail(state: Restart, event: RestartEvent) -> str:
    """Why the machine ended before touching anything, in words for the owner."""
    if isinstance(event, Cancel):
        return event.reason
    if isinstance(event, StepFailed):
        return f"the pane could not be observed: {event.reason}"
    if isinstance(event, Timeout):
        return f"the agent was not idle with an empty composer within {state.limits.idle_wait:g}s"
    return "the planned agent no longer runs in the pane"


def _trouble(state: Restart, event: RestartEvent, cause: str) -> str:
    """Why recovery is entered (or given up), in words for the audit line."""
    if isinstance(event, StepFailed):
        return f"step {state.step} failed: {event.reason}"
    if isinstance(event, Cancel):
        return f"cancelled in step {state.step}: {event.reason}"
    if cause == "respawn_died":
        return "the respawned process exited"
    if cause == "agent_changed":
        return f"the planned agent no longer runs in the pane (step {state.step})"
    return f"step {state.step} timed out"


def _persist(state: Restart) -> Persist:
    return Persist(kind=STORE_KIND, key=(state.record.restart_id,), record=state.record)


def _audit(state: Restart, action: str, outcome: str, now: float, detail: str = "") -> Audit:
    rec = state.record
    return Audit(
        actor=ACTOR,
        action=f"restart.{action}",
        outcome=str(outcome),
        target=f"agent:{rec.harness}:{rec.session_id}",
        detail=detail,
        at=now,
    )


def _notify(state: Restart, detail: str = "") -> Notify:
    rec = state.record
    payload = {
        "pane_id": rec.pane_id,
        "step": str(rec.step),
        "outcome": None if rec.outcome is None else str(rec.outcome),
        "incarnation": rec.new_incarnation,
        "detail": detail,
    }
    return Notify(topic=TOPIC, key=(rec.restart_id,), payload=payload)
