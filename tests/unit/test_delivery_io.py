"""The shell's confirmation reports readings; the core decides whether the text landed."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio

from connectcore import hub as H
from connectcore.effects import ConfirmTyping
from connectd.delivery.guard import Delivery
from connectd.person import PersonCalls
from connectd.tmux.adapter import Capture
from tests.unit.hubkit import World

SCREENS = Path(__file__).resolve().parent.parent / "fixtures" / "screens" / "claude" / "2.1.332"


@dataclass
class _Tmux:
    screens: list[str]
    captured: int = 0
    panes: list[str] = field(default_factory=list)  # the pane each capture read

    async def capture(self, pane_id: str, scrollback_lines: int = 0) -> Capture:
        text = self.screens[min(self.captured, len(self.screens) - 1)]
        self.captured += 1
        self.panes.append(pane_id)
        lines = text.split("\n")
        return Capture(text, (2, len(lines) - 3), 80, len(lines))


async def _no_output(pane_id: str, within: float, since: float | None = None) -> None:
    """Control mode reports nothing: each confirming re-read waits its longest."""
    await anyio.sleep(within)


@dataclass
class _Engine:
    hub: H.Hub
    tmux: _Tmux
    stepped: list[Any] = field(default_factory=list)
    timing: Any = field(default_factory=lambda: SimpleNamespace(confirm=1.0, settle=0.0, capture=0.0))
    watcher: Any = field(default_factory=lambda: SimpleNamespace(command_of=lambda pane: "claude", drawn=_no_output))
    now: float = 2000.0

    def clock(self) -> float:
        return self.now

    async def step(self, event: Any) -> tuple[Any, ...]:
        self.stepped.append(event)
        self.hub, effects = H.step(self.hub, event)
        return effects


def _delivery(engine: Any) -> Delivery:
    """The guard over the stand-ins ``engine`` holds (as the engine gives it its collaborators); one
    it does not hold is None (what the test runs never reaches it)."""
    given = {name: getattr(engine, name, None) for name in ("clock", "ids", "tmux", "watcher", "timing")}
    return Delivery(core=engine, **given)


def _typing(w: World) -> tuple[tuple[str, str], str]:
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b)
    w.decide(key)
    w.idle(b)
    w.guard(key, b)
    return key, b.pane


def test_a_busy_screen_without_the_marker_is_unconfirmed() -> None:
    """A turn someone else started (the paste was lost): busy, but the text never showed."""
    w = World()
    key, pane = _typing(w)
    busy = (SCREENS / "09_busy_waiting_80.txt").read_text()
    engine = _Engine(w.hub, _Tmux([busy]))
    anyio.run(_delivery(engine).confirm, ConfirmTyping(pane, w.message(key).recipient_incarnation, key))
    assert engine.hub.messages[key].state.value == "unconfirmed"


def test_a_busy_screen_showing_the_marker_is_delivered() -> None:
    w = World()
    key, pane = _typing(w)
    first_line = w.message(key).typed.split("\n", 1)[0]
    busy = (SCREENS / "09_busy_waiting_80.txt").read_text()
    shown = busy.replace("❯ explain the project layout", f"❯ {first_line[:40]}\n  {first_line[40:]}")
    engine = _Engine(w.hub, _Tmux([shown]))
    anyio.run(_delivery(engine).confirm, ConfirmTyping(pane, w.message(key).recipient_incarnation, key))
    assert engine.hub.messages[key].state.value == "delivered"
    (observed,) = engine.stepped
    assert observed.reading.marker_seen and observed.reading.read_at == engine.now


def test_a_draft_still_in_the_composer_is_unconfirmed_and_shown_to_the_person() -> None:
    w = World()
    key, pane = _typing(w)
    draft = (SCREENS / "07_draft_pasted_80.txt").read_text()
    engine = _Engine(w.hub, _Tmux([draft]))
    anyio.run(_delivery(engine).confirm, ConfirmTyping(pane, w.message(key).recipient_incarnation, key))
    assert engine.hub.messages[key].reason == "the text is still in the composer"
    assert engine.hub.drafts[pane].message == key
    person = PersonCalls(core=engine, clock=engine.clock, ids=None, tmux=engine.tmux, watcher=engine.watcher, launches=None)  # type: ignore[arg-type]
    items = person.needs_you()
    assert items == [
        {
            "kind": "left_draft",
            "id": f"draft:{pane}",
            "pane": pane,
            "summary": f"connect left an unsent message in {pane}'s composer",
            "why": "typing was not confirmed; a draft is in the composer",
            "message_id": key[1],
            "ref": engine.hub.messages[key].ref,
            "sender": engine.hub.messages[key].sender_actor,
            "at": engine.now,
        }
    ]


@dataclass
class _Keys:
    calls: list[tuple[str, float | None]] = field(default_factory=list)
    pasted: anyio.Event = field(default_factory=anyio.Event)

    async def paste_text(self, pane_id: str, text: str, *, submit_after: float | None = None) -> str | None:
        self.calls.append(("paste", submit_after))
        self.pasted.set()
        await anyio.sleep(0.05)  # the tmux call is still running when the daemon is stopped
        return "0123456789ab" if submit_after is not None else None

    async def capture(self, pane_id: str, scrollback_lines: int = 0) -> Capture:
        self.calls.append(("capture", None))
        return Capture("", (0, 0), 80, 24)  # the paste is not shown: the fallback presses the Enter


def test_a_message_is_pasted_and_submitted_in_one_call_that_a_stop_does_not_cut() -> None:
    """Claim: the guard's paste is one tmux call that owes the Enter, and a stop while it runs waits
    for it and its settle (shielded) before the confirmation is reached."""
    from connectcore.effects import TypeText

    keys = _Keys()
    engine = SimpleNamespace(tmux=keys, watcher=SimpleNamespace(drawn=_no_output, command_of=lambda p: "claude"))
    delivery = _delivery(engine)
    finished: list[bool] = []

    async def confirm(effect: Any) -> None:
        finished.append(True)  # reached once the paste is done (then cancelled at its first wait)
        await anyio.sleep(0)

    delivery.confirm = confirm  # type: ignore[method-assign]
    key = ("p", "m")

    async def main() -> None:
        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                typing = TypeText("%2", "inc", "hello", key, submit=True, settle=0.3)
                tg.start_soon(delivery._type_and_confirm, typing, ConfirmTyping("%2", "inc", key))
                await keys.pasted.wait()
                tg.cancel_scope.cancel()  # the daemon stops while the paste call runs

    anyio.run(main)
    assert keys.calls == [("paste", 0.3), ("capture", None)]  # the Enter is owed from the paste call on
    assert finished == [True]  # the stop waited for the paste and its settle (shielded)


TYPED = "[connect] message m1 from agent:a (pane %1). Peer text.\nplease run the parser tests"


def _composer(*rows: str) -> str:
    rule = "─" * 80
    return "\n".join(["", rule, "❯ " + rows[0], *("  " + r for r in rows[1:]), rule, "  ⏵⏵ auto mode on"])


@dataclass
class _Pane:
    """A pane whose screen steps through ``screens`` at each capture, reporting output at once."""

    screens: list[str]
    events: list[str] = field(default_factory=list)
    fail_capture: bool = False

    async def paste_text(self, pane_id: str, text: str, *, submit_after: float | None = None) -> str | None:
        self.events.append(f"paste {submit_after}")
        return "0123456789ab"

    async def capture(self, pane_id: str, scrollback_lines: int = 0) -> Capture:
        if self.fail_capture:
            from connectd.tmux.adapter import TmuxError

            raise TmuxError("can't find pane: %2")
        text = self.screens.pop(0) if len(self.screens) > 1 else self.screens[0]
        self.events.append("capture")
        return Capture(text, (2, 2), 80, 6)

    async def enter_once(self, pane_id: str, token: str) -> None:
        self.events.append(f"enter {token}")


def _type(pane: _Pane, drawn: Any) -> None:
    from connectcore.effects import TypeText

    engine = SimpleNamespace(tmux=pane, watcher=SimpleNamespace(drawn=drawn, command_of=lambda p: "claude"))

    anyio.run(_delivery(engine).type_text, TypeText("%2", "inc", TYPED, ("p", "m"), submit=True, settle=0.2))


async def _drew(pane_id: str, within: float, since: float | None = None) -> None:
    """Control mode reports output at once."""


def test_the_enter_is_pressed_early_once_the_composer_shows_the_paste() -> None:
    pane = _Pane([_composer("[connect] message m1 from agent:a (pane %1). Peer text."),  # still arriving
                  _composer("[connect] message m1 from agent:a (pane %1). Peer text.", "please run the parser tests")])
    _type(pane, _drew)
    assert pane.events == ["paste 0.2", "capture", "capture", "enter 0123456789ab"]  # at once, then at the draw


def test_without_the_paste_shown_the_enter_is_left_to_the_tmux_servers_fallback() -> None:
    """No early Enter; type_text returns once the fallback is due (the server presses it)."""
    pane = _Pane([_composer("")])
    _type(pane, _no_output)
    assert pane.events == ["paste 0.2", "capture"]  # one look at once, then no output until it is due
    pane = _Pane([_composer("")], fail_capture=True)  # a capture that fails: the fallback too
    _type(pane, _drew)
    assert pane.events == ["paste 0.2"]


def _ready(w: World) -> tuple[tuple[str, str], Any]:
    """A consented message waiting for its recipient's idle (nothing typed yet)."""
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b)
    w.decide(key)
    return key, b


def test_a_guard_that_fails_while_typing_ends_the_message_unconfirmed_with_a_last_look() -> None:
    """Claim: a guard task that fails once typing began ends the message unconfirmed, naming the
    failure, with one last look at the pane (the core sees the draft it shows)."""
    from connectcore.effects import CheckGuard
    from connectd.tmux.adapter import TmuxError

    w = World()
    key, pane = _typing(w)
    draft = (SCREENS / "07_draft_pasted_80.txt").read_text()
    engine = _Engine(w.hub, _Tmux([draft]))
    looked: list[str] = []
    engine.watcher = SimpleNamespace(command_of=lambda pane: "claude", drawn=_no_output, look_again=looked.append)
    check = CheckGuard(pane, w.message(key).recipient_incarnation, key)
    delivery = _delivery(engine)
    anyio.run(delivery.guard_failed, check, TmuxError("server exited"))
    (failed,) = engine.stepped
    assert isinstance(failed, H.GuardFailed) and failed.reason == "typing failed: server exited"
    # the core asks for one last look, answered with the failure (as the interpreter runs it)
    (confirm,) = H.step(w.hub, failed)[1]
    assert isinstance(confirm, ConfirmTyping) and confirm.failure == failed.reason
    anyio.run(delivery.unconfirmed, confirm.message, confirm.failure, confirm.pane_id)
    message = engine.hub.messages[key]
    assert message.state.value == "unconfirmed"
    observed = engine.stepped[-1]
    assert isinstance(observed, H.TypingObserved) and observed.failure == "typing failed: server exited"
    assert engine.tmux.captured == 1 and observed.reading is not None and observed.reading.left_draft
    assert engine.tmux.panes == [pane]  # the last look read the recipient's pane


def test_a_guard_that_fails_before_typing_leaves_the_message_waiting_and_looks_again() -> None:
    """Claim: a guard that could not read the pane tells the core the pane is not ready (the message
    keeps waiting, the pane's idle is not used), and the watcher reports the pane's next reading even
    if its screen did not change."""
    from connectcore.effects import CheckGuard
    from connectd.tmux.adapter import TmuxError

    w = World()
    key, b = _ready(w)
    w.idle(b)
    looked: list[str] = []
    engine = _Engine(w.hub, _Tmux([]))
    engine.watcher = SimpleNamespace(look_again=looked.append)
    check = CheckGuard(b.pane, b.incarnation, key)
    anyio.run(_delivery(engine).guard_failed, check, TmuxError("can't find pane"))
    (observed,) = engine.stepped
    assert isinstance(observed, H.GuardFailed)
    assert (observed.message, observed.incarnation) == (key, b.incarnation)
    assert engine.hub.messages[key].state.value == "ready"
    view = engine.hub.panes[b.pane]
    assert view.arming.value == "busy" and not view.ready  # never counted ready (the clock would re-arm it)
    assert looked == [b.pane]


def test_an_outcome_the_store_refuses_twice_is_stepped_again_until_it_is_taken(monkeypatch: Any) -> None:
    """Claim: the typing's outcome is stepped until a commit takes it: two failed commits (the
    confirmation's, then the one after) leave the message typing no longer (before: it stayed
    ``typing`` until the daemon's next start)."""
    import connectd.delivery.guard as DIO
    from connectd.store.store import StoreError

    monkeypatch.setattr(DIO, "STORE_RETRY", 0.01)
    w = World()
    key, pane = _typing(w)
    busy = (SCREENS / "09_busy_waiting_80.txt").read_text()
    engine = _Engine(w.hub, _Tmux([busy]))
    failures = [StoreError("disk full"), StoreError("disk full")]
    real_step = engine.step

    async def flaky_step(event: Any) -> tuple[Any, ...]:
        if isinstance(event, H.TypingObserved) and failures:
            raise failures.pop()  # the runner rolled the step back: the hub is unchanged
        return await real_step(event)

    engine.step = flaky_step  # type: ignore[method-assign]
    anyio.run(_delivery(engine).confirm, ConfirmTyping(pane, w.message(key).recipient_incarnation, key))
    assert not failures and engine.hub.messages[key].state.value == "unconfirmed"


# --- the guard's flat sequence (issue 24): typing runs after the GuardObserved step, not inside it ---


@dataclass
class _GuardedPane:
    """The recipient's pane for a whole guard: its idle screen, a paste, then the pasted draft."""

    screen: str
    steps: list[str]  # what the engine is stepping right now (empty: no step is running)
    events: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)
    fail: str = ""  # "paste" or "capture after paste": that call fails (TmuxError)
    pasted: bool = False

    def pane_lock(self, pane_id: str) -> Any:
        events = self.events

        class _Lock:
            async def __aenter__(self) -> None:
                events.append(("lock", ()))

            async def __aexit__(self, *exc: object) -> None:
                events.append(("unlock", ()))

        return _Lock()

    async def capture(self, pane_id: str, scrollback_lines: int = 0) -> Capture:
        from connectd.tmux.adapter import TmuxError

        self.events.append(("capture", tuple(self.steps)))
        if self.pasted and self.fail == "capture after paste":
            raise TmuxError("can't find pane: %2")
        lines = self.screen.split("\n")
        return Capture(self.screen, (2, len(lines) - 3), 80, len(lines))

    async def paste_text(self, pane_id: str, text: str, *, submit_after: float | None = None) -> str | None:
        from connectd.tmux.adapter import TmuxError

        self.events.append(("paste", tuple(self.steps)))
        if self.fail == "paste":
            raise TmuxError("server exited")
        self.pasted = True
        return None  # no token: the Enter is the server's (no early Enter to look for)


def _guarded(fail: str = "") -> tuple[Any, Any, Any, tuple[str, str]]:
    """A message whose guard passes, an engine that steps the real core and runs the real interpreter
    on each step's effects (as connectd.daemon.runner does), recording which step is running."""
    from connectcore.effects import CheckGuard
    from connectcore.screen import read_screen
    from connectd.daemon.interpreter import Interpreter

    idle = (SCREENS / "03_idle_empty_80.txt").read_text()
    lines = idle.split("\n")
    fingerprint = read_screen(idle, "claude", (2, len(lines) - 3), height=len(lines)).fingerprint
    w = World()
    key, b = _ready(w)
    w.idle(b, fingerprint=fingerprint)
    assert w.message(key).state.value == "guarding"
    running: list[str] = []
    pane = _GuardedPane(idle, running, fail=fail)
    engine = _Engine(w.hub, pane)  # type: ignore[arg-type]
    engine.timing = SimpleNamespace(confirm=0.05, settle=0.0, capture=0.0)

    async def fresh(pane_id: str, listed: Any) -> Any:
        return SimpleNamespace(current_command="claude"), b.incarnation

    engine.watcher = SimpleNamespace(
        fresh_incarnation=fresh, ready=lambda *a: True, command_of=lambda p: "claude", drawn=_drew,
        remember_reading=lambda *a: None, look_again=lambda p: None,
    )
    engine.ids = SimpleNamespace(new_id=lambda kind: f"{kind}-1")
    engine.subscribers = SimpleNamespace(wake=lambda p: None, publish=lambda item: None, end=lambda p: None)  # type: ignore[attr-defined]
    engine.supervisor = SimpleNamespace(spawn=lambda *a, **k: None)  # type: ignore[attr-defined]
    plain = engine.step

    async def step(event: Any) -> tuple[Any, ...]:
        running.append(type(event).__name__)
        try:
            effects = await plain(event)
            await interpreter.run(effects)
            return effects
        finally:
            running.pop()

    engine.step = step  # type: ignore[method-assign]
    engine.delivery = _delivery(engine)
    interpreter = Interpreter(  # the parts a guard's effects reach; the others stand in as None
        subscribers=engine.subscribers, delivery=engine.delivery, acts=None, restarts=None, here=None,  # type: ignore[arg-type]
        here_launches=None, tmux=engine.tmux, timing=engine.timing, supervisor=lambda: engine.supervisor,  # type: ignore[arg-type]
        federation=lambda: None,
    )
    check = CheckGuard(b.pane, b.incarnation, key)
    return engine, pane, check, key


def test_the_guard_types_after_its_step_not_nested_inside_it() -> None:
    """Claim (issue 24): the guard's GuardObserved step returns before anything is typed; the paste,
    the confirming re-reads and the TypingObserved step follow it, one after the other, all under the
    send lock. (Before: the interpreter pasted and confirmed inside the GuardObserved step, and
    TypingObserved was stepped nested in it.)"""
    engine, pane, check, key = _guarded()
    anyio.run(engine.delivery.guard, check)
    assert [type(e).__name__ for e in engine.stepped] == ["GuardObserved", "TypingObserved"]
    names = [name for name, _ in pane.events]
    assert names[0] == "lock" and names[-1] == "unlock" and names.count("paste") == 1
    assert names.index("paste") > names.index("capture")  # the guard's own reading first
    assert [running for _, running in pane.events[1:-1]] == [()] * (len(pane.events) - 2)  # no step running
    assert engine.hub.messages[key].state.value in {"delivered", "unconfirmed"}


def test_a_paste_that_fails_in_the_guard_is_unconfirmed_with_a_last_look() -> None:
    """Claim: a paste that fails ends the message unconfirmed ("send failed partway", the pane looked
    at once more), and no confirmation runs."""
    engine, pane, check, key = _guarded(fail="paste")
    anyio.run(engine.delivery.guard, check)
    guard, outcome = engine.stepped
    assert isinstance(outcome, H.TypingObserved) and outcome.failure == "send failed partway: server exited"
    assert outcome.reading is not None  # the last look
    assert [n for n, _ in pane.events] == ["lock", "capture", "paste", "capture", "unlock"]
    assert engine.hub.messages[key].state.value == "unconfirmed"


def test_a_confirming_re_read_that_fails_in_the_guard_says_so() -> None:
    engine, pane, check, key = _guarded(fail="capture after paste")
    anyio.run(engine.delivery.guard, check)
    guard, outcome = engine.stepped
    assert isinstance(outcome, H.TypingObserved)
    assert outcome.failure == "confirming re-read failed: can't find pane: %2" and outcome.reading is None
    assert engine.hub.messages[key].state.value == "unconfirmed"


def test_a_coding_error_while_typing_reaches_the_guards_supervisor() -> None:
    """Claim: a ValueError from the daemon's own code while typing is a bug: it leaves the guard (its
    supervisor steps GuardFailed, then the last look), the message is not quietly made unconfirmed;
    the adapters' own refusals (TmuxInputError, ProcStatError) are I/O failures: unconfirmed."""
    import pytest

    from connectd.tmux.adapter import TmuxInputError
    from connectd.tmux.procfs import ProcStatError

    engine, pane, check, key = _guarded()

    async def buggy(effect: Any) -> None:
        raise ValueError("a bug: unpacked the wrong tuple")

    engine.delivery.type_text = buggy
    with pytest.raises(ValueError, match="a bug"):
        anyio.run(engine.delivery.guard, check)
    assert engine.hub.messages[key].state.value == "typing"
    for exc in (TmuxInputError("a control character in the target"), ProcStatError("no /proc/123/stat")):
        engine, pane, check, key = _guarded()

        async def refuses(effect: Any, exc: Exception = exc) -> None:
            raise exc

        engine.delivery.type_text = refuses
        anyio.run(engine.delivery.guard, check)
        assert engine.stepped[-1].failure == f"send failed partway: {exc}"
        assert engine.hub.messages[key].state.value == "unconfirmed"
