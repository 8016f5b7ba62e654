"""Launches: a structured launcher in a new tmux window, with the endpoint injected when connected.

The token travels only in the agent's environment (through the tmux adapter's 0700 exec script). The
launch record (which launcher, harness, session, cwd, argv) is what restart-to-connect and the
directory read later; it never changes once written, and only this daemon writes it, so each
incarnation's record is read from the store once (:class:`LaunchRecords`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from connectcore import grants, hub_acts
from connectcore import hub as H
from connectcore import launchers as L
from connectcore.grants import PRESET_SCOPES, Preset
from connectd.ids import EngineError, hash_token
from connectd.store import LaunchRow

if TYPE_CHECKING:
    from connectd.engine import Engine

LaunchRecord = LaunchRow


class Launches:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._records: dict[tuple[str, str], LaunchRecord | None] = {}
        # The --env a launch was given, by (pane, incarnation), so a restart relaunches under the same
        # environment. In memory only: values may be secrets, so they are never persisted.
        self.env: dict[tuple[str, str], dict[str, str]] = {}

    async def record_for(self, pane_id: str, incarnation: str) -> LaunchRecord | None:
        """Which launcher started this pane incarnation (read from the store once per incarnation)."""
        key = (pane_id, incarnation)
        if key not in self._records:
            found = await self.engine.run_sync(self.engine.store.launch_for, pane_id, incarnation)
            self._records.setdefault(key, found)  # a record written meanwhile wins over a stale miss
        return self._records[key]

    async def record(self, pane_id: str, incarnation: str, **fields: Any) -> None:
        store = self.engine.store
        await self.engine.run_sync(lambda: store.record_launch(pane_id, incarnation, **fields))
        self._records[(pane_id, incarnation)] = await self.engine.run_sync(store.launch_for, pane_id, incarnation)

    def forget(self, pane_id: str, incarnation: str) -> None:
        self._records.pop((pane_id, incarnation), None)

    async def launch(
        self,
        launcher_name: str,
        *,
        preset: Preset = Preset.OFF,
        cwd: str,
        session: str | None = None,
        extra_env: Mapping[str, str] | None = None,
        tmux_session: str | None = None,
        control: bool = False,
        reveal_token: bool = False,
    ) -> dict[str, Any]:
        """Open a new tmux window running a structured launcher, with the injection when connected.

        ``reveal_token`` also returns the token, for the demo and tests that act as the agent.
        """
        engine = self.engine
        launcher = engine.launchers.get(launcher_name)
        if launcher is None:
            raise EngineError("unknown_launcher", f"no launcher named {launcher_name!r} (known: {', '.join(sorted(engine.launchers))})")
        scopes = PRESET_SCOPES[preset]
        grants.check_grantable(scopes, engine.hub.book.cap)
        if control:  # one control at a time: refused before any window opens
            hub_acts.check_launch(engine.hub.book, control=True, session=(launcher.harness, session) if session else None)
        plan, token, env_all = launch_plan(
            engine, launcher, launcher_name, connect=bool(scopes or control), session=session, extra_env=extra_env
        )
        target_session = tmux_session or await self._default_tmux_session()
        pane_id = await engine.tmux.new_window(target_session, plan.argv, cwd, env_all)
        info, incarnation = await engine.watcher.fresh_incarnation(pane_id)
        if info is None or incarnation is None:
            raise EngineError("launch_failed", f"{launcher_name} exited at once in {pane_id}")
        session_key = (launcher.harness, plan.session_id) if plan.session_id else None
        self.env[(pane_id, incarnation)] = dict(extra_env or {})
        await self.record(
            pane_id,
            incarnation,
            launcher=launcher_name,
            harness=launcher.harness,
            session_id=session_key[1] if session_key else None,
            cwd=cwd,
            argv=list(plan.argv),
            started_at=engine.clock(),
        )
        actor = None
        if token is not None:
            await engine.step(
                H.Launch(
                    engine.clock(),
                    hash_token(token),
                    engine.ids.new_id("principal"),
                    launcher.harness,
                    pane_id,
                    info.pane_pid or 0,
                    incarnation,
                    scopes,
                    session_key,
                    control,
                )
            )
            principal = grants.principal_at(engine.hub.book, incarnation)
            actor = grants.actor_name(principal) if principal else None
        await engine.watcher.poll()
        extra = {"token": token} if reveal_token and token else {}
        return extra | {
            "pane": pane_id,
            "address": f"{pane_id}@{incarnation}",
            "launcher": launcher_name,
            "connect": preset.value if token else "off",
            "control": control,
            "session": list(session_key) if session_key else None,
            "actor": actor,
        }

    async def _default_tmux_session(self) -> str:
        sessions = await self.engine.tmux.list_sessions()
        if sessions:
            return sessions[0].name
        raise EngineError("no_tmux_session", "no tmux session to open a window in")


def launch_plan(
    engine: Engine, launcher: L.Launcher, launcher_name: str, *, connect: bool, session: str | None,
    extra_env: Mapping[str, str] | None,
) -> tuple[L.LaunchPlan, str | None, dict[str, str]]:
    """The argv, the token (when connected) and the environment of a launch, in a new window or in
    the person's own pane (``--here``): connected, the endpoint injected with a fresh token (resuming
    ``session`` if given); Off, plain, with a preset session id where the harness takes one."""
    env = dict(extra_env or {})
    if connect:
        if not launcher.connectable:
            raise EngineError("unconnectable", f"{launcher_name} cannot be connected: {launcher.unconnectable_reason}")
        if session is not None:
            plan = L.resume_plan(launcher, session, endpoint_url=engine.endpoint_url, extra_env=env)
        else:
            plan = L.inject(launcher, endpoint_url=engine.endpoint_url, session_id=engine.ids.new_uuid(), extra_env=env)
        token = engine.ids.new_token()
        assert plan.token_env is not None
        return plan, token, {**plan.env_add, plan.token_env: token}
    plan = L.plain_plan(launcher, extra_env=env) if session is None else replace(
        L.plain_plan(launcher, extra_env=env), argv=L.resume_argv(launcher, session), session_id=session
    )
    preset_id = _off_session_preset(launcher, engine.ids.new_uuid) if session is None else None
    if preset_id is not None:
        plan = replace(plan, argv=(plan.argv[0], f"--session-id={preset_id}", *plan.argv[1:]), session_id=preset_id)
    return plan, None, dict(plan.env_add)


def _off_session_preset(launcher: L.Launcher, new_uuid: Callable[[], str]) -> str | None:
    """A session id to preset on a launch with connect off, where the harness takes one (Claude Code's
    ``--session-id``) and the user's argv picks none. The pane is then bound to its session from the
    start, so restart-to-connect can resume it later; without it nothing names the session."""
    rule = L.HARNESS_RULES.get(launcher.harness)
    if launcher.opaque is not None or rule is None or not rule.presets_session_id:
        return None
    if L._session_picked(rule, launcher.argv):
        return None
    return new_uuid()

