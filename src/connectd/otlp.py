"""Optional export of the audit log to an OpenTelemetry collector (OTLP/HTTP, JSON logs).

Audit records ship off the box so an agent cannot erase its trail. Off unless an endpoint is
configured (``connectd serve --otlp-endpoint http://127.0.0.1:4318``). Records are queued in memory
(bounded: the oldest are dropped, and counted, when the collector is away) and posted in batches by
one task in the daemon's task group; the store stays the record of truth.
"""

from __future__ import annotations

import json
import logging
import urllib.request
from collections import deque
from typing import Any

import anyio

from connectcore.effects import Audit

log = logging.getLogger("connectd.otlp")
MAX_QUEUED = 10_000
BATCH = 500


class OtlpExporter:
    def __init__(self, endpoint: str, *, interval: float = 1.0, service: str = "connectd") -> None:
        self.url = endpoint.rstrip("/") + "/v1/logs"
        self.interval = interval
        self.service = service
        self.queue: deque[Audit] = deque(maxlen=MAX_QUEUED)
        self.dropped = 0
        self.sent = 0

    def submit(self, record: Audit) -> None:
        if len(self.queue) == self.queue.maxlen:
            self.dropped += 1
        self.queue.append(record)

    async def run(self) -> None:
        while True:
            await anyio.sleep(self.interval)
            await self.flush()

    async def flush(self) -> None:
        while self.queue:
            batch = [self.queue.popleft() for _ in range(min(BATCH, len(self.queue)))]
            try:
                await anyio.to_thread.run_sync(self._post, batch)
                self.sent += len(batch)
            except Exception as exc:  # any failure keeps the batch queued; the next round retries
                self.queue.extendleft(reversed(batch))
                log.warning("OTLP export to %s failed: %s", self.url, exc)
                return

    def _post(self, batch: list[Audit]) -> None:
        body = json.dumps(self.payload(batch)).encode()
        request = urllib.request.Request(self.url, data=body, method="POST", headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as response:
            response.read()

    def payload(self, batch: list[Audit]) -> dict[str, Any]:
        def attr(key: str, value: object) -> dict[str, Any]:
            return {"key": key, "value": {"stringValue": str(value)}}

        records = [
            {
                "timeUnixNano": str(int(r.at * 1e9)),
                "severityText": "INFO",
                "body": {"stringValue": f"{r.actor} {r.action} {r.outcome}"},
                "attributes": [
                    attr(f"connect.{k}", v)
                    for k, v in (
                        ("actor", r.actor), ("action", r.action), ("outcome", r.outcome), ("scope", r.scope),
                        ("target", r.target), ("message_id", r.message_id), ("detail", r.detail),
                    )
                    if v
                ],
            }
            for r in batch
        ]
        return {
            "resourceLogs": [
                {
                    "resource": {"attributes": [attr("service.name", self.service)]},
                    "scopeLogs": [{"scope": {"name": "connect.audit"}, "logRecords": records}],
                }
            ]
        }
