"""A stand-in for OpenCode's own server, run as the pane's process: ``python -m
tests.support.fake_opencode_server PORT PASSWORD DIRECTORY``. It listens on 127.0.0.1:PORT, demands
basic auth ``opencode:PASSWORD`` (401 otherwise, as OpenCode 1.18.33 does), answers ``POST /session``
with a root session for DIRECTORY and ``POST /tui/select-session`` with ``true``, and prints each
request it served (``create ses_...``, ``select ses_...``) so a test can read them off the screen."""

from __future__ import annotations

import base64
import json
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer


def main() -> None:
    port, password, directory = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    expected = "Basic " + base64.b64encode(f"opencode:{password}".encode()).decode()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the http.server API
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            if self.headers.get("Authorization") != expected:
                return self._answer(401, "Unauthorized")
            if self.path.startswith("/session?"):
                sid = "ses_fake0000000000000000000001"
                print(f"create {sid}", flush=True)
                return self._answer(200, {"id": sid, "directory": directory, "title": "New session"})
            if self.path.startswith("/tui/select-session?"):
                print(f"select {json.loads(body)['sessionID']}", flush=True)
                return self._answer(200, True)
            return self._answer(404, "not found")

        def _answer(self, status: int, value: object) -> None:
            data = json.dumps(value).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    print("listening", flush=True)
    HTTPServer(("127.0.0.1", port), Handler).serve_forever()


if __name__ == "__main__":
    main()
