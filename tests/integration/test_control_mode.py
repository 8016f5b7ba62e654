"""tmux control mode: the parser on protocol lines, the reader and the watcher on a real tmux server."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from connectd.tmux import procfs
from connectd.tmux.adapter import TmuxAdapter
from connectd.tmux.control_mode import (
    Activity,
    ControlModeReader,
    ControlModeWatcher,
    ControlParser,
    Exit,
    Notice,
    PaneOutput,
    Reply,
    control_client_argv,
    unescape,
)
from tests.support.tmux_server import TmuxServer, tmux_server_fixture

PRINTER = ["sh", "-c", "while :; do echo tick; sleep 0.1; done"]
IDLE = ["sleep", "600"]


@pytest.fixture(scope="module")
def server() -> Iterator[TmuxServer]:
    yield from tmux_server_fixture("connect-control")


@pytest.fixture()
def anyio_backend() -> str:
    return "asyncio"


def unique(prefix: str) -> str:
    return f"{prefix}{secrets.token_hex(3)}"


def control_clients(server: TmuxServer) -> list[int]:
    """Live `tmux -C` processes on this test's server (zombies excluded)."""
    found = []
    for pid in procfs.all_pids():
        argv = procfs.cmdline(pid)
        if argv and server.socket_name in argv and "-C" in argv and procfs.alive(pid):
            found.append(pid)
    return found


# --- parser ---------------------------------------------------------------------------------------


def test_unescape_octal() -> None:
    assert unescape(rb"a\011b\134x\015\012\033[1m") == b"a\tb\\x\r\n\x1b[1m"
    assert unescape("é".encode()) == "é".encode()  # non-ASCII bytes arrive raw


def test_parser_lines() -> None:
    p = ControlParser()
    assert p.feed(rb"%output %12 hi\015\012") == PaneOutput("%12", rb"hi\015\012")
    assert p.feed(rb"%output %12 hi\015\012").data == b"hi\r\n"  # type: ignore[union-attr]
    assert p.feed(b"%output %3 ") == PaneOutput("%3", b"")
    assert p.feed(b"%window-add @4") == Notice("window-add", ("@4",))
    assert p.feed(b"%session-changed $1 my session") == Notice("session-changed", ("$1", "my", "session"))
    assert p.feed(b"%sessions-changed") == Notice("sessions-changed", ())
    assert p.feed(b"not protocol") is None
    assert p.feed(b"%exit") == Exit("")
    assert p.feed(b"%exit detached") == Exit("detached")


def test_parser_reply_blocks_hide_their_contents() -> None:
    p = ControlParser()
    assert p.feed(b"%begin 1700000000 7 1") is None
    # Command output can look like notifications; inside a block it is never one.
    assert p.feed(b"%output %1 fake") is None
    assert p.feed(b"%exit") is None
    assert p.feed(b"%end 1700000000 6 1") is None  # another block's number: still inside
    assert p.feed(b"%end 1700000000 7 1") == Reply(
        7, True, (b"%output %1 fake", b"%exit", b"%end 1700000000 6 1")
    )
    assert p.feed(b"%begin 1 8 0") is None
    assert p.feed(b"can't find session: x") is None
    assert p.feed(b"%error 1 8 0") == Reply(8, False, (b"can't find session: x",))
    assert p.feed(b"%output %2 x") == PaneOutput("%2", b"x")


def test_control_client_argv_never_resizes() -> None:
    argv = control_client_argv(("tmux", "-u", "-L", "x"), "$3")
    assert argv == ["tmux", "-u", "-L", "x", "-C", "attach-session", "-f", "ignore-size", "-t", "$3"]


# --- reader on real tmux --------------------------------------------------------------------------


@pytest.mark.anyio
async def test_reader_sees_output_of_a_printing_pane_not_of_an_idle_one(server: TmuxServer) -> None:
    session = unique("rd")
    printer = server.new_session(session, PRINTER, width=200, height=50)
    idle = server.new_window(session, IDLE)
    adapter = TmuxAdapter(socket_name=server.socket_name)
    outputs: dict[str, bytes] = {}
    replies: list[Reply] = []
    with anyio.fail_after(20):
        async with ControlModeReader(adapter.argv, session) as reader:
            first = await reader.__anext__()
            assert isinstance(first, Reply) and first.ok  # the attach command's own reply
            await reader.send(
                "list-panes -s -F '#{pane_id}'"
            )  # commands work; their replies arrive as Reply blocks
            async for note in reader:
                if isinstance(note, Reply):
                    replies.append(note)
                if isinstance(note, PaneOutput):
                    outputs[note.pane_id] = outputs.get(note.pane_id, b"") + note.data
                if outputs.get(printer, b"").count(b"tick") >= 5:
                    break
    assert idle not in outputs
    assert set(outputs) == {printer}
    assert b"tick\r\n" in outputs[printer]
    assert [r.ok for r in replies] == [True] and set(replies[0].lines) == {printer.encode(), idle.encode()}
    # The attached control client never took part in sizing (a `refresh-client -C WxH` would make it).
    assert server.display(printer, "#{window_width}x#{window_height}") == "200x50"
    assert control_clients(server) == []


@pytest.mark.anyio
async def test_reader_ends_when_its_session_is_killed(server: TmuxServer) -> None:
    session = unique("gone")
    server.new_session(session, IDLE)
    adapter = TmuxAdapter(socket_name=server.socket_name)
    notes = []
    with anyio.fail_after(20):
        async with ControlModeReader(adapter.argv, session) as reader:
            notes.append(await reader.__anext__())
            server.tmux("kill-session", "-t", f"={session}")
            notes.extend([note async for note in reader])
    assert isinstance(notes[0], Reply) and notes[0].ok
    assert isinstance(notes[-1], Exit)
    assert control_clients(server) == []


@pytest.mark.anyio
async def test_reader_for_a_missing_session_reports_the_error(server: TmuxServer) -> None:
    server.new_session(unique("any"), IDLE)
    adapter = TmuxAdapter(socket_name=server.socket_name)
    with anyio.fail_after(20):
        async with ControlModeReader(adapter.argv, "=no-such-session") as reader:
            notes = [note async for note in reader]
    assert isinstance(notes[0], Reply) and not notes[0].ok
    assert b"can't find session" in notes[0].lines[0]
    assert notes[-1] == Exit("")


@pytest.mark.anyio
async def test_cancelling_a_reader_leaves_no_control_client(server: TmuxServer) -> None:
    session = unique("cancel")
    server.new_session(session, PRINTER)
    adapter = TmuxAdapter(socket_name=server.socket_name)
    with anyio.fail_after(20):
        with anyio.move_on_after(0.5) as scope:
            async with ControlModeReader(adapter.argv, session) as reader:
                assert reader.pid in control_clients(server)
                async for _ in reader:
                    pass  # the printer never stops: only the cancellation ends this
    assert scope.cancelled_caught
    assert control_clients(server) == []


# --- watcher --------------------------------------------------------------------------------------


async def wait_until(predicate, what: str, timeout: float = 10) -> None:  # type: ignore[no-untyped-def]
    try:
        with anyio.fail_after(timeout):
            while not predicate():
                await anyio.sleep(0.02)
    except TimeoutError as exc:
        raise AssertionError(f"timed out waiting for {what}") from exc


async def gather_until(watcher: ControlModeWatcher, want: set[str], timeout: float = 10) -> Activity:
    """Merge activities until every pane in `want` produced output."""
    panes: set[str] = set()
    structure = False
    with anyio.fail_after(timeout):
        while not want <= panes:
            activity = await watcher.wait_activity()
            panes |= activity.panes
            structure |= activity.structure
    return Activity(frozenset(panes), structure)


@pytest.mark.anyio
async def test_watcher_follows_sessions_and_reports_only_active_panes(server: TmuxServer) -> None:
    adapter = TmuxAdapter(socket_name=server.socket_name)
    first = unique("w1")
    printer = server.new_session(first, PRINTER)
    idle = server.new_window(first, IDLE)
    first_id = server.display(printer, "#{session_id}")
    pushed: list[str] = []
    structure_calls: list[None] = []
    async with anyio.create_task_group() as tg:
        # poll_interval=30: only notifications drive it here. Both pull and push styles are checked.
        watcher = ControlModeWatcher(
            adapter,
            poll_interval=30,
            on_output=pushed.append,
            on_structure=lambda: structure_calls.append(None),
        )
        await tg.start(watcher.run)
        await wait_until(lambda: first_id in watcher.watched, "the first session to be watched")
        watcher.take_activity()
        seen = await gather_until(watcher, {printer})
        assert idle not in seen.panes

        # A new session: the first reader hears %sessions-changed and the watcher attaches to it.
        second = unique("w2")
        idle2 = server.new_session(second, IDLE)
        printer2 = server.new_window(second, PRINTER)
        second_id = server.display(printer2, "#{session_id}")
        await wait_until(lambda: second_id in watcher.watched, "the new session to be watched")
        seen = await gather_until(watcher, {printer, printer2})
        assert not {idle, idle2} & seen.panes
        assert seen.structure and structure_calls
        assert printer2 in pushed and not {idle, idle2} & set(pushed)

        # A session that goes away loses its reader; the others keep theirs.
        server.tmux("kill-session", "-t", f"={second}")
        await wait_until(lambda: second_id not in watcher.watched, "the killed session to be dropped")
        assert first_id in watcher.watched
        assert len(control_clients(server)) == len(watcher.watched)
        tg.cancel_scope.cancel()
    assert control_clients(server) == []


@pytest.mark.anyio
async def test_watcher_polls_when_nothing_is_watched_and_shuts_down_cleanly() -> None:
    with TmuxServer("connect-watch-empty") as fresh:
        adapter = TmuxAdapter(socket_name=fresh.socket_name, config_file="/dev/null")
        with anyio.fail_after(20):
            async with ControlModeWatcher(adapter, poll_interval=0.1) as watcher:
                assert watcher.watched == frozenset()  # no server yet: nothing to watch, no error
                pane_id = fresh.new_session("late", PRINTER)
                session_id = fresh.display(pane_id, "#{session_id}")
                await wait_until(lambda: session_id in watcher.watched, "the poll to find the session")
                assert pane_id in (await gather_until(watcher, {pane_id})).panes
                assert control_clients(fresh)
        assert control_clients(fresh) == []


@pytest.mark.anyio
async def test_with_every_session_attached_sessions_are_relisted_only_at_the_idle_interval(server: TmuxServer) -> None:
    """Claim: once every session has its reader, the watcher lists sessions only on a notice or every
    ``idle_interval`` (an idle fleet costs no tmux call a second), and ``complete`` says so."""
    adapter = TmuxAdapter(socket_name=server.socket_name)
    listed: list[float] = []
    real = adapter.list_sessions

    async def counting() -> list[Any]:
        listed.append(anyio.current_time())
        return await real()

    adapter.list_sessions = counting  # type: ignore[method-assign]
    session = unique("quiet")
    server.new_session(session, IDLE)
    async with anyio.create_task_group() as tg:
        watcher = ControlModeWatcher(adapter, poll_interval=0.05, idle_interval=30)
        await tg.start(watcher.run)
        await wait_until(lambda: watcher.complete, "every session attached")
        before = len(listed)
        await anyio.sleep(1.0)
        assert len(listed) - before <= 1, listed  # at 0.05 s that would be about 20 listings
        tg.cancel_scope.cancel()


@pytest.mark.anyio
async def test_reader_refuses_to_set_a_size_or_send_two_lines(server: TmuxServer) -> None:
    session = unique("size")
    pane_id = server.new_session(session, IDLE, width=150, height=40)
    adapter = TmuxAdapter(socket_name=server.socket_name)
    with anyio.fail_after(20):
        async with ControlModeReader(adapter.argv, session) as reader:
            with pytest.raises(ValueError, match="must not set a size"):
                await reader.send("refresh-client -C 80x24")
            with pytest.raises(ValueError, match="one line"):
                await reader.send("list-panes\nkill-server")
            assert isinstance(await reader.__anext__(), Reply)
    assert server.display(pane_id, "#{window_width}x#{window_height}") == "150x40"
    assert server.running()


@pytest.fixture()
def own_server() -> Iterator[TmuxServer]:
    """A tmux server of the test's own (a test that fails may crash it)."""
    yield from tmux_server_fixture("connect-respawn")


@pytest.mark.anyio
async def test_a_respawn_while_a_reader_lags_leaves_the_tmux_server_and_the_pane_alive(own_server: TmuxServer) -> None:
    """Claim: the adapter's respawn detaches the control-mode readers around ``respawn-pane`` and they
    attach again after, so a reader lagging behind the pane's output cannot crash the server. tmux 3.3a
    keeps a pane's offsets into its old output buffer across a respawn, and a lagging control client
    then makes the server read past its buffer at the new process's first output (a segfault: the
    whole server dies; docs/compatibility.md, scripts/tmux_respawn_crash.py). Before: the test's server
    crashed at the respawn."""
    import signal

    server = own_server
    adapter = TmuxAdapter(socket_name=server.socket_name)
    name = unique("r")
    keep = server.new_session(name, IDLE)
    session_id = server.display(keep, "#{session_id}")
    server.tmux("set-option", "-g", "remain-on-exit", "on")
    async with anyio.create_task_group() as tg:
        watcher = ControlModeWatcher(adapter, poll_interval=0.2)
        adapter.respawning = watcher.detached
        await tg.start(watcher.run)
        await wait_until(lambda: session_id in watcher.watched, "the session to be watched")
        (reader,) = watcher.reader_pids.values()
        os.kill(reader, signal.SIGSTOP)  # the reader stops reading: tmux queues the pane's output for it
        printer = server.new_window(name, ["sh", "-c", "timeout 2 sh -c \"head -c 100000 /dev/zero | tr '\\\\0' x\""])
        await wait_until(lambda: server.display(printer, "#{pane_dead}") == "1", "the printer to end")
        await adapter.respawn(printer, ["sh", "-c", "printf y; sleep 60"], "/", {})
        await anyio.sleep(0.5)  # the new process's first output has been read
        assert server.display(printer, "#{pane_dead}") == "0"  # the server and the pane live
        await wait_until(lambda: session_id in watcher.watched, "the reader to attach again")
        assert watcher.reader_pids[session_id] != reader
        tg.cancel_scope.cancel()
    assert control_clients(server) == []


@pytest.mark.anyio
async def test_two_respawns_at_once_each_wait_for_the_readers_to_end_and_they_attach_again_after_both(
    server: TmuxServer,
) -> None:
    """Claim: ``detached`` blocks entered at once (two restarts' respawns) each begin once every reader's
    client is gone, no reader attaches while either runs, and every reader attaches again after the
    last ends."""
    adapter = TmuxAdapter(socket_name=server.socket_name)
    session_id = server.display(server.new_session(unique("d"), IDLE), "#{session_id}")
    inside: list[frozenset[str]] = []
    async with anyio.create_task_group() as tg:
        watcher = ControlModeWatcher(adapter, poll_interval=0.1)
        await tg.start(watcher.run)
        await wait_until(lambda: session_id in watcher.watched, "the session to be watched")

        async def respawn(hold: float) -> None:
            async with watcher.detached():
                inside.append(frozenset(watcher.reader_pids))
                await anyio.sleep(hold)  # the poll runs meanwhile: nothing attaches
                inside.append(frozenset(watcher.reader_pids))

        with anyio.fail_after(10):
            async with anyio.create_task_group() as both:
                both.start_soon(respawn, 0.3)
                both.start_soon(respawn, 0.6)
        assert inside == [frozenset()] * 4
        await wait_until(lambda: session_id in watcher.watched, "the reader to attach again")
        tg.cancel_scope.cancel()
