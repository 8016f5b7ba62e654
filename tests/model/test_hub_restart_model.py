"""Joint model of the hub and its restarts: restarts-to-connect interleaved with revocations, new grants,
disconnect-all, daemon crashes and delivery (submit, consent, pane readings, guards, typing).

The driver is the shell that ships once restarts join the hub: it runs each restart effect in order
against a small fake pane, answers ``StepDone`` after the effects of a step in ``AWAITING_DONE``
(``StepFailed`` instead when one of them raised), ``PaneObserved`` while observing, ``Recover`` while
recovering, ``Timeout`` at the deadline, and ``RestartRespawned`` right after a ``Respawn`` ran; it never
feeds ``restart.Cancel`` itself (only the hub does, on revocation).
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field, replace

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from connectcore import arming, grants
from connectcore import hub as H
from connectcore import restart as R
from connectcore.consent import Decision
from connectcore.delivery import MessageState
from connectcore.effects import (
    CheckGuard,
    ConfirmTyping,
    Effect,
    ExitAgent,
    Persist,
    Respawn,
    SetPaneOption,
    TypeText,
)
from connectcore.grants import PRESET_SCOPES, Preset
from tests.unit.hubkit import confirming

S = R.RestartStep
LIMITS = R.RestartLimits(idle_wait=60.0, step=5.0, exit=10.0, respawn=10.0, recoveries=3)
ENV = {"CONNECT_TOKEN": "fresh"}
TARGETS = ("b", "c")  # b starts connected (Collaborate), c runs unconnected (Off)
NAMES = ("a", "b", "c")
PRESETS = st.sampled_from([Preset.OFF, Preset.OBSERVE, Preset.COLLABORATE, Preset.COLLABORATE])


@dataclass
class FakePane:
    """The part of a tmux pane a restart and a delivery touch."""

    pane_id: str
    incarnation: str
    option: str | None = None
    dead: bool = False
    busy: bool = False
    quitting: bool = False
    spawned: int = 0

    def observed(self, now: float) -> R.PaneObserved:
        return R.PaneObserved(
            now=now,
            pane_id=self.pane_id,
            incarnation=self.incarnation,
            agent_running=not self.dead,
            idle=not self.busy,
            composer_empty=True,
            pane_dead=self.dead,
        )


@dataclass
class Open:
    """What the driver knows of one restart it runs."""

    rid: str
    name: str
    began_at: float
    original: str | None  # the pane's remain-on-exit when the restart was planned
    queue: list[Effect] = field(default_factory=list)  # restart effects not yet run, in order
    failed: bool = False  # an effect of the current step raised: answer StepFailed
    respawned: str | None = None  # a Respawn ran: the new incarnation, until RestartRespawned is stepped
    withdrawn: bool = False  # the model's own record: revoked / regranted / disconnected since it began


class HubRestartModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.hub = H.Hub()
        self.now = 1000.0
        self.n = 0
        self.panes = {name: FakePane(f"%{i + 1}", f"inc-{name}-0") for i, name in enumerate(NAMES)}
        self.tokens: dict[str, str] = {}
        self.open: dict[str, Open] = {}  # restart id -> driver view
        self.store: dict[str, R.RestartRecord] = {}  # persisted restart records
        self.closed: list[tuple[R.RestartOutcome | None, bool, bool]] = []  # outcome, option restored, pane dead
        self.violations: list[str] = []
        self.crashing = False  # between a daemon's death and its successor's resumption of the records
        self.pending_guards: list[CheckGuard] = []
        self.pending_typing: list[ConfirmTyping] = []
        for name in ("a", "b"):
            self.launch(name)

    # --- plumbing ---------------------------------------------------------------------------------

    def fresh(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}{self.n}"

    def session(self, name: str) -> tuple[str, str]:
        return ("claude", f"s-{name}")

    def launch(self, name: str) -> None:
        token, pane = self.fresh("tok"), self.panes[name]
        self.apply(
            H.Launch(self.now, token, self.fresh("p"), "claude", pane.pane_id, self.n, pane.incarnation,
                     PRESET_SCOPES[Preset.COLLABORATE], self.session(name))
        )
        self.tokens[name] = token

    def name_of_pane(self, pane_id: str) -> str:
        return next(n for n, p in self.panes.items() if p.pane_id == pane_id)

    def restart_of(self, name: str) -> Open | None:
        return next((o for o in self.open.values() if o.name == name), None)

    def apply(self, event: H.Event) -> tuple[Effect, ...]:
        before = self.hub
        self.hub, effects = H.step(self.hub, event)
        for effect in effects:
            if isinstance(effect, CheckGuard):
                if H.restart_of_pane(self.hub, effect.pane_id) is not None:
                    self.violations.append(f"CheckGuard for {effect.pane_id} while it is being restarted")
                self.pending_guards.append(effect)
            elif isinstance(effect, TypeText):
                if H.restart_of_pane(self.hub, effect.pane_id) is not None:
                    self.violations.append(f"TypeText into {effect.pane_id} while it is being restarted")
            elif isinstance(effect, ConfirmTyping):
                self.pending_typing.append(effect)
            elif isinstance(effect, Persist) and effect.kind == "token" and isinstance(event, H.RestartRespawned):
                self.token_issued(before, event)
            elif isinstance(effect, Persist) and effect.kind == R.STORE_KIND:
                self.store[effect.key[0]] = effect.record  # the engine commits a step's records with the step
            elif isinstance(effect, SetPaneOption | ExitAgent | Respawn):
                if isinstance(effect, ExitAgent) and any(
                    m.state is MessageState.TYPING and m.recipient_pane == effect.pane_id for m in self.hub.messages.values()
                ):
                    self.violations.append(f"ExitAgent into {effect.pane_id} while a message is typed into it")
                self.route(effect)
        self.note_closed()
        return effects

    def token_issued(self, before: H.Hub, event: H.RestartRespawned) -> None:
        o = self.open[event.restart_id]
        session = self.session(o.name)
        if o.withdrawn:
            self.violations.append(f"restart {o.rid} issued a token after its session's grant was revoked or set")
        principal = grants.authenticate(self.hub.book, event.token_hash)
        if not grants.scopes_of(self.hub.book, principal.id) <= grants.session_scopes(before.book, session):
            self.violations.append(f"restart {o.rid} issued more scopes than the stored grant")
        self.tokens[o.name] = event.token_hash

    def route(self, effect: SetPaneOption | ExitAgent | Respawn) -> None:
        rid = next(o.rid for o in self.open.values() if self.panes[o.name].pane_id == effect.pane_id)
        self.open[rid].queue.append(effect)

    def note_closed(self) -> None:
        if self.crashing:
            return
        for rid, o in list(self.open.items()):
            if rid not in self.hub.restarts and not o.queue and o.respawned is None:
                del self.open[rid]
                record = self.store.get(rid)
                pane = self.panes[o.name]
                outcome = record.outcome if record is not None else R.RestartOutcome.CANCELLED
                self.closed.append((outcome, pane.option == o.original, pane.dead))

    def withdraw(self, names: tuple[str, ...]) -> None:
        for o in self.open.values():
            if o.name in names:
                o.withdrawn = True

    # --- the driver -------------------------------------------------------------------------------

    def run_head(self, o: Open, fail: bool) -> None:
        state = self.hub.restarts.get(o.rid)
        effect = o.queue.pop(0)
        if fail and state is not None and state.step in R.AWAITING_DONE:
            o.queue.clear()
            o.failed = True
            return
        pane = self.panes[o.name]
        if isinstance(effect, SetPaneOption):
            pane.option = effect.value
        elif isinstance(effect, ExitAgent):
            pane.quitting = not pane.busy and not pane.dead
        elif isinstance(effect, Respawn):
            if not pane.dead:  # respawn-pane refuses a live pane: the effect raised
                o.queue.clear()
                o.failed = True
                return
            pane.spawned += 1
            pane.incarnation = f"inc-{o.name}-{pane.spawned}"
            pane.dead = pane.busy = pane.quitting = False
            o.respawned = pane.incarnation

    def drive(self, o: Open, fail: bool = False) -> None:
        """The driver's next move for this restart."""
        if o.queue:
            self.run_head(o, fail)
            self.note_closed()
            return
        if o.respawned is not None:
            incarnation, o.respawned = o.respawned, None
            token = self.fresh("tok")
            self.apply(H.RestartRespawned(self.now, o.rid, token, self.fresh("p"), self.n, incarnation))
            return
        state = self.hub.restarts.get(o.rid)
        if state is None:
            self.note_closed()
            return
        pane = self.panes[o.name]
        if pane.quitting:  # the agent took its exit command: its process ends
            pane.quitting, pane.dead = False, pane.option == "on"
        event: R.RestartEvent
        if o.failed:
            o.failed = False
            event = R.StepFailed(now=self.now, step=state.step, reason="injected")
        elif state.step in R.AWAITING_DONE:
            event = R.StepDone(now=self.now, step=state.step)
        elif state.step in R.OBSERVING:
            event = pane.observed(self.now)
        else:  # RECOVERING, or a step in WAITING at its deadline
            if state.step in R.WAITING and state.deadline is not None:
                self.now = max(self.now, state.deadline)
            condition = R.PaneCondition.DEAD if pane.dead else R.PaneCondition.LIVE
            event = R.Recover(now=self.now, condition=condition, env=ENV if state.env is None else None)
        self.apply(H.RestartStepped(self.now, o.rid, event))

    # --- rules: restarts --------------------------------------------------------------------------

    @rule(name=st.sampled_from(TARGETS), preset=st.sampled_from([Preset.OBSERVE, Preset.COLLABORATE, Preset.COLLABORATE]))
    def restart_to_connect(self, name: str, preset: Preset) -> None:
        pane = self.panes[name]
        rid = self.fresh("r")
        state = R.plan_restart(
            R.RestartPlan(
                restart_id=rid, pane_id=pane.pane_id, incarnation=pane.incarnation, original_remain_on_exit=pane.option,
                harness="claude", session_id=self.session(name)[1], launcher="claude", exit_command="/exit",
                resume_argv=("claude", "--resume", self.session(name)[1]), cwd="/w", env=ENV,
            ),
            LIMITS,
        )
        before = copy.deepcopy(self.hub)
        try:
            self.open[rid] = Open(rid, name, self.now, pane.option)
            self.apply(H.RestartPlanned(self.now, state, self.session(name), PRESET_SCOPES[preset]))
        except H.RestartRefused as refused:
            del self.open[rid]
            assert refused.reason == "restart_running" and self.hub == before and self.restart_of(name) is not None

    @precondition(lambda self: self.pending_guards or self.pending_typing)
    @rule(preset=st.sampled_from([Preset.OBSERVE, Preset.COLLABORATE]))
    def restart_while_delivery_is_in_flight(self, preset: Preset) -> None:
        """The owner's restart is planned between a CheckGuard (or ConfirmTyping) and its answer."""
        pending = [*self.pending_guards, *self.pending_typing]
        name = self.name_of_pane(pending[0].pane_id)
        if name in TARGETS:
            self.restart_to_connect(name, preset)

    @precondition(lambda self: self.open)
    @rule(pick=st.integers(0, 3), moves=st.integers(1, 16), fail=st.booleans())
    def driver(self, pick: int, moves: int, fail: bool) -> None:
        o = sorted(self.open.values(), key=lambda x: x.rid)[pick % len(self.open)]
        for i in range(moves):
            if o.rid not in self.open:
                return
            self.drive(o, fail=fail and i == 0)

    @precondition(lambda self: self.open)
    @rule(pick=st.integers(0, 3), until=st.sampled_from([S.RECHECKING_IDLE, S.EXIT_SENT, S.PROCESS_ENDED, S.RESPAWNED]))
    def driver_until(self, pick: int, until: R.RestartStep) -> None:
        """The driver runs one restart on until it enters ``until`` (or 30 moves, or it closes)."""
        o = sorted(self.open.values(), key=lambda x: x.rid)[pick % len(self.open)]
        for _ in range(30):
            state = self.hub.restarts.get(o.rid)
            if o.rid not in self.open or (state is not None and state.step is until):
                return
            self.drive(o)

    @rule(name=st.sampled_from(TARGETS), busy=st.booleans())
    def agent_works(self, name: str, busy: bool) -> None:
        pane = self.panes[name]
        if not pane.dead:
            pane.busy = busy

    def _timed(self) -> list[Open]:
        """The open restarts a deadline can time out: not in ``R.WAITING`` (at a retry's deadline the
        daemon's driver inspects the pane, ``RestartToConnect._waited``: it never steps a ``Timeout``)."""
        return sorted((o for o in self.open.values() if o.rid in self.hub.restarts and not o.queue
                       and self.hub.restarts[o.rid].step not in R.WAITING), key=lambda x: x.rid)

    @precondition(lambda self: bool(self._timed()))
    @rule(pick=st.integers(0, 3))
    def time_out(self, pick: int) -> None:
        candidates = self._timed()
        o = candidates[pick % len(candidates)]
        state = self.hub.restarts[o.rid]
        assert state.deadline is not None
        self.now = max(self.now, state.deadline)
        o.failed = False
        if o.respawned is not None:
            self.drive(o)  # the driver binds the respawn right after it ran, before any later answer
            if o.rid not in self.hub.restarts:
                return
        self.apply(H.RestartStepped(self.now, o.rid, R.Timeout(now=self.now)))

    @precondition(lambda self: self.open)
    @rule()
    def daemon_restarts(self) -> None:
        """The daemon dies between two moves; its successor resumes every open persisted record."""
        self.hub = replace(self.hub, restarts={})
        self.crashing = True
        self.apply(H.Recover(self.now))
        self.pending_guards, self.pending_typing = [], []
        for rid, o in sorted(self.open.items()):
            o.queue.clear()
            o.failed = False
            record = self.store.get(rid)
            if o.respawned is not None:  # the process runs, but no token was issued for it
                o.respawned = None
            if record is None or not record.open:
                continue
            o.withdrawn = o.withdrawn or bool(record.connect_withdrawn)
            self.apply(H.RestartRecovered(self.now, record, LIMITS))
            pane = self.panes[o.name]
            pane.quitting = False
            condition = R.PaneCondition.DEAD if pane.dead else R.PaneCondition.LIVE
            self.apply(H.RestartStepped(self.now, rid, R.Recover(now=self.now, condition=condition, env=ENV)))
        self.crashing = False
        self.note_closed()

    # --- rules: grants ----------------------------------------------------------------------------

    @rule(
        kind=st.sampled_from(["revoke", "set_grant", "set_grant", "disconnect_all"]),
        name=st.sampled_from(TARGETS),
        preset=PRESETS,
    )
    def owner_changes_a_grant(self, kind: str, name: str, preset: Preset) -> None:
        """Revoke, a new grant (Off included) or disconnect-all; the sender is relaunched after the last."""
        if kind == "revoke":
            principal = self.hub.book.aliases.get(self.session(name))
            if principal is None:
                return
            self.withdraw((name,))
            self.apply(H.Revoke(self.now, principal))
        elif kind == "set_grant":
            self.withdraw((name,))
            self.apply(H.SetGrant(self.now, self.session(name), PRESET_SCOPES[preset]))
        else:
            self.withdraw(NAMES)
            self.apply(H.DisconnectAll(self.now))
            a = self.panes["a"]
            self.apply(H.PaneGone(self.now, a.pane_id, a.incarnation))
            a.spawned += 1
            a.incarnation = f"inc-a-{a.spawned}"
            self.apply(H.SetGrant(self.now, self.session("a"), PRESET_SCOPES[Preset.COLLABORATE]))
            self.launch("a")

    # --- rules: delivery --------------------------------------------------------------------------

    @rule(to=st.sampled_from(TARGETS), decision=st.sampled_from([Decision.APPROVE_ONCE, Decision.APPROVE_PAIR]))
    def send_and_consent(self, to: str, decision: Decision) -> None:
        pane = self.panes[to]
        event = H.Submit(self.now, self.tokens["a"], self.fresh("m"), "hello", H.Recipient(pane.pane_id, pane.incarnation, "claude"),
                         self.fresh("ref"), self.fresh("card"))
        try:
            self.apply(event)
        except H.CallRefused:
            return
        for card in sorted(c.id for c in self.hub.cards.values() if c.state.value == "pending"):
            self.apply(H.Decide(self.now, card, decision))
        if not pane.dead and not pane.busy:  # the recipient finishes a turn: read busy, then idle
            self.apply(H.PaneObserved(self.now, pane.pane_id, pane.incarnation, False, "f-busy", self.now))
            self.apply(H.PaneObserved(self.now, pane.pane_id, pane.incarnation, True, self.fresh("f"), self.now))

    @rule(name=st.sampled_from(TARGETS), fp=st.sampled_from(["f1", "f2"]))
    def pane_read(self, name: str, fp: str) -> None:
        pane = self.panes[name]
        if pane.dead:
            return
        self.apply(H.PaneObserved(self.now, pane.pane_id, pane.incarnation, not pane.busy, fp, self.now))

    @precondition(lambda self: self.pending_guards)
    @rule()
    def answer_guard(self) -> None:
        guard = self.pending_guards.pop(0)
        pane = self.panes[self.name_of_pane(guard.pane_id)]
        view = self.hub.panes.get(guard.pane_id)
        fp = view.fingerprint if view is not None else "none"
        self.apply(H.GuardObserved(self.now, guard.message, None if pane.dead else pane.incarnation, not pane.busy, fp, self.now, card_id=self.fresh("card")))

    @precondition(lambda self: self.pending_typing)
    @rule(landed=st.booleans())
    def answer_typing(self, landed: bool) -> None:
        confirm = self.pending_typing.pop(0)
        self.apply(H.TypingObserved(self.now, confirm.message, confirming(landed, read_at=self.now)))

    @rule(seconds=st.sampled_from([1.0, 20.0, 400.0]))
    def tick(self, seconds: float) -> None:
        self.now += seconds
        self.apply(H.Tick(self.now))

    # --- invariants -------------------------------------------------------------------------------

    @invariant()
    def no_restart_token_after_a_revocation_or_new_grant(self) -> None:
        """No token is ever issued by a restart for a session whose grant was revoked or set after the restart began."""
        assert not [v for v in self.violations if "after its session" in v]

    @invariant()
    def no_restart_token_above_the_stored_grant(self) -> None:
        """No token issued by a restart ever carries more scopes than the grant stored when it was issued."""
        assert not [v for v in self.violations if "more scopes" in v]

    @invariant()
    def no_guard_or_typing_for_a_pane_being_restarted(self) -> None:
        """No CheckGuard (and no TypeText) is emitted for a pane with an open restart."""
        assert not [v for v in self.violations if "while it is being restarted" in v]

    @invariant()
    def no_exit_command_while_a_message_is_typed(self) -> None:
        """No restart sends its exit command into a pane while a message is being typed into it."""
        assert not [v for v in self.violations if "ExitAgent" in v]

    @invariant()
    def the_hub_holds_only_open_restarts_and_one_per_pane(self) -> None:
        """The hub holds only open restarts, at most one per pane."""
        panes = [r.record.pane_id for r in self.hub.restarts.values()]
        assert len(panes) == len(set(panes)) and all(not r.final for r in self.hub.restarts.values())

    @invariant()
    def closed_restarts_left_the_pane_live_with_its_option(self) -> None:
        """Every closed restart left its pane with its original remain-on-exit, and live unless it gave up
        (R5) or was cancelled (which touches nothing: a pane an earlier restart gave up on may be dead)."""
        for outcome, restored, dead in self.closed:
            assert restored and (outcome in (R.RestartOutcome.GAVE_UP, R.RestartOutcome.CANCELLED) or not dead)

    def teardown(self) -> None:
        # every restart reaches a final step: the agents settle, quit when asked, and the driver runs on
        for pane in self.panes.values():
            pane.busy = False
        for _ in range(400):
            while self.pending_typing or self.pending_guards:  # delivery I/O is answered as it comes
                if self.pending_typing:
                    self.answer_typing(True)
                else:
                    self.answer_guard()
            if not self.open:
                break
            if any(v.arming is arming.Arming.AWAITING_TURN for v in self.hub.panes.values()):
                # a typed message's turn went unseen: the clock arms the pane (quiet), as in the daemon
                self.now += self.hub.limits.rearm_after
                self.apply(H.Tick(self.now))
            for pane in self.panes.values():
                if pane.quitting:
                    pane.quitting, pane.dead = False, pane.option == "on"
            o = sorted(self.open.values(), key=lambda x: x.rid)[0]
            state = self.hub.restarts.get(o.rid)
            if state is not None and not o.queue and o.respawned is None and state.step is S.EXIT_SENT and not self.panes[o.name].dead:
                self.now = max(self.now, state.deadline or self.now)
                self.apply(H.RestartStepped(self.now, o.rid, R.Timeout(now=self.now)))  # it ignored the exit
            else:
                self.drive(o)
        # every restart reaches a final step
        assert not self.open and not self.hub.restarts
        self.closed_restarts_left_the_pane_live_with_its_option()


TestHubRestartModel = HubRestartModel.TestCase
TestHubRestartModel.settings = settings(
    max_examples=int(os.environ.get("CONNECT_MODEL_EXAMPLES", "150")),
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
