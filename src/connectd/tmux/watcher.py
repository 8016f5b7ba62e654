"""The watcher: which panes live, what they show, and which agent session each holds.

- ``list-panes -a`` (:meth:`Watcher.poll`) is the source of truth for which incarnations live; a pane
  that went, or whose process was replaced, is stepped into the core as ``PaneGone``. At startup the
  first poll is followed by :meth:`Watcher.reconcile`: every token, queued message and open card of an
  incarnation that no longer exists is ended, exactly as if the daemon had seen the pane go.
- The control-mode reader marks panes that produced output (:meth:`mark_output`); they are captured
  within ``timing.capture``. Its structure notices (:meth:`mark_structure`) make the next round poll.
  Otherwise a poll runs each ``timing.poll`` while some pane draws, control mode is not reading, or
  an agent pane waits for its session binding, and each ``timing.poll_quiet`` while every pane is
  quiet and bound (:meth:`poll_when_due`).
  In case a notice was lost, each poll marks the panes whose window drew since the previous poll
  (tmux's ``window_activity``), and a slow sweep recaptures every pane. A pane that drew nothing costs
  nothing but its line in ``list-panes``.
  Each reading whose screen or readiness changed is stepped into the core as ``PaneObserved``.
- Session bindings, for every pane (hand-started agents too): the directory binds a pane to its agent
  session from the launch record, from Claude Code's session registry (``<claude root>/sessions/
  <pid>.json``, trusted only when the process start time matches /proc), or (Codex) from the rollout
  file its process holds open; a bound principal gets its session alias
  (:class:`connectd.tmux.session_binding.SessionBindings` reads that evidence and tells the bindings). An OpenCode launch's record
  gets its session id from the binding through its own server, which each reading of the pane starts
  when the core says it is due (:meth:`connectd.agents.launch.Launches.bind_when_due`).
- Routing facts (repo, branch, session title, PR links) are read only when a pane's cwd or binding
  changed (:class:`connectd.tmux.repo_facts.FactsCache`).
- Each agent's release: from its session banner when a reading shows one, else once per incarnation
  from its program's ``--version`` (:mod:`connectd.tmux.release_probe`), kept by incarnation
  (:class:`connectd.tmux.pane_releases.PaneReleases`). What the core hears of a pane's readiness is
  :func:`connectcore.releases.ready_for_message`: on an unverified or unknown release a message is
  never typed (it waits).

Its parts, by duty: the poll (:class:`connectd.tmux.pane_poll.PanePoll`, ``polls``: list-panes and
what follows from it, startup reconciliation), the capture schedule
(:class:`connectd.tmux.captures.CaptureSchedule`, ``captures``: which panes drew and are due, who waits
for a pane to draw), the session evidence and bindings (``sessions``), the releases (``releases``), the
routing facts (``facts``); they share the watched panes (:class:`connectd.tmux.watched.Watched`: the
directory and each pane's state). The watcher itself reads a pane (:meth:`Watcher.observe_pane`) and
answers what the rest of the daemon asks of a pane.

The watcher is given the collaborators it uses (issue 24), never the engine: the core runner as
``core`` (the hub and ``step``), ``clock``, ``run_sync``, ``store``, ``tmux``, ``timing``,
``subscribers``, ``launches`` (a callable: the launches part is built after the watcher, and the
watcher asks it for a pane's launch record and its OpenCode binding), ``history`` (a callable: the
session index is set once the daemon serves one), ``trusted_releases``, ``release_probe`` and
``effective`` (``--here`` panes as their agent child).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

import anyio

from connectcore import directory as D
from connectcore import hub as H
from connectcore import opencode_binding as OC
from connectcore import releases
from connectcore.screen import Reading, is_news, read_screen
from connectd.tmux.adapter import PaneInfo, TmuxError
from connectd.tmux.captures import CaptureSchedule
from connectd.tmux.pane_poll import PanePoll
from connectd.tmux.pane_releases import PaneReleases
from connectd.tmux.release_probe import ReleaseProbe
from connectd.tmux.repo_facts import FactsCache
from connectd.tmux.session_binding import SessionBindings
from connectd.tmux.watched import PaneState, Watched, alive, incarnation_of, token_of

if TYPE_CHECKING:
    from connectd.agents.launch import LaunchRecord
    from connectd.daemon.parts import Subscribers, Timing
    from connectd.daemon.runner import Core, RunSync
    from connectd.tmux.adapter import TmuxAdapter

__all__ = ["SCROLLBACK_LINES", "LaunchesSeen", "PaneState", "Watcher", "alive", "incarnation_of", "token_of"]

SCROLLBACK_LINES = 200


class LaunchesSeen(Protocol):
    """What the watcher asks of the launches part (:class:`connectd.agents.launch.Launches`): a pane's
    launch record, forgetting an incarnation that went, and its OpenCode session binding."""

    async def record_for(self, pane_id: str, incarnation: str) -> LaunchRecord | None: ...

    def forget(self, pane_id: str, incarnation: str) -> None: ...

    def bind_when_due(self, pane_id: str, incarnation: str, reading: Reading, pane_pid: int) -> None: ...

    def binding_pending(self, pane_id: str, incarnation: str) -> bool: ...


class Watcher:
    """Which panes live (:meth:`poll`, one at a time, and :meth:`reconcile` at startup: its part
    ``polls``), when they are read (:meth:`capture_dirty`, :meth:`sweep`: its part ``captures``), what
    they show (:meth:`observe_pane`) and what the rest of the daemon asks of a pane (its incarnation
    now, readiness, harness, release, program). Its other parts: the session evidence and bindings
    (``sessions``), the releases (``releases``), the routing facts (``facts``)."""

    def __init__(
        self,
        *,
        core: Core,
        clock: Callable[[], float],
        run_sync: RunSync,
        store: Any,
        tmux: TmuxAdapter,
        timing: Timing,
        subscribers: Subscribers,
        launches: Callable[[], LaunchesSeen],
        history: Callable[[], Any | None],
        trusted_releases: frozenset[tuple[str, str]] = frozenset(),
        release_probe: ReleaseProbe | None = None,
        effective: Callable[[PaneInfo], PaneInfo] = lambda info: info,
    ) -> None:
        self.core, self.clock, self.tmux = core, clock, tmux
        self.subscribers, self.launches = subscribers, launches
        self.trusted_releases = trusted_releases  # (harness, release) typed into though not verified
        self.watched = Watched()
        #: Whether control mode reports output now (set by the daemon's control-mode reader); without it
        #: nothing marks a pane as drawing, so :meth:`poll_when_due` polls every ``timing.poll``.
        self.output_reported: Callable[[], bool] = lambda: False
        self.facts = FactsCache(run_sync=run_sync, clock=clock, history=history, retry=timing.bind)
        self.releases = PaneReleases(store=store, run_sync=run_sync, clock=clock, probe=release_probe or ReleaseProbe())
        self.sessions = SessionBindings(
            core=core, clock=clock, run_sync=run_sync, store=store, every=timing.bind, history=history
        )
        self.captures = CaptureSchedule(
            core=core, timing=timing, watched=self.watched,
            observe=lambda pane_id: self.observe_pane(pane_id), poll=lambda: self.poll(),
        )
        self.polls = PanePoll(
            core=core, clock=clock, tmux=tmux, timing=timing, subscribers=subscribers, launches=launches,
            effective=effective, watched=self.watched, captures=self.captures, sessions=self.sessions,
            releases=self.releases, facts=self.facts, output_reported=lambda: self.output_reported(),
        )
        # ``connectd launch --here`` (given by its part, connectd.agents.launch_here.HerePanes): a pane
        # whose supervisor holds an agent child, as the child's process life
        self._effective = effective

    @property
    def directory(self) -> D.Directory:
        return self.watched.directory

    @directory.setter
    def directory(self, directory: D.Directory) -> None:
        self.watched.directory = directory

    @property
    def panes(self) -> dict[str, PaneState]:
        return self.watched.panes

    @panes.setter
    def panes(self, panes: dict[str, PaneState]) -> None:
        self.watched.panes = panes

    # --- the control-mode reader and history liveness -------------------------------------------

    def mark_output(self, pane_id: str) -> None:
        """The control-mode reader saw output from this pane: capture it at the next round, and wake
        whoever waits for it to draw (the next timed poll lists the panes)."""
        self.polls.drew_since_poll = True
        self.captures.mark_output(pane_id)

    async def drawn(self, pane_id: str, within: float, *, since: float | None = None) -> None:
        """Return once this pane produces output, or after ``within`` seconds
        (:meth:`connectd.tmux.captures.CaptureSchedule.drawn`)."""
        await self.captures.drawn(pane_id, within, since=since)

    def mark_structure(self) -> None:
        """The control-mode reader saw panes, windows or sessions come, go or move: poll at the next round."""
        self.captures.mark_structure()

    def pane_pids(self) -> dict[int, str]:
        """{pane process pid: pane id} of the watched tmux server, for history liveness."""
        return {s.info.pane_pid: p for p, s in self.panes.items() if s.info.pane_pid}

    def command_of(self, pane_id: str) -> str:
        state = self.panes.get(pane_id)
        return state.info.current_command if state else ""

    def remember_reading(self, pane_id: str, incarnation: str, reading: Reading) -> None:
        state = self.panes.get(pane_id)
        if state is not None and state.record.token == incarnation:
            state.reading = reading

    def look_again(self, pane_id: str) -> None:
        """Capture this pane at the next round and report the reading even if the screen is unchanged."""
        state = self.panes.get(pane_id)
        if state is not None:
            state.reading = None
        self.captures.dirty.add(pane_id)

    def harness_of(self, record: D.PaneRecord) -> str:
        """The pane's harness by the core's one rule (:func:`connectcore.directory.recipient_harness`):
        its newest reading when it names one, else what the directory recorded."""
        state = self.panes.get(record.pane_id)
        read = state.reading.harness.value if state is not None and state.reading is not None else None
        return D.recipient_harness(read, recorded=record.harness)

    def release_of(self, pane_id: str, incarnation: str | None) -> str | None:
        state = self.panes.get(pane_id)
        return state.release if state is not None and state.record.token == incarnation else None

    def ready(self, pane_id: str, incarnation: str | None, reading: Reading) -> bool:
        """What the core hears of this reading's readiness (:func:`connectcore.releases.ready_for_message`,
        and :func:`connectcore.opencode_binding.ready_for_message` while an OpenCode launch binds)."""
        ready = releases.ready_for_message(
            reading.ready_for_message, reading.harness.value, self.release_of(pane_id, incarnation),
            self.trusted_releases,
        )
        binding = incarnation is not None and self.launches().binding_pending(pane_id, incarnation)
        return OC.ready_for_message(ready, binding=binding)

    async def fresh_incarnation(
        self, pane_id: str, listed: list[PaneInfo] | None = None
    ) -> tuple[PaneInfo | None, str | None]:
        """The pane and its incarnation as tmux lists them now (``listed``: a :meth:`poll`'s answer,
        taken a moment ago under the same send lock, so the panes are not listed twice)."""
        if listed is None:
            listed = [self._effective(p) for p in await self.tmux.list_panes() if alive(p)]
        for info in listed:
            if info.pane_id == pane_id:
                return info, token_of(info)
        return None, None

    # --- list-panes: the source of truth (the part ``polls``) -------------------------------------

    async def poll_when_due(self) -> None:
        """The timed poll (:meth:`connectd.tmux.pane_poll.PanePoll.when_due`)."""
        await self.polls.when_due()

    async def poll(self) -> list[PaneInfo]:
        """One look at the whole server, one poll at a time (:meth:`connectd.tmux.pane_poll.PanePoll.poll`):
        returns the live panes it listed."""
        return await self.polls.poll()

    async def reconcile(self) -> None:
        """Startup, after the first poll (:meth:`connectd.tmux.pane_poll.PanePoll.reconcile`)."""
        await self.polls.reconcile()

    # --- captures (the part ``captures``) and a pane read -----------------------------------------

    async def capture_dirty(self) -> None:
        """One capture round (:meth:`connectd.tmux.captures.CaptureSchedule.capture_dirty`)."""
        await self.captures.capture_dirty()

    async def sweep(self) -> None:
        await self.captures.sweep()

    async def observe_pane(self, pane_id: str) -> Reading | None:
        """Capture and read one pane, and tell the core what it saw (a pane that exited between two
        tmux calls is read at the next poll)."""
        state = self.panes.get(pane_id)
        if state is None:
            return None
        read_at = self.clock()  # when it was read: the core never lets an older reading overwrite it
        self.captures.read_at[pane_id] = anyio.current_time()
        try:
            capture = await self.tmux.capture(pane_id, SCROLLBACK_LINES)
        except TmuxError:
            # Read it again at the next capture round (at most once per ``timing.capture``): what it
            # drew may be its last frame for a long while (seed 693: an idle frame whose capture failed
            # left a message waiting until the sweep). A pane that went is dropped by the next poll.
            self.captures.dirty.add(pane_id)
            return None
        reading = read_screen(capture.text, state.info.current_command, capture.cursor, height=capture.height)
        await self.releases.from_screen(state, reading.harness.value, capture.text)
        changed = is_news(state.reading, reading, retell=state.retell)
        harness_changed = state.reading is None or state.reading.harness != reading.harness
        told, state.reading, state.capture = state.reading, reading, capture
        if harness_changed:
            self.directory = replace(
                self.directory,
                panes={**self.directory.panes, pane_id: replace(state.record, harness=reading.harness.value)},
            )
            state.record = self.directory.panes[pane_id]
        # an OpenCode launch that serves for its session binding: bound once it reads idle
        self.launches().bind_when_due(pane_id, state.record.token, reading, state.info.pane_pid or 0)
        if changed:
            try:
                await self.core.step(
                    H.PaneObserved(
                        self.clock(), pane_id, state.record.token, self.ready(pane_id, state.record.token, reading),
                        reading.fingerprint, read_at,
                    )
                )
            except BaseException:  # the core never heard it: the next read that sees it tells it again,
                state.reading = told  # and the next capture round reads it again (it may not draw again)
                self.captures.dirty.add(pane_id)
                raise
            state.retell = False
            if H.reading_dropped(self.core.hub, pane_id, state.record.token, read_at):
                # the hub holds a newer reading (a confirmation's, stamped after this capture began):
                # this screen is not told; the next capture round reads the pane again and tells it
                state.retell = True
                self.captures.dirty.add(pane_id)
            self.subscribers.publish({"topic": "pane", "pane": pane_id})
        return reading

