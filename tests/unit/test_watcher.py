"""The watcher's pacing and memory: it reads a pane as it draws (at most once per capture period while
it keeps drawing), wakes whoever waits for a pane to draw, and keeps the readings it was told.

Run on trio's MockClock: with the clock stopped, a waiter that returns did so because of the output
notice, never because time passed.
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import trio
import trio.testing

from connectd.tmux.watcher import Watcher


def _watcher(timing: SimpleNamespace | None = None, clock: Callable[[], float] = lambda: 0.0) -> Watcher:
    """A watcher whose collaborators stand in for the daemon's (none of them is reached here but the
    ``timing`` and ``clock`` given)."""
    return Watcher(
        core=None, clock=clock, run_sync=None, store=None, tmux=None,  # type: ignore[arg-type]
        timing=timing or SimpleNamespace(bind=1.0), subscribers=None,  # type: ignore[arg-type]
        launches=lambda: None, history=lambda: None,  # type: ignore[arg-type,return-value]
    )


def test_a_waiter_wakes_at_the_panes_output_without_the_clock_moving() -> None:
    """Claim: ``drawn`` returns at the pane's %output, before its bound, with no time passing."""
    woke: list[str] = []

    async def main() -> None:
        watcher = _watcher()
        async with trio.open_nursery() as nursery:

            async def wait(pane: str) -> None:
                await watcher.drawn(pane, within=60.0)
                woke.append(pane)

            nursery.start_soon(wait, "%1")
            nursery.start_soon(wait, "%2")
            await trio.testing.wait_all_tasks_blocked()
            watcher.mark_output("%1")
            await trio.testing.wait_all_tasks_blocked()
            assert woke == ["%1"]  # only the pane that drew
            assert trio.current_time() == 0.0
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock())


def test_a_waiter_gives_up_at_its_bound_when_nothing_draws() -> None:
    """Claim: with no output (a lost notice, no control mode), ``drawn`` returns after ``within``."""

    async def main() -> float:
        await _watcher().drawn("%1", within=0.2)
        return trio.current_time()

    assert trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0)) == 0.2


def test_output_before_anyone_waits_does_not_wake_a_later_waiter() -> None:
    """Claim: a notice is for the waiters already waiting; a later waiter waits for the next output."""

    async def main() -> float:
        watcher = _watcher()
        watcher.mark_output("%1")
        await watcher.drawn("%1", within=0.2)
        return trio.current_time()

    assert trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0)) == 0.2


def _pacing_watcher(reads: list[tuple[str, float]], awaited: frozenset[str] = frozenset()) -> Watcher:
    timing = SimpleNamespace(bind=1.0, capture=0.25, capture_awaited=0.1)
    watcher = _watcher(timing)
    watcher.captures.awaited = lambda: awaited  # type: ignore[method-assign]  # stands for the core's awaited_panes

    async def observe(pane_id: str) -> None:  # stands for a capture: records what was read when
        watcher.captures.read_at[pane_id] = trio.current_time()
        reads.append((pane_id, trio.current_time()))

    watcher.observe_pane = observe  # type: ignore[method-assign,assignment]
    watcher.panes = {"%1": None, "%2": None}  # type: ignore[dict-item]
    return watcher


async def _capture_rounds(watcher: Watcher) -> None:
    """The capture loop as the supervisor runs it (``every=0``: each round waits for news itself)."""
    while True:
        await watcher.capture_dirty()
        await trio.sleep(0)


def test_the_first_output_after_a_quiet_spell_is_read_at_once() -> None:
    """Claim: a capture round waiting for news reads a pane the moment it draws, with no time passing."""
    reads: list[tuple[str, float]] = []

    async def main() -> None:
        watcher = _pacing_watcher(reads)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_capture_rounds, watcher)
            await trio.testing.wait_all_tasks_blocked()
            watcher.mark_output("%2")
            await trio.testing.wait_all_tasks_blocked()
            assert reads == [("%2", 0.0)]
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock())


def test_a_pane_that_keeps_drawing_is_read_at_most_once_per_capture_period() -> None:
    """Claim: output every 10 ms for 1 s costs at most one capture per 0.25 s (plus the first)."""
    reads: list[tuple[str, float]] = []

    async def main() -> None:
        watcher = _pacing_watcher(reads)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_capture_rounds, watcher)
            for _ in range(100):
                watcher.mark_output("%1")
                await trio.sleep(0.01)
            await trio.sleep(0.5)
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    times = [t for _, t in reads]
    assert times[0] == 0.0 and 4 <= len(times) <= 5, times
    assert all(b - a >= 0.25 - 1e-9 for a, b in zip(times, times[1:], strict=False)), times


def test_a_pane_a_message_waits_for_is_read_at_the_awaited_pace() -> None:
    """Claim: while a consented message waits for a pane, output every 10 ms for 1 s is read once per
    0.1 s (``capture_awaited``); another pane drawing meanwhile keeps the 0.25 s pace."""
    reads: list[tuple[str, float]] = []

    async def main() -> None:
        watcher = _pacing_watcher(reads, awaited=frozenset({"%1"}))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_capture_rounds, watcher)
            for _ in range(100):
                watcher.mark_output("%1")
                watcher.mark_output("%2")
                await trio.sleep(0.01)
            await trio.sleep(0.5)
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    awaited = [t for p, t in reads if p == "%1"]
    other = [t for p, t in reads if p == "%2"]
    assert awaited[0] == 0.0 and 10 <= len(awaited) <= 11, awaited
    assert all(b - a >= 0.1 - 1e-9 for a, b in zip(awaited, awaited[1:], strict=False)), awaited
    assert 4 <= len(other) <= 5, other


def test_the_guards_reading_is_kept_only_for_the_incarnation_it_was_read_from() -> None:
    """Claim: the watcher keeps the guard's reading as the pane's last (so an unchanged screen is not
    reported again), but never for a pane whose process was replaced meanwhile."""
    from connectd.tmux.watcher import PaneState

    watcher = _watcher()
    record = SimpleNamespace(token="inc-1")
    watcher.panes = {"%1": PaneState(info=None, record=record)}  # type: ignore[arg-type]
    reading, other = object(), object()
    watcher.remember_reading("%1", "inc-1", reading)  # type: ignore[arg-type]
    assert watcher.panes["%1"].reading is reading
    watcher.remember_reading("%1", "inc-0", other)  # type: ignore[arg-type]
    watcher.remember_reading("%9", "inc-1", other)  # type: ignore[arg-type]
    assert watcher.panes["%1"].reading is reading and set(watcher.panes) == {"%1"}


def _polling_watcher(now: list[float], polls: list[float], *, reported: bool) -> Watcher:
    timing = SimpleNamespace(bind=1.0, poll=1.0, poll_quiet=5.0)
    watcher = _watcher(timing, clock=lambda: now[0])

    async def poll() -> None:  # stands for list-panes: records when it ran
        watcher.polls.polled_at, watcher.polls.drew_since_poll = now[0], False
        polls.append(now[0])

    watcher.polls.poll = poll  # type: ignore[method-assign,assignment]
    watcher.output_reported = lambda: reported
    return watcher


def _timed_polls(watcher: Watcher, now: list[float], seconds: int, drawing: set[int] = frozenset()) -> None:
    """The timed poll as the supervisor runs it, once a second for ``seconds``; a pane draws in the
    seconds named in ``drawing``."""

    async def main() -> None:
        await watcher.poll()  # the daemon's first look, at 0
        for second in range(1, seconds):
            now[0] = float(second)
            if second in drawing:
                watcher.mark_output("%1")
            await watcher.poll_when_due()

    trio.run(main)


def test_with_every_pane_quiet_the_timed_poll_lists_panes_only_every_poll_quiet_seconds() -> None:
    """Claim: an idle fleet costs one list-panes per ``poll_quiet`` (5 s), not one a second."""
    now, polls = [0.0], []
    _timed_polls(_polling_watcher(now, polls, reported=True), now, 21)
    assert polls == [0.0, 5.0, 10.0, 15.0, 20.0]


def test_a_pane_that_draws_makes_the_next_timed_poll_list_panes() -> None:
    """Claim: output since the last poll (a process may have started or ended) polls at the next second."""
    now, polls = [0.0], []
    _timed_polls(_polling_watcher(now, polls, reported=True), now, 9, drawing={2, 3})
    assert polls == [0.0, 2.0, 3.0, 8.0]


def test_without_control_mode_the_timed_poll_runs_every_second() -> None:
    """Claim: when nothing reports output, nothing can say a pane drew, so every timed poll lists panes."""
    now, polls = [0.0], []
    _timed_polls(_polling_watcher(now, polls, reported=False), now, 4)
    assert polls == [0.0, 1.0, 2.0, 3.0]


def test_while_an_agent_pane_waits_for_its_session_binding_the_timed_poll_runs_every_second() -> None:
    """Claim: an unbound agent pane keeps the poll at once a second (its binding evidence may appear
    without the pane drawing); once bound, the fleet falls back to ``poll_quiet``."""
    from connectcore import directory as D
    from connectcore.screen import Harness

    now, polls = [0.0], []
    watcher = _polling_watcher(now, polls, reported=True)
    reading = SimpleNamespace(harness=Harness.CLAUDE)
    state = SimpleNamespace(reading=reading, record=SimpleNamespace(binding=None))
    watcher.panes = {"%1": state}  # type: ignore[dict-item]
    _timed_polls(watcher, now, 4)
    assert polls == [0.0, 1.0, 2.0, 3.0]
    state.record = SimpleNamespace(binding=D.SessionBinding.__new__(D.SessionBinding))
    polls.clear()
    now[0] = 0.0
    _timed_polls(watcher, now, 4)
    assert polls == [0.0]


def test_a_waiter_returns_at_once_for_output_that_came_after_its_since() -> None:
    """Claim: output after ``since`` but before the wait began is not missed (the confirmation read
    that waited a full period for an Enter the pane had already drawn, bench 2026-12-04)."""

    async def main() -> tuple[float, float]:
        watcher = _watcher()
        since = trio.current_time()
        await trio.sleep(0.05)
        watcher.mark_output("%1")  # drawn before anyone waits
        await trio.sleep(0.05)
        start = trio.current_time()
        await watcher.drawn("%1", within=0.2, since=since)
        early = trio.current_time() - start
        start = trio.current_time()
        await watcher.drawn("%1", within=0.2, since=start)  # nothing since: waits its bound
        return early, trio.current_time() - start

    early, bounded = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert early == 0.0 and abs(bounded - 0.2) < 1e-9


def test_look_again_forgets_the_panes_reading_and_captures_it_at_the_next_round() -> None:
    """Claim: after ``look_again`` the pane is captured at the next round and its reading reported even
    if the screen is unchanged (its remembered reading is forgotten); a pane the watcher does not know
    is only marked, never invented (kills the four survivors of ``look_again``, fourth mutation run)."""
    from connectd.tmux.watcher import PaneState

    watcher = _watcher()
    watcher.panes = {"%1": PaneState(info=None, record=SimpleNamespace(token="inc-1"))}  # type: ignore[arg-type]
    watcher.remember_reading("%1", "inc-1", object())  # type: ignore[arg-type]
    watcher.look_again("%1")
    assert watcher.panes["%1"].reading is None
    assert "%1" in watcher.captures.dirty
    watcher.look_again("%7")
    assert "%7" in watcher.captures.dirty and set(watcher.panes) == {"%1"}


def test_the_poll_itself_clears_the_drew_flag_so_a_quiet_fleet_waits_poll_quiet() -> None:
    """Claim: the poll (not a stand-in for it) clears "a pane drew since the last poll": with control
    mode reporting output and nothing drawing after it, the next timed poll lists the panes only
    ``poll_quiet`` later. Kills PanePoll._poll 4 (fifth mutation run: the timed-poll tests above stand
    in for the poll, and the simulation has no control mode, so it polls every second anyway)."""
    now, listed = [0.0], []
    watcher = _watcher(SimpleNamespace(bind=1.0, poll=1.0, poll_quiet=5.0), clock=lambda: now[0])
    polls = watcher.polls

    async def list_panes() -> list[Any]:  # an empty server: the poll's collaborators see no pane
        listed.append(now[0])
        return []

    async def nothing(*args: Any) -> None:
        return None

    async def unchanged(directory: Any) -> Any:
        return directory

    polls.tmux = SimpleNamespace(list_panes=list_panes, forget_pane_locks=lambda live: None)  # type: ignore[assignment]
    polls.sessions = SimpleNamespace(claude=nothing, bind=nothing)  # type: ignore[assignment]
    polls.facts = SimpleNamespace(refresh=unchanged)  # type: ignore[assignment]
    polls.releases = SimpleNamespace(forget=nothing)  # type: ignore[assignment]
    watcher.output_reported = lambda: True

    async def main() -> None:
        watcher.mark_output("%1")  # a pane drew before the first poll
        await watcher.poll()
        for second in range(1, 7):
            now[0] = float(second)
            await watcher.poll_when_due()

    trio.run(main)
    assert listed == [0.0, 5.0]


def _pane(pane_id: str, pid: int) -> Any:
    from connectd.tmux.adapter import PaneInfo

    return PaneInfo(
        server_pid=1, server_start_time=1, session_id="$1", window_id="@1", window_index=0, pane_id=pane_id,
        pane_pid=pid, dead=False, dead_status=None, width=80, height=24, cursor_x=0, cursor_y=0,
        session_name="s", title="", current_command="bash", current_path="/work", process_start_time=pid,
    )


def _stubbed_poll(
    listed: list[Any], forgotten: list[tuple[str, Any]], stepped: list[Any], launch_of: dict[str, Any] | None = None
) -> Watcher:
    """A watcher whose poll runs for real over stand-ins for what it calls: tmux lists ``listed``; what
    the poll forgets is appended to ``forgotten``, what it steps into the core to ``stepped``; a pane's
    launch record is ``launch_of[pane]``."""
    from connectcore import grants

    watcher = _watcher(SimpleNamespace(bind=1.0, poll=1.0, poll_quiet=5.0))
    polls = watcher.polls

    async def list_panes() -> list[Any]:
        return list(listed)

    async def nothing(*args: Any) -> None:
        return None

    async def unchanged(directory: Any) -> Any:
        return directory

    async def step(event: Any) -> tuple[()]:
        stepped.append(event)
        return ()

    async def releases_forget(tokens: list[str]) -> None:  # (every poll, with the incarnations it saw end)
        if list(tokens):
            forgotten.append(("release", list(tokens)))

    async def record_for(pane: str, token: str) -> Any:
        return (launch_of or {}).get(pane)

    launches = SimpleNamespace(
        record_for=record_for, forget=lambda pane, token: forgotten.append(("launch", (pane, token)))
    )
    polls.core = SimpleNamespace(hub=SimpleNamespace(book=grants.GrantBook()), step=step)  # type: ignore[assignment]
    polls.tmux = SimpleNamespace(list_panes=list_panes, forget_pane_locks=lambda live: None)  # type: ignore[assignment]
    polls.launches = lambda: launches  # type: ignore[assignment,return-value]
    polls.effective = lambda info: info
    polls.sessions = SimpleNamespace(  # type: ignore[assignment]
        codex=nothing, claude=nothing, bind=nothing, forget=lambda token: forgotten.append(("session", token))
    )
    polls.releases = SimpleNamespace(recall=nothing, forget=releases_forget, ask_program=nothing)  # type: ignore[assignment]
    polls.facts.refresh = unchanged  # type: ignore[method-assign]
    polls.subscribers = SimpleNamespace(publish=lambda event: None)  # type: ignore[assignment]
    captures_forget = polls.captures.forget
    polls.captures.forget = lambda pane: (forgotten.append(("captures", pane)), captures_forget(pane))  # type: ignore[method-assign]
    return watcher


def test_the_poll_keeps_a_listed_pane_s_state_and_forgets_a_gone_incarnation_everywhere_once() -> None:
    """Claim: a poll keeps an unchanged pane's state (its reading) from one poll to the next; an
    incarnation gone from the list is forgotten everywhere the daemon holds it (the pane's state, its
    captures, its session evidence, its launch record, its release) and stepped into the core as
    ``PaneGone`` once, with its pane and token, not again at the next poll; a pane whose window drew in
    the second the last poll began (tmux's activity is in whole seconds) is captured again. Kills
    PanePoll._poll 74, 77-80, 84, 85, 87, 88, 91, 99, 101 and _step_gone 4, 9 (fifth mutation run: the
    simulation's invariants hold without this bookkeeping, at the cost of captures and steps)."""
    from connectcore import hub as H
    from connectcore.screen import Harness
    from connectd.tmux.watched import token_of

    listed = [_pane("%1", 100), _pane("%2", 200)]
    forgotten: list[tuple[str, Any]] = []
    stepped: list[Any] = []
    watcher = _stubbed_poll(listed, forgotten, stepped)
    polls = watcher.polls
    gone = token_of(listed[1])
    reading = SimpleNamespace(harness=Harness.SHELL)

    async def main() -> None:
        await watcher.poll()
        kept = watcher.panes["%1"]
        kept.reading = reading  # type: ignore[assignment]
        polls.captures.dirty.clear()
        await watcher.poll()  # nothing changed but the window's activity, in the second the last poll began
        assert watcher.panes["%1"] is kept and kept.reading is reading
        assert polls.captures.dirty == {"%1", "%2"}  # drew since the last poll (whole seconds): read again
        assert forgotten == [] and stepped == []
        del listed[1]  # %2's process ends
        await watcher.poll()
        assert set(watcher.panes) == {"%1"} and watcher.panes["%1"] is kept
        assert sorted(forgotten, key=str) == sorted(
            [("captures", "%2"), ("session", gone), ("launch", ("%2", gone)), ("release", [gone])],
            key=str,
        )
        await watcher.poll()  # the gone incarnation is stepped once
        assert [(type(e), e.pane_id, e.incarnation) for e in stepped] == [(H.PaneGone, "%2", gone)]

    trio.run(main)


def test_the_poll_notes_a_pane_s_launch_record_as_launch_evidence_for_its_incarnation() -> None:
    """Claim: a listed pane with a launch record naming a session is noted as LAUNCH evidence for that
    pane and incarnation, with the record's harness and session, and its launcher is in the directory.
    Kills PanePoll._poll 49, 50, 52 (fifth mutation run; 49 and 52 also by test_launch_here.py)."""
    from connectcore import directory as D
    from connectd.tmux.watched import token_of

    listed = [_pane("%1", 100)]
    launch = SimpleNamespace(launcher="demo", harness="claude", session_id="s-1")
    watcher = _stubbed_poll(listed, [], [], {"%1": launch})
    noted: list[Any] = []
    note = watcher.polls._note
    watcher.polls._note = lambda evidence: (noted.append(evidence), note(evidence))  # type: ignore[method-assign]
    trio.run(watcher.poll)
    assert noted == [D.Evidence("%1", token_of(listed[0]), D.EvidenceSource.LAUNCH, "claude", "s-1")]
    assert watcher.directory.panes["%1"].launcher == "demo"


def test_a_waiter_with_a_since_on_a_pane_that_never_drew_waits_its_bound() -> None:
    """Claim: ``drawn`` with a ``since`` on a pane that never drew (no output time at all) waits its
    bound, as for a pane that drew before ``since``. Kills CaptureSchedule.drawn 4, 6 (fifth mutation
    run: every waiter with a since had a pane that drew)."""

    async def main() -> float:
        watcher = _watcher()
        start = trio.current_time()
        await watcher.drawn("%9", within=0.2, since=start)
        return trio.current_time() - start

    assert abs(trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0)) - 0.2) < 1e-9


def test_the_sweep_reads_every_watched_pane_once_in_order() -> None:
    """Claim: a sweep (the slow reread in case a notice was lost) reads each watched pane once, in the
    order of their ids, whether or not it drew. Kills CaptureSchedule.sweep 1, 2 (fifth mutation run:
    no test in the run's set reached the sweep, which the daemon runs every ``timing.sweep``)."""
    reads: list[tuple[str, float]] = []
    watcher = _pacing_watcher(reads)
    watcher.panes = {"%2": None, "%10": None, "%1": None}  # type: ignore[dict-item]
    trio.run(watcher.sweep, clock=trio.testing.MockClock())
    assert [pane for pane, _ in reads] == ["%1", "%10", "%2"]


def test_a_structure_notice_makes_one_capture_round_poll_and_the_next_wait_for_news() -> None:
    """Claim: a structure notice makes the next capture round list panes once; the round after it,
    with no news, waits (at most a capture period) and lists nothing. Kills capture_dirty 32 (fifth
    mutation run: a notice that stayed set made every round list panes, with no wait between)."""
    polls: list[float] = []

    async def main() -> None:
        watcher = _pacing_watcher([])

        async def poll() -> None:
            polls.append(trio.current_time())

        watcher.captures.poll = poll
        watcher.mark_structure()
        await watcher.capture_dirty()
        with trio.move_on_after(1.0):
            await watcher.capture_dirty()
        assert trio.current_time() == 0.25  # the second round waited its capture period for news

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert polls == [0.0]


def _observing(command: str) -> tuple[Watcher, dict[str, list[Any]]]:
    """A watcher that watches one pane, ``%1`` (its program ``command``, its pid 100), and reads it for
    real over stand-ins: what it asks tmux to capture, steps into the core, starts as a launch's
    binding and tells the owner's stream is recorded in the answer's lists; ``captures`` holds the
    ``(text, cursor, height)`` each capture answers, the first first."""
    from dataclasses import replace

    from connectd.tmux.adapter import Capture

    watcher = _stubbed_poll([replace(_pane("%1", 100), current_command=command)], [], [])
    seen: dict[str, list[Any]] = {"asked": [], "stepped": [], "bound": [], "published": [], "captures": []}

    async def capture(pane_id: str, scrollback_lines: int = 0) -> Capture:
        seen["asked"].append((pane_id, scrollback_lines))
        text, cursor, height = seen["captures"].pop(0)
        return Capture(text, cursor, 80, height)

    async def step(event: Any) -> tuple[()]:
        seen["stepped"].append(event)
        return ()

    watcher.tmux = SimpleNamespace(capture=capture)  # type: ignore[assignment]
    watcher.core = SimpleNamespace(hub=SimpleNamespace(panes={}), step=step)  # type: ignore[assignment]
    watcher.subscribers = SimpleNamespace(publish=seen["published"].append)  # type: ignore[assignment]
    watcher.launches = lambda: SimpleNamespace(  # type: ignore[assignment,return-value]
        bind_when_due=lambda *a: seen["bound"].append(a), binding_pending=lambda *a: False
    )
    watcher.ready = lambda pane_id, incarnation, reading: reading.ready_for_message  # type: ignore[method-assign]

    async def run_sync(call: Any) -> Any:
        return call()

    watcher.releases.run_sync = run_sync  # a release its screen shows is kept in the store
    watcher.releases.store = SimpleNamespace(record_release=lambda *a, **k: None)
    trio.run(watcher.poll)
    return watcher, seen


def _screen(name: str, scrollback: int = 0) -> tuple[str, tuple[int, int], int]:
    """A recorded screen (tests/fixtures/screens) as a capture with ``scrollback`` lines above it."""
    from tests.support.screen_corpus import load_case

    case = load_case(name)
    text = "\n".join([*(f"earlier output {i}" for i in range(scrollback)), case.text])
    return text, tuple(case.meta["cursor"]), case.meta["height"]  # type: ignore[return-value]


def test_a_pane_s_reading_goes_to_the_core_the_directory_a_launch_s_binding_and_the_page() -> None:
    """Claim: the watcher captures a pane with its scrollback, reads it with the pane's cursor within
    its visible height, tells the core its readiness and fingerprint (``PaneObserved``), keeps the
    harness the screen shows in the directory (and changes it when the screen changes program), hands
    the reading to a launch's binding with the pane's pid, and tells the owner's stream the pane
    changed; the same screen with the cursor outside the composer is told not ready. Kills
    observe_pane 8, 10, 15, 19, 34, 37, 43, 45, 47, 49-52, 57, 64, 93-99 (fifth mutation run)."""
    from connectcore import hub as H
    from connectcore.screen import read_screen
    from connectd.tmux.watcher import SCROLLBACK_LINES

    watcher, seen = _observing("node")  # a program that names no harness: the screen decides
    token = watcher.panes["%1"].record.token
    idle = _screen("claude/2.1.332/03_idle_empty_80", scrollback=30)
    shell = _screen("shell/bash-5.2.15/01_bash_prompt_empty_80")
    seen["captures"] += [idle, shell]
    reading = trio.run(watcher.observe_pane, "%1")
    assert seen["asked"] == [("%1", SCROLLBACK_LINES)]
    (observed,) = seen["stepped"]
    assert isinstance(observed, H.PaneObserved) and (observed.pane_id, observed.incarnation) == ("%1", token)
    expected = read_screen(idle[0], "node", idle[1], height=idle[2])
    assert expected.ready_for_message and (observed.ready, observed.fingerprint) == (True, expected.fingerprint)
    assert watcher.directory.panes["%1"].harness == "claude" and watcher.panes["%1"].record.harness == "claude"
    assert seen["bound"] == [("%1", token, reading, 100)]
    assert seen["published"] == [{"topic": "pane", "pane": "%1"}]
    trio.run(watcher.observe_pane, "%1")  # the agent exited to a prompt the screen does not name
    assert watcher.directory.panes["%1"].harness == "unknown"

    elsewhere, seen = _observing("claude")
    text, _, height = _screen("claude/2.1.332/03_idle_empty_80")
    seen["captures"].append((text, (0, 0), height))  # the focus is outside the composer
    trio.run(elsewhere.observe_pane, "%1")
    assert [e.ready for e in seen["stepped"]] == [False]


def test_a_reading_the_core_never_heard_or_dropped_is_read_again_at_the_next_round() -> None:
    """Claim: a reading whose step failed leaves the pane with the reading the core last heard, and
    the pane is read again at the next capture round; a reading the core dropped (it holds a newer one)
    is read again too and told even if unchanged. Kills observe_pane 78, 79, 92 (fifth mutation run:
    the simulation's faults reached these paths in none of its two seeds a mutant)."""
    watcher, seen = _observing("claude")
    idle = _screen("claude/2.1.332/03_idle_empty_80")
    seen["captures"].append(idle)
    told = trio.run(watcher.observe_pane, "%1")
    watcher.captures.dirty.clear()

    async def fails(event: Any) -> tuple[()]:
        raise OSError("disk I/O error")

    watcher.core.step = fails
    seen["captures"].append(_screen("claude/2.1.332/04_draft_oneline_80"))
    try:
        trio.run(watcher.observe_pane, "%1")
    except OSError:
        pass
    else:
        raise AssertionError("the step's failure was swallowed")
    assert watcher.panes["%1"].reading is told and watcher.captures.dirty == {"%1"}

    dropped, seen = _observing("claude")
    token = dropped.panes["%1"].record.token
    newer = SimpleNamespace(incarnation=token, seen=SimpleNamespace(read_at=1e9))  # a confirmation's, newer
    dropped.core.hub.panes["%1"] = newer
    seen["captures"].append(idle)
    trio.run(dropped.observe_pane, "%1")
    assert dropped.panes["%1"].retell is True and dropped.captures.dirty == {"%1"}
