"""The interpreter: handlers the 2026-12-06 (third) mutation run of the shell found unpinned
(docs/quality.md names the mutants each test kills). Each handler's call is recorded whole."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import anyio

from connectcore.effects import CheckActGuard, EndSubscriptions, ExitAgent, Respawn
from connectd.daemon.supervisor import Kind
from tests.unit.test_interpreter import _interpreter


class _Record:
    """A stand-in whose every method (sync or async, as ``asynchronous`` names) records its call."""

    def __init__(self, seen: list[Any], asynchronous: tuple[str, ...] = (), answers: dict[str, Any] | None = None):
        self.seen, self.asynchronous, self.answers = seen, asynchronous, answers or {}

    def __getattr__(self, name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            self.seen.append((name, args, kwargs))
            return self.answers.get(name)

        async def acall(*args: Any, **kwargs: Any) -> Any:
            return call(*args, **kwargs)

        return acall if name in self.asynchronous else call


def test_an_act_guard_is_spawned_as_a_guard_whose_failure_is_the_acts_to_report() -> None:
    seen: list[Any] = []
    spawned: list[Any] = []
    acts = _Record(seen)
    supervisor = SimpleNamespace(spawn=lambda *a, **k: spawned.append((a, k)))
    effect = CheckActGuard("act-1", "%4", "inc-1")
    anyio.run(_interpreter(acts=acts, supervisor=lambda: supervisor).execute, effect)
    ((args, kwargs),) = spawned
    assert (args[0], args[2], kwargs["name"]) == (Kind.GUARD, effect, "act guard act-1")
    args[1](effect)  # the act guard itself
    error = OSError("gone")
    kwargs["on_error"](error)
    assert seen == [("guard", (effect,), {}), ("guard_failed", (effect, error), {})]


def test_ending_subscriptions_ends_the_principal_s() -> None:
    seen: list[Any] = []
    anyio.run(_interpreter(subscribers=_Record(seen)).execute, EndSubscriptions("p-1"))
    assert seen == [("end", ("p-1",), {})]


def test_an_exit_command_is_typed_with_the_daemon_s_settle() -> None:
    seen: list[Any] = []
    tmux = _Record(seen, asynchronous=("send_exit_command",))
    interpreter = _interpreter(tmux=tmux, timing=SimpleNamespace(settle=0.7))
    anyio.run(interpreter.execute, ExitAgent("%4", "/exit"))
    assert seen == [("send_exit_command", ("%4", "/exit"), {"settle": 0.7})]


def test_a_respawn_runs_in_the_pane_s_directory_or_through_its_here_launch() -> None:
    """A pane launched ``--here`` (as the here panes say of its id) is relaunched by its launcher; any
    other is respawned by tmux with its argv, cwd and env; either way the restart hears it."""
    effect = Respawn("%4", ("claude", "--resume"), "/work/repo", {"A": "1"})
    for here in (False, True):
        seen: list[Any] = []
        parts = SimpleNamespace(
            here=_Record(seen, answers={"is_here": here}),
            here_launches=_Record(seen, asynchronous=("respawn",)),
            tmux=_Record(seen, asynchronous=("respawn",)),
            restarts=_Record(seen, asynchronous=("respawned",)),
        )
        anyio.run(_interpreter(parts).execute, effect)
        ran: tuple[Any, ...] = ("respawn", (effect,), {}) if here else ("respawn", ("%4", ["claude", "--resume"], "/work/repo", {"A": "1"}), {})
        assert seen == [("is_here", ("%4",), {}), ran, ("respawned", (effect,), {})]


def test_a_failed_effect_skips_the_rest_of_its_subject_and_nothing_else() -> None:
    """Claim: when an effect's I/O fails, the later effects about the same message (or, with no
    message, the same pane) are skipped and reported nowhere; every other subject's effects still run,
    in order, and only the failed effect is reported failed. Kills run 2, 3, 5, 7 and subject 1, 2, 7,
    8, 12, 13, 18-20, 24 (fifth mutation run: no test ran a failure with effects after it)."""
    from connectcore.effects import ConfirmTyping, SetPaneOption, TypeText

    def ran(effects: tuple[Any, ...]) -> tuple[list[Any], list[Any]]:
        executed: list[Any] = []
        reported: list[Any] = []
        interpreter = _interpreter()

        async def execute(effect: Any) -> None:
            executed.append(effect)
            if effect is effects[0]:
                raise OSError("tmux went away")

        async def failed(effect: Any, exc: Exception) -> None:
            reported.append(effect)

        interpreter.execute = execute  # type: ignore[method-assign]
        interpreter.failed = failed  # type: ignore[method-assign]
        anyio.run(interpreter.run, effects)
        return executed, reported

    same_pane = (SetPaneOption("%1", "a", "1"), SetPaneOption("%1", "b", "2"), SetPaneOption("%2", "a", "1"))
    assert ran(same_pane) == ([same_pane[0], same_pane[2]], [same_pane[0]])
    m1, m2 = ("p", "m1"), ("p", "m2")
    same_message = (
        TypeText("%1", "inc", "one", m1, submit=True), ConfirmTyping("%1", "inc", m1),
        TypeText("%1", "inc", "two", m2, submit=True),  # the same pane, another message
    )
    assert ran(same_message) == ([same_message[0], same_message[2]], [same_message[0]])


def test_an_audit_record_s_notice_on_the_owner_s_stream_names_its_topic_actor_and_action() -> None:
    """Claim: a stored audit record is told to the owner's stream as ``{"topic": "audit", "actor",
    "action"}`` (the page refreshes its audit list on that topic). Kills published 1-9 (fifth
    mutation run: no test read the notice)."""
    from connectcore.effects import Audit

    seen: list[Any] = []
    _interpreter(subscribers=_Record(seen)).published(Audit("agent:a", "send", "ok"))
    assert seen == [("publish", ({"topic": "audit", "actor": "agent:a", "action": "send"},), {})]


def test_a_message_guard_is_spawned_as_a_guard_whose_failure_the_core_hears_with_its_reason() -> None:
    """Claim: a ``CheckGuard`` spawns the delivery guard as a guard task named for its pane and
    message, and a failure of that task reaches ``guard_failed`` with the exception itself (the core
    hears "typing failed: <its words>"). Kills _check_guard 15 (fifth mutation run, undecided then:
    the reason would be "None")."""
    from connectcore.effects import CheckGuard

    seen: list[Any] = []
    spawned: list[Any] = []
    delivery = _Record(seen)
    supervisor = SimpleNamespace(spawn=lambda *a, **k: spawned.append((a, k)))
    effect = CheckGuard("%4", "inc-1", ("p", "m-1"))
    anyio.run(_interpreter(delivery=delivery, supervisor=lambda: supervisor).execute, effect)
    ((args, kwargs),) = spawned
    assert (args[0], args[2], kwargs["name"]) == (Kind.GUARD, effect, "guard %4 m-1")
    error = OSError("can't find pane: %4")
    kwargs["on_error"](error)
    assert seen == [("guard_failed", (effect, error), {})]


def test_a_window_s_handoff_text_is_not_taken_for_a_message_s_key() -> None:
    """Claim: an ``OpenWindow`` (no pane, no message) is about nothing the interpreter skips by: its
    handoff text is not a message's key, so a failed window opening never skips another act's window
    for sharing an (empty) text. Before: the field was named ``message``, and ``subject`` read the
    text as a key (``("message", "g", "o")``; every window with no handoff shared ``("message",)``)."""
    from connectcore.effects import OpenWindow
    from connectd.daemon.interpreter import subject

    handoff = OpenWindow("act-1", "claude", "/src", "off", "s-1", "go on")  # resumed, then handed this text
    assert subject(handoff) == subject(OpenWindow("act-2", "codex", "/src", "off")) == ("none",)
