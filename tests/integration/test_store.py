"""The store on real SQLite files: every kind round-trips through apply + load_hub, a step is all or
nothing, files stay private, a newer schema is refused untouched, history outlives the id hour, and a
daemon killed mid-typing never types twice."""

from __future__ import annotations

import os
import secrets
import sqlite3
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from connectcore import hub as H
from connectcore import restart as R
from connectcore.consent import CardState, Decision
from connectcore.delivery import MessageState
from connectcore.effects import Audit, Notify, Persist, TypeText
from connectcore.grants import Preset, Principal, Scope, TokenRecord, scopes_of
from connectd.store import store as store_mod
from connectd.store.store import (
    AuditRow,
    BindingRow,
    LaunchRow,
    Store,
    StoreError,
    hash_token,
    message_cursor,
)
from tests.unit.hubkit import World

REPO = Path(__file__).resolve().parents[2]


@dataclass
class HashedWorld(World):
    """The hub test driver, with tokens as the daemon passes them: hashes of random plain tokens."""

    plain: dict[str, str] = field(default_factory=dict)

    def fresh(self, prefix: str) -> str:
        if prefix == "tok-":
            plain = secrets.token_urlsafe(32)
            self.plain[hash_token(plain)] = plain
            return hash_token(plain)
        return super().fresh(prefix)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def store(data_dir: Path) -> Iterator[Store]:
    with Store.open(data_dir) as opened:
        yield opened


def _principal(pid: str = "p1") -> Principal:
    return Principal(pid, "claude", "%1", 4000, "inc-1", 1.0)


def _token(pid: str = "p1", plain: str = "plain-token") -> TokenRecord:
    return TokenRecord(hash_token(plain), pid, "inc-1", "%1", 4000, issued_at=1.0)



def _restart_effects(now: float = 1000.0) -> tuple[R.Restart, list[Any]]:
    plan = R.RestartPlan(
        restart_id="rs1", pane_id="%7", incarnation="inc-7", original_remain_on_exit=None, harness="claude",
        session_id="s7", launcher="claude", exit_command="/exit", resume_argv=("claude", "--resume", "s7"),
        cwd="/work", env={"CONNECT_TOKEN": "secret-env-value"},
    )
    state = R.plan_restart(plan)
    effects: list[Any] = []
    state, more = R.step(state, R.Begin(now=now))
    effects += more
    state, more = R.step(
        state,
        R.PaneObserved(now=now + 1, pane_id="%7", incarnation="inc-7", agent_running=True, idle=True, composer_empty=True),
    )
    effects += more
    return state, effects


def _scenario() -> HashedWorld:
    """Principals (one bound later, one merged into another), tokens (one revoked), grants, a pair,
    cards in three states and messages in four."""
    w = HashedWorld()
    a = w.launch("a", session=("claude", "sa"))
    b = w.launch("b")
    c = w.launch("c", Preset.OBSERVE, session=("codex", "sc"), harness="codex")
    w.step(H.BindSession(w.now, b.principal, ("claude", "sb")))
    w.step(H.PaneGone(w.now, a.pane, a.incarnation))  # a's agent ended (its token too) ...
    resumed = w.launch("a-resumed")  # ... and its session resumed in another pane, its id learnt later: merged
    w.step(H.BindSession(w.now, resumed.principal, ("claude", "sa")))
    resumed.principal = a.principal  # its messages are keyed by the merge group's root
    first = w.send(resumed, b, "first")
    w.decide(first, Decision.APPROVE_PAIR)  # ready, pair approved
    w.send(resumed, b, "second")  # pair approved: ready without a card
    w.send(b, resumed, "pending card")  # awaiting consent
    declined = w.send(b, resumed, "declined")
    w.decide(declined, Decision.DECLINE)
    w.step(H.SetGrant(w.now, ("codex", "sc"), frozenset({Scope.READ})))
    w.step(H.Revoke(w.now, c.principal))
    return w


# --- round trips ------------------------------------------------------------------------------------


def test_every_kind_round_trips_through_apply_reopen_and_load_hub(data_dir: Path) -> None:
    w = _scenario()
    restart, restart_effects = _restart_effects(w.now)
    with Store.open(data_dir) as store:
        store.apply(w.effects)
        store.apply(restart_effects)
    with Store.open(data_dir) as store:  # reopen after close keeps everything
        loaded = store.load_hub(w.now, w.hub.limits)
        records = store.open_restarts()
    live = w.hub
    assert loaded.book.principals == live.book.principals
    assert loaded.book.tokens == live.book.tokens
    assert loaded.book.aliases == live.book.aliases
    assert loaded.messages == live.messages
    assert loaded.refs == live.refs
    assert loaded.cards == live.cards
    assert loaded.pairs == live.pairs and loaded.pairs
    # Every grant, the pre-binding one of "b" dropped as bind_session drops it; and so what each agent
    # may do is the same after reload.
    assert loaded.book.grants == live.book.grants
    assert loaded.book == live.book
    for principal in live.book.principals:
        assert scopes_of(loaded.book, principal) == scopes_of(live.book, principal)
    assert {m.state for m in loaded.messages.values()} >= {
        MessageState.READY, MessageState.AWAITING_CONSENT, MessageState.DECLINED
    }
    assert {c.state for c in loaded.cards.values()} == {
        CardState.APPROVED_PAIR, CardState.PENDING, CardState.DECLINED
    }
    assert records == [restart.record] and records[0].step is R.RestartStep.RECORD_PERSISTED
    # The hub reloaded from the store behaves like the live one: the revoked token stays refused.
    revoked = w.agents["c"].token
    with pytest.raises(H.CallRefused):
        H.authorize(loaded, token_hash=revoked, scope=Scope.READ, action="list_agents", now=w.now)


def test_audit_records_are_written_in_order_with_every_field(store: Store) -> None:
    w = _scenario()
    store.apply(w.effects)
    expected = [e for e in w.effects if isinstance(e, Audit)]
    rows = store.audit(limit=1000)
    assert [(r.at, r.actor, r.action, r.outcome, r.scope, r.target, r.message_id, r.detail) for r in rows] == [
        (e.at, e.actor, e.action, e.outcome, e.scope, e.target, e.message_id, e.detail) for e in expected
    ]
    assert [r.id for r in rows] == sorted(r.id for r in rows)


def test_a_closed_restart_is_not_open(store: Store) -> None:
    state, effects = _restart_effects()
    store.apply(effects)
    assert [r.restart_id for r in store.open_restarts()] == ["rs1"]
    state, more = R.step(state, R.Recover(now=2000.0, condition=R.PaneCondition.GONE))
    store.apply(more)
    assert store.open_restarts() == []


def test_environment_values_of_a_restart_never_reach_the_file(store: Store) -> None:
    _state, effects = _restart_effects()
    store.apply(effects)
    assert b"secret-env-value" not in _all_bytes(store)
    assert b"CONNECT_TOKEN" in _all_bytes(store)  # its name is kept (and the grep can find things)


def test_other_effects_are_not_the_stores(store: Store) -> None:
    store.apply([Notify("card", ("c1",)), TypeText("%1", "inc-1", "hello")])
    assert store.audit() == [] and store.messages() == []


def test_a_deleted_record_is_gone(store: Store) -> None:
    store.apply([Persist("principal", ("p1",), _principal()), Persist("grant", ("principal", "p1"), frozenset({Scope.READ}))])
    store.apply([Persist("grant", ("principal", "p1"), None)])
    assert store.load_hub(0.0).book.grants == {}
    store.apply([Persist("grant", ("principal", "p1"), frozenset())])  # Off is a stored value, not a delete
    assert store.load_hub(0.0).book.grants == {("principal", "p1"): frozenset()}


def test_pairs_are_the_full_current_set(store: Store) -> None:
    store.apply([Persist("principal", ("p1",), _principal()), Persist("pairs", (), (("p1", "inc-2"), ("p1", "inc-3")))])
    store.apply([Persist("pairs", (), (("p1", "inc-3"),))])
    assert store.load_hub(0.0).pairs == frozenset({("p1", "inc-3")})


# --- all or nothing ---------------------------------------------------------------------------------

GOOD = Persist("principal", ("p1",), _principal())


@pytest.mark.parametrize(
    ("bad", "needle"),
    [
        (Persist("aliases", ("x",), "y"), "unknown Persist kind 'aliases'"),
        (Persist("principal", ("p2",), _principal("p1")), "does not match its record"),
        (Persist("principal", ("p1",), "not a principal"), "principal record must be a Principal, got str"),
        (Persist("token", (hash_token("other"),), _token("nobody", "other")), "FOREIGN KEY constraint failed"),
        (
            Persist("token", ("plain-token",), TokenRecord("plain-token", "p1", "inc-1", "%1", 1)),
            "never plain",
        ),
        (Persist("grant", ("session", "claude"), frozenset()), "grant key must be"),
        (Persist("grant", ("principal", "p1"), frozenset({"read"})), "frozenset of Scope"),
        (Persist("pairs", (), (("p1",),)), "pairs record must be"),
        (Persist("pairs", ("x",), ()), "pairs key must be ()"),
        (Persist("message", ("p1",), None), "message key must have 2 part(s)"),
        (Persist("restart", ("r1",), _principal()), "restart record must be a RestartRecord"),
        (Audit(actor="a", action="b", outcome="c", detail=None), "NOT NULL constraint failed"),  # type: ignore[arg-type]
    ],
)
def test_a_bad_effect_in_the_middle_writes_nothing(store: Store, bad: Any, needle: str) -> None:
    before = Audit(actor="owner", action="grant", outcome="set", at=1.0)
    after = Persist("token", (_token().token_hash,), _token())
    with pytest.raises(StoreError) as caught:
        store.apply([GOOD, before, bad, after])
    assert needle in str(caught.value)
    assert store.audit() == []
    assert store.load_hub(0.0).book.principals == {}
    store.apply([GOOD, before, after])  # the store is still usable, and the same step without it commits
    assert list(store.load_hub(0.0).book.tokens) == [_token().token_hash]


def test_a_ref_that_names_another_message_is_refused(store: Store) -> None:
    w = HashedWorld()
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b)
    store.apply(w.effects)
    other = replace(w.message(key), id="other-id")
    with pytest.raises(StoreError, match="already names message"):
        store.apply([Persist("message", other.key, other)])


def test_an_id_reused_within_its_hour_is_refused(store: Store) -> None:
    w = HashedWorld()
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b)
    store.apply(w.effects)
    again = replace(w.message(key), ref="r-new", created_at=w.now + 10)
    with pytest.raises(StoreError, match="still reserved"):
        store.apply([Persist("message", again.key, again)])


def test_concurrent_callers_are_serialized(store: Store) -> None:
    def write(n: int) -> None:
        for i in range(20):
            store.apply([Audit(actor=f"t{n}", action="call", outcome="allowed", at=float(i))])

    threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(store.audit(limit=1000)) == 80


# --- files ------------------------------------------------------------------------------------------


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_directory_is_0700_and_files_0600_whatever_the_umask(tmp_path: Path) -> None:
    data_dir = tmp_path / "loose"
    data_dir.mkdir(mode=0o755)
    os.chmod(data_dir, 0o755)
    old = os.umask(0)
    try:
        with Store.open(data_dir) as store:
            store.apply([GOOD, Audit(actor="a", action="b", outcome="c")])
            files = {p.name: _mode(p) for p in data_dir.iterdir()}
    finally:
        os.umask(old)
    assert _mode(data_dir) == 0o700
    assert files == {"connect.db": 0o600, "connect.db-wal": 0o600, "connect.db-shm": 0o600}


def test_a_loose_existing_database_is_made_private(data_dir: Path) -> None:
    Store.open(data_dir).close()
    os.chmod(data_dir / "connect.db", 0o644)
    Store.open(data_dir).close()
    assert _mode(data_dir / "connect.db") == 0o600


def test_wal_full_sync_and_foreign_keys_are_on(store: Store) -> None:
    db = store._db
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    assert db.execute("PRAGMA foreign_keys").fetchone()[0] == 1


def test_a_file_that_is_not_a_database_is_refused(data_dir: Path) -> None:
    data_dir.mkdir(parents=True)
    (data_dir / "connect.db").write_bytes(b"not a database at all, " * 100)
    with pytest.raises(StoreError, match="is not a usable connectd database"):
        Store.open(data_dir)


def _all_bytes(store: Store) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(store.path.parent.glob("connect.db*")))


def test_no_plain_token_ever_reaches_the_file(store: Store) -> None:
    w = _scenario()
    owner_plain, tunnel_plain = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
    store.apply(w.effects)
    store.set_owner(hash_token(owner_plain), created_at=1.0, tunnel_secret_hash=hash_token(tunnel_plain))
    raw = _all_bytes(store)
    plains = [*w.plain.values(), owner_plain, tunnel_plain]
    assert len(plains) == 6
    for plain in plains:
        assert plain.encode() not in raw
        assert hash_token(plain).encode() in raw  # what is kept instead (so the grep does find things)
    assert store.owner_token_hash() == hash_token(owner_plain)
    assert store.tunnel_secret_hash() == hash_token(tunnel_plain)


def test_a_plain_owner_token_is_refused(store: Store) -> None:
    with pytest.raises(StoreError, match="never plain"):
        store.set_owner(secrets.token_urlsafe(32), created_at=1.0)
    with pytest.raises(StoreError, match="tunnel secret must be stored as its hash"):
        store.set_owner(hash_token("x"), created_at=1.0, tunnel_secret_hash="shared-secret")
    assert store.owner_token_hash() is None


# --- migrations -------------------------------------------------------------------------------------


def _user_version(path: Path) -> int:
    db = sqlite3.connect(path)
    try:
        return int(db.execute("PRAGMA user_version").fetchone()[0])
    finally:
        db.close()


def test_a_newer_database_is_refused_and_left_unchanged(data_dir: Path) -> None:
    with Store.open(data_dir) as store:
        store.apply([GOOD])
    newer = len(store_mod.MIGRATIONS) + 1
    db = sqlite3.connect(data_dir / "connect.db")
    db.execute(f"PRAGMA user_version = {newer}")
    db.close()
    before = {p.name: p.read_bytes() for p in data_dir.iterdir()}
    with pytest.raises(StoreError) as caught:
        Store.open(data_dir)
    assert str(caught.value) == (
        f"database schema version {newer} is newer than this connectd ({len(store_mod.MIGRATIONS)}); "
        "refusing to run: a downgrade would destroy data"
    )
    assert {p.name: p.read_bytes() for p in data_dir.iterdir()} == before
    assert _user_version(data_dir / "connect.db") == newer


def test_a_new_migration_is_applied_once_and_keeps_the_data(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shipped = len(store_mod.MIGRATIONS)
    with Store.open(data_dir) as store:
        store.apply([GOOD])
        assert store.schema_version == shipped
    monkeypatch.setattr(store_mod, "MIGRATIONS", [*store_mod.MIGRATIONS, "ALTER TABLE bindings ADD COLUMN note TEXT;"])
    with Store.open(data_dir) as store:
        assert store.schema_version == shipped + 1
        columns = [row[1] for row in store._db.execute("PRAGMA table_info(bindings)")]
        assert list(store.load_hub(0.0).book.principals) == ["p1"]
    assert "note" in columns
    assert _user_version(data_dir / "connect.db") == shipped + 1
    Store.open(data_dir).close()  # at the new version already: nothing to apply (a second ALTER would fail)
    monkeypatch.undo()
    with pytest.raises(StoreError, match=f"schema version {shipped + 1} is newer than this connectd \\({shipped}\\)"):
        Store.open(data_dir)


def test_a_failing_migration_changes_nothing(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shipped = len(store_mod.MIGRATIONS)
    Store.open(data_dir).close()
    broken = "CREATE TABLE half_done (x INTEGER);\nCREATE TABLE principals (x INTEGER);"
    monkeypatch.setattr(store_mod, "MIGRATIONS", [*store_mod.MIGRATIONS, broken])
    with pytest.raises(StoreError, match=f"migration {shipped + 1} failed, database left at version {shipped}"):
        Store.open(data_dir)
    monkeypatch.undo()
    with Store.open(data_dir) as store:
        tables = {row[0] for row in store._db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert "half_done" not in tables
    assert _user_version(data_dir / "connect.db") == shipped


def test_the_export_cursor_is_kept_per_destination_and_never_moves_back(store: Store) -> None:
    assert store.export_cursor("otlp:a") == 0
    store.set_export_cursor("otlp:a", 40, updated_at=1.0)
    store.set_export_cursor("otlp:a", 12, updated_at=2.0)  # a late, older acknowledgement
    store.set_export_cursor("otlp:b", 7, updated_at=2.0)
    assert (store.export_cursor("otlp:a"), store.export_cursor("otlp:b")) == (40, 7)


# --- queries ----------------------------------------------------------------------------------------


def test_audit_pages_by_id_and_filters(store: Store) -> None:
    targets = ["%1", "%1@inc-3", "agent:claude:pane:%1:4000", "%12@inc-9", "agent:claude:pane:%12:1", None]
    effects = [
        Audit(
            actor=f"agent:claude:s{i % 3}",
            action="send_message",
            outcome="refused" if i % 4 == 0 else "allowed",
            target=targets[i % len(targets)],
            at=100.0 + i,
        )
        for i in range(30)
    ]
    store.apply(effects)
    page1 = store.audit(limit=12)
    page2 = store.audit(after_id=page1[-1].id, limit=12)
    page3 = store.audit(after_id=page2[-1].id, limit=12)
    assert [len(page1), len(page2), len(page3)] == [12, 12, 6]
    assert [r.at for r in page1 + page2 + page3] == [e.at for e in effects]
    assert store.audit(after_id=page3[-1].id) == []
    assert {r.actor for r in store.audit(actor="agent:claude:s1", limit=100)} == {"agent:claude:s1"}
    assert len(store.audit(actor="agent:claude:s1", limit=100)) == 10
    on_1 = store.audit(pane="%1", limit=100)
    assert {r.target for r in on_1} == {"%1", "%1@inc-3", "agent:claude:pane:%1:4000"}  # not %12
    assert {r.target for r in store.audit(pane="%12", limit=100)} == {"%12@inc-9", "agent:claude:pane:%12:1"}
    assert all(r.outcome == "refused" for r in store.audit(outcome="refused", limit=100))
    assert len(store.audit(outcome="refused", limit=100)) == 8
    window = store.audit(since=105.0, until=110.0, limit=100)
    assert [r.at for r in window] == [105.0, 106.0, 107.0, 108.0, 109.0]
    assert isinstance(window[0], AuditRow)
    newest = store.audit(limit=12, newest_first=True)
    older = store.audit(before_id=newest[-1].id, limit=12, newest_first=True)
    oldest = store.audit(before_id=older[-1].id, limit=12, newest_first=True)
    assert [len(newest), len(older), len(oldest)] == [12, 12, 6]
    assert [r.at for r in newest + older + oldest] == [e.at for e in reversed(effects)]
    assert store.audit(before_id=oldest[-1].id, newest_first=True) == []
    between = store.audit(after_id=page1[2].id, before_id=page1[6].id, newest_first=True)
    assert [r.id for r in between] == [page1[5].id, page1[4].id, page1[3].id]


def test_history_outlives_the_id_hour_but_is_not_loaded(store: Store) -> None:
    w = HashedWorld()
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b, "old", message_id="m-1")
    w.decide(key)
    w.deliver(key, b)
    assert w.message(key).state is MessageState.DELIVERED
    w.now += w.hub.limits.id_ttl + 1
    w.step(H.Tick(w.now))
    assert key not in w.hub.messages  # the hub released the id
    renewed = w.send(a, b, "new", message_id="m-1")  # the same id, reused after its hour
    store.apply(w.effects)
    loaded = store.load_hub(w.now, w.hub.limits)
    assert list(loaded.messages) == [renewed] and loaded.messages[renewed].text == "new"
    history = store.messages(principal=a.principal)
    assert [m.text for m in history] == ["new", "old"]  # newest first
    assert history[1].state is MessageState.DELIVERED
    assert store.message(*key) == loaded.messages[renewed]  # the newest with this key
    assert [m.text for m in store.messages(principal=b.principal)] == ["new", "old"]  # received
    assert [m.text for m in store.messages(pane=b.pane)] == ["new", "old"]  # addressed to the pane
    assert [m.text for m in store.messages(pane=a.pane)] == ["new", "old"]  # sent from the pane
    assert store.messages(pane="%99") == []
    assert len(store.messages(limit=1)) == 1
    (first,) = store.messages(limit=1)
    assert first.text == "new"
    assert [m.text for m in store.messages(before=message_cursor(first))] == ["old"]
    assert [m.text for m in store.messages(after=message_cursor(history[1]))] == ["new"]
    assert [m.text for m in store.messages(newest_first=False)] == ["old", "new"]
    assert store.messages(before=message_cursor(history[1])) == []
    assert store.message(a.principal, "never-sent") is None
    assert [c.state for c in store.cards()] == [CardState.APPROVED_PAIR]  # the pair covered "new"
    assert store.cards(state=CardState.PENDING) == []


def test_launches_bindings_and_owner_survive_reopen(data_dir: Path) -> None:
    with Store.open(data_dir) as store:
        store.record_launch(
            "%3", "inc-3", launcher="claude", harness="claude", session_id=None, cwd="/w",
            argv=["claude", "--mcp-config={}"], started_at=5.0,
        )
        store.record_binding("%3", harness="claude", session_id="s1", cwd="/w", updated_at=6.0)
        store.record_binding("%3", harness="claude", session_id="s2", cwd="/w", updated_at=7.0)
        store.record_binding("%4", harness="codex", session_id="s9", cwd=None, updated_at=8.0)
        store.set_owner(hash_token("owner"), created_at=1.0)
    with Store.open(data_dir) as store:
        assert store.launch_for("%3", "inc-3") == LaunchRow(
            "%3", "inc-3", "claude", "claude", None, "/w", ("claude", "--mcp-config={}"), 5.0
        )
        assert store.launch_for("%3", "inc-4") is None
        assert store.bindings() == [
            BindingRow("%3", "claude", "s2", "/w", 7.0),
            BindingRow("%4", "codex", "s9", None, 8.0),
        ]
        assert store.owner_token_hash() == hash_token("owner")
        assert store.tunnel_secret_hash() is None


# --- durability beyond the specification -----------------------------------------------------------


def _crash_world() -> tuple[HashedWorld, dict[str, tuple[str, str]]]:
    """Deterministic: one message queued, one mid-typing, one whose hour ends while the daemon is down."""
    w = HashedWorld()
    a, b, c = w.launch("a"), w.launch("b"), w.launch("c")
    stale = w.send(a, c, "stale")  # awaits a card nobody answers
    w.now += 1000
    typing = w.send(c, b, "typing")
    w.decide(typing)
    w.idle(b)
    w.guard(typing, b)  # guard passed: Persist(typing) comes before TypeText
    queued = w.send(a, b, "queued")
    w.decide(queued)  # ready, behind the message being typed into b
    return w, {"stale": stale, "queued": queued, "typing": typing}


def crash_child(data_dir: str) -> None:
    """Run in a child process: commit the steps as the engine does (every Persist before the TypeText
    after it), then die without closing while the typing is unconfirmed."""
    w, _keys = _crash_world()
    store = Store.open(Path(data_dir))
    cut = next(i for i, e in enumerate(w.effects) if isinstance(e, TypeText))
    store.apply(w.effects[:cut])  # durable first: "typing started" is committed before the first byte
    store.apply(w.effects[cut:])  # the queued message admitted while the typing was in flight
    os._exit(9)  # killed: no close, no checkpoint


def test_a_daemon_killed_mid_typing_never_types_twice(data_dir: Path) -> None:
    child = subprocess.run(
        [sys.executable, "-c", f"from tests.integration.test_store import crash_child; crash_child({str(data_dir)!r})"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert child.returncode == 9, child.stderr
    w, keys = _crash_world()
    assert w.message(keys["typing"]).state is MessageState.TYPING
    restart_at = w.message(keys["stale"]).expires_at + 1  # the stale message's hour ended while down
    with Store.open(data_dir) as store:
        loaded = store.load_hub(restart_at, w.hub.limits)
        assert {loaded.messages[k].state for k in keys.values()} == {
            MessageState.TYPING, MessageState.READY, MessageState.AWAITING_CONSENT
        }
        recovered, effects = H.step(loaded, H.Recover(restart_at))
        store.apply(effects)
        assert not any(isinstance(e, TypeText) for e in effects)
    with Store.open(data_dir) as store:
        outcome = {name: store.message(*key) for name, key in keys.items()}
        again = store.load_hub(restart_at + 1, w.hub.limits)
    assert outcome["typing"] is not None and outcome["typing"].state is MessageState.UNCONFIRMED
    assert outcome["queued"] is not None and outcome["queued"].state is MessageState.READY
    assert outcome["stale"] is not None and outcome["stale"].state is MessageState.EXPIRED
    assert recovered.messages[keys["queued"]].state is MessageState.READY  # resumes: delivered once
    assert set(again.messages) == {keys["queued"], keys["typing"]}  # the expired one stays history


def test_acts_survive_a_restart_and_recover_never_runs_one_twice(tmp_path: Path) -> None:
    """An act pending stays pending; one approved but not executed is cancelled; one executing fails."""
    from connectcore import control as C
    from tests.unit.test_hub_acts import QUESTION, approve, propose, world

    w, ctl, pure, shell = world()
    pending = propose(w, ctl, C.Tool.SEND_KEYS, pure, QUESTION, keys=["1", "Enter"])
    approved = propose(w, ctl, C.Tool.SHELL_TEXT, shell, text="ls")
    approve(w, approved)
    with Store.open(tmp_path) as store:
        store.apply(e for e in w.effects if isinstance(e, Persist) and e.kind == "act")
        assert {a.id for a in store.acts(open_only=True)} == {pending, approved}
        hub = store.load_hub(w.now)
        assert hub.acts[pending].args["keys"] == ["1", "Enter"] and hub.acts[pending].tool is C.Tool.SEND_KEYS
        hub, effects = H.step(replace(hub, book=w.hub.book), H.Recover(w.now + 1))
        store.apply(e for e in effects if isinstance(e, Persist) and e.kind == "act")
        assert hub.acts[approved].state is C.ActState.CANCELLED
    with Store.open(tmp_path) as store:
        states = {a.id: a.state for a in store.acts()}
        assert states == {pending: C.ActState.AWAITING_CONSENT, approved: C.ActState.CANCELLED}


def test_a_release_is_kept_per_incarnation_and_a_data_dir_at_version_3_gains_the_table(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 22.4: the releases table arrives by migration 4 on an existing data dir (its data kept); a
    release recorded for an incarnation is read back after reopening, and forgotten when it ended."""
    monkeypatch.setattr(store_mod, "MIGRATIONS", store_mod.MIGRATIONS[:3])
    with Store.open(data_dir) as store:
        store.apply([GOOD])
    monkeypatch.undo()
    with Store.open(data_dir) as store:
        assert store.schema_version == len(store_mod.MIGRATIONS) and list(store.load_hub(0.0).book.principals) == ["p1"]
        store.record_release("inc-a", harness="claude", release="2.1.332", learned_at=1.0)
        store.record_release("inc-b", harness="codex", release="0.171.0", learned_at=2.0)
    with Store.open(data_dir) as store:
        assert store.releases(["inc-a", "inc-c"]) == {"inc-a": ("claude", "2.1.332")}
        store.forget_releases(["inc-a"])
        assert store.releases(["inc-a", "inc-b"]) == {"inc-b": ("codex", "0.171.0")}
