"""A tiny OTLP/HTTP logs collector on loopback, for the exporter's tests.

It accepts ``POST /v1/logs`` (protobuf ``ExportLogsServiceRequest``, as the OpenTelemetry SDK sends
it), keeps every log record's attributes, and can be down (its port bound but not listening, so a
connection is refused and the port stays ours) or made to fail (answer a status of the test's choice).
"""

from __future__ import annotations

import http.server
import socket
import threading
from typing import Any

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest


class Collector:
    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.records: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self.fail_with: int | None = None  # answer this status instead of accepting
        self.refused = 0
        self._lock = threading.Lock()
        self._server: http.server.ThreadingHTTPServer | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def up(self) -> Collector:
        collector = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with collector._lock:
                    collector.paths.append(self.path)
                    if collector.fail_with is not None:
                        collector.refused += 1
                        self.send_response(collector.fail_with)
                        self.end_headers()
                        return
                    request = ExportLogsServiceRequest.FromString(body)
                    for resource_logs in request.resource_logs:
                        service = {kv.key: kv.value.string_value for kv in resource_logs.resource.attributes}
                        for scope_logs in resource_logs.scope_logs:
                            for record in scope_logs.log_records:
                                attrs: dict[str, Any] = {"service.name": service.get("service.name"),
                                                         "scope": scope_logs.scope.name, "body": record.body.string_value}
                                for kv in record.attributes:
                                    attrs[kv.key] = kv.value.int_value if kv.value.HasField("int_value") else kv.value.string_value
                                collector.records.append(attrs)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.sock.listen(16)
        server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler, bind_and_activate=False)
        server.socket.close()
        server.socket = self.sock
        self._server = server
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return self

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
        self.sock.close()

    def audit_ids(self) -> list[int]:
        with self._lock:
            return [int(r["connect.audit_id"]) for r in self.records]
