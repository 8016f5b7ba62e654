"""Grants, identity and consent rules, one test each."""

from __future__ import annotations

import pytest

from connectcore import consent, grants
from connectcore import hub as H
from connectcore._machine import Table, TransitionNotAllowed, mermaid
from connectcore.consent import CARD_TABLE, CardState, Decision
from connectcore.delivery import MESSAGE_TABLE, MessageState, outcome
from connectcore.grants import PRESET_SCOPES, TOKEN_TABLE, GrantError, Preset, Scope
from tests.unit.hubkit import World


def test_presets_are_the_specification_s() -> None:
    assert PRESET_SCOPES[Preset.OFF] == frozenset()
    assert PRESET_SCOPES[Preset.OBSERVE] == {Scope.READ, Scope.HISTORY}
    assert PRESET_SCOPES[Preset.COLLABORATE] == {Scope.READ, Scope.HISTORY, Scope.MESSAGE, Scope.REACHABLE}
    assert grants.preset_of(frozenset({Scope.READ})) is None
    assert grants.preset_of(frozenset({Scope.READ, Scope.HISTORY})) is Preset.OBSERVE


def test_act_is_never_grantable_to_an_ordinary_agent() -> None:
    with pytest.raises(GrantError) as err:
        grants.check_grantable(frozenset({Scope.ACT}), Preset.COLLABORATE)
    assert err.value.reason == "act_not_grantable"
    w = World()
    with pytest.raises(GrantError):
        w.launch("a", scopes=frozenset({Scope.READ, Scope.ACT}))
    assert not w.hub.book.principals
    with pytest.raises(GrantError):
        w.step(H.SetGrant(w.now, ("claude", "s"), frozenset({Scope.ACT})))


def test_policy_cap_limits_the_preset() -> None:
    book = grants.with_cap(grants.GrantBook(), Preset.OBSERVE)
    with pytest.raises(GrantError, match="policy caps grants at observe; message, reachable not allowed"):
        grants.set_grant(book, now=0, session=("codex", "s"), scopes=PRESET_SCOPES[Preset.COLLABORATE])
    grants.set_grant(book, now=0, session=("codex", "s"), scopes=PRESET_SCOPES[Preset.OBSERVE])


def test_actor_names_before_and_after_binding() -> None:
    w = World()
    a = w.launch("a", harness="codex")
    principal = w.hub.book.principals[a.principal]
    assert grants.actor_name(principal) == f"agent:codex:pane:{a.pane}:{principal.pid}"
    effects = w.step(H.BindSession(w.now, a.principal, ("codex", "019a-session")))
    assert grants.actor_name(w.hub.book.principals[a.principal]) == "agent:codex:019a-session"
    rebind = [e for e in effects if isinstance(e, H.Audit) and e.action == "rebind"]
    assert rebind and rebind[0].target == f"agent:codex:pane:{a.pane}:{principal.pid}"


def test_preset_session_binds_from_the_first_call() -> None:
    w = World()
    a = w.launch("a", session=("claude", "uuid-1"))
    assert grants.actor_name(grants.authenticate(w.hub.book, a.token)) == "agent:claude:uuid-1"


def test_rebinding_resets_no_counter_or_approval() -> None:
    w = World.with_limits(sender_per_window=2)
    a, b = w.launch("a", harness="codex"), w.launch("b")
    k1 = w.send(a, b, message_id="m1")
    w.decide(k1)
    w.send(a, b, message_id="m2")
    w.step(H.BindSession(w.now, a.principal, ("codex", "s-a")))
    with pytest.raises(H.CallRefused) as err:
        w.send(a, b, message_id="m3")
    assert err.value.reason == "rate_limited"
    with pytest.raises(H.CallRefused, match="already used"):
        w.send(a, b, message_id="m1")
    assert (a.principal, b.incarnation) in w.hub.pairs


def test_a_resumed_agent_s_new_token_joins_the_same_principal() -> None:
    w = World()
    a = w.launch("a", session=("claude", "s1"))
    b = w.launch("b")
    w.send(a, b, message_id="kept")
    w.step(H.PaneGone(w.now, a.pane, a.incarnation))
    resumed = w.launch("a2", session=("claude", "s1"), pane=a.pane)
    assert resumed.principal == a.principal
    with pytest.raises(H.CallRefused, match="already used"):
        w.send(resumed, b, message_id="kept")


def test_late_binding_to_a_known_session_merges_into_its_principal() -> None:
    w = World()
    a = w.launch("a", harness="codex", session=("codex", "s1"))
    b = w.launch("b")
    w.send(a, b, message_id="before")
    w.step(H.PaneGone(w.now, a.pane, a.incarnation))
    again = w.launch("again", harness="codex", pane=a.pane)  # resumed by hand: session unknown at launch
    assert again.principal != a.principal
    w.step(H.BindSession(w.now, again.principal, ("codex", "s1")))
    assert grants.authenticate(w.hub.book, again.token).id == a.principal
    with pytest.raises(H.CallRefused, match="already used"):
        w.send(again, b, message_id="before")


def test_binding_refusals() -> None:
    w = World()
    a = w.launch("a", harness="codex", session=("codex", "s1"))
    with pytest.raises(GrantError) as err:
        w.step(H.BindSession(w.now, a.principal, ("codex", "s2")))
    assert err.value.reason == "already_bound"
    b = w.launch("b", harness="codex")
    with pytest.raises(GrantError) as err:
        w.step(H.BindSession(w.now, b.principal, ("claude", "s3")))
    assert err.value.reason == "harness_mismatch"
    with pytest.raises(H.UnknownItem):
        w.step(H.BindSession(w.now, "p-nobody", ("codex", "s4")))


def test_a_binding_never_takes_a_session_another_live_agent_runs() -> None:
    """Issue 24 (R1): evidence read from a pane binds only to a session nobody else runs. The hub's
    bind step refuses a session another live principal runs, whoever steps it, and changes nothing;
    once that agent's process has ended, the same binding merges (a resume found late)."""
    w = World()
    a = w.launch("a", harness="codex", session=("codex", "s1"))
    b = w.launch("b", harness="codex")
    before, effects_before = w.snapshot(), list(w.effects)
    with pytest.raises(GrantError) as err:
        w.step(H.BindSession(w.now, b.principal, ("codex", "s1")))
    assert err.value.reason == "session_held"
    assert str(err.value) == (
        f"agent:codex:pane:{b.pane}:4001 cannot bind codex session s1: agent:codex:s1 still runs it"
    )
    assert w.hub == before and w.effects == effects_before
    assert grants.authenticate(w.hub.book, b.token).id == b.principal
    w.step(H.PaneGone(w.now, a.pane, a.incarnation))
    w.step(H.BindSession(w.now, b.principal, ("codex", "s1")))
    assert grants.authenticate(w.hub.book, b.token).id == a.principal


def test_revocation_is_instant_and_narrowing_applies_on_the_next_call() -> None:
    w = World()
    a = w.launch("a", session=("claude", "s1"))
    H.authorize(w.hub, token_hash=a.token, scope=Scope.READ, action="list_agents", now=w.now)
    w.step(H.SetGrant(w.now, ("claude", "s1"), PRESET_SCOPES[Preset.OBSERVE]))
    with pytest.raises(H.CallRefused) as err:
        H.authorize(w.hub, token_hash=a.token, scope=Scope.MESSAGE, action="send_message", now=w.now)
    assert err.value.reason == "scope_denied" and err.value.audit.actor == "agent:claude:s1"
    w.step(H.SetGrant(w.now, ("claude", "s1"), frozenset()))
    with pytest.raises(H.CallRefused, match="not connected"):
        H.authorize(w.hub, token_hash=a.token, scope=Scope.READ, action="list_agents", now=w.now)


def test_reads_are_audited_allowed() -> None:
    w = World()
    a = w.launch("a", Preset.OBSERVE)
    _principal, audit = H.authorize(w.hub, token_hash=a.token, scope=Scope.HISTORY, action="find_sessions", now=5.0, target="q")
    assert audit.outcome == "allowed" and audit.scope == "history" and audit.at == 5.0


def test_token_ends_with_its_incarnation_and_a_recycled_pane_inherits_nothing() -> None:
    w = World()
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b)
    w.decide(key)
    w.step(H.PaneGone(w.now, b.pane, b.incarnation))
    with pytest.raises(grants.NotConnected):
        grants.authenticate(w.hub.book, b.token)
    newcomer = w.launch("new", Preset.COLLABORATE, pane=b.pane)
    k2 = w.send(a, newcomer)
    assert w.message(k2).state is MessageState.AWAITING_CONSENT  # the old pair approval did not carry over
    assert not any(p[1] == b.incarnation for p in w.hub.pairs)


def test_token_cannot_be_issued_twice() -> None:
    w = World()
    a = w.launch("a")
    with pytest.raises(GrantError, match="already issued"):
        w.step(H.Launch(w.now, a.token, "p-x", "claude", "%7", 1, "inc-x", PRESET_SCOPES[Preset.OBSERVE]))


def test_revoke_unknown_principal_is_refused() -> None:
    with pytest.raises(H.UnknownItem):
        H.step(H.Hub(), H.Revoke(0.0, "p-none"))


def test_consent_rules() -> None:
    assert consent.needs_card(pair_approved=False, hop=1, hop_limit=4)
    assert not consent.needs_card(pair_approved=True, hop=4, hop_limit=4)
    assert consent.needs_card(pair_approved=True, hop=5, hop_limit=4)
    assert consent.may_receive(recipient_kind="codex", recipient_scopes=frozenset({"reachable"}), sender_scopes=frozenset()) is None
    assert consent.may_receive(recipient_kind="codex", recipient_scopes=frozenset(), sender_scopes=frozenset({"act"})) is None
    assert consent.may_receive(recipient_kind="shell", recipient_scopes=frozenset({"reachable"}), sender_scopes=frozenset({"act"})) == "shell_pane"
    assert consent.may_receive(recipient_kind="codex", recipient_scopes=frozenset({"read"}), sender_scopes=frozenset()) == "not_reachable"


# The three tables as the design states them, written out by hand (plain strings, one edge a line),
# so that Table.allows / Table.next and the transitions machine are held against something other
# than the edges they read.
EXPECTED_EDGES: dict[str, str] = {
    "token": """
        live revoke revoked
        live incarnation_ended ended
    """,
    "card": """
        pending approve_once approved_once
        pending approve_pair approved_pair
        pending decline declined
        pending expire expired
        pending cancel cancelled
    """,
    "message": """
        awaiting_consent approve ready
        awaiting_consent decline declined
        awaiting_consent expire expired
        awaiting_consent cancel cancelled
        awaiting_consent refuse refused
        ready attempt guarding
        ready expire expired
        ready cancel cancelled
        ready refuse refused
        guarding guard_pass typing
        guarding guard_wait ready
        guarding reroute awaiting_consent
        guarding reroute_approved ready
        guarding cancel cancelled
        guarding refuse refused
        guarding expire expired
        typing confirmed delivered
        typing not_confirmed unconfirmed
    """,
}
TABLES = [TOKEN_TABLE, CARD_TABLE, MESSAGE_TABLE]


def _expected(table: Table) -> dict[tuple[str, str], str]:  # type: ignore[type-arg]
    edges = [line.split() for line in EXPECTED_EDGES[table.name].strip().splitlines()]
    return {(src, event): dst for src, event, dst in edges}


@pytest.mark.parametrize("table", TABLES, ids=lambda t: t.name)
def test_tables_allow_exactly_the_stated_edges(table: Table) -> None:  # type: ignore[type-arg]
    """allows and next agree with the hand-written edges on every state and event, and refuse the rest."""
    expected = _expected(table)
    events = {event for _src, event in expected} | set(table.events())
    for state in table.states:
        for event in sorted(events):
            if (str(state), event) in expected:
                assert table.allows(state, event), (state, event)
                assert str(table.next(state, event)) == expected[(str(state), event)]
            else:
                assert not table.allows(state, event), (state, event)
                with pytest.raises(TransitionNotAllowed):
                    table.next(state, event)


@pytest.mark.parametrize("table", TABLES, ids=lambda t: t.name)
def test_transitions_machine_built_from_the_table_agrees(table: Table) -> None:  # type: ignore[type-arg]
    """The transitions machine takes exactly the hand-written edges, to the stated destinations."""
    from transitions import MachineError

    expected = _expected(table)
    for state in table.states:
        for event in sorted({event for _src, event in expected}):
            machine = table.as_transitions_machine()
            machine.set_state(str(state))
            if (str(state), event) in expected:
                machine.trigger(event)
                assert machine.state == expected[(str(state), event)]
            else:
                with pytest.raises(MachineError):
                    machine.trigger(event)


def test_finals_have_no_way_out_and_table_shape_is_checked() -> None:
    with pytest.raises(ValueError, match="final state"):
        Table(name="bad", initial=CardState.PENDING, finals=frozenset({CardState.PENDING}), edges=((CardState.PENDING, "x", CardState.DECLINED),))
    with pytest.raises(ValueError, match="duplicate edge"):
        Table(name="bad", initial=CardState.PENDING, finals=frozenset(), edges=((CardState.PENDING, "x", CardState.DECLINED), (CardState.PENDING, "x", CardState.EXPIRED)))
    assert "stateDiagram-v2" in mermaid(CARD_TABLE) and "declined --> [*]" in mermaid(CARD_TABLE)


def test_outcome_names() -> None:
    assert {outcome(s) for s in MessageState} == {"queued", "delivered", "declined", "refused", "cancelled", "expired", "unconfirmed"}
    card = consent.Card("c", ("p", "m"), "p", "a", "%1", "i", "b", "t", 1, 0.0, 10.0)
    assert consent.decide(card, Decision.APPROVE_ONCE, now=1, by="owner").state is CardState.APPROVED_ONCE
    with pytest.raises(TransitionNotAllowed):
        consent.decide(consent.expire(card, now=2), Decision.DECLINE, now=3, by="owner")


def test_connect_is_labelled_off_control_its_preset_or_custom() -> None:
    """Issue 23 item 8: a running control agent is shown as `control`, not `custom` (its act scope is no preset)."""
    w = World()
    collaborator = w.launch("a")
    controller = w.launch("c", control=True, scopes=grants.CONTROL_SCOPES)
    reader = w.launch("r", scopes=frozenset({Scope.READ}))
    book = w.hub.book

    def label(agent_token: str) -> str:
        principal = grants.authenticate_or_none(book, agent_token)
        return grants.connect_label(principal, grants.scopes_of(book, principal.id) if principal else frozenset())

    assert label(collaborator.token) == "collaborate"
    assert label(controller.token) == "control"
    assert label(reader.token) == "custom"
    assert grants.connect_label(None, frozenset()) == "off"
