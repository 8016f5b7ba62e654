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


def _ready_as_read(engine: Any) -> None:
    """The watcher's readiness as the screen reads it (the real watcher's, for a trusted release)."""
    engine.watcher.ready = lambda pane_id, incarnation, reading: reading.ready_for_message


def test_a_guard_whose_pane_has_its_cursor_outside_the_composer_types_nothing() -> None:
    """Claim: the guard reads the screen with the capture's cursor: an idle screen whose cursor is
    outside the composer (something else has the focus: a menu, a dialog's field) is not ready, and
    nothing is pasted, though the same screen with the cursor in the composer would pass. Kills guard
    26, 30 (fifth mutation run, undecided then: every test screen had its cursor in the composer)."""
    from connectd.tmux.adapter import Capture

    engine, pane, check, key = _guarded()
    _ready_as_read(engine)
    screen = pane.screen

    async def focus_elsewhere(pane_id: str, scrollback_lines: int = 0) -> Capture:
        pane.events.append(("capture", ()))
        return Capture(screen, (0, 0), 80, len(screen.split("\n")))

    pane.capture = focus_elsewhere
    anyio.run(engine.delivery.guard, check)
    observed = engine.stepped[0]
    assert isinstance(observed, H.GuardObserved) and observed.ready is False
    assert "paste" not in [n for n, _ in pane.events]


def test_the_confirming_re_read_reads_the_screen_as_the_guard_does() -> None:
    """Claim: each re-read after typing captures the pane with its scrollback and reads it with the
    pane's command and its cursor counted within the visible height; the core hears that reading's
    activity, readiness and fingerprint, and a cursor outside the composer reads not ready. Kills
    read_after_typing 4, 6, 10, 11, 15, 16, 21, 24 (fifth mutation run)."""
    from connectcore.screen import Activity, read_screen
    from connectd.delivery.guard import SCROLLBACK_LINES
    from connectd.tmux.adapter import Capture

    def outcome(cursor_row: int | None) -> tuple[Any, list[int], Any]:
        engine, pane, check, key = _guarded()
        engine.watcher.command_of = lambda p: {check.pane_id: "claude"}.get(p, "")
        screen, plain = pane.screen, pane.capture
        lines = screen.split("\n")
        scrolled = "\n".join([f"earlier output {i}" for i in range(30)] + lines)
        cursor = (2, len(lines) - 3) if cursor_row is None else (0, cursor_row)
        asked: list[int] = []

        async def capture(pane_id: str, scrollback_lines: int = 0) -> Capture:
            if not pane.pasted:
                return await plain(pane_id, scrollback_lines)
            asked.append(scrollback_lines)
            return Capture(scrolled, cursor, 80, len(lines))

        pane.capture = capture
        anyio.run(engine.delivery.guard, check)
        last = engine.stepped[-1]
        assert isinstance(last, H.TypingObserved) and last.reading is not None
        return last.reading, asked, read_screen(scrolled, "claude", cursor, height=len(lines))

    reading, asked, expected = outcome(None)
    assert asked and set(asked) == {SCROLLBACK_LINES}
    assert (reading.activity, reading.ready) == (Activity.IDLE, True)
    assert reading.fingerprint == expected.fingerprint and expected.ready_for_message
    elsewhere, _, _ = outcome(0)  # the focus left the composer
    assert elsewhere.ready is False and elsewhere.activity is Activity.UNKNOWN


def test_a_message_whose_recipient_went_straight_into_a_permission_dialog_is_delivered() -> None:
    """Claim: the re-read after typing reads the screen as the pane's command names its harness: a
    recipient that took the message and at once asked for a tool's permission shows the marker above
    a dialog (which, in Claude Code 2.1.243, names no harness by itself), and the message is
    delivered. Kills read_after_typing 18 (fifth mutation run: read as an unknown program, it ended
    unconfirmed)."""
    from connectcore.screen import Activity
    from connectd.tmux.adapter import Capture
    from tests.support.screen_corpus import load_case

    engine, pane, check, key = _guarded()
    engine.watcher.command_of = lambda p: {check.pane_id: "claude"}.get(p, "")
    dialog = load_case("claude/2.1.243/15_dialog_permission_80")  # shows nothing of Claude Code's own
    typed = engine.hub.messages[key].typed
    plain = pane.capture

    async def capture(pane_id: str, scrollback_lines: int = 0) -> Capture:
        if not pane.pasted:
            return await plain(pane_id, scrollback_lines)
        cursor = tuple(dialog.meta["cursor"])
        return Capture(typed + "\n" + dialog.text, cursor, 80, dialog.meta["height"])  # type: ignore[arg-type]

    pane.capture = capture
    anyio.run(engine.delivery.guard, check)
    outcome = engine.stepped[-1]
    assert isinstance(outcome, H.TypingObserved) and outcome.reading is not None
    assert (outcome.reading.marker_seen, outcome.reading.activity) == (True, Activity.DIALOG)
    assert engine.hub.messages[key].state.value == "delivered"


def _confirming(screens: list[str], step: Any) -> tuple[Any, Any]:
    """A guard over a pane that echoes the paste 10 ms after it, draws again during each capture (10 ms
    long), showing ``screens`` one after the other, and draws 10 ms after an early Enter; the real
    capture schedule tells who waits for a pane to draw. Returns the guard and the message's key."""
    from types import SimpleNamespace

    import trio

    from connectd.delivery.guard import Delivery
    from connectd.tmux.adapter import Capture
    from connectd.tmux.captures import CaptureSchedule
    from tests.unit.test_delivery_io import TYPED

    schedule = CaptureSchedule(core=None, timing=None, watched=None, observe=None, poll=None)  # type: ignore[arg-type]
    key = ("p", "m1")

    class Pane:
        def __init__(self) -> None:
            self.entered: list[float] = []  # when each early Enter was pressed

        async def paste_text(self, pane_id: str, text: str, *, submit_after: float | None = None) -> str | None:
            await trio.sleep(0.01)
            schedule.mark_output(pane_id)
            return None if submit_after is None else "token"

        async def enter_once(self, pane_id: str, token: str) -> None:  # the pane draws its submitted turn
            self.entered.append(trio.current_time())
            await trio.sleep(0.01)
            schedule.mark_output(pane_id)

        async def capture(self, pane_id: str, scrollback_lines: int = 0) -> Capture:
            await trio.sleep(0.01)
            schedule.mark_output(pane_id)
            text = screens.pop(0) if len(screens) > 1 else screens[0]
            return Capture(text, (2, 2), 80, 6)

    core = SimpleNamespace(hub=SimpleNamespace(messages={key: SimpleNamespace(typed=TYPED)}), step=step)
    delivery = Delivery(
        core=core, clock=trio.current_time, ids=None, tmux=Pane(),  # type: ignore[arg-type]
        watcher=SimpleNamespace(drawn=schedule.drawn, command_of=lambda p: "claude"),  # type: ignore[arg-type]
        timing=SimpleNamespace(confirm=5.0),  # type: ignore[arg-type]
    )
    return delivery, key


def test_the_confirmation_reads_as_soon_as_the_pane_draws_and_steps_the_outcome_at_once() -> None:
    """Claim: after typing, the confirmation reads the pane at once for output that came since the
    paste began, then again as soon as the pane draws (output during a read counts), and steps the
    outcome the moment a reading shows the message landed: here 30 ms after the paste, not at a
    re-read's 200 ms bound or the 5 s deadline. Kills confirm 4, 5, 9, 11, 14, 15, 22 (fifth mutation
    run: the confirmation's tests checked what it decided, not when)."""
    import trio
    import trio.testing

    from connectcore.delivery import Landing, landed
    from connectcore.effects import ConfirmTyping, TypeText
    from tests.unit.test_delivery_io import TYPED, _composer

    first, second = TYPED.split("\n")
    draft = _composer(first, second)[1:]  # the paste still in the composer (its blank first row dropped)
    shown = "\n".join([first, second, *_composer("").split("\n")[1:]])  # submitted: above an empty composer
    stepped: list[tuple[float, Any]] = []

    async def step(event: Any) -> tuple[Any, ...]:
        stepped.append((trio.current_time(), event))
        return ()

    delivery, key = _confirming([draft, shown], step)

    async def main() -> None:
        await delivery.type_text(TypeText("%2", "inc", TYPED, key, submit=False))
        await delivery.confirm(ConfirmTyping("%2", "inc", key))

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    ((at, outcome),) = stepped
    assert landed(outcome.reading, last=False)[0] is Landing.DELIVERED
    assert abs(at - 0.03) < 1e-9, at


def test_an_outcome_the_store_failed_is_stepped_again_after_doubling_waits_up_to_thirty_seconds() -> None:
    """Claim: while the store fails the outcome's step, it is stepped again after 0.5 s, then each
    wait doubles, up to 30 s. Kills _step_outcome 30, 31 (fifth mutation run: the retry's test
    failed once)."""
    import sqlite3

    import trio
    import trio.testing

    from connectd.delivery.guard import Delivery

    tries: list[float] = []

    async def step(event: Any) -> tuple[Any, ...]:
        tries.append(trio.current_time())
        if len(tries) <= 8:
            raise sqlite3.OperationalError("database is locked")
        return ()

    from types import SimpleNamespace

    delivery = Delivery(core=SimpleNamespace(step=step, hub=SimpleNamespace(messages={})), clock=trio.current_time, ids=None, tmux=None,  # type: ignore[arg-type]
                        watcher=None, timing=None)  # type: ignore[arg-type]
    trio.run(delivery.unconfirmed, ("p", "m1"), "gone", clock=trio.testing.MockClock(autojump_threshold=0))
    waits = [round(b - a, 9) for a, b in zip(tries, tries[1:], strict=False)]
    assert waits == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]


def test_the_early_enter_comes_as_soon_as_the_paste_shows_and_is_confirmed_at_once() -> None:
    """Claim: with the Enter owed (``submit``), the composer is read again as soon as the pane draws
    (output during a read counts), the early Enter is pressed the moment the composer shows the whole
    paste (30 ms, not the 200 ms fallback), and the confirmation reads the output from the Enter on:
    delivered at 50 ms. Kills _enter_early 8, 10, 13, 31 and type_text 2 (fifth mutation run: the
    early Enter's tests waited with a stand-in that always returned at once)."""
    import trio
    import trio.testing

    from connectcore.delivery import Landing, landed
    from connectcore.effects import ConfirmTyping, TypeText
    from tests.unit.test_delivery_io import TYPED, _composer

    first, second = TYPED.split("\n")
    arriving = _composer(first)[1:]  # the paste's first line only
    whole = _composer(first, second)[1:]
    shown = "\n".join([first, second, *_composer("").split("\n")[1:]])
    stepped: list[tuple[float, Any]] = []

    async def step(event: Any) -> tuple[Any, ...]:
        stepped.append((trio.current_time(), event))
        return ()

    delivery, key = _confirming([arriving, whole, shown], step)

    async def main() -> None:
        await delivery.type_text(TypeText("%2", "inc", TYPED, key, submit=True, settle=0.2))
        await delivery.confirm(ConfirmTyping("%2", "inc", key))

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    (entered,) = delivery.tmux.entered
    ((at, outcome),) = stepped
    assert landed(outcome.reading, last=False)[0] is Landing.DELIVERED
    assert abs(entered - 0.03) < 1e-9 and abs(at - 0.05) < 1e-9, (entered, at)
