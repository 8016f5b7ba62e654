"""A scripted model server for tests: real Claude Code and Codex talk to it instead of a vendor.

Loopback only (``127.0.0.1``, port chosen by the kernel). It speaks the subset of two wire APIs the
harnesses use:

- Anthropic Messages (Claude Code): ``POST /v1/messages`` (also ``?beta=true``), streaming SSE
  (``message_start``, ``content_block_start/delta/stop``, ``message_delta``, ``message_stop``) or a
  plain JSON message when ``stream`` is false; ``POST /v1/messages/count_tokens``.
- OpenAI Responses (Codex): ``POST /v1/responses`` streaming SSE (``response.created``, ...,
  ``response.output_item.done``, ``response.completed``), every event with a ``sequence_number``.

Each test scripts what the model does, per harness, as a queue of :class:`Turn` values: text at a
chosen speed, tool calls (MCP tools included), an HTTP error, a dropped connection, or a stream held
open until the test releases a :class:`Gate`. A request that finds its queue empty gets the
harness's default turn (a short text reply). Claude Code also sends side requests (title and topic
generation, quota checks); those never consume the script (see :func:`is_side_request`).

Every request is recorded (:attr:`ModelServer.requests`) so a test can check what the model saw.

    with ModelServer() as server:
        server.script("claude", [Turn.reply("Hello", chunk_delay=0.05),
                                 Turn.tool(ToolCall("send_message", {"to": "b"}, namespace="mcp__connect"))])
        env = {"ANTHROPIC_BASE_URL": server.url, ...}
        ...
        assert "mcp__connect__send_message" in server.requests_for("claude")[-1].tool_names
"""

from __future__ import annotations

import contextlib
import itertools
import json
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

HARNESSES = ("claude", "codex")
API_OF = {"claude": "anthropic", "codex": "openai"}

# --------------------------------------------------------------------------------------------------
# Script values
# --------------------------------------------------------------------------------------------------


class Gate:
    """Holds a streaming turn open (the harness shows its busy screen) until :meth:`release`."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.reached = threading.Event()  # set once a request is being held at this gate

    def release(self) -> None:
        self._event.set()

    @property
    def released(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float) -> bool:
        return self._event.wait(timeout)


@dataclass(frozen=True)
class ToolCall:
    """One tool call the model makes.

    ``namespace`` is how MCP tools are addressed: Claude Code sees one flat name
    (``mcp__connect__send_message`` = ``namespace + "__" + name``), Codex sees ``name`` inside the
    ``namespace`` (``"name": "send_message", "namespace": "mcp__connect"``). Give both and the same
    call works for either harness; a built-in tool (``Bash``, ``shell_command``) has no namespace.
    """

    name: str
    input: Mapping[str, Any] = field(default_factory=dict)
    namespace: str | None = None
    id: str | None = None

    @property
    def flat_name(self) -> str:
        return f"{self.namespace}__{self.name}" if self.namespace else self.name


@dataclass(frozen=True)
class Turn:
    """What the model does for one request.

    - ``text`` streamed in pieces of ``chunk_chars`` with ``chunk_delay`` seconds between them;
    - ``tool_calls`` after the text (stop reason ``tool_use``);
    - ``status``: answer with this HTTP error instead (500, 529 ...), no stream;
    - ``drop``: close the connection without any answer;
    - ``cut``: start the stream (``message_start`` / ``response.created``), then close the
      connection before any content (a stream error: Codex shows "Reconnecting...");
    - ``hold``: after the stream has started, wait for the gate before sending the content;
    - ``times``: the turn answers this many requests before the next one in the queue;
    - ``decide``: the turn is made from the request when it arrives (``decide(request)`` returns the
      turn to answer with), so a scripted model can act on a tool result it was just given.
    """

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    chunk_chars: int = 12
    chunk_delay: float = 0.0
    status: int | None = None
    error_message: str = "Overloaded"
    drop: bool = False
    cut: bool = False
    hold: Gate | None = None
    times: int = 1
    decide: Callable[[Request], Turn] | None = None

    @classmethod
    def reply(cls, text: str, *, chunk_delay: float = 0.0, chunk_chars: int = 12,
              hold: Gate | None = None) -> Turn:
        return cls(text=text, chunk_delay=chunk_delay, chunk_chars=chunk_chars, hold=hold)

    @classmethod
    def tool(cls, *calls: ToolCall, text: str = "") -> Turn:
        return cls(text=text, tool_calls=tuple(calls))

    @classmethod
    def fail(cls, status: int = 529, message: str = "Overloaded", *, times: int = 1) -> Turn:
        return cls(status=status, error_message=message, times=times)

    @classmethod
    def disconnect(cls, *, times: int = 1) -> Turn:
        return cls(drop=True, times=times)

    @classmethod
    def cut_off(cls, *, times: int = 1) -> Turn:
        return cls(cut=True, times=times)

    @classmethod
    def held(cls, gate: Gate, text: str = "Done.") -> Turn:
        return cls(text=text, hold=gate)

    @classmethod
    def deciding(cls, decide: Callable[[Request], Turn]) -> Turn:
        """A turn the model makes up when the request arrives, from what the request carries."""
        return cls(decide=decide)


DEFAULT_TURN = Turn.reply("OK.")


@dataclass(frozen=True)
class Request:
    """One recorded request."""

    harness: str  # "claude" | "codex" | "" (unknown path)
    method: str
    path: str
    query: Mapping[str, list[str]]
    headers: Mapping[str, str]
    body: Any
    scripted: bool  # True when it consumed (or could have consumed) a scripted turn
    at: float = 0.0  # wall time (``time.time()``) the request arrived, before its body was read

    @property
    def api_key(self) -> str | None:
        key = self.headers.get("x-api-key")
        if key:
            return key
        auth = self.headers.get("authorization", "")
        return auth[7:] if auth.lower().startswith("bearer ") else None

    @property
    def tool_names(self) -> list[str]:
        """Every tool name offered to the model, MCP tools as ``namespace__name`` for both APIs."""
        tools = self.body.get("tools") if isinstance(self.body, dict) else None
        names: list[str] = []
        for tool in tools or ():
            if not isinstance(tool, dict):
                continue
            if tool.get("type") == "namespace" or "tools" in tool:
                prefix = tool.get("name", "")
                for inner in tool.get("tools", ()):
                    if isinstance(inner, dict) and "name" in inner:
                        names.append(f"{prefix}__{inner['name']}" if prefix else inner["name"])
            elif "name" in tool:
                names.append(tool["name"])
        return names

    @property
    def user_texts(self) -> list[str]:
        """The text of every user message in the request, in order."""
        return [text for role, text in _message_texts(self.body) if role == "user"]

    @property
    def text(self) -> str:
        """The whole request body as JSON text, for "did the model see X" checks."""
        return json.dumps(self.body, ensure_ascii=False)


def _message_texts(body: Any) -> Iterator[tuple[str, str]]:
    if not isinstance(body, dict):
        return
    items = body.get("messages") or body.get("input") or []
    if isinstance(items, str):
        yield "user", items
        return
    for item in items:
        if not isinstance(item, dict):
            continue
        role = item.get("role", "")
        content = item.get("content")
        if isinstance(content, str):
            yield role, content
            continue
        for part in content or ():
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                yield role, part["text"]


def is_side_request(harness: str, body: Any) -> bool:
    """A harness's background request, which never consumes the script.

    Claude Code's background requests (session title, topic, quota probe) carry no tools; its main
    loop always offers tools. Codex's thread-title request asks for structured output
    (``text.format`` of type ``json_schema``) and offers no tools.
    """
    if not isinstance(body, dict):
        return False
    if harness == "claude":
        return not body.get("tools")
    if harness == "codex":
        fmt = (body.get("text") or {}).get("format") or {}
        return fmt.get("type") == "json_schema" or not body.get("tools")
    return False


def _side_answer(harness: str, body: Any) -> Turn:
    """Answer a side request so the harness is content: Codex's title request wants JSON."""
    if harness == "codex" and isinstance(body, dict):
        schema = (((body.get("text") or {}).get("format") or {}).get("schema") or {})
        props = schema.get("properties") or {}
        return Turn.reply(json.dumps({key: "Scripted task" for key in props}))
    return DEFAULT_TURN


# --------------------------------------------------------------------------------------------------
# Server
# --------------------------------------------------------------------------------------------------


class ModelServer:
    """The scripted server. ``start()`` returns the base URL (``http://127.0.0.1:PORT``).

    Claude Code: ``ANTHROPIC_BASE_URL=<url>``. Codex: a model provider with ``base_url=<url>/v1``.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queues: dict[tuple[str, str | None], deque[list[Any]]] = {}
        self._defaults: dict[str, Turn] = dict.fromkeys(HARNESSES, DEFAULT_TURN)
        self._requests: list[Request] = []
        self._gates: list[Gate] = []
        self._ids = itertools.count(1)
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.stopping = threading.Event()
        self.url = ""

    # lifecycle ------------------------------------------------------------------------------------

    def start(self) -> str:
        if self._httpd is not None:
            raise RuntimeError("model server already started")
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        httpd = _HTTPServer(("127.0.0.1", 0), _Handler, bind_and_activate=False)
        httpd.socket.close()
        httpd.socket = sock
        httpd.server_address = sock.getsockname()
        httpd.server_activate()
        httpd.model = self
        self._httpd = httpd
        host, port = httpd.server_address[:2]
        self.url = f"http://{host}:{port}"
        self._thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="model-server", daemon=True)
        self._thread.start()
        return self.url

    def stop(self) -> None:
        self.stopping.set()
        with self._lock:
            gates = list(self._gates)
        for gate in gates:
            gate.release()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> ModelServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    # scripting ------------------------------------------------------------------------------------

    def script(self, harness: str, turns: Iterable[Turn], *, api_key: str | None = None) -> None:
        """Append turns to ``harness``'s queue. With ``api_key``, only requests carrying that key
        consume them (several agents of one harness on one server); otherwise any request does
        (keyed queues are tried first)."""
        _check_harness(harness)
        turns = list(turns)
        for turn in turns:
            if not isinstance(turn, Turn):
                raise TypeError(f"script() takes Turn values, got {type(turn).__name__}")
            if turn.times < 1:
                raise ValueError("Turn.times must be at least 1")
        with self._lock:
            queue = self._queues.setdefault((harness, api_key), deque())
            for turn in turns:
                queue.append([turn, turn.times])
                if turn.hold is not None:
                    self._gates.append(turn.hold)

    def clear_script(self, harness: str | None = None) -> None:
        """Drop every queued turn (of one harness, or all)."""
        with self._lock:
            for key in list(self._queues):
                if harness is None or key[0] == harness:
                    del self._queues[key]

    def set_default(self, harness: str, turn: Turn) -> None:
        """What a request gets when its queue is empty (default: ``Turn.reply("OK.")``)."""
        _check_harness(harness)
        with self._lock:
            self._defaults[harness] = turn
            if turn.hold is not None:
                self._gates.append(turn.hold)

    def pending(self, harness: str, *, api_key: str | None = None) -> int:
        """How many scripted answers are still queued."""
        with self._lock:
            return sum(left for _, left in self._queues.get((harness, api_key), ()))

    @property
    def requests(self) -> list[Request]:
        with self._lock:
            return list(self._requests)

    def requests_for(self, harness: str, *, scripted_only: bool = True) -> list[Request]:
        return [r for r in self.requests if r.harness == harness and (r.scripted or not scripted_only)]

    def wait_for_requests(self, harness: str, count: int, timeout: float = 30.0) -> list[Request]:
        """Block until ``count`` scripted requests of ``harness`` arrived (a test's deadline)."""
        deadline = time.monotonic() + timeout
        while True:
            found = self.requests_for(harness)
            if len(found) >= count:
                return found
            if time.monotonic() > deadline:
                raise TimeoutError(f"{harness}: {len(found)} of {count} requests after {timeout}s")
            time.sleep(0.02)

    # internals ------------------------------------------------------------------------------------

    def _record(self, request: Request) -> None:
        with self._lock:
            self._requests.append(request)

    def _next_turn(self, harness: str, api_key: str | None) -> Turn:
        with self._lock:
            for key in ((harness, api_key), (harness, None)):
                queue = self._queues.get(key)
                if queue:
                    entry = queue[0]
                    entry[1] -= 1
                    if entry[1] <= 0:
                        queue.popleft()
                    turn: Turn = entry[0]
                    return turn
            return self._defaults[harness]

    def new_id(self, prefix: str) -> str:
        return f"{prefix}_{next(self._ids):06d}"


def _check_harness(harness: str) -> None:
    if harness not in HARNESSES:
        raise ValueError(f"unknown harness {harness!r}: expected one of {', '.join(HARNESSES)}")


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    model: ModelServer


class _Dropped(Exception):
    pass


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass

    # routing ---------------------------------------------------------------------------------------

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        parts = urlsplit(self.path)
        self._read_body()
        self.server.model._record(Request("", "GET", parts.path, parse_qs(parts.query),
                                          self._headers(), None, False))
        if parts.path.rstrip("/") == "/v1/models":
            self._json(200, {"object": "list", "data": [], "models": []})
        else:
            self._json(404, {"error": {"type": "not_found_error", "message": f"no route {parts.path}"}})

    def do_HEAD(self) -> None:  # noqa: N802
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self) -> None:  # noqa: N802
        arrived = time.time()
        model = self.server.model
        parts = urlsplit(self.path)
        raw = self._read_body()
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        path = parts.path.rstrip("/")
        harness = {"/v1/messages": "claude", "/v1/responses": "codex",
                   "/responses": "codex", "/messages": "claude"}.get(path, "")
        headers = self._headers()
        scripted = bool(harness) and not is_side_request(harness, body)
        request = Request(harness, "POST", parts.path, parse_qs(parts.query), headers, body, scripted, arrived)
        model._record(request)
        if path.endswith("/messages/count_tokens"):
            self._json(200, {"input_tokens": max(1, len(raw) // 4)})
            return
        if not harness:
            self._json(404, {"error": {"type": "not_found_error", "message": f"no route {parts.path}"}})
            return
        turn = model._next_turn(harness, request.api_key) if scripted else _side_answer(harness, body)
        if turn.decide is not None:
            turn = turn.decide(request)
        stream = isinstance(body, dict) and bool(body.get("stream"))
        try:
            if turn.drop:
                raise _Dropped
            if turn.status is not None:
                self._error(harness, turn)
            elif harness == "claude":
                self._anthropic(body, turn, stream)
            else:
                self._responses(body, turn, stream)
        except _Dropped:
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    # helpers ---------------------------------------------------------------------------------------

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        return self.rfile.read(length) if length else b""

    def _headers(self) -> dict[str, str]:
        return {k.lower(): v for k, v in self.headers.items()}

    def _json(self, status: int, payload: Any, extra: Mapping[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (extra or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _error(self, harness: str, turn: Turn) -> None:
        assert turn.status is not None
        if harness == "claude":
            kind = {400: "invalid_request_error", 401: "authentication_error", 429: "rate_limit_error",
                    529: "overloaded_error"}.get(turn.status, "api_error")
            payload: Any = {"type": "error", "error": {"type": kind, "message": turn.error_message}}
        else:
            payload = {"error": {"type": "server_error", "code": "server_error",
                                 "message": turn.error_message}}
        self._json(turn.status, payload)

    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _event(self, name: str, data: Mapping[str, Any]) -> None:
        payload = f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()
        self.wfile.write(b"%x\r\n%s\r\n" % (len(payload), payload))
        self.wfile.flush()

    def _comment(self) -> None:
        payload = b": keep-alive\n\n"
        self.wfile.write(b"%x\r\n%s\r\n" % (len(payload), payload))
        self.wfile.flush()

    def _end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _hold(self, turn: Turn, ping: Any) -> None:
        """Keep the stream open until the gate opens; ``ping()`` every second keeps it alive."""
        gate = turn.hold
        if gate is None:
            return
        gate.reached.set()
        model = self.server.model
        while not gate.wait(1.0):
            if model.stopping.is_set():
                raise _Dropped
            ping()

    def _pause(self, turn: Turn) -> None:
        if turn.chunk_delay > 0 and self.server.model.stopping.wait(turn.chunk_delay):
            raise _Dropped

    # Anthropic Messages ----------------------------------------------------------------------------

    def _anthropic(self, body: Any, turn: Turn, stream: bool) -> None:
        model = self.server.model
        model_name = body.get("model", "claude-scripted") if isinstance(body, dict) else "claude-scripted"
        msg_id = model.new_id("msg")
        calls = [(call, call.id or model.new_id("toolu")) for call in turn.tool_calls]
        stop_reason = "tool_use" if calls else "end_turn"
        usage_in = {"input_tokens": 10, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
                    "output_tokens": 1}
        if not stream:
            content: list[dict[str, Any]] = []
            if turn.text:
                content.append({"type": "text", "text": turn.text})
            content += [{"type": "tool_use", "id": cid, "name": c.flat_name, "input": dict(c.input)}
                        for c, cid in calls]
            self._hold(turn, lambda: None)
            self._json(200, {"id": msg_id, "type": "message", "role": "assistant", "model": model_name,
                             "content": content, "stop_reason": stop_reason, "stop_sequence": None,
                             "usage": {**usage_in, "output_tokens": max(1, len(turn.text) // 4)}})
            return
        self._start_stream()
        self._event("message_start", {"type": "message_start", "message": {
            "id": msg_id, "type": "message", "role": "assistant", "model": model_name, "content": [],
            "stop_reason": None, "stop_sequence": None, "usage": usage_in}})
        self._hold(turn, lambda: self._event("ping", {"type": "ping"}))
        if turn.cut:
            raise _Dropped
        index = 0
        if turn.text:
            self._event("content_block_start", {"type": "content_block_start", "index": index,
                                                "content_block": {"type": "text", "text": ""}})
            for piece in _chunks(turn.text, turn.chunk_chars):
                self._pause(turn)
                self._event("content_block_delta", {"type": "content_block_delta", "index": index,
                                                    "delta": {"type": "text_delta", "text": piece}})
            self._event("content_block_stop", {"type": "content_block_stop", "index": index})
            index += 1
        for call, cid in calls:
            self._event("content_block_start", {"type": "content_block_start", "index": index,
                                                "content_block": {"type": "tool_use", "id": cid,
                                                                  "name": call.flat_name, "input": {}}})
            for piece in _chunks(json.dumps(dict(call.input)), 40):
                self._pause(turn)
                self._event("content_block_delta", {"type": "content_block_delta", "index": index,
                                                    "delta": {"type": "input_json_delta",
                                                              "partial_json": piece}})
            self._event("content_block_stop", {"type": "content_block_stop", "index": index})
            index += 1
        self._event("message_delta", {"type": "message_delta",
                                      "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                                      "usage": {"output_tokens": max(1, len(turn.text) // 4)}})
        self._event("message_stop", {"type": "message_stop"})
        self._end_stream()

    # OpenAI Responses ------------------------------------------------------------------------------

    def _responses(self, body: Any, turn: Turn, stream: bool) -> None:
        model = self.server.model
        model_name = body.get("model", "gpt-scripted") if isinstance(body, dict) else "gpt-scripted"
        resp_id = model.new_id("resp")
        seq = itertools.count()
        items: list[dict[str, Any]] = []
        usage = {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0},
                 "output_tokens": max(1, len(turn.text) // 4),
                 "output_tokens_details": {"reasoning_tokens": 0},
                 "total_tokens": 10 + max(1, len(turn.text) // 4)}

        def response(status: str, output: list[dict[str, Any]]) -> dict[str, Any]:
            out: dict[str, Any] = {"id": resp_id, "object": "response", "created_at": int(time.time()),
                                   "status": status, "model": model_name, "output": output}
            if status == "completed":
                out["usage"] = usage
            return out

        message_item: dict[str, Any] | None = None
        if turn.text:
            message_item = {"id": model.new_id("msg"), "type": "message", "status": "completed",
                            "role": "assistant",
                            "content": [{"type": "output_text", "text": turn.text, "annotations": []}]}
            items.append(message_item)
        call_items = []
        for call in turn.tool_calls:
            item: dict[str, Any] = {"id": model.new_id("fc"), "type": "function_call", "status": "completed",
                                    "call_id": call.id or model.new_id("call"), "name": call.name,
                                    "arguments": json.dumps(dict(call.input))}
            if call.namespace:
                item["namespace"] = call.namespace
            call_items.append(item)
            items.append(item)
        if not stream:
            self._hold(turn, lambda: None)
            self._json(200, response("completed", items))
            return

        def event(name: str, data: dict[str, Any]) -> None:
            self._event(name, {"type": name, "sequence_number": next(seq), **data})

        self._start_stream()
        event("response.created", {"response": response("in_progress", [])})
        event("response.in_progress", {"response": response("in_progress", [])})
        self._hold(turn, self._comment)
        if turn.cut:
            raise _Dropped
        index = 0
        if message_item is not None:
            mid = message_item["id"]
            event("response.output_item.added", {"output_index": index, "item": {
                **message_item, "status": "in_progress", "content": []}})
            part = {"type": "output_text", "text": "", "annotations": []}
            event("response.content_part.added", {"item_id": mid, "output_index": index, "content_index": 0,
                                                  "part": part})
            for piece in _chunks(turn.text, turn.chunk_chars):
                self._pause(turn)
                event("response.output_text.delta", {"item_id": mid, "output_index": index,
                                                     "content_index": 0, "delta": piece, "logprobs": []})
            event("response.output_text.done", {"item_id": mid, "output_index": index, "content_index": 0,
                                                "text": turn.text, "logprobs": []})
            event("response.content_part.done", {"item_id": mid, "output_index": index, "content_index": 0,
                                                 "part": {**part, "text": turn.text}})
            event("response.output_item.done", {"output_index": index, "item": message_item})
            index += 1
        for item in call_items:
            event("response.output_item.added", {"output_index": index, "item": {
                **item, "status": "in_progress", "arguments": ""}})
            for piece in _chunks(item["arguments"], 40):
                self._pause(turn)
                event("response.function_call_arguments.delta", {"item_id": item["id"], "output_index": index,
                                                                 "delta": piece})
            event("response.function_call_arguments.done", {"item_id": item["id"], "output_index": index,
                                                            "arguments": item["arguments"]})
            event("response.output_item.done", {"output_index": index, "item": item})
            index += 1
        event("response.completed", {"response": response("completed", items)})
        self._end_stream()


def _chunks(text: str, size: int) -> Iterator[str]:
    size = max(1, size)
    for start in range(0, len(text), size):
        yield text[start:start + size]
