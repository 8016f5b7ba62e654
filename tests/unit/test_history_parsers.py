"""Parsers of Claude Code and Codex transcripts: fixtures in the real formats and every bad-transcript case."""

from __future__ import annotations

import io
import json
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from connectcore.history import Entrypoint, Harness
from connectd.history.parsers import (
    ClaudeAccumulator,
    CodexAccumulator,
    SkipReason,
    accumulator_for,
    iter_lines,
    parse_file,
    parse_timestamp,
    read_codex_titles,
)
from tests.fixtures.history.transcripts import Claude, Codex, write_jsonl

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "history"
CLAUDE_PROJECT = FIXTURES / "claude" / "projects" / "-home-dev-widget"
CLAUDE_MAIN = CLAUDE_PROJECT / "0f8e2d6a-3b1c-4e5f-9a7b-2c4d6e8f0a1b.jsonl"
CLAUDE_SUB = (
    CLAUDE_PROJECT / "0f8e2d6a-3b1c-4e5f-9a7b-2c4d6e8f0a1b" / "subagents" / "agent-a4c2e9f1b3d5e7a9b.jsonl"
)
CLAUDE_HEADLESS = CLAUDE_PROJECT / "5d3c1b2a-9e8f-4a7b-8c6d-1e2f3a4b5c6d.jsonl"
CODEX_DAY = FIXTURES / "codex" / "sessions" / "2026" / "01" / "15"
CODEX_MAIN = CODEX_DAY / "rollout-2026-01-15T10-00-00-019bce9f-0a40-79e2-8351-8818e8487fb6.jsonl"
CODEX_EXEC = CODEX_DAY / "rollout-2026-01-15T10-00-00-019bcea0-1b51-7af3-9462-9929f9598a07.jsonl"
CODEX_SUB = CODEX_DAY / "rollout-2026-01-15T10-00-00-019bcea1-2c62-7b04-a573-aa3a0a6a9b18.jsonl"


def facts_of(harness: Harness, path: Path, **kw: int):
    acc = accumulator_for(harness, str(path))
    result = parse_file(str(path), acc, **kw)
    return acc.facts(), result


def no_tool_output(facts) -> None:
    blob = json.dumps([facts.prompts, facts.title, facts.branches, facts.prs, facts.cwd])
    assert "TOOLSECRET" not in blob


# ---------------------------------------------------------------------------------------------------
# Claude Code
# ---------------------------------------------------------------------------------------------------


def test_claude_interactive_session_keeps_human_prompts_only():
    facts, result = facts_of(Harness.CLAUDE, CLAUDE_MAIN)
    assert result.skips == []
    assert facts.harness is Harness.CLAUDE
    assert facts.session_id == "0f8e2d6a-3b1c-4e5f-9a7b-2c4d6e8f0a1b"
    assert facts.cwd == "/home/dev/widget"
    assert facts.entrypoint is Entrypoint.INTERACTIVE
    assert facts.parent_session_id is None
    assert facts.prompts == (
        "The websocket reconnect test is flaky on CI. Find out why and fix it.",
        "Also add a regression test for the jitter",
        "Rebase on main and push",
    )
    no_tool_output(facts)


def test_claude_branches_prs_and_title_precedence():
    facts, _ = facts_of(Harness.CLAUDE, CLAUDE_MAIN)
    assert facts.branches == ("fix/ws-reconnect", "fix/ws-jitter")
    assert facts.prs == ("https://github.com/acme/widget/pull/4955",)
    # custom-title beats the ai-title seen before it.
    assert facts.title == "ws reconnect fix"
    assert facts.started is not None and facts.last_active is not None
    assert facts.started < facts.last_active


def test_claude_subagent_task_is_its_prompt_and_parent_is_linked():
    facts, _ = facts_of(Harness.CLAUDE, CLAUDE_SUB)
    assert facts.session_id == "a4c2e9f1b3d5e7a9b"
    assert facts.parent_session_id == "0f8e2d6a-3b1c-4e5f-9a7b-2c4d6e8f0a1b"
    assert facts.entrypoint is Entrypoint.SUBAGENT
    assert facts.prompts == ("Search the codebase for every caller of reconnect_with_backoff and list them.",)
    no_tool_output(facts)


def test_claude_sdk_entrypoint_is_headless():
    facts, _ = facts_of(Harness.CLAUDE, CLAUDE_HEADLESS)
    assert facts.entrypoint is Entrypoint.HEADLESS
    assert facts.prompts == ("Summarise the open TODOs in this repository as a bullet list.",)


def test_claude_old_style_sidechain_file_in_project_dir(tmp_path):
    path = write_jsonl(
        tmp_path / "agent-1a2b3c4d.jsonl",
        [
            {
                "type": "user",
                "isSidechain": True,
                "agentId": "1a2b3c4d",
                "sessionId": "parent-session",
                "cwd": "/w",
                "message": {"role": "user", "content": "find the bug"},
                "timestamp": "2025-09-01T10:00:00Z",
            }
        ],
    )
    facts, _ = facts_of(Harness.CLAUDE, path)
    assert (facts.session_id, facts.parent_session_id, facts.entrypoint) == (
        "1a2b3c4d",
        "parent-session",
        Entrypoint.SUBAGENT,
    )


def test_claude_metadata_only_file_is_no_session(tmp_path):
    path = write_jsonl(
        tmp_path / "3e0c2b7a-0000-4000-8000-000000000000.jsonl",
        [{"type": "summary", "summary": "Refactor", "leafUuid": "x"}],
    )
    facts, result = facts_of(Harness.CLAUDE, path)
    assert facts is None
    assert result.lines == 1


def test_claude_summary_is_the_weakest_title(tmp_path):
    s = Claude("3e0c2b7a-0000-4000-8000-000000000001", "/w")
    s.line({"type": "summary", "summary": "Old summary", "leafUuid": "x"}).prompt("hello")
    s.title("ai-title", "Generated")
    s.line({"type": "summary", "summary": "Later summary", "leafUuid": "y"})
    facts, _ = facts_of(Harness.CLAUDE, s.write(tmp_path))
    assert facts.title == "Generated"


def test_claude_message_with_tool_result_and_text_is_skipped_whole(tmp_path):
    s = Claude("3e0c2b7a-0000-4000-8000-000000000002", "/w")
    s.prompt("real prompt")
    s.prompt(
        [
            {"type": "tool_result", "tool_use_id": "t", "content": "out"},
            {"type": "text", "text": "TOOLSECRET"},
        ]
    )
    facts, _ = facts_of(Harness.CLAUDE, s.write(tmp_path))
    assert facts.prompts == ("real prompt",)


def test_claude_compact_summary_and_bash_input_are_not_prompts(tmp_path):
    s = Claude("3e0c2b7a-0000-4000-8000-000000000003", "/w")
    s.prompt(
        "This session is being continued from a previous conversation that ran out of context.",
        isCompactSummary=True,
    )
    s.prompt("<bash-input>ls</bash-input>")
    s.prompt("<bash-stdout>a b</bash-stdout><bash-stderr></bash-stderr>")
    s.prompt("go on")
    facts, _ = facts_of(Harness.CLAUDE, s.write(tmp_path))
    assert facts.prompts == ("go on",)


def test_claude_head_branch_is_ignored(tmp_path):
    s = Claude("3e0c2b7a-0000-4000-8000-000000000004", "/w", branch="HEAD")
    s.prompt("detached")
    s.branch = ""
    s.prompt("no repo")
    facts, _ = facts_of(Harness.CLAUDE, s.write(tmp_path))
    assert facts.branches == ()


# ---------------------------------------------------------------------------------------------------
# Codex
# ---------------------------------------------------------------------------------------------------


def test_codex_interactive_rollout():
    facts, result = facts_of(Harness.CODEX, CODEX_MAIN)
    assert result.skips == []
    assert facts.harness is Harness.CODEX
    assert facts.session_id == "019bce9f-0a40-79e2-8351-8818e8487fb6"
    assert facts.cwd == "/home/dev/gadget"
    assert facts.entrypoint is Entrypoint.INTERACTIVE
    assert facts.branches == ("feat/dark-mode",)
    # The same prompt arrives as a response_item and an event_msg: it counts once; injected
    # AGENTS.md, environment context and developer permissions are not prompts.
    assert facts.prompts == (
        "Add a dark mode toggle to the settings page",
        "Make the toggle remember the choice in localStorage",
    )
    assert facts.prs == ("https://github.com/acme/gadget/pull/812",)
    no_tool_output(facts)


def test_codex_exec_is_headless_and_subagent_has_parent():
    exec_facts, _ = facts_of(Harness.CODEX, CODEX_EXEC)
    assert exec_facts.entrypoint is Entrypoint.HEADLESS
    sub, _ = facts_of(Harness.CODEX, CODEX_SUB)
    assert sub.entrypoint is Entrypoint.SUBAGENT
    assert sub.parent_session_id == "019bce9f-0a40-79e2-8351-8818e8487fb6"
    assert sub.prompts == ("Review the dark mode diff for accessibility problems",)


def test_codex_rollout_with_only_response_items(tmp_path):
    x = Codex("019bcea2-0000-7000-8000-000000000001", "/w", branch=None)
    x.prompt("older codex wrote only items", event=False)
    facts, _ = facts_of(Harness.CODEX, x.write(tmp_path))
    assert facts.prompts == ("older codex wrote only items",)
    assert facts.branches == ()


def test_codex_legacy_unwrapped_rollout(tmp_path):
    path = write_jsonl(
        tmp_path / "rollout-2025-05-01-019bcea2-0000-7000-8000-000000000002.jsonl",
        [
            {
                "id": "019bcea2-0000-7000-8000-000000000002",
                "timestamp": "2025-05-01T10:00:00Z",
                "instructions": None,
            },
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "legacy prompt"}]},
        ],
    )
    acc = CodexAccumulator(str(path))
    parse_file(str(path), acc)
    assert acc.session_id == "019bcea2-0000-7000-8000-000000000002"
    assert acc.prompts == ["legacy prompt"]


def test_codex_session_id_falls_back_to_file_name(tmp_path):
    path = write_jsonl(
        tmp_path / "rollout-2026-01-01T00-00-00-019bcea2-0000-7000-8000-000000000003.jsonl",
        [
            {
                "timestamp": "2026-01-01T00:00:00Z",
                "type": "event_msg",
                "payload": {"type": "user_message", "message": "hi"},
            }
        ],
    )
    facts, _ = facts_of(Harness.CODEX, path)
    assert facts.session_id == "019bcea2-0000-7000-8000-000000000003"


def test_codex_titles_newest_row_wins(tmp_path):
    titles, offset, skips = read_codex_titles(str(FIXTURES / "codex" / "session_index.jsonl"))
    assert titles["019bce9f-0a40-79e2-8351-8818e8487fb6"][0] == "Dark mode settings toggle"
    assert offset == (FIXTURES / "codex" / "session_index.jsonl").stat().st_size
    assert skips == []


# ---------------------------------------------------------------------------------------------------
# Bad transcripts: skipped with a count and a reason, never fatal
# ---------------------------------------------------------------------------------------------------


def good(n: int) -> str:
    return json.dumps(
        {"type": "user", "sessionId": "s", "cwd": "/w", "message": {"role": "user", "content": f"prompt {n}"}}
    )


def test_truncated_last_line_is_counted_and_reread_once_complete(tmp_path):
    path = tmp_path / "3e0c2b7a-0000-4000-8000-00000000000a.jsonl"
    whole = good(2)
    path.write_text(good(1) + "\n" + whole[:20])
    acc = ClaudeAccumulator(str(path))
    r1 = parse_file(str(path), acc)
    assert [s.reason for s in r1.skips] == [SkipReason.TRUNCATED]
    assert r1.offset == len(good(1)) + 1  # stops before the partial line
    assert acc.prompts == ["prompt 1"]
    path.write_text(good(1) + "\n" + whole + "\n")
    r2 = parse_file(str(path), acc, r1.offset)
    assert r2.skips == []
    assert acc.prompts == ["prompt 1", "prompt 2"]


def test_last_line_without_newline_but_valid_json_is_read(tmp_path):
    path = tmp_path / "3e0c2b7a-0000-4000-8000-00000000000b.jsonl"
    path.write_text(good(1))
    acc = ClaudeAccumulator(str(path))
    r = parse_file(str(path), acc)
    assert r.skips == [] and acc.prompts == ["prompt 1"]
    assert r.offset == path.stat().st_size


def test_invalid_json_line_is_skipped_and_the_rest_is_read(tmp_path):
    path = tmp_path / "3e0c2b7a-0000-4000-8000-00000000000c.jsonl"
    path.write_text(good(1) + "\n{not json at all\n" + good(2) + "\n")
    acc = ClaudeAccumulator(str(path))
    r = parse_file(str(path), acc)
    assert [(s.reason, s.offset) for s in r.skips] == [(SkipReason.INVALID_JSON, len(good(1)) + 1)]
    assert acc.prompts == ["prompt 1", "prompt 2"]


def test_non_utf8_line_is_skipped(tmp_path):
    path = tmp_path / "3e0c2b7a-0000-4000-8000-00000000000d.jsonl"
    path.write_bytes(
        good(1).encode() + b"\n" + b'{"type":"user","x":"\xff\xfe"}\n' + good(2).encode() + b"\n"
    )
    acc = ClaudeAccumulator(str(path))
    r = parse_file(str(path), acc)
    assert [s.reason for s in r.skips] == [SkipReason.NOT_UTF8]
    assert acc.prompts == ["prompt 1", "prompt 2"]


def test_json_that_is_not_an_object_is_skipped(tmp_path):
    path = tmp_path / "3e0c2b7a-0000-4000-8000-00000000000e.jsonl"
    path.write_text("[1, 2]\n" + good(1) + "\n")
    acc = ClaudeAccumulator(str(path))
    r = parse_file(str(path), acc)
    assert [s.reason for s in r.skips] == [SkipReason.NOT_OBJECT]
    assert acc.prompts == ["prompt 1"]


def test_fifty_megabyte_line_is_skipped_without_loading_it(tmp_path):
    """A 50 MB line is skipped as it is read: peak memory stays near the cap, far below the line."""
    path = tmp_path / "3e0c2b7a-0000-4000-8000-00000000000f.jsonl"
    big = 50 * 1024 * 1024
    with open(path, "wb") as f:
        f.write(good(1).encode() + b"\n")
        f.write(b'{"type":"user","message":{"role":"user","content":"')
        block = b"x" * (1 << 20)
        for _ in range(big // len(block)):
            f.write(block)
        f.write(b'"}}\n')
        f.write(good(2).encode() + b"\n")
    acc = ClaudeAccumulator(str(path))
    tracemalloc.start()
    try:
        r = parse_file(str(path), acc, max_line_bytes=4 * 1024 * 1024)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [s.reason for s in r.skips] == [SkipReason.TOO_LONG]
    assert acc.prompts == ["prompt 1", "prompt 2"]
    assert peak < 16 * 1024 * 1024


def test_vanished_file_raises_for_the_indexer_to_count(tmp_path):
    with pytest.raises(FileNotFoundError):
        parse_file(str(tmp_path / "gone.jsonl"), ClaudeAccumulator(str(tmp_path / "gone.jsonl")))


# ---------------------------------------------------------------------------------------------------
# Resuming and line reading
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("harness,path", [(Harness.CLAUDE, CLAUDE_MAIN), (Harness.CODEX, CODEX_MAIN)])
def test_resuming_from_any_line_boundary_gives_the_same_facts(harness, path):
    whole, _ = facts_of(harness, path)
    data = path.read_bytes()
    boundaries = [i + 1 for i, b in enumerate(data) if b == ord("\n")]
    for cut in boundaries[:: max(1, len(boundaries) // 6)]:
        acc = accumulator_for(harness, str(path))
        with open(path, "rb") as f:
            for line in iter_lines(f, 0):
                if line.end > cut:
                    break
                acc.feed(json.loads(line.data))
        state = json.loads(json.dumps(acc.to_state()))
        resumed = accumulator_for(harness, str(path))
        resumed.load_state(state)
        parse_file(str(path), resumed, cut)
        assert resumed.facts() == whole


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")), max_size=12),
    st.booleans(),
    st.integers(1, 30),
)
def test_iter_lines_splits_exactly_on_newlines(parts, trailing, cap):
    """Every byte belongs to one line; lines over the cap come back as None; offsets are contiguous."""
    data = b"\n".join(parts) + (b"\n" if trailing and parts else b"")
    lines = list(iter_lines(io.BytesIO(data), 0, cap))
    pos = 0
    for line in lines:
        assert line.start == pos
        raw = data[line.start : line.end].rstrip(b"\n")
        assert line.data == (raw if len(raw) <= cap else None)
        pos = line.end
    assert pos == len(data)
    assert all(line.complete for line in lines[:-1])


def test_parse_timestamp_forms():
    assert parse_timestamp("2026-01-15T10:00:00.000Z") == 1768471200.0
    assert parse_timestamp("2026-01-15T10:00:00+00:00") == 1768471200.0
    assert parse_timestamp(1768471200123) == pytest.approx(1768471200.123)
    assert parse_timestamp(1768471200) == 1768471200.0
    assert parse_timestamp("2026-01-15T10:00:00") is None  # no zone: not trusted
    assert parse_timestamp("yesterday") is None
    assert parse_timestamp(True) is None
    assert parse_timestamp(None) is None


# ---------------------------------------------------------------------------------------------------
# The quick path: tool output and request records are not decoded, but their time still counts
# ---------------------------------------------------------------------------------------------------


def test_tool_result_lines_are_not_decoded_but_count_for_last_active(tmp_path):
    s = Claude("3e0c2b7a-0000-4000-8000-000000000020", "/w")
    s.prompt("run it")
    s.tool("Bash", {"command": "make"}, "x" * 10_000)
    path = s.write(tmp_path)
    acc = ClaudeAccumulator(str(path))
    fed: list[str] = []
    original = acc.feed
    acc.feed = lambda obj: (fed.append(obj["type"]), original(obj))  # type: ignore[method-assign]
    parse_file(str(path), acc)
    assert fed == ["user", "assistant"]  # the tool_result record never reached feed()
    assert acc.last_active == parse_timestamp(s.records[-1]["timestamp"])


def test_a_prompt_quoting_tool_result_text_is_still_a_prompt(tmp_path):
    s = Claude("3e0c2b7a-0000-4000-8000-000000000021", "/w")
    s.prompt('why does the record say "type":"tool_result" here?')
    s.line(
        {
            "type": "api-request-blob",
            "sessionId": s.session_id,
            "message": {"role": "user", "content": "not a prompt"},
        }
    )
    facts, _ = facts_of(Harness.CLAUDE, s.write(tmp_path))
    assert facts.prompts == ('why does the record say "type":"tool_result" here?',)


def test_codex_tool_output_lines_count_for_last_active(tmp_path):
    x = Codex("019bcea2-0000-7000-8000-000000000021", "/w")
    x.prompt("build")
    x.tool("make", 'output with "type":"message","role":"user" inside')
    facts, _ = facts_of(Harness.CODEX, x.write(tmp_path))
    assert facts.prompts == ("build",)
    assert facts.last_active == parse_timestamp(x.records[-1]["timestamp"])
