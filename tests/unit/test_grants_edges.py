"""Grants and identity at the edges: the exact records each transition of the book emits.

Each test pins one rule of connectcore.grants by comparing whole effect tuples (effects are frozen
dataclasses), the exact refusal reasons and the timestamps carried in the records.
"""

from __future__ import annotations

import pytest

from connectcore import grants
from connectcore._machine import ConnectError
from connectcore.effects import Audit, EndSubscriptions, Notify, Persist
from connectcore.grants import (
    CONTROL_SCOPES,
    PRESET_SCOPES,
    GrantBook,
    GrantError,
    NotConnected,
    Preset,
    Principal,
    Scope,
    ScopeDenied,
    TokenRecord,
    TokenState,
)

COLLAB = PRESET_SCOPES[Preset.COLLABORATE]
OBSERVE = PRESET_SCOPES[Preset.OBSERVE]


def launch(
    book: GrantBook,
    token: str,
    pid: str,
    *,
    harness: str = "claude",
    pane: str = "%1",
    inc: str = "inc-1",
    scopes: frozenset[Scope] = COLLAB,
    session: tuple[str, str] | None = None,
    control: bool = False,
    now: float = 10.0,
    os_pid: int = 4242,
) -> GrantBook:
    book, _principal, _effects = grants.issue_token(
        book,
        now=now,
        token_hash=token,
        principal_id=pid,
        harness=harness,
        pane_id=pane,
        pid=os_pid,
        incarnation=inc,
        scopes=scopes,
        session=session,
        control=control,
    )
    return book


# --- issue_token ----------------------------------------------------------------------------------


def test_issue_token_persists_principal_token_grant_then_audits_in_that_order() -> None:
    book, principal, effects = grants.issue_token(
        GrantBook(),
        now=12.5,
        token_hash="h1",
        principal_id="p1",
        harness="codex",
        pane_id="%3",
        pid=77,
        incarnation="inc-9",
        scopes=OBSERVE,
    )
    expected = Principal("p1", "codex", "%3", 77, "inc-9", 12.5)
    token = TokenRecord("h1", "p1", "inc-9", "%3", 77, TokenState.LIVE, issued_at=12.5)
    assert principal == expected
    assert effects == (
        Persist("principal", ("p1",), expected),
        Persist("token", ("h1",), token),
        Persist("grant", ("principal", "p1"), OBSERVE),
        Audit(
            actor="agent:codex:pane:%3:77",
            action="launch_token",
            outcome="issued",
            target="%3@inc-9",
            detail="history,read",
            at=12.5,
        ),
    )
    assert book.principals == {"p1": expected}
    assert book.tokens == {"h1": token}
    assert book.grants == {("principal", "p1"): OBSERVE}
    assert book.aliases == {}


def test_issue_token_with_a_known_session_aliases_it_and_keys_the_grant_on_the_session() -> None:
    book, principal, effects = grants.issue_token(
        GrantBook(),
        now=1.0,
        token_hash="h1",
        principal_id="p1",
        harness="claude",
        pane_id="%1",
        pid=5,
        incarnation="i1",
        scopes=COLLAB,
        session=("claude", "s1"),
    )
    assert principal.session == ("claude", "s1")
    assert book.aliases == {("claude", "s1"): "p1"}
    assert book.grants == {("session", "claude", "s1"): COLLAB}
    assert effects[2] == Persist("grant", ("session", "claude", "s1"), COLLAB)
    assert effects[3] == Audit(
        actor="agent:claude:s1",
        action="launch_token",
        outcome="issued",
        target="%1@i1",
        detail="history,message,reachable,read",
        at=1.0,
    )


def test_a_resume_token_joins_the_aliased_principal_and_creates_no_new_one() -> None:
    book = launch(GrantBook(), "h1", "p1", session=("claude", "s1"))
    book2, principal, effects = grants.issue_token(
        book,
        now=20.0,
        token_hash="h2",
        principal_id="p-fresh",
        harness="claude",
        pane_id="%1",
        pid=99,
        incarnation="i2",
        scopes=OBSERVE,
        session=("claude", "s1"),
    )
    assert principal.id == "p1" and "p-fresh" not in book2.principals
    assert book2.principals == book.principals
    token = TokenRecord("h2", "p1", "i2", "%1", 99, issued_at=20.0)
    assert effects == (
        Persist("token", ("h2",), token),
        Persist("grant", ("session", "claude", "s1"), OBSERVE),
        Audit(
            actor="agent:claude:s1",
            action="launch_token",
            outcome="issued",
            target="%1@i2",
            detail="history,read",
            at=20.0,
        ),
    )
    assert book2.grants[("session", "claude", "s1")] == OBSERVE


def test_issue_token_refusals_name_their_reason_and_change_nothing() -> None:
    book = launch(GrantBook(), "h1", "p1")
    with pytest.raises(GrantError) as err:
        launch(book, "h1", "p2")
    assert err.value.reason == "token_reused" and str(err.value) == "this token was already issued"
    with pytest.raises(GrantError) as err:
        launch(book, "h2", "p1")
    assert err.value.reason == "principal_reused" and str(err.value) == "principal id p1 already exists"
    with pytest.raises(GrantError) as err:
        launch(book, "h3", "p3", scopes=frozenset({Scope.ACT}))
    assert err.value.reason == "act_not_grantable"
    assert set(book.tokens) == {"h1"} and set(book.principals) == {"p1"}


def test_a_control_launch_stores_no_grant_and_holds_every_scope() -> None:
    book, principal, effects = grants.issue_token(
        GrantBook(),
        now=3.0,
        token_hash="hc",
        principal_id="pc",
        harness="claude",
        pane_id="%0",
        pid=1,
        incarnation="ic",
        scopes=frozenset({Scope.ACT}),
        control=True,
    )
    assert principal.control is True
    assert book.grants == {}
    assert grants.scopes_of(book, "pc") == CONTROL_SCOPES == frozenset(Scope)
    assert effects[-1].actor == "control:claude:pane:%0:1"  # type: ignore[attr-defined]
    assert grants.authenticate(book, "hc").id == "pc"


# --- names, presets, checks -------------------------------------------------------------------------


def test_actor_names_for_each_kind_of_principal() -> None:
    base = Principal("p", "codex", "%4", 31, "i", 0.0)
    assert grants.actor_name(base) == "agent:codex:pane:%4:31"
    assert grants.actor_name(Principal("p", "codex", "%4", 31, "i", 0.0, session=("codex", "s"))) == "agent:codex:s"
    control = Principal("p", "claude", "%4", 31, "i", 0.0, control=True)
    assert grants.actor_name(control) == "control:claude:pane:%4:31"
    bound = Principal("p", "claude", "%4", 31, "i", 0.0, session=("claude", "s"), control=True)
    assert grants.actor_name(bound) == "agent:claude:s"


def test_presets_map_both_ways() -> None:
    for preset in Preset:
        assert grants.scopes_for_preset(preset) == PRESET_SCOPES[preset]
        assert grants.preset_of(PRESET_SCOPES[preset]) is preset
    assert grants.preset_of(frozenset({Scope.MESSAGE})) is None


def test_check_grantable_messages_and_control_exemption() -> None:
    grants.check_grantable(frozenset({Scope.ACT}), Preset.OFF, control=True)
    with pytest.raises(GrantError) as err:
        grants.check_grantable(frozenset({Scope.ACT, Scope.READ}), Preset.COLLABORATE)
    assert err.value.reason == "act_not_grantable"
    assert str(err.value) == "the act scope is never grantable to an ordinary agent"
    with pytest.raises(GrantError) as err:
        grants.check_grantable(frozenset({Scope.READ}), Preset.OFF)
    assert err.value.reason == "over_cap" and str(err.value) == "policy caps grants at off; read not allowed"
    grants.check_grantable(OBSERVE, Preset.OBSERVE)
    grants.check_grantable(frozenset(), Preset.OFF)


def test_not_connected_and_scope_denied_carry_their_reason() -> None:
    assert NotConnected().reason == "not_connected" and str(NotConnected()) == "not connected"
    denied = ScopeDenied(Scope.HISTORY, "agent:claude:s")
    assert denied.reason == "scope_denied" and denied.scope is Scope.HISTORY
    assert str(denied) == "agent:claude:s lacks the 'history' scope for this call"


# --- authentication ---------------------------------------------------------------------------------


def test_authenticate_needs_a_live_token_and_a_non_empty_grant() -> None:
    book = launch(GrantBook(), "h1", "p1", session=("claude", "s1"))
    assert grants.authenticate(book, "h1").id == "p1"
    assert grants.authenticate_or_none(book, "h1") is not None
    assert grants.authenticate_or_none(book, "nope") is None
    with pytest.raises(NotConnected):
        grants.authenticate(book, "nope")
    off, _ = grants.set_grant(book, now=1.0, session=("claude", "s1"), scopes=frozenset())
    with pytest.raises(NotConnected):
        grants.authenticate(off, "h1")
    ended, _ = grants.end_incarnation(book, now=1.0, incarnation="inc-1")
    assert grants.authenticate_or_none(ended, "h1") is None


def test_require_raises_scope_denied_naming_the_actor() -> None:
    book = launch(GrantBook(), "h1", "p1", scopes=OBSERVE, os_pid=8)
    principal = grants.authenticate(book, "h1")
    grants.require(book, principal, Scope.READ)
    with pytest.raises(ScopeDenied) as err:
        grants.require(book, principal, Scope.MESSAGE)
    assert err.value.scope is Scope.MESSAGE and "agent:claude:pane:%1:8" in str(err.value)


def test_session_scopes_and_principal_lookups() -> None:
    book = launch(GrantBook(), "h1", "p1", session=("claude", "s1"), inc="i1")
    book = launch(book, "h2", "p2", inc="i2", pane="%2")
    assert grants.session_scopes(book, ("claude", "s1")) == COLLAB
    assert grants.session_scopes(book, ("claude", "nope")) == frozenset()
    assert grants.principals_of_session(book, ("claude", "s1")) == ("p1",)
    assert grants.principals_of_session(book, ("claude", "nope")) == ()
    assert grants.principal_at(book, "i2").id == "p2"  # type: ignore[union-attr]
    assert grants.principal_at(book, "i9") is None
    ended, _ = grants.end_incarnation(book, now=2.0, incarnation="i2")
    assert grants.principal_at(ended, "i2") is None


def test_all_connected_lists_live_ordinary_principals_once() -> None:
    book = launch(GrantBook(), "h1", "p1", inc="i1")
    book = launch(book, "h1b", "p1b", inc="i1b", session=None)
    book = launch(book, "hc", "pc", inc="ic", control=True, scopes=frozenset())
    book = launch(book, "h3", "p3", inc="i3", session=("claude", "s3"))
    book = launch(book, "h3b", "ignored", inc="i3b", session=("claude", "s3"))  # second token, same principal
    assert grants.all_connected(book) == ("p1", "p1b", "p3")
    book, _ = grants.end_incarnation(book, now=1.0, incarnation="i1")
    assert grants.all_connected(book) == ("p1b", "p3")


def test_canonical_and_group_follow_merges() -> None:
    book = launch(GrantBook(), "h1", "p1", session=("codex", "s1"), harness="codex")
    book = ended(book, "inc-1")  # p1's process ended: its session is free to merge into
    book = launch(book, "h2", "p2", harness="codex", inc="i2")
    book, _ = grants.bind_session(book, now=5.0, principal_id="p2", session=("codex", "s1"))
    book = launch(book, "h1b", "unused", session=("codex", "s1"), harness="codex", inc="i1b")  # p1 resumed
    assert grants.canonical(book, "p2") == "p1"
    assert grants.canonical(book, "p1") == "p1"
    assert grants.canonical(book, "unknown") == "unknown"
    assert grants.group(book, "p2") == frozenset({"p1", "p2"}) == grants.group(book, "p1")
    assert {t.token_hash for t in grants.live_tokens(book, "p1")} == {"h1b", "h2"}
    assert grants.authenticate(book, "h2").id == "p1"


def test_a_merge_loop_is_a_loud_error() -> None:
    a = Principal("a", "claude", "%1", 1, "i", 0.0, merged_into="b")
    b = Principal("b", "claude", "%1", 1, "i", 0.0, merged_into="a")
    with pytest.raises(ConnectError, match="principal merge loop at a"):
        grants.canonical(GrantBook(principals={"a": a, "b": b}), "a")


# --- bind_session -----------------------------------------------------------------------------------


def test_bind_session_moves_the_pending_grant_to_the_session_and_audits_the_rebinding() -> None:
    book = launch(GrantBook(), "h1", "p1", harness="codex", scopes=OBSERVE, os_pid=31)
    new, effects = grants.bind_session(book, now=42.0, principal_id="p1", session=("codex", "s1"))
    bound = Principal("p1", "codex", "%1", 31, "inc-1", 10.0, session=("codex", "s1"))
    assert effects == (
        Persist("principal", ("p1",), bound),
        Persist("grant", ("principal", "p1"), None),
        Persist("grant", ("session", "codex", "s1"), OBSERVE),
        Audit(actor="agent:codex:s1", action="rebind", outcome="bound", target="agent:codex:pane:%1:31", at=42.0),
    )
    assert new.principals == {"p1": bound}
    assert new.grants == {("session", "codex", "s1"): OBSERVE}
    assert new.aliases == {("codex", "s1"): "p1"}
    assert new.tokens == book.tokens


def test_binding_keeps_a_grant_the_session_already_had() -> None:
    book = launch(GrantBook(), "h1", "p1", scopes=COLLAB)
    book, _ = grants.set_grant(book, now=1.0, session=("claude", "s1"), scopes=OBSERVE)
    new, effects = grants.bind_session(book, now=2.0, principal_id="p1", session=("claude", "s1"))
    assert new.grants == {("session", "claude", "s1"): OBSERVE}
    assert effects[2] == Persist("grant", ("session", "claude", "s1"), OBSERVE)


def test_binding_the_same_session_again_is_a_no_op() -> None:
    book = launch(GrantBook(), "h1", "p1", session=("claude", "s1"))
    new, effects = grants.bind_session(book, now=3.0, principal_id="p1", session=("claude", "s1"))
    assert new is book and effects == ()


def test_binding_refusals_name_the_reason_and_the_agent() -> None:
    book = launch(GrantBook(), "h1", "p1", session=("claude", "s1"))
    with pytest.raises(GrantError) as err:
        grants.bind_session(book, now=1.0, principal_id="p1", session=("claude", "s2"))
    assert err.value.reason == "already_bound"
    assert str(err.value) == "agent:claude:s1 is already bound to a different session"
    book = launch(book, "h2", "p2", harness="codex", inc="i2")
    with pytest.raises(GrantError) as err:
        grants.bind_session(book, now=1.0, principal_id="p2", session=("claude", "s3"))
    assert err.value.reason == "harness_mismatch"
    assert str(err.value) == "a claude session cannot bind a codex agent"


def test_a_control_principal_binds_without_moving_a_grant() -> None:
    book = launch(GrantBook(), "hc", "pc", control=True, scopes=frozenset(), os_pid=2, pane="%0", inc="ic")
    new, effects = grants.bind_session(book, now=7.0, principal_id="pc", session=("claude", "sc"))
    bound = Principal("pc", "claude", "%0", 2, "ic", 10.0, session=("claude", "sc"), control=True)
    assert effects == (
        Persist("principal", ("pc",), bound),
        Persist("grant", ("session", "claude", "sc"), frozenset()),
        Audit(actor="agent:claude:sc", action="rebind", outcome="bound", target="control:claude:pane:%0:2", at=7.0),
    )
    assert new.grants == {("session", "claude", "sc"): frozenset()}


def test_late_binding_merges_into_the_session_s_principal_and_its_grant_wins() -> None:
    book = launch(GrantBook(), "h1", "p1", harness="codex", session=("codex", "s1"), scopes=OBSERVE)
    book = ended(book, "inc-1")  # p1's process ended (p2 is that agent resumed by hand)
    book = launch(book, "h2", "p2", harness="codex", inc="i2", pane="%2", scopes=COLLAB, os_pid=55)
    new, effects = grants.bind_session(book, now=9.0, principal_id="p2", session=("codex", "s1"))
    merged = replace_merged(book.principals["p2"], "p1")
    assert effects == (
        Persist("principal", ("p2",), merged),
        Persist("grant", ("principal", "p2"), None),
        Persist("grant", ("session", "codex", "s1"), OBSERVE),
        Audit(actor="agent:codex:s1", action="rebind", outcome="bound", target="agent:codex:pane:%2:55", at=9.0),
    )
    assert new.principals["p2"] == merged and new.principals["p1"] == book.principals["p1"]
    assert new.grants == {("session", "codex", "s1"): OBSERVE}
    assert new.aliases == {("codex", "s1"): "p1"}


def test_a_merge_into_a_session_without_a_grant_carries_the_pending_one() -> None:
    book = launch(GrantBook(), "h1", "p1", harness="codex", session=("codex", "s1"), scopes=OBSERVE)
    book = ended(book, "inc-1")
    book = launch(book, "h2", "p2", harness="codex", inc="i2", scopes=COLLAB)
    del book.grants[("session", "codex", "s1")]
    new, effects = grants.bind_session(book, now=9.0, principal_id="p2", session=("codex", "s1"))
    assert new.grants == {("session", "codex", "s1"): COLLAB}
    assert effects[2] == Persist("grant", ("session", "codex", "s1"), COLLAB)


def test_binding_through_a_merged_id_acts_on_its_root() -> None:
    book = launch(GrantBook(), "h1", "p1", harness="codex", session=("codex", "s1"))
    book = ended(book, "inc-1")
    book = launch(book, "h2", "p2", harness="codex", inc="i2")
    book, _ = grants.bind_session(book, now=1.0, principal_id="p2", session=("codex", "s1"))
    again, effects = grants.bind_session(book, now=2.0, principal_id="p2", session=("codex", "s1"))
    assert again is book and effects == ()


def ended(book: GrantBook, inc: str) -> GrantBook:
    return grants.end_incarnation(book, now=8.0, incarnation=inc)[0]


def test_a_binding_never_joins_the_control_principal() -> None:
    """Issue 21.1: an Observe pane naming control's session id must not become control."""
    book = launch(GrantBook(), "hc", "pc", harness="codex", control=True, scopes=frozenset(), session=("codex", "sc"))
    book = launch(book, "h2", "p2", harness="codex", inc="i2", pane="%2", scopes=OBSERVE, os_pid=55)
    for state in (book, ended(book, "inc-1")):  # while control runs, and once its pane closed
        with pytest.raises(GrantError) as err:
            grants.bind_session(state, now=9.0, principal_id="p2", session=("codex", "sc"))
        assert err.value.reason == "control_session"
        assert str(err.value) == (
            "agent:codex:pane:%2:55 cannot bind codex session sc: the session is the control agent's"
        )
        assert grants.scopes_of(state, "p2") == OBSERVE
        assert grants.canonical(state, "p2") == "p2"


def test_a_binding_never_raises_the_pane_s_grant() -> None:
    book = launch(GrantBook(), "h1", "p1", harness="codex", session=("codex", "s1"), scopes=COLLAB)
    book = launch(book, "h2", "p2", harness="codex", inc="i2", pane="%2", scopes=OBSERVE, os_pid=55)
    for state in (book, ended(book, "inc-1")):
        with pytest.raises(GrantError) as err:
            grants.bind_session(state, now=9.0, principal_id="p2", session=("codex", "s1"))
        assert err.value.reason == "would_raise"
        assert str(err.value) == (
            "agent:codex:pane:%2:55 cannot bind codex session s1: "
            "the session's grant (message,reachable) exceeds what this pane was given"
        )
        assert grants.scopes_of(state, "p2") == OBSERVE
    # a session the person granted more, with nobody on it, is not taken either
    fresh = launch(GrantBook(), "h3", "p3", harness="codex", scopes=OBSERVE)
    fresh, _ = grants.set_grant(fresh, now=1.0, session=("codex", "s9"), scopes=COLLAB)
    with pytest.raises(GrantError) as err:
        grants.bind_session(fresh, now=2.0, principal_id="p3", session=("codex", "s9"))
    assert err.value.reason == "would_raise"
    assert grants.binding_refusal(fresh, "p3", ("codex", "s9")) is not None
    assert grants.binding_refusal(fresh, "p3", ("codex", "s8")) is None


def test_revoking_control_ends_the_role_for_good() -> None:
    book = launch(GrantBook(), "hc", "pc", harness="codex", control=True, scopes=frozenset(), session=("codex", "sc"))
    assert grants.scopes_of(book, "pc") == grants.CONTROL_SCOPES
    new, effects = grants.revoke(book, now=3.0, principal_id="pc")
    assert not new.principals["pc"].control
    assert Persist("principal", ("pc",), new.principals["pc"]) in effects
    assert grants.scopes_of(new, "pc") == frozenset()


def test_a_session_a_running_agent_holds_is_held_by_another() -> None:
    book = launch(GrantBook(), "h1", "p1", harness="codex", session=("codex", "s1"), scopes=OBSERVE)
    book = launch(book, "h2", "p2", harness="codex", inc="i2", pane="%2", scopes=OBSERVE, os_pid=55)
    assert grants.held_by_another(book, "p2", ("codex", "s1")) == "agent:codex:s1"
    assert grants.held_by_another(book, "p1", ("codex", "s1")) is None  # its own
    assert grants.held_by_another(book, "p2", ("codex", "s2")) is None  # nobody's
    assert grants.held_by_another(ended(book, "inc-1"), "p2", ("codex", "s1")) is None  # its process ended


def replace_merged(principal: Principal, into: str) -> Principal:
    from dataclasses import replace

    return replace(principal, merged_into=into)


# --- set_grant --------------------------------------------------------------------------------------


def test_set_grant_persists_audits_and_notifies_by_owner_by_default() -> None:
    new, effects = grants.set_grant(GrantBook(), now=4.5, session=("codex", "s9"), scopes=OBSERVE)
    assert effects == (
        Persist("grant", ("session", "codex", "s9"), OBSERVE),
        Audit(actor="owner", action="grant", outcome="set", target="agent:codex:s9", detail="history,read", at=4.5),
        Notify("grant", ("codex", "s9")),
    )
    assert new.grants == {("session", "codex", "s9"): OBSERVE}


def test_set_grant_off_is_recorded_as_off_and_names_who_set_it() -> None:
    book = launch(GrantBook(), "h1", "p1", session=("claude", "s1"))
    new, effects = grants.set_grant(book, now=5.0, session=("claude", "s1"), scopes=frozenset(), by="policy")
    assert effects[1] == Audit(
        actor="policy", action="grant", outcome="set", target="agent:claude:s1", detail="off", at=5.0
    )
    assert new.grants[("session", "claude", "s1")] == frozenset()
    assert new.tokens == book.tokens and new.principals == book.principals


def test_set_grant_over_the_cap_changes_nothing() -> None:
    book = grants.with_cap(GrantBook(), Preset.OBSERVE)
    assert book.cap is Preset.OBSERVE
    with pytest.raises(GrantError) as err:
        grants.set_grant(book, now=0.0, session=("claude", "s"), scopes=COLLAB)
    assert err.value.reason == "over_cap"


# --- revoke -----------------------------------------------------------------------------------------


def test_revoke_invalidates_every_live_token_of_the_group_and_records_it() -> None:
    book = launch(GrantBook(), "h1", "p1", harness="codex", session=("codex", "s1"), os_pid=3)
    book = ended(book, "inc-1")  # p1's process ended: p2 (that agent resumed by hand) merges into it
    book = launch(book, "h2", "p2", harness="codex", inc="i2")
    book, _ = grants.bind_session(book, now=1.0, principal_id="p2", session=("codex", "s1"))
    book = launch(book, "h1b", "unused", harness="codex", session=("codex", "s1"), inc="i1b", os_pid=3)  # p1 again
    book = launch(book, "h3", "p3", inc="i3")
    new, effects = grants.revoke(book, now=30.0, principal_id="p2")
    r2 = TokenRecord("h2", "p2", "i2", "%1", 4242, TokenState.REVOKED, issued_at=10.0)
    r1 = TokenRecord("h1b", "p1", "i1b", "%1", 3, TokenState.REVOKED, issued_at=10.0)
    assert effects == (
        Persist("token", ("h2",), r2),
        Persist("token", ("h1b",), r1),
        Persist("grant", ("session", "codex", "s1"), frozenset()),
        EndSubscriptions("p1"),
        Audit(actor="owner", action="revoke", outcome="revoked", target="agent:codex:s1", at=30.0),
        Notify("grant", ("p1",)),
    )
    assert new.tokens["h1b"] == r1 and new.tokens["h2"] == r2
    assert new.tokens["h1"].state is TokenState.ENDED
    assert new.tokens["h3"].state is TokenState.LIVE
    assert new.grants[("session", "codex", "s1")] == frozenset()
    assert new.grants[("principal", "p3")] == COLLAB


def test_revoke_skips_tokens_already_ended_and_names_who_revoked() -> None:
    book = launch(GrantBook(), "h1", "p1", session=("claude", "s1"), inc="i1")
    book, _ = grants.end_incarnation(book, now=2.0, incarnation="i1")
    book = launch(book, "h2", "unused", session=("claude", "s1"), inc="i2")
    new, effects = grants.revoke(book, now=3.0, principal_id="p1", by="policy")
    assert [e for e in effects if isinstance(e, Persist) and e.kind == "token"] == [
        Persist("token", ("h2",), new.tokens["h2"])
    ]
    assert new.tokens["h1"].state is TokenState.ENDED
    assert new.tokens["h2"].state is TokenState.REVOKED
    assert effects[-2] == Audit(actor="policy", action="revoke", outcome="revoked", target="agent:claude:s1", at=3.0)


def test_revoking_an_unbound_principal_zeroes_its_principal_grant() -> None:
    book = launch(GrantBook(), "h1", "p1", os_pid=6)
    new, effects = grants.revoke(book, now=1.0, principal_id="p1")
    assert new.grants == {("principal", "p1"): frozenset()}
    assert effects[1] == Persist("grant", ("principal", "p1"), frozenset())
    assert effects[3].target == "agent:claude:pane:%1:6"  # type: ignore[attr-defined]


# --- end_incarnation --------------------------------------------------------------------------------


def test_end_incarnation_ends_only_that_incarnation_s_live_tokens() -> None:
    book = launch(GrantBook(), "h1", "p1", harness="codex", session=("codex", "s1"), inc="i1")
    book, _ = grants.end_incarnation(book, now=0.5, incarnation="i1")  # p1's process ended: p2 (it, resumed) merges
    book = launch(book, "h2", "p2", harness="codex", inc="i2")
    book, _ = grants.bind_session(book, now=1.0, principal_id="p2", session=("codex", "s1"))
    book = launch(book, "h1b", "unused", harness="codex", session=("codex", "s1"), inc="i1b")  # p1 again
    book = launch(book, "h3", "p3", inc="i3")
    book, _ = grants.revoke(book, now=1.0, principal_id="p3")
    new, effects = grants.end_incarnation(book, now=5.0, incarnation="i2")
    ended = TokenRecord("h2", "p2", "i2", "%1", 4242, TokenState.ENDED, issued_at=10.0)
    assert effects == (Persist("token", ("h2",), ended), EndSubscriptions("p1"))
    assert new.tokens["h2"] == ended and new.tokens["h1b"].state is TokenState.LIVE
    assert new.grants == book.grants
    again, more = grants.end_incarnation(new, now=6.0, incarnation="i2")
    assert more == () and again.tokens == new.tokens
    revoked, more = grants.end_incarnation(new, now=6.0, incarnation="i3")
    assert more == () and revoked.tokens["h3"].state is TokenState.REVOKED


# --- restore ----------------------------------------------------------------------------------------


def test_restore_rebuilds_aliases_from_unmerged_sessions_only() -> None:
    p1 = Principal("p1", "codex", "%1", 1, "i1", 0.0, session=("codex", "s1"))
    p2 = Principal("p2", "codex", "%1", 2, "i2", 0.0, session=("codex", "s1"), merged_into="p1")
    p3 = Principal("p3", "claude", "%2", 3, "i3", 0.0)
    token = TokenRecord("h1", "p1", "i1", "%1", 1)
    grant = (("session", "codex", "s1"), OBSERVE)
    book = grants.restore([p1, p2, p3], [token], [grant], Preset.OBSERVE)
    assert book == GrantBook(
        principals={"p1": p1, "p2": p2, "p3": p3},
        tokens={"h1": token},
        aliases={("codex", "s1"): "p1"},
        grants={("session", "codex", "s1"): OBSERVE},
        cap=Preset.OBSERVE,
    )
    assert grants.restore([], [], []).cap is Preset.COLLABORATE


def test_a_principal_never_merges_into_itself() -> None:
    """A session alias that already names this principal binds in place."""
    book = launch(GrantBook(), "h1", "p1", os_pid=2)
    book = GrantBook(principals=book.principals, tokens=book.tokens, aliases={("claude", "s1"): "p1"}, grants=book.grants)
    new, _effects = grants.bind_session(book, now=1.0, principal_id="p1", session=("claude", "s1"))
    assert new.principals["p1"].session == ("claude", "s1") and new.principals["p1"].merged_into is None


def test_a_principal_with_no_stored_grant_has_no_scopes() -> None:
    principal = Principal("p1", "claude", "%1", 1, "i1", 0.0)
    book = grants.restore([principal], [TokenRecord("h1", "p1", "i1", "%1", 1)], [])
    assert grants.scopes_of(book, "p1") == frozenset()
    assert grants.authenticate_or_none(book, "h1") is None


def test_an_ordinary_launch_or_in_place_connection_never_takes_the_control_session() -> None:
    """Issue 21.1 (found on real tmux: a forged Claude registry record bound a hand-started pane to
    control's session once control's pane closed, and connecting it in place joined control's principal
    with act). Claim: connecting a pane in place to a control principal's session is refused, naming it."""
    book = launch(GrantBook(), "hc", "pc", control=True, scopes=frozenset(), session=("claude", "sc"))
    for state in (book, ended(book, "inc-1")):  # while control runs, and once its pane closed
        refused = grants.control_session_refusal(state, ("claude", "sc"), control=False)
        assert refused is not None and refused.reason == "control_session"
        assert str(refused) == (
            "claude session sc is the control agent's: only a control launch may take it (connectd launch --control)"
        )
        assert grants.control_session_refusal(state, ("claude", "sc"), control=True) is None
        assert grants.control_session_refusal(state, ("claude", "other"), control=False) is None


def test_the_sending_token_is_the_principal_s_first_live_token_or_none() -> None:
    """Claim: a message sent on a principal's behalf (control's hand-off) uses its first live token;
    a principal with none (revoked, ended) has no sending token (issue 24: was in connectd/control/acts.py)."""
    from connectcore import hub as H
    from tests.unit.hubkit import World

    w = World()
    a = w.launch("a")
    assert grants.sending_token(w.hub.book, a.principal) == a.token
    w.step(H.Revoke(w.now, a.principal))
    assert grants.sending_token(w.hub.book, a.principal) is None


def test_the_pane_toggle_decides_before_anything_changes() -> None:
    """Claim: the per-pane toggle's rule (issue 24: was decided in connectd/person.py): Off sets the
    session's grant and revokes the pane's principal, refused ``not_connected`` with neither; a preset
    needs a session (``ambiguous_binding``), never control's for a pane that is not control
    (``control_session``), and connects in place only a pane without a principal."""
    from tests.unit.hubkit import World

    w = World()
    a = w.launch("a", session=("claude", "sess-a"))
    book = w.hub.book
    collab = PRESET_SCOPES[Preset.COLLABORATE]
    assert grants.pane_toggle(book, a.pane, a.incarnation, ("claude", "sess-a"), frozenset()) == grants.PaneToggle(
        ("claude", "sess-a"), a.principal
    )
    assert grants.pane_toggle(book, "%9", "inc-none", ("claude", "sess-x"), frozenset()) == grants.PaneToggle(("claude", "sess-x"))
    with pytest.raises(GrantError) as off:
        grants.pane_toggle(book, "%9", "inc-none", None, frozenset())
    assert off.value.reason == "not_connected"
    with pytest.raises(GrantError) as none:
        grants.pane_toggle(book, "%9", "inc-none", None, collab)
    assert none.value.reason == "ambiguous_binding"
    assert grants.pane_toggle(book, a.pane, a.incarnation, ("claude", "sess-a"), collab) == grants.PaneToggle(("claude", "sess-a"))
    assert grants.pane_toggle(book, "%9", "inc-none", ("claude", "sess-x"), collab).connect_in_place
    c = w.launch("control", session=("claude", "sess-c"), control=True)
    with pytest.raises(GrantError) as taken:
        grants.pane_toggle(w.hub.book, "%9", "inc-none", ("claude", "sess-c"), collab)
    assert taken.value.reason == "control_session"
    assert not grants.pane_toggle(w.hub.book, c.pane, c.incarnation, ("claude", "sess-c"), collab).connect_in_place


def test_receive_only_is_an_in_place_token_or_a_process_connect_did_not_launch() -> None:
    """Claim: a pane incarnation is receive-only when a live token of it was issued in place, or when
    connect did not launch its process; a revoked in-place token no longer counts."""
    from connectcore import hub as H
    from tests.unit.hubkit import World

    w = World()
    a = w.launch("a")
    assert not grants.receive_only(w.hub.book, a.incarnation, launched=True)
    assert grants.receive_only(w.hub.book, a.incarnation, launched=False)
    w.step(H.Launch(w.now, "tok-in", "p-in", "claude", "%7", 4007, "inc-7", PRESET_SCOPES[Preset.OBSERVE], ("claude", "s-7"), in_place=True))
    assert grants.receive_only(w.hub.book, "inc-7", launched=True)
    assert w.hub.book.tokens["tok-in"].in_place
    w.step(H.Revoke(w.now, grants.principal_at(w.hub.book, "inc-7").id))  # type: ignore[union-attr]
    assert not grants.receive_only(w.hub.book, "inc-7", launched=True)


def test_a_restored_session_comes_back_with_its_preset_else_off() -> None:
    """Claim (issue 24: was built by hand in connectd/agents/restore_fleet.py): a restored session is
    relaunched with the preset its stored grant is exactly (within the cap), else Off."""
    book = launch(GrantBook(), "h1", "p1", session=("claude", "s1"), inc="i1", scopes=OBSERVE)
    book = launch(book, "h2", "p2", session=("claude", "s2"), inc="i2", pane="%2", scopes=frozenset({Scope.READ}))
    book = launch(book, "h3", "p3", session=("claude", "s3"), inc="i3", pane="%3", scopes=COLLAB)
    assert grants.restored_preset(book, ("claude", "s1")) is Preset.OBSERVE
    assert grants.restored_preset(book, ("claude", "s2")) is Preset.OFF  # an advanced grant: no preset
    assert grants.restored_preset(book, ("claude", "s3")) is Preset.COLLABORATE
    assert grants.restored_preset(book, ("claude", "nope")) is Preset.OFF  # no grant stored
    capped = GrantBook(book.principals, book.tokens, book.aliases, book.grants, cap=Preset.OBSERVE)
    assert grants.restored_preset(capped, ("claude", "s3")) is Preset.OBSERVE  # within the cap
