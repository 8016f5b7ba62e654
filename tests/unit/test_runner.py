"""The core runner's group commit, on a real SQLite store: records that arrive together share one
durable commit, no step is answered before its records are durable, and a failed commit undoes
every step decided on top of it."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from connectcore import hub as H
from connectcore.effects import Audit
from connectcore.grants import PRESET_SCOPES, Preset
from connectd.daemon.runner import CoreRunner, records_of
from connectd.store.store import Store, StoreError, hash_token

SCOPES = PRESET_SCOPES[Preset.COLLABORATE]


def launch(n: int) -> H.Launch:
    return H.Launch(1000.0 + n, hash_token(f"tok-{n}"), f"p-{n}", "claude", f"%{n}", 100 + n, f"inc-{n}", SCOPES)


def audit_rows(path: Path) -> int:
    """Counted through a second connection: what is durable, not what the writer's connection sees."""
    with sqlite3.connect(path) as db:
        return int(db.execute("SELECT count(*) FROM audit").fetchone()[0])


class GatedWrites:
    """run_sync for the store: each write waits for the gate, so steps pile up behind the first one."""

    def __init__(self) -> None:
        self.gate = anyio.Event()
        self.writes: list[int] = []

    async def __call__(self, fn: Callable[..., Any], *args: Any) -> Any:
        await self.gate.wait()
        self.writes.append(len(args[0]) if args and isinstance(args[0], tuple) else 0)
        return fn(*args)


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store.open(tmp_path)


def test_steps_that_arrive_together_share_one_commit(store: Store) -> None:
    """Claim: ten launches stepped while a commit is held back are written by at most two commits."""
    gated = GatedWrites()
    runner = CoreRunner(store, store.load_hub(0.0), run_sync=gated)

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            for n in range(10):
                tg.start_soon(runner.step, launch(n))
            await anyio.sleep(0.01)
            gated.gate.set()

    anyio.run(main)
    assert len(runner.hub.book.principals) == 10
    assert 1 <= runner.commits <= 2, gated.writes
    assert len(store.load_hub(0.0).book.principals) == 10


def test_a_step_answers_only_once_its_records_are_durable(store: Store) -> None:
    """Claim: when step() returns, its audit record is readable through another connection."""
    runner = CoreRunner(store, store.load_hub(0.0))

    async def main() -> None:
        for n in range(3):
            before = audit_rows(store.path)
            effects = await runner.step(launch(n))
            assert audit_rows(store.path) == before + sum(isinstance(e, Audit) for e in effects) > before

    anyio.run(main)


def test_a_refusal_is_audited_durably_before_it_is_raised(store: Store) -> None:
    """Claim: a CallRefused leaves its audit record durable, and no other change."""
    runner = CoreRunner(store, store.load_hub(0.0))
    submit = H.Submit(1.0, hash_token("nobody"), "m1", "hi", H.Recipient("%1", "inc-1", "claude"), "r1", "c1")

    async def main() -> None:
        before = runner.hub
        with pytest.raises(H.CallRefused):
            await runner.step(submit)
        assert runner.hub is before
        assert audit_rows(store.path) == 1

    anyio.run(main)


class FailingStore:
    """The real store, but the commit with ``fail_at`` (0-based) raises instead of writing."""

    def __init__(self, store: Store, fail_at: int) -> None:
        self.store, self.fail_at, self.calls = store, fail_at, 0

    def apply(self, effects: Any) -> None:
        self.calls += 1
        if self.calls - 1 == self.fail_at:
            raise StoreError("disk full (simulated)")
        self.store.apply(effects)


def test_a_failed_commit_undoes_its_steps_and_the_steps_decided_on_top_of_them(store: Store) -> None:
    """Claim: after a failed commit the hub equals the last durable state, every step of the failed
    batch and of the batch gathered on top of it raised, and later steps commit normally."""
    failing = FailingStore(store, fail_at=1)
    gated = GatedWrites()
    runner = CoreRunner(failing, store.load_hub(0.0), run_sync=gated)
    outcomes: dict[int, str] = {}

    async def one(n: int) -> None:
        try:
            await runner.step(launch(n))
            outcomes[n] = "ok"
        except StoreError:
            outcomes[n] = "failed"

    async def main() -> None:
        gated.gate.set()
        await one(0)  # commit 0: durable
        gated.gate = anyio.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(one, 1)  # commit 1 (it will fail) is taken and held at the gate
            await anyio.sleep(0.01)
            for n in (2, 3):  # decided on top of step 1 while its commit is in flight
                tg.start_soon(one, n)
            await anyio.sleep(0.01)
            assert len(runner.hub.book.principals) == 4
            gated.gate.set()
        await one(4)

    anyio.run(main)
    assert outcomes[0] == "ok" and outcomes[4] == "ok"
    assert {outcomes[n] for n in (1, 2, 3)} == {"failed"}
    durable = store.load_hub(0.0).book.principals
    assert set(durable) == {"p-0", "p-4"} == set(runner.hub.book.principals)


def test_the_durable_hub_lags_the_working_hub_by_the_steps_whose_commit_is_in_flight(store: Store) -> None:
    """Claim: ``durable`` holds only what is written (what a restart recovers) while a commit is held
    back, catches up once it is written, and a failed commit leaves it where it was."""
    failing = FailingStore(store, fail_at=1)
    gated = GatedWrites()
    runner = CoreRunner(failing, store.load_hub(0.0), run_sync=gated)

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(runner.step, launch(0))
            await anyio.sleep(0.01)
            assert set(runner.hub.book.principals) == {"p-0"} and not runner.durable.book.principals
            gated.gate.set()
        assert runner.durable is runner.hub
        assert set(runner.durable.book.principals) == set(store.load_hub(0.0).book.principals) == {"p-0"}
        with pytest.raises(StoreError):
            await runner.step(launch(1))  # the second write fails
        assert set(runner.durable.book.principals) == {"p-0"} == set(runner.hub.book.principals)

    anyio.run(main)


def test_callers_that_arrive_together_share_one_commit_without_help(store: Store) -> None:
    """Claim: ten audits started at once are written by one commit, with no gate holding the first
    write back (the leader lets the callers already runnable join its batch before taking it; with the
    locks' fast path and no such yield the first caller wrote alone: two commits for ten)."""
    runner = CoreRunner(store, store.load_hub(0.0))

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            for n in range(10):
                tg.start_soon(runner.audit, Audit("bench", "read", "ok", detail=str(n), at=1000.0))

    anyio.run(main)
    assert runner.commits == 1
    assert audit_rows(store.path) == 10


def test_a_step_without_records_waits_for_the_batch_being_written(store: Store) -> None:
    """Claim: while a commit is in flight, a step that adds no records of its own neither returns nor
    moves ``durable`` before that commit is written (it was decided on the state the commit makes real)."""
    gated = GatedWrites()
    runner = CoreRunner(store, store.load_hub(0.0), run_sync=gated)
    done: list[str] = []

    async def step(name: str, event: H.Event) -> None:
        effects = await runner.step(event)
        done.append(name)
        if name == "tick":
            assert not records_of(effects)  # a step with no records of its own

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(step, "launch", launch(0))
            await anyio.sleep(0.01)  # the launch's commit is taken and held at the gate
            tg.start_soon(step, "tick", H.Tick(1000.5))
            await anyio.sleep(0.01)
            assert done == [] and not runner.durable.book.principals
            gated.gate.set()
        assert sorted(done) == ["launch", "tick"]
        assert set(runner.durable.book.principals) == {"p-0"}

    anyio.run(main)
    assert len(gated.writes) == 1 and runner.commits == 1  # one commit, the launch's: the tick wrote nothing


def test_each_commit_is_counted(store: Store) -> None:
    """Claim: ``commits`` counts durable commits: three steps one after another, three commits."""
    runner = CoreRunner(store, store.load_hub(0.0))

    async def main() -> None:
        for n in range(3):
            await runner.step(launch(n))

    anyio.run(main)
    assert runner.commits == 3
