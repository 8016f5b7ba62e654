"""Issue 14, item 5: the audit log reaches an OTLP/HTTP collector through the OpenTelemetry SDK's
exporter, from a cursor in SQLite: nothing is lost while the collector is away or failing, nothing
is sent twice across a daemon restart, and no error of the collector's ends the daemon."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import anyio
import pytest
from opentelemetry.sdk._logs import ReadableLogRecord
from opentelemetry.sdk._logs.export import LogRecordExportResult

from connectcore.effects import Audit
from connectd.edges import otlp
from connectd.edges.otlp import ExportFailed, OtlpExporter
from connectd.store.store import Store
from tests.support.collector import Collector
from tests.support.daemon import DaemonProcess, wait_for
from tests.support.tmux_server import TmuxServer


def audits(n: int, start: float = 1000.0) -> list[Audit]:
    return [
        Audit(actor=f"agent:claude:s{i % 2}", action="send_message", outcome="allowed", target="%1", detail=f"n{i}", at=start + i)
        for i in range(n)
    ]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "data") as opened:
        yield opened


@pytest.fixture
def collector() -> Iterator[Collector]:
    c = Collector()
    try:
        yield c
    finally:
        c.close()


def test_a_batch_moves_the_cursor_only_once_the_collector_accepted_it(store: Store, collector: Collector) -> None:
    store.apply(audits(30))
    exporter = OtlpExporter(collector.endpoint, store, timeout=2.0)
    assert exporter.url == collector.endpoint + "/v1/logs"

    with pytest.raises(ExportFailed):  # down: connection refused
        exporter.export_once()
    assert store.export_cursor(exporter.cursor_name) == 0

    collector.up()
    collector.fail_with = 500  # up but refusing
    with pytest.raises(ExportFailed):
        exporter.export_once()
    assert collector.refused >= 1 and collector.records == [] and store.export_cursor(exporter.cursor_name) == 0

    collector.fail_with = None
    assert exporter.export_once() == 30
    assert collector.audit_ids() == list(range(1, 31)) and store.export_cursor(exporter.cursor_name) == 30
    first = collector.records[0]
    assert first["service.name"] == "connectd" and first["scope"] == "connect.audit"
    assert (first["connect.actor"], first["connect.action"], first["connect.outcome"], first["connect.detail"]) == (
        "agent:claude:s0", "send_message", "allowed", "n0",
    )
    assert first["body"] == "agent:claude:s0 send_message allowed"
    assert set(collector.paths) == {"/v1/logs"}

    assert exporter.export_once() == 0  # nothing new: nothing sent
    store.apply(audits(5, start=2000.0))
    assert exporter.export_once() == 5
    assert collector.audit_ids() == list(range(1, 36))  # each record once


def test_a_long_backlog_goes_out_in_batches(store: Store, collector: Collector, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(otlp, "BATCH", 7)
    store.apply(audits(20))
    collector.up()
    exporter = OtlpExporter(collector.endpoint, store)
    assert [exporter.export_once() for _ in range(4)] == [7, 7, 6, 0]
    assert collector.audit_ids() == list(range(1, 21))


def test_any_error_from_the_exporter_is_retried_and_never_ends_the_loop(store: Store) -> None:
    class Flaky:
        def __init__(self) -> None:
            self.calls = 0
            self.accepted: list[int] = []
            self.closed = False

        def export(self, batch: Sequence[ReadableLogRecord]) -> LogRecordExportResult:
            self.calls += 1
            if self.calls == 1:
                raise RuntimeError("not an OSError: a bug in a transport")
            if self.calls == 2:
                raise ValueError("a malformed answer")
            if self.calls == 3:
                return LogRecordExportResult.FAILURE
            self.accepted += [int(r.log_record.attributes["connect.audit_id"]) for r in batch]  # type: ignore[arg-type,index]
            return LogRecordExportResult.SUCCESS

        def shutdown(self) -> None:
            self.closed = True

    store.apply(audits(12))
    flaky = Flaky()
    exporter = OtlpExporter("http://127.0.0.1:9", store, interval=0.01, max_backoff=0.05, exporter=flaky)

    async def main() -> None:
        with anyio.move_on_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(exporter.run)
                while len(flaky.accepted) < 12:
                    await anyio.sleep(0.01)
                tg.cancel_scope.cancel()

    anyio.run(main)
    assert flaky.accepted == list(range(1, 13)) and exporter.failures == 3


def _refuse_a_launch(d: DaemonProcess, n: int) -> None:
    """An owner action the daemon audits (a refused launch), to grow the log while it runs."""
    for i in range(n):
        d.api("POST", "/api/launch", {"launcher": f"no-such-{i}", "connect": "off", "cwd": str(d.workdir)}, expect=404)


def test_collector_down_then_up_loses_nothing_and_a_restart_sends_nothing_twice(tmp_path: Path, collector: Collector) -> None:
    with Store.open(tmp_path / "data") as store:  # a history from before the exporter was configured
        store.apply(audits(700))

    def stored_ids() -> list[int]:
        with Store.open(tmp_path / "data") as store:
            return [row.id for row in store.audit(limit=100_000)]

    with TmuxServer("connect-otlp") as tmux:
        tmux.new_session("main", width=120, height=30)
        d = DaemonProcess(tmp_path, tmux, extra_args=("--otlp-endpoint", collector.endpoint)).start()
        try:
            _refuse_a_launch(d, 3)
            time.sleep(3.0)  # the collector is away: the exporter fails and retries
            assert d.proc is not None and d.proc.poll() is None, d.log_text()
            assert collector.records == []

            collector.up()
            wait_for(lambda: set(collector.audit_ids()) >= set(stored_ids()), 30, "the backlog at the collector")

            collector.fail_with = 503  # failing: the new records wait in the store
            _refuse_a_launch(d, 2)
            time.sleep(2.5)
            assert d.proc.poll() is None, d.log_text()
            collector.fail_with = None
            wait_for(lambda: set(collector.audit_ids()) >= set(stored_ids()), 30, "records from the failing spell")
        finally:
            d.stop()

        before_restart = collector.audit_ids()
        d.start()
        try:
            _refuse_a_launch(d, 2)
            wait_for(lambda: set(collector.audit_ids()) >= set(stored_ids()), 30, "records after the restart")
        finally:
            d.stop()

    ids = collector.audit_ids()
    assert len(ids) == len(set(ids)), "an audit record was exported twice"
    assert sorted(ids) == stored_ids() and len(ids) > len(before_restart) > 700
    assert any(r.get("connect.action") == "launch" and r.get("connect.outcome") == "refused" for r in collector.records)


def test_agent_text_reaches_the_collector_with_its_controls_visible(store: Store, collector: Collector) -> None:
    """Issue 21 item 6: a target or detail of escape sequences is exported with them as visible escapes."""
    hiding = "\r\x1b[2K\x1b[99A\x1b[J\u202e"
    store.apply([Audit(actor="agent:claude:hider", action="get_agent", outcome="allowed", target=hiding,
                       detail="d\x1b]8;;file:///x\x07", at=1000.0)])
    collector.up()
    assert OtlpExporter(collector.endpoint, store, timeout=2.0).export_once() == 1
    (record,) = collector.records
    assert record["connect.target"] == "\\x0d\\x1b[2K\\x1b[99A\\x1b[J\\u202e"
    assert record["connect.detail"] == "d\\x1b]8;;file:///x\\x07"
    assert store.audit(limit=10)[0].target == hiding  # stored as sent
