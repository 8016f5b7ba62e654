"""The watcher: which panes live, what they show, and which agent session each holds.

- ``list-panes -a`` (:meth:`Watcher.poll`) is the source of truth for which incarnations live; a pane
  that went, or whose process was replaced, is stepped into the core as ``PaneGone``. At startup the
  first poll is followed by :meth:`Watcher.reconcile`: every token, queued message and open card of an
  incarnation that no longer exists is ended, exactly as if the daemon had seen the pane go.
- The control-mode reader marks panes that produced output (:meth:`mark_output`); they are captured
  within ``timing.capture``. Its structure notices (:meth:`mark_structure`) make the next round poll.
  In case a notice was lost, each poll marks the panes whose window drew since the previous poll
  (tmux's ``window_activity``), and a slow sweep recaptures every pane. A pane that drew nothing costs
  nothing but its line in ``list-panes``.
  Each reading whose screen or readiness changed is stepped into the core as ``PaneObserved``.
- Session bindings: the directory binds a pane to its agent session from the launch record, or (Codex)
  from the rollout file its process holds open; a bound principal gets its session alias.
"""

from __future__ import annotations

import logging
import re
import socket
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from connectcore import directory as D
from connectcore import grants
from connectcore import hub as H
from connectcore.screen import Reading, read_screen
from connectd import procfs
from connectd.tmux import Capture, PaneInfo, TmuxError

if TYPE_CHECKING:
    from connectd.engine import Engine
    from connectd.launches import LaunchRecord

log = logging.getLogger("connectd.watcher")

_ROLLOUT = re.compile(r"/rollout-[0-9T:-]+-([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\.jsonl$")
SCROLLBACK_LINES = 200
_HOSTNAME = socket.gethostname()


@dataclass
class PaneState:
    info: PaneInfo
    record: D.PaneRecord
    reading: Reading | None = None
    capture: Capture | None = None


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
    return not info.dead and bool(info.pane_pid) and bool(info.process_start_time)


class Watcher:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.directory = D.Directory()
        self.panes: dict[str, PaneState] = {}
        self._dirty: set[str] = set()
        self._structure = False  # a structure notice came: list-panes at the next capture round
        self._polled_at = float("inf")  # when the last poll began (nothing drew "since" before the first)
        self._recorded_bindings: dict[str, tuple[str, str, str]] = {}
        self._codex_scanned: set[str] = set()  # incarnations already bound from an open rollout file

    # --- the control-mode reader and history liveness -------------------------------------------

    def mark_output(self, pane_id: str) -> None:
        """The control-mode reader saw output from this pane: capture it at the next round."""
        self._dirty.add(pane_id)

    def mark_structure(self) -> None:
        """The control-mode reader saw panes, windows or sessions come, go or move: poll at the next round."""
        self._structure = True

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

    async def fresh_incarnation(self, pane_id: str) -> tuple[PaneInfo | None, str | None]:
        for info in await self.engine.tmux.list_panes():
            if info.pane_id == pane_id and alive(info):
                return info, token_of(info)
        return None, None

    # --- list-panes: the source of truth ----------------------------------------------------------

    async def poll(self) -> None:
        engine = self.engine
        tmux = engine.tmux
        since, self._polled_at = self._polled_at, engine.clock()
        infos: list[PaneInfo] = []
        if await tmux.server_running():
            await tmux.reap()
            infos = [p for p in await tmux.list_panes() if alive(p)]
        observations = []
        launches: dict[str, LaunchRecord] = {}
        for info in infos:
            old = self.panes.get(info.pane_id)
            harness = "unknown"
            if old is not None and old.info.incarnation_key == info.incarnation_key and old.reading is not None:
                harness = old.reading.harness.value
            launch = await engine.launches.record_for(info.pane_id, token_of(info))
            if launch is not None:
                launches[info.pane_id] = launch
            observations.append(
                D.PaneObservation(
                    incarnation=incarnation_of(info),
                    harness=harness,
                    foreground=info.current_command,
                    title=_self_published_title(info),
                    cwd=info.current_path,
                    launcher=launch.launcher if launch else None,
                )
            )
        before = self.directory
        self.directory = D.observe(before, observations)
        for info in infos:
            await self._codex_evidence(info)
        for info in infos:
            launch = launches.get(info.pane_id)
            if launch is not None and launch.session_id is not None:
                self.directory = D.note_evidence(
                    self.directory,
                    D.Evidence(info.pane_id, token_of(info), D.EvidenceSource.LAUNCH, launch.harness, launch.session_id),
                )
        for pane_id, record in before.panes.items():
            now_record = self.directory.panes.get(pane_id)
            if now_record is None or now_record.token != record.token:
                self.panes.pop(pane_id, None)
                engine.launches.forget(pane_id, record.token)
                await engine.step(H.PaneGone(engine.clock(), pane_id, record.token))
        for info in infos:
            record = self.directory.panes[info.pane_id]
            state = self.panes.get(info.pane_id)
            if state is None or state.record.token != record.token:
                self.panes[info.pane_id] = PaneState(info, record)
                self._dirty.add(info.pane_id)
            else:
                if info.activity >= int(since):  # its window drew since the last poll (whole seconds):
                    self._dirty.add(info.pane_id)  # a lost %output costs one poll period, not a sweep
                state.info, state.record = info, record
        await self._bind_sessions()
        tmux.forget_pane_locks(set(self.panes))

    async def reconcile(self) -> None:
        """Startup, after the first poll: end what belongs to incarnations that died while the daemon
        was down (their tokens, queued messages, open cards), as if the daemon had seen them go."""
        engine = self.engine
        live = frozenset(record.token for record in self.directory.panes.values())
        await engine.step(H.Reconcile(engine.clock(), live))

    async def _codex_evidence(self, info: PaneInfo) -> None:
        """Codex reports its session id only after launch: the rollout file its process tree holds
        open (``rollout-<time>-<session id>.jsonl``) binds the pane, once, when nothing else has."""
        state = self.panes.get(info.pane_id)
        harness = state.reading.harness.value if state and state.reading else ""
        token = token_of(info)
        if harness != "codex" or token in self._codex_scanned or not info.pane_pid:
            return
        if isinstance(D.binding(self.directory, info.pane_id), D.SessionBinding):
            return
        files = await self.engine.run_sync(procfs.tree_open_files, info.pane_pid)
        ids = {m.group(1) for paths in files.values() for path in paths if (m := _ROLLOUT.search(path)) is not None}
        if len(ids) == 1:  # exactly one open session: unambiguous
            self._codex_scanned.add(token)
            self.directory = D.note_evidence(
                self.directory, D.Evidence(info.pane_id, token, D.EvidenceSource.TRANSCRIPT, "codex", ids.pop())
            )

    async def _bind_sessions(self) -> None:
        """Attach a session id to a principal once the directory binds its pane unambiguously."""
        engine = self.engine
        for pane_id, state in self.panes.items():
            binding = D.binding(self.directory, pane_id)
            if not isinstance(binding, D.SessionBinding):
                continue
            known = (binding.harness, binding.session_id, state.record.cwd)
            if self._recorded_bindings.get(pane_id) != known:  # for restore after a lost server
                self._recorded_bindings[pane_id] = known
                await engine.run_sync(
                    lambda p=pane_id, b=binding, c=state.record.cwd: engine.store.record_binding(
                        p, harness=b.harness, session_id=b.session_id, cwd=c or None, updated_at=engine.clock()
                    )
                )
            principal = grants.principal_at(engine.hub.book, state.record.token)
            if principal is None or principal.session is not None:
                continue
            try:
                await engine.step(H.BindSession(engine.clock(), principal.id, (binding.harness, binding.session_id)))
            except grants.GrantError as exc:
                log.warning("binding %s: %s", pane_id, exc)

    # --- captures ---------------------------------------------------------------------------------

    async def capture_dirty(self) -> None:
        """Capture the panes that drew; then, if a structure notice came, poll (its new panes are read
        at the next round)."""
        dirty, self._dirty = self._dirty, set()
        for pane_id in sorted(dirty):
            if pane_id in self.panes:
                await self.observe_pane(pane_id)
        if self._structure:
            self._structure = False
            await self.poll()

    async def sweep(self) -> None:
        for pane_id in sorted(self.panes):
            await self.observe_pane(pane_id)

    async def observe_pane(self, pane_id: str) -> Reading | None:
        """Capture and read one pane, and tell the core what it saw (a pane that exited between two
        tmux calls is read at the next poll)."""
        engine = self.engine
        state = self.panes.get(pane_id)
        if state is None:
            return None
        read_at = engine.clock()  # when it was read: the core never lets an older reading overwrite it
        try:
            capture = await engine.tmux.capture(pane_id, SCROLLBACK_LINES)
        except TmuxError:
            return None
        reading = read_screen(capture.text, state.info.current_command, capture.cursor, height=capture.height)
        changed = state.reading is None or (state.reading.fingerprint, state.reading.ready_for_message) != (
            reading.fingerprint,
            reading.ready_for_message,
        )
        harness_changed = state.reading is None or state.reading.harness != reading.harness
        state.reading, state.capture = reading, capture
        if harness_changed:
            self.directory = replace(
                self.directory,
                panes={**self.directory.panes, pane_id: replace(state.record, harness=reading.harness.value)},
            )
            state.record = self.directory.panes[pane_id]
        if changed:
            await engine.step(
                H.PaneObserved(
                    engine.clock(), pane_id, state.record.token, reading.ready_for_message, reading.fingerprint, read_at
                )
            )
            engine.subscribers.publish({"topic": "pane", "pane": pane_id})
        return reading


def _self_published_title(info: PaneInfo) -> str:
    """tmux's default pane title is the host name; only a title the program set counts."""
    title = info.title.strip()
    return "" if title in {_HOSTNAME, ""} else title
