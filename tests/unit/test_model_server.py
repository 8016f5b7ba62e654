"""The scripted model server, exercised over real HTTP on 127.0.0.1 with a stdlib client."""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.model_server import Gate, ModelServer, ToolCall, Turn, is_side_request

TOOLS = [{"name": "Bash", "input_schema": {"type": "object"}}]


@pytest.fixture
def server() -> Iterator[ModelServer]:
    with ModelServer() as srv:
        yield srv


def post(server: ModelServer, path: str, body: Any, headers: dict[str, str] | None = None,
         timeout: float = 10.0) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=timeout)
    try:
        conn.request("POST", path, json.dumps(body).encode(),
                     {"Content-Type": "application/json", **(headers or {})})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def sse(data: bytes) -> list[tuple[str, dict[str, Any]]]:
    events = []
    for block in data.decode().split("\n\n"):
        if not block.strip() or block.startswith(":"):
            continue
        name = data_line = ""
        for line in block.splitlines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                data_line = line[6:]
        events.append((name, json.loads(data_line)))
    return events


def claude_body(text: str = "hi", stream: bool = True, tools: list[Any] | None = TOOLS) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "claude-x", "max_tokens": 100, "stream": stream,
                            "messages": [{"role": "user", "content": [{"type": "text", "text": text}]}]}
    if tools is not None:
        body["tools"] = tools
    return body


def codex_body(text: str = "hi", tools: list[Any] | None = None) -> dict[str, Any]:
    return {"model": "gpt-x", "stream": True,
            "tools": tools if tools is not None else [{"type": "function", "name": "exec_command"}],
            "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}]}


def anthropic_text(events: list[tuple[str, dict[str, Any]]]) -> str:
    return "".join(e["delta"]["text"] for n, e in events
                   if n == "content_block_delta" and e["delta"]["type"] == "text_delta")


# --- Anthropic Messages ---------------------------------------------------------------------------


def test_listens_on_loopback_only(server: ModelServer) -> None:
    assert server.url.startswith("http://127.0.0.1:")


def test_anthropic_streams_scripted_text_in_chunks(server: ModelServer) -> None:
    server.script("claude", [Turn.reply("Hello, scripted world", chunk_chars=5)])
    status, headers, data = post(server, "/v1/messages?beta=true", claude_body("say hi"))
    assert status == 200 and headers["content-type"] == "text/event-stream"
    events = sse(data)
    names = [n for n, _ in events]
    assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"]
    assert names.count("content_block_delta") == 5  # 21 characters in pieces of 5
    assert anthropic_text(events) == "Hello, scripted world"
    assert events[-2][1]["delta"]["stop_reason"] == "end_turn"
    (request,) = server.requests_for("claude")
    assert request.query == {"beta": ["true"]} and request.user_texts == ["say hi"]


def test_anthropic_tool_call_uses_the_flat_mcp_name(server: ModelServer) -> None:
    call = ToolCall("send_message", {"to": "pane-b", "text": "x" * 90}, namespace="mcp__connect", id="toolu_1")
    server.script("claude", [Turn.tool(call, text="Sending.")])
    _, _, data = post(server, "/v1/messages", claude_body())
    events = sse(data)
    starts = [e["content_block"] for n, e in events if n == "content_block_start"]
    assert starts[1] == {"type": "tool_use", "id": "toolu_1", "name": "mcp__connect__send_message", "input": {}}
    partial = "".join(e["delta"]["partial_json"] for n, e in events
                      if n == "content_block_delta" and e["delta"]["type"] == "input_json_delta")
    assert json.loads(partial) == {"to": "pane-b", "text": "x" * 90}
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"


def test_anthropic_non_streaming_answer_is_one_message(server: ModelServer) -> None:
    server.script("claude", [Turn.tool(ToolCall("Bash", {"command": "ls"}), text="Listing.")])
    status, _, data = post(server, "/v1/messages", claude_body(stream=False))
    message = json.loads(data)
    assert status == 200 and message["stop_reason"] == "tool_use"
    assert [c["type"] for c in message["content"]] == ["text", "tool_use"]
    assert message["content"][1]["input"] == {"command": "ls"}


def test_count_tokens(server: ModelServer) -> None:
    status, _, data = post(server, "/v1/messages/count_tokens", claude_body())
    assert status == 200 and json.loads(data)["input_tokens"] > 0


def test_error_turn_answers_with_status_the_given_number_of_times(server: ModelServer) -> None:
    server.script("claude", [Turn.fail(529, "Overloaded", times=2), Turn.reply("after")])
    for _ in range(2):
        status, _, data = post(server, "/v1/messages", claude_body())
        assert status == 529
        assert json.loads(data) == {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    status, _, data = post(server, "/v1/messages", claude_body())
    assert status == 200 and anthropic_text(sse(data)) == "after"
    assert server.pending("claude") == 0


def test_drop_closes_the_connection_without_an_answer(server: ModelServer) -> None:
    server.script("claude", [Turn.disconnect()])
    with pytest.raises((http.client.RemoteDisconnected, ConnectionResetError)):
        post(server, "/v1/messages", claude_body())
    assert len(server.requests_for("claude")) == 1


def test_cut_starts_the_stream_then_breaks_it(server: ModelServer) -> None:
    server.script("claude", [Turn.cut_off()])
    with pytest.raises(http.client.IncompleteRead) as info:
        post(server, "/v1/messages", claude_body())
    assert b"message_start" in info.value.partial
    assert b"message_stop" not in info.value.partial


def test_held_turn_streams_only_after_release(server: ModelServer) -> None:
    gate = Gate()
    server.script("claude", [Turn.held(gate, "released text")])
    result: dict[str, Any] = {}
    worker = threading.Thread(target=lambda: result.update(r=post(server, "/v1/messages", claude_body())))
    worker.start()
    assert gate.reached.wait(10), "the request never reached the gate"
    assert "r" not in result  # still held: nothing returned yet
    gate.release()
    worker.join(10)
    assert anthropic_text(sse(result["r"][2])) == "released text"


def test_stop_releases_a_held_request() -> None:
    srv = ModelServer()
    srv.start()
    gate = Gate()
    srv.script("claude", [Turn.held(gate)])
    errors: list[BaseException] = []

    def call() -> None:
        try:
            post(srv, "/v1/messages", claude_body())
        except Exception as exc:  # the stream is cut or completes; either ends the call
            errors.append(exc)

    worker = threading.Thread(target=call)
    worker.start()
    assert gate.reached.wait(10)
    srv.stop()
    worker.join(10)
    assert not worker.is_alive()


def test_side_requests_do_not_consume_the_script(server: ModelServer) -> None:
    server.script("claude", [Turn.reply("scripted")])
    _, _, side = post(server, "/v1/messages", claude_body(tools=None))
    assert anthropic_text(sse(side)) == "OK."
    _, _, main = post(server, "/v1/messages", claude_body())
    assert anthropic_text(sse(main)) == "scripted"
    assert [r.scripted for r in server.requests] == [False, True]
    assert len(server.requests_for("claude", scripted_only=False)) == 2


def test_empty_queue_gets_the_default_turn(server: ModelServer) -> None:
    _, _, data = post(server, "/v1/messages", claude_body())
    assert anthropic_text(sse(data)) == "OK."
    server.set_default("claude", Turn.reply("fallback"))
    _, _, data = post(server, "/v1/messages", claude_body())
    assert anthropic_text(sse(data)) == "fallback"


def test_keyed_queues_route_by_api_key(server: ModelServer) -> None:
    server.script("claude", [Turn.reply("for A")], api_key="key-a")
    server.script("claude", [Turn.reply("for anyone")])
    _, _, b = post(server, "/v1/messages", claude_body(), {"x-api-key": "key-b"})
    _, _, a = post(server, "/v1/messages", claude_body(), {"x-api-key": "key-a"})
    assert anthropic_text(sse(b)) == "for anyone" and anthropic_text(sse(a)) == "for A"
    assert [r.api_key for r in server.requests] == ["key-b", "key-a"]


def test_clear_script_drops_queued_turns(server: ModelServer) -> None:
    server.script("claude", [Turn.reply("a"), Turn.reply("b")])
    server.script("codex", [Turn.reply("c")])
    server.clear_script("claude")
    assert server.pending("claude") == 0 and server.pending("codex") == 1


def test_script_refuses_bad_input(server: ModelServer) -> None:
    with pytest.raises(ValueError, match="unknown harness 'gemini'"):
        server.script("gemini", [Turn.reply("x")])
    with pytest.raises(TypeError, match="takes Turn values"):
        server.script("claude", ["just text"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="at least 1"):
        server.script("claude", [Turn(text="x", times=0)])
    assert server.pending("claude") == 0


def test_unknown_route_is_404_and_recorded(server: ModelServer) -> None:
    status, _, _ = post(server, "/v1/chat/completions", {"x": 1})
    assert status == 404
    assert server.requests[-1].path == "/v1/chat/completions" and not server.requests[-1].scripted


def test_wait_for_requests_times_out_with_a_count(server: ModelServer) -> None:
    with pytest.raises(TimeoutError, match="0 of 1"):
        server.wait_for_requests("claude", 1, timeout=0.05)


# --- OpenAI Responses -----------------------------------------------------------------------------


def test_responses_stream_has_the_events_codex_needs(server: ModelServer) -> None:
    server.script("codex", [Turn.reply("Hi from codex", chunk_chars=4)])
    status, _, data = post(server, "/v1/responses", codex_body("hello"))
    events = sse(data)
    names = [n for n, _ in events]
    assert status == 200
    assert names[:2] == ["response.created", "response.in_progress"]
    assert names[-2:] == ["response.output_item.done", "response.completed"]
    assert [e["sequence_number"] for _, e in events] == list(range(len(events)))
    assert "".join(e["delta"] for n, e in events if n == "response.output_text.delta") == "Hi from codex"
    done = events[-2][1]["item"]
    assert done["type"] == "message" and done["content"][0]["text"] == "Hi from codex"
    completed = events[-1][1]["response"]
    assert completed["status"] == "completed" and completed["id"].startswith("resp_")
    assert set(completed["usage"]) == {"input_tokens", "input_tokens_details", "output_tokens",
                                       "output_tokens_details", "total_tokens"}
    assert server.requests_for("codex")[0].user_texts == ["hello"]


def test_responses_function_call_carries_the_namespace(server: ModelServer) -> None:
    call = ToolCall("send_message", {"to": "a"}, namespace="mcp__connect", id="call_9")
    server.script("codex", [Turn.tool(call)])
    _, _, data = post(server, "/v1/responses", codex_body())
    events = sse(data)
    items = [e["item"] for n, e in events if n == "response.output_item.done"]
    assert items == [{"id": items[0]["id"], "type": "function_call", "status": "completed", "call_id": "call_9",
                      "name": "send_message", "arguments": '{"to": "a"}', "namespace": "mcp__connect"}]
    args = "".join(e["delta"] for n, e in events if n == "response.function_call_arguments.delta")
    assert json.loads(args) == {"to": "a"}


def test_responses_error_status(server: ModelServer) -> None:
    server.script("codex", [Turn.fail(500, "boom")])
    status, _, data = post(server, "/v1/responses", codex_body())
    assert status == 500 and json.loads(data)["error"]["message"] == "boom"


def test_codex_title_request_is_a_side_request_answered_in_json(server: ModelServer) -> None:
    server.script("codex", [Turn.reply("scripted")])
    body = codex_body("title please", tools=[])
    body["text"] = {"format": {"type": "json_schema", "name": "codex_output_schema",
                               "schema": {"type": "object", "properties": {"title": {"type": "string"}}}}}
    _, _, data = post(server, "/v1/responses", body)
    text = "".join(e["delta"] for n, e in sse(data) if n == "response.output_text.delta")
    assert json.loads(text) == {"title": "Scripted task"}
    assert server.pending("codex") == 1


def test_tool_names_flatten_namespaces_for_both_apis() -> None:
    from tests.support.model_server import Request

    codex = Request("codex", "POST", "/v1/responses", {}, {}, {"tools": [
        {"type": "function", "name": "exec_command"},
        {"type": "namespace", "name": "mcp__connect", "tools": [{"name": "send_message"}, {"name": "whoami"}]},
    ]}, True)
    claude = Request("claude", "POST", "/v1/messages", {}, {}, {"tools": [{"name": "mcp__connect__whoami"}]}, True)
    assert codex.tool_names == ["exec_command", "mcp__connect__send_message", "mcp__connect__whoami"]
    assert claude.tool_names == ["mcp__connect__whoami"]


def test_is_side_request_rules() -> None:
    assert is_side_request("claude", {"messages": []})
    assert not is_side_request("claude", {"tools": [{"name": "Bash"}]})
    assert is_side_request("codex", {"tools": [{"name": "x"}], "text": {"format": {"type": "json_schema"}}})
    assert not is_side_request("codex", {"tools": [{"name": "x"}]})
    assert not is_side_request("claude", "not json")
