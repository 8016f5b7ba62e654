"""The directory across boxes, the daemon's side (connectd.federation.directory): two engines on real
SQLite files and real PyNaCl keys, paired as the daemon pairs them, each box's pump on one simulated
bus (the simulation's SimBus, which implements the Bus port). A's entry for B holds A's reachable
agents only, sealed and signed; B hears it (on the updates, or by direct get) and its ``list_agents``
shows them with their box, an address qualified by the box's name and the entry's age; stale after
180 s, gone after 15 min; a removed pairing's agents gone; a forged, replayed or unpaired entry refused
and audited, changing nothing; an unqualified handle naming panes on both boxes refused ``ambiguous``,
one naming a pane on A only sent to A."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import anyio
import pytest

from connectcore import directory as D
from connectcore import hub as H
from connectcore.directory import TargetError
from connectcore.federation import envelope as E
from connectcore.federation import pairing as P
from connectcore.federation import remote_directory as RD
from connectcore.federation.boxes import BoxError
from connectcore.grants import PRESET_SCOPES, Preset
from connectd.daemon.ids import hash_token
from connectd.federation.directory import CATCH_UP, RemoteDirectoryDesk
from connectd.federation.pump import Pump
from connectd.federation.seal import LocalBox, seal
from tests.integration.test_federation_flow import Box, boxes  # noqa: F401  (the fixture: two paired boxes)
from tests.simulation.sim_bus import SimBus, SimNetwork
from tests.unit.test_directory_view import _incarnation, _observe


def _launch(box: Box, n: int, preset: Preset, *, title: str = "") -> None:
    token = D.incarnation_token(_incarnation(n))
    anyio.run(box.engine.step, H.Launch(box.clock(), hash_token(f"tok-{n}"), f"p-{n}", "claude", f"%{n}", 100 + n,
                                        token, PRESET_SCOPES[preset]))


def _buses(a: Box, b: Box) -> tuple[SimNetwork, SimBus, SimBus]:
    network = SimNetwork(clock=a.clock)
    abus, bbus = network.bus(a.fed.local.box_id), network.bus(b.fed.local.box_id)
    a.fed.pump, b.fed.pump = Pump(a.fed, bus=abus), Pump(b.fed, bus=bbus)
    return network, abus, bbus


def _dir(box: Box) -> RemoteDirectoryDesk:
    assert box.fed.directory is not None
    directory: RemoteDirectoryDesk = box.fed.directory
    return directory


def _listed(box: Box, token: str) -> list[dict[str, Any]]:
    return list(anyio.run(box.engine.calls.list_agents, token))


def _remote(box: Box, token: str) -> list[dict[str, Any]]:
    return [a for a in _listed(box, token) if a.get("remote")]


@pytest.fixture
def shared(boxes: tuple[Box, Box, str]) -> Any:  # noqa: F811
    """A's %1 (collaborate: reachable) and %2 (observe: not reachable); A's entry for B put."""
    a, b, pairing = boxes
    _observe(a.engine, 1, 2)
    _launch(a, 2, Preset.OBSERVE)
    network, abus, bbus = _buses(a, b)
    assert anyio.run(_dir(a).publish_once, abus) == 1
    return a, b, pairing, network, abus, bbus


def test_a_box_s_entry_for_a_pairing_shares_its_reachable_agents_only_sealed(shared: Any) -> None:
    a, b, pairing, network, _abus, _bbus = shared
    ((key, (_rev, wire)),) = network.bucket.items()
    assert key == f"{a.fed.local.box_id}.{b.fed.local.box_id}"
    assert b"claude" not in wire and b"%1" not in wire  # sealed: NATS sees ciphertext
    verdict = E.judge(*_facts(b, a, wire))
    assert verdict.decision is E.Decision.ENTRY and isinstance(verdict.inner, E.DirectoryInner)
    assert [agent["pane"] for agent in verdict.inner.agents] == ["%1"]  # %2 has no reachable
    assert verdict.inner.routing.pairing == pairing


def test_the_pairing_s_directory_setting_chooses_what_it_sees_none_nothing_connected_more(shared: Any) -> None:
    a, b, pairing, network, abus, bbus = shared
    key = f"{a.fed.local.box_id}.{b.fed.local.box_id}"

    def panes() -> list[str]:
        verdict = E.judge(*_facts(b, a, network.bucket[key][1]))
        assert isinstance(verdict.inner, E.DirectoryInner)
        return [agent["pane"] for agent in verdict.inner.agents]

    assert panes() == ["%1"]  # the default, reachable
    anyio.run(a.fed.set_settings, "devbox", ["directory=none"])
    a.clock.now += 1
    assert anyio.run(_dir(a).publish_once, abus) == 1  # changed: put, even empty
    assert panes() == []
    anyio.run(_dir(b).publish_once, bbus)
    assert _remote(b, "tok-4") == []  # B lists none of A's agents
    anyio.run(a.fed.set_settings, "devbox", ["directory=connected"])
    a.clock.now += 1
    assert anyio.run(_dir(a).publish_once, abus) == 1
    assert panes() == ["%1", "%2"]  # the observe-only agent too
    # a refused value changes nothing: still connected
    with pytest.raises(Exception, match="directory is reachable or connected or none"):
        anyio.run(a.fed.set_settings, "devbox", ["directory=all"])
    a.clock.now += 1
    assert anyio.run(_dir(a).publish_once, abus) == 0 and panes() == ["%1", "%2"]


def _facts(reader: Box, publisher: Box, wire: bytes) -> tuple[E.Facts, E.View]:
    from connectd.federation.seal import read_wire

    subject = E.subject_for(E.Kind.DIRECTORY, publisher.fed.local.box_id, reader.fed.local.box_id)
    view = reader.fed.view()
    return read_wire(reader.fed.local, subject, wire, view), view


def test_list_agents_on_the_other_box_shows_them_with_box_address_and_age(shared: Any) -> None:
    a, b, _pairing, _network, _abus, bbus = shared
    assert _remote(b, "tok-4") == []  # not heard yet
    (row,) = b.fed.pairings()  # pair list, /api/pairing/pairings: the directory's age
    assert (row["directory"], row["directory_age"]) == ("none yet", None)
    anyio.run(_dir(b).publish_once, bbus)  # B's own entry, and the catch-up: A's key read by direct get
    assert (b.fed.pairings()[0]["directory"], b.fed.pairings()[0]["directory_age"]) == ("fresh", 0)
    (agent,) = _remote(b, "tok-4")
    token1 = D.incarnation_token(_incarnation(1))
    fingerprint = a.fed.local.keys.fingerprint.replace(" ", "")[:8]
    assert agent["address"] == f"%1@{token1}@laptop" and agent["pane"] == "%1"
    assert agent["box"] == {"name": "laptop", "id": a.fed.local.box_id, "fingerprint": fingerprint}
    assert (agent["age"], agent["freshness"], agent["stale"], agent["reachable"]) == (0, "fresh", False, True)
    assert "cwd" not in agent and "actor" not in agent
    assert b.fed.heard[a.fed.local.box_id] == b.clock()  # a verified entry: A is heard
    # an old entry read by a direct get: heard as of when it was published, not now
    c_heard = dict(b.fed.heard)
    b.fed.heard.clear()
    _dir(b).held = RD.RemoteDirectory()
    b.clock.now += 300
    anyio.run(lambda: _dir(b).read(bbus, a.fed.local.box_id, b.clock()))
    assert b.fed.heard[a.fed.local.box_id] == b.clock() - 300 == c_heard[a.fed.local.box_id]
    assert _remote(b, "tok-4")[0]["freshness"] == "stale (5 min)"
    b.clock.now -= 300
    anyio.run(lambda: _dir(b).read(bbus, a.fed.local.box_id, b.clock()))  # (the repeat changes nothing)
    # B's own agent is listed first, as before
    assert [x["pane"] for x in _listed(b, "tok-4")][0] == "%4"
    # and A sees B's %4 the same way (A read B's key when it first published: nothing then; again
    # CATCH_UP seconds later)
    anyio.run(_dir(a).publish_once, a.fed.pump.bus)
    assert _remote(a, "tok-1") == []
    a.clock.now += CATCH_UP
    anyio.run(_dir(a).publish_once, a.fed.pump.bus)
    assert [x["address"].rsplit("@", 1)[1] for x in _remote(a, "tok-1")] == ["devbox"]
    # stale after 180 s, gone after 15 min (the pairing stays)
    b.clock.now += 200
    (agent,) = _remote(b, "tok-4")
    assert agent["stale"] is True and agent["freshness"] == "stale (3 min)"
    assert (b.fed.pairings()[0]["directory"], b.fed.pairings()[0]["directory_age"]) == ("stale (3 min)", agent["age"])
    b.clock.now += RD.AGED_OUT
    assert _remote(b, "tok-4") == []
    assert b.fed.pairings()[0]["directory"] == "aged out"
    assert [p.box_id for p in b.fed.book.active()] == [a.fed.local.box_id]


def test_entries_heard_on_the_updates_as_they_change_and_every_minute(shared: Any) -> None:
    a, b, _pairing, _network, abus, bbus = shared

    async def scenario() -> list[str]:
        seen: list[str] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(_dir(b).listen_loop, bbus)
            await anyio.sleep(0.05)  # B read A's key once, then listens
            seen.append(_dir(b).listing()[0]["title"] or "")
            await _dir(a).publish_once(abus)  # nothing changed, no heartbeat due: nothing put
            a.engine.watcher.directory = _retitled(a.engine.watcher.directory, "%1", "login fix")
            a.clock.now += 1
            assert await _dir(a).publish_once(abus) == 1  # changed: put
            await anyio.sleep(0.05)
            seen.append(_dir(b).listing()[0]["title"] or "")
            a.clock.now += RD.HEARTBEAT
            assert await _dir(a).publish_once(abus) == 1  # the heartbeat, unchanged
            await anyio.sleep(0.05)
            tg.cancel_scope.cancel()
        return seen

    assert anyio.run(scenario) == ["", "login fix"]
    assert _dir(b).held.entries[a.fed.local.box_id].revision == _dir(a).revision


def _retitled(directory: D.Directory, pane: str, title: str) -> D.Directory:
    from dataclasses import replace

    record = directory.panes[pane]
    return replace(directory, panes={**directory.panes, pane: replace(record, title=title)})


def test_a_removed_pairing_s_agents_are_gone_and_its_entries_refused(shared: Any) -> None:
    a, b, _pairing, network, _abus, bbus = shared
    anyio.run(_dir(b).publish_once, bbus)
    assert len(_remote(b, "tok-4")) == 1
    anyio.run(lambda: b.fed.remove("laptop", actor="owner"))
    assert _remote(b, "tok-4") == [] and _dir(b).held.entries == {}
    wire = network.bucket[f"{a.fed.local.box_id}.{b.fed.local.box_id}"][1]
    assert anyio.run(lambda: _dir(b).arrived(a.fed.local.box_id, wire, live=True)) is False
    assert _dir(b).held.entries == {}
    # B no longer puts an entry for A
    network.bucket.clear()
    b.clock.now += RD.HEARTBEAT
    assert anyio.run(_dir(b).publish_once, bbus) == 0 and network.bucket == {}


def test_the_publish_loop_sleeps_until_an_entry_is_due_and_looks_at_once_when_told_of_a_change(shared: Any) -> None:
    """Claim (issue 25, idle CPU): A's publish loop, nothing changing, does not look again before the
    heartbeat is due (before: it looked every second); told of a change on the owner's event stream (a
    pane's reading, as the watcher says it to the page), it looks at once and puts the changed entry."""
    a, b, _pairing, network, abus, bbus = shared
    directory, key = _dir(a), f"{a.fed.local.box_id}.{b.fed.local.box_id}"
    looks: list[float] = []
    publish_once = directory.publish_once

    async def counted(bus: Any) -> int:
        looks.append(a.clock())
        return await publish_once(bus)

    directory.publish_once = counted  # type: ignore[method-assign]
    put_at = a.clock()
    assert anyio.run(directory.publish_once, abus) == 0 and directory.next_at == put_at + CATCH_UP  # B not heard
    looks.clear()
    anyio.run(_dir(b).publish_once, bbus)
    anyio.run(lambda: directory.read(abus, b.fed.local.box_id, a.clock()))  # B's entry held: no catch-up

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(directory.publish_loop, abus)
            await anyio.sleep(1.3)
            assert len(looks) == 1 and directory.next_at == put_at + RD.HEARTBEAT  # nothing due before
            a.clock.now += 2
            view = directory.directory_view()
            directory.directory_view = lambda: tuple(
                {**e, "title": "renamed"} if e["pane"] == "%1" else e for e in view)
            revision = network.bucket[key][0]
            a.engine.subscribers.publish({"topic": "pane", "pane": "%1"})
            with anyio.fail_after(2):
                while network.bucket[key][0] == revision:
                    await anyio.sleep(0.01)
            assert len(looks) == 2 and directory.next_at == a.clock() + RD.HEARTBEAT
            await anyio.sleep(1.3)
            assert len(looks) == 2
            tg.cancel_scope.cancel()

    anyio.run(main)
    assert a.engine.subscribers.owner == set()  # the loop's listener left with it
    verdict = E.judge(*_facts(b, a, network.bucket[key][1]))
    assert isinstance(verdict.inner, E.DirectoryInner) and verdict.inner.agents[0]["title"] == "renamed"


def test_a_replayed_older_entry_and_a_forged_one_are_refused_and_audited_changing_nothing(shared: Any) -> None:
    a, b, _pairing, network, abus, bbus = shared
    old = network.bucket[f"{a.fed.local.box_id}.{b.fed.local.box_id}"][1]
    a.clock.now += RD.HEARTBEAT
    anyio.run(_dir(a).publish_once, abus)
    anyio.run(_dir(b).publish_once, bbus)  # the newer one, by direct get
    held = _dir(b).held
    audited: list[Any] = []
    _dir(b).audit = lambda record: _record(audited, record)
    assert anyio.run(lambda: _dir(b).arrived(a.fed.local.box_id, old, live=True)) is False
    assert _dir(b).held is held
    # forged: signed by another box (C, unpaired) under A's name, and C's own entry
    stranger = LocalBox.from_secrets(_secrets(9))
    routing = E.Routing(E.Kind.DIRECTORY, stranger.box_id, b.fed.local.box_id, pairing="p-x")
    forged = seal(stranger, b.fed.local.keys, RD.entry(routing, [], revision=10**15, now=b.clock()), bytes(24))
    assert anyio.run(lambda: _dir(b).arrived(a.fed.local.box_id, forged, live=True)) is False
    assert anyio.run(lambda: _dir(b).arrived(stranger.box_id, forged, live=True)) is False
    assert _dir(b).held is held
    assert [(r.actor, r.outcome, r.detail.split(":")[0]) for r in audited] == [
        (f"box:{a.fed.local.box_id}", "refused", "older_revision"),
        (f"box:{a.fed.local.box_id}", "refused", "bad_signature"),
        (f"box:{stranger.box_id}", "refused", "unpaired")]
    assert all(r.action == RD.AUDIT_EVENT for r in audited)
    # the same refusal again within the minute: not audited again
    assert anyio.run(lambda: _dir(b).arrived(a.fed.local.box_id, old, live=True)) is False
    assert len(audited) == 3


async def _record(into: list[Any], record: Any) -> None:
    into.append(record)


def _secrets(n: int) -> Any:
    from connectd.federation.keys import BoxSecrets

    return BoxSecrets(bytes([n]) * 32, bytes([n + 1]) * 32)


def test_an_unqualified_handle_on_both_boxes_is_ambiguous_and_one_on_a_only_goes_to_a(shared: Any) -> None:
    a, b, _pairing, _network, _abus, bbus = shared
    a.engine.watcher.directory = _retitled(a.engine.watcher.directory, "%1", "login fix")
    a.clock.now += 1
    anyio.run(_dir(a).publish_once, a.fed.pump.bus)
    anyio.run(_dir(b).publish_once, bbus)
    where, pairing = b.engine.calls.remote.placed("title:login fix")
    assert where.box == "laptop" and pairing is not None and pairing.box_id == a.fed.local.box_id
    b.engine.watcher.directory = _retitled(b.engine.watcher.directory, "%4", "login fix")
    with pytest.raises(TargetError) as error:
        b.engine.calls.remote.placed("title:login fix")
    assert error.value.reason is D.TargetRefusal.AMBIGUOUS
    assert "this box (1), laptop (1)" in str(error.value) and "title:login fix@laptop" in str(error.value)
    where, pairing = b.engine.calls.remote.placed("title:login fix@laptop")
    assert where.box == "laptop"


def test_an_agent_no_longer_shared_leaves_the_next_entry_and_the_other_box_s_listing_at_once(shared: Any) -> None:
    """Removal is prompt, not by ageing: an entry is the whole of what the pairing sees (one key per
    pairing, D3), so the entry put after a change no longer lists the agent and the other box, on
    hearing it, holds only what it lists (D4). Each way an agent stops being shared: the pairing's
    setting narrowed, its grant lowered below ``reachable``, its pane revoked, its pane gone."""
    a, b, _pairing, network, abus, bbus = shared

    _observe(a.engine, 1, 2, 3, 5)
    token3 = D.incarnation_token(_incarnation(3))
    anyio.run(a.engine.step, H.Launch(a.clock(), hash_token("tok-3"), "p-3", "claude", "%3", 103, token3,
                                      PRESET_SCOPES[Preset.COLLABORATE], session=("claude", "s-3")))
    _launch(a, 5, Preset.COLLABORATE)
    anyio.run(a.fed.set_settings, "devbox", ["directory=connected"])
    put: list[int] = []

    async def heard(change: Any) -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_dir(b).listen_loop, bbus)
            await anyio.sleep(0.05)
            await change()
            a.clock.now += 1
            put.append(await _dir(a).publish_once(abus))
            await anyio.sleep(0.05)
            tg.cancel_scope.cancel()

    def scenario(change: Any) -> list[str]:
        """``change`` on A, A's next put heard by B on the updates: the panes B's list_agents lists then."""
        anyio.run(heard, change)
        remote = _remote(b, "tok-4")
        assert all(agent["age"] == 0 and agent["freshness"] == "fresh" for agent in remote)  # not aged: heard now
        return [agent["pane"] for agent in remote]

    async def nothing() -> None:
        pass

    async def narrowed() -> None:
        await a.fed.set_settings("devbox", ["directory=reachable"])

    async def lowered() -> None:
        await a.engine.person.set_grant(("claude", "s-3"), Preset.OBSERVE)

    async def revoked() -> None:
        await a.engine.person.revoke_pane("%5")

    async def gone() -> None:
        directory = a.engine.watcher.directory
        a.engine.watcher.directory = replace(directory, panes={k: v for k, v in directory.panes.items() if k != "%1"})

    assert scenario(nothing) == ["%1", "%2", "%3", "%5"]  # connected: the observe-only %2 too
    assert scenario(narrowed) == ["%1", "%3", "%5"]  # the setting narrowed to reachable
    assert scenario(lowered) == ["%1", "%5"]  # %3's grant lowered to observe
    assert scenario(revoked) == ["%1"]  # %5 revoked
    assert scenario(gone) == []  # %1's pane gone
    assert put == [1, 1, 1, 1, 1]  # each change put at once (a second after the last put)
    # the entry in the bucket is what B holds: empty, the heartbeat still goes
    verdict = E.judge(*_facts(b, a, network.bucket[f"{a.fed.local.box_id}.{b.fed.local.box_id}"][1]))
    assert isinstance(verdict.inner, E.DirectoryInner) and verdict.inner.agents == ()


def _get_agent(box: Box, target: str) -> Any:
    async def call() -> Any:
        try:
            return await box.engine.calls.get_agent("tok-4", target)
        except (TargetError, BoxError) as refused:
            return refused

    return anyio.run(call)


def test_resolve_ranks_the_agents_a_paired_box_shares_with_this_box_s_own(shared: Any) -> None:
    """``resolve`` on B finds A's shared agent by its title, with its box and an address qualified by A's
    name; an agent A does not share (observe-only) is not found; aged out, it is gone."""
    a, b, _pairing, _network, abus, bbus = shared
    a.engine.watcher.directory = _retitled(a.engine.watcher.directory, "%1", "billing migration")
    a.engine.watcher.directory = _retitled(a.engine.watcher.directory, "%2", "billing observer")
    b.engine.watcher.directory = _retitled(b.engine.watcher.directory, "%4", "billing docs")
    a.clock.now += 1
    anyio.run(_dir(a).publish_once, abus)
    anyio.run(_dir(b).publish_once, bbus)  # B reads A's entry

    def resolve(query: str) -> list[dict[str, Any]]:
        return anyio.run(lambda: b.engine.calls.resolve("tok-4", None, query, 10))

    found = resolve("billing migration")
    assert [(f["pane"], f.get("box", {}).get("name")) for f in found] == [("%1", "laptop"), ("%4", None)]
    token1 = D.incarnation_token(_incarnation(1))
    assert found[0]["address"] == f"%1@{token1}@laptop" and found[0]["matched"] == ["title:billing", "title:migration"]
    assert found[0]["remote"] is True and "cwd" not in found[0]
    assert [f["pane"] for f in resolve("observer")] == []  # %2 (observe) is not shared with B
    calls = [r for r in b.store.audit(limit=1000) if r.action == "resolve"]
    assert [r.outcome for r in calls] == ["allowed", "allowed"]
    b.clock.now += RD.AGED_OUT
    assert [f["pane"] for f in resolve("billing migration")] == ["%4"]


def test_get_agent_on_an_agent_of_a_paired_box_answers_from_its_entry_read_only(shared: Any) -> None:
    a, b, _pairing, _network, abus, bbus = shared
    a.engine.watcher.directory = _retitled(a.engine.watcher.directory, "%1", "login fix")
    a.clock.now += 1
    anyio.run(_dir(a).publish_once, abus)
    anyio.run(_dir(b).publish_once, bbus)  # B reads A's entry
    token1 = D.incarnation_token(_incarnation(1))
    found = _get_agent(b, f"%1@{token1}@laptop")
    (listed,) = _remote(b, "tok-4")
    assert {k: v for k, v in found.items() if k not in ("question", "screen_tail")} == listed
    assert found["box"]["name"] == "laptop" and found["remote"] is True and found["reachable"] is True
    assert (found["age"], found["freshness"]) == (0, "fresh")
    assert "cwd" not in found and found["screen_tail"]["shown"] is False and found["screen_tail"]["text"] == ""
    assert _get_agent(b, "title:login fix@laptop")["pane"] == "%1"
    assert _get_agent(b, "title:login fix")["pane"] == "%1"  # on A only: placed there, as send_message does
    # this box's own agents as before, qualified by its own name or not
    token4 = D.incarnation_token(_incarnation(4))
    for target in (f"%4@{token4}", f"%4@{token4}@devbox"):
        local = _get_agent(b, target)
        assert local["pane"] == "%4" and "remote" not in local and "cwd" in local
    # refused as a local get_agent is, each audited as the call's refusal
    assert _get_agent(b, f"%2@{D.incarnation_token(_incarnation(2))}@laptop").reason is D.TargetRefusal.UNKNOWN_TARGET  # observe-only: not shared
    assert _get_agent(b, "control@laptop").reason is D.TargetRefusal.NO_PANE
    assert _get_agent(b, f"%1@{token1}@nowhere").reason == "unknown_box"  # no pairing of that name
    b.engine.watcher.directory = _retitled(b.engine.watcher.directory, "%4", "login fix")
    ambiguous = _get_agent(b, "title:login fix")
    assert ambiguous.reason is D.TargetRefusal.AMBIGUOUS and "title:login fix@laptop" in str(ambiguous)
    calls = [r for r in b.store.audit(limit=1000) if r.action == "get_agent"]
    assert [r.outcome for r in calls] == ["allowed"] * 5 + ["refused"] * 4
    assert calls[0].target == f"%1@{token1}@laptop"
    # aged out: no answer from the entry
    b.clock.now += RD.AGED_OUT
    assert _get_agent(b, f"%1@{token1}@laptop").reason is D.TargetRefusal.UNKNOWN_TARGET


# --- the removal's tombstone (D10, P18) -----------------------------------------------------------


def _key(a: Box, b: Box) -> str:
    return f"{a.fed.local.box_id}.{b.fed.local.box_id}"


def _repaired(a: Box, b: Box) -> str:
    """A and B paired again, both approvals over their desks (a new invitation): the new pairing's id."""
    from tests.integration.test_federation_flow import _deliver

    invited = anyio.run(a.fed.invite)
    anyio.run(lambda: b.fed.accept(invited["code"]))
    (request,) = [w for w in b.owed() if w.key == f"request:{invited['invitation']}"]
    _deliver(a, request)
    before = {w.key for w in a.owed()}
    anyio.run(lambda: a.fed.approve("devbox"))
    (answer,) = [w for w in a.owed() if w.key.startswith("answer:") and w.key not in before]
    _deliver(b, answer)
    (pairing,) = a.fed.book.active()
    assert [p.id for p in b.fed.book.active()] == [pairing.id]
    return str(pairing.id)


def test_a_removal_puts_a_tombstone_so_the_other_box_learns_of_it_though_the_unpair_is_lost(shared: Any) -> None:
    """A's owner removes the pairing; its unpair is never delivered (lost). A puts a signed tombstone in
    its key for B at once; B, reading it (here by the direct get of a listen loop's start), records the
    removal ``removed_by_peer`` as an unpair would, and A's agents leave its listing. Before: B kept the
    pairing active and A's entry held (nothing in the key said the pairing ended)."""
    a, b, pairing, network, _abus, bbus = shared
    anyio.run(_dir(b).publish_once, bbus)
    assert len(_remote(b, "tok-4")) == 1
    a.clock.now += 1
    anyio.run(lambda: a.fed.remove("devbox"))
    assert [w.key for w in a.owed() if w.key.startswith("unpair:")] == [f"unpair:{pairing}"]  # (never delivered)
    wire = network.bucket[_key(a, b)][1]
    verdict = E.judge(*_facts(b, a, wire))
    assert isinstance(verdict.inner, E.DirectoryInner) and verdict.inner.tombstone is True
    assert verdict.inner.routing.pairing == pairing and verdict.inner.agents == ()
    assert b"claude" not in wire
    anyio.run(lambda: _dir(b).read(bbus, a.fed.local.box_id, b.clock()))
    (gone,) = b.fed.book.pairings.values()
    assert (gone.state, gone.removed_by) == (P.PairingState.REMOVED, P.BY_PEER)
    assert _remote(b, "tok-4") == [] and _dir(b).held.entries == {}
    assert [r.outcome for r in b.store.audit(limit=200) if r.action == "pair.remove"] == ["removed"]
    # heard again (a copy, a later direct get): nothing more changes
    before = b.fed.book
    assert anyio.run(lambda: _dir(b).arrived(a.fed.local.box_id, wire, live=True)) is False
    assert b.fed.book is before
    # and A's publish loop never puts an entry for the removed pairing over its tombstone
    a.clock.now += RD.HEARTBEAT
    anyio.run(_dir(a).publish_once, a.fed.pump.bus)
    assert network.bucket[_key(a, b)][1] == wire


def test_a_tombstone_not_put_at_the_removal_is_put_when_the_listen_loop_starts(shared: Any) -> None:
    """The bus away at the removal (or a restart before the put): the tombstone stays owed by the book
    (P18) and is put when the directory's loop (re)starts on a connected bus, once."""
    a, b, pairing, network, abus, bbus = shared
    directory, a.fed.directory = a.fed.directory, None  # the removal sees no directory (as if put failed)
    anyio.run(lambda: a.fed.remove("devbox"))
    a.fed.directory = directory
    assert E.judge(*_facts(b, a, network.bucket[_key(a, b)][1])).inner.tombstone is False  # type: ignore[union-attr]
    anyio.run(_dir(a).put_tombstones, abus)
    wire = network.bucket[_key(a, b)][1]
    assert E.judge(*_facts(b, a, wire)).inner.tombstone is True  # type: ignore[union-attr]
    anyio.run(_dir(a).put_tombstones, abus)
    assert network.bucket[_key(a, b)][1] == wire, "once per run"
    anyio.run(lambda: _dir(b).arrived(a.fed.local.box_id, wire, live=True))
    assert [p.removed_by for p in b.fed.book.pairings.values()] == [P.BY_PEER]


def test_a_tombstone_whose_put_failed_is_put_at_the_publish_loop_s_next_look(shared: Any) -> None:
    """NATS away at the removal: the tombstone's put fails (logged), and the directory's publish loop puts
    it at its next look once the bus is back, a second later at most (before: only when the listen loop
    restarted, which a subscription that survives a reconnection never does)."""
    a, b, pairing, network, abus, bbus = shared
    network.up = False
    anyio.run(lambda: a.fed.remove("devbox"))
    network.up = True
    assert E.judge(*_facts(b, a, network.bucket[_key(a, b)][1])).inner.tombstone is False  # type: ignore[union-attr]
    assert _dir(a).tombstoned == {}
    anyio.run(_dir(a).publish_once, abus)
    wire = network.bucket[_key(a, b)][1]
    assert E.judge(*_facts(b, a, wire)).inner.tombstone is True  # type: ignore[union-attr]
    assert _dir(a).tombstoned == {b.fed.local.box_id: pairing}
    anyio.run(_dir(a).publish_once, abus)  # put once
    assert network.bucket[_key(a, b)][1] == wire


def test_forged_unpaired_and_agent_carrying_tombstones_are_refused_and_change_nothing(shared: Any) -> None:
    """Threats: a tombstone under A's name signed by another key (bad_signature), one from a box never
    paired (unpaired), one sealed by A that carries agents (malformed_entry: data only): each refused and
    audited, B's pairing and A's entry as they were."""
    a, b, pairing, _network, _abus, bbus = shared
    anyio.run(_dir(b).publish_once, bbus)
    held, book = _dir(b).held, b.fed.book
    audited: list[Any] = []
    _dir(b).audit = lambda record: _record(audited, record)  # (the core runner's audit, given at attach)
    stranger = LocalBox.from_secrets(_secrets(9))
    routing = E.Routing(E.Kind.DIRECTORY, a.fed.local.box_id, b.fed.local.box_id, pairing=pairing)
    dead = RD.tombstone(routing, revision=10**15, now=b.clock())
    real = seal(a.fed.local, b.fed.local.keys, dead, bytes(24))
    forged = stranger.signing.sign(real[E.SIGNATURE_BYTES:]).signature + real[E.SIGNATURE_BYTES:]  # re-signed
    mine = E.Routing(E.Kind.DIRECTORY, stranger.box_id, b.fed.local.box_id, pairing=pairing)
    unpaired = seal(stranger, b.fed.local.keys, RD.tombstone(mine, revision=1, now=b.clock()), bytes(24))
    carrying = seal(a.fed.local, b.fed.local.keys,
                    E.DirectoryInner(routing, 10**15, b.clock(), ({"pane": "<b>%1</b>"},), tombstone=True), bytes(24))
    assert anyio.run(lambda: _dir(b).arrived(a.fed.local.box_id, forged, live=True)) is False
    assert anyio.run(lambda: _dir(b).arrived(stranger.box_id, unpaired, live=True)) is False
    assert anyio.run(lambda: _dir(b).arrived(a.fed.local.box_id, carrying, live=True)) is False
    assert _dir(b).held is held and b.fed.book is book
    assert [p.id for p in b.fed.book.active()] == [pairing]
    assert [(r.actor, r.detail.split(":")[0]) for r in audited] == [
        (f"box:{a.fed.local.box_id}", "bad_signature"), (f"box:{stranger.box_id}", "unpaired"),
        (f"box:{a.fed.local.box_id}", "malformed_entry")]


def test_a_replayed_tombstone_of_the_old_pairing_does_not_remove_the_new_one(shared: Any) -> None:
    """Threat: A removes, B learns by the tombstone; they pair again (a new pairing, a new id); the old
    tombstone, replayed by anyone who kept it, names the old pairing: refused ``removed``, the new
    pairing stays active on B. A's new pairing's entry replaces the tombstone in its key."""
    a, b, old, network, abus, bbus = shared
    anyio.run(lambda: a.fed.remove("devbox"))
    dead = network.bucket[_key(a, b)][1]
    anyio.run(lambda: _dir(b).arrived(a.fed.local.box_id, dead, live=True))
    assert b.fed.book.active() == ()
    a.clock.now += 1
    assert anyio.run(_dir(a).publish_once, abus) == 0  # (the publish loop's look: nothing for a removed pairing)
    new = _repaired(a, b)
    assert new != old
    a.clock.now += 1
    assert anyio.run(_dir(a).publish_once, abus) == 1
    assert E.judge(*_facts(b, a, network.bucket[_key(a, b)][1])).inner.tombstone is False  # type: ignore[union-attr]
    assert anyio.run(lambda: _dir(b).arrived(a.fed.local.box_id, dead, live=True)) is False
    assert [p.id for p in b.fed.book.active()] == [new]
    assert anyio.run(_dir(a).put_tombstones, abus) == 0, "no tombstone owed while the newer pairing is active"


def test_on_a_real_nats_server_the_tombstone_reaches_the_other_box_in_the_key_and_on_the_updates(
    boxes: tuple[Box, Box, str], tmp_path: Any,  # noqa: F811
) -> None:
    """The same on a real nats-server with the per-box permissions (``sync_interval: always``): A's
    removal puts the tombstone under ``<A>.<B>`` with A's own bus user (its unpair never published);
    B hears it on the bucket's republish (its listen loop) and ends the pairing ``removed_by_peer``; a
    direct get of the key gives the tombstone still (a B that was away reads it so)."""
    from connectd.federation.bus import NatsBus
    from tests.support.nats import NatsServer

    a, b, pairing = boxes
    _observe(a.engine, 1, 2)
    (tmp_path / "nats").mkdir()
    server = NatsServer(tmp_path / "nats", [a.fed.local.box_id, b.fed.local.box_id])
    server.start()

    async def scenario() -> bytes | None:
        await server.provision()
        abus, bbus = NatsBus(a.fed.local.box_id, call_timeout=5.0), NatsBus(b.fed.local.box_id, call_timeout=5.0)
        for bus in (abus, bbus):
            await server.connect(bus)
        a.fed.pump, b.fed.pump = Pump(a.fed, bus=abus), Pump(b.fed, bus=bbus)
        try:
            assert await _dir(a).publish_once(abus) == 1
            async with anyio.create_task_group() as tg:
                tg.start_soon(_dir(b).listen_loop, bbus)
                with anyio.fail_after(10):
                    while not _dir(b).held.entries:  # A's entry read at the loop's start
                        await anyio.sleep(0.05)
                await a.fed.remove("devbox")  # the tombstone put at once; the unpair left unpublished
                with anyio.fail_after(10):
                    while b.fed.book.active():
                        await anyio.sleep(0.05)
                tg.cancel_scope.cancel()
            return await bbus.get_entry(a.fed.local.box_id)
        finally:
            for bus in (abus, bbus):
                await bus.close()

    try:
        kept = anyio.run(scenario, backend="asyncio")
    finally:
        server.stop()
    (gone,) = b.fed.book.pairings.values()
    assert (gone.id, gone.state, gone.removed_by) == (pairing, P.PairingState.REMOVED, P.BY_PEER)
    assert _dir(b).held.entries == {} and _remote(b, "tok-4") == []
    assert [w.key for w in a.owed() if w.key.startswith("unpair:")] == [f"unpair:{pairing}"]  # never sent
    assert kept is not None
    verdict = E.judge(*_facts(b, a, kept))
    assert verdict.reason is E.Refusal.REMOVED and verdict.pairing == pairing  # of the pairing B removed too
