"""The deterministic simulation of several daemons on one simulated bus (issue 25's simulation proof;
docs/simulation.md, "Several boxes"): seeds, replay, and planted defects each found by a seed.

``make test`` runs seeds 1..SIM_SEEDS (default 30 here); ``make simulate-federation SEEDS=N [SEED=k]``
runs more, or one. A failing seed prints ``SEED=k`` and its last trace lines.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import trio

from connectcore import hub as H
from connectcore.effects import Persist
from connectcore.federation import envelope as E
from connectcore.federation import inbox as I
from connectcore.federation import outbox as O
from connectcore.federation import remote
from connectcore.federation.effects import BusEffect, PublishReceipt
from connectd.daemon.runner import CoreRunner, records_of
from connectd.federation import desk as desk_module
from connectd.federation import flow
from tests.simulation import driver as D
from tests.simulation.federation_driver import FedConfig, check, run_federation

FIRST = int(os.environ.get("SIM_FIRST", "1"))
SEEDS = int(os.environ.get("SIM_SEEDS", "30"))
ONE = os.environ.get("SEED")
ALL_MUTANTS = os.environ.get("SIM_MUTANTS") == "1"

# Seeds that find a known, unfixed defect of the daemon or the core (xfail strict, with the defect
# named). None today.
KNOWN: dict[int, str] = {}


def _seeds() -> list[Any]:
    seeds = [int(ONE)] if ONE else list(range(FIRST, FIRST + SEEDS))
    return [pytest.param(s, marks=pytest.mark.xfail(strict=True, reason=KNOWN[s])) if s in KNOWN else s for s in seeds]


@pytest.mark.parametrize("seed", _seeds())
def test_federation_seed(seed: int) -> None:
    check(run_federation(seed))


def test_no_two_boxes_give_their_local_messages_one_body() -> None:
    """Each box's checker counts typings by a message's body (at most once), and a local message may
    cross to a paired box (its handle resolves to an agent there): no two boxes' local messages share a
    body. Seed 3,899 (stop 34) found the collision: the laptop's ``simmsg-2`` typed on devbox beside
    devbox's own ``simmsg-2`` read as one message typed twice."""
    fed = run_federation(3899)
    laptop, devbox = fed.boxes
    assert laptop.sent and devbox.sent
    assert not set(laptop.sent) & set(devbox.sent)
    check(fed)


def test_a_run_whose_driver_fails_ends_with_its_error_and_lets_parked_calls_go() -> None:
    """Claim: an error in the driver's own run (a checker's bug, a script's assertion) ends the run with
    that error, and lets go the calls that killed daemons left parked, shielded, until the run's end;
    the run never hangs on them. (Seed 6,028 hung: a checker raised at 44.73 s of virtual time and a
    killed box's bus effect stayed parked, so trio spun with nothing to run and no deadline.)"""

    async def script(fed: Any) -> None:
        box = fed.boxes[0]

        async def parked() -> None:  # as a killed daemon's shielded bus call waits (SimLink._park)
            with trio.CancelScope(shield=True):
                await box.server.over.wait()

        fed.boxes[0]._nursery.start_soon(parked)
        await trio.sleep(1.0)
        raise RuntimeError("the driver's own error")

    with pytest.raises(BaseException) as raised:
        run_federation(1, FedConfig(steps=0), script)
    assert "the driver's own error" in repr(raised.value)


def test_the_checker_reads_a_box_whose_daemon_has_not_opened_its_inbox_yet() -> None:
    """Claim: the check that nothing is accepted from an unpaired box holds for a box whose daemon is
    starting (its hub's inbox not yet recovered: ``None``), instead of failing the run. Seed 6,028."""
    check(run_federation(6028))


def test_three_boxes_and_a_seed_replays_exactly() -> None:
    """Three daemons, each paired with the other two; the same seed, the same run."""
    cfg = FedConfig(boxes=3, steps=20)
    first, again = run_federation(5, cfg), run_federation(5, cfg)
    check(first)
    assert first.trace == again.trace
    assert [b.io_calls for b in first.boxes] == [b.io_calls for b in again.boxes]
    assert sum("xsend" in line for line in first.trace) > 0


def test_a_seed_replays_exactly_in_another_process() -> None:
    """Another interpreter with another hash seed replays it: nothing in a run hangs on set order."""
    root = Path(__file__).resolve().parents[2]
    code = (
        "import hashlib; from tests.simulation.federation_driver import FedConfig, run_federation; "
        "print(hashlib.sha256(chr(10).join(run_federation(4, FedConfig(steps=15)).trace).encode()).hexdigest())"
    )
    env = {**os.environ, "PYTHONPATH": f"{root / 'src'}{os.pathsep}{root}", "PYTHONHASHSEED": "4242"}
    there = subprocess.run([sys.executable, "-c", code], env=env, cwd=root, capture_output=True, text=True, check=True)
    here = hashlib.sha256("\n".join(run_federation(4, FedConfig(steps=15)).trace).encode()).hexdigest()
    assert there.stdout.strip() == here


# --- planted defects: each must be found by a seed in a small range -------------------------------


def receipt_before_commit(mp: pytest.MonkeyPatch) -> None:
    """Accept before commit: the receiving daemon hands a new message's receipt and acknowledgement to
    the bus before its records are durable (``Runner.step`` with the interpreter's bus effects moved
    ahead of the commit, for ``RemoteMessageArrived``)."""
    original = CoreRunner.step

    async def step(self: CoreRunner, event: H.Event) -> Any:
        if not isinstance(event, H.RemoteMessageArrived):
            return await original(self, event)
        async with self._lock:
            hub, effects = H.step(self._hub, event)
            batch = self._gather(hub, records_of(effects))
        assert self.interpreter is not None
        await self.interpreter.run(tuple(e for e in effects if isinstance(e, BusEffect)))
        await self._wait_durable(batch)
        await self.interpreter.run(tuple(e for e in effects if not isinstance(e, BusEffect)))
        return effects

    mp.setattr(CoreRunner, "step", step)


def acknowledged_on_arrival(mp: pytest.MonkeyPatch) -> None:
    """The fetch loop acknowledges every delivery as it arrives (an auto-ack), before what it changes
    is durable: a kill or a store failure then loses a message the bus will not hand over again."""
    from connectd.federation.pump import FETCH_BATCH, Pump

    async def fetch_loop(self: Pump) -> None:
        bus = await self._connected()
        while True:
            for delivery in await bus.fetch(batch=FETCH_BATCH, timeout=self.fetch_timeout):
                await bus.ack(delivery)
                await self.desk.received(delivery.subject, delivery.data, delivery)

    mp.setattr(Pump, "fetch_loop", fetch_loop)


def restart_forgets_the_inbox(mp: pytest.MonkeyPatch) -> None:
    """A restarted daemon's hub comes back without the identities it received (the inbox restored
    empty), so what it acknowledged is forgotten and a copy would be judged new."""
    original = I.load
    mp.setattr(flow.I, "load", lambda own, records, **kw: original(own, [], **kw))


def no_card_for_a_remote_sender(mp: pytest.MonkeyPatch) -> None:
    """The recipient box takes every remote sender's pair as approved: no card, typed at once."""
    original = remote.admit
    mp.setattr(remote, "admit", lambda inner, here: original(inner, replace(here, pair_approved=True)))


def acceptance_taken_as_delivery(mp: pytest.MonkeyPatch) -> None:
    """The sending box reads the other box's ``accepted`` receipt as ``delivered`` (acceptance is not
    delivery: the message may still be declined, cancelled or expire there)."""
    original = O.receipt

    def receipt(outbox: O.Outbox, inner: E.ReceiptInner, **kw: Any) -> Any:
        if inner.outcome == "accepted":
            inner = replace(inner, outcome="delivered")
        return original(outbox, inner, **kw)

    mp.setattr(O, "receipt", receipt)


def final_outcome_never_receipted(mp: pytest.MonkeyPatch) -> None:
    """The recipient commits a message's final outcome but keeps its ``accepted`` receipt and publishes
    none: the sender hears ``accepted`` again at every copy, and its row waits for its deadline."""
    original = I.final

    def final(inbox: I.Inbox, identity: E.Identity, outcome: I.InboxState, **kw: Any) -> Any:
        before = inbox.records[identity]
        after, effects = original(inbox, identity, outcome, **kw)
        kept = replace(after.records[identity], receipt=before.receipt)
        return I._with(after, [kept]), tuple(
            replace(e, record=kept) if isinstance(e, Persist) and e.kind == I.STORE else e
            for e in effects
            if not isinstance(e, PublishReceipt)
        )

    mp.setattr(I, "final", final)


def _handler(mp: pytest.MonkeyPatch, event: type[Any], handler: Any) -> None:
    """The hub's handler of ``event`` replaced (``hub.step`` dispatches through ``HANDLERS``)."""
    mp.setattr(H, "HANDLERS", {**H.HANDLERS, event: handler})


def removal_cancels_nothing_held(mp: pytest.MonkeyPatch) -> None:
    """A removed pairing still delivers: ``PairingRemoved`` ends the outbox's rows across it, but the
    inbox neither cancels what it accepted across it nor marks the pairing removed (``inbox.may_deliver``
    then says yes at the guard), and the local messages stay open."""

    def pairing_removed(hub: H.Hub, ev: H.PairingRemoved) -> Any:
        if hub.outbox is None:
            return hub, ()
        outbox, effects = O.pairing_removed(hub.outbox, ev.pairing, now=ev.now, box_name=ev.box_name)
        return replace(hub, outbox=outbox), effects

    _handler(mp, H.PairingRemoved, pairing_removed)


def removal_leaves_rows_waiting(mp: pytest.MonkeyPatch) -> None:
    """A removal ends nothing this box sent across the pairing (``outbox.pairing_removed`` changes
    nothing): its rows wait for receipts that can no longer come."""
    mp.setattr(O, "pairing_removed", lambda outbox, pairing, **kw: (outbox, ()))


def removal_says_cancelled(mp: pytest.MonkeyPatch) -> None:
    """A removal ends every row across the pairing ``cancelled``, the ones that left too (they may have
    been typed there: ``unconfirmed`` is the truth)."""
    original = O.pairing_removed

    def pairing_removed(outbox: O.Outbox, pairing: str, *, now: float, box_name: str) -> Any:
        after, effects = original(outbox, pairing, now=now, box_name=box_name)
        rows = {i: replace(r, state=O.OutboxState.CANCELLED) if r.state is O.OutboxState.UNCONFIRMED
                and outbox.rows[i].state is not r.state else r for i, r in after.rows.items()}
        return replace(after, rows=rows), tuple(
            replace(e, record=rows[e.record.identity]) if isinstance(e, Persist) and e.kind == O.STORE else e
            for e in effects
        )

    mp.setattr(O, "pairing_removed", pairing_removed)


def cancel_ignored(mp: pytest.MonkeyPatch) -> None:
    """The recipient's box takes every cancel from the sender's box as come after typing started: it
    changes nothing, and the message is typed once approved."""

    def remote_cancel_arrived(hub: H.Hub, ev: H.RemoteCancelArrived) -> Any:
        assert hub.inbox is not None and ev.verdict.identity is not None
        record = hub.inbox.records[ev.verdict.identity]
        inbox, effects = I.cancel_arrived(hub.inbox, ev.verdict, cancellable=False, now=ev.now,
                                          nonce=I.final_nonce(record), delivery=ev.delivery)
        return replace(hub, inbox=inbox), effects

    _handler(mp, H.RemoteCancelArrived, remote_cancel_arrived)


def revocation_keeps_what_left(mp: pytest.MonkeyPatch) -> None:
    """Revoking a sender cancels only its rows that never left (``outbox.cancel``): the ones published
    or accepted stay as they are, with no cancel sent."""
    original = O.cancel

    def cancel(outbox: O.Outbox, *, sender: str, **kw: Any) -> Any:
        kept = {i: r for i, r in outbox.rows.items() if r.identity.principal == sender and r.left}
        rest = replace(outbox, rows={i: r for i, r in outbox.rows.items() if i not in kept})
        after, effects = original(rest, sender=sender, **kw)
        return replace(after, rows={**after.rows, **kept}), effects

    mp.setattr(O, "cancel", cancel)
    mp.setattr(O, "cancels_needed", lambda outbox, sender: ())


def messages_off_cancels_nothing(mp: pytest.MonkeyPatch) -> None:
    """``pair set BOX messages=off`` refuses what comes next but ends nothing held from that box:
    ``MessagesOff`` changes nothing."""
    _handler(mp, H.MessagesOff, lambda hub, ev: (hub, ()))


def early_receipts_dropped(mp: pytest.MonkeyPatch) -> None:
    """A receipt the engine's recovery makes (a card that expired while the daemon was down, a message it
    was typing when killed) is handed to a desk whose bus loops have not started yet, and dropped: the
    sender learns the outcome only from its next copy, 300 s later (as before fedfaults3's fix)."""
    mp.setattr(desk_module.PairingDesk, "hand", lambda self, effect: self.envelopes.hand(effect))


MUTANTS = [
    pytest.param(receipt_before_commit, "receipt_before_commit", 10, id="receipt_before_commit"),
    pytest.param(acknowledged_on_arrival, "ack_before_commit", 10, id="acknowledged_on_arrival"),
    pytest.param(restart_forgets_the_inbox, "acked_lost", 15, id="restart_forgets_the_inbox"),
    pytest.param(no_card_for_a_remote_sender, "typed_without_consent", 10, id="no_card_for_a_remote_sender"),
    pytest.param(acceptance_taken_as_delivery, "outcome_untrue", 10, id="acceptance_taken_as_delivery"),
    pytest.param(final_outcome_never_receipted, "stalled", 10, id="final_outcome_never_receipted"),
    pytest.param(removal_cancels_nothing_held, "typed_after_removal", 30, id="removal_cancels_nothing_held"),
    pytest.param(removal_leaves_rows_waiting, "removal_not_final", 30, id="removal_leaves_rows_waiting"),
    pytest.param(removal_says_cancelled, "cancel_untrue", 30, id="removal_says_cancelled"),
    pytest.param(cancel_ignored, "typed_after_cancel", 30, id="cancel_ignored"),
    pytest.param(revocation_keeps_what_left, "revocation_left_rows", 30, id="revocation_keeps_what_left"),
    pytest.param(messages_off_cancels_nothing, "typed_while_off", 45, id="messages_off_cancels_nothing"),
    pytest.param(early_receipts_dropped, "receipt_late", 60, id="early_receipts_dropped"),
]


# make test runs the first (never a skip: the others are not collected); make simulate-mutants
# (SIM_MUTANTS=1) runs all, as tests/simulation/test_mutants.py does.
@pytest.mark.parametrize(("mutant", "kind", "bound"), MUTANTS if ALL_MUTANTS else MUTANTS[:1])
def test_a_planted_defect_is_found_by_a_seed(
    monkeypatch: pytest.MonkeyPatch, mutant: Any, kind: str, bound: int
) -> None:
    mutant(monkeypatch)
    cfg = replace(FedConfig(), past_deadlines=False)  # the same runs, ended at quiescence: no defect needs the wait
    for seed in range(1, bound + 1):
        fed = run_federation(seed, cfg)
        if kind in fed.kinds:
            print(f"{mutant.__name__}: found at seed {seed} ({kind})")
            return
    pytest.fail(f"no seed in 1..{bound} found the planted defect {mutant.__name__} ({kind})")


def test_a_partition_cuts_one_box_s_link_and_what_waits_for_it_is_kept() -> None:
    """SimBus's partition (``SimNetwork.cut``): the cut box's calls answer BusUnavailable, the other
    box's go on, and what was stored for the cut box is fetched once the link heals."""
    import trio
    import trio.testing

    from connectcore.ports import BusUnavailable
    from tests.simulation.sim_bus import SimNetwork

    async def script() -> None:
        net = SimNetwork(clock=trio.current_time)
        a, b = net.bus("a"), net.bus("b")
        net.cut.add("b")
        await a.publish("connect.b.inbox.a", b"one", msg_id="m-1")
        with pytest.raises(BusUnavailable):
            await b.fetch(batch=1, timeout=1.0)
        with pytest.raises(BusUnavailable):
            await b.publish("connect.a.inbox.b", b"two", msg_id="m-2")
        net.cut.discard("b")
        (delivery,) = await b.fetch(batch=1, timeout=1.0)
        assert delivery.data == b"one"

    trio.run(script, clock=trio.testing.MockClock(autojump_threshold=0))


# --- scenarios: one schedule written out, on the same driver ----------------------------------------


QUIET_BOXES = FedConfig(
    swarm=False,
    box=D.Config(agents=1, swarm=False, tmux_fail=0, pane_exit=0, lost_paste=0, store_fail=0, kills=0,
                 person_race=0, replace_race=0, wall_step=0),
)


def _lost_first_publish(pause: float) -> Any:
    """The script: ``pause`` seconds with nothing sent, then laptop's agent sends to devbox's while the
    server loses what it acknowledges (one publish), then the bus is faithful again."""
    from tests.simulation.sim_bus import Faults

    async def script(fed: Any) -> None:
        import trio

        a, b = fed.boxes
        await trio.sleep(pause)
        fed.network.faults = Faults(drop=1.0)
        fed.send(a, a.live_panes()[0], b, b.live_panes()[0])
        await trio.sleep(1.0)
        fed.network.faults = Faults()

    return script


def test_a_lost_first_publish_to_a_box_heard_lately_is_published_again() -> None:
    """The outbox's retry (O5): devbox was heard 10 s ago (the pairing), so the lost first publish goes
    again 5 s later, and the message is delivered."""
    fed = run_federation(1, QUIET_BOXES, _lost_first_publish(10.0))
    check(fed)
    ((_, row),) = fed.rows()
    assert row.state is O.OutboxState.DELIVERED and row.attempt == 2, row


def test_a_lost_first_publish_to_a_quiet_box_is_published_again() -> None:
    """The same after 200 s in which neither box sent any message: found by this simulation as a strict
    xfail (only the other box's own envelopes marked it heard, outbox O5, so the row was never published
    again and would have ended ``unconfirmed`` at its deadline though both boxes were up and linked);
    fixed by the directory across boxes (slice 7), whose entry each box puts every 60 s and which marks
    its box heard: the row is published again and delivered."""
    fed = run_federation(1, replace(QUIET_BOXES, past_deadlines=False), _lost_first_publish(200.0))
    ((_, row),) = fed.rows()
    assert row.state is O.OutboxState.DELIVERED, f"{row.identity.id} {row.state} after quiescence, {row.attempt} attempt"
    check(fed)


def test_a_crash_of_the_bus_loses_what_it_acknowledged_last() -> None:
    """SimBus's crash (``SimNetwork.crash``): what was stored in the last seconds is gone, with its
    duplicate-window entries (the same msg_id is stored again); what was stored before is kept."""
    import trio
    import trio.testing

    from tests.simulation.sim_bus import SimNetwork

    async def script() -> None:
        net = SimNetwork(clock=trio.current_time)
        a, b = net.bus("a"), net.bus("b")
        await a.publish("connect.b.inbox.a", b"old", msg_id="m-1")
        await trio.sleep(30.0)
        await a.publish("connect.b.inbox.a", b"new", msg_id="m-2")
        net.crash(10.0)
        assert [d.data for d in await b.fetch(batch=5, timeout=1.0)] == [b"old"]
        assert not (await a.publish("connect.b.inbox.a", b"new", msg_id="m-2")).duplicate

    trio.run(script, clock=trio.testing.MockClock(autojump_threshold=0))
