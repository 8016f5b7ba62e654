"""The watcher's poll (:class:`connectd.tmux.watcher.Watcher`'s part ``polls``): ``list-panes -a``, the
source of truth for which incarnations live, and what follows from it.

- :meth:`PanePoll.poll` lists the panes (one tmux call), then updates the directory, the session
  evidence and bindings, each pane's release and routing facts, and the pane states; a pane that went,
  or whose process was replaced, is stepped into the core as ``PaneGone``. Polls run one at a time.
- :meth:`PanePoll.when_due` is the timed poll: each ``timing.poll`` while some pane draws, control mode
  is not reading, or an agent pane waits for its session binding; each ``timing.poll_quiet`` while
  every pane is quiet and bound. Each poll marks the panes whose window drew since the previous poll
  (tmux's ``window_activity``), in case a notice was lost.
- :meth:`PanePoll.reconcile`: at startup, after the first poll, what belongs to incarnations that died
  while the daemon was down is ended (``Reconcile``).

It is given what it uses: the core runner as ``core``, ``clock``, ``tmux``, ``timing``,
``subscribers``, ``launches`` (a callable), ``effective`` (``--here`` panes as their agent child), the
watched panes (``watched``), the capture schedule (``captures``: a pane to read, a pane's times to
forget), the watcher's other parts (``sessions``, ``releases``, ``facts``) and ``output_reported``
(whether control mode reports output now).
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import TYPE_CHECKING

import anyio

from connectcore import directory as D
from connectcore import hub as H
from connectcore.hub import acts as hub_acts
from connectcore.screen import AGENT_HARNESSES
from connectd.tmux.adapter import PaneInfo
from connectd.tmux.watched import PaneState, alive, incarnation_of, token_of

if TYPE_CHECKING:
    from connectd.agents.launch import LaunchRecord
    from connectd.daemon.parts import Subscribers, Timing
    from connectd.daemon.runner import Core
    from connectd.tmux.adapter import TmuxAdapter
    from connectd.tmux.captures import CaptureSchedule
    from connectd.tmux.pane_releases import PaneReleases
    from connectd.tmux.repo_facts import FactsCache
    from connectd.tmux.session_binding import SessionBindings
    from connectd.tmux.watched import Watched
    from connectd.tmux.watcher import LaunchesSeen

_HOSTNAME = socket.gethostname()


class PanePoll:
    """``list-panes`` and what follows from it, one poll at a time."""

    def __init__(
        self,
        *,
        core: Core,
        clock: Callable[[], float],
        tmux: TmuxAdapter,
        timing: Timing,
        subscribers: Subscribers,
        launches: Callable[[], LaunchesSeen],
        effective: Callable[[PaneInfo], PaneInfo],
        watched: Watched,
        captures: CaptureSchedule,
        sessions: SessionBindings,
        releases: PaneReleases,
        facts: FactsCache,
        output_reported: Callable[[], bool],
    ) -> None:
        self.core, self.clock, self.tmux, self.timing, self.subscribers = core, clock, tmux, timing, subscribers
        self.launches, self.effective, self.watched, self.captures = launches, effective, watched, captures
        self.sessions, self.releases, self.facts, self.output_reported = sessions, releases, facts, output_reported
        self._gone: set[tuple[str, str]] = set()  # (pane, incarnation) seen going, not yet stepped
        self.polled_at = float("inf")  # when the last poll began (nothing drew "since" before the first)
        self._polling = anyio.Lock(fast_acquire=True)  # one poll at a time (see :meth:`poll`)
        self.drew_since_poll = False  # a %output came since the last poll began

    async def when_due(self) -> None:
        """The timed poll (run every ``timing.poll``): poll if some pane drew since the last poll,
        control mode is not reporting output, or an agent pane waits for its session binding; else only
        ``timing.poll_quiet`` after the last poll. An idle, bound fleet then costs a list-panes every few
        seconds, not every second."""
        quiet_for = self.clock() - self.polled_at
        if (
            self.drew_since_poll
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
            for s in self.watched.panes.values()
        )

    async def poll(self) -> list[PaneInfo]:
        """One look at the whole server: list the panes (one tmux call), then update the directory,
        the bindings and the pane states. Returns the live panes it listed, so a caller that needs a
        pane's incarnation now (:meth:`connectd.tmux.watcher.Watcher.fresh_incarnation`) need not list
        them again.

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
        tmux, launches, watched = self.tmux, self.launches(), self.watched
        since, self.polled_at = self.polled_at, self.clock()
        self.drew_since_poll = False
        # One tmux call: list-panes reaps first (no server: no panes).
        infos = [self.effective(p) for p in await tmux.list_panes() if alive(p)]
        observations = []
        launched: dict[str, LaunchRecord] = {}
        for info in infos:
            launch = await launches.record_for(info.pane_id, token_of(info))
            if launch is not None:
                launched[info.pane_id] = launch
            observations.append(self._observation(info, launch))
        before = watched.directory
        watched.directory = D.observe(before, observations)
        for info in infos:
            await self.sessions.codex(watched.directory, watched.panes.get(info.pane_id), info, token_of(info), self._note)
            await self.probe_release(info)
        for info in infos:
            launch = launched.get(info.pane_id)
            if launch is not None and launch.session_id is not None:
                self._note(
                    D.Evidence(info.pane_id, token_of(info), D.EvidenceSource.LAUNCH, launch.harness, launch.session_id)
                )
        await self.sessions.claude(lambda: watched.directory, watched.panes, self._note)
        watched.directory = await self.facts.refresh(watched.directory)
        ended: list[str] = []
        for pane_id, record in before.panes.items():
            now_record = watched.directory.panes.get(pane_id)
            if now_record is None or now_record.token != record.token:
                watched.panes.pop(pane_id, None)
                self.captures.forget(pane_id)
                self.sessions.forget(record.token)
                launches.forget(pane_id, record.token)
                self._gone.add((pane_id, record.token))
                ended.append(record.token)
        await self.releases.forget(ended)
        await self._step_gone()
        for info in infos:
            record = watched.directory.panes[info.pane_id]
            state = watched.panes.get(info.pane_id)
            if state is None or state.record.token != record.token:
                state = watched.panes[info.pane_id] = PaneState(info, record)
                await self.releases.recall(state)
                self.captures.dirty.add(info.pane_id)
            else:
                if info.activity >= int(since):  # its window drew since the last poll (whole seconds):
                    self.captures.dirty.add(info.pane_id)  # a lost %output costs one poll period, not a sweep
                state.info, state.record = info, record
        await self.sessions.bind(lambda: watched.directory, watched.panes)
        self._publish_changes(before)
        tmux.forget_pane_locks(set(watched.panes))
        return infos

    def _publish_changes(self, before: D.Directory) -> None:
        """Tell the page about a pane whose binding or routing facts changed without its screen changing."""
        for pane_id, record in self.watched.directory.panes.items():
            old = before.panes.get(pane_id)
            if old is not None and _shown(old) != _shown(record):
                self.subscribers.publish({"topic": "pane", "pane": pane_id})

    def _note(self, evidence: D.Evidence) -> None:
        """Note one piece of session evidence in the directory as it stands."""
        self.watched.directory = D.note_evidence(self.watched.directory, evidence)

    def _observation(self, info: PaneInfo, launch: LaunchRecord | None) -> D.PaneObservation:
        """One pane of the poll, with what the daemon knows of it (its reading's harness, its launch,
        its routing facts as last read, whether it is control)."""
        old = self.watched.panes.get(info.pane_id)
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
        live = frozenset(record.token for record in self.watched.directory.panes.values())
        await self.core.step(H.Reconcile(self.clock(), live))

    async def probe_release(self, info: PaneInfo) -> None:
        """An agent pane whose banner named no release: ask its program, once per incarnation; an
        answer is captured again and told to the core and the page (its readiness may change)."""
        state = self.watched.panes.get(info.pane_id)
        if state is None:
            return
        found = await self.releases.ask_program(state, info, token_of(info))
        if found is not None and self.watched.panes.get(info.pane_id) is state:
            await self.releases.learned(state, *found)
            self.captures.dirty.add(info.pane_id)
            self.subscribers.publish({"topic": "pane", "pane": info.pane_id})


def _shown(record: D.PaneRecord) -> tuple[object, ...]:
    return (record.token, record.binding, record.repo, record.branch, record.session_title, record.pr_links)


def _self_published_title(info: PaneInfo) -> str:
    return D.self_published_title(info.title, _HOSTNAME)
