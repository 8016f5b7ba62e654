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

    async def capture(self, pane_id: str, scrollback_lines: int = 0) -> Capture:
        text = self.screens[min(self.captured, len(self.screens) - 1)]
        self.captured += 1
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
    anyio.run(Delivery(engine).confirm, ConfirmTyping(pane, w.message(key).recipient_incarnation, key))  # type: ignore[arg-type]
    assert engine.hub.messages[key].state.value == "unconfirmed"


def test_a_busy_screen_showing_the_marker_is_delivered() -> None:
    w = World()
    key, pane = _typing(w)
    first_line = w.message(key).typed.split("\n", 1)[0]
    busy = (SCREENS / "09_busy_waiting_80.txt").read_text()
    shown = busy.replace("❯ explain the project layout", f"❯ {first_line[:40]}\n  {first_line[40:]}")
    engine = _Engine(w.hub, _Tmux([shown]))
    anyio.run(Delivery(engine).confirm, ConfirmTyping(pane, w.message(key).recipient_incarnation, key))  # type: ignore[arg-type]
    assert engine.hub.messages[key].state.value == "delivered"
    (observed,) = engine.stepped
    assert observed.reading.marker_seen and observed.reading.read_at == engine.now


def test_a_draft_still_in_the_composer_is_unconfirmed_and_shown_to_the_person() -> None:
    w = World()
    key, pane = _typing(w)
    draft = (SCREENS / "07_draft_pasted_80.txt").read_text()
    engine = _Engine(w.hub, _Tmux([draft]))
    anyio.run(Delivery(engine).confirm, ConfirmTyping(pane, w.message(key).recipient_incarnation, key))  # type: ignore[arg-type]
    assert engine.hub.messages[key].reason == "the text is still in the composer"
    assert engine.hub.drafts[pane].message == key
    items = PersonCalls(engine).needs_you()  # type: ignore[arg-type]
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
    from connectcore.effects import TypeText
    from connectd.daemon.interpreter import Interpreter

    keys = _Keys()
    engine = SimpleNamespace(tmux=keys, watcher=SimpleNamespace(drawn=_no_output, command_of=lambda p: "claude"))
    engine.delivery = Delivery(engine)  # type: ignore[arg-type]
    finished: list[bool] = []

    async def typed() -> None:
        await Interpreter(engine).run((TypeText("%2", "inc", "hello", ("p", "m"), submit=True, settle=0.3),))  # type: ignore[arg-type]
        finished.append(True)

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(typed)
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

    anyio.run(Delivery(engine).type_text, TypeText("%2", "inc", TYPED, ("p", "m"), submit=True, settle=0.2))  # type: ignore[arg-type]


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
    delivery = Delivery(engine)  # type: ignore[arg-type]
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
    anyio.run(Delivery(engine).guard_failed, check, TmuxError("can't find pane"))  # type: ignore[arg-type]
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
    anyio.run(Delivery(engine).confirm, ConfirmTyping(pane, w.message(key).recipient_incarnation, key))  # type: ignore[arg-type]
    assert not failures and engine.hub.messages[key].state.value == "unconfirmed"
