"""Optional export of the audit log to an OpenTelemetry collector (OTLP/HTTP logs).

Audit records ship off the box so an agent cannot erase its trail. Off unless an endpoint is
configured (``connectd serve --otlp-endpoint http://127.0.0.1:4318``). The wire format, encoding and
per-request retries are the OpenTelemetry SDK's (``OTLPLogExporter`` from
``opentelemetry-exporter-otlp-proto-http``, protobuf over HTTP to ``<endpoint>/v1/logs``).

Rules (issue 14, item 5):

- The store is the queue. The exporter reads the audit table in id order, ``BATCH`` records at a
  time, from a cursor kept in SQLite (``export_cursors``, one per destination URL); the cursor moves
  only after the collector accepted the batch. Nothing is held in memory, so nothing is dropped when
  the collector is away and nothing is lost when the daemon restarts: export resumes from the cursor.
- A batch the collector refused, or any error at all (connection refused, a 5xx, a malformed answer,
  an exception from the SDK), is logged and retried with a backoff (``interval`` doubling up to
  ``max_backoff``); it never ends the daemon.
- Delivery is at least once: a daemon killed between the collector's answer and the cursor's commit
  sends that batch again. Each record carries ``connect.audit_id`` so a collector can drop repeats.
  A daemon stopped normally sends nothing twice.
- A destination seen for the first time gets the whole audit history (the cursor starts at 0).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Protocol

import anyio
from opentelemetry._logs import LogRecord, SeverityNumber
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.sdk._logs import ReadableLogRecord
from opentelemetry.sdk._logs.export import LogRecordExportResult
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from connectd.cli.safetext import visible
from connectd.store.store import AuditRow, Store

log = logging.getLogger("connectd.otlp")
BATCH = 500
SCOPE = "connect.audit"


class LogExporter(Protocol):
    def export(self, batch: Sequence[ReadableLogRecord]) -> LogRecordExportResult: ...

    def shutdown(self) -> None: ...


class ExportFailed(Exception):
    """The collector did not accept a batch; the cursor stays where it was."""


def logs_url(endpoint: str) -> str:
    """``http://host:4318`` -> ``http://host:4318/v1/logs`` (a URL already naming /v1/logs is kept)."""
    endpoint = endpoint.rstrip("/")
    return endpoint if endpoint.endswith("/v1/logs") else endpoint + "/v1/logs"


class OtlpExporter:
    def __init__(
        self,
        endpoint: str,
        store: Store,
        *,
        interval: float = 1.0,
        max_backoff: float = 5.0,
        timeout: float = 5.0,
        service: str = "connectd",
        exporter: LogExporter | None = None,
    ) -> None:
        self.url = logs_url(endpoint)
        self.store = store
        self.interval = interval
        self.max_backoff = max_backoff
        self.cursor_name = f"otlp:{self.url}"
        self.exporter: LogExporter = exporter or OTLPLogExporter(endpoint=self.url, timeout=timeout)
        self.resource = Resource.create({"service.name": service})
        self.scope = InstrumentationScope(SCOPE)
        self.sent = 0
        self.failures = 0

    async def run(self) -> None:
        """Ship every audit record, forever: a full batch is followed at once, an error backs off."""
        delay = self.interval
        while True:  # the exporter stays usable: the supervisor may call run() again after a crash
            await anyio.sleep(delay)
            try:
                shipped = await anyio.to_thread.run_sync(self.export_once)
            except Exception as exc:  # nothing a collector does ends the daemon: log, back off, retry
                self.failures += 1
                delay = min(self.max_backoff, max(delay, self.interval) * 2)
                log.warning("OTLP export to %s failed (retrying in %.0fs): %s", self.url, delay, exc)
                continue
            delay = 0.0 if shipped == BATCH else self.interval

    def export_once(self) -> int:
        """Send the next batch after the cursor and move the cursor past it; how many were sent."""
        after = self.store.export_cursor(self.cursor_name)
        rows = self.store.audit(after_id=after, limit=BATCH)
        if not rows:
            return 0
        result = self.exporter.export([self.record(row) for row in rows])
        if result is not LogRecordExportResult.SUCCESS:
            raise ExportFailed(f"the collector did not accept audit records {rows[0].id}..{rows[-1].id}")
        self.store.set_export_cursor(self.cursor_name, rows[-1].id, updated_at=time.time())
        self.sent += len(rows)
        return len(rows)

    def record(self, row: AuditRow) -> ReadableLogRecord:
        attributes: dict[str, str | int] = {"connect.audit_id": row.id}
        for key, value in (
            ("actor", row.actor), ("action", row.action), ("outcome", row.outcome), ("scope", row.scope),
            ("target", row.target), ("message_id", row.message_id), ("detail", row.detail),
        ):
            if value:  # agent-supplied text, its controls/bidi/zero-width made visible (stored as sent)
                attributes[f"connect.{key}"] = visible(value)
        at = int(row.at * 1e9)
        return ReadableLogRecord(
            LogRecord(
                timestamp=at,
                observed_timestamp=at,
                severity_text="INFO",
                severity_number=SeverityNumber.INFO,
                body=visible(f"{row.actor} {row.action} {row.outcome}"),
                attributes=attributes,
            ),
            resource=self.resource,
            instrumentation_scope=self.scope,
        )
