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

The watcher is given the collaborators it uses (issue 24), never the engine: the core runner as
``core`` (the hub and ``step``), ``clock``, ``run_sync``, ``store``, ``tmux``, ``timing``,
``subscribers``, ``launches`` (a callable: the launches part is built after the watcher, and the
watcher asks it for a pane's launch record and its OpenCode binding), ``history`` (a callable: the
session index is set once the daemon serves one), ``trusted_releases``, ``release_probe`` and
``effective`` (``--here`` panes as their agent child).
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

import anyio

from connectcore import directory as D
from connectcore import hub as H
from connectcore import opencode_binding as OC
from connectcore import releases
from connectcore.hub import acts as hub_acts
from connectcore.screen import AGENT_HARNESSES, Reading, is_news, read_screen
from connectd.tmux.adapter import Capture, PaneInfo, TmuxError
from connectd.tmux.pane_releases import PaneReleases
from connectd.tmux.release_probe import ReleaseProbe
from connectd.tmux.repo_facts import FactsCache
from connectd.tmux.session_binding import SessionBindings

if TYPE_CHECKING:
    from connectd.agents.launch import LaunchRecord
    from connectd.daemon.parts import Subscribers, Timing
    from connectd.daemon.runner import Core, RunSync
    from connectd.tmux.adapter import TmuxAdapter

SCROLLBACK_LINES = 200
_HOSTNAME = socket.gethostname()


@dataclass
class PaneState:
    info: PaneInfo
    record: D.PaneRecord
    reading: Reading | None = None
    capture: Capture | None = None
    release: str | None = None  # the agent's release, once its banner or its program named it
    probed: bool = False  # its program was asked (once per incarnation)
    retell: bool = False  # tell the core this pane's next reading even if unchanged (its release came)
    release_kept: bool = False  # its release is in the store (kept across a daemon restart)


def incarnation_of(info: PaneInfo) -> D.Incarnation:
    return D.Incarnation(
        server_pid=info.server_pid,
        server_start=info.server_start_time,
        pane_id=info.pane_id,
        pane_pid=info.pane_pid or 0,
        process_start=info.process_start_time or 0,
    )


def token_of(info: PaneInfo) -> str:
    return D.incarnation_token(incarnation_of(info))


def alive(info: PaneInfo) -> bool:
    """The listed pane has a live incarnation (the core's :func:`connectcore.directory.pane_live`)."""
    return D.pane_live(dead=info.dead, pane_pid=info.pane_pid, process_start=info.process_start_time)


class LaunchesSeen(Protocol):
    """What the watcher asks of the launches part (:class:`connectd.agents.launch.Launches`): a pane's
    launch record, forgetting an incarnation that went, and its OpenCode session binding."""

    async def record_for(self, pane_id: str, incarnation: str) -> LaunchRecord | None: ...

    def forget(self, pane_id: str, incarnation: str) -> None: ...

    def bind_when_due(self, pane_id: str, incarnation: str, reading: Reading, pane_pid: int) -> None: ...

    def binding_pending(self, pane_id: str, incarnation: str) -> bool: ...


class Watcher:
    """Which panes live (:meth:`poll`, one at a time, and :meth:`reconcile` at startup), what they show
    (:meth:`capture_dirty`, :meth:`observe_pane`, :meth:`sweep`) and what the rest of the daemon asks of
    a pane (its incarnation now, readiness, harness, release, program). Its parts: the session
    evidence and bindings (``sessions``), the releases (``releases``), the routing facts (``facts``)."""

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
        self.core, self.clock, self.run_sync, self.store, self.tmux = core, clock, run_sync, store, tmux
        self.timing, self.subscribers, self.launches, self.history = timing, subscribers, launches, history
        self.trusted_releases = trusted_releases  # (harness, release) typed into though not verified
        self.directory = D.Directory()
        self.panes: dict[str, PaneState] = {}
        self._dirty: set[str] = set()
        self._drew: dict[str, anyio.Event] = {}  # pane -> set at its next %output (delivery waits on it)
        self._output_at: dict[str, float] = {}  # pane -> when its last %output came (anyio's clock)
        self._news = anyio.Event()  # a pane drew that was not waiting to be captured, or the layout changed
        self._read_at: dict[str, float] = {}  # pane -> when it was last captured (anyio's clock)
        self._structure = False  # a structure notice came: list-panes at the next capture round
        self._awaited_for: object = None  # the hub state ``_awaited_panes`` was computed from
        self._awaited_panes: frozenset[str] = frozenset()
        self._gone: set[tuple[str, str]] = set()  # (pane, incarnation) seen going, not yet stepped
        self._polled_at = float("inf")  # when the last poll began (nothing drew "since" before the first)
        self._polling = anyio.Lock(fast_acquire=True)  # one poll at a time (see :meth:`poll`)
        self._drew_since_poll = False  # a %output came since the last poll began
        #: Whether control mode reports output now (set by the daemon's control-mode reader); without it
        #: nothing marks a pane as drawing, so :meth:`poll_when_due` polls every ``timing.poll``.
        self.output_reported: Callable[[], bool] = lambda: False
        self.facts = FactsCache(run_sync=run_sync, clock=clock, history=history, retry=timing.bind)
        self.releases = PaneReleases(store=store, run_sync=run_sync, clock=clock, probe=release_probe or ReleaseProbe())
        self.sessions = SessionBindings(
            core=core, clock=clock, run_sync=run_sync, store=store, every=timing.bind, history=history
        )
        # ``connectd launch --here`` (given by its part, connectd.agents.launch_here.HerePanes): a pane
        # whose supervisor holds an agent child, as the child's process life
        self._effective = effective

    # --- the control-mode reader and history liveness -------------------------------------------

    def mark_output(self, pane_id: str) -> None:
        """The control-mode reader saw output from this pane: capture it at the next round, and wake
        whoever waits for it to draw."""
        self._drew_since_poll = True
        self._output_at[pane_id] = anyio.current_time()
        if pane_id not in self._dirty:
            self._dirty.add(pane_id)
            self._news.set()
        if (drew := self._drew.pop(pane_id, None)) is not None:
            drew.set()

    async def drawn(self, pane_id: str, within: float, *, since: float | None = None) -> None:
        """Return once this pane produces output, or after ``within`` seconds (a lost notice, or no
        control mode: the caller reads anyway); at once if it produced output after ``since`` (anyio's
        clock), so output that came before the caller began to wait is not missed."""
        if since is not None and self._output_at.get(pane_id, float("-inf")) > since:
            return
        drew = self._drew.setdefault(pane_id, anyio.Event())
        with anyio.move_on_after(within):
            await drew.wait()

    def mark_structure(self) -> None:
        """The control-mode reader saw panes, windows or sessions come, go or move: poll at the next round."""
        self._structure = True
        self._news.set()

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
        self._dirty.add(pane_id)

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

    # --- list-panes: the source of truth ----------------------------------------------------------

    async def poll_when_due(self) -> None:
        """The timed poll (run every ``timing.poll``): poll if some pane drew since the last poll,
        control mode is not reporting output, or an agent pane waits for its session binding; else only
        ``timing.poll_quiet`` after the last poll. An idle, bound fleet then costs a list-panes every few
        seconds, not every second."""
        quiet_for = self.clock() - self._polled_at
        if (
            self._drew_since_poll
            or not self.output_reported()
            or self._binding_pending()
            or quiet_for >= self.timing.poll_quiet
        ):
            await self.poll()

    def _binding_pending(self) -> bool:
        """Some agent pane is not bound to its session yet: its evidence (a launch record, Claude's
        registry, Codex's rollout file) may appear without the pane drawing, and polls look for it."""
        return any(
            s.reading is not None and s.reading.harness in AGENT_HARNESSES
            and not isinstance(s.record.binding, D.SessionBinding)
            for s in self.panes.values()
        )

    async def poll(self) -> list[PaneInfo]:
        """One look at the whole server: list the panes (one tmux call), then update the directory,
        the bindings and the pane states. Returns the live panes it listed, so a caller that needs a
        pane's incarnation now (:meth:`fresh_incarnation`) need not list them again.

        Polls run one at a time (issue 24): a poll asked for while another runs waits for it, then lists
        the panes itself, so its list is taken after its call began (the delivery guard needs that) and
        no older list is ever applied after a newer one (a slow poll that finished last used to undo a
        launch's poll: the new pane read as gone and its fresh token ended;
        ``tests/simulation/test_scenarios.py::test_a_slow_poll_never_undoes_a_newer_one``).
        Nothing deadlocks on the lock: a poll's own steps (``PaneGone``, ``BindSession``) never emit an
        effect that polls (a guard they queue runs in its own task), so a poll never waits for another
        (a nested one in the same task would raise, not hang); and a poll takes no send lock, while its
        callers that hold one (the guard, a restart's respawn) take the send lock first, then this."""
        async with self._polling:
            return await self._poll()

    async def _poll(self) -> list[PaneInfo]:
        tmux, launches = self.tmux, self.launches()
        since, self._polled_at = self._polled_at, self.clock()
        self._drew_since_poll = False
        # One tmux call: list-panes reaps first (no server: no panes).
        infos = [self._effective(p) for p in await tmux.list_panes() if alive(p)]
        observations = []
        launched: dict[str, LaunchRecord] = {}
        for info in infos:
            launch = await launches.record_for(info.pane_id, token_of(info))
            if launch is not None:
                launched[info.pane_id] = launch
            observations.append(self._observation(info, launch))
        before = self.directory
        self.directory = D.observe(before, observations)
        for info in infos:
            await self.sessions.codex(self.directory, self.panes.get(info.pane_id), info, token_of(info), self._note)
            await self._probe_release(info)
        for info in infos:
            launch = launched.get(info.pane_id)
            if launch is not None and launch.session_id is not None:
                self._note(
                    D.Evidence(info.pane_id, token_of(info), D.EvidenceSource.LAUNCH, launch.harness, launch.session_id)
                )
        await self.sessions.claude(lambda: self.directory, self.panes, self._note)
        self.directory = await self.facts.refresh(self.directory)
        ended: list[str] = []
        for pane_id, record in before.panes.items():
            now_record = self.directory.panes.get(pane_id)
            if now_record is None or now_record.token != record.token:
                self.panes.pop(pane_id, None)
                self._read_at.pop(pane_id, None)
                self._output_at.pop(pane_id, None)
                self.sessions.forget(record.token)
                launches.forget(pane_id, record.token)
                self._gone.add((pane_id, record.token))
                ended.append(record.token)
        await self.releases.forget(ended)
        await self._step_gone()
        for info in infos:
            record = self.directory.panes[info.pane_id]
            state = self.panes.get(info.pane_id)
            if state is None or state.record.token != record.token:
                state = self.panes[info.pane_id] = PaneState(info, record)
                await self.releases.recall(state)
                self._dirty.add(info.pane_id)
            else:
                if info.activity >= int(since):  # its window drew since the last poll (whole seconds):
                    self._dirty.add(info.pane_id)  # a lost %output costs one poll period, not a sweep
                state.info, state.record = info, record
        await self.sessions.bind(lambda: self.directory, self.panes)
        self._publish_changes(before)
        tmux.forget_pane_locks(set(self.panes))
        return infos

    def _publish_changes(self, before: D.Directory) -> None:
        """Tell the page about a pane whose binding or routing facts changed without its screen changing."""
        for pane_id, record in self.directory.panes.items():
            old = before.panes.get(pane_id)
            if old is not None and _shown(old) != _shown(record):
                self.subscribers.publish({"topic": "pane", "pane": pane_id})

    def _note(self, evidence: D.Evidence) -> None:
        """Note one piece of session evidence in the directory as it stands."""
        self.directory = D.note_evidence(self.directory, evidence)

    def _observation(self, info: PaneInfo, launch: LaunchRecord | None) -> D.PaneObservation:
        """One pane of the poll, with what the daemon knows of it (its reading's harness, its launch,
        its routing facts as last read, whether it is control)."""
        old = self.panes.get(info.pane_id)
        harness = "unknown"
        if old is not None and old.info.incarnation_key == info.incarnation_key and old.reading is not None:
            harness = old.reading.harness.value
        token = token_of(info)
        title = _self_published_title(info)
        facts = self.facts.cached(info.pane_id, token, title)
        control = hub_acts.control_pane(self.core.hub.book)  # the running control's live token, if any
        return D.PaneObservation(
            incarnation=incarnation_of(info),
            harness=harness,
            foreground=info.current_command,
            title=title,
            session_title=facts.session_title,
            cwd=info.current_path,
            repo=facts.repo,
            branch=facts.branch,
            pr_links=facts.pr_links,
            launcher=launch.launcher if launch else None,
            is_control=control == (info.pane_id, token),
        )

    async def _step_gone(self) -> None:
        """Tell the core of every incarnation seen going. One whose step failed (the store) stays here
        and is stepped again at the next poll: the directory has moved on, so no later diff finds it."""
        for pane_id, token in sorted(self._gone):
            await self.core.step(H.PaneGone(self.clock(), pane_id, token))
            self._gone.discard((pane_id, token))

    async def reconcile(self) -> None:
        """Startup, after the first poll: end what belongs to incarnations that died while the daemon
        was down (their tokens, queued messages, open cards), as if the daemon had seen them go."""
        live = frozenset(record.token for record in self.directory.panes.values())
        await self.core.step(H.Reconcile(self.clock(), live))

    async def _probe_release(self, info: PaneInfo) -> None:
        """An agent pane whose banner named no release: ask its program, once per incarnation; an
        answer is captured again and told to the core and the page (its readiness may change)."""
        state = self.panes.get(info.pane_id)
        if state is None:
            return
        found = await self.releases.ask_program(state, info, token_of(info))
        if found is not None and self.panes.get(info.pane_id) is state:
            await self.releases.learned(state, *found)
            self._dirty.add(info.pane_id)
            self.subscribers.publish({"topic": "pane", "pane": info.pane_id})

    # --- captures ---------------------------------------------------------------------------------

    async def capture_dirty(self) -> None:
        """One round: capture the panes that drew, each at most once per ``timing.capture`` (a pane
        that keeps drawing is read at that pace, or at ``timing.capture_awaited`` while a consented
        message waits for it; the first output after a quiet spell is read at once); then, if a
        structure notice came, poll (its new panes are read at the next round).
        With nothing due, wait for news (a pane that drew, a structure notice) or for the next pane
        to come due, at most ``timing.capture``."""
        timing, now = self.timing, anyio.current_time()
        pace, awaited = timing.capture, self._awaited() if self._dirty else frozenset()
        due_at = {
            p: self._read_at.get(p, float("-inf")) + (timing.capture_awaited if p in awaited else pace)
            for p in self._dirty
        }
        due = sorted(p for p, at in due_at.items() if at <= now)
        if not due and not self._structure:
            self._news = anyio.Event()
            with anyio.move_on_after(min([*due_at.values(), now + pace]) - now):
                await self._news.wait()
            return
        self._dirty.difference_update(due)
        for pane_id in due:
            if pane_id in self.panes:
                await self.observe_pane(pane_id)
        if self._structure:
            self._structure = False
            await self.poll()

    def _awaited(self) -> frozenset[str]:
        """The core's awaited panes (:func:`connectcore.hub.awaited_panes`), once per state of the hub."""
        hub = self.core.hub
        if self._awaited_for is not hub:
            self._awaited_for, self._awaited_panes = hub, H.awaited_panes(hub)
        return self._awaited_panes

    async def sweep(self) -> None:
        for pane_id in sorted(self.panes):
            await self.observe_pane(pane_id)

    async def observe_pane(self, pane_id: str) -> Reading | None:
        """Capture and read one pane, and tell the core what it saw (a pane that exited between two
        tmux calls is read at the next poll)."""
        state = self.panes.get(pane_id)
        if state is None:
            return None
        read_at = self.clock()  # when it was read: the core never lets an older reading overwrite it
        self._read_at[pane_id] = anyio.current_time()
        try:
            capture = await self.tmux.capture(pane_id, SCROLLBACK_LINES)
        except TmuxError:
            # Read it again at the next capture round (at most once per ``timing.capture``): what it
            # drew may be its last frame for a long while (seed 693: an idle frame whose capture failed
            # left a message waiting until the sweep). A pane that went is dropped by the next poll.
            self._dirty.add(pane_id)
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
                self._dirty.add(pane_id)
                raise
            state.retell = False
            if H.reading_dropped(self.core.hub, pane_id, state.record.token, read_at):
                # the hub holds a newer reading (a confirmation's, stamped after this capture began):
                # this screen is not told; the next capture round reads the pane again and tells it
                state.retell = True
                self._dirty.add(pane_id)
            self.subscribers.publish({"topic": "pane", "pane": pane_id})
        return reading


def _shown(record: D.PaneRecord) -> tuple[object, ...]:
    return (record.token, record.binding, record.repo, record.branch, record.session_title, record.pr_links)


def _self_published_title(info: PaneInfo) -> str:
    return D.self_published_title(info.title, _HOSTNAME)
