"""Restart-to-connect on real tmux: drives ``connectcore.restart`` and runs its effects.

The core machine decides every step (persist first, remain-on-exit, the harness's own exit command,
respawn in place with the resume argv, restore the option, recovery from any persisted step); this
module only executes effects and answers with observations. The new process gets a fresh token in
its environment (never on a command line) that joins the session's principal through its alias.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import anyio

from connectcore import directory as D
from connectcore import grants
from connectcore import hub as H
from connectcore import launchers as L
from connectcore import restart as R
from connectcore.effects import Audit, Effect, ExitAgent, Notify, Persist, Respawn, SetPaneOption
from connectcore.grants import PRESET_SCOPES, Preset
from connectcore.screen import Activity, Composer, read_screen
from connectd.tmux import TmuxError

if TYPE_CHECKING:
    from connectd.engine import Engine

log = logging.getLogger("connectd.restart")
POLL = 0.25


class Restarter:
    def __init__(self, engine: Engine, limits: R.RestartLimits | None = None) -> None:
        self.engine = engine
        self.limits = limits or R.RestartLimits()
        self.active: dict[str, R.Restart] = {}  # restart id -> state
        self.tokens: dict[str, tuple[str, frozenset[grants.Scope]]] = {}  # restart id -> (token, scopes)
        self.extra_env: dict[str, dict[str, str]] = {}  # restart id -> the launch's own --env

    # --- starting ---------------------------------------------------------------------------------

    async def begin(self, pane_id: str, preset: Preset) -> dict[str, Any]:
        """Plan the restart (refusing what cannot be restarted, with the reason) and start it."""
        from connectd.engine import EngineError, new_id, new_token

        engine = self.engine
        scopes = PRESET_SCOPES[preset]
        if not scopes:
            raise EngineError("bad_preset", "restart-to-connect needs observe or collaborate")
        grants.check_grantable(scopes, engine.hub.book.cap)
        record = engine.directory.panes.get(pane_id)
        if record is None:
            raise EngineError("unknown_target", f"no live pane {pane_id}")
        if any(s.record.pane_id == pane_id for s in self.active.values()):
            raise EngineError("restart_running", f"a restart of {pane_id} is already under way")
        launch = await engine.launch_record(pane_id, record.token)
        if launch is None:
            raise EngineError(
                "not_restartable",
                f"{pane_id} was not started by connectd from a structured launcher: connect it at its next launch",
            )
        launcher = engine.launchers.get(launch.launcher)
        if launcher is None or not launcher.restartable:
            reason = launcher.restart_refusal if launcher else f"launcher {launch.launcher!r} is no longer configured"
            raise EngineError("not_restartable", reason)
        binding = D.binding(engine.directory, pane_id)
        session_id = binding.session_id if isinstance(binding, D.SessionBinding) else launch.session_id
        if not session_id:
            raise EngineError("ambiguous_binding", f"{pane_id} holds no unambiguously bound session to resume")
        token = new_token()
        extra_env = engine.launch_env.get((pane_id, record.token), {})
        plan = L.resume_plan(launcher, session_id, endpoint_url=engine.endpoint_url, extra_env=extra_env)
        assert plan.token_env is not None
        original = await engine.tmux.get_pane_option(pane_id, R.REMAIN_ON_EXIT)
        restart_id = new_id("restart")
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
        self.tokens[restart_id] = (token, scopes)
        self.extra_env[restart_id] = dict(extra_env)
        self.active[restart_id] = state
        assert engine._tg is not None
        engine._tg.start_soon(self._drive, restart_id, R.Begin(now=engine.clock()))
        return {"restart": restart_id, "pane": pane_id, "session": [launcher.harness, session_id], "step": state.record.step.value}

    async def recover_open(self) -> None:
        """Daemon start: finish every restart record left open by a crash."""
        for record in await anyio.to_thread.run_sync(self.engine.store.open_restarts):
            self.active[record.restart_id] = R.resume(record, self.limits)
            condition = await self._condition(record.pane_id)
            assert self.engine._tg is not None
            self.engine._tg.start_soon(self._drive, record.restart_id, R.Recover(now=self.engine.clock(), condition=condition, env=await self._fresh_env(record)))

    # --- driving ------------------------------------------------------------------------------------

    async def _drive(self, restart_id: str, event: R.RestartEvent) -> None:
        engine = self.engine
        try:
            while True:
                state = self.active[restart_id]
                state, effects = R.step(state, event)
                self.active[restart_id] = state
                observe = inspect = False
                for effect in effects:
                    if isinstance(effect, R.ObservePane):
                        observe = True
                    elif isinstance(effect, R.InspectPane):
                        inspect = True
                    else:
                        await self._run(effect)
                if state.record.step in R.FINAL:
                    self.active.pop(restart_id, None)
                    self.tokens.pop(restart_id, None)
                    self.extra_env.pop(restart_id, None)
                    return
                event = await self._next_event(state, observe, inspect)
        except (R.RestartError, TmuxError) as exc:
            log.error("restart %s stopped: %s", restart_id, exc)
            await engine.audit(Audit(R.ACTOR, "restart", "error", target=restart_id, detail=str(exc), at=engine.clock()))
            self.active.pop(restart_id, None)

    async def _next_event(self, state: R.Restart, observe: bool, inspect: bool) -> R.RestartEvent:
        engine = self.engine
        record = state.record
        if inspect:
            return R.Recover(now=engine.clock(), condition=await self._condition(record.pane_id), env=await self._fresh_env(record))
        if record.step in R.AWAITING_DONE:
            return R.StepDone(now=engine.clock(), step=record.step)
        while True:  # observing: answer when something the machine cares about is seen, or time out
            if state.deadline is not None and engine.clock() >= state.deadline:
                return R.Timeout(now=engine.clock())
            seen = await self._observe(record)
            if seen is not None and self._meaningful(record.step, seen, record):
                return seen
            await anyio.sleep(POLL)

    @staticmethod
    def _meaningful(step: R.RestartStep, seen: R.PaneObserved, record: R.RestartRecord) -> bool:
        if step in (R.RestartStep.WAITING_IDLE, R.RestartStep.RECHECKING_IDLE):
            return seen.incarnation != record.incarnation or (seen.idle and seen.composer_empty)
        if step is R.RestartStep.EXIT_SENT:
            return seen.pane_dead or seen.incarnation != record.incarnation
        return seen.agent_running and seen.incarnation != record.incarnation or seen.pane_dead

    async def _observe(self, record: R.RestartRecord) -> R.PaneObserved | None:
        engine = self.engine
        await engine.tmux.reap()
        info = next((p for p in await engine.tmux.list_panes() if p.pane_id == record.pane_id), None)
        if info is None:
            return None
        if info.dead or not info.pane_pid or not info.process_start_time:
            return R.PaneObserved(now=engine.clock(), pane_id=record.pane_id, incarnation=record.incarnation, agent_running=False, idle=False, composer_empty=False, pane_dead=True)
        incarnation = engine._token_of(info)
        capture = await engine.tmux.capture(record.pane_id)
        reading = read_screen(capture.text, info.current_command, capture.cursor, height=capture.height)
        return R.PaneObserved(
            now=engine.clock(),
            pane_id=record.pane_id,
            incarnation=incarnation,
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

    async def _fresh_env(self, record: R.RestartRecord) -> dict[str, str] | None:
        """After a crash the token was never persisted: mint a fresh one for a planned respawn."""
        from connectd.engine import new_token

        if record.restart_id in self.tokens:
            return None
        launcher = self.engine.launchers.get(record.launcher)
        if launcher is None or not launcher.restartable:
            return None
        plan = L.resume_plan(launcher, record.session_id, endpoint_url=self.engine.endpoint_url)
        assert plan.token_env is not None
        token = new_token()
        scopes = grants.session_scopes(self.engine.hub.book, (record.harness, record.session_id)) or PRESET_SCOPES[Preset.OBSERVE]
        self.tokens[record.restart_id] = (token, scopes)
        return {**plan.env_add, plan.token_env: token}

    async def _run(self, effect: Effect) -> None:
        engine = self.engine
        if isinstance(effect, (Persist, Audit)):
            await anyio.to_thread.run_sync(engine.store.apply, (effect,))
        elif isinstance(effect, Notify):
            engine.subscribers.publish({"topic": effect.topic, "key": list(effect.key), **dict(effect.payload)})
        elif isinstance(effect, SetPaneOption):
            await engine.tmux.set_pane_option(effect.pane_id, effect.option, effect.value)
        elif isinstance(effect, ExitAgent):
            await engine.tmux.send_exit_command(effect.pane_id, effect.command)
        elif isinstance(effect, Respawn):
            await engine.tmux.respawn(effect.pane_id, list(effect.argv), effect.cwd, dict(effect.env))
            await self._bind_new_incarnation(effect)

    async def _bind_new_incarnation(self, effect: Respawn) -> None:
        """The respawned process gets its token bound to its own incarnation, under the session's
        principal (through the alias), and a launch record so it can be restarted again."""
        from connectd.engine import hash_token, new_id

        engine = self.engine
        restart_id = next((rid for rid, s in self.active.items() if s.record.pane_id == effect.pane_id), None)
        if restart_id is None or restart_id not in self.tokens:
            return
        record = self.active[restart_id].record
        token, scopes = self.tokens[restart_id]
        info, incarnation = await engine._fresh_incarnation(effect.pane_id)
        if info is None or incarnation is None:
            return
        engine.launch_env[(effect.pane_id, incarnation)] = self.extra_env.get(restart_id, {})
        await engine.record_launch(
            effect.pane_id, incarnation, launcher=record.launcher, harness=record.harness,
            session_id=record.session_id, cwd=effect.cwd, argv=list(effect.argv), started_at=engine.clock(),
        )
        await engine.step(
            H.Launch(engine.clock(), hash_token(token), new_id("principal"), record.harness, effect.pane_id,
                     info.pane_pid or 0, incarnation, scopes, (record.harness, record.session_id))
        )
        await engine.poll_once()
