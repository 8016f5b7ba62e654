"""Remote history search, the daemon's side (connectd.federation.history): two engines on real SQLite
files and real PyNaCl keys, paired as the daemon pairs them, each box's pump on one simulated bus (the
simulation's SimBus, which implements the Bus port). B's agent calls ``find_sessions box=laptop``: A
answers ``not shared`` by default; with ``history=index`` the results of the repositories listed for
that pairing only, the allowlisted fields with their box; a box not answering is ``no answer from box
laptop within 5 s``; a forged query (signed by an unpaired box under B's name), one from an unpaired box,
a removed pairing's, an eleventh in a minute, and a repository not listed each get nothing, change
nothing, and are audited on the box asked."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from connectcore import history as HI
from connectcore.federation import envelope as E
from connectcore.federation import pairing as P
from connectcore.federation import remote_history as RH
from connectcore.federation.remote import PairingSettings
from connectd.federation.history import RemoteHistoryDesk, history_repos, history_setting
from connectd.federation.pump import Pump
from connectd.federation.remote_calls import RemoteCallError
from connectd.federation.seal import LocalBox, seal
from tests.integration.test_federation_directory import _secrets
from tests.integration.test_federation_flow import Box, boxes  # noqa: F401  (the fixture: two paired boxes)
from tests.simulation.sim_bus import SimBus, SimNetwork

APP, PRIVATE = "/home/me/app", "/home/me/private"


class FakeHistory:
    """A's history index: a result in each of two repositories, whatever the query; it honours
    ``allowed_repos`` as the real one does in its SQL (the core checks again anyway)."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def recent_dirs(self, limit: int) -> list[dict[str, Any]]:
        return [{"cwd": APP + "/src", "repo": APP}, {"cwd": PRIVATE, "repo": PRIVATE}][:limit]

    def find_sessions(self, query: str, *, limit: int, allowed_repos: frozenset[str] | None = None,
                      repo: str | None = None) -> list[dict[str, Any]]:
        self.calls.append({"query": query, "limit": limit, "allowed_repos": allowed_repos})
        rows = [_row(APP, "s-1", "fix the login bug"), _row(PRIVATE, "s-2", "login secrets")]
        return [r for r in rows if allowed_repos is None or r["repo"] in allowed_repos][:limit]

    def get_session(self, harness: str, session_id: str, *, allowed_repos: frozenset[str] | None = None) -> dict[str, Any]:
        """As the real one: the session, or SessionNotFound, or OutOfScope for a repository not allowed."""
        self.calls.append({"session": (harness, session_id), "allowed_repos": allowed_repos})
        rows = {("claude", "s-1"): _row(APP, "s-1", "fix the login bug"),
                ("claude", "s-2"): _row(PRIVATE, "s-2", "login secrets")}
        row = rows.get((harness, session_id))
        if row is None:
            raise HI.SessionNotFound(harness, session_id)
        if allowed_repos is not None and row["repo"] not in allowed_repos:
            raise HI.OutOfScope(f"{harness} session {session_id!r}")
        return row


def _row(repo: str, session: str, title: str) -> dict[str, Any]:
    return {"harness": "claude", "session_id": session, "repo": repo, "title": title, "cwd": repo,
            "branches": ["login"], "prs": [], "last_active": "2026-12-05T10:00:00Z", "matched_terms": ["login"],
            "liveness": "not_running", "pane": None}


def _hist(box: Box) -> RemoteHistoryDesk:
    assert box.fed.history is not None
    desk: RemoteHistoryDesk = box.fed.history
    return desk


def _set(box: Box, **settings: Any) -> None:
    """The pairing's settings on ``box`` (what ``pair set`` stores)."""
    (pairing,) = box.fed.book.active()
    updated = dataclasses.replace(pairing, settings=PairingSettings(**settings))
    box.fed.book = dataclasses.replace(box.fed.book, pairings={**box.fed.book.pairings, pairing.invitation: updated})


@pytest.fixture
def net(boxes: tuple[Box, Box, str]) -> Iterator[tuple[Box, Box, SimNetwork, SimBus, SimBus, FakeHistory]]:  # noqa: F811
    a, b, _pairing = boxes
    network = SimNetwork(clock=a.clock)
    abus, bbus = network.bus(a.fed.local.box_id), network.bus(b.fed.local.box_id)
    a.fed.pump, b.fed.pump = Pump(a.fed, bus=abus), Pump(b.fed, bus=bbus)
    index = FakeHistory()
    a.engine.history = index
    yield a, b, network, abus, bbus, index


def _ask(b: Box, abus: SimBus | None, a: Box | None = None, **kw: Any) -> Any:
    """B's agent (tok-4) calls find_sessions box=laptop while A answers on its bus (None: A not listening)."""
    args: dict[str, Any] = {"query": "login", "repo": None, "limit": 10, "box": "laptop"}
    args.update(kw)

    async def scenario() -> Any:
        async with anyio.create_task_group() as tg:
            if abus is not None and a is not None:
                tg.start_soon(_hist(a).answer_loop, abus)
                await anyio.sleep(0.02)
            try:
                return await b.engine.calls.find_sessions("tok-4", None, args["query"], args["repo"], args["limit"],
                                                          args["box"])
            except RemoteCallError as refused:
                return refused
            finally:
                tg.cancel_scope.cancel()

    found = anyio.run(scenario)
    if isinstance(found, RemoteCallError):
        raise found
    return found


def _audit(box: Box, action: str) -> list[Any]:
    return [r for r in box.store.audit(limit=1000) if r.action == action]


def test_a_paired_box_s_history_is_not_shared_by_default(net: Any) -> None:
    a, b, _network, abus, _bbus, index = net
    assert history_setting(a.fed.book.active()[0]) is RH.Setting.NONE and history_repos(a.fed.book.active()[0]) == ()
    with pytest.raises(RemoteCallError) as refused:
        _ask(b, abus, a)
    assert refused.value.reason == "not_shared"
    assert str(refused.value) == "box laptop: not shared (its owner shares no session history with this box)"
    assert index.calls == []  # nothing was searched
    # audited on both boxes: the call on B, the answer on A
    (call,) = _audit(b, "find_sessions")
    assert (call.outcome, call.detail, call.target) == ("refused", "not_shared", "login box=laptop")
    (answered,) = _audit(a, RH.AUDIT_EVENT)
    assert (answered.actor, answered.outcome) == (f"box:{b.fed.local.box_id}", "not_shared")
    assert "agent:claude:" in answered.detail


def test_with_history_index_the_listed_repositories_are_searched_and_shown_with_their_box(net: Any) -> None:
    a, b, _network, abus, _bbus, index = net
    _set(a, history="index", history_repos=("app",))
    found = _ask(b, abus, a, limit=500)
    assert [r["session_id"] for r in found] == ["s-1"]
    assert index.calls == [{"query": "login", "limit": RH.MAX_RESULTS, "allowed_repos": frozenset({APP})}]
    (row,) = found
    fingerprint = a.fed.local.keys.fingerprint.replace(" ", "")[:8]
    assert row["box"] == {"name": "laptop", "id": a.fed.local.box_id, "fingerprint": fingerprint}
    assert set(row) == {*RH.FIELDS, "box", "remote"}
    (answered,) = _audit(a, RH.AUDIT_EVENT)
    assert answered.outcome == "answered" and answered.detail.startswith("1 result(s)")
    assert [c.outcome for c in _audit(b, "find_sessions")] == ["allowed"]


def test_a_repository_not_listed_gives_nothing_even_if_the_search_returned_it(net: Any) -> None:
    a, b, _network, abus, _bbus, index = net
    _set(a, history="index", history_repos=("app",))
    assert _ask(b, abus, a, repo="private") == []  # narrowed to a name not listed: nothing searched
    assert index.calls == []
    index.find_sessions = lambda query, **kw: [_row(PRIVATE, "s-2", "login secrets")]  # type: ignore[method-assign]
    assert _ask(b, abus, a) == []  # a search that leaks: the core drops the result of an unlisted repository


def test_a_box_serving_no_history_index_says_so_when_it_shares(net: Any) -> None:
    a, b, _network, abus, _bbus, _index = net
    _set(a, history="index", history_repos=("app",))
    a.engine.history = None
    with pytest.raises(RemoteCallError) as refused:
        _ask(b, abus, a)
    assert refused.value.reason == "refused" and "history_unavailable" in str(refused.value)
    assert [r.outcome for r in _audit(a, RH.AUDIT_EVENT)] == ["refused"]


def test_no_answer_within_5_s(net: Any) -> None:
    a, b, _network, _abus, _bbus, _index = net
    with pytest.raises(RemoteCallError) as refused:
        _ask(b, None)  # A is not listening (offline)
    assert (refused.value.reason, str(refused.value)) == ("no_answer", "no answer from box laptop within 5 s")
    with pytest.raises(RemoteCallError) as unknown:
        _ask(b, None, box="nowhere")
    assert unknown.value.reason == "unknown_box"


def _query(sender: LocalBox, to: Box, pairing: str, qid: str = "q-1") -> bytes:
    routing = E.Routing(E.Kind.HISTORY_QUERY, sender.box_id, to.fed.local.box_id, pairing=pairing)
    inner = RH.query(routing, id=qid, asker="agent:claude:s-9", text="login", repo=None, limit=10, now=to.clock())
    return seal(sender, to.fed.local.keys, inner, bytes(24))


def test_forged_unpaired_removed_and_over_rate_queries_get_nothing_and_are_audited(net: Any) -> None:
    a, b, _network, abus, _bbus, index = net
    _set(a, history="index", history_repos=("app",))
    (pairing,) = a.fed.book.active()
    stranger = LocalBox.from_secrets(_secrets(9))
    # forged: a stranger signs a query naming B as its sender (the outer's from), and one as itself
    forged = bytearray(_query(stranger, a, str(pairing.id)))
    forged[64:] = bytes(forged[64:]).replace(stranger.box_id.encode(), b.fed.local.box_id.encode())
    assert anyio.run(_hist(a).answered, bytes(forged)) is None
    assert anyio.run(_hist(a).answered, _query(stranger, a, str(pairing.id))) is None
    # a pairing that is not the active one (removed, or never made)
    assert anyio.run(_hist(a).answered, _query(b.fed.local, a, "pairing-gone")) is None
    assert index.calls == [] and _hist(a).limiter == RH.Limiter()
    refusals = [(r.actor, r.detail.split(":")[0]) for r in _audit(a, RH.AUDIT_EVENT)]
    assert refusals == [(f"box:{b.fed.local.box_id}", "bad_signature"), (f"box:{stranger.box_id}", "unpaired"),
                        (f"box:{b.fed.local.box_id}", "removed")]
    # over the rate: ten a minute are answered; the eleventh is answered `refused` and searches nothing
    for n in range(RH.RATE):
        assert anyio.run(_hist(a).answered, _query(b.fed.local, a, str(pairing.id), f"q-{n}")) is not None
    assert len(index.calls) == RH.RATE
    with pytest.raises(RemoteCallError) as over:
        _ask(b, abus, a)
    assert over.value.reason == "refused" and "over_rate" in str(over.value)
    assert len(index.calls) == RH.RATE
    # a replayed query: unanswered
    assert anyio.run(_hist(a).answered, _query(b.fed.local, a, str(pairing.id), "q-0")) is None
    assert [r.detail.split(":")[0] for r in _audit(a, RH.AUDIT_EVENT) if r.outcome == "refused"][-2:] == [
        "over_rate", "replayed"]


def test_a_removed_pairing_is_asked_nothing(net: Any) -> None:
    a, b, _network, abus, _bbus, _index = net
    anyio.run(lambda: b.fed.remove("laptop"))
    with pytest.raises(RemoteCallError) as refused:
        _ask(b, abus, a)
    assert refused.value.reason == "unknown_box"
    assert [p.state for p in b.fed.book.pairings.values()] == [P.PairingState.REMOVED]


def test_the_answering_loop_answers_on_the_bus(net: Any) -> None:
    a, b, _network, abus, bbus, _index = net
    (pairing,) = a.fed.book.active()

    async def scenario() -> bytes | None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_hist(a).answer_loop, abus)
            await anyio.sleep(0.02)
            reply = await bbus.request(a.fed.local.box_id, _query(b.fed.local, a, str(pairing.id)), timeout=2)
            tg.cancel_scope.cancel()
        return reply

    reply = anyio.run(scenario)
    assert reply is not None and b"login" not in reply  # sealed: NATS sees ciphertext
    verdict = E.judge(*_facts(b, a, reply))
    assert isinstance(verdict.inner, E.HistoryAnswerInner) and verdict.inner.outcome == "not_shared"


def _facts(reader: Box, asked: Box, wire: bytes) -> tuple[E.Facts, E.View]:
    from connectd.federation.seal import read_wire

    view = reader.fed.view()
    subject = RH.answer_subject(reader.fed.local.box_id, asked.fed.local.box_id)
    return read_wire(reader.fed.local, subject, wire, view), view


def test_the_pump_starts_the_answering_loop_as_a_bus_service(net: Any) -> None:
    from connectd.daemon.supervisor import Kind

    a, _b, _network, _abus, _bbus, _index = net
    spawned: list[tuple[Any, str]] = []

    class Recording:
        def spawn(self, kind: Any, fn: Any, *, name: str, **_kw: Any) -> None:
            spawned.append((kind, name))

        def group(self, name: str) -> Recording:  # the bus loops' own group: its spawns recorded the same
            spawned.append(("group", name))
            return self

    a.fed.pump.start(Recording())
    assert ("group", "federation bus") in spawned and (Kind.BUS, "federation history answer") in spawned


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(k)
            yield from _strings(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _strings(v)


def test_the_answer_names_no_absolute_path_of_the_box_asked(net: Any, tmp_path: Any) -> None:
    """The answer shares the session's id, harness, the repository's name as ``history_repos`` lists it,
    title and times: read as B opens it, it holds no path under A's home or data directory, and no
    absolute path at all; B's agent sees the same."""
    a, b, _network, abus, bbus, _index = net
    home = str(tmp_path / "home-a")
    app, data = f"{home}/src/app", str(a.root)

    class Paths(FakeHistory):
        def recent_dirs(self, limit: int) -> list[dict[str, Any]]:
            return [{"cwd": f"{app}/server", "repo": app}]

        def find_sessions(self, query: str, *, limit: int, allowed_repos: frozenset[str] | None = None,
                          repo: str | None = None) -> list[dict[str, Any]]:
            row = _row(app, "s-1", "fix the login bug") | {"cwd": f"{app}/server", "pane": "%7", "liveness": "live"}
            worktree = _row(app, "s-3", "login in a worktree") | {"cwd": f"{data}/worktrees/app-login"}
            return [row, worktree]

    a.engine.history = Paths()
    _set(a, history="index", history_repos=("app",))
    (pairing,) = a.fed.book.active()

    async def scenario() -> bytes | None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_hist(a).answer_loop, abus)
            await anyio.sleep(0.02)
            reply = await bbus.request(a.fed.local.box_id, _query(b.fed.local, a, str(pairing.id)), timeout=2)
            tg.cancel_scope.cancel()
        return reply

    reply = anyio.run(scenario)
    assert reply is not None
    verdict = E.judge(*_facts(b, a, reply))
    assert isinstance(verdict.inner, E.HistoryAnswerInner) and verdict.inner.outcome == "results"
    opened = E.encode_inner(verdict.inner).decode()
    assert [r["session_id"] for r in verdict.inner.results] == ["s-1", "s-3"]
    assert home not in opened and data not in opened and str(tmp_path) not in opened
    assert not [s for s in _strings(list(verdict.inner.results)) if s.startswith("/") or "/home" in s]
    found = _ask(b, abus, a)
    assert [(r["session_id"], r["repo"], r["title"]) for r in found] == [
        ("s-1", "app", "fix the login bug"), ("s-3", "app", "login in a worktree")]
    assert all("cwd" not in r and r["last_active"] == "2026-12-05T10:00:00Z" for r in found)
    assert not [s for s in _strings(found) if s.startswith("/") or home in s or data in s]


def _get_session(b: Box, abus: SimBus | None, a: Box | None, session_id: str, box: str = "laptop") -> Any:
    """B's agent (tok-4) calls get_session box=laptop while A answers on its bus (None: A not listening)."""

    async def scenario() -> Any:
        async with anyio.create_task_group() as tg:
            if abus is not None and a is not None:
                tg.start_soon(_hist(a).answer_loop, abus)
                await anyio.sleep(0.02)
            try:
                return await b.engine.calls.get_session("tok-4", None, "claude", session_id, box)
            except RemoteCallError as refused:
                return refused
            finally:
                tg.cancel_scope.cancel()

    return anyio.run(scenario)


def test_get_session_box_reads_one_session_under_the_same_setting(net: Any) -> None:
    """get_session box=laptop goes as the same history request (a query for one session): not shared by
    default; with history=index, a session of a listed repository with its box, the repository by
    name and no cwd; one of a repository not listed answered as one that does not exist."""
    a, b, _network, abus, _bbus, index = net
    refused = _get_session(b, abus, a, "s-1")
    assert isinstance(refused, RemoteCallError) and refused.reason == "not_shared"
    assert str(refused) == "box laptop: not shared (its owner shares no session history with this box)"
    assert index.calls == []  # nothing read
    _set(a, history="index", history_repos=("app",))
    found = _get_session(b, abus, a, "s-1")
    assert isinstance(found, dict), found
    assert (found["session_id"], found["repo"], found["title"], found["remote"]) == ("s-1", "app", "fix the login bug", True)
    assert found["box"]["name"] == "laptop" and "cwd" not in found
    assert index.calls[-1] == {"session": ("claude", "s-1"), "allowed_repos": frozenset({APP})}
    hidden, missing = _get_session(b, abus, a, "s-2"), _get_session(b, abus, a, "s-404")
    assert isinstance(hidden, RemoteCallError) and isinstance(missing, RemoteCallError)
    assert (hidden.reason, missing.reason) == ("unknown_session", "unknown_session")
    assert str(hidden) == "box laptop: no claude session 's-2' that it shares with this box"
    assert str(missing).replace("s-404", "s-2") == str(hidden)  # the private repository's session is not told apart
    unknown = _get_session(b, abus, a, "s-1", box="nowhere")
    assert isinstance(unknown, RemoteCallError) and unknown.reason == "unknown_box"
    silent = _get_session(b, None, None, "s-1")  # A not listening
    assert isinstance(silent, RemoteCallError) and str(silent) == "no answer from box laptop within 5 s"
    # audited on both boxes: each call on B, each answer on A
    calls = [(r.outcome, r.target) for r in _audit(b, "get_session")]
    assert calls == [("refused", "claude:s-1 box=laptop"), ("allowed", "claude:s-1 box=laptop"),
                     ("refused", "claude:s-2 box=laptop"), ("refused", "claude:s-404 box=laptop"),
                     ("refused", "claude:s-1 box=nowhere"), ("refused", "claude:s-1 box=laptop")]
    assert [r.outcome for r in _audit(a, RH.AUDIT_EVENT)] == ["not_shared", "answered", "answered", "answered"]
