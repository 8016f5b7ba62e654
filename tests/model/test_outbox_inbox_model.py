"""Model of one message path across two boxes: box A's outbox (connectcore.federation.outbox) sends to
box B's inbox (connectcore.federation.inbox) through an in-memory JetStream-like channel that drops,
duplicates, reorders and redelivers what was not acknowledged; every envelope is judged by the real
``envelope.judge``. Each box's shell runs its step's effects in order, a run of ``Persist`` effects as
one transaction, and either box may crash between any two of them and restart from its store alone (B
then recovers a message whose typing had started as ``unconfirmed``, never typing it again). B's rules
accept or refuse each new message; its local messages wait, get typed, and end; A's sender is revoked;
time moves across the id's hour and the deadline.

Claims, one line each:

- never typed twice: no identity is typed more than once on B, across duplicates, cancels and restarts.
- every admitted message reaches exactly one final outcome on the sender: once final it never changes,
  and once quiet and past the deadline every row is final.
- nothing the receiver acknowledged is lost across a restart: every identity B receipted or whose
  delivery it acknowledged is in B's store, and in the inbox reloaded from it, in that state or a later one.
- a receipt is never sent before its commit: each receipt B publishes is the one its store already holds.
- a duplicate gets the same receipt: for one identity and outcome, every receipt B publishes is the same
  value with the same nonce (so the same bytes).
- the outcome the sender sees is the receiver's or says it is not: delivered, declined, refused, expired or
  cancelled on A is B's committed outcome (expired or cancelled also when B never held it, and then never
  typed there); only unconfirmed is A's own word for "B did not say".
- acceptance is end to end: a row A holds ``accepted`` is one B committed (a publish acknowledgement,
  which A also gets, is never taken for it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from connectcore.effects import Effect, Persist
from connectcore.federation import envelope as E
from connectcore.federation import inbox as I
from connectcore.federation import outbox as O
from connectcore.federation.boxes import BoxKeys
from connectcore.federation.effects import AckDelivery, PublishEnvelope, PublishReceipt

KA, KB = (BoxKeys(bytes([n]) * 32, bytes([n + 1]) * 32) for n in (1, 11))
A, B = KA.box_id, KB.box_id
PAIRING = "pairing-1"
T0 = 1_796_500_000.0
PRINCIPALS = ("p-1", "p-2")
LOCAL = "message"  # B's local message rows (the hub's), keyed by identity
RECIPIENT = ("agent:codex:s-2", "%4")

index = st.integers(0, 20)
crash = st.none() | st.integers(0, 5)


@dataclass(frozen=True)
class Wire:
    """One envelope on the bus: what the shell reports once it has verified and opened it."""

    kind: E.Kind
    facts: E.Facts
    identity: E.Identity


def wire(r: E.Routing, inner: bytes, identity: E.Identity, nonce: bytes) -> Wire:
    """As the receiving shell reports it: the signature verified, the seal opened to ``inner``."""
    outer = E.Outer(r, nonce, b"sealed stands in").encode()
    facts = E.Facts(E.subject_for(r.kind, r.sender, r.to), E.SIGNATURE_BYTES + len(outer), True, outer, inner)
    return Wire(r.kind, facts, identity)


class Channel:
    """A JetStream work queue stand-in: stored envelopes wait to be fetched; a fetched one is pending
    until acknowledged, and returns to the queue (redelivery) if it is not."""

    def __init__(self) -> None:
        self.queue: list[Wire] = []
        self.pending: dict[str, Wire] = {}
        self.count = 0

    def fetch(self, i: int) -> tuple[str, Wire] | None:
        if not self.queue:
            return None
        item = self.queue.pop(i % len(self.queue))  # any order
        self.count += 1
        handle = f"d-{self.count}"
        self.pending[handle] = item
        return handle, item

    def ack(self, handle: str) -> None:
        self.pending.pop(handle, None)

    def redeliver(self) -> None:
        self.queue.extend(self.pending.values())
        self.pending.clear()


def segments(effects: tuple[Effect, ...]) -> list[list[Effect]]:
    """A run of Persist effects is one transaction (the group commit); every other effect stands alone."""
    out: list[list[Effect]] = []
    for e in effects:
        if isinstance(e, Persist) and out and isinstance(out[-1][0], Persist):
            out[-1].append(e)
        else:
            out.append([e])
    return out


class TwoBoxes(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = T0
        self.nonces = 0
        self.ids = 0
        # box A
        self.outbox = O.Outbox(own=A)
        self.a_store: dict[E.Identity, O.Row] = {}
        self.heard: float | None = None
        self.bus_up = True
        # box B
        self.inbox = I.Inbox(own=B)
        self.b_store: dict[E.Identity, I.Record] = {}
        self.local: dict[E.Identity, str] = {}  # B's local message: waiting, typing, or its final outcome
        self.local_store: dict[E.Identity, str] = {}
        self.typed: dict[E.Identity, int] = {}
        # the bus
        self.to_b, self.to_a = Channel(), Channel()
        # what the claims remember
        self.sent_receipts: dict[tuple[E.Identity, str], tuple[E.ReceiptInner, bytes]] = {}
        self.acknowledged: dict[E.Identity, str] = {}  # identity -> the outcome B last receipted ("accepted" or final)
        self.first_final: dict[E.Identity, O.OutboxState] = {}

    def nonce(self) -> bytes:
        self.nonces += 1
        return self.nonces.to_bytes(E.NONCE_BYTES, "big")

    # --- the shells ---------------------------------------------------------------------------------

    def run_a(self, outbox: O.Outbox, effects: tuple[Effect, ...], crash_at: int | None) -> None:
        for n, segment in enumerate(segments(effects)):
            if crash_at is not None and n == crash_at:
                self.restart_a()
                return
            for e in segment:
                if isinstance(e, Persist):
                    assert e.kind == O.STORE
                    self.a_store[e.key[0]] = e.record
                elif isinstance(e, PublishEnvelope):
                    row = self.a_store[e.identity]  # sealed from the stored row
                    assert e.attempt <= (row.attempt if e.kind is E.Kind.MESSAGE else row.cancel_attempt)
                    if e.kind is E.Kind.MESSAGE:
                        routing = E.Routing(E.Kind.MESSAGE, A, e.to, pairing=e.pairing)
                        self.to_b.queue.append(wire(routing, row.inner, row.identity, row.nonce))
                    else:
                        assert row.cancel_nonce is not None and row.cancel_at is not None
                        cancel = E.CancelInner(E.Routing(E.Kind.CANCEL, A, e.to, pairing=e.pairing), row.identity,
                                               row.digest, row.created_at, row.cancel_reason, row.cancel_at)
                        self.to_b.queue.append(wire(cancel.routing, E.encode_inner(cancel), row.identity,
                                                    row.cancel_nonce))
                elif isinstance(e, AckDelivery):
                    self.to_a.ack(e.delivery)
        self.outbox = outbox

    def restart_a(self) -> None:
        self.outbox = O.Outbox(own=A, rows=dict(self.a_store))
        self.heard = None

    def run_b(self, inbox: I.Inbox, effects: tuple[Effect, ...], crash_at: int | None) -> None:
        for n, segment in enumerate(segments(effects)):
            if crash_at is not None and n == crash_at:
                self.restart_b()
                return
            for e in segment:
                if isinstance(e, Persist) and e.kind == I.STORE:
                    if e.record is None:
                        self.b_store.pop(e.key[0], None)
                    else:
                        self.b_store[e.key[0]] = e.record
                elif isinstance(e, Persist):
                    assert e.kind == LOCAL
                    self.local_store[e.key[0]] = e.record
                elif isinstance(e, PublishReceipt):
                    identity, outcome = e.inner.message, e.inner.outcome
                    held = self.b_store.get(identity)
                    # a receipt is never sent before its commit
                    assert held is not None and (held.receipt, held.nonce) == (e.inner, e.nonce), \
                        f"receipt {outcome} for {identity} published before its commit"
                    # a duplicate gets the same receipt
                    first = self.sent_receipts.setdefault((identity, outcome), (e.inner, e.nonce))
                    assert first == (e.inner, e.nonce), f"two different {outcome} receipts for {identity}"
                    self.acknowledged[identity] = outcome
                    self.to_a.queue.append(wire(e.inner.routing, E.encode_inner(e.inner), identity, e.nonce))
                elif isinstance(e, AckDelivery):
                    item = self.to_b.pending.get(e.delivery)
                    if item is not None and item.kind is E.Kind.MESSAGE and item.identity in self.b_store:
                        self.acknowledged.setdefault(item.identity, str(self.b_store[item.identity].state))
                    self.to_b.ack(e.delivery)
        self.inbox = inbox
        self.local = dict(self.local_store)

    def restart_b(self) -> None:
        """B restarts from its store alone; a message whose typing started is unconfirmed, never retyped."""
        self.inbox = I.load(B, self.b_store.values())
        self.local = dict(self.local_store)
        for identity, status in sorted(self.local.items(), key=lambda kv: str(kv[0])):
            if status == "typing":
                self.end_local(identity, I.InboxState.UNCONFIRMED, None)

    def end_local(self, identity: E.Identity, outcome: I.InboxState, crash_at: int | None) -> None:
        inbox, effects = I.final(self.inbox, identity, outcome, reason="local outcome", now=self.now,
                                 nonce=self.nonce())
        self.run_b(inbox, (Persist(LOCAL, (identity,), str(outcome)), *effects), crash_at)

    # --- box A ----------------------------------------------------------------------------------------

    @rule(principal=st.sampled_from(PRINCIPALS), reuse=st.booleans(), i=index)
    def admit(self, principal: str, reuse: bool, i: int) -> None:
        if reuse and self.outbox.rows:
            identity = sorted(self.outbox.rows, key=str)[i % len(self.outbox.rows)]
            principal, mid = identity.principal, identity.id  # a retry keeps its id: refused, nothing new
        else:
            self.ids += 1
            mid = f"m-{self.ids}"
        inner = E.MessageInner(
            E.Routing(E.Kind.MESSAGE, A, B, pairing=PAIRING),
            E.Sender(principal, f"agent:claude:{principal}", "claude", "%3", "0123456789abcdef"),
            mid, self.now, ("address", "%4@51d7a9c03e6f2b18"), f"text {mid}", "c-1", 1,
        )
        before = self.outbox
        try:
            outbox, effects = O.admit(self.outbox, inner, nonce=self.nonce(), now=self.now)
        except O.OutboxError as error:
            assert error.reason is O.Refusal.DUPLICATE_ID and self.outbox == before
            return
        self.run_a(outbox, effects, None)

    @rule(crash_at=crash)
    def a_tick(self, crash_at: int | None) -> None:
        outbox, effects = O.tick(self.outbox, now=self.now, bus_up=self.bus_up, heard={B: self.heard})
        self.run_a(outbox, effects, crash_at)

    def hear_b(self) -> None:
        if not O.is_live(self.heard, self.now):
            outbox, effects = O.heard_again(self.outbox, B, now=self.now)
            self.run_a(outbox, effects, None)
        self.heard = self.now

    @rule()
    def a_hears_b_s_directory(self) -> None:
        self.hear_b()

    @rule(i=index, crash_at=crash)
    def a_receives(self, i: int, crash_at: int | None) -> None:
        fetched = self.to_a.fetch(i)
        if fetched is None:
            return
        handle, item = fetched
        view = E.View(own=A, peers={B: E.Peer(KB, active=PAIRING, pairings=frozenset({PAIRING}))},
                      sent=self.outbox.sent(), now=self.now)
        verdict = E.judge(item.facts, view)
        assert verdict.decision is E.Decision.RECEIPT, verdict
        self.hear_b()
        assert isinstance(verdict.inner, E.ReceiptInner)
        outbox, effects = O.receipt(self.outbox, verdict.inner, now=self.now, delivery=handle)
        self.run_a(outbox, effects, crash_at)

    @rule(i=index, failed=st.booleans())
    def a_publish_answered(self, i: int, failed: bool) -> None:
        """The bus acknowledges a publish (or the publish fails): neither says anything of B."""
        left = sorted((k for k, r in self.outbox.rows.items() if r.left), key=str)
        if not left:
            return
        identity = left[i % len(left)]
        if failed:
            outbox, effects = O.publish_failed(self.outbox, identity)
        else:
            outbox, effects = O.publish_acked(self.outbox, identity, attempt=self.outbox.rows[identity].attempt,
                                              sequence=i)
        self.run_a(outbox, effects, None)

    @rule(principal=st.sampled_from(PRINCIPALS), crash_at=crash)
    def revoke_sender(self, principal: str, crash_at: int | None) -> None:
        nonces = {i: self.nonce() for i in O.cancels_needed(self.outbox, principal)}
        outbox, effects = O.cancel(self.outbox, sender=principal, now=self.now, reason="sender revoked", nonces=nonces)
        self.run_a(outbox, effects, crash_at)

    @rule()
    def a_restarts(self) -> None:
        self.restart_a()

    @rule(up=st.booleans())
    def bus(self, up: bool) -> None:
        self.bus_up = up

    # --- box B ----------------------------------------------------------------------------------------

    @rule(i=index, accept=st.booleans(), crash_at=crash)
    def b_receives(self, i: int, accept: bool, crash_at: int | None) -> None:
        fetched = self.to_b.fetch(i)
        if fetched is None:
            return
        handle, item = fetched
        view = E.View(own=B, peers={A: E.Peer(KA, active=PAIRING, pairings=frozenset({PAIRING}))},
                      retained=self.inbox.retained(), now=self.now)
        verdict = E.judge(item.facts, view)
        assert verdict.decision is not E.Decision.REFUSED, verdict
        if verdict.decision is E.Decision.NEW:
            if accept:
                inbox, effects = I.accept(
                    self.inbox, verdict, nonce=self.nonce(), now=self.now, recipient=RECIPIENT,
                    reason="awaiting consent", delivery=handle,
                    records=(Persist(LOCAL, (item.identity,), "waiting"),),
                )
            else:
                inbox, effects = I.refuse(self.inbox, verdict, nonce=self.nonce(), now=self.now,
                                          reason="rate limited", delivery=handle)
        elif verdict.decision is E.Decision.CANCEL:
            cancellable = self.local.get(item.identity) == "waiting"
            inbox, effects = I.cancel_arrived(self.inbox, verdict, cancellable=cancellable, now=self.now,
                                              nonce=self.nonce(), delivery=handle)
            if cancellable:
                effects = (Persist(LOCAL, (item.identity,), "cancelled"), *effects)
        else:
            inbox, effects = I.receive(self.inbox, verdict, now=self.now, nonce=self.nonce(), delivery=handle)
        self.run_b(inbox, effects, crash_at)

    def waiting(self, status: str) -> list[E.Identity]:
        return sorted((k for k, v in self.local.items() if v == status), key=str)

    @precondition(lambda self: bool(self.waiting("waiting")))
    @rule(i=index)
    def b_types(self, i: int) -> None:
        identity = self.waiting("waiting")[i % len(self.waiting("waiting"))]
        if not I.may_deliver(self.inbox, identity):
            return
        self.local_store[identity] = self.local[identity] = "typing"  # committed before the first byte
        self.typed[identity] = self.typed.get(identity, 0) + 1

    @precondition(lambda self: bool(self.waiting("waiting") or self.waiting("typing")))
    @rule(i=index, crash_at=crash, data=st.data())
    def b_local_outcome(self, i: int, crash_at: int | None, data: Any) -> None:
        candidates = self.waiting("waiting") + self.waiting("typing")
        identity = candidates[i % len(candidates)]
        if self.local[identity] == "typing":
            options = [I.InboxState.DELIVERED, I.InboxState.UNCONFIRMED]
        else:
            options = [I.InboxState.DECLINED, I.InboxState.EXPIRED, I.InboxState.REFUSED]
        self.end_local(identity, data.draw(st.sampled_from(options)), crash_at)

    @rule()
    def b_restarts(self) -> None:
        self.restart_b()

    # --- the bus and time ---------------------------------------------------------------------------

    @rule(to_b=st.booleans(), i=index)
    def lose(self, to_b: bool, i: int) -> None:
        channel = self.to_b if to_b else self.to_a
        if channel.queue:
            channel.queue.pop(i % len(channel.queue))

    @rule(to_b=st.booleans(), i=index)
    def duplicate(self, to_b: bool, i: int) -> None:
        channel = self.to_b if to_b else self.to_a
        if channel.queue:
            channel.queue.append(channel.queue[i % len(channel.queue)])

    @rule()
    def redeliver(self) -> None:
        self.to_b.redeliver()
        self.to_a.redeliver()

    @rule(seconds=st.sampled_from([1.0, 6.0, 30.0, 200.0, 900.0]))
    def time_passes(self, seconds: float) -> None:
        self.now += seconds

    # --- the claims -----------------------------------------------------------------------------------

    @invariant()
    def never_typed_twice(self) -> None:
        assert all(n <= 1 for n in self.typed.values()), self.typed

    @invariant()
    def a_final_outcome_on_the_sender_never_changes(self) -> None:
        for identity, row in self.a_store.items():
            if row.is_final:
                first = self.first_final.setdefault(identity, row.state)
                assert row.state is first, f"{identity} went from {first} to {row.state}"
            else:
                assert identity not in self.first_final, f"{identity} left its final outcome"

    @invariant()
    def nothing_the_receiver_acknowledged_is_lost(self) -> None:
        reloaded = I.load(B, self.b_store.values())
        for identity, outcome in self.acknowledged.items():
            for records in (self.b_store, reloaded.records, self.inbox.records):
                held = records.get(identity)
                assert held is not None, f"{identity} was acknowledged ({outcome}) and is lost"
                assert str(held.state) == outcome or outcome == "accepted", (identity, outcome, held.state)

    @invariant()
    def the_sender_s_outcome_is_the_receiver_s_or_says_it_is_not(self) -> None:
        for identity, row in self.a_store.items():
            held = self.b_store.get(identity)
            if row.state in (O.OutboxState.DELIVERED, O.OutboxState.DECLINED, O.OutboxState.REFUSED):
                assert held is not None and str(held.state) == str(row.state), (identity, row.state, held)
            if row.state in (O.OutboxState.EXPIRED, O.OutboxState.CANCELLED):
                assert held is None or str(held.state) == str(row.state), f"{identity} is {row.state} on A, {held}"
                assert self.typed.get(identity, 0) == 0, f"{identity} is {row.state} on A and was typed on B"

    @invariant()
    def acceptance_is_end_to_end(self) -> None:
        for identity, row in self.a_store.items():
            if row.state is O.OutboxState.ACCEPTED:
                assert identity in self.b_store, f"{identity} is accepted on A and B never committed it"

    def teardown(self) -> None:
        """Quiet: the bus faithful and up, everything delivered and answered; then past every deadline,
        every row the sender admitted has its one final outcome."""
        self.bus_up = True
        for _round in range(6):
            self.a_hears_b_s_directory()
            self.a_tick(None)
            while self.to_b.queue or self.to_b.pending:
                self.to_b.redeliver()
                self.b_receives(0, True, None)
            while self.to_a.queue or self.to_a.pending:
                self.to_a.redeliver()
                self.a_receives(0, None)
            self.now += 61.0
        self.now += max((O.deadline(r) for r in self.a_store.values()), default=self.now) - self.now + 1
        self.a_tick(None)
        open_rows = {str(i): str(r.state) for i, r in self.a_store.items() if not r.is_final}
        assert not open_rows, f"rows without a final outcome past the deadline: {open_rows}"
        self.never_typed_twice()
        self.the_sender_s_outcome_is_the_receiver_s_or_says_it_is_not()
        self.nothing_the_receiver_acknowledged_is_lost()


TestTwoBoxes = TwoBoxes.TestCase
TestTwoBoxes.settings = settings(max_examples=300, stateful_step_count=60, deadline=None)
