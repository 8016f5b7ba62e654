"""Model of restart-to-connect against a small in-memory tmux pane: an agent that works, drafts and
quits, failing steps, timeouts, a pane killed under the machine, and daemon crashes, each followed by
the startup recovery of the persisted record. Besides the crashes the run takes, every point between
two effects is also checked as a crash point on a copy of the world.

The driver is the one that ships with restarts in the hub: it runs each step's effects in order and
answers ``StepDone`` once those of a step in ``AWAITING_DONE`` ran, ``StepFailed`` only when one of
them raised (an effect of another step that raises ends that step's effects; the deadline then
answers), observations while observing (none while the pane cannot be read), ``Recover`` for an
inspection and ``Timeout`` at the deadline. It never feeds ``Cancel``: only the hub does, when the owner
turns the agent Off (``hub.SetGrant``), exactly where the table allows it.

Modelled assumption: an agent that has not quit by the time recovery inspects it ignored its exit
command (the real race, an agent quitting between that inspection and the option's restore, is bounded
by the exit deadline and is not modelled).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from connectcore import hub as H
from connectcore.effects import Audit, Effect, ExitAgent, Notify, Persist, Respawn, SetPaneOption
from connectcore.restart import (
    AWAITING_DONE,
    OBSERVING,
    RECOVERABLE,
    STORE_KIND,
    TABLE,
    WAITING,
    Begin,
    Cancel,
    InspectPane,
    ObservePane,
    PaneCondition,
    PaneObserved,
    Recover,
    Restart,
    RestartEvent,
    RestartLimits,
    RestartOutcome,
    RestartPlan,
    RestartRecord,
    RestartStep,
    StepDone,
    StepFailed,
    Timeout,
    plan_restart,
    step,
)

S = RestartStep
LIMITS = RestartLimits(idle_wait=60.0, step=5.0, exit=10.0, respawn=10.0, recoveries=3)
ARGV = ("claude", "--resume", "sess")
CWD = "/home/u/project"
ENV = {"CONNECT_TOKEN": "token", "CLAUDE_CONFIG_DIR": "/home/u/.claude"}
FAILABLE = (SetPaneOption, ExitAgent, Respawn)  # what can raise (records commit with their step; Observe/Inspect are requests)


class EffectFailed(Exception):
    pass


@dataclass
class FakePane:
    """The part of a tmux pane a restart touches: its remain-on-exit, its root process, its screen."""

    pane_id: str
    incarnation: str
    option: str | None
    present: bool = True
    dead: bool = False
    busy: bool = False
    draft: bool = False
    quitting: bool = False  # the agent accepted its exit command and is about to end
    spawned: int = 0

    def observe(self, now: float) -> PaneObserved:
        if not self.present:
            raise EffectFailed(f"can't find pane: {self.pane_id}")
        return PaneObserved(
            now=now,
            pane_id=self.pane_id,
            incarnation=self.incarnation,
            agent_running=not self.dead,
            idle=not self.busy,
            composer_empty=not self.draft,
            pane_dead=self.dead,
        )

    def condition(self) -> PaneCondition:
        if not self.present:
            return PaneCondition.GONE
        return PaneCondition.DEAD if self.dead else PaneCondition.LIVE

    def process_ends(self) -> None:
        """Exit status 0: only remain-on-exit ``on`` keeps the pane (``failed`` keeps failures only)."""
        self.quitting = False
        if self.option == "on":
            self.dead = True
        else:
            self.present = False

    def run(self, effect: Effect) -> None:
        if isinstance(effect, SetPaneOption | ExitAgent | Respawn) and not self.present:
            raise EffectFailed(f"can't find pane: {self.pane_id}")
        if isinstance(effect, SetPaneOption):
            self.option = effect.value
        elif isinstance(effect, ExitAgent):
            if self.dead:
                raise EffectFailed("pane is dead")
            if self.busy or self.draft:
                self.draft = True  # typed into the running turn or the draft: not a quit
            else:
                self.quitting = True
        elif isinstance(effect, Respawn):
            if not self.dead:
                raise EffectFailed(f"pane {self.pane_id} still active")
            self.spawned += 1
            self.incarnation = f"{self.pane_id}-respawn-{self.spawned}"
            self.dead = self.busy = self.draft = self.quitting = False


@dataclass
class Fed:
    before: Restart | RestartRecord
    event: RestartEvent | None  # None: only the hub's mark (the connect was withdrawn), no event
    after: Restart
    effects: tuple[Effect, ...]
    mark: str = ""  # the hub marked the record connect_withdrawn before this event


@dataclass
class Daemon:
    """The engine for one restart: feeds events, runs effects in order against the fake pane and a
    dict store (a step's records are committed with the step, as the engine commits a hub step's),
    answers what the machine asks. ``segments`` holds what was fed from each starting
    value (the plan, or a record loaded after a crash), for replay."""

    pane: FakePane
    store: dict[str, RestartRecord]
    now: float
    state: Restart | None = None
    queue: list[Effect] = field(default_factory=list)
    segments: list[tuple[Restart | RestartRecord, list[Fed]]] = field(default_factory=list)
    settled: list[tuple[Restart, FakePane, RestartRecord | None]] = field(default_factory=list)
    persisted: bool = False
    touched_before_persist: bool = False

    @property
    def active(self) -> bool:
        return self.state is not None and not self.state.final

    def fed(self) -> list[Fed]:
        return [f for _start, entries in self.segments for f in entries]

    def begin(self, state: Restart) -> None:
        self.segments.append((state, []))
        self.feed(Begin(now=self.now))

    def feed(self, event: RestartEvent) -> None:
        start, entries = self.segments[-1]
        before = self.state if self.state is not None else start
        after, effects = step(before, event)
        entries.append(Fed(before, event, after, effects))
        for effect in effects:
            if isinstance(effect, Persist):
                self.persisted = True
                self.store[effect.key[0]] = effect.record  # committed with the step, as the engine does
            elif isinstance(effect, SetPaneOption | ExitAgent | Respawn) and not self.persisted:
                self.touched_before_persist = True
        if before.step is S.EXIT_SENT and after.step not in (S.EXIT_SENT, S.PROCESS_ENDED):
            self.pane.quitting = False  # see the modelled assumption above
        self.state, self.queue = after, list(effects)
        self.note_if_settled()

    def note_if_settled(self) -> None:
        if self.state is not None and self.state.final and not self.queue:
            stored = self.store.get(self.state.record.restart_id)
            self.settled.append((self.state, copy.copy(self.pane), stored))

    def run_head(self, *, fail: bool = False) -> None:
        assert self.state is not None
        effect = self.queue.pop(0)
        try:
            if fail:
                raise EffectFailed("injected failure")
            if not isinstance(effect, Persist):  # a Persist was committed with its step
                self.pane.run(effect)
        except EffectFailed as failure:
            self.queue = []  # no later effect of the step runs
            if self.state.step in AWAITING_DONE:
                self.feed(StepFailed(now=self.now, step=self.state.step, reason=str(failure)))
                return
        self.note_if_settled()

    def turn(self) -> bool:
        """The daemon's next natural move; False when it has nothing to do."""
        if self.queue:
            self.run_head()
            return True
        state = self.state
        if state is None or state.final:
            return False
        if state.step in AWAITING_DONE:
            self.feed(StepDone(now=self.now, step=state.step))
        elif state.step in WAITING:  # at its deadline, the pane's condition
            assert state.deadline is not None
            self.now = max(self.now, state.deadline)
            self.feed(Recover(now=self.now, condition=self.pane.condition()))
        elif state.step in OBSERVING:
            try:
                observation = self.pane.observe(self.now)
            except EffectFailed:
                return False  # the pane cannot be read: nothing to answer until the deadline
            self.feed(observation)
        else:  # RECOVERING: InspectPane answered; the environment only when the state holds none
            env = ENV if state.env is None else None
            self.feed(Recover(now=self.now, condition=self.pane.condition(), env=env))
        return True

    def turn_off_through_the_hub(self) -> None:
        """The owner turns the agent Off while the restart is open: the hub withdraws its connect (and
        feeds Cancel where the table allows it); this machine's part is checked against the hub's."""
        assert self.state is not None
        state, rec = self.state, self.state.record
        rid = rec.restart_id
        hub, effects = H.step(H.Hub(restarts={rid: state}), H.SetGrant(self.now, (rec.harness, rec.session_id), frozenset()))
        ours = tuple(e for e in effects if _of_restart(e))
        if rec.connect_withdrawn:  # already withdrawn: the hub does nothing more
            assert not ours and hub.restarts[rid] == state
            return
        if rid in hub.restarts:
            why = hub.restarts[rid].record.connect_withdrawn
        else:
            why = next(e.detail for e in ours if isinstance(e, Audit) and e.action == "restart.cancel")
        assert why
        marked = replace(state, record=replace(rec, connect_withdrawn=why))
        expected: tuple[Effect, ...] = (Persist(STORE_KIND, (rid,), marked.record),) if state.step in RECOVERABLE else ()
        start, entries = self.segments[-1]
        if TABLE.allows(state.step, "cancel"):
            after, more = step(marked, Cancel(now=self.now, reason=why))
            entries.append(Fed(state, Cancel(now=self.now, reason=why), after, more, mark=why))
        else:
            after, more = marked, ()
            entries.append(Fed(state, None, after, (), mark=why))
        assert ours == expected + more  # the hub stepped exactly this
        assert hub.restarts.get(rid, after) == after
        for effect in ours:
            if isinstance(effect, Persist):
                self.store[effect.key[0]] = effect.record
        self.state, self.queue = after, [*self.queue, *ours]
        self.note_if_settled()

    def time_out(self) -> None:
        assert self.state is not None and self.state.deadline is not None
        if self.state.step in WAITING:  # its deadline asks for the pane's condition
            self.turn()
            return
        self.now = max(self.now, self.state.deadline)
        self.feed(Timeout(now=self.now))

    def crash_and_restart(self) -> None:
        """The daemon dies here; its successor finishes the open record with a cooperative pane."""
        assert self.state is not None
        rid, original = self.state.record.restart_id, self.state.record.original_remain_on_exit
        self.state, self.queue = None, []
        self.pane.quitting = False  # see the modelled assumption above
        record = self.store.get(rid)
        if record is None:
            assert self.pane.option == original  # nothing persisted: nothing touched
            return
        if not record.open:
            return
        self.now += 1.0
        self.segments.append((record, []))
        self.feed(Recover(now=self.now, condition=self.pane.condition(), env=ENV))
        for _ in range(50):
            before, ran_an_effect = self.state, bool(self.queue)
            moved = self.turn()
            if (
                self.state is not None and not self.state.final and not self.queue and not ran_an_effect
                and (not moved or self.state is before)
            ):
                # nothing more happens by itself (an exit_sent record found live waits for an exit
                # this cooperative pane will not make): its deadline answers
                if self.state.deadline is None:
                    break
                self.time_out()
            elif not moved:
                break
        assert self.state is not None and self.state.final and not self.queue


def _of_restart(effect: Effect) -> bool:
    """An effect of the restart machine (not of the grant change that withdrew its connect)."""
    if isinstance(effect, Persist):
        return effect.kind == STORE_KIND
    if isinstance(effect, Audit):
        return effect.action.startswith("restart.")
    if isinstance(effect, Notify):
        return effect.topic == "restart"
    return isinstance(effect, SetPaneOption | ExitAgent | Respawn | ObservePane | InspectPane)


def restart_plan(n: int, original: str | None) -> RestartPlan:
    return RestartPlan(
        restart_id=f"r-{n}",
        pane_id=f"%{n}",
        incarnation=f"inc-{n}",
        original_remain_on_exit=original,
        harness="claude",
        session_id="sess",
        launcher="claude",
        exit_command="/exit",
        resume_argv=ARGV,
        cwd=CWD,
        env=ENV,
    )


def left_pane_live_with_its_option_and_record_closed(state: Restart, pane: FakePane, stored: RestartRecord | None) -> None:
    """The property every finished restart must meet: its record closed, the pane's own option back
    (giving up ends the respawns, never the restore: R5), and the pane live unless it gave up."""
    assert stored is None or stored.step is S.CLOSED
    assert stored is not None or state.record.outcome is RestartOutcome.CANCELLED
    if pane.present:
        assert pane.option == state.record.original_remain_on_exit
        assert not pane.dead or state.record.outcome is RestartOutcome.GAVE_UP


class RestartModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.n = 0
        self.now = 0.0
        self.daemons: list[Daemon] = []
        self.crash_points = 0

    @property
    def d(self) -> Daemon | None:
        return self.daemons[-1] if self.daemons else None

    def live(self) -> bool:
        d = self.d
        return d is not None and d.pane.present and not d.pane.dead

    def check_crash_point(self) -> None:
        """Recovery from this crash point (on a copy of the world) leaves the pane live with its
        original option and the record closed."""
        d = self.d
        if d is None or not (d.active or d.queue):
            return
        fork = Daemon(pane=copy.copy(d.pane), store=dict(d.store), now=d.now, state=d.state, queue=list(d.queue))
        fork.crash_and_restart()
        self.crash_points += 1
        if fork.state is not None:
            left_pane_live_with_its_option_and_record_closed(fork.state, fork.pane, fork.store.get(fork.state.record.restart_id))

    # --- rules ------------------------------------------------------------------------------------

    @precondition(lambda self: self.d is None or not (self.d.active or self.d.queue))
    @rule(original=st.sampled_from([None, "on", "off", "failed"]))
    def begin(self, original: str | None) -> None:
        self.n += 1
        pane = FakePane(pane_id=f"%{self.n}", incarnation=f"inc-{self.n}", option=original)
        now = self.d.now if self.d is not None else 0.0
        daemon = Daemon(pane=pane, store={}, now=now)
        self.daemons.append(daemon)
        daemon.begin(plan_restart(restart_plan(self.n, original), LIMITS))

    @precondition(lambda self: self.d is not None)
    @rule(moves=st.integers(min_value=1, max_value=30))
    def daemon(self, moves: int) -> None:
        """Up to ``moves`` daemon moves, stopping when one changes nothing (a quiet observation)."""
        d = self.d
        assert d is not None
        for _ in range(moves):
            before = (d.state, len(d.queue))
            if not d.turn() or (d.state, len(d.queue)) == before:
                return
            self.check_crash_point()

    @precondition(lambda self: self.live())
    @rule(change=st.sampled_from(["busy", "draft", "send"]))
    def user_or_agent_works(self, change: str) -> None:
        assert self.d is not None
        pane = self.d.pane
        if change == "busy":  # a turn runs
            pane.busy = True
        elif change == "draft":  # the person types without sending
            pane.draft = True
        else:  # the draft is sent: a turn starts
            pane.draft, pane.busy = False, True

    @precondition(lambda self: self.live())
    @rule()
    def agent_settles(self) -> None:
        """The turn ends and the composer is emptied: idle with an empty composer."""
        assert self.d is not None
        self.d.pane.busy = self.d.pane.draft = False

    @precondition(lambda self: self.d is not None and self.d.pane.quitting)
    @rule()
    def agent_quits(self) -> None:
        assert self.d is not None
        self.d.pane.process_ends()

    @precondition(lambda self: self.d is not None and self.d.active and self.d.pane.present)
    @rule()
    def kill_pane(self) -> None:
        assert self.d is not None
        self.d.pane.present = False

    @precondition(
        lambda self: self.d is not None
        and self.d.active
        and bool(self.d.queue)
        and isinstance(self.d.queue[0], FAILABLE)
        and self.d.state is not None
        and self.d.state.step in AWAITING_DONE
    )
    @rule()
    def fail_effect(self) -> None:
        assert self.d is not None
        self.d.run_head(fail=True)

    @precondition(lambda self: self.d is not None and self.d.active)
    @rule()
    def owner_turns_it_off(self) -> None:
        """Off (or a revocation) pressed at any point of the restart, through the hub."""
        assert self.d is not None
        self.d.turn_off_through_the_hub()

    @precondition(lambda self: self.d is not None and self.d.active and not self.d.queue)
    @rule()
    def time_out(self) -> None:
        assert self.d is not None
        self.d.time_out()

    @precondition(lambda self: self.d is not None)
    @rule(dt=st.sampled_from([0.5, 3.0, 30.0]))
    def tick(self, dt: float) -> None:
        assert self.d is not None
        self.d.now += dt

    @precondition(lambda self: self.d is not None and (self.d.active or bool(self.d.queue)))
    @rule()
    def crash(self) -> None:
        assert self.d is not None
        self.d.crash_and_restart()

    # --- invariants -------------------------------------------------------------------------------

    @invariant()
    def recovery_from_this_crash_point_leaves_the_pane_live_with_its_option_and_the_record_closed(self) -> None:
        """Recovery from the current crash point leaves the pane live with its original option and the record closed."""
        self.check_crash_point()

    @invariant()
    def finished_restarts_left_the_pane_live_with_its_option_and_the_record_closed(self) -> None:
        """Every finished restart closed its record (or never persisted one) and left a present pane with its original option, live unless it gave up."""
        for d in self.daemons:
            for state, pane, stored in d.settled:
                left_pane_live_with_its_option_and_record_closed(state, pane, stored)

    @invariant()
    def giving_up_needs_every_allowed_recovery(self) -> None:
        """A restart gives up only after limits.recoveries entries into recovery."""
        for d in self.daemons:
            for state, _pane, _stored in d.settled:
                assert state.record.outcome is not RestartOutcome.GAVE_UP or state.record.attempts == LIMITS.recoveries

    @invariant()
    def exit_only_after_a_fresh_idle_and_empty_read_of_the_planned_agent(self) -> None:
        """ExitAgent is emitted only for an idle-and-empty read of the planned incarnation in the recheck, after remain-on-exit was set."""
        for d in self.daemons:
            for f in d.fed():
                if any(isinstance(e, ExitAgent) for e in f.effects):
                    assert isinstance(f.event, PaneObserved) and f.event.idle_and_empty and not f.event.pane_dead
                    assert f.before.step is S.RECHECKING_IDLE and f.event.incarnation == f.after.record.incarnation

    @invariant()
    def respawn_only_into_a_dead_pane(self) -> None:
        """Respawn (never over a draft or mid-turn) is emitted only when the pane was seen dead."""
        for d in self.daemons:
            for f in d.fed():
                if any(isinstance(e, Respawn) for e in f.effects):
                    assert (isinstance(f.event, PaneObserved) and f.event.pane_dead) or (
                        isinstance(f.event, Recover) and f.event.condition is PaneCondition.DEAD
                    )

    @invariant()
    def a_withdrawn_connect_stays_marked_on_every_later_record(self) -> None:
        """Once the hub withdrew the restart's connect, every later state of it carries the mark."""
        for d in self.daemons:
            mark = ""
            for f in d.fed():
                mark = f.mark or mark
                if mark and isinstance(f.before, Restart):
                    assert f.after.record.connect_withdrawn == mark

    @invariant()
    def cancel_is_fed_only_by_the_hub(self) -> None:
        """Every Cancel the machine took came from the hub's withdrawal, where the table allows it."""
        for d in self.daemons:
            for f in d.fed():
                if isinstance(f.event, Cancel):
                    assert f.mark and TABLE.allows(f.before.step, "cancel")

    @invariant()
    def persist_precedes_the_first_pane_touching_effect(self) -> None:
        """A Persist of the restart record is emitted before its first effect that touches the pane."""
        assert not any(d.touched_before_persist for d in self.daemons)

    @invariant()
    def replay_gives_the_same_states_and_effects(self) -> None:
        """Replaying the same events from the same starting values gives the same states and effects."""
        for d in self.daemons:
            for start, entries in d.segments:
                state: Restart | RestartRecord = start
                for f in entries:
                    if f.mark:
                        assert isinstance(state, Restart)
                        state = replace(state, record=replace(state.record, connect_withdrawn=f.mark))
                    if f.event is None:
                        assert state == f.after
                        continue
                    state, effects = step(state, f.event)
                    assert state == f.after and effects == f.effects

    def teardown(self) -> None:
        # the agent settles and the daemon drives the last restart to its end; it is checked like the rest
        d = self.d
        if d is None or d.state is None:  # no restart, or a crash before anything was persisted
            return
        d.pane.busy = d.pane.draft = False
        for _ in range(100):
            if not d.active and not d.queue:
                break
            if d.pane.quitting:
                d.pane.process_ends()
            if not d.queue and d.state is not None and d.state.step is S.EXIT_SENT and d.pane.condition() is PaneCondition.LIVE:
                d.time_out()  # it ignored the exit command
            elif not d.turn():
                d.time_out()  # the pane cannot be read: its deadline answers
        assert d.state is not None and d.state.final and not d.queue
        self.finished_restarts_left_the_pane_live_with_its_option_and_the_record_closed()


TestRestartModel = RestartModel.TestCase
TestRestartModel.settings = settings(
    max_examples=200, stateful_step_count=50, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
