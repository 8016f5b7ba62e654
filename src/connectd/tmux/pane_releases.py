"""Each agent pane's release, as the watcher learns it (issue 24: was inside the watcher).

A pane incarnation's release comes from its session banner when a reading shows one
(:func:`connectcore.releases.shown_on_screen`), else once per incarnation from its program's
``--version`` (:mod:`connectd.tmux.release_probe`). A release learned is kept in the store for the
incarnation, so a daemon restart whose screen no longer shows the banner still knows it. Whether a
release may be typed into is the core's (:func:`connectcore.releases.ready_for_message`); this module
only learns, keeps and recalls it, on the pane's :class:`connectd.tmux.watcher.PaneState`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from connectcore import releases

if TYPE_CHECKING:
    from connectd.daemon.runner import RunSync
    from connectd.tmux.adapter import PaneInfo
    from connectd.tmux.release_probe import ReleaseProbe
    from connectd.tmux.watcher import PaneState


class PaneReleases:
    """The releases of the watched panes: ``store`` keeps them by incarnation, ``probe`` asks a
    program its ``--version`` (through ``run_sync``: it starts a process), ``clock`` stamps what is kept."""

    def __init__(self, *, store: Any, run_sync: RunSync, clock: Callable[[], float], probe: ReleaseProbe) -> None:
        self.store, self.run_sync, self.clock, self.probe = store, run_sync, clock, probe

    async def recall(self, state: PaneState) -> None:
        """A pane incarnation seen for the first time: the release learned for it before a daemon
        restart, if any (it cannot change while the process lives; its banner may have scrolled away)."""
        kept = await self.run_sync(self.store.releases, [state.record.token])
        if state.record.token in kept:
            state.release, state.release_kept, state.probed = kept[state.record.token][1], True, True

    async def keep(self, state: PaneState, harness: str) -> None:
        """Persist a release just learned, once per incarnation."""
        if state.release is None or state.release_kept:
            return
        state.release_kept = True
        store, clock = self.store, self.clock
        token, release = state.record.token, state.release
        await self.run_sync(lambda: store.record_release(token, harness=harness, release=release, learned_at=clock()))

    async def from_screen(self, state: PaneState, harness: str, text: str) -> None:
        """A pane whose release is not known yet: the release its screen shows (its banner), if any;
        the core is told its next reading again once it is known."""
        if state.release is None:
            state.release = releases.shown_on_screen(harness, text)
            state.retell = state.retell or state.release is not None
            await self.keep(state, harness)

    async def ask_program(self, state: PaneState, info: PaneInfo, token: str) -> tuple[str, str] | None:
        """An agent pane whose banner named no release: ask its program, once per incarnation
        (``token``: the incarnation ``info`` lists). Its (harness, release) when it answered, for
        :meth:`learned` (the caller checks the pane is still the one it asked about)."""
        if state.reading is None or state.release is not None or state.probed:
            return None
        harness = state.reading.harness.value
        if harness not in releases.AGENT_HARNESSES or state.record.token != token or not info.pane_pid:
            return None
        state.probed = True
        found = await self.run_sync(self.probe.release, info.pane_pid, harness)
        return (harness, found) if found is not None else None

    async def learned(self, state: PaneState, harness: str, release: str) -> None:
        """Its program named the pane's release: keep it, and tell the core the pane's next reading
        again (its readiness may change)."""
        state.release, state.retell = release, True
        await self.keep(state, harness)

    async def forget(self, ended: list[str]) -> None:
        """The releases of incarnations that ended are no longer needed."""
        if ended:
            await self.run_sync(self.store.forget_releases, ended)
