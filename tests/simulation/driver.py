"""The simulation driver: the real daemon, a simulated world, a seeded schedule, faults, kills.

One :class:`Sim` is one run of one seed (after FoundationDB's simulation and TigerBeetle's VOPR):

- the REAL :class:`connectd.daemon.parts.Engine` (watcher, delivery I/O, interpreter, restarter,
  supervisor, runner) and the REAL :class:`connectd.store.store.Store` on a SQLite file in a tmp dir, run
  on trio with ``trio.testing.MockClock(autojump_threshold=0)``: time is virtual and jumps to the
  next deadline whenever every task waits, so an hour of daemon life takes a fraction of a second;
- trio's own scheduler is made deterministic and seeded (the batch order of runnable tasks is the
  seed's), the engine's ids come from the seed (:class:`SeededIds`), store calls run synchronously:
  the same seed replays the same run exactly (:attr:`Sim.trace` is its fingerprint);
- a seeded schedule: agents' calls (send, get), the person's calls (approve/decline cards, grants,
  revoke, disconnect-all, restart-to-connect, launches), the person at the keyboard (drafts, menus,
  own prompts, titles), panes that die or are respawned by someone else;
- faults at every I/O boundary (:class:`SimFaults`): a tmux call fails, a pane exits just before a
  call, a paste is lost, the store raises, and the daemon is killed at a chosen I/O call and started
  again on the same data directory;
- invariants (:mod:`tests.simulation.invariants`) after every step, and liveness once the schedule
  quiesces (faults off, the person answers every card and clears every composer).
"""

from __future__ import annotations

import logging
import os
import random
import re
import sqlite3
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import trio
import trio.testing

from connectcore import grants
from connectcore._machine import ConnectError
from connectcore.consent import Decision
from connectcore.delivery import Limits, MessageState
from connectcore.grants import Preset
from connectd.daemon.ids import EngineError, Ids, hash_token
from connectd.daemon.parts import Engine, Timing
from connectd.store.store import Store
from connectd.tmux.adapter import TmuxError
from connectd.tmux.release_probe import NoProbe
from tests.simulation import invariants
from tests.simulation.sim_tmux import Faults, SimServer, SimTmux

BASE_TIME = 1_800_000_000.0


def daemon_clock(sim: Sim) -> Callable[[], float]:
    """The daemon's clock, as connectd.daemon.clock.LifeClock makes it: the wall clock read once at the start,
    advanced by the monotonic clock (trio's), so a wall step during a life changes nothing in it; a
    step made meanwhile shows at the next start."""
    wall_at_start, mono_at_start = sim.wall(), trio.current_time()
    return lambda: wall_at_start + (trio.current_time() - mono_at_start)
BODY = re.compile(r"simmsg-\d+")
# liveness: a run (one box's or several boxes') ends within this much virtual time, ten times the longest
# seen (about 1,200 s, a box down 15 minutes); past it the run fails at once, which also catches a run
# whose every task waits with no deadline left (trio's mock clock then jumps straight to this one)
RUN_BOUND = 3 * 3600.0
STATS: dict[str, Any] = {
    "seeds": 0,
    "steps": 0,
    "io": 0,
    "kills": 0,
    "seconds": 0.0,
    "known": {},
}  # for the summary
EXPECTED_ERRORS: tuple[type[BaseException], ...] = (EngineError, ConnectError, TmuxError, sqlite3.Error)


EFFECT_OPS = frozenset({"paste_text", "enter_once", "press_enter", "set_pane_option", "respawn", "new_window"})


class StoreFault(sqlite3.OperationalError):
    """A simulated store failure (disk I/O error)."""


class SeededIds(Ids):
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def new_token(self) -> str:
        return "ct_" + "".join(self.rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(32))

    def new_id(self, prefix: str) -> str:
        return f"{prefix}-{self.rng.getrandbits(48):012x}"

    def new_uuid(self) -> str:
        h = f"{self.rng.getrandbits(128):032x}"
        return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-a{h[17:20]}-{h[20:32]}"


@dataclass
class Config:
    steps: int = 60  # schedule actions before quiescence
    agents: int = 3  # launched at the start (connected, collaborate)
    gap: float = 2.0  # mean virtual seconds between actions
    tmux_fail: float = 0.01  # a tmux call fails
    pane_exit: float = 0.002  # the pane exits just before a call on it
    lost_paste: float = 0.02
    store_fail: float = 0.005  # Store.apply raises
    person_race: float = 0.15  # "buggify": the person acts on a pane just as the daemon takes its send lock
    replace_race: float = 0.1  # "buggify": someone respawns the pane (same %N) as the daemon takes its lock to deliver
    kills: float = 0.03  # per action: the daemon will be killed at one of the next I/O calls
    quiet: float = 240.0  # liveness: virtual seconds of quiescence after which everything is final
    limits: Limits = field(default_factory=lambda: Limits(card_ttl=120.0, id_ttl=900.0))
    cap: Preset = Preset.COLLABORATE
    swarm: bool = True  # swarm testing: each seed turns some actions off and scales the faults
    # the control role among the senders: a control agent launched at setup, which may message agents
    # that hold no token (launched Off), so a message or card can be open for a tokenless incarnation
    # (off by default: turning it on changes every seed's schedule)
    control: bool = False
    wall_step: float = 0.03  # per action: the wall clock is stepped (NTP, a person, a VM resumed)
    weights: dict[str, float] = field(
        default_factory=lambda: {
            "send": 10,
            "get": 2,
            "decide": 6,
            "revoke": 0.5,
            "disconnect_all": 0.1,
            "grant": 0.7,
            "restart": 1.2,
            "launch": 1.0,
            "draft": 2,
            "clear": 2,
            "prompt": 2,
            "menu": 1,
            "answer": 1,
            "title": 1,
            "exit": 0.4,
            "replace": 0.3,
            "kill": 0,
            "wait": 3,
            "list": 1,
            "detail": 0.5,
            "preset": 0.5,
        }
    )


class Violation(AssertionError):
    pass


async def bounded(run: Callable[[], Awaitable[None]]) -> None:
    """``run()``, failed at ``RUN_BOUND`` of virtual time (the liveness bound of a whole run)."""
    try:
        with trio.fail_after(RUN_BOUND):
            await run()
    except trio.TooSlowError:
        raise AssertionError(
            f"liveness: the run did not end within {RUN_BOUND:.0f} s of virtual time (a start that never "
            "finishes, or a wait that nothing ends)"
        ) from None


class SimFaults(Faults):
    def __init__(self, sim: Sim) -> None:
        self.sim = sim
        self.on = True
        self.kill_in: int | None = None  # kill the daemon at this many more I/O calls

    def before(self, view: SimTmux, op: str, pane_id: str | None) -> None:
        sim = self.sim
        sim.io_calls += 1
        at_effect = self.kill_in is not None and op in EFFECT_OPS and sim.frng.random() < 0.4
        if self.countdown() or at_effect:  # a pending kill prefers an effect: a paste, an Enter, a respawn
            self.kill_in = None
            sim.kill(f"tmux {op} {pane_id or ''}")
            return
        if not self.on:
            return
        rng, cfg = sim.frng, sim.cfg
        if pane_id is not None and op != "respawn" and rng.random() < cfg.pane_exit:
            sim.log(f"fault: {pane_id} exits before {op}")
            sim.server.agent_exits(pane_id)
        if op != "server_running" and rng.random() < cfg.tmux_fail:
            sim.log(f"fault: tmux {op} {pane_id} fails")
            raise TmuxError(f"simulated failure of {op}")

    def after(self, view: SimTmux, op: str, pane_id: str | None) -> None:
        """A pending kill may land just after a paste or an Enter reached the pane."""
        if self.kill_in is not None and self.sim.frng.random() < 0.4:
            self.kill_in = None
            self.sim.kill(f"just after tmux {op} {pane_id}")

    def on_lock(self, pane_id: str) -> None:
        """ "Buggify": the person acts on a pane just as the daemon takes its send lock."""
        sim = self.sim
        if self.on and self._guarding(pane_id) and sim.rrng.random() < sim.cfg.replace_race:
            sim.log(f"fault: {pane_id} is respawned (same %N, a new incarnation) just as the daemon takes its send lock")
            sim.server.replace_process(pane_id, resume=True)
            return
        if not self.on or sim.frng.random() >= sim.cfg.person_race:
            return
        what = sim.frng.choice(["draft", "menu", "prompt"])
        sim.log(f"fault: the person acts ({what}) on {pane_id} just as the daemon takes its send lock")
        if what == "draft":
            sim.server.person_types(pane_id, "wip")
        elif what == "menu":
            sim.server.open_menu(pane_id)
        else:
            sim.server.person_submits(pane_id, "person's own prompt", round(sim.frng.uniform(0.5, 10.0), 2))

    def _guarding(self, pane_id: str) -> bool:
        """A message for the pane is being guarded: this lock is the delivery's."""
        engine = self.sim.engine
        return engine is not None and any(
            m.recipient_pane == pane_id and m.state is MessageState.GUARDING for m in engine.hub.messages.values()
        )

    def countdown(self) -> bool:
        """One more I/O call: True when the daemon is to be killed at this one."""
        if self.kill_in is None:
            return False
        self.kill_in -= 1
        if self.kill_in > 0:
            return False
        self.kill_in = None
        return True

    def lost_paste(self, pane_id: str) -> bool:
        lost = self.on and self.sim.frng.random() < self.sim.cfg.lost_paste
        if lost:
            self.sim.log(f"fault: paste into {pane_id} lost")
        return lost


class SimStore:
    """The real store, with a fault point at every write, and dead once its daemon is killed."""

    def __init__(self, sim: Sim, store: Store, generation: int) -> None:
        self._sim, self._store, self._generation = sim, store, generation

    def apply(self, effects: Any) -> None:
        sim = self._sim
        effects = tuple(effects)
        if not effects:
            return self._store.apply(effects)
        if sim.server.generation != self._generation:
            raise StoreFault("the daemon was killed")  # it runs no more: nothing more is written
        sim.io_calls += 1
        if sim.faults.countdown():  # killed at this write: before or after its commit
            if sim.frng.random() < 0.5:
                self._store.apply(effects)
            sim.kill("store apply")
            raise StoreFault("the daemon was killed")
        if sim.fail_next_applies and (sim.fail_applies_of is None or sim.fail_applies_of(effects)):  # scripted
            sim.fail_next_applies -= 1
            sim.log("fault: store apply fails (scripted)")
            raise StoreFault("disk I/O error (simulated)")
        if sim.faults.on and sim.frng.random() < sim.cfg.store_fail:
            sim.log("fault: store apply fails")
            raise StoreFault("disk I/O error (simulated)")
        return self._store.apply(effects)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


@dataclass
class Sent:
    body: str
    token: str
    message_id: str
    to: str
    answer: dict[str, Any] | None = None
    life: int = 0  # the daemon's life (its start count) the send was called in: its message's created_at is that life's clock


class Sim:
    def __init__(self, seed: int, data_dir: Path, cfg: Config | None = None) -> None:
        self.seed = seed
        self.cfg = replace(cfg) if cfg is not None else Config()
        self.rng = random.Random(seed)  # the schedule
        self.frng = random.Random(seed * 7919 + 1)  # the faults
        # the same-%N replacement race: its own stream, so adding it left every other draw of a seed as it was
        self.rrng = random.Random(seed * 104729 + 3)
        # wall-clock steps: their own stream, so the schedule's draws stay as they were
        self.wrng = random.Random(seed * 1299709 + 5)
        self.wall_offset = 0.0  # how far the machine's wall clock is from the true timeline
        self.ids = SeededIds(random.Random(seed * 104729 + 2))
        self.data_dir = data_dir
        self.server = SimServer(self.now)
        self.arng = random.Random(seed * 15485863 + 3)  # the agents' quick turns and slow starts
        self.server.turn_length = self._turn_length
        self.server.start_delay = lambda: round(self.arng.uniform(0.05, 2.0), 2) if self.arng.random() < 0.3 else 0.0
        self.server.exit_delay = lambda: round(self.rng.uniform(0.2, 8.0), 2)
        self.faults = SimFaults(self)
        self.server.faults = self.faults
        self.engine: Engine | None = None
        self.store: Store | None = None
        self._scope: trio.CancelScope | None = None
        self._calls: trio.Nursery | None = None
        self._ended: trio.Event | None = None
        self._nursery: trio.Nursery | None = None
        self.trace: list[str] = []
        self.violations: list[str] = []
        self.kinds: list[
            str
        ] = []  # the kind of each violation (invariants.KNOWN_DEFECTS names the known ones)
        self.sent: dict[str, Sent] = {}
        # this driver's first message body is simmsg-{first_body}: a box of several gives each its own
        # range (federation_driver.BoxSim), since a local message may cross to another box and each
        # box's checker counts typings by body
        self.first_body = 1
        self.addresses: dict[str, str] = {}
        self.fail_next_applies = 0  # scenarios: the next N non-empty store writes raise
        self.fail_applies_of: Callable[[tuple[Any, ...]], bool] | None = None  # ... only the writes it picks
        self.started = False  # the last start reached serving
        self.seq = 0  # logical time: bumped at every recorded event
        self.steps = 0
        self.io_calls = 0
        self.kills = 0
        self.starts = 0
        self.checker = invariants.Checker(self)
        self.server.on_output = self._output
        self.server.later = self._later
        self.hooks: dict[str, Callable[..., Any]] = {}  # scenarios inject behaviour here
        if self.cfg.swarm and seed:
            self.swarm(random.Random(seed * 31 + 3))

    def swarm(self, rng: random.Random) -> None:
        """Swarm testing (Groce et al., 2012): a seed's own mix of actions and fault rates, so that some
        seeds hammer one thing (many restarts, no kills, ...) instead of every seed averaging all."""
        cfg = self.cfg
        always = {"send", "decide", "wait"}
        cfg.weights = {
            k: (0.0 if k not in always and rng.random() < 0.25 else w * rng.choice([0.5, 1.0, 2.0]))
            for k, w in cfg.weights.items()
        }
        scale = {
            k: rng.choice([0.0, 0.5, 1.0, 2.0])
            for k in ("tmux_fail", "pane_exit", "lost_paste", "store_fail", "kills", "person_race")
        }
        for name, factor in scale.items():
            setattr(cfg, name, getattr(cfg, name) * factor)
        self.trace.append(f"swarm: weights {cfg.weights}; faults x{scale}")

    # --- time and the record ----------------------------------------------------------------------

    def _turn_length(self) -> float:
        """A turn of 0.3 to 15 s, or one time in four a quick one: 20 to 300 ms, or none at all (the
        answer drawn with the prompt), which the daemon's confirmation never sees busy (issue 12: it
        sees the answer instead). The schedule's stream draws the same numbers either way."""
        turn = round(self.rng.uniform(0.3, 15.0), 2)
        if self.arng.random() < 0.25:
            return 0.0 if self.arng.random() < 0.5 else round(self.arng.uniform(0.02, 0.3), 2)
        return turn

    def now(self) -> float:
        """The true timeline (the checker's, the simulated tmux server's): never stepped."""
        return BASE_TIME + trio.current_time()

    def wall(self) -> float:
        """The machine's wall clock: the true timeline plus every step made so far."""
        return self.now() + self.wall_offset

    def step_wall(self) -> None:
        """A wall-clock step of seconds to hours, back or forward (issue 22 item 2)."""
        if self.wrng.random() < self.cfg.wall_step:
            step = self.wrng.choice([-7200.0, -3600.0, -120.0, -30.0, -2.0, 2.0, 30.0, 120.0, 3600.0])
            self.wall_offset += step
            self.log(f"fault: the wall clock steps {step:+g} s")

    def log(self, line: str) -> None:
        self.seq += 1
        self.trace.append(f"{trio.current_time():10.3f} {line}")

    def violate(self, what: str, kind: str = "") -> None:
        self.log(f"VIOLATION {what}")
        self.violations.append(what)
        self.kinds.append(kind or "other")

    # --- the daemon's life ------------------------------------------------------------------------

    def run_sync_of(self, generation: int) -> Callable[..., Awaitable[Any]]:
        """Store calls run synchronously (a scheduling point first); a killed daemon's park."""

        async def run_sync(fn: Callable[..., Any], *args: Any) -> Any:
            await trio.lowlevel.checkpoint()
            if self.server.generation != generation:
                await self.server.park()
            return fn(*args)

        return run_sync

    async def start_daemon(self) -> None:
        assert self._nursery is not None
        view = self.server.view()
        generation = self.server.generation
        self.store = Store.open(self.data_dir)
        store = SimStore(self, self.store, generation)
        engine = Engine(
            store,
            view,
            endpoint_url="http://127.0.0.1:9/mcp",
            limits=self.cfg.limits,
            cap=self.cfg.cap,
            timing=Timing(),
            clock=daemon_clock(self),
            ids=self.ids,
            run_sync=self.run_sync_of(generation),
            release_probe=NoProbe(),  # its panes' processes are not real: the banner names their release
        )
        if os.environ.get("SIM_VERBOSE") == "1":
            self._trace_steps(engine)
        self.engine = engine
        first_look: set[str] = set()  # the incarnations the daemon's first look found (what it reconciles with)
        reconcile = engine.watcher.reconcile

        async def reconcile_after_first_look() -> None:
            first_look.update(record.token for record in engine.watcher.directory.panes.values())
            await reconcile()

        engine.watcher.reconcile = reconcile_after_first_look  # type: ignore[method-assign]
        self.starts += 1
        self.log(f"daemon start #{self.starts}")
        self.started = False
        await self._nursery.start(self._life, engine)
        if self.started:
            self.checker.after_start(engine, first_look)
        elif self.server.generation == generation:  # failed to start (not killed): started again later
            self.engine = None
            self._nursery.start_soon(self._restart_after_kill, None)

    def _trace_steps(self, engine: Engine) -> None:
        """SIM_VERBOSE=1: every core step in the trace (event, then the effects' types, or what it raised)."""
        step = engine.runner.step

        async def traced(event: Any) -> Any:
            name = type(event).__name__
            try:
                effects = await step(event)
            except Exception as exc:
                self.log(f"  step {name} raised {exc!r}"[:300])
                raise
            if name != "Tick" or effects:
                self.log(f"  step {event!r}"[:300] + f" -> {[type(e).__name__ for e in effects]}")
            return effects

        engine.runner.step = traced  # type: ignore[method-assign]

    async def _life(self, engine: Engine, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        scope = trio.CancelScope()
        ended = trio.Event()
        self._scope, self._ended = scope, ended
        started = False
        try:
            with scope:
                async with trio.open_nursery() as calls:
                    self._calls = calls
                    await calls.start(engine.run)
                    started = self.started = True
                    task_status.started()
        except Exception as exc:  # the daemon ended: a violation unless a fault killed its start
            if started:
                self.violate(f"the daemon ended: {type(exc).__name__}: {exc!r}"[:400])
            else:  # during startup (Recover, the first poll, reconcile, restarts)
                self.violate(f"the daemon failed to start: {exc!r}"[:300], kind="start_fails")
        finally:
            if self._scope is scope:
                self._calls = None
            ended.set()
            if not started:  # failed or killed while starting
                task_status.started()

    def _output(self, pane_id: str) -> None:
        if self.engine is not None:
            self.engine.watcher.mark_output(pane_id)

    def _later(self, at: float, fn: Callable[[], None]) -> None:
        async def timer() -> None:
            await trio.sleep_until(at - BASE_TIME)
            fn()

        if self._nursery is not None:
            self._nursery.start_soon(timer)

    def kill(self, where: str) -> None:
        """Kill the daemon at this point (as SIGKILL would): its view and store go dead at once."""
        if self._scope is None or self.engine is None:
            return
        self.kills += 1
        self.log(f"KILL at {where}")
        self.server.generation += 1  # every call of the old view parks; the old store refuses writes
        self._scope.cancel()
        self.engine, self._calls = None, None
        assert self._nursery is not None
        self._nursery.start_soon(self._restart_after_kill, self._ended)

    async def _restart_after_kill(self, ended: trio.Event | None) -> None:
        if ended is not None:  # as after SIGKILL, the successor does not wait for a call the killed
            with trio.move_on_after(1.0):  # daemon shields from cancellation (it is parked for good)
                await ended.wait()
        if self.store is not None:
            self.store.close()
        await trio.sleep(round(self.rng.uniform(0.1, 5.0), 2))
        await self.start_daemon()

    def call(
        self, name: str, fn: Callable[[Engine], Awaitable[Any]], then: Callable[[Any], None] | None = None
    ) -> None:
        """An agent's or the person's call to the live daemon, as a request handler of it."""
        engine, calls = self.engine, self._calls
        if engine is None or calls is None:
            self.log(f"{name}: daemon down")
            return

        async def handler() -> None:
            try:
                result = await fn(engine)
            except EXPECTED_ERRORS as exc:
                self.log(f"{name} -> {type(exc).__name__} {getattr(exc, 'reason', '')}")
                return
            except Exception as exc:
                self.violate(f"{name} raised {type(exc).__name__}: {exc}")
                return
            self.log(f"{name} -> ok")
            if then is not None:
                then(result)

        calls.start_soon(handler)

    # --- the world's parties ----------------------------------------------------------------------

    def live_panes(self) -> list[str]:
        return sorted(
            (p for p, pane in self.server.panes.items() if pane.agent is not None), key=lambda p: int(p[1:])
        )

    def address_of(self, pane_id: str) -> str:
        """The pane's address as the agents last listed it (possibly stale)."""
        if self.engine is not None and (record := self.engine.watcher.directory.panes.get(pane_id)) is not None:
            self.addresses[pane_id] = str(record.address)
        return self.addresses.get(pane_id, f"{pane_id}@0000000000000000")

    def token_of(self, pane_id: str) -> str | None:
        pane = self.server.panes.get(pane_id)
        if pane is None or pane.agent is None:
            return None
        return next((v for v in pane.agent.env.values() if v.startswith("ct_")), None)

    def principals(self) -> list[str]:
        if self.engine is None:
            return []
        return sorted(grants.all_connected(self.engine.hub.book))

    async def act(self, action: str) -> None:  # noqa: C901 - one branch per action, read top to bottom
        rng, server = self.rng, self.server
        panes = self.live_panes()
        pane = rng.choice(panes) if panes else None
        if action == "send" and pane is not None:
            senders = [p for p in panes if self.token_of(p)]
            if senders:
                sender = rng.choice(senders)
                others = [p for p in panes if p != sender]
                pane = rng.choice(others) if others and rng.random() < 0.95 else pane
                body = f"simmsg-{self.first_body + len(self.sent)}"
                to = (
                    self.address_of(pane)
                    if rng.random() < 0.8
                    else f"title:{rng.choice(['reviewer', 'builder'])}"
                )
                sent = Sent(body, self.token_of(sender) or "", f"m{len(self.sent) + 1}", to, life=self.starts)
                self.sent[body] = sent
                self.log(f"send {sender} -> {to} {body}")

                def answered(result: Any, sent: Sent = sent) -> None:
                    sent.answer = result

                self.call(
                    f"send {body}",
                    lambda e, s=sent: e.calls.send_message(
                        s.token, to=s.to, text=f"please read {s.body}", message_id=s.message_id
                    ),
                    answered,
                )
        elif action == "get" and self.sent:
            sent = self.sent[rng.choice(sorted(self.sent))]
            wait = rng.choice([0.0, 0.0, 5.0])
            self.call(f"get {sent.body}", lambda e, s=sent, w=wait: e.calls.get_message(s.token, s.message_id, w))
        elif action == "list" and pane is not None and (token := self.token_of(pane)):
            self.call(f"list_agents and list_messages by {pane}", lambda e, t=token: self._list(e, t))
        elif action == "detail" and pane is not None and self.engine is not None:
            caller = self.engine.calls.principal_for(self.token_of(rng.choice(panes)) or "")
            self.call(f"get_agent {pane}", lambda e, p=pane, c=caller: self._detail(e, p, c))
        elif action == "preset" and pane is not None:
            preset = rng.choice([Preset.COLLABORATE, Preset.OBSERVE, Preset.OFF])
            self.call(
                f"the pane toggle of {pane}: {preset}", lambda e, p=pane, pr=preset: e.person.set_pane_preset(p, pr)
            )
        elif action == "decide" and self.engine is not None:
            cards = self.engine.person.cards()
            if cards:
                card = rng.choice(cards)
                decision = rng.choice([Decision.APPROVE_ONCE, Decision.APPROVE_PAIR, Decision.DECLINE])
                self.call(
                    f"decide {card['id']} {decision}", lambda e, c=card["id"], d=decision: e.person.decide(c, d)
                )
        elif action == "revoke" and self.principals():
            principal = rng.choice(self.principals())
            self.call(f"revoke {principal}", lambda e, p=principal: self._revoke(e, [p]))
        elif action == "disconnect_all" and self.principals():
            everyone = self.principals()
            self.call("disconnect all", lambda e, ids=everyone: self._revoke(e, ids, everyone=True))
        elif action == "grant" and self.engine is not None:
            sessions = sorted({p.session for p in self.engine.hub.book.principals.values() if p.session})
            if sessions:
                session = rng.choice(sessions)
                preset = rng.choice([Preset.COLLABORATE, Preset.OBSERVE, Preset.OFF])
                self.call(f"grant {session} {preset}", lambda e, s=session, p=preset: self._grant(e, s, p))
        elif action == "restart" and pane is not None:
            preset = rng.choice([Preset.COLLABORATE, Preset.OBSERVE])
            self.call(f"restart {pane} {preset}", lambda e, p=pane, pr=preset: e.restarts.begin(p, pr))
        elif action == "launch":
            preset = rng.choice([Preset.COLLABORATE, Preset.COLLABORATE, Preset.OFF])
            self.call(f"launch {preset}", lambda e, p=preset: e.launches.launch("claude", preset=p, cwd="/work"))
        elif action == "draft" and pane is not None:
            self.log(f"person types a draft into {pane}")
            server.person_types(pane, rng.choice(["wip", "fix the", "hmm "]))
        elif action == "clear" and pane is not None:
            self.log(f"person clears {pane}")
            server.person_clears(pane)
        elif action == "prompt" and pane is not None:
            self.log(f"person submits a prompt in {pane}")
            server.person_submits(pane, "person's own prompt", round(rng.uniform(0.5, 20.0), 2))
        elif action == "menu" and pane is not None:
            self.log(f"a menu opens in {pane}")
            server.open_menu(pane)
        elif action == "answer" and pane is not None:
            self.log(f"person answers the menu in {pane}")
            server.answer_menu(pane)
        elif action == "title" and pane is not None:
            title = rng.choice(["reviewer", "builder", ""])
            self.log(f"{pane} titles itself {title!r}")
            server.panes[pane].title = title
        elif action == "exit" and pane is not None:
            self.log(f"{pane}'s agent exits")
            server.agent_exits(pane)
        elif action == "replace" and pane is not None:
            self.log(f"{pane} is respawned by someone else")
            server.replace_process(pane)
        elif action == "kill":
            self.faults.kill_in = rng.randint(1, 150)
            self.log(f"the daemon will be killed at I/O call +{self.faults.kill_in}")
        elif action == "wait":
            await trio.sleep(round(rng.uniform(1.0, 30.0), 2))

    def _in_flight(self, engine: Engine, members: set[str], everyone: bool) -> frozenset[str]:
        """The token hashes the restarts open on these principals' panes would hand their new process."""
        panes = {engine.hub.book.principals[m].pane_id for m in members if m in engine.hub.book.principals}
        return frozenset(
            hash_token(engine.restarts.tokens[rid])
            for rid, state in engine.hub.restarts.items()
            if (everyone or state.record.pane_id in panes) and rid in engine.restarts.tokens
        )

    async def _list(self, engine: Engine, token: str) -> None:
        engine.calls.agents()
        await engine.calls.list_messages(token)

    async def _detail(self, engine: Engine, pane_id: str, caller: Any) -> None:
        await trio.lowlevel.checkpoint()
        engine.calls.agent_detail(self.address_of(pane_id), caller)

    async def _revoke(self, engine: Engine, principal_ids: list[str], *, everyone: bool = False) -> None:
        members = {m for p in principal_ids for m in grants.group(engine.hub.book, p)}
        in_flight = self._in_flight(engine, members, everyone)
        if everyone:
            await engine.person.disconnect_all()
        else:
            await engine.person.revoke_principals(principal_ids)
        # Noted only once the revocation returned: one that failed (the store) withdrew nothing. The
        # check is on state (a live token of a withdrawn restart), so a respawn that came in between is
        # still caught.
        self.checker.note_withdrawn(in_flight)
        self.log(f"revocation returned: {sorted(members)}")
        self.checker.note_revocation(frozenset(members), engine)

    async def _grant(self, engine: Engine, session: tuple[str, str], preset: Preset) -> None:
        members = {
            m
            for p in grants.principals_of_session(engine.hub.book, session)
            for m in grants.group(engine.hub.book, p)
        }
        in_flight = self._in_flight(engine, members, False) if preset is Preset.OFF else frozenset()
        await engine.person.set_grant(session, preset)
        if preset is Preset.OFF:
            self.checker.note_withdrawn(in_flight)
            self.log(f"revocation returned: {sorted(members)}")
            self.checker.note_revocation(frozenset(members), engine)

    # --- the run ----------------------------------------------------------------------------------

    async def main(self) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            try:
                await bounded(self._run)
            finally:  # the run ended, or the driver raised: let go what killed daemons left parked
                self.server.over.set()
            nursery.cancel_scope.cancel()

    async def _run(self) -> None:
        if "setup" in self.hooks:
            await self.hooks["setup"](self)
        else:
            await self.setup()
        for _ in range(self.cfg.steps):
            await trio.sleep(round(self.rng.expovariate(1 / self.cfg.gap), 3))
            action = self.pick()
            self.step_wall()
            await self.act(action)
            await trio.sleep(0)
            self.steps += 1
            self.checker.after_step()
        await self.quiesce()
        self.checker.at_end()

    async def setup(self) -> None:
        self.faults.on = False
        await self.start_daemon()
        assert self.engine is not None
        for _ in range(self.cfg.agents):
            await self.engine.launches.launch("claude", preset=Preset.COLLABORATE, cwd="/work")
        if self.cfg.control:
            await self.engine.launches.launch("claude", preset=Preset.COLLABORATE, cwd="/work", control=True)
            await self.engine.launches.launch("claude", preset=Preset.OFF, cwd="/work")  # one it alone may message
        self.faults.on = True

    def pick(self) -> str:
        weights = dict(self.cfg.weights)
        weights["kill"] = self.cfg.kills * sum(weights.values()) if self.faults.kill_in is None else 0
        names = sorted(weights)
        return self.rng.choices(names, [weights[n] for n in names])[0]

    async def quiesce(self) -> None:
        """Faults off; the person answers every card and menu and clears every composer; then wait."""
        self.faults.on = False
        self.faults.kill_in = None
        self.log("quiesce")
        deadline = trio.current_time() + self.cfg.quiet
        while trio.current_time() < deadline:
            for pane_id in self.live_panes():
                self.server.answer_menu(pane_id)
                agent = self.server.panes[pane_id].agent
                if agent is not None and agent.composer and not agent.busy(self.now()):
                    self.server.person_clears(pane_id)
            if self.engine is not None:
                for card in self.engine.person.cards():
                    self.call(
                        f"approve {card['id']}", lambda e, c=card["id"]: e.person.decide(c, Decision.APPROVE_ONCE)
                    )
            await trio.sleep(5.0)
            self.checker.after_step()
            if self.engine is not None and self.checker.settled():
                break


def run_seed(
    seed: int,
    cfg: Config | None = None,
    hooks: dict[str, Callable[..., Any]] | None = None,
    data_dir: Path | None = None,
) -> Sim:
    """Run one seed to the end; the Sim holds the trace and the violations (raise with :func:`check`)."""
    import trio._core._run as trio_run

    with tempfile.TemporaryDirectory(prefix=f"sim-{seed}-") as tmp:
        sim = Sim(seed, data_dir or Path(tmp), cfg)
        sim.hooks.update(hooks or {})
        saved = trio_run._ALLOW_DETERMINISTIC_SCHEDULING
        trio_run._ALLOW_DETERMINISTIC_SCHEDULING = True
        trio_run._r.seed(seed)
        quiet = logging.getLogger("connectd")
        level, quiet.level = quiet.level, logging.CRITICAL
        handler = invariants.FailureLog(sim)
        logging.getLogger("connectd.supervisor").addHandler(handler)
        began = time.perf_counter()
        try:
            trio.run(sim.main, clock=trio.testing.MockClock(autojump_threshold=0))
        finally:
            STATS["seeds"] += 1
            STATS["steps"] += sim.steps
            STATS["io"] += sim.io_calls
            STATS["kills"] += sim.kills
            STATS["seconds"] += time.perf_counter() - began
            trio_run._ALLOW_DETERMINISTIC_SCHEDULING = saved
            quiet.level = level
            logging.getLogger("connectd.supervisor").removeHandler(handler)
            if sim.store is not None:
                sim.store.close()
    return sim


def check(sim: Sim, *, allow_known: bool = False) -> None:
    """Raise on a violation (with allow_known, only on one that is not a known defect: those are counted)."""
    if allow_known:
        for kind in set(sim.kinds) & set(invariants.KNOWN_DEFECTS):
            STATS["known"].setdefault(kind, []).append(sim.seed)
        unknown = [
            v for v, k in zip(sim.violations, sim.kinds, strict=True) if k not in invariants.KNOWN_DEFECTS
        ]
        if not unknown:
            return
    if sim.violations:
        tail = "\n".join(sim.trace[-40:])
        saved = ""
        if directory := os.environ.get("SIM_TRACE_DIR"):
            path = Path(directory) / f"seed-{sim.seed}.trace"
            path.write_text("\n".join(sim.trace) + "\n")
            saved = f"the whole trace: {path}\n"
        raise Violation(
            f"SEED={sim.seed}: {len(sim.violations)} violation(s), first ({sim.kinds[0]}): "
            f"{sim.violations[0]}\nreplay: make simulate SEED={sim.seed}\n{saved}"
            f"--- last trace lines ---\n{tail}"
        )
