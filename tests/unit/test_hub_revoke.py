"""The hub's revoke, grants and disconnect at their edges: what each cancels, spares and records.

Effects are frozen dataclasses, so whole tuples are compared; each test names the rule it pins.
"""

from __future__ import annotations

import pytest

from connectcore import hub as H
from connectcore.arming import Arming
from connectcore.consent import Decision
from connectcore.delivery import MessageState
from connectcore.effects import (
    Audit,
    CheckGuard,
    EndSubscriptions,
    Notify,
    Persist,
)
from connectcore.grants import Preset, Scope, TokenState
from tests.unit.hubkit import World, actor, final_effects, guarding

# --- revoke / grants / disconnect ---------------------------------------------------------------------


def test_revoke_records_the_grant_effects_then_cancels_and_drops_pairs(w: World) -> None:
    a, b, c = w.launch("a"), w.launch("b"), w.launch("c")
    k1 = w.send(a, b)
    w.decide(k1)
    k2 = w.send(c, a)
    w.decide(k2)
    kept = w.send(c, b)
    w.decide(kept)
    effects = w.step(H.Revoke(w.now, a.principal, by="policy"))
    token = w.hub.book.tokens[a.token]
    assert token.state is TokenState.REVOKED
    assert effects == (
        Persist("token", (a.token,), token),
        Persist("grant", ("principal", a.principal), frozenset()),
        EndSubscriptions(a.principal),
        Audit(actor="policy", action="revoke", outcome="revoked", target=actor(w, a), at=w.now),
        Notify("grant", (a.principal,)),
        *final_effects(w, k1, "cancelled", "revoked"),
        *final_effects(w, k2, "cancelled", "revoked"),
        Persist("pairs", (), ((c.principal, b.incarnation),)),
    )
    assert w.message(kept).state is MessageState.READY
    assert w.hub.pairs == {(c.principal, b.incarnation)}


def test_revoke_spares_typing_and_emits_no_pairs_record_when_none_lapse(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b)
    w.decide(key, Decision.APPROVE_ONCE)
    w.idle(b)
    w.guard(key, b)
    effects = w.step(H.Revoke(w.now, a.principal))
    assert w.message(key).state is MessageState.TYPING
    assert not [e for e in effects if isinstance(e, Persist) and e.kind in ("pairs", "message")]
    assert effects[3] == Audit(actor="owner", action="revoke", outcome="revoked", target=actor(w, a), at=w.now)


def test_revoke_unknown_principal_names_the_reason(w: World) -> None:
    with pytest.raises(H.UnknownItem) as err:
        w.step(H.Revoke(w.now, "p-none"))
    assert err.value.reason == "unknown_principal" and str(err.value) == "no principal p-none"
    with pytest.raises(H.UnknownItem) as err:
        w.step(H.BindSession(w.now, "p-none", ("claude", "s")))
    assert err.value.reason == "unknown_principal" and str(err.value) == "no principal p-none"


def test_bind_through_the_hub_returns_the_book_s_effects(w: World) -> None:
    a = w.launch("a")
    effects = w.step(H.BindSession(5.0, a.principal, ("claude", "s1")))
    assert w.hub.book.principals[a.principal].session == ("claude", "s1")
    assert effects[-1] == Audit(
        actor="agent:claude:s1", action="rebind", outcome="bound", target="agent:claude:pane:%1:4000", at=5.0
    )


def test_set_grant_off_revokes_each_principal_of_the_session_as_the_same_person(w: World) -> None:
    a = w.launch("a", session=("claude", "s1"))
    b = w.launch("b")
    key = w.send(a, b)
    effects = w.step(H.SetGrant(w.now, ("claude", "s1"), frozenset(), by="phone"))
    token = w.hub.book.tokens[a.token]
    assert effects[:3] == (
        Persist("grant", ("session", "claude", "s1"), frozenset()),
        Audit(actor="phone", action="grant", outcome="set", target="agent:claude:s1", detail="off", at=w.now),
        Notify("grant", ("claude", "s1")),
    )
    assert effects[3:8] == (
        Persist("token", (a.token,), token),
        Persist("grant", ("session", "claude", "s1"), frozenset()),
        EndSubscriptions(a.principal),
        Audit(actor="phone", action="revoke", outcome="revoked", target="agent:claude:s1", at=w.now),
        Notify("grant", (a.principal,)),
    )
    assert w.message(key).state is MessageState.CANCELLED and w.message(key).reason == "revoked"
    assert token.state is TokenState.REVOKED


def test_set_grant_off_for_an_unknown_session_only_records_the_grant(w: World) -> None:
    effects = w.step(H.SetGrant(w.now, ("claude", "nobody"), frozenset()))
    assert effects == (
        Persist("grant", ("session", "claude", "nobody"), frozenset()),
        Audit(actor="owner", action="grant", outcome="set", target="agent:claude:nobody", detail="off", at=w.now),
        Notify("grant", ("claude", "nobody")),
    )
    assert w.hub.book.grants == {("session", "claude", "nobody"): frozenset()}


def test_narrowing_a_grant_revokes_nothing(w: World) -> None:
    a = w.launch("a", session=("claude", "s1"))
    effects = w.step(H.SetGrant(w.now, ("claude", "s1"), frozenset({Scope.READ})))
    assert effects == (
        Persist("grant", ("session", "claude", "s1"), frozenset({Scope.READ})),
        Audit(actor="owner", action="grant", outcome="set", target="agent:claude:s1", detail="read", at=w.now),
        Notify("grant", ("claude", "s1")),
    )
    assert w.hub.book.tokens[a.token].state is TokenState.LIVE


def test_disconnect_all_revokes_each_agent_then_audits_once(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    w.launch("ctl", Preset.OFF, control=True)
    effects = w.step(H.DisconnectAll(w.now, by="phone"))
    revokes = [e for e in effects if isinstance(e, Audit) and e.action == "revoke"]
    assert [(x.actor, x.target) for x in revokes] == [("phone", actor(w, a)), ("phone", actor(w, b))]
    assert effects[-1] == Audit(actor="phone", action="disconnect_all", outcome="done", at=w.now)
    empty = World()
    assert empty.step(H.DisconnectAll(3.0)) == (
        Audit(actor="owner", action="disconnect_all", outcome="done", at=3.0),
    )


def test_panes_to_lock_ignores_final_messages_and_includes_recipients_of_received(w: World) -> None:
    a, b, c = w.launch("a"), w.launch("b"), w.launch("c")
    k = w.send(c, b)
    w.decide(k, Decision.DECLINE)
    w.send(b, a)
    assert H.panes_to_lock(w.hub, [c.principal]) == (c.pane,)
    assert H.panes_to_lock(w.hub, [a.principal]) == (a.pane,)
    assert H.panes_to_lock(w.hub, [b.principal, c.principal]) == (a.pane, b.pane, c.pane)


# --- ordering and accumulation ------------------------------------------------------------------------


def test_revoke_cancels_open_messages_listed_after_final_ones(w: World) -> None:
    a, b = w.launch("a"), w.launch("b")
    done = w.send(a, b)
    w.decide(done, Decision.DECLINE)
    open_one = w.send(a, b)
    w.step(H.Revoke(w.now, a.principal))
    assert w.message(done).state is MessageState.DECLINED
    assert w.message(open_one).state is MessageState.CANCELLED


def test_disconnect_all_stamps_each_revocation_with_its_time(w: World) -> None:
    w.launch("a")
    w.launch("b")
    effects = w.step(H.DisconnectAll(77.0))
    assert [e.at for e in effects if isinstance(e, Audit)] == [77.0, 77.0, 77.0]


def test_narrowing_names_who_set_the_grant(w: World) -> None:
    w.launch("a", session=("claude", "s1"))
    effects = w.step(H.SetGrant(w.now, ("claude", "s1"), frozenset({Scope.READ}), by="phone"))
    assert effects[1].actor == "phone"  # type: ignore[attr-defined]


def test_a_revocation_that_cancels_a_guarded_message_leaves_the_next_one_for_the_guards_answer(w: World) -> None:
    """Claim (issue 24: kept when the state-triggered step became one pass after every event, by the
    guard in flight, ``Hub.guards``): a revocation that cancels a message under its guard frees the
    armed pane, but starts no guard in its own step; the next consented message for the pane is
    tried when the stale guard answers."""
    a, c, b = w.launch("a"), w.launch("c"), w.launch("b")
    first = guarding(w, a, b)
    second = w.send(c, b)
    w.decide(second)
    assert w.message(second).state is MessageState.READY
    effects = w.step(H.Revoke(w.now, a.principal))
    assert w.message(first).state is MessageState.CANCELLED and not w.hub.attempts
    assert w.hub.panes[b.pane].arming is Arming.ARMED
    assert not [e for e in effects if isinstance(e, CheckGuard)]
    assert w.guard(first, b) == (CheckGuard(b.pane, b.incarnation, second),)


@pytest.mark.parametrize("answer", ["observed", "failed"])
def test_a_stale_guard_in_flight_keeps_its_pane_from_attempting_until_it_answers(w: World, answer: str) -> None:
    """Claim (issue 24): one guard in flight per pane. After a revocation cancelled a message under its
    guard, a ready reading of the pane starts no second guard; the stale guard's answer, observed or
    failed, frees the pane and its next consented message is tried in that same step."""
    a, c, b = w.launch("a"), w.launch("c"), w.launch("b")
    first = guarding(w, a, b)
    second = w.send(c, b)
    w.decide(second)
    w.step(H.Revoke(w.now, a.principal))
    assert w.hub.guards == {b.pane: first}
    assert not [e for e in w.idle(b, fingerprint="fp-idle-2") if isinstance(e, CheckGuard)]
    assert w.message(second).state is MessageState.READY
    if answer == "observed":
        effects = w.guard(first, b)
    else:
        effects = w.step(H.GuardFailed(w.now, first, b.incarnation, "typing failed: tmux"))
    assert effects == (CheckGuard(b.pane, b.incarnation, second),)
    assert w.hub.guards == {b.pane: second} and w.hub.attempts == {b.pane: second}


def test_recovery_forgets_the_guards_in_flight(w: World) -> None:
    """Claim (issue 24): the guards in flight end with the daemon that ran them; after ``Recover`` no
    pane waits for a guard's answer that will never come."""
    a, b = w.launch("a"), w.launch("b")
    guarding(w, a, b)
    w.step(H.Revoke(w.now, a.principal))
    assert w.hub.guards
    w.step(H.Recover(w.now))
    assert not w.hub.guards
