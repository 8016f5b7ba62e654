"""The delivery guard: what the 2026-12-06 (third) mutation run of the shell found unpinned
(docs/quality.md names the mutants each test kills)."""

from __future__ import annotations

from typing import Any

import anyio

from connectcore import hub as H
from tests.unit.test_delivery_io import _guarded


def test_a_confirmation_that_fails_in_the_guard_still_takes_its_last_look_at_the_pane() -> None:
    """The confirmation failing (not the pane: the pane can still be read) ends the message
    unconfirmed with the failure, and with the last look's reading of the pane."""
    engine, pane, check, key = _guarded()

    async def fails(effect: Any) -> None:
        raise OSError("the watcher went away")

    engine.delivery.confirm = fails
    anyio.run(engine.delivery.guard, check)
    outcome = engine.stepped[-1]
    assert isinstance(outcome, H.TypingObserved)
    assert outcome.failure == "confirming re-read failed: the watcher went away"
    assert outcome.reading is not None
    assert [n for n, _ in pane.events] == ["lock", "capture", "paste", "capture", "unlock"]


def test_a_failure_with_no_pane_to_look_at_is_stepped_without_a_reading() -> None:
    """``unconfirmed`` looks at the pane only when it is given one (and the message is still held)."""
    engine, pane, check, key = _guarded()
    stepped: list[Any] = []

    async def step(event: Any) -> tuple[Any, ...]:  # the outcome as stepped (the core is not asked)
        stepped.append(event)
        return ()

    engine.step = step
    anyio.run(engine.delivery.unconfirmed, key, "typing failed: gone")
    (outcome,) = stepped
    assert isinstance(outcome, H.TypingObserved) and (outcome.failure, outcome.reading) == ("typing failed: gone", None)
    assert pane.events == []


def test_the_guard_reads_its_scrollback_and_names_its_card_for_the_core() -> None:
    """The guard captures the pane with its scrollback (SCROLLBACK_LINES) and gives the core a card id
    of the card kind, in case the step raises one. Kills guard 20, 22, 64-67 (fifth mutation run)."""
    from connectd.delivery.guard import SCROLLBACK_LINES

    engine, pane, check, key = _guarded()
    lines: list[int] = []
    capture = pane.capture

    async def counted(pane_id: str, scrollback_lines: int = 0) -> Any:
        lines.append(scrollback_lines)
        return await capture(pane_id, scrollback_lines)

    pane.capture = counted
    anyio.run(engine.delivery.guard, check)
    observed = engine.stepped[0]
    assert isinstance(observed, H.GuardObserved) and observed.card_id == "card-1"
    assert lines[0] == SCROLLBACK_LINES == 200


def test_a_guard_whose_pane_is_gone_reports_it_not_ready_with_no_fingerprint_and_types_nothing() -> None:
    """The pane's incarnation is gone when the guard looks (no pane to read): the core hears not
    ready, with no fingerprint and no incarnation, and nothing is captured or typed. Kills guard 34,
    41, 42 (fifth mutation run)."""
    engine, pane, check, key = _guarded()

    async def gone(pane_id: str, listed: Any) -> Any:
        return None, None

    engine.watcher.fresh_incarnation = gone
    anyio.run(engine.delivery.guard, check)
    observed = engine.stepped[0]
    assert isinstance(observed, H.GuardObserved)
    assert (observed.ready, observed.fingerprint, observed.incarnation) == (False, "", None)
    assert [n for n, _ in pane.events] == ["lock", "unlock"]


def test_a_guard_that_finds_the_pane_not_ready_feeds_its_reading_back_as_the_pane_s_observation() -> None:
    """The guard's reading counts as the pane's next observation when the core says so (the pane was
    not ready: nothing typed): the watcher remembers it for that pane and incarnation and the core
    hears it as ``PaneObserved`` with the guard's readiness, fingerprint and time. Kills guard 96, 98,
    102-104, 109, 110, 112, 113 (fifth mutation run: no test reached the re-feed)."""
    engine, pane, check, key = _guarded()
    remembered: list[tuple[Any, ...]] = []
    engine.watcher.ready = lambda *a: False
    engine.watcher.remember_reading = lambda *a: remembered.append(a)
    anyio.run(engine.delivery.guard, check)
    assert [type(e).__name__ for e in engine.stepped] == ["GuardObserved", "PaneObserved"]
    guard, observed = engine.stepped
    assert (observed.pane_id, observed.incarnation) == (check.pane_id, check.incarnation)
    assert (observed.ready, observed.fingerprint, observed.read_at) == (False, guard.fingerprint, guard.read_at)
    assert observed.now is not None and guard.fingerprint
    ((pane_id, incarnation, reading),) = remembered
    assert (pane_id, incarnation) == (check.pane_id, check.incarnation) and reading.fingerprint == guard.fingerprint
    assert "paste" not in [n for n, _ in pane.events]


def test_the_guard_tells_the_core_where_a_handle_resolves_now() -> None:
    """What the guard gives the core for a message's handle: the one pane it names now, with its
    incarnation, its harness and the handle; why not when it names none (``no_pane``) or several
    (``ambiguous``); nothing without a handle. Kills resolve 4, 9, 11-17 (fifth mutation run: the
    simulation's two seeds per mutant rarely sent by handle)."""
    from types import SimpleNamespace

    from connectcore import directory as D
    from connectcore import grants

    def seen(pane: int, title: str) -> D.PaneObservation:
        return D.PaneObservation(D.Incarnation(1, 1, f"%{pane}", 100 + pane, 100 + pane), harness="claude", title=title)

    directory = D.observe(D.Directory(), [seen(1, "reviewer"), seen(2, "builder"), seen(3, "builder")])
    engine, pane, check, key = _guarded()
    delivery = engine.delivery
    delivery.watcher = SimpleNamespace(directory=directory, harness_of=lambda record: f"{record.harness}!")
    delivery.core = SimpleNamespace(hub=SimpleNamespace(book=grants.GrantBook()))
    reviewer = directory.panes["%1"]
    assert delivery.resolve("title:reviewer") == H.Recipient("%1", reviewer.token, "claude!", "title:reviewer")
    assert delivery.resolve("title:builder") == H.Unresolved("ambiguous")
    assert delivery.resolve("title:nobody") == H.Unresolved("no_pane")
    assert delivery.resolve(None) is None
    assert isinstance(delivery.resolve("control"), H.Unresolved)  # no control runs (the grant book says)


def test_typing_returns_at_the_early_enter_or_else_when_the_fallback_is_due() -> None:
    """``type_text`` returns as soon as it pressed the early Enter (the confirmation reads from then
    on), and otherwise only once the tmux server's fallback Enter is due, never before it. Kills
    _enter_early 50, 60 (fifth mutation run: the early-Enter tests checked the keys, not the time)."""
    import trio
    import trio.testing

    from connectcore.effects import TypeText
    from tests.unit.test_delivery_io import TYPED, _composer, _delivery, _drew, _no_output, _Pane

    def returned_at(pane: Any, drawn: Any) -> float:
        from types import SimpleNamespace

        engine = SimpleNamespace(tmux=pane, watcher=SimpleNamespace(drawn=drawn, command_of=lambda p: "claude"))
        effect = TypeText("%2", "inc", TYPED, ("p", "m"), submit=True, settle=0.2)

        async def main() -> float:
            await _delivery(engine).type_text(effect)
            return trio.current_time()

        return trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))

    shown = _Pane([_composer("[connect] message m1 from agent:a (pane %1). Peer text.", "please run the parser tests")])
    assert returned_at(shown, _drew) == 0.0 and shown.events[-1] == "enter 0123456789ab"
    assert abs(returned_at(_Pane([_composer("")]), _no_output) - 0.2) < 1e-9


def test_the_confirmation_reads_again_until_its_deadline_before_it_ends_a_paste_unconfirmed() -> None:
    """A paste whose marker does not show is read again (each time the pane draws) until the
    confirmation's deadline, not judged at its first look: a slow pane's paste is not ended
    ``unconfirmed`` early. Kills confirm 3 (fifth mutation run: a deadline before the first look)."""
    engine, pane, check, key = _guarded()  # its screen never shows the paste
    anyio.run(engine.delivery.guard, check)
    names = [n for n, _ in pane.events]
    after = names[names.index("paste") + 1 :]
    assert after.count("capture") > 1  # read again before the deadline
    outcome = engine.stepped[-1]
    assert isinstance(outcome, H.TypingObserved)
