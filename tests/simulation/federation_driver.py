"""The simulation of several daemons on one simulated bus (docs/simulation.md, "Several boxes";
docs/federation.md, "Simulation"): issue 25's simulation proof.

One :class:`Federation` is one run of one seed. Each box is a whole :class:`tests.simulation.driver.Sim`
(:class:`BoxSim`): the REAL engine and store in its own data directory, its own simulated tmux server
(:class:`~tests.simulation.sim_tmux.SimServer`), its own seeded schedule, faults and kills, and the
single-box invariants of :mod:`tests.simulation.invariants`; and, as the daemon does it
(``connectd.daemon.app``): its pairing desk opened on its store (``open_desk``: the hub's outbox and inbox
restored, the agent calls' way to other boxes), its pump's three bus loops and the two federation ticks
started in the engine's supervisor. The bus is one :class:`~tests.simulation.sim_bus.SimNetwork`; each
daemon's life gets its own connection (:class:`SimLink`: the ``Bus`` port plus what the pump reads of
``NatsBus``), whose publish and acknowledge are I/O calls where a pending kill may land (before the call,
or just after it reached the server). Box keys, pairing ids, nonces and the engines' ids come from the
seed, and trio's scheduler is seeded: the same seed replays the same run (:attr:`Federation.trace`).

The schedule, one action at a time: an agent sends to an agent on another box (``%N@<token>@<box
name>``, the address as that box's directory last listed it); a box runs one action of its own schedule
(local sends, cards approved or declined, including the remote ones, revocations, restarts, the person
at the keyboard, panes dying, the daemon killed at a later I/O call); a card on some box is decided; a
box's link to the bus is cut (a partition) or healed; the rogue box (real keys, never paired) publishes
a message sealed to a box, or a copy of another box's wire, on its own subjects; nobody acts for a
while (a partition outlasting the outbox's liveness). Two boxes, or three in a quarter of the seeds,
each paired with every other at the start by both approvals over the bus. The bus drops,
duplicates, delays and reorders by the seed's draw. Then quiescence: faults off, links healed, every
card approved, until every outbox row and message is final; a row still waiting then must be honestly
so (``published``, ``accepted`` or ``cancelling``: ``queued`` to its sender, before its deadline), and
the run goes on past the latest deadline, after which it must be final too.

The federation's invariants (:class:`FedChecker`), each stated in one line in its docstring, besides
every box's own.
"""

from __future__ import annotations

import contextlib
import logging
import random
import re
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import nacl.exceptions
import nacl.public
import nacl.signing
import trio
import trio.testing

from connectcore.consent import Decision
from connectcore.federation import envelope as E
from connectcore.federation import inbox as I
from connectcore.federation import outbox as O
from connectcore.federation.remote import REMOTE_PREFIX
from connectcore.grants import Preset
from connectcore.ports import BusUnavailable, Delivery, PublishAck
from connectd.daemon.supervisor import Kind
from connectd.federation import desk as desk_module
from connectd.federation import flow as flow_module
from connectd.federation import keys as K
from connectd.federation import remote_calls as remote_calls_module
from connectd.federation.desk import EXPIRY_EVERY, open_desk
from connectd.federation.pump import Pump
from connectd.federation.seal import LocalBox, receive, seal
from tests.simulation import driver as D
from tests.simulation import invariants
from tests.simulation.sim_bus import Faults, SimBus, SimNetwork

NAMES = ("laptop", "devbox", "builder")
FED_BODY = re.compile(r"fedmsg-\d+")
BUS_POLL = 0.25  # a waiting fetch looks again this often (virtual seconds)
#: What a supervised task may fail with here, besides a single box's injected faults: the bus away.
EXPECTED_TASK_ERRORS = invariants.EXPECTED_TASK_ERRORS | {"BusUnavailable"}


@dataclass
class FedConfig:
    boxes: int = 2  # daemons, paired with each other (besides the rogue box, paired with none); swarm: 3 in a quarter
    steps: int = 30  # schedule actions before quiescence
    gap: float = 2.0  # mean virtual seconds between actions
    box: D.Config = field(default_factory=lambda: D.Config(agents=2, wall_step=0.0))  # each box's own
    weights: dict[str, float] = field(
        default_factory=lambda: {
            "xsend": 8,  # an agent sends to an agent on another box
            "local": 5,  # one action of a box's own schedule
            "decide": 3,  # a card on some box (a remote one first) approved or declined
            "partition": 0.4,  # a box's link to the bus cut
            "heal": 1.0,
            "rogue": 0.6,  # the unpaired box publishes
            "kill": 1.0,  # a box's daemon killed at one of its next I/O calls (tmux, store, bus)
            "crash": 0.3,  # the bus server crashes: down for up to 20 s, losing its last 0.5 to 10 s
            "wait": 0.5,  # nobody acts for 10 s to 4 min (a partition outlasting the outbox's 180 s liveness)
        }
    )
    quiet: float = 420.0  # quiescence: an accepted row's envelope goes again every 300 s
    past_deadlines: bool = True  # after quiescence, run on past the deadline of every row still waiting
    swarm: bool = True  # each seed draws its own bus faults and turns some actions off


# --- the seed's randomness where the daemon takes the machine's ------------------------------------


class SeededSecrets:
    """``secrets`` for the federation modules: pairing ids, invitation secrets and nonces from the seed."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def token_bytes(self, n: int = 32) -> bytes:
        return self.rng.randbytes(n)

    def token_hex(self, n: int = 32) -> str:
        return self.rng.randbytes(n).hex()


@contextlib.contextmanager
def seeded_secrets(seed: int) -> Iterator[None]:
    shim = SeededSecrets(random.Random(seed * 6700417 + 9))
    modules = (desk_module, flow_module, remote_calls_module)
    saved = [m.secrets for m in modules]  # type: ignore[attr-defined]
    for m in modules:
        m.secrets = shim  # type: ignore[attr-defined]
    try:
        yield
    finally:
        for m, s in zip(modules, saved, strict=True):
            m.secrets = s  # type: ignore[attr-defined]


class _ThenStarted:
    """A task status that runs ``then`` just before it reports started (the engine's supervisor exists)."""

    def __init__(self, status: Any, then: Callable[[], None]) -> None:
        self.status, self.then = status, then

    def started(self, value: Any = None) -> None:
        self.then()
        self.status.started(value)


# --- one box -----------------------------------------------------------------------------------------


class SimLink(SimBus):
    """One daemon life's connection to the simulated bus: the ``Bus`` port, plus what the pump reads of
    ``NatsBus`` (``connect``, ``connected``, ``errors``, ``close``); its publish and acknowledge are I/O
    calls of the box where a pending kill lands, before the call or just after it reached the server."""

    def __init__(self, network: SimNetwork, box: BoxSim) -> None:
        super().__init__(network, box.box_id)
        self.box = box
        self.generation = box.server.generation
        self._nc: Any = None
        self.errors: list[str] = []

    @property
    def connected(self) -> bool:
        return self._nc is not None and self.network.up and self.box_id not in self.network.cut

    async def connect(self, *_args: Any, **_kw: Any) -> None:
        self._up()
        self._nc = SimpleNamespace(is_closed=False)

    async def close(self) -> None:
        self._nc = None

    async def _io(self, op: str) -> bool:
        """A bus call of this box: parks for good once its daemon is killed; True: kill it just after."""
        box = self.box
        if box.server.generation != self.generation:
            await trio.sleep_forever()
        box.io_calls += 1
        # a pending kill prefers a bus call (as a single box's prefers a paste): the moments between a
        # commit, its receipt and the acknowledgement
        preferred = box.faults.kill_in is not None and box.frng.random() < 0.4
        if preferred:
            box.faults.kill_in = None
        if preferred or box.faults.countdown():
            if box.frng.random() < 0.5:
                return True
            box.kill(f"bus {op}")
            await trio.sleep_forever()
        return False

    async def _killed_after(self, op: str) -> None:
        self.box.kill(f"just after bus {op}")
        await trio.sleep_forever()

    async def publish(self, subject: str, data: bytes, *, msg_id: str) -> PublishAck:
        after = await self._io("publish")
        self.box.fed.checker.on_publish(self.box, subject, data)
        ack = await super().publish(subject, data, msg_id=msg_id)
        if after:
            await self._killed_after("publish")
        return ack

    async def ack(self, delivery: Delivery) -> None:
        after = await self._io("ack")
        self.box.fed.checker.on_ack(self.box, delivery)
        await super().ack(delivery)
        if after:
            await self._killed_after("ack")


class BoxSim(D.Sim):
    """One federated box: a whole single-box simulation whose daemon also runs its pairing desk and pump."""

    def __init__(self, fed: Federation, index: int, seed: int, data_dir: Path, cfg: D.Config) -> None:
        self.fed = fed
        self.name = NAMES[index]
        self.approved_cards: set[str] = set()  # cards the person tried to approve (once or for the pair)
        self.approved_pairs: set[tuple[str, str]] = set()  # (sender, recipient incarnation) tried for the pair
        super().__init__(seed, data_dir, cfg)
        fed.trace.extend(f"[{self.name}] {line}" for line in self.trace)
        krng = random.Random(seed * 2147483647 + 7)
        made = K.BoxSecrets(krng.randbytes(K.SECRET_BYTES), krng.randbytes(K.SECRET_BYTES))
        data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        key = data_dir / K.BOX_KEY_FILE
        key.write_bytes(made.encode())
        key.chmod(0o600)
        K.init(data_dir, self.name)
        with (data_dir / K.FEDERATION_FILE).open("a") as f:
            f.write('nats = "sim://bus"\n')  # the pump connects (to the simulated bus)
        self.local = LocalBox.from_secrets(made)
        self.box_id = self.local.box_id
        self.link: SimLink | None = None

    def log(self, line: str) -> None:
        self.seq += 1
        self.fed.log(f"[{self.name}] {line}")

    def violate(self, what: str, kind: str = "") -> None:
        self.fed.violate(f"[{self.name}] {what}", kind)

    @property
    def desk(self) -> Any:
        return None if self.engine is None else self.engine.federation

    def _federate(self, engine: Any) -> None:
        """What ``connectd.daemon.app`` does for a federated box, with the simulated bus for NATS: the
        desk opened on the engine (``open_desk``), then, once the engine's supervisor runs, the desk's
        two ticks and the pump's loops (``PairingDesk.start``, but for the pump's bus)."""
        desk = open_desk(self.data_dir, engine)
        assert desk is not None
        engine.federation = desk
        self.link = SimLink(self.fed.network, self)
        pump = Pump(desk, bus=self.link)
        desk.pump = pump
        run = engine.run

        def begin() -> None:
            supervisor = engine.supervisor
            supervisor.spawn(Kind.TICK, desk.tick, every=EXPIRY_EVERY, name="pairing expiry")
            supervisor.spawn(Kind.TICK, desk.messages.tick, every=desk.messages.every, name="federation tick")
            pump.start(supervisor)

        async def federated(*, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
            await run(task_status=_ThenStarted(task_status, begin))

        engine.run = federated

    async def _life(self, engine: Any, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        self._federate(engine)
        await super()._life(engine, task_status)

    async def start_daemon(self) -> None:
        await super().start_daemon()
        if self.started and self.engine is not None:
            self.fed.checker.after_start(self)

    def call(self, name: str, fn: Callable[[Any], Any], then: Callable[[Any], None] | None = None) -> None:
        """As :meth:`Sim.call`; a decision on a card is noted first (what the consent invariant allows)."""
        words = name.split()
        if words[0] in ("decide", "approve") and self.engine is not None:
            card = self.engine.hub.cards.get(words[1])
            decision = words[2] if words[0] == "decide" else str(Decision.APPROVE_ONCE)
            if card is not None and decision != str(Decision.DECLINE):
                self.approved_cards.add(card.id)
                if decision == str(Decision.APPROVE_PAIR):
                    self.approved_pairs.add((card.sender, card.recipient_incarnation))
        super().call(name, fn, then)


class Rogue:
    """A box with real keys that no box paired with: it publishes, on its own subjects (the permissions
    allow no other), messages sealed to a box it knows the keys of, and copies of other boxes' wires."""

    def __init__(self, fed: Federation, seed: int) -> None:
        rng = random.Random(seed * 999331 + 13)
        self.fed = fed
        self.rng = rng
        self.local = LocalBox.from_secrets(K.BoxSecrets(rng.randbytes(K.SECRET_BYTES), rng.randbytes(K.SECRET_BYTES)))
        self.box_id = self.local.box_id
        self.bus = SimBus(fed.network, self.box_id)
        self.sent = 0

    async def act(self) -> None:
        fed, rng = self.fed, self.rng
        victim = rng.choice(fed.boxes)
        self.sent += 1
        copies = [m.data for m in fed.network.stored if f".{victim.box_id}." not in m.subject]
        if copies and rng.random() < 0.4:
            data, what = rng.choice(copies), "a copy of another box's wire"
        else:
            panes = victim.live_panes()
            target = victim.address_of(rng.choice(panes)) if panes else "%1@0000000000000000"
            routing = E.Routing(E.Kind.MESSAGE, self.box_id, victim.box_id, pairing=rng.randbytes(16).hex())
            inner = E.MessageInner(
                routing, E.Sender("p-rogue", "agent:claude:rogue", "claude", "%1", "0" * 16), f"r{self.sent}",
                D.BASE_TIME + trio.current_time(), ("address", target), f"please read roguemsg-{self.sent}",
                f"c-rogue-{self.sent}", 0,
            )
            data, what = seal(self.local, victim.local.keys, inner, rng.randbytes(E.NONCE_BYTES)), "a sealed message"
        fed.log(f"rogue publishes {what} to {victim.name}")
        with contextlib.suppress(BusUnavailable):
            await self.bus.publish(E.subject_for(E.Kind.MESSAGE, self.box_id, victim.box_id), data,
                                   msg_id=f"rogue-{self.sent}")


@dataclass
class FedSent:
    body: str
    sender: str  # the sending box's name
    recipient: str  # the receiving box's name
    token: str
    message_id: str
    to: str
    answer: dict[str, Any] | None = None


# --- the invariants ----------------------------------------------------------------------------------


def open_wire(fed: Federation, subject: str, data: bytes) -> E.Inner | None:
    """What a wire between two of the run's boxes says (the checker holds every box's keys); None for
    the rogue's, or one that does not verify."""
    parsed = E.parse_subject(subject)
    sender = fed.box_by_id.get(parsed.sender) if parsed else None
    recipient = fed.box_by_id.get(parsed.to) if parsed else None
    if sender is None or recipient is None:
        return None
    signature, outer_bytes = data[: E.SIGNATURE_BYTES], data[E.SIGNATURE_BYTES :]
    try:
        nacl.signing.VerifyKey(sender.local.keys.sign).verify(outer_bytes, signature)
        outer = E.parse_outer(outer_bytes)
        box = nacl.public.Box(recipient.local.sealing, nacl.public.PublicKey(sender.local.keys.seal))
        return E.parse_inner(box.decrypt(outer.sealed, outer.nonce), outer)
    except (nacl.exceptions.CryptoError, E.EnvelopeError):
        return None


class FedChecker:
    def __init__(self, fed: Federation) -> None:
        self.fed = fed
        self.typed: dict[str, list[str]] = {}  # body -> the boxes it was pasted on, once per paste
        self.acked: dict[str, set[E.Identity]] = {}  # box name -> identities its daemon acknowledged
        self.finals: dict[E.Identity, str] = {}  # outbox identity -> its final outcome, once durable

    def watch(self, box: BoxSim) -> None:
        local = box.server.on_paste

        def on_paste(paste: Any) -> None:
            local(paste)
            self.on_paste(box, paste)

        box.server.on_paste = on_paste

    # --- at every paste, acknowledgement and publish -----------------------------------------------

    def on_paste(self, box: BoxSim, paste: Any) -> None:
        found = FED_BODY.search(paste.text)
        engine = box.engine
        if found is None or engine is None:
            return
        body = found.group(0)
        self.typed.setdefault(body, []).append(box.name)
        self.never_typed_twice(body)
        message = next((m for m in engine.hub.messages.values() if m.typed == paste.text), None)
        if message is None:
            box.violate(f"pasted {body}, which no message of the hub holds")
            return
        self.typed_only_with_consent(box, message, body)

    def never_typed_twice(self, body: str) -> None:
        """A message sent across boxes is typed at most once, on any box, across restarts and copies."""
        if len(self.typed[body]) > 1:
            self.fed.violate(f"{body} typed {len(self.typed[body])} times (on {self.typed[body]})", "typed_twice")

    def typed_only_with_consent(self, box: BoxSim, message: Any, body: str) -> None:
        """A message from another box is typed only once its card or its pair was approved on its box.

        Judged against what the person did (each approval the driver made, once or for the pair: that
        remote sender and that recipient), not against the hub's state."""
        if not message.sender.startswith(REMOTE_PREFIX):
            box.violate(f"{body} was typed as a local message", "typed_as_local")
            return
        pair = (message.sender, message.recipient_incarnation)
        if message.card not in box.approved_cards and pair not in box.approved_pairs:
            box.violate(f"{body} typed without its card ({message.card}) or its pair approved", "typed_without_consent")

    def on_ack(self, box: BoxSim, delivery: Delivery) -> None:
        """A message from a paired box is acknowledged on the bus only once its identity is committed.

        Read from the recipient's store at the acknowledgement. One its judgement refuses (say stamped
        too far ahead) is acknowledged with its audit line and nothing else."""
        inner = open_wire(self.fed, delivery.subject, delivery.data)
        if not isinstance(inner, E.MessageInner) or box.desk is None:
            return
        if receive(box.local, delivery.subject, delivery.data, box.desk.view()).decision is E.Decision.REFUSED:
            return
        identity = E.Identity(inner.routing.sender, inner.sender.principal, inner.id)
        assert box.store is not None
        if identity not in {r.identity for r in box.store.inbox_records()}:
            box.violate(f"acknowledged {_body(inner.text)} ({identity}) before its commit", "ack_before_commit")
            return
        self.acked.setdefault(box.name, set()).add(identity)

    def on_publish(self, box: BoxSim, subject: str, data: bytes) -> None:
        """A receipt is published only once what it says is committed on its box.

        ``accepted``: the identity is in the store; a final outcome: its record is, in that state."""
        inner = open_wire(self.fed, subject, data)
        if not isinstance(inner, E.ReceiptInner):
            return
        assert box.store is not None
        held = {r.identity: r for r in box.store.inbox_records()}
        record = held.get(inner.message)
        if record is None or (inner.outcome != "accepted" and str(record.state) != inner.outcome):
            box.violate(
                f"receipt {inner.outcome} for {inner.message} published while the store holds "
                f"{None if record is None else record.state}",
                "receipt_before_commit",
            )

    # --- after every step and every start --------------------------------------------------------------

    def after_step(self) -> None:
        for box in self.fed.boxes:
            if box.engine is not None:
                self.nothing_from_the_unpaired(box)
                for row in box.engine.runner.durable.outbox.rows.values():
                    self.one_final_outcome(box, row)

    def nothing_from_the_unpaired(self, box: BoxSim) -> None:
        """Nothing is accepted from a box this box is not paired with: no inbox record, no message.

        The rogue box publishes sealed messages and copies of other boxes' wires to every box."""
        engine = box.engine
        assert engine is not None
        paired = self.fed.paired.get(box.name, set())
        for identity in engine.hub.inbox.records:
            if identity.box not in paired:
                box.violate(f"an inbox record from the unpaired box {identity.box}: {identity}", "unpaired_accepted")
        rogue = f"{REMOTE_PREFIX}{self.fed.rogue.box_id}/"
        for message in engine.hub.messages.values():
            if message.sender.startswith(rogue):
                box.violate(f"a message from the rogue box: {message.ref}", "unpaired_accepted")

    def one_final_outcome(self, box: BoxSim, row: O.Row) -> None:
        """An outbox row's final outcome, once durable on its sender's box, never changes."""
        seen = self.finals.get(row.identity)
        if row.is_final and seen is None:
            self.finals[row.identity] = str(row.state)
        elif seen is not None and seen != str(row.state):
            box.violate(f"{row.identity.id} was {seen}, now {row.state}", "final_changed")

    def after_start(self, box: BoxSim) -> None:
        """Nothing the receiving daemon acknowledged is lost across its restart.

        Each identity it acknowledged on the bus is in the restored hub's inbox."""
        engine = box.engine
        assert engine is not None and engine.hub.inbox is not None
        for identity in sorted(self.acked.get(box.name, set()), key=str):
            if identity not in engine.hub.inbox.records:
                box.violate(f"acknowledged {identity} lost across the restart", "acked_lost")

    # --- once quiet ----------------------------------------------------------------------------------

    def at_end(self) -> None:
        for box in self.fed.boxes:
            if box.engine is None:
                box.violate("the daemon is not running at the end")
                continue
            for row in box.engine.hub.outbox.rows.values():
                self.every_row_final(box, row)
                self.outcome_true_on_the_recipient(row)
        self.nothing_admitted_lost()

    def every_row_final(self, box: BoxSim, row: O.Row) -> None:
        """Every admitted message ends with exactly one final outcome on its sender's box once quiet.

        A row still waiting at quiescence's end may wait until its deadline (:meth:`waits_honestly`):
        this is checked after it."""
        if not row.is_final:
            box.violate(f"{row.identity.id} still {row.state} past its deadline", "not_final")

    def waits_honestly(self, box: BoxSim, row: O.Row) -> None:
        """A row still not final after quiescence waits only as the outbox's rules allow.

        After 420 s with faults off and links healed: ``published`` or ``cancelling`` to a box not
        heard within 180 s (no new attempt, O5); ``accepted`` while the other box's record of it is
        not final either (its envelope goes again every 300 s, and a copy is answered with the final
        receipt); either to a box whose clock is a skew bound away (its judgement refuses the copies);
        never ``queued`` with the bus up."""
        other = self.fed.box_by_id.get(row.to)
        if other is None or other.engine is None or box.engine is None or box.desk is None:
            return
        now, settings = box.engine.clock(), box.engine.hub.outbox.settings
        apart = abs(now - other.engine.clock()) > E.SKEW_BOUND  # (wall steps) its copies may be refused
        if row.state is O.OutboxState.ACCEPTED:
            record = other.engine.hub.inbox.records.get(row.identity)
            if not apart and (record is None or record.state in I.FINAL):
                box.violate(f"{row.identity.id} still accepted while {other.name} holds it "
                            f"{None if record is None else record.state}", "stalled")
        elif row.state in (O.OutboxState.PUBLISHED, O.OutboxState.CANCELLING):
            live = O.is_live(box.desk.heard.get(row.to), now, settings)
            if live and not apart:
                box.violate(f"{row.identity.id} still {row.state} though {other.name} is heard and in time", "stalled")
        else:
            box.violate(f"{row.identity.id} still {row.state} with the bus up and quiet", "stalled")

    def outcome_true_on_the_recipient(self, row: O.Row) -> None:
        """The sender's outcome is true on the recipient's box.

        ``delivered`` means typed there once; ``declined``, ``refused``, ``cancelled`` and ``expired``
        mean never typed; ``unconfirmed`` promises nothing."""
        sent = self.fed.sent_by_id.get(row.identity.id)
        if sent is None or not row.is_final or row.state is O.OutboxState.UNCONFIRMED:
            return
        typed = len(self.typed.get(sent.body, []))
        expected = 1 if row.state is O.OutboxState.DELIVERED else 0
        if typed != expected:
            self.fed.violate(f"{sent.body} {row.state} on {sent.sender}, typed {typed} times on {sent.recipient}",
                             "outcome_untrue")

    def nothing_admitted_lost(self) -> None:
        """A message its sender was told is queued has its outbox row on the sender's box."""
        for sent in self.fed.sent.values():
            if sent.answer is None or sent.answer.get("outcome") != "queued":
                continue
            box = self.fed.box_named[sent.sender]
            assert box.engine is not None
            if not any(r.identity.id == sent.message_id for r in box.engine.store.outbox_rows()):
                box.violate(f"{sent.body} was answered queued, and its row is gone", "admitted_lost")


def _body(text: str) -> str:
    found = FED_BODY.search(text)
    return found.group(0) if found else text[:30]


class FailureLog(logging.Handler):
    """No unhandled exception in any box's task: a supervised task may fail only with an injected fault
    or the bus away."""

    def __init__(self, fed: Federation) -> None:
        super().__init__(logging.WARNING)
        self.fed = fed

    def emit(self, record: logging.LogRecord) -> None:
        args = record.args if isinstance(record.args, tuple) else ()
        if record.levelno >= logging.ERROR:
            self.fed.violate(f"bug in a task: {record.getMessage()[:300]}")
        elif len(args) == 4 and str(args[2]) not in EXPECTED_TASK_ERRORS and "failed" in record.msg:
            self.fed.violate(f"task failed with an unexpected error: {record.getMessage()[:300]}")


# --- the run -----------------------------------------------------------------------------------------


class Federation:
    def __init__(
        self, seed: int, root: Path, cfg: FedConfig | None = None, script: Callable[[Federation], Any] | None = None
    ) -> None:
        self.seed = seed
        self.script = script  # a scenario's own schedule, in place of the seeded one
        self.cfg = replace(cfg) if cfg is not None else FedConfig()
        self.rng = random.Random(seed)
        self.trace: list[str] = []
        self.violations: list[str] = []
        self.kinds: list[str] = []
        self.steps = 0
        self.waited: list[str] = []  # rows still waiting at quiescence's end (then past their deadline)
        faults = Faults()
        if self.cfg.swarm and seed:
            self.swarm(random.Random(seed * 31 + 7))
            srng = random.Random(seed * 17 + 5)
            if self.cfg.boxes == 2 and srng.random() < 0.25:
                self.cfg.boxes = 3  # a quarter of the seeds: three boxes, each paired with the other two
            faults = Faults(
                drop=srng.choice([0.0, 0.05, 0.2]), duplicate=srng.choice([0.0, 0.1, 0.3]),
                delay=srng.choice([0.0, 2.0, 10.0]), reorder=srng.random() < 0.5,
            )
        self.faults = faults
        self.trace.append(f"{self.cfg.boxes} boxes; bus faults {faults}")
        self.network = SimNetwork(clock=lambda: trio.current_time(), seed=seed, poll=BUS_POLL)
        self.checker = FedChecker(self)
        self.boxes = [
            BoxSim(self, i, seed * 16 + i + 1, root / NAMES[i], replace(self.cfg.box)) for i in range(self.cfg.boxes)
        ]
        self.box_named = {b.name: b for b in self.boxes}
        self.box_by_id = {b.box_id: b for b in self.boxes}
        self.paired: dict[str, set[str]] = {}  # box name -> the box ids it paired with
        self.rogue = Rogue(self, seed)
        self.sent: dict[str, FedSent] = {}
        self.sent_by_id: dict[str, FedSent] = {}
        for box in self.boxes:
            self.checker.watch(box)

    def swarm(self, rng: random.Random) -> None:
        """Swarm testing, as a single box's: the seed's own mix of the federation's actions."""
        always = {"xsend", "decide"}
        self.cfg.weights = {
            k: (0.0 if k not in always and rng.random() < 0.25 else w * rng.choice([0.5, 1.0, 2.0]))
            for k, w in self.cfg.weights.items()
        }
        self.trace.append(f"swarm: weights {self.cfg.weights}")

    def log(self, line: str) -> None:
        self.trace.append(f"{trio.current_time():10.3f} {line}")

    def violate(self, what: str, kind: str = "") -> None:
        self.log(f"VIOLATION {what}")
        self.violations.append(what)
        self.kinds.append(kind or "other")

    async def until(self, what: str, done: Callable[[], bool], timeout: float = 120.0) -> None:
        deadline = trio.current_time() + timeout
        while not done():
            if trio.current_time() > deadline:
                raise AssertionError(f"setup: {what} did not happen within {timeout} s")
            await trio.sleep(0.5)

    # --- setup: the daemons, their agents, the pairings ------------------------------------------------

    async def setup(self) -> None:
        for box in self.boxes:
            box.faults.on = False
            await box.start_daemon()
            assert box.engine is not None
            for _ in range(box.cfg.agents):
                await box.engine.launches.launch("claude", preset=Preset.COLLABORATE, cwd="/work")
        for i, a in enumerate(self.boxes):
            for b in self.boxes[i + 1 :]:
                await self.pair(a, b)
        self.network.faults = self.faults
        for box in self.boxes:
            box.faults.on = True

    async def pair(self, a: BoxSim, b: BoxSim) -> None:
        """Both approvals, as people take them: ``pair invite`` on a, ``pair accept`` on b, the request
        over the bus, ``pair approve`` on a, its answer over the bus."""
        code = (await a.desk.invite())["code"]
        await b.desk.accept(code)
        await self.until(f"{b.name}'s pair request on {a.name}", lambda: bool(a.desk.requests()))
        await a.desk.approve(b.box_id)
        await self.until(f"{a.name}'s pairing active on {b.name}",
                         lambda: any(p["box"] == a.box_id and p["state"] == "active" for p in b.desk.pairings()))
        self.paired.setdefault(a.name, set()).add(b.box_id)
        self.paired.setdefault(b.name, set()).add(a.box_id)
        self.log(f"{a.name} and {b.name} paired")

    # --- the schedule --------------------------------------------------------------------------------

    def pick(self) -> str:
        names = sorted(self.cfg.weights)
        return self.rng.choices(names, [self.cfg.weights[n] for n in names])[0]

    async def act(self, action: str) -> None:
        rng = self.rng
        if action == "xsend":
            self.xsend()
        elif action == "local":
            box = rng.choice(self.boxes)
            await box.act(box.pick())
        elif action == "decide":
            self.decide()
        elif action == "partition":
            up = [b for b in self.boxes if b.box_id not in self.network.cut]
            if up:
                box = rng.choice(up)
                self.network.cut.add(box.box_id)
                self.log(f"partition: {box.name}'s link to the bus is cut")
        elif action == "heal" and self.network.cut:
            box = self.box_by_id[rng.choice(sorted(self.network.cut))]
            self.network.cut.discard(box.box_id)
            self.log(f"partition: {box.name}'s link heals")
        elif action == "rogue":
            await self.rogue.act()
        elif action == "crash" and self.network.up:
            lost, down = round(rng.uniform(0.5, 10.0), 2), round(rng.uniform(0.5, 20.0), 2)
            self.network.crash(lost)
            self.network.up = False
            self.log(f"the bus server crashes, losing its last {lost} s, down for {down} s")
            await trio.sleep(down)
            self.network.up = True
            self.log("the bus server is back")
        elif action == "wait":
            await trio.sleep(round(rng.uniform(10.0, 240.0), 2))
        elif action == "kill":
            box = rng.choice(self.boxes)
            if box.faults.kill_in is None:
                box.faults.kill_in = rng.randint(1, 60)
                box.log(f"the daemon will be killed at I/O call +{box.faults.kill_in}")

    def xsend(self) -> None:
        rng = self.rng
        senders = [(b, p) for b in self.boxes if b.engine is not None for p in b.live_panes() if b.token_of(p)]
        if not senders:
            return
        box, pane = rng.choice(senders)
        other = rng.choice([b for b in self.boxes if b is not box])
        panes = other.live_panes()
        if panes:
            self.send(box, pane, other, rng.choice(panes))

    def send(self, box: BoxSim, pane: str, other: BoxSim, other_pane: str) -> FedSent:
        """The agent on ``box``'s ``pane`` sends to ``other``'s ``other_pane`` (its address as ``other``'s
        directory last listed it, qualified by ``other``'s name)."""
        to = f"{other.address_of(other_pane)}@{other.name}"
        n = len(self.sent) + 1
        sent = FedSent(f"fedmsg-{n}", box.name, other.name, box.token_of(pane) or "", f"x{n}", to)
        self.sent[sent.body] = sent
        self.sent_by_id[sent.message_id] = sent
        box.log(f"xsend {pane} -> {to} {sent.body}")

        def answered(result: Any, sent: FedSent = sent) -> None:
            sent.answer = result

        box.call(
            f"xsend {sent.body}",
            lambda e, s=sent: e.calls.send_message(s.token, to=s.to, text=f"please read {s.body}", message_id=s.message_id),
            answered,
        )
        return sent

    def decide(self) -> None:
        rng = self.rng
        cards = [(b, c) for b in self.boxes if b.engine is not None for c in b.engine.person.cards()]
        remote = [(b, c) for b, c in cards if c.get("sender_box")]
        if not cards:
            return
        box, card = rng.choice(remote or cards)
        decision = rng.choice([Decision.APPROVE_ONCE, Decision.APPROVE_PAIR, Decision.DECLINE])
        box.call(f"decide {card['id']} {decision}", lambda e, c=card["id"], d=decision: e.person.decide(c, d))

    # --- the run ---------------------------------------------------------------------------------------

    def after_step(self) -> None:
        for box in self.boxes:
            box.checker.after_step()
        self.checker.after_step()

    async def main(self) -> None:
        async with trio.open_nursery() as nursery:
            for box in self.boxes:
                box._nursery = nursery
            await self.setup()
            if self.script is not None:
                await self.script(self)
            for _ in range(0 if self.script is not None else self.cfg.steps):
                await trio.sleep(round(self.rng.expovariate(1 / self.cfg.gap), 3))
                for box in self.boxes:
                    box.step_wall()  # (each box's own stream; off unless FedConfig.box.wall_step)
                await self.act(self.pick())
                await trio.sleep(0)
                self.steps += 1
                self.after_step()
            await self.quiesce()
            for box in self.boxes:
                box.checker.at_end()
            self.checker.at_end()
            for box in self.boxes:
                box.server.over.set()
            nursery.cancel_scope.cancel()

    def rows(self) -> list[tuple[BoxSim, O.Row]]:
        return [(b, r) for b in self.boxes if b.engine is not None for r in b.engine.hub.outbox.rows.values()]

    def settled(self) -> bool:
        return all(b.engine is not None and b.checker.settled() for b in self.boxes) and all(
            r.is_final for _, r in self.rows()
        )

    async def quiesce(self) -> None:
        """Faults off, links healed, every card approved and composer cleared on every box; then wait
        until everything is final, or a row waits honestly (``queued`` to its sender) and its deadline
        passes."""
        for box in self.boxes:
            box.faults.on = False
            box.faults.kill_in = None
        self.network.faults = Faults()
        self.network.cut.clear()
        self.network.up = True
        self.log("quiesce")
        deadline = trio.current_time() + self.cfg.quiet
        while trio.current_time() < deadline:
            self.tidy()
            await trio.sleep(5.0)
            self.after_step()
            if self.settled():
                return
        waiting = [(b, r) for b, r in self.rows() if not r.is_final]
        self.waited = [r.identity.id for _, r in waiting]
        for box, row in waiting:
            box.log(f"still {row.state} at quiescence's end: {row.identity.id} to {row.to} (deadline {O.deadline(row):.0f})")
            self.checker.waits_honestly(box, row)
        if not waiting or not self.cfg.past_deadlines:
            return
        last = max(O.deadline(r) for _, r in waiting)
        self.log(f"waiting past the last deadline, {last:.0f}")
        while any(b.engine is not None and b.engine.clock() < last + 30 for b in self.boxes) and not self.settled():
            self.tidy()
            await trio.sleep(60.0)
            self.after_step()

    def tidy(self) -> None:
        for box in self.boxes:
            for pane_id in box.live_panes():
                box.server.answer_menu(pane_id)
                agent = box.server.panes[pane_id].agent
                if agent is not None and agent.composer and not agent.busy(box.now()):
                    box.server.person_clears(pane_id)
            if box.engine is not None:
                for card in box.engine.person.cards():
                    box.call(f"approve {card['id']}", lambda e, c=card["id"]: e.person.decide(c, Decision.APPROVE_ONCE))


STATS = D.STATS


def run_federation(
    seed: int, cfg: FedConfig | None = None, script: Callable[[Federation], Any] | None = None
) -> Federation:
    """Run one seed of the federation to the end (``script``: a scenario's schedule in place of the
    seeded one); the Federation holds the trace and the violations."""
    import trio._core._run as trio_run

    with tempfile.TemporaryDirectory(prefix=f"fedsim-{seed}-") as tmp:
        fed = Federation(seed, Path(tmp), cfg, script)
        saved = trio_run._ALLOW_DETERMINISTIC_SCHEDULING
        trio_run._ALLOW_DETERMINISTIC_SCHEDULING = True
        trio_run._r.seed(seed)
        quiet = logging.getLogger("connectd")
        level, quiet.level = quiet.level, logging.CRITICAL
        handler = FailureLog(fed)
        logging.getLogger("connectd.supervisor").addHandler(handler)
        began = time.perf_counter()
        try:
            with seeded_secrets(seed):
                trio.run(fed.main, clock=trio.testing.MockClock(autojump_threshold=0))
        finally:
            STATS["seeds"] += 1
            STATS["steps"] += fed.steps
            STATS["io"] += sum(b.io_calls for b in fed.boxes)
            STATS["kills"] += sum(b.kills for b in fed.boxes)
            STATS["seconds"] += time.perf_counter() - began
            if fed.waited and script is None:
                STATS.setdefault("waited", []).append(seed)
            trio_run._ALLOW_DETERMINISTIC_SCHEDULING = saved
            quiet.level = level
            logging.getLogger("connectd.supervisor").removeHandler(handler)
            for box in fed.boxes:
                if box.store is not None:
                    box.store.close()
    return fed


def check(fed: Federation) -> None:
    """Raise on a violation, with the seed to replay and the trace's last lines."""
    if fed.violations:
        tail = "\n".join(fed.trace[-50:])
        raise D.Violation(
            f"SEED={fed.seed}: {len(fed.violations)} violation(s), first ({fed.kinds[0]}): {fed.violations[0]}\n"
            f"replay: make simulate-federation SEED={fed.seed}\n--- last trace lines ---\n{tail}"
        )
