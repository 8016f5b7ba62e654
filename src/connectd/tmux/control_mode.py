"""tmux control mode: which panes produced output, one control client per watched session.

`ControlModeReader` runs `tmux -C attach-session -f ignore-size -t SESSION` on pipes and turns its
stdout into notifications (`%output`, `%begin/%end/%error` replies, `%exit`, and every other `%name`).
Watching must never resize a session. A control client counts for sizing only after it sends
`refresh-client -C WxH` (never done here), or, with `-f ignore-size`, only while no other client is
attached; so the reader attaches with `-f ignore-size` and never sets a size (tmux 3.3a resize.c).
A control client sees output only for the panes of the session it is attached to, hence one per session.

`ControlModeWatcher` keeps one reader per session of the server (starting readers for new sessions,
stopping them for gone ones) inside its own task group, and coalesces what they report into `Activity`:
the set of panes that produced output since the last look, and whether the layout changed. Control mode
is a hint: notifications can be missed (tmux 3.3a loses some exits), so the daemon's slow
`list-panes -a` poll stays the source of truth.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import subprocess
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from types import TracebackType

import anyio
import anyio.abc
from anyio.streams.buffered import BufferedByteReceiveStream

from connectd.tmux.adapter import TmuxAdapter, TmuxError

log = logging.getLogger(__name__)

MAX_LINE = 8 * 1024 * 1024  # one %output line holds one read of pane output, escaped (up to 4x)
OCTAL_ESCAPE = re.compile(rb"\\([0-7]{3})")
# Notifications that mean panes, windows or sessions came, went or moved: worth an early list-panes.
STRUCTURE_NOTICES = frozenset(
    {
        "layout-change",
        "pane-mode-changed",
        "session-changed",
        "session-renamed",
        "session-window-changed",
        "sessions-changed",
        "unlinked-window-add",
        "unlinked-window-close",
        "window-add",
        "window-close",
        "window-pane-changed",
        "window-renamed",
        "exit",
    }
)


@dataclass(frozen=True)
class PaneOutput:
    """`%output %N <bytes>`: the pane wrote to its terminal. `raw` is still octal-escaped."""

    pane_id: str
    raw: bytes

    @property
    def data(self) -> bytes:
        return unescape(self.raw)


@dataclass(frozen=True)
class Reply:
    """A command reply block: `%begin` ... `%end` (ok) or `%error` (not ok)."""

    number: int
    ok: bool
    lines: tuple[bytes, ...]


@dataclass(frozen=True)
class Notice:
    """Any other notification, e.g. `%window-add @3` is Notice("window-add", ("@3",))."""

    name: str
    args: tuple[str, ...]


@dataclass(frozen=True)
class Exit:
    """`%exit [reason]`: the control client is leaving; nothing follows."""

    reason: str


Notification = PaneOutput | Reply | Notice | Exit


def unescape(raw: bytes) -> bytes:
    """Undo control mode's escaping: every byte < 32 and every backslash arrives as \\ooo (octal)."""
    return OCTAL_ESCAPE.sub(lambda m: bytes([int(m[1], 8) & 0xFF]), raw)


class ControlParser:
    """Turns control-mode lines (without their newline) into notifications; keeps reply-block state."""

    def __init__(self) -> None:
        self._block: tuple[int, list[bytes]] | None = None

    def feed(self, line: bytes) -> Notification | None:
        if self._block is not None:
            number, lines = self._block
            if line.startswith((b"%end ", b"%error ")) and _block_number(line) == number:
                self._block = None
                return Reply(number=number, ok=line.startswith(b"%end "), lines=tuple(lines))
            lines.append(line)  # inside a reply block, lines are command output, never notifications
            return None
        if line.startswith(b"%output "):
            _, pane_id, raw = (line.split(b" ", 2) + [b""])[:3]
            return PaneOutput(pane_id=pane_id.decode("ascii", "replace"), raw=raw)
        if line.startswith(b"%begin "):
            self._block = (_block_number(line), [])
            return None
        if line == b"%exit" or line.startswith(b"%exit "):
            return Exit(reason=line[6:].decode("utf-8", "replace"))
        if line.startswith(b"%"):
            name, *args = line[1:].decode("utf-8", "replace").split(" ")
            return Notice(name=name, args=tuple(args))
        return None  # not part of the protocol (nothing tmux sends outside a block)


def _block_number(line: bytes) -> int:
    parts = line.split(b" ")
    return int(parts[2]) if len(parts) > 2 and parts[2].isdigit() else -1


def control_client_argv(tmux_argv: Sequence[str], session: str) -> list[str]:
    """The control client's argv: the adapter's `tmux -u [-L|-S] [-f]` then attach, read-only sizing."""
    argv = list(tmux_argv)
    tmux_env = os.environ.get("TMUX", "")
    if tmux_env and "-L" not in argv and "-S" not in argv:
        # We strip $TMUX from the client (nesting check) so name its socket explicitly instead.
        argv[1:1] = ["-S", tmux_env.split(",", 1)[0]]
    return [*argv, "-C", "attach-session", "-f", "ignore-size", "-t", session]


class ControlModeReader:
    """One control client attached to one session, read as an async iterator of notifications.

    async with ControlModeReader(adapter.argv, "$0") as reader:
        async for note in reader: ...

    Iteration ends after `%exit` or when tmux closes the pipe. Leaving the `async with` (normally or by
    cancellation) terminates the client and waits for it, so no `tmux -C` process outlives the block.
    """

    def __init__(self, tmux_argv: Sequence[str], session: str) -> None:
        self.argv = control_client_argv(tmux_argv, session)
        self.session = session
        self._process: anyio.abc.Process | None = None
        self._stream: BufferedByteReceiveStream | None = None
        self._parser = ControlParser()
        self._done = False

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    async def __aenter__(self) -> ControlModeReader:
        env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE")}
        self._process = await anyio.open_process(
            self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env
        )
        assert self._process.stdout is not None
        self._stream = BufferedByteReceiveStream(self._process.stdout)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        with anyio.CancelScope(shield=True):
            # A control client whose stdout we stop reading may never exit on EOF alone: terminate it.
            if process.returncode is None:
                process.terminate()
            with anyio.move_on_after(5):
                await process.aclose()
                return
            process.kill()
            await process.wait()

    async def send(self, command: str) -> None:
        """Send one tmux command line (its reply arrives as a `Reply`). Never a size (resizes windows)."""
        if "\n" in command or "\r" in command:
            raise ValueError("a control-mode command is one line")
        if command.split()[:2] == ["refresh-client", "-C"]:
            raise ValueError("a watching control client must not set a size: it would resize windows")
        assert self._process is not None and self._process.stdin is not None
        await self._process.stdin.send(command.encode("utf-8") + b"\n")

    def __aiter__(self) -> AsyncIterator[Notification]:
        return self

    async def __anext__(self) -> Notification:
        if self._stream is None:
            raise RuntimeError("use ControlModeReader inside `async with`")
        while not self._done:
            try:
                line = await self._stream.receive_until(b"\n", MAX_LINE)
            except (anyio.EndOfStream, anyio.IncompleteRead, anyio.ClosedResourceError):
                break
            note = self._parser.feed(line)
            if isinstance(note, Exit):
                self._done = True
            if note is not None:
                return note
        self._done = True
        raise StopAsyncIteration


@dataclass(frozen=True)
class Activity:
    """What the watched sessions reported since the last look."""

    panes: frozenset[str]  # pane ids that produced output
    structure: bool  # windows, panes or sessions came, went or changed


class ControlModeWatcher:
    """One control-mode reader per session of the server, kept in step with the server's sessions.

        async with ControlModeWatcher(adapter) as watcher:      # or: await tg.start(watcher.run)
            while True:
                activity = await watcher.wait_activity()       # capture only activity.panes

    or push style: `ControlModeWatcher(adapter, on_output=mark_dirty)` calls `mark_dirty(pane_id)` (sync, on
    the event loop, must not block) for every `%output`, and `on_structure()` for every structure notice.
    Both styles can be used together.

        Sessions are re-listed at once when any reader hears `%sessions-changed` or ends; else every
        `poll_interval` seconds while some session has no attached reader (none hears the notice when
        none is attached), and every `idle_interval` seconds, a safety net, while every one has. A
        reader that ends (session gone, client refused) is not restarted before the next timed poll,
        so a failing session cannot spin.
    """

    def __init__(
        self,
        tmux: TmuxAdapter,
        *,
        poll_interval: float = 2.0,
        idle_interval: float = 30.0,
        on_output: Callable[[str], None] | None = None,
        on_structure: Callable[[], None] | None = None,
    ) -> None:
        self._tmux = tmux
        self._poll_interval = poll_interval
        self._idle_interval = idle_interval
        self._on_output = on_output
        self._on_structure = on_structure
        self._readers: dict[str, anyio.CancelScope] = {}
        self._ready: set[str] = set()
        self._cooldown: set[str] = set()
        self._resync = anyio.Event()
        self._dirty: set[str] = set()
        self._structure = False
        self._wake = anyio.Event()
        self._task_group: anyio.abc.TaskGroup | None = None
        self._pids: dict[str, int] = {}
        self._holds = 0  # blocks inside ``detached``: no reader attaches meanwhile
        self._ended = anyio.Event()  # set each time a reader ends

    @property
    def watched(self) -> frozenset[str]:
        """Session ids whose control client is attached (its attach command was answered)."""
        return frozenset(self._ready)

    @property
    def complete(self) -> bool:
        """Whether every session listed has its reader attached: all output of the server is reported."""
        return bool(self._readers) and not self._cooldown and self._ready >= set(self._readers)

    @property
    def reader_pids(self) -> dict[str, int]:
        return dict(self._pids)

    @contextlib.asynccontextmanager
    async def detached(self) -> AsyncIterator[None]:
        """Every reader detached (its ``tmux -C`` client gone) for the block, attached again after it.

        For ``respawn-pane`` on tmux 3.3a: the server keeps a pane's offsets into its old output
        buffer across a respawn, and a control client lagging behind that pane's output then makes it
        read past its buffer at the new process's first output and crash, every pane with it
        (docs/compatibility.md; fixed upstream by tmux commit 4714f478f). Output meanwhile is found by
        the poll (``complete`` is false until every reader is back)."""
        self._holds += 1
        detached = set(self._readers)
        try:
            for scope in list(self._readers.values()):
                scope.cancel()
            while self._readers:  # each ends once its client process has exited
                await self._ended.wait()
            yield
        finally:
            self._holds -= 1
            self._cooldown -= detached  # detached on purpose, not failing: attach again at once
            self.resync()

    def resync(self) -> None:
        """Re-list sessions now instead of at the next poll."""
        self._resync.set()

    def take_activity(self) -> Activity:
        """Return and clear the activity gathered so far (possibly empty)."""
        activity = Activity(panes=frozenset(self._dirty), structure=self._structure)
        self._dirty.clear()
        self._structure = False
        self._wake = anyio.Event()
        return activity

    async def wait_activity(self) -> Activity:
        """Wait until some pane produced output or the structure changed; return and clear it."""
        while not self._dirty and not self._structure:
            await self._wake.wait()
            if not self._dirty and not self._structure:
                self._wake = anyio.Event()
        return self.take_activity()

    async def __aenter__(self) -> ControlModeWatcher:
        self._task_group = anyio.create_task_group()
        await self._task_group.__aenter__()
        await self._task_group.start(self.run)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        assert self._task_group is not None
        self._task_group.cancel_scope.cancel()
        return await self._task_group.__aexit__(exc_type, exc, tb)

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Watch until cancelled. Every reader runs in this call's task group and ends with it."""
        async with anyio.create_task_group() as tg:
            await self._sync_sessions(tg)
            task_status.started()
            while True:
                timed_out = True
                with anyio.move_on_after(self._idle_interval if self.complete else self._poll_interval):
                    await self._resync.wait()
                    timed_out = False
                self._resync = anyio.Event()
                if timed_out:
                    self._cooldown.clear()
                await self._sync_sessions(tg)

    async def _sync_sessions(self, tg: anyio.abc.TaskGroup) -> None:
        try:
            current = {s.session_id for s in await self._tmux.list_sessions()}
        except TmuxError as exc:
            log.warning("control mode: cannot list sessions: %s", exc)
            return
        for session_id in set(self._readers) - current:
            self._readers.pop(session_id).cancel()
        if self._holds:
            return  # detached: ``detached`` resyncs at its end
        for session_id in sorted(current - set(self._readers) - self._cooldown):
            scope = anyio.CancelScope()
            self._readers[session_id] = scope
            tg.start_soon(self._watch_session, session_id, scope)

    async def _watch_session(self, session_id: str, scope: anyio.CancelScope) -> None:
        with scope:
            try:
                async with ControlModeReader(self._tmux.argv, session_id) as reader:
                    if reader.pid is not None:
                        self._pids[session_id] = reader.pid
                    async for note in reader:
                        self._on_notification(session_id, note)
            except (OSError, anyio.BrokenResourceError, anyio.DelimiterNotFound) as exc:
                log.warning("control mode: reader for session %s failed: %s", session_id, exc)
            finally:
                self._ready.discard(session_id)
                self._pids.pop(session_id, None)
                if self._readers.get(session_id) is scope:
                    del self._readers[session_id]
                    self._cooldown.add(session_id)
                    self.resync()
                self._ended.set()  # wakes every ``detached`` waiting; later ones wait on a fresh event
                self._ended = anyio.Event()

    def _on_notification(self, session_id: str, note: Notification) -> None:
        if isinstance(note, PaneOutput):
            self._dirty.add(note.pane_id)
            self._wake.set()
            if self._on_output is not None:
                self._on_output(note.pane_id)
        elif isinstance(note, Reply):
            if note.ok:
                self._ready.add(session_id)
            elif session_id not in self._ready:
                log.warning("control mode: attach to %s refused: %r", session_id, note.lines)
        elif isinstance(note, Notice | Exit):
            name = note.name if isinstance(note, Notice) else "exit"
            if name in STRUCTURE_NOTICES:
                self._structure = True
                self._wake.set()
                if self._on_structure is not None:
                    self._on_structure()
            if name in ("sessions-changed", "exit"):
                self.resync()
