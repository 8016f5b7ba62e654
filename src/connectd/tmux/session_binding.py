"""Which agent session each pane holds: the evidence a poll reads, and each binding told to the store
and the core (issue 24: was inside the watcher).

- The directory (:mod:`connectcore.directory`) binds a pane to its agent session from evidence; the
  watcher's poll notes a launch record's session itself, and asks :class:`SessionBindings` for the rest:
  Codex's session from the rollout file its process tree holds open (``rollout-<time>-<session id>.jsonl``,
  once, when nothing else has bound the pane; :func:`connectcore.directory.rollout_binding` says which
  files count), Claude Code's from its session registry (``<claude root>/sessions/<pid>.json``, the
  claims :func:`connectcore.history.registry_evidence` lets bind: trusted only when the process start
  time matches /proc). Either is looked for only while a pane is unbound, at most once per ``every``
  seconds.
- Once the directory binds a pane unambiguously, the binding is recorded in the store (for restore
  after a lost tmux server) and its principal, if it has no session yet, is bound by the core
  (``BindSession``; the core refuses what evidence may not bind, and the refusal is logged).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from connectcore import directory as D
from connectcore import grants
from connectcore import hub as H
from connectcore.history import registry_evidence
from connectd.history.liveness import LivenessProbe
from connectd.history.service import default_claude_root, default_codex_root
from connectd.tmux import procfs

if TYPE_CHECKING:
    from connectd.daemon.runner import Core, RunSync
    from connectd.tmux.adapter import PaneInfo
    from connectd.tmux.watcher import PaneState

log = logging.getLogger("connectd.watcher")

Note = Callable[[D.Evidence], None]  # notes one piece of evidence in the watcher's directory


class SessionBindings:
    """The session evidence of the watched panes and their bindings. ``core`` (the hub's book, and
    ``BindSession``), ``clock``, ``run_sync`` (/proc and the registry are read off the event loop),
    ``store`` (``record_binding``), ``every`` (the bind interval), ``history`` (the session index the
    daemon serves, or None: its transcript roots, else the default ones)."""

    def __init__(
        self,
        *,
        core: Core,
        clock: Callable[[], float],
        run_sync: RunSync,
        store: Any,
        every: float,
        history: Callable[[], Any | None],
    ) -> None:
        self.core, self.clock, self.run_sync, self.store = core, clock, run_sync, store
        self.every, self.history = every, history
        self._recorded: dict[str, tuple[str, str, str]] = {}  # pane -> the binding recorded in the store
        self._codex_scanned: set[str] = set()  # incarnations already bound from an open rollout file
        self._codex_tried: dict[str, float] = {}
        self._claude_scan: tuple[frozenset[str], float] = (frozenset(), float("-inf"))

    def forget(self, incarnation: str) -> None:
        """An incarnation went: its next Codex look is no longer scheduled."""
        self._codex_tried.pop(incarnation, None)

    async def codex(
        self, directory: D.Directory, state: PaneState | None, info: PaneInfo, token: str, note: Note
    ) -> None:
        """Codex reports its session id only after launch: the rollout file its process tree holds
        open binds the pane, once, when nothing else has (``token``: the incarnation ``info`` lists)."""
        harness = D.recipient_harness(state.reading.harness.value if state and state.reading else None)
        if harness != "codex" or token in self._codex_scanned or not info.pane_pid:
            return
        if isinstance(D.binding(directory, info.pane_id), D.SessionBinding):
            return
        now = self.clock()  # an unbound Codex pane's open files: at most once per bind interval
        if now - self._codex_tried.get(token, float("-inf")) < self.every:
            return
        self._codex_tried[token] = now
        held = await self.run_sync(held_rollouts, info.pane_pid, self._codex_root())
        session_id = D.rollout_binding(held)
        if session_id is not None:  # exactly one session Codex itself writes: unambiguous
            self._codex_scanned.add(token)
            note(D.Evidence(info.pane_id, token, D.EvidenceSource.TRANSCRIPT, "codex", session_id))

    async def claude(self, directory: Callable[[], D.Directory], panes: Mapping[str, PaneState], note: Note) -> None:
        """Bind Claude Code panes no launch record binds (hand-started ones) from Claude's session
        registry: the claims :func:`connectcore.history.registry_evidence` lets bind (trusted, in a pane
        the directory knows). The registry is read when an unbound Claude pane appears, then at most once per
        bind interval while one stays unbound. ``directory``: the watcher's directory as it stands."""
        unbound = frozenset(
            r.token
            for p, r in directory().panes.items()
            if (s := panes.get(p)) is not None and s.reading is not None and s.reading.harness.value == "claude"
            and not isinstance(r.binding, D.SessionBinding)
        )
        seen, at = self._claude_scan
        now = self.clock()
        if not unbound or (unbound <= seen and now - at < self.every):
            return
        self._claude_scan = (unbound, now)
        pane_pids = {r.incarnation.pane_pid: p for p, r in directory().panes.items() if r.token in unbound}
        probe = LivenessProbe(self._claude_root(), self._claude_root())
        snap = await self.run_sync(lambda: probe.snapshot(pane_pids, codex=False))
        for found in registry_evidence(snap, directory().panes):  # the core's rule: which claims bind
            record = directory().panes.get(found.pane_id)
            if record is None:  # gone while /proc was read (another poll's)
                continue
            start = await self.run_sync(procfs.process_start_time, found.pid)
            note(
                D.Evidence(record.pane_id, record.token, D.EvidenceSource.REGISTRY, "claude", found.session_id,
                           pid=found.pid, process_start=start)
            )

    async def bind(self, directory: Callable[[], D.Directory], panes: Mapping[str, PaneState]) -> None:
        """Attach a session id to a principal once the directory binds its pane unambiguously."""
        store, clock = self.store, self.clock
        for pane_id, state in panes.items():
            binding = D.binding(directory(), pane_id)
            if not isinstance(binding, D.SessionBinding):
                continue
            known = (binding.harness, binding.session_id, state.record.cwd)
            if self._recorded.get(pane_id) != known:  # for restore after a lost server
                self._recorded[pane_id] = known
                await self.run_sync(
                    lambda p=pane_id, b=binding, c=state.record.cwd: store.record_binding(
                        p, harness=b.harness, session_id=b.session_id, cwd=c or None, updated_at=clock()
                    )
                )
            principal = grants.principal_at(self.core.hub.book, state.record.token)
            if principal is None or principal.session is not None:
                continue
            try:  # the core refuses what evidence may not bind (a live agent's session: session_held)
                await self.core.step(H.BindSession(clock(), principal.id, (binding.harness, binding.session_id)))
            except grants.GrantError as exc:
                log.warning("binding %s: %s", pane_id, exc)

    def _codex_root(self) -> str:
        history = self.history()
        return str(history.codex_root if history is not None else default_codex_root())

    def _claude_root(self) -> Any:
        history = self.history()
        return history.claude_root if history is not None else default_claude_root()


def held_rollouts(pane_pid: int, codex_root: str | None) -> list[D.HeldRollout]:
    """Facts about the files named like a rollout that a Codex pane's processes hold open (the rule
    of which count is :func:`connectcore.directory.rollout_session_id`)."""
    facts: list[D.HeldRollout] = []
    for pid in [pane_pid, *procfs.descendants(pane_pid)]:
        files = [f for f in procfs.open_files_with_modes(pid) if D.ROLLOUT_NAME.fullmatch(f.path.rpartition("/")[2])]
        if not files:
            continue
        argv = procfs.cmdline(pid) or [""]
        home = procfs.environ_value(pid, "CODEX_HOME")
        if not home:
            user_home = procfs.environ_value(pid, "HOME")
            home = os.path.join(user_home, ".codex") if user_home else None
        dirs = tuple(os.path.realpath(os.path.join(h, "sessions")) for h in (home, codex_root) if h)
        program = os.path.basename(argv[0])
        facts += [D.HeldRollout(f.pid, f.path, f.writable, program, dirs) for f in files]
    return facts
