"""Issue 10, the reads and grants part: merges carry counters, the cap binds every scope check, the
gate comes first, and the read rules live in the core (``connectcore.reads``)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from connectcore import consent, grants
from connectcore import hub as H
from connectcore.consent import Decision
from connectcore.effects import Notify
from connectcore.grants import PRESET_SCOPES, Preset, Scope
from tests.unit.hubkit import World

# --- the policy cap binds existing grants -----------------------------------------------------------


def capped(w: World, cap: Preset) -> None:
    """The daemon restarted with a lower cap in policy.toml (the stored grants are unchanged)."""
    w.hub = replace(w.hub, book=grants.with_cap(w.hub.book, cap))


def test_a_lowered_cap_binds_a_collaborate_grant_in_every_scope_check() -> None:
    w = World()
    a, b = w.launch("a", session=("claude", "sa")), w.launch("b", session=("claude", "sb"))
    capped(w, Preset.OBSERVE)
    assert grants.scopes_of(w.hub.book, a.principal) == PRESET_SCOPES[Preset.OBSERVE]
    with pytest.raises(grants.ScopeDenied):
        grants.require(w.hub.book, w.hub.book.principals[a.principal], Scope.MESSAGE)
    with pytest.raises(H.CallRefused) as err:
        H.authorize(w.hub, token_hash=a.token, scope=Scope.MESSAGE, action="send_message", now=w.now)
    assert err.value.reason == "scope_denied" and err.value.audit.outcome == "refused"
    with pytest.raises(H.CallRefused) as err:
        w.send(a, b, message_id="m1")
    assert err.value.reason == "scope_denied"
    assert not w.hub.messages
    # the stored grant is untouched: raising the cap again gives it back
    assert w.hub.book.grants[("session", "claude", "sa")] == PRESET_SCOPES[Preset.COLLABORATE]
    capped(w, Preset.COLLABORATE)
    assert grants.scopes_of(w.hub.book, a.principal) == PRESET_SCOPES[Preset.COLLABORATE]


def test_a_lowered_cap_makes_a_recipient_unreachable() -> None:
    w = World()
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b, message_id="before")
    w.decide(key)
    capped(w, Preset.OBSERVE)
    _principal, scopes = H._recipient_scopes(w.hub, b.incarnation)
    assert consent.may_receive(recipient_kind="claude", recipient_scopes=scopes, sender_scopes=frozenset({"message"})) is not None


def test_a_cap_of_off_disconnects_every_ordinary_agent_but_not_control() -> None:
    w = World()
    a = w.launch("a")
    c = w.launch("c", control=True, scopes=frozenset())
    capped(w, Preset.OFF)
    assert grants.authenticate_or_none(w.hub.book, a.token) is None
    assert grants.scopes_of(w.hub.book, grants.authenticate(w.hub.book, c.token).id) == grants.CONTROL_SCOPES


# --- merging two principals carries counters, pair approvals and hop state ---------------------------


def merged_pair(w: World) -> tuple[object, object, object]:
    """``a`` holds session s1; ``again`` (the same agent resumed by hand, session unknown at launch)
    gets its own principal until its binding merges it into a's (:func:`merge`, once a's process
    has ended); ``b`` is a recipient."""
    a = w.launch("a", harness="codex", session=("codex", "s1"))
    again = w.launch("again", harness="codex")
    b = w.launch("b")
    return a, again, b


def sent(w: World, key: tuple[str, str]) -> H.Message:
    """The message by its sender's id, whichever principal of the merge group it is stored under."""
    found = H.message_for(w.hub, key[0], key[1])
    assert found is not None
    return found


def merge(w: World, a: object, again: object) -> None:
    """a's process ends (``again`` is that agent resumed), then again's binding merges it into a's
    principal: a binding never takes a session a live agent runs (test_grants_consent)."""
    w.step(H.PaneGone(w.now, a.pane, a.incarnation))  # type: ignore[attr-defined]
    w.step(H.BindSession(w.now, again.principal, ("codex", "s1")))  # type: ignore[attr-defined]


def test_a_merge_keeps_the_sender_rate_limited() -> None:
    w = World.with_limits(sender_per_window=2)
    a, again, b = merged_pair(w)
    w.send(again, b, message_id="m1")
    w.send(again, b, message_id="m2")
    merge(w, a, again)
    with pytest.raises(H.CallRefused) as err:
        w.send(again, b, message_id="m3")
    assert err.value.reason == "rate_limited"
    resumed = w.launch("a2", harness="codex", session=("codex", "s1"), pane=a.pane)  # type: ignore[attr-defined]
    with pytest.raises(H.CallRefused) as err:  # the merged agent's other token too: one agent, one budget
        w.send(resumed, b, message_id="m4")
    assert err.value.reason == "rate_limited"


def test_a_merge_keeps_the_pair_rate_limited() -> None:
    w = World.with_limits(pair_per_window=1)
    a, again, b = merged_pair(w)
    w.send(again, b, message_id="m1")
    merge(w, a, again)
    with pytest.raises(H.CallRefused) as err:
        w.send(again, b, message_id="m2")
    assert err.value.reason == "rate_limited" and "pair" in str(err.value)


def test_a_merge_keeps_the_pair_approved() -> None:
    w = World()
    a, again, b = merged_pair(w)
    w.decide(w.send(again, b, message_id="m1"))
    merge(w, a, again)
    key = w.send(again, b, message_id="m2")
    assert sent(w, key).card is None and sent(w, key).state.value == "ready"


def test_a_card_opened_before_a_merge_and_approved_after_it_approves_the_merged_agent() -> None:
    w = World()
    a, again, b = merged_pair(w)
    first = w.send(again, b, message_id="m1")
    merge(w, a, again)
    w.decide(first)
    key = w.send(again, b, message_id="m2")
    assert sent(w, key).card is None


def test_a_merge_keeps_the_hop_count() -> None:
    w = World()
    a, again, b = merged_pair(w)
    received = w.send(b, again, message_id="q1")
    w.decide(received)
    w.deliver(received, again)
    merge(w, a, again)
    key = w.send(again, b, message_id="answer")
    assert sent(w, key).hop == 2
    assert sent(w, key).conversation == w.message(received).conversation


def test_a_message_received_by_the_old_principal_after_the_merge_still_counts_for_the_hop() -> None:
    w = World()
    a, again, b = merged_pair(w)
    received = w.send(b, again, message_id="q1")
    w.decide(received)
    merge(w, a, again)
    w.deliver(received, again)  # addressed to again's old principal, delivered after the merge
    key = w.send(again, b, message_id="answer")
    assert sent(w, key).hop == 2


def test_a_resume_through_a_launch_with_the_session_keeps_every_counter() -> None:
    w = World.with_limits(sender_per_window=1)
    a = w.launch("a", session=("claude", "s1"))
    b = w.launch("b")
    w.decide(w.send(a, b, message_id="m1"))
    w.step(H.PaneGone(w.now, a.pane, a.incarnation))
    resumed = w.launch("a2", session=("claude", "s1"), pane=a.pane)
    with pytest.raises(H.CallRefused) as err:
        w.send(resumed, b, message_id="m2")
    assert err.value.reason == "rate_limited"
    assert H.pair_approved(w.hub, resumed.principal, b.incarnation)


# --- the gate: first on every call, one rule for the scope and the refusal's actor --------------------

from connectcore import directory as D  # noqa: E402
from connectcore import history as HI  # noqa: E402
from connectcore import reads as R  # noqa: E402
from connectcore._machine import ConnectError  # noqa: E402
from connectcore.effects import Audit  # noqa: E402


def test_a_refusal_of_a_revoked_token_names_its_agent_in_the_audit() -> None:
    w = World()
    a = w.launch("a", session=("claude", "s1"))
    w.step(H.Revoke(w.now, a.principal))
    with pytest.raises(H.CallRefused) as err:
        H.authorize(w.hub, token_hash=a.token, scope=Scope.READ, action="list_agents", now=w.now)
    assert err.value.reason == "not_connected" and err.value.audit.actor == "agent:claude:s1"
    w.step(H.PaneGone(w.now, a.pane, a.incarnation))  # an ended token too
    with pytest.raises(H.CallRefused) as err:
        H.authorize(w.hub, token_hash=a.token, scope=Scope.READ, action="list_agents", now=w.now)
    assert err.value.audit.actor == "agent:claude:s1"


def test_a_refusal_of_a_merged_principal_s_token_names_the_agent_it_joined() -> None:
    w = World()
    a, again, _b = merged_pair(w)
    merge(w, a, again)
    w.step(H.Revoke(w.now, again.principal))  # type: ignore[attr-defined]
    with pytest.raises(H.CallRefused) as err:
        R.gate(w.hub, token_hash=again.token, action="whoami", now=w.now)  # type: ignore[attr-defined]
    assert err.value.audit.actor == "agent:codex:s1"


def test_every_tool_has_its_scope() -> None:
    assert {
        "whoami": None,
        "list_agents": Scope.READ,
        "get_agent": Scope.READ,
        "resolve": Scope.READ,
        "find_sessions": Scope.HISTORY,
        "get_session": Scope.HISTORY,
        "send_message": Scope.MESSAGE,
        "get_message": Scope.MESSAGE,
        "list_messages": Scope.MESSAGE,
        **{tool: Scope.ACT for tool in ("send_keys", "launch_agent", "resume_session", "handoff", "shell_text", "close_pane", "get_act")},
    } == R.CALL_SCOPES


def test_the_gate_allows_with_one_record_written_when_the_call_ends() -> None:
    w = World()
    a = w.launch("a", Preset.OBSERVE, session=("claude", "s1"))
    admitted = R.gate(w.hub, token_hash=a.token, action="get_agent", now=5.0, target="pr:1")
    assert admitted.principal.id == a.principal
    assert admitted.allowed() == Audit("agent:claude:s1", "get_agent", "allowed", "read", "pr:1", at=5.0)
    assert admitted.refused("no_pane") == Audit(
        "agent:claude:s1", "get_agent", "refused", "read", "pr:1", detail="no_pane", at=5.0
    )


def test_whoami_needs_a_connected_token_and_no_scope() -> None:
    w = World()
    a = w.launch("a", scopes=frozenset({Scope.HISTORY}), session=("claude", "s1"))
    assert R.gate(w.hub, token_hash=a.token, action="whoami", now=1.0).allowed() == Audit(
        "agent:claude:s1", "whoami", "allowed", None, "", at=1.0
    )
    with pytest.raises(H.CallRefused) as err:
        R.gate(w.hub, token_hash="nope", action="whoami", now=1.0)
    assert err.value.reason == "not_connected" and err.value.audit.actor == "agent:unknown"


def test_send_message_s_record_is_its_step_s() -> None:
    w = World()
    a = w.launch("a", session=("claude", "s1"))
    admitted = R.gate(w.hub, token_hash=a.token, action="send_message", now=1.0, target="%2@x", message_id="m1")
    assert admitted.allowed() is None  # the Submit step writes queued, an outcome or its refusal
    assert admitted.refused("unknown_target") == Audit(
        "agent:claude:s1", "send_message", "refused", "message", "%2@x", "m1", "unknown_target", 1.0
    )


def test_list_messages_needs_message_or_for_a_receive_only_agent_reachable() -> None:
    w = World()
    sender = w.launch("sender")
    receiver = w.launch("receiver", scopes=frozenset({Scope.REACHABLE}))
    reader = w.launch("reader", Preset.OBSERVE)
    assert R.gate(w.hub, token_hash=sender.token, action="list_messages", now=1.0).record.scope == "message"
    assert R.gate(w.hub, token_hash=receiver.token, action="list_messages", now=1.0).record.scope == "reachable"
    with pytest.raises(H.CallRefused) as err:
        R.gate(w.hub, token_hash=reader.token, action="list_messages", now=1.0)
    assert err.value.reason == "scope_denied" and err.value.audit.scope == "message"


def test_an_unknown_call_is_refused_by_name_and_changes_nothing() -> None:
    w = World()
    a = w.launch("a")
    before = w.hub
    with pytest.raises(ConnectError, match="unknown call 'read_files'"):
        R.gate(w.hub, token_hash=a.token, action="read_files", now=1.0)
    assert w.hub is before


def test_the_gate_is_checked_again_after_a_wait() -> None:
    """A long poll re-passes the gate when it wakes: revoked meanwhile, it is refused with its actor."""
    w = World()
    a = w.launch("a", session=("claude", "s1"))
    R.gate(w.hub, token_hash=a.token, action="get_message", now=1.0)
    w.step(H.Revoke(w.now, a.principal))
    with pytest.raises(H.CallRefused) as err:
        R.gate(w.hub, token_hash=a.token, action="get_message", now=2.0, target="m1")
    assert (err.value.audit.actor, err.value.audit.outcome, err.value.audit.detail) == (
        "agent:claude:s1",
        "refused",
        "not_connected",
    )


# --- read rules: the inbox, replies, the wait, the caller's pane and repo, the handle ----------------


def delivered_to(w: World, sender: object, to: object, message_id: str) -> tuple[str, str]:
    key = w.send(sender, to, message_id=message_id)  # type: ignore[arg-type]
    if w.message(key).card is not None:
        w.decide(key)
    w.deliver(key, to)  # type: ignore[arg-type]
    return key


def test_the_inbox_holds_what_was_typed_into_the_caller_within_the_reply_window() -> None:
    w = World()
    a, b = w.launch("a"), w.launch("b")
    key = delivered_to(w, a, b, "q1")
    assert [m.key for m in R.inbox(w.hub, b.principal, w.now)] == [key]
    assert R.inbox(w.hub, a.principal, w.now) == ()
    later = w.now + w.hub.limits.reply_window + 1
    assert R.inbox(w.hub, b.principal, later) == ()


def test_a_message_being_typed_is_in_the_inbox_already() -> None:
    w = World()
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b, message_id="q1")
    w.decide(key)
    w.idle(b)
    w.guard(key, b)
    assert w.message(key).state.value == "typing"
    assert [m.key for m in R.inbox(w.hub, b.principal, w.now)] == [key]


def test_the_inbox_follows_the_merge_group() -> None:
    w = World()
    a, again, b = merged_pair(w)
    key = delivered_to(w, b, again, "q1")
    merge(w, a, again)
    root = grants.canonical(w.hub.book, again.principal)  # type: ignore[attr-defined]
    assert [m.key for m in R.inbox(w.hub, root, w.now)] == [key]


def test_replies_are_the_messages_sent_in_reply_to_a_ref() -> None:
    w = World()
    a, b = w.launch("a"), w.launch("b")
    question = delivered_to(w, a, b, "q1")
    ref = w.message(question).ref
    answer = w.send(b, a, message_id="a1", in_reply_to=ref)
    assert [m.key for m in R.replies(w.hub, ref)] == [answer]
    assert R.replies(w.hub, "r-none") == ()


def test_a_wait_ends_on_a_final_outcome_the_deadline_or_an_inbox_after_a_wake() -> None:
    w = World()
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b, message_id="q1")
    open_message = w.message(key)
    inbox = R.inbox(w.hub, a.principal, w.now)
    assert not R.wait_over(open_message, inbox, timed_out=False, woken=False)
    assert R.wait_over(open_message, inbox, timed_out=True, woken=False)
    received = delivered_to(w, b, a, "back")
    inbox = R.inbox(w.hub, a.principal, w.now)
    assert inbox and not R.wait_over(open_message, inbox, timed_out=False, woken=False)
    assert R.wait_over(open_message, inbox, timed_out=False, woken=True)
    assert not R.wait_over(open_message, (), timed_out=False, woken=True)
    w.step(H.Decide(w.now, w.card_of(key), consent.Decision.DECLINE))
    assert R.wait_over(w.message(key), (), timed_out=False, woken=False)
    assert received


def observation(pane: str, pid: int, cwd: str) -> D.PaneObservation:
    incarnation = D.Incarnation(server_pid=1, server_start=1, pane_id=pane, pane_pid=pid, process_start=pid)
    return D.PaneObservation(incarnation, harness="claude", cwd=cwd)


def test_the_caller_s_pane_is_the_one_its_live_token_is_bound_to() -> None:
    directory = D.observe(D.Directory(), [observation("%1", 11, "/w/one"), observation("%2", 22, "/w/two")])
    w = World()
    two = directory.panes["%2"]
    a = w.launch("a", pane="%2")
    w.hub = replace(
        w.hub,
        book=replace(
            w.hub.book,
            tokens={k: replace(t, incarnation=two.token) for k, t in w.hub.book.tokens.items()},
        ),
    )
    principal = grants.authenticate(w.hub.book, a.token)
    record = R.own_record(directory, w.hub.book, principal)
    assert record is not None and record.pane_id == "%2" and record.cwd == "/w/two"
    w.step(H.PaneGone(w.now, "%2", two.token))
    assert R.own_record(directory, w.hub.book, principal) is None


def test_history_reads_are_limited_to_the_caller_s_own_repository() -> None:
    assert HI.caller_repos("/repos/connect") == frozenset({"/repos/connect"})
    assert HI.caller_repos(None) == frozenset()  # no pane, no repository: nothing to read
    assert HI.caller_repos("") == frozenset()


def test_a_target_is_a_handle_or_an_address() -> None:
    assert D.handle_of("%5@0123456789abcdef") is None
    assert D.handle_of(" pr:123 ") == "pr:123"
    assert D.handle_of("title:  fix login") == "title:fix login"
    assert D.handle_of("control") == "control"
    for bad in ("%5", "", "window:2"):
        with pytest.raises(D.TargetError) as err:
            D.handle_of(bad)
        assert err.value.reason == "bad_target"


def test_a_refusal_after_the_gate_is_audited_with_its_reason_code() -> None:
    assert R.refusal_reason(D.TargetError(D.TargetRefusal.NO_PANE, "no live pane matches pr:1")) == "no_pane"
    assert R.refusal_reason(HI.OutOfScope("repo '/x'")) == "out_of_scope"
    assert R.refusal_reason(HI.SessionNotFound("claude", "s")) == "session_not_found"
    assert R.refusal_reason(ValueError("boom")) == "value_error"


def test_an_outcome_wakes_the_agent_a_merged_sender_joined() -> None:
    """A long poll waits under the caller's canonical principal; a message sent before the merge
    names the old one as its sender, so the outcome's wake-up names the agent it joined."""
    w = World()
    a, again, b = merged_pair(w)
    key = w.send(again, b, message_id="m1")
    merge(w, a, again)
    effects = w.step(H.Decide(w.now, w.card_of(key), consent.Decision.DECLINE))
    woken = [e.principal for e in effects if isinstance(e, H.Notify) and e.topic == "message"]
    assert woken == [grants.canonical(w.hub.book, again.principal)]  # type: ignore[attr-defined]


def test_a_message_rerouted_after_a_merge_finds_the_pair_the_merged_agent_approved() -> None:
    """Claim: a handle that moves to a pane the merged agent's pair covers needs no new card."""
    w = World()
    a, again, b = merged_pair(w)
    c = w.launch("c")
    w.decide(w.send(a, c, message_id="x"))  # the person approved a -> c as a pair
    key = w.send(again, b, message_id="m1", handle="title:reviewer")
    w.decide(key, Decision.APPROVE_ONCE)
    merge(w, a, again)
    w.idle(b)
    effects = w.guard(key, b, handle=H.Recipient(c.pane, c.incarnation, "claude", "title:reviewer"))  # type: ignore[attr-defined]
    moved = sent(w, key)
    assert moved.recipient_pane == c.pane  # type: ignore[attr-defined]
    assert not [e for e in effects if isinstance(e, Notify) and e.topic == "card"]
    assert moved.state.value in {"ready", "guarding"}


def test_a_delivery_to_a_merged_away_principal_wakes_the_merged_agent() -> None:
    """Claim: the inbox notice names the recipient's canonical principal, whose long polls wait on it."""
    w = World()
    a, again, b = merged_pair(w)
    key = w.send(b, again, message_id="q1")
    w.decide(key)
    merge(w, a, again)
    effects = w.deliver(key, again)  # type: ignore[arg-type]
    inbox = [e for e in effects if isinstance(e, Notify) and e.topic == "inbox"]
    assert [e.principal for e in inbox] == [a.principal]  # type: ignore[attr-defined]


# --- issue 22 (5): a call refused at the edge gets its one record -----------------------------------


def test_a_call_refused_before_its_handler_is_audited_as_its_callers_refusal() -> None:
    """A call the SDK refuses (unknown tool, bad arguments) is one record: refused, naming the caller."""
    from connectcore import reads as R

    w = World()
    a = w.launch("a")
    actor = H._token_actor(w.hub.book, a.token)
    record = R.refused_at_the_edge(w.hub, token_hash=a.token, action="x" * 300, reason=R.UNKNOWN_TOOL, now=5.0)
    assert (record.actor, record.action, record.outcome, record.detail, record.at) == (
        actor, "x" * 100, "refused", "unknown_tool", 5.0
    )
    assert actor.startswith("agent:")
    bad = R.refused_at_the_edge(w.hub, token_hash=a.token, action="send_message", reason=R.BAD_ARGUMENTS, now=6.0)
    assert (bad.scope, bad.detail) == ("message", "bad_arguments")
    unknown = R.refused_at_the_edge(w.hub, token_hash="nope", action="whoami", reason=R.BAD_ARGUMENTS, now=7.0)
    assert unknown.actor == "agent:unknown"


# --- what a sender is told while its message waits on a person -------------------------------------


def test_a_message_waiting_on_a_card_tells_its_sender_so_and_names_the_card() -> None:
    from connectcore import reads as R

    w = World()
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b)
    card = w.card_of(key)
    assert R.sender_reason(w.hub, w.message(key)) == f"awaiting consent: card {card}"
    w.decide(key, Decision.APPROVE_ONCE)
    # approved: it now waits on the pane, not the person, and its own reason is shown
    assert R.sender_reason(w.hub, w.message(key)) == "approved_once" == w.message(key).reason


def test_a_declined_or_pair_approved_message_is_not_said_to_await_consent() -> None:
    from connectcore import reads as R

    w = World()
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b)
    w.decide(key, Decision.DECLINE)
    assert R.sender_reason(w.hub, w.message(key)) == "declined by the person"
    w.decide(w.send(a, b), Decision.APPROVE_PAIR)
    later = w.send(a, b)
    assert w.message(later).card is None and R.sender_reason(w.hub, w.message(later)) == "pair_approved"


# --- issue 24: what list_tools shows is the core's rule (was an `if` in connectd/edges/mcp.py) ------


def test_act_tools_are_listed_only_to_a_caller_whose_principal_holds_act() -> None:
    """Claim: control's act tools are shown to a token whose principal holds act, to nobody else
    (an Observe or Collaborate agent, an unknown or missing token); the other tools keep their order."""
    w = World()
    control = w.launch("control", control=True)
    plain = w.launch("plain", Preset.COLLABORATE)
    names = ["list_agents", "send_keys", "send_message", "launch_agent", "no_such_tool"]
    assert grants.Scope.ACT in grants.scopes_of(w.hub.book, control.principal)
    assert R.tools_listed(w.hub.book, control.token, names) == tuple(names)
    for token in (plain.token, "tok-unknown", None, ""):
        assert R.tools_listed(w.hub.book, token, names) == ("list_agents", "send_message", "no_such_tool")
    w.step(H.Revoke(w.now, control.principal))
    assert R.tools_listed(w.hub.book, control.token, names) == ("list_agents", "send_message", "no_such_tool")


def test_a_wait_is_bounded_by_the_one_cap() -> None:
    """Claim (issue 24: the 60 s cap was written twice, in agent_calls and act_calls): a get_message or
    get_act wait is never negative and never longer than reads.MAX_WAIT."""
    from connectcore import reads as R

    assert R.MAX_WAIT == 60.0
    assert [R.bounded_wait(w) for w in (-5.0, 0.0, 12.5, 60.0, 3600.0)] == [0.0, 0.0, 12.5, 60.0, 60.0]


# --- the other box of a message (connectd messages) ---------------------------------------------------


def test_a_message_from_another_box_shows_that_box_by_this_box_s_name_for_it() -> None:
    from connectcore import reads as R
    from connectcore.federation import pairing as P
    from connectcore.federation import remote
    from tests.unit import test_federation_pairing as TP

    w = World()
    a, b = w.launch("a"), w.launch("b")
    w.send(a, b, message_id="m1")
    (local,) = w.hub.messages.values()
    book = TP.paired()  # box B1 paired under the name devbox
    assert R.from_box(local, book) is None and R.from_box(local, None) is None
    theirs = replace(local, sender=remote.remote_principal(TP.B1.box_id, "p-9"))
    assert R.from_box(theirs, book) == "devbox"
    assert R.from_box(theirs, None) == TP.B1.box_id  # no pairing book: the box id
    # a pairing removed since still names the box it was; a box no pairing names is shown by its id
    removed, _ = P.remove(book, "inv1", now=TP.T0 + 9)
    assert R.from_box(theirs, removed) == "devbox"
    stranger = replace(local, sender=remote.remote_principal(TP.B2.box_id, "p-9"))
    assert R.from_box(stranger, book) == TP.B2.box_id == P.box_name(book, TP.B2.box_id)


def test_a_message_sent_to_another_box_shows_its_target_that_box_and_the_outcome_in_the_sender_s_words() -> None:
    from connectcore import reads as R
    from connectcore.federation import outbox as O
    from tests.unit import test_federation_outbox as TO

    outbox, _ = O.admit(O.Outbox(own=TO.A), TO.message("x-1"), nonce=TO.NONCE, now=TO.T0)
    row = outbox.rows[TO.message("x-1").identity]
    sent = R.sent_across(row, None)
    assert (sent.to_box, sent.sender_actor, sent.target, sent.text) == (
        TO.B, "agent:claude:s-1", "%4@51d7a9c03e6f2b18", "hello from box A"
    )
    assert (sent.outcome, sent.reason, sent.waits_for) == ("queued", f"until box {TO.B} accepts it", sent.reason)
    assert (sent.conversation, sent.hop) == ("c-1", 1)
    # final: the other box's outcome, waiting for nothing
    done = replace(row, state=O.OutboxState.DELIVERED, reason="typed")
    assert (R.sent_across(done, None).outcome, R.sent_across(done, None).reason, R.sent_across(done, None).waits_for) == (
        "delivered", "typed", ""
    )
    assert (sent.listed, R.sent_across(done, None).listed) == ("queued", "delivered")  # the person's word: the same
    # its sender revoked (or ended) after it left: the person's list says cancelling and that the other
    # box has not confirmed; the agent is still told queued
    out, _ = O.publish_new(outbox, row.identity, now=TO.T0, bus_up=True)
    gone, _ = O.cancel(out, sender=row.identity.principal, now=TO.T0 + 1, reason="the sender was revoked",
                       nonces={row.identity: bytes([9]) * 24})
    cancelling = R.sent_across(gone.rows[row.identity], None)
    assert (cancelling.listed, cancelling.outcome) == ("cancelling", "queued")
    assert cancelling.reason == f"box {TO.B} has not yet confirmed it is cancelled"
    assert cancelling.waits_for == f"cancelling: box {TO.B} has not yet confirmed it is cancelled"


def test_a_message_to_another_box_answers_its_sender_in_the_shape_of_a_local_one() -> None:
    """``send_message``/``get_message`` across boxes (reads.sent_view): the local answer's ``from``,
    ``to`` and ``in_reply_to`` too (the target qualified by the box's name; the reply's ref as this box
    gave it), with the keys it had (``to_box``, ``created_at``, ``final_at``)."""
    from connectcore import reads as R
    from connectcore.federation import envelope as E
    from connectcore.federation import outbox as O
    from connectcore.federation import remote
    from tests.unit import test_federation_outbox as TO

    w = World()
    a, b = w.launch("a"), w.launch("b")
    w.send(a, b, message_id="m1")
    (local,) = w.hub.messages.values()
    local_view = {"message_id", "ref", "outcome", "reason", "to", "from", "hop", "conversation", "in_reply_to",
                  "created_at", "final_at"}
    outbox, _ = O.admit(O.Outbox(own=TO.A), TO.message("x-1"), nonce=TO.NONCE, now=TO.T0)
    row = outbox.rows[TO.message("x-1").identity]
    view = R.sent_view(w.hub, row, "devbox")
    assert view == {
        "message_id": "x-1", "outcome": "queued", "reason": "until box devbox accepts it", "from": "agent:claude:s-1",
        "to": "%4@51d7a9c03e6f2b18@devbox", "in_reply_to": None, "to_box": "devbox", "created_at": TO.T0,
        "final_at": None,
    }
    assert set(view) - {"to_box"} <= local_view
    handle = O.admit(O.Outbox(own=TO.A), TO.message("x-2", target=("handle", "pr:12")), nonce=TO.NONCE, now=TO.T0)[0]
    assert R.sent_view(w.hub, next(iter(handle.rows.values())), "devbox")["to"] == "pr:12@devbox"
    # a reply: the message it answers came from box B (held here as its remote principal's): its ref here
    theirs = replace(local, sender=remote.remote_principal(TO.B, "p-9"), id="q-1")
    hub = replace(w.hub, messages={**w.hub.messages, theirs.key: theirs})
    answered = E.Identity(TO.B, "p-9", "q-1")
    reply = O.admit(O.Outbox(own=TO.A), TO.message("x-3", in_reply_to=answered), nonce=TO.NONCE, now=TO.T0)[0]
    (reply_row,) = reply.rows.values()
    assert R.sent_view(hub, reply_row, "devbox")["in_reply_to"] == theirs.ref
    assert R.sent_view(w.hub, reply_row, "devbox")["in_reply_to"] == str(answered)  # no longer held: its identity
    done = replace(row, state=O.OutboxState.DELIVERED, reason="typed", final_at=TO.T0 + 5)
    assert {k: R.sent_view(w.hub, done, "devbox")[k] for k in ("outcome", "reason", "final_at")} == {
        "outcome": "delivered", "reason": "typed", "final_at": TO.T0 + 5}
