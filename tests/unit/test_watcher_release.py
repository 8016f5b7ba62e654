"""The watcher reads each agent's release (its banner, else its program's ``--version``, once) and tells
the core a pane is ready for a message only on a verified release (connectcore.releases)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio

from connectcore import directory as D
from connectcore import hub as H
from connectd.tmux.adapter import Capture, PaneInfo
from connectd.tmux.watcher import PaneState, Watcher, incarnation_of

SCREENS = Path(__file__).resolve().parent.parent / "fixtures" / "screens" / "claude" / "2.1.332"
IDLE = SCREENS / "03_idle_empty_80"


def _idle(banner: str | None) -> str:
    """The pin's idle screen, its banner naming ``banner`` (None: the banner scrolled away)."""
    text = IDLE.with_suffix(".txt").read_text()
    if banner is None:  # the same rows, the banner's text gone
        return text.replace("Claude Code v2.1.332", " " * len("Claude Code v2.1.332"))
    return text.replace("Claude Code v2.1.332", f"Claude Code v{banner}")


@dataclass
class _Tmux:
    text: str

    async def capture(self, pane_id: str, scrollback_lines: int = 0) -> Capture:
        shot = json.loads(IDLE.with_suffix(".json").read_text())  # the cursor as captured (one row per line)
        return Capture(self.text, tuple(shot["cursor"]), shot["width"], shot["height"])  # type: ignore[arg-type]


@dataclass
class _Probe:
    answer: str | None
    asked: list[tuple[int, str]] = field(default_factory=list)

    def release(self, root_pid: int, harness: str) -> str | None:
        self.asked.append((root_pid, harness))
        return self.answer


@dataclass
class _Store:
    """The store's releases table: (harness, release) by incarnation."""

    kept: dict[str, tuple[str, str]] = field(default_factory=dict)

    def record_release(self, incarnation: str, *, harness: str, release: str, learned_at: float) -> None:
        self.kept[incarnation] = (harness, release)

    def releases(self, incarnations: Any) -> dict[str, tuple[str, str]]:
        return {i: self.kept[i] for i in incarnations if i in self.kept}

    def forget_releases(self, incarnations: Any) -> None:
        for i in incarnations:
            self.kept.pop(i, None)


@dataclass
class _Engine:
    tmux: _Tmux
    release_probe: _Probe
    store: _Store = field(default_factory=_Store)
    stepped: list[Any] = field(default_factory=list)
    timing: Any = field(default_factory=lambda: SimpleNamespace(bind=1.0))
    subscribers: Any = field(default_factory=lambda: SimpleNamespace(publish=lambda item: None))
    trusted_releases: frozenset[tuple[str, str]] = frozenset()
    hub: Any = field(default_factory=H.Hub)  # never stepped here: it holds no reading the watcher's could be older than
    # no OpenCode launch serves here: its session binding is never due
    launches: Any = field(default_factory=lambda: SimpleNamespace(bind_when_due=lambda *args: None,
                                                                  binding_pending=lambda *args: False))

    def clock(self) -> float:
        return 1000.0

    async def step(self, event: Any) -> tuple[Any, ...]:
        self.stepped.append(event)
        return ()

    async def run_sync(self, fn: Any, *args: Any) -> Any:
        return fn(*args)


INFO = PaneInfo(1, 2, "$0", "@0", 0, "%1", 4321, False, None, 80, 24, 2, 20, "main", "", "claude", "/work", 555)


def _watcher(text: str, probe: _Probe, store: _Store | None = None) -> tuple[Watcher, _Engine]:
    """A watcher over stand-ins for the daemon's parts (``_Engine`` holds them, and records the steps)."""
    engine = _Engine(_Tmux(text), probe, store or _Store())
    watcher = Watcher(
        core=engine, clock=engine.clock, run_sync=engine.run_sync, store=engine.store, tmux=engine.tmux,  # type: ignore[arg-type]
        timing=engine.timing, subscribers=engine.subscribers, launches=lambda: engine.launches, history=lambda: None,
        trusted_releases=engine.trusted_releases, release_probe=engine.release_probe,  # type: ignore[arg-type]
    )
    watcher.directory = D.observe(D.Directory(), [D.PaneObservation(incarnation_of(INFO), "claude", "claude")])
    watcher.panes["%1"] = PaneState(INFO, watcher.directory.panes["%1"])
    return watcher, engine


def _told(engine: _Engine) -> list[bool]:
    return [e.ready for e in engine.stepped if isinstance(e, H.PaneObserved)]


def test_the_banner_names_a_verified_release_and_the_idle_pane_is_ready() -> None:
    watcher, engine = _watcher(_idle("2.1.332"), _Probe("9.9.9"))
    anyio.run(watcher.observe_pane, "%1")
    anyio.run(watcher.polls.probe_release, INFO)
    assert watcher.release_of("%1", watcher.panes["%1"].record.token) == "2.1.332"
    assert _told(engine) == [True] and engine.release_probe.asked == [], "a banner needs no --version"


def test_an_unverified_banner_is_never_ready_and_its_program_is_not_asked() -> None:
    watcher, engine = _watcher(_idle("2.1.999"), _Probe("2.1.332"))
    anyio.run(watcher.observe_pane, "%1")
    anyio.run(watcher.polls.probe_release, INFO)
    assert watcher.panes["%1"].reading is not None and watcher.panes["%1"].reading.ready_for_message
    assert _told(engine) == [False], "read idle and empty, yet not ready: an unverified release"
    assert engine.release_probe.asked == []


def test_no_banner_asks_the_program_once_and_tells_the_core_again_when_it_answers() -> None:
    watcher, engine = _watcher(_idle(None), _Probe("2.1.332"))
    anyio.run(watcher.observe_pane, "%1")
    assert _told(engine) == [False], "unknown release: not ready"
    anyio.run(watcher.polls.probe_release, INFO)
    anyio.run(watcher.polls.probe_release, INFO)
    assert engine.release_probe.asked == [(4321, "claude")], "asked once per incarnation"
    anyio.run(watcher.observe_pane, "%1")  # the same screen, told again with its release known
    assert _told(engine) == [False, True]
    anyio.run(watcher.observe_pane, "%1")
    assert _told(engine) == [False, True], "then only changes are told"


def test_no_banner_and_no_answer_stays_unknown_and_waits() -> None:
    watcher, engine = _watcher(_idle(None), _Probe(None))
    anyio.run(watcher.observe_pane, "%1")
    anyio.run(watcher.polls.probe_release, INFO)
    anyio.run(watcher.observe_pane, "%1")
    assert watcher.release_of("%1", watcher.panes["%1"].record.token) is None
    assert _told(engine) == [False] and len(engine.release_probe.asked) == 1


def test_the_probe_asks_only_executables_named_like_the_harness(tmp_path: Path) -> None:
    """A program named ``claude`` (here a copy of ``sleep``) is asked; its answer does not name Claude
    Code, so no release. A process named otherwise is not asked; a replaced executable neither."""
    import shutil
    import subprocess

    from connectd.tmux.release_probe import ReleaseProbe, executables

    fake = tmp_path / "claude"
    shutil.copy(shutil.which("sleep") or "/bin/sleep", fake)
    proc = subprocess.Popen([str(fake), "60"])
    other = subprocess.Popen(["sleep", "60"])
    try:
        assert executables(proc.pid, "claude") == [str(fake)]
        assert executables(proc.pid, "codex") == [] and executables(other.pid, "claude") == []
        assert executables(proc.pid, "shell") == []
        assert ReleaseProbe().release(proc.pid, "claude") is None  # "sleep (GNU coreutils) ..."
        fake.unlink()  # replaced on disk: the running release is no longer what --version would say
        assert executables(proc.pid, "claude") == []
    finally:
        for p in (proc, other):
            p.kill()
            p.wait()


def test_a_release_learned_is_kept_for_the_incarnation_across_a_daemon_restart() -> None:
    """Issue 22.4: a banner's release is persisted once per incarnation, and a new watcher (a daemon
    restart) whose screen no longer shows the banner takes it from the store, asks no program, and
    tells the core the idle pane is ready."""
    watcher, engine = _watcher(_idle("2.1.332"), _Probe(None))
    anyio.run(watcher.observe_pane, "%1")
    token = watcher.panes["%1"].record.token
    assert engine.store.kept == {token: ("claude", "2.1.332")}
    later, again = _watcher(_idle(None), _Probe(None), store=engine.store)
    state = later.panes["%1"]
    anyio.run(later.releases.recall, state)
    anyio.run(later.observe_pane, "%1")
    anyio.run(later.polls.probe_release, INFO)
    assert later.release_of("%1", token) == "2.1.332" and _told(again) == [True]
    assert again.release_probe.asked == [], "a kept release needs no --version"
