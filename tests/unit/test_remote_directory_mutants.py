"""The directory across boxes: rules the 2026-12-06 (second) mutation run found unpinned
(docs/quality.md names the mutants each test kills). The module's own tests are in
test_federation_remote_directory.py; these are kept apart so that file stays its owners'."""

from __future__ import annotations

from typing import Any

import pytest

from connectcore import directory as D
from connectcore.federation import envelope as E
from connectcore.federation import remote_directory as RD
from tests.unit.test_federation_envelope import NOW, PAIRING
from tests.unit.test_federation_remote_directory import (
    ME,
    PEER,
    TOKEN,
    A,
    inner,
    local,
    refused,
    routing,
    taken,
)


def entry_verdict(agents: Any) -> E.Verdict:
    """The judgement's verdict of an entry whose agents are ``agents`` (made directly: an entry of 200
    agents is past what one envelope carries, and the judgement would refuse it first)."""
    return E.Verdict(E.Decision.ENTRY, f"box:{A}", inner=RD.entry(routing(), agents, revision=5, now=NOW - 1))


def shared_one(**over: Any) -> dict[str, Any]:
    (agent,) = RD.shared([local(**over)])
    return agent


def test_the_repository_is_shared_by_its_last_name_whatever_its_path_ends_with() -> None:
    """D2: the repository is shared by its name (the last path component), a trailing slash ignored; a
    path with no name shares none."""
    assert shared_one(repo="/home/me/src/app/")["repo"] == "app"
    assert shared_one(repo="/home/me/src/FLEX/")["repo"] == "FLEX"
    assert shared_one(repo="/")["repo"] is None


def test_an_empty_or_missing_field_is_shared_as_null_or_empty_never_as_text() -> None:
    """D2: a field the local agent lacks (None) or leaves empty is shared as null (title, repo, branch,
    release) or as the empty string (the others), never as the text ``None``."""
    agent = shared_one(title=None, branch="", release=None, activity=None, composer="")
    assert (agent["title"], agent["branch"], agent["release"]) == (None, None, None)
    assert (agent["activity"], agent["composer"]) == ("", "")
    RD.check_agent(agent)


def test_over_long_links_and_scopes_are_cut_to_their_bounds() -> None:
    """D2: a PR link is cut to MAX_LINK characters, a scope to 32, so what is shared passes D4."""
    agent = shared_one(pr_links=["https://x/" + "9" * 400], scopes=("reachable", "s" * 40))
    assert [len(link) for link in agent["pr_links"]] == [RD.MAX_LINK]
    assert agent["scopes"] == ["reachable", "s" * 32]
    RD.check_agent(agent)


def test_the_shared_agents_fill_the_budget_to_the_byte_and_no_further() -> None:
    """D2: the agents shared are the longest prefix whose canonical sizes (each with one byte for its
    separator) add up to at most AGENTS_BUDGET bytes."""
    agents = [local(n, title="t" * 200) for n in range(1, 200)]
    sizes = [len(E.canonical(RD.shape(a))) + 1 for a in agents]
    fit = next(k for k in range(len(sizes)) if sum(sizes[: k + 1]) > RD.AGENTS_BUDGET)
    short = RD.AGENTS_BUDGET - sum(sizes[:fit])  # bytes the last agent that fits leaves unused
    # make agent ``fit`` exactly fill the budget: its title grows by what is left (+ its own size)
    grow = short - sizes[fit]
    assert -200 < grow < 0
    agents[fit] = local(fit + 1, title="t" * (200 + grow))
    assert len(RD.shared(agents)) == fit + 1  # exactly the budget: kept
    agents[fit] = local(fit + 1, title="t" * (201 + grow))
    assert len(RD.shared(agents)) == fit  # one byte over: left out


def test_a_null_field_does_not_end_the_check_of_the_fields_after_it() -> None:
    """D4: a title that is null (allowed) does not excuse a branch of two lines after it."""
    agent = dict(shared_one(), title=None, branch="two\nlines")
    assert refused(RD.RemoteDirectory(), inner([agent])) == "malformed_entry"


def test_the_bounds_of_links_and_scopes_on_arrival_are_inclusive() -> None:
    """D4: an agent may carry exactly MAX_LINKS links of exactly MAX_LINK characters and MAX_SCOPES
    scopes of 32; one more, or one character more, is malformed."""
    link = "https://x/" + "9" * (RD.MAX_LINK - 10)
    full = dict(shared_one(), pr_links=[link] * RD.MAX_LINKS, scopes=["reachable"] + ["s" * 32] * (RD.MAX_SCOPES - 1))
    RD.check_agent(full)
    for over in ({"pr_links": [link] * (RD.MAX_LINKS + 1)}, {"pr_links": [link + "9"]},
                 {"scopes": ["s" * 33]}, {"scopes": ["s"] * (RD.MAX_SCOPES + 1)}):
        with pytest.raises(RD.EntryRefused) as error:
            RD.check_agent({**full, **over})
        assert error.value.reason == "malformed_entry"


def test_an_entry_of_exactly_max_agents_is_taken_one_more_is_malformed() -> None:
    agents = [shared_one(pane=n, address=f"%{n}@{TOKEN}") for n in range(1, RD.MAX_AGENTS + 2)]
    directory, taken_as = RD.receive(RD.RemoteDirectory(), entry_verdict(agents[:-1]), now=NOW, live=True)
    assert taken_as is RD.Taken.NEW and len(directory.entries[A].agents) == RD.MAX_AGENTS
    with pytest.raises(RD.EntryRefused) as error:
        RD.receive(RD.RemoteDirectory(), entry_verdict(agents), now=NOW, live=True)
    assert (error.value.reason, str(error.value)) == ("malformed_entry", "an entry shares at most 200 agents")


def test_only_a_verdict_that_is_an_entry_is_taken_whatever_it_carries() -> None:
    """D4: receive trusts the judgement's decision: a directory inner part under another decision is
    not an entry."""
    carried = E.Verdict(E.Decision.NEW, f"box:{A}", inner=inner())
    assert refused(RD.RemoteDirectory(), carried) == "not_an_entry"


def test_the_entry_held_records_its_publisher_and_when_it_published() -> None:
    directory, _ = taken(RD.RemoteDirectory(), inner(at=NOW - 30), live=True)
    held = directory.entries[A]
    assert (held.box, held.pairing, held.revision, held.published_at, held.since) == (A, PAIRING, 5, NOW - 30, NOW)


def test_an_entry_is_stale_from_exactly_three_minutes() -> None:
    """D5: ``fresh`` under STALE_AFTER; at STALE_AFTER it is stale."""
    directory, _ = taken(RD.RemoteDirectory(), inner())
    assert RD.freshness(RD.STALE_AFTER - 0.5) == "fresh"
    assert RD.freshness(RD.STALE_AFTER) == "stale (3 min)"
    (agent,) = RD.listing(directory, [PEER], NOW + RD.STALE_AFTER)
    assert (agent["freshness"], agent["stale"]) == ("stale (3 min)", True)


def test_the_listing_goes_box_by_box_in_name_order() -> None:
    """D7: the remote agents are listed by the name each box was approved under."""
    directory, _ = taken(RD.RemoteDirectory(), inner())
    other = E.Verdict(E.Decision.ENTRY, f"box:{ME}", inner=RD.entry(
        E.Routing(E.Kind.DIRECTORY, ME, A, pairing="pairing-z"), RD.shared([local(9)]), revision=1, now=NOW - 1))
    directory, _ = RD.receive(directory, other, now=NOW, live=True)
    zeta = RD.Peer("zeta", ME, "pairing-z", "00aa11bb")
    alpha = RD.Peer("alpha", A, PAIRING, "3f9a12c0")
    listed = RD.listing(directory, [zeta, alpha], NOW)
    assert [(a["box"]["name"], a["pane"]) for a in listed] == [("alpha", "%4"), ("zeta", "%9")]


def test_a_title_handle_names_a_remote_agent_only_by_the_title_it_shares() -> None:
    """D8: a remote agent with no title (and no session title: none is shared) is named by no title
    handle."""
    directory, _ = taken(RD.RemoteDirectory(), inner(RD.shared([local(title=None)])))
    assert RD.matches(directory, [PEER], NOW, D.parse_target("title:XXXX")) == {}
    assert RD.matches(directory, [PEER], NOW, D.parse_target("repo:app")) == {"laptop": 1}


def test_each_refusal_says_what_is_wrong() -> None:
    """D4: every refusal's message names the problem, for the audit line and ``doctor``."""

    def words(agent: dict[str, Any]) -> str:
        with pytest.raises(RD.EntryRefused) as error:
            RD.check_agent(agent)
        assert error.value.reason == "malformed_entry"
        return str(error.value)

    good = shared_one()
    crowded = {**good, **{f"extra{n:02}": 1 for n in range(15)}}
    assert words(crowded) == f"a shared agent's fields are {sorted(crowded)[:20]}, not {sorted(RD.FIELDS)}"
    assert words({**good, "title": "a\nb"}) == "a shared agent's title is not one printable line of at most 200 characters"
    assert words({**good, "address": "%4"}) == "a shared agent's address '%4' is not %N@<token>"
    assert words({**good, "address": f"%5@{TOKEN}"}) == "a shared agent's address names another pane than its pane"
    assert words({**good, "scopes": "reachable"}) == "a shared agent's scopes are not at most 16 printable lines of 32 characters"
    with pytest.raises(RD.EntryRefused) as error:
        RD.receive(RD.RemoteDirectory(), E.Verdict(E.Decision.PAIRING, f"box:{A}"), now=NOW, live=True)
    assert str(error.value) == "a pairing verdict is not a directory entry's"
    with pytest.raises(RD.EntryRefused) as error:
        RD.receive(RD.RemoteDirectory(), E.Verdict(E.Decision.REFUSED, f"box:{A}", E.Refusal.UNPAIRED, "who?"),
                   now=NOW, live=True)
    assert (error.value.reason, str(error.value)) == ("unpaired", "who?")
    directory, _ = taken(RD.RemoteDirectory(), inner(revision=9))
    with pytest.raises(RD.EntryRefused) as error:
        taken(directory, inner(revision=8))
    assert str(error.value) == f"revision 8 from box {A} is older than the one held (9): a replay"
    with pytest.raises(ValueError, match="a directory entry travels as a directory envelope, not a unpair"):
        RD.entry(E.Routing(E.Kind.UNPAIR, A, ME, pairing=PAIRING), [], revision=1, now=NOW)


# --- the fourth mutation run (stop 33); docs/survivors/remote_directory.md ----------------------------


def test_a_tombstone_is_sealed_only_for_a_directory_envelope_and_says_so() -> None:
    """D10: kills tombstone mutmut_2 (the refusal without words)."""
    with pytest.raises(ValueError) as error:
        RD.tombstone(E.Routing(E.Kind.MESSAGE, A, ME, pairing=PAIRING), revision=1, now=NOW)
    assert str(error.value) == f"a tombstone travels as a directory envelope, not a {E.Kind.MESSAGE}"


def test_a_tombstone_carrying_agents_is_refused_in_words() -> None:
    """D10: kills receive mutmut_27 (the refusal without words)."""
    dead = E.DirectoryInner(routing(), 7, NOW - 1, tuple(RD.shared([local()])), tombstone=True)
    with pytest.raises(RD.EntryRefused) as error:
        RD.receive(RD.RemoteDirectory(), E.Verdict(E.Decision.ENTRY, f"box:{A}", inner=dead), now=NOW, live=True)
    assert (error.value.reason, str(error.value)) == (
        "malformed_entry", f"a tombstone from box {A} carries agents: it shows nothing")


def test_one_remote_agent_s_screen_is_marked_untrusted_and_named_by_its_box() -> None:
    """D9: the withheld screen is untrusted text from the box's entry (kills detail mutmut_51 to 55);
    the control agent is refused in words (4)."""
    directory, _ = taken(RD.RemoteDirectory(), inner(RD.shared([local(4)])))
    found = RD.detail(directory, [PEER], NOW + 3, "laptop", D.parse_target(f"%4@{TOKEN}"))
    assert found["screen_tail"]["untrusted"] is True
    assert found["screen_tail"]["source"] == "directory entry of box laptop"
    with pytest.raises(D.TargetError) as error:
        RD.detail(directory, [PEER], NOW + 3, "laptop", D.parse_target("control"))
    assert str(error.value) == "box laptop does not share its control agent"


def test_a_remote_target_named_twice_is_refused_naming_the_box_and_the_candidates() -> None:
    """D9: the local rule's refusal, its words prefixed by the box, its candidates kept (kills detail
    mutmut_32, 33, 36)."""
    directory, _ = taken(RD.RemoteDirectory(), inner(RD.shared([local(4), local(5)])))
    with pytest.raises(D.TargetError) as error:
        RD.detail(directory, [PEER], NOW, "laptop", D.parse_target("pr:12"))
    assert error.value.reason is D.TargetRefusal.AMBIGUOUS and error.value.candidates == 2
    assert str(error.value).startswith("on box laptop: ")

