"""The pairing desk (connectd.federation.desk) on real SQLite files and real PyNaCl keys, two boxes
handing each other the wires they owe (the bus's part is test_federation_pairing_e2e's): a declined
request reaches the invitee; a repeated request is answered with the same bytes again and changes
nothing; forged or misrouted envelopes are refused, audited, and change nothing; expiry ends what is
past its time and stops the request being sent; a store that cannot write leaves the book as it was."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from connectcore.federation import pairing as P
from connectd.federation import keys as K
from connectd.federation.desk import PairingDesk, Settings
from connectd.federation.seal import LocalBox
from connectd.store.pair_records import Wire
from connectd.store.store import Store, StoreError

T0 = 2_000_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


async def direct(fn: Callable[..., Any], *args: Any) -> Any:
    return fn(*args)


class Side:
    def __init__(self, root: Path, name: str, seed: int, clock: Clock) -> None:
        self.store = Store.open(root)
        self.local = LocalBox.from_secrets(K.BoxSecrets(bytes([seed]) * 32, bytes([seed + 1]) * 32))
        self.desk = PairingDesk(self.local, Settings(name, resend=5.0), self.store, clock=clock,
                                run_sync=direct)

    def owed(self) -> list[Wire]:
        return [w for w in self.desk.records.wires() if w.due_at is not None and w.due_at <= self.desk.clock()]

    def refusals(self) -> list[str]:
        return [r.detail for r in self.store.audit(outcome="refused", limit=1000)]

    def close(self) -> None:
        self.store.close()


@pytest.fixture
def sides(tmp_path: Path) -> Iterator[tuple[Side, Side, Clock]]:
    clock = Clock()
    a, b = Side(tmp_path / "a", "laptop", 1, clock), Side(tmp_path / "b", "devbox", 3, clock)
    yield a, b, clock
    a.close()
    b.close()


def deliver(to: Side, wire: Wire) -> None:
    anyio.run(to.desk.received, wire.subject, wire.wire)


def requested(a: Side, b: Side) -> str:
    code = anyio.run(a.desk.invite)["code"]
    anyio.run(lambda: b.desk.accept(code))
    (request,) = b.owed()
    deliver(a, request)
    return code


def test_a_declined_request_reaches_the_invitee_and_its_request_stops(sides: tuple[Side, Side, Clock]) -> None:
    a, b, _ = sides
    requested(a, b)
    anyio.run(lambda: a.desk.decline("devbox"))
    (answer,) = a.owed()
    assert answer.subject == f"connect.{b.local.box_id}.pairing.{a.local.box_id}"
    deliver(b, answer)
    (pairing,) = b.desk.book.pairings.values()
    assert pairing.state is P.PairingState.DECLINED
    assert b.owed() == [] and b.desk.records.wires() == []  # nothing more is asked


def test_a_repeated_request_gets_the_same_answer_again_and_changes_nothing(sides: tuple[Side, Side, Clock]) -> None:
    a, b, clock = sides
    requested(a, b)
    anyio.run(lambda: a.desk.approve(b.local.box_id))
    (answer,) = a.owed()
    a.desk.records.sent(answer.key, attempt=1, now=clock())
    assert a.owed() == []
    book_a = a.desk.book
    (request,) = b.desk.records.wires()
    deliver(a, request)  # B sent its request again (its answer was lost)
    (again,) = a.owed()
    assert again.wire == answer.wire and a.desk.book is book_a  # the same bytes; nothing changed
    deliver(b, again)
    deliver(b, again)  # an identical repeat on B changes nothing either
    (pairing,) = b.desk.book.pairings.values()
    assert (pairing.state, pairing.id) == (P.PairingState.ACTIVE, a.desk.book.active()[0].id)
    assert b.desk.records.wires() == []


def test_each_step_a_person_takes_is_audited_as_who_took_it(sides: tuple[Side, Side, Clock]) -> None:
    """The owner API hands the desk the actor it resolved: the page session's steps are its own."""
    a, b, _ = sides
    page = "owner:page:7d2e"
    code = anyio.run(lambda: a.desk.invite(actor=page))["code"]
    anyio.run(lambda: b.desk.accept(code))  # the CLI's owner token: "owner"
    (request,) = b.owed()
    deliver(a, request)
    anyio.run(lambda: a.desk.approve("devbox", actor=page))
    anyio.run(lambda: b.desk.remove("laptop", actor="owner:tunnel:alice"))

    def actors(side: Side) -> list[tuple[str, str]]:
        return [(r.action, r.actor) for r in side.store.audit(limit=100) if r.action.startswith("pair.")]

    assert set(actors(a)) == {("pair.invite", page), ("pair.request", f"box:{b.local.box_id}"),
                              ("pair.approve", page)}
    assert ("pair.accept", "owner") in actors(b) and ("pair.remove", "owner:tunnel:alice") in actors(b)


def test_forged_and_misrouted_envelopes_are_refused_and_change_nothing(sides: tuple[Side, Side, Clock]) -> None:
    a, b, _ = sides
    requested(a, b)
    (request,) = b.desk.records.wires()
    book_a, refusals = a.desk.book, len(a.refusals())
    flipped = bytes([request.wire[0] ^ 1]) + request.wire[1:]  # a byte of the signature
    anyio.run(a.desk.received, request.subject, flipped)
    anyio.run(a.desk.received, request.subject.replace(a.local.box_id, b.local.box_id, 1), request.wire)
    anyio.run(a.desk.received, "connect.nonsense", request.wire)
    assert a.desk.book is book_a
    found = a.refusals()[refusals:]
    assert [d.split(":")[0] for d in found] == ["bad_signature", "wrong_box", "malformed"]


def test_a_flooding_box_s_refusals_are_one_audit_record_a_minute_per_reason(sides: tuple[Side, Side, Clock]) -> None:
    """envelope.refusal_audit_due: fifty forged copies from one box cost one audit record, a minute later
    one more, which counts the 49 left out; another reason of the same box is audited on its own; each
    still changes nothing."""
    a, b, clock = sides
    requested(a, b)
    (request,) = b.desk.records.wires()
    book_a, refusals = a.desk.book, len(a.refusals())
    flipped = bytes([request.wire[0] ^ 1]) + request.wire[1:]
    for _ in range(50):
        anyio.run(a.desk.received, request.subject, flipped)
        clock.now += 1.0
    assert [d.split(":")[0] for d in a.refusals()[refusals:]] == ["bad_signature"]  # t+0 only, not t+1..t+49
    anyio.run(a.desk.received, request.subject, request.wire[:10])  # another reason: its own record
    clock.now += 11.0  # 60 s after the first
    anyio.run(a.desk.received, request.subject, flipped)
    assert [d.split(":")[0] for d in a.refusals()[refusals:]] == ["bad_signature", "malformed", "bad_signature"]
    assert a.refusals()[refusals:][2].endswith("(and 49 more refused since the last record)")
    assert a.desk.book is book_a


def test_expiry_ends_the_invitation_and_the_waiting_pairing_and_stops_the_request(sides: tuple[Side, Side, Clock]) -> None:
    a, b, clock = sides
    code = anyio.run(lambda: a.desk.invite(60.0))["code"]
    anyio.run(lambda: b.desk.accept(code))
    assert len(b.owed()) == 1
    clock.now += 60 + P.ANSWER_GRACE
    anyio.run(a.desk.tick)
    anyio.run(b.desk.tick)
    assert [i.state for i in a.desk.book.invitations.values()] == [P.InvitationState.EXPIRED]
    assert [p.state for p in b.desk.book.pairings.values()] == [P.PairingState.EXPIRED]
    assert b.owed() == []


def test_a_store_that_cannot_write_leaves_the_book_as_it_was(sides: tuple[Side, Side, Clock]) -> None:
    a, _, _ = sides
    book = a.desk.book
    a.desk.records._db.close()
    with pytest.raises(StoreError):
        anyio.run(a.desk.invite)
    assert a.desk.book is book
    a.store = a.desk.records = Store.open(a.store.path.parent)  # (for the fixture's close)
