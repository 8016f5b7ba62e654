"""Model of one box's pairing book (connectcore.federation.pairing) as both inviter and invitee: the
owner invites, revokes, approves (under a chosen name or the requester's), declines and removes;
two remote boxes send requests with the right or a wrong secret, early or late, again and again;
the box accepts codes from them and their answers arrive (accepts, declines, unpairs); the owner sets
a pairing's settings (good words and bad); time moves.

Claims, one line each:

- an invitation is consumed at most once: once out of ``open`` it never changes, one decision at most.
- at most one active pairing per remote box.
- a removed pairing never becomes active again.
- a refused step returns the book unchanged (and no step meets an edge its table does not have).
- the active pairings' names are unique and none is this box's own name.
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from connectcore.effects import Effect
from connectcore.federation import pairing as P
from connectcore.federation.boxes import BoxKeys

OWN = BoxKeys(bytes(range(32)), bytes(range(32, 64)))
REMOTES = tuple(BoxKeys(bytes([2 * i + 1]) * 32, bytes([2 * i + 2]) * 32) for i in range(2))
SECRETS = (b"a" * 32, b"b" * 32)
NAMES = ("laptop", "devbox", "build", "gpu")  # "laptop" is this box's own name

remote = st.sampled_from(REMOTES)
name = st.sampled_from(NAMES)
small = st.integers(0, 5)


class PairingModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.book = P.PairBook(own_box=OWN.box_id, own_name="laptop")
        self.now = 1_000.0
        self.ids = 0
        self.decisions: Counter[str] = Counter()  # successful approve/decline per invitation
        self.closed: dict[str, P.Invitation] = {}  # invitations seen out of open, as first seen
        self.removed: set[str] = set()  # pairing keys seen removed
        self.secrets: dict[str, bytes] = {}  # the secret each invitation's code carries

    def fresh(self, prefix: str) -> str:
        self.ids += 1
        return f"{prefix}{self.ids}"

    def take(self, step: Callable[[], tuple[P.PairBook, tuple[Effect, ...]]]) -> bool:
        """Run ``step``; a refusal must leave the book exactly as it was."""
        before = copy.deepcopy(self.book)
        try:
            book, _effects = step()
        except P.PairingError:
            assert self.book == before, "a refused step changed the book"
            return False
        self.book = book
        return True

    def pick(self, mapping: Any, index: int) -> str | None:
        keys = sorted(mapping)
        return keys[index % len(keys)] if keys else None

    def pick_request(self, index: int, pending: bool) -> str | None:
        """A request: any of them, or (mostly) one still pending, so decisions are often taken."""
        if pending:
            waiting = {k for k, r in self.book.requests.items() if r.state is P.RequestState.PENDING}
            return self.pick(waiting, index)
        return self.pick(self.book.requests, index)

    # --- the inviter ---

    @rule(secret=st.sampled_from(SECRETS), minutes=st.sampled_from([1, 60, 600]))
    def invite(self, secret: bytes, minutes: int) -> None:
        invitation_id = self.fresh("inv")
        self.secrets[invitation_id] = secret
        assert self.take(
            lambda: P.invite(
                self.book,
                invitation_id=invitation_id,
                secret_hash=P.secret_hash(secret),
                now=self.now,
                expires_in=minutes * 60.0,
            )
        )

    @rule(index=small)
    def revoke(self, index: int) -> None:
        invitation_id = self.pick(self.book.invitations, index)
        if invitation_id is not None:
            self.take(lambda: P.revoke_invitation(self.book, invitation_id, now=self.now))

    def open_invitations(self) -> dict[str, P.Invitation]:
        return {k: v for k, v in self.book.invitations.items() if v.state is P.InvitationState.OPEN}

    def send_request(self, invitation_id: str, keys: BoxKeys, as_name: str, secret: bytes) -> None:
        request_id = self.fresh("req")
        self.take(
            lambda: P.receive_request(
                self.book,
                request_id=request_id,
                invitation_id=invitation_id,
                keys=keys,
                name=as_name,
                secret=secret,
                now=self.now,
            )
        )

    @precondition(lambda self: bool(self.open_invitations()))
    @rule(index=small, keys=remote, as_name=name)
    def request(self, index: int, keys: BoxKeys, as_name: str) -> None:
        """A request on an open invitation with its code's secret (again: a repeat)."""
        invitation_id = self.pick(self.open_invitations(), index)
        assert invitation_id is not None
        self.send_request(invitation_id, keys, as_name, self.secrets[invitation_id])

    @rule(index=small, keys=remote, as_name=name, forged=st.booleans())
    def stray_request(self, index: int, keys: BoxKeys, as_name: str, forged: bool) -> None:
        """A request on any invitation (decided, expired, revoked, unknown), maybe with a wrong secret."""
        invitation_id = self.pick(self.book.invitations, index) or "unknown"
        secret = self.secrets.get(invitation_id, SECRETS[0])
        if forged:
            secret = SECRETS[1] if secret == SECRETS[0] else SECRETS[0]
        self.send_request(invitation_id, keys, as_name, secret)

    @precondition(lambda self: bool(self.book.requests))
    @rule(index=small, as_name=st.none() | name, pending=st.booleans())
    def approve(self, index: int, as_name: str | None, pending: bool) -> None:
        request_id = self.pick_request(index, pending)
        if request_id is None:
            return
        pairing_id = self.fresh("pa")
        invitation = self.book.requests[request_id].invitation
        if self.take(
            lambda: P.approve(self.book, request_id, pairing_id=pairing_id, now=self.now, name=as_name)
        ):
            self.decisions[invitation] += 1

    @precondition(lambda self: bool(self.book.requests))
    @rule(index=small, pending=st.booleans())
    def decline(self, index: int, pending: bool) -> None:
        request_id = self.pick_request(index, pending)
        if request_id is None:
            return
        invitation = self.book.requests[request_id].invitation
        if self.take(lambda: P.decline(self.book, request_id, now=self.now)):
            self.decisions[invitation] += 1

    # --- the invitee ---

    @rule(keys=remote, as_name=name, minutes=st.sampled_from([-1, 15]))
    def accept_code(self, keys: BoxKeys, as_name: str, minutes: int) -> None:
        invitation_id = self.fresh("code")
        self.take(
            lambda: P.accept_code(
                self.book,
                invitation_id=invitation_id,
                keys=keys,
                name=as_name,
                expires_at=self.now + minutes * 60.0,
                now=self.now,
            )
        )

    @rule(index=small, reuse=st.booleans())
    def their_accept(self, index: int, reuse: bool) -> None:
        key = self.pick(self.book.pairings, index)
        if key is None:
            return
        known = self.book.pairings[key].id
        pairing_id = known if reuse and known is not None else self.fresh("pb")
        self.take(lambda: P.pair_accepted(self.book, key, pairing_id=pairing_id, now=self.now))

    @rule(index=small)
    def their_decline(self, index: int) -> None:
        key = self.pick(self.book.pairings, index)
        if key is not None:
            self.take(lambda: P.pair_declined(self.book, key, now=self.now))

    # --- both ---

    @rule(index=small)
    def remove(self, index: int) -> None:
        key = self.pick(self.book.pairings, index)
        if key is not None:
            self.take(lambda: P.remove(self.book, key, now=self.now))

    @rule(index=small)
    def their_unpair(self, index: int) -> None:
        ids = {p.id: p for p in self.book.pairings.values() if p.id is not None}
        pairing_id = self.pick(ids, index)
        if pairing_id is not None:
            self.take(lambda: P.removed_by_peer(self.book, pairing_id, now=self.now))

    @rule(index=small, words=st.lists(st.sampled_from(
        ["messages=off", "messages=on", "per_window=5", "per_window=0", "live_ids=9", "colour=red", "x"]
    ), max_size=3))
    def set_settings(self, index: int, words: list[str]) -> None:
        key = self.pick(self.book.pairings, index)
        if key is None:
            return
        before = self.book.pairings[key]
        if self.take(lambda: P.set_settings(self.book, key, words, now=self.now)):
            after = self.book.pairings[key]
            assert before.state in (P.PairingState.ACTIVE, P.PairingState.REQUESTED), "an ended pairing set"
            assert replace(after, settings=before.settings) == before, "a set changed more than the settings"

    @rule(seconds=st.sampled_from([1.0, 30.0, 300.0, 3600.0]))
    def time_passes(self, seconds: float) -> None:
        self.now += seconds
        assert self.take(lambda: P.expire(self.book, now=self.now))

    # --- the claims ---

    @invariant()
    def an_invitation_is_consumed_at_most_once(self) -> None:
        for invitation_id, invitation in self.book.invitations.items():
            if invitation.state is not P.InvitationState.OPEN:
                first = self.closed.setdefault(invitation_id, invitation)
                assert invitation == first, f"{invitation_id} changed after it closed"
            decided = [
                r
                for r in self.book.requests_on(invitation_id)
                if r.state in (P.RequestState.APPROVED, P.RequestState.DECLINED)
            ]
            assert len(decided) <= 1 and self.decisions[invitation_id] <= 1
            assert (invitation.state is P.InvitationState.CONSUMED) == bool(decided)

    @invariant()
    def at_most_one_active_pairing_per_remote_box(self) -> None:
        active = Counter(p.box_id for p in self.book.pairings.values() if p.state is P.PairingState.ACTIVE)
        assert all(n <= 1 for n in active.values()), active

    @invariant()
    def a_removed_pairing_never_becomes_active_again(self) -> None:
        for key, pairing in self.book.pairings.items():
            if key in self.removed:
                assert pairing.state is P.PairingState.REMOVED, f"{key} left removed"
            if pairing.state is P.PairingState.REMOVED:
                self.removed.add(key)

    @invariant()
    def active_names_are_unique_and_not_this_box_s(self) -> None:
        names = [p.name for p in self.book.pairings.values() if p.state is P.PairingState.ACTIVE]
        assert len(names) == len(set(names)) and "laptop" not in names


TestPairingModel = PairingModel.TestCase
TestPairingModel.settings = settings(max_examples=300, stateful_step_count=50, deadline=None)
