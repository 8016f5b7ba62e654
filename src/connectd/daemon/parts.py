"""The engine: the daemon's composition root, and the agent calls the MCP endpoint makes.

The shell is a thin interpreter of the core (``docs/architecture.md``):

- :class:`connectd.daemon.runner.CoreRunner` steps the core under the core lock and commits each step's
  records before it returns; :class:`connectd.daemon.interpreter.Interpreter` executes every other effect;
- :class:`connectd.daemon.supervisor.Supervisor` starts every task in the daemon's one task group, each
  under its kind's written failure policy (no I/O error ends the daemon);
- :class:`connectd.tmux.watcher.Watcher` (list-panes, captures, bindings, startup reconciliation),
  :class:`connectd.delivery.guard.Delivery` (guard, typing, confirmation),
  :class:`connectd.agents.launch.Launches`, :class:`connectd.agents.launch_here.HereLaunches`,
  :class:`connectd.agents.restart_to_connect.Restarts`, :class:`connectd.person.PersonCalls`,
  :class:`connectd.control.acts.ActsIO`, :class:`connectd.agents.agent_calls.AgentCalls`,
  :class:`connectd.control.act_calls.ActCalls` and :class:`connectd.agents.restore_fleet.FleetRestore`
  are the parts.

The engine builds each part with the few collaborators it uses (issue 24): the core runner as ``core``
(:class:`connectd.daemon.runner.Core`: the hub, ``step``, ``audit``), the clock, the ids, ``run_sync``,
the store, tmux, the watcher, the subscribers, the launchers, the endpoint, the supervisor (a callable:
it exists only while the daemon runs) and the other parts it calls; those parts neither import nor
hold the engine. The watcher is given ``launches`` and ``history`` as callables (the launches part is
built after it, the session index is set once the daemon serves one), and so is the restore
``history``; the interpreter, built last, is given the parts whose effects it executes, with the
supervisor and the pairing desk as callables. The federation desk's wiring (``open_desk``, and the
remote calls) still takes the engine itself (it was left as it was while other work changed it) and
reaches the parts through it, which is why the engine keeps its parts as attributes (``engine.watcher``,
``engine.calls``, ``engine.interpreter``, ...).
It forwards nothing; the edges are wired in :mod:`connectd.daemon.app`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import anyio
import anyio.abc
from anyio.streams.memory import MemoryObjectSendStream

from connectcore import grants
from connectcore import hub as H
from connectcore import launchers as L
from connectcore.delivery import DEFAULT_LIMITS, Limits
from connectcore.effects import Audit, Effect
from connectcore.grants import Preset
from connectd.agents.agent_calls import AgentCalls
from connectd.agents.launch import Launches
from connectd.agents.launch_here import HereLaunches, HerePanes
from connectd.agents.restart_to_connect import Restarts
from connectd.agents.restore_fleet import FleetRestore
from connectd.control.act_calls import ActCalls
from connectd.control.acts import ActsIO
from connectd.daemon.clock import LifeClock
from connectd.daemon.ids import Ids
from connectd.daemon.interpreter import Interpreter
from connectd.daemon.runner import CoreRunner, RunSync
from connectd.daemon.supervisor import Kind, Supervisor
from connectd.delivery.guard import Delivery
from connectd.person import PersonCalls
from connectd.tmux.adapter import TmuxAdapter
from connectd.tmux.release_probe import ReleaseProbe
from connectd.tmux.watcher import Watcher

__all__ = ["Engine", "Subscribers", "Timing"]

log = logging.getLogger("connectd.engine")



@dataclass
class Timing:
    """How often the daemon looks; all in seconds."""

    # list-panes -a, the source of truth for which incarnations live (one tmux call for every pane): at
    # once (within ``capture``) when control mode reports a structure change; every ``poll`` seconds while
    # some pane draws (a process may have started or ended in it), control mode is not reading, or an
    # agent pane waits for its session binding; else every ``poll_quiet`` seconds (the safety net)
    poll: float = 1.0
    poll_quiet: float = 5.0
    capture: float = 0.25  # capture a pane that produced output at once, then at most this often while it draws
    # ... and this often for a pane a consented message waits for (``hub.awaited_panes``): its turn's end
    # is the idle the message waits for, seen up to ``capture`` sooner
    capture_awaited: float = 0.1
    sweep: float = 300.0  # capture every pane even without output: the last safety net
    bind: float = 1.0  # an unbound agent's session evidence (Claude's registry, Codex's rollout), at most this often
    tick: float = 1.0  # expiry of cards and ids
    settle: float = 0.4  # between the paste and the Enter
    confirm: float = 4.0  # how long to look for the typed text to land


@dataclass
class Subscribers:
    """Owner event stream listeners and agents' long polls."""

    owner: set[MemoryObjectSendStream[dict[str, Any]]] = field(default_factory=set)
    waits: dict[str, set[anyio.Event]] = field(default_factory=dict)

    def wake(self, principal: str | None) -> None:
        for event in self.waits.pop(principal, set()) if principal else ():
            event.set()

    def end(self, principal: str) -> None:
        self.wake(principal)

    def publish(self, item: dict[str, Any]) -> None:
        for stream in list(self.owner):
            try:
                stream.send_nowait(item)
            except (anyio.WouldBlock, anyio.BrokenResourceError, anyio.ClosedResourceError):
                self.owner.discard(stream)


class Engine:
    def __init__(
        self,
        store: Any,
        tmux: TmuxAdapter,
        *,
        endpoint_url: str,
        limits: Limits = DEFAULT_LIMITS,
        timing: Timing | None = None,
        launchers: Mapping[str, L.Launcher] | None = None,
        cap: Preset = Preset.COLLABORATE,
        clock: Callable[[], float] | None = None,
        ids: Ids | None = None,
        run_sync: RunSync | None = None,
        trusted_releases: frozenset[tuple[str, str]] = frozenset(),
        release_probe: ReleaseProbe | None = None,
    ) -> None:
        """``release_probe``: how an agent's release is asked of its program (the simulation's panes run
        no real program: ``NoProbe``).

        The parts are built in this order, each from the ones before it: the core runner, the panes'
        parts, the launching parts, the calls' parts, and last the interpreter that executes their effects."""
        self.store = store
        self.tmux = tmux
        self.endpoint_url = endpoint_url
        self.timing = timing or Timing()
        self.launchers = dict(launchers or L.builtin_launchers())
        self.clock: Callable[[], float] = clock or LifeClock()
        self.ids = ids or Ids()
        self.run_sync: RunSync = run_sync or anyio.to_thread.run_sync
        self.runner = self._core_runner(limits, cap)
        self._build_pane_parts(trusted_releases, release_probe or ReleaseProbe())
        self._build_launch_parts()
        self._build_call_parts(trusted_releases)
        self.federation: Any | None = None  # the pairing desk (connectd.federation.desk), when federated
        self._supervisor: Supervisor | None = None
        # Built last: it executes the effects of every part above (no step runs before it is set).
        self.interpreter = Interpreter(
            subscribers=self.subscribers, delivery=self.delivery, acts=self.acts_io, restarts=self.restarts,
            here=self.here, here_launches=self.here_launches, tmux=tmux, timing=self.timing,
            supervisor=lambda: self.supervisor, federation=lambda: self.federation,
        )
        self.runner.interpreter = self.interpreter

    def _core_runner(self, limits: Limits, cap: Preset) -> CoreRunner:
        """The core runner over the hub the store holds, its grants capped at ``cap``."""
        hub = self.store.load_hub(self.clock(), limits)
        return CoreRunner(self.store, replace(hub, book=grants.with_cap(hub.book, cap)), run_sync=self.run_sync)

    def _build_pane_parts(self, trusted_releases: frozenset[tuple[str, str]], release_probe: ReleaseProbe) -> None:
        """What watches the panes and types into them: the subscribers, the --here panes, the watcher,
        the delivery."""
        store, tmux = self.store, self.tmux
        self.subscribers = Subscribers()
        self.here = HerePanes()  # the --here panes (connectd.agents.launch_here)
        self.watcher = Watcher(
            core=self.runner, clock=self.clock, run_sync=self.run_sync, store=store, tmux=tmux, timing=self.timing,
            subscribers=self.subscribers, launches=lambda: self.launches, history=lambda: self.history,
            trusted_releases=trusted_releases, release_probe=release_probe, effective=self.here.effective,
        )
        self.delivery = Delivery(
            core=self.runner, clock=self.clock, ids=self.ids, tmux=tmux, watcher=self.watcher, timing=self.timing
        )

    def _build_launch_parts(self) -> None:
        """What opens and relaunches agents: launches, --here launches, control's acts, restarts."""
        store, tmux, endpoint_url = self.store, self.tmux, self.endpoint_url
        self.launches = Launches(
            core=self.runner, clock=self.clock, ids=self.ids, run_sync=self.run_sync, store=store, tmux=tmux,
            watcher=self.watcher, subscribers=self.subscribers, launchers=self.launchers, endpoint_url=endpoint_url,
            supervisor=lambda: self.supervisor,
        )
        self.here_launches = HereLaunches(
            core=self.runner, clock=self.clock, ids=self.ids, run_sync=self.run_sync, tmux=tmux, watcher=self.watcher,
            launchers=self.launchers, launches=self.launches, here=self.here, endpoint_url=endpoint_url,
        )
        self.acts_io = ActsIO(
            core=self.runner, clock=self.clock, ids=self.ids, tmux=tmux, watcher=self.watcher, timing=self.timing,
            launches=self.launches, launchers=self.launchers,
        )
        self.restarts = Restarts(
            core=self.runner, clock=self.clock, ids=self.ids, run_sync=self.run_sync, store=store, tmux=tmux,
            watcher=self.watcher, launches=self.launches, launchers=self.launchers, here=self.here,
            endpoint_url=endpoint_url, supervisor=lambda: self.supervisor,
        )

    def _build_call_parts(self, trusted_releases: frozenset[tuple[str, str]]) -> None:
        """What the person and the agents call: the person's calls, the agent calls, the fleet restore
        (and ``history``, the session index, None until the daemon serves one)."""
        store = self.store
        self.person = PersonCalls(
            core=self.runner, clock=self.clock, ids=self.ids, tmux=self.tmux, watcher=self.watcher, launches=self.launches
        )
        self.calls = AgentCalls(
            core=self.runner, clock=self.clock, run_sync=self.run_sync, store=store, ids=self.ids, watcher=self.watcher,
            subscribers=self.subscribers, launchers=self.launchers, trusted_releases=trusted_releases,
            launches=self.launches, person=self.person,
        )
        self.history: Any | None = None  # the session index, when the daemon serves history
        self.restore = FleetRestore(  # "restore N sessions?" (one at a time: it holds the flag)
            core=self.runner, clock=self.clock, store=store, watcher=self.watcher, launches=self.launches,
            history=lambda: self.history,
        )

    def act_calls(self, history: Any | None) -> ActCalls:
        """Control's act tools (:class:`connectd.control.act_calls.ActCalls`), over ``history`` (the
        session index the daemon serves, or None), for the MCP endpoint."""
        return ActCalls(
            calls=self.calls, core=self.runner, clock=self.clock, ids=self.ids, run_sync=self.run_sync, store=self.store,
            watcher=self.watcher, launchers=self.launchers, history=history,
        )

    # --- life -------------------------------------------------------------------------------------

    @property
    def supervisor(self) -> Supervisor:
        if self._supervisor is None:
            raise RuntimeError("the engine is not running: no supervisor to start tasks in")
        return self._supervisor

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """The daemon's life: recover, look at the world, reconcile, then watch and tick until cancelled."""
        async with anyio.create_task_group() as tg:
            self._supervisor = supervisor = Supervisor(tg, audit=self.audit, clock=self.clock)
            start = supervisor.until_done
            await start(Kind.START, self._recover, name="recover")
            await start(Kind.START, self.watcher.poll, name="first look")
            await start(Kind.START, self.watcher.reconcile, name="reconcile")
            await start(Kind.START, self.restarts.recover_open, name="open restarts")
            timing, watcher, spawn = self.timing, self.watcher, self._supervisor.spawn
            spawn(Kind.WATCH, watcher.poll_when_due, every=timing.poll, name="poll")
            spawn(Kind.WATCH, watcher.capture_dirty, every=0, name="capture")  # each round waits for news
            spawn(Kind.WATCH, watcher.sweep, every=timing.sweep, name="sweep")
            spawn(Kind.TICK, self._tick, every=timing.tick, name="tick")
            if self.history is not None:
                # The watcher scans once its watches are in place, then follows the transcripts' changes.
                from connectd.history.watch import HistoryWatcher

                spawn(Kind.HISTORY_WATCH, HistoryWatcher(self.history, run_sync=self.run_sync).run, name="history watcher")
            task_status.started()
            try:
                await anyio.sleep_forever()
            finally:
                self._supervisor = None

    async def _recover(self) -> None:
        await self.step(H.Recover(self.clock()))

    async def _tick(self) -> None:
        await self.step(H.Tick(self.clock()))

    # --- the core ---------------------------------------------------------------------------------

    @property
    def hub(self) -> H.Hub:
        return self.runner.hub

    @hub.setter
    def hub(self, hub: H.Hub) -> None:
        self.runner.hub = hub

    async def step(self, event: H.Event) -> tuple[Effect, ...]:
        return await self.runner.step(event)

    async def audit(self, record: Audit) -> None:
        await self.runner.audit(record)
