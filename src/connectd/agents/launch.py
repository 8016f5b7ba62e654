"""Launches: a structured launcher in a new tmux window, with the endpoint injected when connected.

The token travels only in the agent's environment (through the tmux adapter's 0700 exec script). The
launch record (which launcher, harness, session, cwd, argv) is what restart-to-connect and the
directory read later; only this daemon writes it, so each incarnation's record is read from the store
once. It changes once at most: an OpenCode launch learns its session after it started, and the record
then gets the session id (as Claude's preset id is in it from the start).

OpenCode's session binding (:mod:`connectcore.opencode_binding`, the rules; :mod:`connectd.agents.opencode_session`,
the I/O): a launch that starts a new OpenCode session serves on a loopback port picked here, behind a
fresh password held in memory only (:class:`Server`). Once the watcher reads the pane as OpenCode idle
(:meth:`Launches.bind_when_due`, asking the core), one supervised task runs the binding; its result is
audited, a session id goes into the launch record (so the directory binds the pane from the launch,
and the hub attaches the session to the principal, as for Claude Code), and a refusal leaves the pane
unbound with the reason shown (:meth:`Launches.session_note`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio

from connectcore import directory as D
from connectcore import grants
from connectcore import hub as H
from connectcore import launchers as L
from connectcore import opencode_binding as OC
from connectcore.advice import no_tmux_session
from connectcore.grants import PRESET_SCOPES, Preset, Scope
from connectcore.hub import acts as hub_acts
from connectcore.screen import Activity, Reading
from connectd.agents import opencode_session as opencode_bind
from connectd.cli import facts
from connectd.daemon.ids import EngineError, hash_token
from connectd.daemon.supervisor import Kind
from connectd.store.store import LaunchRow

if TYPE_CHECKING:
    from connectd.daemon.ids import Ids
    from connectd.daemon.parts import Subscribers
    from connectd.daemon.runner import Core, RunSync
    from connectd.daemon.supervisor import Supervisor
    from connectd.tmux.adapter import TmuxAdapter
    from connectd.tmux.watcher import Watcher

LaunchRecord = LaunchRow
log = logging.getLogger("connectd.launches")


@dataclass(frozen=True)
class Server:
    """A launch's own server (OpenCode): where it listens, its password (in memory only), the cwd."""

    port: int
    password: str = ""


class Launches:
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
        subscribers: Subscribers,
        launchers: Mapping[str, L.Launcher],
        endpoint_url: str,
        supervisor: Callable[[], Supervisor],
    ) -> None:
        """``supervisor``: the running daemon's supervisor (a binding runs as one of its tasks)."""
        self.core, self.clock, self.ids, self.run_sync, self.store = core, clock, ids, run_sync, store
        self.tmux, self.watcher, self.subscribers, self.launchers = tmux, watcher, subscribers, launchers
        self.endpoint_url, self.supervisor = endpoint_url, supervisor
        self._records: dict[tuple[str, str], LaunchRecord | None] = {}
        # The --env a launch was given, by (pane, incarnation), so a restart relaunches under the same
        # environment. In memory only: values may be secrets, so they are never persisted.
        self.env: dict[tuple[str, str], dict[str, str]] = {}
        # OpenCode launches that serve for their session binding, by (pane, incarnation), until it ran;
        # and each binding's result (None while it runs). In memory only: the password is a secret.
        self.servers: dict[tuple[str, str], Server] = {}
        self.binds: dict[tuple[str, str], str | OC.Refusal | None] = {}

    async def record_for(self, pane_id: str, incarnation: str) -> LaunchRecord | None:
        """Which launcher started this pane incarnation (read from the store once per incarnation)."""
        key = (pane_id, incarnation)
        if key not in self._records:
            found = await self.run_sync(self.store.launch_for, pane_id, incarnation)
            self._records.setdefault(key, found)  # a record written meanwhile wins over a stale miss
        return self._records[key]

    async def record(self, pane_id: str, incarnation: str, **fields: Any) -> None:
        store = self.store
        await self.run_sync(lambda: store.record_launch(pane_id, incarnation, **fields))
        self._records[(pane_id, incarnation)] = await self.run_sync(store.launch_for, pane_id, incarnation)

    def forget(self, pane_id: str, incarnation: str) -> None:
        self._records.pop((pane_id, incarnation), None)
        self.servers.pop((pane_id, incarnation), None)
        self.binds.pop((pane_id, incarnation), None)

    # --- OpenCode: the session binding through the launch's own server ------------------------------

    def serve(self, pane_id: str, incarnation: str, server: Server | None) -> None:
        """This launch serves for its binding: bind it once the pane reads idle (read it again now, in
        case its idle screen was read before this was known)."""
        if server is None:
            return
        self.servers[(pane_id, incarnation)] = server
        self.watcher.look_again(pane_id)

    def bind_when_due(self, pane_id: str, incarnation: str, reading: Reading, pane_pid: int) -> None:
        """The watcher read this pane: start its binding if the core says it is due."""
        key = (pane_id, incarnation)
        server = self.servers.get(key)
        if server is None:
            return
        if not OC.bind_due(
            harness=reading.harness.value,
            idle=reading.activity is Activity.IDLE,
            bound=self._bound_session(pane_id, incarnation) is not None,
            started=key in self.binds,
        ):
            return
        self.binds[key] = None
        self.supervisor().spawn(
            Kind.BIND, self._bind, key, server, pane_pid, name=f"bind {pane_id}",
            on_error=lambda exc: self._bound(key, OC.Refusal.FAILED),
        )

    def _bound_session(self, pane_id: str, incarnation: str) -> str | None:
        record = self.watcher.directory.panes.get(pane_id)
        if record is None or record.token != incarnation or not isinstance(record.binding, D.SessionBinding):
            return None
        return record.binding.session_id

    async def _bind(self, key: tuple[str, str], server: Server, pane_pid: int) -> None:
        launch = await self.record_for(*key)
        directory = launch.cwd if launch is not None and launch.cwd else ""
        if not directory:
            await self._bound(key, OC.Refusal.FAILED)
            return
        found = await opencode_bind.bind(
            port=server.port, password=server.password, directory=directory, pane_pid=pane_pid,
            run_sync=self.run_sync,
        )
        if not isinstance(found, OC.Refusal):  # a session was selected: whether it binds is the core's
            found = OC.bind_result(found, shown=await self._shown(key[0]))
        await self._bound(key, found)

    async def _shown(self, pane_id: str) -> bool:
        """Whether the TUI shows the session selected: the pane is captured when the core says, and
        the core judges each capture (:func:`connectcore.opencode_binding.shown_look`)."""
        began, settling = anyio.current_time(), False
        while True:
            text = (await self.tmux.capture(pane_id)).text
            look = OC.shown_look(text, elapsed=anyio.current_time() - began, settling=settling)
            if look.shown is not None:
                return look.shown
            settling = look.settling
            await anyio.sleep(look.after)

    def binding_pending(self, pane_id: str, incarnation: str) -> bool:
        """This launch serves for its binding and the binding has not ended yet (due, or running)."""
        key = (pane_id, incarnation)
        return key in self.servers or (key in self.binds and self.binds[key] is None)

    async def _bound(self, key: tuple[str, str], result: str | OC.Refusal) -> None:
        """Report a binding's result: audited; a session id goes into the launch record, from which
        the directory binds the pane and the hub the principal (at the poll that follows)."""
        pane_id, incarnation = key
        self.servers.pop(key, None)  # the password is not needed again
        await self.core.audit(OC.bind_audit(pane_id, result, at=self.clock()))
        if key not in self.binds:
            return  # the incarnation went meanwhile (forgotten): nothing to bind
        self.binds[key] = result
        self.watcher.look_again(pane_id)  # its readiness is the plain reading's again: tell the core
        launch = await self.record_for(pane_id, incarnation)
        if not isinstance(result, OC.Refusal) and launch is not None:  # (a Refusal is a str too)
            await self.record(
                pane_id, incarnation, launcher=launch.launcher, harness=launch.harness, session_id=result,
                cwd=launch.cwd, argv=list(launch.argv), started_at=launch.started_at,
            )
            await self.watcher.poll()
        else:
            log.info("%s stays unbound: %s", pane_id, result)
        self.subscribers.publish({"topic": "pane", "pane": pane_id})

    def session_note(self, pane_id: str, incarnation: str) -> str:
        """Why an OpenCode launch's pane is not bound (yet), in words for the page and the CLI."""
        key = (pane_id, incarnation)
        if key not in self.binds:
            return OC.BINDING_WORDS if key in self.servers else ""
        result = self.binds[key]
        if result is None:
            return OC.BINDING_WORDS
        return OC.REFUSAL_WORDS[result] if isinstance(result, OC.Refusal) else ""

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

        The steps, in order: refuse what the core refuses (before any window opens), plan and open
        the window, record the launch, step the hub when connected, and answer.
        ``reveal_token`` also returns the token, for the demo and tests that act as the agent.
        """
        scopes = PRESET_SCOPES[preset]
        launcher = self._admitted(launcher_name, scopes, control=control, session=session)
        plan, token, env_all, server = launch_plan(
            self.endpoint_url, self.ids, launcher, launcher_name, connect=L.connects(scopes_given=bool(scopes), control=control), session=session, extra_env=extra_env
        )
        pane_id, pane_pid, incarnation = await self._open_window(launcher_name, plan, cwd, env_all, tmux_session)
        session_key = (launcher.harness, plan.session_id) if plan.session_id else None
        await self._remember(
            pane_id, incarnation, launcher_name, launcher, plan, cwd=cwd, session_key=session_key,
            extra_env=extra_env, server=server,
        )
        actor = None
        if token is not None:
            actor = await self._connect(
                token, launcher, pane_id, pane_pid, incarnation, scopes=scopes, session_key=session_key, control=control,
            )
        await self.watcher.poll()
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

    def _admitted(
        self, launcher_name: str, scopes: frozenset[Scope], *, control: bool, session: str | None
    ) -> L.Launcher:
        """The launcher named, once the core has no refusal for this launch (unknown launcher, scopes
        beyond the cap, a second control): all refused before any window opens."""
        launcher = self.launchers.get(launcher_name)
        if launcher is None:
            raise EngineError("unknown_launcher", f"no launcher named {launcher_name!r} (known: {', '.join(sorted(self.launchers))})")
        grants.check_grantable(scopes, self.core.hub.book.cap)
        if control:  # one control at a time
            hub_acts.check_launch(self.core.hub.book, control=True, session=(launcher.harness, session) if session else None)
        return launcher

    async def _open_window(
        self, launcher_name: str, plan: L.LaunchPlan, cwd: str, env_all: dict[str, str], tmux_session: str | None
    ) -> tuple[str, int, str]:
        """Open the window (in ``tmux_session``, else the first session) and read its fresh
        incarnation: the pane, its process id (0 when unknown) and the incarnation."""
        target_session = tmux_session or await self._default_tmux_session()
        pane_id = await self.tmux.new_window(target_session, plan.argv, cwd, env_all)
        info, incarnation = await self.watcher.fresh_incarnation(pane_id)
        if info is None or incarnation is None:
            raise EngineError("launch_failed", f"{launcher_name} exited at once in {pane_id}")
        return pane_id, info.pane_pid or 0, incarnation

    async def _remember(
        self, pane_id: str, incarnation: str, launcher_name: str, launcher: L.Launcher, plan: L.LaunchPlan, *,
        cwd: str, session_key: tuple[str, str] | None, extra_env: Mapping[str, str] | None, server: Server | None,
    ) -> None:
        """Keep what a later restart or binding needs: the --env (in memory), the launch's own server
        (OpenCode), and the launch record (in the store)."""
        self.env[(pane_id, incarnation)] = dict(extra_env or {})
        self.serve(pane_id, incarnation, server)
        await self.record(
            pane_id,
            incarnation,
            launcher=launcher_name,
            harness=launcher.harness,
            session_id=session_key[1] if session_key else None,
            cwd=cwd,
            argv=list(plan.argv),
            started_at=self.clock(),
        )

    async def _connect(
        self, token: str, launcher: L.Launcher, pane_id: str, pane_pid: int, incarnation: str, *,
        scopes: frozenset[Scope], session_key: tuple[str, str] | None, control: bool,
    ) -> str | None:
        """Step the hub with the connected launch (a new principal for the token) and name its actor."""
        await self.core.step(
            H.Launch(
                self.clock(),
                hash_token(token),
                self.ids.new_id("principal"),
                launcher.harness,
                pane_id,
                pane_pid,
                incarnation,
                scopes,
                session_key,
                control,
            )
        )
        principal = grants.principal_at(self.core.hub.book, incarnation)
        return grants.actor_name(principal) if principal else None

    async def _default_tmux_session(self) -> str:
        sessions = await self.tmux.list_sessions()
        if sessions:
            return sessions[0].name
        advice = no_tmux_session(facts.cli_command())
        raise EngineError("no_tmux_session", advice.problem, advice.fix)


def launch_plan(
    endpoint_url: str, ids: Ids, launcher: L.Launcher, launcher_name: str, *, connect: bool, session: str | None,
    extra_env: Mapping[str, str] | None,
) -> tuple[L.LaunchPlan, str | None, dict[str, str], Server | None]:
    """The argv, the token (when connected), the environment and the launch's own server (OpenCode)
    of a launch, in a new window or in the person's own pane (``--here``): connected, the endpoint
    injected with a fresh token (resuming ``session`` if given); Off, plain, with a preset session id
    where the harness takes one. Where the core wants a server port (a new OpenCode session, connected
    or Off: :func:`connectcore.launchers.server_port_wanted`), a free loopback port and a fresh
    password, which goes into the environment as the token does (never argv)."""
    env = dict(extra_env or {})
    port = opencode_bind.free_port() if L.server_port_wanted(launcher, session=session) else None
    plan = L.launch_plan(  # the core's rule (a connected launch of an unconnectable launcher: refused)
        launcher, connect=connect, session=session, endpoint_url=endpoint_url,
        fresh_session_id=ids.new_uuid(), extra_env=env, server_port=port,
    )
    env_all = dict(plan.env_add)
    server = None
    if plan.password_env is not None and plan.server_port is not None:
        server = Server(plan.server_port, ids.new_token())
        env_all[plan.password_env] = server.password
    if connect:
        token = ids.new_token()
        assert plan.token_env is not None
        return plan, token, {**env_all, plan.token_env: token}, server
    if session is None and L.off_session_presettable(launcher):  # the core's rule; a fresh id only then
        plan = L.with_preset_session(plan, ids.new_uuid())
    return plan, None, env_all, server

