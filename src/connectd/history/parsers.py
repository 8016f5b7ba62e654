"""Transcript parsers for Claude Code and Codex, resumable from a byte offset.

A parser is an accumulator: it is fed one JSON object per transcript line and keeps only what an index
entry needs (identity, cwd, branches, PR links, title, times, entrypoint, human prompts). Its state
serialises to JSON so the indexer can resume a growing transcript from where it stopped instead of
reading it again.

What counts as a prompt (decided here, documented in docs/history.md):

* Claude Code: ``type: "user"`` records whose ``message.content`` is a string or a list of ``text``
  blocks. A record that carries a ``tool_result`` block or a ``toolUseResult`` is tool output and is
  skipped whole; so are ``isMeta``, ``isCompactSummary`` and ``isVisibleInTranscriptOnly`` records.
  Text that starts with a harness wrapper (``<command-name>``, ``<local-command-stdout>``,
  ``<system-reminder>``, ``<bash-input>`` ...; see ``connectcore.history.INJECTED_PREFIXES``) is
  skipped. In a subagent transcript the first user record is the task its caller sent.
* Codex: ``event_msg`` records of type ``user_message`` (what the human typed), and ``response_item``
  user ``message`` records' ``input_text`` (older rollouts have only these), with injected context
  (``<environment_context>``, ``<user_instructions>``, ``# AGENTS.md instructions`` ...) skipped. The
  same text seen through both records counts once.

PR links come from Claude Code's ``pr-link`` records and from URLs in prompts and in the assistant's
own text. Tool results are never read.

Bad input never stops a build: a line that is not UTF-8, not JSON, not an object, longer than the line
cap, or a truncated last line is skipped and counted with its reason (:class:`Skip`). A line longer
than the cap is skipped while it is read, chunk by chunk, so it is never held in memory whole.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

import orjson

from connectcore.history import (
    TITLE_RANK,
    Entrypoint,
    Harness,
    TranscriptFacts,
    append_prompts,
    better_title,
    is_human_prompt,
    pr_links,
)

#: Lines longer than this are skipped (counted, never loaded whole).
MAX_LINE_BYTES = 8 * 1024 * 1024
_CHUNK = 1 << 20

#: A top-level (or nested object) "timestamp" key. Inside a JSON string every quote is escaped, so a
#: quote right after "{" or "," always starts a real key, never text.
_TIMESTAMP = re.compile(rb'[{,]"timestamp":"([0-9T:.+Zz-]{10,40})"')
_TIMESTAMP_KEY = b'"timestamp":"'
_UUIDISH = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


class SkipReason:
    NOT_UTF8 = "not UTF-8"
    INVALID_JSON = "invalid JSON"
    NOT_OBJECT = "not a JSON object"
    TOO_LONG = "line over the size cap"
    TRUNCATED = "truncated last line"
    VANISHED = "file vanished"
    UNREADABLE = "file unreadable"
    NO_SESSION = "no session in the file"


@dataclass(frozen=True)
class Skip:
    """One thing the indexer skipped, with where and why."""

    path: str
    reason: str
    offset: int = 0


class Line(NamedTuple):
    start: int
    end: int
    data: bytes | None  # None: over the cap, skipped unread
    complete: bool  # False: the last line of the file has no newline yet


#: A rest of file up to this size is read in one call and split in memory (most transcripts).
_WHOLE_BYTES = 16 * 1024 * 1024


def iter_lines(f: BinaryIO, offset: int, max_line_bytes: int = MAX_LINE_BYTES) -> Iterator[Line]:
    """The lines of ``f`` from ``offset``; a line over the cap comes back with ``data=None``.

    Memory stays bounded by the cap plus one chunk whatever the line lengths are: a longer line is
    read past in chunks and never held whole.
    """
    f.seek(offset)
    try:
        rest = os.fstat(f.fileno()).st_size - offset
    except (OSError, ValueError):
        rest = -1
    if 0 <= rest <= _WHOLE_BYTES:
        yield from _split_lines(f.read(), offset, max_line_bytes)
        return
    pos = offset
    while True:
        start = pos
        line = f.readline(max_line_bytes + 1)
        if not line:
            return
        pos += len(line)
        if line.endswith(b"\n"):
            yield Line(start, pos, line[:-1], True)
            continue
        if len(line) <= max_line_bytes:
            yield Line(start, pos, line, False)  # the last line, without its newline (yet)
            return
        complete = False
        while True:
            part = f.readline(_CHUNK)
            if not part:
                break
            pos += len(part)
            if part.endswith(b"\n"):
                complete = True
                break
        yield Line(start, pos, None, complete)
        if not complete:
            return


def _split_lines(data: bytes, offset: int, max_line_bytes: int) -> Iterator[Line]:
    """What the chunked reader yields, for a rest of file already in memory."""
    pos, n = 0, len(data)
    find = data.find
    while pos < n:
        nl = find(b"\n", pos)
        if nl == -1:
            yield Line(offset + pos, offset + n, data[pos:] if n - pos <= max_line_bytes else None, False)
            return
        yield Line(offset + pos, offset + nl + 1, data[pos:nl] if nl - pos <= max_line_bytes else None, True)
        pos = nl + 1


def parse_timestamp(value: object) -> float | None:
    """An ISO-8601 timestamp (``2025-07-28T22:54:41.466Z``) or epoch number as epoch seconds."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        v = float(value)
        return v / 1000.0 if v > 1e11 else v
    if not isinstance(value, str) or not value:
        return None
    try:
        dt = datetime.fromisoformat(value)  # 3.11+: accepts the trailing "Z"
    except ValueError:
        return None
    if dt.tzinfo is None:
        return None
    return dt.timestamp()


# ---------------------------------------------------------------------------------------------------
# Accumulators
# ---------------------------------------------------------------------------------------------------


class Accumulator:
    """Common state of both parsers; subclasses interpret their harness's records."""

    harness: Harness

    def __init__(self, source_path: str) -> None:
        self.source_path = source_path
        self.session_id: str = ""
        self.parent_session_id: str | None = None
        self.cwd = ""
        self.branches: list[str] = []
        self.prs: list[str] = []
        self.title = ""
        self.title_rank = 0
        self.started: float | None = None
        self.last_active: float | None = None
        self.entrypoint = Entrypoint.INTERACTIVE
        self.prompts: list[str] = []

    # -- state ------------------------------------------------------------------------------------

    def to_state(self) -> dict[str, Any]:
        return {k: (v.value if isinstance(v, Entrypoint) else v) for k, v in vars(self).items()}

    def load_state(self, state: Mapping[str, Any]) -> None:
        for key, value in state.items():
            if key == "entrypoint":
                self.entrypoint = Entrypoint(value)
            elif hasattr(self, key):
                setattr(self, key, value)

    # -- helpers ----------------------------------------------------------------------------------

    def _time(self, value: object) -> None:
        if type(value) is str:  # nearly every line: parse_timestamp's string case, without the call
            if not value:
                return
            try:
                dt = datetime.fromisoformat(value)
            except ValueError:
                return
            if dt.tzinfo is None:
                return
            ts = dt.timestamp()
        else:
            parsed = parse_timestamp(value)
            if parsed is None:
                return
            ts = parsed
        if self.started is None or ts < self.started:
            self.started = ts
        if self.last_active is None or ts > self.last_active:
            self.last_active = ts

    def _branch(self, value: object) -> None:
        if isinstance(value, str):
            b = value.strip()
            if b and b != "HEAD" and b not in self.branches:
                self.branches.append(b)

    def _links(self, text: str) -> None:
        if "http" not in text:  # every PR link starts with it: most texts need no regex scan
            return
        for url in pr_links(text):
            if url not in self.prs:
                self.prs.append(url)

    def _prompts(self, texts: list[str]) -> None:
        human = [t for t in texts if is_human_prompt(t)]
        for t in human:
            self._links(t)
        self.prompts = list(append_prompts(self.prompts, human))

    def _title(self, title: object, source: str) -> None:
        if isinstance(title, str):
            self.title, self.title_rank = better_title(
                (self.title, self.title_rank), (title, TITLE_RANK[source])
            )

    def feed(self, obj: dict[str, Any]) -> None:
        raise NotImplementedError

    def quick(self, data: bytes) -> bool:
        """Handle a line from its bytes alone when nothing in it but the time can matter.

        Tool output and request/bookkeeping records are most of a transcript's bytes; they are never
        indexed, so they are not decoded either: only their timestamp is taken (for last active).
        Returns False when the line must be decoded and fed.
        """
        return False

    def _quick_time(self, data: bytes) -> None:
        # The first match of ``_TIMESTAMP``, found with ``bytes.find`` (memchr-fast) instead of a regex
        # scan from every byte of a large tool-output line.
        pos = data.find(_TIMESTAMP_KEY, 1)
        while pos != -1:
            m = _TIMESTAMP.match(data, pos - 1)
            if m is not None:
                self._time(m.group(1).decode("ascii"))
                return
            pos = data.find(_TIMESTAMP_KEY, pos + 1)

    def facts(self) -> TranscriptFacts | None:
        """The facts so far, or None if the file has shown no session yet (metadata-only files)."""
        if not self.session_id or not (self.cwd or self.prompts):
            return None
        return TranscriptFacts(
            harness=self.harness,
            session_id=self.session_id,
            source_path=self.source_path,
            cwd=self.cwd,
            parent_session_id=self.parent_session_id,
            entrypoint=self.entrypoint,
            branches=tuple(self.branches),
            prs=tuple(self.prs),
            title=self.title,
            title_rank=self.title_rank,
            started=self.started,
            last_active=self.last_active,
            prompts=tuple(self.prompts),
        )


def _text_blocks(content: object, kind: str) -> list[str] | None:
    """The text of ``kind`` blocks, or None when the content holds tool output."""
    if isinstance(content, str):
        return [content]
    if not isinstance(content, list):
        return []
    texts: list[str] = []
    for block in content:
        if not isinstance(block, dict):
            continue
        btype = block.get("type")
        if btype in ("tool_result", "function_call_output"):
            return None
        if btype == kind and isinstance(block.get("text"), str):
            texts.append(block["text"])
    return texts


class ClaudeAccumulator(Accumulator):
    """Claude Code ``~/.claude/projects/<slug>/<session>.jsonl`` and its subagent transcripts."""

    harness = Harness.CLAUDE

    #: ``entrypoint`` values of programmatic runs (``claude -p``, the Agent SDKs).
    HEADLESS_PREFIX = "sdk"

    def __init__(self, source_path: str) -> None:
        super().__init__(source_path)
        path = Path(source_path)
        self.subagent = path.name.startswith("agent-")
        self.entrypoint_raw = ""
        if self.subagent:
            self.entrypoint = Entrypoint.SUBAGENT
            self.session_id = path.stem[len("agent-") :]
            if path.parent.name == "subagents":
                self.parent_session_id = path.parent.parent.name
        else:
            self.session_id = path.stem

    #: Record types (written with ``type`` as their first key) that never hold a prompt, a title or a
    #: PR link: request bodies, snapshots, cost and mode bookkeeping.
    SKIP_PREFIXES = tuple(
        b'{"type":"' + t + b'"'
        for t in (
            b"api-request",
            b"api-request-blob",
            b"api-request-shape",
            b"file-history-snapshot",
            b"tools-used",
            b"cost-state",
            b"last-prompt",
            b"mode",
            b"permission-mode",
            b"atis-latch",
            b"queue-operation",
        )
    )

    def quick(self, data: bytes) -> bool:
        if data.startswith(self.SKIP_PREFIXES):
            return True
        if b'"type":"tool_result"' in data:
            self._quick_time(data)
            return True
        return False

    def feed(self, obj: dict[str, Any]) -> None:
        rtype = obj.get("type")
        self._time(obj.get("timestamp"))
        if self.subagent:
            agent = obj.get("agentId")
            if isinstance(agent, str) and agent and not self.session_id:
                self.session_id = agent
            sid = obj.get("sessionId")
            if isinstance(sid, str) and sid and not self.parent_session_id:
                self.parent_session_id = sid
        if not self.cwd:  # the first one counts: most lines skip the lookup
            cwd = obj.get("cwd")
            if isinstance(cwd, str) and cwd:
                self.cwd = cwd
        self._branch(obj.get("gitBranch"))
        if not self.entrypoint_raw:
            ep = obj.get("entrypoint")
            if isinstance(ep, str) and ep:
                self.entrypoint_raw = ep
                if not self.subagent and ep.startswith(self.HEADLESS_PREFIX):
                    self.entrypoint = Entrypoint.HEADLESS
        if rtype == "user":
            self._user(obj)
        elif rtype == "assistant":
            msg = obj.get("message")
            if isinstance(msg, dict):
                for text in _text_blocks(msg.get("content"), "text") or ():
                    self._links(text)
        elif rtype == "pr-link":
            url = obj.get("prUrl")
            if isinstance(url, str) and url.startswith(("http://", "https://")) and url not in self.prs:
                self.prs.append(url)
        elif rtype == "custom-title":
            self._title(obj.get("customTitle"), "custom-title")
        elif rtype == "agent-name":
            self._title(obj.get("agentName"), "agent-name")
        elif rtype == "ai-title":
            self._title(obj.get("aiTitle"), "ai-title")
        elif rtype == "summary":
            self._title(obj.get("summary"), "summary")

    def _user(self, obj: dict[str, Any]) -> None:
        if obj.get("isMeta") or obj.get("isCompactSummary") or obj.get("isVisibleInTranscriptOnly"):
            return
        if "toolUseResult" in obj:
            return
        msg = obj.get("message")
        if not isinstance(msg, dict) or msg.get("role", "user") != "user":
            return
        texts = _text_blocks(msg.get("content"), "text")
        if texts:
            self._prompts(texts)


class CodexAccumulator(Accumulator):
    """Codex ``~/.codex/sessions/YYYY/MM/DD/rollout-<time>-<id>.jsonl``."""

    harness = Harness.CODEX

    #: ``session_meta.source`` / ``originator`` values of non-interactive runs.
    HEADLESS_SOURCES = frozenset({"exec", "mcp"})
    HEADLESS_ORIGINATORS = frozenset({"codex_exec", "codex_sdk_ts", "codex_sdk"})

    def __init__(self, source_path: str) -> None:
        super().__init__(source_path)
        found = _UUIDISH.findall(Path(source_path).name)
        self.session_id = found[-1] if found else ""
        self.meta_seen = False

    #: Payload types that never hold a prompt or a PR link (tool calls and their output, token counts).
    SKIP_MARKERS = (
        b'"type":"function_call_output"',
        b'"type":"function_call"',
        b'"type":"custom_tool_call_output"',
        b'"type":"local_shell_call"',
        b'"type":"reasoning"',
        b'"type":"token_count"',
        b'"type":"token_usage_record"',
        b'"type":"world_state"',
        b'"type":"exec_command_output_delta"',
    )

    #: Any of them within a line's first 160 bytes (one regex search: four times as fast as a
    #: substring test per marker).
    _SKIP = re.compile(b"|".join(re.escape(m) for m in SKIP_MARKERS))

    def quick(self, data: bytes) -> bool:
        if self._SKIP.search(data, 0, 160) is not None:
            self._quick_time(data[:80])
            return True
        return False

    def feed(self, obj: dict[str, Any]) -> None:
        rtype = obj.get("type")
        payload = obj.get("payload")
        self._time(obj.get("timestamp"))
        if not isinstance(payload, dict):
            # Rollouts before the {type, payload} wrapper: a bare meta line, then bare items.
            if rtype == "message":
                self._item(obj)
            elif rtype is None and "id" in obj and not self.meta_seen:
                self._meta(obj)
            return
        if rtype == "session_meta":
            self._meta(payload)
        elif rtype == "turn_context":
            cwd = payload.get("cwd")
            if isinstance(cwd, str) and cwd and not self.cwd:
                self.cwd = cwd
        elif rtype == "event_msg":
            ptype = payload.get("type")
            message = payload.get("message")
            if ptype == "user_message" and isinstance(message, str):
                self._prompts([message])
            elif ptype == "agent_message" and isinstance(message, str):
                self._links(message)
        elif rtype == "response_item" and payload.get("type") == "message":
            self._item(payload)

    def _meta(self, meta: dict[str, Any]) -> None:
        if self.meta_seen:
            return
        self.meta_seen = True
        sid = meta.get("id")
        if isinstance(sid, str) and sid:
            self.session_id = sid
        self._time(meta.get("timestamp"))
        cwd = meta.get("cwd")
        if isinstance(cwd, str) and cwd:
            self.cwd = cwd
        git = meta.get("git")
        if isinstance(git, dict):
            self._branch(git.get("branch"))
        source = meta.get("source")
        originator = meta.get("originator")
        parent = meta.get("parent_thread_id")
        if isinstance(source, dict):
            sub = source.get("subagent")
            if sub is not None:
                self.entrypoint = Entrypoint.SUBAGENT
                spawn = sub.get("thread_spawn") if isinstance(sub, dict) else None
                if isinstance(spawn, dict) and isinstance(spawn.get("parent_thread_id"), str):
                    parent = spawn["parent_thread_id"]
        elif source in self.HEADLESS_SOURCES or originator in self.HEADLESS_ORIGINATORS:
            self.entrypoint = Entrypoint.HEADLESS
        if isinstance(parent, str) and parent:
            self.parent_session_id = parent
            self.entrypoint = Entrypoint.SUBAGENT

    def _item(self, item: dict[str, Any]) -> None:
        role = item.get("role")
        if role == "user":
            texts = _text_blocks(item.get("content"), "input_text")
            if texts:
                self._prompts(texts)
        elif role == "assistant":
            for text in _text_blocks(item.get("content"), "output_text") or ():
                self._links(text)


def accumulator_for(harness: Harness, source_path: str) -> Accumulator:
    return ClaudeAccumulator(source_path) if harness is Harness.CLAUDE else CodexAccumulator(source_path)


# ---------------------------------------------------------------------------------------------------
# Reading a file
# ---------------------------------------------------------------------------------------------------


@dataclass
class ParseResult:
    """The outcome of reading one transcript from an offset."""

    acc: Accumulator
    offset: int  # where the next read starts (before a truncated last line)
    lines: int
    skips: list[Skip]
    bytes_read: int


def decode_line(path: str, line: Line) -> tuple[dict[str, Any] | None, Skip | None]:
    """A line's JSON object, or why it was skipped."""
    if line.data is None:
        return None, Skip(path, SkipReason.TOO_LONG, line.start)
    raw = line.data
    if not raw or raw.isspace():
        return None, None
    try:
        # Fast path: orjson accepts a subset of what json does (valid UTF-8, no NaN, no lone
        # surrogates); anything it refuses goes through the reference path below, which decides.
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        pass
    else:
        if isinstance(obj, dict):
            return obj, None
        return None, Skip(path, SkipReason.NOT_OBJECT, line.start)
    try:
        text = raw.decode("utf-8")  # transcripts are UTF-8; json.loads(bytes) would guess UTF-16 too
    except UnicodeDecodeError:
        return None, Skip(path, SkipReason.NOT_UTF8, line.start)
    try:
        obj = json.loads(text)
    except ValueError:
        reason = SkipReason.INVALID_JSON if line.complete else SkipReason.TRUNCATED
        return None, Skip(path, reason, line.start)
    if not isinstance(obj, dict):
        return None, Skip(path, SkipReason.NOT_OBJECT, line.start)
    return obj, None


def parse_file(
    path: str,
    acc: Accumulator,
    offset: int = 0,
    *,
    max_line_bytes: int = MAX_LINE_BYTES,
) -> ParseResult:
    """Feed the lines of ``path`` from ``offset`` into ``acc``.

    A last line without a newline that is not (yet) valid JSON is counted as truncated and the offset
    stays before it, so a later pass reads it again once the writer has finished it. Raises
    ``FileNotFoundError`` / ``OSError`` for a vanished or unreadable file (the caller counts it).
    """
    skips: list[Skip] = []
    lines = 0
    next_offset = offset
    with open(path, "rb") as f:
        for line in iter_lines(f, offset, max_line_bytes):
            if line.complete and line.data is not None and acc.quick(line.data):
                lines += 1
                next_offset = line.end
                continue
            obj, skip = decode_line(path, line)
            if skip is not None:
                skips.append(skip)
                if skip.reason == SkipReason.TRUNCATED:
                    break
            elif obj is not None:
                lines += 1
                acc.feed(obj)
            next_offset = line.end
    return ParseResult(acc=acc, offset=next_offset, lines=lines, skips=skips, bytes_read=next_offset - offset)


def read_codex_titles(
    path: str, offset: int = 0, *, max_line_bytes: int = 1 << 20
) -> tuple[dict[str, tuple[str, str]], int, list[Skip]]:
    """New rows of Codex's ``session_index.jsonl`` (``{id, thread_name, updated_at}``; newest wins).

    Returns ``{id: (thread_name, updated_at)}``, the next offset and the skipped lines.
    """
    titles: dict[str, tuple[str, str]] = {}
    skips: list[Skip] = []
    next_offset = offset
    with open(path, "rb") as f:
        for line in iter_lines(f, offset, max_line_bytes):
            obj, skip = decode_line(path, line)
            if skip is not None:
                skips.append(skip)
                if skip.reason == SkipReason.TRUNCATED:
                    break
            elif obj is not None:
                sid = obj.get("id")
                name = obj.get("thread_name")
                if isinstance(sid, str) and sid and isinstance(name, str):
                    updated = obj.get("updated_at")
                    titles[sid] = (name, updated if isinstance(updated, str) else "")
            next_offset = line.end
    return titles, next_offset, skips
