"""The directory across boxes (connectcore.federation.remote_directory): what a pairing sees (D1, D2),
the entry and its revision (D3), an arriving entry judged through the envelope judgement (D4, every
refusal changing nothing), ages, staleness and aging out (D5), removed pairings dropped (D6), the
listing (D7) and the ambiguity counts (D8) (docs/federation.md, "Directory and history across boxes")."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from connectcore import directory as D
from connectcore.federation import boxes as B
from connectcore.federation import envelope as E
from connectcore.federation import remote_directory as RD
from tests.unit.test_federation_envelope import KA, KB, KC, NONCE, NOW, OLD_PAIRING, PAIRING, SEALED

A, ME, C = KA.box_id, KB.box_id, KC.box_id  # A publishes, ME (this box) reads, C is unpaired
TOKEN = "51d7a9c03e6f2b18"


def local(pane: int = 4, *, scopes: tuple[str, ...] = ("read", "message", "reachable"), **over: Any) -> dict[str, Any]:
    """A local agent as list_agents gives it (more fields than are shared)."""
    values: dict[str, Any] = {
        "pane": f"%{pane}", "window": "main:2", "address": f"%{pane}@{TOKEN}", "harness": "claude",
        "title": "login fix", "cwd": "/home/me/src/app", "repo": "/home/me/src/app", "branch": "fix-login",
        "session_title": "", "pr_links": ["#12"], "activity": "idle", "composer": "empty",
        "session": None, "actor": f"agent:claude:s-{pane}", "connect": "collaborate", "scopes": list(scopes),
        "reachable": "reachable" in scopes, "control": False, "launcher": None, "release": "2.1.0",
        "release_status": "verified", "release_note": "", "note": "", "session_note": "",
    }
    values.update(over)
    return values


def routing(sender: str = A, to: str = ME, pairing: str = PAIRING) -> E.Routing:
    return E.Routing(E.Kind.DIRECTORY, sender, to, pairing=pairing)


def inner(agents: Any = None, *, revision: int = 5, at: float = NOW - 1, **over: Any) -> E.DirectoryInner:
    shared = RD.shared([local()]) if agents is None else agents
    return RD.entry(routing(**over), shared, revision=revision, now=at)


def judged(entry: E.DirectoryInner, *, peers: Any = None, now: float = NOW, signature_ok: bool = True,
           opened: bytes | None | str = "inner") -> E.Verdict:
    """The envelope judgement of ``entry`` on this box, from the facts a shell would report."""
    r = entry.routing
    outer = E.Outer(r, NONCE, SEALED).encode()
    facts = E.Facts(E.subject_for(r.kind, r.sender, r.to), E.SIGNATURE_BYTES + len(outer), signature_ok, outer,
                    E.encode_inner(entry) if opened == "inner" else opened)  # type: ignore[arg-type]
    view = E.View(own=ME, now=now, peers=peers if peers is not None else {
        A: E.Peer(KA, active=PAIRING, pairings=frozenset({OLD_PAIRING, PAIRING}))})
    return E.judge(facts, view)


def taken(directory: RD.RemoteDirectory, entry: E.DirectoryInner, *, now: float = NOW, live: bool = True,
          **kw: Any) -> tuple[RD.RemoteDirectory, RD.Taken]:
    return RD.receive(directory, judged(entry, now=now, **kw), now=now, live=live)


def refused(directory: RD.RemoteDirectory, entry: E.DirectoryInner | E.Verdict, **kw: Any) -> str:
    """The refusal's reason; the directory handed in is unchanged."""
    before = copy.deepcopy(directory)
    verdict = entry if isinstance(entry, E.Verdict) else judged(entry, **{k: v for k, v in kw.items() if k != "live"})
    with pytest.raises(RD.EntryRefused) as error:
        RD.receive(directory, verdict, now=NOW, live=kw.get("live", True))
    assert directory == before
    return error.value.reason


PEER = RD.Peer("laptop", A, PAIRING, "3f9a12c0")


# --- D1, D2: what a pairing sees -------------------------------------------------------------------


def test_by_default_a_pairing_sees_only_the_agents_granted_reachable() -> None:
    agents = [local(1), local(2, scopes=("read",)), local(3, scopes=())]
    assert [a["pane"] for a in RD.shared(agents)] == ["%1"]
    assert [a["pane"] for a in RD.shared(agents, RD.Setting.CONNECTED)] == ["%1", "%2"]
    assert RD.shared(agents, RD.Setting.NONE) == ()
    assert RD.DEFAULT_SETTING is RD.Setting.REACHABLE


def test_a_shared_agent_carries_the_shared_fields_only_each_one_printable_line() -> None:
    (agent,) = RD.shared([local(title="fix\x1b[31m login\nnow", branch="b" * 500)])
    assert set(agent) == RD.FIELDS  # no cwd, no actor, no window, no screen text
    assert agent["title"] == "fix [31m login now" and agent["title"].isprintable()
    assert agent["repo"] == "app"  # the repository's name, never its path
    assert len(agent["branch"]) == RD.TEXT_FIELDS["branch"]
    RD.check_agent(agent)  # what this box publishes passes the other box's check


@given(st.dictionaries(st.sampled_from(sorted(RD.FIELDS | {"cwd", "actor"})),
                       st.one_of(st.none(), st.text(), st.lists(st.text(), max_size=30)), max_size=14),
       st.text(min_size=1).filter(lambda t: t.isprintable()))
def test_whatever_a_local_entry_holds_its_shared_form_passes_the_check(over: dict[str, Any], title: str) -> None:
    agent = local(title=title)
    agent.update({k: v for k, v in over.items() if k not in ("pane", "address", "pr_links", "scopes")})
    for name in ("pr_links", "scopes"):
        if isinstance(over.get(name), list):
            agent[name] = over[name]
    RD.check_agent(RD.shape(agent))


def test_what_is_shared_always_fits_one_envelope() -> None:
    crowded = [local(n, title="t" * 500, pr_links=[f"https://github.com/o/r/pull/{n}{'9' * 250}"] * 30)
               for n in range(1, 300)]
    agents = RD.shared(crowded)
    assert 0 < len(agents) < len(crowded)
    entry = inner(agents)
    # sealing adds 16 bytes; base64url four characters for three; the outer part's routing is small
    assert (len(E.encode_inner(entry)) + 16) * 4 // 3 + 400 <= E.MAX_WIRE_BYTES - E.SIGNATURE_BYTES


# --- D3: the entry ---------------------------------------------------------------------------------


def test_an_entry_is_a_canonical_directory_envelope_with_a_rising_revision() -> None:
    entry = inner()
    data = E.encode_inner(entry)
    assert E.parse_inner(data, E.Outer(entry.routing, NONCE, SEALED)) == entry
    assert E.subject_for(E.Kind.DIRECTORY, A, ME) == f"connect.{ME}.directory.{A}"
    assert RD.next_revision(0, NOW) == int(NOW * 1000)
    assert RD.next_revision(int(NOW * 1000), NOW) == int(NOW * 1000) + 1  # the clock did not move on
    assert RD.next_revision(int(NOW * 1000) + 7, NOW - 5) == int(NOW * 1000) + 8  # nor when it went back
    with pytest.raises(ValueError):
        RD.entry(E.Routing(E.Kind.UNPAIR, A, ME, pairing=PAIRING), [], revision=1, now=NOW)


def test_an_entry_is_put_on_change_at_most_once_a_second_and_every_minute_anyway() -> None:
    agents = RD.shared([local()])
    assert RD.due(None, (), NOW)  # never put: now, even empty
    last = RD.Published(agents, NOW)
    assert not RD.due(last, agents, NOW + 59)
    assert RD.due(last, agents, NOW + RD.HEARTBEAT)
    other = RD.shared([local(title="other")])
    assert not RD.due(last, other, NOW + 0.5) and RD.due(last, other, NOW + 1)


def test_the_publisher_sleeps_until_the_first_time_an_entry_is_due_and_not_a_moment_longer() -> None:
    """next_due is the earliest time due() holds with the same agents: due there, not just before."""
    agents = RD.shared([local()])
    other = RD.shared([local(title="other")])
    assert RD.next_due(None, (), NOW) == NOW  # never put: now
    last = RD.Published(agents, NOW)
    assert RD.next_due(last, agents, NOW + 3) == NOW + RD.HEARTBEAT  # unchanged: the heartbeat
    assert RD.next_due(last, other, NOW + 0.25) == NOW + RD.MIN_INTERVAL  # changed: a second after the put
    assert RD.next_due(last, other, NOW + 7) == NOW + 7  # changed long after: now
    assert RD.refused_again(NOW + 7) == NOW + 8  # a refused put: a second later (not at once, not a minute)
    for changed, at in ((agents, NOW + 3), (other, NOW + 0.25), (other, NOW + 7)):
        when = RD.next_due(last, changed, at)
        assert RD.due(last, changed, when) and (when == at or not RD.due(last, changed, when - 0.001))


def test_a_paired_box_whose_entry_is_not_held_is_read_again_every_catch_up_seconds() -> None:
    """D11: not held and not asked within CATCH_UP; next_read is when that next holds."""
    assert RD.read_due(False, None, NOW) and RD.next_read(False, None, NOW) == NOW  # never asked: now
    assert not RD.read_due(False, NOW, NOW + RD.CATCH_UP - 0.001)
    assert RD.read_due(False, NOW, NOW + RD.CATCH_UP)
    assert RD.next_read(False, NOW, NOW + 1) == NOW + RD.CATCH_UP
    assert RD.next_read(False, NOW, NOW + 9) == NOW + 9
    assert not RD.read_due(True, None, NOW) and not RD.read_due(True, NOW - 60, NOW)  # held: never
    assert RD.next_read(True, None, NOW) is None


# --- D4: judging an arriving entry ------------------------------------------------------------------


def test_an_entry_of_the_active_pairing_is_held_with_its_agents() -> None:
    directory, what = taken(RD.RemoteDirectory(), inner())
    assert what is RD.Taken.NEW
    held = directory.entries[A]
    assert (held.pairing, held.revision, held.since) == (PAIRING, 5, NOW)
    assert [a.get("title") for a in held.agents] == ["login fix"]


def test_the_same_revision_again_changes_nothing_and_a_newer_one_replaces_it() -> None:
    directory, _ = taken(RD.RemoteDirectory(), inner())
    again, what = taken(directory, inner())
    assert what is RD.Taken.REPEAT and again is directory
    newer, what = taken(directory, inner([], revision=6))
    assert what is RD.Taken.NEW and newer.entries[A].agents == () and newer.entries[A].revision == 6


def test_an_agent_left_out_of_a_newer_entry_is_gone_at_once_not_by_ageing() -> None:
    """An entry is the whole of what the pairing sees (D3): the newer one replaces what was held (D4),
    so an agent it no longer lists (revoked, its grant lowered, its pane gone, the setting narrowed on
    the publishing box) leaves the listing when it is heard, while the others stay fresh."""
    directory, _ = taken(RD.RemoteDirectory(), inner(RD.shared([local(4), local(5)])))
    assert [a["pane"] for a in RD.listing(directory, [PEER], NOW)] == ["%4", "%5"]
    later = NOW + 1
    newer, what = taken(directory, inner(RD.shared([local(5)]), revision=6, at=later), now=later)
    assert what is RD.Taken.NEW
    assert [(a["pane"], a["freshness"]) for a in RD.listing(newer, [PEER], later)] == [("%5", "fresh")]
    assert RD.matches(newer, [PEER], later, D.parse_target("pr:12")) == {"laptop": 1}  # %4 no longer weighed


def test_an_older_revision_is_refused_a_replay() -> None:
    directory, _ = taken(RD.RemoteDirectory(), inner(revision=9))
    assert refused(directory, inner(revision=8)) == "older_revision"


def test_an_unpaired_box_s_entry_is_refused_before_any_cryptography() -> None:
    entry = RD.entry(routing(sender=C), [], revision=1, now=NOW)
    assert refused(RD.RemoteDirectory(), entry) == "unpaired"
    r = entry.routing
    outer = E.Outer(r, NONCE, SEALED).encode()
    assert E.keys_to_verify(E.subject_for(r.kind, r.sender, r.to), 200, outer, E.View(own=ME)) is None


def test_an_entry_of_a_removed_pairing_is_refused() -> None:
    assert refused(RD.RemoteDirectory(), inner(pairing=OLD_PAIRING)) == "removed"
    removed = {A: E.Peer(KA, active=None, pairings=frozenset({PAIRING}))}
    assert refused(RD.RemoteDirectory(), inner(), peers=removed) == "removed"


def test_a_bad_signature_a_bad_seal_and_a_clock_far_ahead_are_the_judgement_s_refusals() -> None:
    assert refused(RD.RemoteDirectory(), inner(), signature_ok=False) == "bad_signature"
    assert refused(RD.RemoteDirectory(), inner(), opened=None) == "bad_seal"
    assert refused(RD.RemoteDirectory(), inner(at=NOW + E.SKEW_BOUND + 1)) == "clock_ahead"
    wrong = E.DirectoryInner(routing(), 5, NOW, ())
    outer = E.Outer(routing(), NONCE, SEALED).encode()
    moved = E.judge(E.Facts(f"connect.{ME}.inbox.{A}", E.SIGNATURE_BYTES + len(outer), True, outer,
                            E.encode_inner(wrong)),
                    E.View(own=ME, now=NOW, peers={A: E.Peer(KA, active=PAIRING, pairings=frozenset({PAIRING}))}))
    assert refused(RD.RemoteDirectory(), moved) == "bad_binding"  # an entry moved onto another subject


def test_a_verdict_of_another_kind_is_not_an_entry() -> None:
    verdict = E.Verdict(E.Decision.PAIRING, f"box:{A}")
    assert refused(RD.RemoteDirectory(), verdict) == "not_an_entry"


@pytest.mark.parametrize("change", [
    {"title": "two\nlines"},
    {"title": "\u202eevil"},
    {"branch": "x" * 201},
    {"address": "%4"},
    {"address": f"%5@{TOKEN}"},
    {"pr_links": ["#1\x1b"]},
    {"scopes": "reachable"},
    {"harness": 7},
    {"cwd": "/home/me"},
])
def test_an_agent_whose_printed_fields_are_not_shaped_as_data_is_refused(change: dict[str, Any]) -> None:
    agent = dict(RD.shared([local()])[0], **change)
    assert refused(RD.RemoteDirectory(), inner([agent])) == "malformed_entry"


def test_an_entry_without_an_agents_list_is_refused_by_the_judgement() -> None:
    entry = inner()
    row = E.encode_inner(entry).replace(b'"agents":[', b'"agents":{"x":[').replace(b'}],"from"', b'}]},"from"')
    verdict = judged(entry, opened=row)
    assert verdict.decision is E.Decision.REFUSED and verdict.reason is E.Refusal.BAD_BINDING


# --- D5: age --------------------------------------------------------------------------------------


def test_an_entry_is_fresh_then_stale_then_aged_out() -> None:
    directory, _ = taken(RD.RemoteDirectory(), inner())
    assert RD.listing(directory, [PEER], NOW + 179)[0]["freshness"] == "fresh"
    stale = RD.listing(directory, [PEER], NOW + 240)[0]
    assert stale["freshness"] == "stale (4 min)" and stale["stale"] is True and stale["age"] == 240
    assert RD.listing(directory, [PEER], NOW + RD.AGED_OUT) == ()
    assert A in directory.entries  # aged out of the listing; the pairing stays


def test_a_pairing_s_directory_age_is_its_entry_s_or_none_yet() -> None:
    """What pair list says of each pairing (entry_age, age_words): none yet without an entry held for
    that very pairing, then fresh, stale (N min), aged out."""
    assert RD.entry_age(RD.RemoteDirectory(), A, PAIRING, NOW) is None
    directory, _ = taken(RD.RemoteDirectory(), inner())
    assert RD.entry_age(directory, A, OLD_PAIRING, NOW) is None  # held for another pairing with that box
    assert RD.entry_age(directory, A, None, NOW) is None  # a pairing never active
    assert RD.entry_age(directory, B, PAIRING, NOW) is None
    ages = [RD.entry_age(directory, A, PAIRING, NOW + dt) for dt in (0, 240, RD.AGED_OUT)]
    assert ages == [0, 240, RD.AGED_OUT]
    assert [RD.age_words(a) for a in (None, *ages)] == ["none yet", "fresh", "stale (4 min)", "aged out"]


def test_an_entry_read_by_a_direct_get_counts_from_when_it_was_published() -> None:
    old = inner(at=NOW - 600)
    directory, _ = RD.receive(RD.RemoteDirectory(), judged(old), now=NOW, live=False)
    assert directory.entries[A].since == NOW - 600
    assert RD.listing(directory, [PEER], NOW)[0]["freshness"] == "stale (10 min)"
    live, _ = RD.receive(RD.RemoteDirectory(), judged(old), now=NOW, live=True)
    assert live.entries[A].since == NOW  # heard live: counted from now


# --- D6: removed pairings ---------------------------------------------------------------------------


def test_a_removed_pairing_s_entries_are_dropped_and_never_shown() -> None:
    directory, _ = taken(RD.RemoteDirectory(), inner())
    assert RD.prune(directory, {A: PAIRING}) is directory
    assert RD.prune(directory, {}).entries == {}
    assert RD.prune(directory, {A: "pairing-3"}).entries == {}  # paired again: the old entry is dropped
    assert RD.listing(directory, [], NOW) == ()
    assert RD.listing(directory, [RD.Peer("laptop", A, "pairing-3", "3f9a12c0")], NOW) == ()


# --- D7: the listing --------------------------------------------------------------------------------


def test_a_remote_agent_is_listed_with_its_box_and_an_address_qualified_by_it() -> None:
    directory, _ = taken(RD.RemoteDirectory(), inner())
    (agent,) = RD.listing(directory, [PEER], NOW + 3)
    assert agent["address"] == f"%4@{TOKEN}@laptop" and agent["pane"] == "%4"
    assert agent["box"] == {"name": "laptop", "id": A, "fingerprint": "3f9a12c0"}
    assert (agent["age"], agent["freshness"], agent["stale"], agent["remote"]) == (3, "fresh", False, True)
    assert agent["reachable"] is True and "cwd" not in agent
    placed = B.readings(agent["address"], own_name="devbox", paired_names={"laptop"})
    assert [str(p) for p in placed if p.qualified] == [f"%4@{TOKEN}@laptop"]


# --- D8: ambiguity ----------------------------------------------------------------------------------


def test_a_handle_naming_panes_on_two_boxes_is_refused_ambiguous_never_guessed() -> None:
    directory, _ = taken(RD.RemoteDirectory(), inner())
    pr = D.parse_target("pr:12")
    assert RD.matches(directory, [PEER], NOW, pr) == {"laptop": 1}
    assert RD.matches(directory, [PEER], NOW, D.parse_target("title:LOGIN fix")) == {"laptop": 1}
    assert RD.matches(directory, [PEER], NOW, D.parse_target("repo:app")) == {"laptop": 1}
    assert RD.matches(directory, [PEER], NOW, D.parse_target("control")) == {}
    assert RD.matches(directory, [PEER], NOW, D.parse_target(f"%4@{TOKEN}")) == {}
    assert RD.matches(directory, [PEER], NOW + RD.AGED_OUT, pr) == {}  # aged out: not weighed
    with pytest.raises(D.TargetError) as error:
        B.place("pr:12", own_name="devbox", paired_names={"laptop"}, matches={"pr:12": {None: 1, "laptop": 1}})
    assert error.value.reason is D.TargetRefusal.AMBIGUOUS and "pr:12@laptop" in str(error.value)
    only_there = B.place("pr:12", own_name="devbox", paired_names={"laptop"}, matches={"pr:12": {None: 0, "laptop": 1}})
    assert only_there.box == "laptop"


# --- D9: one remote agent ---------------------------------------------------------------------------


def test_one_remote_agent_is_read_from_its_box_s_entry_without_a_screen_or_a_working_directory() -> None:
    directory, _ = taken(RD.RemoteDirectory(), inner(RD.shared([local(4), local(5, title="deploy")])))
    found = RD.detail(directory, [PEER], NOW + 3, "laptop", D.parse_target(f"%4@{TOKEN}"))
    (listed,) = [a for a in RD.listing(directory, [PEER], NOW + 3) if a["pane"] == "%4"]
    assert {k: v for k, v in found.items() if k not in ("question", "screen_tail")} == listed
    assert found["box"]["name"] == "laptop" and found["age"] == 3 and found["reachable"] is True
    assert "cwd" not in found and "actor" not in found and found["question"] is None
    assert found["screen_tail"]["shown"] is False and found["screen_tail"]["text"] == ""
    assert found["screen_tail"]["withheld"] == RD.SCREEN_WITHHELD
    assert RD.detail(directory, [PEER], NOW, "laptop", D.parse_target("title:deploy"))["pane"] == "%5"


@pytest.mark.parametrize(("box", "target", "reason"), [
    ("laptop", f"%9@{TOKEN}", D.TargetRefusal.UNKNOWN_TARGET),  # no such pane in the entry
    ("laptop", "%4@0000000000000000", D.TargetRefusal.STALE_INCARNATION),  # the pane holds another process
    ("laptop", "pr:12", D.TargetRefusal.AMBIGUOUS),  # two panes on that box
    ("laptop", "title:nothing", D.TargetRefusal.NO_PANE),
    ("laptop", "control", D.TargetRefusal.NO_PANE),  # another box's control is not shared
    ("desk", f"%4@{TOKEN}", D.TargetRefusal.UNKNOWN_TARGET),  # no entry held from that box
])
def test_a_remote_agent_not_named_exactly_once_is_refused_as_a_local_one(box: str, target: str, reason: Any) -> None:
    directory, _ = taken(RD.RemoteDirectory(), inner(RD.shared([local(4), local(5)])))
    before = copy.deepcopy(directory)
    with pytest.raises(D.TargetError) as refused:
        RD.detail(directory, [PEER, RD.Peer("desk", C, "pairing-9", "0000aaaa")], NOW, box, D.parse_target(target))
    assert refused.value.reason is reason and directory == before


def test_an_aged_out_entry_answers_no_remote_agent() -> None:
    directory, _ = taken(RD.RemoteDirectory(), inner())
    with pytest.raises(D.TargetError) as refused:
        RD.detail(directory, [PEER], NOW + RD.AGED_OUT, "laptop", D.parse_target(f"%4@{TOKEN}"))
    assert refused.value.reason is D.TargetRefusal.UNKNOWN_TARGET and "aged out" in str(refused.value)


# --- D10: the removal's tombstone ------------------------------------------------------------------


def tombstone(*, revision: int = 7, at: float = NOW - 1, **over: Any) -> E.DirectoryInner:
    return RD.tombstone(routing(**over), revision=revision, now=at)


def test_a_tombstone_is_an_entry_flagged_removed_with_no_agents_canonical_and_apart_from_an_entry() -> None:
    dead = tombstone()
    assert dead.tombstone is True and dead.agents == ()
    assert b'"tombstone":true' in E.encode_inner(dead)
    assert b"tombstone" not in E.encode_inner(inner()), "an entry's bytes are what they were before tombstones"
    verdict = judged(dead)
    assert verdict.decision is E.Decision.ENTRY and verdict.inner == dead
    # "tombstone": false is not how a publisher writes an entry: not canonical, refused by the judgement
    row = E.encode_inner(dead).replace(b'"tombstone":true', b'"tombstone":false')
    assert judged(dead, opened=row).reason is E.Refusal.BAD_BINDING


def test_a_tombstone_of_the_active_pairing_removes_it_and_drops_what_was_held_whatever_its_revision() -> None:
    """D10: a tombstone names the pairing it ends, signed; removal is permanent, so it ends that
    pairing whatever revision is held (a publisher whose clock went back is still heard)."""
    directory, _ = taken(RD.RemoteDirectory(), inner(revision=9))
    for revision in (10, 3):
        dropped, what = taken(directory, tombstone(revision=revision))
        assert what is RD.Taken.REMOVED and dropped.entries == {}
        assert RD.listing(dropped, [PEER], NOW) == ()
    nothing, what = taken(RD.RemoteDirectory(), tombstone())
    assert what is RD.Taken.REMOVED and nothing.entries == {}


def test_a_tombstone_from_an_unpaired_box_with_a_forged_signature_or_for_another_pairing_is_refused() -> None:
    """Threats (D10): each refused by the judgement before anything changes: an unpaired box's, one
    whose signature does not verify, one naming a removed (older) pairing with that box, one sealed
    for another box; and one that does not open."""
    directory, _ = taken(RD.RemoteDirectory(), inner())
    assert refused(directory, tombstone(sender=C)) == "unpaired"
    assert refused(directory, tombstone(), signature_ok=False) == "bad_signature"
    assert refused(directory, tombstone(pairing=OLD_PAIRING)) == "removed"  # a replay from the old pairing
    assert refused(directory, tombstone(to=C)) == "wrong_box"
    assert refused(directory, tombstone(), opened=None) == "bad_seal"
    assert refused(directory, tombstone(at=NOW + E.SKEW_BOUND + 1)) == "clock_ahead"


def test_a_tombstone_is_data_only_one_that_carries_agents_is_refused() -> None:
    """A tombstone from another machine carries nothing to show: one with agents is ``malformed_entry``
    and removes nothing."""
    directory, _ = taken(RD.RemoteDirectory(), inner())
    carrying = E.DirectoryInner(routing(), 8, NOW - 1, tuple(RD.shared([local()])), tombstone=True)
    assert refused(directory, carrying) == "malformed_entry"
