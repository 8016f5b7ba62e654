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
while (a partition outlasting the outbox's liveness). Across boxes, from the seed's own stream
(:meth:`Federation.across`, through the calls the CLI's and the page's routes make): one pairing removed
(``pair remove``) in 30 % of the seeds, in the schedule's second half, and in half of those paired again
as a new pairing by both approvals; a sender whose message is across boxes revoked on its box; the
recipient of a message from another box revoked on its own; a pairing's messages turned off (``pair
set messages=off``) or on again. Two boxes, or three in a quarter of the seeds,
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

from connectcore import grants
from connectcore import hub as H
from connectcore.consent import Decision
from connectcore.federation import envelope as E
from connectcore.federation import inbox as I
from connectcore.federation import outbox as O
from connectcore.federation import pairing as P
from connectcore.federation import remote
from connectcore.federation.remote import REMOTE_PREFIX
from connectcore.grants import Preset
from connectcore.ports import BusUnavailable, Delivery, PublishAck
from connectd.daemon.ids import hash_token
from connectd.federation import desk as desk_module
from connectd.federation import flow as flow_module
from connectd.federation import keys as K
from connectd.federation import remote_calls as remote_calls_module
from connectd.federation.desk import open_desk
from connectd.federation.seal import LocalBox, receive, seal
from connectd.store.store import Store
from tests.simulation import driver as D
from tests.simulation import invariants
from tests.simulation.sim_bus import Faults, SimBus, SimNetwork

NAMES = ("laptop", "devbox", "builder")
FED_BODY = re.compile(r"fedmsg-\d+")
BODIES_PER_BOX = 1_000_000  # each box's local messages are simmsg-(1 + index * this) onwards
BUS_POLL = 0.25  # a waiting fetch looks again this often (virtual seconds)
RECEIPT_PROMPT = 20.0  # virtual seconds of a connected link within which a final outcome's receipt is published
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
    # Across boxes, from the seed's own stream (``Federation.xrng``: the schedule above draws as before):
    # the chance, at each step, that the person revokes an agent whose message is across boxes (on the
    # sender's box, or the recipient on its own) or turns a pairing's messages off (on again if off)
    across: dict[str, float] = field(
        default_factory=lambda: {"revoke_sender": 0.025, "revoke_recipient": 0.02, "messages": 0.03}
    )
    # the chance, at each step, that a box holding a remote sender's open card has its daemon killed and
    # kept down longer than a card's life (900 s): its recovery expires the card and receipts it (own stream)
    outage: float = 0.04
    removal: float = 0.3  # the fraction of seeds with one pairing removed (``pair remove``), in the schedule's second half
    pair_again: float = 0.5  # of those, the fraction whose two boxes pair again (a new pairing) a few steps later
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
    ``NatsBus`` (``connect``, ``errors``, ``close``); its publish and acknowledge are I/O
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

    @property
    def reconnecting(self) -> bool:
        return self._nc is not None and not self._nc.is_closed and not self.connected

    async def connect(self, *_args: Any, **_kw: Any) -> None:
        self._up()
        self._nc = SimpleNamespace(is_closed=False)

    async def close(self) -> None:
        self._nc = None

    async def _park(self) -> None:
        """Where a killed daemon's bus calls stop (as its store calls do, ``SimTmux.park``): nothing of
        it runs again. Cancellation ends the wait; a call the daemon shields from cancellation (one
        delivery's handling, a bus effect: pump.py) stays parked until the run ends, and then fails."""
        await self.box.server.over.wait()
        raise BusUnavailable("the simulation ended (a killed daemon's call)")

    async def _io(self, op: str) -> bool:
        """A bus call of this box: parks for good once its daemon is killed; True: kill it just after."""
        box = self.box
        if box.server.generation != self.generation:
            await self._park()
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
            await self._park()
        return False

    async def _killed_after(self, op: str) -> None:
        self.box.kill(f"just after bus {op}")
        await self._park()

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
        self.first_body = 1 + index * BODIES_PER_BOX  # no two boxes' local messages share a body
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
        self.outage = 0.0  # virtual seconds the next restart waits (a long outage), then 0
        self.down_until = 0.0  # (virtual time) when the running outage ends: quiescence waits for it

    def log(self, line: str) -> None:
        self.seq += 1
        self.fed.log(f"[{self.name}] {line}")

    def violate(self, what: str, kind: str = "") -> None:
        self.fed.violate(f"[{self.name}] {what}", kind)

    @property
    def running(self) -> Any:
        """The daemon once its start is done, else None. Between a start's beginning and its end the
        engine exists but its hub's federation state (inbox, outbox) is not recovered yet: ``None``
        (seed 6,028: a check read it and failed the run)."""
        return self.engine if self.engine is not None and self.started else None

    @property
    def desk(self) -> Any:
        return None if self.engine is None else self.engine.federation

    def _federate(self, engine: Any) -> None:
        """What ``connectd.daemon.app`` does for a federated box, with the simulated bus for NATS: the
        desk opened on the engine (``open_desk``), then, once the engine's supervisor runs (after its
        recovery), ``PairingDesk.start``: the desk's two ticks and the pump's loops on this life's
        :class:`SimLink`. As in the daemon, the pump does not exist while the engine recovers: a receipt
        its recovery makes is held by the desk until the loops start (checked by
        :meth:`FedChecker.receipt_prompt`)."""
        desk = open_desk(self.data_dir, engine)
        assert desk is not None
        engine.federation = desk
        self.link = SimLink(self.fed.network, self)
        desk.bus = self.link
        run = engine.run

        def begin() -> None:
            desk.start(engine.supervisor)

        async def federated(*, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
            await run(task_status=_ThenStarted(task_status, begin))

        engine.run = federated

    async def _life(self, engine: Any, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        self._federate(engine)
        await super()._life(engine, task_status)

    def kill(self, where: str) -> None:
        if self.outage and self.engine is not None:
            self.down_until = trio.current_time() + self.outage  # (quiescence may begin at this instant)
        super().kill(where)

    async def _restart_after_kill(self, ended: Any) -> None:
        if self.outage:
            down, self.outage = self.outage, 0.0
            await trio.sleep(down)
        await super()._restart_after_kill(ended)

    async def start_daemon(self) -> None:
        self.fed.checker.life_begins(self)
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
        self.reported: set[E.Identity] = set()  # rows found not final after their pairing's removal (once each)
        self.cancels: dict[str, set[E.Identity]] = {}  # box name -> identities whose cancel its daemon acknowledged
        self.receipted: set[tuple[str, E.Identity, str]] = set()  # (box name, identity, final outcome) published
        self.final_before: dict[str, set[E.Identity]] = {}  # box name -> identities final in its store at this life's start
        self.unreceipted: dict[tuple[str, E.Identity], float] = {}  # (box name, identity) -> since when (linked time)

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
        identity = remote.identity_of(message.sender, message.id)
        record = None if identity is None or engine.hub.inbox is None else engine.hub.inbox.records.get(identity)
        if identity is None or record is None:
            box.violate(f"pasted {body}, which the inbox does not hold")
            return
        self.nothing_after_removal(box, record.pairing, body)
        self.nothing_after_cancel(box, identity, body)
        self.nothing_after_recipient_revoked(box, message, body)
        self.nothing_while_messages_off(box, record.pairing, body)

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

    def nothing_after_removal(self, box: BoxSim, pairing: str, body: str) -> None:
        """After a pairing's removal is committed on a box (its ``pair remove`` returned there, or its hub's
        step is durable), nothing from the other box under that pairing is typed there."""
        engine = box.engine
        assert engine is not None
        inbox = engine.runner.durable.inbox
        if (box.name, pairing) in self.fed.removal_returned or (inbox is not None and pairing in inbox.removed):
            box.violate(f"{body} typed after the removal of its pairing {pairing[:8]} was committed",
                        "typed_after_removal")

    def nothing_after_cancel(self, box: BoxSim, identity: E.Identity, body: str) -> None:
        """A message is not typed after its sender's box's cancel was committed on its recipient's box (the
        cancel's delivery acknowledged): typing that had started finished before it, under the send lock."""
        if identity in self.cancels.get(box.name, set()):
            box.violate(f"{body} typed after its sender's cancel was committed here", "typed_after_cancel")

    def nothing_after_recipient_revoked(self, box: BoxSim, message: Any, body: str) -> None:
        """A message from another box accepted before the revocation of its recipient on this box returned is
        not typed after it."""
        if box.cfg.wall_step:  # (a stepped wall clock reorders the lives' clocks: judged by the single box's rule only)
            return
        for principals, _life, returned in box.checker.revocations:
            if message.recipient_principal in principals and message.created_at < returned:
                box.violate(f"{body} typed after the revocation of its recipient {message.recipient_principal} "
                            "returned", "typed_after_revocation")

    def nothing_while_messages_off(self, box: BoxSim, pairing: str, body: str) -> None:
        """Nothing from a box is typed while its pairing's messages are off, once ``pair set messages=off``
        returned."""
        found = box.desk is not None and next((p for p in box.desk.book.pairings.values() if p.id == pairing), None)
        if (box.name, pairing) in self.fed.messages_off and found and not found.settings.messages:
            box.violate(f"{body} typed while messages from its box are off here", "typed_while_off")

    def on_ack(self, box: BoxSim, delivery: Delivery) -> None:
        """A message from a paired box is acknowledged on the bus only once its identity is committed.

        Read from the recipient's store at the acknowledgement. One its judgement refuses (say stamped
        too far ahead) is acknowledged with its audit line and nothing else."""
        inner = open_wire(self.fed, delivery.subject, delivery.data)
        if isinstance(inner, E.CancelInner) and box.desk is not None:
            self.on_cancel_acked(box, inner, delivery)
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

    def on_cancel_acked(self, box: BoxSim, inner: E.CancelInner, delivery: Delivery) -> None:
        """(Notes a cancel its judgement lets in, acknowledged once its step committed: see
        :meth:`nothing_after_cancel`.)"""
        if receive(box.local, delivery.subject, delivery.data, box.desk.view()).decision is E.Decision.REFUSED:
            return
        self.cancels.setdefault(box.name, set()).add(inner.message)

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
        if inner.outcome != "accepted":
            self.receipted.add((box.name, inner.message, inner.outcome))

    # --- after every step and every start --------------------------------------------------------------

    def after_step(self) -> None:
        for box in self.fed.boxes:
            if box.running is not None:
                self.nothing_from_the_unpaired(box)
                self.receipt_prompt(box)
                durable = box.engine.runner.durable
                for row in durable.outbox.rows.values():
                    self.one_final_outcome(box, row)
                    if durable.inbox is not None and row.pairing in durable.inbox.removed:
                        self.final_once_removed(box, row)

    def life_begins(self, box: BoxSim) -> None:
        """(Notes the identities already final in the store a daemon starts on: a life killed between a
        final commit and its receipt's publish leaves that receipt to the sender's next copy, by design.)"""
        store = Store.open(box.data_dir)
        try:
            self.final_before[box.name] = {r.identity for r in store.inbox_records() if r.state in I.FINAL}
        finally:
            store.close()

    def receipt_prompt(self, box: BoxSim) -> None:
        """A final outcome a box commits for a message from an active pairing is published as its receipt
        within 20 s of a connected link, in the life that committed it, its recovery's too.

        (A receipt the recovery makes, before the bus loops exist, is held until they start: dropped, the
        sender would learn the outcome only from its copy 300 s later.) The 20 s count only while the
        box's link is up; a tombstone's receipt waits for its message."""
        engine, desk, link = box.engine, box.desk, box.link
        if engine is None or desk is None or engine.hub.inbox is None:
            return
        now, up = trio.current_time(), link is not None and link.connected
        active = {p.id for p in desk.book.pairings.values() if p.state is P.PairingState.ACTIVE}
        before = self.final_before.get(box.name, set())
        for identity, record in engine.hub.inbox.records.items():
            key = (box.name, identity)
            if (record.state not in I.FINAL or record.tombstone or identity in before or record.pairing not in active
                    or (box.name, identity, str(record.state)) in self.receipted):
                self.unreceipted.pop(key, None)
                continue
            since = self.unreceipted.setdefault(key, now)
            if not up:
                self.unreceipted[key] = now
            elif now - since > RECEIPT_PROMPT and identity not in self.reported:
                self.reported.add(identity)
                box.violate(f"{identity} final {record.state} for {now - since:.0f} s with the bus up, and no "
                            "receipt published", "receipt_late")

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

    def final_once_removed(self, box: BoxSim, row: O.Row) -> None:
        """Once a pairing's removal is durable on a box, every row it admitted across it has its final outcome
        (never left: ``cancelled``; left: ``unconfirmed``, unless a receipt ended it before)."""
        if not row.is_final and row.identity not in self.reported:
            self.reported.add(row.identity)
            box.violate(f"{row.identity.id} still {row.state} after its pairing's removal", "removal_not_final")

    def revocation_cancels_at_once(self, box: BoxSim, engine: Any, members: frozenset[str], at: float) -> None:
        """When the revocation of a sender returns, none of its messages across boxes admitted before it is
        queued, published or accepted: each is final or ``cancelling``."""
        waiting = (O.OutboxState.QUEUED, O.OutboxState.PUBLISHED, O.OutboxState.ACCEPTED)
        for row in engine.hub.outbox.rows.values():
            if row.identity.principal in members and row.created_at <= at and row.state in waiting:
                box.violate(f"{row.identity.id} still {row.state} when the revocation of its sender returned",
                            "revocation_left_rows")

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
            if box.running is None:
                box.violate("the daemon is not running (or not yet started) at the end")
                continue
            for row in box.engine.hub.outbox.rows.values():
                self.every_row_final(box, row)
                self.outcome_true_on_the_recipient(row)
                self.cancelled_only_if_never_there(box, row)
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
        never ``queued`` with the bus up; never across a pairing the other box removed (its directory
        tombstone tells this box even when the ``unpair`` is lost: ``removal_unheard``)."""
        other = self.fed.box_by_id.get(row.to)
        if other is None or other.running is None or box.running is None or box.desk is None:
            return
        theirs = next((p for p in other.desk.book.pairings.values() if p.id == row.pairing), None) if other.desk else None
        if theirs is not None and theirs.state is P.PairingState.REMOVED:
            # the other box removed the pairing: its unpair may be lost, but its tombstone is in the key
            # (put at the removal, or at the publish loop's next look), which this box hears live or
            # reads by direct get, so the removal is heard here by quiescence's end, and the row final
            box.violate(f"{row.identity.id} still {row.state}: {other.name} removed the pairing and this box "
                        "has not heard it (neither its unpair nor its directory tombstone)", "removal_unheard")
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

    def cancelled_only_if_never_there(self, box: BoxSim, row: O.Row) -> None:
        """A row ends ``cancelled`` only if it never left its box or the other box committed it ``cancelled``
        (a removal makes a row that left ``unconfirmed``)."""
        if row.state is not O.OutboxState.CANCELLED or not row.left:
            return
        other = self.fed.box_by_id.get(row.to)
        if other is None or other.store is None:
            return
        held = {r.identity: r for r in other.store.inbox_records()}.get(row.identity)
        if held is None or held.state is not I.InboxState.CANCELLED:
            box.violate(f"{row.identity.id} cancelled though it left and {other.name} holds it "
                        f"{None if held is None else held.state}", "cancel_untrue")

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
        # the actions across boxes draw from their own stream, so the schedule above draws as before
        self.xrng = random.Random(seed * 104729 + 11)
        self.orng = random.Random(seed * 7919 + 3)  # the long outages' own stream (the schedules above draw as before)
        steps = self.cfg.steps if script is None else 0
        self.removal_at = self.xrng.randrange(steps // 2, steps) if steps and self.xrng.random() < self.cfg.removal else None
        self.pair_again_at = (
            min(steps - 1, self.removal_at + self.xrng.randint(1, 4))
            if self.removal_at is not None and self.xrng.random() < self.cfg.pair_again else None
        )
        if self.removal_at is not None:
            self.trace.append(f"a pairing is removed at step {self.removal_at}; paired again at {self.pair_again_at}")
        self.invited = False  # the boxes of the removed pairing were invited to pair again
        self.removals: dict[str, str] = {}  # pairing id -> the name of the box whose person removed it
        self.removal_returned: set[tuple[str, str]] = set()  # (box name, pairing id): its ``pair remove`` returned
        self.messages_on_at: dict[tuple[str, str], int] = {}  # (box name, pairing id) -> the step it is set on again
        self.messages_off: set[tuple[str, str]] = set()  # (box name, pairing id): ``messages=off`` returned, not on since
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
        senders = [(b, p) for b in self.boxes if b.engine is not None for p in b.live_panes() if self.revoked(b, p) is False]
        if not senders:
            return
        box, pane = rng.choice(senders)
        other = rng.choice([b for b in self.boxes if b is not box])
        panes = [p for p in other.live_panes() if not self.revoked(other, p)]
        if panes:
            self.send(box, pane, other, rng.choice(panes))

    @staticmethod
    def revoked(box: BoxSim, pane: str) -> bool | None:
        """Whether the agent in ``pane`` holds a token its box revoked (None: no token, or the daemon is
        down): a revoked agent neither sends (its calls are refused ``not_connected``) nor is sent to
        (since the actions across boxes revoke agents, so that the run goes on delivering)."""
        token = box.token_of(pane)
        if token is None or box.engine is None:
            return None
        record = box.engine.hub.book.tokens.get(hash_token(token))
        return record is not None and record.state is not grants.TokenState.LIVE

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

    # --- across boxes: removals, revocations, messages off (each as the CLI's and page's routes call it) ---

    async def across(self) -> None:
        """This step's actions across boxes, from their own stream: the seed's one removal (and its
        pairing again), a revocation of an agent whose message is across boxes (the sender on its box,
        or the recipient on its own), a pairing's messages turned off or on again; and the person
        approves a pairing request waiting on a box (the second approval of pairing again)."""
        x, step = self.xrng, self.steps
        draws = {k: x.random() for k in sorted(self.cfg.across)}  # as many draws at every step
        if step == self.removal_at:
            self.remove_pairing()
        if self.pair_again_at is not None and step >= self.pair_again_at and not self.invited:
            self.invite_again()
        self.approve_requests()
        if draws.get("revoke_sender", 1.0) < self.cfg.across["revoke_sender"]:
            self.revoke_sender()
        if draws.get("revoke_recipient", 1.0) < self.cfg.across["revoke_recipient"]:
            self.revoke_recipient()
        if draws.get("messages", 1.0) < self.cfg.across["messages"]:
            self.toggle_messages()
        if self.orng.random() < self.cfg.outage:
            self.long_outage()
        for box_name, pairing_id in sorted(k for k, at in self.messages_on_at.items() if at <= step):
            del self.messages_on_at[(box_name, pairing_id)]
            self.messages_on(self.box_named[box_name], pairing_id)

    def long_outage(self) -> None:
        """A box holding a remote sender's open card has its daemon killed now and kept down longer than
        a card's life: its restart's recovery expires the card (``expired``), and that receipt is made
        before the bus loops exist (what :meth:`FedChecker.receipt_prompt` then checks)."""
        holding = [b for b in self.boxes if b.engine is not None and not b.outage and any(
            c.sender.startswith(REMOTE_PREFIX) for c in b.engine.hub.cards.values())]
        if not holding:
            return
        box = self.orng.choice(holding)
        box.outage = round(self.orng.uniform(905.0, 1000.0), 2)
        box.faults.kill_in = 1  # killed at its next I/O call, as every kill is (a call in flight then parks)
        box.log(f"a long outage: the daemon killed at its next I/O call, then down for {box.outage:.0f} s")

    def active(self, box: BoxSim, other: BoxSim) -> Any:
        """``box``'s active pairing with ``other``, or None."""
        if box.desk is None:
            return None
        return next((p for p in box.desk.book.pairings.values()
                     if p.box_id == other.box_id and p.id and p.state is P.PairingState.ACTIVE), None)

    def held_across(self, box: BoxSim, pairing: str) -> int:
        """What ``box`` holds across ``pairing``: its rows not final, and the messages it accepted not final
        (nothing known while its daemon is down)."""
        if box.running is None:
            return 0
        rows = sum(1 for r in box.engine.hub.outbox.rows.values() if r.pairing == pairing and not r.is_final)
        return rows + len(H.pairing_panes(box.engine.hub, pairing))

    def remove_pairing(self) -> None:
        """``connectd pair remove BOX`` on one box (``PairingDesk.remove``, what the route calls), chosen
        where something is in flight across the pairing if anything is."""
        x = self.xrng
        pairs = [(a, b, p) for a in self.boxes for b in self.boxes if a is not b and a.engine is not None
                 and (p := self.active(a, b)) is not None]
        if not pairs:
            return
        busy = [t for t in pairs if self.held_across(t[0], t[2].id) or self.held_across(t[1], t[2].id)]
        box, other, pairing = x.choice(busy or pairs)
        self.removals[pairing.id] = box.name
        box.log(f"pair remove {other.name} (pairing {pairing.id[:8]})")

        def returned(_: Any, box: BoxSim = box, pairing_id: str = pairing.id) -> None:
            self.removal_returned.add((box.name, pairing_id))

        box.call(f"pair remove {other.name}", lambda e, o=other.box_id: e.federation.remove(o), returned)

    def invite_again(self) -> None:
        """The two boxes of the removed pairing pair again, a new pairing by the same two approvals:
        ``pair invite`` on the box that removed it, ``pair accept`` on the other (the request goes over
        the bus, again until answered), ``pair approve`` once the request is there (:meth:`approve_requests`)."""
        if not self.removals:
            return
        pairing_id, name = next(iter(self.removals.items()))
        box = self.box_named[name]
        other = next((b for b in self.boxes if b is not box and any(
            p.id == pairing_id for p in (b.desk.book.pairings.values() if b.desk is not None else ()))), None)
        if other is None or box.engine is None or other.engine is None:
            return  # (a daemon down: the next step tries)
        self.invited = True

        def invited(result: Any, other: BoxSim = other) -> None:
            other.call("pair accept", lambda e, c=result["code"]: e.federation.accept(c))

        box.log(f"pair invite, for {other.name} again")
        box.call("pair invite", lambda e: e.federation.invite(), invited)

    def approve_requests(self) -> None:
        for box in self.boxes:
            if box.desk is None or box.engine is None:
                continue
            for request in box.desk.requests():
                box.call(f"pair approve {request['name']}", lambda e, r=request["id"]: e.federation.approve(r))

    def revoke_sender(self) -> None:
        """The person revokes an agent whose message is across boxes (``revoke``, ``Person.revoke_principals``),
        on its own box: one with a message that left first, else one still queued."""
        x = self.xrng
        rows = sorted(((b, r) for b in self.boxes if b.running is not None for r in b.engine.hub.outbox.rows.values()
                       if r.identity.principal in b.engine.hub.book.principals), key=lambda t: (t[0].name, str(t[1].identity)))
        left = [(b, r) for b, r in rows if r.state in (O.OutboxState.PUBLISHED, O.OutboxState.ACCEPTED)]
        queued = [(b, r) for b, r in rows if r.state is O.OutboxState.QUEUED]
        if not (left or queued):
            return
        box, row = x.choice(left or queued)
        principal = row.identity.principal
        box.log(f"revoke the sender {principal} of {row.identity.id} ({row.state})")
        box.call(f"revoke sender {principal}", lambda e, p=principal, b=box: self._revoke_sender(b, e, p),
                 lambda _, b=box: self.launch_another(b))

    async def _revoke_sender(self, box: BoxSim, engine: Any, principal: str) -> None:
        members = frozenset(grants.group(engine.hub.book, principal))
        at = engine.clock()
        await box._revoke(engine, [principal])
        self.checker.revocation_cancels_at_once(box, engine, members, at)

    def revoke_recipient(self) -> None:
        """The person revokes, on its own box, the recipient of a message from another box not yet final."""
        x = self.xrng
        held = sorted(((b, m) for b in self.boxes if b.engine is not None for m in b.engine.hub.messages.values()
                       if m.sender.startswith(REMOTE_PREFIX) and not m.is_final and m.recipient_principal
                       and m.recipient_principal in b.engine.hub.book.principals), key=lambda t: (t[0].name, t[1].ref))
        if not held:
            return
        box, message = x.choice(held)
        principal = message.recipient_principal
        box.log(f"revoke the recipient {principal} of {message.ref} ({message.state})")
        box.call(f"revoke recipient {principal}", lambda e, p=principal, b=box: b._revoke(e, [p]),
                 lambda _, b=box: self.launch_another(b))

    def messages_on(self, box: BoxSim, pairing_id: str) -> None:
        """``connectd pair set BOX messages=on`` (the pairing by its id)."""
        self.messages_off.discard((box.name, pairing_id))  # from before the call: what comes after it may be typed
        box.log(f"pair set {pairing_id[:8]} messages=on")
        box.call(f"pair set {pairing_id[:8]} messages=on",
                 lambda e, p=pairing_id: e.federation.set_settings(p, ["messages=on"]))

    def launch_another(self, box: BoxSim) -> None:
        """After a revocation the person starts another agent, so the box keeps senders and recipients."""
        box.call("launch", lambda e: e.launches.launch("claude", preset=Preset.COLLABORATE, cwd="/work"))

    def toggle_messages(self) -> None:
        """``connectd pair set BOX messages=off`` (``PairingDesk.set_settings``) on a box, for a pairing it
        holds messages from if there is one; on again if they are off."""
        x = self.xrng
        pairings = [(b, p) for b in self.boxes if b.engine is not None and b.desk is not None
                    for p in b.desk.book.pairings.values() if p.id and p.state is P.PairingState.ACTIVE]
        if not pairings:
            return
        busy = [(b, p) for b, p in pairings if H.pairing_panes(b.engine.hub, p.id)]
        box, pairing = x.choice(busy or pairings)
        key = (box.name, pairing.id)
        if not pairing.settings.messages or key in self.messages_off:
            self.messages_on(box, pairing.id)
            return
        box.log(f"pair set {pairing.name} messages=off")

        def returned(_: Any, key: tuple[str, str] = key) -> None:
            self.messages_off.add(key)
            self.messages_on_at[key] = self.steps + self.xrng.randint(1, 5)  # on again a few steps later

        box.call(f"pair set {pairing.name} messages=off",
                 lambda e, p=pairing.box_id: e.federation.set_settings(p, ["messages=off"]), returned)

    # --- the run ---------------------------------------------------------------------------------------

    def after_step(self) -> None:
        for box in self.boxes:
            box.checker.after_step()
        self.checker.after_step()

    async def main(self) -> None:
        async with trio.open_nursery() as nursery:
            for box in self.boxes:
                box._nursery = nursery
            try:
                await D.bounded(self._run)
            finally:  # the run ended, or the driver raised: let go what killed daemons left parked
                for box in self.boxes:
                    box.server.over.set()
            nursery.cancel_scope.cancel()

    async def _run(self) -> None:
        await self.setup()
        if self.script is not None:
            await self.script(self)
        for _ in range(0 if self.script is not None else self.cfg.steps):
            await trio.sleep(round(self.rng.expovariate(1 / self.cfg.gap), 3))
            for box in self.boxes:
                box.step_wall()  # (each box's own stream; off unless FedConfig.box.wall_step)
            await self.act(self.pick())
            await self.across()
            await trio.sleep(0)
            self.steps += 1
            self.after_step()
        await self.quiesce()
        for box in self.boxes:
            box.checker.at_end()
        self.checker.at_end()

    def rows(self) -> list[tuple[BoxSim, O.Row]]:
        return [(b, r) for b in self.boxes if b.running is not None for r in b.engine.hub.outbox.rows.values()]

    def settled(self) -> bool:
        return all(b.running is not None and b.checker.settled() and not self.pairing_open(b) for b in self.boxes) and all(
            r.is_final for _, r in self.rows()
        ) and not self.checker.unreceipted  # (a final outcome waiting for its receipt: receipt_prompt's 20 s run)

    def pairing_open(self, box: BoxSim) -> bool:
        """A pairing again not yet made on ``box``: a request waiting for its approval, or a pairing
        requested."""
        return box.desk is not None and (
            bool(box.desk.requests())
            or any(p.state is P.PairingState.REQUESTED for p in box.desk.book.pairings.values())
        )

    async def quiesce(self) -> None:
        """Faults off, links healed, every card approved and composer cleared on every box; then wait
        until everything is final, or a row waits honestly (``queued`` to its sender) and its deadline
        passes."""
        for box in self.boxes:
            box.faults.on = False
            box.faults.kill_in = None
            if box.down_until <= trio.current_time():
                box.outage = 0.0  # a long outage whose kill had not come yet: none
        self.network.faults = Faults()
        self.network.cut.clear()
        self.network.up = True
        self.log("quiesce")
        back = max(b.down_until for b in self.boxes)
        while trio.current_time() < back + 10.0:  # a long outage still running: quiescence starts once it is over
            await trio.sleep(5.0)
            self.after_step()
        began = trio.current_time()
        deadline = began + self.cfg.quiet
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
        self.approve_requests()
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
