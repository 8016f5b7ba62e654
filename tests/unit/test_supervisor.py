"""The supervisor's written policies: no exception from a task ends the task group."""

from __future__ import annotations

import logging
from typing import Any

import anyio
import pytest

from connectcore._machine import TransitionNotAllowed
from connectcore.effects import Audit
from connectd.daemon.supervisor import POLICIES, Kind, Shape, Supervisor


def run(fn):  # type: ignore[no-untyped-def]
    return anyio.run(fn)


def test_every_kind_has_a_written_policy() -> None:
    assert set(POLICIES) == set(Kind)
    assert all(p.on_failure for p in POLICIES.values())


def test_a_loop_whose_body_raises_keeps_running_and_audits_the_streak_once() -> None:
    rounds: list[int] = []
    audits: list[Audit] = []

    async def body() -> None:
        rounds.append(len(rounds))
        if len(rounds) <= 3:
            raise OSError("tmux went away")

    async def audit(record: Audit) -> None:
        audits.append(record)

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            sup = Supervisor(tg, audit=audit, clock=lambda: 5.0, backoff_scale=0.001)
            sup.spawn(Kind.WATCH, body, every=0.001, name="poll")
            with anyio.fail_after(30):
                while len(rounds) < 6:
                    await anyio.sleep(0.01)
            tg.cancel_scope.cancel()

    run(main)
    assert len(rounds) >= 6  # it went on after three failures
    assert [(a.actor, a.action, a.outcome) for a in audits] == [("connectd", "task.watch", "failed")]
    assert "poll: OSError: tmux went away" in audits[0].detail and audits[0].at == 5.0


def test_a_one_shot_failure_is_turned_into_the_core_s_event_by_its_handler() -> None:
    handled: list[Exception] = []

    async def guard() -> None:
        raise RuntimeError("capture-pane failed")

    async def on_error(exc: Exception) -> None:
        handled.append(exc)

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            Supervisor(tg).spawn(Kind.GUARD, guard, on_error=on_error)
        # the group closed normally: the exception did not escape it

    run(main)
    assert [str(e) for e in handled] == ["capture-pane failed"]


def test_a_failing_handler_is_logged_and_the_group_still_survives(caplog: pytest.LogCaptureFixture) -> None:
    async def guard() -> None:
        raise TransitionNotAllowed("message", "delivered", "guard_pass")

    async def on_error(exc: Exception) -> None:
        raise ValueError("handler broke too")

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            Supervisor(tg).spawn(Kind.GUARD, guard, on_error=on_error, name="guard %1")

    with caplog.at_level(logging.WARNING, logger="connectd.supervisor"):
        run(main)
    messages = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("bug in guard guard %1: message: event 'guard_pass'") for m in messages), messages
    assert any("guard %1 (failure handler) failed: ValueError: handler broke too" in m for m in messages), messages


def test_a_service_that_ends_is_started_again() -> None:
    starts: list[int] = []

    async def service() -> None:
        starts.append(1)
        if len(starts) == 1:
            raise ConnectionError("collector away")

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            sup = Supervisor(tg, backoff_scale=0.001)
            sup.spawn(Kind.EXPORT, service)
            with anyio.fail_after(30):
                while len(starts) < 2:
                    await anyio.sleep(0.05)
            tg.cancel_scope.cancel()

    run(main)
    assert len(starts) >= 2 and POLICIES[Kind.EXPORT].shape is Shape.SERVICE


def test_cancellation_passes_through() -> None:
    cancelled: list[bool] = []

    async def forever() -> None:
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            cancelled.append(True)
            raise

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            Supervisor(tg).spawn(Kind.GUARD, forever, on_error=lambda exc: pytest.fail("not a failure"))  # type: ignore[arg-type,return-value]
            await anyio.sleep(0.01)
            tg.cancel_scope.cancel()

    run(main)
    assert cancelled == [True]


def test_a_loop_needs_its_period() -> None:
    async def main() -> None:
        async with anyio.create_task_group() as tg:
            with pytest.raises(ValueError, match="watch is a loop: spawn it with every="):
                Supervisor(tg).spawn(Kind.WATCH, anyio.sleep, 0)

    run(main)


def test_the_start_is_retried_until_done_and_its_failure_audited_once() -> None:
    """Claim: an I/O error during the daemon's start ends neither the start nor the daemon: the step is
    made again after the backoff until it succeeds, and the streak is audited once."""
    audited: list[Audit] = []
    tries: list[int] = []

    async def audit(record: Audit) -> None:
        audited.append(record)

    async def first_look() -> str:
        tries.append(1)
        if len(tries) < 3:
            raise OSError("tmux is not answering yet")
        return "looked"

    async def main() -> str:
        async with anyio.create_task_group() as tg:
            sup = Supervisor(tg, audit=audit, clock=lambda: 7.0, backoff_scale=0.001)
            return str(await sup.until_done(Kind.START, first_look, name="first look"))

    assert anyio.run(main) == "looked" and len(tries) == 3
    assert [(a.action, a.outcome) for a in audited] == [("task.start", "failed")]
    assert "first look: OSError: tmux is not answering yet" in audited[0].detail


def test_until_done_is_only_for_its_shape() -> None:
    async def main() -> None:
        async with anyio.create_task_group() as tg:
            with pytest.raises(ValueError, match="not until_done"):
                await Supervisor(tg).until_done(Kind.GUARD, anyio.sleep, 0)

    anyio.run(main)


def test_a_failing_service_is_started_again_after_a_doubling_backoff_up_to_its_bound() -> None:
    """Claim: a service that keeps failing restarts after 1, 2, 4 ... s (its policy's backoff,
    doubling), never sooner and never waiting past backoff_max, and each failure is audited."""
    import trio
    import trio.testing

    starts: list[float] = []
    audited: list[Audit] = []

    async def sink(record: Audit) -> None:
        audited.append(record)

    async def service() -> None:
        starts.append(trio.current_time())
        raise ConnectionError("collector away")

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            sup = Supervisor(nursery, audit=sink, clock=trio.current_time)  # type: ignore[arg-type]
            sup.spawn(Kind.EXPORT, service, name="exporter")
            await trio.sleep(200)
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    gaps = [round(b - a, 6) for a, b in zip(starts, starts[1:], strict=False)]
    policy = POLICIES[Kind.EXPORT]
    assert gaps[:7] == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0] and set(gaps[6:]) == {policy.backoff_max}
    assert len(audited) == len(starts) and audited[0].action == "task.export" and audited[0].outcome == "failed"
    assert audited[0].detail == "exporter: ConnectionError: collector away"


def test_a_service_that_returns_is_started_again_after_its_backoff() -> None:
    """Claim: a service that returns (not raising) is restarted after the backoff, not at once."""
    import trio
    import trio.testing

    starts: list[float] = []

    async def service() -> None:
        starts.append(trio.current_time())

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            Supervisor(nursery).spawn(Kind.CONTROL_MODE, service)  # type: ignore[arg-type]
            await trio.sleep(10)
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert [round(t, 6) for t in starts] == [0.0, 1.0, 3.0, 7.0]


def test_the_table_is_the_behaviour_a_kind_that_steps_its_failure_into_the_core_needs_its_handler() -> None:
    """Claim: a one-shot kind whose policy steps its failure into the core cannot be spawned without the
    handler that does it, and no other kind takes one (the table, not each caller, decides)."""

    async def body() -> None:
        pass

    async def handler(exc: Exception) -> None:
        pass

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            sup = Supervisor(tg)
            for kind, policy in POLICIES.items():
                if policy.shape is Shape.UNTIL_DONE:
                    continue
                every = 1.0 if policy.shape is Shape.LOOP else None
                if policy.steps_into_core:
                    with pytest.raises(TypeError, match="into the core"):
                        sup.spawn(kind, body, every=every)
                else:
                    with pytest.raises(TypeError, match="takes no on_error"):
                        sup.spawn(kind, body, every=every, on_error=handler)
            tg.cancel_scope.cancel()

    run(main)
    assert {k for k, p in POLICIES.items() if p.steps_into_core} == {Kind.GUARD, Kind.RESTART, Kind.BIND}


def test_every_kind_is_started_somewhere() -> None:
    """Claim: the table holds no kind that nothing starts (a policy for nothing is a false promise)."""
    import re
    from pathlib import Path

    started = set()
    for path in Path("src/connectd").rglob("*.py"):
        if path.name != "supervisor.py":
            started |= set(re.findall(r"Kind\.([A-Z_]+)\b", path.read_text()))
    assert {k.name for k in Kind} <= started, f"never started: {sorted({k.name for k in Kind} - started)}"


def test_an_essential_task_that_fails_stops_the_daemon_loudly() -> None:
    """Claim: the HTTP server's failure is logged, audited and raised out of the task group (a daemon
    nobody can reach must not look alive); its normal end (the daemon stopping) is not a failure."""
    audits: list[Audit] = []

    async def audit(record: Audit) -> None:
        audits.append(record)

    async def fails() -> None:
        raise OSError("the listening socket broke")

    async def ends() -> None:
        return None

    async def main(body) -> None:  # type: ignore[no-untyped-def]
        async with anyio.create_task_group() as tg:
            sup = Supervisor(tg, audit=audit, clock=lambda: 1.0)
            sup.spawn(Kind.HTTP, body, name="http")

    with pytest.raises(BaseException) as caught:
        anyio.run(main, fails)
    assert "the listening socket broke" in repr(caught.value) or "the listening socket broke" in str(getattr(caught.value, "exceptions", ""))
    assert [a.action for a in audits] == ["task.http"]
    assert audits[0].detail == "http: OSError: the listening socket broke"  # its label and its error
    audits.clear()
    anyio.run(main, ends)
    assert audits == []


def test_a_service_that_ran_well_for_a_while_starts_a_new_streak_from_the_first_backoff() -> None:
    """Claim: the backoff doubles within a streak of failures only: a service that ran for at least its
    policy's ``backoff_max`` before it failed again is started again after the first backoff. Before,
    the wait never came down in the daemon's life: a federation loop that had sat out one long NATS
    outage waited 30 s after every later blip (tests/integration/test_federation_partition.py)."""
    import trio
    import trio.testing

    starts: list[float] = []

    async def service() -> None:
        starts.append(trio.current_time())
        if len(starts) == 9:
            await trio.sleep(100)  # connected and working, then the connection drops again
        raise ConnectionError("NATS away")

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            Supervisor(nursery).spawn(Kind.BUS, service, name="federation fetch")  # type: ignore[arg-type]
            await trio.sleep(300)
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    gaps = [round(b - a, 6) for a, b in zip(starts, starts[1:], strict=False)]
    policy = POLICIES[Kind.BUS]
    assert gaps[:8] == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0] and policy.backoff_max == 30.0
    assert gaps[8:10] == [100.0 + policy.backoff, 2 * policy.backoff], gaps  # a new streak


def test_a_group_stops_its_tasks_together_waiting_for_what_they_shield_and_never_fails_the_daemon() -> None:
    """Claim: a group's tasks run under their own kinds' policies (a failing service inside is started
    again, the daemon's group goes on), start even when spawned before the group opened, and
    :meth:`Group.stop` cancels them all and returns only once each ended, a shielded section finished
    first; nothing starts in a stopped group, and an essential task is refused in one."""
    from connectd.daemon.supervisor import Group

    events: list[str] = []
    failures = [0]
    audits: list[Audit] = []

    async def audit(record: Audit) -> None:
        audits.append(record)

    async def failing() -> None:
        failures[0] += 1
        raise RuntimeError("NATS away")

    async def shielding() -> None:
        events.append("started")
        while True:
            with anyio.CancelScope(shield=True):
                events.append("in")
                await anyio.sleep(0.3)
                events.append("out")
            await anyio.sleep(0.01)

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            sup = Supervisor(tg, audit=audit, clock=lambda: 7.0, backoff_scale=0.01)
            other: list[int] = []

            async def tick() -> None:
                other.append(1)

            sup.spawn(Kind.TICK, tick, every=0.01)
            group = sup.group("federation bus")
            assert isinstance(group, Group)
            group.spawn(Kind.BUS, shielding, name="shielding")  # before the group opened
            group.spawn(Kind.BUS, failing, name="failing")
            with pytest.raises(ValueError, match="essential"):
                group.spawn(Kind.HTTP, failing)
            await anyio.sleep(0.1)
            assert events[:2] == ["started", "in"] and failures[0] >= 2  # started again after each failure
            await group.stop()
            assert events[-1] == "out" and group.stopped  # the shielded section finished before the stop returned
            done, seen = failures[0], len(other)
            await anyio.sleep(0.1)
            assert failures[0] == done and events[-1] == "out"  # nothing of the group runs after
            assert len(other) > seen  # the daemon's other tasks go on
            assert sup.failures[Kind.BUS] >= 2  # counted with the daemon's
            # each failure audited as the daemon's, with its clock (a service audits every failure)
            assert audits and {(a.action, a.detail, a.at) for a in audits} == {("task.bus", "failing: RuntimeError: NATS away", 7.0)}
            with pytest.raises(RuntimeError, match="^group federation bus is stopping"):  # the group named
                group.spawn(Kind.BUS, failing)
            await group.stop()  # twice: the same end
            tg.cancel_scope.cancel()

    run(main)


def test_a_task_spawned_into_an_open_group_runs_as_the_supervisor_would_start_it() -> None:
    """Claim: a spawn into a group that is already open starts at once with everything it was given:
    its arguments, a loop's period, a one-shot's failure handler and its name (or, unnamed, its
    function's name) in the audit. Kills Group.spawn 1, 3, 4, 13-15, 18-21, 24 and _opened 1
    (fourth mutation run: the group test spawned only before the group opened)."""
    seen: list[str] = []
    handled: list[str] = []
    audits: list[Audit] = []

    async def audit(record: Audit) -> None:
        audits.append(record)

    async def tick(word: str) -> None:
        seen.append(word)

    async def fails(word: str) -> None:
        raise RuntimeError(word)

    async def on_error(exc: Exception) -> None:
        handled.append(str(exc))

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            sup = Supervisor(tg, audit=audit, clock=lambda: 3.0, backoff_scale=0.01)
            group = sup.group("bus")
            group.spawn(Kind.TICK, tick, "early", every=0.01, name="early tick")  # before it opened
            await anyio.sleep(0.05)
            group.spawn(Kind.TICK, tick, "late", every=0.01, name="late tick")
            group.spawn(Kind.GUARD, fails, "boom", name="guard %1", on_error=on_error)
            group.spawn(Kind.GUARD, fails, "bang", on_error=on_error)  # unnamed: its function's name
            await anyio.sleep(0.1)
            await group.stop()
            tg.cancel_scope.cancel()

    run(main)
    assert seen.count("late") >= 3 and seen.count("early") >= 3  # each loop ran with its argument, at its period
    assert sorted(handled) == ["bang", "boom"]
    details = sorted(a.detail for a in audits)
    assert details[0] == "guard %1: RuntimeError: boom"
    assert details[1].endswith("fails: RuntimeError: bang") and "XXXX" not in details[1]


def test_a_failure_counts_one_a_bug_keeps_its_traceback_and_an_audit_without_a_clock_is_at_zero(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Claim: one failure adds one to its kind's count; a bug (TransitionNotAllowed) is logged as an
    error carrying its traceback; with an audit sink and no clock the failure is audited at 0.0; the
    audit's detail is cut at 500 characters. Kills _failed 3, 8, 13, 35, 36, 39 (fifth mutation run)."""
    audits: list[Audit] = []
    bug = TransitionNotAllowed("message", "delivered", "guard_pass")

    async def audit(record: Audit) -> None:
        audits.append(record)

    async def buggy() -> None:
        raise bug

    async def long_failure() -> None:
        raise RuntimeError("x" * 600)

    async def handled(exc: Exception) -> None:
        pass

    async def main() -> Supervisor:
        async with anyio.create_task_group() as tg:
            sup = Supervisor(tg, audit=audit)  # no clock
            sup.spawn(Kind.GUARD, buggy, on_error=handled, name="guard %1")
            sup.spawn(Kind.BIND, long_failure, on_error=handled, name="bind %2")
        return sup

    with caplog.at_level(logging.WARNING, logger="connectd.supervisor"):
        sup = anyio.run(main)
    assert sup.failures[Kind.GUARD] == 1 and sup.failures[Kind.BIND] == 1
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and errors[0].exc_info is not None and errors[0].exc_info[1] is bug
    assert sorted((a.action, a.at) for a in audits) == [("task.bind", 0.0), ("task.guard", 0.0)]
    detail = next(a.detail for a in audits if a.action == "task.bind")
    assert len(detail) == 500 and detail.startswith("bind %2: RuntimeError: xxx")


def test_a_service_that_ran_a_while_starts_a_new_streak_from_the_first_wait_at_the_tests_scale() -> None:
    """Claim: under a backoff scale (here 0.5) a service's waits are the policy's times the scale, up to
    backoff_max times the scale, and one that ran at least that long before failing starts again after
    the first wait. Kills _service 23, 25, 34 (fifth mutation run: at the daemon's scale 1, `*` and `/`
    agree)."""
    import trio
    import trio.testing

    starts: list[float] = []

    async def service() -> None:
        starts.append(trio.current_time())
        if len(starts) == 4:
            await trio.sleep(30.0)  # EXPORT's backoff_max (60) times the scale
        raise ConnectionError("collector away")

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            Supervisor(nursery, backoff_scale=0.5).spawn(Kind.EXPORT, service, name="exporter")  # type: ignore[arg-type]
            await trio.sleep(130.0)
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    # the new streak after the long run doubles from 0.5 to the cap, 30
    assert [round(t, 6) for t in starts] == [0.0, 0.5, 1.5, 3.5, 34.0, 35.0, 37.0, 41.0, 49.0, 65.0, 95.0, 125.0]


def test_an_unnamed_until_done_call_is_audited_by_its_function_s_name_or_its_repr() -> None:
    """Claim: a failure of ``until_done`` called without a name is audited under the function's
    qualified name, or, for a callable without one (a partial), its repr. Kills until_done 7-15
    (fifth mutation run: the daemon names every call)."""
    import functools

    audits: list[Audit] = []
    tries: list[int] = []

    async def audit(record: Audit) -> None:
        audits.append(record)

    async def flaky(word: str) -> str:
        tries.append(1)
        if len(tries) % 2:
            raise OSError(word)
        return word

    async def main() -> list[str]:
        async with anyio.create_task_group() as tg:
            sup = Supervisor(tg, audit=audit, clock=lambda: 2.0, backoff_scale=0.001)
            first = await sup.until_done(Kind.START, flaky, "once")
            second = await sup.until_done(Kind.START, functools.partial(flaky, "twice"))
        return [first, second]

    assert anyio.run(main) == ["once", "twice"]
    details = [a.detail for a in audits]
    assert details[0] == f"{flaky.__qualname__}: OSError: once"
    assert details[1].startswith("functools.partial(<function ") and details[1].endswith(": OSError: twice")


def test_until_done_waits_double_to_the_cap_and_the_streak_is_audited_at_its_first_failure() -> None:
    """Claim: ``until_done`` waits the policy's backoff times the scale after its first failure, doubling
    up to backoff_max times the scale, and audits the streak once, at its first failure. Kills
    until_done 23, 24, 37-39 (fifth mutation run: the test above failed twice, audited once either way)."""
    import trio

    tries: list[float] = []

    async def first_look() -> str:
        tries.append(trio.current_time())
        if len(tries) < 7:
            raise OSError("tmux is not answering yet")
        return "looked"

    looked, audits = _on_mock_clock(lambda sup: sup.until_done(Kind.START, first_look, name="first look"))
    assert looked == "looked"
    # START: backoff 1, backoff_max 30, times 0.5: waits 0.5, 1, 2, 4, 8, then 15 (the cap)
    assert [round(t, 6) for t in tries] == [0.0, 0.5, 1.5, 3.5, 7.5, 15.5, 30.5]
    assert [(a.action, a.at) for a in audits] == [("task.start", 0.0)]


def test_a_failing_loop_waits_double_to_the_cap_and_audits_its_streak_at_the_first_failure() -> None:
    """Claim: a loop whose body raises waits the policy's backoff times the scale, doubling up to
    backoff_max times the scale, audits the streak once at its first failure, and once the body
    succeeds runs at its period again. Kills _loop 10, 23-25 (fifth mutation run)."""
    import trio

    rounds: list[float] = []

    async def body() -> None:
        rounds.append(trio.current_time())
        if len(rounds) < 7:
            raise OSError("tmux went away")

    async def use(sup: Supervisor) -> None:
        sup.spawn(Kind.WATCH, body, every=2.0, name="poll")
        await trio.sleep(33.0)

    _, audits = _on_mock_clock(use)
    # WATCH: backoff 1, backoff_max 30, times 0.5: waits 0.5, 1, 2, 4, 8, 15; then its period, 2
    assert [round(t, 6) for t in rounds] == [0.0, 0.5, 1.5, 3.5, 7.5, 15.5, 30.5, 32.5]
    assert [(a.action, a.at) for a in audits] == [("task.watch", 0.0)]


def test_a_loop_that_recovers_starts_a_new_streak_audited_again_from_the_first_wait() -> None:
    """Claim: once a failing loop's body succeeds, its next failure starts a new streak: audited again,
    and waited from the scaled backoff. Kills _loop 38, 39 (fifth mutation run)."""
    import trio

    rounds: list[float] = []

    async def body() -> None:
        rounds.append(trio.current_time())
        if len(rounds) in (1, 3):
            raise OSError(f"round {len(rounds)}")

    async def use(sup: Supervisor) -> None:
        sup.spawn(Kind.WATCH, body, every=2.0, name="poll")
        await trio.sleep(5.5)

    _, audits = _on_mock_clock(use)
    assert [round(t, 6) for t in rounds] == [0.0, 0.5, 2.5, 3.0, 5.0]
    assert [(a.detail, a.at) for a in audits] == [("poll: OSError: round 1", 0.0), ("poll: OSError: round 3", 2.5)]


def test_an_unnamed_spawn_is_audited_by_its_function_s_name_or_its_repr() -> None:
    """Claim: a task spawned without a name is audited under its function's qualified name, or, for a
    callable without one (a partial), its repr. Kills spawn 1, 13, 16, 19 (fifth mutation run: the
    group test names its tasks through Group.spawn, which always passes a name)."""
    import functools

    audits: list[Audit] = []

    async def audit(record: Audit) -> None:
        audits.append(record)

    async def fails(word: str) -> None:
        raise RuntimeError(word)

    async def handled(exc: Exception) -> None:
        pass

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            sup = Supervisor(tg, audit=audit, clock=lambda: 1.0)
            sup.spawn(Kind.GUARD, fails, "plain", on_error=handled)
            sup.spawn(Kind.GUARD, functools.partial(fails, "partial"), on_error=handled)

    anyio.run(main)
    details = sorted(a.detail for a in audits)
    assert details[0].startswith("functools.partial(<function ") and details[0].endswith(": RuntimeError: partial")
    assert details[1] == f"{fails.__qualname__}: RuntimeError: plain"


def test_an_until_done_kind_cannot_be_spawned_and_the_refusal_says_so() -> None:
    """Claim: spawning a kind whose shape is until_done is refused with a ValueError that names the
    kind and says to await until_done() instead. Kills _checked 10 (fifth mutation run)."""

    async def body() -> None:
        pass

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            with pytest.raises(ValueError, match=r"^start is until_done: await until_done\(\) instead$"):
                Supervisor(tg).spawn(Kind.START, body)

    run(main)


def _on_mock_clock(use: Any, *, scale: float = 0.5) -> tuple[Any, list[Audit]]:
    """``use(supervisor)`` run on trio's mock clock, with a supervisor at that backoff scale whose
    clock is the mock one; returns what ``use`` returned and the audit records."""
    import trio
    import trio.testing

    audits: list[Audit] = []

    async def audit(record: Audit) -> None:
        audits.append(record)

    async def main() -> Any:
        async with trio.open_nursery() as nursery:
            sup = Supervisor(nursery, audit=audit, clock=trio.current_time, backoff_scale=scale)  # type: ignore[arg-type]
            result = await use(sup)
            nursery.cancel_scope.cancel()
            return result

    return trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0)), audits
