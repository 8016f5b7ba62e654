"""Restart-to-connect on real tmux: drives ``connectcore.restart`` and answers its questions.

The core machine decides every step (persist first, remain-on-exit, the harness's own exit command,
respawn in place with the resume argv, restore the option, recovery from any persisted step). This
module asks the core for each step, hands the effects to the interpreter, and answers with what it
sees: ``StepDone`` once a step's effects ran, ``StepFailed`` when one of them failed (or the pane could
not be read), ``PaneObserved`` while the machine observes, ``Recover`` when it inspects.

The recheck before the exit command and the exit command itself run under the pane's send lock, the
same lock delivery types under. The new process gets a fresh token in its environment (never on a
command line) that joins the session's principal through its alias, with the session's grant as it
is stored when the process is seen running.
"""

from __future__ import annotations

import logging
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any

import anyio

from connectcore import directory as D
from connectcore import grants
from connectcore import hub as H
from connectcore import launchers as L
from connectcore import restart as R
from connectcore.effects import Audit, Effect, Persist, Respawn
from connectcore.grants import PRESET_SCOPES, Preset
from connectcore.screen import Activity, Composer, read_screen
from connectd.ids import EngineError, hash_token
from connectd.interpreter import RestartEffectFailed
from connectd.supervisor import Kind
from connectd.tmux import TmuxError
from connectd.watcher import token_of

if TYPE_CHECKING:
    from connectd.engine import Engine

log = logging.getLogger("connectd.restart")
POLL = 0.25


class Restarts:
    def __init__(self, engine: Engine, limits: R.RestartLimits | None = None) -> None:
        self.engine = engine
        self.limits = limits or R.RestartLimits()
        self.active: dict[str, R.Restart] = {}  # restart id -> state
        self.tokens: dict[str, str] = {}  # restart id -> the token its respawn carries
        self.extra_env: dict[str, dict[str, str]] = {}  # restart id -> the launch's own --env

    # --- starting ---------------------------------------------------------------------------------

    async def begin(self, pane_id: str, preset: Preset) -> dict[str, Any]:
        """Plan the restart (refusing what cannot be restarted, with the reason) and start it."""
        engine = self.engine
        scopes = PRESET_SCOPES[preset]
        if not scopes:
            raise EngineError("bad_preset", "restart-to-connect needs observe or collaborate")
        grants.check_grantable(scopes, engine.hub.book.cap)
        record = engine.watcher.directory.panes.get(pane_id)
        if record is None:
            raise EngineError("unknown_target", f"no live pane {pane_id}")
        if any(s.record.pane_id == pane_id for s in self.active.values()):
            raise EngineError("restart_running", f"a restart of {pane_id} is already under way")
        launch = await engine.launches.record_for(pane_id, record.token)
        if launch is None:
            raise EngineError(
                "not_restartable",
                f"{pane_id} was not started by connectd from a structured launcher: connect it at its next launch",
            )
        launcher = engine.launchers.get(launch.launcher)
        if launcher is None or not launcher.restartable:
            reason = launcher.restart_refusal if launcher else f"launcher {launch.launcher!r} is no longer configured"
            raise EngineError("not_restartable", reason)
        binding = D.binding(engine.watcher.directory, pane_id)
        session_id = binding.session_id if isinstance(binding, D.SessionBinding) else launch.session_id
        if not session_id:
            raise EngineError("ambiguous_binding", f"{pane_id} holds no unambiguously bound session to resume")
        token = engine.ids.new_token()
        extra_env = engine.launches.env.get((pane_id, record.token), {})
        plan = L.resume_plan(launcher, session_id, endpoint_url=engine.endpoint_url, extra_env=extra_env)
        assert plan.token_env is not None
        original = await engine.tmux.get_pane_option(pane_id, R.REMAIN_ON_EXIT)
        restart_id = engine.ids.new_id("restart")
        state = R.plan_restart(
            R.RestartPlan(
                restart_id=restart_id,
                pane_id=pane_id,
                incarnation=record.token,
                original_remain_on_exit=original if original in R.REMAIN_ON_EXIT_VALUES else None,
                harness=launcher.harness,
                session_id=session_id,
                launcher=launcher.name,
                exit_command=launcher.exit_command or "/exit",
                resume_argv=plan.argv,
                cwd=launch.cwd or record.cwd,
                env={**plan.env_add, plan.token_env: token},
            ),
            self.limits,
        )
        await engine.step(H.SetGrant(engine.clock(), (launcher.harness, session_id), scopes))
        self.tokens[restart_id] = token
        self.extra_env[restart_id] = dict(extra_env)
        self.active[restart_id] = state
        self._spawn(restart_id, R.Begin(now=engine.clock()))
        return {"restart": restart_id, "pane": pane_id, "session": [launcher.harness, session_id], "step": state.record.step.value}

    async def recover_open(self) -> None:
        """Daemon start: finish every restart record left open by a crash."""
        engine = self.engine
        for record in await engine.run_sync(engine.store.open_restarts):
            self.active[record.restart_id] = R.resume(record, self.limits)
            try:
                condition = await self._condition(record.pane_id)
            except TmuxError as exc:
                log.warning("restart %s: cannot inspect %s yet: %s", record.restart_id, record.pane_id, exc)
                condition = R.PaneCondition.LIVE  # touch nothing now; the option is restored, the record closed
            self._spawn(record.restart_id, R.Recover(now=engine.clock(), condition=condition, env=self._fresh_env(record)))

    def _spawn(self, restart_id: str, first: R.RestartEvent) -> None:
        self.engine.supervisor.spawn(
            Kind.RESTART, self._drive, restart_id, first, name=f"restart {restart_id}",
            on_error=lambda exc: self._abandon(restart_id, exc),
        )

    async def _abandon(self, restart_id: str, exc: Exception) -> None:
        """A bug stopped the driver: the record stays open, so the next start recovers it."""
        engine = self.engine
        self.active.pop(restart_id, None)
        await engine.audit(Audit(R.ACTOR, "restart", "error", target=restart_id, detail=str(exc)[:300], at=engine.clock()))

    # --- driving ------------------------------------------------------------------------------------

    async def _drive(self, restart_id: str, event: R.RestartEvent) -> None:
        engine = self.engine
        while True:
            async with AsyncExitStack() as held:
                state = self.active[restart_id]
                if state.step is R.RestartStep.RECHECKING_IDLE and isinstance(event, R.PaneObserved):
                    await held.enter_async_context(engine.tmux.pane_lock(state.record.pane_id))
                    event = await self._fresh_recheck(state, event)
                try:
                    state, effects = await self._step(restart_id, event)
                    failure: str | None = None
                except RestartEffectFailed as exc:
                    state, effects, failure = self.active[restart_id], (), str(exc)
            if state.final:
                self._forget(restart_id)
                return
            if failure is not None:
                event = R.StepFailed(now=engine.clock(), step=state.step, reason=failure)
                continue
            event = await self._next_event(state, effects)

    async def _fresh_recheck(self, state: R.Restart, event: R.RestartEvent) -> R.RestartEvent:
        """Under the send lock, the recheck is read afresh right before the exit command (R1)."""
        if not isinstance(event, R.PaneObserved):
            return event
        try:
            seen = await self._observe(state.record)
        except TmuxError as exc:
            return R.StepFailed(now=self.engine.clock(), step=state.step, reason=f"the pane could not be read: {exc}")
        return seen if seen is not None else event

    async def _step(self, restart_id: str, event: R.RestartEvent) -> tuple[R.Restart, tuple[Effect, ...]]:
        """Step the machine, commit its records, and interpret its effects (raising
        :class:`RestartEffectFailed` when one could not be executed)."""
        engine = self.engine
        state, effects = R.step(self.active[restart_id], event)
        records = tuple(e for e in effects if isinstance(e, Persist | Audit))
        if records:
            await engine.run_sync(engine.store.apply, records)
        self.active[restart_id] = state
        await engine.interpreter.run(effects)
        return state, effects

    def _forget(self, restart_id: str) -> None:
        self.active.pop(restart_id, None)
        self.tokens.pop(restart_id, None)
        self.extra_env.pop(restart_id, None)

    async def _next_event(self, state: R.Restart, effects: tuple[Effect, ...]) -> R.RestartEvent:
        engine = self.engine
        record = state.record
        if any(isinstance(e, R.InspectPane) for e in effects):
            try:
                condition = await self._condition(record.pane_id)
            except TmuxError as exc:
                return R.StepFailed(now=engine.clock(), step=state.step, reason=f"the pane could not be inspected: {exc}")
            return R.Recover(now=engine.clock(), condition=condition, env=self._fresh_env(record))
        if record.step in R.AWAITING_DONE:
            return R.StepDone(now=engine.clock(), step=record.step)
        while True:  # observing: answer when something the machine cares about is seen, or time out
            if state.deadline is not None and engine.clock() >= state.deadline:
                return R.Timeout(now=engine.clock())
            try:
                seen = await self._observe(record)
            except TmuxError as exc:
                return R.StepFailed(now=engine.clock(), step=state.step, reason=f"the pane could not be read: {exc}")
            if seen is not None and _moves(state, seen):
                return seen
            await anyio.sleep(POLL)

    async def _observe(self, record: R.RestartRecord) -> R.PaneObserved | None:
        engine = self.engine
        await engine.tmux.reap()
        info = next((p for p in await engine.tmux.list_panes() if p.pane_id == record.pane_id), None)
        if info is None:
            return None
        if info.dead or not info.pane_pid or not info.process_start_time:
            return R.PaneObserved(now=engine.clock(), pane_id=record.pane_id, incarnation=record.incarnation, agent_running=False, idle=False, composer_empty=False, pane_dead=True)
        capture = await engine.tmux.capture(record.pane_id)
        reading = read_screen(capture.text, info.current_command, capture.cursor, height=capture.height)
        return R.PaneObserved(
            now=engine.clock(),
            pane_id=record.pane_id,
            incarnation=token_of(info),
            agent_running=reading.harness.value == record.harness,
            idle=reading.activity is Activity.IDLE,
            composer_empty=reading.composer is Composer.EMPTY,
        )

    async def _condition(self, pane_id: str) -> R.PaneCondition:
        await self.engine.tmux.reap()
        info = next((p for p in await self.engine.tmux.list_panes() if p.pane_id == pane_id), None)
        if info is None:
            return R.PaneCondition.GONE
        return R.PaneCondition.DEAD if info.dead or not info.pane_pid else R.PaneCondition.LIVE

    def _fresh_env(self, record: R.RestartRecord) -> dict[str, str] | None:
        """After a crash the token was never persisted: a fresh one for a planned respawn (it is bound
        only if the session's stored grant still connects it)."""
        if record.restart_id in self.tokens:
            return None
        launcher = self.engine.launchers.get(record.launcher)
        if launcher is None or not launcher.restartable:
            return None
        plan = L.resume_plan(launcher, record.session_id, endpoint_url=self.engine.endpoint_url)
        assert plan.token_env is not None
        token = self.engine.ids.new_token()
        self.tokens[record.restart_id] = token
        return {**plan.env_add, plan.token_env: token}

    # --- the respawned process --------------------------------------------------------------------

    async def respawned(self, effect: Respawn) -> None:
        """The respawned process gets its token bound to its own incarnation, under the session's
        principal (through the alias), and a launch record so it can be restarted again."""
        engine = self.engine
        restart_id = next((rid for rid, s in self.active.items() if s.record.pane_id == effect.pane_id), None)
        if restart_id is None or restart_id not in self.tokens:
            return
        record = self.active[restart_id].record
        token = self.tokens[restart_id]
        info, incarnation = await engine.watcher.fresh_incarnation(effect.pane_id)
        if info is None or incarnation is None:
            return
        engine.launches.env[(effect.pane_id, incarnation)] = self.extra_env.get(restart_id, {})
        await engine.launches.record(
            effect.pane_id, incarnation, launcher=record.launcher, harness=record.harness,
            session_id=record.session_id, cwd=effect.cwd, argv=list(effect.argv), started_at=engine.clock(),
        )
        scopes = grants.session_scopes(engine.hub.book, (record.harness, record.session_id))
        if scopes:
            await engine.step(
                H.Launch(engine.clock(), hash_token(token), engine.ids.new_id("principal"), record.harness, effect.pane_id,
                         info.pane_pid or 0, incarnation, scopes, (record.harness, record.session_id))
            )
        await engine.watcher.poll()


def _moves(state: R.Restart, seen: R.PaneObserved) -> bool:
    try:
        return R.moves(state, seen)
    except R.RestartError:  # a read from before the step began: look again
        return False
