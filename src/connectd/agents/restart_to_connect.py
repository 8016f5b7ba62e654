"""Restart-to-connect on real tmux: answers the questions of the restarts the hub holds.

The core decides every step (``connectcore.restart`` inside ``connectcore.hub``: persist first,
remain-on-exit, the harness's own exit command, respawn in place with the resume argv, restore the
option, recovery from any persisted step, and whether the respawned process gets a token at all). A
revocation or a new grant reaches an open restart in the hub itself, under the core lock. This module
only plans (refusing what cannot be restarted), then, for each open restart, one supervised driver
reads the restart's step from the hub and answers it through ``hub.RestartStepped``: ``StepDone``
once a step's effects ran, ``StepFailed`` when one of them failed, ``PaneObserved`` while the step
observes, ``Recover`` when it inspects, ``Timeout`` at its deadline. Every answer names the step it
answers (``for_step``), so one the hub has moved past meanwhile is dropped there.

The recheck before the exit command and the exit command itself run under the pane's send lock, the
same lock delivery types under. The new process gets a fresh token in its environment (never on a
command line); the hub binds it (``RestartRespawned``) with the session's grant as stored then, or
not at all.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import anyio

from connectcore import directory as D
from connectcore import grants
from connectcore import hub as H
from connectcore import launchers as L
from connectcore import restart as R
from connectcore.effects import Audit, Respawn
from connectcore.grants import PRESET_SCOPES, Preset
from connectcore.screen import Activity, Composer, read_screen
from connectd.daemon.ids import EngineError, hash_token
from connectd.daemon.interpreter import RestartEffectFailed
from connectd.daemon.supervisor import Kind
from connectd.store.store import STORE_ERRORS
from connectd.tmux.adapter import TmuxError
from connectd.tmux.watcher import token_of

if TYPE_CHECKING:
    from connectd.agents.launch import Launches
    from connectd.agents.launch_here import HerePanes
    from connectd.daemon.ids import Ids
    from connectd.daemon.runner import Core, RunSync
    from connectd.daemon.supervisor import Supervisor
    from connectd.tmux.adapter import TmuxAdapter
    from connectd.tmux.watcher import Watcher

log = logging.getLogger("connectd.restart")
POLL = 0.25
STORE_RETRY, STORE_RETRY_MAX = 0.5, 30.0  # a store that failed: the first wait, and where doubling stops


class Restarts:
    def __init__(
        self,
        *,
        core: Core,
        clock: Callable[[], float],
        ids: Ids,
        run_sync: RunSync,
        store: Any,
        tmux: TmuxAdapter,
        watcher: Watcher,
        launches: Launches,
        launchers: Mapping[str, L.Launcher],
        here: HerePanes,
        endpoint_url: str,
        supervisor: Callable[[], Supervisor],
        limits: R.RestartLimits | None = None,
    ) -> None:
        """``supervisor``: the running daemon's supervisor (each restart runs as one of its tasks)."""
        self.core, self.clock, self.ids, self.run_sync, self.store = core, clock, ids, run_sync, store
        self.tmux, self.watcher, self.launches, self.launchers, self.here = tmux, watcher, launches, launchers, here
        self.endpoint_url, self.supervisor = endpoint_url, supervisor
        self.limits = limits or R.RestartLimits()
        self.tokens: dict[str, str] = {}  # restart id -> the token its respawn environment carries
        self.extra_env: dict[str, dict[str, str]] = {}  # restart id -> the launch's own --env
        # restart id -> a step's effect that failed, until the core has heard it (StepFailed): a store
        # error while that is stepped must not let the next answer say the step was done
        self.failed: dict[str, R.StepFailed] = {}

    # --- starting ---------------------------------------------------------------------------------

    async def begin(self, pane_id: str, preset: Preset, *, by: str = "owner") -> dict[str, Any]:
        """Plan the restart (refusing what cannot be restarted, with the reason) and start it; ``by``:
        the person's audit actor."""
        scopes = PRESET_SCOPES[preset]
        record = self.watcher.directory.panes.get(pane_id)
        launch = await self.launches.record_for(pane_id, record.token) if record is not None else None
        bound = D.binding(self.watcher.directory, pane_id)
        launcher = self.launchers.get(launch.launcher) if launch is not None else None
        session = D.pane_session(bound, (launch.harness, launch.session_id)) if launch is not None else None
        refusal = R.plan_refusal(
            pane_id, scopes_given=bool(scopes), pane_live=record is not None, launched=launch is not None,
            launcher_name=launch.launcher if launch is not None else "", launcher=launcher, session=session,
            read_harness=record.harness if record is not None else None,
            bound_session=bound.session_id if isinstance(bound, D.SessionBinding) else None,
        )
        if refusal is not None:
            raise EngineError(refusal.reason, refusal.problem, refusal.fix)
        assert record is not None and launch is not None and launcher is not None and session is not None
        assert launcher.exit_command  # a launcher that can restart has one (Launcher.restart_refusal)
        session_id = session[1]
        token = self.ids.new_token()
        extra_env = self.launches.env.get((pane_id, record.token), {})
        plan = L.resume_plan(launcher, session_id, endpoint_url=self.endpoint_url, extra_env=extra_env)
        assert plan.token_env is not None
        original = await self.tmux.get_pane_option(pane_id, R.REMAIN_ON_EXIT)
        restart_id = self.ids.new_id("restart")
        state = R.plan_restart(
            R.RestartPlan(
                restart_id=restart_id,
                pane_id=pane_id,
                incarnation=record.token,
                original_remain_on_exit=original if original in R.REMAIN_ON_EXIT_VALUES else None,
                harness=launcher.harness,
                session_id=session_id,
                launcher=launcher.name,
                exit_command=launcher.exit_command,
                resume_argv=plan.argv,
                cwd=R.restart_cwd(launch.cwd, record.cwd),
                env={**plan.env_add, plan.token_env: token},
            ),
            self.limits,
        )
        session = (launcher.harness, session_id)
        try:
            await self.core.step(H.RestartPlanned(self.clock(), state, session, scopes, by=by))
        except (H.RestartRefused, grants.GrantError) as exc:
            raise EngineError(exc.reason, str(exc)) from exc
        self.tokens[restart_id] = token
        self.extra_env[restart_id] = dict(extra_env)
        self._spawn(restart_id)
        return {"restart": restart_id, "pane": pane_id, "session": list(session), "step": R.RestartStep.WAITING_IDLE.value}

    async def recover_open(self) -> None:
        """Daemon start: every restart record left open by a crash rejoins the hub and is recovered."""
        for record in await self.run_sync(self.store.open_restarts):
            try:
                await self.core.step(H.RestartRecovered(self.clock(), record, self.limits))
            except H.RestartRefused as exc:
                log.warning("restart %s not recovered: %s", record.restart_id, exc)
                continue
            self._spawn(record.restart_id, recovering=True)

    def _spawn(self, restart_id: str, *, recovering: bool = False) -> None:
        self.supervisor().spawn(
            Kind.RESTART, self._drive, restart_id, recovering, name=f"restart {restart_id}",
            on_error=lambda exc: self._stopped(restart_id, exc),
        )

    async def _stopped(self, restart_id: str, exc: Exception) -> None:
        """A bug stopped the driver: the record stays open in the store, so the next start recovers it;
        the owner is told."""
        self._forget(restart_id)
        await self.core.audit(Audit(R.ACTOR, "restart", "error", target=restart_id, detail=str(exc)[:300], at=self.clock()))

    # --- driving ------------------------------------------------------------------------------------

    async def _drive(self, restart_id: str, recovering: bool = False) -> None:
        """Answer the restart's current step until the hub closes it. A store that fails while an
        answer is stepped leaves the restart as it was (the runner rolled the step back): the driver
        answers again after a backoff, so the restart is never stranded with remain-on-exit on."""
        first, wait = recovering, STORE_RETRY
        while (state := self.core.hub.restarts.get(restart_id)) is not None:
            try:
                await self._drive_step(restart_id, state, first)
            except STORE_ERRORS as exc:
                log.warning("restart %s: the store failed (%s); answering again in %.1fs", restart_id, exc, wait)
                await anyio.sleep(wait)
                wait = min(wait * 2, STORE_RETRY_MAX)
                continue
            if not first and self.core.hub.restarts.get(restart_id) == state:
                await anyio.sleep(POLL)  # the hub held the answer (delivery holds the pane): look again later
            first, wait = False, STORE_RETRY
        self._forget(restart_id)

    async def _drive_step(self, restart_id: str, state: R.Restart, first: bool) -> None:
        """One answer to the restart's current step (``first``: a record found open at startup, whose
        recovery comes first, whatever its step)."""
        failed = self.failed.get(restart_id)
        if failed is not None and failed.step is state.step:
            await self.core.step(H.RestartStepped(self.clock(), restart_id, failed, for_step=state.step))
            del self.failed[restart_id]
        elif first or state.step is R.RestartStep.RECOVERING:
            await self._answer(restart_id, state, await self._inspect(state))
        elif state.step in R.AWAITING_DONE:
            await self._answer(restart_id, state, R.StepDone(now=self.clock(), step=state.step))
        elif state.step is R.RestartStep.RECHECKING_IDLE:
            await self._recheck(restart_id, state)
        elif state.step in R.WAITING:
            if await self._waited(restart_id, state):
                await self._answer(restart_id, state, await self._inspect(state))
        else:
            await self._answer(restart_id, state, await self._watch(restart_id, state))

    async def _answer(self, restart_id: str, state: R.Restart, event: R.RestartEvent | None) -> None:
        """Step the answer (an effect that fails becomes ``StepFailed`` for the step it belonged to)."""
        for_step = state.step
        while event is not None:
            try:
                await self.core.step(H.RestartStepped(self.clock(), restart_id, event, for_step=for_step))
            except RestartEffectFailed as exc:  # the step it entered failed: that step's StepFailed next
                after = self.core.hub.restarts.get(restart_id)
                if after is None or after.step not in R.AWAITING_DONE | R.RECOVERABLE:
                    return
                event = self.failed[restart_id] = R.StepFailed(now=self.clock(), step=after.step, reason=str(exc))
                for_step = after.step
                continue
            if self.failed.get(restart_id) is event:  # the core has heard the failure it was kept for
                del self.failed[restart_id]
            return

    async def _recheck(self, restart_id: str, state: R.Restart) -> None:
        """R1: the idle recheck is read afresh under the send lock, and the exit command it leads to
        is sent before the lock is let go, so no message is typed in between."""
        seen = await self._watch(restart_id, state)
        if not isinstance(seen, R.PaneObserved):
            await self._answer(restart_id, state, seen)
            return
        async with self.tmux.pane_lock(state.record.pane_id):
            now = self.core.hub.restarts.get(restart_id)
            if now is None or now.step is not state.step:
                return
            await self._answer(restart_id, state, await self._read(state))  # None: gone; look again

    async def _watch(self, restart_id: str, state: R.Restart) -> R.RestartEvent | None:
        """Observe until something the step cares about is seen, its deadline passes, or the hub moves
        the restart on (then ``None``: the driver reads the new step)."""
        while True:
            current = self.core.hub.restarts.get(restart_id)
            if current is None or current.step is not state.step or current.record.updated_at != state.record.updated_at:
                return None
            if state.deadline is not None and self.clock() >= state.deadline:
                return R.Timeout(now=self.clock())
            seen = await self._read(state)
            if isinstance(seen, R.StepFailed) or (seen is not None and _moves(state, seen)):
                return seen
            await anyio.sleep(POLL)

    async def _waited(self, restart_id: str, state: R.Restart) -> bool:
        """Wait out a step in ``R.WAITING`` (R5's next try at the restore): True once its deadline
        passed, False if the hub moved the restart on meanwhile."""
        while True:
            current = self.core.hub.restarts.get(restart_id)
            if current is None or current.step is not state.step or current.record.updated_at != state.record.updated_at:
                return False
            if state.deadline is None or self.clock() >= state.deadline:
                return True
            await anyio.sleep(min(POLL, state.deadline - self.clock()))

    async def _read(self, state: R.Restart) -> R.PaneObserved | R.StepFailed | None:
        try:
            return await self._observe(state.record)
        except TmuxError as exc:
            if not R.TABLE.allows(state.step, "step_failed"):
                return None  # keep looking; the step's deadline answers
            return R.StepFailed(now=self.clock(), step=state.step, reason=f"the pane could not be read: {exc}")

    async def _inspect(self, state: R.Restart) -> R.RestartEvent:
        try:
            condition = await self._condition(state.record.pane_id)
        except TmuxError as exc:
            return R.StepFailed(now=self.clock(), step=state.step, reason=f"the pane could not be inspected: {exc}")
        return R.Recover(now=self.clock(), condition=condition, env=self._fresh_env(state))

    def _forget(self, restart_id: str) -> None:
        self.failed.pop(restart_id, None)
        self.tokens.pop(restart_id, None)
        self.extra_env.pop(restart_id, None)

    async def _observe(self, record: R.RestartRecord) -> R.PaneObserved | None:
        info = next((p for p in await self.tmux.list_panes() if p.pane_id == record.pane_id), None)  # reaps first
        if info is None:
            return None
        info = self.here.effective(info)  # a --here pane: its agent child's process life
        if R.pane_dead(dead=info.dead, pane_pid=info.pane_pid, process_start=info.process_start_time,
                       agent_exited_here=self.here.waiting(record.pane_id)):
            return R.PaneObserved(now=self.clock(), pane_id=record.pane_id, incarnation=record.incarnation, agent_running=False, idle=False, composer_empty=False, pane_dead=True)
        capture = await self.tmux.capture(record.pane_id)
        reading = read_screen(capture.text, info.current_command, capture.cursor, height=capture.height)
        return R.PaneObserved(
            now=self.clock(),
            pane_id=record.pane_id,
            incarnation=token_of(info),
            agent_running=reading.harness.value == record.harness,
            idle=reading.activity is Activity.IDLE,
            composer_empty=reading.composer is Composer.EMPTY,
        )

    async def _condition(self, pane_id: str) -> R.PaneCondition:
        info = next((p for p in await self.tmux.list_panes() if p.pane_id == pane_id), None)  # reaps first
        if info is None:
            return R.PaneCondition.GONE
        dead = R.pane_dead(dead=info.dead, pane_pid=info.pane_pid, process_start=info.process_start_time,
                           agent_exited_here=self.here.waiting(pane_id))
        return R.PaneCondition.DEAD if dead else R.PaneCondition.LIVE

    def _fresh_env(self, state: R.Restart) -> dict[str, str] | None:
        """After a crash the environment (and its token) was never persisted: a fresh one for a planned
        respawn. Whether that token is bound is the hub's decision (the stored grant, or none). An
        answer the core never took (its commit failed) is made again with the same token."""
        record = state.record
        if state.env is not None:
            return None
        launcher = self.launchers.get(record.launcher)
        if launcher is None or not launcher.restartable:
            return None
        plan = L.resume_plan(launcher, record.session_id, endpoint_url=self.endpoint_url)
        assert plan.token_env is not None
        token = self.tokens.get(record.restart_id) or self.ids.new_token()
        self.tokens[record.restart_id] = token
        return {**plan.env_add, plan.token_env: token}

    # --- the respawned process --------------------------------------------------------------------

    async def respawned(self, effect: Respawn) -> None:
        """Right after the Respawn: record the launch (so it can be restarted again) and report the new
        incarnation; the hub binds its token with the session's stored grant, or gives it none."""
        restart_id = H.restart_of_pane(self.core.hub, effect.pane_id)
        if restart_id is None or restart_id not in self.tokens:
            return
        record = self.core.hub.restarts[restart_id].record
        info, incarnation = await self.watcher.fresh_incarnation(effect.pane_id)
        if info is None or incarnation is None:
            return  # it died at once: the step observing the respawn sees that
        self.launches.env[(effect.pane_id, incarnation)] = self.extra_env.get(restart_id, {})
        await self.launches.record(
            effect.pane_id, incarnation, launcher=record.launcher, harness=record.harness,
            session_id=record.session_id, cwd=effect.cwd, argv=list(effect.argv), started_at=self.clock(),
        )
        await self.core.step(
            H.RestartRespawned(self.clock(), restart_id, hash_token(self.tokens[restart_id]),
                               self.ids.new_id("principal"), info.pane_pid or 0, incarnation)
        )
        await self.watcher.poll()


def _moves(state: R.Restart, seen: R.PaneObserved) -> bool:
    try:
        return R.moves(state, seen)
    except R.RestartError:  # a read from before the step began: look again
        return False
