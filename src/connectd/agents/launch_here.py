"""``connectd launch --here``: a structured launcher in the person's own pane, under a supervisor.

A person who types ``claude`` in a shell today runs ``connectd launch --here claude`` instead (a shell
function can make ``claude`` mean that, see the README). The command is a small supervisor process: it
asks the daemon for the launch plan (:meth:`HereLaunches.plan`), starts the agent as its child with that argv and
environment (the token only in the child's environment), holds the child before ``exec`` until the
daemon has recorded it (:meth:`HereLaunches.started`), hands it the terminal (its own process group in the
foreground), waits, and gives the terminal back: the shell survives the agent's exit.

While the child lives, the pane's incarnation is the child's process life (the watcher reads the
child's pid and start time in place of the shell's), so the agent gets its own token and address, and
its exit ends them (``PaneGone``) while the pane lives on as the shell it was.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import anyio

from connectcore import grants
from connectcore import hub as H
from connectcore import launchers as L
from connectcore.effects import Respawn
from connectcore.grants import PRESET_SCOPES, Preset, Scope
from connectd.agents.launch import Server, launch_plan
from connectd.daemon.ids import EngineError, hash_token
from connectd.tmux import procfs
from connectd.tmux.adapter import PaneInfo

if TYPE_CHECKING:
    from connectd.agents.launch import Launches
    from connectd.daemon.ids import Ids
    from connectd.daemon.runner import Core, RunSync
    from connectd.tmux.adapter import TmuxAdapter
    from connectd.tmux.watcher import Watcher

#: How long a relaunch handover waits for the other side (the supervisor, or the restart's Respawn).
RELAUNCH_WAIT = 20.0


# --- connectd launch --here: the launcher in the person's own pane, under a supervisor -----------------


@dataclass(frozen=True)
class HerePending:
    """A plan handed to a ``--here`` supervisor, waiting for the child it starts."""

    launcher: str
    harness: str
    scopes: frozenset[Scope]
    token: str | None
    session_id: str | None
    cwd: str
    argv: tuple[str, ...]
    relaunch: bool = False  # a restart-to-connect's respawn: the restarter records it and binds the token
    extra_env: tuple[tuple[str, str], ...] = ()  # the launch's own --env, for a relaunch (never persisted)
    server: Server | None = None  # the launch's own server, for its session binding (OpenCode)


@dataclass
class HerePanes:
    """The ``--here`` panes this daemon knows of (in memory only; the engine's ``here``). The watcher
    is given :meth:`effective` explicitly, so it reads a held pane's incarnation as the child's."""

    #: pane -> (supervisor pid, child pid, child start time) while the supervisor's agent child lives
    held: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    #: plans handed to supervisors that have not named their child yet, by (pane, supervisor pid)
    pending: dict[tuple[str, int], HerePending] = field(default_factory=dict)
    #: pane -> supervisor pid, between its agents too
    supervisors: dict[str, int] = field(default_factory=dict)
    #: pane -> a restart's plan (and its environment) handed to its supervisor
    relaunch: dict[str, tuple[HerePending, dict[str, str]]] = field(default_factory=dict)

    def is_here(self, pane_id: str) -> bool:
        """Does a ``--here`` supervisor hold this pane (so a restart relaunches through it, not tmux)?"""
        supervisor = self.supervisors.get(pane_id)
        return supervisor is not None and procfs.alive(supervisor)

    def waiting(self, pane_id: str) -> bool:
        """The supervisor lives but its agent has exited: to a restart, the agent's process is dead."""
        return self.is_here(pane_id) and pane_id not in self.held

    def effective(self, info: PaneInfo) -> PaneInfo:
        """A pane whose ``--here`` supervisor holds a live agent child: its incarnation is the child's
        process life (pid and start time), so the agent's exit ends it while the shell lives on."""
        held = self.held.get(info.pane_id)
        if held is None:
            return info
        supervisor, child, start = held
        stat = procfs.read_stat(child)
        holds = L.here_child_holds(  # the core's rule, on what /proc says of the child now
            child, supervisor=supervisor, start=start, parent=stat.ppid if stat is not None else None,
            child_start=stat.start_time if stat is not None else None, exited=stat is not None and stat.exited,
        )
        if not holds:
            del self.held[info.pane_id]
            return info
        return replace(info, pane_pid=child, process_start_time=start)


class HereLaunches:
    """The daemon's side of ``connectd launch --here``: the plan a supervisor runs, its child's start,
    and a restart's relaunch through the supervisor."""

    def __init__(
        self,
        *,
        core: Core,
        clock: Callable[[], float],
        ids: Ids,
        run_sync: RunSync,
        tmux: TmuxAdapter,
        watcher: Watcher,
        launchers: Mapping[str, L.Launcher],
        launches: Launches,
        here: HerePanes,
        endpoint_url: str,
    ) -> None:
        self.core, self.clock, self.ids, self.run_sync, self.tmux = core, clock, ids, run_sync, tmux
        self.watcher, self.launchers, self.launches, self.here = watcher, launchers, launches, here
        self.endpoint_url = endpoint_url

    async def plan(
        self, launcher_name: str, preset: Preset, *, cwd: str, pane_id: str, supervisor: int,
        session: str | None = None, extra_env: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """The argv and environment (the token included, when connected) a ``--here`` supervisor runs.

        Only a process running inside ``pane_id`` may ask (its ancestry reaches the pane's process); the
        launch is recorded and its token issued once the supervisor names the child (:meth:`started`).
        """
        launcher = self.launchers.get(launcher_name)
        if launcher is None:
            raise EngineError("unknown_launcher", f"no launcher named {launcher_name!r} (known: {', '.join(sorted(self.launchers))})")
        await self._check_inside(pane_id, supervisor)
        scopes = PRESET_SCOPES[preset]
        grants.check_grantable(scopes, self.core.hub.book.cap)
        plan, token, env_all, server = launch_plan(
            self.endpoint_url, self.ids, launcher, launcher_name, connect=L.connects(scopes_given=bool(scopes), control=False), session=session, extra_env=extra_env
        )
        for key in [k for k in self.here.pending if not procfs.alive(k[1])]:
            del self.here.pending[key]  # plans whose supervisor died before naming its child
        self.here.pending[(pane_id, supervisor)] = HerePending(
            launcher_name, launcher.harness, scopes, token, plan.session_id, cwd, tuple(plan.argv),
            extra_env=tuple(sorted((extra_env or {}).items())), server=server,
        )
        return {"argv": list(plan.argv), "env": env_all, "cwd": cwd, "connect": preset.value if token else "off"}

    async def _check_inside(self, pane_id: str, pid: int) -> int:
        """The pane's root process pid, if ``pid`` runs inside that pane; else refused."""
        root = next((i.pane_pid for i in await self.tmux.list_panes() if i.pane_id == pane_id and i.pane_pid), None)
        ancestry = await self.run_sync(procfs.ancestry, pid) if root is not None else []
        refusal = L.here_caller_refusal(pane_id, pid, pane_root=root, ancestry=ancestry)  # the core's rule
        if refusal is not None:
            raise EngineError(refusal.reason, refusal.problem)
        assert root is not None
        return root

    async def started(self, pane_id: str, supervisor: int, child: int) -> dict[str, Any]:
        """The supervisor started its child (held before exec): the pane's incarnation is now the child's
        process life. Record the launch, issue the token, and let the child run."""
        pending = self.here.pending.pop((pane_id, supervisor), None)
        if pending is None:
            raise EngineError("no_plan", f"no --here plan for process {supervisor} in {pane_id}")
        await self._check_inside(pane_id, supervisor)
        stat = await self.run_sync(procfs.read_stat, child)
        refusal = L.here_child_refusal(child, parent=stat.ppid if stat is not None else None, supervisor=supervisor)
        if refusal is not None:
            raise EngineError(refusal.reason, refusal.problem)
        assert stat is not None
        self.here.held[pane_id] = (supervisor, child, stat.start_time)
        self.here.supervisors[pane_id] = supervisor
        info, incarnation = await self.watcher.fresh_incarnation(pane_id)
        if info is None or incarnation is None or info.pane_pid != child:
            self.here.held.pop(pane_id, None)
            raise EngineError("launch_failed", f"the agent in {pane_id} exited at once")
        if pending.relaunch:  # the restart's Respawn is waiting for this child (see respawn)
            return {"pane": pane_id, "address": f"{pane_id}@{incarnation}", "launcher": pending.launcher, "connect": "restarting"}
        self.launches.env[(pane_id, incarnation)] = dict(pending.extra_env)
        self.launches.serve(pane_id, incarnation, pending.server)
        await self.launches.record(
            pane_id, incarnation, launcher=pending.launcher, harness=pending.harness, session_id=pending.session_id,
            cwd=pending.cwd, argv=list(pending.argv), started_at=self.clock(),
        )
        session_key = (pending.harness, pending.session_id) if pending.session_id else None
        if pending.token is not None:
            await self.core.step(
                H.Launch(self.clock(), hash_token(pending.token), self.ids.new_id("principal"), pending.harness,
                         pane_id, child, incarnation, pending.scopes, session_key)
            )
        await self.watcher.poll()
        principal = grants.principal_at(self.core.hub.book, incarnation)
        return {
            "pane": pane_id, "address": f"{pane_id}@{incarnation}", "launcher": pending.launcher,
            "connect": grants.connect_label(principal, pending.scopes),
            "session": list(session_key) if session_key else None,
            "actor": grants.actor_name(principal) if principal else None,
        }

    async def next_plan(self, pane_id: str, supervisor: int, wait: float = RELAUNCH_WAIT) -> dict[str, Any]:
        """The supervisor's agent exited: relaunch it in place when a restart-to-connect of this pane is
        under way (its Respawn hands the plan over, :meth:`respawn`), else let the supervisor end."""
        await self._check_inside(pane_id, supervisor)
        waited = 0.0
        while H.restart_of_pane(self.core.hub, pane_id) is not None and waited < wait:
            handed = self.here.relaunch.pop(pane_id, None)
            if handed is not None:
                pending, env = handed
                self.here.pending[(pane_id, supervisor)] = pending
                return {"relaunch": True, "argv": list(pending.argv), "env": env, "cwd": pending.cwd}
            await anyio.sleep(0.1)
            waited += 0.1
        self.here.supervisors.pop(pane_id, None)
        return {"relaunch": False}

    async def respawn(self, effect: Respawn) -> None:
        """A restart's Respawn of a ``--here`` pane: hand the plan to the supervisor and wait for the child
        it starts (raises ``TimeoutError`` if none comes: the restart step fails and says so)."""
        record = self.core.hub.restarts[H.restart_of_pane(self.core.hub, effect.pane_id) or ""].record
        launcher = self.launchers[record.launcher]
        pending = HerePending(record.launcher, launcher.harness, frozenset(), None, record.session_id, effect.cwd,
                              tuple(effect.argv), relaunch=True)
        self.here.held.pop(effect.pane_id, None)
        self.here.relaunch[effect.pane_id] = (pending, dict(effect.env))
        with anyio.fail_after(RELAUNCH_WAIT):
            while effect.pane_id not in self.here.held:
                await anyio.sleep(0.05)


# --- the supervisor (runs in the person's pane, as the CLI) ----------------------------------------------


def run_here(call: Any, *, launcher: str, connect: str, cwd: str, session: str | None, env: Mapping[str, str]) -> int:
    """Run ``launcher`` in this pane as this process's child; return its exit status.

    ``call(method, path, body)`` is the owner API client. The child waits before ``exec`` until the
    daemon has recorded it, so its first MCP call already finds its token.
    """
    pane = os.environ.get("TMUX_PANE", "")
    if not pane:
        raise SystemExit("connectd: --here runs inside a tmux pane ($TMUX_PANE is not set)")
    body: dict[str, Any] = {"launcher": launcher, "connect": connect, "cwd": cwd, "env": dict(env), "pane": pane, "pid": os.getpid()}
    if session:
        body["session"] = session
    got = call("POST", "/api/launch/here", body)
    status = _run_child(call, pane, got)
    while True:  # a restart-to-connect relaunches the agent in place, through this supervisor
        nxt = call("POST", "/api/launch/here/next", {"pane": pane, "pid": os.getpid()})
        if not nxt.get("relaunch"):
            return status
        status = _run_child(call, pane, nxt)


def _run_child(call: Any, pane: str, plan: Mapping[str, Any]) -> int:
    release_r, release_w = os.pipe()
    child = _spawn(list(plan["argv"]), {**os.environ, **plan["env"]}, str(plan["cwd"]), release_r, release_w)
    try:
        started = call("POST", "/api/launch/here/started", {"pane": pane, "pid": os.getpid(), "child": child})
    except BaseException:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
        raise
    print(f"connectd: {started['launcher']} in {started['address']} (connect: {started['connect']})", file=sys.stderr, flush=True)
    with _foreground(child):
        os.write(release_w, b"go")
        os.close(release_w)
        _pid, status = os.waitpid(child, 0)
    return os.waitstatus_to_exitcode(status)


def _spawn(argv: list[str], env: dict[str, str], cwd: str, release_r: int, release_w: int) -> int:
    """Fork the agent in its own process group, held before ``exec`` until ``release_w`` is written
    (its pid and start time, which the daemon records, do not change at ``exec``)."""
    pid = os.fork()
    if pid == 0:  # the child: wait for the daemon's record, then become the agent
        try:
            os.setpgid(0, 0)
            os.close(release_w)
            if os.read(release_r, 2) != b"go":
                os._exit(125)
            os.close(release_r)
            os.chdir(cwd)
            os.execvpe(argv[0], argv, env)
        finally:
            os._exit(127)
    with contextlib.suppress(OSError):  # both sides set it, so neither waits for the other (job control)
        os.setpgid(pid, pid)
    os.close(release_r)
    return pid


@contextlib.contextmanager
def _foreground(pgid: int) -> Any:
    """Give the terminal to the agent's process group, and take it back when it is done."""
    tty = sys.stdin.fileno() if sys.stdin is not None and sys.stdin.isatty() else None
    old = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
    try:
        if tty is not None:
            with contextlib.suppress(OSError):
                os.tcsetpgrp(tty, pgid)
        yield
    finally:
        if tty is not None:
            with contextlib.suppress(OSError):
                os.tcsetpgrp(tty, os.getpgrp())
        signal.signal(signal.SIGTTOU, old)
